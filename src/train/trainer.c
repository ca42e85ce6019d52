/* trainer.c: the training loop of `dlserve --train`, alone or as one rank
 * of an MPI job: sharded mini-batches, forward, loss, backward, then the
 * distributed mode's exchange (gradient allreduce, parameter averaging
 * every K steps, or push/pull with parameter servers), per-epoch
 * evaluation, checkpoints, progress, and the new version folder. */
#define _POSIX_C_SOURCE 200809L
#include "train/checkpoint.h"
#include "train/report.h"
#include "train/session.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

typedef struct trainer {
    const dl_run_opts *o;
    session     s;
    dl_hparams  hp;
    dl_dist    *d;
    dl_dist_mode mode;
    int         T, me;           /* trainers and this trainer's index */
    dl_optim   *opt;
    dl_dataset *train, *test;
    int64_t    *perm, *idx;
    float      *hx, *x;          /* host batch and backend batch */
    int32_t    *hy;
    float      *ht;          /* a graph model's targets (b * tdim) */
    float      *host;            /* host staging for exchanges */
    /* allreduce on the CPU: the gradient sum in buckets, started while
     * backward runs (NULL: one sum after backward) */
    dl_dist_buckets *buckets;
    /* avg:K: the parameters at the last averaging point and this
     * trainer's update since then (backend memory); the parameters the
     * model computes with are anchor + delta. */
    float      *anchor, *delta;
    int64_t     np, ns, no;      /* parameters, state, optimizer state */
    int64_t     steps_per_epoch, total_steps, step;
    int64_t     ps_version;
    dl_ps_layout lay;            /* how the servers split the parameters */
    int64_t    *ids;             /* table rows of this step's batch */
    int64_t     nids;
    bool        bar;
    dl_ps_stats ps;
    /* a model of several outputs: their count (0 for one output) and this
     * epoch's sums of each one's training loss, its correct predictions
     * (classifiers) or squared errors (MSE), and the predictions judged
     * (samples, or tokens of a per-token output) */
    int         nout;
    double      out_train[DL_REPORT_MAX_OUTPUTS][3];
    double      judged;          /* this epoch's predictions of output 0 judged */
} trainer;

static void apply_overrides(dl_hparams *hp, const dl_run_opts *o)
{
    if (o->epochs > 0)
        hp->epochs = o->epochs;
    if (o->batch_size > 0)
        hp->batch_size = o->batch_size;
    if (o->seed >= 0)
        hp->seed = (uint64_t)o->seed;
    if (o->lr >= 0)
        hp->lr = o->lr;
    if (o->momentum >= 0)
        hp->momentum = o->momentum;
    if (o->weight_decay >= 0)
        hp->weight_decay = o->weight_decay;
    if (o->clip_norm >= 0)
        hp->clip_norm = o->clip_norm;
    if (o->optimizer >= 0)
        hp->optimizer = (dl_optim_kind)o->optimizer;
    if (o->nesterov >= 0)
        hp->nesterov = o->nesterov;
}

static bool is_ps(const trainer *t)
{
    return t->mode == DL_DIST_PS_SYNC || t->mode == DL_DIST_PS_ASYNC;
}

/* Whether output k's metric is the RMSE (an MSE output), else the accuracy. */
static bool is_rmse(const trainer *t, int k)
{
    return t->s.conf->outputs[k].loss == DL_LOSS_MSE;
}

static void trainer_close(trainer *t)
{
    dl_optim_free(t->opt);
    dl_dataset_free(t->train);
    dl_dataset_free(t->test);
    free(t->perm);
    free(t->idx);
    free(t->hx);
    free(t->hy);
    free(t->ht);
    free(t->host);
    free(t->ids);
    dl_dist_buckets_free(t->buckets);
    dl_backend *be = t->s.be;
    float *bufs[] = { t->x, t->anchor, t->delta };
    for (size_t i = 0; i < sizeof(bufs) / sizeof(bufs[0]); i++)
        if (bufs[i])
            be->ops->release(be, bufs[i]);
    session_close(&t->s);
}

/* --dist allreduce on the CPU with --bucket-kb > 0: plans the gradient
 * buckets along the layers' gradient ranges. The GPU path keeps its one
 * NCCL sum after backward (dl_dist_sum_device). */
static dl_status open_buckets(trainer *t, dl_err *err)
{
    int64_t kb = dl_dist_conf_of(t->d)->bucket_kb;
    if (t->mode != DL_DIST_ALLREDUCE || t->T <= 1 || kb == 0 || t->s.be->device != -1)
        return DL_OK;
    int nl = dl_model_layer_count(t->s.m);
    int64_t *cuts = malloc((size_t)nl * sizeof(*cuts)), end;
    if (!cuts)
        return dl_err_set(err, DL_ERR_NOMEM, "bucket plan");
    for (int i = 0; i < nl; i++)
        dl_model_grad_range(t->s.m, i, &cuts[i], &end);
    dl_status st = dl_dist_buckets_new(t->d, t->np, cuts, nl, (size_t)kb * 1024,
                                       &t->buckets, err);
    free(cuts);
    if (st == DL_OK)
        DL_LOG0(DL_LOG_INFO, "dist", "gradient allreduce in %d bucket%s of at least %lld KiB, "
                "started during backward", dl_dist_buckets_count(t->buckets),
                dl_dist_buckets_count(t->buckets) > 1 ? "s" : "", (long long)kb);
    return st;
}

static dl_status trainer_open(trainer *t, const dl_run_opts *o, dl_dist *d,
                              bool need_test, dl_err *err)
{
    memset(t, 0, sizeof(*t));
    t->o = o;
    t->d = d;
    t->mode = dl_dist_conf_of(d)->mode;
    t->T = dl_dist_trainers(d);
    t->me = dl_dist_trainer(d);
    dl_model_conf *probe;
    dl_status st = dl_model_conf_load(o->model_dir, &probe, err);
    if (st != DL_OK)
        return st;
    t->hp = probe->train;
    dl_model_conf_free(probe);
    apply_overrides(&t->hp, o);
    if ((st = session_open(&t->s, o, t->hp.seed, false, err)) != DL_OK)
        return st;
    t->nout = t->s.conf->noutputs > 1 ? t->s.conf->noutputs : 0;
    st = session_data(&t->s, o, "train", &t->train, err);
    if (st == DL_OK && need_test)
        st = session_data(&t->s, o, "test", &t->test, err);
    int64_t b = t->hp.batch_size, dim = dl_model_in_dim(t->s.m);
    dl_model_params(t->s.m, &t->np);
    dl_model_state(t->s.m, &t->ns);
    if (st == DL_OK)
        st = dl_optim_new(t->s.be, &t->hp, t->np, &t->opt, err);
    if (st == DL_OK)
        dl_optim_state(t->opt, &t->no);
    if (st == DL_OK)
        st = t->s.be->ops->alloc(t->s.be, (size_t)(b * dim) * sizeof(float),
                                 (void **)&t->x, err);
    if (st == DL_OK && t->mode == DL_DIST_AVG)
        st = t->s.be->ops->alloc(t->s.be, (size_t)t->np * sizeof(float),
                                 (void **)&t->anchor, err);
    if (st == DL_OK && t->mode == DL_DIST_AVG)
        st = t->s.be->ops->alloc(t->s.be, (size_t)t->np * sizeof(float),
                                 (void **)&t->delta, err);
    if (st == DL_OK) {
        int64_t most = t->np > t->ns ? t->np : t->ns;
        most = most > t->no ? most : t->no;
        t->perm = malloc((size_t)t->train->n * sizeof(*t->perm));
        t->idx = malloc((size_t)b * sizeof(*t->idx));
        t->hx = malloc((size_t)(b * dim) * sizeof(float));
        t->hy = malloc((size_t)b * sizeof(int32_t));
        t->ht = malloc((size_t)(b * (t->train->tdim + 1)) * sizeof(float));
        t->host = malloc((size_t)(most + 1) * sizeof(float));
        if (!t->perm || !t->idx || !t->hx || !t->hy || !t->ht || !t->host)
            st = dl_err_set(err, DL_ERR_NOMEM, "batch buffers");
    }
    if (st != DL_OK) {
        trainer_close(t);
        return st;
    }
    /* An embedding table first in the model, on its only input, travels
     * by rows (sparse); a batch's ids are then all of its values. */
    t->lay = (dl_ps_layout){ .nparams = t->np };
    const dl_layer_conf *first = &t->s.conf->layers[0];
    if (first->type == DL_LAYER_EMBEDDING && t->s.conf->ninputs == 1) {
        t->lay.rows = first->num_embeddings;
        t->lay.dim = first->dim;
        if (!(t->ids = malloc((size_t)(b * dim) * sizeof(*t->ids)))) {
            trainer_close(t);
            return dl_err_set(err, DL_ERR_NOMEM, "row list");
        }
    }
    /* Every rank derives the same step count from the same data size. */
    t->steps_per_epoch = dl_data_steps(t->train->n, b * t->T);
    t->total_steps = t->steps_per_epoch * t->hp.epochs;
    dl_model_set_rng(t->s.m, (uint64_t)(t->me > 0 ? t->me : 0), 0);
    if ((st = open_buckets(t, err)) != DL_OK)
        trainer_close(t);
    return st;
}

/* Sums a backend buffer over the trainers, then scales it: on the GPUs
 * through NCCL when the job can, otherwise through the host staging
 * buffer and MPI. */
static dl_status reduce(trainer *t, float *buf, int64_t n, float scale,
                        const char *what, dl_err *err)
{
    if (t->T <= 1 || n == 0)
        return DL_OK;
    dl_backend *be = t->s.be;
    dl_status st = dl_dist_sum_device(t->d, be, buf, n, scale, what, err);
    if (st != DL_ERR_UNAVAILABLE)
        return st;
    be->ops->download(be, t->host, buf, (size_t)n * sizeof(float));
    st = dl_dist_sum(t->d, t->host, n, what, err);
    if (st != DL_OK)
        return st;
    if (scale != 1.0f)
        for (int64_t i = 0; i < n; i++)
            t->host[i] *= scale;
    be->ops->upload(be, buf, t->host, (size_t)n * sizeof(float));
    return DL_OK;
}

/* avg:K starts a period: the parameters are the anchor, no update yet. */
static void avg_anchor(trainer *t)
{
    int64_t n;
    dl_backend *be = t->s.be;
    be->ops->copy(be, t->anchor, dl_model_params(t->s.m, &n), t->np);
    be->ops->fill(be, t->delta, t->np, 0.0f);
}

/* The running statistics averaged over the trainers; constants (the rest
 * of the state) are the same everywhere and stay as they are. */
static dl_status reduce_state(trainer *t, float inv, dl_err *err)
{
    int64_t n;
    float *s = dl_model_running_state(t->s.m, &n);
    return reduce(t, s, n, inv, "state averaging", err);
}

/* Parameter averaging: parameters, state and optimizer state. The mean
 * of the parameters is the anchor plus the mean of the updates, which
 * are averaged instead: with K = 1 and plain SGD this rounds as one
 * process with the global batch does, once per step. */
static dl_status average(trainer *t, dl_err *err)
{
    int64_t n;
    float inv = 1.0f / (float)t->T;
    dl_backend *be = t->s.be;
    dl_status st = reduce(t, t->delta, t->np, inv, "parameter averaging", err);
    if (st == DL_OK) {
        be->ops->axpy(be, 1.0f, t->delta, t->anchor, t->np);
        be->ops->copy(be, dl_model_params(t->s.m, &n), t->anchor, t->np);
        be->ops->fill(be, t->delta, t->np, 0.0f);
    }
    if (st == DL_OK)
        st = reduce_state(t, inv, err);
    if (st == DL_OK)
        st = reduce(t, dl_optim_state(t->opt, &n), t->no, inv, "optimizer averaging", err);
    return st;
}

/* Pulls the dense parameters and the table rows of this step's batch
 * (all rows when all_rows). */
static dl_status ps_pull(trainer *t, bool all_rows, dl_err *err)
{
    int64_t n;
    float *p = dl_model_params(t->s.m, &n);
    bool every = all_rows || !t->ids;
    dl_status st = dl_ps_pull(t->d, t->host, &t->lay, every ? NULL : t->ids,
                              every ? 0 : t->nids, &t->ps_version, err);
    if (st == DL_OK)
        t->s.be->ops->upload(t->s.be, p, t->host, (size_t)n * sizeof(float));
    return st;
}

static int cmp_i64(const void *a, const void *b)
{
    int64_t x = *(const int64_t *)a, y = *(const int64_t *)b;
    return (x > y) - (x < y);
}

/* This trainer's share of global step s: gathers it into hx / hy and, for
 * a model with an embedding table, lists the rows it touches. Returns
 * the share's size and the global batch's. */
static void gather(trainer *t, int64_t s, int64_t *count, int64_t *global)
{
    int64_t begin, b = t->hp.batch_size, G = b * t->T, dim = t->train->dim;
    dl_data_shard(t->train->n, b, t->me, t->T, s, &begin, count);
    *global = t->train->n - s * G < G ? t->train->n - s * G : G;
    for (int64_t i = 0; i < *count; i++)
        t->idx[i] = t->perm[begin + i];
    dl_data_gather(t->train, t->idx, *count, t->hx, t->train->t ? NULL : t->hy);
    if (t->train->t)
        dl_data_gather_targets(t->train, t->idx, *count, t->ht);
    if (!t->ids)
        return;
    /* A sequence's row is its length, then ids: those within the length. */
    const dl_input_conf *ic = &t->s.conf->inputs[0];
    bool seq = ic->max_length > 0;
    int64_t n = 0;
    for (int64_t i = 0; i < *count; i++) {
        const float *x = t->hx + i * dim;
        int64_t end = seq ? 1 + (int64_t)x[0] * (ic->dim / ic->max_length) : dim;
        for (int64_t j = seq; j < end && j < dim; j++)
            if (x[j] >= 0.0f && x[j] < (float)t->lay.rows)  /* bad ids: the layer refuses them */
                t->ids[n++] = (int64_t)x[j];
    }
    qsort(t->ids, (size_t)n, sizeof(*t->ids), cmp_i64);
    t->nids = 0;
    for (int64_t i = 0; i < n; i++)
        if (i == 0 || t->ids[i] != t->ids[i - 1])
            t->ids[t->nids++] = t->ids[i];
}

/* Backward's hook: layers [layer, last] are done, so are the gradients
 * from `begin` to the end of the buffer. */
static dl_status grads_ready(void *ctx, int layer, int64_t begin, int64_t end, dl_err *err)
{
    (void)layer;
    (void)end;
    return dl_dist_buckets_ready(ctx, begin, err);
}

/* Adds each output's figures of the last loss to the epoch's sums. */
static void add_output_sums(trainer *t)
{
    for (int k = 0; k < t->nout; k++) {
        double loss, sq;
        int64_t correct;
        dl_model_output_stats(t->s.m, k, &loss, &correct, &sq);
        t->out_train[k][0] += loss;
        t->out_train[k][1] += is_rmse(t, k) ? sq : (double)correct;
        t->out_train[k][2] += (double)dl_model_output_judged(t->s.m, k);
    }
}

/* Forward, loss and backward on the gathered share. Adds the share's
 * summed loss, correct count and size (and each output's figures). */
static dl_status compute(trainer *t, int64_t count, int64_t global, double *loss,
                         int64_t *correct, int64_t *seen, dl_err *err)
{
    dl_model_zero_grad(t->s.m);
    if (count == 0)   /* a short last batch can leave a rank nothing */
        return DL_OK;
    /* Synchronous modes scale by the global batch, so that the sum over
     * trainers is the gradient of one process with batch N*b. */
    bool sync = t->mode == DL_DIST_ALLREDUCE || t->mode == DL_DIST_PS_SYNC;
    float scale = 1.0f / (float)(sync ? global : count);
    dl_backend *be = t->s.be;
    be->ops->upload(be, t->x, t->hx, (size_t)(count * t->train->dim) * sizeof(float));
    const float *y;
    double l = 0.0;
    int64_t c = 0;
    dl_status st = dl_model_forward(t->s.m, t->x, count, true, &y, err);
    if (st == DL_OK)
        st = dl_model_loss(t->s.m, t->train->t ? NULL : t->hy, t->train->t ? t->ht : NULL,
                           scale, true, &l, &c, err);
    if (st == DL_OK) {
        add_output_sums(t);
        t->judged += (double)dl_model_output_judged(t->s.m, 0);
    }
    if (st == DL_OK)
        st = t->buckets ? dl_model_backward_hooked(t->s.m, grads_ready, t->buckets, err)
                        : dl_model_backward(t->s.m, err);
    *loss += l;
    *correct += c;
    *seen += count;
    return st;
}

/* --clip-norm: clips the gradient this trainer's update reads. */
static void clip(trainer *t, float *g, int64_t n)
{
    if (t->hp.clip_norm > 0.0)
        dl_clip_grad_norm(t->s.be, g, n, t->hp.clip_norm);
}

/* One global step: compute, then the mode's exchange and update. A
 * clipped gradient is the allreduce's sum, the same on every rank; with
 * parameter averaging or servers, each trainer's own. */
static dl_status train_step(trainer *t, int64_t s, double *loss, int64_t *correct,
                            int64_t *seen, dl_err *err)
{
    int64_t count, global, n;
    float *p = dl_model_params(t->s.m, &n), *g = dl_model_grads(t->s.m, &n);
    gather(t, s, &count, &global);
    dl_status st = is_ps(t) ? ps_pull(t, false, err) : DL_OK;
    if (t->buckets)   /* a trainer left no samples starts every bucket in finish */
        dl_dist_buckets_begin(t->buckets, g);
    if (st == DL_OK)
        st = compute(t, count, global, loss, correct, seen, err);
    if (st != DL_OK)
        return st;
    double lr = dl_lr_at(&t->hp, t->step, t->steps_per_epoch, t->total_steps);
    t->step++;
    switch (t->mode) {
    case DL_DIST_ALLREDUCE:
        st = t->buckets ? dl_dist_buckets_finish(t->buckets, "gradient allreduce", err)
                        : reduce(t, g, n, 1.0f, "gradient allreduce", err);
        if (st == DL_OK) {
            clip(t, g, n);
            dl_optim_step(t->opt, p, g, lr);
        }
        return st;
    case DL_DIST_AVG:
        clip(t, g, n);
        dl_optim_step_delta(t->opt, t->delta, p, g, lr);
        t->s.be->ops->copy(t->s.be, p, t->anchor, n);
        t->s.be->ops->axpy(t->s.be, 1.0f, t->delta, p, n);
        return t->step % dl_dist_conf_of(t->d)->avg_k == 0 ? average(t, err) : DL_OK;
    case DL_DIST_PS_SYNC:
    case DL_DIST_PS_ASYNC:
        clip(t, g, n);
        t->s.be->ops->download(t->s.be, t->host, g, (size_t)n * sizeof(float));
        return dl_ps_push(t->d, t->host, &t->lay, t->ids, t->ids ? t->nids : 0,
                          t->ps_version, err);
    }
    return DL_OK;
}

static dl_status checkpoint(trainer *t, dl_err *err)
{
    if (dl_dist_rank(t->d) != 0)
        return DL_OK;
    dl_backend *be = t->s.be;
    int64_t np, ns, no;
    float *p = dl_model_params(t->s.m, &np), *s = dl_model_state(t->s.m, &ns);
    float *o = dl_optim_state(t->opt, &no);
    float *hp = malloc((size_t)(np + ns + no + 1) * sizeof(float));
    if (!hp)
        return dl_err_set(err, DL_ERR_NOMEM, "checkpoint buffer");
    be->ops->download(be, hp, p, (size_t)np * sizeof(float));
    be->ops->download(be, hp + np, s, (size_t)ns * sizeof(float));
    if (no)
        be->ops->download(be, hp + np + ns, o, (size_t)no * sizeof(float));
    ckpt_pos pos = { .step = t->step, .optim_steps = dl_optim_steps(t->opt),
                     .rng_counter = dl_model_rng_counter(t->s.m), .seed = t->hp.seed,
                     .batch_size = t->hp.batch_size, .ranks = t->T };
    dl_status st = ckpt_write(t->o->model_dir, &pos, hp, np, hp + np, ns, hp + np + ns,
                              no, 3, err);
    free(hp);
    return st;
}

static dl_status resume(trainer *t, dl_err *err)
{
    dl_backend *be = t->s.be;
    float *hp = malloc((size_t)(t->np + t->ns + t->no + 1) * sizeof(float));
    if (!hp)
        return dl_err_set(err, DL_ERR_NOMEM, "checkpoint buffer");
    ckpt_pos pos;
    char path[4200];
    dl_status st = ckpt_read_latest(t->o->model_dir, &pos, hp, t->np, hp + t->np, t->ns,
                                    hp + t->np + t->ns, t->no, path, sizeof(path), err);
    if (st == DL_OK && (pos.batch_size != t->hp.batch_size || pos.ranks != t->T ||
                        pos.seed != t->hp.seed || pos.step > t->total_steps))
        st = dl_err_set(err, DL_ERR_INVALID,
                        "%s: written at step %lld by %lld trainers of batch %lld with seed "
                        "%llu; this run has %d trainers of batch %lld, seed %llu, %lld steps",
                        path, (long long)pos.step, (long long)pos.ranks,
                        (long long)pos.batch_size, (unsigned long long)pos.seed, t->T,
                        (long long)t->hp.batch_size, (unsigned long long)t->hp.seed,
                        (long long)t->total_steps);
    if (st == DL_OK) {
        int64_t n;
        be->ops->upload(be, dl_model_params(t->s.m, &n), hp, (size_t)t->np * sizeof(float));
        be->ops->upload(be, dl_model_state(t->s.m, &n), hp + t->np, (size_t)t->ns * sizeof(float));
        if (t->no)
            be->ops->upload(be, dl_optim_state(t->opt, &n), hp + t->np + t->ns,
                            (size_t)t->no * sizeof(float));
        dl_optim_set_steps(t->opt, pos.optim_steps);
        dl_model_set_rng(t->s.m, (uint64_t)t->me, pos.rng_counter);
        t->step = pos.step;
        DL_LOG0(DL_LOG_INFO, "train", "resuming from %s at step %lld", path,
                (long long)pos.step);
    }
    free(hp);
    return st;
}

static void show_bar(const trainer *t, int64_t epoch, int64_t step, double loss,
                     double acc, double rate, double eta)
{
    int width = 24, fill = (int)(width * (step + 1) / t->steps_per_epoch);
    char bar[32];
    for (int i = 0; i < width; i++)
        bar[i] = i < fill ? '#' : '.';
    bar[width] = '\0';
    fprintf(stderr, "\r\033[Kepoch %lld/%lld [%s] step %lld/%lld loss %.4f acc %.4f "
            "%.0f samples/s ETA %d:%02d", (long long)epoch, (long long)t->hp.epochs,
            bar, (long long)step + 1, (long long)t->steps_per_epoch, loss, acc, rate,
            (int)eta / 60, (int)eta % 60);
}

/* Each output's test loss and correct-count or squared-error sums over
 * n samples into out[4k + 2], out[4k + 3], from the session's means. */
static void test_output_sums(const trainer *t, int64_t n, double *out)
{
    for (int k = 0; k < t->nout; k++) {
        double r = t->s.out_rmse[k];
        out[4 * k + 2] = t->s.out_loss[k] * (double)n;
        out[4 * k + 3] = is_rmse(t, k)
                       ? r * r * (double)(n * dl_model_output_dim(t->s.m, k))
                       : t->s.out_acc[k] * (double)n;
    }
}

/* Loss and accuracy sums over this trainer's part of the test set, and in
 * sums[3 + 4k + 2], sums[3 + 4k + 3] each output's (see run_epoch). */
static dl_status evaluate(trainer *t, double *sums, dl_err *err)
{
    int64_t n = t->test->n, b = n * t->me / t->T, e = n * (t->me + 1) / t->T;
    dl_dataset part = *t->test;
    part.n = e - b;
    part.x = t->test->x + b * t->test->dim;
    part.y = t->test->y ? t->test->y + b : NULL;
    part.t = t->test->t ? t->test->t + b * t->test->tdim : NULL;
    double loss = 0.0, acc = 0.0;
    dl_status st = part.n > 0 ? session_evaluate(&t->s, &part, 1024, &loss, &acc, err)
                              : DL_OK;
    sums[0] = loss * (double)part.n;
    sums[1] = acc * (double)part.n;
    sums[2] = (double)part.n;
    if (part.n > 0)
        test_output_sums(t, part.n, sums + 3);
    return st;
}

typedef struct epoch_ctx {
    int64_t epoch;
    int64_t first;           /* first step of the epoch to run (resume) */
    double  train_seconds;   /* accumulated over the run */
    double  bytes_start;
    double  inflight_start, exposed_start;   /* dl_dist_overlap at the epoch's start */
} epoch_ctx;

/* The share of the bucketed reductions' time that ran under backward:
 * 1 - exposed wait after backward / time while any bucket was in flight
 * (0 when none was). */
static double hidden_share(double inflight, double exposed)
{
    if (inflight <= 0.0)
        return 0.0;
    double h = 1.0 - exposed / inflight;
    return h < 0.0 ? 0.0 : h > 1.0 ? 1.0 : h;
}

/* A mean over n samples: the accuracy from a correct count, or the RMSE
 * from a squared-error sum over n * dim values. */
static double metric(double sum, double n, bool rmse, int64_t dim)
{
    return rmse ? sqrt(sum / (n * (double)dim)) : sum / n;
}

/* Each output's figures from the epoch's summed statistics (run_epoch;
 * the predictions judged of output k at sums[7 + 4 * nout + k]). */
static void output_stats(const trainer *t, const double *sums, dl_epoch_stats *es)
{
    double seen = sums[2] ? sums[2] : 1, tested = sums[5];
    for (int k = 0; k < t->nout; k++) {
        const double *o = sums + 6 + 4 * k, judged = sums[7 + 4 * t->nout + k];
        bool r = is_rmse(t, k);
        int64_t dim = dl_model_output_dim(t->s.m, k);
        es->out[k] = (dl_output_stats){
            .train_loss = o[0] / seen,
            .train_metric = r ? metric(o[1], seen, r, dim) : o[1] / (judged ? judged : 1),
            .test_loss = tested > 0 ? o[2] / tested : -1.0,
            .test_metric = tested > 0 ? metric(o[3], tested, r, dim) : -1.0 };
    }
}

/* The epoch line: the totals, then (several outputs, with a test set)
 * each output's test loss and metric. */
static void log_epoch(const trainer *t, const dl_epoch_stats *es)
{
    char outs[768] = "";
    size_t n = 0;
    for (int k = 0; k < t->nout && es->test_loss >= 0 && n < sizeof(outs); k++)
        n += (size_t)snprintf(outs + n, sizeof(outs) - n, "%s%s: loss %.4f %s %.4f",
                              k ? ", " : " | ", t->s.conf->outputs[k].name,
                              es->out[k].test_loss, is_rmse(t, k) ? "rmse" : "acc",
                              es->out[k].test_metric);
    DL_LOG0(DL_LOG_INFO, "train",
            "epoch %d/%lld loss %.4f acc %.4f test_loss %.4f test_acc %.4f lr %.3g "
            "%.0f samples/s %.1fs%s", es->epoch, (long long)t->hp.epochs, es->train_loss,
            es->train_accuracy, es->test_loss, es->test_accuracy, es->lr,
            es->samples_per_sec, es->seconds, outs);
}

static dl_status run_epoch(trainer *t, epoch_ctx *ec, dl_epoch_stats *es, bool *stop,
                           dl_err *err)
{
    const dl_run_opts *o = t->o;
    dl_data_permutation(t->hp.seed, ec->epoch, t->train->n, t->perm);
    memset(t->out_train, 0, sizeof(t->out_train));
    t->judged = 0.0;
    ec->bytes_start = (double)dl_dist_bytes(t->d);
    dl_dist_overlap(t->d, &ec->inflight_start, &ec->exposed_start);
    double loss = 0.0, t0 = dl_time_now(), last_draw = 0.0;
    int64_t correct = 0, seen = 0, G = t->hp.batch_size * t->T;
    dl_status st = DL_OK;
    int64_t s;
    for (s = ec->first; s < t->steps_per_epoch && st == DL_OK; s++) {
        st = train_step(t, s, &loss, &correct, &seen, err);
        if (st == DL_OK && o->checkpoint_every > 0 && t->step % o->checkpoint_every == 0)
            st = checkpoint(t, err);
        if (st == DL_OK && o->steps > 0 && t->step >= o->steps) {
            *stop = true;
            s++;
            break;
        }
        double now = dl_time_now();
        if (t->bar && (now - last_draw > 0.1 || s + 1 == t->steps_per_epoch)) {
            double rate = (double)((s + 1 - ec->first) * G) / (now - t0);
            double left = (double)((t->total_steps - t->step) * G) / rate;
            show_bar(t, ec->epoch + 1, s, loss / (double)(seen ? seen : 1),
                     (double)correct / (t->judged ? t->judged : 1), rate, left);
            last_draw = now;
        }
    }
    if (st != DL_OK)
        return st;
    double secs = dl_time_now() - t0;
    ec->train_seconds += secs;
    /* Epoch ends are averaging points too, so that every trainer
     * evaluates the same parameters. */
    if (t->mode == DL_DIST_AVG && t->step % dl_dist_conf_of(t->d)->avg_k != 0)
        st = average(t, err);
    if (st == DL_OK && is_ps(t))
        st = ps_pull(t, true, err);
    /* training loss, correct, samples; the same of the test set; then for
     * each output its training loss and metric sums, and its test ones;
     * then the training predictions judged: output 0's, then each
     * output's (tokens of a per-token output, else samples) */
    int nsums = 7 + 5 * t->nout;
    double sums[7 + 5 * DL_REPORT_MAX_OUTPUTS] = { loss, (double)correct, (double)seen };
    sums[6 + 4 * t->nout] = t->judged;
    for (int k = 0; k < t->nout; k++) {
        sums[6 + 4 * k] = t->out_train[k][0];
        sums[6 + 4 * k + 1] = t->out_train[k][1];
        sums[7 + 4 * t->nout + k] = t->out_train[k][2];
    }
    if (st == DL_OK && t->test && t->test->n > 0)
        st = evaluate(t, sums + 3, err);
    if (st == DL_OK)
        st = dl_dist_sum_f64(t->d, sums, nsums, "epoch statistics", err);
    int64_t steps = s - ec->first;
    double tmin, tmax;
    if (st == DL_OK)
        st = dl_dist_minmax(t->d, secs / (double)(steps ? steps : 1), &tmin, &tmax, err);
    if (st != DL_OK)
        return st;
    double bytes = (double)dl_dist_bytes(t->d) - ec->bytes_start;
    *es = (dl_epoch_stats){ .epoch = (int)ec->epoch + 1,
        .lr = dl_lr_at(&t->hp, t->step - 1, t->steps_per_epoch, t->total_steps),
        .train_loss = sums[0] / (sums[2] ? sums[2] : 1),
        .train_accuracy = sums[1] / (sums[6 + 4 * t->nout] ? sums[6 + 4 * t->nout] : 1),
        .test_loss = sums[5] > 0 ? sums[3] / sums[5] : -1.0,
        .test_accuracy = sums[5] > 0 ? sums[4] / sums[5] : -1.0,
        .samples_per_sec = sums[2] / secs, .seconds = dl_time_now() - t0 };
    output_stats(t, sums, es);
    if (t->bar)
        fprintf(stderr, "\n");
    log_epoch(t, es);
    double inflight, exposed;
    dl_dist_overlap(t->d, &inflight, &exposed);
    char hidden[64] = "";
    if (t->mode == DL_DIST_ALLREDUCE)
        snprintf(hidden, sizeof(hidden), ", %.0f%% of the reduction hidden under backward",
                 100.0 * hidden_share(inflight - ec->inflight_start,
                                      exposed - ec->exposed_start));
    if (t->T > 1 || is_ps(t))
        DL_LOG0(DL_LOG_INFO, "dist",
                "epoch %d: step time %.2f-%.2f ms across trainers, %.0f bytes/step, "
                "comm %.0f%% of rank 0's time%s", es->epoch, tmin * 1e3, tmax * 1e3,
                steps ? bytes / (double)(s - ec->first) : 0.0,
                100.0 * dl_dist_comm_seconds(t->d) / (ec->train_seconds > 0 ? ec->train_seconds : 1),
                hidden);
    ec->first = 0;
    return DL_OK;
}

/* Writes the version folder: weights, metrics.csv, curves.svg. */
static dl_status write_version(trainer *t, int64_t version, const dl_epoch_stats *es,
                               int n, const char *summary, char *weights, size_t wlen,
                               dl_err *err)
{
    char dir[4096], path[4200], title[256];
    snprintf(dir, sizeof(dir), "%s/%lld", t->o->model_dir, (long long)version);
    dl_status st = dl_mkdir(dir, err);
    if (st != DL_OK)
        return st;
    snprintf(weights, wlen, "%s/model.safetensors", dir);
    if ((st = dl_model_save(t->s.m, weights, summary, err)) != DL_OK)
        return st;
    snprintf(path, sizeof(path), "%s/metrics.csv", dir);
    dl_report_output outs[DL_REPORT_MAX_OUTPUTS];
    for (int k = 0; k < t->nout; k++)
        outs[k] = (dl_report_output){ t->s.conf->outputs[k].name, is_rmse(t, k) };
    if ((st = dl_report_write_csv(path, outs, t->nout, es, n, err)) != DL_OK)
        return st;
    snprintf(path, sizeof(path), "%s/curves.svg", dir);
    snprintf(title, sizeof(title), "%s version %lld", t->s.conf->name, (long long)version);
    return dl_report_write_svg(path, title, outs, t->nout, es, n, err);
}

/* After the last step: one set of parameters on trainer 0. */
static dl_status gather_final(trainer *t, dl_err *err)
{
    int64_t n;
    float inv = 1.0f / (float)t->T;
    /* Running statistics are per trainer in every mode: average them. */
    dl_status st = reduce_state(t, inv, err);
    if (st != DL_OK || !is_ps(t))
        return st;
    if ((st = dl_ps_done(t->d, err)) != DL_OK || t->me != 0)
        return st;
    float *p = dl_model_params(t->s.m, &n);
    st = dl_ps_finish(t->d, t->host, &t->lay, &t->ps, err);
    if (st == DL_OK)
        t->s.be->ops->upload(t->s.be, p, t->host, (size_t)n * sizeof(float));
    return st;
}

static void summary_json(trainer *t, const dl_epoch_stats *last, int64_t version,
                         double rate, double seconds, double train_seconds,
                         const char *path, bool full, char *out, size_t len)
{
    const dl_dist_conf *dc = dl_dist_conf_of(t->d);
    int ranks = dl_dist_size(t->d);
    double steps = t->step > 0 ? (double)t->step : 1.0, inflight, exposed;
    dl_dist_overlap(t->d, &inflight, &exposed);
    int n = snprintf(out, len,
                     "{\"model\":\"%s\",\"version\":%lld,\"path\":\"%s\",\"epochs\":%lld,"
                     "\"train_loss\":%.4f,\"test_accuracy\":%.4f,\"samples_per_sec\":%.0f,"
                     "\"seconds\":%.1f,\"dist\":\"%s\",\"ranks\":%d,\"servers\":%d,"
                     "\"bytes_per_step\":%.0f,\"comm_fraction\":%.3f,\"comm_hidden\":%.3f",
                     t->s.conf->name, (long long)version, path, (long long)t->hp.epochs,
                     last->train_loss, last->test_accuracy, rate, seconds,
                     ranks > 1 ? dl_dist_mode_name(dc->mode) : "none", ranks,
                     is_ps(t) ? dc->servers : 0, (double)dl_dist_bytes(t->d) / steps,
                     train_seconds > 0 ? dl_dist_comm_seconds(t->d) / train_seconds : 0.0,
                     hidden_share(inflight, exposed));
    if (full && (size_t)n < len)
        n += snprintf(out + n, len - (size_t)n,
                      ",\"batch_size\":%lld,\"optimizer\":\"%s\",\"lr\":%g,\"seed\":%llu",
                      (long long)t->hp.batch_size, dl_optim_name(t->hp.optimizer), t->hp.lr,
                      (unsigned long long)t->hp.seed);
    if (t->mode == DL_DIST_PS_ASYNC && (size_t)n < len)
        n += snprintf(out + n, len - (size_t)n,
                      ",\"updates\":%lld,\"discarded\":%lld,\"staleness_mean\":%.2f,"
                      "\"staleness_max\":%lld", (long long)t->ps.updates,
                      (long long)t->ps.discarded,
                      t->ps.updates ? t->ps.staleness_sum / (double)t->ps.updates : 0.0,
                      (long long)t->ps.max_staleness);
    if ((size_t)n < len)
        snprintf(out + n, len - (size_t)n, "}");
}

/* Tells the listener, if any, about an epoch (and the version, once written). */
static void report_event(trainer *t, const dl_epoch_stats *e, int64_t version,
                         const char *weights)
{
    if (!t->o->on_event || dl_dist_rank(t->d) != 0)
        return;
    dl_train_event ev = {
        .model = t->s.conf->name, .epoch = e->epoch, .epochs = t->hp.epochs,
        .step = t->step, .train_loss = e->train_loss, .train_accuracy = e->train_accuracy,
        .test_accuracy = e->test_accuracy, .samples_per_s = e->samples_per_sec,
        .ranks = t->T, .version = version, .weights = weights,
    };
    t->o->on_event(t->o->event_ctx, &ev);
}

static dl_status finish(trainer *t, const dl_epoch_stats *es, int nepochs, double t0,
                        double train_seconds, dl_err *err)
{
    dl_status st = gather_final(t, err);
    if (st != DL_OK || dl_dist_rank(t->d) != 0)
        return st;
    const dl_epoch_stats *last = &es[nepochs - 1];
    int64_t version = dl_repo_next(t->o->model_dir);
    double rate = (double)(t->step * t->hp.batch_size * t->T) / train_seconds;
    char meta[2048], line[2048], weights[4200];
    snprintf(weights, sizeof(weights), "%s/%lld/model.safetensors", t->o->model_dir,
             (long long)version);
    summary_json(t, last, version, rate, dl_time_now() - t0, train_seconds, weights, true,
                 meta, sizeof(meta));
    st = write_version(t, version, es, nepochs, meta, weights, sizeof(weights), err);
    summary_json(t, last, version, rate, dl_time_now() - t0, train_seconds, weights, false,
                 line, sizeof(line));
    if (st == DL_OK) {
        printf("%s\n", line);
        fflush(stdout);
        report_event(t, last, version, weights);
    }
    return st;
}

static double server_lr(void *ctx, int64_t update)
{
    const trainer *t = ctx;
    /* Asynchronous servers see T updates per global step. */
    int64_t step = t->mode == DL_DIST_PS_ASYNC ? update / t->T : update;
    return dl_lr_at(&t->hp, step, t->steps_per_epoch, t->total_steps);
}

/* A parameter-server rank: the model only provides the initial values. */
static dl_status serve_shard(trainer *t, dl_err *err)
{
    int64_t n;
    float *p = dl_model_params(t->s.m, &n);
    t->s.be->ops->download(t->s.be, t->host, p, (size_t)n * sizeof(float));
    dl_ps_stats stats;
    return dl_ps_serve(t->d, t->s.be, &t->hp, t->host, &t->lay, server_lr, t, &stats, err);
}

static dl_status check_options(const trainer *t, dl_err *err)
{
    const dl_run_opts *o = t->o;
    const dl_dist_conf *dc = dl_dist_conf_of(t->d);
    if (o->checkpoint_every > 0 && is_ps(t))
        return dl_err_set(err, DL_ERR_INVALID,
                          "--checkpoint-every: checkpoints cover allreduce and avg; "
                          "parameter servers keep their optimizer state to themselves");
    if (o->checkpoint_every > 0 && t->mode == DL_DIST_AVG && o->checkpoint_every % dc->avg_k)
        return dl_err_set(err, DL_ERR_INVALID,
                          "--checkpoint-every %lld must be a multiple of K = %d (avg:K)",
                          (long long)o->checkpoint_every, dc->avg_k);
    if (o->resume && is_ps(t))
        return dl_err_set(err, DL_ERR_INVALID, "--resume: not available with parameter servers");
    return DL_OK;
}

static dl_status train_job(trainer *t, dl_err *err)
{
    const dl_run_opts *o = t->o;
    dl_status st = check_options(t, err);
    /* --model-version V: fine-tune, starting from that version's weights. */
    if (st == DL_OK && o->version > 0 && !o->resume)
        st = session_load_weights(&t->s, o, err);
    if (st == DL_OK && dl_dist_is_server(t->d))
        return serve_shard(t, err);
    if (st == DL_OK && o->resume)
        st = resume(t, err);
    if (st != DL_OK)
        return st;
    if (t->mode == DL_DIST_AVG)
        avg_anchor(t);
    t->bar = dl_dist_rank(t->d) == 0 &&
             (o->progress == 1 || (o->progress < 0 && isatty(STDERR_FILENO)));
    DL_LOG0(DL_LOG_INFO, "train",
            "%s: %lld train / %lld test samples, %lld epochs of %lld steps, batch %lld x %d "
            "trainer%s, %s lr %g, %d thread%s per rank, convolution through %s",
            t->s.conf->name,
            (long long)t->train->n, (long long)t->test->n, (long long)t->hp.epochs,
            (long long)t->steps_per_epoch, (long long)t->hp.batch_size, t->T,
            t->T > 1 ? "s" : "", dl_optim_name(t->hp.optimizer), t->hp.lr,
            t->s.be->threads, t->s.be->threads > 1 ? "s" : "",
            dl_backend_conv_engine(t->s.be));
    dl_epoch_stats *es = calloc((size_t)t->hp.epochs, sizeof(*es));
    if (!es)
        return dl_err_set(err, DL_ERR_NOMEM, "epoch table");
    double t0 = dl_time_now();
    epoch_ctx ec = { .epoch = t->step / t->steps_per_epoch,
                     .first = t->step % t->steps_per_epoch };
    int nepochs = 0;
    bool stop = false;
    for (; ec.epoch < t->hp.epochs && st == DL_OK && !stop; ec.epoch++)
        if ((st = run_epoch(t, &ec, &es[nepochs], &stop, err)) == DL_OK)
            report_event(t, &es[nepochs++], 0, NULL);
    if (st == DL_OK && stop) {
        st = checkpoint(t, err);
        if (is_ps(t) && st == DL_OK)
            st = gather_final(t, err);
        if (st == DL_OK && dl_dist_rank(t->d) == 0)
            printf("{\"model\":\"%s\",\"stopped_at_step\":%lld,\"total_steps\":%lld}\n",
                   t->s.conf->name, (long long)t->step, (long long)t->total_steps);
    } else if (st == DL_OK) {
        st = finish(t, es, nepochs, t0, ec.train_seconds, err);
    }
    free(es);
    return st;
}

dl_status dl_train_run(const dl_run_opts *o, dl_err *err)
{
    dl_dist *d;
    dl_status st = dl_dist_new(&o->dist, NULL, NULL, &d, err);
    if (st != DL_OK)
        return st;
    trainer t;
    st = trainer_open(&t, o, d, true, err);
    if (st == DL_OK) {
        st = train_job(&t, err);
        trainer_close(&t);
    }
    if (st != DL_OK && dl_dist_size(d) > 1) {
        /* The other ranks would wait for this one: end the job. */
        DL_LOG(DL_LOG_ERR, "train", "%s", err ? err->msg : "failed");
        fflush(stderr);
        dl_dist_abort(d, 1);
    }
    dl_dist_free(d);
    return st;
}

dl_status dl_bench_run(const dl_run_opts *o, dl_err *err)
{
    dl_dist *d;
    dl_dist_conf one = { .mode = DL_DIST_ALLREDUCE, .avg_k = 1, .stall_timeout = 300 };
    dl_status st = dl_dist_new(&one, NULL, NULL, &d, err);
    if (st != DL_OK)
        return st;
    trainer t;
    st = trainer_open(&t, o, d, true, err);
    if (st != DL_OK) {
        dl_dist_free(d);
        return st;
    }
    dl_data_permutation(t.hp.seed, 0, t.train->n, t.perm);
    double loss = 0.0, t0 = 0.0;
    int64_t correct = 0, warm = 5, seen = 0, timed = 0;
    int64_t steps = o->steps > 0 ? o->steps : 50;
    for (int64_t s = 0; s < warm + steps && st == DL_OK; s++) {
        if (s == warm) {
            t0 = dl_time_now();
            timed = seen;
        }
        st = train_step(&t, s % t.steps_per_epoch, &loss, &correct, &seen, err);
    }
    double train_rate = (double)(seen - timed) / (dl_time_now() - t0);
    int64_t n = t.test->n, out = dl_model_served_out_dim(t.s.m);
    float *probs = malloc((size_t)(n * out) * sizeof(float));
    if (st == DL_OK && !probs)
        st = dl_err_set(err, DL_ERR_NOMEM, "predictions");
    if (st == DL_OK)   /* warm-up batches size the buffers */
        st = dl_model_predict(t.s.m, t.test->x, n < 1024 ? n : 1024, 256, probs, err);
    /* Whole passes over the test set until a second has passed, as the
     * PyTorch peer of tests/bench/cpu_vs_torch measures. */
    double t1 = dl_time_now(), secs = 0.0;
    int64_t passes = 0;
    while (st == DL_OK && secs < 1.0 && passes < 1000) {
        st = dl_model_predict(t.s.m, t.test->x, n, 256, probs, err);
        passes++;
        secs = dl_time_now() - t1;
    }
    double infer_rate = (double)(passes * n) / (secs > 0 ? secs : 1e-9);
    dl_act_sizes a = dl_model_act_sizes(t.s.m);
    const double mib256 = 256.0 * sizeof(float) / (1024.0 * 1024.0);
    if (st == DL_OK)
        printf("{\"model\":\"%s\",\"threads\":%d,\"conv\":\"%s\",\"blas\":\"%s\","
               "\"batch_size\":%lld,"
               "\"steps\":%lld,\"train_samples_per_sec\":%.1f,\"infer_batch_size\":256,"
               "\"infer_samples_per_sec\":%.1f,\"act_mib_batch256\":{\"infer\":%.2f,"
               "\"train\":%.2f,\"grads\":%.2f,\"all\":%.2f}}\n",
               t.s.conf->name, t.s.be->threads, dl_backend_conv_engine(t.s.be),
               dl_blas_core_name(),
               (long long)t.hp.batch_size, (long long)steps, train_rate, infer_rate,
               a.infer * mib256, a.train * mib256, a.grads * mib256, a.all * mib256);
    free(probs);
    trainer_close(&t);
    dl_dist_free(d);
    return st;
}
