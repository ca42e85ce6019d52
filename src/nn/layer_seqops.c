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

/* ---- not yet on any backend ------------------------------------------------ */

static bool none_supported(const layer *l)
{
    (void)l;
    return false;
}

const layer_ops layer_pos_embedding_ops = { .supported = none_supported };
const layer_ops layer_seq_pool_ops = { .supported = none_supported };
const layer_ops layer_rnn_ops = { .supported = none_supported };
