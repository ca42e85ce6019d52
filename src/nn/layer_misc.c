/* layer_misc.c: layers without much arithmetic: flatten, embedding,
 * elementwise activations (relu, tanh, sigmoid) and softmax. */
#include "nn/layer.h"

static dl_status flat_forward(layer *l, const float *x, float *y, int64_t n,
                              bool train, dl_err *err)
{
    (void)train;
    (void)err;
    l->be->ops->copy(l->be, y, x, n * l->in_dim);
    return DL_OK;
}

static dl_status flat_backward(layer *l, const float *x, const float *y,
                               const float *dy, float *dx, int64_t n, dl_err *err)
{
    (void)x;
    (void)y;
    (void)err;
    if (dx)
        l->be->ops->copy(l->be, dx, dy, n * l->in_dim);
    return DL_OK;
}

const layer_ops layer_flatten_ops = {
    .forward  = flat_forward,
    .backward = flat_backward,
};

/* ---- embedding: ids (T) -> vectors (T, D), table [num_embeddings, D] -- */

static void emb_declare(layer *l)
{
    layer_declare(l, "weight", true, 2, l->conf->num_embeddings, l->conf->dim, 0, 0);
}

static void emb_init(layer *l, dl_rng *rng)
{
    for (int64_t i = 0; i < l->conf->num_embeddings * l->conf->dim; i++)
        l->p[0].data[i] = dl_rng_normal(rng);   /* PyTorch: N(0, 1) */
}

static dl_status emb_forward(layer *l, const float *x, float *y, int64_t n,
                             bool train, dl_err *err)
{
    (void)train;
    return l->be->ops->embed_fwd(l->be, x, l->p[0].data, y, n * l->in_dim,
                                 l->conf->dim, l->conf->num_embeddings, err);
}

static dl_status emb_backward(layer *l, const float *x, const float *y,
                              const float *dy, float *dx, int64_t n, dl_err *err)
{
    (void)y;
    (void)dx;    /* ids have no gradient */
    (void)err;
    l->be->ops->embed_bwd(l->be, x, dy, l->p[0].grad, n * l->in_dim, l->conf->dim);
    return DL_OK;
}

const layer_ops layer_embedding_ops = {
    .declare  = emb_declare,
    .init     = emb_init,
    .forward  = emb_forward,
    .backward = emb_backward,
};

/* ---- activations ------------------------------------------------------- */

dl_act layer_act(const dl_layer_conf *c)
{
    switch (c->type) {
    case DL_LAYER_TANH:    return DL_ACT_TANH;
    case DL_LAYER_SIGMOID: return DL_ACT_SIGMOID;
    default:               return DL_ACT_RELU;
    }
}

static dl_act act_of(const layer *l) { return layer_act(l->conf); }

static dl_status act_forward(layer *l, const float *x, float *y, int64_t n,
                             bool train, dl_err *err)
{
    (void)train;
    (void)err;
    if (!l->folded)      /* else the previous layer applied it: x is y */
        l->be->ops->act_fwd(l->be, act_of(l), x, y, n * l->in_dim);
    return DL_OK;
}

static dl_status act_backward(layer *l, const float *x, const float *y,
                              const float *dy, float *dx, int64_t n, dl_err *err)
{
    (void)x;
    (void)err;
    if (dx)
        l->be->ops->act_bwd(l->be, act_of(l), y, dy, dx, n * l->in_dim);
    return DL_OK;
}

const layer_ops layer_act_ops = {
    .forward  = act_forward,
    .backward = act_backward,
};

/* ---- softmax over the last dimension ----------------------------------- */

static int64_t last(const layer *l) { return l->in_shape[l->in_ndim - 1]; }

/* softmax over another axis than the last: the axis kernels (layer_graph.c) */
static bool other_axis(const layer *l)
{
    return layer_axis(l->conf->axis, l->in_ndim) != l->in_ndim - 1;
}

static dl_status sm_forward(layer *l, const float *x, float *y, int64_t n,
                            bool train, dl_err *err)
{
    (void)train;
    (void)err;
    if (other_axis(l))
        return layer_softmax_axis_fwd(l, x, y, n);
    l->be->ops->softmax_fwd(l->be, x, y, n * l->in_dim / last(l), last(l));
    return DL_OK;
}

static dl_status sm_backward(layer *l, const float *x, const float *y,
                             const float *dy, float *dx, int64_t n, dl_err *err)
{
    (void)x;
    (void)err;
    if (dx && other_axis(l))
        return layer_softmax_axis_bwd(l, y, dy, dx, n);
    if (dx)
        l->be->ops->softmax_bwd(l->be, y, dy, dx, n * l->in_dim / last(l), last(l));
    return DL_OK;
}

static bool sm_supported(const layer *l)
{
    return !other_axis(l) || layer_softmax_axis_supported(l);
}

const layer_ops layer_softmax_ops = {
    .forward   = sm_forward,
    .backward  = sm_backward,
    .supported = sm_supported,
};
