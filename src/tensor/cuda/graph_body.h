/* graph_body.h (private to tensor/cuda/): the per-index arithmetic of the
 * graph layers' kernels (binary_fwd .. seq_pool_bwd in dl_tensor.h),
 * as plain functions that compile both as C11 (gcc, for the host test
 * tests/unit/test_cuda_bodies.c, which checks them against the CPU
 * backend) and as CUDA C++ (kernels.cu, whose __global__ kernels only
 * pick an index and call them). A body computes one output element, one
 * column or the partial sums of one row; nothing here launches,
 * allocates or synchronises.
 *
 * Sums over many values (reductions, broadcast gradients, softmax
 * denominators, layernorm statistics) run in double; elementwise results
 * are float, with the formulas of the ops table's comments. */
#ifndef DL_TENSOR_CUDA_GRAPH_BODY_H
#define DL_TENSOR_CUDA_GRAPH_BODY_H

#include "tensor/dl_tensor.h"

#include <math.h>
#include <stdint.h>

#ifdef __CUDACC__
#define DL_HD __host__ __device__ inline
#else
#define DL_HD static inline
#endif

#define BODY_SQRT1_2       0.70710678118654752440   /* 1 / sqrt(2) */
#define BODY_INV_SQRT_2PI  0.39894228040143267794   /* 1 / sqrt(2 pi) */
#define BODY_2_SQRTPI      1.12837916709551257390   /* 2 / sqrt(pi) */
#define BODY_GELU_K        0.79788456080286535588   /* sqrt(2 / pi) */
#define BODY_GELU_C        0.044715

/* ---- strided positions ------------------------------------------------------ */

/* Offset of operand k at linear position j of g (row-major: the last
 * dimension varies fastest). */
DL_HD int64_t body_offset(const dl_strided *g, int k, int64_t j)
{
    int64_t off = 0;
    for (int d = g->nd - 1; d >= 0; d--) {
        int64_t n = g->shape[d], i = j % n;
        j /= n;
        off += i * g->st[k][d];
    }
    return off;
}

/* The offsets of all three operands at position j. */
DL_HD void body_offsets(const dl_strided *g, int64_t j, int64_t off[3])
{
    off[0] = off[1] = off[2] = 0;
    for (int d = g->nd - 1; d >= 0; d--) {
        int64_t n = g->shape[d], i = j % n;
        j /= n;
        off[0] += i * g->st[0][d];
        off[1] += i * g->st[1][d];
        off[2] += i * g->st[2][d];
    }
}

/* Number of positions of g. */
DL_HD int64_t body_count(const dl_strided *g)
{
    int64_t n = 1;
    for (int d = 0; d < g->nd; d++)
        n *= g->shape[d];
    return n;
}

/* g split by operand k: the dimensions along which k repeats (stride 0,
 * extent > 1) are "summed", the others "kept". A kept position is one
 * element of operand k; the summed positions are every position of g
 * that reads it. */
typedef struct body_split {
    int     nk, ns;
    int64_t kn, sn;                          /* kept and summed position counts */
    int64_t kshape[DL_STRIDED_DIMS], sshape[DL_STRIDED_DIMS];
    int64_t kst[3][DL_STRIDED_DIMS], sst[3][DL_STRIDED_DIMS];
} body_split;

DL_HD void body_split_of(const dl_strided *g, int k, body_split *s)
{
    s->nk = s->ns = 0;
    s->kn = s->sn = 1;
    for (int d = 0; d < g->nd; d++) {
        bool summed = g->st[k][d] == 0 && g->shape[d] > 1;
        int at = summed ? s->ns++ : s->nk++;
        int64_t *shape = summed ? s->sshape : s->kshape;
        shape[at] = g->shape[d];
        for (int t = 0; t < 3; t++) {
            if (summed)
                s->sst[t][at] = g->st[t][d];
            else
                s->kst[t][at] = g->st[t][d];
        }
        if (summed)
            s->sn *= g->shape[d];
        else
            s->kn *= g->shape[d];
    }
}

/* Offsets of the three operands at kept position j (summed indices 0). */
DL_HD void body_kept_offsets(const body_split *s, int64_t j, int64_t off[3])
{
    off[0] = off[1] = off[2] = 0;
    for (int d = s->nk - 1; d >= 0; d--) {
        int64_t n = s->kshape[d], i = j % n;
        j /= n;
        off[0] += i * s->kst[0][d];
        off[1] += i * s->kst[1][d];
        off[2] += i * s->kst[2][d];
    }
}

/* Moves off to the next summed position in row-major order (idx holds
 * the summed indices, all 0 at the start). */
DL_HD void body_summed_next(const body_split *s, int64_t idx[DL_STRIDED_DIMS], int64_t off[3])
{
    for (int d = s->ns - 1; d >= 0; d--) {
        idx[d]++;
        for (int t = 0; t < 3; t++)
            off[t] += s->sst[t][d];
        if (idx[d] < s->sshape[d])
            return;
        for (int t = 0; t < 3; t++)
            off[t] -= s->sst[t][d] * s->sshape[d];
        idx[d] = 0;
    }
}

/* ---- binary ops ---------------------------------------------------------------- */

/* post < 0: none; else a dl_act. */
DL_HD float body_act(int post, float v)
{
    switch (post) {
    case DL_ACT_RELU:    return v > 0.0f ? v : 0.0f;
    case DL_ACT_TANH:    return tanhf(v);
    case DL_ACT_SIGMOID: return 1.0f / (1.0f + expf(-v));
    default:             return v;
    }
}

DL_HD float body_binop(dl_binop op, float a, float b)
{
    switch (op) {
    case DL_BIN_ADD: return a + b;
    case DL_BIN_SUB: return a - b;
    case DL_BIN_MUL: return a * b;
    default:         return a / b;
    }
}

/* d(a op b) / d(operand k). */
DL_HD float body_binop_grad(dl_binop op, int k, float a, float b)
{
    switch (op) {
    case DL_BIN_ADD: return 1.0f;
    case DL_BIN_SUB: return k ? -1.0f : 1.0f;
    case DL_BIN_MUL: return k ? a : b;
    default:         return k ? -a / (b * b) : 1.0f / b;
    }
}

/* binary_fwd at position j of g. */
DL_HD void body_binary_fwd(dl_binop op, int post, const dl_strided *g, const float *a,
                           const float *b, float *y, int64_t j)
{
    int64_t off[3];
    body_offsets(g, j, off);
    y[off[2]] = body_act(post, body_binop(op, a[off[0]], b[off[1]]));
}

/* binary_bwd: element j (a kept position of s, the split of g by k) of
 * dx, summing dy times the partial over the positions that read it. Reads
 * a only where the partial needs it (mul for b, div), b likewise. */
DL_HD void body_binary_bwd(dl_binop op, const body_split *s, int k, const float *a,
                           const float *b, const float *dy, float *dx, int64_t j)
{
    int64_t off[3], idx[DL_STRIDED_DIMS] = { 0, 0, 0, 0, 0 };
    body_kept_offsets(s, j, off);
    int64_t at = off[k];
    bool read_a = (op == DL_BIN_MUL && k == 1) || (op == DL_BIN_DIV && k == 1);
    bool read_b = op == DL_BIN_MUL || op == DL_BIN_DIV;
    double acc = 0.0;
    for (int64_t r = 0; r < s->sn; r++) {
        float av = read_a ? a[off[0]] : 0.0f, bv = read_b ? b[off[1]] : 0.0f;
        acc += (double)(dy[off[2]] * body_binop_grad(op, k, av, bv));
        body_summed_next(s, idx, off);
    }
    dx[at] = (float)acc;
}

/* ---- copies and reductions --------------------------------------------------------- */

/* copy_strided at position j: y (st[1]) = x (st[0]). */
DL_HD void body_copy(const dl_strided *g, const float *x, float *y, int64_t j)
{
    int64_t off[3];
    body_offsets(g, j, off);
    y[off[1]] = x[off[0]];
}

/* reduce_fwd: output element j (a kept position of s, the split of g by
 * operand 1) = scale * the sum of x over the positions that reach it. */
DL_HD void body_reduce_fwd(const body_split *s, const float *x, float *y, float scale,
                           int64_t j)
{
    int64_t off[3], idx[DL_STRIDED_DIMS] = { 0, 0, 0, 0, 0 };
    body_kept_offsets(s, j, off);
    int64_t at = off[1];
    double acc = 0.0;
    for (int64_t r = 0; r < s->sn; r++) {
        acc += x[off[0]];
        body_summed_next(s, idx, off);
    }
    y[at] = (float)(scale * acc);
}

/* reduce_bwd at position j: dx (st[0]) = scale * dy (st[1]). */
DL_HD void body_reduce_bwd(const dl_strided *g, const float *dy, float *dx, float scale,
                           int64_t j)
{
    int64_t off[3];
    body_offsets(g, j, off);
    dx[off[0]] = scale * dy[off[1]];
}

/* ---- unary ops ------------------------------------------------------------------- */

DL_HD float body_unary_fwd(dl_unary_kind kind, float a, float b, float x)
{
    switch (kind) {
    case DL_UN_GELU:
        return 0.5f * x * (1.0f + erff(x * (float)BODY_SQRT1_2));
    case DL_UN_GELU_TANH: {
        float t = tanhf((float)BODY_GELU_K * (x + (float)BODY_GELU_C * x * x * x));
        return 0.5f * x * (1.0f + t);
    }
    case DL_UN_SILU:
        return x / (1.0f + expf(-x));
    case DL_UN_POW:
        return powf(x, a);
    case DL_UN_SQRT:
        return sqrtf(x);
    case DL_UN_ERF:
        return erff(x);
    case DL_UN_LEAKY_RELU:
        return x > 0.0f ? x : a * x;
    case DL_UN_CLIP:
        return x < a ? a : x > b ? b : x;   /* NaN passed on, as the CPU */
    case DL_UN_HARDSIGMOID: {
        float t = a * x + b;
        return t < 0.0f ? 0.0f : t > 1.0f ? 1.0f : t;
    }
    case DL_UN_HARDSWISH:
        return x < -3.0f ? 0.0f : x > 3.0f ? x : x * (x + 3.0f) / 6.0f;
    }
    return x;
}

/* u'(x); y is the forward's output, read by sqrt only. */
DL_HD float body_unary_grad(dl_unary_kind kind, float a, float b, float x, float y)
{
    switch (kind) {
    case DL_UN_GELU:
        return 0.5f * (1.0f + erff(x * (float)BODY_SQRT1_2)) +
               x * expf(-0.5f * x * x) * (float)BODY_INV_SQRT_2PI;
    case DL_UN_GELU_TANH: {
        float k = (float)BODY_GELU_K, c = (float)BODY_GELU_C;
        float t = tanhf(k * (x + c * x * x * x));
        return 0.5f * (1.0f + t) + 0.5f * x * (1.0f - t * t) * k * (1.0f + 3.0f * c * x * x);
    }
    case DL_UN_SILU: {
        float s = 1.0f / (1.0f + expf(-x));
        return s * (1.0f + x * (1.0f - s));
    }
    case DL_UN_POW:
        return a == 0.0f ? 0.0f : a * powf(x, a - 1.0f);
    case DL_UN_SQRT:
        return 0.5f / y;
    case DL_UN_ERF:
        return (float)BODY_2_SQRTPI * expf(-x * x);
    case DL_UN_LEAKY_RELU:
        return x > 0.0f ? 1.0f : a;
    case DL_UN_CLIP:
        return x >= a && x <= b ? 1.0f : 0.0f;
    case DL_UN_HARDSIGMOID: {
        float v = a * x + b;
        return v > 0.0f && v < 1.0f ? a : 0.0f;
    }
    case DL_UN_HARDSWISH:
        return x < -3.0f ? 0.0f : x <= 3.0f ? x / 3.0f + 0.5f : 1.0f;
    }
    return 1.0f;
}

/* ---- softmax over an axis ------------------------------------------------------------
 * One column: `len` values `inner` apart, starting at x (and y, dy, dx). */

DL_HD void body_softmax_col(bool log_, const float *x, float *y, int64_t len, int64_t inner)
{
    float mx = x[0];
    for (int64_t l = 1; l < len; l++)
        mx = x[l * inner] > mx ? x[l * inner] : mx;
    double s = 0.0;
    for (int64_t l = 0; l < len; l++)
        s += expf(x[l * inner] - mx);
    if (log_) {
        float ls = (float)log(s);
        for (int64_t l = 0; l < len; l++)
            y[l * inner] = x[l * inner] - mx - ls;
    } else {
        float inv = (float)(1.0 / s);
        for (int64_t l = 0; l < len; l++)
            y[l * inner] = expf(x[l * inner] - mx) * inv;
    }
}

/* The keys query row i of a sample attends to (dl_attn), of its qn valid
 * queries and kn valid keys: none past qn (a padded query), else the
 * first kn, or those up to i when causal. */
DL_HD int64_t body_attn_keys(int64_t i, int64_t qn, int64_t kn, bool causal, int64_t off)
{
    if (i >= qn)
        return 0;
    return causal && off + i + 1 < kn ? off + i + 1 : kn;
}

/* Attention's probabilities on a row of scores (dl_attn): p[0..keys) =
 * softmax(scale p) (the maximum subtracted first), the rest 0 (a causal
 * row's later positions, padded keys; the whole row for keys 0); in
 * place. */
DL_HD void body_attn_row(float *p, int64_t keys, int64_t width, float scale)
{
    float mx = keys > 0 ? scale * p[0] : 0.0f;
    for (int64_t c = 1; c < keys; c++)
        mx = scale * p[c] > mx ? scale * p[c] : mx;
    double s = 0.0;
    for (int64_t c = 0; c < keys; c++)
        s += expf(scale * p[c] - mx);
    float inv = keys > 0 ? (float)(1.0 / s) : 0.0f;
    for (int64_t c = 0; c < keys; c++)
        p[c] = expf(scale * p[c] - mx) * inv;
    for (int64_t c = keys; c < width; c++)
        p[c] = 0.0f;
}

/* The scores' gradient on a row from the probabilities p and their
 * gradient dp: dp = p (dp - sum p dp) scale, in place. */
DL_HD void body_attn_row_bwd(const float *p, float *dp, int64_t width, float scale)
{
    double dot = 0.0;
    for (int64_t c = 0; c < width; c++)
        dot += (double)p[c] * dp[c];
    for (int64_t c = 0; c < width; c++)
        dp[c] = p[c] * (dp[c] - (float)dot) * scale;
}

/* softmax: dx = y (dy - sum dy y); log_softmax: dx = dy - exp(y) sum dy. */
DL_HD void body_softmax_col_bwd(bool log_, const float *y, const float *dy, float *dx,
                                int64_t len, int64_t inner)
{
    double s = 0.0;
    for (int64_t l = 0; l < len; l++)
        s += log_ ? (double)dy[l * inner] : (double)dy[l * inner] * y[l * inner];
    float sf = (float)s;
    for (int64_t l = 0; l < len; l++) {
        int64_t i = l * inner;
        dx[i] = log_ ? dy[i] - expf(y[i]) * sf : y[i] * (dy[i] - sf);
    }
}

/* ---- layernorm ------------------------------------------------------------------------
 * A row of d values; the partial sums take every step-th value from
 * start, so that a block's threads (start = thread, step = block size)
 * or one thread (0, 1) compute them. */

/* Sum of x (sq false) or of (x - mean)^2 (sq true). */
DL_HD double body_ln_sum(const float *x, int64_t d, int64_t start, int64_t step, double mean,
                         bool sq)
{
    double s = 0.0;
    for (int64_t j = start; j < d; j += step) {
        double v = (double)x[j] - mean;
        s += sq ? v * v : (double)x[j];
    }
    return s;
}

/* rstd from the sum of squared deviations. */
DL_HD double body_ln_rstd(double sqsum, int64_t d, float eps)
{
    return 1.0 / sqrt(sqsum / (double)d + (double)eps);
}

/* The statistics of a row, in one thread: mean, then the biased variance
 * around it. */
DL_HD void body_ln_stats(const float *x, int64_t d, float eps, double *mean, double *rstd)
{
    *mean = body_ln_sum(x, d, 0, 1, 0.0, false) / (double)d;
    *rstd = body_ln_rstd(body_ln_sum(x, d, 0, 1, *mean, true), d, eps);
}

DL_HD float body_ln_xhat(float x, double mean, double rstd)
{
    return (float)(((double)x - mean) * rstd);
}

DL_HD float body_ln_y(float x, double mean, double rstd, float w, float b)
{
    return body_ln_xhat(x, mean, rstd) * w + b;
}

/* Partial sums of dy w (s1) and dy w xhat (s2) over a row. */
DL_HD void body_ln_bwd_sums(const float *x, const float *w, const float *dy, int64_t d,
                            int64_t start, int64_t step, double mean, double rstd,
                            double *s1, double *s2)
{
    double a = 0.0, c = 0.0;
    for (int64_t j = start; j < d; j += step) {
        float g = dy[j] * w[j];
        a += g;
        c += (double)g * body_ln_xhat(x[j], mean, rstd);
    }
    *s1 = a;
    *s2 = c;
}

/* dx of one value, from the row's full sums s1, s2. */
DL_HD float body_ln_dx(float x, float w, float dy, double mean, double rstd, double s1,
                       double s2, int64_t d)
{
    double xh = body_ln_xhat(x, mean, rstd);
    return (float)(rstd * ((double)(dy * w) - s1 / (double)d - xh * (s2 / (double)d)));
}

/* Column j of dw and db over every row: *dw = sum dy xhat, *db = sum dy.
 * stats holds each row's mean and rstd, interleaved. */
DL_HD void body_ln_dwdb(const float *x, const float *dy, const double *stats, int64_t rows,
                        int64_t d, int64_t j, double *dw, double *db)
{
    double a = 0.0, c = 0.0;
    for (int64_t r = 0; r < rows; r++) {
        float g = dy[r * d + j];
        a += (double)g * body_ln_xhat(x[r * d + j], stats[2 * r], stats[2 * r + 1]);
        c += g;
    }
    *dw = a;
    *db = c;
}

/* ---- sequences (dl_seq) ------------------------------------------------------------
 * [n, t, d] values; len holds the lengths where the kernel runs (NULL:
 * every sample has t). */

DL_HD int64_t body_seq_len(const int32_t *len, int64_t t, int64_t s)
{
    return len ? len[s] : t;
}

/* seq_mask at element j: x past its sample's length reads as 0. */
DL_HD void body_seq_mask(int64_t t, int64_t d, const int32_t *len, const float *x, float *y,
                         int64_t j)
{
    int64_t s = j / (t * d), p = j / d - s * t;
    y[j] = p < body_seq_len(len, t, s) ? x[j] : 0.0f;
}

/* The first of positions [0, len) of a column (values d apart from xc)
 * holding its largest value: a later one wins only when strictly larger. */
DL_HD int64_t body_seq_first_max(const float *xc, int64_t len, int64_t d)
{
    int64_t at = 0;
    for (int64_t p = 1; p < len; p++)
        if (xc[p * d] > xc[at * d])
            at = p;
    return at;
}

/* seq_pool_fwd: element j = (s, c) of y [n, d]; mean and sum in double,
 * in position order. */
DL_HD void body_seq_pool_fwd(dl_seq_pool_kind kind, int64_t t, int64_t d, const int32_t *len,
                             const float *x, float *y, int64_t j)
{
    int64_t s = j / d, c = j - s * d, n = body_seq_len(len, t, s);
    const float *xc = x + s * t * d + c;
    if (kind == DL_SEQ_POOL_KIND_MAX) {
        y[j] = xc[body_seq_first_max(xc, n, d) * d];
        return;
    }
    if (kind == DL_SEQ_POOL_KIND_LAST) {
        y[j] = xc[(n - 1) * d];
        return;
    }
    double acc = 0.0;
    for (int64_t p = 0; p < n; p++)
        acc += xc[p * d];
    y[j] = (float)(kind == DL_SEQ_POOL_KIND_MEAN ? acc / (double)n : acc);
}

/* seq_pool_bwd: column j = (s, c) of dx, all its t values. */
DL_HD void body_seq_pool_bwd(dl_seq_pool_kind kind, int64_t t, int64_t d, const int32_t *len,
                             const float *x, const float *dy, float *dx, int64_t j)
{
    int64_t s = j / d, c = j - s * d, n = body_seq_len(len, t, s);
    float *dc = dx + s * t * d + c;
    int64_t at = kind == DL_SEQ_POOL_KIND_MAX ? body_seq_first_max(x + s * t * d + c, n, d)
               : n - 1;
    bool spread = kind == DL_SEQ_POOL_KIND_MEAN || kind == DL_SEQ_POOL_KIND_SUM;
    float g = kind == DL_SEQ_POOL_KIND_MEAN ? dy[j] / (float)n : dy[j];
    for (int64_t p = 0; p < t; p++)
        dc[p * d] = (spread ? p < n : p == at) ? g : 0.0f;
}

#endif /* DL_TENSOR_CUDA_GRAPH_BODY_H */
