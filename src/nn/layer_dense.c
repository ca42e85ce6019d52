/* layer_dense.c: fully connected layer over the last dimension,
 * y = x W^T + b with W of shape [out, in] as PyTorch's nn.Linear. */
#include "nn/layer.h"

#include <math.h>

static int64_t in_features(const layer *l) { return l->in_shape[l->in_ndim - 1]; }
/* Rows of the GEMM: every position of the leading dims of every sample. */
static int64_t rows(const layer *l, int64_t n) { return n * (l->in_dim / in_features(l)); }

static void dense_declare(layer *l)
{
    layer_declare(l, "weight", true, 2, l->conf->units, in_features(l), 0, 0);
    if (l->conf->bias)
        layer_declare(l, "bias", true, 1, l->conf->units, 0, 0, 0);
}

static void dense_init(layer *l, dl_rng *rng)
{
    /* PyTorch: kaiming_uniform(a = sqrt 5) gives bound 1/sqrt(fan_in). */
    float bound = 1.0f / sqrtf((float)in_features(l));
    layer_fill_uniform(l, l->p[0].data, l->conf->units * in_features(l), bound, rng);
    if (l->conf->bias)
        layer_fill_uniform(l, l->p[1].data, l->conf->units, bound, rng);
}

/* y (r, out) = post(x W^T + b) for x (r, in), W (out, in). */
static dl_status dense_gemm(layer *l, const float *x, float *y, int64_t r, dl_err *err)
{
    int64_t in = in_features(l), out = l->conf->units;
    const dl_backend_ops *ops = l->be->ops;
    const float *b = l->conf->bias ? l->p[1].data : NULL;
    if (ops->gemm_bias_act)
        return ops->gemm_bias_act(l->be, r, out, in, x, l->p[0].data, b, l->post, y, err);
    dl_status st = ops->gemm(l->be, false, true, r, out, in, 1.0f, x, l->p[0].data, 0.0f,
                             y, err);
    if (st == DL_OK && b)
        ops->bias_add(l->be, y, b, r, out);
    if (st == DL_OK && l->post)
        ops->act_fwd(l->be, *l->post, y, y, r * out);
    return st;
}

/* Batch-invariant: the backend's row-exact GEMM, else one row at a time
 * (one shape, so one path, whatever the batch). */
static dl_status dense_rows(layer *l, const float *x, float *y, int64_t r, dl_err *err)
{
    int64_t in = in_features(l), out = l->conf->units;
    const dl_backend_ops *ops = l->be->ops;
    dl_status st = DL_ERR_UNAVAILABLE;
    if (ops->gemm_bias_act_rows)
        st = ops->gemm_bias_act_rows(l->be, r, out, in, x, l->p[0].data,
                                     l->conf->bias ? l->p[1].data : NULL, l->post, y, err);
    if (st != DL_ERR_UNAVAILABLE)
        return st;
    if (err)
        *err = (dl_err){0};
    for (int64_t i = 0; i < r; i++)
        if ((st = dense_gemm(l, x + i * in, y + i * out, 1, err)) != DL_OK)
            return st;
    return DL_OK;
}

/* In inference a folded unary (l->post_un, model_plan.c) goes through the
 * backend's fused epilogue where it has one, else a pass of its own. */
static dl_status dense_forward(layer *l, const float *x, float *y, int64_t n,
                               bool train, dl_err *err)
{
    const dl_backend_ops *ops = l->be->ops;
    const dl_unary *u = train ? NULL : l->post_un;
    int64_t r = rows(l, n);
    dl_status st = DL_ERR_UNAVAILABLE;
    if (u && ops->gemm_bias_unary && !l->invariant)
        st = ops->gemm_bias_unary(l->be, r, l->conf->units, in_features(l), x, l->p[0].data,
                                  l->conf->bias ? l->p[1].data : NULL, u, y, err);
    if (st != DL_ERR_UNAVAILABLE)
        return st;
    st = l->invariant && !train ? dense_rows(l, x, y, r, err) : dense_gemm(l, x, y, r, err);
    if (st == DL_OK && u)
        ops->unary_fwd(l->be, u, y, y, r * l->conf->units);
    return st;
}

static dl_status dense_backward(layer *l, const float *x, const float *y,
                                const float *dy, float *dx, int64_t n, dl_err *err)
{
    (void)y;
    int64_t r = rows(l, n), in = in_features(l), out = l->conf->units;
    /* dW (out, in) += dy^T (out, r) x (r, in) */
    dl_status st = l->be->ops->gemm(l->be, true, false, out, in, r, 1.0f, dy, x,
                                    1.0f, l->p[0].grad, err);
    if (st != DL_OK)
        return st;
    if (l->conf->bias)
        l->be->ops->bias_grad(l->be, l->p[1].grad, dy, r, out);
    if (dx) /* dx (r, in) = dy (r, out) x W (out, in) */
        st = l->be->ops->gemm(l->be, false, false, r, in, out, 1.0f, dy,
                              l->p[0].data, 0.0f, dx, err);
    return st;
}

const layer_ops layer_dense_ops = {
    .declare  = dense_declare,
    .init     = dense_init,
    .forward  = dense_forward,
    .backward = dense_backward,
};
