/* layer_elem.c: the unary elementwise layers beyond relu, tanh and
 * sigmoid: gelu, silu, pow, sqrt, erf, leaky_relu, clip, hardsigmoid and
 * hardswish, through the backend's unary kernels (dl_unary: the
 * operation and its parameters, picked once a call). */
#include "nn/layer.h"

dl_unary layer_unary(const dl_layer_conf *c)
{
    switch (c->type) {
    case DL_LAYER_GELU:        return (dl_unary){ c->approx_tanh ? DL_UN_GELU_TANH : DL_UN_GELU, 0, 0 };
    case DL_LAYER_SILU:        return (dl_unary){ DL_UN_SILU, 0, 0 };
    case DL_LAYER_POW:         return (dl_unary){ DL_UN_POW, c->exponent, 0 };
    case DL_LAYER_SQRT:        return (dl_unary){ DL_UN_SQRT, 0, 0 };
    case DL_LAYER_ERF:         return (dl_unary){ DL_UN_ERF, 0, 0 };
    case DL_LAYER_LEAKY_RELU:  return (dl_unary){ DL_UN_LEAKY_RELU, c->alpha, 0 };
    case DL_LAYER_CLIP:        return (dl_unary){ DL_UN_CLIP, c->lo, c->hi };
    case DL_LAYER_HARDSIGMOID: return (dl_unary){ DL_UN_HARDSIGMOID, c->alpha, c->beta };
    default:                   return (dl_unary){ DL_UN_HARDSWISH, 0, 0 };
    }
}

static dl_status elem_forward(layer *l, const float *x, float *y, int64_t n, bool train,
                              dl_err *err)
{
    (void)train;
    (void)err;
    dl_unary u = layer_unary(l->conf);
    l->be->ops->unary_fwd(l->be, &u, x, y, n * l->in_dim);
    return DL_OK;
}

static dl_status elem_backward(layer *l, const float *x, const float *y, const float *dy,
                               float *dx, int64_t n, dl_err *err)
{
    (void)err;
    dl_unary u = layer_unary(l->conf);
    if (dx)
        l->be->ops->unary_bwd(l->be, &u, x, y, dy, dx, n * l->in_dim);
    return DL_OK;
}

static bool elem_supported(const layer *l) { return l->be->ops->unary_fwd && l->be->ops->unary_bwd; }

const layer_ops layer_elem_ops = {
    .forward   = elem_forward,
    .backward  = elem_backward,
    .supported = elem_supported,
};
