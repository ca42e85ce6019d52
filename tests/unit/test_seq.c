/* test_seq.c: sequence inputs through a model: packed samples unpacked
 * and their lengths checked, the per-token losses (softmax cross-entropy
 * over labelled tokens, next_token, a linear-chain CRF) against their
 * definitions computed here from the model's own scores, padding that
 * never reaches a gradient whatever it holds, and a crf output served as
 * its Viterbi path. */
#define _POSIX_C_SOURCE 200809L
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <criterion/criterion.h>

#include "fixture.h"
#include "nn/crf.h"
#include "nn/dl_nn.h"

#define T 5          /* max_length */
#define C 3          /* classes (tags) a position */
#define V 7          /* ids */
#define N 3          /* samples */

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

TestSuite(seq, .fini = teardown, .timeout = 60);

/* ids [-1] -> embedding -> dense [T, C] with output `out` (a JSON object
 * without its 'from'). */
static void build(const char *out)
{
    char text[1024];
    snprintf(text, sizeof(text),
             "{'name': 's', 'inputs': [{'name': 'ids', 'datatype': 'INT64', 'shape': [-1], "
             "'max_length': %d}], 'layers': [{'name': 'emb', 'type': 'embedding', "
             "'num_embeddings': %d, 'dim': 4, 'inputs': ['ids']}, {'name': 'fc', 'type': "
             "'dense', 'units': %d}], 'outputs': [%s]}", T, V, C, out);
    const char *t = fx_dq(text);
    dl_err err = {0};
    be = fx_cpu_backend();
    cr_assert_eq(dl_model_conf_parse(t, strlen(t), "s.json", &conf, &err), DL_OK, "%s", err.msg);
    cr_assert_eq(dl_model_new(be, conf, 7, &m, &err), DL_OK, "%s", err.msg);
}

/* Three packed samples of lengths 2, 5 and 1; `pad` fills the positions
 * past each length (the model must never let it matter). */
static const int lens[N] = { 2, 5, 1 };
static void pack(float *x, float pad)
{
    for (int i = 0; i < N; i++) {
        float *row = x + i * (1 + T);
        row[0] = (float)lens[i];
        for (int t = 0; t < T; t++)
            row[1 + t] = t < lens[i] ? (float)((i * 3 + t * 2 + 1) % V) : pad;
    }
}

static double logsumexp(const float *x, int n)
{
    double mx = x[0], s = 0.0;
    for (int j = 1; j < n; j++)
        mx = fmax(mx, x[j]);
    for (int j = 0; j < n; j++)
        s += exp(x[j] - mx);
    return mx + log(s);
}

/* Trains one forward and backward pass; copies the scores and gradients. */
static double pass(const float *x, const float *targets, float *scores, float *grads)
{
    dl_err err = {0};
    const float *y;
    double loss;
    int64_t correct, np;
    dl_model_zero_grad(m);
    cr_assert_eq(dl_model_forward(m, x, N, true, &y, &err), DL_OK, "%s", err.msg);
    memcpy(scores, y, sizeof(float) * N * T * C);
    cr_assert_eq(dl_model_loss(m, NULL, targets, 1.0f / N, true, &loss, &correct, &err), DL_OK,
                 "%s", err.msg);
    cr_assert_eq(dl_model_backward(m, &err), DL_OK, "%s", err.msg);
    const float *g = dl_model_grads(m, &np);
    memcpy(grads, g, sizeof(float) * (size_t)np);
    return loss;
}

Test(seq, packed_lengths_are_checked)
{
    build("{'name': 'tags', 'from': 'fc'}");
    cr_expect_eq(dl_model_input_dim(m, 0), 1 + T);
    cr_expect_eq(conf->outputs[0].tcols, T);
    float x[N * (1 + T)];
    const float *y;
    dl_err err = {0};
    const float bad[] = { 0.0f, 6.0f, 2.5f, NAN };
    for (size_t b = 0; b < sizeof(bad) / sizeof(bad[0]); b++) {
        pack(x, 0.0f);
        x[1 + T] = bad[b];
        cr_expect_eq(dl_model_forward(m, x, N, false, &y, &err), DL_ERR_INVALID);
        cr_expect_not_null(strstr(err.msg, "input 'ids': sample 1 has length"), "%s", err.msg);
    }
}

Test(seq, token_cross_entropy_is_the_mean_over_labelled_tokens)
{
    build("{'name': 'tags', 'from': 'fc'}");
    float x[N * (1 + T)], tg[N * T], s0[N * T * C], s1[N * T * C];
    float *g0 = calloc(4096, sizeof(float)), *g1 = calloc(4096, sizeof(float));
    for (int i = 0; i < N; i++)
        for (int t = 0; t < T; t++)
            tg[i * T + t] = t < lens[i] ? (float)((i + t) % C) : -1.0f;
    tg[1 * T + 3] = -1.0f;               /* an unlabelled token inside a length */
    pack(x, 0.0f);
    double loss = pass(x, tg, s0, g0);
    double want = 0.0;
    int tokens = 0;
    for (int i = 0; i < N; i++)
        for (int t = 0; t < lens[i]; t++) {
            int c = (int)tg[i * T + t];
            if (c < 0)
                continue;
            const float *r = s0 + (i * T + t) * C;
            want += logsumexp(r, C) - r[c];
            tokens++;
        }
    cr_expect_eq(tokens, 7);
    cr_expect_eq(dl_model_output_judged(m, 0), tokens);
    cr_expect(fabs(loss / N - want / tokens) < 1e-5, "token mean %g, want %g", loss / N,
              want / tokens);
    /* Padding holding other ids leaves the loss and every gradient as
     * they were, bit for bit. */
    pack(x, 4.0f);
    double loss1 = pass(x, tg, s1, g1);
    int64_t np;
    dl_model_params(m, &np);
    cr_expect_eq(loss1, loss);
    cr_expect_eq(memcmp(g0, g1, sizeof(float) * (size_t)np), 0, "padding changed a gradient");
    free(g0);
    free(g1);
}

Test(seq, next_token_predicts_each_following_id)
{
    char text[1024];
    snprintf(text, sizeof(text),
             "{'name': 's', 'inputs': [{'name': 'ids', 'datatype': 'INT64', 'shape': [-1], "
             "'max_length': %d}], 'layers': [{'name': 'emb', 'type': 'embedding', "
             "'num_embeddings': %d, 'dim': 4}, {'name': 'fc', 'type': 'dense', 'units': %d}], "
             "'outputs': [{'name': 'next', 'from': 'fc', 'loss': 'next_token', 'of': 'ids'}]}",
             T, V, V);
    const char *t = fx_dq(text);
    dl_err err = {0};
    be = fx_cpu_backend();
    cr_assert_eq(dl_model_conf_parse(t, strlen(t), "s.json", &conf, &err), DL_OK, "%s", err.msg);
    cr_assert_eq(conf->outputs[0].tcols, 0);
    cr_assert_eq(dl_model_new(be, conf, 7, &m, &err), DL_OK, "%s", err.msg);
    float x[N * (1 + T)];
    pack(x, 0.0f);
    const float *y;
    double loss;
    int64_t correct;
    cr_assert_eq(dl_model_forward(m, x, N, true, &y, &err), DL_OK, "%s", err.msg);
    cr_assert_eq(dl_model_loss(m, NULL, x, 1.0f / N, true, &loss, &correct, &err), DL_OK, "%s",
                 err.msg);
    double want = 0.0;
    int tokens = 0;
    for (int i = 0; i < N; i++)
        for (int p = 0; p + 1 < lens[i]; p++, tokens++) {
            const float *r = y + (i * T + p) * V;
            want += logsumexp(r, V) - r[(int)x[i * (1 + T) + 2 + p]];
        }
    cr_expect_eq(tokens, 5);                   /* 1 + 4 + 0: a length-1 sample predicts none */
    cr_expect_eq(dl_model_output_judged(m, 0), tokens);
    cr_expect(fabs(loss / N - want / tokens) < 1e-5, "token mean %g, want %g", loss / N,
              want / tokens);
}

Test(seq, crf_loss_and_paths)
{
    build("{'name': 'tags', 'from': 'fc', 'loss': 'crf', 'labels': ['a', 'b', 'c']}");
    cr_expect_eq(dl_model_tensor_index(m, "tags.transitions"), 3);
    cr_expect_eq(dl_model_served_dim(m, 0), T);
    float x[N * (1 + T)], tg[N * T], s[N * T * C];
    float *g = calloc(4096, sizeof(float));
    for (int i = 0; i < N; i++)
        for (int t = 0; t < T; t++)
            tg[i * T + t] = t < lens[i] ? (float)((2 * i + t) % C) : -1.0f;
    pack(x, 0.0f);
    double loss = pass(x, tg, s, g);
    const char *name;
    int nd;
    const int64_t *shape;
    float *trans;
    dl_model_tensor_at(m, 3, &name, &nd, &shape, &trans);
    cr_expect(nd == 2 && shape[0] == C + 2 && shape[1] == C);
    double want = 0.0;
    void *work = malloc(crf_work_size(T, C));
    int32_t tags[T], path[T];
    for (int i = 0; i < N; i++) {
        for (int t = 0; t < T; t++)
            tags[t] = (int32_t)tg[i * T + t];
        want += crf_nll(s + i * T * C, T, lens[i], C, trans, tags, 1.0f, NULL, NULL, work);
    }
    cr_expect(fabs(loss - want) < 1e-4 * fmax(1.0, want), "crf loss %g, want %g", loss, want);
    int64_t b, e;
    dl_model_grad_range(m, 2, &b, &e);
    double gn = 0.0;
    for (int64_t j = b; j < e; j++)
        gn += fabs(g[j]);
    cr_expect_gt(gn, 0.0, "no gradient reached the transitions");
    /* Served: each sample's Viterbi path, -1 past its length. */
    float out[N * T];
    dl_err err = {0};
    cr_assert_eq(dl_model_predict(m, x, N, 8, out, &err), DL_OK, "%s", err.msg);
    for (int i = 0; i < N; i++) {
        crf_viterbi(s + i * T * C, lens[i], C, trans, path, NULL, work);
        for (int t = 0; t < T; t++)
            cr_expect_eq(out[i * T + t], t < lens[i] ? (float)path[t] : -1.0f,
                         "sample %d position %d", i, t);
    }
    free(work);
    free(g);
}

Test(seq, layers_that_mix_positions_refuse_a_sequence)
{
    static const char *const cases[][2] = {
        { "{'name': 'f', 'type': 'flatten'}", "pool the sequence first" },
        { "{'name': 'f', 'type': 'softmax', 'axis': 0}", "time axis" },
        { "{'name': 'f', 'type': 'conv1d', 'filters': 2, 'kernel_size': 3, 'stride': 2, "
          "'padding': 1}", "keeps the length" },
    };
    for (size_t k = 0; k < sizeof(cases) / sizeof(cases[0]); k++) {
        char text[1024];
        snprintf(text, sizeof(text),
                 "{'name': 's', 'inputs': [{'name': 'ids', 'datatype': 'INT64', 'shape': [-1], "
                 "'max_length': 8}], 'layers': [{'name': 'emb', 'type': 'embedding', "
                 "'num_embeddings': 5, 'dim': 4}, %s, {'name': 'seq', 'type': 'seq_pool', "
                 "'mode': 'mean'}, {'name': 'fc', 'type': 'dense', 'units': 2}], 'outputs': "
                 "[{'name': 'fc'}]}", cases[k][0]);
        const char *t = fx_dq(text);
        dl_err err = {0};
        cr_expect_eq(dl_model_conf_parse(t, strlen(t), "s.json", &conf, &err), DL_ERR_INVALID,
                     "accepted %s", cases[k][0]);
        cr_expect_not_null(strstr(err.msg, "layer 'f'"), "%s", err.msg);
        cr_expect_not_null(strstr(err.msg, cases[k][1]), "%s", err.msg);
    }
}

/* dl_model_predict runs a batch in groups of similar lengths and puts
 * each answer back in its place: the same bits as each sample alone. */
Test(seq, grouped_prediction_answers_in_place)
{
    build("{'name': 'tags', 'from': 'fc'}");
    dl_model_set_batch_invariant(m, true);
    enum { S = 40 };
    float *x = calloc(S * (1 + T), sizeof(float)), *all = calloc(S * T * C, sizeof(float));
    float one[T * C];
    for (int i = 0; i < S; i++) {
        float *row = x + i * (1 + T);
        row[0] = (float)(1 + (i * 7) % T);
        for (int t = 0; t < (int)row[0]; t++)
            row[1 + t] = (float)((i + 3 * t) % V);
    }
    dl_err err = {0};
    cr_assert_eq(dl_model_predict(m, x, S, 16, all, &err), DL_OK, "%s", err.msg);
    for (int i = 0; i < S; i++) {
        cr_assert_eq(dl_model_predict(m, x + i * (1 + T), 1, 1, one, &err), DL_OK, "%s", err.msg);
        cr_expect_eq(memcmp(one, all + i * T * C, sizeof(one)), 0, "sample %d moved", i);
    }
    free(x);
    free(all);
}
