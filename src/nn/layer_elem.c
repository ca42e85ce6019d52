/* layer_elem.c: unary elementwise layers written for host memory (the CPU
 * backend): pow, sqrt, erf, leaky_relu, clip, hardsigmoid and hardswish,
 * with the values and gradients of PyTorch's definitions. */
#include "nn/layer.h"

#include <math.h>

#define TWO_OVER_SQRT_PI 1.1283791670955126f

/* hardsigmoid's argument alpha * x + beta. */
static float hs_arg(const dl_layer_conf *c, float x) { return c->alpha * x + c->beta; }

static float elem(const dl_layer_conf *c, float x)
{
    switch (c->type) {
    case DL_LAYER_POW:         return powf(x, c->exponent);
    case DL_LAYER_SQRT:        return sqrtf(x);
    case DL_LAYER_ERF:         return erff(x);
    case DL_LAYER_LEAKY_RELU:  return x > 0.0f ? x : c->alpha * x;
    case DL_LAYER_CLIP:        return fminf(fmaxf(x, c->lo), c->hi);
    case DL_LAYER_HARDSIGMOID: return fminf(fmaxf(hs_arg(c, x), 0.0f), 1.0f);
    default:                   /* hardswish, as PyTorch writes it */
        return x < -3.0f ? 0.0f : x > 3.0f ? x : x * (x + 3.0f) / 6.0f;
    }
}

/* dy/dx at x (y = elem(x)). At the kinks PyTorch's choices: clip passes
 * the gradient on at its bounds (clamp), hardsigmoid and leaky_relu take
 * the flat side, hardswish the inner one at 3 and the flat one at -3. */
static float elem_grad(const dl_layer_conf *c, float x, float y)
{
    switch (c->type) {
    case DL_LAYER_POW:
        return c->exponent == 0.0f ? 0.0f : c->exponent * powf(x, c->exponent - 1.0f);
    case DL_LAYER_SQRT:        return 0.5f / y;
    case DL_LAYER_ERF:         return TWO_OVER_SQRT_PI * expf(-x * x);
    case DL_LAYER_LEAKY_RELU:  return x > 0.0f ? 1.0f : c->alpha;
    case DL_LAYER_CLIP:        return x >= c->lo && x <= c->hi ? 1.0f : 0.0f;
    case DL_LAYER_HARDSIGMOID: {
        float a = hs_arg(c, x);
        return a > 0.0f && a < 1.0f ? c->alpha : 0.0f;
    }
    default:
        return x < -3.0f ? 0.0f : x <= 3.0f ? x / 3.0f + 0.5f : 1.0f;
    }
}

static dl_status elem_forward(layer *l, const float *x, float *y, int64_t n, bool train,
                              dl_err *err)
{
    (void)train;
    (void)err;
    for (int64_t i = 0; i < n * l->in_dim; i++)
        y[i] = elem(l->conf, x[i]);
    return DL_OK;
}

static dl_status elem_backward(layer *l, const float *x, const float *y, const float *dy,
                               float *dx, int64_t n, dl_err *err)
{
    (void)err;
    for (int64_t i = 0; dx && i < n * l->in_dim; i++)
        dx[i] = dy[i] * elem_grad(l->conf, x[i], y[i]);
    return DL_OK;
}

const layer_ops layer_elem_ops = {
    .forward   = elem_forward,
    .backward  = elem_backward,
    .host_only = true,
};
