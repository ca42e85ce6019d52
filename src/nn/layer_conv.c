/* layer_conv.c: 2-D convolution (im2col + one GEMM for the whole batch)
 * and max / average pooling, all over NCHW batches. */
#include "nn/layer.h"

#include <math.h>

static dl_conv_geom geom(const layer *l, int64_t n)
{
    const dl_layer_conf *c = l->conf;
    dl_conv_geom g = { .n = n, .c = l->in_shape[0], .h = l->in_shape[1],
                       .w = l->in_shape[2], .oc = l->out_shape[0],
                       .oh = l->out_shape[1], .ow = l->out_shape[2],
                       .kh = c->kh, .kw = c->kw, .sh = c->sh, .sw = c->sw,
                       .ph = c->ph, .pw = c->pw };
    return g;
}

static int64_t fan_in(const layer *l) { return l->in_shape[0] * l->conf->kh * l->conf->kw; }

static void conv_declare(layer *l)
{
    layer_declare(l, "weight", true, 4, l->conf->filters, l->in_shape[0],
                  l->conf->kh, l->conf->kw);
    if (l->conf->bias)
        layer_declare(l, "bias", true, 1, l->conf->filters, 0, 0, 0);
}

static void conv_init(layer *l, dl_rng *rng)
{
    float bound = 1.0f / sqrtf((float)fan_in(l));
    layer_fill_uniform(l, l->p[0].data, l->conf->filters * fan_in(l), bound, rng);
    if (l->conf->bias)
        layer_fill_uniform(l, l->p[1].data, l->conf->filters, bound, rng);
}

/* The batch is processed in chunks whose im2col matrix is about the
 * backend's chunk size: on the CPU ~2 MB, so that it is still in cache
 * when the GEMM reads it; on a GPU much larger. */
static int64_t chunk_of(const layer *l, int64_t n)
{
    int64_t per = fan_in(l) * l->out_shape[1] * l->out_shape[2];
    int64_t cap = l->be->chunk_floats > 0 ? l->be->chunk_floats : DL_CHUNK_FLOATS;
    int64_t c = cap / (per > 0 ? per : 1);
    return c < 1 ? 1 : c > n ? n : c;
}

/* cols (K, B*OHW) then the (OC, B*OHW) product, for a chunk of B. */
static int64_t conv_work(const layer *l, int64_t n)
{
    int64_t ohw = l->out_shape[1] * l->out_shape[2];
    return (fan_in(l) + l->out_shape[0]) * chunk_of(l, n) * ohw;
}

static dl_status conv_forward(layer *l, const float *x, float *y, int64_t n,
                              bool train, dl_err *err)
{
    (void)train;
    int64_t chunk = chunk_of(l, n), k = fan_in(l);
    for (int64_t i = 0; i < n; i += chunk) {
        int64_t b = n - i < chunk ? n - i : chunk;
        dl_conv_geom g = geom(l, b);
        int64_t cols_n = b * g.oh * g.ow;
        float *cols = l->work, *tmp = l->work + k * cols_n, *yb = y + i * l->out_dim;
        l->be->ops->im2col(l->be, &g, x + i * l->in_dim, cols);
        /* tmp (OC, B*OHW) = W (OC, K) x cols (K, B*OHW) */
        dl_status st = l->be->ops->gemm(l->be, false, false, g.oc, cols_n, k, 1.0f,
                                        l->p[0].data, cols, 0.0f, tmp, err);
        if (st != DL_OK)
            return st;
        l->be->ops->swap_outer(l->be, tmp, yb, g.oc, b, g.oh * g.ow);
        if (l->conf->bias)
            l->be->ops->bias_add_nchw(l->be, yb, l->p[1].data, b, g.oc, g.oh * g.ow);
    }
    return DL_OK;
}

static dl_status conv_backward(layer *l, const float *x, const float *y,
                               const float *dy, float *dx, int64_t n, dl_err *err)
{
    (void)y;
    int64_t chunk = chunk_of(l, n), k = fan_in(l);
    if (l->conf->bias)
        l->be->ops->bias_grad_nchw(l->be, l->p[1].grad, dy, n, l->out_shape[0],
                                   l->out_dim / l->out_shape[0]);
    for (int64_t i = 0; i < n; i += chunk) {
        int64_t b = n - i < chunk ? n - i : chunk;
        dl_conv_geom g = geom(l, b);
        int64_t cols_n = b * g.oh * g.ow;
        float *cols = l->work, *dyt = l->work + k * cols_n;
        const float *xb = x + i * l->in_dim;
        l->be->ops->swap_outer(l->be, dy + i * l->out_dim, dyt, b, g.oc, g.oh * g.ow);
        l->be->ops->im2col(l->be, &g, xb, cols);
        /* dW (OC, K) += dyt (OC, B*OHW) x cols^T */
        dl_status st = l->be->ops->gemm(l->be, false, true, g.oc, k, cols_n, 1.0f,
                                        dyt, cols, 1.0f, l->p[0].grad, err);
        if (st != DL_OK)
            return st;
        if (!dx)
            continue;
        /* dcols (K, B*OHW) = W^T (K, OC) x dyt (OC, B*OHW), reusing cols */
        st = l->be->ops->gemm(l->be, true, false, k, cols_n, g.oc, 1.0f,
                              l->p[0].data, dyt, 0.0f, cols, err);
        if (st != DL_OK)
            return st;
        float *dxb = dx + i * l->in_dim;
        l->be->ops->fill(l->be, dxb, b * l->in_dim, 0.0f);
        l->be->ops->col2im(l->be, &g, cols, dxb);
    }
    return DL_OK;
}

const layer_ops layer_conv2d_ops = {
    .declare     = conv_declare,
    .init        = conv_init,
    .work_floats = conv_work,
    .forward     = conv_forward,
    .backward    = conv_backward,
};

/* ---- pooling ------------------------------------------------------------ */

static dl_pool_kind pool_kind(const layer *l)
{
    return l->conf->type == DL_LAYER_MAXPOOL2D ? DL_POOL_MAX : DL_POOL_AVG;
}

static size_t pool_aux(const layer *l, int64_t n)
{
    return pool_kind(l) == DL_POOL_MAX ? (size_t)(n * l->out_dim) * sizeof(int32_t) : 0;
}

static dl_status pool_forward(layer *l, const float *x, float *y, int64_t n,
                              bool train, dl_err *err)
{
    (void)train;
    (void)err;
    dl_conv_geom g = geom(l, n);
    l->be->ops->pool_fwd(l->be, pool_kind(l), &g, x, y, l->aux);
    return DL_OK;
}

static dl_status pool_backward(layer *l, const float *x, const float *y,
                               const float *dy, float *dx, int64_t n, dl_err *err)
{
    (void)x;
    (void)y;
    (void)err;
    if (!dx)
        return DL_OK;
    dl_conv_geom g = geom(l, n);
    l->be->ops->fill(l->be, dx, n * l->in_dim, 0.0f);
    l->be->ops->pool_bwd(l->be, pool_kind(l), &g, dy, l->aux, dx);
    return DL_OK;
}

const layer_ops layer_maxpool_ops = {
    .aux_bytes = pool_aux,
    .forward   = pool_forward,
    .backward  = pool_backward,
};

const layer_ops layer_avgpool_ops = {
    .forward  = pool_forward,
    .backward = pool_backward,
};
