/* onnx_export.c: a model of the repository as ONNX (IR 8, opset 17): each
 * model.json layer mapped to ONNX nodes, the safetensors tensors as
 * initializers under their own names, input scaling as nodes at the
 * inputs, a symbolic batch dimension, and the outputs' losses, weights
 * and labels as metadata. The mapping table is in docs/model-repository.md. */
#define _POSIX_C_SOURCE 200809L
#include "onnx/dl_onnx.h"
#include "onnx/onnx_pb.h"
#include "onnx/onnx_write.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define ONNX_IR_VERSION 8
#define ONNX_OPSET 17
/* Longest ONNX tensor name we make: a layer name and a suffix. */
#define TNAME_MAX (DL_NAME_MAX + 32)
/* Protobuf messages stop at 2 GiB; larger models need external data. */
#define PB_MAX ((size_t)INT32_MAX)

/* The export of one model: its tensors' per-sample shapes and ONNX names
 * (model inputs after scaling, then layer outputs), which of them have 1
 * for a batch (made of constants alone, the same for every sample), and
 * the graph built so far. */
typedef struct exporter {
    const dl_model_conf *conf;
    dl_model    *m;
    int         *nd;                    /* ninputs + nlayers */
    int64_t    (*d)[DL_MAX_DIMS];
    char       (*tname)[TNAME_MAX];
    bool        *one;                   /* [1, shape...] rather than [batch, ...] */
    char         batch[TNAME_MAX];      /* [batch] as INT64, once made; else "" */
    dl_sbuf      graph;                 /* GraphProto */
    int          nnodes;
} exporter;

static int tensor_of(const dl_model_conf *c, int src) { return src < 0 ? -1 - src : c->ninputs + src; }

/* A per-sample axis of nd-D samples (negative: from the end) as the ONNX
 * axis of the batched tensor. */
static int64_t onnx_axis(int64_t axis, int nd) { return (axis < 0 ? axis + nd : axis) + 1; }

/* ---- messages ------------------------------------------------------------ */

/* TensorProto: dims, type, name, little-endian raw data. */
static void tensor_msg(dl_sbuf *t, const char *name, int dtype, int ndim, const int64_t *dims,
                       const void *raw, size_t nbytes)
{
    for (int k = 0; k < ndim; k++)
        pb_int(t, TENSOR_DIMS, dims[k]);
    pb_int(t, TENSOR_DATA_TYPE, dtype);
    pb_str(t, TENSOR_NAME, name);
    pb_bytes(t, TENSOR_RAW_DATA, raw, nbytes);
}

/* ValueInfoProto of a graph input or output: ["batch", shape...], the
 * first dimension of the shape symbolic (`time`) when not NULL. */
static void value_info(dl_sbuf *g, int field, const char *name, int dtype, int nd,
                       const int64_t *shape, const char *time)
{
    dl_sbuf dims = {0}, ttype = {0}, type = {0}, vi = {0}, dim = {0};
    pb_str(&dim, DIM_PARAM, "batch");
    pb_msg(&dims, SHAPE_DIM, &dim);
    for (int k = 0; k < nd; k++) {
        dl_sbuf_free(&dim);
        if (k == 0 && time)
            pb_str(&dim, DIM_PARAM, time);
        else
            pb_int(&dim, DIM_VALUE, shape[k]);
        pb_msg(&dims, SHAPE_DIM, &dim);
    }
    pb_int(&ttype, TTYPE_ELEM_TYPE, dtype);
    pb_msg(&ttype, TTYPE_SHAPE, &dims);
    pb_msg(&type, TYPE_TENSOR, &ttype);
    pb_str(&vi, VALUE_NAME, name);
    pb_msg(&vi, VALUE_TYPE, &type);
    pb_msg(g, field, &vi);
    dl_sbuf_free(&dims);
    dl_sbuf_free(&ttype);
    dl_sbuf_free(&type);
    dl_sbuf_free(&vi);
    dl_sbuf_free(&dim);
}

/* ---- nodes --------------------------------------------------------------- */

/* A NodeProto under construction: inputs and output set by node_begin,
 * attributes added, then node_end appends it to the graph. Its name is its
 * output's. */
static void node_begin(dl_sbuf *n, const char *op, int nin, const char *const *ins,
                       const char *out)
{
    *n = (dl_sbuf){0};
    for (int k = 0; k < nin; k++)
        pb_str(n, NODE_INPUT, ins[k]);
    pb_str(n, NODE_OUTPUT, out);
    pb_str(n, NODE_NAME, out);
    pb_str(n, NODE_OP_TYPE, op);
}

static void node_end(exporter *e, dl_sbuf *n)
{
    pb_msg(&e->graph, GRAPH_NODE, n);
    dl_sbuf_free(n);
    e->nnodes++;
}

static void attr_int(dl_sbuf *n, const char *name, int64_t v)
{
    dl_sbuf a = {0};
    pb_str(&a, ATTR_NAME, name);
    pb_int(&a, ATTR_I, v);
    pb_int(&a, ATTR_TYPE, ATTR_TYPE_INT);
    pb_msg(n, NODE_ATTRIBUTE, &a);
    dl_sbuf_free(&a);
}

static void attr_float(dl_sbuf *n, const char *name, float v)
{
    dl_sbuf a = {0};
    pb_str(&a, ATTR_NAME, name);
    pb_float(&a, ATTR_F, v);
    pb_int(&a, ATTR_TYPE, ATTR_TYPE_FLOAT);
    pb_msg(n, NODE_ATTRIBUTE, &a);
    dl_sbuf_free(&a);
}

static void attr_ints(dl_sbuf *n, const char *name, const int64_t *v, int k)
{
    dl_sbuf a = {0};
    pb_str(&a, ATTR_NAME, name);
    pb_ints(&a, ATTR_INTS, v, k);
    pb_int(&a, ATTR_TYPE, ATTR_TYPE_INTS);
    pb_msg(n, NODE_ATTRIBUTE, &a);
    dl_sbuf_free(&a);
}

/* A node of op with nin inputs, one output and no attributes. */
static void op(exporter *e, const char *opname, int nin, const char *const *ins, const char *out)
{
    dl_sbuf n;
    node_begin(&n, opname, nin, ins, out);
    node_end(e, &n);
}

static void op1(exporter *e, const char *opname, const char *in, const char *out)
{
    op(e, opname, 1, &in, out);
}

static void op2(exporter *e, const char *opname, const char *a, const char *b, const char *out)
{
    const char *ins[2] = { a, b };
    op(e, opname, 2, ins, out);
}

/* A Constant node giving a tensor (a scalar when ndim is 0). */
static void constant(exporter *e, const char *out, int dtype, int ndim, const int64_t *dims,
                     const void *raw, size_t nbytes)
{
    dl_sbuf n, t = {0}, a = {0};
    node_begin(&n, "Constant", 0, NULL, out);
    tensor_msg(&t, out, dtype, ndim, dims, raw, nbytes);
    pb_str(&a, ATTR_NAME, "value");
    pb_msg(&a, ATTR_T, &t);
    pb_int(&a, ATTR_TYPE, ATTR_TYPE_TENSOR);
    pb_msg(&n, NODE_ATTRIBUTE, &a);
    dl_sbuf_free(&t);
    dl_sbuf_free(&a);
    node_end(e, &n);
}

static void const_float(exporter *e, const char *out, float v)
{
    constant(e, out, DT_FLOAT, 0, NULL, &v, sizeof(v));
}

static void const_ints(exporter *e, const char *out, const int64_t *v, int k)
{
    int64_t dims[1] = { k };
    constant(e, out, DT_INT64, 1, dims, v, (size_t)k * sizeof(*v));
}

/* "<prefix>/<what>" into buf. */
static const char *sub_name(char *buf, const char *prefix, const char *what)
{
    snprintf(buf, TNAME_MAX, "%s/%s", prefix, what);
    return buf;
}

/* x op c with c a float constant named "<prefix>/<cname>". */
static void op_const(exporter *e, const char *opname, const char *x, float c, const char *prefix,
                     const char *cname, const char *out)
{
    char cn[TNAME_MAX];
    const_float(e, sub_name(cn, prefix, cname), c);
    op2(e, opname, x, cn, out);
}

/* A tensor of 1 for a batch, x ([1, nd dims]), to the batch of the model's
 * first input, by Expand to [batch, 1...]; "<prefix>/<what>_..." names the
 * steps. */
static void expand_to_batch(exporter *e, const char *x, int nd, const char *prefix,
                            const char *what, const char *out)
{
    char ones[TNAME_MAX], shape[TNAME_MAX], w[64];
    if (!e->batch[0]) {
        const char *in = e->conf->inputs[0].name;
        dl_sbuf n;
        node_begin(&n, "Shape", 1, &in, sub_name(e->batch, in, "batch"));
        attr_int(&n, "start", 0);
        attr_int(&n, "end", 1);
        node_end(e, &n);
    }
    int64_t v[DL_MAX_DIMS];
    for (int k = 0; k < nd; k++)
        v[k] = 1;
    snprintf(w, sizeof(w), "%s_ones", what);
    const_ints(e, sub_name(ones, prefix, w), v, nd);
    snprintf(w, sizeof(w), "%s_shape", what);
    dl_sbuf n;
    node_begin(&n, "Concat", 2, (const char *const[]){ e->batch, ones },
               sub_name(shape, prefix, w));
    attr_int(&n, "axis", 0);
    node_end(e, &n);
    op2(e, "Expand", x, shape, out);
}

/* ---- inputs: ids as INT64, scaling ----------------------------------------- */

/* A text (BYTES) input is the ids its tokenizer gives: INT64 over the
 * time axis (the tokenizer stays dlserve's, named in the metadata). */
static int input_dtype(dl_in_type t)
{
    switch (t) {
    case DL_IN_UINT8: return DT_UINT8;
    case DL_IN_INT32: return DT_INT32;
    case DL_IN_INT64:
    case DL_IN_BYTES: return DT_INT64;
    default:          return DT_FLOAT;
    }
}

/* Input k as the layers see it: ids cast to INT64 for Gather, features
 * scaled as dl_scaling_apply does: (x * scale - mean) / std. */
static void emit_input(exporter *e, int k)
{
    const dl_input_conf *in = &e->conf->inputs[k];
    char *cur = e->tname[k], next[TNAME_MAX];
    dl_strlcpy(cur, in->name, TNAME_MAX);
    if (in->dtype != DL_IN_FP32 && input_dtype(in->dtype) != DT_INT64) {
        dl_sbuf n;
        node_begin(&n, "Cast", 1, (const char *const *)&cur, sub_name(next, in->name, "int64"));
        attr_int(&n, "to", DT_INT64);
        node_end(e, &n);
        dl_strlcpy(cur, next, TNAME_MAX);
    }
    if (in->dtype != DL_IN_FP32)
        return;
    const struct { const char *op, *what; float v, unit; } steps[] = {
        { "Mul", "scale", in->sc.scale, 1.0f },
        { "Sub", "mean", in->sc.mean, 0.0f },
        { "Div", "std", in->sc.std, 1.0f },
    };
    for (int s = 0; s < 3; s++) {
        if (steps[s].v == steps[s].unit)
            continue;
        char out[TNAME_MAX];
        snprintf(out, sizeof(out), "%s/%s_out", in->name, steps[s].what);
        op_const(e, steps[s].op, cur, steps[s].v, in->name, steps[s].what, out);
        dl_strlcpy(cur, out, TNAME_MAX);
    }
}

/* ---- layers ---------------------------------------------------------------- */

/* What a layer's emitter works with: its conf, the names and per-sample
 * ranks of its inputs, its output's name and per-sample shape. */
typedef struct lctx {
    const dl_layer_conf *l;
    const char *in[DL_LAYER_MAX_IN];
    int         in_nd[DL_LAYER_MAX_IN];
    bool        in_one[DL_LAYER_MAX_IN];   /* of 1 for a batch: a constant's */
    bool        in_seq[DL_LAYER_MAX_IN];   /* a sequence: its axis 1 is the time */
    const char *out;
    int         out_nd;
    const int64_t *out_d;
} lctx;

/* "<layer>.<suffix>": a safetensors name, which is the initializer's. */
static const char *param(char *buf, const lctx *c, const char *suffix)
{
    snprintf(buf, TNAME_MAX, "%s.%s", c->l->name, suffix);
    return buf;
}

/* dense: Gemm (transB) on [batch, in]; MatMul with the transposed weight,
 * then Add, on more dimensions. */
static void emit_dense(exporter *e, const lctx *c)
{
    char w[TNAME_MAX], b[TNAME_MAX], wt[TNAME_MAX], mm[TNAME_MAX];
    param(w, c, "weight");
    param(b, c, "bias");
    if (c->in_nd[0] == 1) {
        const char *ins[3] = { c->in[0], w, b };
        dl_sbuf n;
        node_begin(&n, "Gemm", c->l->bias ? 3 : 2, ins, c->out);
        attr_int(&n, "transB", 1);
        node_end(e, &n);
        return;
    }
    dl_sbuf n;
    const int64_t perm[2] = { 1, 0 };
    node_begin(&n, "Transpose", 1, (const char *const[]){ w }, sub_name(wt, c->l->name, "weight_t"));
    attr_ints(&n, "perm", perm, 2);
    node_end(e, &n);
    op2(e, "MatMul", c->in[0], wt, c->l->bias ? sub_name(mm, c->l->name, "matmul") : c->out);
    if (c->l->bias)
        op2(e, "Add", mm, b, c->out);
}

/* conv2d, conv1d, pooling: the window attributes of 2 or 1 spatial axes.
 * Pads are symmetric; windows stop at the last full one (floor). */
static void window_attrs(dl_sbuf *n, const dl_layer_conf *l, int spatial)
{
    int64_t k[2] = { l->kh, l->kw }, s[2] = { l->sh, l->sw }, p[4] = { l->ph, l->pw, l->ph, l->pw };
    if (spatial == 1) {
        k[0] = l->kw;
        s[0] = l->sw;
        p[0] = p[1] = l->pw;
    }
    attr_ints(n, "kernel_shape", k, spatial);
    attr_ints(n, "strides", s, spatial);
    attr_ints(n, "pads", p, 2 * spatial);
}

/* conv2d, conv1d: Conv, with channel groups and dilations. */
static void emit_conv(exporter *e, const lctx *c)
{
    char w[TNAME_MAX], b[TNAME_MAX];
    const char *ins[3] = { c->in[0], param(w, c, "weight"), param(b, c, "bias") };
    bool one_d = c->l->type == DL_LAYER_CONV1D;
    int64_t dil[2] = { one_d ? c->l->dw : c->l->dh, c->l->dw };
    dl_sbuf n;
    node_begin(&n, "Conv", c->l->bias ? 3 : 2, ins, c->out);
    window_attrs(&n, c->l, one_d ? 1 : 2);
    attr_ints(&n, "dilations", dil, one_d ? 1 : 2);
    attr_int(&n, "group", c->l->groups);
    node_end(e, &n);
}

/* Average pooling divides by the whole window, padding included, as the
 * engine (and PyTorch's default) does. */
static void emit_pool(exporter *e, const lctx *c)
{
    bool avg = c->l->type == DL_LAYER_AVGPOOL2D;
    dl_sbuf n;
    node_begin(&n, avg ? "AveragePool" : "MaxPool", 1, c->in, c->out);
    window_attrs(&n, c->l, c->l->type == DL_LAYER_MAXPOOL1D ? 1 : 2);
    if (avg)
        attr_int(&n, "count_include_pad", 1);
    node_end(e, &n);
}

/* Inference: the running statistics. ONNX's momentum weighs the old
 * statistics, PyTorch's (model.json's) the batch's. */
static void emit_batchnorm(exporter *e, const lctx *c)
{
    char w[TNAME_MAX], b[TNAME_MAX], rm[TNAME_MAX], rv[TNAME_MAX];
    const char *ins[5] = { c->in[0], param(w, c, "weight"), param(b, c, "bias"),
                           param(rm, c, "running_mean"), param(rv, c, "running_var") };
    dl_sbuf n;
    node_begin(&n, "BatchNormalization", 5, ins, c->out);
    attr_float(&n, "epsilon", c->l->eps);
    attr_float(&n, "momentum", 1.0f - c->l->momentum);
    node_end(e, &n);
}

/* flatten, reshape: Reshape to [0 (the batch), per-sample shape...]; over
 * a sequence, the time axis (kept first) copied too. */
static void emit_reshape(exporter *e, const lctx *c)
{
    int64_t shape[DL_MAX_DIMS + 1] = { 0 };
    memcpy(shape + 1, c->out_d, (size_t)c->out_nd * sizeof(*shape));
    if (c->in_seq[0])
        shape[1] = 0;
    char sn[TNAME_MAX];
    const_ints(e, sub_name(sn, c->l->name, "shape"), shape, c->out_nd + 1);
    op2(e, "Reshape", c->in[0], sn, c->out);
}

/* embedding: Gather of the weight's rows. It reads a model input: ids
 * given as FP32 (integer values: the engine refuses others) are cast. */
static void emit_embedding(exporter *e, const lctx *c)
{
    char w[TNAME_MAX], ids[TNAME_MAX];
    dl_strlcpy(ids, c->in[0], TNAME_MAX);
    dl_sbuf n;
    if (e->conf->inputs[-1 - c->l->src[0]].dtype == DL_IN_FP32) {
        node_begin(&n, "Cast", 1, c->in, sub_name(ids, c->l->name, "ids"));
        attr_int(&n, "to", DT_INT64);
        node_end(e, &n);
    }
    node_begin(&n, "Gather", 2, (const char *const[]){ param(w, c, "weight"), ids }, c->out);
    attr_int(&n, "axis", 0);
    node_end(e, &n);
}

/* softmax, log_softmax: a per-sample axis, + 1 for the batch. */
static void emit_axis_op(exporter *e, const lctx *c, const char *opname)
{
    dl_sbuf n;
    node_begin(&n, opname, 1, c->in, c->out);
    attr_int(&n, "axis", onnx_axis(c->l->axis, c->in_nd[0]));
    node_end(e, &n);
}

/* Inputs of fewer per-sample dimensions than the widest get 1s after the
 * batch (Unsqueeze), so that ONNX's broadcasting, which aligns whole
 * tensors at the right, aligns the samples as the engine does. */
static void align_ranks(exporter *e, const lctx *c, int nin, char (*names)[TNAME_MAX])
{
    int top = 0;
    for (int k = 0; k < nin; k++)
        top = c->in_nd[k] > top ? c->in_nd[k] : top;
    for (int k = 0; k < nin; k++) {
        dl_strlcpy(names[k], c->in[k], TNAME_MAX);
        if (c->in_nd[k] == top)
            continue;
        int64_t axes[DL_MAX_DIMS];
        for (int a = 0; a < top - c->in_nd[k]; a++)
            axes[a] = a + 1;
        char an[TNAME_MAX], what[32];
        snprintf(what, sizeof(what), "in%d_axes", k);
        const_ints(e, sub_name(an, c->l->name, what), axes, top - c->in_nd[k]);
        snprintf(what, sizeof(what), "in%d", k);
        op2(e, "Unsqueeze", c->in[k], an, sub_name(names[k], c->l->name, what));
    }
}

/* concat: Concat on the axis; when other inputs have the batch, inputs
 * of 1 for a batch (constants) are expanded to it first. */
static void emit_concat(exporter *e, const lctx *c)
{
    char names[DL_LAYER_MAX_IN][TNAME_MAX];
    const char *ins[DL_LAYER_MAX_IN];
    bool batched = false;
    for (int k = 0; k < c->l->nsrc; k++)
        batched |= !c->in_one[k];
    for (int k = 0; k < c->l->nsrc; k++) {
        ins[k] = c->in[k];
        if (!batched || !c->in_one[k])
            continue;
        char what[32];
        snprintf(what, sizeof(what), "in%d", k);
        expand_to_batch(e, c->in[k], c->in_nd[k], c->l->name, what,
                        sub_name(names[k], c->l->name, what));
        ins[k] = names[k];
    }
    dl_sbuf n;
    node_begin(&n, "Concat", c->l->nsrc, ins, c->out);
    attr_int(&n, "axis", onnx_axis(c->l->axis, c->in_nd[0]));
    node_end(e, &n);
}

/* add, sub, mul, div (two or more inputs, left to right) and matmul. */
static void emit_binary(exporter *e, const lctx *c, const char *opname)
{
    char names[DL_LAYER_MAX_IN][TNAME_MAX] = { { 0 } }, acc[TNAME_MAX], next[TNAME_MAX];
    int nin = c->l->nsrc;
    align_ranks(e, c, nin, names);
    dl_strlcpy(acc, names[0], TNAME_MAX);
    for (int k = 1; k < nin; k++) {
        char what[32];
        snprintf(what, sizeof(what), "acc%d", k);
        const char *out = k == nin - 1 ? c->out : sub_name(next, c->l->name, what);
        op2(e, opname, acc, names[k], out);
        dl_strlcpy(acc, out, TNAME_MAX);
    }
}

static void emit_transpose(exporter *e, const lctx *c)
{
    int64_t perm[DL_MAX_DIMS + 1] = { 0 };
    for (int k = 0; k < c->l->nperm; k++)
        perm[k + 1] = c->l->perm[k] + 1;
    dl_sbuf n;
    node_begin(&n, "Transpose", 1, c->in, c->out);
    attr_ints(&n, "perm", perm, c->l->nperm + 1);
    node_end(e, &n);
}

/* global_avgpool2d: [C, H, W] -> [C], as GlobalAveragePool then Flatten. */
static void emit_gap(exporter *e, const lctx *c)
{
    char pooled[TNAME_MAX];
    op1(e, "GlobalAveragePool", c->in[0], sub_name(pooled, c->l->name, "pool"));
    dl_sbuf n;
    node_begin(&n, "Flatten", 1, (const char *const[]){ pooled }, c->out);
    attr_int(&n, "axis", 1);
    node_end(e, &n);
}

/* reduce_mean (axes an attribute in opset 17), reduce_sum (axes an
 * input since opset 13); the reduced axes are dropped. */
static void emit_reduce(exporter *e, const lctx *c)
{
    int64_t axes[DL_MAX_DIMS];
    for (int k = 0; k < c->l->naxes; k++)
        axes[k] = onnx_axis(c->l->axes[k], c->in_nd[0]);
    char an[TNAME_MAX];
    bool sum = c->l->type == DL_LAYER_REDUCE_SUM;
    if (sum)
        const_ints(e, sub_name(an, c->l->name, "axes"), axes, c->l->naxes);
    dl_sbuf n;
    node_begin(&n, sum ? "ReduceSum" : "ReduceMean", sum ? 2 : 1,
               (const char *const[]){ c->in[0], an }, c->out);
    if (!sum)
        attr_ints(&n, "axes", axes, c->l->naxes);
    attr_int(&n, "keepdims", 0);
    node_end(e, &n);
}

static void emit_layernorm(exporter *e, const lctx *c)
{
    char w[TNAME_MAX], b[TNAME_MAX];
    dl_sbuf n;
    node_begin(&n, "LayerNormalization", 3,
               (const char *const[]){ c->in[0], param(w, c, "weight"), param(b, c, "bias") },
               c->out);
    attr_int(&n, "axis", -1);
    attr_float(&n, "epsilon", c->l->eps);
    node_end(e, &n);
}

/* gelu, erf form: x * (1 + erf(x / sqrt 2)) * 0.5, as PyTorch exports it. */
static void emit_gelu_erf(exporter *e, const lctx *c)
{
    const char *x = c->in[0], *p = c->l->name;
    char t1[TNAME_MAX], t2[TNAME_MAX], t3[TNAME_MAX], t4[TNAME_MAX];
    op_const(e, "Div", x, 1.4142135623730951f, p, "sqrt2", sub_name(t1, p, "div"));
    op1(e, "Erf", t1, sub_name(t2, p, "erf"));
    op_const(e, "Add", t2, 1.0f, p, "one", sub_name(t3, p, "add"));
    op2(e, "Mul", x, t3, sub_name(t4, p, "mul"));
    op_const(e, "Mul", t4, 0.5f, p, "half", c->out);
}

/* gelu, tanh form: 0.5 x (1 + tanh(sqrt(2/pi) (x + 0.044715 x^3))). */
static void emit_gelu_tanh(exporter *e, const lctx *c)
{
    const char *x = c->in[0], *p = c->l->name;
    char sq[TNAME_MAX], cube[TNAME_MAX], t[TNAME_MAX], inner[TNAME_MAX], u[TNAME_MAX],
        th[TNAME_MAX], one[TNAME_MAX], prod[TNAME_MAX];
    op2(e, "Mul", x, x, sub_name(sq, p, "sq"));
    op2(e, "Mul", sq, x, sub_name(cube, p, "cube"));
    op_const(e, "Mul", cube, 0.044715f, p, "c", sub_name(t, p, "cube_c"));
    op2(e, "Add", x, t, sub_name(inner, p, "inner"));
    op_const(e, "Mul", inner, 0.7978845608028654f, p, "k", sub_name(u, p, "scaled"));
    op1(e, "Tanh", u, sub_name(th, p, "tanh"));
    op_const(e, "Add", th, 1.0f, p, "one", sub_name(one, p, "add"));
    op2(e, "Mul", x, one, sub_name(prod, p, "mul"));
    op_const(e, "Mul", prod, 0.5f, p, "half", c->out);
}

/* clip: Clip with its min and max as inputs, an absent bound an empty
 * name (a trailing one left out). */
static void emit_clip(exporter *e, const lctx *c)
{
    char lo[TNAME_MAX] = "", hi[TNAME_MAX] = "";
    if (c->l->lo != -INFINITY)
        const_float(e, sub_name(lo, c->l->name, "min"), c->l->lo);
    if (c->l->hi != INFINITY)
        const_float(e, sub_name(hi, c->l->name, "max"), c->l->hi);
    op(e, "Clip", hi[0] ? 3 : lo[0] ? 2 : 1, (const char *const[]){ c->in[0], lo, hi }, c->out);
}

/* leaky_relu, hardsigmoid: their alpha (and beta) as attributes. */
static void emit_alpha_op(exporter *e, const lctx *c, const char *opname, bool beta)
{
    dl_sbuf n;
    node_begin(&n, opname, 1, c->in, c->out);
    attr_float(&n, "alpha", c->l->alpha);
    if (beta)
        attr_float(&n, "beta", c->l->beta);
    node_end(e, &n);
}

/* slice: Slice of one axis; its start, end (INT64_MAX when absent) and
 * positive step follow Python's rules, as ONNX's do. */
static void emit_slice(exporter *e, const lctx *c)
{
    const char *p = c->l->name;
    char s[TNAME_MAX], en[TNAME_MAX], a[TNAME_MAX], st[TNAME_MAX];
    int64_t axis = onnx_axis(c->l->axis, c->in_nd[0]);
    const_ints(e, sub_name(s, p, "starts"), &c->l->start, 1);
    const_ints(e, sub_name(en, p, "ends"), &c->l->end, 1);
    const_ints(e, sub_name(a, p, "axes"), &axis, 1);
    const_ints(e, sub_name(st, p, "steps"), &c->l->step, 1);
    op(e, "Slice", 5, (const char *const[]){ c->in[0], s, en, a, st }, c->out);
}

/* constant: its initializer <layer>.value (one sample's shape) with a
 * batch of 1 in front, which broadcasting stretches to the batch. */
static void emit_constant(exporter *e, const lctx *c)
{
    char v[TNAME_MAX], an[TNAME_MAX];
    const int64_t axes[1] = { 0 };
    const_ints(e, sub_name(an, c->l->name, "axes"), axes, 1);
    op2(e, "Unsqueeze", param(v, c, "value"), an, c->out);
}

static void emit_silu(exporter *e, const lctx *c)
{
    char s[TNAME_MAX];
    op1(e, "Sigmoid", c->in[0], sub_name(s, c->l->name, "sigmoid"));
    op2(e, "Mul", c->in[0], s, c->out);
}

/* [T] of a sequence tensor x ([batch, T, ...]): Shape's axis 1, as
 * "<prefix>/<what>". */
static const char *time_dim(exporter *e, const char *x, const char *prefix, const char *what,
                            char *buf)
{
    dl_sbuf n;
    node_begin(&n, "Shape", 1, &x, sub_name(buf, prefix, what));
    attr_int(&n, "start", 1);
    attr_int(&n, "end", 2);
    node_end(e, &n);
    return buf;
}

/* The attention nodes of sdpa and attention: as PyTorch writes
 * nn.MultiheadAttention's self-attention (which the importer fuses
 * back): the projection proj ([batch, T, 3E], each position's q, k and
 * v) sliced into q, k and v, each reshaped to [batch, T, H, d] and
 * transposed to heads first (k to [batch, H, d, T]), q scaled, softmax(q
 * k) v (a causal mask added to the scores: over a sequence its first T
 * rows and columns), then the heads back side by side into out. */
typedef struct sdpa_geom {
    const char *p;                  /* names' prefix: the layer */
    int64_t     w, heads;           /* E, H */
    float       scale;
    bool        causal, seq;
    int64_t     t;                  /* positions, or a sequence's capacity */
} sdpa_geom;

static dl_status sdpa_nodes(exporter *e, const sdpa_geom *sg, const char *proj,
                            const char *out, dl_err *err)
{
    const char *p = sg->p;
    int64_t t = sg->t, w = sg->w, h = sg->heads, d = w / h;
    static const char *const part[3] = { "q", "k", "v" };
    char head[3][TNAME_MAX], buf[TNAME_MAX], a[TNAME_MAX], b[TNAME_MAX], shape[TNAME_MAX];
    int64_t split_shape[4] = { 0, 0, h, d }, axis = 2, step = 1;
    const_ints(e, sub_name(shape, p, "head_shape"), split_shape, 4);
    const_ints(e, sub_name(a, p, "axes"), &axis, 1);
    const_ints(e, sub_name(b, p, "steps"), &step, 1);
    for (int k = 0; k < 3; k++) {
        char st[TNAME_MAX], en[TNAME_MAX], sl[TNAME_MAX], rs[TNAME_MAX], w2[32];
        int64_t start = k * w, end = (k + 1) * w;
        snprintf(w2, sizeof(w2), "%s_start", part[k]);
        const_ints(e, sub_name(st, p, w2), &start, 1);
        snprintf(w2, sizeof(w2), "%s_end", part[k]);
        const_ints(e, sub_name(en, p, w2), &end, 1);
        op(e, "Slice", 5, (const char *const[]){ proj, st, en, a, b }, sub_name(sl, p, part[k]));
        snprintf(w2, sizeof(w2), "%s_split", part[k]);
        op2(e, "Reshape", sl, shape, sub_name(rs, p, w2));
        int64_t perm[4] = { 0, 2, k == 1 ? 3 : 1, k == 1 ? 1 : 3 };
        snprintf(w2, sizeof(w2), "%s_heads", part[k]);
        dl_sbuf n;
        node_begin(&n, "Transpose", 1, (const char *const[]){ rs }, sub_name(head[k], p, w2));
        attr_ints(&n, "perm", perm, 4);
        node_end(e, &n);
    }
    char qs[TNAME_MAX], sc[TNAME_MAX], pr[TNAME_MAX], o[TNAME_MAX], ot[TNAME_MAX];
    op_const(e, "Mul", head[0], sg->scale, p, "scale", sub_name(qs, p, "q_scaled"));
    op2(e, "MatMul", qs, head[1], sub_name(sc, p, "scores"));
    if (sg->causal) {
        float *mask = calloc((size_t)(t * t), sizeof(float));
        int64_t dims[2] = { t, t };
        if (!mask)
            return dl_err_set(err, DL_ERR_NOMEM, "layer '%s': causal mask", p);
        for (int64_t i = 0; i < t; i++)
            for (int64_t j = i + 1; j < t; j++)
                mask[i * t + j] = -INFINITY;
        constant(e, sub_name(buf, p, "causal_mask"), DT_FLOAT, 2, dims, mask,
                 (size_t)(t * t) * sizeof(float));
        free(mask);
        if (sg->seq) {              /* the mask's first T rows and columns */
            char td[TNAME_MAX], ends[TNAME_MAX], st[TNAME_MAX], ax[TNAME_MAX], cut[TNAME_MAX];
            const int64_t zeros[2] = { 0, 0 }, axes[2] = { 0, 1 };
            time_dim(e, proj, p, "time", td);
            dl_sbuf n;
            node_begin(&n, "Concat", 2, (const char *const[]){ td, td },
                       sub_name(ends, p, "mask_ends"));
            attr_int(&n, "axis", 0);
            node_end(e, &n);
            const_ints(e, sub_name(st, p, "mask_starts"), zeros, 2);
            const_ints(e, sub_name(ax, p, "mask_axes"), axes, 2);
            op(e, "Slice", 4, (const char *const[]){ buf, st, ends, ax },
               sub_name(cut, p, "causal_mask_t"));
            strcpy(buf, cut);
        }
        char masked[TNAME_MAX];
        op2(e, "Add", sc, buf, sub_name(masked, p, "scores_masked"));
        strcpy(sc, masked);
    }
    dl_sbuf n;
    node_begin(&n, "Softmax", 1, (const char *const[]){ sc }, sub_name(pr, p, "probs"));
    attr_int(&n, "axis", -1);
    node_end(e, &n);
    op2(e, "MatMul", pr, head[2], sub_name(o, p, "heads_out"));
    int64_t perm[4] = { 0, 2, 1, 3 }, out_shape[3] = { 0, 0, w };
    node_begin(&n, "Transpose", 1, (const char *const[]){ o }, sub_name(ot, p, "heads_back"));
    attr_ints(&n, "perm", perm, 4);
    node_end(e, &n);
    const_ints(e, sub_name(buf, p, "out_shape"), out_shape, 3);
    op2(e, "Reshape", ot, buf, out);
    return DL_OK;
}

static dl_status emit_sdpa(exporter *e, const lctx *c, dl_err *err)
{
    const dl_layer_conf *l = c->l;
    int64_t w = c->out_d[1];
    sdpa_geom sg = { .p = l->name, .w = w, .heads = l->heads, .causal = l->causal,
                     .seq = c->in_seq[0], .t = c->out_d[0],
                     .scale = l->scale > 0.0f ? l->scale : 1.0f / sqrtf((float)(w / l->heads)) };
    return sdpa_nodes(e, &sg, c->in[0], c->out, err);
}

/* y = x W^T (+ b) over [batch, ..., in] for the parameters "<layer>.<w>"
 * and "<layer>.<b>" (b NULL: none). */
static void linear(exporter *e, const lctx *c, const char *x, const char *w, const char *b,
                   const char *what, const char *out)
{
    char wn[TNAME_MAX], wt[TNAME_MAX], bn[TNAME_MAX], mm[TNAME_MAX], tw[32];
    const int64_t perm[2] = { 1, 0 };
    snprintf(tw, sizeof(tw), "%s_t", what);
    dl_sbuf n;
    node_begin(&n, "Transpose", 1, (const char *const[]){ param(wn, c, w) },
               sub_name(wt, c->l->name, tw));
    attr_ints(&n, "perm", perm, 2);
    node_end(e, &n);
    snprintf(tw, sizeof(tw), "%s_matmul", what);
    op2(e, "MatMul", x, wt, b ? sub_name(mm, c->l->name, tw) : out);
    if (b)
        op2(e, "Add", mm, param(bn, c, b), out);
}

/* attention (self-attention, one input): nn.MultiheadAttention as PyTorch
 * writes it: the in_proj, the heads (sdpa_nodes), the out_proj. Over a
 * sequence, a batch of samples of one length (no key padding mask). */
static dl_status emit_attention(exporter *e, const lctx *c, dl_err *err)
{
    const dl_layer_conf *l = c->l;
    if (l->nsrc != 1)
        return dl_err_set(err, DL_ERR_INVALID, "layer '%s' (attention) of a query and keys: "
                          "only self-attention (one input) has an ONNX form", l->name);
    char proj[TNAME_MAX], att[TNAME_MAX];
    int64_t w = c->out_d[1];
    linear(e, c, c->in[0], "in_proj_weight", l->bias ? "in_proj_bias" : NULL, "in_proj",
           sub_name(proj, l->name, "in_proj"));
    sdpa_geom sg = { .p = l->name, .w = w, .heads = l->heads, .causal = l->causal,
                     .seq = c->in_seq[0], .t = c->out_d[0],
                     .scale = 1.0f / sqrtf((float)(w / l->heads)) };
    dl_status st = sdpa_nodes(e, &sg, proj, sub_name(att, l->name, "heads"), err);
    if (st == DL_OK)
        linear(e, c, att, "out_proj.weight", l->bias ? "out_proj.bias" : NULL, "out_proj",
               c->out);
    return st;
}

/* pos_embedding: x + the weight's first T rows. */
static void emit_pos_embedding(exporter *e, const lctx *c)
{
    const char *p = c->l->name;
    char td[TNAME_MAX], zero[TNAME_MAX], w[TNAME_MAX], rows[TNAME_MAX];
    const int64_t z = 0;
    if (c->in_seq[0])
        time_dim(e, c->in[0], p, "time", td);
    else
        const_ints(e, sub_name(td, p, "time"), &c->out_d[0], 1);
    const_ints(e, sub_name(zero, p, "zero"), &z, 1);
    op(e, "Slice", 4, (const char *const[]){ param(w, c, "weight"), zero, td, zero },
       sub_name(rows, p, "rows"));
    op2(e, "Add", c->in[0], rows, c->out);
}

/* seq_pool over the time axis (axis 1): ReduceMean, ReduceMax, ReduceSum,
 * or the last position (Gather -1): over samples of one length. */
static void emit_seq_pool(exporter *e, const lctx *c)
{
    const char *p = c->l->name;
    const int64_t axis = 1, last = -1;
    char an[TNAME_MAX];
    dl_sbuf n;
    switch (c->l->pool) {
    case DL_SEQ_POOL_SUM:
        const_ints(e, sub_name(an, p, "axes"), &axis, 1);
        node_begin(&n, "ReduceSum", 2, (const char *const[]){ c->in[0], an }, c->out);
        break;
    case DL_SEQ_POOL_LAST:
        constant(e, sub_name(an, p, "last"), DT_INT64, 0, NULL, &last, sizeof(last));
        node_begin(&n, "Gather", 2, (const char *const[]){ c->in[0], an }, c->out);
        attr_int(&n, "axis", 1);
        node_end(e, &n);
        return;
    default:
        node_begin(&n, c->l->pool == DL_SEQ_POOL_MAX ? "ReduceMax" : "ReduceMean", 1, c->in,
                   c->out);
        attr_ints(&n, "axes", &axis, 1);
    }
    attr_int(&n, "keepdims", 0);
    node_end(e, &n);
}

/* ---- lstm and gru: ONNX's LSTM and GRU ---------------------------------------
 * dlserve's layers keep PyTorch's parameters (weight_ih_l<k>, ...); the
 * graph slices their gates into ONNX's order (LSTM i, o, f, c; GRU z, r,
 * h) and stacks the directions: the initializers stay the safetensors
 * tensors. [batch, T, D] is transposed to ONNX's [T, batch, D], each
 * level one node; Y back to [batch, T, dirs * H] or Y_h of the top level
 * to [batch, dirs * H]. No sequence_lens: a batch of samples of one
 * length. */

/* ONNX's gate j is PyTorch's gate onnx_src[j]. */
static const int lstm_src[4] = { 0, 3, 1, 2 }, gru_src[3] = { 1, 0, 2 };

/* Parameter `name` ([G*H, cols] or [G*H]) with its gates in ONNX's order,
 * as "<prefix>/<what>". */
static const char *gates_onnx(exporter *e, const lctx *c, const char *name, int g, int64_t h,
                              const char *what, char *out)
{
    const int *src = g == 4 ? lstm_src : gru_src;
    char pn[TNAME_MAX], parts[4][TNAME_MAX], ax[TNAME_MAX], w2[32];
    const int64_t zero = 0;
    const char *ins[4];
    snprintf(w2, sizeof(w2), "%s_axis", what);
    const_ints(e, sub_name(ax, c->l->name, w2), &zero, 1);
    for (int j = 0; j < g; j++) {
        char st[TNAME_MAX], en[TNAME_MAX];
        int64_t lo = src[j] * h, hi = lo + h;
        snprintf(w2, sizeof(w2), "%s_g%d_start", what, j);
        const_ints(e, sub_name(st, c->l->name, w2), &lo, 1);
        snprintf(w2, sizeof(w2), "%s_g%d_end", what, j);
        const_ints(e, sub_name(en, c->l->name, w2), &hi, 1);
        snprintf(w2, sizeof(w2), "%s_g%d", what, j);
        op(e, "Slice", 4, (const char *const[]){ param(pn, c, name), st, en, ax },
           sub_name(parts[j], c->l->name, w2));
        ins[j] = parts[j];
    }
    dl_sbuf n;
    node_begin(&n, "Concat", g, ins, sub_name(out, c->l->name, what));
    attr_int(&n, "axis", 0);
    node_end(e, &n);
    return out;
}

/* W, R or B (kind 0, 1, 2) of level k: [dirs, ...] in ONNX's layout. */
static const char *rnn_input(exporter *e, const lctx *c, int kind, int k, char *out)
{
    const dl_layer_conf *l = c->l;
    int g = l->type == DL_LAYER_LSTM ? 4 : 3, dirs = l->bidirectional ? 2 : 1;
    static const char *const what[3] = { "W", "R", "B" };
    char dir_in[2][TNAME_MAX], ax[TNAME_MAX], w2[32];
    const int64_t zero = 0;
    snprintf(w2, sizeof(w2), "l%d_%s_axis0", k, what[kind]);
    const_ints(e, sub_name(ax, l->name, w2), &zero, 1);
    for (int d = 0; d < dirs; d++) {
        const char *sfx = d ? "_reverse" : "", *dn = d ? "rev" : "fwd";
        char name[64], a[TNAME_MAX], b[TNAME_MAX], flat[TNAME_MAX];
        const char *vec;
        if (kind < 2) {
            snprintf(name, sizeof(name), "weight_%s_l%d%s", kind ? "hh" : "ih", k, sfx);
            snprintf(w2, sizeof(w2), "l%d_%s_%s", k, what[kind], dn);
            vec = gates_onnx(e, c, name, g, l->hidden, w2, flat);
        } else {            /* B: the input biases, then the hidden ones */
            snprintf(name, sizeof(name), "bias_ih_l%d%s", k, sfx);
            snprintf(w2, sizeof(w2), "l%d_Bi_%s", k, dn);
            gates_onnx(e, c, name, g, l->hidden, w2, a);
            snprintf(name, sizeof(name), "bias_hh_l%d%s", k, sfx);
            snprintf(w2, sizeof(w2), "l%d_Bh_%s", k, dn);
            gates_onnx(e, c, name, g, l->hidden, w2, b);
            snprintf(w2, sizeof(w2), "l%d_B_%s", k, dn);
            dl_sbuf n;
            node_begin(&n, "Concat", 2, (const char *const[]){ a, b },
                       sub_name(flat, l->name, w2));
            attr_int(&n, "axis", 0);
            node_end(e, &n);
            vec = flat;
        }
        snprintf(w2, sizeof(w2), "l%d_%s_%s_dir", k, what[kind], dn);
        op2(e, "Unsqueeze", vec, ax, sub_name(dir_in[d], l->name, w2));
    }
    snprintf(w2, sizeof(w2), "l%d_%s", k, what[kind]);
    if (dirs == 1) {
        op1(e, "Identity", dir_in[0], sub_name(out, l->name, w2));
        return out;
    }
    dl_sbuf n;
    node_begin(&n, "Concat", 2, (const char *const[]){ dir_in[0], dir_in[1] },
               sub_name(out, l->name, w2));
    attr_int(&n, "axis", 0);
    node_end(e, &n);
    return out;
}

static void emit_rnn(exporter *e, const lctx *c)
{
    const dl_layer_conf *l = c->l;
    bool lstm = l->type == DL_LAYER_LSTM;
    const char *p = l->name;
    char x[TNAME_MAX], y[TNAME_MAX], yh[TNAME_MAX], tr[TNAME_MAX], sh[TNAME_MAX], w2[32];
    const int64_t tb[3] = { 1, 0, 2 }, ybd[4] = { 0, 2, 1, 3 }, merge[3] = { 0, 0, -1 },
                  flat[2] = { 0, -1 };
    dl_sbuf n;
    node_begin(&n, "Transpose", 1, c->in, sub_name(x, p, "time_major"));
    attr_ints(&n, "perm", tb, 3);
    node_end(e, &n);
    const_ints(e, sub_name(sh, p, "merge_dirs"), merge, 3);
    for (int k = 0; k < l->num_layers; k++) {
        bool top = k == l->num_layers - 1;
        char wn[TNAME_MAX], rn[TNAME_MAX], bn[TNAME_MAX];
        const char *ins[4] = { x, rnn_input(e, c, 0, k, wn), rnn_input(e, c, 1, k, rn),
                               l->bias ? rnn_input(e, c, 2, k, bn) : "" };
        snprintf(w2, sizeof(w2), "l%d_Y", k);
        sub_name(y, p, w2);
        snprintf(w2, sizeof(w2), "l%d_Y_h", k);
        sub_name(yh, p, w2);
        node_begin(&n, lstm ? "LSTM" : "GRU", l->bias ? 4 : 3, ins, y);
        if (top && !l->ret_seq)
            pb_str(&n, NODE_OUTPUT, yh);
        attr_int(&n, "hidden_size", l->hidden);
        if (l->bidirectional) {
            dl_sbuf a = {0};
            pb_str(&a, ATTR_NAME, "direction");
            pb_str(&a, ATTR_S, "bidirectional");
            pb_int(&a, ATTR_TYPE, ATTR_TYPE_STRING);
            pb_msg(&n, NODE_ATTRIBUTE, &a);
            dl_sbuf_free(&a);
        }
        if (!lstm)
            attr_int(&n, "linear_before_reset", 1);
        node_end(e, &n);
        if (top && !l->ret_seq)
            break;
        /* Y [T, dirs, batch, H] -> [T, batch, dirs * H] */
        snprintf(w2, sizeof(w2), "l%d_Y_t", k);
        node_begin(&n, "Transpose", 1, (const char *const[]){ y }, sub_name(tr, p, w2));
        attr_ints(&n, "perm", ybd, 4);
        node_end(e, &n);
        snprintf(w2, sizeof(w2), "l%d_out", k);
        op2(e, "Reshape", tr, sh, sub_name(x, p, w2));
    }
    if (l->ret_seq) {
        node_begin(&n, "Transpose", 1, (const char *const[]){ x }, c->out);
        attr_ints(&n, "perm", tb, 3);
        node_end(e, &n);
        return;
    }
    /* Y_h [dirs, batch, H] -> [batch, dirs * H] */
    node_begin(&n, "Transpose", 1, (const char *const[]){ yh }, sub_name(tr, p, "Y_h_t"));
    attr_ints(&n, "perm", tb, 3);
    node_end(e, &n);
    const_ints(e, sub_name(sh, p, "flat"), flat, 2);
    op2(e, "Reshape", tr, sh, c->out);
}

/* conv1d over a sequence, channels last ([T, D] a sample): Conv between
 * transposes to ONNX's channels first. */
static void emit_conv_seq(exporter *e, const lctx *c)
{
    char cf[TNAME_MAX], co[TNAME_MAX];
    const int64_t perm[3] = { 0, 2, 1 };
    dl_sbuf n;
    node_begin(&n, "Transpose", 1, c->in, sub_name(cf, c->l->name, "channels_first"));
    attr_ints(&n, "perm", perm, 3);
    node_end(e, &n);
    lctx cc = *c;
    cc.in[0] = cf;
    cc.out = sub_name(co, c->l->name, "conv");
    emit_conv(e, &cc);
    node_begin(&n, "Transpose", 1, (const char *const[]){ co }, c->out);
    attr_ints(&n, "perm", perm, 3);
    node_end(e, &n);
}

/* The nodes of one layer, ending in c->out. */
static dl_status emit_layer(exporter *e, const lctx *c, dl_err *err)
{
    switch (c->l->type) {
    case DL_LAYER_DENSE:            emit_dense(e, c); break;
    case DL_LAYER_CONV2D:           emit_conv(e, c); break;
    case DL_LAYER_CONV1D:           c->in_seq[0] ? emit_conv_seq(e, c) : emit_conv(e, c); break;
    case DL_LAYER_MAXPOOL2D:
    case DL_LAYER_AVGPOOL2D:
    case DL_LAYER_MAXPOOL1D:        emit_pool(e, c); break;
    case DL_LAYER_BATCHNORM:        emit_batchnorm(e, c); break;
    case DL_LAYER_DROPOUT:
    case DL_LAYER_IDENTITY:         op1(e, "Identity", c->in[0], c->out); break;
    case DL_LAYER_FLATTEN:
    case DL_LAYER_RESHAPE:          emit_reshape(e, c); break;
    case DL_LAYER_EMBEDDING:        emit_embedding(e, c); break;
    case DL_LAYER_RELU:             op1(e, "Relu", c->in[0], c->out); break;
    case DL_LAYER_TANH:             op1(e, "Tanh", c->in[0], c->out); break;
    case DL_LAYER_SIGMOID:          op1(e, "Sigmoid", c->in[0], c->out); break;
    case DL_LAYER_SOFTMAX:          emit_axis_op(e, c, "Softmax"); break;
    case DL_LAYER_LOG_SOFTMAX:      emit_axis_op(e, c, "LogSoftmax"); break;
    case DL_LAYER_CONCAT:           emit_concat(e, c); break;
    case DL_LAYER_ADD:              emit_binary(e, c, "Add"); break;
    case DL_LAYER_SUB:              emit_binary(e, c, "Sub"); break;
    case DL_LAYER_MUL:              emit_binary(e, c, "Mul"); break;
    case DL_LAYER_DIV:              emit_binary(e, c, "Div"); break;
    case DL_LAYER_MATMUL:           emit_binary(e, c, "MatMul"); break;
    case DL_LAYER_TRANSPOSE:        emit_transpose(e, c); break;
    case DL_LAYER_GLOBAL_AVGPOOL2D: emit_gap(e, c); break;
    case DL_LAYER_REDUCE_MEAN:
    case DL_LAYER_REDUCE_SUM:       emit_reduce(e, c); break;
    case DL_LAYER_LAYERNORM:        emit_layernorm(e, c); break;
    case DL_LAYER_GELU:             c->l->approx_tanh ? emit_gelu_tanh(e, c)
                                                      : emit_gelu_erf(e, c); break;
    case DL_LAYER_SILU:             emit_silu(e, c); break;
    case DL_LAYER_POW:              op_const(e, "Pow", c->in[0], c->l->exponent, c->l->name,
                                             "exponent", c->out); break;
    case DL_LAYER_SQRT:             op1(e, "Sqrt", c->in[0], c->out); break;
    case DL_LAYER_ERF:              op1(e, "Erf", c->in[0], c->out); break;
    case DL_LAYER_LEAKY_RELU:       emit_alpha_op(e, c, "LeakyRelu", false); break;
    case DL_LAYER_CLIP:             emit_clip(e, c); break;
    case DL_LAYER_HARDSIGMOID:      emit_alpha_op(e, c, "HardSigmoid", true); break;
    case DL_LAYER_HARDSWISH:        op1(e, "HardSwish", c->in[0], c->out); break;
    case DL_LAYER_SLICE:            emit_slice(e, c); break;
    case DL_LAYER_CONSTANT:         emit_constant(e, c); break;
    case DL_LAYER_SDPA:             return emit_sdpa(e, c, err);
    case DL_LAYER_ATTENTION:        return emit_attention(e, c, err);
    case DL_LAYER_LSTM:
    case DL_LAYER_GRU:              emit_rnn(e, c); break;
    case DL_LAYER_POS_EMBEDDING:    emit_pos_embedding(e, c); break;
    case DL_LAYER_SEQ_POOL:         emit_seq_pool(e, c); break;
    /* a crf output: its tag scores; decoding (Viterbi) is dlserve's */
    case DL_LAYER_CRF:              op1(e, "Identity", c->in[0], c->out); break;
    default:
        return dl_err_set(err, DL_ERR_INVALID, "layer '%s' (%s) has no ONNX form",
                          c->l->name, dl_layer_type_name(c->l->type));
    }
    return DL_OK;
}

/* The output fed by layer i, or -1. */
static int output_of(const dl_model_conf *conf, int i)
{
    for (int k = 0; k < conf->noutputs; k++)
        if (conf->outputs[k].from == i)
            return k;
    return -1;
}

/* Whether name is a model input's or output's (other than output `own`). */
static bool name_taken(const dl_model_conf *conf, const char *name, int own)
{
    for (int k = 0; k < conf->ninputs; k++)
        if (strcmp(conf->inputs[k].name, name) == 0)
            return true;
    for (int k = 0; k < conf->noutputs; k++)
        if (k != own && strcmp(conf->outputs[k].name, name) == 0)
            return true;
    return false;
}

/* Layer i's output tensor: the model output it feeds, else the layer's
 * name (made distinct from the inputs' and outputs' names). */
static void layer_tensor_name(exporter *e, int i)
{
    const dl_model_conf *conf = e->conf;
    char *name = e->tname[conf->ninputs + i];
    int k = output_of(conf, i);
    if (k >= 0)
        dl_strlcpy(name, conf->outputs[k].name, TNAME_MAX);
    else if (name_taken(conf, conf->layers[i].name, -1))
        snprintf(name, TNAME_MAX, "%s/out", conf->layers[i].name);
    else
        dl_strlcpy(name, conf->layers[i].name, TNAME_MAX);
}

/* Layer i: its nodes, its output's name and whether that has 1 for a
 * batch (a layer of constants alone; a model output gets the batch). */
static dl_status emit_layer_at(exporter *e, int i, dl_err *err)
{
    const dl_model_conf *conf = e->conf;
    const dl_layer_conf *l = &conf->layers[i];
    int t = conf->ninputs + i;
    lctx c = { .l = l, .out = e->tname[t], .out_nd = e->nd[t], .out_d = e->d[t] };
    e->one[t] = true;
    for (int k = 0; k < l->nsrc; k++) {
        int s = tensor_of(conf, l->src[k]);
        c.in[k] = e->tname[s];
        c.in_nd[k] = e->nd[s];
        c.in_one[k] = e->one[s];
        c.in_seq[k] = conf->tseq[s] >= 0;
        e->one[t] &= e->one[s];
    }
    layer_tensor_name(e, i);
    bool output = output_of(conf, i) >= 0;
    /* dropout does nothing at inference: its output is its input,
     * unless a model output needs a node of its own */
    if (l->type == DL_LAYER_DROPOUT && !output) {
        dl_strlcpy(e->tname[t], c.in[0], TNAME_MAX);
        return DL_OK;
    }
    char own[TNAME_MAX];
    if (e->one[t] && output)
        c.out = sub_name(own, l->name, "unbatched");
    dl_status st = emit_layer(e, &c, err);
    if (st == DL_OK && c.out == own) {
        expand_to_batch(e, own, c.out_nd, l->name, "out", e->tname[t]);
        e->one[t] = false;
    }
    return st;
}

static dl_status emit_layers(exporter *e, dl_err *err)
{
    for (int i = 0; i < e->conf->nlayers; i++) {
        dl_status st = emit_layer_at(e, i, err);
        if (st != DL_OK)
            return st;
    }
    return DL_OK;
}

/* ---- the graph and the model ------------------------------------------------ */

static void emit_initializers(exporter *e)
{
    for (int i = 0; i < dl_model_tensor_count(e->m); i++) {
        const char *name;
        int ndim;
        const int64_t *shape;
        float *data;
        dl_model_tensor_at(e->m, i, &name, &ndim, &shape, &data);
        dl_sbuf t = {0};
        tensor_msg(&t, name, DT_FLOAT, ndim, shape, data,
                   (size_t)dl_shape_numel(ndim, shape) * sizeof(float));
        pb_msg(&e->graph, GRAPH_INITIALIZER, &t);
        dl_sbuf_free(&t);
    }
}

/* A sequence's time axis: "time" when the model has one sequence input,
 * "<input>_time" when several (their lengths differ). */
static const char *time_name(const exporter *e, int t, char *buf)
{
    int s = e->conf->tseq[t], nseq = 0;
    if (s < 0)
        return NULL;
    for (int k = 0; k < e->conf->ninputs; k++)
        nseq += e->conf->inputs[k].max_length > 0;
    if (nseq == 1)
        return "time";
    snprintf(buf, TNAME_MAX, "%s_time", e->conf->inputs[s].name);
    return buf;
}

static void emit_io(exporter *e)
{
    const dl_model_conf *conf = e->conf;
    char tb[TNAME_MAX];
    for (int k = 0; k < conf->ninputs; k++)
        value_info(&e->graph, GRAPH_INPUT, conf->inputs[k].name,
                   input_dtype(conf->inputs[k].dtype), e->nd[k], e->d[k], time_name(e, k, tb));
    for (int k = 0; k < conf->noutputs; k++) {
        int t = conf->ninputs + conf->outputs[k].from;
        value_info(&e->graph, GRAPH_OUTPUT, conf->outputs[k].name, DT_FLOAT, e->nd[t], e->d[t],
                   time_name(e, t, tb));
    }
}

static dl_status build_graph(exporter *e, dl_err *err)
{
    pb_str(&e->graph, GRAPH_NAME, e->conf->name);
    for (int k = 0; k < e->conf->ninputs; k++)
        emit_input(e, k);
    dl_status st = emit_layers(e, err);
    if (st != DL_OK)
        return st;
    emit_initializers(e);
    emit_io(e);
    if (e->graph.oom)
        return dl_err_set(err, DL_ERR_NOMEM, "ONNX graph");
    if (e->graph.len > PB_MAX)
        return dl_err_set(err, DL_ERR_INVALID, "model '%s' takes %zu bytes as ONNX, past "
                          "protobuf's 2 GiB", e->conf->name, e->graph.len);
    return DL_OK;
}

static const char *loss_name(dl_loss l)
{
    switch (l) {
    case DL_LOSS_MSE:        return "mse";
    case DL_LOSS_BCE:        return "bce_with_logits";
    case DL_LOSS_CRF:        return "crf";
    case DL_LOSS_NEXT_TOKEN: return "next_token";
    default:                 return "softmax_cross_entropy";
    }
}

/* metadata "dlserve.model": {"name", "inputs": [{"name", "max_length",
 * "datatype", "tokenizer"}] (the sequence inputs; a text input's
 * tokenizer), "outputs": [{"name", "loss", "weight", "labels", "of"}]}:
 * what an import needs to train and evaluate as the model did. */
static void model_json(const dl_model_conf *conf, dl_sbuf *j)
{
    dl_sbuf_add(j, "{\"name\":", 8);
    dl_sbuf_json_string(j, conf->name);
    dl_sbuf_printf(j, ",\"inputs\":[");
    for (int k = 0, n = 0; k < conf->ninputs; k++) {
        const dl_input_conf *in = &conf->inputs[k];
        if (!in->max_length)
            continue;
        dl_sbuf_printf(j, "%s{\"name\":", n++ ? "," : "");
        dl_sbuf_json_string(j, in->name);
        dl_sbuf_printf(j, ",\"max_length\":%lld", (long long)in->max_length);
        if (in->tok.kind == DL_TOK_BYTES)
            dl_sbuf_printf(j, ",\"datatype\":\"BYTES\",\"tokenizer\":{\"type\":\"bytes\"}");
        else if (in->tok.kind == DL_TOK_WORDS) {   /* the vocabulary: its file's name */
            const char *slash = strrchr(in->tok.vocab, '/');
            dl_sbuf_printf(j, ",\"datatype\":\"BYTES\",\"tokenizer\":{\"type\":\"words\","
                           "\"vocab\":");
            dl_sbuf_json_string(j, slash ? slash + 1 : in->tok.vocab);
            dl_sbuf_printf(j, ",\"lowercase\":%s}", in->tok.lowercase ? "true" : "false");
        }
        dl_sbuf_putc(j, '}');
    }
    dl_sbuf_printf(j, "],\"outputs\":[");
    for (int k = 0; k < conf->noutputs; k++) {
        const dl_output_conf *o = &conf->outputs[k];
        dl_sbuf_printf(j, "%s{\"name\":", k ? "," : "");
        dl_sbuf_json_string(j, o->name);
        char w[DL_FLOAT_CHARS];
        dl_fmt_float(w, o->weight);
        dl_sbuf_printf(j, ",\"loss\":\"%s\",\"weight\":%s,\"labels\":[", loss_name(o->loss),
                       w);
        for (int q = 0; q < o->nlabels; q++) {
            if (q)
                dl_sbuf_putc(j, ',');
            dl_sbuf_json_string(j, o->labels[q]);
        }
        dl_sbuf_putc(j, ']');
        if (o->loss == DL_LOSS_NEXT_TOKEN) {
            dl_sbuf_printf(j, ",\"of\":");
            dl_sbuf_json_string(j, conf->inputs[o->of].name);
        }
        dl_sbuf_putc(j, '}');
    }
    dl_sbuf_printf(j, "]}");
}

/* The ModelProto's fields but the graph, which goes after them. */
static void model_head(const dl_model_conf *conf, dl_sbuf *mp)
{
    dl_sbuf opset = {0}, meta = {0}, j = {0};
    pb_int(mp, MODEL_IR_VERSION, ONNX_IR_VERSION);
    pb_str(mp, MODEL_PRODUCER_NAME, "dlserve");
    pb_str(mp, MODEL_PRODUCER_VERSION, DL_VERSION_STRING);
    pb_str(&opset, OPSET_DOMAIN, "");
    pb_int(&opset, OPSET_VERSION, ONNX_OPSET);
    pb_msg(mp, MODEL_OPSET_IMPORT, &opset);
    model_json(conf, &j);
    pb_str(&meta, ENTRY_KEY, "dlserve.model");
    pb_bytes(&meta, ENTRY_VALUE, j.s, j.len);
    if (j.oom)
        meta.oom = true;
    pb_msg(mp, MODEL_METADATA_PROPS, &meta);
    dl_sbuf_free(&opset);
    dl_sbuf_free(&meta);
    dl_sbuf_free(&j);
}

/* Head, then the graph field's key and length, then the graph itself,
 * written from its buffer without another copy. */
static dl_status write_model(exporter *e, const char *path, size_t *bytes, dl_err *err)
{
    dl_sbuf head = {0}, key = {0};
    model_head(e->conf, &head);
    pb_key(&key, MODEL_GRAPH, PB_LEN);
    pb_varint(&key, e->graph.len);
    dl_status st = head.oom || key.oom ? dl_err_set(err, DL_ERR_NOMEM, "ONNX model") : DL_OK;
    const void *parts[3] = { head.s, key.s, e->graph.s };
    size_t lens[3] = { head.len, key.len, e->graph.len };
    if (st == DL_OK)
        st = dl_file_write_atomic(path, parts, lens, 3, err);
    *bytes = lens[0] + lens[1] + lens[2];
    dl_sbuf_free(&head);
    dl_sbuf_free(&key);
    return st;
}

/* ---- loading ------------------------------------------------------------------ */

/* Whether version v of model_dir holds weights. */
static bool has_version(const char *model_dir, int64_t v)
{
    int64_t have[256];
    int n = dl_repo_versions(model_dir, true, have, 256);
    for (int k = 0; k < n; k++)
        if (have[k] == v)
            return true;
    return n == 256;    /* past the newest 256: dl_model_load will tell */
}

/* The model with the version's weights, checked against model.json. */
static dl_status load_model(const char *model_dir, int64_t *version, dl_backend **be,
                            dl_model_conf **conf, dl_model **m, dl_err *err)
{
    dl_status st = dl_model_conf_load(model_dir, conf, err);
    if (st != DL_OK)
        return st;
    int64_t v = *version > 0 ? *version : dl_repo_latest(model_dir);
    if (v <= 0)
        return dl_err_set(err, DL_ERR_INVALID, "%s: no trained version (train it first with "
                          "--train)", model_dir);
    if (!has_version(model_dir, v))
        return dl_err_set(err, DL_ERR_INVALID, "%s: no version %lld with weights (newest: %lld)",
                          model_dir, (long long)v, (long long)dl_repo_latest(model_dir));
    char path[4200];
    snprintf(path, sizeof(path), "%s/%lld/model.safetensors", model_dir, (long long)v);
    *version = v;
    dl_backend_params bp = { .threads = 1 };
    st = dl_backend_new("cpu", &bp, be, err);
    if (st == DL_OK)
        st = dl_model_new(*be, *conf, 1, m, err);
    if (st == DL_OK)
        st = dl_model_load(*m, path, err);
    return st;
}

static dl_status export_model(exporter *e, const char *path, dl_onnx_export_info *info,
                              dl_err *err)
{
    int nt = e->conf->ninputs + e->conf->nlayers;
    e->nd = calloc((size_t)nt, sizeof(*e->nd));
    e->d = calloc((size_t)nt, sizeof(*e->d));
    e->tname = calloc((size_t)nt, sizeof(*e->tname));
    e->one = calloc((size_t)nt, sizeof(*e->one));
    if (!e->nd || !e->d || !e->tname || !e->one)
        return dl_err_set(err, DL_ERR_NOMEM, "ONNX export");
    dl_status st = dl_model_conf_shapes(e->conf, e->nd, e->d, err);
    if (st == DL_OK)
        st = build_graph(e, err);
    if (st == DL_OK)
        st = write_model(e, path, &info->bytes, err);
    info->nodes = e->nnodes;
    info->initializers = dl_model_tensor_count(e->m);
    return st;
}

dl_status dl_onnx_export(const char *model_dir, int64_t version, const char *path,
                         dl_onnx_export_info *info, dl_err *err)
{
    dl_onnx_export_info scratch;
    info = info ? info : &scratch;
    memset(info, 0, sizeof(*info));
    dl_backend *be = NULL;
    dl_model_conf *conf = NULL;
    exporter e = {0};
    dl_status st = load_model(model_dir, &version, &be, &conf, &e.m, err);
    info->version = version;
    e.conf = conf;
    if (st == DL_OK)
        st = export_model(&e, path, info, err);
    free(e.nd);
    free(e.d);
    free(e.tname);
    free(e.one);
    dl_sbuf_free(&e.graph);
    dl_model_free(e.m);
    dl_model_conf_free(conf);
    dl_backend_free(be);
    return st;
}
