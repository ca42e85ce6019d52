/* layer.c: shape inference for every layer type, the type -> ops table
 * dispatch and helpers shared by the layer files. */
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

static dl_status window_shape(const dl_layer_conf *c, const int64_t *in,
                              int64_t oc, int64_t *out, dl_err *err)
{
    dl_conv_geom g = { .n = 1, .c = in[0], .h = in[1], .w = in[2], .oc = oc,
                       .kh = c->kh, .kw = c->kw, .sh = c->sh, .sw = c->sw,
                       .ph = c->ph, .pw = c->pw };
    if (dl_conv_geom_finish(&g, err) != DL_OK)
        return dl_err_prefix(err, "layer '%s'", c->name);
    out[0] = oc;
    out[1] = g.oh;
    out[2] = g.ow;
    return DL_OK;
}

dl_status layer_shape(const dl_layer_conf *c, int in_ndim, const int64_t *in,
                      int *out_ndim, int64_t *out, dl_err *err)
{
    *out_ndim = in_ndim;
    memcpy(out, in, (size_t)in_ndim * sizeof(*in));
    switch (c->type) {
    case DL_LAYER_DENSE:
        out[in_ndim - 1] = c->units;
        return DL_OK;
    case DL_LAYER_CONV2D:
        if (need_ndim(c, in_ndim, in, 3, "[C, H, W]", err) != DL_OK)
            return err ? err->code : DL_ERR_INVALID;
        return window_shape(c, in, c->filters, out, err);
    case DL_LAYER_MAXPOOL2D:
    case DL_LAYER_AVGPOOL2D:
        if (need_ndim(c, in_ndim, in, 3, "[C, H, W]", err) != DL_OK)
            return err ? err->code : DL_ERR_INVALID;
        return window_shape(c, in, in[0], out, err);
    case DL_LAYER_BATCHNORM:
        if (in_ndim != 1 && in_ndim != 3)
            return need_ndim(c, in_ndim, in, 3, "[C, H, W] or [F]", err);
        return DL_OK;
    case DL_LAYER_FLATTEN:
        *out_ndim = 1;
        out[0] = dl_shape_numel(in_ndim, in);
        return DL_OK;
    case DL_LAYER_EMBEDDING:
        if (in_ndim != 1)
            return need_ndim(c, in_ndim, in, 1, "[T] of ids", err);
        *out_ndim = 2;
        out[0] = in[0];
        out[1] = c->dim;
        return DL_OK;
    case DL_LAYER_DROPOUT:
    case DL_LAYER_RELU:
    case DL_LAYER_TANH:
    case DL_LAYER_SIGMOID:
    case DL_LAYER_SOFTMAX:
        return DL_OK;
    }
    return dl_err_set(err, DL_ERR_INVALID, "layer '%s': unknown type", c->name);
}

const layer_ops *layer_ops_for(dl_layer_type t)
{
    switch (t) {
    case DL_LAYER_DENSE:     return &layer_dense_ops;
    case DL_LAYER_CONV2D:    return &layer_conv2d_ops;
    case DL_LAYER_MAXPOOL2D: return &layer_maxpool_ops;
    case DL_LAYER_AVGPOOL2D: return &layer_avgpool_ops;
    case DL_LAYER_BATCHNORM: return &layer_batchnorm_ops;
    case DL_LAYER_DROPOUT:   return &layer_dropout_ops;
    case DL_LAYER_FLATTEN:   return &layer_flatten_ops;
    case DL_LAYER_EMBEDDING: return &layer_embedding_ops;
    case DL_LAYER_RELU:
    case DL_LAYER_TANH:
    case DL_LAYER_SIGMOID:   return &layer_act_ops;
    case DL_LAYER_SOFTMAX:   return &layer_softmax_ops;
    }
    return NULL;
}

const char *dl_layer_type_name(dl_layer_type t)
{
    static const char *names[] = {
        "dense", "conv2d", "maxpool2d", "avgpool2d", "batchnorm", "dropout",
        "flatten", "embedding", "relu", "tanh", "sigmoid", "softmax",
    };
    return (unsigned)t < sizeof(names) / sizeof(names[0]) ? names[t] : "?";
}

bool dl_layer_is_conv_or_pool(dl_layer_type t)
{
    return t == DL_LAYER_CONV2D || t == DL_LAYER_MAXPOOL2D || t == DL_LAYER_AVGPOOL2D;
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
