/* layer_conv.c: 2-D convolution (im2col + one GEMM a channel group for
 * the whole batch, dilated windows through im2col) and max / average
 * pooling, all over NCHW batches. */
#include "nn/layer.h"

#include <math.h>

static dl_conv_geom geom(const layer *l, int64_t n)
{
    const dl_layer_conf *c = l->conf;
    dl_conv_geom g = { .n = n, .c = l->in_shape[0], .h = l->in_shape[1],
                       .w = l->in_shape[2], .oc = l->out_shape[0],
                       .oh = l->out_shape[1], .ow = l->out_shape[2],
                       .kh = c->kh, .kw = c->kw, .sh = c->sh, .sw = c->sw,
                       .ph = c->ph, .pw = c->pw, .blocked = l->blocked,
                       .dh = c->dh, .dw = c->dw, .groups = c->groups };
    return g;
}

/* Channel groups of a convolution (1 for pooling). */
static int64_t groups_of(const layer *l) { return l->conf->groups > 1 ? l->conf->groups : 1; }

/* Rows of the im2col matrix, K = C * kh * kw; a group's weights read
 * wfan = K / groups of them. */
static int64_t fan_in(const layer *l) { return l->in_shape[0] * l->conf->kh * l->conf->kw; }
static int64_t wfan(const layer *l) { return fan_in(l) / groups_of(l); }

/* A convolution whose activations may stay in the engine's blocked
 * layout: not dilated, and either ungrouped, depthwise (a filter a
 * channel) or with whole channel blocks in each group. The others run in
 * plain NCHW, through the engine or im2col. */
static bool plain(const layer *l)
{
    int64_t g = groups_of(l), c = l->in_shape[0], oc = l->conf->filters;
    int64_t B = l->be->engine_block;
    if (l->conf->dh > 1 || l->conf->dw > 1)
        return false;
    if (g == 1)
        return true;
    if (g == c && g == oc)
        return true;
    return B > 0 && (c / g) % B == 0 && (oc / g) % B == 0;
}

static void conv_declare(layer *l)
{
    layer_declare(l, "weight", true, 4, l->conf->filters, l->in_shape[0] / groups_of(l),
                  l->conf->kh, l->conf->kw);
    if (l->conf->bias)
        layer_declare(l, "bias", true, 1, l->conf->filters, 0, 0, 0);
}

static void conv_init(layer *l, dl_rng *rng)
{
    float bound = 1.0f / sqrtf((float)wfan(l));
    layer_fill_uniform(l, l->p[0].data, l->conf->filters * wfan(l), bound, rng);
    if (l->conf->bias)
        layer_fill_uniform(l, l->p[1].data, l->conf->filters, bound, rng);
}

/* The batch is processed in chunks whose im2col matrix is about the
 * backend's chunk size: on the CPU ~2 MB, so that it is still in cache
 * when the GEMM reads it; on a GPU much larger. */
static int64_t chunk_of(const layer *l, int64_t n)
{
    int64_t per = fan_in(l) * l->out_shape[1] * l->out_shape[2];
    int64_t cap = l->be->chunk_floats > 0 ? l->be->chunk_floats : DL_CHUNK_FLOATS;
    int64_t c = cap / (per > 0 ? per : 1);
    return c < 1 ? 1 : c > n ? n : c;
}

/* A training forward through im2col keeps each chunk's cols (K, B*OHW)
 * for the backward, which then skips its own im2col: K * OHW floats a
 * sample (never touched, so never resident, when the engine runs or in
 * inference). */
static size_t conv_aux(const layer *l, int64_t n)
{
    return (size_t)(fan_in(l) * n * l->out_shape[1] * l->out_shape[2]) * sizeof(float);
}

/* cols (K, B*OHW) then the (OC, B*OHW) product, for a chunk of B. */
static int64_t conv_work(const layer *l, int64_t n)
{
    int64_t ohw = l->out_shape[1] * l->out_shape[2];
    return (fan_in(l) + l->out_shape[0]) * chunk_of(l, n) * ohw;
}

/* A call to the backend's convolution engine answered DL_ERR_UNAVAILABLE
 * (no kernel for this geometry): the layer keeps to im2col from now on.
 * Not a layer with blocked activations, which its neighbours share: its
 * error stands (layer_engine_layout makes it unlikely). */
static bool engine_declined(layer *l, dl_status st, dl_err *err)
{
    if (st != DL_ERR_UNAVAILABLE || l->blocked)
        return false;
    DL_LOG(DL_LOG_INFO, "nn", "layer '%s': %s; im2col instead", l->conf->name,
           err ? err->msg : "no engine kernel");
    if (err)
        *err = (dl_err){0};
    l->generic = true;
    return true;
}

static bool use_engine(const layer *l, bool has_op) { return has_op && !l->generic; }

bool layer_engine_layout(const layer *l)
{
    const dl_backend_ops *ops = l->be->ops;
    bool conv = l->conf->type == DL_LAYER_CONV2D;
    if (l->be->engine_block <= 0 || l->generic || !plain(l) ||
        !dl_layer_is_conv_or_pool(l->conf->type) ||
        !(conv ? ops->conv_fwd && ops->conv_bwd_data && ops->conv_bwd_weights
               : ops->pool2d_fwd && ops->pool2d_bwd))
        return false;
    /* oneDNN's pooling declines a window that stops short of the right
     * or bottom edge (padding there would be negative); its convolutions
     * take it (a ResNet's 1x1 stride-2 projection of an even size) */
    dl_conv_geom g = geom(l, 1);
    return conv ||
           ((g.oh - 1) * g.sh + g.kh >= g.h + g.ph && (g.ow - 1) * g.sw + g.kw >= g.w + g.pw);
}

static dl_status conv_forward_im2col(layer *l, const float *x, float *y, int64_t n,
                                     bool train, dl_err *err);
static dl_status conv_forward(layer *l, const float *x, float *y, int64_t n, bool train,
                              dl_err *err);

/* tmp (OC, B*OHW) = W (OC, wfan) x cols (K, B*OHW), a GEMM a group g:
 * its filters' rows of W and tmp, its channels' rows of cols. */
static dl_status gemm_forward(layer *l, const float *cols, float *tmp, int64_t cols_n,
                              dl_err *err)
{
    int64_t ng = groups_of(l), ocg = l->out_shape[0] / ng, wk = wfan(l);
    dl_status st = DL_OK;
    for (int64_t g = 0; g < ng && st == DL_OK; g++)
        st = l->be->ops->gemm(l->be, false, false, ocg, cols_n, wk, 1.0f,
                              l->p[0].data + g * ocg * wk, cols + g * wk * cols_n, 0.0f,
                              tmp + g * ocg * cols_n, err);
    return st;
}

/* Per group: dW (OCg, wfan) += dyt (OCg, B*OHW) x cols^T with want_dw,
 * and dcols (wfan, B*OHW) = W^T x dyt with dcols. */
static dl_status gemm_backward(layer *l, const float *cols, const float *dyt, float *dcols,
                               int64_t cols_n, bool want_dw, dl_err *err)
{
    int64_t ng = groups_of(l), ocg = l->out_shape[0] / ng, wk = wfan(l);
    const dl_backend_ops *ops = l->be->ops;
    dl_status st = DL_OK;
    for (int64_t g = 0; g < ng && st == DL_OK; g++) {
        const float *dyg = dyt + g * ocg * cols_n;
        if (want_dw)
            st = ops->gemm(l->be, false, true, ocg, wk, cols_n, 1.0f, dyg,
                           cols + g * wk * cols_n, 1.0f, l->p[0].grad + g * ocg * wk, err);
        if (st == DL_OK && dcols)
            st = ops->gemm(l->be, true, false, wk, cols_n, ocg, 1.0f,
                           l->p[0].data + g * ocg * wk, dyg, 0.0f, dcols + g * wk * cols_n,
                           err);
    }
    return st;
}

/* The engine's convolution with the inference-only unary u fused, where
 * it fuses it; else DL_ERR_UNAVAILABLE with *err untouched. */
static dl_status conv_fused_unary(layer *l, const dl_unary *u, const float *x, float *y,
                                  int64_t n, dl_err *err)
{
    const dl_backend_ops *ops = l->be->ops;
    if (!u || !ops->conv_fwd_unary)
        return DL_ERR_UNAVAILABLE;
    dl_conv_geom g = geom(l, n);
    dl_err e = {0};
    dl_status st = ops->conv_fwd_unary(l->be, &g, x, l->p[0].data,
                                       l->conf->bias ? l->p[1].data : NULL, u, y, &e);
    if (st != DL_OK && st != DL_ERR_UNAVAILABLE && err)
        *err = e;
    return st;
}

/* The engine's convolution with the residual l->res added and the add's
 * activation after it, where it fuses them; else DL_ERR_UNAVAILABLE with
 * *err untouched, and the layer adds in a pass of its own from then on. */
static dl_status conv_fused_add(layer *l, const float *x, float *y, int64_t n, dl_err *err)
{
    const dl_backend_ops *ops = l->be->ops;
    if (l->res_unfused || !ops->conv_fwd_add)
        return DL_ERR_UNAVAILABLE;
    dl_conv_geom g = geom(l, n);
    dl_err e = {0};
    dl_status st = ops->conv_fwd_add(l->be, &g, x, l->p[0].data,
                                     l->conf->bias ? l->p[1].data : NULL, l->res,
                                     l->res_post, y, &e);
    if (st == DL_ERR_UNAVAILABLE)
        l->res_unfused = true;
    else if (st != DL_OK && err)
        *err = e;
    return st;
}

/* Batch-invariant inference: a sample at a time, its residual with it. */
static dl_status conv_forward_samples(layer *l, const float *x, float *y, int64_t n,
                                      dl_err *err)
{
    const float *res = l->res;
    dl_status st = DL_OK;
    for (int64_t i = 0; i < n && st == DL_OK; i++) {
        l->res = res ? res + i * l->out_dim : NULL;
        st = conv_forward(l, x + i * l->in_dim, y + i * l->out_dim, 1, false, err);
    }
    l->res = res;
    return st;
}

static dl_status conv_forward(layer *l, const float *x, float *y, int64_t n,
                              bool train, dl_err *err)
{
    const dl_backend_ops *ops = l->be->ops;
    if (l->invariant && !train && n > 1)
        return conv_forward_samples(l, x, y, n, err);
    l->cols_kept = false;
    const dl_unary *u = train ? NULL : l->post_un;
    const float *res = train ? NULL : l->res;
    dl_status st = DL_OK;
    bool generic = true;
    if (use_engine(l, ops->conv_fwd != NULL)) {
        st = res ? conv_fused_add(l, x, y, n, err) : conv_fused_unary(l, u, x, y, n, err);
        if (st != DL_ERR_UNAVAILABLE)
            return st;
        dl_conv_geom g = geom(l, n);
        st = ops->conv_fwd(l->be, &g, x, l->p[0].data, l->conf->bias ? l->p[1].data : NULL,
                           l->post, y, err);
        generic = engine_declined(l, st, err);
    }
    if (generic)
        st = conv_forward_im2col(l, x, y, n, train, err);
    if (st == DL_OK && u)      /* not fused: the folded unary's own pass */
        ops->unary_fwd(l->be, u, y, y, n * l->out_dim);
    if (st == DL_OK && res) {  /* not fused: the residual add's own pass */
        dl_strided g = { .nd = 1, .shape = { n * l->out_dim }, .st = { { 1 }, { 1 }, { 1 } } };
        ops->binary_fwd(l->be, DL_BIN_ADD, &g, y, res, l->res_post, y);
    }
    return st;
}

static dl_status conv_forward_im2col(layer *l, const float *x, float *y, int64_t n,
                                     bool train, dl_err *err)
{
    int64_t chunk = chunk_of(l, n), k = fan_in(l), ohw = l->out_shape[1] * l->out_shape[2];
    for (int64_t i = 0; i < n; i += chunk) {
        int64_t b = n - i < chunk ? n - i : chunk;
        dl_conv_geom g = geom(l, b);
        int64_t cols_n = b * g.oh * g.ow;
        float *cols = train ? (float *)l->aux + i * k * ohw : l->work;
        float *tmp = l->work + k * cols_n, *yb = y + i * l->out_dim;
        l->be->ops->im2col(l->be, &g, x + i * l->in_dim, cols);
        dl_status st = gemm_forward(l, cols, tmp, cols_n, err);
        if (st != DL_OK)
            return st;
        const float *bias = l->conf->bias ? l->p[1].data : NULL;
        if (l->be->ops->swap_bias_act) {
            l->be->ops->swap_bias_act(l->be, tmp, yb, g.oc, b, g.oh * g.ow, bias, l->post);
            continue;
        }
        l->be->ops->swap_outer(l->be, tmp, yb, g.oc, b, g.oh * g.ow);
        if (bias)
            l->be->ops->bias_add_nchw(l->be, yb, bias, b, g.oc, g.oh * g.ow);
        if (l->post)
            l->be->ops->act_fwd(l->be, *l->post, yb, yb, b * l->out_dim);
    }
    l->cols_kept = train;
    return DL_OK;
}

/* The gradients through im2col: the weight gradient (with want_dw) and dx. */
static dl_status conv_backward_im2col(layer *l, const float *x, const float *dy,
                                      float *dx, int64_t n, bool want_dw, dl_err *err)
{
    int64_t chunk = chunk_of(l, n), k = fan_in(l), ohw = l->out_shape[1] * l->out_shape[2];
    if (want_dw && l->conf->bias)
        l->be->ops->bias_grad_nchw(l->be, l->p[1].grad, dy, n, l->out_shape[0],
                                   l->out_dim / l->out_shape[0]);
    for (int64_t i = 0; i < n; i += chunk) {
        int64_t b = n - i < chunk ? n - i : chunk;
        dl_conv_geom g = geom(l, b);
        int64_t cols_n = b * g.oh * g.ow;
        /* cols: this chunk's im2col matrix, kept by the forward or made
         * here in the work buffer, which then also takes dcols */
        float *cols = l->cols_kept ? (float *)l->aux + i * k * ohw : l->work;
        float *dcols = l->work, *dyt = l->work + k * cols_n;
        const float *xb = x + i * l->in_dim;
        l->be->ops->swap_outer(l->be, dy + i * l->out_dim, dyt, b, g.oc, g.oh * g.ow);
        if (want_dw && !l->cols_kept)
            l->be->ops->im2col(l->be, &g, xb, cols);
        /* dcols overwrites cols in the work buffer: the weight gradients
         * of every group first, then dcols */
        dl_status st = gemm_backward(l, cols, dyt, NULL, cols_n, want_dw, err);
        if (st == DL_OK && dx)
            st = gemm_backward(l, cols, dyt, dcols, cols_n, false, err);
        if (st != DL_OK)
            return st;
        if (!dx)
            continue;
        float *dxb = dx + i * l->in_dim;
        l->be->ops->fill(l->be, dxb, b * l->in_dim, 0.0f);
        l->be->ops->col2im(l->be, &g, dcols, dxb);
    }
    return DL_OK;
}

static dl_status conv_backward(layer *l, const float *x, const float *y,
                               const float *dy, float *dx, int64_t n, dl_err *err)
{
    (void)y;
    const dl_backend_ops *ops = l->be->ops;
    bool want_dw = true;
    if (use_engine(l, ops->conv_bwd_weights != NULL) && use_engine(l, ops->conv_bwd_data != NULL)) {
        dl_conv_geom g = geom(l, n);
        dl_status st = ops->conv_bwd_weights(l->be, &g, x, dy, l->p[0].grad,
                                             l->conf->bias ? l->p[1].grad : NULL, err);
        if (engine_declined(l, st, err))
            return conv_backward_im2col(l, x, dy, dx, n, true, err);
        if (st != DL_OK || !dx)
            return st;
        st = ops->conv_bwd_data(l->be, &g, dy, l->p[0].data, dx, err);
        if (!engine_declined(l, st, err))
            return st;
        want_dw = false;     /* added already: only dx is left */
    }
    return conv_backward_im2col(l, x, dy, dx, n, want_dw, err);
}

const layer_ops layer_conv2d_ops = {
    .declare     = conv_declare,
    .init        = conv_init,
    .aux_bytes   = conv_aux,
    .work_floats = conv_work,
    .forward     = conv_forward,
    .backward    = conv_backward,
};

/* conv1d: the convolution on [C, 1, L] (model.c gives it that shape) with
 * PyTorch's weight [filters, C / groups, kernel]: the same values in the
 * same order as [filters, C / groups, 1, kernel]. Over a sequence [T, D]
 * (channels last, stride 1, groups 1, the length kept) the weight is
 * [filters, D, kernel], and seq_forward / seq_backward below run it. */
static void conv1d_declare(layer *l)
{
    int64_t c = l->seq ? l->in_shape[1] : l->in_shape[0] / groups_of(l);
    layer_declare(l, "weight", true, 3, l->conf->filters, c, l->conf->kw, 0);
    if (l->conf->bias)
        layer_declare(l, "bias", true, 1, l->conf->filters, 0, 0, 0);
}

/* ---- conv1d over a sequence -----------------------------------------------
 * PyTorch's Conv1d on x^T where each sample's positions past its length
 * read as zeros: a row a position of its window's values, cols [T, D k]
 * (column c k + j: channel c at tap j, the weight's order), then
 * y = cols W^T + b, the dense layer's GEMM. A chunk of samples at a time:
 *
 *   xm    [b, T, D]     x masked (work; in backward dy masked, [b, T, F])
 *   cols  [b, T, D k]   tap j of row t: xm[t + j dilation - padding], 0
 *                       outside [0, T) (work; in backward dcols)
 */

/* A row of cols: D k values, the fan-in. */
static int64_t seq_fan(const layer *l) { return l->in_shape[1] * l->conf->kw; }

/* The wider of D and F: xm, then the masked dy, in the same place. */
static int64_t seq_wide(const layer *l)
{
    return l->in_shape[1] > l->conf->filters ? l->in_shape[1] : l->conf->filters;
}

/* Samples a chunk: cols and xm of about the backend's chunk size. */
static int64_t seq_chunk(const layer *l, int64_t n)
{
    int64_t per = l->in_shape[0] * (seq_fan(l) + seq_wide(l));
    int64_t cap = l->be->chunk_floats > 0 ? l->be->chunk_floats : DL_CHUNK_FLOATS;
    int64_t c = cap / (per > 0 ? per : 1);
    return c < 1 ? 1 : c > n ? n : c;
}

static int64_t seq_work(const layer *l, int64_t n)
{
    return seq_chunk(l, n) * l->in_shape[0] * (seq_fan(l) + seq_wide(l));
}

/* Tap j over b samples: the rows t whose tap reads a position of [0, T),
 * t + off with off = j dilation - padding; operand 0 x's [b, T, D]
 * (from row t + off), operand 1 cols' tap j (column j of each channel's
 * k, from row t), 2 as operand 0. False when no row's tap lies inside. */
static bool seq_tap(const layer *l, int64_t b, int64_t j, dl_strided *g, int64_t *xoff,
                    int64_t *coff)
{
    int64_t t = l->in_shape[0], d = l->in_shape[1], k = l->conf->kw;
    int64_t off = j * l->conf->dw - l->conf->pw;
    int64_t t0 = off < 0 ? -off : 0, t1 = off > 0 ? t - off : t;
    if (t1 <= t0)
        return false;
    *g = (dl_strided){ .nd = 3, .shape = { b, t1 - t0, d },
                       .st = { { t * d, d, 1 }, { t * d * k, d * k, k }, { t * d, d, 1 } } };
    *xoff = (t0 + off) * d;
    *coff = t0 * d * k + j;
    return true;
}

/* cols of b samples (lengths len) from x: x masked into xm, then a
 * strided copy a tap. */
static void seq_unfold(layer *l, const float *x, int64_t b, const int32_t *len, float *xm,
                       float *cols)
{
    const dl_backend_ops *ops = l->be->ops;
    dl_seq q = { .n = b, .t = l->in_shape[0], .d = l->in_shape[1], .len = len };
    ops->seq_mask(l->be, &q, x, xm);
    ops->fill(l->be, cols, b * q.t * seq_fan(l), 0.0f);
    for (int64_t j = 0; j < l->conf->kw; j++) {
        dl_strided g;
        int64_t xo, co;
        if (seq_tap(l, b, j, &g, &xo, &co))     /* copy_strided: xm at st[0] to cols' st[1] */
            ops->copy_strided(l->be, &g, xm + xo, cols + co);
    }
}

/* y (r, F) = cols (r, D k) W^T + b: the dense layer's arithmetic, row
 * exact when batch-invariant. */
static dl_status seq_gemm(layer *l, const float *cols, float *y, int64_t r, bool rows,
                          dl_err *err)
{
    const dl_backend_ops *ops = l->be->ops;
    int64_t f = l->conf->filters, k = seq_fan(l);
    const float *bias = l->conf->bias ? l->p[1].data : NULL;
    dl_status st = DL_ERR_UNAVAILABLE;
    if (rows && ops->gemm_bias_act_rows)
        st = ops->gemm_bias_act_rows(l->be, r, f, k, cols, l->p[0].data, bias, NULL, y, err);
    if (st != DL_ERR_UNAVAILABLE)
        return st;
    if (err)
        *err = (dl_err){0};
    int64_t m = rows ? 1 : r;      /* row exact without the kernel: a row at a time */
    for (int64_t i = 0; i < r; i += m) {
        if (ops->gemm_bias_act)
            st = ops->gemm_bias_act(l->be, m, f, k, cols + i * k, l->p[0].data, bias, NULL,
                                    y + i * f, err);
        else if ((st = ops->gemm(l->be, false, true, m, f, k, 1.0f, cols + i * k,
                                 l->p[0].data, 0.0f, y + i * f, err)) == DL_OK && bias)
            ops->bias_add(l->be, y + i * f, bias, m, f);
        if (st != DL_OK)
            return st;
    }
    return DL_OK;
}

static dl_status seq_forward(layer *l, const float *x, float *y, int64_t n, bool train,
                             dl_err *err)
{
    int64_t t = l->in_shape[0], chunk = seq_chunk(l, n);
    float *xm = l->work, *cols = l->work + chunk * t * seq_wide(l);
    for (int64_t i = 0; i < n; i += chunk) {
        int64_t b = n - i < chunk ? n - i : chunk;
        seq_unfold(l, x + i * l->in_dim, b, l->ins_len[0] ? l->ins_len[0] + i : NULL, xm,
                   cols);
        dl_status st = seq_gemm(l, cols, y + i * l->out_dim, b * t, l->invariant && !train,
                                err);
        if (st != DL_OK)
            return st;
    }
    return DL_OK;
}

/* dW += dy^T cols, db += the sum of dy's rows, dcols = dy W; dx gathers
 * dcols tap by tap and is masked. dy is masked first, so that the
 * padding's positions add nothing to the weights whatever it holds. */
static dl_status seq_backward(layer *l, const float *x, const float *dy, float *dx, int64_t n,
                              dl_err *err)
{
    const dl_backend_ops *ops = l->be->ops;
    int64_t t = l->in_shape[0], d = l->in_shape[1], f = l->conf->filters, k = seq_fan(l);
    int64_t chunk = seq_chunk(l, n);
    float *dm = l->work, *cols = l->work + chunk * t * seq_wide(l);
    for (int64_t i = 0; i < n; i += chunk) {
        int64_t b = n - i < chunk ? n - i : chunk, r = b * t;
        const int32_t *len = l->ins_len[0] ? l->ins_len[0] + i : NULL;
        seq_unfold(l, x + i * l->in_dim, b, len, dm, cols);
        dl_seq qy = { .n = b, .t = t, .d = f, .len = len };
        ops->seq_mask(l->be, &qy, dy + i * l->out_dim, dm);
        dl_status st = ops->gemm(l->be, true, false, f, k, r, 1.0f, dm, cols, 1.0f,
                                 l->p[0].grad, err);
        if (st == DL_OK && l->conf->bias)
            ops->bias_grad(l->be, l->p[1].grad, dm, r, f);
        if (st == DL_OK && dx)
            st = ops->gemm(l->be, false, false, r, k, f, 1.0f, dm, l->p[0].data, 0.0f, cols,
                           err);
        if (st != DL_OK)
            return st;
        if (!dx)
            continue;
        float *dxb = dx + i * l->in_dim;
        ops->fill(l->be, dxb, b * l->in_dim, 0.0f);
        for (int64_t j = 0; j < l->conf->kw; j++) {
            dl_strided g;
            int64_t xo, co;
            if (seq_tap(l, b, j, &g, &xo, &co))   /* dx[t + off] += dcols' tap j of row t */
                ops->binary_fwd(l->be, DL_BIN_ADD, &g, dxb + xo, cols + co, NULL, dxb + xo);
        }
        dl_seq qx = { .n = b, .t = t, .d = d, .len = len };
        ops->seq_mask(l->be, &qx, dxb, dxb);
    }
    return DL_OK;
}

static void conv1d_init(layer *l, dl_rng *rng)
{
    if (!l->seq) {
        conv_init(l, rng);
        return;
    }
    float bound = 1.0f / sqrtf((float)seq_fan(l));     /* as nn.Conv1d */
    layer_fill_uniform(l, l->p[0].data, l->conf->filters * seq_fan(l), bound, rng);
    if (l->conf->bias)
        layer_fill_uniform(l, l->p[1].data, l->conf->filters, bound, rng);
}

static size_t conv1d_aux(const layer *l, int64_t n) { return l->seq ? 0 : conv_aux(l, n); }

static int64_t conv1d_work(const layer *l, int64_t n)
{
    return l->seq ? seq_work(l, n) : conv_work(l, n);
}

static dl_status conv1d_forward(layer *l, const float *x, float *y, int64_t n, bool train,
                                dl_err *err)
{
    return l->seq ? seq_forward(l, x, y, n, train, err) : conv_forward(l, x, y, n, train, err);
}

static dl_status conv1d_backward(layer *l, const float *x, const float *y, const float *dy,
                                 float *dx, int64_t n, dl_err *err)
{
    return l->seq ? seq_backward(l, x, dy, dx, n, err) : conv_backward(l, x, y, dy, dx, n, err);
}

static bool conv1d_supported(const layer *l)
{
    const dl_backend_ops *ops = l->be->ops;
    return !l->seq || (ops->seq_mask && ops->copy_strided && ops->binary_fwd);
}

const layer_ops layer_conv1d_ops = {
    .declare     = conv1d_declare,
    .init        = conv1d_init,
    .aux_bytes   = conv1d_aux,
    .work_floats = conv1d_work,
    .forward     = conv1d_forward,
    .backward    = conv1d_backward,
    .supported   = conv1d_supported,
};

/* ---- pooling ------------------------------------------------------------ */

static dl_pool_kind pool_kind(const layer *l)
{
    dl_layer_type t = l->conf->type;
    return t == DL_LAYER_MAXPOOL2D || t == DL_LAYER_MAXPOOL1D ? DL_POOL_MAX : DL_POOL_AVG;
}

static size_t pool_aux(const layer *l, int64_t n)
{
    return pool_kind(l) == DL_POOL_MAX ? (size_t)(n * l->out_dim) * sizeof(int32_t) : 0;
}

/* Which kernels filled aux in the last forward: the backward must read it
 * with the same ones. */
static dl_status pool_forward(layer *l, const float *x, float *y, int64_t n,
                              bool train, dl_err *err)
{
    const dl_backend_ops *ops = l->be->ops;
    if (l->invariant && !train && n > 1)
        return layer_forward_samples(l, x, y, n, pool_forward, err);
    dl_conv_geom g = geom(l, n);
    if (use_engine(l, ops->pool2d_fwd != NULL) && ops->pool2d_bwd != NULL) {
        /* aux is kept for the backward of a training pass only */
        dl_status st = ops->pool2d_fwd(l->be, pool_kind(l), &g, x, y, train ? l->aux : NULL,
                                       err);
        if (!engine_declined(l, st, err))
            return st;
    }
    ops->pool_fwd(l->be, pool_kind(l), &g, x, y, l->aux);
    return DL_OK;
}

static dl_status pool_backward(layer *l, const float *x, const float *y,
                               const float *dy, float *dx, int64_t n, dl_err *err)
{
    (void)x;
    (void)y;
    if (!dx)
        return DL_OK;
    const dl_backend_ops *ops = l->be->ops;
    dl_conv_geom g = geom(l, n);
    if (use_engine(l, ops->pool2d_bwd != NULL))   /* the forward used the engine too */
        return ops->pool2d_bwd(l->be, pool_kind(l), &g, dy, l->aux, dx, err);
    ops->fill(l->be, dx, n * l->in_dim, 0.0f);
    ops->pool_bwd(l->be, pool_kind(l), &g, dy, l->aux, dx);
    return DL_OK;
}

const layer_ops layer_maxpool_ops = {
    .aux_bytes = pool_aux,
    .forward   = pool_forward,
    .backward  = pool_backward,
};

const layer_ops layer_avgpool_ops = {
    .forward  = pool_forward,
    .backward = pool_backward,
};
