/* layer_graph.c: the layer types of graph models, written for host memory
 * (the CPU backend): add, sub, mul and div with NumPy broadcasting, concat,
 * global average pooling, layernorm, gelu, silu and (log_)softmax on any
 * axis; and the table of every graph layer type. Forward and backward
 * follow PyTorch's definitions. */
#include "nn/layer.h"

#include <math.h>
#include <string.h>

/* ---- add, sub, mul, div: NumPy broadcasting of the per-sample shapes --- */

/* Offset in input k of output position j (per sample). */
static int64_t bcast_at(const layer *l, int k, int64_t j)
{
    return layer_bcast_offset(l->out_shape, l->out_ndim, l->ins_shape[k], l->ins_ndim[k], j);
}

/* Input k's value at output position j of sample i. */
static float in_at(const layer *l, const float *const *xs, int k, int64_t i, int64_t j)
{
    return xs[k][i * l->ins_dim[k] + bcast_at(l, k, j)];
}

/* ---- add, sub, mul of inputs of the output's shape: flat, vectorized
 * loops over contiguous chunks (dl_parallel_for), the folded activation
 * (model_plan.c) applied in the same chunk; y may be input 0. */

#define BIN_GRAIN 16384   /* values below which the loops stay on one thread */

typedef struct bin_job {
    const layer        *l;
    const float *const *xs;
    const float        *dy;
    float              *y;
    float *const       *dxs;
} bin_job;

/* Whether the flat loops apply: add, sub or mul, each input of the
 * output's size (so of its shape: broadcasting only grows sizes). */
static bool bin_flat(const layer *l)
{
    dl_layer_type t = l->conf->type;
    if (t != DL_LAYER_ADD && t != DL_LAYER_SUB && t != DL_LAYER_MUL)
        return false;
    for (int k = 0; k < l->nin; k++)
        if (l->ins_dim[k] != l->out_dim)
            return false;
    return true;
}

/* y op= x over n values. */
static void bin_rows(dl_layer_type t, float *restrict y, const float *restrict x, int64_t n)
{
    if (t == DL_LAYER_ADD)
        for (int64_t i = 0; i < n; i++)
            y[i] += x[i];
    else if (t == DL_LAYER_SUB)
        for (int64_t i = 0; i < n; i++)
            y[i] -= x[i];
    else
        for (int64_t i = 0; i < n; i++)
            y[i] *= x[i];
}

static void relu_rows(float *restrict y, int64_t n)
{
    for (int64_t i = 0; i < n; i++)
        y[i] = y[i] > 0.0f ? y[i] : 0.0f;
}

static void bin_flat_fwd_task(void *ctx, int64_t b, int64_t e)
{
    const bin_job *j = ctx;
    dl_layer_type t = j->l->conf->type;
    if (j->y != j->xs[0])
        memcpy(j->y + b, j->xs[0] + b, (size_t)(e - b) * sizeof(float));
    for (int k = 1; k < j->l->nin; k++)
        bin_rows(t, j->y + b, j->xs[k] + b, e - b);
    if (j->l->post && *j->l->post == DL_ACT_RELU)
        relu_rows(j->y + b, e - b);
}

/* dxs[k] = dy times the partial of input k (1, -1 or the other inputs). */
static void bin_flat_bwd_task(void *ctx, int64_t b, int64_t e)
{
    const bin_job *j = ctx;
    dl_layer_type t = j->l->conf->type;
    for (int k = 0; k < j->l->nin; k++) {
        float *restrict dx = j->dxs[k];
        const float *restrict dy = j->dy;
        if (!dx)
            continue;
        if (t == DL_LAYER_SUB && k > 0)
            for (int64_t i = b; i < e; i++)
                dx[i] = -dy[i];
        else
            memcpy(dx + b, dy + b, (size_t)(e - b) * sizeof(float));
        for (int q = 0; t == DL_LAYER_MUL && q < j->l->nin; q++)
            if (q != k)
                bin_rows(t, dx + b, j->xs[q] + b, e - b);
    }
}

/* The folded activation, unless the flat loops applied it (relu): a pass
 * of its own over y. */
static void bin_post(layer *l, float *y, int64_t n)
{
    if (l->post && !(bin_flat(l) && *l->post == DL_ACT_RELU))
        l->be->ops->act_fwd(l->be, *l->post, y, y, n * l->out_dim);
}

static dl_status bin_forward(layer *l, const float *const *xs, float *y, int64_t n,
                             bool train, dl_err *err)
{
    (void)train;
    (void)err;
    if (bin_flat(l)) {
        bin_job fj = { .l = l, .xs = xs, .y = y };
        dl_parallel_for(n * l->out_dim, BIN_GRAIN, bin_flat_fwd_task, &fj);
        bin_post(l, y, n);
        return DL_OK;
    }
    dl_layer_type t = l->conf->type;
    for (int64_t i = 0; i < n; i++)
        for (int64_t j = 0; j < l->out_dim; j++) {
            float v = in_at(l, xs, 0, i, j);
            for (int k = 1; k < l->nin; k++) {
                float u = in_at(l, xs, k, i, j);
                v = t == DL_LAYER_ADD ? v + u : t == DL_LAYER_SUB ? v - u
                  : t == DL_LAYER_DIV ? v / u : v * u;
            }
            y[i * l->out_dim + j] = v;
        }
    bin_post(l, y, n);
    return DL_OK;
}

/* d y / d input k at output position j: 1, -1 (sub's second), the
 * product of the other inputs (mul), or 1 / b and -a / b^2 (div). */
static float bin_partial(const layer *l, const float *const *xs, int k, int64_t i, int64_t j)
{
    dl_layer_type t = l->conf->type;
    if (t == DL_LAYER_DIV) {
        float b = in_at(l, xs, 1, i, j);
        return k == 0 ? 1.0f / b : -in_at(l, xs, 0, i, j) / (b * b);
    }
    if (t != DL_LAYER_MUL)
        return t == DL_LAYER_SUB && k == 1 ? -1.0f : 1.0f;
    float p = 1.0f;
    for (int q = 0; q < l->nin; q++)
        if (q != k)
            p *= in_at(l, xs, q, i, j);
    return p;
}

static dl_status bin_backward(layer *l, const float *const *xs, const float *y,
                              const float *dy, float *const *dxs, int64_t n, dl_err *err)
{
    (void)y;
    (void)err;
    if (bin_flat(l)) {
        bin_job fj = { .l = l, .xs = xs, .dy = dy, .dxs = dxs };
        dl_parallel_for(n * l->out_dim, BIN_GRAIN, bin_flat_bwd_task, &fj);
        return DL_OK;
    }
    for (int k = 0; k < l->nin; k++) {
        if (!dxs[k])
            continue;
        memset(dxs[k], 0, (size_t)(n * l->ins_dim[k]) * sizeof(float));
        for (int64_t i = 0; i < n; i++)
            for (int64_t j = 0; j < l->out_dim; j++)
                dxs[k][i * l->ins_dim[k] + bcast_at(l, k, j)] +=
                    dy[i * l->out_dim + j] * bin_partial(l, xs, k, i, j);
    }
    return DL_OK;
}

const layer_ops layer_binary_ops = {
    .forward_multi  = bin_forward,
    .backward_multi = bin_backward,
    .host_only      = true,
};

/* ---- concat along one sample axis --------------------------------------- */

/* Rows before the axis, and the values a row of input k holds. */
static int64_t cat_outer(const layer *l)
{
    int ax = layer_axis(l->conf->axis, l->out_ndim);
    return dl_shape_numel(ax, l->out_shape);
}

static int64_t cat_row(const layer *l, int k)
{
    return l->ins_dim[k] / cat_outer(l);
}

static dl_status cat_forward(layer *l, const float *const *xs, float *y, int64_t n,
                             bool train, dl_err *err)
{
    (void)train;
    (void)err;
    int64_t outer = cat_outer(l), row = l->out_dim / outer;
    for (int64_t i = 0; i < n * outer; i++)
        for (int k = 0, at = 0; k < l->nin; at += (int)cat_row(l, k++))
            memcpy(y + i * row + at, xs[k] + i * cat_row(l, k),
                   (size_t)cat_row(l, k) * sizeof(float));
    return DL_OK;
}

static dl_status cat_backward(layer *l, const float *const *xs, const float *y,
                              const float *dy, float *const *dxs, int64_t n, dl_err *err)
{
    (void)xs;
    (void)y;
    (void)err;
    int64_t outer = cat_outer(l), row = l->out_dim / outer;
    for (int64_t i = 0; i < n * outer; i++)
        for (int k = 0, at = 0; k < l->nin; at += (int)cat_row(l, k++))
            if (dxs[k])
                memcpy(dxs[k] + i * cat_row(l, k), dy + i * row + at,
                       (size_t)cat_row(l, k) * sizeof(float));
    return DL_OK;
}

const layer_ops layer_concat_ops = {
    .forward_multi  = cat_forward,
    .backward_multi = cat_backward,
    .host_only      = true,
};

/* ---- global average pooling: (C, H, W) -> (C) --------------------------- */

/* Where x holds channel c at position q of sample i's H*W = hw: plain
 * NCHW, or the engine's blocked layout (model_plan.c), C a multiple of
 * the block B, the B channels of a block innermost at each position. */
static int64_t gap_at(const layer *l, int64_t i, int64_t c, int64_t q, int64_t hw)
{
    if (!(l->blocked & DL_BLOCKED_X))
        return (i * l->out_dim + c) * hw + q;
    int64_t B = l->be->engine_block;
    return ((i * l->out_dim + c - c % B) * hw + q * B) + c % B;
}

static dl_status gap_forward(layer *l, const float *x, float *y, int64_t n, bool train,
                             dl_err *err)
{
    (void)train;
    (void)err;
    int64_t hw = l->in_dim / l->out_dim;
    for (int64_t i = 0; i < n; i++)
        for (int64_t c = 0; c < l->out_dim; c++) {
            float s = 0.0f;
            for (int64_t q = 0; q < hw; q++)
                s += x[gap_at(l, i, c, q, hw)];
            y[i * l->out_dim + c] = s / (float)hw;
        }
    return DL_OK;
}

static dl_status gap_backward(layer *l, const float *x, const float *y, const float *dy,
                              float *dx, int64_t n, dl_err *err)
{
    (void)x;
    (void)y;
    (void)err;
    int64_t hw = l->in_dim / l->out_dim;
    for (int64_t i = 0; dx && i < n; i++)
        for (int64_t c = 0; c < l->out_dim; c++)
            for (int64_t q = 0; q < hw; q++)
                dx[gap_at(l, i, c, q, hw)] = dy[i * l->out_dim + c] / (float)hw;
    return DL_OK;
}

const layer_ops layer_gap_ops = {
    .forward   = gap_forward,
    .backward  = gap_backward,
    .host_only = true,
};

/* ---- layernorm over the last dimension, affine -------------------------- */

static int64_t ln_d(const layer *l) { return l->in_shape[l->in_ndim - 1]; }

static void ln_declare(layer *l)
{
    layer_declare(l, "weight", true, 1, ln_d(l), 0, 0, 0);
    layer_declare(l, "bias", true, 1, ln_d(l), 0, 0, 0);
}

static void ln_init(layer *l, dl_rng *rng)
{
    (void)rng;
    for (int64_t j = 0; j < ln_d(l); j++) {
        l->p[0].data[j] = 1.0f;
        l->p[1].data[j] = 0.0f;
    }
}

/* Mean and 1 / standard deviation (biased variance) of one row. */
static void ln_stats(const float *x, int64_t d, float eps, float *mean, float *rstd)
{
    double s = 0.0, q = 0.0;
    for (int64_t j = 0; j < d; j++)
        s += x[j];
    double mu = s / (double)d;
    for (int64_t j = 0; j < d; j++)
        q += (x[j] - mu) * (x[j] - mu);
    *mean = (float)mu;
    *rstd = (float)(1.0 / sqrt(q / (double)d + eps));
}

static dl_status ln_forward(layer *l, const float *x, float *y, int64_t n, bool train,
                            dl_err *err)
{
    (void)train;
    (void)err;
    int64_t d = ln_d(l), rows = n * l->in_dim / d;
    const float *w = l->p[0].data, *b = l->p[1].data;
    for (int64_t r = 0; r < rows; r++) {
        float mean, rstd;
        ln_stats(x + r * d, d, l->conf->eps, &mean, &rstd);
        for (int64_t j = 0; j < d; j++)
            y[r * d + j] = (x[r * d + j] - mean) * rstd * w[j] + b[j];
    }
    return DL_OK;
}

static dl_status ln_backward(layer *l, const float *x, const float *y, const float *dy,
                             float *dx, int64_t n, dl_err *err)
{
    (void)y;
    (void)err;
    int64_t d = ln_d(l), rows = n * l->in_dim / d;
    const float *w = l->p[0].data;
    float *dw = l->p[0].grad, *db = l->p[1].grad;
    for (int64_t r = 0; r < rows; r++) {
        const float *xr = x + r * d, *g = dy + r * d;
        float mean, rstd;
        double s1 = 0.0, s2 = 0.0;
        ln_stats(xr, d, l->conf->eps, &mean, &rstd);
        for (int64_t j = 0; j < d; j++) {
            float xh = (xr[j] - mean) * rstd;
            dw[j] += g[j] * xh;
            db[j] += g[j];
            s1 += g[j] * w[j];
            s2 += g[j] * w[j] * xh;
        }
        for (int64_t j = 0; dx && j < d; j++) {
            float xh = (xr[j] - mean) * rstd;
            dx[r * d + j] = rstd * (g[j] * w[j] - (float)(s1 / (double)d) -
                                    xh * (float)(s2 / (double)d));
        }
    }
    return DL_OK;
}

const layer_ops layer_layernorm_ops = {
    .declare   = ln_declare,
    .init      = ln_init,
    .forward   = ln_forward,
    .backward  = ln_backward,
    .host_only = true,
};

/* ---- gelu (erf, or the tanh approximation) and silu ---------------------- */

#define GELU_K 0.7978845608028654f   /* sqrt(2 / pi) */

static float gelu(float x, bool approx)
{
    if (approx)
        return 0.5f * x * (1.0f + tanhf(GELU_K * (x + 0.044715f * x * x * x)));
    return 0.5f * x * (1.0f + erff(x * 0.7071067811865476f));
}

static float gelu_grad(float x, bool approx)
{
    if (approx) {
        float t = tanhf(GELU_K * (x + 0.044715f * x * x * x));
        return 0.5f * (1.0f + t) +
               0.5f * x * (1.0f - t * t) * GELU_K * (1.0f + 3.0f * 0.044715f * x * x);
    }
    return 0.5f * (1.0f + erff(x * 0.7071067811865476f)) +
           x * expf(-0.5f * x * x) * 0.3989422804014327f;
}

static float sigm(float x) { return 1.0f / (1.0f + expf(-x)); }

static dl_status ew_forward(layer *l, const float *x, float *y, int64_t n, bool train,
                            dl_err *err)
{
    (void)train;
    (void)err;
    bool gl = l->conf->type == DL_LAYER_GELU, ap = l->conf->approx_tanh;
    for (int64_t i = 0; i < n * l->in_dim; i++)
        y[i] = gl ? gelu(x[i], ap) : x[i] * sigm(x[i]);
    return DL_OK;
}

static dl_status ew_backward(layer *l, const float *x, const float *y, const float *dy,
                             float *dx, int64_t n, dl_err *err)
{
    (void)y;
    (void)err;
    bool gl = l->conf->type == DL_LAYER_GELU, ap = l->conf->approx_tanh;
    for (int64_t i = 0; dx && i < n * l->in_dim; i++) {
        float s = sigm(x[i]);
        dx[i] = dy[i] * (gl ? gelu_grad(x[i], ap) : s * (1.0f + x[i] * (1.0f - s)));
    }
    return DL_OK;
}

const layer_ops layer_elementwise_ops = {
    .forward   = ew_forward,
    .backward  = ew_backward,
    .host_only = true,
};

/* ---- softmax and log_softmax on any sample axis -------------------------- */

typedef struct axis_geom { int64_t outer, len, inner; } axis_geom;

static axis_geom axis_of(const layer *l, int64_t n)
{
    int ax = layer_axis(l->conf->axis, l->in_ndim);
    axis_geom g = { n * dl_shape_numel(ax, l->in_shape), l->in_shape[ax], 1 };
    for (int d = ax + 1; d < l->in_ndim; d++)
        g.inner *= l->in_shape[d];
    return g;
}

static void softmax_row(const float *x, float *y, int64_t len, int64_t st, bool lg)
{
    float mx = x[0];
    for (int64_t q = 1; q < len; q++)
        mx = fmaxf(mx, x[q * st]);
    double s = 0.0;
    for (int64_t q = 0; q < len; q++)
        s += exp((double)(x[q * st] - mx));
    for (int64_t q = 0; q < len; q++)
        y[q * st] = lg ? x[q * st] - mx - (float)log(s) : (float)(exp((double)(x[q * st] - mx)) / s);
}

static dl_status smx_forward(layer *l, const float *x, float *y, int64_t n, bool train,
                             dl_err *err)
{
    (void)train;
    (void)err;
    axis_geom g = axis_of(l, n);
    bool lg = l->conf->type == DL_LAYER_LOG_SOFTMAX;
    for (int64_t o = 0; o < g.outer; o++)
        for (int64_t i = 0; i < g.inner; i++)
            softmax_row(x + o * g.len * g.inner + i, y + o * g.len * g.inner + i, g.len,
                        g.inner, lg);
    return DL_OK;
}

static dl_status smx_backward(layer *l, const float *x, const float *y, const float *dy,
                              float *dx, int64_t n, dl_err *err)
{
    (void)x;
    (void)err;
    axis_geom g = axis_of(l, n);
    bool lg = l->conf->type == DL_LAYER_LOG_SOFTMAX;
    for (int64_t o = 0; dx && o < g.outer; o++)
        for (int64_t i = 0; i < g.inner; i++) {
            int64_t b = o * g.len * g.inner + i;
            double s = 0.0;
            for (int64_t q = 0; q < g.len; q++)
                s += lg ? dy[b + q * g.inner] : dy[b + q * g.inner] * y[b + q * g.inner];
            for (int64_t q = 0; q < g.len; q++) {
                int64_t at = b + q * g.inner;
                dx[at] = lg ? dy[at] - expf(y[at]) * (float)s : y[at] * (dy[at] - (float)s);
            }
        }
    return DL_OK;
}

const layer_ops layer_log_softmax_ops = {
    .forward   = smx_forward,
    .backward  = smx_backward,
    .host_only = true,
};

dl_status layer_softmax_axis_fwd(layer *l, const float *x, float *y, int64_t n)
{
    return smx_forward(l, x, y, n, false, NULL);
}

dl_status layer_softmax_axis_bwd(layer *l, const float *y, const float *dy, float *dx,
                                 int64_t n)
{
    return smx_backward(l, NULL, y, dy, dx, n, NULL);
}
