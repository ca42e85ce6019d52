/* layer_slice.c: slice (every step-th index of [start, end) along one
 * sample axis, a strided copy of the backend) and constant (a tensor of the
 * weights, the same for every sample and not trained). */
#include "nn/layer.h"

#include <string.h>

/* ---- slice: x (outer, len, inner) -> y (outer, count, inner) ------------- */

typedef struct slice_geom { int64_t outer, len, inner, start, count, step; } slice_geom;

static slice_geom slice_of(const layer *l, int64_t n)
{
    int ax = layer_axis(l->conf->axis, l->in_ndim);
    slice_geom g = { n * dl_shape_numel(ax, l->in_shape), l->in_shape[ax], 1, 0, 0,
                     l->conf->step };
    for (int d = ax + 1; d < l->in_ndim; d++)
        g.inner *= l->in_shape[d];
    layer_slice_range(l->conf, g.len, &g.start, &g.count);
    return g;
}

/* The copy from x (operand 0, from its first kept index) to y (operand
 * 1); *at: where x's part starts. Channels last (DL_NHWC_*, model_plan.c:
 * a slice of the channels of [C, H, W]): x (n H W, C), y (n H W, count). */
static dl_strided slice_copy(const layer *l, int64_t n, int64_t *at)
{
    slice_geom s = slice_of(l, n);
    if (l->blocked & DL_NHWC_Y) {
        int64_t hw = l->in_shape[1] * l->in_shape[2];
        *at = s.start;
        dl_strided g = { .nd = 2, .shape = { n * hw, s.count },
                         .st = { { s.len, s.step }, { s.count, 1 } } };
        return g;
    }
    *at = s.start * s.inner;
    dl_strided g = { .nd = 3, .shape = { s.outer, s.count, s.inner },
                     .st = { { s.len * s.inner, s.step * s.inner, 1 },
                             { s.count * s.inner, s.inner, 1 } } };
    return g;
}

static dl_status slice_forward(layer *l, const float *x, float *y, int64_t n, bool train,
                               dl_err *err)
{
    (void)train;
    (void)err;
    int64_t at;
    dl_strided g = slice_copy(l, n, &at);
    l->be->ops->copy_strided(l->be, &g, x + at, y);
    return DL_OK;
}

/* dx: zeros, dy where the forward read. */
static dl_status slice_backward(layer *l, const float *x, const float *y, const float *dy,
                                float *dx, int64_t n, dl_err *err)
{
    (void)x;
    (void)y;
    (void)err;
    if (!dx)
        return DL_OK;
    int64_t at;
    dl_strided g = slice_copy(l, n, &at);
    layer_strided_swap(&g);
    l->be->ops->fill(l->be, dx, n * l->in_dim, 0.0f);
    l->be->ops->copy_strided(l->be, &g, dy, dx + at);
    return DL_OK;
}

const layer_ops layer_slice_ops = {
    .forward   = slice_forward,
    .backward  = slice_backward,
    .supported = layer_copy_supported,
};

/* ---- constant: "<layer>.value" of the per-sample shape, repeated --------- */

/* Held in the state buffer (beside batchnorm's running statistics), so no
 * optimizer touches it; it comes from the weights file. */
static void const_declare(layer *l)
{
    const int64_t *s = l->out_shape;
    int nd = l->out_ndim;
    layer_declare(l, "value", false, nd, s[0], nd > 1 ? s[1] : 0, nd > 2 ? s[2] : 0,
                  nd > 3 ? s[3] : 0);
    l->p[0].fixed = true;
}

static dl_status const_forward(layer *l, const float *x, float *y, int64_t n, bool train,
                               dl_err *err)
{
    (void)x;
    (void)train;
    (void)err;
    for (int64_t i = 0; i < n; i++)
        l->be->ops->copy(l->be, y + i * l->out_dim, l->p[0].data, l->out_dim);
    return DL_OK;
}

/* Nothing to do: a constant has no inputs and no gradient. */
static dl_status const_backward(layer *l, const float *x, const float *y, const float *dy,
                                float *dx, int64_t n, dl_err *err)
{
    (void)l;
    (void)x;
    (void)y;
    (void)dy;
    (void)dx;
    (void)n;
    (void)err;
    return DL_OK;
}

const layer_ops layer_constant_ops = {
    .declare  = const_declare,
    .forward  = const_forward,
    .backward = const_backward,
};
