/* onnx_seq.c: the time axis of imported sequence models: the padding
 * masks text models compute from their ids (Equal, Not, Where, Expand,
 * Cast, ReduceMax, ArgMax of masks), pooling over the time axis, position
 * tables, the LSTM and GRU operators, and the constants their exports
 * fold (ConstantOfShape, Range, Trilu, comparisons of positions).
 *
 * The rule. A symbolic time axis makes a sequence input (onnx_import.c);
 * each sample is computed as the graph computes it alone, at its own
 * length T. The layers that read across positions (sdpa, seq_pool, lstm,
 * gru) read each sample's valid positions only, so a padded batch answers
 * as its samples alone. A mask computed from the ids (ids == PAD, any
 * constant PAD) is, for a sample alone, the same at every position: the
 * value it has at valid ones. Such masks are no layers: they are tracked
 * (tvalue.mask) through casts, reshapes and arithmetic, and resolved where
 * they meet the data: a tensor masked by them (Mul by 1, Add of 0, Where
 * keeping it at valid positions) is the tensor itself, their sum over the
 * time axis each sample's length, a sum over time divided by that length
 * a seq_pool mean. A sample's ids must not hold PAD within its length. */
#define _POSIX_C_SOURCE 200809L
#include "onnx/translate.h"
#include "onnx/onnx_pb.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* ---- helpers ---------------------------------------------------------------- */

static bool is_mask(const tvalue *v) { return v && v->mask != XL_MASK_NONE; }

/* Element k of a folded constant as a double. */
static double cval(const onnx_tensor *t, int64_t k) { return t->f ? t->f[k] : (double)t->i[k]; }

/* The one value of a constant (a fill's included) into *out. */
static bool scalar(const tvalue *v, double *out)
{
    if (!v || !v->c || v->c->n != 1)
        return false;
    *out = cval(v->c, 0);
    return true;
}

/* Node n's output: a mask of kind `kind` shaped as `like`, its values at
 * padded and valid positions, its time on ONNX axis tax. */
static dl_status set_mask(xl *x, const onnx_node *n, const tvalue *like, int kind, int tax,
                          double pad, double valid)
{
    tvalue *o = xl_out0(x, n);
    if (!o)
        return xl_nomem(x);
    const char *name = o->name;
    *o = (tvalue){ .name = name, .nd = like->nd, .bax = like->bax, .merge = like->merge,
                   .mask = kind, .mtax = tax, .mpad = pad, .mvalid = valid };
    memcpy(o->d, like->d, sizeof(o->d));
    return DL_OK;
}

/* Node n's output: a fill constant (ConstantOfShape of a shape that
 * holds the batch) of value v, float or not. */
static dl_status set_fill(xl *x, const onnx_node *n, bool is_f, double v)
{
    int64_t one = 1;
    onnx_tensor *t = xl_const(x, is_f, 0, &one);
    if (!t)
        return xl_nomem(x);
    if (is_f)
        t->f[0] = (float)v;
    else
        t->i[0] = (int64_t)v;
    dl_status st = xl_set_const(x, n, t);
    if (st == DL_OK)
        xl_find(x, n->out[0])->fill = true;
    return st;
}

/* Whether the ONNX shape of a broadcasts into b's: a's rank no larger,
 * each of its dimensions 1 or b's (the batch's included). */
static bool broadcasts_into(const tvalue *a, const tvalue *b)
{
    int64_t oa[ONNX_MAX_DIMS], ob[ONNX_MAX_DIMS];
    int ra = xl_onnx_dims(a, oa), rb = xl_onnx_dims(b, ob);
    if (ra > rb)
        return false;
    for (int k = 0; k < ra; k++)
        if (oa[k] != 1 && oa[k] != ob[rb - ra + k])
            return false;
    return true;
}

/* Sets v's layout (bax, merge, nd, d) from ONNX dims o[0..r), the batch
 * (a symbolic entry) where it is; the kind of a merge kept from v. */
static bool set_onnx_layout(tvalue *v, const int64_t *o, int r)
{
    int bax = -1;
    for (int k = 0; k < r; k++)
        if (xl_batch_k(o[k]))
            bax = bax < 0 ? k : ONNX_MAX_DIMS;
    if (bax < 0 || bax >= r)
        return false;
    int64_t f = xl_batch_k(o[bax]);
    v->merge = f == 1 ? XL_BATCH_ALONE : v->merge ? v->merge : XL_BATCH_OUTER;
    v->bax = bax;
    v->nd = 0;
    for (int k = 0; k < r; k++)
        if (k != bax || v->merge)
            v->d[v->nd++] = k == bax ? f : o[k];
    return true;
}

/* ---- constants: what exports fold into shapes ------------------------------ */

/* The ONNX broadcast of constants t[0..k) into d; its rank, or -1. */
static int bcast_dims(const onnx_tensor *const *t, int k, int64_t *d)
{
    int r = 0;
    for (int i = 0; i < k; i++)
        r = t[i]->ndim > r ? t[i]->ndim : r;
    for (int a = 0; a < r; a++) {
        d[a] = 1;
        for (int i = 0; i < k; i++) {
            int at = a - (r - t[i]->ndim);
            int64_t v = at >= 0 ? t[i]->dims[at] : 1;
            if (v != 1 && d[a] != 1 && v != d[a])
                return -1;
            d[a] = v != 1 ? v : d[a];
        }
    }
    return r;
}

/* The element of t that element e of the broadcast shape d (rank r) reads. */
static int64_t bcast_at(const onnx_tensor *t, const int64_t *d, int r, int64_t e)
{
    int64_t at = 0, stride = 1;
    for (int a = r - 1; a >= 0; a--) {
        int64_t i = e % d[a];
        e /= d[a];
        int ta = a - (r - t->ndim);
        if (ta >= 0) {
            at += (t->dims[ta] == 1 ? 0 : i) * stride;
            stride *= t->dims[ta];
        }
    }
    return at;
}

/* The inputs Equal, the comparisons, Not and Where take. */
static int logic_arity(const char *op)
{
    return !strcmp(op, "Not") ? 1 : !strcmp(op, "Where") ? 3 : 2;
}

/* a OP b for Equal, Less, LessOrEqual, Greater, GreaterOrEqual. */
static bool compare(const char *op, double a, double b)
{
    return !strcmp(op, "Equal") ? a == b : !strcmp(op, "Less") ? a < b
         : !strcmp(op, "LessOrEqual") ? a <= b : !strcmp(op, "Greater") ? a > b : a >= b;
}

/* Equal, Not and Where of constants, broadcast; booleans as integers. */
static dl_status fold_logic(xl *x, const onnx_node *n)
{
    if (n->nin != logic_arity(n->op))
        return xl_refuse(x, n, "takes %d inputs", logic_arity(n->op));
    const onnx_tensor *t[3];
    for (int k = 0; k < n->nin && k < 3; k++)
        t[k] = xl_arg(x, n, k)->c;
    int64_t d[ONNX_MAX_DIMS];
    int nin = n->nin < 3 ? n->nin : 3, r = bcast_dims(t, nin, d);
    if (r < 0)
        return xl_refuse(x, n, "constant operands that do not broadcast");
    bool where = !strcmp(n->op, "Where"), is_f = where && (t[1]->f || t[2]->f);
    onnx_tensor *o = xl_const(x, is_f, r, d);
    for (int64_t e = 0; o && e < o->n; e++) {
        double a = cval(t[0], bcast_at(t[0], d, r, e));
        double v = !strcmp(n->op, "Not") ? a == 0
                 : !where ? compare(n->op, a, cval(t[1], bcast_at(t[1], d, r, e)))
                 : cval(t[a != 0 ? 1 : 2], bcast_at(t[a != 0 ? 1 : 2], d, r, e));
        if (is_f)
            o->f[e] = (float)v;
        else
            o->i[e] = (int64_t)v;
    }
    return xl_set_const(x, n, o);
}

dl_status xl_op_constant_of_shape(xl *x, const onnx_node *n)
{
    tvalue *s = xl_arg(x, n, 0);
    const onnx_attr *a = onnx_attr_find(n, "value");
    if (!s->c || !s->c->i || s->c->ndim != 1 || s->c->n > ONNX_MAX_DIMS ||
        (a && (!a->t || a->t->n != 1)))
        return xl_refuse(x, n, "needs a constant shape and a one-element value");
    bool is_f = !a || a->t->f;
    double v = a ? cval(a->t, 0) : 0.0;
    bool batch = false;
    for (int64_t k = 0; k < s->c->n; k++)
        batch = batch || xl_batch_k(s->c->i[k]);
    if (batch)        /* a shape that holds the batch: the value is all we keep */
        return set_fill(x, n, is_f, v);
    onnx_tensor *t = xl_const(x, is_f, (int)s->c->n, s->c->i);
    for (int64_t e = 0; t && e < t->n; e++)
        if (is_f)
            t->f[e] = (float)v;
        else
            t->i[e] = (int64_t)v;
    return t ? xl_set_const(x, n, t) : xl_refuse(x, n, "the shape is too large to fold");
}

/* Range of constants (the time axis' length folded to its capacity). */
dl_status xl_op_range(xl *x, const onnx_node *n)
{
    double v[3];
    bool is_f = false;
    for (int k = 0; k < 3; k++) {
        tvalue *a = xl_arg(x, n, k);
        if (!scalar(a, &v[k]) || a->fill || (a->c->i && xl_batch_k(a->c->i[0])))
            return xl_refuse(x, n, "start, limit and delta must be constants (not the batch "
                             "size)");
        is_f = is_f || a->c->f;
    }
    double len = v[2] ? ceil((v[1] - v[0]) / v[2]) : -1;
    if (!(len >= 0 && len <= (1 << 24)))
        return xl_refuse(x, n, "the range is empty of steps or too long");
    int64_t d = (int64_t)len;
    onnx_tensor *t = xl_const(x, is_f, 1, &d);
    for (int64_t e = 0; t && e < d; e++)
        if (is_f)
            t->f[e] = (float)(v[0] + (double)e * v[2]);
        else
            t->i[e] = (int64_t)v[0] + e * (int64_t)v[2];
    return t ? xl_set_const(x, n, t) : xl_nomem(x);
}

/* Trilu of a constant (a causal mask over the time axis folded to its
 * capacity): the upper (lower) triangle from diagonal k kept, zeros
 * elsewhere. */
dl_status xl_op_trilu(xl *x, const onnx_node *n)
{
    tvalue *a = xl_arg(x, n, 0), *kv = xl_arg(x, n, 1);
    double k = 0;
    if (!a->c || a->fill || a->c->ndim < 2 || (kv && (!scalar(kv, &k) || kv->fill)))
        return xl_refuse(x, n, "only Trilu of a constant (and a constant k) is translated");
    bool upper = xl_attr_i(n, "upper", 1) != 0;
    const onnx_tensor *c = a->c;
    int64_t rows = c->dims[c->ndim - 2], cols = c->dims[c->ndim - 1];
    onnx_tensor *t = xl_const(x, c->f != NULL, c->ndim, c->dims);
    for (int64_t e = 0; t && e < t->n; e++) {
        int64_t i = e / cols % rows, j = e % cols;
        bool keep = upper ? j - i >= (int64_t)k : j - i <= (int64_t)k;
        if (t->f)
            t->f[e] = keep ? c->f[e] : 0.0f;
        else
            t->i[e] = keep ? c->i[e] : 0;
    }
    return t ? xl_set_const(x, n, t) : xl_nomem(x);
}

/* ---- masks: where they come from --------------------------------------------- */

/* Equal(ids, PAD): the padding mask of a sequence input of ids [batch, T];
 * of constants, folded. */
dl_status xl_op_equal(xl *x, const onnx_node *n)
{
    if (xl_all_const(x, n))
        return fold_logic(x, n);
    tvalue *a = xl_arg(x, n, 0), *b = xl_arg(x, n, 1);
    tvalue *ids = a->c ? b : a, *pad = a->c ? a : b;
    double p;
    if (!ids || !pad || !pad->c || pad->fill || !scalar(pad, &p) || !ids->ids || !ids->seq ||
        ids->nd != 1 || !xl_std(ids))
        return xl_refuse(x, n, "only the padding mask ids == PAD (a constant) of a sequence "
                         "input of ids [batch, time] is translated");
    return set_mask(x, n, ids, XL_MASK_BOOL, 1, 1.0, 0.0);
}

/* Less, LessOrEqual, Greater, GreaterOrEqual: of constants (a causal
 * mask from positions over the time axis folded to its capacity). */
dl_status xl_op_compare(xl *x, const onnx_node *n)
{
    if (xl_all_const(x, n))
        return fold_logic(x, n);
    return xl_refuse(x, n, "only comparisons of constants (positions over the time axis) "
                     "are translated");
}

dl_status xl_op_not(xl *x, const onnx_node *n)
{
    if (xl_all_const(x, n))
        return fold_logic(x, n);
    return xl_refuse(x, n, "only Not of constants or of a padding mask is translated");
}

/* Expand of a constant: broadcast to the shape; a one-value constant to
 * a shape that holds the batch is a fill. */
static dl_status fold_expand(xl *x, const onnx_node *n, const onnx_tensor *a,
                             const onnx_tensor *s)
{
    bool batch = false;
    for (int64_t k = 0; k < s->n; k++)
        batch = batch || xl_batch_k(s->i[k]);
    if (batch && a->n == 1)
        return set_fill(x, n, a->f != NULL, cval(a, 0));
    onnx_tensor shape = { .ndim = (int)s->n };
    for (int64_t k = 0; k < s->n && k < ONNX_MAX_DIMS; k++)
        shape.dims[k] = s->i[k];
    const onnx_tensor *t[2] = { a, &shape };
    int64_t d[ONNX_MAX_DIMS];
    int r = batch || s->n > ONNX_MAX_DIMS ? -1 : bcast_dims(t, 2, d);
    onnx_tensor *o = r >= 0 ? xl_const(x, a->f != NULL, r, d) : NULL;
    if (!o)
        return xl_refuse(x, n, "a constant that does not expand to a constant shape");
    for (int64_t e = 0; e < o->n; e++)
        if (o->f)
            o->f[e] = a->f[bcast_at(a, d, r, e)];
        else
            o->i[e] = a->i[bcast_at(a, d, r, e)];
    return xl_set_const(x, n, o);
}

dl_status xl_op_expand(xl *x, const onnx_node *n)
{
    tvalue *a = xl_arg(x, n, 0), *s = xl_arg(x, n, 1);
    if (!s || !s->c || !s->c->i || s->c->ndim != 1)
        return xl_refuse(x, n, "the shape must be a constant");
    if (a->c)
        return fold_expand(x, n, a->c, s->c);
    return xl_refuse(x, n, "only Expand of constants or of a padding mask is translated");
}

/* ArgMax: only of a padding mask (xl_mask_node). */
dl_status xl_op_argmax(xl *x, const onnx_node *n)
{
    return xl_refuse(x, n, "only ArgMax of a padding mask over its time axis is translated");
}

/* Where: of constants, folded; with a padding mask, xl_mask_node. */
dl_status xl_op_where(xl *x, const onnx_node *n)
{
    if (xl_all_const(x, n))
        return fold_logic(x, n);
    return xl_refuse(x, n, "only Where of constants or on a padding mask is translated");
}

/* ---- masks: what they become ---------------------------------------------------- */

bool xl_reads_mask(xl *x, const onnx_node *n)
{
    bool fill = false, mask = false;
    for (int k = 0; k < n->nin; k++) {
        tvalue *v = xl_arg(x, n, k);
        fill = fill || (v && v->fill);
        mask = mask || is_mask(v);
    }
    /* a mask's Shape is its ONNX shape, as a tensor's; an LSTM or GRU
     * takes zero states */
    if (!strcmp(n->op, "LSTM") || !strcmp(n->op, "GRU") || (!fill && !strcmp(n->op, "Shape")))
        return false;
    return fill || mask;
}

/* The time axis of mask a after a reshape to ONNX dims o[0..r): the axis
 * of the time's length whose trailing elements are as many as before
 * (the batch counted by its fixed factor); -1 when none is. */
static int reshaped_tax(const tvalue *a, const int64_t *o, int r)
{
    int64_t oa[ONNX_MAX_DIMS], after = 1, t;
    int ra = xl_onnx_dims(a, oa);
    if (a->mtax < 0 || a->mtax >= ra)
        return -1;
    t = oa[a->mtax];
    for (int k = a->mtax + 1; k < ra; k++)
        after *= xl_batch_k(oa[k]) ? xl_batch_k(oa[k]) : oa[k];
    int64_t acc = 1;
    for (int k = r - 1; k >= 0; k--) {
        if (o[k] == t && acc == after)
            return k;
        acc *= xl_batch_k(o[k]) ? xl_batch_k(o[k]) : o[k];
    }
    return -1;
}

/* Unsqueeze, Squeeze, Reshape of a mask or of lengths: a new shape, the
 * time axis followed. */
static dl_status mask_reshape(xl *x, const onnx_node *n, tvalue *a)
{
    int64_t o[ONNX_MAX_DIMS], t[ONNX_MAX_DIMS], axes[ONNX_MAX_DIMS];
    int r = xl_onnx_dims(a, o), nt = 0;
    bool reshape = !strcmp(n->op, "Reshape");
    if (reshape) {
        tvalue *s = xl_arg(x, n, 1);
        if (!s || !s->c || !s->c->i || s->c->ndim != 1 || s->c->n > ONNX_MAX_DIMS)
            return xl_refuse(x, n, "the target shape must be a constant");
        nt = (int)s->c->n;
        memcpy(t, s->c->i, (size_t)nt * sizeof(*t));
    } else {
        int na = xl_axes_of(x, n, axes);
        bool un = !strcmp(n->op, "Unsqueeze");
        int rr = un ? r + na : r;
        if (na <= 0 || rr > ONNX_MAX_DIMS)
            return xl_refuse(x, n, "needs constant axes");
        for (int k = 0, from = 0; k < rr; k++) {
            bool hit = false;
            for (int j = 0; j < na; j++)
                hit = hit || (axes[j] < 0 ? axes[j] + rr : axes[j]) == k;
            if (un)
                t[nt++] = hit ? 1 : o[from++];
            else if (!hit)
                t[nt++] = o[k];
            else if (o[k] != 1)
                return xl_refuse(x, n, "squeezes an axis that is not 1");
        }
    }
    tvalue out;
    const char *why = xl_reshape_layout(a, t, nt, xl_attr_i(n, "allowzero", 0) != 0, &out);
    if (why)
        return xl_refuse(x, n, "%s", why);
    int64_t no[ONNX_MAX_DIMS];
    int nr = xl_onnx_dims(&out, no), tax = a->mask == XL_MASK_LEN ? -1 : reshaped_tax(a, no, nr);
    if (a->mask != XL_MASK_LEN && tax < 0)
        return xl_refuse(x, n, "a reshape of the padding mask that splits its time axis");
    return set_mask(x, n, &out, a->mask, tax, a->mpad, a->mvalid);
}

static dl_status mask_transpose(xl *x, const onnx_node *n, tvalue *a)
{
    const onnx_attr *p = onnx_attr_find(n, "perm");
    int r = xl_rank(a);
    int64_t perm[ONNX_MAX_DIMS], eperm[ONNX_MAX_DIMS];
    for (int k = 0; k < r; k++)
        perm[k] = p && p->nints == r ? p->ints[k] : r - 1 - k;
    tvalue out;
    const char *why = xl_transpose_layout(a, perm, r, &out, eperm);
    if (why)
        return xl_refuse(x, n, "%s", why);
    int tax = -1;
    for (int k = 0; k < r; k++)
        tax = perm[k] == a->mtax ? k : tax;
    return set_mask(x, n, &out, a->mask, tax, a->mpad, a->mvalid);
}

/* Expand of a mask: broadcast to the shape (its batch kept alone). */
static dl_status mask_expand(xl *x, const onnx_node *n, tvalue *a)
{
    tvalue *s = xl_arg(x, n, 1);
    int64_t o[ONNX_MAX_DIMS], d[ONNX_MAX_DIMS];
    int r = xl_onnx_dims(a, o);
    if (!s || !s->c || !s->c->i || s->c->ndim != 1 || s->c->n > ONNX_MAX_DIMS || a->merge)
        return xl_refuse(x, n, "needs a constant shape and a mask with the batch alone");
    int rs = (int)s->c->n, rr = rs > r ? rs : r;
    for (int k = 0; k < rr; k++) {
        int ka = k - (rr - r), ks = k - (rr - rs);
        int64_t va = ka >= 0 ? o[ka] : 1, vs = ks >= 0 ? s->c->i[ks] : 1;
        bool batch = ka == a->bax;
        if (batch ? vs != 1 && vs != va : va != 1 && vs != 1 && vs != va)
            return xl_refuse(x, n, "the shape does not broadcast with the mask's");
        d[k] = batch || vs == 1 ? va : vs;
        if (ka == a->mtax && d[k] != va)
            return xl_refuse(x, n, "the shape does not broadcast with the mask's");
    }
    tvalue out = *a;
    if (!set_onnx_layout(&out, d, rr))
        return xl_refuse(x, n, "the batch is lost");
    return set_mask(x, n, &out, a->mask, a->mtax + (rr - r), a->mpad, a->mvalid);
}

/* Cast of a mask, lengths or a fill: its values as the type holds them. */
static dl_status mask_cast(xl *x, const onnx_node *n, tvalue *a)
{
    int64_t to = xl_attr_i(n, "to", DT_FLOAT);
    bool to_bool = to == DT_BOOL, to_f = to == DT_FLOAT || to == DT_DOUBLE;
    double v[2] = { a->mpad, a->mvalid };
    if (a->fill)
        scalar(a, &v[1]);
    for (int k = 0; k < 2; k++) {
        if (!to_f && !to_bool && !isfinite(v[k]))
            return xl_refuse(x, n, "an infinite mask value cast to an integer");
        v[k] = to_bool ? v[k] != 0 : to_f ? v[k] : trunc(v[k]);
    }
    if (a->fill)
        return set_fill(x, n, to_f, v[1]);
    int kind = a->mask == XL_MASK_LEN ? XL_MASK_LEN : to_bool ? XL_MASK_BOOL : XL_MASK_NUM;
    return set_mask(x, n, a, kind, a->mtax, v[0], v[1]);
}

/* Not, and Equal with a constant: boolean masks of a mask's values. */
static dl_status mask_compare(xl *x, const onnx_node *n, tvalue *a, const tvalue *other)
{
    double c = 0;
    if (a->mask == XL_MASK_LEN || (other && (!scalar(other, &c) || other->fill)))
        return xl_refuse(x, n, "compares the padding mask with what is not a constant");
    if (!other)
        return set_mask(x, n, a, XL_MASK_BOOL, a->mtax, a->mpad == 0, a->mvalid == 0);
    return set_mask(x, n, a, XL_MASK_BOOL, a->mtax, a->mpad == c, a->mvalid == c);
}

/* Where on a padding mask: the branch taken at valid positions. A tensor
 * there is the result (whatever padded positions would get); constants on
 * both sides give a mask of them. */
static dl_status mask_where(xl *x, const onnx_node *n)
{
    tvalue *cond = xl_arg(x, n, 0), *br[2] = { xl_arg(x, n, 1), xl_arg(x, n, 2) };
    if (!is_mask(cond) || cond->mask == XL_MASK_LEN || !br[0] || !br[1])
        return xl_refuse(x, n, "Where needs a padding mask as its condition (or constants)");
    tvalue *valid = br[cond->mvalid != 0 ? 0 : 1];
    if (valid->src) {
        if (!broadcasts_into(cond, valid))
            return xl_refuse(x, n, "the mask does not broadcast over the tensor it selects");
        return xl_alias(x, n, valid);
    }
    double v[2];
    if (!scalar(br[0], &v[0]) || !scalar(br[1], &v[1]))
        return xl_refuse(x, n, "Where on a padding mask needs a tensor where the positions "
                         "are valid, or one-value constants on both sides");
    return set_mask(x, n, cond, XL_MASK_NUM, cond->mtax, cond->mpad != 0 ? v[0] : v[1],
                    cond->mvalid != 0 ? v[0] : v[1]);
}

static double arith(char op, double a, double b)
{
    return op == 'A' ? a + b : op == 'S' ? a - b : op == 'M' ? a * b : a / b;
}

/* X / lengths, X the sum over the time axis that xl_seq_pool made (maybe
 * reshaped for keepdims): the mean instead. */
static dl_status mean_of_sum(xl *x, const onnx_node *n, tvalue *v, tvalue *len)
{
    json_t *rs = xl_emitted(x, v->src, DL_LAYER_RESHAPE);
    const char *sum = rs ? xl_input_of(rs, 0) : v->src;
    json_t *pool = xl_emitted(x, sum, DL_LAYER_SEQ_POOL);
    const char *mode = json_string_value(json_object_get(pool, "mode"));
    tvalue *in = pool ? xl_value_from(x, xl_input_of(pool, 0)) : NULL;
    if (!in || !mode || strcmp(mode, "sum") || len->mvalid != 1.0 || !broadcasts_into(len, v))
        return xl_refuse(x, n, "divides by the lengths what is not a sum over the time axis");
    tvalue *pooled = xl_value_from(x, sum);
    int64_t d[ONNX_MAX_DIMS];
    memcpy(d, pooled->d, sizeof(d));
    json_t *l = json_pack("{s:s}", "mode", "mean");
    dl_status st = xl_unary(x, n, dl_layer_type_name(DL_LAYER_SEQ_POOL), l, in, pooled->nd, d);
    if (st || !rs)
        return st;
    tvalue tmp = *xl_find(x, n->out[0]);
    x->nv--;
    return xl_reshape_to(x, n, &tmp, v->nd, v->d);
}

/* Add, Sub, Mul, Div with a mask, lengths or a fill on a side. */
static dl_status mask_arith(xl *x, const onnx_node *n)
{
    tvalue *a = xl_arg(x, n, 0), *b = xl_arg(x, n, 1);
    char op = n->op[0];
    double ca, cb;
    bool sa = scalar(a, &ca), sb = scalar(b, &cb);
    if (!a || !b)
        return xl_refuse(x, n, "an input is missing");
    if (sa && sb)                           /* fills and one-value constants */
        return set_fill(x, n, a->c->f || b->c->f, arith(op, ca, cb));
    if (!is_mask(a) && !is_mask(b))
        return xl_refuse(x, n, "a constant shaped by the batch meets a tensor");
    tvalue *m = is_mask(a) ? a : b, *o = m == a ? b : a;
    double c = m == a ? cb : ca;
    if ((m == a ? sb : sa) && m->mask != XL_MASK_LEN && !o->fill)   /* mask op constant */
        return set_mask(x, n, m, XL_MASK_NUM, m->mtax,
                        m == a ? arith(op, m->mpad, c) : arith(op, c, m->mpad),
                        m == a ? arith(op, m->mvalid, c) : arith(op, c, m->mvalid));
    if (m->mask == XL_MASK_LEN && op == 'M' && (m == a ? sb : sa))
        return set_mask(x, n, m, XL_MASK_LEN, -1, 0, m->mvalid * c);
    if (!o->src || o->c)
        return xl_refuse(x, n, "arithmetic on the padding mask the engine does not map");
    if (m->mask == XL_MASK_LEN && op == 'D' && m == b)
        return mean_of_sum(x, n, o, m);
    /* a tensor masked: at valid positions, the tensor itself */
    bool unit = (op == 'A' || (op == 'S' && m == b)) ? m->mvalid == 0
              : (op == 'M' || (op == 'D' && m == b)) && m->mvalid == 1;
    if (m->mask == XL_MASK_LEN || !unit)
        return xl_refuse(x, n, "a tensor %s a padding mask whose value at valid positions is "
                         "not %s", op == 'A' || op == 'S' ? "plus" : "times",
                         op == 'A' || op == 'S' ? "0" : "1");
    if (!broadcasts_into(m, o))
        return xl_refuse(x, n, "the mask does not broadcast over the tensor");
    return xl_alias(x, n, o);
}

/* ReduceSum of a mask over its time axis: each sample's length (times
 * the value at valid positions); ReduceMax: that value; ArgMax: 0 (all
 * positions alike). */
static dl_status mask_reduce(xl *x, const onnx_node *n, tvalue *a)
{
    int64_t axes[ONNX_MAX_DIMS], o[ONNX_MAX_DIMS], d[ONNX_MAX_DIMS];
    bool argmax = !strcmp(n->op, "ArgMax");
    int na = argmax ? 1 : xl_axes_of(x, n, axes), r = xl_onnx_dims(a, o);
    if (argmax)
        axes[0] = xl_attr_i(n, "axis", 0);
    if (a->mask == XL_MASK_LEN || na != 1 || (axes[0] < 0 ? axes[0] + r : axes[0]) != a->mtax)
        return xl_refuse(x, n, "reduces a padding mask over other axes than its time axis");
    if (argmax && xl_attr_i(n, "select_last_index", 0))
        return xl_refuse(x, n, "select_last_index=1 is not supported");
    bool keep = xl_attr_i(n, "keepdims", 1) != 0;
    int nr = 0;
    for (int k = 0; k < r; k++)
        if (k != a->mtax || keep)
            d[nr++] = k == a->mtax ? 1 : o[k];
    tvalue out = *a;
    if (!set_onnx_layout(&out, d, nr))
        return xl_refuse(x, n, "the batch is lost");
    if (!strcmp(n->op, "ReduceSum"))
        return set_mask(x, n, &out, XL_MASK_LEN, -1, 0, a->mvalid);
    return set_fill(x, n, !argmax, argmax ? 0 : a->mvalid);
}

/* Clip of the lengths to at least 1 (or less), as divisions guard them:
 * the lengths themselves (every sample has one position or more). */
static dl_status mask_clip(xl *x, const onnx_node *n, tvalue *a)
{
    const onnx_tensor *lo = xl_weight(x, n, 1);
    tvalue *lov = xl_arg(x, n, 1), *hiv = xl_arg(x, n, 2);
    const onnx_attr *amin = onnx_attr_find(n, "min");
    double v = lo ? lo->f[0] : amin ? amin->f : -INFINITY;
    if (lov && lov->c && lov->c->i)
        v = (double)lov->c->i[0];
    if (a->mask != XL_MASK_LEN || a->mvalid != 1.0 || v > 1.0 || hiv ||
        onnx_attr_find(n, "max"))
        return xl_refuse(x, n, "only the lengths clipped to at least 1 are translated");
    return xl_alias(x, n, a);
}

dl_status xl_mask_node(xl *x, const onnx_node *n)
{
    tvalue *a = xl_arg(x, n, 0);
    const char *op = n->op;
    if (a && a->fill && (!strcmp(op, "Slice") || !strcmp(op, "Identity")))
        return xl_alias(x, n, a);       /* a part of a fill: the same value */
    if (a && a->fill && !strcmp(op, "Cast"))
        return mask_cast(x, n, a);
    if (!strcmp(op, "Where"))
        return mask_where(x, n);
    if (!strcmp(op, "Add") || !strcmp(op, "Sub") || !strcmp(op, "Mul") || !strcmp(op, "Div"))
        return mask_arith(x, n);
    if (!is_mask(a))
        return xl_refuse(x, n, "reads a padding mask or a constant shaped by the batch in a "
                         "way the engine does not map");
    if (!strcmp(op, "Identity"))
        return xl_alias(x, n, a);
    if (!strcmp(op, "Cast"))
        return mask_cast(x, n, a);
    if (!strcmp(op, "Not") || !strcmp(op, "Equal"))
        return mask_compare(x, n, a, n->nin > 1 ? xl_arg(x, n, 1) : NULL);
    if (!strcmp(op, "Unsqueeze") || !strcmp(op, "Squeeze") || !strcmp(op, "Reshape"))
        return mask_reshape(x, n, a);
    if (!strcmp(op, "Transpose"))
        return mask_transpose(x, n, a);
    if (!strcmp(op, "Expand"))
        return mask_expand(x, n, a);
    if (!strcmp(op, "ReduceSum") || !strcmp(op, "ReduceMax") || !strcmp(op, "ArgMax"))
        return mask_reduce(x, n, a);
    if (!strcmp(op, "Clip"))
        return mask_clip(x, n, a);
    return xl_refuse(x, n, "reads a padding mask in a way the engine does not map");
}

/* ---- pooling over the time axis, position tables ---------------------------- */

dl_status xl_seq_pool(xl *x, const onnx_node *n, tvalue *v, int mode, bool keepdims)
{
    static const char *const modes[] = {
        [DL_SEQ_POOL_MEAN] = "mean", [DL_SEQ_POOL_MAX] = "max", [DL_SEQ_POOL_SUM] = "sum",
        [DL_SEQ_POOL_LAST] = "last",
    };
    if (v->nd < 2)
        return xl_refuse(x, n, "pools a sequence of single values over the time axis (the "
                         "engine pools a vector a position, [T, D])");
    json_t *l = json_pack("{s:s}", "mode", modes[mode]);
    dl_status st = xl_unary(x, n, dl_layer_type_name(DL_LAYER_SEQ_POOL), l, v, v->nd - 1,
                            v->d + 1);
    if (st || !keepdims)
        return st;
    tvalue tmp = *xl_find(x, n->out[0]);
    x->nv--;
    int64_t d[ONNX_MAX_DIMS] = { 1 };
    memcpy(d + 1, v->d + 1, (size_t)(v->nd - 1) * sizeof(*d));
    return xl_reshape_to(x, n, &tmp, v->nd, d);
}

dl_status xl_pos_embedding(xl *x, const onnx_node *n, tvalue *v, tvalue *c, bool *done)
{
    int64_t d[ONNX_MAX_DIMS];
    int nd = 0;
    *done = false;
    if (!c->c->f || xl_const_dims(v, c->c, &nd, d) || v->nd != 2)
        return DL_OK;
    while (nd > 2 && d[0] == 1) {       /* leading 1s of a broadcast constant */
        memmove(d, d + 1, (size_t)(nd - 1) * sizeof(*d));
        nd--;
    }
    if (nd != 2 || d[0] != v->d[0] || d[0] == 1 || d[1] != v->d[1])
        return DL_OK;
    *done = true;
    char name[DL_NAME_MAX];
    xl_node_layer_name(x, n, c->c->name, name);
    tvalue *o = xl_out0(x, n);
    dl_status st = o ? xl_emit(x, json_pack("{s:s,s:I}", "type",
                                           dl_layer_type_name(DL_LAYER_POS_EMBEDDING),
                                           "max_length", (json_int_t)d[0]),
                               name, &v->src, 1, o, v->nd, v->d) : xl_nomem(x);
    if (st == DL_OK) {
        o->bax = v->bax;
        o->merge = v->merge;
    }
    return st ? st : xl_tensor(x, name, "weight", 2, d, c->c->f, 0);
}

/* ---- a sequence seen channels first ------------------------------------------
 * Text CNNs transpose [batch, T, C] to [batch, C, T] for Conv1d and pool
 * over the last axis. The engine keeps a sequence channels last and runs
 * conv1d over it so (layer_seq.c): the transpose is a view, no layer;
 * Conv, element-wise operators and the transpose back read the sequence
 * itself; a reduction over the time axis is a seq_pool. */

/* v with its two per-sample axes swapped: between the view and the
 * sequence. */
static dl_status swap_view(xl *x, const onnx_node *n, tvalue *a, bool cf)
{
    dl_status st = xl_alias(x, n, a);
    tvalue *o = st == DL_OK ? xl_find(x, n->out[0]) : NULL;
    if (o) {
        o->cf = cf;
        o->seq = true;
        o->d[0] = a->d[1];
        o->d[1] = a->d[0];
    }
    return st;
}

dl_status xl_cf_view(xl *x, const onnx_node *n, tvalue *a, const int64_t *perm, int r,
                     bool *done)
{
    bool swap = r == 3 && perm[0] == 0 && perm[1] == 2 && perm[2] == 1 && a->nd == 2 &&
                xl_std(a);
    *done = swap && (a->cf || a->seq);
    if (!*done)
        return a->cf ? xl_refuse(x, n, "moves the time axis of a sequence seen channels "
                                 "first elsewhere than back") : DL_OK;
    return swap_view(x, n, a, !a->cf);
}

bool xl_reads_cf(xl *x, const onnx_node *n)
{
    for (int k = 0; k < n->nin; k++) {
        tvalue *v = xl_arg(x, n, k);
        if (v && v->cf)
            return true;
    }
    return false;
}

/* A reduction of a channels-first view over its time axis (2): seq_pool
 * of the sequence, [C] (or [C, 1]). */
static dl_status cf_reduce(xl *x, const onnx_node *n, tvalue *a)
{
    int64_t axes[ONNX_MAX_DIMS];
    int na = xl_axes_of(x, n, axes);
    if (na != 1 || (axes[0] != 2 && axes[0] != -1))
        return xl_refuse(x, n, "reduces a sequence seen channels first over other axes than "
                         "its time axis");
    tvalue seq = *a;
    seq.cf = false;
    seq.d[0] = a->d[1];
    seq.d[1] = a->d[0];
    int mode = !strcmp(n->op, "ReduceMax") ? DL_SEQ_POOL_MAX
             : !strcmp(n->op, "ReduceMean") ? DL_SEQ_POOL_MEAN : DL_SEQ_POOL_SUM;
    dl_status st = xl_seq_pool(x, n, &seq, mode, false);
    if (st || !xl_attr_i(n, "keepdims", 1))
        return st;
    tvalue tmp = *xl_find(x, n->out[0]);
    x->nv--;
    int64_t d[2] = { a->d[0], 1 };
    return xl_reshape_to(x, n, &tmp, 2, d);
}

dl_status xl_cf_node(xl *x, const onnx_node *n, dl_status (*plain)(xl *, const onnx_node *))
{
    static const char *const same[] = {
        "Conv", "Relu", "Sigmoid", "Tanh", "LeakyRelu", "HardSigmoid", "HardSwish", "Clip",
        "Erf", "Sqrt", "Pow", "Identity", "Dropout", "Transpose",
    };
    tvalue *a = xl_arg(x, n, 0);
    for (size_t k = 0; k < sizeof(same) / sizeof(same[0]); k++)
        if (!strcmp(n->op, same[k]) && a && a->cf)
            return plain(x, n);
    if (!strncmp(n->op, "Reduce", 6) && a && a->cf)
        return cf_reduce(x, n, a);
    /* two views alike, element by element (a residual connection) */
    tvalue *b = n->nin == 2 ? xl_arg(x, n, 1) : NULL;
    if ((!strcmp(n->op, "Add") || !strcmp(n->op, "Sub") || !strcmp(n->op, "Mul") ||
         !strcmp(n->op, "Div")) && a && b && a->cf && b->cf && a->nd == b->nd &&
        !memcmp(a->d, b->d, (size_t)a->nd * sizeof(*a->d)))
        return plain(x, n);
    return xl_refuse(x, n, "reads a sequence seen channels first ([batch, C, T]): only Conv, "
                     "element-wise operators, the transpose back and reductions over the "
                     "time axis are translated");
}

/* ---- LSTM and GRU ------------------------------------------------------------
 * ONNX's W [dirs, G*H, in], R [dirs, G*H, H] and B [dirs, 2*G*H] (input
 * biases, then hidden ones) with its gate order (LSTM i, o, f, c; GRU z,
 * r, h) become PyTorch's weight_ih_l0, weight_hh_l0, bias_ih_l0 and
 * bias_hh_l0 (gates i, f, g, o; r, z, n), "_reverse" for the second
 * direction: the lstm and gru layers. The output Y [T, dirs, B, H] is the
 * layer returning the sequence, Y_h [dirs, B, H] one returning the last
 * states, each reshaped to ONNX's per-sample shape (a reshape that the
 * reshapes after it undo). Stacked operators, one a layer as exporters
 * write them, become one layer of several (xl_merge_stacks). */

/* PyTorch's gate k is ONNX's gate pt[k]. */
static const int lstm_gates[4] = { 0, 2, 3, 1 }, gru_gates[3] = { 1, 0, 2 };

/* G gates of H rows each (cols values a row) of ONNX's src into PyTorch's
 * order in dst. */
static void reorder_gates(float *dst, const float *src, int g, const int *pt, int64_t h,
                          int64_t cols)
{
    for (int k = 0; k < g; k++)
        memcpy(dst + (int64_t)k * h * cols, src + (int64_t)pt[k] * h * cols,
               (size_t)(h * cols) * sizeof(float));
}

/* The four tensors of direction dir of layer `name` from W, R, B. */
static dl_status rnn_tensors(xl *x, const char *name, int dir, int g, int64_t h, int64_t in,
                             const onnx_tensor *w, const onnx_tensor *r, const onnx_tensor *b)
{
    const int *pt = g == 4 ? lstm_gates : gru_gates;
    const char *sfx = dir ? "_reverse" : "";
    int64_t gh = g * h, wd[2] = { gh, in }, rd[2] = { gh, h };
    float *buf = malloc((size_t)(gh * (in > h ? in : h)) * sizeof(float));
    char tn[40];
    if (!buf)
        return xl_nomem(x);
    reorder_gates(buf, w->f + dir * gh * in, g, pt, h, in);
    snprintf(tn, sizeof(tn), "weight_ih_l0%s", sfx);
    dl_status st = xl_tensor(x, name, tn, 2, wd, buf, 0);
    reorder_gates(buf, r->f + dir * gh * h, g, pt, h, h);
    snprintf(tn, sizeof(tn), "weight_hh_l0%s", sfx);
    if (!st)
        st = xl_tensor(x, name, tn, 2, rd, buf, 0);
    for (int k = 0; k < 2 && b && !st; k++) {
        reorder_gates(buf, b->f + dir * 2 * gh + k * gh, g, pt, h, 1);
        snprintf(tn, sizeof(tn), "bias_%s_l0%s", k ? "hh" : "ih", sfx);
        st = xl_tensor(x, name, tn, 1, &gh, buf, 0);
    }
    free(buf);
    return st;
}

/* Whether input k of n is absent or all zeros (a zero initial state). */
static bool zero_state(xl *x, const onnx_node *n, int k)
{
    tvalue *v = xl_arg(x, n, k);
    for (int64_t e = 0; v && v->c && e < v->c->n; e++)
        if (cval(v->c, e) != 0)
            return false;
    return !v || v->c;
}

/* The checks of an LSTM or GRU node dlserve runs as PyTorch's cells. */
static dl_status rnn_check(xl *x, const onnx_node *n, bool lstm, int *dirs)
{
    const onnx_attr *dir = onnx_attr_find(n, "direction");
    const char *d = dir && dir->s ? dir->s : "forward";
    tvalue *len = xl_arg(x, n, 4);
    *dirs = !strcmp(d, "bidirectional") ? 2 : 1;
    if (strcmp(d, "forward") && *dirs == 1)
        return xl_refuse(x, n, "direction %s is not supported (forward or bidirectional)", d);
    if (onnx_attr_find(n, "activations") || onnx_attr_find(n, "clip"))
        return xl_refuse(x, n, "activations and clip other than the defaults are not "
                         "supported");
    if (lstm && (xl_attr_i(n, "input_forget", 0) || (n->nin > 7 && n->in[7][0])))
        return xl_refuse(x, n, "input_forget and peepholes (P) are not supported");
    if (!lstm && xl_attr_i(n, "linear_before_reset", 0) != 1)
        return xl_refuse(x, n, "linear_before_reset must be 1 (as PyTorch's GRU computes)");
    if (!zero_state(x, n, 5) || (lstm && !zero_state(x, n, 6)))
        return xl_refuse(x, n, "initial states must be absent or zeros");
    if (len && !(len->mask == XL_MASK_LEN && len->mvalid == 1.0))
        return xl_refuse(x, n, "sequence_lens must be absent or the lengths of the ids' "
                         "padding (the engine carries each sample's length)");
    if (lstm && n->nout > 2 && n->out[2][0] && xl_uses(x, n->out[2]))
        return xl_refuse(x, n, "the last cell state (Y_c) is not an output the engine gives");
    return DL_OK;
}

/* The layer's name: the module path of the node ("/rnn/LSTM_1" -> rnn),
 * so that its tensors take state_dict's names (rnn.weight_ih_l0). */
static void rnn_name(xl *x, const onnx_node *n, char out[DL_NAME_MAX])
{
    char base[DL_NAME_MAX * 2];
    const char *slash = strrchr(n->name, '/');
    if (slash && slash > n->name)
        snprintf(base, sizeof(base), "%.*s", (int)(slash - n->name), n->name);
    else
        snprintf(base, sizeof(base), "%s", n->name[0] ? n->name : n->op);
    xl_layer_name(x, base, out);
}

/* One layer for output k of n (Y: k 0, Y_h: k 1) reading X (engine
 * [T, in]), its value reshaped to ONNX's per sample: [T, dirs, H] or
 * [dirs, H], the batch at bax. */
static dl_status rnn_output(xl *x, const onnx_node *n, int k, tvalue *xv, int dirs,
                            const onnx_tensor *const wrb[3], int bax)
{
    bool lstm = !strcmp(n->op, "LSTM");
    int g = lstm ? 4 : 3;
    int64_t h = xl_attr_i(n, "hidden_size", 0), in = xv->d[1], t = xv->d[0];
    char name[DL_NAME_MAX];
    rnn_name(x, n, name);
    json_t *l = json_pack("{s:s,s:I,s:b,s:s,s:b}", "type", lstm ? "lstm" : "gru", "hidden",
                          (json_int_t)h, "bidirectional", dirs == 2, "return",
                          k ? "last" : "sequence", "bias", wrb[2] != NULL);
    /* the layer's own value, then the reshape to ONNX's [.., dirs, H]
     * under the output's name (found first: xl_find looks from the end) */
    tvalue *raw = xl_add(x, n->out[k]);
    int64_t d[3] = { t, dirs * h }, od[3] = { t, dirs, h };
    dl_status st = raw ? xl_emit(x, l, name, &xv->src, 1, raw, k ? 1 : 2, k ? d + 1 : d)
                       : xl_nomem(x);
    for (int dir = 0; dir < dirs && !st; dir++)
        st = rnn_tensors(x, name, dir, g, h, in, wrb[0], wrb[1], wrb[2]);
    if (st)
        return st;
    onnx_node as = *n;
    as.nout = 1;
    as.out = &n->out[k];
    raw->bax = bax;
    return xl_reshape_to(x, &as, raw, k ? 2 : 3, k ? od + 1 : od);
}

dl_status xl_op_rnn(xl *x, const onnx_node *n)
{
    bool lstm = !strcmp(n->op, "LSTM");
    int g = lstm ? 4 : 3, dirs;
    int64_t h = xl_attr_i(n, "hidden_size", 0), layout = xl_attr_i(n, "layout", 0);
    tvalue *xv = xl_arg(x, n, 0);
    const onnx_tensor *wrb[3] = { xl_weight(x, n, 1), xl_weight(x, n, 2), xl_weight(x, n, 3) };
    dl_status st = rnn_check(x, n, lstm, &dirs);
    if (st)
        return st;
    /* X: [T, batch, in] (layout 0) or [batch, T, in] (1), one sample [T, in] */
    if (!xv || xv->c || is_mask(xv) || xv->nd != 2 || xv->merge || xv->bax != (layout ? 0 : 1) ||
        layout < 0 || layout > 1)
        return xl_refuse(x, n, "X must be [T, batch, in] (layout 0) or [batch, T, in] (1)");
    int64_t in = xv->d[1], gh = g * h;
    if (h < 1 || !wrb[0] || !wrb[1] || (n->nin > 3 && n->in[3][0] && !wrb[2]) ||
        wrb[0]->n != dirs * gh * in || wrb[1]->n != dirs * gh * h ||
        (wrb[2] && wrb[2]->n != dirs * 2 * gh))
        return xl_refuse(x, n, "W, R and B must be constants of [%d, %lld, %lld], [%d, %lld, "
                         "%lld] and [%d, %lld]", dirs, (long long)gh, (long long)in, dirs,
                         (long long)gh, (long long)h, dirs, (long long)(2 * gh));
    /* Y: [T, dirs, batch, H] (layout 0: the batch on axis 2) or
     * [batch, T, dirs, H]; Y_h: [dirs, batch, H] or [batch, dirs, H] */
    for (int k = 0; k < 2 && !st; k++)
        if (k < n->nout && n->out[k][0] && xl_uses(x, n->out[k]))
            st = rnn_output(x, n, k, xv, dirs, wrb, layout ? 0 : k ? 1 : 2);
    return st;
}

/* Whether layer l is an lstm or gru (type t) of these options. */
static bool rnn_like(json_t *l, const char *t, json_t *h, json_t *bi, json_t *bias)
{
    const char *type = json_string_value(json_object_get(l, "type"));
    return type && !strcmp(type, t) && json_equal(json_object_get(l, "hidden"), h) &&
           json_equal(json_object_get(l, "bidirectional"), bi) &&
           json_equal(json_object_get(l, "bias"), bias);
}

int xl_readers(xl *x, json_t *outs, const char *name)
{
    int r = 0;
    size_t i, k;
    json_t *l, *s;
    json_array_foreach(x->layers, i, l)
        json_array_foreach(json_object_get(l, "inputs"), k, s)
            r += !strcmp(json_string_value(s), name);
    json_array_foreach(outs, i, l)
        r += !strcmp(json_string_value(json_object_get(l, "from")), name);
    return r;
}

/* Renames the tensors of layer `from` (its stack levels _l<k>) as levels
 * _l<k + base> of layer `to`. */
static dl_status rename_levels(xl *x, const char *from, const char *to, int64_t base)
{
    size_t len = strlen(from);
    for (int t = 0; t < x->nt; t++) {
        const char *s = x->t[t].name, *lv;
        if (strncmp(s, from, len) || s[len] != '.' || strchr(s + len + 1, '.') ||
            !(lv = strstr(s + len, "_l")))
            continue;
        char *end;
        long k = strtol(lv + 2, &end, 10);
        size_t n = strlen(to) + strlen(s) + 24;
        char *name = malloc(n);
        if (!name)
            return xl_nomem(x);
        snprintf(name, n, "%s%.*s_l%lld%s", to, (int)(lv - (s + len)), s + len,
                 (long long)(k + base), end);
        free(x->t[t].name);
        x->t[t].name = name;
    }
    return DL_OK;
}

dl_status xl_merge_stacks(xl *x, json_t *outs)
{
    for (size_t i = 0; i < json_array_size(x->layers); i++) {
        json_t *b = json_array_get(x->layers, i);
        const char *type = json_string_value(json_object_get(b, "type"));
        if (!type || (strcmp(type, "lstm") && strcmp(type, "gru")))
            continue;
        const char *below = xl_input_of(b, 0);
        json_t *a = NULL, *l;
        size_t j;
        json_array_foreach(x->layers, j, l)
            if (j < i && !strcmp(json_string_value(json_object_get(l, "name")), below))
                a = l;
        json_t *ret = json_object_get(a, "return");
        if (!a || !rnn_like(a, type, json_object_get(b, "hidden"),
                            json_object_get(b, "bidirectional"), json_object_get(b, "bias")) ||
            !json_is_string(ret) || strcmp(json_string_value(ret), "sequence") ||
            xl_readers(x, outs, below) != 1)
            continue;
        /* b is the next levels of a: a takes them, and b's place */
        json_int_t na = json_integer_value(json_object_get(a, "layers")), nb;
        na = na ? na : 1;
        nb = json_integer_value(json_object_get(b, "layers"));
        const char *bname = json_string_value(json_object_get(b, "name"));
        dl_status st = rename_levels(x, bname, below, na);
        if (st)
            return st;
        json_object_set_new(a, "layers", json_integer(na + (nb ? nb : 1)));
        json_object_set(a, "return", json_object_get(b, "return"));
        json_t *s;
        size_t k;
        json_array_foreach(x->layers, j, l)
            json_array_foreach(json_object_get(l, "inputs"), k, s)
                if (!strcmp(json_string_value(s), bname))
                    json_array_set_new(json_object_get(l, "inputs"), k, json_string(below));
        json_array_foreach(outs, j, l)
            if (!strcmp(json_string_value(json_object_get(l, "from")), bname))
                json_object_set_new(l, "from", json_string(below));
        json_array_remove(x->layers, i--);
    }
    return DL_OK;
}
