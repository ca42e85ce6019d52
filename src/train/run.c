/* run.c: `dlserve --eval` (each output's figures of a version on the test
 * split), `dlserve --predict` (class, label and score per input sample, or
 * every output's values, a class a token of per-token ones) and
 * `dlserve --bench --infer-batch` (inference throughput per batch size). */
#define _POSIX_C_SOURCE 200809L
#include "train/session.h"


#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

/* Output k's figures in the --eval line: the accuracy of a classifier
 * (over the tokens of a per-token one), with the perplexity of a
 * next_token output; the MSE and RMSE of a graph model's MSE output. */
static void print_metrics(const session *s, int k)
{
    const dl_output_conf *o = &s->conf->outputs[k];
    if (o->loss == DL_LOSS_MSE && s->conf->graph)
        printf("\"mse\":%.4f,\"rmse\":%.4f", s->out_mse[k], s->out_rmse[k]);
    else
        printf("\"accuracy\":%.4f", s->out_acc[k]);
    if (o->loss == DL_LOSS_NEXT_TOKEN)
        printf(",\"perplexity\":%.4f", s->out_ppl[k]);
}

/* The --eval line of a model with several outputs: the total loss and
 * each output's loss with its figures (print_metrics). */
static void print_outputs(const session *s, double loss, int64_t n, double rate)
{
    printf("{\"model\":\"%s\",\"version\":%lld,\"loss\":%.4f,\"outputs\":{",
           s->conf->name, (long long)s->version, loss);
    for (int k = 0; k < s->conf->noutputs; k++) {
        const dl_output_conf *o = &s->conf->outputs[k];
        printf("%s\"%s\":{\"loss\":%.4f,", k ? "," : "", o->name, s->out_loss[k]);
        print_metrics(s, k);
        printf("}");
    }
    printf("},\"samples\":%lld,\"samples_per_sec\":%.0f}\n", (long long)n, rate);
}

dl_status dl_eval_run(const dl_run_opts *o, dl_err *err)
{
    session s;
    dl_status st = session_open(&s, o, 1, true, err);
    if (st != DL_OK)
        return st;
    dl_dataset *test = NULL;
    st = session_load_weights(&s, o, err);
    if (st == DL_OK) {
        session_serve(&s, o);
        st = session_data(&s, o, "test", &test, err);
    }
    double loss = 0.0, acc = 0.0, t0 = dl_time_now();
    if (st == DL_OK)
        st = session_evaluate(&s, test, 256, &loss, &acc, err);
    double rate = st == DL_OK ? (double)test->n / (dl_time_now() - t0) : 0.0;
    if (st == DL_OK && s.conf->noutputs > 1)
        print_outputs(&s, loss, test->n, rate);
    else if (st == DL_OK) {
        printf("{\"model\":\"%s\",\"version\":%lld,", s.conf->name, (long long)s.version);
        print_metrics(&s, 0);
        printf(",\"loss\":%.4f,\"samples\":%lld,\"samples_per_sec\":%.0f}\n", loss,
               (long long)test->n, rate);
    }
    dl_dataset_free(test);
    session_close(&s);
    return st;
}

/* Standard input is copied to a temporary file so both readers apply. */
static dl_status stdin_to_file(char *path, size_t len, dl_err *err)
{
    snprintf(path, len, "/tmp/dlserve-predict-XXXXXX");
    int fd = mkstemp(path);
    if (fd < 0)
        return dl_err_set(err, DL_ERR_IO, "cannot create a temporary file");
    char buf[65536];
    size_t n;
    dl_status st = DL_OK;
    while ((n = fread(buf, 1, sizeof(buf), stdin)) > 0)
        if (write(fd, buf, n) != (ssize_t)n)
            st = dl_err_set(err, DL_ERR_IO, "%s: short write", path);
    close(fd);
    return st;
}

/* Whether the model has a sequence input (read from JSON Lines only). */
static bool has_sequence(const dl_model_conf *c)
{
    for (int k = 0; k < c->ninputs; k++)
        if (c->inputs[k].max_length > 0)
            return true;
    return false;
}

/* IDX if the file starts like one (plain or gzip'd), JSON Lines if its
 * first byte after white space is '{', CSV otherwise; a model of several
 * inputs reads CSV lines of each input's values. */
static dl_status load_input(const char *path, const session *s, dl_dataset **out,
                            dl_err *err)
{
    FILE *f = fopen(path, "rb");
    if (!f)
        return dl_err_set(err, DL_ERR_IO, "%s: cannot open", path);
    unsigned char head[64] = {0};
    size_t got = fread(head, 1, sizeof(head), f), at = 0;
    fclose(f);
    bool idx = got >= 2 && ((head[0] == 0x1f && head[1] == 0x8b) ||
                            (got >= 4 && head[0] == 0 && head[1] == 0 && head[2] == 0x08));
    if (got >= 3 && !memcmp(head, "\xef\xbb\xbf", 3))    /* a UTF-8 BOM */
        at = 3;
    while (at < got && (head[at] == ' ' || head[at] == '\t' || head[at] == '\r' ||
                        head[at] == '\n'))
        at++;
    if (!idx && at < got && head[at] == '{')
        return dl_dataset_load_jsonl_inputs(path, s->conf, out, err);
    if (has_sequence(s->conf))
        return dl_err_set(err, DL_ERR_INVALID, "%s: model '%s' reads sequences: give JSON "
                          "Lines, an object a line", path, s->conf->name);
    int64_t dim = dl_model_in_dim(s->m);
    if (s->conf->ninputs > 1)
        return idx ? dl_err_set(err, DL_ERR_INVALID, "%s: IDX images feed one input; model "
                                "'%s' has %d: give CSV lines of each input's values",
                                path, s->conf->name, s->conf->ninputs)
                   : dl_dataset_load_csv_inputs(path, s->conf, out, err);
    dl_status st = idx ? dl_dataset_load_idx(path, NULL, &s->sc, out, err)
                       : dl_dataset_load_csv(path, dim, false, &s->sc, out, err);
    if (st == DL_OK && (*out)->dim != dim) {
        st = dl_err_set(err, DL_ERR_INVALID, "%s: samples have %lld values, model '%s' takes %lld",
                        path, (long long)(*out)->dim, s->conf->name, (long long)dim);
        dl_dataset_free(*out);
        *out = NULL;
    }
    return st;
}

/* The length of the sequence that output o of a sample runs over: its
 * input's, read from the sample's packed row x. */
static int64_t output_length(const dl_model_conf *c, const dl_output_conf *o, const float *x)
{
    int s = c->tseq[c->ninputs + o->from];
    int64_t at = 0;
    for (int k = 0; k < s; k++)
        at += dl_input_width(&c->inputs[k]);
    return s >= 0 ? (int64_t)x[at] : o->max_length;
}

/* A per-token output's answer at each of the sample's positions: the
 * top class of a softmax a position, or a crf's tag on its Viterbi path
 * (as served, dl_model_predict_multi); its label where the output has
 * labels. */
static void print_tokens(dl_sbuf *b, const dl_output_conf *o, const float *p, int64_t len)
{
    int64_t classes = o->dim / o->max_length;
    dl_sbuf_putc(b, '[');
    for (int64_t t = 0; t < len; t++) {
        int64_t best = o->loss == DL_LOSS_CRF ? (int64_t)p[t]
                                              : dl_argmax(p + t * classes, classes);
        if (t)
            dl_sbuf_putc(b, ',');
        if (best >= 0 && best < o->nlabels)
            dl_sbuf_json_string(b, o->labels[best]);
        else
            dl_sbuf_int(b, best);
    }
    dl_sbuf_putc(b, ']');
}

/* A prediction line: the class, its label and its probability for a
 * model of one classifier output; else every output by name: a
 * per-token output's classes (print_tokens), the values of the others.
 * x is the sample's packed inputs, p its outputs side by side. */
static void print_prediction(const dl_model_conf *c, int64_t i, const float *x, const float *p,
                             int64_t k)
{
    if (c->noutputs == 1 && (!c->graph || c->outputs[0].loss == DL_LOSS_XENT) &&
        c->outputs[0].max_length == 0) {
        int64_t best = dl_argmax(p, k);
        printf("{\"index\":%lld,\"class\":%lld,\"label\":\"%s\",\"score\":%.4f}\n",
               (long long)i, (long long)best, best < c->nlabels ? c->labels[best] : "",
               p[best]);
        return;
    }
    dl_sbuf b = {0};
    dl_sbuf_printf(&b, "{\"index\":%lld,\"outputs\":{", (long long)i);
    for (int o = 0; o < c->noutputs; p += c->outputs[o++].served) {
        const dl_output_conf *oc = &c->outputs[o];
        dl_sbuf_printf(&b, "%s\"%s\":", o ? "," : "", oc->name);
        if (oc->max_length > 0) {
            print_tokens(&b, oc, p, output_length(c, oc, x));
            continue;
        }
        dl_sbuf_putc(&b, '[');
        for (int64_t j = 0; j < oc->served; j++) {
            if (j)
                dl_sbuf_putc(&b, ',');
            char num[DL_FLOAT_CHARS];
            dl_sbuf_add(&b, num, dl_fmt_float(num, p[j]));
        }
        dl_sbuf_putc(&b, ']');
    }
    dl_sbuf_add(&b, "}}\n", 3);
    if (!b.oom)
        fputs(b.s, stdout);
    dl_sbuf_free(&b);
}

dl_status dl_predict_run(const dl_run_opts *o, dl_err *err)
{
    session s;
    dl_status st = session_open(&s, o, 1, true, err);
    if (st != DL_OK)
        return st;
    char tmp[64] = "";
    const char *path = o->input ? o->input : "-";
    dl_dataset *ds = NULL;
    float *out = NULL;
    st = session_load_weights(&s, o, err);
    if (st == DL_OK)
        session_serve(&s, o);
    if (st == DL_OK && strcmp(path, "-") == 0) {
        st = stdin_to_file(tmp, sizeof(tmp), err);
        path = tmp;
    }
    if (st == DL_OK)
        st = load_input(path, &s, &ds, err);
    if (st == DL_OK) {
        dl_dataset_truncate(ds, o->limit);
        int64_t k = dl_model_served_out_dim(s.m);
        out = malloc((size_t)(ds->n * k + 1) * sizeof(float));
        st = out ? dl_model_predict(s.m, ds->x, ds->n, 256, out, err)
                 : dl_err_set(err, DL_ERR_NOMEM, "predictions");
        for (int64_t i = 0; st == DL_OK && i < ds->n; i++)
            print_prediction(s.conf, i, ds->x + i * ds->dim, out + i * k, k);
    }
    if (tmp[0])
        unlink(tmp);
    free(out);
    dl_dataset_free(ds);
    session_close(&s);
    return st;
}

/* ---- --bench --infer-batch ------------------------------------------------ */

/* Parses "1,64,1024" into at most max sizes; returns their number, 0 for a
 * malformed list. */
static int parse_batches(const char *s, int64_t *out, int max)
{
    int n = 0;
    while (s && *s && n < max) {
        char *end;
        errno = 0;
        long long v = strtoll(s, &end, 10);
        if (errno || end == s || v < 1 || v > (1 << 24) || (*end && *end != ','))
            return 0;
        out[n++] = v;
        s = *end ? end + 1 : end;
    }
    return s && *s ? 0 : n;
}

typedef struct infer_bench {
    session       *s;
    const float   *x;        /* backend memory, batch * in_dim */
    int64_t        batch;
    dl_graph      *graph;    /* NULL: eager */
    const float   *y;        /* the last forward's output */
} infer_bench;

static dl_status infer_once(infer_bench *b, dl_err *err)
{
    if (b->graph)
        return dl_graph_launch(b->s->be, b->graph, err);
    return dl_model_forward(b->s->m, b->x, b->batch, false, &b->y, err);
}

/* Waits for the device: a one-float download returns when all is done. */
static void infer_sync(infer_bench *b)
{
    float probe;
    b->s->be->ops->download(b->s->be, &probe, b->y, sizeof(probe));
}

/* Runs enough passes for about 0.3 s (at least 3) after one to calibrate;
 * *rate is samples/s. */
static dl_status infer_time(infer_bench *b, double *rate, int64_t *iters, double *secs,
                            dl_err *err)
{
    double t0 = dl_time_now();
    dl_status st = infer_once(b, err);
    infer_sync(b);
    double one = dl_time_now() - t0;
    int64_t n = one > 0 ? (int64_t)(0.3 / one) : 100000;
    n = n < 3 ? 3 : n > 100000 ? 100000 : n;
    t0 = dl_time_now();
    for (int64_t i = 0; i < n && st == DL_OK; i++)
        st = infer_once(b, err);
    infer_sync(b);
    if (st == DL_OK)
        st = dl_backend_sync(b->s->be, err);   /* latched GPU errors; DL_OK on the CPU */
    *secs = dl_time_now() - t0;
    *iters = n;
    *rate = (double)(n * b->batch) / *secs;
    return st;
}

static void infer_print(const session *s, const dl_run_opts *o, const char *mode,
                        int64_t batch, int64_t iters, double secs, double rate)
{
    printf("{\"model\":\"%s\",\"device\":\"%s\",\"math\":\"%s\",\"mode\":\"%s\",\"batch\":%lld,"
           "\"iters\":%lld,\"seconds\":%.3f,\"infer_samples_per_sec\":%.1f}\n",
           s->conf->name, o->device ? o->device : "cpu", o->tf32 ? "tf32" : "fp32", mode,
           (long long)batch, (long long)iters, secs, rate);
    fflush(stdout);
}

/* Fills a batch of inputs: the test set tiled, or without one (no --data)
 * seeded values in [0, 1) for FP32 inputs, id 0 for ids, and every
 * sequence at its max_length (what a batch costs most). */
static void infer_fill(float *hx, const dl_model_conf *conf, const dl_dataset *test,
                       int64_t batch, int64_t dim)
{
    uint32_t r = 12345u;
    for (int64_t i = 0; i < batch && !test; i++) {
        float *row = hx + i * dim;
        for (int k = 0; k < conf->ninputs; k++) {
            const dl_input_conf *ic = &conf->inputs[k];
            int64_t at = ic->max_length > 0;
            if (at)
                row[0] = (float)ic->max_length;
            for (int64_t j = 0; j < ic->dim; j++) {
                r = r * 1664525u + 1013904223u;
                row[at + j] = ic->dtype == DL_IN_FP32 ? (float)(r >> 8) / 16777216.0f : 0.0f;
            }
            row += dl_input_width(ic);
        }
    }
    for (int64_t i = 0; i < batch && test; i++)
        memcpy(hx + i * dim, test->x + (i % test->n) * dim, (size_t)dim * sizeof(float));
}

/* One batch size: the input filled by infer_fill, eager, then graph. */
static dl_status infer_batch(session *s, const dl_run_opts *o, const dl_dataset *test,
                             int64_t batch, dl_err *err)
{
    dl_backend *be = s->be;
    int64_t dim = test ? test->dim : dl_model_in_dim(s->m);
    float *hx = malloc((size_t)(batch * dim) * sizeof(float)), *x = NULL;
    if (!hx)
        return dl_err_set(err, DL_ERR_NOMEM, "bench input");
    infer_fill(hx, s->conf, test, batch, dim);
    dl_status st = be->ops->alloc(be, (size_t)(batch * dim) * sizeof(float), (void **)&x, err);
    if (st == DL_OK)
        be->ops->upload(be, x, hx, (size_t)(batch * dim) * sizeof(float));
    free(hx);
    infer_bench b = { .s = s, .x = x, .batch = batch };
    /* Warm-up: sizes the model's buffers and the pool. */
    for (int i = 0; i < 2 && st == DL_OK; i++)
        st = infer_once(&b, err);
    double rate, secs;
    int64_t iters;
    if (st == DL_OK)
        infer_sync(&b);
    if (st == DL_OK && (st = infer_time(&b, &rate, &iters, &secs, err)) == DL_OK)
        infer_print(s, o, "eager", batch, iters, secs, rate);
    if (st == DL_OK && dl_backend_can_record(be)) {
        /* The forward pass recorded once, replayed as one launch. */
        st = dl_graph_begin(be, err);
        if (st == DL_OK) {
            dl_status fw = dl_model_forward(s->m, x, batch, false, &b.y, err);
            st = dl_graph_end(be, &b.graph, err);
            st = fw != DL_OK ? fw : st;
        }
        if (st == DL_OK && (st = infer_time(&b, &rate, &iters, &secs, err)) == DL_OK)
            infer_print(s, o, "graph", batch, iters, secs, rate);
        dl_graph_free(be, b.graph);
    }
    if (x)
        be->ops->release(be, x);
    return st;
}

dl_status dl_bench_infer_run(const dl_run_opts *o, dl_err *err)
{
    int64_t batches[32];
    int nb = parse_batches(o->infer_batches, batches, 32);
    if (nb == 0)
        return dl_err_set(err, DL_ERR_INVALID,
                          "--infer-batch '%s': expected batch sizes such as 1,64,1024",
                          o->infer_batches ? o->infer_batches : "");
    session s;
    dl_status st = session_open(&s, o, 1, true, err);
    if (st != DL_OK)
        return st;
    session_serve(&s, o);
    dl_dataset *test = NULL;
    if (o->data_dir)
        st = session_data(&s, o, "test", &test, err);
    if (st == DL_OK && test && test->n == 0)
        st = dl_err_set(err, DL_ERR_INVALID, "no test samples to run");
    for (int i = 0; i < nb && st == DL_OK; i++)
        st = infer_batch(&s, o, test, batches[i], err);
    dl_dataset_free(test);
    session_close(&s);
    return st;
}
