/* test_crf.c: the linear-chain CRF of src/nn/crf.c against brute force over
 * every tag path (the NLL, Viterbi's path, score and tie rule) for up to 6
 * positions and 4 tags, its gradients against central differences, large
 * and forbidden (-inf) scores, and one position computed by hand. */
#define _POSIX_C_SOURCE 200809L
#include <math.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <criterion/criterion.h>

#include "nn/crf.h"
#include "util/dl_util.h"

#define MAX_T 6
#define MAX_C 4
#define SEEDS 4             /* random draws per (T, len, C) */
#define MAX_PATHS 4096      /* MAX_C ^ MAX_T */
/* Values: both sides sum in double from the same floats, so they differ
 * by rounding only (about 1e-15 relative). */
#define VAL_RTOL 1e-9
/* Gradients: |analytic - numeric| <= GRAD_ATOL + GRAD_RTOL * |numeric|.
 * The analytic one is a float (6e-8 relative); the central difference in
 * double with step 1e-3 is off by about 1e-7. */
#define GRAD_ATOL 1e-5
#define GRAD_RTOL 1e-4
#define EPS       1e-3f

TestSuite(crf, .timeout = 10);

/* One sample, each buffer allocated to its exact size so that the
 * sanitizer build catches a read or write past it. */
typedef struct sample {
    int64_t  T, len, C;
    float   *emit;              /* (T, C), NaN at positions >= len */
    float   *trans;             /* (C + 2, C) */
    int32_t *tags;              /* len */
    void    *work;              /* crf_work_size(len, C) bytes */
} sample;

static void *xmalloc(size_t n)
{
    void *p = malloc(n);
    cr_assert_not_null(p, "malloc %zu", n);
    return p;
}

/* Scores uniform in (-spread, spread), tags uniform. */
static sample sample_new(dl_rng *rng, int64_t T, int64_t len, int64_t C, float spread)
{
    sample s = { T, len, C, xmalloc((size_t)(T * C) * sizeof(float)),
                 xmalloc((size_t)((C + 2) * C) * sizeof(float)),
                 xmalloc((size_t)len * sizeof(int32_t)), xmalloc(crf_work_size(len, C)) };
    for (int64_t k = 0; k < T * C; k++)
        s.emit[k] = k < len * C ? spread * (2.0f * dl_rng_uniform(rng) - 1.0f) : NAN;
    for (int64_t k = 0; k < (C + 2) * C; k++)
        s.trans[k] = spread * (2.0f * dl_rng_uniform(rng) - 1.0f);
    for (int64_t t = 0; t < len; t++)
        s.tags[t] = (int32_t)dl_rng_below(rng, (uint64_t)C);
    return s;
}

static void sample_free(sample *s)
{
    free(s->emit);
    free(s->trans);
    free(s->tags);
    free(s->work);
}

/* Calls check on every T <= MAX_T, len <= T and C <= MAX_C, SEEDS times. */
static void each_case(uint64_t seed, float spread, void (*check)(const sample *s))
{
    dl_rng rng;
    dl_rng_seed(&rng, seed);
    for (int64_t C = 1; C <= MAX_C; C++)
        for (int64_t T = 1; T <= MAX_T; T++)
            for (int64_t len = 1; len <= T; len++)
                for (int k = 0; k < SEEDS; k++) {
                    sample s = sample_new(&rng, T, len, C, spread);
                    check(&s);
                    sample_free(&s);
                }
}

/* ---- brute force ---------------------------------------------------------- */

/* A path's score from its definition: start, emissions, transitions, end. */
static double score_of(const sample *s, const int32_t *y)
{
    int64_t C = s->C;
    double sc = (double)s->trans[y[0]] + s->trans[C + y[s->len - 1]];
    for (int64_t t = 0; t < s->len; t++)
        sc += s->emit[t * C + y[t]];
    for (int64_t t = 1; t < s->len; t++)
        sc += s->trans[(2 + y[t - 1]) * C + y[t]];
    return sc;
}

/* The next path in counting order (y[0] fastest); false after the last. */
static bool next_path(int32_t *y, int64_t len, int64_t C)
{
    for (int64_t t = 0; t < len; t++) {
        if (++y[t] < C)
            return true;
        y[t] = 0;
    }
    return false;
}

/* log Z: log-sum-exp over the score of every one of the C^len paths. */
static double brute_logz(const sample *s)
{
    static double sc[MAX_PATHS];
    int32_t y[MAX_T] = {0};
    int64_t n = 0;
    double mx = -INFINITY, sum = 0.0;
    do {
        sc[n] = score_of(s, y);
        mx = fmax(mx, sc[n++]);
    } while (next_path(y, s->len, s->C));
    for (int64_t k = 0; k < n; k++)
        sum += exp(sc[k] - mx);
    return mx + log(sum);
}

/* Whether a comes before b comparing the last position first. */
static bool before(const int32_t *a, const int32_t *b, int64_t len)
{
    for (int64_t t = len - 1; t >= 0; t--)
        if (a[t] != b[t])
            return a[t] < b[t];
    return false;
}

/* The best path (crf.h's tie rule) into best; its score. Adds 1 to *ties
 * when several paths share that score. */
static double brute_best(const sample *s, int32_t *best, int *ties)
{
    int32_t y[MAX_T] = {0};
    double top = -INFINITY;
    int n_top = 0;
    for (int64_t t = 0; t < s->len; t++)
        best[t] = INT32_MAX;    /* after every path, even a forbidden one */
    do {
        double sc = score_of(s, y);
        n_top = sc > top ? 1 : n_top + (sc == top);
        if (sc > top || (sc == top && before(y, best, s->len))) {
            top = sc;
            memcpy(best, y, (size_t)s->len * sizeof(*y));
        }
    } while (next_path(y, s->len, s->C));
    *ties += n_top > 1;
    return top;
}

static void expect_close(double got, double want, double rtol, const sample *s, const char *what)
{
    cr_assert(fabs(got - want) <= rtol * fmax(1.0, fabs(want)),
              "%s: %.17g, brute force %.17g (T=%lld len=%lld C=%lld)", what, got, want,
              (long long)s->T, (long long)s->len, (long long)s->C);
}

/* ---- the negative log-likelihood ------------------------------------------ */

static void check_nll(const sample *s)
{
    double nll = crf_nll(s->emit, s->T, s->len, s->C, s->trans, s->tags, 1.0f, NULL, NULL,
                         s->work);
    expect_close(nll, brute_logz(s) - score_of(s, s->tags), VAL_RTOL, s, "nll");
    cr_assert_geq(nll, -1e-12);
}

Test(crf, nll_matches_brute_force)
{
    each_case(11, 2.0f, check_nll);
}

/* Scores of +-2000 overflow a plain exp, even in double. */
Test(crf, nll_stable_for_large_scores)
{
    each_case(12, 2000.0f, check_nll);
}

/* ---- gradients ------------------------------------------------------------- */

/* nll with x[k] at x[k] + d (float), and the value x[k] then held. */
static double nll_at(const sample *s, float *x, int64_t k, float d, double *xk)
{
    float keep = x[k];
    x[k] = keep + d;
    *xk = x[k];
    double nll = crf_nll(s->emit, s->T, s->len, s->C, s->trans, s->tags, 1.0f, NULL, NULL,
                         s->work);
    x[k] = keep;
    return nll;
}

/* The central difference of nll in x[k], against scale * grad. */
static void check_fd(const sample *s, float *x, int64_t k, float scale, float grad,
                     const char *what)
{
    double xp, xm, np = nll_at(s, x, k, EPS, &xp), nm = nll_at(s, x, k, -EPS, &xm);
    double fd = scale * (np - nm) / (xp - xm);
    cr_assert(fabs(grad - fd) <= GRAD_ATOL + GRAD_RTOL * fabs(fd),
              "d %s[%lld]: %.9g, central difference %.9g (T=%lld len=%lld C=%lld)", what,
              (long long)k, grad, fd, (long long)s->T, (long long)s->len, (long long)s->C);
}

static void check_grads(const sample *s)
{
    const float scale = 0.5f, prior = 0.25f;     /* d_trans must add to what it holds */
    int64_t C = s->C, ne = s->T * C, nt = (C + 2) * C;
    float *d_emit = xmalloc((size_t)ne * sizeof(float));
    float *d_trans = xmalloc((size_t)nt * sizeof(float));
    for (int64_t k = 0; k < ne; k++)
        d_emit[k] = 7.0f;
    for (int64_t k = 0; k < nt; k++)
        d_trans[k] = prior;
    double nll = crf_nll(s->emit, s->T, s->len, C, s->trans, s->tags, scale, d_emit, d_trans,
                         s->work);
    cr_assert_eq(nll, crf_nll(s->emit, s->T, s->len, C, s->trans, s->tags, scale, NULL, NULL,
                              s->work), "the gradients change the value");
    for (int64_t k = 0; k < s->len * C; k++)
        check_fd(s, s->emit, k, scale, d_emit[k], "emit");
    for (int64_t k = s->len * C; k < ne; k++)
        cr_assert_eq(d_emit[k], 0.0f, "padding d_emit[%lld] = %g", (long long)k, d_emit[k]);
    for (int64_t k = 0; k < nt; k++)
        check_fd(s, s->trans, k, scale, d_trans[k] - prior, "trans");
    free(d_emit);
    free(d_trans);
}

Test(crf, gradients_match_central_differences)
{
    each_case(21, 2.0f, check_grads);
}

/* ---- Viterbi ------------------------------------------------------------------ */

static int ties_seen;

static void check_viterbi(const sample *s)
{
    int32_t want[MAX_T], *got = xmalloc((size_t)s->len * sizeof(int32_t));
    double score, top = brute_best(s, want, &ties_seen);
    crf_viterbi(s->emit, s->len, s->C, s->trans, got, &score, s->work);
    for (int64_t t = 0; t < s->len; t++)
        cr_assert_eq(got[t], want[t], "tag %lld: %d, brute force %d (T=%lld len=%lld C=%lld)",
                     (long long)t, got[t], want[t], (long long)s->T, (long long)s->len,
                     (long long)s->C);
    expect_close(score, top, 1e-12, s, "viterbi score");
    crf_viterbi(s->emit, s->len, s->C, s->trans, got, NULL, s->work);    /* score optional */
    free(got);
}

Test(crf, viterbi_matches_brute_force)
{
    each_case(31, 2.0f, check_viterbi);
}

/* Integer scores sum exactly, so equal paths tie exactly and the rule
 * (lowest last tag, then the tag before, ...) decides. */
static void check_viterbi_ints(const sample *s)
{
    for (int64_t k = 0; k < s->len * s->C; k++)
        s->emit[k] = roundf(s->emit[k]);
    for (int64_t k = 0; k < (s->C + 2) * s->C; k++)
        s->trans[k] = roundf(s->trans[k]);
    check_viterbi(s);
}

Test(crf, viterbi_breaks_ties_toward_lower_tags)
{
    each_case(32, 1.5f, check_viterbi_ints);
    /* 116 of the 336 cases at this seed */
    cr_expect_geq(ties_seen, 50, "only %d of the cases had tied best paths", ties_seen);

    /* Every path scores 0: the all-zero one. */
    float emit[3 * 3] = {0}, trans[5 * 3] = {0};
    int32_t path[3] = {9, 9, 9};
    double work[64], score = -1.0;
    cr_assert_leq(crf_work_size(3, 3), sizeof(work));
    crf_viterbi(emit, 3, 3, trans, path, &score, work);
    cr_expect(path[0] == 0 && path[1] == 0 && path[2] == 0 && score == 0.0,
              "path %d %d %d score %g", path[0], path[1], path[2], score);
    /* Tags 1 and 2 tie at the last position, 0 and 2 before it: 0 then 1. */
    float emit2[2 * 3] = { 1, 0, 1,  0, 1, 1 };
    crf_viterbi(emit2, 2, 3, trans, path, &score, work);
    cr_expect(path[0] == 0 && path[1] == 1 && score == 2.0, "path %d %d score %g", path[0],
              path[1], score);
}

/* ---- by hand ---------------------------------------------------------------- */

/* One position: nll = logsumexp(start + emit + end) - (start + emit + end)[y].
 * With start + emit + end = (1, 0): log(1 + e^-1) for tag 0, log(1 + e) for
 * tag 1; the gradient of each row read is softmax - one-hot,
 * (e / (1 + e), 1 / (1 + e)) - one-hot. Padding rows (NaN) are not read. */
Test(crf, one_position_by_hand)
{
    float trans[4 * 2] = { 0.5f, -0.25f,   0.25f, -0.25f,   3.0f, -2.0f,   1.0f, 4.0f };
    float emit[3 * 2] = { 0.25f, 0.5f, NAN, NAN, NAN, NAN };
    const double p0 = exp(1.0) / (1.0 + exp(1.0));
    double work[16];
    cr_assert_leq(crf_work_size(1, 2), sizeof(work));
    for (int64_t T = 1; T <= 3; T += 2)
        for (int32_t y = 0; y < 2; y++) {
            float d_emit[3 * 2], d_trans[4 * 2] = {0};
            double nll = crf_nll(emit, T, 1, 2, trans, &y, 1.0f, d_emit, d_trans, work);
            cr_expect_float_eq(nll, y == 0 ? 0.31326168751822286 : 1.3132616875182228, 1e-12,
                               "T=%lld tag %d", (long long)T, y);
            double want[2] = { p0 - (y == 0), 1.0 - p0 - (y == 1) };
            for (int j = 0; j < 2; j++) {
                cr_expect_float_eq(d_emit[j], want[j], 1e-7, "d_emit[%d], tag %d", j, y);
                cr_expect_float_eq(d_trans[j], want[j], 1e-7, "d start[%d], tag %d", j, y);
                cr_expect_float_eq(d_trans[2 + j], want[j], 1e-7, "d end[%d], tag %d", j, y);
            }
            for (int k = 2; k < 2 * T; k++)
                cr_expect_eq(d_emit[k], 0.0f, "padding d_emit[%d]", k);
            for (int k = 4; k < 8; k++)
                cr_expect_eq(d_trans[k], 0.0f, "d_trans[%d]: no transition at len 1", k);
        }
    int32_t path = -1;
    double score;
    crf_viterbi(emit, 1, 2, trans, &path, &score, work);
    cr_expect(path == 0 && score == 1.0, "path %d score %g", path, score);
}

/* ---- forbidden steps -------------------------------------------------------- */

/* -inf weights (start of tag 1, end of tag 0, 0 -> 2, 2 -> 2) remove their
 * paths: the value matches brute force over what is left, their gradients
 * are 0, Viterbi avoids them, and a path through one has nll +inf. */
Test(crf, forbidden_steps)
{
    dl_rng rng;
    dl_rng_seed(&rng, 41);
    for (int64_t len = 1; len <= MAX_T; len++) {
        sample s = sample_new(&rng, MAX_T, len, 3, 2.0f);
        const int64_t off[] = { 1, 3 + 0, 6 + 2, 6 + 3 * 2 + 2 };
        float d_emit[MAX_T * 3], d_trans[5 * 3] = {0};
        int32_t best[MAX_T], path[MAX_T];
        int ties = 0;
        double score;
        for (int k = 0; k < 4; k++)
            s.trans[off[k]] = -INFINITY;
        double top = brute_best(&s, best, &ties);
        memcpy(s.tags, best, (size_t)len * sizeof(*best));
        double nll = crf_nll(s.emit, s.T, len, 3, s.trans, s.tags, 1.0f, d_emit, d_trans,
                             s.work);
        expect_close(nll, brute_logz(&s) - top, VAL_RTOL, &s, "nll");
        for (int k = 0; k < 4; k++)
            cr_expect_eq(d_trans[off[k]], 0.0f, "d_trans[%lld]", (long long)off[k]);
        for (int64_t k = 0; k < len * 3; k++)
            cr_expect(isfinite(d_emit[k]), "d_emit[%lld] = %g", (long long)k, d_emit[k]);
        crf_viterbi(s.emit, len, 3, s.trans, path, &score, s.work);
        cr_expect(memcmp(path, best, (size_t)len * sizeof(*path)) == 0,
                  "len %lld: viterbi's path is not brute force's", (long long)len);
        expect_close(score, top, 1e-12, &s, "viterbi score");
        s.tags[0] = 1;     /* forbidden start */
        cr_expect(isinf(crf_nll(s.emit, s.T, len, 3, s.trans, s.tags, 1.0f, NULL, NULL,
                                s.work)), "a forbidden path's nll");
        sample_free(&s);
    }
}
