/* layer_tensor.c: layers that move or combine a sample's dimensions:
 * transpose, reduce_mean / reduce_sum over some axes, and matmul with
 * broadcast leading dimensions, as strided copies, reductions and batched
 * GEMMs of the backend. */
#include "nn/layer.h"

#include <string.h>

bool layer_copy_supported(const layer *l) { return l->be->ops->copy_strided != NULL; }

bool layer_reduce_supported(const layer *l) { return l->be->ops->reduce_fwd && l->be->ops->reduce_bwd; }

/* ---- transpose: a permutation of the sample's dimensions ------------------ */

/* Over the batch of outputs: the input (operand 0) read at the permuted
 * strides, the output (operand 1) dense. */
/* Channels last (DL_NHWC_*, model_plan.c: H and W stay last): per sample
 * (H W, channel dimensions), the channel dimensions permuted. */
static dl_strided tr_geom_cl(const layer *l, int64_t n)
{
    int k = l->in_ndim - 2;
    int64_t hw = l->in_shape[k] * l->in_shape[k + 1], in_st[DL_MAX_DIMS], out_st[DL_MAX_DIMS];
    layer_dense_strides(k, l->in_shape, in_st);
    layer_dense_strides(k, l->out_shape, out_st);
    int64_t ch = l->in_dim / hw;
    dl_strided g = { .nd = k + 2, .shape = { n, hw } };
    g.st[0][0] = g.st[1][0] = l->in_dim;
    g.st[0][1] = g.st[1][1] = ch;
    for (int d = 0; d < k; d++) {
        g.shape[d + 2] = l->out_shape[d];
        g.st[0][d + 2] = in_st[l->conf->perm[d]];
        g.st[1][d + 2] = out_st[d];
    }
    return g;
}

static dl_strided tr_geom(const layer *l, int64_t n)
{
    if (l->blocked & DL_NHWC_Y)
        return tr_geom_cl(l, n);
    dl_strided g;
    layer_strided_out(l, n, &g);
    memcpy(g.st[1], g.st[2], sizeof(g.st[1]));
    memset(g.st[2], 0, sizeof(g.st[2]));
    int64_t in_st[DL_MAX_DIMS];
    layer_dense_strides(l->in_ndim, l->in_shape, in_st);
    g.st[0][0] = l->in_dim;
    for (int d = 0; d < l->out_ndim; d++)
        g.st[0][d + 1] = in_st[l->conf->perm[d]];
    return g;
}

static dl_status tr_forward(layer *l, const float *x, float *y, int64_t n, bool train,
                            dl_err *err)
{
    (void)train;
    (void)err;
    dl_strided g = tr_geom(l, n);
    l->be->ops->copy_strided(l->be, &g, x, y);
    return DL_OK;
}

static dl_status tr_backward(layer *l, const float *x, const float *y, const float *dy,
                             float *dx, int64_t n, dl_err *err)
{
    (void)x;
    (void)y;
    (void)err;
    dl_strided g = tr_geom(l, n);
    layer_strided_swap(&g);
    if (dx)
        l->be->ops->copy_strided(l->be, &g, dy, dx);
    return DL_OK;
}

const layer_ops layer_transpose_ops = {
    .forward   = tr_forward,
    .backward  = tr_backward,
    .supported = layer_copy_supported,
};

/* ---- reduce_mean, reduce_sum over some axes (dropped) -------------------- */

/* Over the batch of inputs: the input (operand 0) dense, the output
 * (operand 1) with stride 0 along the reduced axes. */
static dl_strided red_geom(const layer *l, int64_t n)
{
    int mask = layer_reduce_mask(l->conf, l->in_ndim);
    dl_strided g = { .nd = l->in_ndim + 1, .shape = { n } };
    memcpy(g.shape + 1, l->in_shape, (size_t)l->in_ndim * sizeof(int64_t));
    layer_dense_strides(g.nd, g.shape, g.st[0]);
    int64_t s = 1;
    for (int d = l->in_ndim - 1; d >= 0; d--) {
        g.st[1][d + 1] = mask & (1 << d) ? 0 : s;
        s *= mask & (1 << d) ? 1 : l->in_shape[d];
    }
    g.st[1][0] = l->out_dim;
    return g;
}

static float red_scale(const layer *l)
{
    return l->conf->type == DL_LAYER_REDUCE_MEAN ? (float)l->out_dim / (float)l->in_dim : 1.0f;
}

static dl_status red_forward(layer *l, const float *x, float *y, int64_t n, bool train,
                             dl_err *err)
{
    (void)train;
    (void)err;
    dl_strided g = red_geom(l, n);
    l->be->ops->reduce_fwd(l->be, &g, x, y, red_scale(l));
    return DL_OK;
}

static dl_status red_backward(layer *l, const float *x, const float *y, const float *dy,
                              float *dx, int64_t n, dl_err *err)
{
    (void)x;
    (void)y;
    (void)err;
    dl_strided g = red_geom(l, n);
    if (dx)
        l->be->ops->reduce_bwd(l->be, &g, dy, dx, red_scale(l));
    return DL_OK;
}

const layer_ops layer_reduce_ops = {
    .forward   = red_forward,
    .backward  = red_backward,
    .supported = layer_reduce_supported,
};

/* ---- matmul: [..., M, K] @ [..., K, N], leading dimensions broadcast ------ */

/* The matrices of a batch of n: `count` products C_q = A_q B_q, q over
 * the samples and the output's leading dimensions. */
typedef struct mm_geom { int64_t m, k, n, count; } mm_geom;

static mm_geom mm_of(const layer *l, int64_t n)
{
    int na = l->ins_ndim[0], nb = l->ins_ndim[1];
    int64_t m = l->ins_shape[0][na - 2], k = l->ins_shape[0][na - 1];
    int64_t cols = l->ins_shape[1][nb - 1];
    mm_geom g = { m, k, cols, n * (l->out_dim / (m * cols)) };
    return g;
}

/* Where matrix q of the batch starts in input k (broadcast). */
static int64_t mm_at(const layer *l, int k, int64_t q)
{
    int na = l->ins_ndim[k];
    int64_t per = l->out_dim / (l->out_shape[l->out_ndim - 2] * l->out_shape[l->out_ndim - 1]);
    int64_t off = layer_bcast_offset(l->out_shape, l->out_ndim - 2, l->ins_shape[k], na - 2,
                                     q % per);
    return (q / per) * l->ins_dim[k] + off * l->ins_shape[k][na - 2] * l->ins_shape[k][na - 1];
}

/* Input k's matrices as one stride (*st: q's matrix at q * st), when
 * they are so laid out; false when broadcasting breaks the progression. */
static bool mm_stride(const layer *l, int k, int64_t count, int64_t *st)
{
    *st = count > 1 ? mm_at(l, k, 1) : 0;
    for (int64_t q = 2; q < count; q++)
        if (mm_at(l, k, q) != q * *st)
            return false;
    return true;
}

static dl_status mm_forward(layer *l, const float *const *xs, float *y, int64_t n, bool train,
                            dl_err *err)
{
    (void)train;
    mm_geom g = mm_of(l, n);
    const dl_backend_ops *o = l->be->ops;
    int64_t sa, sb, mn = g.m * g.n;
    if (!mm_stride(l, 0, g.count, &sa) || !mm_stride(l, 1, g.count, &sb)) {
        for (int64_t q = 0; q < g.count; q++) {
            dl_status st = o->gemm(l->be, false, false, g.m, g.n, g.k, 1.0f,
                                   xs[0] + mm_at(l, 0, q), xs[1] + mm_at(l, 1, q), 0.0f,
                                   y + q * mn, err);
            if (st != DL_OK)
                return st;
        }
        return DL_OK;
    }
    /* One weight matrix for dense rows (a linear layer): one GEMM of all
     * the rows, unless every sample must see the same kernels alone. */
    if (sb == 0 && sa == g.m * g.k && !l->invariant)
        return o->gemm(l->be, false, false, g.count * g.m, g.n, g.k, 1.0f, xs[0], xs[1], 0.0f,
                       y, err);
    return o->gemm_batched(l->be, false, false, g.m, g.n, g.k, 1.0f, xs[0], sa, xs[1], sb, 0.0f,
                           y, mn, g.count, err);
}

/* dA_q = dC_q B_q^T (k 0) or dB_q = A_q^T dC_q (k 1) of every q, into
 * input k's gradient: batched where input k's matrices are distinct,
 * else (a matrix shared by several q) accumulated one q at a time. */
static dl_status mm_grad(layer *l, const float *const *xs, const float *dy, float *dx, int k,
                         mm_geom g, int64_t n, dl_err *err)
{
    const dl_backend_ops *o = l->be->ops;
    int64_t sa, sb, mn = g.m * g.n;
    bool strided = mm_stride(l, 0, g.count, &sa) && mm_stride(l, 1, g.count, &sb);
    int64_t size = k == 0 ? g.m * g.k : g.k * g.n, sk = k == 0 ? sa : sb;
    /* rows x cols = op(P) op(Q), inner dimension `in`. */
    int64_t rows = k == 0 ? g.m : g.k, cols = k == 0 ? g.k : g.n, in = k == 0 ? g.n : g.m;
    bool ta = k == 1, tb = k == 0;
    if (strided && (g.count == 1 || sk >= size)) {
        const float *p = k == 0 ? dy : xs[0], *q = k == 0 ? xs[1] : dy;
        int64_t sp = k == 0 ? mn : sa, sq = k == 0 ? sb : mn;
        return o->gemm_batched(l->be, ta, tb, rows, cols, in, 1.0f, p, sp, q, sq, 0.0f, dx,
                               sk, g.count, err);
    }
    /* A weight shared by dense rows: one GEMM over all of them. */
    if (strided && k == 1 && sb == 0 && sa == g.m * g.k && !l->invariant)
        return o->gemm(l->be, true, false, g.k, g.n, g.count * g.m, 1.0f, xs[0], dy, 0.0f, dx,
                       err);
    o->fill(l->be, dx, n * l->ins_dim[k], 0.0f);
    for (int64_t q = 0; q < g.count; q++) {
        const float *p = k == 0 ? dy + q * mn : xs[0] + mm_at(l, 0, q);
        const float *r = k == 0 ? xs[1] + mm_at(l, 1, q) : dy + q * mn;
        dl_status st = o->gemm(l->be, ta, tb, rows, cols, in, 1.0f, p, r, 1.0f,
                               dx + mm_at(l, k, q), err);
        if (st != DL_OK)
            return st;
    }
    return DL_OK;
}

static dl_status mm_backward(layer *l, const float *const *xs, const float *y, const float *dy,
                             float *const *dxs, int64_t n, dl_err *err)
{
    (void)y;
    mm_geom g = mm_of(l, n);
    for (int k = 0; k < 2; k++) {
        dl_status st = dxs[k] ? mm_grad(l, xs, dy, dxs[k], k, g, n, err) : DL_OK;
        if (st != DL_OK)
            return st;
    }
    return DL_OK;
}

static bool mm_supported(const layer *l) { return l->be->ops->gemm_batched != NULL; }

const layer_ops layer_matmul_ops = {
    .forward_multi  = mm_forward,
    .backward_multi = mm_backward,
    .supported      = mm_supported,
};
