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

/* ---- embedding: ids (T) -> vectors (T, D), table [num_embeddings, D] --
 * nn.Embedding, padding_idx included: that row starts at zero and gets no
 * gradient. Over a sequence, the ids past each sample's length read as 0
 * (a row, finite) and their positions give no row any gradient. */

static void emb_declare(layer *l)
{
    layer_declare(l, "weight", true, 2, l->conf->num_embeddings, l->conf->dim, 0, 0);
}

static void emb_init(layer *l, dl_rng *rng)
{
    int64_t dim = l->conf->dim;
    for (int64_t i = 0; i < l->conf->num_embeddings * dim; i++)
        l->p[0].data[i] = dl_rng_normal(rng);   /* PyTorch: N(0, 1) */
    for (int64_t k = 0; l->conf->padding_idx >= 0 && k < dim; k++)
        l->p[0].data[l->conf->padding_idx * dim + k] = 0.0f;
}

/* Over a sequence: the masked ids, then (backward) the masked dy. */
static int64_t emb_work(const layer *l, int64_t n)
{
    return l->seq ? n * l->in_dim * (1 + l->conf->dim) : 0;
}

/* The ids the table is read at: x itself, or over a sequence x with the
 * padding's ids 0 (work). */
static const float *emb_ids(layer *l, const float *x, int64_t n)
{
    if (!l->seq)
        return x;
    dl_seq q = layer_seq_geom(l, n);
    l->be->ops->seq_mask(l->be, &q, x, l->work);
    return l->work;
}

static dl_status emb_forward(layer *l, const float *x, float *y, int64_t n,
                             bool train, dl_err *err)
{
    (void)train;
    return l->be->ops->embed_fwd(l->be, emb_ids(l, x, n), l->p[0].data, y, n * l->in_dim,
                                 l->conf->dim, l->conf->num_embeddings, err);
}

static dl_status emb_backward(layer *l, const float *x, const float *y,
                              const float *dy, float *dx, int64_t n, dl_err *err)
{
    (void)y;
    (void)dx;    /* ids have no gradient */
    (void)err;
    const dl_backend_ops *ops = l->be->ops;
    int64_t dim = l->conf->dim, nids = n * l->in_dim;
    const float *ids = emb_ids(l, x, n);
    if (l->seq) {       /* the rows of the padding's positions: 0 */
        dl_seq q = layer_seq_geom(l, n);
        q.d *= dim;
        ops->seq_mask(l->be, &q, dy, l->work + nids);
        dy = l->work + nids;
    }
    ops->embed_bwd(l->be, ids, dy, l->p[0].grad, nids, dim);
    /* padding_idx's row gets no gradient: it had none before this pass
     * either, so zeroing it drops exactly what its ids added */
    if (l->conf->padding_idx >= 0)
        ops->fill(l->be, l->p[0].grad + l->conf->padding_idx * dim, dim, 0.0f);
    return DL_OK;
}

static bool emb_supported(const layer *l)
{
    return !l->seq || l->be->ops->seq_mask;
}

const layer_ops layer_embedding_ops = {
    .declare     = emb_declare,
    .init        = emb_init,
    .work_floats = emb_work,
    .forward     = emb_forward,
    .backward    = emb_backward,
    .supported   = emb_supported,
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
