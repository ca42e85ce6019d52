/* crf.c: a linear-chain CRF on the host: a tag path's negative
 * log-likelihood and its gradients by forward-backward in log space, and
 * Viterbi decoding. Layout and preconditions in crf.h. */
#include "nn/crf.h"

#include <math.h>
#include <string.h>

/* One sample's forward-backward tables and what the gradients read. */
typedef struct crf_pass {
    const float   *emit, *trans;      /* (len, C) read, (C + 2, C) */
    const int32_t *tags;
    const double  *alpha, *beta;      /* (len, C) each */
    int64_t        len, C;
    double         logz, scale;
} crf_pass;

/* log sum_i exp(a[i] + w[i * ws]) over i < n, shifted by the largest term
 * so that no exp overflows; -inf when every term is (forbidden steps). */
static double lse(const double *a, const float *w, int64_t ws, int64_t n)
{
    double mx = -INFINITY;
    for (int64_t i = 0; i < n; i++)
        mx = fmax(mx, a[i] + w[i * ws]);
    if (mx == -INFINITY)
        return mx;
    double s = 0.0;
    for (int64_t i = 0; i < n; i++)
        s += exp(a[i] + w[i * ws] - mx);
    return mx + log(s);
}

/* The index of the largest a[i] + w[i * ws] over i < n, the lowest on a
 * tie (only a strictly larger term moves it), and that term in *best. */
static int64_t argmax(const double *a, const float *w, int64_t ws, int64_t n, double *best)
{
    int64_t k = 0;
    *best = a[0] + w[0];
    for (int64_t i = 1; i < n; i++) {
        double v = a[i] + w[i * ws];
        if (v > *best) {
            *best = v;
            k = i;
        }
    }
    return k;
}

size_t crf_work_size(int64_t len, int64_t C)
{
    /* crf_nll: alpha and beta, (len, C) doubles each; crf_viterbi: two
     * rows of doubles, then (len, C) int32 backpointers */
    size_t nll = 2 * (size_t)(len * C) * sizeof(double);
    size_t vit = 2 * (size_t)C * sizeof(double) + (size_t)(len * C) * sizeof(int32_t);
    return nll > vit ? nll : vit;
}

/* alpha (len, C): the log of the summed scores of every path over
 * positions 0..t that ends in tag j, emission at t included. Returns log Z. */
static double forward(const float *emit, int64_t len, int64_t C, const float *trans,
                      double *alpha)
{
    const float *w = trans + 2 * C;
    for (int64_t j = 0; j < C; j++)
        alpha[j] = (double)trans[j] + emit[j];
    for (int64_t t = 1; t < len; t++)
        for (int64_t j = 0; j < C; j++)
            alpha[t * C + j] = lse(alpha + (t - 1) * C, w + j, C, C) + emit[t * C + j];
    return lse(alpha + (len - 1) * C, trans + C, 1, C);
}

/* beta (len, C): the same over positions t..len-1 for paths that start in
 * tag i, end weight and emission at t included (so a marginal subtracts
 * that emission, counted in alpha too). */
static void backward(const float *emit, int64_t len, int64_t C, const float *trans,
                     double *beta)
{
    const float *w = trans + 2 * C;
    for (int64_t j = 0; j < C; j++)
        beta[(len - 1) * C + j] = (double)trans[C + j] + emit[(len - 1) * C + j];
    for (int64_t t = len - 2; t >= 0; t--)
        for (int64_t i = 0; i < C; i++)
            beta[t * C + i] = lse(beta + (t + 1) * C, w + i * C, 1, C) + emit[t * C + i];
}

/* P(y_t = j) under the model. */
static double marginal(const crf_pass *p, int64_t t, int64_t j)
{
    int64_t k = t * p->C + j;
    return exp(p->alpha[k] + p->beta[k] - p->emit[k] - p->logz);
}

/* d_emit (T, C): scale * (P(y_t = j) - [tags[t] == j]) below len, 0 beyond. */
static void grad_emit(const crf_pass *p, int64_t T, float *d_emit)
{
    for (int64_t t = 0; t < p->len; t++)
        for (int64_t j = 0; j < p->C; j++)
            d_emit[t * p->C + j] = (float)(p->scale * (marginal(p, t, j) - (p->tags[t] == j)));
    memset(d_emit + p->len * p->C, 0, (size_t)((T - p->len) * p->C) * sizeof(float));
}

/* d_trans (C + 2, C) += scale * (expected - path) counts of each start, end
 * and transition; a transition's expectation sums over the len - 1 steps
 * P(y_{t-1} = i, y_t = j) = exp(alpha[t-1][i] + w[i][j] + beta[t][j] - log Z). */
static void grad_trans(const crf_pass *p, float *d_trans)
{
    int64_t C = p->C, last = p->len - 1;
    const float *w = p->trans + 2 * C;
    for (int64_t j = 0; j < C; j++) {
        d_trans[j] += (float)(p->scale * (marginal(p, 0, j) - (p->tags[0] == j)));
        d_trans[C + j] += (float)(p->scale * (marginal(p, last, j) - (p->tags[last] == j)));
    }
    for (int64_t i = 0; i < C; i++)
        for (int64_t j = 0; j < C; j++) {
            double g = 0.0;
            for (int64_t t = 1; t <= last; t++)
                g += exp(p->alpha[(t - 1) * C + i] + w[i * C + j] + p->beta[t * C + j] - p->logz)
                     - (p->tags[t - 1] == i && p->tags[t] == j);
            d_trans[(2 + i) * C + j] += (float)(p->scale * g);
        }
}

/* The score of the path tags[0..len), summed in crf_viterbi's order. */
static double path_score(const float *emit, int64_t len, int64_t C, const float *trans,
                         const int32_t *tags)
{
    double s = (double)trans[tags[0]] + emit[tags[0]];
    for (int64_t t = 1; t < len; t++) {
        s += trans[(2 + tags[t - 1]) * C + tags[t]];
        s += emit[t * C + tags[t]];
    }
    return s + trans[C + tags[len - 1]];
}

double crf_nll(const float *emit, int64_t T, int64_t len, int64_t C, const float *trans,
               const int32_t *tags, float scale, float *d_emit, float *d_trans, void *work)
{
    double *alpha = work, *beta = alpha + len * C;
    double logz = forward(emit, len, C, trans, alpha);
    if (d_emit || d_trans) {
        backward(emit, len, C, trans, beta);
        crf_pass p = { emit, trans, tags, alpha, beta, len, C, logz, scale };
        if (d_emit)
            grad_emit(&p, T, d_emit);
        if (d_trans)
            grad_trans(&p, d_trans);
    }
    return logz - path_score(emit, len, C, trans, tags);
}

void crf_viterbi(const float *emit, int64_t len, int64_t C, const float *trans,
                 int32_t *path, double *score, void *work)
{
    /* prev, cur: the best score of a path over 0..t-1 (0..t) ending in tag
     * j; bp (len, C): that path's tag at t-1 (row 0 unused) */
    double *prev = work, *cur = prev + C, best;
    int32_t *bp = (int32_t *)(cur + C);
    const float *w = trans + 2 * C;
    for (int64_t j = 0; j < C; j++)
        prev[j] = (double)trans[j] + emit[j];
    for (int64_t t = 1; t < len; t++) {
        for (int64_t j = 0; j < C; j++) {
            bp[t * C + j] = (int32_t)argmax(prev, w + j, C, C, &best);
            cur[j] = best + emit[t * C + j];
        }
        double *tmp = prev;
        prev = cur;
        cur = tmp;
    }
    path[len - 1] = (int32_t)argmax(prev, trans + C, 1, C, &best);
    for (int64_t t = len - 1; t > 0; t--)
        path[t - 1] = bp[t * C + path[t]];
    if (score)
        *score = best;
}
