/* layer_attn.c: sdpa, scaled dot-product attention over heads on a packed
 * projection. Its input [T, 3E] holds each position's query, key and
 * value side by side (nn.MultiheadAttention's in_proj output); its output
 * [T, E] each head's softmax(scale Q K^T) V, the heads side by side, as
 * the out_proj reads them. The backend's attn_* kernels read the three in
 * place; over a padded sequence a sample's keys stop at its length and
 * its queries past it give zeros, as in attention below. Also attention,
 * nn.MultiheadAttention whole (its projections around the same kernels)
 * over padded sequences. */
#include "nn/layer.h"

#include <math.h>
#include <string.h>

static dl_attn geom(const layer *l, int64_t n)
{
    int64_t t = l->in_shape[0], e = l->out_shape[1], d = e / l->conf->heads;
    float scale = l->conf->scale > 0.0f ? l->conf->scale : 1.0f / sqrtf((float)d);
    return (dl_attn){ .n = n, .heads = l->conf->heads, .tq = t, .tk = t, .dk = d, .dv = d,
                      .q_row = 3 * e, .k_row = 3 * e, .v_row = 3 * e, .o_row = e,
                      .q_smp = 3 * e * t, .k_smp = 3 * e * t, .v_smp = 3 * e * t,
                      .o_smp = e * t, .scale = scale, .causal = l->conf->causal,
                      .q_len = l->ins_len[0], .k_len = l->ins_len[0] };
}

static dl_status sdpa_forward(layer *l, const float *x, float *y, int64_t n, bool train,
                              dl_err *err)
{
    (void)train;
    dl_attn a = geom(l, n);
    int64_t e = l->out_shape[1];
    return l->be->ops->attn_fwd(l->be, &a, x, x + e, x + 2 * e, y, err);
}

static dl_status sdpa_backward(layer *l, const float *x, const float *y, const float *dy,
                               float *dx, int64_t n, dl_err *err)
{
    (void)y;
    if (!dx)
        return DL_OK;
    dl_attn a = geom(l, n);
    int64_t e = l->out_shape[1];
    return l->be->ops->attn_bwd(l->be, &a, x, x + e, x + 2 * e, dy, dx, dx + e, dx + 2 * e,
                                err);
}

static bool sdpa_supported(const layer *l)
{
    return l->be->ops->attn_fwd && l->be->ops->attn_bwd;
}

const layer_ops layer_sdpa_ops = {
    .forward   = sdpa_forward,
    .backward  = sdpa_backward,
    .supported = sdpa_supported,
};

/* ---- attention ------------------------------------------------------------------
 * nn.MultiheadAttention(E, heads, bias, batch_first=True) called as
 * mha(q, kv, kv, key_padding_mask=<keys past their length>, attn_mask=
 * <causal>, need_weights=False): one input is self-attention (kv = q), two
 * a query [T, E] and keys and values [S, E]. Its parameters are
 * PyTorch's, names and layouts: in_proj_weight [3E, E] (W_q, W_k, W_v
 * stacked), in_proj_bias [3E], out_proj.weight [E, E], out_proj.bias [E].
 * The projections are the backend's GEMMs over every position (padded
 * ones are finite; batch-invariant inference takes the row-exact GEMM as
 * the dense layer does), the attention its attn_* kernels with each
 * sample's lengths: keys past the keys' length get no weight, queries past
 * the query's length give zeros (so the output there is out_proj.bias) and
 * no gradient. */

static int64_t att_e(const layer *l) { return l->ins_shape[0][1]; }
static int64_t att_t(const layer *l) { return l->ins_shape[0][0]; }
static int64_t att_s(const layer *l) { return l->ins_shape[l->nin - 1][0]; }
static param_slot *att_out_w(layer *l) { return &l->p[l->conf->bias ? 2 : 1]; }

/* Floats of a batch of n's projections: self-attention's [Q K V] a
 * position ([n, T, 3E]), or the query's Q [n, T, E] then the keys' [K V]
 * [n, S, 2E]. */
static int64_t att_proj_floats(const layer *l, int64_t n)
{
    return n * att_e(l) * (att_t(l) + 2 * att_s(l));
}

static void att_declare(layer *l)
{
    int64_t e = att_e(l);
    layer_declare(l, "in_proj_weight", true, 2, 3 * e, e, 0, 0);
    if (l->conf->bias)
        layer_declare(l, "in_proj_bias", true, 1, 3 * e, 0, 0, 0);
    layer_declare(l, "out_proj.weight", true, 2, e, e, 0, 0);
    if (l->conf->bias)
        layer_declare(l, "out_proj.bias", true, 1, e, 0, 0, 0);
}

/* PyTorch's _reset_parameters: xavier_uniform_ on in_proj_weight (fans E
 * and 3E), out_proj.weight as nn.Linear (kaiming_uniform with a = sqrt 5:
 * bound 1/sqrt(E)), both biases zero. */
static void att_init(layer *l, dl_rng *rng)
{
    int64_t e = att_e(l);
    layer_fill_uniform(l, l->p[0].data, 3 * e * e, sqrtf(6.0f / (float)(4 * e)), rng);
    layer_fill_uniform(l, att_out_w(l)->data, e * e, 1.0f / sqrtf((float)e), rng);
    if (l->conf->bias) {
        memset(l->p[1].data, 0, (size_t)(3 * e) * sizeof(float));
        memset(l->p[3].data, 0, (size_t)e * sizeof(float));
    }
}

/* Kept from forward to backward: the projections, then the attention's
 * output [n, T, E] (the out_proj's input). */
static size_t att_aux(const layer *l, int64_t n)
{
    return (size_t)(att_proj_floats(l, n) + n * att_t(l) * att_e(l)) * sizeof(float);
}

/* Backward's scratch: the attention output's gradient [n, T, E], then
 * the projections' (laid out as they are). */
static int64_t att_work(const layer *l, int64_t n)
{
    return att_proj_floats(l, n) + n * att_t(l) * att_e(l);
}

/* How the attention kernels read the projections at proj (and write
 * their gradients at the same offsets of another buffer). */
typedef struct att_view {
    dl_attn a;
    int64_t q, k, v;            /* offsets of Q, K and V, floats */
} att_view;

static att_view att_view_of(const layer *l, int64_t n)
{
    int64_t e = att_e(l), t = att_t(l), s = att_s(l), d = e / l->conf->heads;
    bool self = l->nin == 1;
    int64_t qw = self ? 3 * e : e, kw = self ? 3 * e : 2 * e;   /* row widths */
    int64_t k = self ? e : n * t * e;
    return (att_view){
        .a = { .n = n, .heads = l->conf->heads, .tq = t, .tk = s, .dk = d, .dv = d,
               .q_row = qw, .k_row = kw, .v_row = kw, .o_row = e,
               .q_smp = qw * t, .k_smp = kw * s, .v_smp = kw * s, .o_smp = e * t,
               .scale = 1.0f / sqrtf((float)d), .causal = l->conf->causal,
               .q_len = l->ins_len[0], .k_len = l->ins_len[l->nin - 1] },
        .q = 0, .k = k, .v = k + e };
}

/* y (r, out) = x (r, E) W^T + b for W (out, E) and b (NULL: none): the
 * backend's GEMM; in batch-invariant inference (exact) its row-exact one,
 * else one row at a time, as the dense layer runs. */
static dl_status att_proj(layer *l, bool exact, const float *x, int64_t r, const float *w,
                          const float *b, int64_t out, float *y, dl_err *err)
{
    const dl_backend_ops *ops = l->be->ops;
    int64_t e = att_e(l);
    dl_status st = DL_ERR_UNAVAILABLE;
    if (exact && ops->gemm_bias_act_rows)
        st = ops->gemm_bias_act_rows(l->be, r, out, e, x, w, b, NULL, y, err);
    if (st != DL_ERR_UNAVAILABLE)
        return st;
    if (err)
        *err = (dl_err){0};
    int64_t m = exact ? 1 : r;  /* rows a call */
    for (int64_t i = 0; i < r; i += m) {
        if (ops->gemm_bias_act)
            st = ops->gemm_bias_act(l->be, m, out, e, x + i * e, w, b, NULL, y + i * out, err);
        else if ((st = ops->gemm(l->be, false, true, m, out, e, 1.0f, x + i * e, w, 0.0f,
                                 y + i * out, err)) == DL_OK && b)
            ops->bias_add(l->be, y + i * out, b, m, out);
        if (st != DL_OK)
            return st;
    }
    return DL_OK;
}

/* Decoding (l->dec, generate.c): only the pass's new positions are
 * computed. A causal self-attention appends each sample's new keys and
 * values to its cache ([max_context, 2E]: K then V a position) and its
 * queries attend over the cache up to themselves; a cross-attention
 * caches the source's keys and values ([source max_length, 2E]) when its
 * sequence starts and reads them in every later step. */
static dl_status att_decode(layer *l, const float *const *xs, float *y, int64_t n, bool exact,
                            dl_err *err)
{
    const dl_backend_ops *ops = l->be->ops;
    const layer_dec *d = l->dec;
    int64_t e = att_e(l), t = att_t(l), rq = n * t, cs = l->cache_stride;
    bool self = l->nin == 1, bias = l->conf->bias;
    const float *w = l->p[0].data, *b = bias ? l->p[1].data : NULL;
    float *proj = l->aux, *ctx = proj + att_proj_floats(l, n);
    int64_t qw = self ? 3 * e : e;
    dl_status st = att_proj(l, exact, xs[0], rq, w, b, qw, proj, err);
    if (st == DL_OK && self) {
        for (int64_t s = 0; s < n; s++) {       /* the new keys and values, cached */
            dl_strided g = { .nd = 2, .shape = { l->ins_len[0][s], 2 * e },
                             .st = { { 3 * e, 1 }, { 2 * e, 1 } } };
            ops->copy_strided(l->be, &g, proj + s * t * 3 * e + e,
                              l->cache + s * cs + d->past[s] * 2 * e);
        }
    } else if (st == DL_OK && !d->step) {
        int64_t src = att_s(l);                  /* the source's, cached whole */
        float *kv = proj + rq * e;
        st = att_proj(l, exact, xs[1], n * src, w + e * e, bias ? b + e : NULL, 2 * e, kv, err);
        for (int64_t s = 0; st == DL_OK && s < n; s++)
            ops->copy(l->be, l->cache + s * cs, kv + s * src * 2 * e, src * 2 * e);
    }
    if (st != DL_OK)
        return st;
    dl_attn a = { .n = n, .heads = l->conf->heads, .tq = t, .tk = cs / (2 * e),
                  .dk = e / l->conf->heads, .dv = e / l->conf->heads, .q_row = qw,
                  .k_row = 2 * e, .v_row = 2 * e, .o_row = e, .q_smp = qw * t, .k_smp = cs,
                  .v_smp = cs, .o_smp = e * t, .causal = self, .q_len = l->ins_len[0],
                  .k_len = self ? d->kv_len : d->src_len, .q_off = self ? d->past : NULL };
    a.scale = 1.0f / sqrtf((float)a.dk);
    st = ops->attn_fwd(l->be, &a, proj, l->cache, l->cache + e, ctx, err);
    if (st == DL_OK)
        st = att_proj(l, exact, ctx, rq, att_out_w(l)->data, bias ? l->p[3].data : NULL, e, y,
                      err);
    return st;
}

static dl_status att_forward(layer *l, const float *const *xs, float *y, int64_t n, bool train,
                             dl_err *err)
{
    if (l->dec)
        return att_decode(l, xs, y, n, l->invariant && !train, err);
    int64_t e = att_e(l), rq = n * att_t(l), rk = n * att_s(l);
    bool exact = l->invariant && !train, bias = l->conf->bias;
    const float *w = l->p[0].data, *b = bias ? l->p[1].data : NULL;
    float *proj = l->aux, *ctx = proj + att_proj_floats(l, n);
    att_view v = att_view_of(l, n);
    dl_status st;
    if (l->nin == 1)        /* [Q K V] = x W_in^T + b_in */
        st = att_proj(l, exact, xs[0], rq, w, b, 3 * e, proj, err);
    else if ((st = att_proj(l, exact, xs[0], rq, w, b, e, proj, err)) == DL_OK)
        st = att_proj(l, exact, xs[1], rk, w + e * e, bias ? b + e : NULL, 2 * e, proj + v.k,
                      err);
    if (st == DL_OK)
        st = l->be->ops->attn_fwd(l->be, &v.a, proj + v.q, proj + v.k, proj + v.v, ctx, err);
    if (st == DL_OK)
        st = att_proj(l, exact, ctx, rq, att_out_w(l)->data, bias ? l->p[3].data : NULL, e, y,
                      err);
    return st;
}

/* Rows [o0, o0 + out) of the input projection, from their gradient dp
 * (r, out) and input x (r, E): dW += dp^T x, db += the sum of dp's rows,
 * dx = dp W (dx NULL: none). dp is zero past the lengths (attn_bwd), so
 * padded positions add nothing and get zero gradients. */
static dl_status att_in_proj_bwd(layer *l, const float *x, int64_t r, int64_t o0, int64_t out,
                                 const float *dp, float *dx, dl_err *err)
{
    const dl_backend_ops *ops = l->be->ops;
    int64_t e = att_e(l);
    dl_status st = ops->gemm(l->be, true, false, out, e, r, 1.0f, dp, x, 1.0f,
                             l->p[0].grad + o0 * e, err);
    if (st == DL_OK && l->conf->bias)
        ops->bias_grad(l->be, l->p[1].grad + o0, dp, r, out);
    if (st == DL_OK && dx)
        st = ops->gemm(l->be, false, false, r, e, out, 1.0f, dp, l->p[0].data + o0 * e, 0.0f,
                       dx, err);
    return st;
}

static dl_status att_backward(layer *l, const float *const *xs, const float *y, const float *dy,
                              float *const *dxs, int64_t n, dl_err *err)
{
    (void)y;
    const dl_backend_ops *ops = l->be->ops;
    int64_t e = att_e(l), rq = n * att_t(l), rk = n * att_s(l);
    float *proj = l->aux, *ctx = proj + att_proj_floats(l, n);
    float *dctx = l->work, *dproj = dctx + rq * e;
    param_slot *wo = att_out_w(l);
    att_view v = att_view_of(l, n);
    /* out_proj: dW_o += dy^T ctx, db_o += the sum of dy's rows, dctx =
     * dy W_o. Past the query lengths dy is zero (the padding rule) and so
     * is ctx: those rows add nothing. */
    dl_status st = ops->gemm(l->be, true, false, e, e, rq, 1.0f, dy, ctx, 1.0f, wo->grad, err);
    if (st == DL_OK && l->conf->bias)
        ops->bias_grad(l->be, l->p[3].grad, dy, rq, e);
    if (st == DL_OK)
        st = ops->gemm(l->be, false, false, rq, e, e, 1.0f, dy, wo->data, 0.0f, dctx, err);
    if (st == DL_OK)
        st = ops->attn_bwd(l->be, &v.a, proj + v.q, proj + v.k, proj + v.v, dctx, dproj + v.q,
                           dproj + v.k, dproj + v.v, err);
    if (st != DL_OK)
        return st;
    if (l->nin == 1)
        return att_in_proj_bwd(l, xs[0], rq, 0, 3 * e, dproj, dxs[0], err);
    st = att_in_proj_bwd(l, xs[0], rq, 0, e, dproj, dxs[0], err);
    if (st == DL_OK)
        st = att_in_proj_bwd(l, xs[1], rk, e, 2 * e, dproj + v.k, dxs[1], err);
    return st;
}

const layer_ops layer_attention_ops = {
    .declare        = att_declare,
    .init           = att_init,
    .aux_bytes      = att_aux,
    .work_floats    = att_work,
    .forward_multi  = att_forward,
    .backward_multi = att_backward,
    .supported      = sdpa_supported,
};
