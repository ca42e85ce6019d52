/* onnx_layout.c: where the batch sits in an ONNX tensor that the engine
 * holds per sample, and how Transpose, Reshape and broadcasting move it.
 *
 * The rule. Every computed ONNX tensor T is one engine tensor E of per-
 * sample shape e (the batch implicit, axis 0 of the engine) seen through a
 * layout (bax, merge):
 *   - XL_BATCH_ALONE: T is E with its batch axis moved to ONNX axis bax;
 *     e is T's shape without axis bax.
 *   - XL_BATCH_OUTER: ONNX axis bax is B * m, the batch the slower index
 *     (PyTorch's (S, B*H, D) in attention); e is T's shape with m at bax.
 *   - XL_BATCH_INNER: ONNX axis bax is m * B, the batch the faster index
 *     ((S*B, E) before an output projection); e as for OUTER.
 * In row-major order T is then P fixed elements, the batch, Q fixed
 * elements; one sample's data is the P x Q block, in E's order. A
 * Transpose permutes ONNX axes: the batch goes where its axis goes and E
 * is transposed by the other axes (nothing when they keep their order). A
 * Reshape keeps row-major order: it is per sample when the target splits
 * into P' before the batch and Q' after with |P'| = |P|, |Q'| = |Q|, and E
 * is merely reshaped. Graph inputs and outputs are ALONE at axis 0; any
 * other operator needs that too, unless it follows (xl_layout_follows). */
#include "onnx/translate.h"

#include <stdio.h>
#include <string.h>

/* *acc *= v for sizes: false when the product leaves [1, ONNX_BATCH_KMAX). */
static bool times(int64_t *acc, int64_t v)
{
    return v >= 1 && !__builtin_mul_overflow(*acc, v, acc) && *acc < ONNX_BATCH_KMAX;
}

int xl_rank(const tvalue *v) { return v->merge ? v->nd : v->nd + 1; }

bool xl_std(const tvalue *v) { return v->bax == 0 && v->merge == XL_BATCH_ALONE; }

int64_t xl_batch_times(int64_t k) { return ONNX_BATCH + (k - 1); }

int64_t xl_batch_k(int64_t v)
{
    return v < ONNX_BATCH + ONNX_BATCH_KMAX ? v - ONNX_BATCH + 1 : 0;
}

int xl_axis(const tvalue *v, int64_t a)
{
    int r = xl_rank(v);
    int64_t k = a < 0 ? a + r : a;
    if (k < 0 || k >= r || k == v->bax)
        return -1;
    return v->merge || k < v->bax ? (int)k : (int)k - 1;
}

int xl_onnx_dims(const tvalue *v, int64_t *o)
{
    int r = xl_rank(v);
    for (int k = 0, e = 0; k < r; k++) {
        if (k != v->bax)
            o[k] = v->d[e++];
        else if (v->merge)
            o[k] = xl_batch_times(v->d[e++]);
        else
            o[k] = ONNX_BATCH;
    }
    return r;
}

const char *xl_layout_text(const tvalue *v, char *buf, size_t n)
{
    if (v->merge)
        snprintf(buf, n, "merged with %lld into axis %d", (long long)v->d[v->bax], v->bax);
    else
        snprintf(buf, n, "on axis %d", v->bax);
    return buf;
}

bool xl_same_layout(const tvalue *a, const tvalue *b)
{
    return xl_rank(a) == xl_rank(b) && a->bax == b->bax && a->merge == b->merge &&
           (!a->merge || a->d[a->bax] == b->d[b->bax]);
}

const char *xl_transpose_layout(const tvalue *v, const int64_t *perm, int np, tvalue *out,
                                int64_t *eperm)
{
    int r = xl_rank(v);
    bool seen[ONNX_MAX_DIMS] = { false };
    if (np != r)
        return "perm does not list every axis";
    *out = *v;
    int ne = 0;
    for (int j = 0; j < r; j++) {
        if (perm[j] < 0 || perm[j] >= r || seen[perm[j]])
            return "perm is not a permutation";
        seen[perm[j]] = true;
        if (perm[j] == v->bax)
            out->bax = j;
        if (perm[j] != v->bax || v->merge) {
            int e = v->merge || perm[j] < v->bax ? (int)perm[j] : (int)perm[j] - 1;
            eperm[ne] = e;
            out->d[ne++] = v->d[e];
        }
    }
    return NULL;
}

/* The target's entries resolved: 0 copied from the input (unless
 * allowzero), one -1 inferred; *j the batch's axis and *k its factor.
 * total is |P| * |Q|; lone: the input holds the batch alone on axis 0,
 * where a leading literal 1 (an export at batch 1) stands for it. */
static const char *resolve(const int64_t *o, int r, int64_t *t, int nt, bool allowzero,
                           bool lone, int64_t total, int *j, int64_t *k)
{
    int minus = -1;
    int64_t fixed = 1;
    *j = -1;
    for (int i = 0; i < nt; i++) {
        if (t[i] == 0 && !allowzero && i < r)
            t[i] = o[i];
        if (xl_batch_k(t[i])) {
            if (*j >= 0)
                return "the batch appears twice in the target shape";
            *j = i;
            *k = xl_batch_k(t[i]);
        } else if (t[i] == -1 && minus < 0) {
            minus = i;
        } else if (!times(&fixed, t[i])) {
            return "the target shape has an entry the engine cannot fix";
        }
    }
    int64_t kf = *j >= 0 ? *k : 1;
    if (!times(&kf, fixed))
        return "the target shape is too large";
    if (*j >= 0 && minus >= 0) {
        if (total % kf)
            return "the target shape does not divide the sample";
        t[minus] = total / kf;
    } else if (minus >= 0) {
        if (total % fixed)
            return "the target shape does not divide the sample";
        *j = minus;
        *k = total / fixed;
    } else if (*j < 0 && lone && t[0] == 1 && fixed == total) {
        *j = 0;   /* a batch-1 export's literal 1 */
        *k = 1;
    } else if (*j < 0) {
        return "the target shape fixes the batch size";
    } else if (kf != total) {
        return "the target shape does not hold the sample";
    }
    t[*j] = *k;   /* from here on, the batch's fixed factor alone */
    return NULL;
}

const char *xl_reshape_layout(const tvalue *v, const int64_t *target, int nt, bool allowzero,
                              tvalue *out)
{
    int64_t o[ONNX_MAX_DIMS], t[ONNX_MAX_DIMS], p = 1, q = 1, k = 0;
    int r = xl_onnx_dims(v, o), j;
    if (nt < 1 || nt > ONNX_MAX_DIMS)
        return "the target shape has too many dimensions";
    memcpy(t, target, (size_t)nt * sizeof(*t));
    int pcut = v->bax + (v->merge == XL_BATCH_INNER ? 1 : 0);
    for (int e = 0; e < v->nd; e++)
        if (!times(e < pcut ? &p : &q, v->d[e]))
            return "the tensor is too large";
    int64_t total = p;
    if (!times(&total, q))
        return "the tensor is too large";
    const char *why = resolve(o, r, t, nt, allowzero, xl_std(v), total, &j, &k);
    if (why)
        return why;
    int64_t pre = 1, post = 1;
    for (int i = 0; i < nt; i++)
        if (i != j && !times(i < j ? &pre : &post, t[i]))
            return "the target shape is too large";
    if (p % pre || q % post || (p / pre) * (q / post) != k || (p / pre > 1 && q / post > 1))
        return "the target shape mixes the batch with other axes in an order that is not "
               "per sample";
    memset(out, 0, sizeof(*out));
    out->bax = j;
    out->merge = p / pre > 1 ? XL_BATCH_INNER : q / post > 1 ? XL_BATCH_OUTER : XL_BATCH_ALONE;
    for (int i = 0; i < nt; i++)
        if (i != j || out->merge)
            out->d[out->nd++] = t[i];
    return NULL;
}

const char *xl_const_dims(const tvalue *v, const onnx_tensor *c, int *nd, int64_t *d)
{
    int r = xl_rank(v), rc = c->ndim, at = v->bax - (r - rc);   /* c's axis of the batch */
    if (rc > r)
        return "has more dimensions than the tensor it meets";
    if (at >= 0 && c->dims[at] != 1)
        return "does not broadcast over the batch";
    *nd = 0;
    for (int i = 0; i < rc; i++)
        if (i != at || v->merge)
            d[(*nd)++] = c->dims[i];
    if (*nd == 0)
        d[(*nd)++] = 1;
    return NULL;
}

bool xl_layout_follows(const char *op)
{
    static const char *const ops[] = {
        "Transpose", "Reshape", "MatMul", "Gemm", "Add", "Sub", "Mul", "Div", "Softmax",
        "LogSoftmax", "Slice", "Shape", "LayerNormalization", "Relu", "Sigmoid", "Tanh",
        "Sqrt", "Erf", "HardSwish", "LeakyRelu", "HardSigmoid", "Clip", "Pow", "Identity",
        "Dropout", "Cast", "Gather", "Concat", "Where", "LSTM", "GRU", "Squeeze",
        "Unsqueeze",
    };
    for (size_t k = 0; k < sizeof(ops) / sizeof(ops[0]); k++)
        if (!strcmp(ops[k], op))
            return true;
    return false;
}
