/* onnx.h: private to src/onnx: an ONNX ModelProto as onnx_read.c decodes
 * it (the parts dlserve translates), and the arena that owns it. */
#ifndef DL_ONNX_PRIV_H
#define DL_ONNX_PRIV_H

#include "onnx/dl_onnx.h"

/* Most dimensions of an ONNX tensor: the batch and DL_MAX_DIMS more, with
 * room for intermediate shapes the translation folds away. */
#define ONNX_MAX_DIMS 8

/* Every allocation of one decoded model: freed at once. */
typedef struct onnx_arena onnx_arena;

/* A constant tensor: an initializer, a Constant node's value, or a value
 * the translation folded. Floating types are held in f, integer and bool
 * types in i (the other pointer NULL). */
typedef struct onnx_tensor {
    const char *name;
    int         dtype;                    /* DT_* of onnx_pb.h */
    int         ndim;
    int64_t     dims[ONNX_MAX_DIMS];
    int64_t     n;                        /* elements */
    float      *f;
    int64_t    *i;
} onnx_tensor;

typedef struct onnx_attr {
    const char  *name;
    int          type;                    /* ATTR_TYPE_* */
    float        f;
    int64_t      i;
    const char  *s;
    int          nints, nfloats;
    int64_t     *ints;
    float       *floats;
    onnx_tensor *t;
} onnx_attr;

typedef struct onnx_node {
    const char  *name, *op, *domain;
    int          nin, nout, nattrs;
    const char **in, **out;               /* "" for an omitted optional input */
    onnx_attr   *attrs;
} onnx_node;

/* A graph input or output: element type and shape; dims[k] < 0 where the
 * dimension is symbolic (dim_param) or unknown. */
typedef struct onnx_value {
    const char *name;
    int         elem;
    bool        has_shape;
    int         ndim;
    int64_t     dims[ONNX_MAX_DIMS];
} onnx_value;

typedef struct onnx_graph {
    onnx_arena  *arena;
    int64_t      opset;                   /* of the default domain */
    const char  *meta_model;              /* metadata "dlserve.model", or NULL */
    int          nnodes, ninits, ninputs, noutputs;
    onnx_node   *nodes;
    onnx_tensor *inits;
    onnx_value  *inputs, *outputs;
} onnx_graph;

/* Decodes a serialized ModelProto (buf, len bytes). dir (may be NULL:
 * external data is then refused) is the folder external data files are
 * read from; `what` names the source in errors. Every read is bounds-
 * checked: a truncated or corrupted file gets a reason. *out is new. */
dl_status onnx_read(const void *buf, size_t len, const char *dir, const char *what,
                    onnx_graph **out, dl_err *err);
void onnx_graph_free(onnx_graph *g);

/* Arena allocation (zeroed); NULL when memory runs out. */
void *onnx_alloc(onnx_arena *a, size_t n);
char *onnx_strdup(onnx_arena *a, const char *s);

/* The attribute called name of node n, or NULL. */
const onnx_attr *onnx_attr_find(const onnx_node *n, const char *name);

#endif
