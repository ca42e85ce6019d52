/* seq_batch.c: whether a batch of sequences costs what its longest sample
 * does, or what its samples' lengths add up to: does grouping requests by
 * length before batching pay? Built against the release build's core:
 *
 *   cc -O2 -std=c11 -Isrc tests/bench/seq_batch.c build/libdlcore.a \
 *      build/src/tensor/cpu/libdldnnl.a $(pkg-config --libs openblas jansson inih) \
 *      -ldnnl -fopenmp -lz -lm -ldl -lpthread -o /tmp/seq_batch
 *   /tmp/seq_batch [MAX_LENGTH (128)] [BATCH (64)] [ROUNDS (30)]
 *
 * The model: INT64 ids [-1] of MAX_LENGTH through an embedding (256 x 64),
 * a dense layer of 256 with relu and one of 8 a position (a per-token
 * classifier), one thread, batch_invariant as served. Batches of BATCH
 * samples, all of length 8; all of length 8 but one of MAX_LENGTH (what a
 * batcher mixing lengths makes); all of MAX_LENGTH. For each, the best of
 * ROUNDS dl_model_predict calls, in us a batch: the mixed batch costs
 * about the short samples' time plus the long one's, as dl_model_predict
 * groups a batch by length and a pass stops at its longest sample
 * (tests/bench/RESULTS.md, "Sequences of mixed lengths"). */
#include "nn/dl_nn.h"
#include "tensor/dl_tensor.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

static double now_us(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec * 1e6 + (double)ts.tv_nsec / 1e3;
}

/* batch packed rows of ids (1 + L floats): sample i's length lens(i). */
static void pack(float *x, int64_t batch, int64_t L, int64_t shorts, int64_t longs)
{
    memset(x, 0, (size_t)(batch * (1 + L)) * sizeof(float));
    for (int64_t i = 0; i < batch; i++) {
        float *row = x + i * (1 + L);
        int64_t len = i < longs ? L : shorts;
        row[0] = (float)len;
        for (int64_t t = 0; t < len; t++)
            row[1 + t] = (float)((i * 7 + t * 3) % 255 + 1);
    }
}

static double best_us(dl_model *m, const float *x, float *y, int64_t batch, int rounds)
{
    double best = 1e30;
    dl_err err = {0};
    for (int r = 0; r < rounds; r++) {
        double t0 = now_us();
        if (dl_model_predict(m, x, batch, batch, y, &err) != DL_OK) {
            fprintf(stderr, "seq_batch: %s\n", err.msg);
            exit(1);
        }
        double t = now_us() - t0;
        best = t < best ? t : best;
    }
    return best;
}

int main(int argc, char **argv)
{
    int64_t L = argc > 1 ? atoll(argv[1]) : 128, batch = argc > 2 ? atoll(argv[2]) : 64;
    int rounds = argc > 3 ? atoi(argv[3]) : 30;
    char json[1024];
    snprintf(json, sizeof(json),
             "{\"name\": \"s\", \"inputs\": [{\"name\": \"ids\", \"datatype\": \"INT64\", "
             "\"shape\": [-1], \"max_length\": %lld}], \"layers\": [{\"name\": \"emb\", "
             "\"type\": \"embedding\", \"num_embeddings\": 256, \"dim\": 64}, {\"name\": "
             "\"hid\", \"type\": \"dense\", \"units\": 256}, {\"name\": \"relu\", \"type\": "
             "\"relu\"}, {\"name\": \"fc\", \"type\": \"dense\", \"units\": 8}], \"outputs\": "
             "[{\"name\": \"tags\", \"from\": \"fc\", \"loss\": \"softmax_cross_entropy\"}]}",
             (long long)L);
    dl_err err = {0};
    dl_model_conf *conf = NULL;
    dl_backend *be = NULL;
    dl_model *m = NULL;
    if (dl_model_conf_parse(json, strlen(json), "seq_batch", &conf, &err) != DL_OK ||
        dl_backend_cpu_new(1, &be, &err) != DL_OK || dl_model_new(be, conf, 1, &m, &err) != DL_OK) {
        fprintf(stderr, "seq_batch: %s\n", err.msg);
        return 1;
    }
    dl_model_set_batch_invariant(m, true);
    float *x = malloc((size_t)(batch * (1 + L)) * sizeof(float));
    float *y = malloc((size_t)(batch * dl_model_served_out_dim(m)) * sizeof(float));
    struct { const char *name; int64_t longs; } cases[] = {
        {"all of length 8", 0}, {"length 8 but one of max_length", 1}, {"all of max_length", batch},
    };
    printf("max_length %lld, batch %lld, best of %d (us a batch):\n", (long long)L,
           (long long)batch, rounds);
    for (int c = 0; c < 3; c++) {
        pack(x, batch, L, 8, cases[c].longs);
        best_us(m, x, y, batch, 3);   /* warm-up */
        printf("  %-34s %10.1f\n", cases[c].name, best_us(m, x, y, batch, rounds));
    }
    free(x);
    free(y);
    dl_model_free(m);
    dl_backend_free(be);
    dl_model_conf_free(conf);
    return 0;
}
