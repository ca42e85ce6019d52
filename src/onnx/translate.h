/* translate.h: private to src/onnx: the state of one ONNX -> model.json
 * translation, shared by the driver (onnx_import.c) and the operator
 * table (onnx_ops.c). */
#ifndef DL_ONNX_TRANSLATE_H
#define DL_ONNX_TRANSLATE_H

#include "onnx/onnx.h"

#include <jansson.h>

/* A folded shape element that stands for the batch size. */
#define ONNX_BATCH INT64_MIN

/* A value of the graph: a constant (folded or an initializer) or a
 * tensor the engine computes per sample (a model input or a layer's
 * output, `src` naming it, shape without the batch). */
typedef struct tvalue {
    const char  *name;
    onnx_tensor *c;                       /* constant, or NULL */
    const char  *src;                     /* dynamic: layer or input name */
    int          nd;
    int64_t      d[ONNX_MAX_DIMS];
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

/* Translates one node. */
dl_status xl_node(xl *x, const onnx_node *n);

#endif
