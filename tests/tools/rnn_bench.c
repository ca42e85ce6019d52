/* rnn_bench.c: training and inference throughput of a recurrent classifier
 * (embedding, lstm or gru returning its last state, dense, softmax
 * cross-entropy) or, with --crf, of a tagger (embedding, lstm or gru over
 * the sequence, dense a position, a linear-chain CRF) on random id
 * sequences, in tokens/s; tests/bench/rnn_vs_torch runs it beside
 * PyTorch's peer (tests/bench/rnn_vs_torch.py).
 *
 *   rnn_bench [--cell lstm|gru] [--embed E] [--hidden H] [--layers K]
 *             [--bidirectional] [--crf] [--maxlen T] [--minlen M] [--batch B]
 *             [--steps S] [--threads N] [--vocab V] [--classes C]
 *
 * Lengths are uniform in [minlen, maxlen] (seeded: the peer draws the same
 * ones); tokens/s counts valid positions. Prints one JSON line. */
#define _POSIX_C_SOURCE 200809L
#include <getopt.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "nn/dl_nn.h"

typedef struct opts {
    const char *cell;
    int embed, hidden, layers, maxlen, minlen, batch, steps, threads, vocab, classes;
    bool bidir, crf;
} opts;

static double now(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}

static int die(const char *what, const dl_err *err)
{
    fprintf(stderr, "rnn_bench: %s: %s\n", what, err ? err->msg : "");
    return 1;
}

static bool parse(int argc, char **argv, opts *o)
{
    static const struct option longs[] = {
        {"cell", 1, 0, 'c'}, {"embed", 1, 0, 'e'}, {"hidden", 1, 0, 'h'},
        {"layers", 1, 0, 'k'}, {"maxlen", 1, 0, 't'}, {"minlen", 1, 0, 'm'},
        {"batch", 1, 0, 'b'}, {"steps", 1, 0, 's'}, {"threads", 1, 0, 'n'},
        {"vocab", 1, 0, 'v'}, {"classes", 1, 0, 'C'}, {"bidirectional", 0, 0, 'B'},
        {"crf", 0, 0, 'R'}, {0, 0, 0, 0}};
    *o = (opts){ "lstm", 64, 128, 1, 30, 20, 64, 30, 2, 1000, 10, false, false };
    int c;
    while ((c = getopt_long(argc, argv, "", longs, NULL)) != -1) {
        switch (c) {
        case 'c': o->cell = optarg; break;
        case 'e': o->embed = atoi(optarg); break;
        case 'h': o->hidden = atoi(optarg); break;
        case 'k': o->layers = atoi(optarg); break;
        case 't': o->maxlen = atoi(optarg); break;
        case 'm': o->minlen = atoi(optarg); break;
        case 'b': o->batch = atoi(optarg); break;
        case 's': o->steps = atoi(optarg); break;
        case 'n': o->threads = atoi(optarg); break;
        case 'v': o->vocab = atoi(optarg); break;
        case 'C': o->classes = atoi(optarg); break;
        case 'B': o->bidir = true; break;
        case 'R': o->crf = true; break;
        default: return false;
        }
    }
    return o->minlen >= 1 && o->minlen <= o->maxlen && o->batch > 0 && o->steps > 0;
}

/* One batch of packed samples and labels (a class a sample, or with
 * --crf a tag a position, -1 past the length), from a simple LCG (the
 * peer runs the same one). */
static int64_t make_batch(const opts *o, uint64_t *state, float *x, float *labels)
{
    int64_t tokens = 0, w = 1 + o->maxlen;
    memset(x, 0, sizeof(float) * (size_t)(o->batch * w));
    for (int i = 0; i < o->batch; i++) {
        *state = *state * 6364136223846793005ull + 1442695040888963407ull;
        int len = o->minlen + (int)((*state >> 33) % (uint64_t)(o->maxlen - o->minlen + 1));
        x[i * w] = (float)len;
        for (int k = 0; k < len; k++) {
            *state = *state * 6364136223846793005ull + 1442695040888963407ull;
            x[i * w + 1 + k] = (float)((*state >> 33) % (uint64_t)o->vocab);
        }
        if (!o->crf)
            labels[i] = (float)(i % o->classes);
        for (int k = 0; o->crf && k < o->maxlen; k++)
            labels[i * o->maxlen + k] = k < len ? (float)((i + k) % o->classes) : -1.0f;
        tokens += len;
    }
    return tokens;
}

int main(int argc, char **argv)
{
    /* OpenBLAS's kernels for this CPU, as the dlserve binary picks them */
    const char *core = dl_blas_core_override();
    if (core && setenv("OPENBLAS_CORETYPE", core, 1) == 0)
        execv("/proc/self/exe", argv);
    opts o;
    if (!parse(argc, argv, &o)) {
        fprintf(stderr, "usage: rnn_bench [--cell lstm|gru] [--embed E] [--hidden H] "
                "[--layers K] [--bidirectional] [--crf] [--maxlen T] [--minlen M] [--batch B] "
                "[--steps S] [--threads N] [--vocab V] [--classes C]\n");
        return 2;
    }
    char json[2048];
    snprintf(json, sizeof(json),
             "{\"name\": \"rnn-bench\", \"inputs\": [{\"name\": \"ids\", \"datatype\": "
             "\"INT64\", \"shape\": [-1], \"max_length\": %d}], \"layers\": [{\"name\": "
             "\"emb\", \"type\": \"embedding\", \"num_embeddings\": %d, \"dim\": %d}, "
             "{\"name\": \"rnn\", \"type\": \"%s\", \"hidden\": %d, \"layers\": %d, "
             "\"bidirectional\": %s, \"return\": \"%s\"}, {\"name\": \"cls\", \"type\": "
             "\"dense\", \"units\": %d}], \"outputs\": [{\"name\": \"tags\", \"from\": "
             "\"cls\", \"loss\": \"%s\"}]}",
             o.maxlen, o.vocab, o.embed, o.cell, o.hidden, o.layers, o.bidir ? "true" : "false",
             o.crf ? "sequence" : "last", o.classes, o.crf ? "crf" : "softmax_cross_entropy");
    dl_err err = {0};
    dl_backend *be = NULL;
    dl_model_conf *conf = NULL;
    dl_model *m = NULL;
    dl_optim *opt = NULL;
    dl_backend_params bp = { .threads = o.threads };
    if (dl_backend_new("cpu", &bp, &be, &err) != DL_OK)
        return die("backend", &err);
    if (dl_model_conf_parse(json, strlen(json), "rnn-bench", &conf, &err) != DL_OK ||
        dl_model_new(be, conf, 1, &m, &err) != DL_OK)
        return die("model", &err);
    int64_t np;
    float *p = dl_model_params(m, &np), *g = dl_model_grads(m, &np);
    dl_hparams hp = { .optimizer = DL_OPTIM_SGD, .lr = 0.05 };
    if (dl_optim_new(be, &hp, np, &opt, &err) != DL_OK)
        return die("optimizer", &err);
    float *x = malloc(sizeof(float) * (size_t)(o.batch * (1 + o.maxlen)));
    float *labels = malloc(sizeof(float) * (size_t)(o.batch * o.maxlen));
    uint64_t state = 1;
    int64_t tokens = 0, infer_tokens = 0;
    double t0 = 0.0, train_s, infer_s, loss = 0.0;
    const float *xs[1] = { x };
    for (int s = -3; s < o.steps; s++) {    /* three warm-up steps */
        if (s == 0)
            t0 = now();
        int64_t tk = make_batch(&o, &state, x, labels);
        int64_t correct;
        dl_model_zero_grad(m);
        if (dl_model_forward_multi(m, xs, o.batch, true, &err) != DL_OK ||
            dl_model_loss(m, NULL, labels, 1.0f / (float)o.batch, true, &loss, &correct,
                          &err) != DL_OK ||
            dl_model_backward(m, &err) != DL_OK)
            return die("training step", &err);
        dl_optim_step(opt, p, g, (float)hp.lr);
        tokens += s >= 0 ? tk : 0;
    }
    train_s = now() - t0;
    t0 = now();
    for (int s = 0; s < o.steps; s++) {
        infer_tokens += make_batch(&o, &state, x, labels);
        if (dl_model_forward_multi(m, xs, o.batch, false, &err) != DL_OK)
            return die("inference", &err);
    }
    infer_s = now() - t0;
    printf("{\"side\": \"dlserve\", \"cell\": \"%s%s\", \"threads\": %d, \"batch\": %d, "
           "\"train_tokens_per_sec\": %.0f, \"infer_tokens_per_sec\": %.0f, \"loss\": %.4f}\n",
           o.cell, o.crf ? "-crf" : "", o.threads, o.batch, (double)tokens / train_s,
           (double)infer_tokens / infer_s, loss / o.batch);
    free(x);
    free(labels);
    dl_optim_free(opt);
    dl_model_free(m);
    dl_model_conf_free(conf);
    dl_backend_free(be);
    return 0;
}
