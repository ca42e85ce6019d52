/* test_generate.c: the decoder (dl_gen) against itself: decoding over
 * the cache gives the ids that recomputing every prefix gives
 * (decoder-only, encoder-decoder and recurrent decoders, prompts of
 * several lengths started together and joining mid-way); beam width 1 is
 * greedy decoding; with
 * batch-invariant inference a sequence's bits do not depend on the
 * sequences beside it; and the rules of sampling, stop strings,
 * max_tokens, a full context and a full decoder. Random weights: what is
 * compared is the engine's arithmetic, not the model's quality (PyTorch's
 * decoding from the same weights is tested against tests/py/gen_ref.py). */
#define _POSIX_C_SOURCE 200809L
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <criterion/criterion.h>

#include "fixture.h"
#include "nn/dl_gen.h"

#define CTX 40

static const char *decoder_json =
    "{'name': 'lm', 'inputs': [{'name': 'ids', 'datatype': 'INT64', 'shape': [-1], "
    "'max_length': 40}], 'layers': ["
    "{'name': 'emb', 'type': 'embedding', 'inputs': ['ids'], 'num_embeddings': 256, 'dim': 16},"
    "{'name': 'pos', 'type': 'pos_embedding', 'max_length': 40},"
    "{'name': 'ln1', 'type': 'layernorm'},"
    "{'name': 'att1', 'type': 'attention', 'heads': 2, 'causal': true},"
    "{'name': 'res1', 'type': 'add', 'inputs': ['pos', 'att1']},"
    "{'name': 'ln2', 'type': 'layernorm'},"
    "{'name': 'fc1', 'type': 'dense', 'units': 32},"
    "{'name': 'act', 'type': 'gelu'},"
    "{'name': 'fc2', 'type': 'dense', 'units': 16},"
    "{'name': 'res2', 'type': 'add', 'inputs': ['res1', 'fc2']},"
    "{'name': 'att2', 'type': 'attention', 'heads': 4, 'causal': true},"
    "{'name': 'res3', 'type': 'add', 'inputs': ['res2', 'att2']},"
    "{'name': 'logits', 'type': 'dense', 'units': 256}],"
    "'outputs': [{'name': 'logits', 'from': 'logits', 'loss': 'next_token', 'of': 'ids'}],"
    "'generate': {'input': 'ids', 'output': 'logits', 'max_context': 40, 'eos': '~'}}";

static const char *encdec_json =
    "{'name': 'mt', 'inputs': [{'name': 'src', 'datatype': 'BYTES', 'shape': [1], "
    "'tokenizer': {'type': 'bytes'}, 'max_length': 40}, "
    "{'name': 'ids', 'datatype': 'INT64', 'shape': [-1], 'max_length': 40}], 'layers': ["
    "{'name': 'semb', 'type': 'embedding', 'inputs': ['src'], 'num_embeddings': 256, "
    "'dim': 16},"
    "{'name': 'spos', 'type': 'pos_embedding', 'max_length': 40},"
    "{'name': 'enc', 'type': 'attention', 'heads': 2},"
    "{'name': 'eres', 'type': 'add', 'inputs': ['spos', 'enc']},"
    "{'name': 'eln', 'type': 'layernorm'},"
    "{'name': 'demb', 'type': 'embedding', 'inputs': ['ids'], 'num_embeddings': 256, "
    "'dim': 16},"
    "{'name': 'dpos', 'type': 'pos_embedding', 'max_length': 40},"
    "{'name': 'self', 'type': 'attention', 'heads': 2, 'causal': true},"
    "{'name': 'dres', 'type': 'add', 'inputs': ['dpos', 'self']},"
    "{'name': 'cross', 'type': 'attention', 'heads': 2, 'inputs': ['dres', 'eln']},"
    "{'name': 'cres', 'type': 'add', 'inputs': ['dres', 'cross']},"
    "{'name': 'logits', 'type': 'dense', 'units': 256}],"
    "'outputs': [{'name': 'logits', 'from': 'logits', 'loss': 'next_token', 'of': 'ids'}],"
    "'generate': {'input': 'ids', 'output': 'logits', 'source': 'src', 'max_context': 40, "
    "'eos': '~'}}";

/* A recurrent decoder: the state a slot instead of keys and values. */
static char rnn_json[1024];

static const char *rnn_model(const char *cell)
{
    snprintf(rnn_json, sizeof(rnn_json),
             "{'name': 'rnn', 'inputs': [{'name': 'ids', 'datatype': 'INT64', 'shape': [-1], "
             "'max_length': 40}], 'layers': ["
             "{'name': 'emb', 'type': 'embedding', 'num_embeddings': 256, 'dim': 16},"
             "{'name': 'rnn', 'type': '%s', 'hidden': 24, 'layers': 2, 'return': 'sequence'},"
             "{'name': 'logits', 'type': 'dense', 'units': 256}],"
             "'outputs': [{'name': 'logits', 'from': 'logits', 'loss': 'next_token', "
             "'of': 'ids'}],"
             "'generate': {'input': 'ids', 'output': 'logits', 'eos': '~'}}", cell);
    return rnn_json;
}

typedef struct rig {
    dl_backend    *be;
    dl_model_conf *conf;
    dl_gen_conf    gc;
    dl_tokenizer  *tok;
    dl_model      *m;
    dl_gen        *g;
} rig;

static void rig_open(rig *r, const char *json, int64_t max_seqs, bool invariant,
                     bool recompute)
{
    dl_err err = {0};
    const char *t = fx_dq(json);
    bool has;
    cr_assert_eq(dl_model_conf_parse(t, strlen(t), "m.json", &r->conf, &err), DL_OK, "%s",
                 err.msg);
    cr_assert_eq(dl_gen_conf_read(t, "m.json", r->conf, &r->gc, &has, &err), DL_OK, "%s",
                 err.msg);
    cr_assert(has);
    cr_assert_eq(dl_tokenizer_new(&r->gc.tok, &r->tok, &err), DL_OK, "%s", err.msg);
    r->be = fx_cpu_backend();
    cr_assert_eq(dl_model_new(r->be, r->conf, 11, &r->m, &err), DL_OK, "%s", err.msg);
    dl_model_set_batch_invariant(r->m, invariant);
    cr_assert_eq(dl_gen_new(r->m, &r->gc, r->tok, max_seqs, 0, &r->g, &err), DL_OK, "%s",
                 err.msg);
    cr_assert(dl_gen_cached(r->g), "the test models decode on the cache");
    dl_gen_set_recompute(r->g, recompute);
}

static void rig_close(rig *r)
{
    dl_gen_free(r->g);
    dl_model_free(r->m);
    dl_tokenizer_free(r->tok);
    dl_gen_conf_release(&r->gc);
    dl_model_conf_free(r->conf);
    dl_backend_free(r->be);
}

/* Runs prompts[0..n) (prompt i joining at step join[i]) to the end and
 * writes each one's ids (eos included) into ids[i], their count n_ids[i]. */
static void run(rig *r, const char *const *prompts, const int *join, int n,
                const dl_gen_params *p, int32_t (*ids)[CTX], int64_t *n_ids)
{
    dl_gen_seq *s[64] = {0};
    dl_err err = {0};
    bool open[64] = {0};
    for (int step = 0, live = n; live > 0; step++) {
        for (int i = 0; i < n; i++)
            if (join[i] == step) {
                cr_assert_eq(dl_gen_start(r->g, prompts[i], strlen(prompts[i]), p, &s[i], &err),
                             DL_OK, "%s", err.msg);
                open[i] = true;
            }
        cr_assert_eq(dl_gen_step(r->g, &err), DL_OK, "%s", err.msg);
        for (int i = 0; i < n; i++) {
            if (!open[i] || dl_gen_finished(s[i]) == DL_GEN_RUNNING)
                continue;
            const int32_t *got = dl_gen_ids(s[i], &n_ids[i]);
            memcpy(ids[i], got, (size_t)n_ids[i] * sizeof(int32_t));
            dl_gen_end(r->g, s[i]);
            open[i] = false;
            live--;
        }
        cr_assert_lt(step, 200, "generation did not end");
    }
    cr_assert_eq(dl_gen_slots_used(r->g), 0);
}

static const char *prompts[] = { "In the beginning", "And", "God said, Let there be light",
                                 "x", "The earth was without form, and void" };
static const int together[] = { 0, 0, 0, 0, 0 };
static const int staggered[] = { 0, 2, 2, 5, 9 };

static void same_ids(int n, int32_t (*a)[CTX], const int64_t *na, int32_t (*b)[CTX],
                     const int64_t *nb, const char *what)
{
    for (int i = 0; i < n; i++) {
        cr_expect_eq(na[i], nb[i], "%s: prompt %d: %lld ids against %lld", what, i,
                     (long long)na[i], (long long)nb[i]);
        for (int64_t k = 0; k < na[i] && k < nb[i]; k++)
            cr_expect_eq(a[i][k], b[i][k], "%s: prompt %d, id %lld: %d against %d", what, i,
                         (long long)k, a[i][k], b[i][k]);
    }
}

static void cache_equals_recompute(const char *json, const dl_gen_params *p)
{
    int32_t a[5][CTX], b[5][CTX], c[5][CTX];
    int64_t na[5], nb[5], nc[5];
    rig r;
    rig_open(&r, json, 16, false, true);
    run(&r, prompts, together, 5, p, a, na);
    rig_close(&r);
    rig_open(&r, json, 16, false, false);
    run(&r, prompts, together, 5, p, b, nb);
    run(&r, prompts, staggered, 5, p, c, nc);
    rig_close(&r);
    same_ids(5, a, na, b, nb, "cache against recompute");
    same_ids(5, a, na, c, nc, "joining mid-way against together");
}

Test(generate, cache_equals_recompute_decoder_only)
{
    dl_gen_params p;
    dl_gen_params_init(&p);
    p.max_tokens = 12;
    cache_equals_recompute(decoder_json, &p);
}

Test(generate, cache_equals_recompute_encoder_decoder)
{
    dl_gen_params p;
    dl_gen_params_init(&p);
    p.max_tokens = 12;
    cache_equals_recompute(encdec_json, &p);
}

Test(generate, recurrent_state_equals_recompute)
{
    dl_gen_params p;
    dl_gen_params_init(&p);
    p.max_tokens = 12;
    cache_equals_recompute(rnn_model("lstm"), &p);
    cache_equals_recompute(rnn_model("gru"), &p);
    p.beam_width = 3;
    cache_equals_recompute(rnn_model("gru"), &p);
}

Test(generate, beam_search_on_the_cache_equals_recompute)
{
    dl_gen_params p;
    dl_gen_params_init(&p);
    p.max_tokens = 10;
    p.beam_width = 3;
    p.length_penalty = 0.6f;
    cache_equals_recompute(decoder_json, &p);
    cache_equals_recompute(encdec_json, &p);
}

Test(generate, beam_width_one_is_greedy)
{
    dl_gen_params p;
    dl_gen_params_init(&p);
    p.max_tokens = 12;
    int32_t a[5][CTX], b[5][CTX];
    int64_t na[5], nb[5];
    rig r;
    rig_open(&r, decoder_json, 16, false, false);
    run(&r, prompts, together, 5, &p, a, na);
    p.beam_search = true;   /* the beam rules at width 1 */
    p.length_penalty = 0.0f;
    run(&r, prompts, together, 5, &p, b, nb);
    rig_close(&r);
    same_ids(5, a, na, b, nb, "beam width 1 against greedy");
}

Test(generate, invariant_decoding_is_the_same_alone_or_together)
{
    dl_gen_params p;
    dl_gen_params_init(&p);
    p.max_tokens = 10;
    p.temperature = 0.9f;
    p.seed = 5;
    int32_t a[5][CTX], b[5][CTX];
    int64_t na[5], nb[5];
    rig r;
    rig_open(&r, decoder_json, 16, true, false);
    run(&r, prompts, staggered, 5, &p, a, na);
    for (int i = 0; i < 5; i++)
        run(&r, prompts + i, together, 1, &p, b + i, nb + i);
    rig_close(&r);
    same_ids(5, a, na, b, nb, "together against alone");
}

Test(generate, sampling_follows_the_seed)
{
    dl_gen_params p;
    dl_gen_params_init(&p);
    p.max_tokens = 20;
    p.temperature = 1.5f;
    p.top_k = 50;
    p.top_p = 0.9f;
    int32_t a[1][CTX], b[1][CTX], c[1][CTX];
    int64_t na[1], nb[1], nc[1];
    rig r;
    rig_open(&r, decoder_json, 4, false, false);
    p.seed = 1;
    run(&r, prompts, together, 1, &p, a, na);
    run(&r, prompts, together, 1, &p, b, nb);
    p.seed = 2;
    run(&r, prompts, together, 1, &p, c, nc);
    rig_close(&r);
    same_ids(1, a, na, b, nb, "the same seed");
    cr_expect(na[0] != nc[0] || memcmp(a[0], c[0], (size_t)na[0] * sizeof(int32_t)) != 0,
              "seeds 1 and 2 gave the same %lld ids", (long long)na[0]);
}

Test(generate, stops_lengths_and_a_full_decoder)
{
    rig r;
    dl_err err = {0};
    dl_gen_params p;
    dl_gen_params_init(&p);
    p.max_tokens = 30;
    p.temperature = 1.0f;
    p.seed = 3;
    rig_open(&r, decoder_json, 2, false, false);
    dl_gen_seq *s, *t, *u;
    /* the text so far, and a stop string cut from its continuation */
    cr_assert_eq(dl_gen_start(r.g, "And", 3, &p, &s, &err), DL_OK, "%s", err.msg);
    while (dl_gen_finished(s) == DL_GEN_RUNNING)
        cr_assert_eq(dl_gen_step(r.g, &err), DL_OK, "%s", err.msg);
    size_t len;
    const char *text = dl_gen_text(s, &len);
    char whole[256];
    cr_assert_gt(len, 4, "too short a text to cut: %zu", len);
    memcpy(whole, text, len);
    dl_gen_end(r.g, s);
    memcpy(p.stop[0], whole + 2, 2);
    p.stop[0][2] = '\0';
    p.nstop = 1;
    size_t cut = 0;           /* where the stop string first occurs */
    while (memcmp(whole + cut, p.stop[0], 2) != 0)
        cut++;
    cr_assert_eq(dl_gen_start(r.g, "And", 3, &p, &s, &err), DL_OK, "%s", err.msg);
    while (dl_gen_finished(s) == DL_GEN_RUNNING) {
        cr_assert_eq(dl_gen_step(r.g, &err), DL_OK, "%s", err.msg);
        dl_gen_text(s, &len);
        cr_assert_leq(len, cut, "text past where the stop string begins: %zu bytes", len);
    }
    text = dl_gen_text(s, &len);
    cr_expect_eq(dl_gen_finished(s), DL_GEN_STOP);
    cr_expect_eq(len, cut);
    cr_expect_eq(memcmp(text, whole, cut), 0);
    dl_gen_end(r.g, s);
    /* max_tokens, a full decoder, a prompt the context cannot hold */
    p.nstop = 0;
    p.max_tokens = 3;
    p.temperature = 0.0f;
    cr_assert_eq(dl_gen_start(r.g, "a", 1, &p, &s, &err), DL_OK, "%s", err.msg);
    cr_assert_eq(dl_gen_start(r.g, "b", 1, &p, &t, &err), DL_OK, "%s", err.msg);
    cr_expect_eq(dl_gen_start(r.g, "c", 1, &p, &u, &err), DL_ERR_BUSY);
    char long_prompt[CTX + 1];
    memset(long_prompt, 'a', CTX);
    dl_gen_end(r.g, t);
    cr_expect_eq(dl_gen_start(r.g, long_prompt, CTX, &p, &u, &err), DL_ERR_INVALID);
    for (int i = 0; i < 3; i++)
        cr_assert_eq(dl_gen_step(r.g, &err), DL_OK, "%s", err.msg);
    cr_expect_eq(dl_gen_finished(s), DL_GEN_LENGTH);
    cr_expect_eq(dl_gen_tokens(s), 3);
    cr_expect_eq(dl_gen_prompt_tokens(s), 1);
    p.max_tokens = 100;      /* the context ends it: 39 positions to fill */
    cr_assert_eq(dl_gen_start(r.g, "a", 1, &p, &t, &err), DL_OK, "%s", err.msg);
    while (dl_gen_finished(t) == DL_GEN_RUNNING)
        cr_assert_eq(dl_gen_step(r.g, &err), DL_OK, "%s", err.msg);
    if (dl_gen_ids(t, &(int64_t){0})[dl_gen_tokens(t) - 1] != '~')
        cr_expect_eq(dl_gen_tokens(t), CTX - 1, "%lld", (long long)dl_gen_tokens(t));
    rig_close(&r);
    p.max_tokens = 0;
    cr_expect_eq(dl_gen_params_check(&p, &err), DL_ERR_INVALID);
    cr_expect(strstr(err.msg, "max_tokens"), "%s", err.msg);
}
