/* translate.c: the model being built by one ONNX translation: its values
 * by name, unique layer names, the model.json layers it emits and the
 * weights it adds (the xl_* helpers of translate.h, used by onnx_ops.c and
 * the driver, onnx_import.c). */
#define _POSIX_C_SOURCE 200809L
#include "onnx/translate.h"
#include "onnx/onnx_pb.h"

#include <ctype.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* ---- values, names, layers and tensors ---------------------------------- */

tvalue *xl_find(xl *x, const char *name)
{
    for (int k = x->nv - 1; k >= 0; k--)
        if (!strcmp(x->v[k].name, name))
            return &x->v[k];
    return NULL;
}

tvalue *xl_add(xl *x, const char *name)
{
    if (x->nv == x->capv) {
        int cap = x->capv ? 2 * x->capv : 64;
        tvalue *nv = realloc(x->v, (size_t)cap * sizeof(*nv));
        if (!nv)
            return NULL;
        x->v = nv;
        x->capv = cap;
    }
    tvalue *v = &x->v[x->nv++];
    memset(v, 0, sizeof(*v));
    v->name = name;
    return v;
}

bool xl_has_seq(xl *x)
{
    for (int k = 0; k < x->nv; k++)
        if (x->v[k].input && x->v[k].seq)
            return true;
    return false;
}

int xl_uses(xl *x, const char *name)
{
    int n = 0;
    for (int i = 0; i < x->g->nnodes; i++)
        for (int k = 0; k < x->g->nodes[i].nin; k++)
            n += !strcmp(x->g->nodes[i].in[k], name);
    for (int k = 0; k < x->g->noutputs; k++)
        n += !strcmp(x->g->outputs[k].name, name);
    return n;
}

dl_status xl_refuse(xl *x, const onnx_node *n, const char *fmt, ...)
{
    char why[200];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(why, sizeof(why), fmt, ap);
    va_end(ap);
    return dl_err_set(x->err, DL_ERR_INVALID, "node '%.80s' (%.40s, opset %lld): %s",
                      n->name, n->op, (long long)x->g->opset, why);
}

static bool layer_taken(xl *x, const char *s)
{
    size_t i;
    json_t *l;
    json_array_foreach(x->layers, i, l)
        if (!strcmp(json_string_value(json_object_get(l, "name")), s))
            return true;
    json_array_foreach(x->inputs, i, l)
        if (!strcmp(json_string_value(json_object_get(l, "name")), s))
            return true;
    return false;
}

void xl_sanitize(const char *base, char out[DL_NAME_MAX])
{
    int n = 0;
    while (*base == '/' || *base == '.')
        base++;
    for (; *base && n < DL_NAME_MAX - 8; base++)
        out[n++] = isalnum((unsigned char)*base) || *base == '-' || *base == '_' ? *base : '.';
    out[n] = '\0';
    if (!n)
        snprintf(out, DL_NAME_MAX, "layer");
}

void xl_layer_name(xl *x, const char *base, char out[DL_NAME_MAX])
{
    char s[DL_NAME_MAX];
    xl_sanitize(base, s);
    snprintf(out, DL_NAME_MAX, "%s", s);
    for (unsigned k = 2; layer_taken(x, out) && k < 100000; k++)
        snprintf(out, DL_NAME_MAX, "%.54s_%u", s, k % 100000u);
}

void xl_node_layer_name(xl *x, const onnx_node *n, const char *weight, char out[DL_NAME_MAX])
{
    size_t len = weight ? strlen(weight) : 0;
    char base[DL_NAME_MAX * 2];
    if (len > 7 && len < DL_NAME_MAX && !strcmp(weight + len - 7, ".weight"))
        snprintf(base, sizeof(base), "%.*s", (int)(len - 7), weight);
    else if (n->name[0])
        snprintf(base, sizeof(base), "%s", n->name);
    else
        snprintf(base, sizeof(base), "%s", n->op);
    xl_layer_name(x, base, out);
}

/* The dynamic value that layer or input `src` gives, or NULL. */
static const tvalue *source(xl *x, const char *src)
{
    for (int k = 0; src && k < x->nv; k++)
        if (!x->v[k].c && x->v[k].src && !strcmp(x->v[k].src, src))
            return &x->v[k];
    return NULL;
}

static bool has_axis0(json_t *list)
{
    size_t i;
    json_t *a;
    json_array_foreach(list, i, a)
        if (json_integer_value(a) == 0)
            return true;
    return false;
}

/* Whether layer l, of output shape d, keeps the time axis of its sequence
 * source (t positions) as its own first axis, as layer_seq.c rules: not
 * when it pools, reduces, slices, concatenates or moves that axis. The
 * engine refuses the layers that would mix positions; this says where
 * the time axis is for the translations that need to know. */
static bool keeps_time(json_t *l, const char *type, int nd, const int64_t *d, int64_t t)
{
    static const char *const ends[] = { "seq_pool", "flatten", "global_avgpool2d", "matmul" };
    for (size_t k = 0; k < sizeof(ends) / sizeof(ends[0]); k++)
        if (!strcmp(type, ends[k]))
            return false;
    json_t *ret = json_object_get(l, "return"), *perm = json_object_get(l, "perm");
    json_t *axis = json_object_get(l, "axis");
    if (ret && !strcmp(json_string_value(ret) ? json_string_value(ret) : "", "last"))
        return false;
    if (perm && json_integer_value(json_array_get(perm, 0)) != 0)
        return false;
    if (!strncmp(type, "reduce_", 7) && has_axis0(axis))
        return false;
    if ((!strcmp(type, "slice") || !strcmp(type, "concat")) && json_integer_value(axis) == 0)
        return false;
    return nd >= 1 && d[0] == t;
}

dl_status xl_emit(xl *x, json_t *l, const char *lname, const char *const *srcs, int nsrc,
                  tvalue *out, int nd, const int64_t *d)
{
    const tvalue *seq = NULL;
    for (int k = 0; k < nsrc && !seq; k++)
        if ((seq = source(x, srcs[k])) && !seq->seq)
            seq = NULL;
    const char *type = json_string_value(json_object_get(l, "type"));
    /* the time's length: a channels-first view holds it last */
    bool keeps = seq && type && keeps_time(l, type, nd, d, seq->d[seq->cf ? 1 : 0]);
    json_t *in = json_array(), *named = json_pack("{s:s,s:s?}", "name", lname, "type",
                                                  json_string_value(json_object_get(l, "type")));
    for (int k = 0; in && k < nsrc; k++)
        json_array_append_new(in, json_string(srcs[k]));
    char *name = onnx_strdup(x->g->arena, lname);
    /* "name" and "type" first, "inputs" last: as one writes model.json. */
    if (!l || !named || !in || !name || json_object_update(named, l) ||
        json_object_set_new(named, "inputs", in)) {
        if (!named || !l)
            json_decref(in);
        json_decref(l);
        json_decref(named);
        return dl_err_set(x->err, DL_ERR_NOMEM, "layers");
    }
    json_decref(l);
    l = named;
    if (json_array_append_new(x->layers, l))   /* takes l, even when it fails */
        return dl_err_set(x->err, DL_ERR_NOMEM, "layers");
    if (nd < 1 || nd > DL_MAX_DIMS)
        return dl_err_set(x->err, DL_ERR_INVALID, "layer '%s': a sample of %d dimensions "
                          "(the engine holds 1 to %d a sample)", lname, nd, DL_MAX_DIMS);
    out->c = NULL;
    out->src = name;
    out->nd = nd;
    out->seq = keeps;
    memcpy(out->d, d, (size_t)nd * sizeof(*d));
    return DL_OK;
}

dl_status xl_tensor(xl *x, const char *layer, const char *suffix, int ndim,
                    const int64_t *shape, const float *data, float fill)
{
    if (x->nt == x->capt) {
        int cap = x->capt ? 2 * x->capt : 32;
        tensor_out *nt = realloc(x->t, (size_t)cap * sizeof(*nt));
        if (!nt)
            return dl_err_set(x->err, DL_ERR_NOMEM, "tensors");
        x->t = nt;
        x->capt = cap;
    }
    int64_t n = dl_shape_numel(ndim, shape);
    tensor_out *t = &x->t[x->nt];
    t->data = malloc((size_t)(n ? n : 1) * sizeof(float));
    t->name = malloc(strlen(layer) + strlen(suffix) + 2);
    if (!t->data || !t->name) {
        free(t->data);
        free(t->name);
        return dl_err_set(x->err, DL_ERR_NOMEM, "tensors");
    }
    sprintf(t->name, "%s.%s", layer, suffix);
    t->ndim = ndim;
    memcpy(t->shape, shape, (size_t)ndim * sizeof(*shape));
    for (int64_t k = 0; k < n; k++)
        t->data[k] = data ? data[k] : fill;
    x->nt++;
    return DL_OK;
}

onnx_tensor *xl_const(xl *x, bool is_f, int nd, const int64_t *d)
{
    onnx_tensor *t = onnx_alloc(x->g->arena, sizeof(*t));
    int64_t n = dl_shape_numel(nd, d);
    if (!t || n < 0 || n > (1 << 24))
        return NULL;
    t->name = "";
    t->dtype = is_f ? DT_FLOAT : DT_INT64;
    t->ndim = nd;
    memcpy(t->dims, d, (size_t)nd * sizeof(*d));
    t->n = n;
    if (is_f)
        t->f = onnx_alloc(x->g->arena, (size_t)(n + 1) * sizeof(float));
    else
        t->i = onnx_alloc(x->g->arena, (size_t)(n + 1) * sizeof(int64_t));
    return t->f || t->i ? t : NULL;
}
