/* onnx_ops.c: one translation an ONNX operator: into engine layers (dense,
 * conv2d, batchnorm, ...), or folded when its inputs are constants (the
 * Shape/Gather/Unsqueeze/Concat/Cast chains that exporters write for
 * reshapes). The batch is axis 0 of every graph input; the operators that
 * xl_layout_follows lists also take it elsewhere (onnx_layout.c), the
 * others refuse that. Anything that would mix it into a sample, and any
 * attribute the engine cannot honour exactly, is refused naming the node. */
#define _POSIX_C_SOURCE 200809L
#include "onnx/translate.h"
#include "onnx/onnx_pb.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* ---- helpers ------------------------------------------------------------- */

tvalue *xl_arg(xl *x, const onnx_node *n, int k)
{
    return k < n->nin && n->in[k][0] ? xl_find(x, n->in[k]) : NULL;
}

int64_t xl_attr_i(const onnx_node *n, const char *name, int64_t dflt)
{
    const onnx_attr *a = onnx_attr_find(n, name);
    return a ? a->i : dflt;
}

float xl_attr_f(const onnx_node *n, const char *name, float dflt)
{
    const onnx_attr *a = onnx_attr_find(n, name);
    return a ? a->f : dflt;
}

/* The per-sample axis of ONNX axis a of a value of per-sample rank nd; -1
 * when it is the batch or out of range. */
static int ps_axis(int64_t a, int nd)
{
    int64_t r = a < 0 ? a + nd + 1 : a;
    return r >= 1 && r <= nd ? (int)(r - 1) : -1;
}

tvalue *xl_out0(xl *x, const onnx_node *n)
{
    return n->nout >= 1 ? xl_add(x, n->out[0]) : NULL;
}

dl_status xl_nomem(xl *x) { return dl_err_set(x->err, DL_ERR_NOMEM, "translation"); }

/* Node n's output holds its batch as `from` does (onnx_layout.c); st
 * passed through. */
static dl_status keep_layout(xl *x, const onnx_node *n, const tvalue *from, dl_status st)
{
    tvalue *o = st == DL_OK ? xl_find(x, n->out[0]) : NULL;
    if (o) {
        o->bax = from->bax;
        o->merge = from->merge;
        if (from->cf)           /* an element-wise layer of a channels-first view */
            o->cf = o->seq = true;
    }
    return st;
}

/* Emits a one-input layer of `type` (object l, may be NULL) on v. */
dl_status xl_unary(xl *x, const onnx_node *n, const char *type, json_t *l, tvalue *v,
                   int nd, const int64_t *d)
{
    char name[DL_NAME_MAX];
    xl_node_layer_name(x, n, NULL, name);
    if (!l)
        l = json_object();
    json_object_set_new(l, "type", json_string(type));
    tvalue *o = xl_out0(x, n);
    /* the batch sits as in the input, unless the caller moves it */
    return keep_layout(x, n, v, o ? xl_emit(x, l, name, &v->src, 1, o, nd, d) : xl_nomem(x));
}

/* A reshape of v to d[0..nd) under a name from n. A reshape of a reshape
 * layer's output reshapes that layer's input (nothing at all when it
 * has the shape asked for): what the recurrent operators' outputs go
 * through (onnx_seq.c) costs no copy. */
dl_status xl_reshape_to(xl *x, const onnx_node *n, tvalue *v, int nd, const int64_t *d)
{
    json_t *before = v->src ? xl_emitted(x, v->src, DL_LAYER_RESHAPE) : NULL;
    tvalue *orig = before ? xl_value_from(x, xl_input_of(before, 0)) : NULL, in;
    if (orig) {
        in = *orig;
        in.bax = v->bax;
        in.merge = v->merge;
        v = &in;
    }
    if (orig && nd == orig->nd && !memcmp(d, orig->d, (size_t)nd * sizeof(*d)))
        return keep_layout(x, n, v, xl_alias(x, n, v));
    json_t *shape = json_array();
    for (int k = 0; k < nd; k++)
        json_array_append_new(shape, json_integer(d[k]));
    return xl_unary(x, n, "reshape", json_pack("{s:o}", "shape", shape), v, nd, d);
}

/* An alias: the output is the input value itself. */
dl_status xl_alias(xl *x, const onnx_node *n, tvalue *v)
{
    tvalue copy = *v;
    tvalue *o = xl_out0(x, n);
    if (!o)
        return xl_nomem(x);
    const char *name = o->name;
    *o = copy;
    o->name = name;
    return DL_OK;
}

/* A constant operand as a `constant` layer: its shape per sample, as it
 * broadcasts against the tensor `like` (its 1 on the batch's axis dropped). */
static dl_status constant_layer(xl *x, const onnx_node *n, tvalue *c, const tvalue *like,
                                tvalue *out)
{
    const onnx_tensor *t = c->c;
    int64_t d[ONNX_MAX_DIMS];
    int nd = 0;
    if (!t->f || xl_const_dims(like, t, &nd, d))
        return xl_refuse(x, n, "operand '%s' is not a float constant that broadcasts over "
                         "the batch", c->name);
    /* against a sequence, leading 1s dropped: a constant of fewer dimensions
     * broadcasts over the positions (layer_seq.c), one of as many does not */
    while (like->seq && nd > 1 && d[0] == 1 && nd <= like->nd) {
        memmove(d, d + 1, (size_t)(nd - 1) * sizeof(*d));
        nd--;
    }
    if (nd > DL_MAX_DIMS)
        return xl_refuse(x, n, "constant '%s' has too many dimensions", c->name);
    char name[DL_NAME_MAX];
    xl_layer_name(x, c->name, name);
    json_t *shape = json_array();
    for (int k = 0; k < nd; k++)
        json_array_append_new(shape, json_integer(d[k]));
    dl_status st = xl_emit(x, json_pack("{s:s,s:o}", "type", "constant", "shape", shape), name,
                           NULL, 0, out, nd, d);
    if (st == DL_OK)
        json_object_set_new(json_array_get(x->layers, json_array_size(x->layers) - 1),
                            "inputs", json_array());
    return st ? st : xl_tensor(x, name, "value", nd, d, t->f, 0);
}

/* ---- constant folding ---------------------------------------------------- */

bool xl_all_const(xl *x, const onnx_node *n)
{
    for (int k = 0; k < n->nin; k++) {
        tvalue *v = xl_arg(x, n, k);
        if (!v || !v->c)
            return false;
    }
    return true;
}

dl_status xl_set_const(xl *x, const onnx_node *n, onnx_tensor *t)
{
    tvalue *o = t ? xl_out0(x, n) : NULL;
    if (!o)
        return xl_nomem(x);
    o->c = t;
    return DL_OK;
}

static bool has_batch(const onnx_tensor *t)
{
    for (int64_t k = 0; t->i && k < t->n; k++)
        if (xl_batch_k(t->i[k]))
            return true;
    return false;
}

/* Mul or Div of a symbolic batch multiple by a positive integer: B*k*q or
 * B*k/q (q dividing k, as the result must not depend on B); 0 when the
 * result is not such a multiple. */
static int64_t batch_arith(char op, int64_t p, int64_t q, bool p_batch)
{
    int64_t k = xl_batch_k(p_batch ? p : q), c = p_batch ? q : p;
    if (c < 1 || xl_batch_k(c) || (op != 'M' && !(op == 'D' && p_batch)))
        return 0;
    if (op == 'M')
        return !__builtin_mul_overflow(k, c, &k) && k < ONNX_BATCH_KMAX ? xl_batch_times(k) : 0;
    return k % c == 0 ? xl_batch_times(k / c) : 0;
}

/* Mul/Div of integer constants holding the batch size (the sizes of
 * PyTorch's attention: batch * heads, seq * batch). */
static dl_status fold_batch_arith(xl *x, const onnx_node *n, const onnx_tensor *a,
                                  const onnx_tensor *b)
{
    if (!a->i || !b->i || (n->op[0] != 'M' && n->op[0] != 'D'))
        return xl_refuse(x, n, "arithmetic on the batch size");
    const onnx_tensor *big = a->n >= b->n ? a : b;
    onnx_tensor *t = xl_const(x, false, big->ndim, big->dims);
    for (int64_t k = 0; t && k < t->n; k++) {
        int64_t p = a->i[a->n == 1 ? 0 : k], q = b->i[b->n == 1 ? 0 : k];
        bool pb = xl_batch_k(p) != 0, qb = xl_batch_k(q) != 0;
        bool over = !pb && !qb && n->op[0] == 'M' && __builtin_mul_overflow(p, q, &t->i[k]);
        if (!pb && !qb && n->op[0] == 'D')
            t->i[k] = q ? p / q : 0;   /* p is no batch value, so not INT64_MIN */
        else if (pb || qb)
            t->i[k] = batch_arith(n->op[0], p, q, pb);
        if (over || ((pb || qb) && !t->i[k]))
            return xl_refuse(x, n, "arithmetic on the batch size that is not a multiple of "
                             "it");
    }
    return xl_set_const(x, n, t);
}

static double cv(const onnx_tensor *t, int64_t k) { return t->f ? t->f[k] : (double)t->i[k]; }

/* Whether v converts to int64_t: false for NaN and beyond +-2^63. */
static bool fits_i64(double v) { return v >= -0x1p63 && v < 0x1p63; }

/* Elementwise Add/Sub/Mul/Div of constants: same shapes or one scalar. */
static dl_status fold_arith(xl *x, const onnx_node *n)
{
    const onnx_tensor *a = xl_arg(x, n, 0)->c, *b = xl_arg(x, n, 1)->c;
    if (a->n != b->n && a->n != 1 && b->n != 1)
        return xl_refuse(x, n, "constant operands of different shapes are not folded");
    if (has_batch(a) || has_batch(b))
        return fold_batch_arith(x, n, a, b);
    const onnx_tensor *big = a->n >= b->n ? a : b;
    onnx_tensor *t = xl_const(x, a->f || b->f, big->ndim, big->dims);
    char op = n->op[0];
    for (int64_t k = 0; t && k < t->n; k++) {
        double p = cv(a, a->n == 1 ? 0 : k), q = cv(b, b->n == 1 ? 0 : k);
        double r = op == 'A' ? p + q : op == 'S' ? p - q : op == 'M' ? p * q
                 : q != 0 ? p / q : 0;
        if (t->f)
            t->f[k] = (float)r;
        else if (fits_i64(r))
            t->i[k] = (int64_t)r;
        else
            return xl_refuse(x, n, "the integer result overflows int64");
    }
    return xl_set_const(x, n, t);
}

/* Gather of constants on axis 0: rows of the data (a position table read
 * at the positions folded from Range included). */
static dl_status fold_gather(xl *x, const onnx_node *n)
{
    const onnx_tensor *d = xl_arg(x, n, 0)->c, *ix = xl_arg(x, n, 1)->c;
    int64_t axis = xl_attr_i(n, "axis", 0);
    if (d->ndim < 1 || axis != 0 || !ix->i || ix->ndim + d->ndim - 1 > ONNX_MAX_DIMS)
        return xl_refuse(x, n, "only constants gathered on axis 0 with integer indices are "
                         "folded");
    int64_t od[ONNX_MAX_DIMS], row = 1;
    memcpy(od, ix->dims, (size_t)ix->ndim * sizeof(*od));
    for (int k = 1; k < d->ndim; k++) {
        od[ix->ndim + k - 1] = d->dims[k];
        row *= d->dims[k];
    }
    onnx_tensor *t = xl_const(x, d->f != NULL, ix->ndim + d->ndim - 1, od);
    for (int64_t k = 0; t && k < ix->n; k++) {
        int64_t i = ix->i[k] < 0 ? ix->i[k] + d->dims[0] : ix->i[k];
        if (i < 0 || i >= d->dims[0])
            return xl_has_seq(x)
                 ? xl_refuse(x, n, "index %lld is out of range (the time axis holds "
                             "max_length positions: import with --max-length %lld or less)",
                             (long long)ix->i[k], (long long)d->dims[0])
                 : xl_refuse(x, n, "index %lld is out of range", (long long)ix->i[k]);
        for (int64_t j = 0; j < row; j++)
            if (t->f)
                t->f[k * row + j] = d->f[i * row + j];
            else
                t->i[k * row + j] = d->i[i * row + j];
    }
    return t ? xl_set_const(x, n, t) : xl_nomem(x);
}

/* The axes of Squeeze/Unsqueeze/Reduce*: an attribute before opset 13
 * (ReduceMean: 18), the second input since. */
int xl_axes_of(xl *x, const onnx_node *n, int64_t *axes)
{
    const onnx_attr *a = onnx_attr_find(n, "axes");
    if (a) {
        for (int k = 0; k < a->nints && k < ONNX_MAX_DIMS; k++)
            axes[k] = a->ints[k];
        return a->nints <= ONNX_MAX_DIMS ? a->nints : -1;
    }
    tvalue *v = xl_arg(x, n, 1);
    if (!v)
        return 0;
    if (!v->c || !v->c->i || v->c->n > ONNX_MAX_DIMS)
        return -1;
    for (int k = 0; k < v->c->n; k++)
        axes[k] = v->c->i[k];
    return (int)v->c->n;
}

/* Unsqueeze/Squeeze/Identity/Cast of a constant: the same values, new
 * dims (or type). */
static dl_status fold_shape_op(xl *x, const onnx_node *n)
{
    const onnx_tensor *a = xl_arg(x, n, 0)->c;
    int64_t axes[ONNX_MAX_DIMS], d[ONNX_MAX_DIMS];
    int na = strcmp(n->op, "Unsqueeze") && strcmp(n->op, "Squeeze") ? 0
           : xl_axes_of(x, n, axes);
    int nd = 0;
    if (na < 0)
        return xl_refuse(x, n, "axes are not constant");
    if (!strcmp(n->op, "Unsqueeze")) {
        int r = a->ndim + na;
        if (r > ONNX_MAX_DIMS)
            return xl_refuse(x, n, "too many dimensions");
        for (int k = 0, s = 0; k < r; k++) {
            bool ins = false;
            for (int j = 0; j < na; j++)
                ins = ins || (axes[j] < 0 ? axes[j] + r : axes[j]) == k;
            d[nd++] = ins ? 1 : a->dims[s++];
        }
    } else if (!strcmp(n->op, "Squeeze")) {
        for (int k = 0; k < a->ndim; k++) {
            bool drop = na == 0 && a->dims[k] == 1;
            for (int j = 0; j < na; j++)
                drop = drop || (axes[j] < 0 ? axes[j] + a->ndim : axes[j]) == k;
            if (!drop)
                d[nd++] = a->dims[k];
        }
    } else {
        nd = a->ndim;
        memcpy(d, a->dims, sizeof(d));
    }
    bool to_f = a->f != NULL;
    if (!strcmp(n->op, "Cast")) {
        int64_t to = xl_attr_i(n, "to", DT_FLOAT);
        to_f = to == DT_FLOAT || to == DT_DOUBLE;
    }
    if (to_f && has_batch(a))
        return xl_refuse(x, n, "the batch size as a float is not folded");
    onnx_tensor *t = xl_const(x, to_f, nd, d);
    if (t && dl_shape_numel(nd, d) != a->n)
        return xl_refuse(x, n, "the element count changes");
    for (int64_t k = 0; t && k < t->n; k++)
        if (t->f)
            t->f[k] = (float)cv(a, k);
        else if (!a->f)
            t->i[k] = a->i[k];
        else if (fits_i64(a->f[k]))
            t->i[k] = (int64_t)a->f[k];
        else
            return xl_refuse(x, n, "%g does not fit an int64", (double)a->f[k]);
    return xl_set_const(x, n, t);
}

/* Concat of constants along their axis (a shape's pieces, or the gates
 * and directions of recurrent weights). */
static dl_status fold_concat(xl *x, const onnx_node *n)
{
    const onnx_tensor *c0 = xl_arg(x, n, 0)->c;
    int64_t ax = xl_attr_i(n, "axis", 0), d[ONNX_MAX_DIMS], outer = 1, inner = 1;
    ax = ax < 0 ? ax + c0->ndim : ax;
    if (ax < 0 || ax >= c0->ndim)
        return xl_refuse(x, n, "the axis is out of range");
    memcpy(d, c0->dims, sizeof(d));
    d[ax] = 0;
    bool f = false;
    for (int k = 0; k < n->nin; k++) {
        const onnx_tensor *c = xl_arg(x, n, k)->c;
        for (int a = 0; a < c0->ndim; a++)
            if (c->ndim != c0->ndim || (a != ax && c->dims[a] != c0->dims[a]))
                return xl_refuse(x, n, "constants of different shapes");
        d[ax] += c->dims[ax];
        f = f || c->f;
    }
    for (int a = 0; a < c0->ndim; a++)
        if (a < ax)
            outer *= d[a];
        else if (a > ax)
            inner *= d[a];
    onnx_tensor *t = xl_const(x, f, c0->ndim, d);
    int64_t at = 0;
    for (int64_t o = 0; t && o < outer; o++)
        for (int k = 0; k < n->nin; k++) {
            const onnx_tensor *c = xl_arg(x, n, k)->c;
            int64_t chunk = c->dims[ax] * inner;
            for (int64_t j = o * chunk; j < (o + 1) * chunk; j++, at++)
                if (f)
                    t->f[at] = (float)cv(c, j);
                else
                    t->i[at] = c->i[j];
        }
    return t ? xl_set_const(x, n, t) : xl_nomem(x);
}

static dl_status op_constant(xl *x, const onnx_node *n)
{
    const onnx_attr *a = onnx_attr_find(n, "value");
    if (a && a->t)
        return xl_set_const(x, n, a->t);
    int64_t one = 1;
    if ((a = onnx_attr_find(n, "value_float"))) {
        onnx_tensor *t = xl_const(x, true, 0, &one);
        if (t)
            t->f[0] = a->f;
        return xl_set_const(x, n, t);
    }
    if ((a = onnx_attr_find(n, "value_int"))) {
        onnx_tensor *t = xl_const(x, false, 0, &one);
        if (t)
            t->i[0] = a->i;
        return xl_set_const(x, n, t);
    }
    if ((a = onnx_attr_find(n, "value_ints"))) {
        int64_t len = a->nints;
        onnx_tensor *t = xl_const(x, false, 1, &len);
        if (t)
            memcpy(t->i, a->ints, (size_t)len * sizeof(int64_t));
        return xl_set_const(x, n, t);
    }
    return xl_refuse(x, n, "only value, value_float, value_int and value_ints are supported");
}

/* Shape of a per-sample tensor: its ONNX dims, the batch symbolic. */
static dl_status op_shape(xl *x, const onnx_node *n)
{
    tvalue *v = xl_arg(x, n, 0);
    int64_t o[ONNX_MAX_DIMS];
    int64_t r = v->c ? v->c->ndim : xl_onnx_dims(v, o);
    if (v->c)
        memcpy(o, v->c->dims, sizeof(o));
    int64_t lo = xl_attr_i(n, "start", 0), hi = xl_attr_i(n, "end", r);
    lo = lo < 0 ? lo + r : lo;
    hi = hi < 0 ? hi + r : hi > r ? r : hi;
    lo = lo < 0 ? 0 : lo;
    int64_t len = hi > lo ? hi - lo : 0;
    onnx_tensor *t = xl_const(x, false, 1, &len);
    for (int64_t k = 0; t && k < len; k++)
        t->i[k] = o[lo + k];
    return xl_set_const(x, n, t);
}

/* ---- layers with weights --------------------------------------------------- */

/* The float constant of input k, or NULL. */
const onnx_tensor *xl_weight(xl *x, const onnx_node *n, int k)
{
    tvalue *v = xl_arg(x, n, k);
    return v && v->c && v->c->f ? v->c : NULL;
}

/* dense from W[units, in] (scaled by alpha) and bias (beta * C). */
static dl_status dense(xl *x, const onnx_node *n, tvalue *a, const float *w, int64_t units,
                       int64_t in, const char *wname, const onnx_tensor *c, float alpha,
                       float beta)
{
    if (c && c->n != units && c->n != 1)
        return xl_refuse(x, n, "the bias does not broadcast over %lld units", (long long)units);
    char name[DL_NAME_MAX];
    xl_node_layer_name(x, n, wname, name);
    int64_t ws[2] = { units, in }, d[ONNX_MAX_DIMS];
    memcpy(d, a->d, sizeof(d));
    d[a->nd - 1] = units;
    tvalue *o = xl_out0(x, n);
    dl_status st = o ? xl_emit(x, json_pack("{s:s,s:I,s:b}", "type", "dense", "units",
                                           (json_int_t)units, "bias", c != NULL),
                               name, &a->src, 1, o, a->nd, d) : xl_nomem(x);
    st = keep_layout(x, n, a, st);   /* the batch is not on the last axis */
    float *sw = malloc((size_t)(units * in) * sizeof(float));
    if (!st && !sw)
        st = xl_nomem(x);
    for (int64_t k = 0; !st && k < units * in; k++)
        sw[k] = alpha * w[k];
    if (!st)
        st = xl_tensor(x, name, "weight", 2, ws, sw, 0);
    free(sw);
    if (st || !c)
        return st;
    float *b = malloc((size_t)units * sizeof(float));
    for (int64_t k = 0; b && k < units; k++)
        b[k] = beta * c->f[c->n == 1 ? 0 : k];
    st = b ? xl_tensor(x, name, "bias", 1, &units, b, 0) : xl_nomem(x);
    free(b);
    return st;
}

static dl_status op_gemm(xl *x, const onnx_node *n)
{
    tvalue *a = xl_arg(x, n, 0);
    const onnx_tensor *b = xl_weight(x, n, 1), *c = n->nin > 2 ? xl_weight(x, n, 2) : NULL;
    if (!a || a->c || xl_rank(a) != 2 || xl_axis(a, 1) < 0 || !b || b->ndim != 2 ||
        (n->nin > 2 && n->in[2][0] && !c))
        return xl_refuse(x, n, "needs a matrix whose rows hold the batch times a constant "
                         "matrix (and a constant bias)");
    if (xl_attr_i(n, "transA", 0))
        return xl_refuse(x, n, "transA=1 would move the batch axis");
    bool tb = xl_attr_i(n, "transB", 0) != 0;
    int64_t units = tb ? b->dims[0] : b->dims[1], in = tb ? b->dims[1] : b->dims[0];
    if (in != a->d[a->nd - 1])
        return xl_refuse(x, n, "the weight's shape does not fit the input");
    const float *w = b->f;
    float *wt = NULL;
    if (!tb) {
        if (!(wt = malloc((size_t)(units * in) * sizeof(float))))
            return xl_nomem(x);
        for (int64_t i = 0; i < in; i++)
            for (int64_t u = 0; u < units; u++)
                wt[u * in + i] = b->f[i * units + u];
        w = wt;
    }
    dl_status st = dense(x, n, a, w, units, in, b->name, c, xl_attr_f(n, "alpha", 1.0f),
                         xl_attr_f(n, "beta", 1.0f));
    free(wt);
    return st;
}

/* The Add that reads only node n's output and a constant, if any. */
static const onnx_node *bias_add(xl *x, const onnx_node *n, int64_t units)
{
    if (xl_uses(x, n->out[0]) != 1)
        return NULL;
    for (int i = 0; i < x->g->nnodes; i++) {
        const onnx_node *m = &x->g->nodes[i];
        if (strcmp(m->op, "Add") || m->nin != 2)
            continue;
        int k = !strcmp(m->in[0], n->out[0]) ? 1 : !strcmp(m->in[1], n->out[0]) ? 0 : -1;
        const onnx_tensor *c = k >= 0 ? xl_weight(x, m, k) : NULL;
        if (c && c->n == units && c->dims[c->ndim - 1] == units)
            return m;
    }
    return NULL;
}

static dl_status op_matmul(xl *x, const onnx_node *n)
{
    tvalue *a = xl_arg(x, n, 0), *bv = xl_arg(x, n, 1);
    const onnx_tensor *b = xl_weight(x, n, 1);
    if (a && bv && !a->c && !bv->c) {
        if (!xl_same_layout(a, bv) || a->bax >= xl_rank(a) - 2)
            return xl_refuse(x, n, "both tensors must hold the batch alike, on a leading "
                             "axis");
        int64_t d[ONNX_MAX_DIMS];
        memcpy(d, a->d, sizeof(d));
        d[a->nd - 1] = bv->d[bv->nd - 1];
        const char *srcs[2] = { a->src, bv->src };
        char name[DL_NAME_MAX];
        xl_node_layer_name(x, n, NULL, name);
        tvalue *o = xl_out0(x, n);
        return keep_layout(x, n, a, o ? xl_emit(x, json_pack("{s:s}", "type", "matmul"), name,
                                                srcs, 2, o, a->nd, d) : xl_nomem(x));
    }
    if (!a || a->c || !b || b->ndim != 2 || b->dims[0] != a->d[a->nd - 1] ||
        xl_axis(a, -1) < 0)
        return xl_refuse(x, n, "needs a per-sample tensor times a constant [K, N] matrix, "
                         "or two per-sample tensors");
    int64_t in = b->dims[0], units = b->dims[1];
    float *wt = malloc((size_t)(units * in) * sizeof(float));
    if (!wt)
        return xl_nomem(x);
    for (int64_t i = 0; i < in; i++)
        for (int64_t u = 0; u < units; u++)
            wt[u * in + i] = b->f[i * units + u];
    const onnx_node *add = bias_add(x, n, units);
    const onnx_tensor *c = NULL;
    if (add)
        c = xl_weight(x, add, strcmp(add->in[0], n->out[0]) ? 0 : 1);
    dl_status st = dense(x, n, a, wt, units, in, b->name, c, 1.0f, 1.0f);
    free(wt);
    if (st || !add)
        return st;
    tvalue *fused = xl_add(x, add->out[0]);
    if (!fused)
        return xl_nomem(x);
    const char *name = fused->name;
    *fused = *xl_find(x, n->out[0]);
    fused->name = name;
    fused->fused = true;
    return DL_OK;
}

/* kernel, stride, symmetric pads and dilation of a 1-D or 2-D window. */
typedef struct window {
    int     nd;
    int64_t k[2], s[2], p[2], dil[2];
} window;

static dl_status window_of(xl *x, const onnx_node *n, int nd, const int64_t *kdims, window *w)
{
    const onnx_attr *ks = onnx_attr_find(n, "kernel_shape"), *st = onnx_attr_find(n, "strides");
    const onnx_attr *pads = onnx_attr_find(n, "pads"), *dil = onnx_attr_find(n, "dilations");
    const onnx_attr *ap = onnx_attr_find(n, "auto_pad");
    if (ap && ap->s && strcmp(ap->s, "NOTSET") && strcmp(ap->s, "VALID"))
        return xl_refuse(x, n, "auto_pad %s is not supported (give explicit pads)", ap->s);
    if (xl_attr_i(n, "ceil_mode", 0))
        return xl_refuse(x, n, "ceil_mode=1 is not supported");
    w->nd = nd;
    for (int k = 0; k < nd; k++) {
        w->k[k] = ks && ks->nints == nd ? ks->ints[k] : kdims ? kdims[k] : 0;
        w->s[k] = st && st->nints == nd ? st->ints[k] : 1;
        w->dil[k] = dil && dil->nints == nd ? dil->ints[k] : 1;
        w->p[k] = pads && pads->nints == 2 * nd ? pads->ints[k] : 0;
        if (pads && pads->nints == 2 * nd && pads->ints[k] != pads->ints[k + nd])
            return xl_refuse(x, n, "asymmetric pads are not supported");
        if (w->k[k] < 1 || w->s[k] < 1 || w->p[k] < 0 || w->dil[k] < 1)
            return xl_refuse(x, n, "kernel, strides, pads or dilations are invalid");
    }
    return DL_OK;
}

static int64_t out_len(int64_t in, int64_t k, int64_t s, int64_t p, int64_t dil)
{
    return (in + 2 * p - dil * (k - 1) - 1) / s + 1;
}

static json_t *pair(const window *w, const int64_t *v)
{
    return w->nd == 1 ? json_integer(v[0]) : json_pack("[I,I]", v[0], v[1]);
}

static dl_status op_conv(xl *x, const onnx_node *n)
{
    tvalue *a = xl_arg(x, n, 0);
    const onnx_tensor *wt = xl_weight(x, n, 1), *b = n->nin > 2 ? xl_weight(x, n, 2) : NULL;
    if (!a || a->c || !wt || (a->nd != 2 && a->nd != 3) || wt->ndim != a->nd + 1)
        return xl_refuse(x, n, "needs a per-sample [C, L] or [C, H, W] tensor and constant "
                         "weights");
    window w;
    int sp = a->nd - 1;
    dl_status st = window_of(x, n, sp, wt->dims + 2, &w);
    int64_t groups = xl_attr_i(n, "group", 1);
    if (st)
        return st;
    if (groups < 1 || a->d[0] != wt->dims[1] * groups || wt->dims[0] % groups)
        return xl_refuse(x, n, "the weight's shape does not fit the input and groups");
    json_t *l = json_pack("{s:s,s:I,s:o,s:o,s:o,s:b}", "type", sp == 1 ? "conv1d" : "conv2d",
                          "filters", (json_int_t)wt->dims[0], "kernel_size", pair(&w, w.k),
                          "stride", pair(&w, w.s), "padding", pair(&w, w.p), "bias", b != NULL);
    if (groups != 1)
        json_object_set_new(l, "groups", json_integer(groups));
    if (w.dil[0] != 1 || (sp == 2 && w.dil[1] != 1))
        json_object_set_new(l, "dilation", pair(&w, w.dil));
    int64_t d[ONNX_MAX_DIMS] = { wt->dims[0] };
    for (int k = 0; k < sp; k++)
        d[k + 1] = out_len(a->d[k + 1], w.k[k], w.s[k], w.p[k], w.dil[k]);
    char name[DL_NAME_MAX];
    xl_node_layer_name(x, n, wt->name, name);
    tvalue *o = xl_out0(x, n);
    st = o ? xl_emit(x, l, name, &a->src, 1, o, a->nd, d) : xl_nomem(x);
    if (!st && a->cf)           /* over the sequence, channels last in the engine */
        o->cf = o->seq = true;
    if (!st)
        st = xl_tensor(x, name, "weight", wt->ndim, wt->dims, wt->f, 0);
    if (!st && b)
        st = xl_tensor(x, name, "bias", 1, &wt->dims[0], b->f, 0);
    return st;
}

static dl_status op_pool(xl *x, const onnx_node *n)
{
    tvalue *a = xl_arg(x, n, 0);
    bool max = !strcmp(n->op, "MaxPool");
    if (!a || a->c || (a->nd != 3 && !(a->nd == 2 && max)))
        return xl_refuse(x, n, "needs a per-sample [C, H, W] tensor (MaxPool also [C, L])");
    if (n->nout > 1 && n->out[1][0])
        return xl_refuse(x, n, "the indices output is not supported");
    window w;
    dl_status st = window_of(x, n, a->nd - 1, NULL, &w);
    if (st)
        return st;
    if (w.dil[0] != 1 || (w.nd == 2 && w.dil[1] != 1))
        return xl_refuse(x, n, "dilations are not supported");
    if (!max && (w.p[0] || (w.nd == 2 && w.p[1])))
        return xl_refuse(x, n, "AveragePool with pads is not supported");
    int64_t d[ONNX_MAX_DIMS] = { a->d[0] };
    for (int k = 0; k < w.nd; k++)
        d[k + 1] = out_len(a->d[k + 1], w.k[k], w.s[k], w.p[k], 1);
    json_t *l = json_pack("{s:o,s:o,s:o}", "kernel_size", pair(&w, w.k), "stride",
                          pair(&w, w.s), "padding", pair(&w, w.p));
    return xl_unary(x, n, w.nd == 1 ? "maxpool1d" : max ? "maxpool2d" : "avgpool2d", l, a,
                 a->nd, d);
}

static dl_status op_batchnorm(xl *x, const onnx_node *n)
{
    tvalue *a = xl_arg(x, n, 0);
    const onnx_tensor *p[4];
    for (int k = 0; k < 4; k++)
        p[k] = xl_weight(x, n, k + 1);
    if (!a || a->c || !p[0] || !p[1] || !p[2] || !p[3] || a->nd > 3)
        return xl_refuse(x, n, "needs a per-sample tensor and constant scale, bias, mean "
                         "and variance");
    if (xl_attr_i(n, "training_mode", 0) || (n->nout > 1 && n->out[1][0]))
        return xl_refuse(x, n, "training_mode is not supported (export in eval mode)");
    int64_t c = a->d[0];
    for (int k = 0; k < 4; k++)
        if (p[k]->n != c)
            return xl_refuse(x, n, "parameters do not have %lld channels", (long long)c);
    char name[DL_NAME_MAX];
    xl_node_layer_name(x, n, p[0]->name, name);
    json_t *l = json_pack("{s:s,s:f,s:f}", "type", "batchnorm", "eps",
                          (double)xl_attr_f(n, "epsilon", 1e-5f), "momentum",
                          1.0 - (double)xl_attr_f(n, "momentum", 0.9f));
    tvalue *o = xl_out0(x, n);
    dl_status st = o ? xl_emit(x, l, name, &a->src, 1, o, a->nd, a->d) : xl_nomem(x);
    static const char *const sfx[4] = { "weight", "bias", "running_mean", "running_var" };
    for (int k = 0; k < 4 && !st; k++)
        st = xl_tensor(x, name, sfx[k], 1, &c, p[k]->f, 0);
    return st;
}

static dl_status op_layernorm(xl *x, const onnx_node *n)
{
    tvalue *a = xl_arg(x, n, 0);
    const onnx_tensor *s = xl_weight(x, n, 1), *b = n->nin > 2 ? xl_weight(x, n, 2) : NULL;
    if (!a || a->c || !s || (n->nin > 2 && n->in[2][0] && !b))
        return xl_refuse(x, n, "needs a per-sample tensor and constant scale and bias");
    if (xl_axis(a, xl_attr_i(n, "axis", -1)) != a->nd - 1)
        return xl_refuse(x, n, "only the last axis is normalized by the engine");
    int64_t c = a->d[a->nd - 1];
    if (s->n != c || (b && b->n != c))
        return xl_refuse(x, n, "scale and bias must have %lld values", (long long)c);
    char name[DL_NAME_MAX];
    xl_node_layer_name(x, n, s->name, name);
    tvalue *o = xl_out0(x, n);
    dl_status st = o ? xl_emit(x, json_pack("{s:s,s:f}", "type", "layernorm", "eps",
                                           (double)xl_attr_f(n, "epsilon", 1e-5f)),
                               name, &a->src, 1, o, a->nd, a->d) : xl_nomem(x);
    st = keep_layout(x, n, a, st);
    if (!st)
        st = xl_tensor(x, name, "weight", 1, &c, s->f, 0);
    if (!st)
        st = xl_tensor(x, name, "bias", 1, &c, b ? b->f : NULL, 0);
    return st;
}

/* Element i of engine axis ax of d as node n's output: a slice and a
 * reshape dropping the axis, the batch where it was. Of a concat along
 * that axis, the element of the input holding it (the concat may then
 * go: PyTorch's h_n[-1] of stacked recurrent layers). */
static dl_status gather_at(xl *x, const onnx_node *n, tvalue *d, int ax, int64_t i)
{
    json_t *cat = d->src ? xl_emitted(x, d->src, DL_LAYER_CONCAT) : NULL;
    for (size_t k = 0; cat && json_integer_value(json_object_get(cat, "axis")) == ax &&
                       k < json_array_size(json_object_get(cat, "inputs")); k++) {
        tvalue *p = xl_value_from(x, xl_input_of(cat, k)), part;
        if (!p || p->nd != d->nd)
            break;
        if (i < p->d[ax]) {
            part = *p;
            part.bax = d->bax;
            part.merge = d->merge;
            return gather_at(x, n, &part, ax, i);
        }
        i -= p->d[ax];
    }
    int64_t sd[ONNX_MAX_DIMS], rd[ONNX_MAX_DIMS];
    memcpy(sd, d->d, sizeof(sd));
    sd[ax] = 1;
    int nr = 0;
    for (int k = 0; k < d->nd; k++)
        if (k != ax)
            rd[nr++] = d->d[k];
    tvalue tmp;
    dl_status st = xl_unary(x, n, "slice", json_pack("{s:i,s:I,s:I,s:i}", "axis", ax, "start",
                                                  (json_int_t)i, "end", (json_int_t)(i + 1),
                                                  "step", 1), d, d->nd, sd);
    if (st)
        return st;
    tmp = *xl_find(x, n->out[0]);
    x->nv--;
    /* the ONNX axis dropped: the batch moves down one when it lay after */
    int onnx_ax = d->merge || ax < d->bax ? ax : ax + 1;
    tmp.bax -= !d->merge && onnx_ax < d->bax;
    return xl_reshape_to(x, n, &tmp, nr, rd);
}

/* Gather: an embedding (a constant table, ids from a model input), a
 * constant index on a non-batch axis (slice + reshape), or folding. */
static dl_status op_gather(xl *x, const onnx_node *n)
{
    tvalue *d = xl_arg(x, n, 0), *ix = xl_arg(x, n, 1);
    if (!d || !ix)
        return xl_refuse(x, n, "an input is missing");
    if (d->c && ix->c)
        return fold_gather(x, n);
    if (d->c && d->c->f && d->c->ndim == 2 && !ix->c && ix->ids && xl_attr_i(n, "axis", 0) == 0) {
        char name[DL_NAME_MAX];
        xl_node_layer_name(x, n, d->c->name, name);
        int64_t od[ONNX_MAX_DIMS];
        memcpy(od, ix->d, sizeof(od));
        od[ix->nd] = d->c->dims[1];
        tvalue *o = xl_out0(x, n);
        dl_status st = o ? xl_emit(x, json_pack("{s:s,s:I,s:I}", "type", "embedding",
                                               "num_embeddings", (json_int_t)d->c->dims[0],
                                               "dim", (json_int_t)d->c->dims[1]),
                                   name, &ix->src, 1, o, ix->nd + 1, od) : xl_nomem(x);
        return st ? st : xl_tensor(x, name, "weight", 2, d->c->dims, d->c->f, 0);
    }
    int64_t axis = xl_attr_i(n, "axis", 0);
    int ax = d->c ? -1 : xl_axis(d, axis);
    if (ax < 0 || !ix->c || !ix->c->i || ix->c->ndim != 0)
        return xl_refuse(x, n, "only an embedding (a constant table read with a model "
                         "input's ids) or a constant scalar index on a non-batch axis");
    /* a sequence's position -1: for each sample alone, its last */
    if (d->seq && ax == 0)
        return ix->c->i[0] == -1 ? xl_seq_pool(x, n, d, DL_SEQ_POOL_LAST, false)
             : xl_refuse(x, n, "of a sequence's time axis only the last position (index -1) "
                         "is taken");
    int64_t i = ix->c->i[0] < 0 ? ix->c->i[0] + d->d[ax] : ix->c->i[0];
    if (i < 0 || i >= d->d[ax] || d->nd < 2)
        return xl_refuse(x, n, "the index is out of range or would leave no dimension");
    return gather_at(x, n, d, ax, i);
}

/* ---- shape operators ----------------------------------------------------- */

static dl_status op_flatten(xl *x, const onnx_node *n)
{
    tvalue *a = xl_arg(x, n, 0);
    if (a->c)
        return xl_refuse(x, n, "flattening a constant is not supported");
    int64_t r = xl_attr_i(n, "axis", 1);
    r = r < 0 ? r + a->nd + 1 : r;            /* in [0, rank] */
    if (r < 1 || r > a->nd + 1)
        return xl_refuse(x, n, "axis 0 would merge the batch into a sample");
    int ax = (int)r - 1;
    int64_t d[2] = { 1, 1 };
    for (int k = 0; k < a->nd; k++)
        d[k < ax ? 0 : 1] *= a->d[k];
    if (ax == 0)
        return xl_unary(x, n, "flatten", NULL, a, 1, &d[1]);
    return xl_reshape_to(x, n, a, 2, d);
}

/* ---- attention: what PyTorch writes for nn.MultiheadAttention --------------
 *
 * Self-attention exports as the packed in_proj (one dense layer, [T, 3E]),
 * then per head Slice -> Reshape [T, H, d] -> Transpose for each of q, k
 * and v, q, k or the scores scaled by constants, MatMul, a causal mask
 * added or not, Softmax, MatMul, Transpose and the Reshape back to
 * [T, E]. At that Reshape the chain is
 * matched on the layers already emitted and replaced by one sdpa layer
 * reading the projection; the layers it replaces are pruned unless read
 * elsewhere. Anything else (another mask, separate q, k and v
 * projections) stays as the layers it is. */

/* The layer emitted as name, of type t, or NULL. */
json_t *xl_emitted(xl *x, const char *name, dl_layer_type t)
{
    size_t i;
    json_t *l;
    json_array_foreach(x->layers, i, l) {
        const char *ln = json_string_value(json_object_get(l, "name"));
        const char *type = json_string_value(json_object_get(l, "type"));
        if (name && ln && !strcmp(ln, name))
            return type && !strcmp(type, dl_layer_type_name(t)) ? l : NULL;
    }
    return NULL;
}

const char *xl_input_of(json_t *l, size_t k)
{
    return l ? json_string_value(json_array_get(json_object_get(l, "inputs"), k)) : NULL;
}

static int64_t key_int(json_t *l, const char *key, int64_t dflt)
{
    json_t *v = json_object_get(l, key);
    return json_is_integer(v) ? json_integer_value(v) : dflt;
}

/* The per-sample value a layer's output is (its engine shape), or NULL. */
tvalue *xl_value_from(xl *x, const char *layer)
{
    for (int i = 0; layer && i < x->nv; i++)
        if (!x->v[i].c && x->v[i].src && !strcmp(x->v[i].src, layer))
            return &x->v[i];
    return NULL;
}

/* The tensor of a constant layer, or NULL. */
static const tensor_out *constant_of(xl *x, const char *layer)
{
    if (!xl_emitted(x, layer, DL_LAYER_CONSTANT))
        return NULL;
    char want[DL_NAME_MAX + 8];
    snprintf(want, sizeof(want), "%s.value", layer);
    for (int t = 0; t < x->nt; t++)
        if (!strcmp(x->t[t].name, want))
            return &x->t[t];
    return NULL;
}

/* The value of a one-element constant layer, or NAN. */
static double constant_value(xl *x, const char *layer)
{
    const tensor_out *c = constant_of(x, layer);
    int64_t n = 1;
    for (int k = 0; c && k < c->ndim; k++)
        n *= c->shape[k];
    return c && n == 1 ? c->data[0] : NAN;
}

/* Whether a constant layer is a causal mask over t positions ([t, t] or
 * [1, t, t]): 0 on and below the diagonal, -inf (or below -1e9: nothing
 * after the softmax) above it. */
static bool causal_mask(xl *x, const char *layer, int64_t t)
{
    const tensor_out *c = constant_of(x, layer);
    if (!c || c->ndim < 2 || c->ndim > 3 || (c->ndim == 3 && c->shape[0] != 1) ||
        c->shape[c->ndim - 2] != t || c->shape[c->ndim - 1] != t)
        return false;
    for (int64_t i = 0; i < t; i++)
        for (int64_t j = 0; j < t; j++)
            if (j <= i ? c->data[i * t + j] != 0.0f : !(c->data[i * t + j] <= -1e9f))
                return false;
    return true;
}

/* name, or the tensor it scales when it is a Div or Mul by a constant
 * scalar; *scale takes the factor. */
static const char *unscaled(xl *x, const char *name, double *scale)
{
    json_t *l = xl_emitted(x, name, DL_LAYER_DIV);
    double c = l ? constant_value(x, xl_input_of(l, 1)) : NAN;
    if (l && isfinite(c) && c != 0.0) {
        *scale /= c;
        return xl_input_of(l, 0);
    }
    if (!(l = xl_emitted(x, name, DL_LAYER_MUL)))
        return name;
    for (size_t k = 0; k < 2; k++)
        if (isfinite(c = constant_value(x, xl_input_of(l, k)))) {
            *scale *= c;
            return xl_input_of(l, 1 - k);
        }
    return name;
}

/* One head split of the projection: Transpose(perm) of Reshape [T, H, d]
 * of Slice (last axis, step 1) of src. */
typedef struct head_split {
    const char *src;
    int64_t start, t, h, d;
} head_split;

static bool head_split_of(xl *x, const char *name, const int64_t perm[3], head_split *hs)
{
    json_t *tr = xl_emitted(x, name, DL_LAYER_TRANSPOSE), *p = json_object_get(tr, "perm");
    for (size_t k = 0; k < 3; k++)
        if (!tr || json_array_size(p) != 3 ||
            json_integer_value(json_array_get(p, k)) != perm[k])
            return false;
    const char *rs = xl_input_of(tr, 0);
    json_t *sl = xl_emitted(x, xl_input_of(xl_emitted(x, rs, DL_LAYER_RESHAPE), 0), DL_LAYER_SLICE);
    const tvalue *shape = xl_value_from(x, rs), *from = xl_value_from(x, xl_input_of(sl, 0));
    if (!sl || !shape || shape->nd != 3 || !from || from->nd != 2 ||
        key_int(sl, "step", 1) != 1 || (key_int(sl, "axis", 0) != 1 &&
                                         key_int(sl, "axis", 0) != -1))
        return false;
    *hs = (head_split){ .src = xl_input_of(sl, 0), .start = key_int(sl, "start", 0),
                        .t = shape->d[0], .h = shape->d[1], .d = shape->d[2] };
    return hs->start >= 0 && from->d[0] == hs->t;
}

/* Whether Reshape(a) to [T, E] ends a self-attention over a packed
 * projection (above): its source, heads, scale and whether a causal mask
 * is added to the scores. */
static bool attention_of(xl *x, const tvalue *a, const tvalue *out, head_split *q,
                         double *scale, bool *causal)
{
    static const int64_t qv_perm[3] = { 1, 0, 2 }, k_perm[3] = { 1, 2, 0 };
    if (a->nd != 3 || out->nd != 2 || !a->src)
        return false;
    json_t *tr = xl_emitted(x, a->src, DL_LAYER_TRANSPOSE), *p = json_object_get(tr, "perm");
    json_t *pv = xl_emitted(x, xl_input_of(tr, 0), DL_LAYER_MATMUL);
    json_t *sm = xl_emitted(x, xl_input_of(pv, 0), DL_LAYER_SOFTMAX);
    const char *scores = xl_input_of(sm, 0);
    json_t *add = xl_emitted(x, scores, DL_LAYER_ADD);
    *causal = false;
    for (size_t i = 0; add && i < 2 && !*causal; i++)
        if ((*causal = causal_mask(x, xl_input_of(add, i), a->d[0])))
            scores = xl_input_of(add, 1 - i);
    *scale = 1.0;
    json_t *qk = xl_emitted(x, unscaled(x, scores, scale), DL_LAYER_MATMUL);
    int64_t axis = key_int(sm, "axis", -1);
    if (!qk || (axis != 2 && axis != -1) || json_array_size(p) != 3 ||
        json_integer_value(json_array_get(p, 0)) != 1 ||
        json_integer_value(json_array_get(p, 1)) != 0)
        return false;
    head_split k, v;
    if (!head_split_of(x, unscaled(x, xl_input_of(qk, 0), scale), qv_perm, q) ||
        !head_split_of(x, unscaled(x, xl_input_of(qk, 1), scale), k_perm, &k) ||
        !head_split_of(x, xl_input_of(pv, 1), qv_perm, &v))
        return false;
    int64_t e = q->h * q->d;
    const tvalue *from = xl_value_from(x, q->src);
    return *scale > 0.0 && isfinite(*scale) && !strcmp(q->src, k.src) &&
           !strcmp(q->src, v.src) && q->start == 0 && k.start == e && v.start == 2 * e &&
           from->d[1] == 3 * e && k.t == q->t && v.t == q->t && k.h == q->h && v.h == q->h &&
           k.d == q->d && v.d == q->d && out->d[0] == q->t && out->d[1] == e;
}

/* Emits the sdpa layer for Reshape node n (out: its engine shape). */
static dl_status emit_attention(xl *x, const onnx_node *n, const head_split *q, double scale,
                                bool causal, const tvalue *out)
{
    json_t *l = json_pack("{s:s,s:I}", "type", dl_layer_type_name(DL_LAYER_SDPA), "heads",
                          (json_int_t)q->h);
    if (l && causal)
        json_object_set_new(l, "causal", json_true());
    if (l && fabs(scale * sqrt((double)q->d) - 1.0) > 1e-6)
        json_object_set_new(l, "scale", json_real(scale));
    char name[DL_NAME_MAX];
    xl_node_layer_name(x, n, NULL, name);
    tvalue *o = xl_out0(x, n);
    return o && l ? xl_emit(x, l, name, &q->src, 1, o, out->nd, out->d) : xl_nomem(x);
}

/* The tensor "<layer>.<suffix>", or NULL. */
static tensor_out *tensor_of(xl *x, const char *layer, const char *suffix)
{
    size_t len = strlen(layer);
    for (int t = 0; t < x->nt; t++)
        if (!strncmp(x->t[t].name, layer, len) && x->t[t].name[len] == '.' &&
            !strcmp(x->t[t].name + len + 1, suffix))
            return &x->t[t];
    return NULL;
}

/* Renames tensor t "<layer>.<suffix>". */
static dl_status rename_tensor(xl *x, tensor_out *t, const char *layer, const char *suffix)
{
    size_t n = strlen(layer) + strlen(suffix) + 2;
    char *name = malloc(n);
    if (!name)
        return xl_nomem(x);
    snprintf(name, n, "%s.%s", layer, suffix);
    free(t->name);
    t->name = name;
    return DL_OK;
}

/* Whether layer l is a dense layer of `units` over inputs of `in`
 * features, its weight (and bias) there. */
static bool dense_of(xl *x, json_t *l, int64_t units, int64_t in)
{
    const char *name = json_string_value(json_object_get(l, "name"));
    tensor_out *w = l ? tensor_of(x, name, "weight") : NULL;
    return w && key_int(l, "units", 0) == units && w->ndim == 2 && w->shape[0] == units &&
           w->shape[1] == in && (!json_is_true(json_object_get(l, "bias")) ||
                                 tensor_of(x, name, "bias"));
}

/* The projection (q), the heads (s) and the projection back (o) as one
 * attention layer in o's place, under o's name. */
static dl_status fuse_one(xl *x, json_t *q, json_t *s, json_t *o, int64_t e)
{
    const char *qn = json_string_value(json_object_get(q, "name"));
    const char *on = json_string_value(json_object_get(o, "name"));
    bool qb = json_is_true(json_object_get(q, "bias"));
    bool ob = json_is_true(json_object_get(o, "bias"));
    static const char *const from[4] = { "weight", "bias", "weight", "bias" };
    static const char *const to[4] = { "in_proj_weight", "in_proj_bias", "out_proj.weight",
                                       "out_proj.bias" };
    dl_status st = DL_OK;
    for (int k = 0; k < 4 && st == DL_OK; k++) {
        tensor_out *t = tensor_of(x, k < 2 ? qn : on, from[k]);
        int64_t n = k == 1 ? 3 * e : e;
        if (t)
            st = rename_tensor(x, t, on, to[k]);
        else if ((k == 1 && ob) || (k == 3 && qb))   /* the bias one of them lacks: zeros */
            st = xl_tensor(x, on, to[k], 1, &n, NULL, 0);
    }
    if (st)
        return st;
    json_object_set_new(o, "type", json_string(dl_layer_type_name(DL_LAYER_ATTENTION)));
    json_object_del(o, "units");
    json_object_set(o, "heads", json_object_get(s, "heads"));
    if (json_is_true(json_object_get(s, "causal")))
        json_object_set_new(o, "causal", json_true());
    json_object_set_new(o, "bias", json_boolean(qb || ob));
    json_object_set(o, "inputs", json_object_get(q, "inputs"));
    return DL_OK;
}

dl_status xl_fuse_attention(xl *x, json_t *outs)
{
    for (size_t i = 0; i < json_array_size(x->layers); i++) {
        json_t *s = json_array_get(x->layers, i), *q = NULL, *o = NULL, *l;
        const char *sn = json_string_value(json_object_get(s, "name"));
        if (!xl_emitted(x, sn, DL_LAYER_SDPA) || json_object_get(s, "scale"))
            continue;
        const char *qn = xl_input_of(s, 0);
        size_t j;
        json_array_foreach(x->layers, j, l) {
            if (j < i && !strcmp(json_string_value(json_object_get(l, "name")), qn))
                q = l;
            if (j > i && !strcmp(xl_input_of(l, 0) ? xl_input_of(l, 0) : "", sn) && !o)
                o = l;
        }
        const tvalue *sv = xl_value_from(x, sn);
        int64_t e = sv && sv->nd == 2 ? sv->d[1] : 0;
        if (!q || !o || e < 1 || json_array_size(json_object_get(q, "inputs")) != 1 ||
            json_array_size(json_object_get(o, "inputs")) != 1 ||
            xl_readers(x, outs, qn) != 1 || xl_readers(x, outs, sn) != 1 ||
            !xl_emitted(x, qn, DL_LAYER_DENSE) || !xl_emitted(x, json_string_value(
                json_object_get(o, "name")), DL_LAYER_DENSE) ||
            !dense_of(x, q, 3 * e, e) || !dense_of(x, o, e, e))
            continue;
        dl_status st = fuse_one(x, q, s, o, e);
        if (st)
            return st;
        json_array_remove(x->layers, i);        /* s, then q before it */
        for (j = 0; j < i; j++)
            if (json_array_get(x->layers, j) == q) {
                json_array_remove(x->layers, j);
                break;
            }
        i = 0;
    }
    return DL_OK;
}

/* Reshape: per sample when the batch keeps its place in row-major order
 * (onnx_layout.c); the output may hold it on another axis. */
static dl_status op_reshape(xl *x, const onnx_node *n)
{
    tvalue *a = xl_arg(x, n, 0), *s = xl_arg(x, n, 1), out;
    if (!s || !s->c || !s->c->i || s->c->ndim != 1 || s->c->n < 1 ||
        s->c->n > ONNX_MAX_DIMS)
        return xl_refuse(x, n, "the target shape must be a constant of 1 to %d dimensions "
                         "(after folding)", ONNX_MAX_DIMS);
    if (a->c)
        return xl_refuse(x, n, "reshaping a constant is not supported");
    const char *why = xl_reshape_layout(a, s->c->i, (int)s->c->n,
                                        xl_attr_i(n, "allowzero", 0) != 0, &out);
    if (why)
        return xl_refuse(x, n, "%s", why);
    if (out.nd < 1 || out.nd > DL_MAX_DIMS)
        return xl_refuse(x, n, "a sample of %d dimensions (the engine holds 1 to %d)", out.nd,
                         DL_MAX_DIMS);
    bool same = out.nd == a->nd && !memcmp(out.d, a->d, (size_t)a->nd * sizeof(*a->d));
    head_split q;
    double scale;
    bool causal;
    if (attention_of(x, a, &out, &q, &scale, &causal))
        return keep_layout(x, n, &out, emit_attention(x, n, &q, scale, causal, &out));
    dl_status st = same ? xl_alias(x, n, a) : xl_reshape_to(x, n, a, out.nd, out.d);
    return keep_layout(x, n, &out, st);
}

/* Squeeze and Unsqueeze of a tensor: a reshape to its ONNX dimensions
 * without (with) the 1s, wherever the batch is. */
static dl_status op_squeeze(xl *x, const onnx_node *n)
{
    tvalue *a = xl_arg(x, n, 0), out;
    if (a->c)
        return fold_shape_op(x, n);
    int64_t axes[ONNX_MAX_DIMS], o[ONNX_MAX_DIMS], t[ONNX_MAX_DIMS];
    int na = xl_axes_of(x, n, axes), r = xl_onnx_dims(a, o), nt = 0;
    bool un = !strcmp(n->op, "Unsqueeze");
    int rr = un ? r + na : r;
    if (na <= 0 || rr > ONNX_MAX_DIMS)
        return xl_refuse(x, n, "needs constant axes");
    bool hit[ONNX_MAX_DIMS] = { false };
    for (int k = 0; k < na; k++) {
        int64_t ax = axes[k] < 0 ? axes[k] + rr : axes[k];
        if (ax < 0 || ax >= rr || (!un && xl_batch_k(o[ax])))
            return xl_refuse(x, n, "axis %lld is the batch or out of range", (long long)axes[k]);
        hit[ax] = true;
    }
    for (int k = 0, from = 0; k < rr; k++) {
        if (un)
            t[nt++] = hit[k] ? 1 : o[from++];
        else if (!hit[k])
            t[nt++] = o[k];
        else if (o[k] != 1)
            return xl_refuse(x, n, "squeezes an axis of size %lld", (long long)o[k]);
    }
    const char *why = xl_reshape_layout(a, t, nt, true, &out);
    if (why)
        return xl_refuse(x, n, "%s", why);
    if (out.nd < 1 || out.nd > DL_MAX_DIMS)
        return xl_refuse(x, n, "a sample of %d dimensions (the engine holds 1 to %d)", out.nd,
                         DL_MAX_DIMS);
    bool same = out.nd == a->nd && !memcmp(out.d, a->d, (size_t)a->nd * sizeof(*a->d));
    dl_status st = same ? xl_alias(x, n, a) : xl_reshape_to(x, n, a, out.nd, out.d);
    return keep_layout(x, n, &out, st);
}

/* The transpose of a constant, folded. */
static dl_status fold_transpose(xl *x, const onnx_node *n, const onnx_tensor *a,
                                const int64_t *perm)
{
    int64_t d[ONNX_MAX_DIMS], stride[ONNX_MAX_DIMS], idx[ONNX_MAX_DIMS] = { 0 }, s = 1;
    for (int k = a->ndim - 1; k >= 0; k--) {
        stride[k] = s;
        s *= a->dims[k];
    }
    for (int k = 0; k < a->ndim; k++)
        d[k] = a->dims[perm[k]];
    onnx_tensor *t = xl_const(x, a->f != NULL, a->ndim, d);
    if (t)              /* a weight transposed keeps its name (the layer's) */
        t->name = a->name;
    for (int64_t e = 0; t && e < t->n; e++) {
        int64_t from = 0;
        for (int k = 0; k < a->ndim; k++)
            from += idx[k] * stride[perm[k]];
        if (t->f)
            t->f[e] = a->f[from];
        else
            t->i[e] = a->i[from];
        for (int k = a->ndim - 1; k >= 0 && ++idx[k] == d[k]; k--)
            idx[k] = 0;
    }
    return xl_set_const(x, n, t);
}

/* Transpose: the batch goes where perm sends its axis; the engine
 * transposes the other axes, when their order changes. */
static dl_status op_transpose(xl *x, const onnx_node *n)
{
    tvalue *a = xl_arg(x, n, 0), out;
    const onnx_attr *p = onnx_attr_find(n, "perm");
    int r = a->c ? a->c->ndim : xl_rank(a);
    int64_t perm[ONNX_MAX_DIMS], eperm[ONNX_MAX_DIMS];
    if (r > ONNX_MAX_DIMS || (p && p->nints != r))
        return xl_refuse(x, n, "perm does not list every axis");
    for (int k = 0; k < r; k++)
        perm[k] = p ? p->ints[k] : r - 1 - k;
    bool seen[ONNX_MAX_DIMS] = { false };
    for (int k = 0; k < r; k++) {
        if (perm[k] < 0 || perm[k] >= r || seen[perm[k]])
            return xl_refuse(x, n, "perm is not a permutation");
        seen[perm[k]] = true;
    }
    if (a->c)
        return fold_transpose(x, n, a->c, perm);
    bool done;
    dl_status vst = xl_cf_view(x, n, a, perm, r, &done);
    if (vst || done)
        return vst;
    const char *why = xl_transpose_layout(a, perm, r, &out, eperm);
    if (why)
        return xl_refuse(x, n, "%s", why);
    bool ident = true;
    json_t *jp = json_array();
    for (int k = 0; k < out.nd; k++) {
        ident = ident && eperm[k] == k;
        json_array_append_new(jp, json_integer(eperm[k]));
    }
    if (ident)
        json_decref(jp);
    dl_status st = ident ? xl_alias(x, n, a)
                         : xl_unary(x, n, "transpose", json_pack("{s:o}", "perm", jp), a, out.nd,
                                 out.d);
    return keep_layout(x, n, &out, st);
}

/* The length of Python's x[start:end:step] on an axis of n (step > 0). */
static int64_t slice_len(int64_t n, int64_t *start, int64_t *end, int64_t step)
{
    int64_t a = *start < 0 ? *start + n : *start, b = *end < 0 ? *end + n : *end;
    a = a < 0 ? 0 : a > n ? n : a;
    b = b < 0 ? 0 : b > n ? n : b;
    *start = a;
    *end = b;
    return b > a ? (b - a + step - 1) / step : 0;
}

/* A constant integer list of Slice (input k since opset 10, else the
 * attribute); n_out its length, -1 when absent, -2 when not constant. */
static int slice_list(xl *x, const onnx_node *n, int k, const char *attr, int64_t *out)
{
    const onnx_attr *a = onnx_attr_find(n, attr);
    tvalue *v = x->g->opset >= 10 ? xl_arg(x, n, k) : NULL;
    const int64_t *src = a ? a->ints : v && v->c && v->c->i ? v->c->i : NULL;
    int64_t len = a ? a->nints : v && v->c && v->c->i ? v->c->n : 0;
    if (!a && !v)
        return -1;
    if (!src || len > ONNX_MAX_DIMS)
        return -2;
    memcpy(out, src, (size_t)len * sizeof(*out));
    return (int)len;
}

/* Slice of a per-sample tensor: one slice layer an axis; the batch axis
 * must be kept whole. */
/* Slice of a constant (a position table cut to the time axis' length),
 * positive steps: lo[a], step[a] and len[a] each axis. */
static dl_status fold_slice(xl *x, const onnx_node *n, const onnx_tensor *a, const int64_t *lo,
                            const int64_t *step, const int64_t *len)
{
    onnx_tensor *t = xl_const(x, a->f != NULL, a->ndim, len);
    int64_t idx[ONNX_MAX_DIMS] = { 0 };
    for (int64_t e = 0; t && e < t->n; e++) {
        int64_t from = 0;
        for (int k = 0; k < a->ndim; k++)
            from = from * a->dims[k] + lo[k] + idx[k] * step[k];
        if (t->f)
            t->f[e] = a->f[from];
        else
            t->i[e] = a->i[from];
        for (int k = a->ndim - 1; k >= 0 && ++idx[k] == len[k]; k--)
            idx[k] = 0;
    }
    return t ? xl_set_const(x, n, t) : xl_nomem(x);
}

static dl_status op_slice_const(xl *x, const onnx_node *n, const onnx_tensor *a, int ns,
                                const int64_t *st, const int64_t *en, int na, const int64_t *ax,
                                int np, const int64_t *sp)
{
    int64_t lo[ONNX_MAX_DIMS], step[ONNX_MAX_DIMS], len[ONNX_MAX_DIMS];
    for (int k = 0; k < a->ndim; k++) {
        lo[k] = 0;
        step[k] = 1;
        len[k] = a->dims[k];
    }
    for (int k = 0; k < ns; k++) {
        int64_t axis = na >= 0 ? ax[k] : k, s0 = st[k], e0 = en[k];
        axis = axis < 0 ? axis + a->ndim : axis;
        if (axis < 0 || axis >= a->ndim || (np >= 0 && sp[k] < 1) || has_batch(a))
            return xl_refuse(x, n, "only constants sliced with positive steps are folded");
        step[axis] = np >= 0 ? sp[k] : 1;
        len[axis] = slice_len(a->dims[axis], &s0, &e0, step[axis]);
        lo[axis] = s0;
    }
    return fold_slice(x, n, a, lo, step, len);
}

static dl_status op_slice(xl *x, const onnx_node *n)
{
    tvalue *a = xl_arg(x, n, 0);
    int64_t st[ONNX_MAX_DIMS], en[ONNX_MAX_DIMS], ax[ONNX_MAX_DIMS], sp[ONNX_MAX_DIMS];
    int ns = slice_list(x, n, 1, "starts", st), ne = slice_list(x, n, 2, "ends", en);
    int na = slice_list(x, n, 3, "axes", ax), np = slice_list(x, n, 4, "steps", sp);
    if (ns < 1 || ne != ns || na == -2 || np == -2 || (na >= 0 && na != ns) ||
        (np >= 0 && np != ns))
        return xl_refuse(x, n, "needs constant starts, ends, axes and steps of one length");
    if (a->c)
        return op_slice_const(x, n, a->c, ns, st, en, na, ax, np, sp);
    tvalue cur = *a;
    for (int k = 0; k < ns; k++) {
        int64_t axis = na >= 0 ? ax[k] : k, step = np >= 0 ? sp[k] : 1;
        int pa = xl_axis(&cur, axis);
        if (step < 1)
            return xl_refuse(x, n, "negative or zero steps are not supported");
        if ((axis == cur.bax || axis == cur.bax - (int64_t)xl_rank(&cur)) &&
            (st[k] == 0 || st[k] <= -INT32_MAX) && en[k] >= INT32_MAX && step == 1)
            continue;   /* the whole batch */
        if (pa < 0)
            return xl_refuse(x, n, "slicing the batch axis is not supported");
        int64_t d[ONNX_MAX_DIMS], s0 = st[k], e0 = en[k];
        memcpy(d, cur.d, sizeof(d));
        d[pa] = slice_len(cur.d[pa], &s0, &e0, step);
        if (d[pa] == 0)
            return xl_refuse(x, n, "the slice keeps nothing");
        dl_status r = xl_unary(x, n, "slice", json_pack("{s:i,s:I,s:I,s:I}", "axis", pa,
                                                     "start", (json_int_t)s0, "end",
                                                     (json_int_t)e0, "step", (json_int_t)step),
                            &cur, cur.nd, d);
        if (r)
            return r;
        cur = *xl_find(x, n->out[0]);   /* the layout kept by unary */
        x->nv--;
    }
    return xl_alias(x, n, &cur);
}

#define ONNX_MAX_SPLIT 64   /* outputs of one Split */

/* Split along one axis (sizes from input 1, the `split` attribute before
 * opset 13, or equal parts): a slice layer an output read (a constant:
 * folded). */
static dl_status op_split(xl *x, const onnx_node *n)
{
    tvalue *a = xl_arg(x, n, 0), *sv = n->nin > 1 && n->in[1][0] ? xl_arg(x, n, 1) : NULL;
    const onnx_attr *sa = onnx_attr_find(n, "split");
    int64_t axis = xl_attr_i(n, "axis", 0), size[ONNX_MAX_SPLIT], at = 0;
    int r = a->c ? a->c->ndim : xl_rank(a), pa = a->c ? -1 : xl_axis(a, axis);
    int64_t ax = axis < 0 ? axis + r : axis;
    if (n->nout < 1 || n->nout > ONNX_MAX_SPLIT || ax < 0 || ax >= r || (sv && !sv->c) ||
        (sv && (!sv->c->i || sv->c->n != n->nout)) || (sa && sa->nints != n->nout))
        return xl_refuse(x, n, "needs an axis, constant split sizes, one an output, and at "
                         "most %d outputs", ONNX_MAX_SPLIT);
    if (!a->c && pa < 0)
        return xl_refuse(x, n, "splitting the batch axis is not supported");
    int64_t whole = a->c ? a->c->dims[ax] : a->d[pa];
    for (int k = 0; k < n->nout; k++) {
        size[k] = sv ? sv->c->i[k] : sa ? sa->ints[k]
                : (whole + n->nout - 1) / n->nout;       /* the last part may be smaller */
        if (!sv && !sa && k == n->nout - 1)
            size[k] = whole - at;
        if (size[k] < 1 || at + size[k] > whole)
            return xl_refuse(x, n, "split sizes that do not fit the axis of %lld",
                             (long long)whole);
        at += size[k];
    }
    if (at != whole)
        return xl_refuse(x, n, "split sizes that do not add up to the axis of %lld",
                         (long long)whole);
    at = 0;
    for (int k = 0; k < n->nout; k++, at += size[k - 1]) {
        onnx_node one = *n;
        one.nout = 1;
        one.out = &n->out[k];
        if (!n->out[k][0] || (!a->c && !xl_uses(x, n->out[k])))
            continue;
        dl_status st;
        if (a->c) {
            int64_t lo[ONNX_MAX_DIMS] = { 0 }, step[ONNX_MAX_DIMS], len[ONNX_MAX_DIMS];
            for (int j = 0; j < r; j++) {
                step[j] = 1;
                len[j] = a->c->dims[j];
            }
            lo[ax] = at;
            len[ax] = size[k];
            st = fold_slice(x, &one, a->c, lo, step, len);
        } else {
            int64_t d[ONNX_MAX_DIMS];
            memcpy(d, a->d, sizeof(d));
            d[pa] = size[k];
            st = xl_unary(x, &one, "slice", json_pack("{s:i,s:I,s:I}", "axis", pa, "start",
                                                   (json_int_t)at, "end",
                                                   (json_int_t)(at + size[k])),
                          a, a->nd, d);
        }
        if (st)
            return st;
    }
    return DL_OK;
}

/* ---- element-wise and multi-input -------------------------------------- */

/* The tensor whose rows 0, 1, ... layers srcs[0..n) are, in order and
 * all of them (gather_at's slice and reshape of each), or NULL: PyTorch's
 * cat([h[-2], h[-1]], 1) of a bidirectional layer's last states. */
static tvalue *rows_whole(xl *x, const char *const *srcs, int n)
{
    const char *from = NULL;
    for (int k = 0; k < n; k++) {
        json_t *sl = xl_emitted(x, xl_input_of(xl_emitted(x, srcs[k], DL_LAYER_RESHAPE), 0),
                                DL_LAYER_SLICE);
        const char *in = xl_input_of(sl, 0);
        if (!sl || !in || (from && strcmp(in, from)) ||
            json_integer_value(json_object_get(sl, "axis")) != 0 ||
            json_integer_value(json_object_get(sl, "start")) != k ||
            json_integer_value(json_object_get(sl, "end")) != k + 1)
            return NULL;
        from = in;
    }
    tvalue *v = xl_value_from(x, from);
    return v && v->nd >= 2 && v->d[0] == n ? v : NULL;
}

static dl_status op_concat(xl *x, const onnx_node *n)
{
    if (xl_all_const(x, n))
        return fold_concat(x, n);
    tvalue *v[DL_LAYER_MAX_IN], tmp[DL_LAYER_MAX_IN];
    if (n->nin < 1 || n->nin > DL_LAYER_MAX_IN)
        return xl_refuse(x, n, "takes 1 to %d inputs here", DL_LAYER_MAX_IN);
    tvalue like = { .nd = 0 };   /* the tensor operand (the constants' shapes follow it) */
    for (int k = 0; k < n->nin; k++)
        if ((v[k] = xl_arg(x, n, k)) && !v[k]->c)
            like = *v[k];
    for (int k = 0; k < n->nin; k++)
        if (v[k] && !v[k]->c && !xl_same_layout(v[k], &like))
            return xl_refuse(x, n, "the tensors must hold the batch alike");
    like.seq = false;            /* constants keep their rank (constant_layer) */
    int rank = like.nd;
    const char *srcs[DL_LAYER_MAX_IN];
    for (int k = 0; k < n->nin; k++) {
        if (!v[k])
            return xl_refuse(x, n, "an input is missing");
        dl_status st = v[k]->c ? constant_layer(x, n, v[k], &like, &tmp[k]) : DL_OK;
        if (st)
            return st;
        v[k] = v[k]->c ? &tmp[k] : v[k];
        srcs[k] = v[k]->src;
    }
    int ax = xl_axis(&like, xl_attr_i(n, "axis", 0));
    if (ax < 0)
        return xl_refuse(x, n, "concatenating along the batch axis is not supported");
    tvalue *whole = ax == 0 ? rows_whole(x, srcs, n->nin) : NULL;
    if (whole) {            /* the rows of one tensor in order: that tensor, flattened */
        int64_t d[ONNX_MAX_DIMS];
        memcpy(d, whole->d + 1, sizeof(d) - sizeof(*d));
        d[0] *= whole->d[0];
        tvalue w = *whole;
        w.bax = like.bax;
        w.merge = like.merge;
        return keep_layout(x, n, &like, xl_reshape_to(x, n, &w, whole->nd - 1, d));
    }
    int64_t d[ONNX_MAX_DIMS];
    memcpy(d, v[0]->d, sizeof(d));
    for (int k = 1; k < n->nin; k++)
        d[ax] += v[k]->d[ax];
    if (n->nin == 1)
        return xl_alias(x, n, v[0]);
    char name[DL_NAME_MAX];
    xl_node_layer_name(x, n, NULL, name);
    tvalue *o = xl_out0(x, n);
    return keep_layout(x, n, &like, o ? xl_emit(x, json_pack("{s:s,s:i}", "type", "concat",
                                                             "axis", ax), name, srcs, n->nin,
                                                o, rank, d) : xl_nomem(x));
}

/* Whether b is a sigmoid layer's output of the tensor a: Mul(a, b) is then
 * a SiLU (x * sigmoid(x), as exporters write it). */
static bool sigmoid_of(xl *x, const tvalue *a, const tvalue *b)
{
    if (a->c || b->c || !a->src || !b->src)
        return false;
    size_t i;
    json_t *l;
    json_array_foreach(x->layers, i, l) {
        const char *name = json_string_value(json_object_get(l, "name"));
        if (!name || strcmp(name, b->src) != 0)
            continue;
        const char *type = json_string_value(json_object_get(l, "type"));
        const char *in = json_string_value(json_array_get(json_object_get(l, "inputs"), 0));
        return type && in && !strcmp(type, dl_layer_type_name(DL_LAYER_SIGMOID)) &&
               !strcmp(in, a->src) && xl_same_layout(a, b);
    }
    return false;
}

/* Whether Mul(a, b) ends GELU as exporters write it (erf form):
 * 0.5 * (v * (1 + erf(v / sqrt(2)))), a the constant 0.5 and b the
 * inner product, either way round; the tensor v, else NULL. */
static tvalue *gelu_of(xl *x, const tvalue *a, const tvalue *b)
{
    if (!a->c || !a->c->f || a->c->n != 1 || a->c->f[0] != 0.5f || b->c || !b->src)
        return NULL;
    json_t *mul = xl_emitted(x, b->src, DL_LAYER_MUL);
    for (size_t k = 0; mul && k < 2; k++) {
        const char *v = xl_input_of(mul, k);
        json_t *add = xl_emitted(x, xl_input_of(mul, 1 - k), DL_LAYER_ADD);
        json_t *erf = NULL;
        for (size_t i = 0; add && i < 2 && !erf; i++)
            if (constant_value(x, xl_input_of(add, 1 - i)) == 1.0)
                erf = xl_emitted(x, xl_input_of(add, i), DL_LAYER_ERF);
        json_t *div = xl_emitted(x, xl_input_of(erf, 0), DL_LAYER_DIV);
        double c = div ? constant_value(x, xl_input_of(div, 1)) : NAN;
        tvalue *t = xl_value_from(x, v);
        if (div && v && fabs(c - sqrt(2.0)) < 1e-6 && !strcmp(xl_input_of(div, 0), v) && t &&
            xl_same_layout(t, b))
            return t;
    }
    return NULL;
}

static dl_status op_binary(xl *x, const onnx_node *n)
{
    static const struct { const char *op; dl_layer_type type; } map[] = {
        {"Add", DL_LAYER_ADD}, {"Sub", DL_LAYER_SUB}, {"Mul", DL_LAYER_MUL},
        {"Div", DL_LAYER_DIV},
    };
    if (n->nin != 2)
        return xl_refuse(x, n, "takes two inputs");
    if (xl_all_const(x, n))
        return fold_arith(x, n);
    tvalue *v[2] = { xl_arg(x, n, 0), xl_arg(x, n, 1) }, tmp[2];
    if (!v[0] || !v[1])
        return xl_refuse(x, n, "an input is missing");
    /* One silu or gelu layer, one pass: the layers it replaces are pruned
     * unless read again. */
    for (int k = 0; k < 2 && !strcmp(n->op, "Mul"); k++) {
        tvalue *g = gelu_of(x, v[k], v[1 - k]);
        if (sigmoid_of(x, v[k], v[1 - k]))
            return xl_unary(x, n, dl_layer_type_name(DL_LAYER_SILU), NULL, v[k], v[k]->nd,
                         v[k]->d);
        if (g)
            return xl_unary(x, n, dl_layer_type_name(DL_LAYER_GELU), NULL, g, g->nd, g->d);
    }
    tvalue like = v[0]->c ? *v[1] : *v[0];   /* the batch sits as in the tensor operand */
    /* a sequence plus a constant of a row a position: a position table */
    for (int k = 0; k < 2 && !strcmp(n->op, "Add") && like.seq; k++) {
        bool done;
        dl_status st = v[k]->c ? xl_pos_embedding(x, n, v[1 - k], v[k], &done) : DL_OK;
        if (st || (v[k]->c && done))
            return st;
    }
    if (!v[0]->c && !v[1]->c && !xl_same_layout(v[0], v[1]))
        return xl_refuse(x, n, "the two tensors must have one rank and hold the batch alike");
    for (int k = 0; k < 2; k++) {
        dl_status st = v[k]->c ? constant_layer(x, n, v[k], &like, &tmp[k]) : DL_OK;
        if (st)
            return st;
        v[k] = v[k]->c ? &tmp[k] : v[k];
    }
    const char *type = dl_layer_type_name(DL_LAYER_ADD);
    for (size_t k = 0; k < sizeof(map) / sizeof(map[0]); k++)
        type = !strcmp(map[k].op, n->op) ? dl_layer_type_name(map[k].type) : type;
    int nd = v[0]->nd > v[1]->nd ? v[0]->nd : v[1]->nd;
    int64_t d[ONNX_MAX_DIMS];
    for (int k = 0; k < nd; k++) {
        int e0 = v[0]->nd - nd + k, e1 = v[1]->nd - nd + k;
        int64_t a = e0 >= 0 ? v[0]->d[e0] : 1, b = e1 >= 0 ? v[1]->d[e1] : 1;
        d[k] = a > b ? a : b;
    }
    const char *srcs[2] = { v[0]->src, v[1]->src };
    char name[DL_NAME_MAX];
    xl_node_layer_name(x, n, NULL, name);
    tvalue *o = xl_out0(x, n);
    return keep_layout(x, n, &like, o ? xl_emit(x, json_pack("{s:s}", "type", type), name,
                                                srcs, 2, o, nd, d) : xl_nomem(x));
}

/* Where(C, s, X) or Where(C, X, s) of a constant condition C and a
 * one-value constant s of -inf (or below -1e30, where x + s is s): what
 * masked_fill writes for a causal mask over the time axis (folded to its
 * capacity). It is X plus the constant C ? s : 0 (or C ? 0 : s), exactly:
 * an add layer, which attention_of recognises as a causal mask. Other
 * Wheres: onnx_seq.c. */
static dl_status op_where(xl *x, const onnx_node *n)
{
    tvalue *c = xl_arg(x, n, 0), *a = xl_arg(x, n, 1), *b = xl_arg(x, n, 2);
    if (n->nin != 3 || !c || !a || !b || !c->c || c->fill || (a->c != NULL) == (b->c != NULL))
        return xl_op_where(x, n);
    tvalue *t = a->c ? b : a, *k = a->c ? a : b;
    double s = k->c->n == 1 && !k->fill ? (k->c->f ? k->c->f[0] : (double)k->c->i[0]) : 0;
    if (!k->c->f || k->c->n != 1 || k->fill || !(s <= -1e30) || !t->src)
        return xl_op_where(x, n);
    const onnx_tensor *ct = c->c;
    onnx_tensor *m = xl_const(x, true, ct->ndim, ct->dims);
    if (!m)
        return xl_nomem(x);
    for (int64_t e = 0; e < m->n; e++) {
        bool on = (ct->f ? ct->f[e] : (double)ct->i[e]) != 0;
        m->f[e] = on == (k == a) ? (float)s : 0.0f;
    }
    /* the constant under the output's name, hidden by the add's output
     * (values are found from the last) */
    tvalue *mv = xl_add(x, n->out[0]);
    if (!mv)
        return xl_nomem(x);
    mv->c = m;
    const char *ins[2] = { t->name, n->out[0] };
    onnx_node add = *n;
    add.op = "Add";
    add.nin = 2;
    add.in = ins;
    return op_binary(x, &add);
}

/* Softmax/LogSoftmax: before opset 13 the input is coerced to 2-D at axis,
 * the same as a per-sample axis only when that is the last one. */
static dl_status op_softmax(xl *x, const onnx_node *n)
{
    tvalue *a = xl_arg(x, n, 0);
    int64_t dflt = x->g->opset < 13 ? 1 : -1;
    int ax = a->c ? -1 : xl_axis(a, xl_attr_i(n, "axis", dflt));
    if (ax < 0 || (x->g->opset < 13 && ax != a->nd - 1))
        return xl_refuse(x, n, "axis must be a non-batch axis (the last one before opset 13)");
    return xl_unary(x, n, dl_layer_type_name(!strcmp(n->op, "Softmax") ? DL_LAYER_SOFTMAX
                                                                    : DL_LAYER_LOG_SOFTMAX),
                 json_pack("{s:i}", "axis", ax), a, a->nd, a->d);
}

static dl_status op_reduce(xl *x, const onnx_node *n)
{
    tvalue *a = xl_arg(x, n, 0);
    int64_t axes[ONNX_MAX_DIMS], d[ONNX_MAX_DIMS], kd[ONNX_MAX_DIMS];
    int na = a->c ? -1 : xl_axes_of(x, n, axes), nd = 0;
    if (na <= 0)
        return xl_refuse(x, n, "needs constant axes on a per-sample tensor");
    bool keep = xl_attr_i(n, "keepdims", 1) != 0;
    /* over a sequence's time axis: each sample's valid positions */
    if (na == 1 && a->seq && xl_axis(a, axes[0]) == 0)
        return xl_seq_pool(x, n, a, !strcmp(n->op, "ReduceMax") ? DL_SEQ_POOL_MAX
                                  : !strcmp(n->op, "ReduceMean") ? DL_SEQ_POOL_MEAN
                                  : DL_SEQ_POOL_SUM, keep);
    if (!strcmp(n->op, "ReduceMax"))
        return xl_refuse(x, n, "only the maximum over a sequence's time axis is translated");
    json_t *list = json_array();
    bool hit[ONNX_MAX_DIMS] = { false };
    for (int k = 0; k < na; k++) {
        int ax = ps_axis(axes[k], a->nd);
        if (ax < 0) {
            json_decref(list);
            return xl_refuse(x, n, "reducing the batch axis is not supported");
        }
        hit[ax] = true;
        json_array_append_new(list, json_integer(ax));
    }
    for (int k = 0; k < a->nd; k++) {
        kd[k] = hit[k] ? 1 : a->d[k];
        if (!hit[k])
            d[nd++] = a->d[k];
    }
    const char *type = dl_layer_type_name(!strcmp(n->op, "ReduceMean") ? DL_LAYER_REDUCE_MEAN
                                                                        : DL_LAYER_REDUCE_SUM);
    if (!keep)
        return xl_unary(x, n, type, json_pack("{s:o}", "axis", list), a, nd, d);
    tvalue tmp;
    dl_status st = xl_unary(x, n, type, json_pack("{s:o}", "axis", list), a, nd, d);
    if (st)
        return st;
    tmp = *xl_find(x, n->out[0]);
    x->nv--;
    return xl_reshape_to(x, n, &tmp, a->nd, kd);
}

/* Element-wise operators with attributes (or constant inputs) of their own. */
static dl_status op_pointwise(xl *x, const onnx_node *n)
{
    tvalue *a = xl_arg(x, n, 0);
    if (!a || a->c)
        return xl_refuse(x, n, "needs a per-sample input");
    json_t *l = json_object();
    const char *type;
    if (!strcmp(n->op, "LeakyRelu")) {
        type = dl_layer_type_name(DL_LAYER_LEAKY_RELU);
        json_object_set_new(l, "alpha", json_real(xl_attr_f(n, "alpha", 0.01f)));
    } else if (!strcmp(n->op, "HardSigmoid")) {
        type = dl_layer_type_name(DL_LAYER_HARDSIGMOID);
        json_object_set_new(l, "alpha", json_real(xl_attr_f(n, "alpha", 0.2f)));
        json_object_set_new(l, "beta", json_real(xl_attr_f(n, "beta", 0.5f)));
    } else if (!strcmp(n->op, "Clip")) {
        type = dl_layer_type_name(DL_LAYER_CLIP);
        const onnx_tensor *lo = xl_weight(x, n, 1), *hi = xl_weight(x, n, 2);
        if ((n->nin > 1 && n->in[1][0] && !lo) || (n->nin > 2 && n->in[2][0] && !hi)) {
            json_decref(l);
            return xl_refuse(x, n, "min and max must be constants");
        }
        const onnx_attr *amin = onnx_attr_find(n, "min"), *amax = onnx_attr_find(n, "max");
        if (lo || amin)
            json_object_set_new(l, "min", json_real(lo ? lo->f[0] : amin->f));
        if (hi || amax)
            json_object_set_new(l, "max", json_real(hi ? hi->f[0] : amax->f));
    } else {
        const onnx_tensor *e = xl_weight(x, n, 1);
        type = dl_layer_type_name(DL_LAYER_POW);
        if (!e || e->n != 1) {
            json_decref(l);
            return xl_refuse(x, n, "the exponent must be a constant scalar");
        }
        json_object_set_new(l, "exponent", json_real(e->f[0]));
    }
    return xl_unary(x, n, type, l, a, a->nd, a->d);
}

/* ---- the table ------------------------------------------------------------- */

/* Operators that are one layer without options; the layer names are nn's
 * (dl_layer_type_name), not a copy of them. */
static dl_status op_plain(xl *x, const onnx_node *n)
{
    static const struct { const char *op; dl_layer_type type; } map[] = {
        {"Relu", DL_LAYER_RELU}, {"Sigmoid", DL_LAYER_SIGMOID}, {"Tanh", DL_LAYER_TANH},
        {"Sqrt", DL_LAYER_SQRT}, {"Erf", DL_LAYER_ERF}, {"HardSwish", DL_LAYER_HARDSWISH},
    };
    tvalue *a = xl_arg(x, n, 0);
    if (!a || a->c)
        return xl_refuse(x, n, "needs a per-sample input (constants are not folded here)");
    for (size_t k = 0; k < sizeof(map) / sizeof(map[0]); k++)
        if (!strcmp(map[k].op, n->op))
            return xl_unary(x, n, dl_layer_type_name(map[k].type), NULL, a, a->nd, a->d);
    return xl_refuse(x, n, "unsupported operator");
}

static dl_status op_global_avg(xl *x, const onnx_node *n)
{
    tvalue *a = xl_arg(x, n, 0);
    if (!a || a->c || a->nd != 3)
        return xl_refuse(x, n, "needs a per-sample [C, H, W] tensor");
    dl_status st = xl_unary(x, n, "global_avgpool2d", NULL, a, 1, a->d);
    if (st)
        return st;
    tvalue tmp = *xl_find(x, n->out[0]);
    x->nv--;
    int64_t d[3] = { a->d[0], 1, 1 };
    return xl_reshape_to(x, n, &tmp, 3, d);
}

/* Identity, Dropout (inference), Cast to float of a float, Pad of zeros. */
static dl_status op_pass(xl *x, const onnx_node *n)
{
    tvalue *a = xl_arg(x, n, 0);
    if (!a)
        return xl_refuse(x, n, "its input is missing");
    if (a->c && strcmp(n->op, "Pad"))
        return fold_shape_op(x, n);
    int64_t to = xl_attr_i(n, "to", DT_FLOAT);
    bool to_int = to == DT_INT64 || to == DT_INT32;
    if (!strcmp(n->op, "Cast") && a->input && to_int) {   /* ids for an embedding */
        dl_status st = xl_alias(x, n, a);
        if (!st)
            xl_find(x, n->out[0])->ids = true;
        return st;
    }
    if (!strcmp(n->op, "Cast") && (a->ids || to != DT_FLOAT))
        return xl_refuse(x, n, "only a cast of floats to float (or of a model input to "
                         "integer ids) is elided");
    if (!strcmp(n->op, "Dropout") && n->nout > 1 && n->out[1][0])
        return xl_refuse(x, n, "the mask output is not supported");
    if (!strcmp(n->op, "Pad")) {   /* pads: input 1 since opset 11, else an attribute */
        tvalue *p = xl_arg(x, n, 1);
        const onnx_attr *pa = onnx_attr_find(n, "pads");
        if (p && (!p->c || !p->c->i))
            return xl_refuse(x, n, "pads must be constant");
        const int64_t *pads = p ? p->c->i : pa ? pa->ints : NULL;
        int64_t npads = p ? p->c->n : pa ? pa->nints : 0;
        for (int64_t k = 0; k < npads; k++)
            if (pads[k])
                return xl_refuse(x, n, "only pads of zeros are supported");
    }
    return xl_alias(x, n, a);
}

/* The operators, their translation and the layer types it may emit (L()
 * bits: dl_onnx_imports_layer answers from them). */
#define L(t) (UINT64_C(1) << DL_LAYER_##t)
_Static_assert(DL_LAYER_COUNT <= 64, "the layer-type bits of ops[] need a wider mask");

static const struct {
    const char *op;
    dl_status (*fn)(xl *x, const onnx_node *n);
    uint64_t    makes;
} ops[] = {
    {"Gemm", op_gemm, L(DENSE)}, {"MatMul", op_matmul, L(MATMUL) | L(DENSE)},
    {"Conv", op_conv, L(CONV2D) | L(CONV1D)},
    {"BatchNormalization", op_batchnorm, L(BATCHNORM)},
    {"LayerNormalization", op_layernorm, L(LAYERNORM)},
    {"MaxPool", op_pool, L(MAXPOOL2D) | L(MAXPOOL1D)}, {"AveragePool", op_pool, L(AVGPOOL2D)},
    {"GlobalAveragePool", op_global_avg, L(GLOBAL_AVGPOOL2D) | L(RESHAPE)},
    {"Relu", op_plain, L(RELU)}, {"Sigmoid", op_plain, L(SIGMOID)},
    {"Tanh", op_plain, L(TANH)}, {"Sqrt", op_plain, L(SQRT)}, {"Erf", op_plain, L(ERF)},
    {"HardSwish", op_plain, L(HARDSWISH)},
    {"LeakyRelu", op_pointwise, L(LEAKY_RELU)}, {"HardSigmoid", op_pointwise, L(HARDSIGMOID)},
    {"Clip", op_pointwise, L(CLIP)}, {"Pow", op_pointwise, L(POW)},
    {"Softmax", op_softmax, L(SOFTMAX)}, {"LogSoftmax", op_softmax, L(LOG_SOFTMAX)},
    {"Flatten", op_flatten, L(FLATTEN) | L(RESHAPE)}, {"Reshape", op_reshape, L(RESHAPE) | L(SDPA)},
    {"Squeeze", op_squeeze, L(RESHAPE)}, {"Unsqueeze", op_squeeze, L(RESHAPE)},
    {"Transpose", op_transpose, L(TRANSPOSE)},
    {"Concat", op_concat, L(CONCAT) | L(CONSTANT)},
    {"Add", op_binary, L(ADD) | L(CONSTANT) | L(POS_EMBEDDING)},
    {"Sub", op_binary, L(SUB) | L(CONSTANT)},
    {"Mul", op_binary, L(MUL) | L(CONSTANT) | L(SILU) | L(GELU)},
    {"Div", op_binary, L(DIV) | L(CONSTANT) | L(SEQ_POOL)},
    {"Gather", op_gather, L(EMBEDDING) | L(SLICE) | L(RESHAPE)},
    {"Identity", op_pass, 0}, {"Dropout", op_pass, 0}, {"Cast", op_pass, 0},
    {"Pad", op_pass, 0},
    {"ReduceMean", op_reduce, L(REDUCE_MEAN) | L(RESHAPE) | L(SEQ_POOL)},
    {"ReduceSum", op_reduce, L(REDUCE_SUM) | L(RESHAPE) | L(SEQ_POOL)},
    {"ReduceMax", op_reduce, L(SEQ_POOL) | L(RESHAPE)}, {"Constant", op_constant, 0},
    {"Shape", op_shape, 0}, {"Slice", op_slice, L(SLICE)}, {"Split", op_split, L(SLICE)},
    /* the time axis and its masks (onnx_seq.c) */
    {"Equal", xl_op_equal, 0}, {"Less", xl_op_compare, 0}, {"LessOrEqual", xl_op_compare, 0},
    {"Greater", xl_op_compare, 0}, {"GreaterOrEqual", xl_op_compare, 0}, {"Not", xl_op_not, 0},
    {"Where", op_where, L(ADD) | L(CONSTANT)},
    {"Expand", xl_op_expand, 0}, {"ConstantOfShape", xl_op_constant_of_shape, 0},
    {"Range", xl_op_range, 0}, {"Trilu", xl_op_trilu, 0}, {"ArgMax", xl_op_argmax, 0},
    {"LSTM", xl_op_rnn, L(LSTM) | L(RESHAPE)}, {"GRU", xl_op_rnn, L(GRU) | L(RESHAPE)},
};

bool dl_onnx_imports_layer(dl_layer_type t)
{
    /* onnx_import.c copies a graph output that is a model input or another
     * output into a layer of its own. */
    if (t == DL_LAYER_IDENTITY)
        return true;
    for (size_t k = 0; k < sizeof(ops) / sizeof(ops[0]); k++)
        if ((unsigned)t < DL_LAYER_COUNT && (ops[k].makes & (UINT64_C(1) << t)))
            return true;
    return false;
}

dl_status xl_node(xl *x, const onnx_node *n)
{
    if (n->domain[0] && strcmp(n->domain, "ai.onnx"))
        return xl_refuse(x, n, "operators of domain '%s' are not supported", n->domain);
    bool rnn = !strcmp(n->op, "LSTM") || !strcmp(n->op, "GRU");   /* Y may be omitted */
    if (n->nout < 1 || (!n->out[0][0] && !(rnn && n->nout > 1 && n->out[1][0])))
        return xl_refuse(x, n, "has no output");
    for (int k = 0; k < n->nin; k++)
        if (n->in[k][0] && !xl_find(x, n->in[k]))
            return xl_refuse(x, n, "input '%.80s' is produced by no node above it", n->in[k]);
    bool masks = xl_reads_mask(x, n);
    for (int k = 0; k < n->nin && !masks && !xl_layout_follows(n->op); k++) {
        tvalue *v = n->in[k][0] ? xl_find(x, n->in[k]) : NULL;
        char where[64];
        if (v && !v->c && !xl_std(v))
            return xl_refuse(x, n, "input '%.60s' holds the batch %s, not alone on axis 0, "
                             "which this operator needs", n->in[k],
                             xl_layout_text(v, where, sizeof(where)));
    }
    tvalue *done = xl_find(x, n->out[n->out[0][0] ? 0 : 1]);
    if (done && done->fused && !strcmp(n->op, "Add"))   /* a MatMul's bias */
        return DL_OK;
    if (done)
        return xl_refuse(x, n, "output '%.80s' is produced twice", n->out[0]);
    if (masks)
        return xl_mask_node(x, n);
    for (size_t k = 0; k < sizeof(ops) / sizeof(ops[0]); k++)
        if (!strcmp(ops[k].op, n->op)) {
            if (strcmp(n->op, "Constant") && !xl_arg(x, n, 0))
                return xl_refuse(x, n, "its first input is missing");
            return xl_reads_cf(x, n) ? xl_cf_node(x, n, ops[k].fn) : ops[k].fn(x, n);
        }
    return xl_refuse(x, n, "unsupported operator");
}
