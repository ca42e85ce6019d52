/* session.c: opening a model from the repository (model.json, backend,
 * weights), loading data for it and evaluation. */
#define _POSIX_C_SOURCE 200809L
#include "train/session.h"

#include <jansson.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

void dl_run_opts_init(dl_run_opts *o)
{
    memset(o, 0, sizeof(*o));
    o->epochs = o->batch_size = o->seed = -1;
    o->lr = o->momentum = o->weight_decay = o->clip_norm = -1.0;
    o->optimizer = o->nesterov = o->progress = o->batch_invariant = -1;
    o->dist = (dl_dist_conf){ .mode = DL_DIST_ALLREDUCE, .avg_k = 1, .servers = 1,
                              .max_staleness = 4, .stall_timeout = 300.0,
                              .bucket_kb = DL_DIST_BUCKET_KB };
}

/* Layers the CPU's engine (oneDNN) runs: convolutions and pooling, and
 * when the model only serves, dense layers (prepacked inner products). */
static bool has_engine_layers(const dl_model_conf *c, bool serving)
{
    for (int i = 0; i < c->nlayers; i++)
        if (dl_layer_is_conv_or_pool(c->layers[i].type) ||
            (serving && c->layers[i].type == DL_LAYER_DENSE))
            return true;
    return false;
}

/* model.json's "serving": {"batch_invariant": ...} (checked by the daemon,
 * src/serve/serving.c), else the daemon's default. */
static bool serving_invariant(const dl_model_conf *c)
{
    json_t *root = c->json ? json_loads(c->json, 0, NULL) : NULL;
    json_t *v = json_object_get(json_object_get(root, "serving"), "batch_invariant");
    bool on = json_is_boolean(v) ? json_is_true(v) : DL_BATCH_INVARIANT_DEFAULT;
    json_decref(root);
    return on;
}

dl_status session_open(session *s, const dl_run_opts *o, uint64_t seed, bool serving,
                       dl_err *err)
{
    memset(s, 0, sizeof(*s));
    dl_status st = dl_model_conf_load(o->model_dir, &s->conf, err);
    dl_backend_params bp = { .threads = o->threads, .tf32 = o->tf32,
                             .engine_layers = st == DL_OK &&
                                              has_engine_layers(s->conf, serving) };
    if (st == DL_OK)
        st = dl_backend_new(o->device, &bp, &s->be, err);
    if (st == DL_OK && o->tf32 && s->be->device < 0)
        DL_LOG0(DL_LOG_NOTICE, "train", "--math tf32 applies to CUDA devices only; the CPU "
                "computes in fp32");
    if (st == DL_OK)
        st = dl_model_new(s->be, s->conf, seed, &s->m, err);
    if (st != DL_OK) {
        session_close(s);
        return st;
    }
    s->sc = dl_scaling_of(s->conf);
    return DL_OK;
}

void session_serve(session *s, const dl_run_opts *o)
{
    dl_model_fix_weights(s->m);
    dl_model_set_batch_invariant(s->m, o->batch_invariant >= 0 ? o->batch_invariant == 1
                                                               : serving_invariant(s->conf));
}

dl_status session_load_weights(session *s, const dl_run_opts *o, dl_err *err)
{
    int64_t v = o->version > 0 ? o->version : dl_repo_latest(o->model_dir);
    if (v <= 0)
        return dl_err_set(err, DL_ERR_INVALID,
                          "%s: no trained version (train it first with --train)",
                          o->model_dir);
    snprintf(s->weights, sizeof(s->weights), "%s/%lld/model.safetensors",
             o->model_dir, (long long)v);
    s->version = v;
    return dl_model_load(s->m, s->weights, err);
}

dl_status session_data(session *s, const dl_run_opts *o, const char *split,
                       dl_dataset **out, dl_err *err)
{
    char dir[4096], path[4200];
    dl_status st = session_data_dir(o, split, dir, sizeof(dir), err);
    if (st != DL_OK)
        return st;
    /* A graph model's data: <split>.jsonl when there is one, else CSV
     * lines of every output's targets, then every input's values. */
    snprintf(path, sizeof(path), "%s/%s.jsonl", dir, split);
    bool jsonl = s->conf->graph && access(path, F_OK) == 0;
    if (s->conf->graph && !jsonl)
        snprintf(path, sizeof(path), "%s/%s.csv", dir, split);
    st = jsonl ? dl_dataset_load_jsonl(path, s->conf, out, err)
       : s->conf->graph ? dl_dataset_load_csv_model(path, s->conf, out, err)
       : dl_dataset_load_dir(dir, split, dl_model_in_dim(s->m), &s->sc, out, err);
    if (st == DL_OK)
        dl_dataset_truncate(*out, o->limit);
    return st;
}

/* Figures of one output summed over an evaluation's batches. */
typedef struct out_sums {
    double  loss, sq, tok_loss;   /* tok_loss: the token losses' sum (next_token) */
    int64_t correct, judged;
} out_sums;

/* Adds output k's figures of the last dl_model_loss over b samples. */
static void add_output(const session *s, int k, int64_t b, out_sums *o)
{
    double ls, sq;
    int64_t c, judged = dl_model_output_judged(s->m, k);
    dl_model_output_stats(s->m, k, &ls, &c, &sq);
    o->loss += ls;
    o->sq += sq;
    o->correct += c;
    o->judged += judged;
    /* a per-token loss is its batch's token mean times b */
    o->tok_loss += ls * (double)judged / (double)b;
}

/* Each output's means over n samples into s->out_*. */
static void output_means(session *s, const out_sums *per, int64_t n)
{
    for (int k = 0; k < dl_model_output_count(s->m); k++) {
        const out_sums *o = &per[k];
        s->out_loss[k] = o->loss / (double)n;
        s->out_acc[k] = o->judged ? (double)o->correct / (double)o->judged : 0.0;
        s->out_mse[k] = o->sq / (double)(n * dl_model_output_dim(s->m, k));
        s->out_rmse[k] = sqrt(s->out_mse[k]);
        s->out_ppl[k] = o->judged ? exp(o->tok_loss / (double)o->judged) : 1.0;
    }
}

dl_status session_evaluate(session *s, const dl_dataset *ds, int64_t batch,
                           double *loss, double *accuracy, dl_err *err)
{
    dl_backend *be = s->be;
    float *x;
    dl_status st = be->ops->alloc(be, (size_t)(batch * ds->dim) * sizeof(float),
                                  (void **)&x, err);
    if (st != DL_OK)
        return st;
    double sum = 0.0;
    out_sums per[DL_REPORT_MAX_OUTPUTS] = {{0}};
    int no = dl_model_output_count(s->m);
    for (int64_t i = 0; i < ds->n && st == DL_OK; i += batch) {
        int64_t b = ds->n - i < batch ? ds->n - i : batch;
        be->ops->upload(be, x, ds->x + i * ds->dim, (size_t)(b * ds->dim) * sizeof(float));
        const float *y;
        double l = 0.0;
        int64_t c = 0;
        st = dl_model_forward(s->m, x, b, false, &y, err);
        if (st == DL_OK)
            st = dl_model_loss(s->m, ds->t ? NULL : ds->y + i, ds->t ? ds->t + i * ds->tdim : NULL,
                               1.0f, false, &l, &c, err);
        sum += l;
        for (int k = 0; k < no && st == DL_OK; k++)
            add_output(s, k, b, &per[k]);
    }
    if (ds->n)
        output_means(s, per, ds->n);
    be->ops->release(be, x);
    *loss = ds->n ? sum / (double)ds->n : 0.0;
    *accuracy = ds->n ? s->out_acc[0] : 0.0;
    return st;
}

void session_close(session *s)
{
    dl_model_free(s->m);
    dl_backend_free(s->be);
    dl_model_conf_free(s->conf);
    memset(s, 0, sizeof(*s));
}
