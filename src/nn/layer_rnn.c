/* layer_rnn.c: the lstm and gru layers, PyTorch's nn.LSTM and nn.GRU
 * (batch_first) over packed sequences: [T, D] -> [T, hidden * dirs], or
 * the top layer's last states [hidden * dirs]. Parameters carry PyTorch's
 * names and layouts (weight_ih_l0, ..., _reverse), so a state_dict loads
 * as it is; the backend's rnn_* kernels run the whole stack (dl_rnn). */
#include "nn/layer.h"

#include <math.h>
#include <string.h>

/* PyTorch's parameter names, by layer, direction and kind (weight_ih,
 * weight_hh, bias_ih, bias_hh): the slots keep the pointer. */
#define RNN_NAMES(k)                                                                  \
    { { "weight_ih_l" #k, "weight_hh_l" #k, "bias_ih_l" #k, "bias_hh_l" #k },         \
      { "weight_ih_l" #k "_reverse", "weight_hh_l" #k "_reverse", "bias_ih_l" #k "_reverse", \
        "bias_hh_l" #k "_reverse" } }
static const char *const rnn_names[4][2][4] = { RNN_NAMES(0), RNN_NAMES(1), RNN_NAMES(2),
                                                RNN_NAMES(3) };

static int dirs(const layer *l) { return l->conf->bidirectional ? 2 : 1; }
static int64_t gates(const layer *l) { return l->conf->type == DL_LAYER_LSTM ? 4 : 3; }

static void rnn_declare(layer *l)
{
    int64_t h = l->conf->hidden, gh = gates(l) * h;
    for (int k = 0; k < l->conf->num_layers; k++)
        for (int d = 0; d < dirs(l); d++) {
            int64_t in = k == 0 ? l->in_shape[1] : h * dirs(l);
            layer_declare(l, rnn_names[k][d][0], true, 2, gh, in, 0, 0);
            layer_declare(l, rnn_names[k][d][1], true, 2, gh, h, 0, 0);
            if (l->conf->bias) {
                layer_declare(l, rnn_names[k][d][2], true, 1, gh, 0, 0, 0);
                layer_declare(l, rnn_names[k][d][3], true, 1, gh, 0, 0, 0);
            }
        }
}

/* PyTorch: every parameter uniform in +-1/sqrt(hidden). */
static void rnn_init(layer *l, dl_rng *rng)
{
    float bound = 1.0f / sqrtf((float)l->conf->hidden);
    for (int k = 0; k < l->nparams; k++)
        layer_fill_uniform(l, l->p[k].data, dl_shape_numel(l->p[k].ndim, l->p[k].shape), bound,
                           rng);
}

/* The kernels' view of l for a batch of n; its parameters lie one after
 * the other in declaration order, PyTorch's. */
static dl_rnn desc(const layer *l, int64_t n, bool train)
{
    return (dl_rnn){ .cell = l->conf->type == DL_LAYER_LSTM ? DL_RNN_LSTM : DL_RNN_GRU,
                     .n = n, .t = l->in_shape[0], .in = l->in_shape[1],
                     .hidden = l->conf->hidden, .layers = (int)l->conf->num_layers,
                     .dirs = dirs(l), .bias = l->conf->bias, .ret_seq = l->conf->ret_seq,
                     .len = l->ins_len[0], .train = train, .invariant = l->invariant && !train,
                     .w = l->p[0].data, .dw = l->p[0].grad, .reserve = l->aux,
                     .work = l->work };
}

/* The backend's sizes for a batch of n; 0 when it refuses the geometry
 * (the forward then says why). */
static void sizes(const layer *l, int64_t n, size_t *reserve, size_t *work)
{
    dl_rnn r = desc(l, n, true);
    r.len = NULL;               /* not this pass's yet */
    *reserve = *work = 0;
    if (l->be->ops->rnn_size(l->be, &r, reserve, work, NULL) != DL_OK)
        *reserve = *work = 0;
}

static size_t rnn_aux_bytes(const layer *l, int64_t n)
{
    size_t reserve, work;
    sizes(l, n, &reserve, &work);
    return reserve;
}

static int64_t kernel_work_floats(const layer *l, int64_t n)
{
    size_t reserve, work;
    sizes(l, n, &reserve, &work);
    return (int64_t)((work + sizeof(float) - 1) / sizeof(float));
}

/* Decoding's states of a batch of n, [layers, n, hidden] each: h and c
 * read, h and c written. */
static int64_t state_floats(const layer *l, int64_t n)
{
    return l->conf->num_layers * n * l->conf->hidden;
}

/* The kernel's scratch, then room for decoding's four state blocks. */
static int64_t rnn_work_floats(const layer *l, int64_t n)
{
    return kernel_work_floats(l, n) + 4 * state_floats(l, n);
}

/* Moves states between a pass's [layers, n, hidden] block and the
 * slots' caches (layers * hidden floats of h, then of c, a slot). */
static void state_move(layer *l, int64_t n, float *block, float *cache, bool to_cache)
{
    int64_t h = l->conf->hidden, nl = l->conf->num_layers, cs = l->cache_stride;
    int64_t blk[3] = { n * h, h, 1 }, cch[3] = { h, cs, 1 };
    dl_strided g = { .nd = 3, .shape = { nl, n, h } };
    memcpy(g.st[0], to_cache ? blk : cch, sizeof(blk));
    memcpy(g.st[1], to_cache ? cch : blk, sizeof(blk));
    l->be->ops->copy_strided(l->be, &g, to_cache ? block : cache, to_cache ? cache : block);
}

/* Decoding (l->dec, generate.c; a unidirectional stack returning the
 * sequence): a sequence's first pass starts from zero states, later ones
 * from the states its last pass left in the cache; either leaves its
 * states there. */
static dl_status rnn_decode(layer *l, const float *x, float *y, int64_t n, dl_err *err)
{
    bool lstm = l->conf->type == DL_LAYER_LSTM;
    int64_t sf = state_floats(l, n), ch = l->conf->num_layers * l->conf->hidden;
    float *hx = l->work + kernel_work_floats(l, n), *cx = hx + sf, *hy = cx + sf, *cy = hy + sf;
    dl_rnn r = desc(l, n, false);
    if (l->dec->step) {
        state_move(l, n, hx, l->cache, false);
        if (lstm)
            state_move(l, n, cx, l->cache + ch, false);
    }
    r.hx = l->dec->step ? hx : NULL;
    r.cx = l->dec->step && lstm ? cx : NULL;
    r.hy = hy;
    r.cy = lstm ? cy : NULL;
    dl_status st = l->be->ops->rnn_fwd(l->be, &r, x, y, err);
    if (st == DL_OK) {
        state_move(l, n, hy, l->cache, true);
        if (lstm)
            state_move(l, n, cy, l->cache + ch, true);
    }
    return st;
}

static dl_status rnn_forward(layer *l, const float *x, float *y, int64_t n, bool train,
                             dl_err *err)
{
    if (l->dec)
        return rnn_decode(l, x, y, n, err);
    dl_rnn r = desc(l, n, train);
    size_t reserve, work;
    dl_status st = l->be->ops->rnn_size(l->be, &r, &reserve, &work, err);
    if (st == DL_OK && reserve && !l->aux)
        st = dl_err_set(err, DL_ERR_INVALID, "no room kept for the %s's states",
                        dl_layer_type_name(l->conf->type));
    return st == DL_OK ? l->be->ops->rnn_fwd(l->be, &r, x, y, err) : st;
}

static dl_status rnn_backward(layer *l, const float *x, const float *y, const float *dy,
                              float *dx, int64_t n, dl_err *err)
{
    dl_rnn r = desc(l, n, true);
    return l->be->ops->rnn_bwd(l->be, &r, x, y, dy, dx, err);
}

static bool rnn_supported(const layer *l)
{
    const dl_backend_ops *ops = l->be->ops;
    return ops->rnn_size && ops->rnn_fwd && ops->rnn_bwd;
}

const layer_ops layer_rnn_ops = {
    .declare     = rnn_declare,
    .init        = rnn_init,
    .aux_bytes   = rnn_aux_bytes,
    .work_floats = rnn_work_floats,
    .forward     = rnn_forward,
    .backward    = rnn_backward,
    .supported   = rnn_supported,
};
