/* layer_tensor.c: layers that move or combine a sample's dimensions,
 * written for host memory: transpose, batched matmul with broadcast
 * leading dimensions, and reduce_mean / reduce_sum over some axes. */
#include "nn/layer.h"

#include <string.h>

/* ---- transpose: a permutation of the sample's dimensions ------------------ */

/* Offset in the input of output position j. */
static int64_t perm_at(const layer *l, int64_t j)
{
    int nd = l->out_ndim;
    int64_t stride[DL_MAX_DIMS], off = 0;
    stride[nd - 1] = 1;
    for (int d = nd - 2; d >= 0; d--)
        stride[d] = stride[d + 1] * l->in_shape[d + 1];
    for (int d = nd - 1; d >= 0; d--) {
        off += (j % l->out_shape[d]) * stride[l->conf->perm[d]];
        j /= l->out_shape[d];
    }
    return off;
}

static dl_status tr_forward(layer *l, const float *x, float *y, int64_t n, bool train,
                            dl_err *err)
{
    (void)train;
    (void)err;
    for (int64_t j = 0; j < l->out_dim; j++) {
        int64_t at = perm_at(l, j);
        for (int64_t i = 0; i < n; i++)
            y[i * l->out_dim + j] = x[i * l->in_dim + at];
    }
    return DL_OK;
}

static dl_status tr_backward(layer *l, const float *x, const float *y, const float *dy,
                             float *dx, int64_t n, dl_err *err)
{
    (void)x;
    (void)y;
    (void)err;
    for (int64_t j = 0; dx && j < l->out_dim; j++) {
        int64_t at = perm_at(l, j);
        for (int64_t i = 0; i < n; i++)
            dx[i * l->in_dim + at] = dy[i * l->out_dim + j];
    }
    return DL_OK;
}

const layer_ops layer_transpose_ops = {
    .forward   = tr_forward,
    .backward  = tr_backward,
    .host_only = true,
};

/* ---- reduce_mean, reduce_sum over some axes (dropped) -------------------- */

/* Output position of input position j. */
static int64_t red_at(const layer *l, int64_t j, int mask)
{
    int64_t off = 0, stride = 1;
    for (int d = l->in_ndim - 1; d >= 0; d--) {
        int64_t c = j % l->in_shape[d];
        j /= l->in_shape[d];
        if (mask & (1 << d))
            continue;
        off += c * stride;
        stride *= l->in_shape[d];
    }
    return off;
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
    int mask = layer_reduce_mask(l->conf, l->in_ndim);
    memset(y, 0, (size_t)(n * l->out_dim) * sizeof(float));
    for (int64_t i = 0; i < n; i++)
        for (int64_t j = 0; j < l->in_dim; j++)
            y[i * l->out_dim + red_at(l, j, mask)] += x[i * l->in_dim + j];
    for (int64_t k = 0; k < n * l->out_dim; k++)
        y[k] *= red_scale(l);
    return DL_OK;
}

static dl_status red_backward(layer *l, const float *x, const float *y, const float *dy,
                              float *dx, int64_t n, dl_err *err)
{
    (void)x;
    (void)y;
    (void)err;
    int mask = layer_reduce_mask(l->conf, l->in_ndim);
    for (int64_t i = 0; dx && i < n; i++)
        for (int64_t j = 0; j < l->in_dim; j++)
            dx[i * l->in_dim + j] = dy[i * l->out_dim + red_at(l, j, mask)] * red_scale(l);
    return DL_OK;
}

const layer_ops layer_reduce_ops = {
    .forward   = red_forward,
    .backward  = red_backward,
    .host_only = true,
};

/* ---- matmul: [..., M, K] @ [..., K, N], leading dimensions broadcast ------ */

typedef struct mm_geom { int64_t m, k, n, batch; } mm_geom;

static mm_geom mm_of(const layer *l)
{
    int na = l->ins_ndim[0], nb = l->ins_ndim[1];
    mm_geom g = { l->ins_shape[0][na - 2], l->ins_shape[0][na - 1], l->ins_shape[1][nb - 1],
                  l->out_dim / (l->ins_shape[0][na - 2] * l->ins_shape[1][nb - 1]) };
    return g;
}

/* Where matrix number q of the output starts in input k (broadcast). */
static int64_t mm_at(const layer *l, int k, int64_t q)
{
    int na = l->ins_ndim[k];
    int64_t off = layer_bcast_offset(l->out_shape, l->out_ndim - 2, l->ins_shape[k], na - 2, q);
    return off * l->ins_shape[k][na - 2] * l->ins_shape[k][na - 1];
}

static dl_status mm_forward(layer *l, const float *const *xs, float *y, int64_t n, bool train,
                            dl_err *err)
{
    (void)train;
    (void)err;
    mm_geom g = mm_of(l);
    for (int64_t i = 0; i < n; i++)
        for (int64_t q = 0; q < g.batch; q++) {
            const float *a = xs[0] + i * l->ins_dim[0] + mm_at(l, 0, q);
            const float *b = xs[1] + i * l->ins_dim[1] + mm_at(l, 1, q);
            float *c = y + i * l->out_dim + q * g.m * g.n;
            for (int64_t r = 0; r < g.m; r++)
                for (int64_t col = 0; col < g.n; col++) {
                    float s = 0.0f;
                    for (int64_t t = 0; t < g.k; t++)
                        s += a[r * g.k + t] * b[t * g.n + col];
                    c[r * g.n + col] = s;
                }
        }
    return DL_OK;
}

/* dA += dC B^T and dB += A^T dC for one matrix of the batch. */
static void mm_grads(mm_geom g, const float *a, const float *b, const float *dc, float *da,
                     float *db)
{
    for (int64_t r = 0; da && r < g.m; r++)
        for (int64_t t = 0; t < g.k; t++) {
            float s = 0.0f;
            for (int64_t col = 0; col < g.n; col++)
                s += dc[r * g.n + col] * b[t * g.n + col];
            da[r * g.k + t] += s;
        }
    for (int64_t t = 0; db && t < g.k; t++)
        for (int64_t col = 0; col < g.n; col++) {
            float s = 0.0f;
            for (int64_t r = 0; r < g.m; r++)
                s += a[r * g.k + t] * dc[r * g.n + col];
            db[t * g.n + col] += s;
        }
}

static dl_status mm_backward(layer *l, const float *const *xs, const float *y, const float *dy,
                             float *const *dxs, int64_t n, dl_err *err)
{
    (void)y;
    (void)err;
    mm_geom g = mm_of(l);
    for (int k = 0; k < 2; k++)
        if (dxs[k])
            memset(dxs[k], 0, (size_t)(n * l->ins_dim[k]) * sizeof(float));
    for (int64_t i = 0; i < n; i++)
        for (int64_t q = 0; q < g.batch; q++) {
            int64_t oa = i * l->ins_dim[0] + mm_at(l, 0, q), ob = i * l->ins_dim[1] + mm_at(l, 1, q);
            mm_grads(g, xs[0] + oa, xs[1] + ob, dy + i * l->out_dim + q * g.m * g.n,
                     dxs[0] ? dxs[0] + oa : NULL, dxs[1] ? dxs[1] + ob : NULL);
        }
    return DL_OK;
}

const layer_ops layer_matmul_ops = {
    .forward_multi  = mm_forward,
    .backward_multi = mm_backward,
    .host_only      = true,
};

