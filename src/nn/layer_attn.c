/* layer_attn.c: sdpa, scaled dot-product attention over heads on a packed
 * projection. Its input [T, 3E] holds each position's query, key and
 * value side by side (nn.MultiheadAttention's in_proj output); its output
 * [T, E] each head's softmax(scale Q K^T) V, the heads side by side, as
 * the out_proj reads them. The backend's attn_* kernels read the three in
 * place. */
#include "nn/layer.h"

#include <math.h>

static dl_attn geom(const layer *l, int64_t n)
{
    int64_t t = l->in_shape[0], e = l->out_shape[1], d = e / l->conf->heads;
    float scale = l->conf->scale > 0.0f ? l->conf->scale : 1.0f / sqrtf((float)d);
    return (dl_attn){ .n = n, .heads = l->conf->heads, .tq = t, .tk = t, .dk = d, .dv = d,
                      .q_row = 3 * e, .k_row = 3 * e, .v_row = 3 * e, .o_row = e,
                      .q_smp = 3 * e * t, .k_smp = 3 * e * t, .v_smp = 3 * e * t,
                      .o_smp = e * t, .scale = scale, .causal = l->conf->causal };
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
