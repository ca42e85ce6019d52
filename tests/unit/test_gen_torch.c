/* test_gen_torch.c: generation against PyTorch. Two small transformers with
 * random weights (tests/unit/fixtures/gen: a decoder-only model of two
 * causal attention blocks, an encoder-decoder with cross-attention whose
 * decoder starts from eos, and one of a GRU encoder and an LSTM decoder),
 * their weights written by tests/py/gen_ref.py,
 * which also decodes them in PyTorch recomputing the whole prefix each
 * step. dlserve's decoder (dl_gen.h) runs the prompts together, some of
 * them joining the running batch later, and must give PyTorch's ids token
 * for token and its endings ("stop" at eos, "length"): greedy, with the
 * key-value cache and recomputing the prefix, beam width 1 as greedy, and
 * beam search of widths 3 and 4 with length penalties. */
#define _POSIX_C_SOURCE 200809L
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <criterion/criterion.h>

#include "fixture.h"
#include "nn/dl_gen.h"
#include "nn/dl_nn.h"
#include "onnx/dl_onnx.h"

TestSuite(gen_torch, .timeout = 180);

#define NPROMPT 8
#define MAXGEN 64

/* Prompts of several lengths; the native decoder's context is 32
 * positions, the ONNX one's 64: the last prompt fills it before
 * max_tokens. */
static const char *const native_prompts[NPROMPT] = {
    "a", "The quick", "hello world, again", "xy", "In the beginning", "z",
    "0123456789", "And God said, Let there",
};
static const char *const onnx_prompts[NPROMPT] = {
    "a", "The quick", "hello world, again", "xy", "In the beginning", "z",
    "0123456789", "And God said, Let there be light: and there was light.",
};
static const char *const *prompts = native_prompts;

typedef struct result {
    dl_gen_finish finish;
    int64_t       n;
    int32_t       ids[MAXGEN];
} result;

typedef struct run_opts {
    int    width;
    float  penalty;
    bool   beam;         /* beam search at width 1 too */
    bool   recompute;
    bool   stagger;      /* prompts join the running batch a step apart */
} run_opts;

/* dir/prompts.json: the prompts as a JSON list. */
static void write_prompts(const char *dir)
{
    FILE *f = fopen(fx_join(dir, "prompts.json"), "w");
    cr_assert_not_null(f);
    fputc('[', f);
    for (int i = 0; i < NPROMPT; i++)
        fprintf(f, "%s\"%s\"", i ? ", " : "", prompts[i]);
    fputs("]\n", f);
    fclose(f);
}

/* Runs a PyTorch peer; scripts/test installs python3-torch, so the peer
 * missing is a failure. */
static void run_peer(const char *cmd)
{
    cr_assert_eq(system(cmd), 0, "%s (failed; /usr/bin/python3 needs torch: apt-get install "
                 "python3-torch)", cmd);
}

/* A model folder in a new temporary folder: the fixture's model.json,
 * weights written by gen_ref.py init. */
static void make_model(char *dir, size_t size, const char *fixture, int seed, int max_tokens)
{
    char cmd[4096];
    fx_tmpdir(dir, size, "gen");
    size_t len;
    char *json = fx_read(fx_source_path(fixture), &len);
    fx_write(fx_join(dir, "model.json"), json, len);
    free(json);
    write_prompts(dir);
    snprintf(cmd, sizeof(cmd), "OMP_NUM_THREADS=1 /usr/bin/python3 %s init %s --seed %d "
             "--prompts %s/prompts.json --max-tokens %d", fx_source_path("tests/py/gen_ref.py"),
             dir, seed, dir, max_tokens);
    run_peer(cmd);
}

static void read_ref(const char *out, result *want);

/* PyTorch's decoding of the prompts (gen_ref.py decode). */
static void reference(const char *dir, int max_tokens, int width, double penalty,
                      result *want)
{
    char cmd[4096], out[300];
    snprintf(out, sizeof(out), "%s/ref-%d-%g.txt", dir, width, penalty);
    snprintf(cmd, sizeof(cmd), "OMP_NUM_THREADS=1 /usr/bin/python3 %s decode %s --prompts "
             "%s/prompts.json --max-tokens %d --beam-width %d --length-penalty %g > %s",
             fx_source_path("tests/py/gen_ref.py"), dir, dir, max_tokens, width, penalty, out);
    run_peer(cmd);
    read_ref(out, want);
}

/* Reads decodings as gen_ref.py prints them. */
static void read_ref(const char *out, result *want)
{
    FILE *f = fopen(out, "r");
    cr_assert_not_null(f, "%s", out);
    char line[4096];
    for (int i = 0; i < NPROMPT; i++) {
        cr_assert_not_null(fgets(line, sizeof(line), f), "%s: %d lines, want %d", out, i,
                           NPROMPT);
        char *p = line + strcspn(line, " \n");
        want[i].finish = !strncmp(line, "stop", 4) ? DL_GEN_STOP : DL_GEN_LENGTH;
        want[i].n = 0;
        for (char *end; want[i].n < MAXGEN; p = end) {
            long v = strtol(p, &end, 10);
            if (end == p)
                break;
            want[i].ids[want[i].n++] = (int32_t)v;
        }
    }
    fclose(f);
}


/* A model as the decoder takes it. */
typedef struct loaded {
    dl_backend    *be;
    dl_model_conf *conf;
    dl_model      *m;
    char          *json;        /* the model.json text with the generate block */
    dl_onnx_model *om;
} loaded;

/* A model folder's model.json and version 1's weights. */
static void load_native(const char *dir, loaded *l)
{
    dl_err err = {0};
    size_t len;
    *l = (loaded){ .be = fx_cpu_backend() };
    l->json = fx_read(fx_join(dir, "model.json"), &len);
    cr_assert_eq(dl_model_conf_parse(l->json, len, "model.json", &l->conf, &err), DL_OK, "%s",
                 err.msg);
    cr_assert_eq(dl_model_new(l->be, l->conf, 1, &l->m, &err), DL_OK, "%s", err.msg);
    cr_assert_eq(dl_model_load(l->m, fx_join(dir, "1/model.safetensors"), &err), DL_OK, "%s",
                 err.msg);
}

/* A model folder's 1/model.onnx with its model.json beside, as the
 * registry reads a version of model.onnx alone. */
static void load_onnx(const char *dir, const char *name, loaded *l)
{
    dl_err err = {0};
    size_t len;
    *l = (loaded){ .be = fx_cpu_backend() };
    char *beside = fx_read(fx_join(dir, "model.json"), &len);
    cr_assert_eq(dl_onnx_load(fx_join(dir, "1/model.onnx"), name, beside, &l->om, &err), DL_OK,
                 "%s", err.msg);
    free(beside);
    cr_assert_eq(dl_onnx_build(l->om, l->be, "model.onnx", &l->conf, &l->m, &err), DL_OK, "%s",
                 err.msg);
    l->json = strdup(dl_onnx_json(l->om));
    cr_assert_not_null(l->json);
}

static void unload(loaded *l)
{
    dl_model_free(l->m);
    dl_model_conf_free(l->conf);
    dl_onnx_free(l->om);
    dl_backend_free(l->be);
    free(l->json);
}

/* dlserve's decoding of the prompts: all of them in one dl_gen, started
 * at once or one more each step (continuous batching). *cached: whether
 * it ran on the key-value cache. */
static void decode_loaded(loaded *l, int max_tokens, const run_opts *o, result *got,
                          bool *cached)
{
    dl_err err = {0};
    dl_gen_conf gc;
    bool has = false;
    cr_assert_eq(dl_gen_conf_read(l->json, "model.json", l->conf, &gc, &has, &err), DL_OK,
                 "%s", err.msg);
    cr_assert(has, "no generate block read");
    dl_tokenizer *tok = NULL;
    cr_assert_eq(dl_tokenizer_new(&gc.tok, &tok, &err), DL_OK, "%s", err.msg);
    dl_gen *g = NULL;
    cr_assert_eq(dl_gen_new(l->m, &gc, tok, NPROMPT * o->width, 0, &g, &err), DL_OK, "%s",
                 err.msg);
    if (o->recompute)
        dl_gen_set_recompute(g, true);
    if (cached)
        *cached = dl_gen_cached(g);
    dl_gen_params p;
    dl_gen_params_init(&p);
    p.max_tokens = max_tokens;
    p.beam_width = o->width;
    p.length_penalty = o->penalty;
    p.beam_search = o->beam;
    cr_assert_eq(dl_gen_params_check(&p, &err), DL_OK, "%s", err.msg);

    dl_gen_seq *seq[NPROMPT] = {0};
    int started = 0, steps = 0;
    for (;;) {
        while (started < NPROMPT && (!o->stagger || started <= steps)) {
            cr_assert_eq(dl_gen_start(g, prompts[started], strlen(prompts[started]), &p,
                                      &seq[started], &err), DL_OK, "prompt %d: %s", started,
                         err.msg);
            started++;
        }
        if (started == NPROMPT && dl_gen_running(g) == 0)
            break;
        cr_assert_eq(dl_gen_step(g, &err), DL_OK, "step %d: %s", steps, err.msg);
        cr_assert_leq(++steps, NPROMPT + max_tokens + 4, "the sequences do not finish");
    }
    for (int i = 0; i < NPROMPT; i++) {
        int64_t n;
        const int32_t *ids = dl_gen_ids(seq[i], &n);
        cr_assert_leq(n, MAXGEN);
        got[i].finish = dl_gen_finished(seq[i]);
        got[i].n = n;
        memcpy(got[i].ids, ids, (size_t)n * sizeof(*ids));
        cr_expect_eq(dl_gen_tokens(seq[i]), n, "prompt %d: dl_gen_tokens %lld, ids %lld", i,
                     (long long)dl_gen_tokens(seq[i]), (long long)n);
        dl_gen_end(g, seq[i]);
    }
    cr_expect_eq(dl_gen_slots_used(g), 0, "slots left after every sequence ended");
    dl_gen_free(g);
    dl_tokenizer_free(tok);
    dl_gen_conf_release(&gc);
}

static void decode(const char *dir, int max_tokens, const run_opts *o, result *got)
{
    loaded l;
    bool cached = false;
    load_native(dir, &l);
    decode_loaded(&l, max_tokens, o, got, &cached);
    cr_expect(cached == !o->recompute, "%s the key-value cache", cached ? "ran on" :
              "did not run on");
    unload(&l);
}

static const char *finish_name(dl_gen_finish f)
{
    return f == DL_GEN_STOP ? "stop" : f == DL_GEN_LENGTH ? "length" : "running";
}

static void ids_text(const result *r, char *buf, size_t cap)
{
    size_t at = (size_t)snprintf(buf, cap, "%s", finish_name(r->finish));
    for (int64_t k = 0; k < r->n && at < cap; k++)
        at += (size_t)snprintf(buf + at, cap - at, " %d", r->ids[k]);
}

/* got == want for every prompt, ids and ending; what names the run. */
static void same(const result *got, const result *want, const char *what)
{
    for (int i = 0; i < NPROMPT; i++) {
        char g[2048], w[2048];
        ids_text(&got[i], g, sizeof(g));
        ids_text(&want[i], w, sizeof(w));
        cr_expect_str_eq(g, w, "%s, prompt %d (\"%s\"): dlserve '%s', want '%s'", what, i,
                         prompts[i], g, w);
    }
}

/* Both endings occur among want: the test covers them. */
static void both_endings(const result *want, const char *what)
{
    int stop = 0;
    for (int i = 0; i < NPROMPT; i++)
        stop += want[i].finish == DL_GEN_STOP;
    cr_assert(stop > 0 && stop < NPROMPT, "%s: %d of %d prompts end at eos: the fixture "
              "should have both endings", what, stop, NPROMPT);
}

enum { MAXTOK = 14 };

static void greedy_case(const char *fixture, int seed)
{
    char dir[256];
    result want[NPROMPT], got[NPROMPT];
    make_model(dir, sizeof(dir), fixture, seed, MAXTOK);
    reference(dir, MAXTOK, 1, 1.0, want);
    both_endings(want, fixture);
    run_opts o = { .width = 1, .penalty = 1.0f };
    decode(dir, MAXTOK, &o, got);
    same(got, want, "greedy, together");
    o.stagger = true;
    decode(dir, MAXTOK, &o, got);
    same(got, want, "greedy, joining a step apart");
    o.recompute = true;
    decode(dir, MAXTOK, &o, got);
    same(got, want, "greedy, recomputing the prefix");
    fx_rmtree(dir);
}

static void beam_case(const char *fixture, int seed)
{
    char dir[256];
    result want[NPROMPT], got[NPROMPT], greedy[NPROMPT];
    make_model(dir, sizeof(dir), fixture, seed, MAXTOK);
    reference(dir, MAXTOK, 1, 1.0, greedy);
    run_opts o = { .width = 1, .penalty = 0.6f, .beam = true };
    decode(dir, MAXTOK, &o, got);
    same(got, greedy, "beam search of width 1 (length penalty 0.6)");
    static const struct { int w; float lp; } beams[] = { {3, 0.6f}, {4, 1.2f} };
    for (size_t b = 0; b < sizeof(beams) / sizeof(beams[0]); b++) {
        char what[96];
        reference(dir, MAXTOK, beams[b].w, beams[b].lp, want);
        o = (run_opts){ .width = beams[b].w, .penalty = beams[b].lp, .stagger = b == 1 };
        snprintf(what, sizeof(what), "beam width %d, length penalty %g", beams[b].w,
                 beams[b].lp);
        decode(dir, MAXTOK, &o, got);
        same(got, want, what);
        o.recompute = true;
        strcat(what, ", recomputing");
        decode(dir, MAXTOK, &o, got);
        same(got, want, what);
    }
    fx_rmtree(dir);
}

Test(gen_torch, decoder_greedy_equals_pytorch)
{
    greedy_case("tests/unit/fixtures/gen/decoder/model.json", 2);
}

Test(gen_torch, decoder_beam_search_equals_reference)
{
    beam_case("tests/unit/fixtures/gen/decoder/model.json", 2);
}

Test(gen_torch, encoder_decoder_greedy_equals_pytorch)
{
    greedy_case("tests/unit/fixtures/gen/encdec/model.json", 5);
}

Test(gen_torch, encoder_decoder_beam_search_equals_reference)
{
    beam_case("tests/unit/fixtures/gen/encdec/model.json", 5);
}

/* A GRU encoder (bidirectional) and a 2-level LSTM decoder with
 * cross-attention: the decoder's recurrent states kept a sequence. */
Test(gen_torch, recurrent_encoder_decoder_greedy_equals_pytorch)
{
    greedy_case("tests/unit/fixtures/gen/rnn/model.json", 1);
}

Test(gen_torch, recurrent_encoder_decoder_beam_search_equals_reference)
{
    beam_case("tests/unit/fixtures/gen/rnn/model.json", 1);
}

/* PyTorch's GPT exported to ONNX (tests/py/gen_onnx.py: nanoGPT's
 * attention under three causal masks), in a model folder of
 * 1/model.onnx and a model.json of only the generate block: greedy
 * decoding equals the module's own, token for token, on the key-value
 * cache (each block's attention recognised as one causal attention
 * layer) and recomputing. */
Test(gen_torch, onnx_decoder_greedy_equals_pytorch)
{
    enum { MAXTOK_ONNX = 16 };
    char dir[256], cmd[4096];
    result want[NPROMPT], got[NPROMPT];
    prompts = onnx_prompts;
    fx_tmpdir(dir, sizeof(dir), "gen_onnx");
    write_prompts(dir);
    snprintf(cmd, sizeof(cmd), "OMP_NUM_THREADS=1 /usr/bin/python3 %s %s --prompts "
             "%s/prompts.json --max-tokens %d 2> %s/export.log",
             fx_source_path("tests/py/gen_onnx.py"), dir, dir, MAXTOK_ONNX, dir);
    run_peer(cmd);
    read_ref(fx_join(dir, "ref.txt"), want);
    both_endings(want, "gen_onnx.py");

    char model[300];
    snprintf(model, sizeof(model), "%s/gpt", dir);
    loaded l;
    load_onnx(model, "gpt", &l);
    int att = 0;
    for (int k = 0; k < l.conf->nlayers; k++)
        att += l.conf->layers[k].type == DL_LAYER_ATTENTION && l.conf->layers[k].causal;
    cr_expect_eq(att, 3, "the three attention blocks as causal attention layers: %d", att);
    cr_expect_eq(l.conf->inputs[0].max_length, 64, "the ids' time axis from max_context: %lld",
                 (long long)l.conf->inputs[0].max_length);
    run_opts o = { .width = 1, .penalty = 1.0f, .stagger = true };
    bool cached = false;
    decode_loaded(&l, MAXTOK_ONNX, &o, got, &cached);
    cr_expect(cached, "the imported attention runs on the key-value cache");
    same(got, want, "ONNX greedy, joining a step apart");
    o.recompute = true;
    decode_loaded(&l, MAXTOK_ONNX, &o, got, NULL);
    same(got, want, "ONNX greedy, recomputing the prefix");
    unload(&l);
    fx_rmtree(dir);
}
