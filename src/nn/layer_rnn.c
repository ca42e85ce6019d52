/* layer_rnn.c: the lstm and gru layers, PyTorch's nn.LSTM and nn.GRU
 * (batch_first) over packed sequences: [T, D] -> [T, hidden * dirs], or
 * the top layer's last states [hidden * dirs]. Parameters carry PyTorch's
 * names and layouts (weight_ih_l0, ..., _reverse), so a state_dict loads
 * as it is; the backend's rnn_* kernels run the whole stack (dl_rnn). */
#include "nn/layer.h"

#include <math.h>

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

static int64_t rnn_work_floats(const layer *l, int64_t n)
{
    size_t reserve, work;
    sizes(l, n, &reserve, &work);
    return (int64_t)((work + sizeof(float) - 1) / sizeof(float));
}

static dl_status rnn_forward(layer *l, const float *x, float *y, int64_t n, bool train,
                             dl_err *err)
{
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
