/* translate.h: private to src/onnx: the state of one ONNX -> model.json
 * translation and the helpers that build it (translate.c), shared by the
 * driver (onnx_import.c) and the operator table (onnx_ops.c). */
#ifndef DL_ONNX_TRANSLATE_H
#define DL_ONNX_TRANSLATE_H

#include "onnx/onnx.h"

#include <jansson.h>

/* A folded shape element that stands for the batch size; ONNX_BATCH +
 * k - 1 stands for k times it (1 <= k < ONNX_BATCH_KMAX). */
#define ONNX_BATCH INT64_MIN
#define ONNX_BATCH_KMAX (INT64_C(1) << 40)

/* Where the batch sits in a computed tensor's ONNX shape (onnx_layout.c):
 * an axis of its own, or merged into axis bax with a fixed factor, the
 * batch as the outer (slower) or the inner (faster) index. */
enum { XL_BATCH_ALONE = 0, XL_BATCH_OUTER, XL_BATCH_INNER };

/* What a value derived from a sequence input's padding is (onnx_seq.c):
 * none (an ordinary value), a mask along the time axis (boolean or
 * numeric: its value at padded and at valid positions), or each sample's
 * length (times a scale). Never a layer: see onnx_seq.c. */
enum { XL_MASK_NONE = 0, XL_MASK_BOOL, XL_MASK_NUM, XL_MASK_LEN };

/* A value of the graph: a constant (folded or an initializer) or a
 * tensor the engine computes per sample (a model input or a layer's
 * output, `src` naming it, shape without the batch), or a padding mask
 * (mask set: no constant, no source; its shape as a dynamic value's). */
typedef struct tvalue {
    const char  *name;
    onnx_tensor *c;                       /* constant, or NULL */
    const char  *src;                     /* dynamic: layer or input name */
    int          nd;
    int64_t      d[ONNX_MAX_DIMS];
    int          bax;                     /* dynamic: the batch's ONNX axis */
    int          merge;                   /* XL_BATCH_* */
    bool         ids;                     /* a model input's values as ids */
    bool         input;                   /* a model input itself */
    bool         fused;                   /* an Add folded into the layer before */
    bool         seq;                     /* dynamic: engine axis 0 is the time axis
                                           * of a sequence input */
    bool         cf;                      /* a sequence seen channels first: d is
                                           * ONNX's [C, T], the engine holds [T, C]
                                           * (conv1d over a sequence, onnx_seq.c) */
    bool         fill;                    /* constant: c's one value fills a shape
                                           * that holds the batch (ConstantOfShape) */
    int          mask;                    /* XL_MASK_* */
    int          mtax;                    /* mask: the ONNX axis of the time */
    double       mpad, mvalid;            /* mask: its value at padded and valid
                                           * positions; XL_MASK_LEN: mvalid scales */
} tvalue;

typedef struct tensor_out {
    char   *name;                         /* "<layer>.<suffix>" */
    int     ndim;
    int64_t shape[DL_ST_MAX_DIMS];
    float  *data;                         /* owned */
} tensor_out;

typedef struct xl {
    onnx_graph     *g;
    dl_err         *err;
    int64_t         max_length;           /* --import --max-length; 0: not given */
    json_t         *beside, *meta;        /* the model.json beside, the metadata
                                           * "dlserve.model" (parsed), or NULL */
    tvalue         *v;                    /* values, by name */
    int             nv, capv;
    json_t         *layers, *inputs;      /* model.json arrays */
    tensor_out     *t;
    int             nt, capt;
} xl;

/* ---- values, names, layers and tensors (translate.c) ---- */

/* The value called name, or NULL. */
tvalue *xl_find(xl *x, const char *name);
/* A new value (the name borrowed from the graph); NULL when out of memory. */
tvalue *xl_add(xl *x, const char *name);
/* Whether a model input is a sequence (a symbolic time axis). */
bool xl_has_seq(xl *x);
/* How many nodes read the value called name (graph outputs count too). */
int xl_uses(xl *x, const char *name);

/* "node 'NAME' (OP, opset N): reason": the refusal of a node. */
dl_status xl_refuse(xl *x, const onnx_node *n, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));

/* base as a name of model.json: [A-Za-z0-9._-], leading '/' and '.'
 * dropped, cut to fit; "layer" when nothing is left. */
void xl_sanitize(const char *base, char out[DL_NAME_MAX]);
/* A unique layer name from base (sanitized); into out. */
void xl_layer_name(xl *x, const char *base, char out[DL_NAME_MAX]);
/* Name for node n's layer: its weight initializer's PyTorch prefix when
 * `weight` ends with ".weight", else the node's name. */
void xl_node_layer_name(xl *x, const onnx_node *n, const char *weight,
                        char out[DL_NAME_MAX]);

/* Appends layer object l (taken) reading srcs, producing value out with
 * shape d[0..nd) from layer `lname`. */
dl_status xl_emit(xl *x, json_t *l, const char *lname, const char *const *srcs, int nsrc,
                  tvalue *out, int nd, const int64_t *d);
/* Adds tensor "<layer>.<suffix>" of shape, copying n floats (or zeros
 * when data is NULL, or `fill` into every element when data is NULL and
 * fill != 0). */
dl_status xl_tensor(xl *x, const char *layer, const char *suffix, int ndim,
                    const int64_t *shape, const float *data, float fill);

/* A new constant in the arena: nd dims, float (is_f) or int. */
onnx_tensor *xl_const(xl *x, bool is_f, int nd, const int64_t *d);

/* ---- the batch's place (onnx_layout.c) ---- */

/* The ONNX rank of dynamic value v; whether its batch is axis 0, alone. */
int xl_rank(const tvalue *v);
bool xl_std(const tvalue *v);
/* The symbolic shape element k * batch; k of element v (0: not symbolic). */
int64_t xl_batch_times(int64_t k);
int64_t xl_batch_k(int64_t v);
/* v's engine axis of ONNX axis a (negative counts from the end); -1 for
 * the batch's axis or out of range. */
int xl_axis(const tvalue *v, int64_t a);
/* v's ONNX shape into o (symbolic at the batch); returns the rank. */
int xl_onnx_dims(const tvalue *v, int64_t *o);
/* Where v holds the batch, in words ("on axis 1", "merged with 2 into
 * axis 1"), into buf; returns buf. */
const char *xl_layout_text(const tvalue *v, char *buf, size_t n);
/* Whether a and b hold their batches alike (rank, axis, merge). */
bool xl_same_layout(const tvalue *a, const tvalue *b);
/* Transpose of v by perm[0..np): out's layout and engine shape, and the
 * engine's perm into eperm (out->nd entries). NULL, or the reason. */
const char *xl_transpose_layout(const tvalue *v, const int64_t *perm, int np, tvalue *out,
                                int64_t *eperm);
/* Reshape of v to target[0..nt) (folded: 0, -1, symbolic batch): out's
 * layout and engine shape (out zeroed first). NULL, or the reason. */
const char *xl_reshape_layout(const tvalue *v, const int64_t *target, int nt, bool allowzero,
                              tvalue *out);
/* The engine shape of constant c broadcast against v (ONNX rules). NULL,
 * or the reason. */
const char *xl_const_dims(const tvalue *v, const onnx_tensor *c, int *nd, int64_t *d);
/* Whether operator op translates inputs whose batch is not axis 0. */
bool xl_layout_follows(const char *op);

/* Translates one node. */
dl_status xl_node(xl *x, const onnx_node *n);

/* ---- what operator translations share (onnx_ops.c) ---- */

/* Input k of node n (NULL when omitted), attributes with defaults. */
tvalue *xl_arg(xl *x, const onnx_node *n, int k);
int64_t xl_attr_i(const onnx_node *n, const char *name, int64_t dflt);
float xl_attr_f(const onnx_node *n, const char *name, float dflt);
/* Node n's first output as a new value; NULL when out of memory. */
tvalue *xl_out0(xl *x, const onnx_node *n);
dl_status xl_nomem(xl *x);
/* A one-input layer of `type` (object l, taken; may be NULL) on v whose
 * output is node n's, of engine shape d[0..nd), the batch where v has it. */
dl_status xl_unary(xl *x, const onnx_node *n, const char *type, json_t *l, tvalue *v,
                   int nd, const int64_t *d);
/* A reshape layer of v to d[0..nd), node n's output. */
dl_status xl_reshape_to(xl *x, const onnx_node *n, tvalue *v, int nd, const int64_t *d);
/* Node n's output is v itself (no layer). */
dl_status xl_alias(xl *x, const onnx_node *n, tvalue *v);
/* Whether every input of n is a constant; node n's output is constant t
 * (NULL: out of memory). */
bool xl_all_const(xl *x, const onnx_node *n);
dl_status xl_set_const(xl *x, const onnx_node *n, onnx_tensor *t);
/* The constant axes of Squeeze, Unsqueeze and the reductions (an
 * attribute or input 1) into axes: how many, -1 when not constant. */
int xl_axes_of(xl *x, const onnx_node *n, int64_t *axes);
/* The float constant of input k, or NULL. */
const onnx_tensor *xl_weight(xl *x, const onnx_node *n, int k);
/* The layer emitted as name, of type t, or NULL; input k of layer l. */
json_t *xl_emitted(xl *x, const char *name, dl_layer_type t);
const char *xl_input_of(json_t *l, size_t k);
/* The per-sample value a layer's output is, or NULL. */
tvalue *xl_value_from(xl *x, const char *layer);
/* How many layers and outputs (the model.json list outs) read layer
 * `name`. */
int xl_readers(xl *x, json_t *outs, const char *name);
/* Each self-attention of the emitted layers that runs as a dense packed
 * projection, an sdpa of the default scale and a dense back to its width
 * becomes one attention layer (nn.MultiheadAttention's tensors: the
 * decoder's key-value cache runs on attention layers). */
dl_status xl_fuse_attention(xl *x, json_t *outs);

/* ---- sequences (onnx_seq.c) ---- */

/* The time axis' capacity of sequence input `name` (the engine's
 * max_length): --max-length, else the model.json beside's or the
 * metadata's "max_length" of that input, else the beside's "generate"
 * block's max_context when that input is its ids, else 256
 * (onnx_import.c). */
int64_t xl_max_length(xl *x, const char *name);
/* Whether a node reads a padding mask or a batch-shaped fill constant:
 * then xl_mask_node translates it. */
bool xl_reads_mask(xl *x, const onnx_node *n);
dl_status xl_mask_node(xl *x, const onnx_node *n);
/* Operators of the time axis and its masks: Equal, Not, Where, Expand,
 * ConstantOfShape, Range, Trilu, ArgMax, LSTM and GRU. */
dl_status xl_op_equal(xl *x, const onnx_node *n);
dl_status xl_op_compare(xl *x, const onnx_node *n);
dl_status xl_op_not(xl *x, const onnx_node *n);
dl_status xl_op_where(xl *x, const onnx_node *n);
dl_status xl_op_expand(xl *x, const onnx_node *n);
dl_status xl_op_constant_of_shape(xl *x, const onnx_node *n);
dl_status xl_op_range(xl *x, const onnx_node *n);
dl_status xl_op_argmax(xl *x, const onnx_node *n);
dl_status xl_op_trilu(xl *x, const onnx_node *n);
dl_status xl_op_rnn(xl *x, const onnx_node *n);
/* A reduction (mode DL_SEQ_POOL_*) of sequence v over its time axis: a
 * seq_pool layer, reshaped when keepdims. */
dl_status xl_seq_pool(xl *x, const onnx_node *n, tvalue *v, int mode, bool keepdims);
/* Whether node n reads a sequence seen channels first, and its
 * translation then: Transpose back, Conv, element-wise operators, and
 * reductions over the time axis (seq_pool). */
bool xl_reads_cf(xl *x, const onnx_node *n);
dl_status xl_cf_node(xl *x, const onnx_node *n, dl_status (*plain)(xl *, const onnx_node *));
/* Transpose [batch, T, C] -> [batch, C, T] of a sequence: its channels-
 * first view (no layer); *done false when n is no such transpose. */
dl_status xl_cf_view(xl *x, const onnx_node *n, tvalue *a, const int64_t *perm, int r,
                     bool *done);
/* After pruning: an lstm or gru layer read by the next of its kind
 * alone becomes one layer of both levels, tensors renamed _l<k>. */
dl_status xl_merge_stacks(xl *x, json_t *outs);
/* Add(v, c), v a sequence and c a constant with a row a position: a
 * pos_embedding holding c. *done false (and nothing emitted) when c is no
 * such constant. */
dl_status xl_pos_embedding(xl *x, const onnx_node *n, tvalue *v, tvalue *c, bool *done);

#endif
