/* layer_graph.c: the layer types of graph models: add, sub, mul and div
 * with NumPy broadcasting, concat, global average pooling, layernorm and
 * (log_)softmax on any axis. Each lays out its operands' geometry and
 * calls the backend's kernels (dl_backend_ops, "the graph layers'
 * kernels"); forward and backward follow PyTorch's definitions. */
#include "nn/layer.h"

#include <string.h>

/* ---- add, sub, mul, div: NumPy broadcasting of the per-sample shapes --- */

static dl_binop binop_of(dl_layer_type t)
{
    return t == DL_LAYER_ADD ? DL_BIN_ADD : t == DL_LAYER_SUB ? DL_BIN_SUB
         : t == DL_LAYER_MUL ? DL_BIN_MUL : DL_BIN_DIV;
}

/* On activations in the engine's blocked layout (model_plan.c), C
 * channels in blocks of B (the last one padded with zeros: out_dim counts
 * whole blocks): (n, C / B, H * W, B), the output and inputs of its shape
 * dense, a per-channel vector (C a multiple of B) repeated along H * W. */
static dl_strided bin_geom_blocked(const layer *l, int ka, int kb, int64_t n)
{
    int64_t hw = l->out_shape[1] * l->out_shape[2], c = l->out_dim / hw;
    int64_t B = l->be->engine_block;
    dl_strided g = { .nd = 4, .shape = { n, c / B, hw, B } };
    const int64_t full[4] = { c * hw, B * hw, B, 1 }, vec[4] = { c, B, 0, 1 };
    memcpy(g.st[0], ka >= 0 && layer_channel_vector(l, ka) ? vec : full, sizeof(full));
    memcpy(g.st[1], layer_channel_vector(l, kb) ? vec : full, sizeof(full));
    memcpy(g.st[2], full, sizeof(full));
    return g;
}

/* The iteration over a batch of n outputs of a binary layer: operand a
 * is input ka (or, ka < 0, a tensor of the output's shape: the partial
 * result), b input kb, y the output. */
static dl_strided bin_geom(const layer *l, int ka, int kb, int64_t n)
{
    if (l->blocked & DL_BLOCKED_Y)
        return bin_geom_blocked(l, ka, kb, n);
    dl_strided g;
    layer_strided_out(l, n, &g);
    if (ka >= 0)
        layer_bcast_strides(l, ka, g.st[0]);
    else
        memcpy(g.st[0], g.st[2], sizeof(g.st[0]));
    layer_bcast_strides(l, kb, g.st[1]);
    return g;
}

/* y = x0 op x1 op x2 ...; the folded activation with the last step. */
static dl_status bin_forward(layer *l, const float *const *xs, float *y, int64_t n,
                             bool train, dl_err *err)
{
    (void)train;
    (void)err;
    dl_binop op = binop_of(l->conf->type);
    for (int k = 1; k < l->nin; k++) {
        dl_strided g = bin_geom(l, k == 1 ? 0 : -1, k, n);
        l->be->ops->binary_fwd(l->be, op, &g, k == 1 ? xs[0] : y, xs[k],
                               k == l->nin - 1 ? l->post : NULL, y);
    }
    return DL_OK;
}

/* Scratch of a product of three or more inputs: the product of all but
 * one, at the output's size. */
static int64_t bin_work(const layer *l, int64_t n)
{
    return l->conf->type == DL_LAYER_MUL && l->nin > 2 ? n * l->out_dim : 0;
}

/* dxs[k] of a product of three or more inputs: the other inputs times dy
 * in the scratch, then summed to input k's shape. */
static void mul_many_grad(layer *l, const float *const *xs, const float *dy, float *dx, int k,
                          int64_t n)
{
    float *t = l->work;
    bool first = true;
    for (int q = 0; q < l->nin; q++) {
        if (q == k)
            continue;
        dl_strided g = bin_geom(l, -1, q, n);
        l->be->ops->binary_fwd(l->be, DL_BIN_MUL, &g, first ? dy : t, xs[q], NULL, t);
        first = false;
    }
    dl_strided g = bin_geom(l, k, k, n);
    l->be->ops->binary_bwd(l->be, DL_BIN_ADD, &g, 0, NULL, NULL, t, dx);
}

static dl_status bin_backward(layer *l, const float *const *xs, const float *y,
                              const float *dy, float *const *dxs, int64_t n, dl_err *err)
{
    (void)y;
    (void)err;
    dl_binop op = binop_of(l->conf->type);
    for (int k = 0; k < l->nin; k++) {
        if (!dxs[k])
            continue;
        if (op == DL_BIN_MUL && l->nin > 2) {
            mul_many_grad(l, xs, dy, dxs[k], k, n);
            continue;
        }
        /* Input k as operand b, but input 0 as a (beyond the second
         * input, only add, whose gradient reads no operand). */
        int ka = k <= 1 ? 0 : 1, kb = k <= 1 ? 1 : k;
        dl_strided g = bin_geom(l, ka, kb, n);
        l->be->ops->binary_bwd(l->be, op, &g, k == 0 ? 0 : 1, xs[ka], xs[kb], dy, dxs[k]);
    }
    return DL_OK;
}

static bool bin_supported(const layer *l) { return l->be->ops->binary_fwd && l->be->ops->binary_bwd; }

const layer_ops layer_binary_ops = {
    .work_floats    = bin_work,
    .forward_multi  = bin_forward,
    .backward_multi = bin_backward,
    .supported      = bin_supported,
};

/* ---- concat along one sample axis --------------------------------------- */

/* Rows before the axis (of all n samples) and the values a row of input
 * k holds: input k is (rows, row_k), the output (rows, sum of row_k). */
static int64_t cat_outer(const layer *l)
{
    int ax = layer_axis(l->conf->axis, l->out_ndim);
    return dl_shape_numel(ax, l->out_shape);
}

/* The copy between input k (operand 0) and its columns of the output
 * (operand 1, from column `at`). Channels last (DL_NHWC_*, model_plan.c:
 * a concat of the channels of [C, H, W]): rows of a position's channels. */
static dl_strided cat_geom(const layer *l, int k, int64_t n)
{
    int64_t rows = n * cat_outer(l), row = l->out_dim / cat_outer(l);
    int64_t rk = l->ins_dim[k] / cat_outer(l);
    if (l->blocked & DL_NHWC_Y) {
        rows = n * l->out_shape[1] * l->out_shape[2];
        row = l->out_shape[0];
        rk = l->ins_shape[k][0];
    }
    dl_strided g = { .nd = 2, .shape = { rows, rk }, .st = { { rk, 1 }, { row, 1 } } };
    return g;
}

static dl_status cat_forward(layer *l, const float *const *xs, float *y, int64_t n,
                             bool train, dl_err *err)
{
    (void)train;
    (void)err;
    for (int k = 0, at = 0; k < l->nin; k++) {
        dl_strided g = cat_geom(l, k, n);
        l->be->ops->copy_strided(l->be, &g, xs[k], y + at);
        at += (int)g.shape[1];
    }
    return DL_OK;
}

static dl_status cat_backward(layer *l, const float *const *xs, const float *y,
                              const float *dy, float *const *dxs, int64_t n, dl_err *err)
{
    (void)xs;
    (void)y;
    (void)err;
    for (int k = 0, at = 0; k < l->nin; k++) {
        dl_strided g = cat_geom(l, k, n);
        layer_strided_swap(&g);
        if (dxs[k])
            l->be->ops->copy_strided(l->be, &g, dy + at, dxs[k]);
        at += (int)g.shape[1];
    }
    return DL_OK;
}

const layer_ops layer_concat_ops = {
    .forward_multi  = cat_forward,
    .backward_multi = cat_backward,
    .supported      = layer_copy_supported,
};

/* ---- global average pooling: (C, H, W) -> (C) --------------------------- */

/* The mean over H*W = hw as a reduction of x (operand 0) into y (1):
 * x plain NCHW, or in the engine's blocked layout (model_plan.c), C a
 * multiple of the block B, the B channels of a block innermost at each
 * position: then (n, C / B, hw, B). */
static dl_strided gap_geom(const layer *l, int64_t n)
{
    int64_t c = l->out_dim, hw = l->in_dim / c;
    if (!(l->blocked & DL_BLOCKED_X)) {
        dl_strided g = { .nd = 3, .shape = { n, c, hw },
                         .st = { { c * hw, hw, 1 }, { c, 1, 0 } } };
        return g;
    }
    int64_t B = l->be->engine_block;
    dl_strided g = { .nd = 4, .shape = { n, c / B, hw, B },
                     .st = { { c * hw, B * hw, B, 1 }, { c, B, 0, 1 } } };
    return g;
}

static float gap_scale(const layer *l) { return (float)l->out_dim / (float)l->in_dim; }

static dl_status gap_forward(layer *l, const float *x, float *y, int64_t n, bool train,
                             dl_err *err)
{
    (void)train;
    (void)err;
    dl_strided g = gap_geom(l, n);
    l->be->ops->reduce_fwd(l->be, &g, x, y, gap_scale(l));
    return DL_OK;
}

static dl_status gap_backward(layer *l, const float *x, const float *y, const float *dy,
                              float *dx, int64_t n, dl_err *err)
{
    (void)x;
    (void)y;
    (void)err;
    dl_strided g = gap_geom(l, n);
    if (dx)
        l->be->ops->reduce_bwd(l->be, &g, dy, dx, gap_scale(l));
    return DL_OK;
}

const layer_ops layer_gap_ops = {
    .forward   = gap_forward,
    .backward  = gap_backward,
    .supported = layer_reduce_supported,
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

static dl_status ln_forward(layer *l, const float *x, float *y, int64_t n, bool train,
                            dl_err *err)
{
    (void)train;
    (void)err;
    int64_t d = ln_d(l);
    l->be->ops->layernorm_fwd(l->be, x, l->p[0].data, l->p[1].data, y, n * l->in_dim / d, d,
                              l->conf->eps);
    return DL_OK;
}

static dl_status ln_backward(layer *l, const float *x, const float *y, const float *dy,
                             float *dx, int64_t n, dl_err *err)
{
    (void)y;
    (void)err;
    int64_t d = ln_d(l);
    l->be->ops->layernorm_bwd(l->be, x, l->p[0].data, dy, dx, l->p[0].grad, l->p[1].grad,
                              n * l->in_dim / d, d, l->conf->eps);
    return DL_OK;
}

static bool ln_supported(const layer *l) { return l->be->ops->layernorm_fwd && l->be->ops->layernorm_bwd; }

const layer_ops layer_layernorm_ops = {
    .declare   = ln_declare,
    .init      = ln_init,
    .forward   = ln_forward,
    .backward  = ln_backward,
    .supported = ln_supported,
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

dl_status layer_softmax_axis_fwd(layer *l, const float *x, float *y, int64_t n)
{
    axis_geom g = axis_of(l, n);
    l->be->ops->softmax_axis_fwd(l->be, l->conf->type == DL_LAYER_LOG_SOFTMAX, x, y, g.outer,
                                 g.len, g.inner);
    return DL_OK;
}

dl_status layer_softmax_axis_bwd(layer *l, const float *y, const float *dy, float *dx,
                                 int64_t n)
{
    axis_geom g = axis_of(l, n);
    l->be->ops->softmax_axis_bwd(l->be, l->conf->type == DL_LAYER_LOG_SOFTMAX, y, dy, dx,
                                 g.outer, g.len, g.inner);
    return DL_OK;
}

bool layer_softmax_axis_supported(const layer *l)
{
    return l->be->ops->softmax_axis_fwd && l->be->ops->softmax_axis_bwd;
}

static dl_status smx_forward(layer *l, const float *x, float *y, int64_t n, bool train,
                             dl_err *err)
{
    (void)train;
    (void)err;
    return layer_softmax_axis_fwd(l, x, y, n);
}

static dl_status smx_backward(layer *l, const float *x, const float *y, const float *dy,
                              float *dx, int64_t n, dl_err *err)
{
    (void)x;
    (void)err;
    return dx ? layer_softmax_axis_bwd(l, y, dy, dx, n) : DL_OK;
}

const layer_ops layer_log_softmax_ops = {
    .forward   = smx_forward,
    .backward  = smx_backward,
    .supported = layer_softmax_axis_supported,
};
