/* layer.c: shape inference for every layer type (the shape rules that
 * layer_table's rows name), the lookups into that table and helpers shared
 * by the layer files. */
#include "nn/layer.h"

#include <string.h>

static dl_status need_ndim(const dl_layer_conf *c, int in_ndim, const int64_t *in,
                           int want, const char *form, dl_err *err)
{
    if (in_ndim == want)
        return DL_OK;
    char buf[96];
    return dl_err_set(err, DL_ERR_INVALID, "layer '%s' (%s) expects %d-D input %s, got %s",
                      c->name, dl_layer_type_name(c->type), want, form,
                      dl_shape_str(in_ndim, in, buf, sizeof(buf)));
}

/* A convolution's groups divide its channels and its filters. */
static dl_status check_groups(const dl_layer_conf *c, int64_t channels, dl_err *err)
{
    if (c->groups <= 1 || (channels % c->groups == 0 && c->filters % c->groups == 0))
        return DL_OK;
    return dl_err_set(err, DL_ERR_INVALID, "layer '%s' (%s): 'groups' %lld does not divide "
                      "both the %lld input channels and the %lld filters", c->name,
                      dl_layer_type_name(c->type), (long long)c->groups, (long long)channels,
                      (long long)c->filters);
}

static dl_status window_shape(const dl_layer_conf *c, const int64_t *in,
                              int64_t oc, int64_t *out, dl_err *err)
{
    bool conv = c->type == DL_LAYER_CONV2D || c->type == DL_LAYER_CONV1D;
    dl_conv_geom g = { .n = 1, .c = in[0], .h = in[1], .w = in[2], .oc = oc,
                       .kh = c->kh, .kw = c->kw, .sh = c->sh, .sw = c->sw,
                       .ph = c->ph, .pw = c->pw, .dh = conv ? c->dh : 1,
                       .dw = conv ? c->dw : 1 };
    if (conv && check_groups(c, in[0], err) != DL_OK)
        return DL_ERR_INVALID;
    if (dl_conv_geom_finish(&g, err) != DL_OK)
        return dl_err_prefix(err, "layer '%s'", c->name);
    out[0] = oc;
    out[1] = g.oh;
    out[2] = g.ow;
    return DL_OK;
}

static dl_status check_axis(const dl_layer_conf *c, int ndim, dl_err *err)
{
    if (c->axis >= -ndim && c->axis < ndim)
        return DL_OK;
    return dl_err_set(err, DL_ERR_INVALID, "layer '%s' (%s): axis %lld is out of range for "
                      "%d-D samples", c->name, dl_layer_type_name(c->type), (long long)c->axis,
                      ndim);
}

/* NumPy broadcasting of the per-sample shapes, aligned at the right. */
static dl_status broadcast_shape(const dl_layer_conf *c, int nin, const int *nd,
                                 const int64_t (*in)[DL_MAX_DIMS], int *out_ndim,
                                 int64_t *out, dl_err *err)
{
    int n = 0;
    for (int k = 0; k < nin; k++)
        n = nd[k] > n ? nd[k] : n;
    for (int d = 0; d < n; d++) {
        out[d] = 1;
        for (int k = 0; k < nin; k++) {
            int e = nd[k] - n + d;
            int64_t dk = e >= 0 ? in[k][e] : 1;
            if (dk != out[d] && dk != 1 && out[d] != 1) {
                char sa[96], sb[96];
                return dl_err_set(err, DL_ERR_INVALID, "layer '%s' (%s): shapes %s and %s do "
                                  "not broadcast", c->name, dl_layer_type_name(c->type),
                                  dl_shape_str(nd[0], in[0], sa, sizeof(sa)),
                                  dl_shape_str(nd[k], in[k], sb, sizeof(sb)));
            }
            out[d] = dk > out[d] ? dk : out[d];
        }
    }
    *out_ndim = n;
    return DL_OK;
}

/* [..., M, K] @ [..., K, N] -> [..., M, N], the leading dimensions
 * broadcast. */
static dl_status matmul_shape(const dl_layer_conf *c, const int *nd,
                              const int64_t (*in)[DL_MAX_DIMS], int *out_ndim, int64_t *out,
                              dl_err *err)
{
    char sa[96], sb[96];
    const int64_t *a = in[0], *b = in[1];
    if (nd[0] < 2 || nd[1] < 2 || a[nd[0] - 1] != b[nd[1] - 2])
        return dl_err_set(err, DL_ERR_INVALID, "layer '%s' (matmul): %s @ %s does not fit "
                          "(each at least 2-D, [..., M, K] @ [..., K, N])", c->name,
                          dl_shape_str(nd[0], a, sa, sizeof(sa)),
                          dl_shape_str(nd[1], b, sb, sizeof(sb)));
    int lead[2] = { nd[0] - 2, nd[1] - 2 };
    int64_t lin[2][DL_MAX_DIMS];
    memcpy(lin[0], a, sizeof(lin[0]));
    memcpy(lin[1], b, sizeof(lin[1]));
    if (lead[0] == 0 && lead[1] == 0)
        *out_ndim = 0;
    else if (broadcast_shape(c, 2, lead, (const int64_t (*)[DL_MAX_DIMS])lin, out_ndim, out,
                             err) != DL_OK)
        return DL_ERR_INVALID;
    out[(*out_ndim)++] = a[nd[0] - 2];
    out[(*out_ndim)++] = b[nd[1] - 1];
    return DL_OK;
}

static dl_status transpose_shape(const dl_layer_conf *c, int nd, const int64_t *in,
                                 int *out_ndim, int64_t *out, dl_err *err)
{
    bool seen[DL_MAX_DIMS] = { false };
    bool ok = c->nperm == nd;
    for (int d = 0; ok && d < nd; d++) {
        ok = c->perm[d] < nd && !seen[c->perm[d]];
        seen[ok ? c->perm[d] : 0] = true;
        out[d] = ok ? in[c->perm[d]] : 0;
    }
    *out_ndim = nd;
    if (ok)
        return DL_OK;
    char sa[96];
    return dl_err_set(err, DL_ERR_INVALID, "layer '%s' (transpose): 'perm' is no permutation "
                      "of the %d dimensions of %s", c->name, nd,
                      dl_shape_str(nd, in, sa, sizeof(sa)));
}

/* The axes a reduce layer drops, as a bit set; 0 when one is out of range
 * or repeated, or every dimension would go. */
int layer_reduce_mask(const dl_layer_conf *c, int nd)
{
    int mask = 0;
    for (int k = 0; k < c->naxes; k++) {
        int ax = layer_axis(c->axes[k], nd);
        if (ax < 0 || ax >= nd || (mask & (1 << ax)))
            return 0;
        mask |= 1 << ax;
    }
    return mask == (1 << nd) - 1 ? 0 : mask;
}

static dl_status reduce_shape(const dl_layer_conf *c, int nd, const int64_t *in,
                              int *out_ndim, int64_t *out, dl_err *err)
{
    int mask = layer_reduce_mask(c, nd);
    *out_ndim = 0;
    for (int d = 0; d < nd; d++)
        if (!(mask & (1 << d)))
            out[(*out_ndim)++] = in[d];
    if (mask)
        return DL_OK;
    char sa[96];
    return dl_err_set(err, DL_ERR_INVALID, "layer '%s' (%s): 'axis' must name distinct "
                      "dimensions of %s and leave at least one", c->name,
                      dl_layer_type_name(c->type), dl_shape_str(nd, in, sa, sizeof(sa)));
}

/* conv1d, maxpool1d on [C, L]: the 2-D window on [C, 1, L]. */
static dl_status window1d_shape(const dl_layer_conf *c, int nd, const int64_t *in,
                                int *out_ndim, int64_t *out, dl_err *err)
{
    if (need_ndim(c, nd, in, 2, "[C, L]", err) != DL_OK)
        return err ? err->code : DL_ERR_INVALID;
    int64_t in3[3] = { in[0], 1, in[1] }, out3[3] = { 0, 0, 0 };
    dl_status st = window_shape(c, in3, c->type == DL_LAYER_CONV1D ? c->filters : in[0], out3,
                                err);
    *out_ndim = 2;
    out[0] = out3[0];
    out[1] = out3[2];
    return st;
}

static dl_status concat_shape(const dl_layer_conf *c, int nin, const int *nd,
                              const int64_t (*in)[DL_MAX_DIMS], int *out_ndim,
                              int64_t *out, dl_err *err)
{
    if (check_axis(c, nd[0], err) != DL_OK)
        return DL_ERR_INVALID;
    int ax = layer_axis(c->axis, nd[0]);
    *out_ndim = nd[0];
    memcpy(out, in[0], sizeof(in[0]));
    for (int k = 1; k < nin; k++) {
        bool fit = nd[k] == nd[0];
        for (int d = 0; fit && d < nd[0]; d++)
            fit = d == ax || in[k][d] == in[0][d];
        if (!fit) {
            char sa[96], sb[96];
            return dl_err_set(err, DL_ERR_INVALID, "layer '%s' (concat): input %d has shape %s, "
                              "which does not fit %s outside axis %d", c->name, k,
                              dl_shape_str(nd[k], in[k], sb, sizeof(sb)),
                              dl_shape_str(nd[0], in[0], sa, sizeof(sa)), ax);
        }
        out[ax] += in[k][ax];
    }
    return DL_OK;
}

static dl_status reshape_shape(const dl_layer_conf *c, int in_ndim, const int64_t *in,
                               int *out_ndim, int64_t *out, dl_err *err)
{
    int64_t n = dl_shape_numel(in_ndim, in), known = 1;
    int free_at = -1;
    for (int k = 0; k < c->nshape; k++) {
        out[k] = c->shape[k];
        if (c->shape[k] == -1)
            free_at = k;
        else
            known *= c->shape[k];
    }
    *out_ndim = c->nshape;
    if (free_at >= 0 && known > 0 && n % known == 0)
        out[free_at] = n / known;
    if (dl_shape_numel(c->nshape, out) == n && out[free_at >= 0 ? free_at : 0] > 0)
        return DL_OK;
    char sa[96], sb[96];
    return dl_err_set(err, DL_ERR_INVALID, "layer '%s' (reshape): %s does not fit %s (%lld values)",
                      c->name, dl_shape_str(c->nshape, c->shape, sb, sizeof(sb)),
                      dl_shape_str(in_ndim, in, sa, sizeof(sa)), (long long)n);
}

/* slice: the part of an axis of len it keeps, [*start, *start + *count *
 * step), as Python slices (negative counts from the end, clamped). */
void layer_slice_range(const dl_layer_conf *c, int64_t len, int64_t *start, int64_t *count)
{
    int64_t b = c->start < 0 ? c->start + len : c->start;
    int64_t e = c->end < 0 ? c->end + len : c->end;
    b = b < 0 ? 0 : b > len ? len : b;
    e = e < 0 ? 0 : e > len ? len : e;
    *start = b;
    *count = e > b ? (e - b + c->step - 1) / c->step : 0;
}

static dl_status slice_shape(const dl_layer_conf *c, int nd, const int64_t *in, int64_t *out,
                             dl_err *err)
{
    if (check_axis(c, nd, err) != DL_OK)
        return DL_ERR_INVALID;
    int ax = layer_axis(c->axis, nd);
    int64_t start;
    layer_slice_range(c, in[ax], &start, &out[ax]);
    if (out[ax] > 0)
        return DL_OK;
    char sa[96];
    return dl_err_set(err, DL_ERR_INVALID, "layer '%s' (slice): start %lld, end %lld keep "
                      "nothing of axis %d of %s", c->name, (long long)c->start,
                      (long long)c->end, ax, dl_shape_str(nd, in, sa, sizeof(sa)));
}

/* ---- the shape rules of layer_table ---- */

/* Starts a single-input rule: the output as the input. */
static const int64_t *same(const int *in_ndim, const int64_t (*in)[DL_MAX_DIMS],
                           int *out_ndim, int64_t *out)
{
    *out_ndim = in_ndim[0];
    memcpy(out, in[0], (size_t)in_ndim[0] * sizeof(*out));
    return in[0];
}

dl_status layer_shape_same(const dl_layer_conf *c, int nin, const int *in_ndim,
                           const int64_t (*in)[DL_MAX_DIMS], int *out_ndim, int64_t *out,
                           dl_err *err)
{
    (void)c, (void)nin, (void)err;
    same(in_ndim, in, out_ndim, out);
    return DL_OK;
}

dl_status layer_shape_dense(const dl_layer_conf *c, int nin, const int *in_ndim,
                            const int64_t (*in)[DL_MAX_DIMS], int *out_ndim, int64_t *out,
                            dl_err *err)
{
    (void)nin, (void)err;
    same(in_ndim, in, out_ndim, out);
    out[in_ndim[0] - 1] = c->units;
    return DL_OK;
}

dl_status layer_shape_conv2d(const dl_layer_conf *c, int nin, const int *in_ndim,
                             const int64_t (*in)[DL_MAX_DIMS], int *out_ndim, int64_t *out,
                             dl_err *err)
{
    (void)nin;
    const int64_t *x = same(in_ndim, in, out_ndim, out);
    if (need_ndim(c, in_ndim[0], x, 3, "[C, H, W]", err) != DL_OK)
        return err ? err->code : DL_ERR_INVALID;
    return window_shape(c, x, c->filters, out, err);
}

dl_status layer_shape_pool2d(const dl_layer_conf *c, int nin, const int *in_ndim,
                             const int64_t (*in)[DL_MAX_DIMS], int *out_ndim, int64_t *out,
                             dl_err *err)
{
    (void)nin;
    const int64_t *x = same(in_ndim, in, out_ndim, out);
    if (need_ndim(c, in_ndim[0], x, 3, "[C, H, W]", err) != DL_OK)
        return err ? err->code : DL_ERR_INVALID;
    return window_shape(c, x, x[0], out, err);
}

dl_status layer_shape_gap(const dl_layer_conf *c, int nin, const int *in_ndim,
                          const int64_t (*in)[DL_MAX_DIMS], int *out_ndim, int64_t *out,
                          dl_err *err)
{
    (void)nin;
    const int64_t *x = same(in_ndim, in, out_ndim, out);
    *out_ndim = 1;
    return need_ndim(c, in_ndim[0], x, 3, "[C, H, W]", err);
}

dl_status layer_shape_batchnorm(const dl_layer_conf *c, int nin, const int *in_ndim,
                                const int64_t (*in)[DL_MAX_DIMS], int *out_ndim, int64_t *out,
                                dl_err *err)
{
    (void)nin;
    const int64_t *x = same(in_ndim, in, out_ndim, out);
    if (in_ndim[0] > 3)
        return need_ndim(c, in_ndim[0], x, 3, "[C, H, W], [C, L] or [F]", err);
    return DL_OK;
}

dl_status layer_shape_transpose(const dl_layer_conf *c, int nin, const int *in_ndim,
                                const int64_t (*in)[DL_MAX_DIMS], int *out_ndim, int64_t *out,
                                dl_err *err)
{
    (void)nin;
    same(in_ndim, in, out_ndim, out);
    return transpose_shape(c, in_ndim[0], in[0], out_ndim, out, err);
}

dl_status layer_shape_reduce(const dl_layer_conf *c, int nin, const int *in_ndim,
                             const int64_t (*in)[DL_MAX_DIMS], int *out_ndim, int64_t *out,
                             dl_err *err)
{
    (void)nin;
    same(in_ndim, in, out_ndim, out);
    return reduce_shape(c, in_ndim[0], in[0], out_ndim, out, err);
}

dl_status layer_shape_window1d(const dl_layer_conf *c, int nin, const int *in_ndim,
                               const int64_t (*in)[DL_MAX_DIMS], int *out_ndim, int64_t *out,
                               dl_err *err)
{
    (void)nin;
    const int64_t *x = same(in_ndim, in, out_ndim, out);
    return window1d_shape(c, in_ndim[0], x, out_ndim, out, err);
}

dl_status layer_shape_flatten(const dl_layer_conf *c, int nin, const int *in_ndim,
                              const int64_t (*in)[DL_MAX_DIMS], int *out_ndim, int64_t *out,
                              dl_err *err)
{
    (void)c, (void)nin, (void)err;
    same(in_ndim, in, out_ndim, out);
    *out_ndim = 1;
    out[0] = dl_shape_numel(in_ndim[0], in[0]);
    return DL_OK;
}

dl_status layer_shape_reshape(const dl_layer_conf *c, int nin, const int *in_ndim,
                              const int64_t (*in)[DL_MAX_DIMS], int *out_ndim, int64_t *out,
                              dl_err *err)
{
    (void)nin;
    same(in_ndim, in, out_ndim, out);
    return reshape_shape(c, in_ndim[0], in[0], out_ndim, out, err);
}

/* ids of any shape: shape + [dim]. */
dl_status layer_shape_embedding(const dl_layer_conf *c, int nin, const int *in_ndim,
                                const int64_t (*in)[DL_MAX_DIMS], int *out_ndim, int64_t *out,
                                dl_err *err)
{
    (void)nin;
    const int64_t *x = same(in_ndim, in, out_ndim, out);
    if (in_ndim[0] >= DL_MAX_DIMS)
        return need_ndim(c, in_ndim[0], x, DL_MAX_DIMS - 1, "of ids", err);
    *out_ndim = in_ndim[0] + 1;
    out[in_ndim[0]] = c->dim;
    return DL_OK;
}

/* softmax, log_softmax: the input's shape, `axis` one of its own. */
dl_status layer_shape_axis(const dl_layer_conf *c, int nin, const int *in_ndim,
                           const int64_t (*in)[DL_MAX_DIMS], int *out_ndim, int64_t *out,
                           dl_err *err)
{
    (void)nin;
    same(in_ndim, in, out_ndim, out);
    return check_axis(c, in_ndim[0], err);
}

dl_status layer_shape_slice(const dl_layer_conf *c, int nin, const int *in_ndim,
                            const int64_t (*in)[DL_MAX_DIMS], int *out_ndim, int64_t *out,
                            dl_err *err)
{
    (void)nin;
    const int64_t *x = same(in_ndim, in, out_ndim, out);
    return slice_shape(c, in_ndim[0], x, out, err);
}

dl_status layer_shape_broadcast(const dl_layer_conf *c, int nin, const int *in_ndim,
                                const int64_t (*in)[DL_MAX_DIMS], int *out_ndim, int64_t *out,
                                dl_err *err)
{
    return broadcast_shape(c, nin, in_ndim, in, out_ndim, out, err);
}

/* sdpa: [T, 3E] (queries, keys and values side by side) -> [T, E], E a
 * multiple of the heads. */
dl_status layer_shape_sdpa(const dl_layer_conf *c, int nin, const int *in_ndim,
                           const int64_t (*in)[DL_MAX_DIMS], int *out_ndim, int64_t *out,
                           dl_err *err)
{
    (void)nin;
    int64_t w = in_ndim[0] == 2 ? in[0][1] : 0;
    if (w % 3 != 0 || w == 0 || (w / 3) % c->heads != 0)
        return dl_err_set(err, DL_ERR_INVALID, "layer '%s' (sdpa) expects [T, 3E] (queries, "
                          "keys and values side by side, E a multiple of its %lld heads)",
                          c->name, (long long)c->heads);
    *out_ndim = 2;
    out[0] = in[0][0];
    out[1] = w / 3;
    return DL_OK;
}

/* A constant's per-sample shape is its own "shape". */
dl_status layer_shape_constant(const dl_layer_conf *c, int nin, const int *in_ndim,
                               const int64_t (*in)[DL_MAX_DIMS], int *out_ndim, int64_t *out,
                               dl_err *err)
{
    (void)nin, (void)in_ndim, (void)in, (void)err;
    *out_ndim = c->nshape;
    memcpy(out, c->shape, (size_t)c->nshape * sizeof(*out));
    return DL_OK;
}

dl_status layer_shape_matmul(const dl_layer_conf *c, int nin, const int *in_ndim,
                             const int64_t (*in)[DL_MAX_DIMS], int *out_ndim, int64_t *out,
                             dl_err *err)
{
    (void)nin;
    return matmul_shape(c, in_ndim, in, out_ndim, out, err);
}

dl_status layer_shape_concat(const dl_layer_conf *c, int nin, const int *in_ndim,
                             const int64_t (*in)[DL_MAX_DIMS], int *out_ndim, int64_t *out,
                             dl_err *err)
{
    return concat_shape(c, nin, in_ndim, in, out_ndim, out, err);
}

dl_status layer_shape(const dl_layer_conf *c, int nin, const int *in_ndim,
                      const int64_t (*in)[DL_MAX_DIMS], int *out_ndim, int64_t *out,
                      dl_err *err)
{
    int want = layer_arity(c->type);
    if (want >= 0 && nin != want)
        return dl_err_set(err, DL_ERR_INVALID, "layer '%s' (%s) takes %d input%s, got %d",
                          c->name, dl_layer_type_name(c->type), want, want == 1 ? "" : "s", nin);
    if (want == -1 && nin < 2)
        return dl_err_set(err, DL_ERR_INVALID, "layer '%s' (%s) takes 2 or more inputs, got %d",
                          c->name, dl_layer_type_name(c->type), nin);
    if (want == -2 && nin > 2)
        return dl_err_set(err, DL_ERR_INVALID, "layer '%s' (%s) takes 1 or 2 inputs, got %d",
                          c->name, dl_layer_type_name(c->type), nin);
    return layer_table[c->type].shape(c, nin, in_ndim, in, out_ndim, out, err);
}

int layer_arity(dl_layer_type t)
{
    return (unsigned)t < DL_LAYER_COUNT ? layer_table[t].arity : 1;
}

int layer_axis(int64_t axis, int ndim)
{
    return (int)(axis < 0 ? axis + ndim : axis);
}

int64_t layer_bcast_offset(const int64_t *out, int nd, const int64_t *in, int kd, int64_t j)
{
    int64_t off = 0, stride = 1;
    for (int d = nd - 1; d >= 0; d--) {
        int64_t c = j % out[d];
        j /= out[d];
        int e = kd - nd + d;
        if (e < 0)
            continue;
        if (in[e] != 1)
            off += c * stride;
        stride *= in[e];
    }
    return off;
}

void layer_dense_strides(int nd, const int64_t *shape, int64_t *st)
{
    int64_t s = 1;
    for (int d = nd - 1; d >= 0; d--) {
        st[d] = s;
        s *= shape[d];
    }
}

void layer_strided_out(const layer *l, int64_t n, dl_strided *g)
{
    memset(g, 0, sizeof(*g));
    g->nd = l->out_ndim + 1;
    g->shape[0] = n;
    memcpy(g->shape + 1, l->out_shape, (size_t)l->out_ndim * sizeof(int64_t));
    layer_dense_strides(g->nd, g->shape, g->st[2]);
}

dl_seq layer_seq_geom(const layer *l, int64_t n)
{
    int64_t t = l->in_shape[0];
    return (dl_seq){ .n = n, .t = t, .d = t > 0 ? l->in_dim / t : 0, .len = l->ins_len[0] };
}

void layer_bcast_strides(const layer *l, int k, int64_t *st)
{
    int nd = l->out_ndim, kd = l->ins_ndim[k];
    int64_t in_st[DL_MAX_DIMS];
    layer_dense_strides(kd, l->ins_shape[k], in_st);
    st[0] = l->ins_dim[k];
    for (int d = 0; d < nd; d++) {
        int e = kd - nd + d;
        st[d + 1] = e >= 0 && l->ins_shape[k][e] != 1 ? in_st[e] : 0;
    }
}

bool layer_channel_vector(const layer *l, int k)
{
    const int64_t *in = l->ins_shape[k];
    return l->out_ndim == 3 && l->ins_ndim[k] == 3 && in[0] == l->out_shape[0] && in[1] == 1 &&
           in[2] == 1 && l->ins_dim[k] != l->out_dim;
}

void layer_strided_swap(dl_strided *g)
{
    int64_t t[DL_STRIDED_DIMS];
    memcpy(t, g->st[0], sizeof(t));
    memcpy(g->st[0], g->st[1], sizeof(t));
    memcpy(g->st[1], t, sizeof(t));
}

const layer_ops *layer_ops_for(dl_layer_type t)
{
    return (unsigned)t < DL_LAYER_COUNT ? layer_table[t].ops : NULL;
}

const char *dl_layer_type_name(dl_layer_type t)
{
    return (unsigned)t < DL_LAYER_COUNT ? layer_table[t].name : "?";
}

bool dl_layer_type_of(const char *name, dl_layer_type *out)
{
    for (int t = 0; t < DL_LAYER_COUNT; t++)
        if (strcmp(layer_table[t].name, name) == 0) {
            *out = (dl_layer_type)t;
            return true;
        }
    return false;
}

bool dl_layer_is_conv_or_pool(dl_layer_type t)
{
    return t == DL_LAYER_CONV2D || t == DL_LAYER_MAXPOOL2D || t == DL_LAYER_AVGPOOL2D;
}

dl_status layer_forward_samples(layer *l, const float *x, float *y, int64_t n,
                                dl_status (*fwd)(layer *, const float *, float *, int64_t,
                                                 bool, dl_err *),
                                dl_err *err)
{
    for (int64_t i = 0; i < n; i++) {
        dl_status st = fwd(l, x + i * l->in_dim, y + i * l->out_dim, 1, false, err);
        if (st != DL_OK)
            return st;
    }
    return DL_OK;
}

void layer_declare(layer *l, const char *suffix, bool trainable, int ndim,
                   int64_t d0, int64_t d1, int64_t d2, int64_t d3)
{
    DL_ASSERT(l->nparams < LAYER_MAX_PARAMS);
    param_slot *p = &l->p[l->nparams++];
    int64_t d[DL_MAX_DIMS] = { d0, d1, d2, d3 };
    p->suffix = suffix;
    p->trainable = trainable;
    p->ndim = ndim;
    memcpy(p->shape, d, sizeof(d));
}

void layer_fill_uniform(layer *l, float *dst, int64_t n, float bound, dl_rng *rng)
{
    (void)l;
    for (int64_t i = 0; i < n; i++)
        dst[i] = (2.0f * dl_rng_uniform(rng) - 1.0f) * bound;
}
