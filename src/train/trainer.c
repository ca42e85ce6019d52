/* trainer.c: the training loop of `dlserve --train`: shuffled, sharded
 * mini-batches, forward, loss, backward, optimizer step, per-epoch
 * evaluation, progress display, and the new version folder. */
#define _POSIX_C_SOURCE 200809L
#include "train/report.h"
#include "train/session.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

typedef struct trainer {
    session     s;
    dl_hparams  hp;
    dl_optim   *opt;
    dl_dataset *train, *test;
    int64_t    *perm, *idx;
    float      *hx, *x;          /* host batch and backend batch */
    int32_t    *hy;
    int64_t     steps_per_epoch, total_steps, step;
    bool        bar;
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
    if (o->optimizer >= 0)
        hp->optimizer = (dl_optim_kind)o->optimizer;
    if (o->nesterov >= 0)
        hp->nesterov = o->nesterov;
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
    if (t->x)
        t->s.be->ops->release(t->s.be, t->x);
    session_close(&t->s);
}

static dl_status trainer_open(trainer *t, const dl_run_opts *o, bool need_test,
                              dl_err *err)
{
    memset(t, 0, sizeof(*t));
    dl_model_conf *probe;
    dl_status st = dl_model_conf_load(o->model_dir, &probe, err);
    if (st != DL_OK)
        return st;
    t->hp = probe->train;
    dl_model_conf_free(probe);
    apply_overrides(&t->hp, o);
    if ((st = session_open(&t->s, o, t->hp.seed, err)) != DL_OK)
        return st;
    st = session_data(&t->s, o, "train", &t->train, err);
    if (st == DL_OK && need_test)
        st = session_data(&t->s, o, "test", &t->test, err);
    int64_t nparams, b = t->hp.batch_size, dim = dl_model_in_dim(t->s.m);
    dl_model_params(t->s.m, &nparams);
    if (st == DL_OK)
        st = dl_optim_new(t->s.be, &t->hp, nparams, &t->opt, err);
    if (st == DL_OK)
        st = t->s.be->ops->alloc(t->s.be, (size_t)(b * dim) * sizeof(float),
                                 (void **)&t->x, err);
    if (st == DL_OK) {
        t->perm = malloc((size_t)t->train->n * sizeof(*t->perm));
        t->idx = malloc((size_t)b * sizeof(*t->idx));
        t->hx = malloc((size_t)(b * dim) * sizeof(float));
        t->hy = malloc((size_t)b * sizeof(int32_t));
        if (!t->perm || !t->idx || !t->hx || !t->hy)
            st = dl_err_set(err, DL_ERR_NOMEM, "batch buffers");
    }
    if (st != DL_OK) {
        trainer_close(t);
        return st;
    }
    t->steps_per_epoch = dl_data_steps(t->train->n, b);
    t->total_steps = t->steps_per_epoch * t->hp.epochs;
    return DL_OK;
}

/* One optimizer step on positions [begin, begin + count) of the epoch's
 * permutation. Adds the batch's summed loss and correct count. */
static dl_status train_step(trainer *t, int64_t begin, int64_t count,
                            double *loss, int64_t *correct, dl_err *err)
{
    dl_backend *be = t->s.be;
    for (int64_t i = 0; i < count; i++)
        t->idx[i] = t->perm[begin + i];
    dl_data_gather(t->train, t->idx, count, t->hx, t->hy);
    be->ops->upload(be, t->x, t->hx, (size_t)(count * t->train->dim) * sizeof(float));
    dl_model_zero_grad(t->s.m);
    const float *y;
    double l;
    int64_t c;
    dl_status st = dl_model_forward(t->s.m, t->x, count, true, &y, err);
    if (st == DL_OK)
        st = dl_model_loss(t->s.m, t->hy, NULL, 1.0f / (float)count, true, &l, &c, err);
    if (st == DL_OK)
        st = dl_model_backward(t->s.m, err);
    if (st != DL_OK)
        return st;
    int64_t np;
    float *p = dl_model_params(t->s.m, &np), *g = dl_model_grads(t->s.m, &np);
    dl_optim_step(t->opt, p, g, dl_lr_at(&t->hp, t->step, t->steps_per_epoch, t->total_steps));
    t->step++;
    *loss += l;
    *correct += c;
    return DL_OK;
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

static dl_status run_epoch(trainer *t, int64_t epoch, dl_epoch_stats *es,
                           double *train_seconds, dl_err *err)
{
    dl_data_permutation(t->hp.seed, epoch, t->train->n, t->perm);
    double loss = 0.0, t0 = dl_time_now(), last_draw = 0.0;
    int64_t correct = 0, seen = 0;
    for (int64_t s = 0; s < t->steps_per_epoch; s++) {
        int64_t begin, count;
        dl_data_shard(t->train->n, t->hp.batch_size, 0, 1, s, &begin, &count);
        dl_status st = train_step(t, begin, count, &loss, &correct, err);
        if (st != DL_OK)
            return st;
        seen += count;
        double now = dl_time_now();
        if (t->bar && (now - last_draw > 0.1 || s + 1 == t->steps_per_epoch)) {
            double rate = (double)seen / (now - t0);
            double left = (double)(t->total_steps - t->step) * t->hp.batch_size / rate;
            show_bar(t, epoch + 1, s, loss / (double)seen, (double)correct / (double)seen,
                     rate, left);
            last_draw = now;
        }
    }
    double secs = dl_time_now() - t0;
    *train_seconds += secs;
    *es = (dl_epoch_stats){ .epoch = (int)epoch + 1,
        .lr = dl_lr_at(&t->hp, t->step - 1, t->steps_per_epoch, t->total_steps),
        .train_loss = loss / (double)seen, .train_accuracy = (double)correct / (double)seen,
        .test_loss = -1.0, .test_accuracy = -1.0,
        .samples_per_sec = (double)seen / secs, .seconds = secs };
    if (t->test && t->test->n > 0) {
        dl_status st = session_evaluate(&t->s, t->test, 1024, &es->test_loss,
                                        &es->test_accuracy, err);
        if (st != DL_OK)
            return st;
    }
    es->seconds = dl_time_now() - t0;
    if (t->bar)
        fprintf(stderr, "\n");
    DL_LOG(DL_LOG_INFO, "train",
           "epoch %d/%lld loss %.4f acc %.4f test_loss %.4f test_acc %.4f lr %.3g %.0f samples/s %.1fs",
           es->epoch, (long long)t->hp.epochs, es->train_loss, es->train_accuracy,
           es->test_loss, es->test_accuracy, es->lr, es->samples_per_sec, es->seconds);
    return DL_OK;
}

/* Writes the version folder: weights, metrics.csv, curves.svg. */
static dl_status write_version(trainer *t, const dl_run_opts *o, int64_t version,
                               const dl_epoch_stats *es, int n, const char *summary,
                               char *weights, size_t wlen, dl_err *err)
{
    char dir[4096], path[4200], title[256];
    snprintf(dir, sizeof(dir), "%s/%lld", o->model_dir, (long long)version);
    dl_status st = dl_mkdir(dir, err);
    if (st != DL_OK)
        return st;
    snprintf(weights, wlen, "%s/model.safetensors", dir);
    if ((st = dl_model_save(t->s.m, weights, summary, err)) != DL_OK)
        return st;
    snprintf(path, sizeof(path), "%s/metrics.csv", dir);
    if ((st = dl_report_write_csv(path, es, n, err)) != DL_OK)
        return st;
    snprintf(path, sizeof(path), "%s/curves.svg", dir);
    snprintf(title, sizeof(title), "%s version %lld", t->s.conf->name, (long long)version);
    return dl_report_write_svg(path, title, es, n, err);
}

dl_status dl_train_run(const dl_run_opts *o, dl_err *err)
{
    trainer t;
    dl_status st = trainer_open(&t, o, true, err);
    if (st != DL_OK)
        return st;
    t.bar = o->progress == 1 || (o->progress < 0 && isatty(STDERR_FILENO));
    DL_LOG(DL_LOG_INFO, "train", "%s: %lld train / %lld test samples, %lld epochs of %lld steps, "
           "batch %lld, %s lr %g, %d threads", t.s.conf->name, (long long)t.train->n,
           (long long)t.test->n, (long long)t.hp.epochs, (long long)t.steps_per_epoch,
           (long long)t.hp.batch_size, dl_optim_name(t.hp.optimizer), t.hp.lr, t.s.be->threads);
    dl_epoch_stats *es = calloc((size_t)t.hp.epochs, sizeof(*es));
    if (!es) {
        trainer_close(&t);
        return dl_err_set(err, DL_ERR_NOMEM, "epoch table");
    }
    double train_seconds = 0.0, t0 = dl_time_now();
    for (int64_t e = 0; e < t.hp.epochs && st == DL_OK; e++)
        st = run_epoch(&t, e, &es[e], &train_seconds, err);
    if (st == DL_OK) {
        const dl_epoch_stats *last = &es[t.hp.epochs - 1];
        int64_t version = dl_repo_next(o->model_dir);
        double rate = (double)(t.train->n * t.hp.epochs) / train_seconds;
        char summary[1024], weights[4200];
        snprintf(summary, sizeof(summary),
                 "{\"model\":\"%s\",\"version\":%lld,\"epochs\":%lld,\"batch_size\":%lld,"
                 "\"optimizer\":\"%s\",\"lr\":%g,\"seed\":%llu,\"train_loss\":%.6f,"
                 "\"train_accuracy\":%.6f,\"test_accuracy\":%.6f,\"samples_per_sec\":%.1f,"
                 "\"seconds\":%.2f}",
                 t.s.conf->name, (long long)version, (long long)t.hp.epochs,
                 (long long)t.hp.batch_size, dl_optim_name(t.hp.optimizer), t.hp.lr,
                 (unsigned long long)t.hp.seed, last->train_loss, last->train_accuracy,
                 last->test_accuracy, rate, dl_time_now() - t0);
        st = write_version(&t, o, version, es, (int)t.hp.epochs, summary, weights,
                           sizeof(weights), err);
        if (st == DL_OK)
            printf("{\"model\":\"%s\",\"version\":%lld,\"path\":\"%s\",\"epochs\":%lld,"
                   "\"train_loss\":%.4f,\"test_accuracy\":%.4f,\"samples_per_sec\":%.0f,"
                   "\"seconds\":%.1f}\n",
                   t.s.conf->name, (long long)version, weights, (long long)t.hp.epochs,
                   last->train_loss, last->test_accuracy, rate, dl_time_now() - t0);
    }
    free(es);
    trainer_close(&t);
    return st;
}

dl_status dl_bench_run(const dl_run_opts *o, dl_err *err)
{
    trainer t;
    dl_status st = trainer_open(&t, o, true, err);
    if (st != DL_OK)
        return st;
    dl_data_permutation(t.hp.seed, 0, t.train->n, t.perm);
    double loss = 0.0, t0 = 0.0;
    int64_t correct = 0, warm = 5, seen = 0;
    for (int64_t s = 0; s < warm + o->steps && st == DL_OK; s++) {
        if (s == warm)
            t0 = dl_time_now();
        int64_t begin, count;
        dl_data_shard(t.train->n, t.hp.batch_size, 0, 1, s % t.steps_per_epoch, &begin, &count);
        st = train_step(&t, begin, count, &loss, &correct, err);
        if (s >= warm)
            seen += count;
    }
    double train_rate = (double)seen / (dl_time_now() - t0);
    int64_t n = t.test->n, out = dl_model_out_dim(t.s.m);
    float *probs = malloc((size_t)(n * out) * sizeof(float));
    if (st == DL_OK && !probs)
        st = dl_err_set(err, DL_ERR_NOMEM, "predictions");
    if (st == DL_OK)   /* warm-up pass sizes the buffers */
        st = dl_model_predict(t.s.m, t.test->x, 256, 256, probs, err);
    double t1 = dl_time_now();
    if (st == DL_OK)
        st = dl_model_predict(t.s.m, t.test->x, n, 256, probs, err);
    double infer_rate = (double)n / (dl_time_now() - t1);
    if (st == DL_OK)
        printf("{\"model\":\"%s\",\"threads\":%d,\"batch_size\":%lld,\"steps\":%lld,"
               "\"train_samples_per_sec\":%.1f,\"infer_batch_size\":256,"
               "\"infer_samples_per_sec\":%.1f}\n",
               t.s.conf->name, t.s.be->threads, (long long)t.hp.batch_size,
               (long long)o->steps, train_rate, infer_rate);
    free(probs);
    trainer_close(&t);
    return st;
}
