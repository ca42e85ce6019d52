/* layer_seqops.c: the small layers of sequences: pos_embedding (learned
 * position vectors added to [T, D]), seq_pool (mean, max, sum or last of
 * each sample's valid positions) and crf (the transitions of a
 * linear-chain CRF output: it passes the tag scores through, and the loss,
 * model_loss.c, reads its transitions and writes their gradient). */
#include "nn/layer.h"

/* ---- crf ----------------------------------------------------------------- */

/* PaddlePaddle's layout: row 0 the start scores, row 1 the end scores,
 * then row 2 + i the scores of tag i followed by each tag. */
static void crf_declare(layer *l)
{
    int64_t c = l->in_shape[1];
    layer_declare(l, "transitions", true, 2, c + 2, c, 0, 0);
}

static void crf_init(layer *l, dl_rng *rng)
{
    param_slot *p = &l->p[0];
    layer_fill_uniform(l, p->data, dl_shape_numel(p->ndim, p->shape), 0.1f, rng);
}

static dl_status crf_forward(layer *l, const float *x, float *y, int64_t n, bool train,
                             dl_err *err)
{
    (void)train, (void)err;
    l->be->ops->copy(l->be, y, x, n * l->in_dim);
    return DL_OK;
}

static dl_status crf_backward(layer *l, const float *x, const float *y, const float *dy,
                              float *dx, int64_t n, dl_err *err)
{
    (void)x, (void)y, (void)err;
    if (dx)
        l->be->ops->copy(l->be, dx, dy, n * l->in_dim);
    return DL_OK;
}

const layer_ops layer_crf_ops = {
    .declare  = crf_declare,
    .init     = crf_init,
    .forward  = crf_forward,
    .backward = crf_backward,
};

/* ---- pos_embedding: y[t] = x[t] + weight[t] ------------------------------- */

/* weight [max_length, D], N(0, 1) as nn.Embedding's. */
static void pos_declare(layer *l)
{
    layer_declare(l, "weight", true, 2, l->conf->max_length, l->in_shape[1], 0, 0);
}

static void pos_init(layer *l, dl_rng *rng)
{
    param_slot *p = &l->p[0];
    for (int64_t i = 0; i < dl_shape_numel(p->ndim, p->shape); i++)
        p->data[i] = dl_rng_normal(rng);
}

/* Over (n, T D): operand 0 the samples, 1 weight's first T rows (the same
 * for every sample), 2 the output. */
static dl_strided pos_geom(const layer *l, int64_t n)
{
    int64_t td = l->in_dim;
    return (dl_strided){ .nd = 2, .shape = { n, td }, .st = { { td, 1 }, { 0, 1 }, { td, 1 } } };
}

/* Every position, padding too (finite: x's are); the mask comes in the
 * backward. */
static dl_status pos_forward(layer *l, const float *x, float *y, int64_t n, bool train,
                             dl_err *err)
{
    (void)train, (void)err;
    dl_strided g = pos_geom(l, n);
    if (!l->dec) {
        l->be->ops->binary_fwd(l->be, DL_BIN_ADD, &g, x, l->p[0].data, NULL, y);
        return DL_OK;
    }
    /* Decoding: sample s's rows are positions past[s] on, up to the
     * table's end (rows beyond a sample's length are copied as they are). */
    int64_t d = l->in_shape[1], t = l->in_shape[0];
    for (int64_t s = 0; s < n; s++) {
        int64_t room = l->conf->max_length - l->dec->past[s], rows = t < room ? t : room;
        g = (dl_strided){ .nd = 1, .shape = { rows * d }, .st = { { 1 }, { 1 }, { 1 } } };
        l->be->ops->binary_fwd(l->be, DL_BIN_ADD, &g, x + s * t * d,
                               l->p[0].data + l->dec->past[s] * d, NULL, y + s * t * d);
        l->be->ops->copy(l->be, y + (s * t + rows) * d, x + (s * t + rows) * d, (t - rows) * d);
    }
    return DL_OK;
}

/* Backward's scratch: the masked dy when there is no dx, and its sum
 * over the batch. */
static int64_t pos_work(const layer *l, int64_t n) { return (n + 1) * l->in_dim; }

/* dx = dy at the valid positions, 0 past them; weight's first T rows
 * gain its sum over the batch. */
static dl_status pos_backward(layer *l, const float *x, const float *y, const float *dy,
                              float *dx, int64_t n, dl_err *err)
{
    (void)x, (void)y, (void)err;
    const dl_backend_ops *ops = l->be->ops;
    dl_seq q = layer_seq_geom(l, n);
    float *dm = dx ? dx : l->work, *sum = l->work + n * l->in_dim;
    ops->seq_mask(l->be, &q, dy, dm);
    dl_strided g = pos_geom(l, n);
    ops->reduce_fwd(l->be, &g, dm, sum, 1.0f);
    ops->axpy(l->be, 1.0f, sum, l->p[0].grad, l->in_dim);
    return DL_OK;
}

static bool pos_supported(const layer *l)
{
    const dl_backend_ops *ops = l->be->ops;
    return ops->binary_fwd && ops->reduce_fwd && ops->seq_mask;
}

const layer_ops layer_pos_embedding_ops = {
    .declare     = pos_declare,
    .init        = pos_init,
    .work_floats = pos_work,
    .forward     = pos_forward,
    .backward    = pos_backward,
    .supported   = pos_supported,
};

/* ---- seq_pool: [T, D...] -> [D...] over each sample's valid positions ---- */

_Static_assert((int)DL_SEQ_POOL_KIND_MEAN == DL_SEQ_POOL_MEAN &&
               (int)DL_SEQ_POOL_KIND_MAX == DL_SEQ_POOL_MAX &&
               (int)DL_SEQ_POOL_KIND_SUM == DL_SEQ_POOL_SUM &&
               (int)DL_SEQ_POOL_KIND_LAST == DL_SEQ_POOL_LAST,
               "seq_pool's modes are the backend's kinds");

static dl_status pool_forward(layer *l, const float *x, float *y, int64_t n, bool train,
                              dl_err *err)
{
    (void)train, (void)err;
    dl_seq q = layer_seq_geom(l, n);
    l->be->ops->seq_pool_fwd(l->be, (dl_seq_pool_kind)l->conf->pool, &q, x, y);
    return DL_OK;
}

static dl_status pool_backward(layer *l, const float *x, const float *y, const float *dy,
                               float *dx, int64_t n, dl_err *err)
{
    (void)y, (void)err;
    dl_seq q = layer_seq_geom(l, n);
    if (dx)
        l->be->ops->seq_pool_bwd(l->be, (dl_seq_pool_kind)l->conf->pool, &q, x, dy, dx);
    return DL_OK;
}

static bool pool_supported(const layer *l)
{
    return l->be->ops->seq_pool_fwd && l->be->ops->seq_pool_bwd;
}

const layer_ops layer_seq_pool_ops = {
    .forward   = pool_forward,
    .backward  = pool_backward,
    .supported = pool_supported,
};
