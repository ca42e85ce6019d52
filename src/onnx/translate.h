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

/* A value of the graph: a constant (folded or an initializer) or a
 * tensor the engine computes per sample (a model input or a layer's
 * output, `src` naming it, shape without the batch). */
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

#endif
