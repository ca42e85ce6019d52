/* layer_seq.c: sequences through the graph. A sequence tensor has a time
 * axis first (its capacity the input's max_length) and carries the
 * lengths of one model input; layer_seq says what each layer type does
 * with one: keeps it position by position, ends it (pooling, a recurrent
 * layer's last state) or refuses it. Also the shape rules of the layers
 * made for sequences. */
#include "nn/layer.h"

#include <string.h>

/* How a layer type treats a sequence on its inputs. */
typedef enum seq_use {
    SEQ_REFUSE,      /* mixes positions or sizes them: not on a sequence */
    SEQ_KEEP,        /* position by position: the output is the sequence */
    SEQ_END,         /* reduces the time axis: the output is no sequence */
} seq_use;

static seq_use seq_use_of(const dl_layer_conf *c)
{
    switch (c->type) {
    case DL_LAYER_DENSE: case DL_LAYER_DROPOUT: case DL_LAYER_EMBEDDING:
    case DL_LAYER_RELU: case DL_LAYER_TANH: case DL_LAYER_SIGMOID: case DL_LAYER_SOFTMAX:
    case DL_LAYER_ADD: case DL_LAYER_SUB: case DL_LAYER_MUL: case DL_LAYER_DIV:
    case DL_LAYER_CONCAT: case DL_LAYER_IDENTITY: case DL_LAYER_LAYERNORM:
    case DL_LAYER_GELU: case DL_LAYER_SILU: case DL_LAYER_LOG_SOFTMAX: case DL_LAYER_POW:
    case DL_LAYER_SQRT: case DL_LAYER_ERF: case DL_LAYER_LEAKY_RELU: case DL_LAYER_CLIP:
    case DL_LAYER_HARDSIGMOID: case DL_LAYER_HARDSWISH: case DL_LAYER_SLICE:
    case DL_LAYER_CONV1D: case DL_LAYER_ATTENTION: case DL_LAYER_POS_EMBEDDING:
    case DL_LAYER_CRF: case DL_LAYER_SDPA: case DL_LAYER_RESHAPE: case DL_LAYER_TRANSPOSE:
        return SEQ_KEEP;
    case DL_LAYER_LSTM: case DL_LAYER_GRU:
        return c->ret_seq ? SEQ_KEEP : SEQ_END;
    case DL_LAYER_SEQ_POOL:
        return SEQ_END;
    default:
        return SEQ_REFUSE;
    }
}

static dl_status seq_refuse(const dl_layer_conf *c, const char *why, dl_err *err)
{
    return dl_err_set(err, DL_ERR_INVALID, "layer '%s' (%s) reads a sequence: %s", c->name,
                      dl_layer_type_name(c->type), why);
}

/* The per-position checks of a layer that keeps the sequence of input k
 * (nd dimensions, the time axis first, t positions; out: its output's
 * shape). */
static dl_status keep_checks(const dl_layer_conf *c, int nd, int64_t t, const int64_t *out,
                             dl_err *err)
{
    switch (c->type) {
    case DL_LAYER_DENSE: case DL_LAYER_LAYERNORM: case DL_LAYER_POS_EMBEDDING:
    case DL_LAYER_CRF: case DL_LAYER_ATTENTION: case DL_LAYER_LSTM: case DL_LAYER_GRU:
    case DL_LAYER_SDPA:
        return nd >= 2 ? DL_OK
             : seq_refuse(c, "it needs a vector a position, [T, D] (an embedding gives one)",
                          err);
    case DL_LAYER_SOFTMAX: case DL_LAYER_LOG_SOFTMAX: case DL_LAYER_CONCAT:
    case DL_LAYER_SLICE:
        return layer_axis(c->axis, nd) != 0 ? DL_OK
             : seq_refuse(c, "its axis is the time axis (axis 0); give one of the others",
                          err);
    case DL_LAYER_CONV1D:
        if (nd != 2 || c->sw != 1 || c->groups != 1 || 2 * c->pw != c->dw * (c->kw - 1))
            return seq_refuse(c, "over a sequence [T, D] a conv1d keeps the length: stride "
                              "1, groups 1, an odd kernel_size and padding = dilation * "
                              "(kernel_size - 1) / 2", err);
        return DL_OK;
    /* what ONNX imports write around per-position work: a position's
     * values reshaped or their axes swapped */
    case DL_LAYER_RESHAPE:
        return out[0] == t ? DL_OK
             : seq_refuse(c, "its target shape must keep the time axis first, whole (each "
                          "position reshaped alone)", err);
    case DL_LAYER_TRANSPOSE:
        return c->perm[0] == 0 ? DL_OK
             : seq_refuse(c, "its perm must keep the time axis first (perm[0] = 0)", err);
    default:
        return DL_OK;
    }
}

dl_status layer_seq(const dl_layer_conf *c, int nin, const int *in_seq, const int *in_ndim,
                    const int64_t (*in)[DL_MAX_DIMS], int *out_seq, int *out_ndim,
                    int64_t *out, dl_err *err)
{
    *out_seq = -1;
    int first = -1;
    for (int k = 0; k < nin; k++)
        if (in_seq[k] >= 0 && first < 0)
            first = k;
    if (first < 0)
        return DL_OK;
    seq_use use = seq_use_of(c);
    if (use == SEQ_REFUSE)
        return seq_refuse(c, "it would mix positions or depend on the padded length; pool "
                          "the sequence first (seq_pool, or an lstm or gru returning its "
                          "last state)", err);
    bool cross = c->type == DL_LAYER_ATTENTION;
    for (int k = 0; k < nin && !cross; k++) {
        if (in_seq[k] >= 0 && in_seq[k] != in_seq[first])
            return seq_refuse(c, "its inputs are sequences of different lengths", err);
        if (in_seq[k] < 0 && in_ndim[k] >= in_ndim[first])
            return seq_refuse(c, "another input of as many dimensions is no sequence (only "
                              "a smaller one may broadcast over the positions)", err);
    }
    if (cross && in_seq[0] < 0)
        return seq_refuse(c, "its query (input 0) must be a sequence too", err);
    dl_status st = keep_checks(c, in_ndim[first], in[first][0], out, err);
    if (st != DL_OK)
        return st;
    if (c->type == DL_LAYER_CONV1D) {       /* channels last: [T, D] -> [T, filters] */
        *out_ndim = 2;
        out[0] = in[0][0];
        out[1] = c->filters;
    }
    if (use == SEQ_KEEP)
        *out_seq = in_seq[first];
    return DL_OK;
}

dl_status layer_shape_rnn(const dl_layer_conf *c, int nin, const int *in_ndim,
                          const int64_t (*in)[DL_MAX_DIMS], int *out_ndim, int64_t *out,
                          dl_err *err)
{
    (void)nin;
    char buf[96];
    if (in_ndim[0] != 2)
        return dl_err_set(err, DL_ERR_INVALID, "layer '%s' (%s) expects a sequence [T, D], "
                          "got %s", c->name, dl_layer_type_name(c->type),
                          dl_shape_str(in_ndim[0], in[0], buf, sizeof(buf)));
    int64_t h = c->hidden * (c->bidirectional ? 2 : 1);
    *out_ndim = c->ret_seq ? 2 : 1;
    out[0] = c->ret_seq ? in[0][0] : h;
    out[1] = h;
    return DL_OK;
}

/* attention: a query [T, E], keys and values [S, E] (the query itself
 * when one input) -> [T, E]. */
dl_status layer_shape_attention(const dl_layer_conf *c, int nin, const int *in_ndim,
                                const int64_t (*in)[DL_MAX_DIMS], int *out_ndim,
                                int64_t *out, dl_err *err)
{
    char b0[96], b1[96];
    int kv = nin - 1;
    if (in_ndim[0] != 2 || in_ndim[kv] != 2 || in[kv][1] != in[0][1])
        return dl_err_set(err, DL_ERR_INVALID, "layer '%s' (attention) expects a query [T, "
                          "E] and keys [S, E] of the same width, got %s and %s", c->name,
                          dl_shape_str(in_ndim[0], in[0], b0, sizeof(b0)),
                          dl_shape_str(in_ndim[kv], in[kv], b1, sizeof(b1)));
    if (in[0][1] % c->heads)
        return dl_err_set(err, DL_ERR_INVALID, "layer '%s' (attention): %lld heads do not "
                          "divide the width %lld", c->name, (long long)c->heads,
                          (long long)in[0][1]);
    *out_ndim = 2;
    out[0] = in[0][0];
    out[1] = in[0][1];
    return DL_OK;
}

/* seq_pool: [T, D...] -> [D...]. */
dl_status layer_shape_seq_pool(const dl_layer_conf *c, int nin, const int *in_ndim,
                               const int64_t (*in)[DL_MAX_DIMS], int *out_ndim, int64_t *out,
                               dl_err *err)
{
    (void)nin;
    char buf[96];
    if (in_ndim[0] < 2)
        return dl_err_set(err, DL_ERR_INVALID, "layer '%s' (seq_pool) expects [T, D], got "
                          "%s", c->name, dl_shape_str(in_ndim[0], in[0], buf, sizeof(buf)));
    *out_ndim = in_ndim[0] - 1;
    memcpy(out, in[0] + 1, sizeof(int64_t) * (size_t)*out_ndim);
    return DL_OK;
}

/* pos_embedding and crf: [T, D] -> [T, D], with room for T positions. */
dl_status layer_shape_positions(const dl_layer_conf *c, int nin, const int *in_ndim,
                                const int64_t (*in)[DL_MAX_DIMS], int *out_ndim,
                                int64_t *out, dl_err *err)
{
    (void)nin;
    char buf[96];
    if (in_ndim[0] != 2)
        return dl_err_set(err, DL_ERR_INVALID, "layer '%s' (%s) expects [T, D], got %s",
                          c->name, dl_layer_type_name(c->type),
                          dl_shape_str(in_ndim[0], in[0], buf, sizeof(buf)));
    if (c->type == DL_LAYER_POS_EMBEDDING && in[0][0] > c->max_length)
        return dl_err_set(err, DL_ERR_INVALID, "layer '%s' (pos_embedding): 'max_length' "
                          "%lld is below the sequence's %lld positions", c->name,
                          (long long)c->max_length, (long long)in[0][0]);
    *out_ndim = 2;
    out[0] = in[0][0];
    out[1] = in[0][1];
    return DL_OK;
}
