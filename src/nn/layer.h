/* layer.h (private to nn/): the layer interface. Each layer type is a
 * const ops table; a model is an array of layers run in file order, each
 * reading model inputs or outputs of layers above it. */
#ifndef DL_NN_LAYER_H
#define DL_NN_LAYER_H

#include "nn/dl_nn.h"

#define LAYER_MAX_PARAMS 32          /* an lstm of 4 layers both ways: 4 x 4 x 2 */

/* A named tensor of a layer: trainable ones live in the model's parameter
 * buffer (with a gradient), the others in its state buffer. */
typedef struct param_slot {
    const char *suffix;          /* "weight", "bias", "running_mean", ... */
    int         ndim;
    int64_t     shape[DL_MAX_DIMS];
    bool        trainable;
    bool        fixed;           /* state that never changes (a constant's
                                  * value): laid out after the rest */
    float      *data;            /* view into the model's buffer */
    float      *grad;            /* NULL for state */
} param_slot;

typedef struct layer layer;

/* Decoding (generate.c): a pass over the new positions of sequences whose
 * earlier positions a cache holds. Sample s of the pass starts at
 * position past[s] of its sequence; a self-attention's keys are its
 * kv_len[s] = past[s] + its length in this pass; a cross-attention's its
 * source's src_len[s]. The layers that read only the source (source[i])
 * run as in any pass when sequences start, and not at all in a step
 * (past > 0 everywhere), where a cross-attention reads the keys and
 * values it cached when its sequence started. */
typedef struct layer_dec {
    const int32_t *past, *kv_len, *src_len;   /* host, a sample each */
    const bool    *source;                    /* a layer each; NULL: none */
    bool           step;
} layer_dec;

typedef struct layer_ops {
    /* Declares the parameters (shapes from in_shape / out_shape). */
    void (*declare)(layer *l);
    /* Initialises parameters and state as PyTorch does. */
    void (*init)(layer *l, dl_rng *rng);
    /* Bytes kept from forward to backward for a batch of n, and scratch
     * floats needed only during one call. Either may be NULL (none). */
    size_t  (*aux_bytes)(const layer *l, int64_t n);
    int64_t (*work_floats)(const layer *l, int64_t n);
    dl_status (*forward)(layer *l, const float *x, float *y, int64_t n,
                         bool train, dl_err *err);
    /* dx may be NULL (first layer): then only parameter gradients. */
    dl_status (*backward)(layer *l, const float *x, const float *y,
                          const float *dy, float *dx, int64_t n, dl_err *err);
    /* Layers of several inputs (nin of them) set these instead: xs[i] is
     * input i; backward overwrites each dxs[i] that is not NULL (the
     * engine sums the gradients of a tensor that several layers read). */
    dl_status (*forward_multi)(layer *l, const float *const *xs, float *y, int64_t n,
                               bool train, dl_err *err);
    dl_status (*backward_multi)(layer *l, const float *const *xs, const float *y,
                                const float *dy, float *const *dxs, int64_t n,
                                dl_err *err);
    /* Whether l's backend has the kernels it calls beyond those every
     * backend has; NULL: none needed. A model with a layer its backend
     * lacks is refused when it is built. */
    bool (*supported)(const layer *l);
} layer_ops;

struct layer {
    const layer_ops     *ops;
    const dl_layer_conf *conf;
    dl_backend          *be;
    int                  in_ndim, out_ndim;      /* per sample; in_*: input 0 */
    int64_t              in_shape[DL_MAX_DIMS], out_shape[DL_MAX_DIMS];
    int64_t              in_dim, out_dim;
    int                  nin;                    /* inputs (conf->nsrc) */
    int                  ins_ndim[DL_LAYER_MAX_IN];
    int64_t              ins_shape[DL_LAYER_MAX_IN][DL_MAX_DIMS];
    int64_t              ins_dim[DL_LAYER_MAX_IN];
    int                  nparams;
    param_slot           p[LAYER_MAX_PARAMS];
    void                *aux;                    /* backend memory */
    float               *work;                   /* shared scratch */
    uint64_t             seed, calls;            /* dropout: mask stream and pass */
    /* Fusion (model.c): a conv2d or dense layer followed by an activation
     * applies it itself (post points at post_act), and that activation
     * layer is `folded`: its forward does nothing, its output is the
     * previous layer's, and its backward runs as usual. */
    const dl_act        *post;
    dl_act               post_act;
    bool                 folded;
    /* Inference only (model_plan.c): a conv2d or dense layer whose output
     * goes only to a unary elementwise layer applies that layer's op itself
     * in inference (post_un points at post_un_val, through the engine's
     * fused post-op where it has one), and that layer is `folded_infer`:
     * inference skips it and reads the producer's output. Training runs
     * both as they are: the unary's backward needs its input. */
    const dl_unary      *post_un;
    dl_unary             post_un_val;
    bool                 folded_infer;
    /* Inference only (model_plan.c): a conv2d whose output goes only to
     * an add of two tensors of its shape and layout adds the other one,
     * tensor res_t, itself (through the engine's fused post-op where it
     * has one), then the add's folded activation res_post; that add is
     * folded_infer (its res_of is the conv2d's index). res points at
     * res_t's buffer in each pass (model.c); res_unfused: the engine
     * declined the fused add, the layer adds in a pass of its own. */
    bool                 res_fused, res_unfused;
    int                  res_t, res_of;          /* res_of: the add's convolution */
    const float         *res;
    const dl_act        *res_post;
    bool                 generic;                /* the engine declined: im2col */
    /* DL_BLOCKED_* / DL_NHWC_* (model_plan.c's plan_layouts): which of
     * this layer's activations stay in the engine's blocked layout, or in
     * NHWC where their channels are no whole blocks. Such a layer has no
     * generic fallback. */
    int64_t              blocked;
    bool                 cols_kept;              /* conv2d: aux holds the last training
                                                  * forward's im2col matrices */
    /* Batch-invariant inference (dl_model_set_batch_invariant): a
     * sample's forward gives the same bits whatever the batch around it.
     * Layers whose kernels choose blocking by the batch (dense, conv2d,
     * conv1d, pooling) then run a row-exact GEMM or one sample at a time;
     * the others compute each sample by itself anyway. */
    bool                 invariant;
    /* Sequences (model.c sets these before each pass): the lengths of
     * input k's samples (host, n of them, each 1 to its time axis;
     * NULL: input k is no sequence), those of the output (the same
     * array as the input's it keeps, or NULL), and the longest of
     * input 0's lengths in this pass (its time axis when no sequence).
     * Past its length a sample's positions hold finite values that no
     * consumer reads, and gradients that are zero. */
    const int32_t       *ins_len[DL_LAYER_MAX_IN];
    const int32_t       *out_len;
    int64_t              seq_max;
    /* Whether input 0 is a sequence (known when the model is built, before
     * any lengths: a conv1d over one declares its weights from [T, D]). */
    bool                 seq;
    /* Decoding (NULL otherwise): the pass's positions, and this layer's
     * cache (an attention's keys and values, `cache_stride` floats a
     * sample, sample 0 of the pass at `cache`; backend memory). */
    const layer_dec     *dec;
    float               *cache;
    int64_t              cache_stride;
};

/* Runs a layer's forward one sample at a time (batch-invariant inference
 * of a layer whose kernels would otherwise see the batch): x and y hold
 * in_dim and out_dim floats a sample, in either layout. */
dl_status layer_forward_samples(layer *l, const float *x, float *y, int64_t n,
                                dl_status (*fwd)(layer *, const float *, float *, int64_t,
                                                 bool, dl_err *),
                                dl_err *err);

/* Output shape of a layer for the per-sample shapes of its nin inputs;
 * errors say what does not fit ("expects 3-D input [C, H, W], got [784]"). */
dl_status layer_shape(const dl_layer_conf *c, int nin, const int *in_ndim,
                      const int64_t (*in)[DL_MAX_DIMS], int *out_ndim, int64_t *out,
                      dl_err *err);

/* A layer type's shape rule: layer_shape after the count of inputs is
 * checked against the type's arity. Each row of layer_table names one
 * (layer.c): */
typedef dl_status layer_shape_fn(const dl_layer_conf *c, int nin, const int *in_ndim,
                                 const int64_t (*in)[DL_MAX_DIMS], int *out_ndim,
                                 int64_t *out, dl_err *err);
layer_shape_fn layer_shape_same,       /* the input's shape: activations, ... */
    layer_shape_dense, layer_shape_conv2d, layer_shape_pool2d, layer_shape_gap,
    layer_shape_batchnorm, layer_shape_transpose, layer_shape_reduce,
    layer_shape_window1d, layer_shape_flatten, layer_shape_reshape,
    layer_shape_embedding, layer_shape_axis, layer_shape_slice,
    layer_shape_broadcast, layer_shape_constant, layer_shape_matmul,
    layer_shape_concat, layer_shape_sdpa;

/* Sequences through a layer (layer_seq.c): in_seq[k] the model input
 * whose lengths input k carries (-1: none); sets *out_seq to the output's,
 * or refuses a layer that cannot read a sequence, naming why. May
 * rewrite the output shape layer_shape gave (conv1d over [T, D] keeps
 * channels last). */
dl_status layer_seq(const dl_layer_conf *c, int nin, const int *in_seq, const int *in_ndim,
                    const int64_t (*in)[DL_MAX_DIMS], int *out_seq, int *out_ndim,
                    int64_t *out, dl_err *err);
layer_shape_fn layer_shape_rnn, layer_shape_attention, layer_shape_seq_pool,
    layer_shape_positions;

/* One row of the layer-type table: all that nn knows of a type outside
 * its ops. */
typedef struct layer_type_info {
    const char      *name;        /* in model.json ("dense") */
    int              arity;       /* see layer_arity */
    const layer_ops *ops;
    layer_shape_fn  *shape;
    const char      *params;      /* the keys model.json gives it besides name,
                                   * type and inputs ("" for none) */
    bool             native_only; /* no ONNX operator imports as it */
} layer_type_info;

/* The table, a row per dl_layer_type (layer_table.c). */
extern const layer_type_info layer_table[];

/* Checks a parsed model.json as a whole (model_check.c): sources, shapes,
 * datatypes, outputs, and that every layer and input is used. */
dl_status conf_check_graph(const char *what, dl_model_conf *m, dl_err *err);

/* Inputs a layer type takes: 0 (constant), 1, 2, -1 for two or more,
 * -2 for one or two. */
int layer_arity(dl_layer_type t);

/* The axes a reduce layer drops on ndim-D samples, as a bit set. */
int layer_reduce_mask(const dl_layer_conf *c, int nd);

/* slice: the first index it keeps of an axis of len and how many, every
 * conf->step-th (Python's semantics: negative counts from the end, the
 * bounds clamped to the axis). */
void layer_slice_range(const dl_layer_conf *c, int64_t len, int64_t *start, int64_t *count);

/* A (possibly negative) axis of ndim-D samples as an index. */
int layer_axis(int64_t axis, int ndim);

/* Where position j of a tensor of shape out (nd dimensions) reads a
 * tensor of shape in (kd <= nd) broadcast to it, NumPy's way: shapes
 * aligned at the right, a dimension of 1 repeated. */
int64_t layer_bcast_offset(const int64_t *out, int nd, const int64_t *in, int kd, int64_t j);

/* The ops table of type t (layer_table's). */
const layer_ops *layer_ops_for(dl_layer_type t);

/* The strides of a dense row-major tensor of shape (nd dimensions). */
void layer_dense_strides(int nd, const int64_t *shape, int64_t *st);

/* The iteration over a batch of n of l's outputs: the batch, then the
 * output's dimensions; st[2] the output's strides, the others 0. */
void layer_strided_out(const layer *l, int64_t n, dl_strided *g);

/* Input 0 of l over a batch of n as sequences: its time axis (the
 * capacity), the values a position and this pass's lengths (NULL when
 * it is no sequence: every position is valid). */
dl_seq layer_seq_geom(const layer *l, int64_t n);

/* Input k's strides along that iteration (NumPy broadcasting: 0 along
 * the dimensions it repeats). */
void layer_bcast_strides(const layer *l, int k, int64_t *st);

/* transpose, reduce_mean / reduce_sum and matmul (layer_tensor.c). */
extern const layer_ops layer_transpose_ops, layer_reduce_ops, layer_matmul_ops;

/* gelu, silu, pow, sqrt, erf, leaky_relu, clip, hardsigmoid and
 * hardswish (layer_elem.c); slice and constant (layer_slice.c). */
extern const layer_ops layer_elem_ops, layer_slice_ops, layer_constant_ops;

/* sdpa: attention over a packed projection (layer_attn.c). */
extern const layer_ops layer_sdpa_ops;

/* Sequence layers: lstm and gru (layer_rnn.c), attention
 * (layer_attn.c), pos_embedding, seq_pool and crf (layer_seqops.c). */
extern const layer_ops layer_rnn_ops, layer_attention_ops, layer_pos_embedding_ops,
    layer_seq_pool_ops, layer_crf_ops;

/* add, sub, mul and div; concat; global average pooling; layernorm;
 * log_softmax (layer_graph.c). */
extern const layer_ops layer_binary_ops, layer_concat_ops, layer_gap_ops,
    layer_layernorm_ops, layer_log_softmax_ops;

/* softmax and log_softmax over any sample axis (layer_graph.c); those on
 * the last axis that the softmax layer runs itself. */
dl_status layer_softmax_axis_fwd(layer *l, const float *x, float *y, int64_t n);
dl_status layer_softmax_axis_bwd(layer *l, const float *y, const float *dy, float *dx,
                                 int64_t n);
bool layer_softmax_axis_supported(const layer *l);

/* Whether l's backend has strided copies (transpose, slice, concat) and
 * reductions (reduce_*, global pooling). */
bool layer_copy_supported(const layer *l);
bool layer_reduce_supported(const layer *l);

/* Whether input k of a binary layer is a per-channel vector [C, 1, 1]
 * against an output [C, H, W] (H * W > 1): the same bytes in plain and
 * blocked layouts, so such a layer may run on blocked activations. */
bool layer_channel_vector(const layer *l, int k);

/* Swaps the first two operands of g: a copy's source and destination. */
void layer_strided_swap(dl_strided *g);

/* Adds a parameter slot to l. */
void layer_declare(layer *l, const char *suffix, bool trainable, int ndim,
                   int64_t d0, int64_t d1, int64_t d2, int64_t d3);

/* The activation of a relu, tanh or sigmoid layer. */
dl_act layer_act(const dl_layer_conf *c);
/* The op of a layer of layer_elem_ops (layer_elem.c). */
dl_unary layer_unary(const dl_layer_conf *c);

/* Uniform(-bound, bound) fill of a host/CPU-visible buffer. */
void layer_fill_uniform(layer *l, float *dst, int64_t n, float bound, dl_rng *rng);

/* Whether l is a conv2d or pooling layer whose activations the backend's
 * convolution engine can keep blocked (layer_conv.c). */
bool layer_engine_layout(const layer *l);

/* The ops tables: dense in layer_dense.c; conv2d, max and average pooling
 * in layer_conv.c; batchnorm and dropout in layer_norm.c; flatten,
 * embedding, activations and softmax in layer_misc.c. */
extern const layer_ops layer_dense_ops, layer_conv2d_ops, layer_maxpool_ops,
    layer_avgpool_ops, layer_batchnorm_ops, layer_dropout_ops,
    layer_flatten_ops, layer_embedding_ops, layer_act_ops, layer_softmax_ops,
    layer_conv1d_ops;

#endif /* DL_NN_LAYER_H */
