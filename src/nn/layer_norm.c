/* layer_norm.c: batch normalisation (per channel of [C, H, W], in NCHW or
 * the convolution engine's blocked layout, or per feature of [F];
 * training and inference modes, running statistics as PyTorch) and
 * inverted dropout. */
#include "nn/layer.h"

/* Channels and positions per channel of one sample. */
static int64_t channels(const layer *l) { return l->in_shape[0]; }
static int64_t spatial(const layer *l) { return l->in_dim / l->in_shape[0]; }

static void bn_declare(layer *l)
{
    int64_t c = channels(l);
    layer_declare(l, "weight", true, 1, c, 0, 0, 0);
    layer_declare(l, "bias", true, 1, c, 0, 0, 0);
    layer_declare(l, "running_mean", false, 1, c, 0, 0, 0);
    layer_declare(l, "running_var", false, 1, c, 0, 0, 0);
}

static void bn_init(layer *l, dl_rng *rng)
{
    (void)rng;
    for (int64_t i = 0; i < channels(l); i++) {
        l->p[0].data[i] = 1.0f;
        l->p[1].data[i] = 0.0f;
        l->p[2].data[i] = 0.0f;
        l->p[3].data[i] = 1.0f;
    }
}

/* Saved mean and inverse std of the last training batch. */
static size_t bn_aux(const layer *l, int64_t n)
{
    (void)n;
    return 2 * (size_t)channels(l) * sizeof(float);
}

static dl_status bn_forward(layer *l, const float *x, float *y, int64_t n,
                            bool train, dl_err *err)
{
    (void)err;
    const dl_layer_conf *c = l->conf;
    const dl_backend_ops *ops = l->be->ops;
    float *saved = l->aux;
    if (train)
        (l->blocked ? ops->bn_fwd_train_blk : ops->bn_fwd_train)(
            l->be, x, y, l->p[0].data, l->p[1].data, saved, saved + channels(l), l->p[2].data,
            l->p[3].data, c->momentum, c->eps, n, channels(l), spatial(l));
    else
        (l->blocked ? ops->bn_fwd_infer_blk : ops->bn_fwd_infer)(
            l->be, x, y, l->p[0].data, l->p[1].data, l->p[2].data, l->p[3].data, c->eps, n,
            channels(l), spatial(l));
    if (l->post)      /* a folded activation (model_plan.c) */
        ops->act_fwd(l->be, *l->post, y, y, n * l->in_dim);
    return DL_OK;
}

static dl_status bn_backward(layer *l, const float *x, const float *y,
                             const float *dy, float *dx, int64_t n, dl_err *err)
{
    (void)y;
    (void)err;
    const dl_backend_ops *ops = l->be->ops;
    const float *saved = l->aux;
    float *scratch = dx ? dx : l->work;   /* the input gradient is needed anyway */
    (l->blocked ? ops->bn_bwd_blk : ops->bn_bwd)(l->be, x, dy, l->p[0].data, saved,
                                                 saved + channels(l), scratch, l->p[0].grad,
                                                 l->p[1].grad, n, channels(l), spatial(l));
    return DL_OK;
}

static int64_t bn_work(const layer *l, int64_t n) { return n * l->in_dim; }

const layer_ops layer_batchnorm_ops = {
    .declare     = bn_declare,
    .init        = bn_init,
    .aux_bytes   = bn_aux,
    .work_floats = bn_work,
    .forward     = bn_forward,
    .backward    = bn_backward,
};

/* ---- dropout -------------------------------------------------------------- */

static size_t drop_aux(const layer *l, int64_t n)
{
    return (size_t)(n * l->in_dim) * sizeof(float);
}

static dl_status drop_forward(layer *l, const float *x, float *y, int64_t n,
                              bool train, dl_err *err)
{
    (void)err;
    int64_t count = n * l->in_dim;
    if (!train || l->conf->rate <= 0.0f) {
        l->be->ops->copy(l->be, y, x, count);
        return DL_OK;
    }
    /* A fresh, reproducible mask per training pass (the model sets calls). */
    uint64_t seed = l->seed * 0x9E3779B97F4A7C15ull + l->calls;
    l->be->ops->dropout_fwd(l->be, x, y, l->aux, count, l->conf->rate, seed);
    return DL_OK;
}

static dl_status drop_backward(layer *l, const float *x, const float *y,
                               const float *dy, float *dx, int64_t n, dl_err *err)
{
    (void)x;
    (void)y;
    (void)err;
    if (!dx)
        return DL_OK;
    int64_t count = n * l->in_dim;
    if (l->conf->rate <= 0.0f)
        l->be->ops->copy(l->be, dx, dy, count);
    else
        l->be->ops->mul(l->be, dy, l->aux, dx, count);
    return DL_OK;
}

const layer_ops layer_dropout_ops = {
    .aux_bytes = drop_aux,
    .forward   = drop_forward,
    .backward  = drop_backward,
};
