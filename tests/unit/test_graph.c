/* test_graph.c: graph models: model.json's inputs, per-layer inputs and
 * outputs are checked (each bad file refused naming the layer and the
 * reason), inference (buffers reused) gives what a training pass gives,
 * the activation plan holds fewer floats than one buffer a tensor,
 * and a graph with a residual join, a concat of two branches and three
 * outputs trains step for step as PyTorch does (tests/py/graph_steps.py). */
#define _POSIX_C_SOURCE 200809L
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <criterion/criterion.h>

#include "fixture.h"
#include "data/dl_data.h"
#include "nn/dl_nn.h"

static dl_model_conf *conf;
static dl_backend *be;
static dl_model *m;

static void teardown(void)
{
    dl_model_free(m);
    dl_model_conf_free(conf);
    dl_backend_free(be);
    m = NULL;
    conf = NULL;
    be = NULL;
}

TestSuite(graph, .fini = teardown, .timeout = 60);

static dl_status parse(const char *text, dl_err *err)
{
    const char *t = fx_dq(text);
    dl_model_conf_free(conf);
    conf = NULL;
    return dl_model_conf_parse(t, strlen(t), "g.json", &conf, err);
}

#define REFUSED(text, ...) refused(text, (const char *[]){ __VA_ARGS__, NULL })
static void refused(const char *text, const char *const *subs)
{
    dl_err err = {0};
    cr_expect_eq(parse(text, &err), DL_ERR_INVALID, "accepted: %s", fx_dq(text));
    cr_expect_null(conf);
    for (; *subs; subs++)
        cr_expect_not_null(strstr(err.msg, *subs), "message lacks \"%s\": %s", *subs, err.msg);
}

/* Two inputs a [6] and b [4] around `layers` and `outputs`. */
static const char *graph(const char *layers, const char *outputs)
{
    static char buf[4096];
    snprintf(buf, sizeof(buf), "{'name': 'g', 'inputs': [{'name': 'a', 'shape': [6]},"
             " {'name': 'b', 'shape': [4]}], 'layers': [%s], 'outputs': [%s]}",
             layers, outputs);
    return buf;
}

#define FC(name, in, units) \
    "{'name': '" name "', 'type': 'dense', 'inputs': ['" in "'], 'units': " #units "}"
#define OUT(name) "{'name': '" name "', 'loss': 'mse'}"

Test(graph, two_inputs_parse)
{
    dl_err err = {0};
    cr_assert_eq(parse(graph(FC("x", "a", 3) "," FC("y", "b", 3) ","
                             "{'name': 's', 'type': 'add', 'inputs': ['x', 'y']}", OUT("s")),
                       &err), DL_OK, "%s", err.msg);
    cr_expect_eq(conf->ninputs, 2);
    cr_expect_eq(conf->noutputs, 1);
    cr_expect_eq(conf->layers[2].nsrc, 2);
    cr_expect_eq(conf->layers[2].src[0], 0);
    cr_expect_eq(conf->layers[2].src[1], 1);
    cr_expect_eq(conf->layers[0].src[0], -1);   /* model input a */
    cr_expect_eq(conf->layers[1].src[0], -2);   /* model input b */
    cr_expect(conf->graph);
}

Test(graph, unknown_input)
{
    REFUSED(graph(FC("x", "c", 3) "," FC("y", "b", 3), OUT("x") "," OUT("y")),
            "layer 'x'", "unknown input 'c'");
}

Test(graph, forward_reference_is_no_cycle)
{
    REFUSED(graph(FC("x", "y", 3) "," FC("y", "b", 3), OUT("x")),
            "layer 'x'", "'y'", "not above", "no cycles");
    REFUSED(graph(FC("x", "x", 3), OUT("x")), "layer 'x'", "not above");
}

Test(graph, name_used_twice)
{
    REFUSED(graph(FC("a", "b", 3), OUT("a")), "layers[0]", "'a'", "used twice");
    REFUSED(graph(FC("x", "a", 3) "," FC("x", "b", 3), OUT("x")), "'x'", "used twice");
}

Test(graph, layer_no_output_depends_on)
{
    REFUSED(graph(FC("x", "a", 3) "," FC("dead", "b", 3) "," FC("y", "x", 2), OUT("y")),
            "layer 'dead'", "no output depends on it");
}

Test(graph, input_nobody_reads)
{
    REFUSED(graph(FC("x", "a", 3), OUT("x")), "input 'b'", "no layer reads it");
}

Test(graph, shapes_that_do_not_fit)
{
    REFUSED(graph(FC("x", "a", 3) "," FC("y", "b", 2) ","
                  "{'name': 's', 'type': 'add', 'inputs': ['x', 'y']}", OUT("s")),
            "layer 's'", "[3]", "[2]", "broadcast");
    REFUSED(graph("{'name': 'r', 'type': 'reshape', 'inputs': ['a'], 'shape': [4, -1]},"
                  FC("y", "b", 2) "," "{'name': 'c', 'type': 'concat', 'inputs': ['r', 'y']}",
                  OUT("c")),
            "layer 'r'", "does not fit");
    REFUSED(graph("{'name': 'r', 'type': 'reshape', 'inputs': ['a'], 'shape': [2, 3]},"
                  "{'name': 'c', 'type': 'concat', 'inputs': ['r', 'b']}", OUT("c")),
            "layer 'c'", "does not fit");
    REFUSED(graph(FC("x", "a", 3) ",{'name': 's', 'type': 'sub', 'inputs': ['x']}", OUT("s")),
            "layer 's'", "takes 2 inputs");
    REFUSED(graph(FC("x", "a", 3) ",{'name': 's', 'type': 'add', 'inputs': ['x']}", OUT("s")),
            "layer 's'", "takes 2 or more inputs");
    REFUSED(graph("{'name': 'r', 'type': 'reshape', 'inputs': ['a'], 'shape': [2, 3]},"
                  "{'name': 'mm', 'type': 'matmul', 'inputs': ['r', 'r']}," FC("y", "b", 2),
                  OUT("mm") "," OUT("y")),
            "layer 'mm'", "does not fit");
    REFUSED(graph("{'name': 't', 'type': 'transpose', 'inputs': ['a'], 'perm': [1, 0]},"
                  FC("y", "b", 2), OUT("t") "," OUT("y")),
            "layer 't'", "no permutation");
    REFUSED(graph("{'name': 'm', 'type': 'reduce_mean', 'inputs': ['a'], 'axis': 0},"
                  FC("y", "b", 2), OUT("m") "," OUT("y")),
            "layer 'm'", "leave at least one");
}

Test(graph, ids_feed_embeddings_only)
{
    REFUSED("{'name': 'g', 'inputs': [{'name': 'u', 'shape': [1], 'datatype': 'INT64'}],"
            " 'layers': [" FC("x", "u", 3) "], 'outputs': [" OUT("x") "]}",
            "layer 'x'", "input 'u'", "only an embedding");
    REFUSED(graph(FC("x", "a", 3) ",{'name': 'e', 'type': 'embedding', 'inputs': ['x'],"
                  " 'num_embeddings': 5, 'dim': 2}," FC("y", "b", 2), OUT("e") "," OUT("y")),
            "layer 'e'", "embedding");
}

Test(graph, output_from_unknown_layer)
{
    REFUSED(graph(FC("x", "a", 3) "," FC("y", "b", 3),
                  OUT("x") ",{'name': 'o', 'from': 'zz', 'loss': 'mse'}"),
            "output 'o'", "'from'", "'zz'");
}

Test(graph, one_output_a_layer)
{
    REFUSED(graph(FC("x", "a", 3) "," FC("y", "b", 3),
                  OUT("x") "," OUT("y") ",{'name': 'o', 'from': 'x', 'loss': 'mse'}"),
            "output 'o'", "layer 'x' already feeds output 'x'");
}

Test(graph, outputs_exclude_top_level_loss)
{
    REFUSED("{'name': 'g', 'input': {'shape': [4]}, 'layers': [{'name': 'x', 'type': 'dense',"
            " 'units': 2}], 'loss': 'mse', 'outputs': [{'name': 'x', 'loss': 'mse'}]}",
            "'outputs'", "'loss'");
}

/* The activation plan: training keeps every tensor (a folded tanh shares
 * its dense layer's buffer); inference gives a buffer back after its last
 * reader, so 'fb' reuses the buffer of 'x', and the add writes over its
 * input 's', which dies with it: two buffers of 8. */
Test(graph, activation_plan_sizes)
{
    dl_err err = {0};
    cr_assert_eq(parse(graph(FC("x", "a", 8) ",{'name': 't', 'type': 'tanh'},"
                             FC("s", "t", 8) "," FC("fb", "b", 8) ","
                             "{'name': 'u', 'type': 'add', 'inputs': ['s', 'fb']}", OUT("u")),
                       &err), DL_OK, "%s", err.msg);
    be = fx_cpu_backend();
    cr_assert_eq(dl_model_new(be, conf, 3, &m, &err), DL_OK, "%s", err.msg);
    dl_act_sizes a = dl_model_act_sizes(m);
    cr_expect_eq(a.all, 40);
    cr_expect_eq(a.train, 32);
    cr_expect_eq(a.infer, 16);
    cr_expect(a.grads > 0 && a.grads <= a.all, "grads %lld", (long long)a.grads);
}

/* ---- the reference graph ----------------------------------------------------- */

static const char *ref_graph =
    "{'name': 'ref', 'inputs': [{'name': 'a', 'shape': [6]}, {'name': 'b', 'shape': [4]}],"
    " 'layers': ["
    "  {'name': 'fa', 'type': 'dense', 'inputs': ['a'], 'units': 8},"
    "  {'name': 'ra', 'type': 'relu'},"
    "  {'name': 'fa2', 'type': 'dense', 'units': 8},"
    "  {'name': 'res', 'type': 'add', 'inputs': ['fa2', 'ra']},"
    "  {'name': 'fb', 'type': 'dense', 'inputs': ['b'], 'units': 8},"
    "  {'name': 'gb', 'type': 'gelu'},"
    "  {'name': 'cat', 'type': 'concat', 'inputs': ['res', 'gb'], 'axis': 0},"
    "  {'name': 'ln', 'type': 'layernorm'},"
    "  {'name': 'act', 'type': 'silu'},"
    "  {'name': 'cls', 'type': 'dense', 'units': 3},"
    "  {'name': 'reg', 'type': 'dense', 'inputs': ['cat'], 'units': 2},"
    "  {'name': 'flag', 'type': 'dense', 'inputs': ['res'], 'units': 1}],"
    " 'outputs': [{'name': 'cls', 'loss': 'softmax_cross_entropy', 'labels': ['x', 'y', 'z']},"
    "  {'name': 'reg', 'loss': 'mse', 'weight': 0.5},"
    "  {'name': 'flag', 'loss': 'bce_with_logits'}]}";

#define N 8

/* Inputs a (N x 6), b (N x 4) and targets (N x 4: class, two values, flag). */
static void ref_data(float *a, float *b, float *t)
{
    dl_rng rng;
    dl_rng_seed(&rng, 7);
    for (int i = 0; i < N * 6; i++)
        a[i] = dl_rng_normal(&rng);
    for (int i = 0; i < N * 4; i++)
        b[i] = dl_rng_normal(&rng);
    for (int i = 0; i < N; i++) {
        t[i * 4 + 0] = (float)(i % 3);
        t[i * 4 + 1] = dl_rng_normal(&rng);
        t[i * 4 + 2] = dl_rng_normal(&rng);
        t[i * 4 + 3] = (float)(i % 2);
    }
}

static void ref_model(void)
{
    dl_err err = {0};
    cr_assert_eq(parse(ref_graph, &err), DL_OK, "%s", err.msg);
    be = fx_cpu_backend();
    cr_assert_eq(dl_model_new(be, conf, 3, &m, &err), DL_OK, "%s", err.msg);
}

Test(graph, inference_equals_training_pass)
{
    float a[N * 6], b[N * 4], t[N * 4];
    ref_data(a, b, t);
    ref_model();
    dl_err err = {0};
    const float *xs[2] = { a, b };
    cr_assert_eq(dl_model_forward_multi(m, xs, N, true, &err), DL_OK, "%s", err.msg);
    float train[3][N * 3];
    for (int k = 0; k < 3; k++)
        memcpy(train[k], dl_model_output(m, k), (size_t)(N * dl_model_output_dim(m, k)) * 4);
    cr_assert_eq(dl_model_forward_multi(m, xs, N, false, &err), DL_OK, "%s", err.msg);
    for (int k = 0; k < 3; k++)
        cr_expect_eq(memcmp(train[k], dl_model_output(m, k),
                            (size_t)(N * dl_model_output_dim(m, k)) * 4), 0, "output %d", k);
    cr_expect_eq(dl_model_output_index(m, "reg"), 1);
    cr_expect_eq(dl_model_input_index(m, "b"), 1);
    cr_expect_eq(dl_model_in_dim(m), 10);
    cr_expect_eq(dl_model_out_dim(m), 6);
    cr_expect_eq(dl_model_target_dim(m), 4);
}

static bool have_torch(void)
{
    return system("/usr/bin/python3 -c 'import torch' >/dev/null 2>&1") == 0;
}

/* Trains `steps` SGD steps in C on the reference graph; losses into loss. */
static void train_c(const float *a, const float *b, const float *t, int steps, double lr,
                    double *loss)
{
    dl_err err = {0};
    dl_hparams hp = { .optimizer = DL_OPTIM_SGD, .lr = lr };
    dl_optim *o = NULL;
    int64_t np;
    float *p = dl_model_params(m, &np), *g = dl_model_grads(m, &np);
    cr_assert_eq(dl_optim_new(be, &hp, np, &o, &err), DL_OK, "%s", err.msg);
    const float *xs[2] = { a, b };
    for (int s = 0; s < steps; s++) {
        int64_t correct;
        dl_model_zero_grad(m);
        cr_assert_eq(dl_model_forward_multi(m, xs, N, true, &err), DL_OK, "%s", err.msg);
        cr_assert_eq(dl_model_loss(m, NULL, t, 1.0f / N, true, &loss[s], &correct, &err), DL_OK,
                     "%s", err.msg);
        loss[s] /= N;
        cr_assert_eq(dl_model_backward(m, &err), DL_OK, "%s", err.msg);
        dl_optim_step(o, p, g, lr);
    }
    dl_optim_free(o);
}

Test(graph, trains_as_pytorch_does)
{
    /* scripts/test installs python3-torch: the peer missing is a failure */
    cr_assert(have_torch(), "/usr/bin/python3 has no torch (apt-get install python3-torch)");
    enum { STEPS = 5 };
    float a[N * 6], b[N * 4], t[N * 4];
    ref_data(a, b, t);
    ref_model();
    char dir[256], cmd[2048];
    fx_tmpdir(dir, sizeof(dir), "graph");
    dl_err err = {0};
    char init[300], data[300], out[300];
    snprintf(init, sizeof(init), "%s/init.safetensors", dir);
    snprintf(data, sizeof(data), "%s/data.f32", dir);
    snprintf(out, sizeof(out), "%s/out.safetensors", dir);
    cr_assert_eq(dl_model_save(m, init, NULL, &err), DL_OK, "%s", err.msg);
    FILE *f = fopen(data, "wb");
    cr_assert_not_null(f);
    fwrite(a, sizeof(a), 1, f);
    fwrite(b, sizeof(b), 1, f);
    fwrite(t, sizeof(t), 1, f);
    fclose(f);
    snprintf(cmd, sizeof(cmd), "OMP_NUM_THREADS=1 /usr/bin/python3 %s %s %s %d %d 0.1 %s > %s/torch.json",
             fx_source_path("tests/py/graph_steps.py"), init, data, N, STEPS, out, dir);
    cr_assert_eq(system(cmd), 0, "%s", cmd);

    double loss[STEPS];
    train_c(a, b, t, STEPS, 0.1, loss);
    static char json[4096];
    f = fopen(fx_join(dir, "torch.json"), "r");
    cr_assert_not_null(f);
    size_t len = fread(json, 1, sizeof(json) - 1, f);
    fclose(f);
    json[len] = '\0';
    char *p = strchr(json, '[');
    cr_assert_not_null(p, "PyTorch printed: %s", json);
    for (int s = 0; s < STEPS; s++) {
        double theirs = strtod(p + 1, &p);
        cr_expect(fabs(theirs - loss[s]) <= 1e-5, "step %d: loss %.8f, PyTorch %.8f", s,
                  loss[s], theirs);
    }

    dl_model *ref = NULL;
    cr_assert_eq(dl_model_new(be, conf, 3, &ref, &err), DL_OK, "%s", err.msg);
    cr_assert_eq(dl_model_load(ref, out, &err), DL_OK, "%s", err.msg);
    int64_t n;
    const float *ours = dl_model_params(m, &n), *theirs = dl_model_params(ref, &n);
    for (int64_t i = 0; i < n; i++)
        cr_expect(fabsf(ours[i] - theirs[i]) <= 1e-5f, "weight %lld: %.8f vs PyTorch %.8f",
                  (long long)i, ours[i], theirs[i]);
    dl_model_free(ref);
    fx_rmtree(dir);
}

/* A backend without a layer's kernels (the CPU's ops with the unary ones
 * taken out) refuses that layer when the model is built, naming it. */
Test(graph, backend_without_kernels_refuses_layer)
{
    dl_err err = {0};
    cr_assert_eq(parse(graph(FC("x", "a", 3) ",{'name': 'g', 'type': 'gelu'}," FC("y", "b", 3),
                             OUT("g") "," OUT("y")), &err), DL_OK, "%s", err.msg);
    be = fx_cpu_backend();
    dl_backend dev = *be;
    dl_backend_ops ops = *be->ops;
    ops.unary_bwd = NULL;
    dev.ops = &ops;
    cr_expect_eq(dl_model_new(&dev, conf, 1, &m, &err), DL_ERR_INVALID);
    cr_expect_null(m);
    cr_expect_not_null(strstr(err.msg, "layer 'g' (gelu) is unsupported on cpu"), "%s", err.msg);
    ops = *be->ops;
    cr_expect_eq(dl_model_new(&dev, conf, 1, &m, &err), DL_OK, "%s", err.msg);
    dl_model_free(m);   /* built on dev, which ends here */
    m = NULL;
}

/* A backend whose im2col lacks dilation (the CUDA one) refuses a dilated
 * convolution when the model is built, rather than compute it wrongly. */
Test(graph, backend_without_dilation_refuses_it)
{
    dl_err err = {0};
    cr_assert_eq(parse("{'name': 'g', 'input': {'shape': [2, 7, 7]}, 'layers': ["
                       "{'name': 'c', 'type': 'conv2d', 'filters': 2, 'kernel_size': 3,"
                       " 'dilation': 2}, {'name': 'f', 'type': 'flatten'}], 'loss': 'mse'}",
                       &err), DL_OK, "%s", err.msg);
    be = fx_cpu_backend();
    dl_backend plain = *be;
    plain.conv_dilation = false;
    cr_expect_eq(dl_model_new(&plain, conf, 1, &m, &err), DL_ERR_INVALID);
    cr_expect_null(m);
    cr_expect_not_null(strstr(err.msg, "layer 'c'"), "%s", err.msg);
    cr_expect_not_null(strstr(err.msg, "lacks dilated convolutions"), "%s", err.msg);
    cr_expect_eq(dl_model_new(be, conf, 1, &m, &err), DL_OK, "%s", err.msg);
}

/* A constant is state laid out after the running statistics (what
 * trainers average), is the same for every sample, and neither a
 * training pass nor an optimizer step changes it. */
Test(graph, constant_is_fixed_state)
{
    dl_err err = {0};
    cr_assert_eq(parse(graph("{'name': 'bn', 'type': 'batchnorm', 'inputs': ['a']},"
                             "{'name': 'c', 'type': 'constant', 'inputs': [], 'shape': [2, 6]},"
                             "{'name': 'y', 'type': 'add', 'inputs': ['bn', 'c']},"
                             FC("z", "b", 2), OUT("y") "," OUT("z")), &err), DL_OK, "%s",
                 err.msg);
    be = fx_cpu_backend();
    cr_assert_eq(dl_model_new(be, conf, 1, &m, &err), DL_OK, "%s", err.msg);
    int64_t np, ns, nr;
    float *p = dl_model_params(m, &np), *state = dl_model_state(m, &ns);
    cr_expect_eq(dl_model_running_state(m, &nr), state);
    cr_expect(np == 12 + 10 && ns == 12 + 12 && nr == 12, "%lld %lld %lld", (long long)np,
              (long long)ns, (long long)nr);
    const char *name;
    int nd;
    const int64_t *shape;
    float *c;
    dl_model_tensor_at(m, dl_model_tensor_index(m, "c.value"), &name, &nd, &shape, &c);
    cr_assert_eq(c, state + 12, "the constant follows the running statistics");
    cr_expect(nd == 2 && shape[0] == 2 && shape[1] == 6);
    float x[3 * 10], want[12];
    for (int i = 0; i < 12; i++)
        c[i] = want[i] = 0.5f * (float)i - 2.0f;
    for (int i = 0; i < 30; i++)
        x[i] = (float)(i % 7) - 3.0f;
    const float *xs[2] = { x, x + 18 };
    cr_assert_eq(dl_model_forward_multi(m, xs, 3, false, &err), DL_OK, "%s", err.msg);
    const float *y = dl_model_output(m, 0);
    for (int s = 0; s < 3; s++)           /* bn(a) = a / sqrt(1 + eps), then + c */
        for (int i = 0; i < 12; i++)
            cr_expect(fabsf(y[s * 12 + i] - (x[s * 6 + i % 6] / sqrtf(1.00001f) + want[i])) <
                      1e-5f, "sample %d value %d: %g", s, i, y[s * 12 + i]);
    cr_assert_eq(dl_model_forward_multi(m, xs, 3, true, &err), DL_OK, "%s", err.msg);
    const float *g[2] = { y, y };
    cr_assert_eq(dl_model_set_output_grads(m, g, &err), DL_OK, "%s", err.msg);
    cr_assert_eq(dl_model_backward(m, &err), DL_OK, "%s", err.msg);
    dl_hparams hp = { .optimizer = DL_OPTIM_SGD, .lr = 0.1 };
    dl_optim *o = NULL;
    cr_assert_eq(dl_optim_new(be, &hp, np, &o, &err), DL_OK, "%s", err.msg);
    dl_optim_step(o, p, dl_model_grads(m, &np), 0.1);
    dl_optim_free(o);
    cr_expect_arr_eq(c, want, sizeof(want), "a training step moved the constant");
}

/* CSV data of a graph model: each output's target columns, then each
 * input's values, scaled as that input says; a short row is refused
 * with file:line. */
Test(graph, csv_targets_then_inputs)
{
    dl_err err = {0};
    cr_assert_eq(parse("{'name': 'g', 'inputs': [{'name': 'a', 'shape': [2],"
                       " 'scaling': {'scale': 2.0, 'mean': 1.0, 'std': 0.5}},"
                       " {'name': 'u', 'shape': [1], 'datatype': 'INT32'}],"
                       " 'layers': [" FC("x", "a", 3) ",{'name': 'e', 'type': 'embedding',"
                       " 'inputs': ['u'], 'num_embeddings': 9, 'dim': 2}],"
                       " 'outputs': [{'name': 'x', 'loss': 'softmax_cross_entropy'},"
                       " {'name': 'e', 'loss': 'mse'}]}", &err), DL_OK, "%s", err.msg);
    char path[256];
    fx_tmpfile(path, sizeof(path), "graphcsv");
    fx_write_text(path, "2,0.5,0.25,-1,3,7\n0,0,0,0,1,8\n");
    dl_dataset *ds = NULL;
    cr_assert_eq(dl_dataset_load_csv_model(path, conf, &ds, &err), DL_OK, "%s", err.msg);
    cr_expect_eq(ds->n, 2);
    cr_expect_eq(ds->tdim, 3);   /* a class, then the embedding's 1 x 2 values */
    cr_expect_eq(ds->dim, 3);
    const float t0[3] = { 2, 0.5f, 0.25f }, x0[3] = { -6, 10, 7 };  /* (v*2-1)/0.5 */
    cr_expect_eq(memcmp(ds->t, t0, sizeof(t0)), 0);
    cr_expect_eq(memcmp(ds->x, x0, sizeof(x0)), 0, "%g %g %g", ds->x[0], ds->x[1], ds->x[2]);
    dl_dataset_free(ds);
    fx_write_text(path, "2,0.5,0.25,-1,3,7\n1,0,0,0,1\n");
    cr_expect_eq(dl_dataset_load_csv_model(path, conf, &ds, &err), DL_ERR_INVALID);
    cr_expect_not_null(strstr(err.msg, ":2: expected 6 fields (3 targets, 3 inputs), found 5"),
                       "%s", err.msg);
    fx_write_text(path, "2,0.5,0.25,-1,3,9.5\n");
    cr_expect_eq(dl_dataset_load_csv_model(path, conf, &ds, &err), DL_ERR_INVALID);
    cr_expect_not_null(strstr(err.msg, ":1: field 6 (input 'u') is not an id"), "%s", err.msg);
    unlink(path);
}
