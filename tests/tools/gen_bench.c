/* gen_bench.c: generation speed of a decoder-only byte-level transformer
 * with kjv-gpt's shape through dl_gen on the CPU backend: tokens/s with
 * one sequence at a time and with 16 at once, and time to first token
 * with 16 arriving together and 16 arriving one every few steps;
 * tests/bench/gen_vs_torch runs it beside PyTorch's peer
 * (tests/bench/gen_vs_torch.py), which loads the weights written here.
 *
 *   gen_bench --dir DIR [--threads N] [--new-tokens K] [--rounds R]
 *             [--stagger-steps S] [--seed SEED] [--invariant]
 *             [--threading daemon|pool|omp] [--together-only]
 *
 * The model (DIR/model.json): ids (INT64, context 128), embedding 256 x
 * 128, pos_embedding, 4 pre-layernorm blocks (layernorm, causal attention
 * of 4 heads, residual; layernorm, dense 512, gelu, dense 128, residual),
 * a final layernorm, dense 256: the logits of the next byte. Random
 * weights from dl_model_new (seed SEED), saved as DIR/weights.safetensors;
 * the 16 prompts (16 to 32 bytes) in DIR/prompts.txt, one a line. No eos:
 * every sequence generates K tokens (default 96), greedily. Weights fixed
 * and threads as the daemon has them (--threading daemon), or all loops on
 * dlserve's pool without oneDNN (pool), or on oneDNN's OpenMP team (omp).
 *
 * Measured, each R times (default 3): "one": the 16 prompts one after
 * another, each alone; "together": the 16 started before one step;
 * "staggered": one arriving every S decode steps' time of "together"
 * (default 4), on the wall clock: a sequence that arrives during a step
 * starts after it, as in the daemon. The arrival offsets go to
 * DIR/arrivals.txt (the peer replays them). Tokens/s count generated
 * tokens over the wall time of the whole run (prefills included); time to
 * first token is from a sequence's arrival to the end of the step that
 * gave its first token, pooled over the rounds (p99 of 16 x R values).
 * DIR/ids.json: each prompt's generated ids in "together" (and whether
 * "one" gave the same). Prints one JSON line. --together-only measures
 * "together" alone and writes no files (for a profiler). */
#define _POSIX_C_SOURCE 200809L
#include <getopt.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "nn/dl_gen.h"
#include "nn/dl_nn.h"

#define NPROMPTS 16
#define CONTEXT  128

static const char *const prompts[NPROMPTS] = {
    "In the beginning God created", "And the earth was without form",
    "And God said, Let there be", "And God saw the light",
    "And the evening and the morning", "For God so loved",
    "Let the waters under the heaven", "And the earth brought forth",
    "And God made two great lights", "The LORD is my shepherd",
    "So God created man in his own", "Blessed are the meek",
    "Thus the heavens and the earth", "And on the seventh day God",
    "These are the generations of", "And the LORD God formed man",
};

typedef struct opts {
    const char *dir;
    const char *threading;
    int threads, new_tokens, rounds, stagger_steps;
    uint64_t seed;
    bool invariant, together_only;
} opts;

typedef struct bench {
    dl_backend    *be;
    dl_model_conf *conf;
    dl_gen_conf    gc;
    dl_tokenizer  *tok;
    dl_model      *m;
    dl_gen        *g;
    dl_gen_params  p;
} bench;

static double now(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}

static void sleep_until(double t)
{
    double d = t - now();
    if (d > 0) {
        struct timespec ts = { (time_t)d, (long)((d - (double)(time_t)d) * 1e9) };
        nanosleep(&ts, NULL);
    }
}

static int die(const char *what, const dl_err *err)
{
    fprintf(stderr, "gen_bench: %s: %s\n", what, err ? err->msg : "");
    return 1;
}

static bool parse(int argc, char **argv, opts *o)
{
    static const struct option longs[] = {
        {"dir", 1, 0, 'd'}, {"threads", 1, 0, 'n'}, {"new-tokens", 1, 0, 'k'},
        {"rounds", 1, 0, 'r'}, {"stagger-steps", 1, 0, 's'}, {"seed", 1, 0, 'S'},
        {"invariant", 0, 0, 'i'}, {"threading", 1, 0, 't'},
        {"together-only", 0, 0, 'T'}, {0, 0, 0, 0}};
    *o = (opts){ NULL, "daemon", 2, 96, 3, 4, 1, false, false };
    int c;
    while ((c = getopt_long(argc, argv, "", longs, NULL)) != -1) {
        switch (c) {
        case 'd': o->dir = optarg; break;
        case 'n': o->threads = atoi(optarg); break;
        case 'k': o->new_tokens = atoi(optarg); break;
        case 'r': o->rounds = atoi(optarg); break;
        case 's': o->stagger_steps = atoi(optarg); break;
        case 'S': o->seed = strtoull(optarg, NULL, 10); break;
        case 'i': o->invariant = true; break;
        case 't': o->threading = optarg; break;
        case 'T': o->together_only = true; break;
        default: return false;
        }
    }
    bool known = !strcmp(o->threading, "daemon") || !strcmp(o->threading, "pool") ||
                 !strcmp(o->threading, "omp");
    return o->dir && known && o->threads > 0 && o->new_tokens > 0 && o->rounds > 0 &&
           o->stagger_steps > 0 && o->new_tokens + 32 <= CONTEXT;
}

/* kjv-gpt's shape as model.json text, without an eos. */
static void model_json(char *buf, size_t cap)
{
    size_t n = (size_t)snprintf(buf, cap,
        "{\"name\": \"gen-bench\", \"inputs\": [{\"name\": \"ids\", \"datatype\": \"INT64\", "
        "\"shape\": [-1], \"max_length\": %d}], \"layers\": [\n"
        "{\"name\": \"emb\", \"type\": \"embedding\", \"inputs\": [\"ids\"], "
        "\"num_embeddings\": 256, \"dim\": 128},\n"
        "{\"name\": \"pos\", \"type\": \"pos_embedding\", \"max_length\": %d},\n", CONTEXT,
        CONTEXT);
    const char *x = "pos";
    char prev[16];
    for (int b = 0; b < 4; b++) {
        n += (size_t)snprintf(buf + n, cap - n,
            "{\"name\": \"ln%da\", \"type\": \"layernorm\", \"inputs\": [\"%s\"]},\n"
            "{\"name\": \"att%d\", \"type\": \"attention\", \"heads\": 4, \"causal\": true},\n"
            "{\"name\": \"res%da\", \"type\": \"add\", \"inputs\": [\"%s\", \"att%d\"]},\n"
            "{\"name\": \"ln%db\", \"type\": \"layernorm\"},\n"
            "{\"name\": \"fc%da\", \"type\": \"dense\", \"units\": 512},\n"
            "{\"name\": \"gelu%d\", \"type\": \"gelu\"},\n"
            "{\"name\": \"fc%db\", \"type\": \"dense\", \"units\": 128},\n"
            "{\"name\": \"res%db\", \"type\": \"add\", \"inputs\": [\"res%da\", \"fc%db\"]},\n",
            b, x, b, b, x, b, b, b, b, b, b, b, b);
        snprintf(prev, sizeof(prev), "res%db", b);
        x = prev;
    }
    snprintf(buf + n, cap - n,
        "{\"name\": \"lnf\", \"type\": \"layernorm\", \"inputs\": [\"%s\"]},\n"
        "{\"name\": \"logits\", \"type\": \"dense\", \"units\": 256}],\n"
        "\"outputs\": [{\"name\": \"logits\", \"from\": \"logits\", \"loss\": \"next_token\", "
        "\"of\": \"ids\"}],\n"
        "\"generate\": {\"input\": \"ids\", \"output\": \"logits\", \"max_context\": %d}}\n",
        x, CONTEXT);
}

static bool write_text(const char *dir, const char *name, const char *text)
{
    char path[4096];
    snprintf(path, sizeof(path), "%s/%s", dir, name);
    FILE *f = fopen(path, "w");
    if (!f)
        return false;
    bool ok = fputs(text, f) >= 0;
    return fclose(f) == 0 && ok;
}

static dl_status bench_open(bench *b, const opts *o, dl_err *err)
{
    static char json[16384];
    char path[4096];
    bool has;
    model_json(json, sizeof(json));
    if (!write_text(o->dir, "model.json", json))
        return dl_err_set(err, DL_ERR_IO, "%s/model.json: cannot write", o->dir);
    /* daemon: as the daemon serves (src/serve/daemon.c): the dense layers
     * on oneDNN's OpenMP team, the other loops on dlserve's pool, whose
     * idle workers sleep at once; pool: no oneDNN, OpenBLAS inside the
     * pool's tasks; omp: oneDNN's team runs every loop */
    bool daemon = !strcmp(o->threading, "daemon");
    dl_backend_params bp = { .threads = o->threads, .keep_pool = daemon,
                             .engine_layers = strcmp(o->threading, "pool") != 0 };
    if (daemon)
        dl_pool_set_spin(0);
    dl_status st = dl_backend_new("cpu", &bp, &b->be, err);
    if (st == DL_OK)
        st = dl_model_conf_parse(json, strlen(json), "model.json", &b->conf, err);
    if (st == DL_OK)
        st = dl_gen_conf_read(json, "model.json", b->conf, &b->gc, &has, err);
    if (st == DL_OK)
        st = dl_tokenizer_new(&b->gc.tok, &b->tok, err);
    if (st == DL_OK)
        st = dl_model_new(b->be, b->conf, o->seed, &b->m, err);
    snprintf(path, sizeof(path), "%s/weights.safetensors", o->dir);
    if (st == DL_OK)
        st = dl_model_save(b->m, path, NULL, err);
    if (st != DL_OK)
        return st;
    dl_model_fix_weights(b->m);
    dl_model_set_batch_invariant(b->m, o->invariant);
    st = dl_gen_new(b->m, &b->gc, b->tok, NPROMPTS, 0, &b->g, err);
    dl_gen_params_init(&b->p);
    b->p.max_tokens = o->new_tokens;
    return st;
}

static void bench_close(bench *b)
{
    dl_gen_free(b->g);
    dl_model_free(b->m);
    dl_tokenizer_free(b->tok);
    dl_gen_conf_release(&b->gc);
    dl_model_conf_free(b->conf);
    dl_backend_free(b->be);
}

/* One run: prompt i arrives at t0 + arrive[i] (prompts[first..first+n)),
 * each started at the first step boundary after it. ttft[i]: seconds
 * from its arrival to its first token; ids[i]: its generated ids.
 * *decode_s, *decode_steps: the time and count of steps that started no
 * sequence (pure decoding). Returns the wall time, or -1. */
static double run(bench *b, int first, int n, const double *arrive, double *ttft,
                  int32_t (*ids)[CONTEXT], double *decode_s, int *decode_steps, dl_err *err)
{
    dl_gen_seq *s[NPROMPTS] = {0};
    bool got[NPROMPTS] = {0}, done[NPROMPTS] = {0};
    int next = 0, left = n;
    double t0 = now();
    while (left > 0) {
        if (dl_gen_running(b->g) == 0 && next < n)
            sleep_until(t0 + arrive[next]);
        double t = now();
        int started = 0;
        for (; next < n && t0 + arrive[next] <= t; next++, started++) {
            const char *pr = prompts[first + next];
            if (dl_gen_start(b->g, pr, strlen(pr), &b->p, &s[next], err) != DL_OK)
                return -1.0;
        }
        if (dl_gen_step(b->g, err) != DL_OK)
            return -1.0;
        double t1 = now();
        if (started == 0)
            *decode_s += t1 - t, (*decode_steps)++;
        for (int i = 0; i < next; i++) {
            if (done[i])
                continue;
            if (!got[i] && dl_gen_tokens(s[i]) > 0)
                ttft[i] = t1 - (t0 + arrive[i]), got[i] = true;
            if (dl_gen_finished(s[i]) != DL_GEN_RUNNING) {
                int64_t k;
                const int32_t *g = dl_gen_ids(s[i], &k);
                memcpy(ids[i], g, (size_t)k * sizeof(int32_t));
                dl_gen_end(b->g, s[i]);
                done[i] = true;
                left--;
            }
        }
    }
    return now() - t0;
}

static int cmp_double(const void *a, const void *b)
{
    double x = *(const double *)a, y = *(const double *)b;
    return x < y ? -1 : x > y;
}

/* The nearest-rank percentile q (0-100) of v[0..n), sorted here. */
static double pct(double *v, int n, double q)
{
    qsort(v, (size_t)n, sizeof(*v), cmp_double);
    int k = (int)((q / 100.0) * n + 0.999999);
    return v[k < 1 ? 0 : k > n ? n - 1 : k - 1];
}

/* The figures of a bench run: wall times (best round) and times to
 * first token (pooled over the rounds). */
typedef struct figures {
    double one_s, together_s, staggered_s, step_s, one_ttft;
    double ttft_together[NPROMPTS * 64], ttft_staggered[NPROMPTS * 64];
    int    nt, ns;
    double arrive[NPROMPTS];
    bool   one_same, staggered_same;
} figures;

static int32_t ids[NPROMPTS][CONTEXT], ids_one[NPROMPTS][CONTEXT],
               ids_staggered[NPROMPTS][CONTEXT];

/* The 16 prompts one after another, each alone, then the 16 together;
 * the mean time of a decode step of 16 sets the staggered arrivals. */
static dl_status measure_batched(bench *b, const opts *o, int rounds, figures *f, dl_err *err)
{
    double zero[NPROMPTS] = {0}, ttft[NPROMPTS], dec_s = 0.0, scratch = 0.0, t;
    int dec_steps = 0, scratch_steps = 0;
    f->one_s = f->together_s = f->one_ttft = 1e30;
    for (int r = 0; r < rounds; r++) {
        double w = 0.0;
        for (int i = 0; i < NPROMPTS && !o->together_only; i++) {
            if ((t = run(b, i, 1, zero, ttft, ids_one + i, &scratch, &scratch_steps,
                         err)) < 0)
                return err->code;
            w += t;
            f->one_ttft = ttft[0] < f->one_ttft ? ttft[0] : f->one_ttft;
        }
        f->one_s = w < f->one_s ? w : f->one_s;
        if ((t = run(b, 0, NPROMPTS, zero, ttft, ids, &dec_s, &dec_steps, err)) < 0)
            return err->code;
        f->together_s = t < f->together_s ? t : f->together_s;
        for (int i = 0; i < NPROMPTS; i++)
            f->ttft_together[f->nt++] = ttft[i];
    }
    f->step_s = dec_s / (dec_steps ? dec_steps : 1);
    for (int i = 0; i < NPROMPTS; i++)
        f->arrive[i] = i * o->stagger_steps * f->step_s;
    f->one_same = memcmp(ids, ids_one, sizeof(ids)) == 0;
    return DL_OK;
}

/* One arriving every stagger_steps decode steps of 16 sequences. */
static dl_status measure_staggered(bench *b, int rounds, figures *f, dl_err *err)
{
    double ttft[NPROMPTS], scratch = 0.0;
    int scratch_steps = 0;
    f->staggered_s = 1e30;
    for (int r = 0; r < rounds; r++) {
        double t = run(b, 0, NPROMPTS, f->arrive, ttft, ids_staggered, &scratch,
                       &scratch_steps, err);
        if (t < 0)
            return err->code;
        f->staggered_s = t < f->staggered_s ? t : f->staggered_s;
        for (int i = 0; i < NPROMPTS; i++)
            f->ttft_staggered[f->ns++] = ttft[i];
    }
    f->staggered_same = memcmp(ids, ids_staggered, sizeof(ids)) == 0;
    return DL_OK;
}

static bool write_ids(const opts *o, bool one_same)
{
    char path[4096];
    snprintf(path, sizeof(path), "%s/ids.json", o->dir);
    FILE *f = fopen(path, "w");
    if (!f)
        return false;
    fprintf(f, "{\"one_equals_together\": %s, \"ids\": [", one_same ? "true" : "false");
    for (int i = 0; i < NPROMPTS; i++) {
        fprintf(f, "%s[", i ? ", " : "");
        for (int k = 0; k < o->new_tokens; k++)
            fprintf(f, "%s%d", k ? ", " : "", ids[i][k]);
        fprintf(f, "]");
    }
    fprintf(f, "]}\n");
    return fclose(f) == 0;
}

static bool write_setup(const opts *o, const double *arrive)
{
    char text[NPROMPTS * 64], path[4096];
    size_t n = 0;
    for (int i = 0; i < NPROMPTS; i++)
        n += (size_t)snprintf(text + n, sizeof(text) - n, "%s\n", prompts[i]);
    if (!write_text(o->dir, "prompts.txt", text))
        return false;
    snprintf(path, sizeof(path), "%s/arrivals.txt", o->dir);
    FILE *f = fopen(path, "w");
    if (!f)
        return false;
    for (int i = 0; i < NPROMPTS; i++)
        fprintf(f, "%.6f\n", arrive[i]);
    return fclose(f) == 0;
}

static const char *yes(bool b) { return b ? "true" : "false"; }

static void report(const opts *o, const bench *b, figures *f)
{
    double tokens = (double)NPROMPTS * o->new_tokens;
    printf("{\"side\": \"dlserve\", \"threads\": %d, \"threading\": \"%s\", "
           "\"new_tokens\": %d, \"cached\": %s, \"invariant\": %s, "
           "\"together_tokens_per_sec\": %.1f, \"decode_step_ms\": %.3f, "
           "\"together_ttft_p50_ms\": %.3f, \"together_ttft_p99_ms\": %.3f",
           o->threads, o->threading, o->new_tokens, yes(dl_gen_cached(b->g)),
           yes(o->invariant), tokens / f->together_s, 1e3 * f->step_s,
           1e3 * pct(f->ttft_together, f->nt, 50), 1e3 * pct(f->ttft_together, f->nt, 99));
    if (!o->together_only)
        printf(", \"one_tokens_per_sec\": %.1f, \"one_ttft_ms\": %.3f, "
               "\"staggered_tokens_per_sec\": %.1f, \"staggered_ttft_p50_ms\": %.3f, "
               "\"staggered_ttft_p99_ms\": %.3f, \"stagger_ms\": %.3f, "
               "\"one_equals_together\": %s, \"staggered_equals_together\": %s",
               tokens / f->one_s, 1e3 * f->one_ttft, tokens / f->staggered_s,
               1e3 * pct(f->ttft_staggered, f->ns, 50), 1e3 * pct(f->ttft_staggered, f->ns, 99),
               1e3 * o->stagger_steps * f->step_s, yes(f->one_same), yes(f->staggered_same));
    printf("}\n");
}

int main(int argc, char **argv)
{
    /* OpenBLAS's kernels for this CPU, as the dlserve binary picks them */
    const char *core = dl_blas_core_override();
    if (core && setenv("OPENBLAS_CORETYPE", core, 1) == 0)
        execv("/proc/self/exe", argv);
    opts o;
    if (!parse(argc, argv, &o)) {
        fprintf(stderr, "usage: gen_bench --dir DIR [--threads N] [--new-tokens K (<= 96)] "
                "[--rounds R] [--stagger-steps S] [--seed SEED] [--invariant] "
                "[--threading daemon|pool|omp] [--together-only]\n");
        return 2;
    }
    dl_err err = {0};
    bench b = {0};
    static figures f;
    double zero[NPROMPTS] = {0}, ttft[NPROMPTS], scratch = 0.0;
    int scratch_steps = 0, rounds = o.rounds < 64 ? o.rounds : 64;
    if (bench_open(&b, &o, &err) != DL_OK)
        return die("model", &err);
    /* warm-up: the buffers of a 16-sequence pass and of one alone */
    if (run(&b, 0, NPROMPTS, zero, ttft, ids, &scratch, &scratch_steps, &err) < 0 ||
        run(&b, 0, 1, zero, ttft, ids_one, &scratch, &scratch_steps, &err) < 0)
        return die("warm-up", &err);
    if (measure_batched(&b, &o, rounds, &f, &err) != DL_OK)
        return die("decoding", &err);
    if (!o.together_only) {
        if (measure_staggered(&b, rounds, &f, &err) != DL_OK)
            return die("staggered arrivals", &err);
        if (!write_ids(&o, f.one_same) || !write_setup(&o, f.arrive))
            return die("writing the run's files", NULL);
    }
    report(&o, &b, &f);
    bench_close(&b);
    return 0;
}
