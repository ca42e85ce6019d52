/* test_invariant.c: batch-invariant inference (dl_model_set_batch_invariant).
 * The shipped models with random weights, and sequence models (their own
 * section, recurrent ones included), answer each of 40 samples with
 * the same bits alone, at every position of batches of 3, 8, 27 and 40,
 * whichever kernels the backend runs (meson.build runs this suite with
 * im2col and the thin GEMM kernel, then with oneDNN and OpenBLAS), on one
 * thread and on two. The same batches without
 * the setting say how many answers moved: logged, not asserted (it
 * depends on the CPU and its libraries). */
#define _POSIX_C_SOURCE 200809L
#include <criterion/criterion.h>
#include <criterion/logging.h>

#include "fixture.h"
#include "tensor/cpu/cpu.h"

#include <math.h>
#include <string.h>

#define SAMPLES 40

static const int64_t batches[] = {3, 8, 27, SAMPLES};

typedef struct run {
    dl_backend *be;
    dl_model_conf *conf;
    dl_model *m;
    int64_t din, dout;
    float *x, *alone, *batched;
} run;

/* A model of models/<name> with random weights on a CPU backend of
 * `threads` threads, and SAMPLES inputs in [0, 1) (ids in range for an
 * embedding's input). */
static void setup(run *r, const char *name, int threads)
{
    dl_err err = {0};
    char rel[128];
    snprintf(rel, sizeof(rel), "models/%s/model.json", name);
    cr_assert_eq(dl_model_conf_load(fx_source_path(rel), &r->conf, &err), DL_OK, "%s", err.msg);
    dl_backend_params bp = { .threads = threads, .engine_layers = true };
    cr_assert_eq(dl_backend_new("cpu", &bp, &r->be, &err), DL_OK, "%s", err.msg);
    cr_assert_eq(dl_model_new(r->be, r->conf, 7, &r->m, &err), DL_OK, "%s", err.msg);
    dl_model_fix_weights(r->m);
    r->din = dl_model_in_dim(r->m);
    r->dout = dl_model_out_dim(r->m);
    r->x = malloc((size_t)(SAMPLES * r->din) * sizeof(float));
    r->alone = malloc((size_t)(SAMPLES * r->dout) * sizeof(float));
    r->batched = malloc((size_t)(SAMPLES * r->dout) * sizeof(float));
    cr_assert(r->x && r->alone && r->batched);
    dl_rng rng;
    dl_rng_seed(&rng, 11);
    for (int64_t i = 0; i < SAMPLES * r->din; i++)
        r->x[i] = dl_rng_uniform(&rng);
    if (dl_model_input_count(r->m) == 2)   /* two-tower: a user id first */
        for (int64_t i = 0; i < SAMPLES; i++)
            r->x[i * r->din] = (float)(i % 100);
}

static void teardown(run *r)
{
    dl_model_free(r->m);
    dl_backend_free(r->be);
    dl_model_conf_free(r->conf);
    free(r->x);
    free(r->alone);
    free(r->batched);
}

/* Answers of samples [i, i + b) as one batch, into their rows of out. */
static void predict(run *r, int64_t i, int64_t b, float *out)
{
    dl_err err = {0};
    cr_assert_eq(dl_model_predict(r->m, r->x + i * r->din, b, b, out + i * r->dout, &err), DL_OK,
                 "%s", err.msg);
}

/* Values of every batch that differ in any bit from the sample alone. */
static int64_t moved(run *r)
{
    for (int64_t i = 0; i < SAMPLES; i++)
        predict(r, i, 1, r->alone);
    int64_t n = 0;
    for (size_t k = 0; k < sizeof(batches) / sizeof(batches[0]); k++) {
        for (int64_t i = 0; i < SAMPLES; i += batches[k])
            predict(r, i, i + batches[k] <= SAMPLES ? batches[k] : SAMPLES - i, r->batched);
        for (int64_t j = 0; j < SAMPLES * r->dout; j++)
            n += memcmp(&r->alone[j], &r->batched[j], sizeof(float)) != 0;
    }
    return n;
}

static void check(const char *name, int threads)
{
    run r;
    setup(&r, name, threads);
    const char *engine = dl_backend_conv_engine(r.be);
    int64_t off = moved(&r);
    cr_log_info("%s, %d thread(s), %s, gemm %s: without batch_invariant %lld of %lld values "
                "moved", name, threads, engine, r.be->gemm_thin ? "thin" : "openblas",
                (long long)off,
                (long long)(SAMPLES * r.dout * (int64_t)(sizeof(batches) / sizeof(batches[0]))));
    dl_model_set_batch_invariant(r.m, true);
    cr_assert(dl_model_batch_invariant(r.m));
    int64_t on = moved(&r);
    cr_expect_eq(on, 0, "%s, %d thread(s), %s: %lld values differ from the sample alone", name,
                 threads, engine, (long long)on);
    /* and the answers are the model's: batch-invariant is not batch-blind */
    for (int64_t j = 0; j < SAMPLES * r.dout; j++)
        cr_assert(isfinite(r.alone[j]), "%s: value %lld is %g", name, (long long)j, r.alone[j]);
    teardown(&r);
}

Test(invariant, fashion_mlp) { check("fashion-mlp", 1); check("fashion-mlp", 2); }
Test(invariant, fashion_cnn) { check("fashion-cnn", 1); check("fashion-cnn", 2); }
Test(invariant, fashion_resnet, .timeout = 60) { check("fashion-resnet", 2); }
Test(invariant, two_tower) { check("two-tower", 1); check("two-tower", 2); }

/* ---- sequences ----------------------------------------------------------------
 * Two sequence inputs of their own lengths (1 to 12) through every
 * sequence layer: each sample answers with the same bits alone, its
 * padding zero, as in batches with random values past its lengths, which
 * no layer may read. */

static const char seq_json[] =
    "{\"name\": \"seq\", \"inputs\": ["
    " {\"name\": \"ids\", \"datatype\": \"INT64\", \"shape\": [-1], \"max_length\": 12},"
    " {\"name\": \"x\", \"shape\": [-1, 3], \"max_length\": 12}],"
    " \"layers\": ["
    " {\"name\": \"emb\", \"type\": \"embedding\", \"inputs\": [\"ids\"],"
    "  \"num_embeddings\": 20, \"dim\": 8, \"padding_idx\": 0},"
    " {\"name\": \"pos\", \"type\": \"pos_embedding\", \"max_length\": 16},"
    " {\"name\": \"conv\", \"type\": \"conv1d\", \"filters\": 6, \"kernel_size\": 3,"
    "  \"padding\": 1},"
    " {\"name\": \"relu\", \"type\": \"relu\"},"
    " {\"name\": \"pmax\", \"type\": \"seq_pool\", \"mode\": \"max\"},"
    " {\"name\": \"psum\", \"type\": \"seq_pool\", \"mode\": \"sum\", \"inputs\": [\"relu\"]},"
    " {\"name\": \"fx\", \"type\": \"dense\", \"inputs\": [\"x\"], \"units\": 5},"
    " {\"name\": \"conv2\", \"type\": \"conv1d\", \"filters\": 4, \"kernel_size\": 5,"
    "  \"padding\": 4, \"dilation\": 2},"
    " {\"name\": \"pmean\", \"type\": \"seq_pool\", \"mode\": \"mean\"},"
    " {\"name\": \"plast\", \"type\": \"seq_pool\", \"mode\": \"last\", \"inputs\": [\"conv2\"]},"
    " {\"name\": \"cat\", \"type\": \"concat\", \"axis\": 0,"
    "  \"inputs\": [\"pmax\", \"psum\", \"pmean\", \"plast\"]},"
    " {\"name\": \"y\", \"type\": \"dense\", \"units\": 3}],"
    " \"outputs\": [{\"name\": \"y\", \"from\": \"y\", \"loss\": \"mse\"}]}";

/* Row i of the packed inputs: each sequence's length, then its values,
 * zero past the length (pad false) or random (pad true). */
static void seq_row(float *row, dl_rng *lens, dl_rng *vals, bool pad)
{
    int64_t at = 0;
    for (int k = 0; k < 2; k++) {
        int64_t len = 1 + (int64_t)(dl_rng_uniform(lens) * 12.0f), per = k ? 3 : 1;
        row[at++] = (float)(len > 12 ? 12 : len);
        for (int64_t j = 0; j < 12 * per; j++) {
            float v = k ? dl_rng_uniform(vals) : (float)(int)(dl_rng_uniform(vals) * 20.0f);
            row[at + j] = j < (int64_t)row[at - 1] * per || pad ? v : 0.0f;
        }
        at += 12 * per;
    }
}

static void check_seq(int threads)
{
    run r = {0};
    dl_err err = {0};
    cr_assert_eq(dl_model_conf_parse(seq_json, sizeof(seq_json) - 1, "seq", &r.conf, &err),
                 DL_OK, "%s", err.msg);
    dl_backend_params bp = { .threads = threads, .engine_layers = true };
    cr_assert_eq(dl_backend_new("cpu", &bp, &r.be, &err), DL_OK, "%s", err.msg);
    cr_assert_eq(dl_model_new(r.be, r.conf, 7, &r.m, &err), DL_OK, "%s", err.msg);
    dl_model_fix_weights(r.m);
    dl_model_set_batch_invariant(r.m, true);
    r.din = dl_model_in_dim(r.m);
    r.dout = dl_model_out_dim(r.m);
    cr_assert_eq(r.din, 13 + 37);
    r.x = malloc((size_t)(SAMPLES * r.din) * sizeof(float));
    r.alone = malloc((size_t)(SAMPLES * r.dout) * sizeof(float));
    r.batched = malloc((size_t)(SAMPLES * r.dout) * sizeof(float));
    cr_assert(r.x && r.alone && r.batched);
    dl_rng lens, vals;
    dl_rng_seed(&lens, 3);
    dl_rng_seed(&vals, 4);
    for (int64_t i = 0; i < SAMPLES; i++) {     /* alone: zeros past the lengths */
        seq_row(r.x + i * r.din, &lens, &vals, false);
        predict(&r, i, 1, r.alone);
    }
    dl_rng_seed(&lens, 3);
    dl_rng_seed(&vals, 4);
    for (int64_t i = 0; i < SAMPLES; i++)
        seq_row(r.x + i * r.din, &lens, &vals, true);
    int64_t off = 0;
    for (size_t k = 0; k < sizeof(batches) / sizeof(batches[0]); k++) {
        for (int64_t i = 0; i < SAMPLES; i += batches[k])
            predict(&r, i, i + batches[k] <= SAMPLES ? batches[k] : SAMPLES - i, r.batched);
        for (int64_t j = 0; j < SAMPLES * r.dout; j++)
            off += memcmp(&r.alone[j], &r.batched[j], sizeof(float)) != 0;
    }
    cr_expect_eq(off, 0, "sequences, %d thread(s): %lld values differ from the sample alone",
                 threads, (long long)off);
    for (int64_t j = 0; j < SAMPLES * r.dout; j++)
        cr_assert(isfinite(r.alone[j]), "sequences: value %lld is %g", (long long)j,
                  r.alone[j]);
    teardown(&r);
}

Test(invariant, sequences) { check_seq(1); check_seq(2); }

/* Invariant answers are the batched ones but for rounding: the same
 * arithmetic, summed in another order. */
Test(invariant, answers_match_the_batched_ones)
{
    run r;
    setup(&r, "fashion-cnn", 2);
    predict(&r, 0, SAMPLES, r.batched);
    dl_model_set_batch_invariant(r.m, true);
    predict(&r, 0, SAMPLES, r.alone);
    for (int64_t j = 0; j < SAMPLES * r.dout; j++)
        cr_assert(fabsf(r.alone[j] - r.batched[j]) <= 1e-5f + 1e-4f * fabsf(r.batched[j]),
                  "value %lld: %g invariant, %g batched", (long long)j, r.alone[j],
                  r.batched[j]);
    teardown(&r);
}

/* The thin kernel computes each output as one dot product whatever block
 * holds it: a row of a 37-row product has the bits of that row alone, on
 * the AVX2 kernel (what an AVX2 CPU runs at every size when invariant) and
 * on the one this CPU picks. */
static void thin_rows(void (*gemm)(int64_t, int64_t, int64_t, const float *, int64_t,
                                   const float *, int64_t, float *, int64_t),
                      const char *name)
{
    enum { M = 37, N = 13, K = 83 };
    static float a[M * K], b[N * K], all[M * N], one[N];
    dl_rng rng;
    dl_rng_seed(&rng, 5);
    for (int i = 0; i < M * K; i++)
        a[i] = dl_rng_uniform(&rng) - 0.5f;
    for (int i = 0; i < N * K; i++)
        b[i] = dl_rng_uniform(&rng) - 0.5f;
    gemm(M, N, K, a, K, b, K, all, N);
    for (int i = 0; i < M; i++) {
        gemm(1, N, K, a + i * K, K, b, K, one, N);
        cr_expect(memcmp(one, all + i * N, sizeof(one)) == 0, "%s: row %d moved", name, i);
    }
}

Test(invariant, thin_kernel_rows_are_exact)
{
    if (!dl_gemm_thin_usable())
        cr_skip_test("no AVX2 and FMA: the thin kernel does not run here");
    thin_rows(dl_gemm_thin_avx2, "avx2");
    thin_rows(dl_gemm_thin, "this CPU's");
}

/* ---- sequences ---------------------------------------------------------------
 * A token model over a sequence of ids (embedding -> self-attention ->
 * causal self-attention -> an sdpa over a packed projection, as ONNX
 * imports give -> a per-token dense layer), random weights: each
 * of SAMPLES samples of mixed lengths (1 and max_length among them)
 * answers alone as it does in batches beside longer and shorter samples,
 * at every position before its length (past it lies padding no consumer
 * reads), bit for bit. */

#define SEQ_L 12

static const char seq_model[] =
    "{\"name\": \"att-tokens\","
    " \"inputs\": [{\"name\": \"ids\", \"datatype\": \"INT64\", \"shape\": [-1],"
    "               \"max_length\": 12}],"
    " \"layers\": [{\"name\": \"emb\", \"type\": \"embedding\", \"num_embeddings\": 50,"
    "               \"dim\": 16},"
    "              {\"name\": \"att\", \"type\": \"attention\", \"heads\": 4},"
    "              {\"name\": \"causal\", \"type\": \"attention\", \"heads\": 2,"
    "               \"causal\": true},"
    "              {\"name\": \"proj\", \"type\": \"dense\", \"units\": 48},"
    "              {\"name\": \"sdpa\", \"type\": \"sdpa\", \"heads\": 4},"
    "              {\"name\": \"tags\", \"type\": \"dense\", \"units\": 5}],"
    " \"outputs\": [{\"name\": \"tags\", \"from\": \"tags\","
    "                \"loss\": \"softmax_cross_entropy\"}]}";

typedef struct seq_run {
    dl_backend *be;
    dl_model_conf *conf;
    dl_model *m;
    int64_t din, dout;          /* floats of a packed sample, of its answer */
    float *x, *alone, *batched;
} seq_run;

/* Packed samples: sample i has 1 + 5i mod SEQ_L ids (every length from 1
 * to SEQ_L in each 12 samples), zeros past them. */
static void seq_setup(seq_run *r, int threads)
{
    dl_err err = {0};
    cr_assert_eq(dl_model_conf_parse(seq_model, strlen(seq_model), "att-tokens", &r->conf, &err),
                 DL_OK, "%s", err.msg);
    dl_backend_params bp = { .threads = threads, .engine_layers = true };
    cr_assert_eq(dl_backend_new("cpu", &bp, &r->be, &err), DL_OK, "%s", err.msg);
    cr_assert_eq(dl_model_new(r->be, r->conf, 7, &r->m, &err), DL_OK, "%s", err.msg);
    dl_model_fix_weights(r->m);
    r->din = dl_model_in_dim(r->m);
    r->dout = dl_model_out_dim(r->m);
    cr_assert_eq(r->din, 1 + SEQ_L);
    r->x = calloc((size_t)(SAMPLES * r->din), sizeof(float));
    r->alone = malloc((size_t)(SAMPLES * r->dout) * sizeof(float));
    r->batched = malloc((size_t)(SAMPLES * r->dout) * sizeof(float));
    cr_assert(r->x && r->alone && r->batched);
    dl_rng rng;
    dl_rng_seed(&rng, 13);
    for (int64_t i = 0; i < SAMPLES; i++) {
        float *row = r->x + i * r->din;
        row[0] = (float)(1 + i * 5 % SEQ_L);
        for (int64_t p = 0; p < (int64_t)row[0]; p++)
            row[1 + p] = (float)(1 + (int)(dl_rng_uniform(&rng) * 49.0f) % 49);
    }
}

static void seq_teardown(seq_run *r)
{
    dl_model_free(r->m);
    dl_backend_free(r->be);
    dl_model_conf_free(r->conf);
    free(r->x);
    free(r->alone);
    free(r->batched);
}

/* Answers of samples [i, i + b) as one batch, into their rows of out. */
static void seq_forward(seq_run *r, int64_t i, int64_t b, float *out)
{
    dl_err err = {0};
    const float *y;
    cr_assert_eq(dl_model_forward(r->m, r->x + i * r->din, b, false, &y, &err), DL_OK, "%s",
                 err.msg);
    /* The pass held the batch's longest length of positions a sample. */
    int64_t per = r->dout / SEQ_L, d = dl_model_output_steps(r->m, 0) * per;
    for (int64_t j = 0; j < b; j++)
        memcpy(out + (i + j) * r->dout, y + j * d, (size_t)d * sizeof(float));
}

/* Valid values of every batch that differ in any bit from the sample
 * alone. */
static int64_t seq_moved(seq_run *r)
{
    for (int64_t i = 0; i < SAMPLES; i++)
        seq_forward(r, i, 1, r->alone);
    int64_t n = 0, per = r->dout / SEQ_L;
    for (size_t k = 0; k < sizeof(batches) / sizeof(batches[0]); k++) {
        for (int64_t i = 0; i < SAMPLES; i += batches[k])
            seq_forward(r, i, i + batches[k] <= SAMPLES ? batches[k] : SAMPLES - i, r->batched);
        for (int64_t i = 0; i < SAMPLES; i++)
            for (int64_t j = 0; j < (int64_t)r->x[i * r->din] * per; j++)
                n += memcmp(&r->alone[i * r->dout + j], &r->batched[i * r->dout + j],
                            sizeof(float)) != 0;
    }
    return n;
}

static void seq_check(int threads)
{
    seq_run r;
    seq_setup(&r, threads);
    int64_t off = seq_moved(&r);
    cr_log_info("att-tokens, %d thread(s), gemm %s: without batch_invariant %lld values moved",
                threads, r.be->gemm_thin ? "thin" : "openblas", (long long)off);
    dl_model_set_batch_invariant(r.m, true);
    int64_t on = seq_moved(&r);
    cr_expect_eq(on, 0, "att-tokens, %d thread(s): %lld values differ from the sample alone",
                 threads, (long long)on);
    for (int64_t j = 0; j < SAMPLES * r.dout; j++)
        cr_assert(isfinite(r.alone[j]), "att-tokens: value %lld is %g", (long long)j,
                  r.alone[j]);
    seq_teardown(&r);
}

Test(invariant, attention_over_mixed_lengths) { seq_check(1); seq_check(2); }

/* ---- recurrent layers ----------------------------------------------------------
 * An LSTM tagger and a GRU classifier over one sequence input of lengths 1
 * to RNN_L, random weights: each sample answers alone (zeros past its
 * length) with the bits it gets in every batch (random values past its
 * length, which no layer may read). Without the setting, how many values
 * moved is logged. */

#define RNN_L 11

/* ids -> embedding -> two bidirectional LSTM layers -> a tag a position */
static const char lstm_tagger[] =
    "{\"name\": \"lstm-tagger\", \"inputs\": [{\"name\": \"ids\", \"datatype\": \"INT64\","
    " \"shape\": [-1], \"max_length\": 11}],"
    " \"layers\": [{\"name\": \"emb\", \"type\": \"embedding\", \"num_embeddings\": 50,"
    "              \"dim\": 16},"
    "             {\"name\": \"rnn\", \"type\": \"lstm\", \"hidden\": 24, \"layers\": 2,"
    "              \"bidirectional\": true},"
    "             {\"name\": \"tags\", \"type\": \"dense\", \"units\": 5}],"
    " \"outputs\": [{\"name\": \"tags\", \"from\": \"tags\","
    "               \"loss\": \"softmax_cross_entropy\"}]}";

/* vectors -> a bidirectional GRU's last states -> a class */
static const char gru_classifier[] =
    "{\"name\": \"gru-classifier\", \"inputs\": [{\"name\": \"x\", \"shape\": [-1, 6],"
    " \"max_length\": 11}],"
    " \"layers\": [{\"name\": \"rnn\", \"type\": \"gru\", \"hidden\": 20,"
    "              \"bidirectional\": true, \"return\": \"last\"},"
    "             {\"name\": \"cls\", \"type\": \"dense\", \"units\": 4}],"
    " \"outputs\": [{\"name\": \"cls\", \"from\": \"cls\","
    "               \"loss\": \"softmax_cross_entropy\"}]}";

/* The packed samples: sample i of 1 + 7i mod RNN_L positions (RNN_L and 1
 * among them), dim values a position (ids below vocab, or in [-1, 1)),
 * past its length zeros or (pad) random values. */
static void rnn_rows(run *r, int64_t vocab, int64_t dim, bool pad)
{
    for (int64_t i = 0; i < SAMPLES; i++) {
        float *row = r->x + i * r->din;
        dl_rng rng;
        dl_rng_seed(&rng, 100 + (uint64_t)i);
        row[0] = (float)(1 + i * 7 % RNN_L);
        for (int64_t j = 0; j < RNN_L * dim; j++) {
            float v = vocab ? (float)dl_rng_below(&rng, (uint64_t)vocab)
                            : 2.0f * dl_rng_uniform(&rng) - 1.0f;
            row[1 + j] = j < (int64_t)row[0] * dim || pad ? v : 0.0f;
        }
    }
}

/* Values of every batch that differ in any bit from the sample alone. */
static int64_t rnn_moved(run *r, int64_t vocab, int64_t dim)
{
    rnn_rows(r, vocab, dim, false);
    for (int64_t i = 0; i < SAMPLES; i++)
        predict(r, i, 1, r->alone);
    rnn_rows(r, vocab, dim, true);
    int64_t n = 0;
    for (size_t k = 0; k < sizeof(batches) / sizeof(batches[0]); k++) {
        for (int64_t i = 0; i < SAMPLES; i += batches[k])
            predict(r, i, i + batches[k] <= SAMPLES ? batches[k] : SAMPLES - i, r->batched);
        for (int64_t j = 0; j < SAMPLES * r->dout; j++)
            n += memcmp(&r->alone[j], &r->batched[j], sizeof(float)) != 0;
    }
    return n;
}

static void check_rnn(const char *json, int64_t vocab, int64_t dim, int threads)
{
    run r = {0};
    dl_err err = {0};
    cr_assert_eq(dl_model_conf_parse(json, strlen(json), "rnn.json", &r.conf, &err), DL_OK,
                 "%s", err.msg);
    dl_backend_params bp = { .threads = threads, .engine_layers = true };
    cr_assert_eq(dl_backend_new("cpu", &bp, &r.be, &err), DL_OK, "%s", err.msg);
    cr_assert_eq(dl_model_new(r.be, r.conf, 7, &r.m, &err), DL_OK, "%s", err.msg);
    dl_model_fix_weights(r.m);
    r.din = dl_model_in_dim(r.m);
    r.dout = dl_model_out_dim(r.m);
    cr_assert_eq(r.din, 1 + RNN_L * dim);
    r.x = malloc((size_t)(SAMPLES * r.din) * sizeof(float));
    r.alone = malloc((size_t)(SAMPLES * r.dout) * sizeof(float));
    r.batched = malloc((size_t)(SAMPLES * r.dout) * sizeof(float));
    cr_assert(r.x && r.alone && r.batched);
    int64_t off = rnn_moved(&r, vocab, dim);
    cr_log_info("%s, %d thread(s), %s: without batch_invariant %lld values moved",
                r.conf->name, threads, dl_backend_conv_engine(r.be), (long long)off);
    dl_model_set_batch_invariant(r.m, true);
    int64_t on = rnn_moved(&r, vocab, dim);
    cr_expect_eq(on, 0, "%s, %d thread(s): %lld values differ from the sample alone",
                 r.conf->name, threads, (long long)on);
    for (int64_t j = 0; j < SAMPLES * r.dout; j++)
        cr_assert(isfinite(r.alone[j]), "%s: value %lld is %g", r.conf->name, (long long)j,
                  r.alone[j]);
    teardown(&r);
}

Test(invariant, lstm_mixed_lengths)
{
    check_rnn(lstm_tagger, 50, 1, 1);
    check_rnn(lstm_tagger, 50, 1, 2);
}

Test(invariant, gru_mixed_lengths)
{
    check_rnn(gru_classifier, 0, 6, 1);
    check_rnn(gru_classifier, 0, 6, 2);
}
