/* test_graph_fixtures.c: the graph engine against PyTorch's reference
 * cases in tests/unit/fixtures/graph (written by
 * tests/py/make_graph_fixtures.py; see its README): per case, one forward
 * and backward pass (outputs, input and parameter gradients, running
 * statistics), or a few SGD steps (losses per step and final weights).
 * A sequence input's samples are packed from its values and "len.<input>";
 * a per-token output is compared before each sample's length only.
 * DLSERVE_GRAPH_FIXTURES names another folder of cases. */
#define _POSIX_C_SOURCE 200809L
#include <dirent.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <criterion/criterion.h>

#include "fixture.h"
#include "data/dl_data.h"
#include "nn/dl_nn.h"

TestSuite(graph_fixtures, .timeout = 120);

static const char *case_path(const char *dir, const char *cs, const char *file)
{
    static char bufs[4][1024];
    static int next;
    char *b = bufs[next++ % 4];
    snprintf(b, sizeof(bufs[0]), "%s/%s/%s", dir, cs, file);
    return b;
}

/* Whether got is within tolerance of want everywhere; says where not. */
static bool close_to(const char *cs, const char *what, const float *got, const float *want,
                     int64_t n)
{
    for (int64_t i = 0; i < n; i++)
        if (!(fabsf(got[i] - want[i]) <= 2e-5f * (1.0f + fabsf(want[i])))) {
            cr_log_error("%s: %s[%lld] is %.7g, PyTorch %.7g", cs, what, (long long)i,
                         got[i], want[i]);
            return false;
        }
    return true;
}

static const dl_st_tensor *need(const dl_st_file *f, const char *cs, const char *name)
{
    const dl_st_tensor *t = dl_st_find(f, name);
    cr_assert_not_null(t, "%s: no tensor %s", cs, name);
    return t;
}

/* An input as floats (ids converted); new. */
static float *as_floats(const dl_st_tensor *t, int64_t *n)
{
    *n = 1;
    for (int d = 0; d < t->ndim; d++)
        *n *= t->shape[d];
    float *x = malloc((size_t)(*n + 1) * sizeof(float));
    for (int64_t i = 0; i < *n; i++) {
        if (t->dtype == DL_ST_I64) {
            int64_t v;
            memcpy(&v, (const char *)t->data + 8 * i, 8);
            x[i] = (float)v;
        } else {
            memcpy(&x[i], (const char *)t->data + 4 * i, 4);
        }
    }
    return x;
}

/* Input ic of a case as the model takes it (a sequence's samples packed:
 * the length from "len.<input>", then the positions); new. */
static float *input_rows(const dl_st_file *in, const dl_input_conf *ic, const char *cs,
                         int64_t *batch)
{
    int64_t n, nl;
    const dl_st_tensor *t = need(in, cs, ic->name);
    float *x = as_floats(t, &n);
    *batch = t->shape[0];
    if (!ic->max_length)
        return x;
    char key[300];
    snprintf(key, sizeof(key), "len.%s", ic->name);
    float *len = as_floats(need(in, cs, key), &nl);
    cr_assert_eq(nl, *batch, "%s: %s holds %lld lengths", cs, key, (long long)nl);
    int64_t w = dl_input_width(ic);
    float *rows = malloc((size_t)(*batch * w) * sizeof(float));
    for (int64_t i = 0; i < *batch; i++) {
        rows[i * w] = len[i];
        memcpy(rows + i * w + 1, x + i * ic->dim, (size_t)ic->dim * sizeof(float));
    }
    free(x);
    free(len);
    return rows;
}

/* Output k against PyTorch's; a per-token output before each sample's
 * length only (past it lies padding that no consumer reads). */
static bool check_output(dl_model *m, const dl_model_conf *conf, int k, const dl_st_file *exp,
                         const char *cs, int64_t batch)
{
    char key[300], what[340];
    snprintf(key, sizeof(key), "output.%s", conf->outputs[k].name);
    const float *got = dl_model_output(m, k), *want = need(exp, cs, key)->data;
    int64_t dim = dl_model_output_dim(m, k);
    const int32_t *len = dl_model_output_lengths(m, k);
    if (!len)
        return close_to(cs, key, got, want, batch * dim);
    bool ok = true;
    for (int64_t i = 0; i < batch; i++) {
        snprintf(what, sizeof(what), "%s of sample %lld", key, (long long)i);
        ok &= close_to(cs, what, got + i * dim, want + i * dim,
                       len[i] * (dim / conf->outputs[k].max_length));
    }
    return ok;
}

/* The gradient of the model tensor `name` (parameters and gradients share
 * their layout). */
static const float *grad_of(dl_model *m, int i)
{
    int64_t n;
    const char *name;
    int nd;
    const int64_t *shape;
    float *data;
    dl_model_tensor_at(m, i, &name, &nd, &shape, &data);
    return dl_model_grads(m, &n) + (data - dl_model_params(m, &n));
}

static bool check_params(dl_model *m, const dl_st_file *exp, const char *cs)
{
    bool ok = true;
    for (int i = 0; i < dl_model_tensor_count(m); i++) {
        const char *name;
        int nd;
        const int64_t *shape;
        float *data;
        char key[300];
        dl_model_tensor_at(m, i, &name, &nd, &shape, &data);
        snprintf(key, sizeof(key), "grad.%s", name);
        const dl_st_tensor *t = dl_st_find(exp, key);
        if (!t) {
            snprintf(key, sizeof(key), "state.%s", name);
            t = dl_st_find(exp, key);
            if (t)
                ok &= close_to(cs, key, data, t->data, dl_shape_numel(nd, shape));
            continue;
        }
        ok &= close_to(cs, key, grad_of(m, i), t->data, dl_shape_numel(nd, shape));
    }
    return ok;
}

/* The case's model; false (said why) when it does not load. */
static bool build(dl_backend *be, const char *dir, const char *cs, dl_model_conf **conf,
                  dl_model **m)
{
    dl_err err = {0};
    if (dl_model_conf_load(case_path(dir, cs, "model.json"), conf, &err) == DL_OK &&
        dl_model_new(be, *conf, 1, m, &err) == DL_OK)
        return true;
    cr_log_error("%s: %s", cs, err.msg);
    dl_model_conf_free(*conf);
    *conf = NULL;
    return false;
}

/* One forward and backward pass. */
static bool run_pass(dl_backend *be, const char *dir, const char *cs)
{
    dl_err err = {0};
    dl_model_conf *conf = NULL;
    dl_model *m = NULL;
    dl_st_file *in = NULL, *exp = NULL;
    if (!build(be, dir, cs, &conf, &m))
        return false;
    cr_assert_eq(dl_model_load(m, case_path(dir, cs, "init.safetensors"), &err), DL_OK,
                 "%s: %s", cs, err.msg);
    cr_assert_eq(dl_model_set_input_grads(m, true, &err), DL_OK, "%s", err.msg);
    cr_assert_eq(dl_st_load(case_path(dir, cs, "inputs.safetensors"), &in, &err), DL_OK);
    cr_assert_eq(dl_st_load(case_path(dir, cs, "expected.safetensors"), &exp, &err), DL_OK);
    const char *mode = dl_st_meta(exp, "mode");
    bool train = !mode || strcmp(mode, "eval") != 0, ok = true;
    const float *xs[16], *gs[16];
    float *own[32];
    int64_t n, batch = 0;
    char key[300];
    for (int k = 0; k < conf->ninputs; k++)
        xs[k] = own[k] = input_rows(in, &conf->inputs[k], cs, &batch);
    cr_assert_eq(dl_model_forward_multi(m, xs, batch, train, &err), DL_OK, "%s: %s", cs, err.msg);
    for (int k = 0; k < conf->noutputs; k++) {
        ok &= check_output(m, conf, k, exp, cs, batch);
        snprintf(key, sizeof(key), "grad.%s", conf->outputs[k].name);
        gs[k] = own[16 + k] = as_floats(need(in, cs, key), &n);
    }
    if (train) {
        cr_assert_eq(dl_model_set_output_grads(m, gs, &err), DL_OK, "%s: %s", cs, err.msg);
        cr_assert_eq(dl_model_backward(m, &err), DL_OK, "%s: %s", cs, err.msg);
        for (int k = 0; k < conf->ninputs; k++) {
            snprintf(key, sizeof(key), "grad.%s", conf->inputs[k].name);
            const dl_st_tensor *t = dl_st_find(exp, key);
            if (t)
                ok &= close_to(cs, key, dl_model_input_grad(m, k), t->data,
                               batch * conf->inputs[k].dim);
        }
        ok &= check_params(m, exp, cs);
    }
    for (int k = 0; k < conf->ninputs; k++)
        free(own[k]);
    for (int k = 0; k < conf->noutputs; k++)
        free(own[16 + k]);
    dl_st_free(in);
    dl_st_free(exp);
    dl_model_free(m);
    dl_model_conf_free(conf);
    return ok;
}

/* losses.csv: the total loss of each step, after the header. */
static int read_losses(const char *path, double *loss, int max)
{
    FILE *f = fopen(path, "r");
    cr_assert_not_null(f, "%s", path);
    char line[1024];
    int n = 0;
    cr_assert_not_null(fgets(line, sizeof(line), f));
    while (n < max && fgets(line, sizeof(line), f)) {
        char *p = strchr(line, ',');
        cr_assert_not_null(p);
        loss[n++] = strtod(p + 1, NULL);
    }
    fclose(f);
    return n;
}

static dl_dataset *train_data(const dl_model_conf *conf, const char *path, dl_model *m)
{
    dl_err err = {0};
    dl_dataset *ds = NULL;
    dl_scaling sc = dl_scaling_of(conf);
    if (conf->graph)
        cr_assert_eq(dl_dataset_load_csv_model(path, conf, &ds, &err), DL_OK, "%s", err.msg);
    else
        cr_assert_eq(dl_dataset_load_csv(path, dl_model_in_dim(m), true, &sc, &ds, &err), DL_OK,
                     "%s", err.msg);
    return ds;
}

/* SGD steps on rows [i*B, (i+1)*B); losses and final weights. */
static bool run_training(dl_backend *be, const char *dir, const char *cs)
{
    dl_err err = {0};
    dl_model_conf *conf = NULL;
    dl_model *m = NULL, *ref = NULL;
    dl_st_file *fin = NULL;
    if (!build(be, dir, cs, &conf, &m))
        return false;
    cr_assert_eq(dl_model_new(be, conf, 1, &ref, &err), DL_OK, "%s: %s", cs, err.msg);
    cr_assert_eq(dl_model_load(m, case_path(dir, cs, "init.safetensors"), &err), DL_OK,
                 "%s: %s", cs, err.msg);
    cr_assert_eq(dl_model_load(ref, case_path(dir, cs, "final.safetensors"), &err), DL_OK,
                 "%s: %s", cs, err.msg);
    cr_assert_eq(dl_st_load(case_path(dir, cs, "final.safetensors"), &fin, &err), DL_OK);
    int steps = atoi(dl_st_meta(fin, "steps")), b = atoi(dl_st_meta(fin, "batch"));
    double lr = atof(dl_st_meta(fin, "lr")), want[256];
    cr_assert_eq(read_losses(case_path(dir, cs, "losses.csv"), want, 256), steps);
    dl_dataset *ds = train_data(conf, case_path(dir, cs, "data.csv"), m);
    dl_hparams hp = { .optimizer = DL_OPTIM_SGD, .lr = lr };
    dl_optim *o = NULL;
    int64_t np;
    float *p = dl_model_params(m, &np), *g = dl_model_grads(m, &np);
    cr_assert_eq(dl_optim_new(be, &hp, np, &o, &err), DL_OK, "%s", err.msg);
    bool ok = true;
    for (int s = 0; s < steps; s++) {
        const float *y;
        double l;
        int64_t c;
        dl_model_zero_grad(m);
        cr_assert_eq(dl_model_forward(m, ds->x + (int64_t)s * b * ds->dim, b, true, &y, &err),
                     DL_OK, "%s: %s", cs, err.msg);
        cr_assert_eq(dl_model_loss(m, ds->t ? NULL : ds->y + (int64_t)s * b,
                                   ds->t ? ds->t + (int64_t)s * b * ds->tdim : NULL,
                                   1.0f / (float)b, true, &l, &c, &err), DL_OK, "%s: %s", cs,
                     err.msg);
        float got = (float)(l / b), w = (float)want[s];
        ok &= close_to(cs, "loss", &got, &w, 1);
        cr_assert_eq(dl_model_backward(m, &err), DL_OK, "%s: %s", cs, err.msg);
        dl_optim_step(o, p, g, lr);
    }
    int64_t n;
    const float *theirs = dl_model_params(ref, &n);
    ok &= close_to(cs, "final weights", p, theirs, n);
    dl_optim_free(o);
    dl_dataset_free(ds);
    dl_st_free(fin);
    dl_model_free(m);
    dl_model_free(ref);
    dl_model_conf_free(conf);
    return ok;
}

Test(graph_fixtures, every_case_equals_pytorch)
{
    const char *dir = getenv("DLSERVE_GRAPH_FIXTURES");
    if (!dir)
        dir = fx_source_path("tests/unit/fixtures/graph");
    DIR *d = opendir(dir);
    cr_assert_not_null(d, "no reference cases in %s", dir);
    dl_backend *be = fx_cpu_backend();
    struct dirent *e;
    int cases = 0, failed = 0;
    while ((e = readdir(d)) != NULL) {
        struct stat sb;
        if (e->d_name[0] == '.' || stat(case_path(dir, e->d_name, "model.json"), &sb) != 0)
            continue;
        bool ok = strncmp(e->d_name, "train_", 6) == 0 ? run_training(be, dir, e->d_name)
                                                       : run_pass(be, dir, e->d_name);
        cases++;
        failed += !ok;
    }
    closedir(d);
    dl_backend_free(be);
    cr_expect_eq(failed, 0, "%d of %d cases differ from PyTorch", failed, cases);
    cr_expect_gt(cases, 0, "no cases in %s", dir);
}
