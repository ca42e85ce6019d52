/* model_conf.c: parsing and validation of model.json (every error names
 * the file, the key and what is wrong with it), its input scaling and the
 * model name rule. */
#define _POSIX_C_SOURCE 200809L
#include "nn/dl_gen.h"
#include "nn/layer.h"

#include <float.h>
#include <jansson.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

/* Context for error messages: "what: where: problem". */
typedef struct ctx {
    const char *what;
    char        where[96];
    dl_err     *err;
} ctx;

static dl_status bad(ctx *c, const char *key, const char *problem)
{
    return dl_err_set(c->err, DL_ERR_INVALID, "%s: %s'%s' %s", c->what,
                      c->where, key, problem);
}

static bool known_key(const char *key, const char *const *allowed)
{
    for (; *allowed; allowed++)
        if (strcmp(key, *allowed) == 0)
            return true;
    return false;
}

static dl_status check_keys(ctx *c, json_t *obj, const char *const *allowed)
{
    const char *key;
    json_t *v;
    json_object_foreach(obj, key, v)
        if (!known_key(key, allowed))
            return bad(c, key, "is not a known key here");
    return DL_OK;
}

/* Optional integer in [lo, hi]; absent keeps *out. */
static dl_status get_int(ctx *c, json_t *obj, const char *key, int64_t lo,
                         int64_t hi, bool required, int64_t *out)
{
    json_t *v = json_object_get(obj, key);
    if (!v)
        return required ? bad(c, key, "is missing") : DL_OK;
    if (!json_is_integer(v) || json_integer_value(v) < lo || json_integer_value(v) > hi) {
        char msg[96];
        snprintf(msg, sizeof(msg), "must be an integer in [%lld, %lld]",
                 (long long)lo, (long long)hi);
        return bad(c, key, msg);
    }
    *out = json_integer_value(v);
    return DL_OK;
}

static dl_status get_num(ctx *c, json_t *obj, const char *key, double lo,
                         double hi, double *out)
{
    json_t *v = json_object_get(obj, key);
    if (!v)
        return DL_OK;
    if (!json_is_number(v) || !(json_number_value(v) >= lo && json_number_value(v) <= hi)) {
        char msg[96];
        snprintf(msg, sizeof(msg), "must be a number in [%g, %g]", lo, hi);
        return bad(c, key, msg);
    }
    *out = json_number_value(v);
    return DL_OK;
}

static dl_status get_bool(ctx *c, json_t *obj, const char *key, bool *out)
{
    json_t *v = json_object_get(obj, key);
    if (!v)
        return DL_OK;
    if (!json_is_boolean(v))
        return bad(c, key, "must be true or false");
    *out = json_is_true(v);
    return DL_OK;
}

static dl_status get_name(ctx *c, json_t *obj, const char *key, bool required,
                          char *out)
{
    json_t *v = json_object_get(obj, key);
    if (!v)
        return required ? bad(c, key, "is missing") : DL_OK;
    const char *s = json_string_value(v);
    if (!s || !*s || strlen(s) >= DL_NAME_MAX)
        return bad(c, key, "must be a non-empty string of under 64 characters");
    for (const char *p = s; *p; p++)
        if (!(*p == '-' || *p == '_' || *p == '.' || (*p >= '0' && *p <= '9') ||
              (*p >= 'a' && *p <= 'z') || (*p >= 'A' && *p <= 'Z')))
            return bad(c, key, "may hold only letters, digits, '-', '_' and '.'");
    strcpy(out, s);
    return DL_OK;
}

/* kernel_size / stride / padding: an integer or [h, w]. */
static dl_status get_pair(ctx *c, json_t *obj, const char *key, int64_t lo,
                          bool required, int64_t *h, int64_t *w)
{
    json_t *v = json_object_get(obj, key);
    if (!v)
        return required ? bad(c, key, "is missing") : DL_OK;
    if (json_is_integer(v) && json_integer_value(v) >= lo && json_integer_value(v) <= 4096) {
        *h = *w = json_integer_value(v);
        return DL_OK;
    }
    json_t *a = json_array_get(v, 0), *b = json_array_get(v, 1);
    if (json_is_array(v) && json_array_size(v) == 2 && json_is_integer(a) &&
        json_is_integer(b) && json_integer_value(a) >= lo && json_integer_value(b) >= lo &&
        json_integer_value(a) <= 4096 && json_integer_value(b) <= 4096) {
        *h = json_integer_value(a);
        *w = json_integer_value(b);
        return DL_OK;
    }
    return bad(c, key, lo ? "must be a positive integer or [h, w]"
                          : "must be a non-negative integer or [h, w]");
}

/* "must be one of dense, conv2d, ...": the types of layer_table, in its
 * order. */
static dl_status bad_type(ctx *c)
{
    char msg[640] = "must be one of ";
    size_t len = strlen(msg);
    for (int t = 0; t < DL_LAYER_COUNT; t++)
        len += (size_t)snprintf(msg + len, len < sizeof(msg) ? sizeof(msg) - len : 0, "%s%s",
                                t ? ", " : "", layer_table[t].name);
    return bad(c, "type", msg);
}

/* Index of the layer or model input called `name` among the model inputs
 * and layers [0, upto), as a source (see dl_layer_conf.src); 1 if none. */
static int find_source(const dl_model_conf *m, int upto, const char *name)
{
    for (int k = 0; k < upto; k++)
        if (strcmp(m->layers[k].name, name) == 0)
            return k;
    for (int k = 0; k < m->ninputs; k++)
        if (strcmp(m->inputs[k].name, name) == 0)
            return -1 - k;
    return INT32_MAX;
}

/* Whether a layer after position i in the JSON array is called name. */
static bool named_below(json_t *layers, size_t i, const char *name)
{
    for (size_t k = i + 1; k < json_array_size(layers); k++) {
        const char *s = json_string_value(json_object_get(json_array_get(layers, k), "name"));
        if (s && strcmp(s, name) == 0)
            return true;
    }
    return false;
}

/* A layer's "inputs": names of model inputs or layers above it. Without
 * them, the previous layer (the first layer: the first model input). A
 * constant says "inputs": [] (it reads none); no other layer may. */
static dl_status parse_sources(ctx *c, json_t *j, json_t *layers, size_t i,
                               dl_model_conf *m, dl_layer_conf *l)
{
    json_t *in = json_object_get(j, "inputs");
    if (l->type == DL_LAYER_CONSTANT) {
        l->nsrc = 0;
        return json_is_array(in) && json_array_size(in) == 0
             ? DL_OK : bad(c, "inputs", "must be [] for a constant (it reads no input)");
    }
    if (!in) {
        l->nsrc = 1;
        l->src[0] = i ? (int)i - 1 : -1;
        return DL_OK;
    }
    size_t n = json_array_size(in);
    if (!json_is_array(in) || n < 1 || n > DL_LAYER_MAX_IN)
        return bad(c, "inputs", "must be an array of 1 to 8 names");
    for (size_t k = 0; k < n; k++) {
        const char *s = json_string_value(json_array_get(in, k));
        char msg[256];
        if (!s)
            return bad(c, "inputs", "must be an array of 1 to 8 names");
        int src = find_source(m, (int)i, s);
        if (src == INT32_MAX && (strcmp(s, l->name) == 0 || named_below(layers, i, s))) {
            snprintf(msg, sizeof(msg), "names '%.64s', which is not above this layer: a layer "
                     "reads only model inputs and layers above it (no cycles)", s);
            return bad(c, "inputs", msg);
        }
        if (src == INT32_MAX) {
            snprintf(msg, sizeof(msg), "names unknown input '%.64s'", s);
            return bad(c, "inputs", msg);
        }
        l->src[k] = src;
    }
    l->nsrc = (int)n;
    return DL_OK;
}

/* A reshape's "shape": 1 to 4 positive integers, at most one -1 (with
 * free_dim; a constant's has none). */
static dl_status get_shape(ctx *c, json_t *obj, bool free_dim, dl_layer_conf *l)
{
    json_t *v = json_object_get(obj, "shape");
    size_t n = json_array_size(v);
    int minus = 0;
    const char *msg = free_dim ? "must be an array of 1 to 4 positive integers (one may be -1)"
                               : "must be an array of 1 to 4 positive integers";
    if (!v)
        return bad(c, "shape", "is missing");
    if (!json_is_array(v) || n < 1 || n > DL_MAX_DIMS)
        return bad(c, "shape", msg);
    for (size_t k = 0; k < n; k++) {
        json_t *d = json_array_get(v, k);
        int64_t x = json_is_integer(d) ? json_integer_value(d) : 0;
        minus += x == -1;
        if ((x < 1 && (x != -1 || !free_dim)) || x > (1 << 24) || minus > 1)
            return bad(c, "shape", msg);
        l->shape[k] = x;
    }
    l->nshape = (int)n;
    return DL_OK;
}

static dl_status get_float(ctx *c, json_t *j, const char *key, double lo, double hi,
                           float *out)
{
    double d = *out;
    dl_status st = get_num(c, j, key, lo, hi, &d);
    *out = (float)d;
    return st;
}

/* A list of 1 to 4 integers in [lo, hi] (or, with one_ok, one integer). */
static dl_status get_ints(ctx *c, json_t *obj, const char *key, int64_t lo, int64_t hi,
                          bool one_ok, int *n, int64_t *out)
{
    json_t *v = json_object_get(obj, key);
    char msg[96];
    snprintf(msg, sizeof(msg), "must be %san array of 1 to 4 integers in [%lld, %lld]",
             one_ok ? "an integer or " : "", (long long)lo, (long long)hi);
    if (one_ok && json_is_integer(v)) {
        *n = 1;
        out[0] = json_integer_value(v);
        return out[0] < lo || out[0] > hi ? bad(c, key, msg) : DL_OK;
    }
    size_t len = json_array_size(v);
    if (!json_is_array(v) || len < 1 || len > DL_MAX_DIMS)
        return bad(c, key, v ? msg : "is missing");
    for (size_t k = 0; k < len; k++) {
        json_t *d = json_array_get(v, k);
        if (!json_is_integer(d) || json_integer_value(d) < lo || json_integer_value(d) > hi)
            return bad(c, key, msg);
        out[k] = json_integer_value(d);
    }
    *n = (int)len;
    return DL_OK;
}

/* conv1d and maxpool1d: a window over the last dimension of [C, L]. */
static dl_status parse_1d(ctx *c, json_t *j, dl_layer_conf *l)
{
    static const char *const conv[] = {"name", "type", "inputs", "filters", "kernel_size",
                                       "stride", "padding", "bias", "groups", "dilation",
                                       NULL};
    static const char *const pool[] = {"name", "type", "inputs", "kernel_size", "stride",
                                       "padding", NULL};
    bool is_conv = l->type == DL_LAYER_CONV1D;
    dl_status st = check_keys(c, j, is_conv ? conv : pool);
    l->kh = l->sh = 1;
    if (st || (st = get_int(c, j, "kernel_size", 1, 4096, true, &l->kw)))
        return st;
    l->sw = is_conv ? 1 : l->kw;
    if ((st = get_int(c, j, "stride", 1, 4096, false, &l->sw)) ||
        (st = get_int(c, j, "padding", 0, 4096, false, &l->pw)))
        return st;
    if (!is_conv)
        return DL_OK;
    if ((st = get_bool(c, j, "bias", &l->bias)) ||
        (st = get_int(c, j, "groups", 1, 1 << 16, false, &l->groups)) ||
        (st = get_int(c, j, "dilation", 1, 4096, false, &l->dw)))
        return st;
    return get_int(c, j, "filters", 1, 1 << 16, true, &l->filters);
}

/* A number for key (kept in *out when absent and not required); one past
 * float's range is an infinity (ONNX writes -FLT_MAX for "no bound"). */
static dl_status get_real(ctx *c, json_t *j, const char *key, bool required, float *out)
{
    json_t *v = json_object_get(j, key);
    if (!v)
        return required ? bad(c, key, "is missing") : DL_OK;
    if (!json_is_number(v))
        return bad(c, key, "must be a number");
    double d = json_number_value(v);
    *out = d > FLT_MAX ? INFINITY : d < -FLT_MAX ? -INFINITY : (float)d;
    return DL_OK;
}

/* pow (exponent), leaky_relu (alpha), clip (min, max), hardsigmoid
 * (alpha, beta). */
static dl_status parse_elem(ctx *c, json_t *j, dl_layer_conf *l)
{
    static const char *const pw[] = {"name", "type", "inputs", "exponent", NULL};
    static const char *const lr[] = {"name", "type", "inputs", "alpha", NULL};
    static const char *const cl[] = {"name", "type", "inputs", "min", "max", NULL};
    static const char *const hs[] = {"name", "type", "inputs", "alpha", "beta", NULL};
    dl_status st;
    switch (l->type) {
    case DL_LAYER_POW:
        return (st = check_keys(c, j, pw)) ? st : get_real(c, j, "exponent", true, &l->exponent);
    case DL_LAYER_LEAKY_RELU:
        l->alpha = 0.01f;
        return (st = check_keys(c, j, lr)) ? st : get_real(c, j, "alpha", false, &l->alpha);
    case DL_LAYER_CLIP:
        l->lo = -INFINITY;
        l->hi = INFINITY;
        if ((st = check_keys(c, j, cl)) || (st = get_real(c, j, "min", false, &l->lo)) ||
            (st = get_real(c, j, "max", false, &l->hi)))
            return st;
        return l->lo <= l->hi ? DL_OK : bad(c, "min", "must not exceed 'max'");
    default:
        l->alpha = 1.0f / 6.0f;
        l->beta = 0.5f;
        if ((st = check_keys(c, j, hs)) || (st = get_real(c, j, "alpha", false, &l->alpha)))
            return st;
        return get_real(c, j, "beta", false, &l->beta);
    }
}

/* slice: axis (required), start (0), end (the axis' end), step (1). */
static dl_status parse_slice(ctx *c, json_t *j, dl_layer_conf *l)
{
    static const char *const keys[] = {"name", "type", "inputs", "axis", "start", "end",
                                       "step", NULL};
    dl_status st;
    l->start = 0;
    l->end = INT64_MAX;
    l->step = 1;
    if ((st = check_keys(c, j, keys)) ||
        (st = get_int(c, j, "axis", -DL_MAX_DIMS, DL_MAX_DIMS - 1, true, &l->axis)) ||
        (st = get_int(c, j, "start", INT64_MIN, INT64_MAX, false, &l->start)) ||
        (st = get_int(c, j, "end", INT64_MIN, INT64_MAX, false, &l->end)))
        return st;
    return get_int(c, j, "step", 1, INT32_MAX, false, &l->step);
}

/* lstm and gru: hidden (required), layers (1), bidirectional (false),
 * return ("sequence" or "last"), bias (true). */
static dl_status parse_rnn(ctx *c, json_t *j, dl_layer_conf *l)
{
    static const char *const keys[] = {"name", "type", "inputs", "hidden", "layers",
                                       "bidirectional", "return", "bias", NULL};
    dl_status st;
    l->num_layers = 1;
    if ((st = check_keys(c, j, keys)) || (st = get_bool(c, j, "bias", &l->bias)) ||
        (st = get_bool(c, j, "bidirectional", &l->bidirectional)) ||
        (st = get_int(c, j, "layers", 1, 4, false, &l->num_layers)))
        return st;
    json_t *r = json_object_get(j, "return");
    const char *s = json_string_value(r);
    if (r && (!s || (strcmp(s, "sequence") && strcmp(s, "last"))))
        return bad(c, "return", "must be \"sequence\" or \"last\"");
    l->ret_seq = !s || !strcmp(s, "sequence");
    return get_int(c, j, "hidden", 1, 1 << 16, true, &l->hidden);
}

/* The layer types made for sequences besides lstm and gru. */
static dl_status parse_seq_layer(ctx *c, json_t *j, dl_layer_conf *l)
{
    static const char *const attn[] = {"name", "type", "inputs", "heads", "causal", "bias",
                                       NULL};
    static const char *const pos[] = {"name", "type", "inputs", "max_length", NULL};
    static const char *const pool[] = {"name", "type", "inputs", "mode", NULL};
    static const char *const modes[] = {"mean", "max", "sum", "last"};
    dl_status st;
    switch (l->type) {
    case DL_LAYER_ATTENTION:
        if ((st = check_keys(c, j, attn)) || (st = get_bool(c, j, "causal", &l->causal)) ||
            (st = get_bool(c, j, "bias", &l->bias)))
            return st;
        return get_int(c, j, "heads", 1, 1 << 16, true, &l->heads);
    case DL_LAYER_POS_EMBEDDING:
        if ((st = check_keys(c, j, pos)))
            return st;
        return get_int(c, j, "max_length", 1, 1 << 20, true, &l->max_length);
    case DL_LAYER_SEQ_POOL: {
        if ((st = check_keys(c, j, pool)))
            return st;
        const char *s = json_string_value(json_object_get(j, "mode"));
        for (int k = 0; s && k < 4; k++)
            if (!strcmp(s, modes[k])) {
                l->pool = k;
                return DL_OK;
            }
        return bad(c, "mode", "must be \"mean\", \"max\", \"sum\" or \"last\"");
    }
    default: {
        static const char *const plain[] = {"name", "type", "inputs", NULL};
        if ((st = check_keys(c, j, plain)))
            return st;
        return bad(c, "type", "\"crf\" is not written as a layer: give an output "
                   "\"loss\": \"crf\"");
    }
    }
}

/* The keys and defaults of the layer types added for graphs. */
static dl_status parse_graph_layer(ctx *c, json_t *j, dl_layer_conf *l)
{
    static const char *const plain[] = {"name", "type", "inputs", NULL};
    static const char *const axis[] = {"name", "type", "inputs", "axis", NULL};
    static const char *const shape[] = {"name", "type", "inputs", "shape", NULL};
    static const char *const ln[] = {"name", "type", "inputs", "eps", NULL};
    static const char *const gelu[] = {"name", "type", "inputs", "approximate", NULL};
    static const char *const perm[] = {"name", "type", "inputs", "perm", NULL};
    static const char *const sdpa[] = {"name", "type", "inputs", "heads", "scale", "causal",
                                       NULL};
    dl_status st;
    switch (l->type) {
    case DL_LAYER_CONCAT:
    case DL_LAYER_SOFTMAX:
    case DL_LAYER_LOG_SOFTMAX:
        l->axis = l->type == DL_LAYER_CONCAT ? 0 : -1;
        if ((st = check_keys(c, j, axis)))
            return st;
        return get_int(c, j, "axis", -DL_MAX_DIMS, DL_MAX_DIMS - 1, false, &l->axis);
    case DL_LAYER_RESHAPE:
    case DL_LAYER_CONSTANT:
        if ((st = check_keys(c, j, shape)))
            return st;
        return get_shape(c, j, l->type == DL_LAYER_RESHAPE, l);
    case DL_LAYER_LAYERNORM:
        if ((st = check_keys(c, j, ln)))
            return st;
        return get_float(c, j, "eps", 1e-12, 1.0, &l->eps);
    case DL_LAYER_TRANSPOSE:
        if ((st = check_keys(c, j, perm)))
            return st;
        return get_ints(c, j, "perm", 0, DL_MAX_DIMS - 1, false, &l->nperm, l->perm);
    case DL_LAYER_REDUCE_MEAN:
    case DL_LAYER_REDUCE_SUM:
        if ((st = check_keys(c, j, axis)))
            return st;
        return get_ints(c, j, "axis", -DL_MAX_DIMS, DL_MAX_DIMS - 1, true, &l->naxes, l->axes);
    case DL_LAYER_CONV1D:
    case DL_LAYER_MAXPOOL1D:
        return parse_1d(c, j, l);
    case DL_LAYER_POW:
    case DL_LAYER_LEAKY_RELU:
    case DL_LAYER_CLIP:
    case DL_LAYER_HARDSIGMOID:
        return parse_elem(c, j, l);
    case DL_LAYER_SLICE:
        return parse_slice(c, j, l);
    case DL_LAYER_LSTM:
    case DL_LAYER_GRU:
        return parse_rnn(c, j, l);
    case DL_LAYER_ATTENTION:
    case DL_LAYER_POS_EMBEDDING:
    case DL_LAYER_SEQ_POOL:
    case DL_LAYER_CRF:
        return parse_seq_layer(c, j, l);
    case DL_LAYER_SDPA:
        if ((st = check_keys(c, j, sdpa)) || (st = get_bool(c, j, "causal", &l->causal)) ||
            (st = get_float(c, j, "scale", 1e-30, 1e30, &l->scale)))
            return st;
        return get_int(c, j, "heads", 1, 1 << 16, true, &l->heads);
    case DL_LAYER_GELU: {
        if ((st = check_keys(c, j, gelu)))
            return st;
        json_t *a = json_object_get(j, "approximate");
        const char *s = json_string_value(a);
        if (a && (!s || (strcmp(s, "tanh") && strcmp(s, "none"))))
            return bad(c, "approximate", "must be \"none\" or \"tanh\"");
        l->approx_tanh = s && !strcmp(s, "tanh");
        return DL_OK;
    }
    default:
        return check_keys(c, j, plain);
    }
}

static dl_status parse_layer(ctx *c, json_t *layers, size_t i, dl_model_conf *m)
{
    json_t *j = json_array_get(layers, i);
    dl_layer_conf *l = &m->layers[i];
    if (!json_is_object(j))
        return dl_err_set(c->err, DL_ERR_INVALID, "%s: %smust be an object",
                          c->what, c->where);
    dl_status st = get_name(c, j, "name", true, l->name);
    if (st != DL_OK)
        return st;
    snprintf(c->where, sizeof(c->where), "layer '%s': ", l->name);
    const char *type = json_string_value(json_object_get(j, "type"));
    if (!type)
        return bad(c, "type", "is missing or not a string");
    if (!dl_layer_type_of(type, &l->type))
        return bad_type(c);
    l->bias = true;
    l->eps = 1e-5f;
    l->momentum = 0.1f;
    l->sh = l->sw = 1;
    l->dh = l->dw = l->groups = 1;
    if ((st = parse_sources(c, j, layers, i, m, l)))
        return st;

    static const char *const dense[] = {"name", "type", "inputs", "units", "bias", NULL};
    static const char *const conv[] = {"name", "type", "inputs", "filters", "kernel_size",
                                       "stride", "padding", "bias", "groups", "dilation",
                                       NULL};
    static const char *const pool[] = {"name", "type", "inputs", "kernel_size", "stride",
                                       "padding", NULL};
    static const char *const bn[] = {"name", "type", "inputs", "eps", "momentum", NULL};
    static const char *const drop[] = {"name", "type", "inputs", "rate", NULL};
    static const char *const emb[] = {"name", "type", "inputs", "num_embeddings", "dim",
                                      "padding_idx", NULL};
    double d;
    switch (l->type) {
    case DL_LAYER_DENSE:
        if ((st = check_keys(c, j, dense)) || (st = get_bool(c, j, "bias", &l->bias)))
            return st;
        return get_int(c, j, "units", 1, 1 << 24, true, &l->units);
    case DL_LAYER_CONV2D:
        if ((st = check_keys(c, j, conv)) || (st = get_bool(c, j, "bias", &l->bias)) ||
            (st = get_int(c, j, "filters", 1, 1 << 16, true, &l->filters)) ||
            (st = get_pair(c, j, "kernel_size", 1, true, &l->kh, &l->kw)) ||
            (st = get_pair(c, j, "stride", 1, false, &l->sh, &l->sw)) ||
            (st = get_pair(c, j, "dilation", 1, false, &l->dh, &l->dw)) ||
            (st = get_int(c, j, "groups", 1, 1 << 16, false, &l->groups)))
            return st;
        return get_pair(c, j, "padding", 0, false, &l->ph, &l->pw);
    case DL_LAYER_MAXPOOL2D:
    case DL_LAYER_AVGPOOL2D:
        if ((st = check_keys(c, j, pool)) ||
            (st = get_pair(c, j, "kernel_size", 1, true, &l->kh, &l->kw)))
            return st;
        l->sh = l->kh;
        l->sw = l->kw;
        if ((st = get_pair(c, j, "stride", 1, false, &l->sh, &l->sw)))
            return st;
        return get_pair(c, j, "padding", 0, false, &l->ph, &l->pw);
    case DL_LAYER_BATCHNORM:
        if ((st = check_keys(c, j, bn)))
            return st;
        d = l->eps;
        if ((st = get_num(c, j, "eps", 1e-12, 1.0, &d)))
            return st;
        l->eps = (float)d;
        d = l->momentum;
        st = get_num(c, j, "momentum", 0.0, 1.0, &d);
        l->momentum = (float)d;
        return st;
    case DL_LAYER_DROPOUT:
        if ((st = check_keys(c, j, drop)))
            return st;
        d = 0.5;
        st = get_num(c, j, "rate", 0.0, 0.999999, &d);
        l->rate = (float)d;
        return st;
    case DL_LAYER_EMBEDDING:
        l->padding_idx = -1;
        if ((st = check_keys(c, j, emb)) ||
            (st = get_int(c, j, "num_embeddings", 1, INT32_MAX, true, &l->num_embeddings)) ||
            (st = get_int(c, j, "padding_idx", 0, INT32_MAX, false, &l->padding_idx)))
            return st;
        if (l->padding_idx >= l->num_embeddings)
            return bad(c, "padding_idx", "must be below 'num_embeddings'");
        return get_int(c, j, "dim", 1, 1 << 20, true, &l->dim);
    default:
        return parse_graph_layer(c, j, l);
    }
}

static dl_status parse_scaling(ctx *c, json_t *sc, dl_scaling *out)
{
    static const char *const skeys[] = {"scale", "mean", "std", NULL};
    if (!json_is_object(sc))
        return bad(c, "scaling", "must be an object");
    double scale = 1.0, mean = 0.0, sd = 1.0;
    dl_status st;
    if ((st = check_keys(c, sc, skeys)) || (st = get_num(c, sc, "scale", -1e30, 1e30, &scale)) ||
        (st = get_num(c, sc, "mean", -1e30, 1e30, &mean)) ||
        (st = get_num(c, sc, "std", 1e-30, 1e30, &sd)))
        return st;
    *out = (dl_scaling){ (float)scale, (float)mean, (float)sd };
    return DL_OK;
}

static dl_status get_dtype(ctx *c, json_t *in, dl_in_type *out)
{
    static const char *const names[] = {"FP32", "UINT8", "INT32", "INT64", "BYTES"};
    json_t *v = json_object_get(in, "datatype");
    const char *dt = json_string_value(v);
    *out = DL_IN_FP32;
    for (int k = 0; v && k < 5; k++)
        if (dt && strcmp(dt, names[k]) == 0) {
            *out = (dl_in_type)k;
            return DL_OK;
        }
    return v ? bad(c, "datatype", "must be \"FP32\", \"UINT8\", \"INT32\", \"INT64\" or "
                   "\"BYTES\"")
             : DL_OK;
}

/* The folder of the file `what` names: relative paths in model.json
 * (a vocabulary, a labels file) are read against it. */
static void dir_of(const char *what, char *out, size_t len)
{
    const char *slash = strrchr(what, '/');
    if (!slash)
        snprintf(out, len, ".");
    else if (slash == what)                /* "/model.json": the root */
        snprintf(out, len, "/");
    else
        snprintf(out, len, "%.*s", (int)(slash - what), what);
}

/* A text input's "tokenizer": {"type": "bytes"} or {"type": "words",
 * "vocab": FILE, "lowercase": BOOL}. */
static dl_status parse_tokenizer(ctx *c, json_t *t, dl_tokenizer_conf *tok)
{
    static const char *const keys[] = {"type", "vocab", "lowercase", NULL};
    if (!json_is_object(t))
        return bad(c, "tokenizer", "must be an object");
    dl_status st = check_keys(c, t, keys);
    const char *type = json_string_value(json_object_get(t, "type"));
    if (st)
        return st;
    if (!type || (strcmp(type, "bytes") && strcmp(type, "words")))
        return bad(c, "tokenizer", "needs \"type\": \"bytes\" or \"words\"");
    tok->kind = type[0] == 'b' ? DL_TOK_BYTES : DL_TOK_WORDS;
    json_t *v = json_object_get(t, "vocab");
    if (tok->kind == DL_TOK_BYTES && (v || json_object_get(t, "lowercase")))
        return bad(c, "tokenizer", "of type \"bytes\" takes no 'vocab' or 'lowercase'");
    if (tok->kind == DL_TOK_BYTES)
        return DL_OK;
    if (!json_string_value(v) || !*json_string_value(v))
        return bad(c, "tokenizer", "of type \"words\" needs 'vocab', a file name");
    const char *file = json_string_value(v);
    char dir[4096];
    dir_of(c->what, dir, sizeof(dir));
    size_t n = strlen(dir) + strlen(file) + 2;
    if (!(tok->vocab = malloc(n)))
        return dl_err_set(c->err, DL_ERR_NOMEM, "vocab path");
    if (file[0] == '/')
        snprintf(tok->vocab, n, "%s", file);
    else
        snprintf(tok->vocab, n, "%s/%s", dir, file);
    return get_bool(c, t, "lowercase", &tok->lowercase);
}

/* A sequence input: its first dimension -1 (or BYTES text), "max_length"
 * its time axis' capacity. */
static dl_status parse_sequence(ctx *c, json_t *in, dl_input_conf *ic)
{
    json_t *tok = json_object_get(in, "tokenizer");
    if (tok && ic->dtype != DL_IN_BYTES)
        return bad(c, "tokenizer", "applies to BYTES inputs only");
    if (ic->dtype == DL_IN_BYTES) {
        if (ic->ndim != 1 || ic->shape[0] != 1)
            return bad(c, "shape", "of a BYTES input must be [1] (one string a sample)");
        if (!tok)
            return bad(c, "tokenizer", "is missing (a BYTES input needs one)");
        dl_status st = parse_tokenizer(c, tok, &ic->tok);
        if (st)
            return st;
        ic->shape[0] = -1;
    }
    bool seq = ic->shape[0] == -1;
    json_t *ml = json_object_get(in, "max_length");
    if (ml && !seq)
        return bad(c, "max_length", "applies to sequence inputs only (a first dimension "
                   "of -1, or BYTES)");
    if (!seq)
        return DL_OK;
    ic->max_length = 256;
    dl_status st = get_int(c, in, "max_length", 1, 1 << 20, false, &ic->max_length);
    ic->shape[0] = ic->max_length;
    return st;
}

/* One model input object; `named` when its name is required (a list). */
static dl_status parse_input(ctx *c, json_t *in, bool named, dl_input_conf *ic)
{
    static const char *const keys[] = {"name", "shape", "datatype", "scaling",
                                       "max_length", "tokenizer", NULL};
    static const char *const shape_msg = "must be an array of 1 to 4 positive integers (the "
                                         "first may be -1: a sequence)";
    if (!json_is_object(in))
        return bad(c, "input", "must be an object");
    dl_status st = check_keys(c, in, keys);
    strcpy(ic->name, "input");
    if (st || (st = get_name(c, in, "name", named, ic->name)))
        return st;
    if (named)
        snprintf(c->where, sizeof(c->where), "input '%s': ", ic->name);
    json_t *shape = json_object_get(in, "shape");
    size_t nd = json_array_size(shape);
    if (!json_is_array(shape) || nd < 1 || nd > DL_MAX_DIMS)
        return bad(c, "shape", shape_msg);
    for (size_t i = 0; i < nd; i++) {
        json_t *v = json_array_get(shape, i);
        int64_t x = json_is_integer(v) ? json_integer_value(v) : 0;
        if ((x < 1 && (x != -1 || i > 0)) || x > (1 << 24))
            return bad(c, "shape", shape_msg);
        ic->shape[i] = x;
    }
    ic->ndim = (int)nd;
    if ((st = get_dtype(c, in, &ic->dtype)) || (st = parse_sequence(c, in, ic)))
        return st;
    /* -1 past int64 (4 dimensions of 2^24 are 2^96): model_check.c refuses
     * such a shape, naming its limit. */
    ic->dim = 1;
    for (int i = 0; i < ic->ndim && ic->dim > 0; i++)
        if (__builtin_mul_overflow(ic->dim, ic->shape[i], &ic->dim))
            ic->dim = -1;
    ic->sc = (dl_scaling){ 1.0f, 0.0f, 1.0f };
    json_t *sc = json_object_get(in, "scaling");
    if (sc && ic->dtype != DL_IN_FP32)
        return bad(c, "scaling", "applies to FP32 inputs only (ids are not scaled)");
    if (!sc)
        return DL_OK;
    if (!named)
        snprintf(c->where, sizeof(c->where), "input.scaling: ");
    return parse_scaling(c, sc, &ic->sc);
}

/* "inputs" (a list) or "input" (one object); names are unique. */
static dl_status parse_inputs(ctx *c, json_t *list, json_t *one, dl_model_conf *m)
{
    snprintf(c->where, sizeof(c->where), "input: ");
    if (list && one)
        return bad(c, "inputs", "and 'input' exclude each other");
    if (!list && !one)
        return bad(c, "input", "is missing");
    size_t n = list ? json_array_size(list) : 1;
    if (list && (!json_is_array(list) || n < 1 || n > 64))
        return bad(c, "inputs", "must be an array of 1 to 64 input objects");
    if (!(m->inputs = calloc(n, sizeof(*m->inputs))))
        return dl_err_set(c->err, DL_ERR_NOMEM, "inputs");
    for (size_t i = 0; i < n; i++) {
        if (list)
            snprintf(c->where, sizeof(c->where), "inputs[%zu]: ", i);
        dl_status st = parse_input(c, list ? json_array_get(list, i) : one, list != NULL,
                                   &m->inputs[i]);
        if (st)
            return st;
        m->ninputs = (int)i + 1;
        for (size_t k = 0; k < i; k++)
            if (strcmp(m->inputs[k].name, m->inputs[i].name) == 0)
                return bad(c, "name", "is used twice");
    }
    dl_input_conf *in0 = &m->inputs[0];
    strcpy(m->input_name, in0->name);
    m->in_ndim = in0->ndim;
    memcpy(m->in_shape, in0->shape, sizeof(m->in_shape));
    m->scale = in0->sc.scale;
    m->mean = in0->sc.mean;
    m->std = in0->sc.std;
    return DL_OK;
}

/* "labels": a file in the model's folder, a label a line. */
static dl_status labels_file(ctx *c, const char *file, dl_output_conf *o)
{
    char dir[4096], path[8192], *text;
    size_t len;
    dir_of(c->what, dir, sizeof(dir));
    snprintf(path, sizeof(path), "%s/%s", file[0] == '/' ? "" : dir, file);
    dl_status st = dl_file_read(path, &text, &len, c->err);
    if (st)
        return dl_err_prefix(c->err, "%s: %slabels", c->what, c->where);
    size_t n = 0;
    for (size_t i = 0; i < len; i++)
        n += text[i] == '\n' || i + 1 == len;
    o->labels = calloc(n + 1, sizeof(char *));
    for (char *p = text, *end = text + len; o->labels && p < end; o->nlabels++) {
        char *nl = memchr(p, '\n', (size_t)(end - p));
        size_t k = nl ? (size_t)(nl - p) : (size_t)(end - p);
        if (k == 0 || !(o->labels[o->nlabels] = strndup(p, k))) {
            free(text);
            return k ? dl_err_set(c->err, DL_ERR_NOMEM, "labels")
                     : dl_err_set(c->err, DL_ERR_INVALID, "%s: line %d is empty (a label a "
                                  "line)", path, o->nlabels + 1);
        }
        p += k + 1;
    }
    free(text);
    return o->labels ? DL_OK : dl_err_set(c->err, DL_ERR_NOMEM, "labels");
}

static dl_status parse_labels(ctx *c, json_t *labels, dl_output_conf *o)
{
    if (!labels)
        return DL_OK;
    if (json_is_string(labels))
        return labels_file(c, json_string_value(labels), o);
    if (!json_is_array(labels))
        return bad(c, "labels", "must be an array of strings or a file name");
    o->labels = calloc(json_array_size(labels) + 1, sizeof(char *));
    if (!o->labels)
        return dl_err_set(c->err, DL_ERR_NOMEM, "labels");
    for (size_t i = 0; i < json_array_size(labels); i++) {
        const char *s = json_string_value(json_array_get(labels, i));
        if (!s || !*s)
            return bad(c, "labels", "must be an array of non-empty strings");
        if (!(o->labels[i] = strdup(s)))
            return dl_err_set(c->err, DL_ERR_NOMEM, "labels");
        o->nlabels = (int)i + 1;
    }
    return DL_OK;
}

static dl_status get_loss(ctx *c, json_t *obj, dl_loss *out)
{
    json_t *v = json_object_get(obj, "loss");
    const char *s = json_string_value(v);
    *out = DL_LOSS_XENT;
    if (!v)
        return DL_OK;
    if (s && !strcmp(s, "mse"))
        *out = DL_LOSS_MSE;
    else if (s && !strcmp(s, "bce_with_logits"))
        *out = DL_LOSS_BCE;
    else if (s && !strcmp(s, "crf"))
        *out = DL_LOSS_CRF;
    else if (s && !strcmp(s, "next_token"))
        *out = DL_LOSS_NEXT_TOKEN;
    else if (!s || strcmp(s, "softmax_cross_entropy"))
        return bad(c, "loss", "must be \"softmax_cross_entropy\", \"mse\", "
                   "\"bce_with_logits\", \"crf\" or \"next_token\"");
    return DL_OK;
}

/* One entry of "outputs": name, from (default: name), loss, weight, labels. */
static dl_status parse_graph_output(ctx *c, json_t *o, dl_model_conf *m, dl_output_conf *oc)
{
    static const char *const keys[] = {"name", "from", "loss", "weight", "labels", "of",
                                       NULL};
    if (!json_is_object(o))
        return bad(c, "outputs", "must hold output objects");
    dl_status st = check_keys(c, o, keys);
    if (st || (st = get_name(c, o, "name", true, oc->name)))
        return st;
    snprintf(c->where, sizeof(c->where), "output '%s': ", oc->name);
    char from[DL_NAME_MAX];
    strcpy(from, oc->name);
    double w = 1.0;
    if ((st = get_name(c, o, "from", false, from)) || (st = get_loss(c, o, &oc->loss)) ||
        (st = get_num(c, o, "weight", 0.0, 1e6, &w)) ||
        (st = parse_labels(c, json_object_get(o, "labels"), oc)))
        return st;
    oc->weight = (float)w;
    oc->from = find_source(m, m->nlayers, from);
    if (oc->from < 0 || oc->from == INT32_MAX) {
        char msg[128];
        snprintf(msg, sizeof(msg), "names '%s', which is not a layer", from);
        return bad(c, "from", msg);
    }
    json_t *of = json_object_get(o, "of");
    if ((of != NULL) != (oc->loss == DL_LOSS_NEXT_TOKEN))
        return bad(c, "of", of ? "applies to the next_token loss only"
                                : "is missing (next_token predicts the ids of an input)");
    if (!of)
        return DL_OK;
    const char *in = json_string_value(of);
    int src = in ? find_source(m, 0, in) : INT32_MAX;
    if (src >= 0 || m->inputs[-1 - src].max_length == 0 ||
        m->inputs[-1 - src].dtype == DL_IN_FP32 || m->inputs[-1 - src].ndim != 1)
        return bad(c, "of", "must name a model input of a sequence of ids");
    oc->of = -1 - src;
    return DL_OK;
}

/* "outputs" (a list) or "output" + top-level "loss" (the last layer). */
static dl_status parse_outputs(ctx *c, json_t *root, dl_model_conf *m)
{
    json_t *list = json_object_get(root, "outputs"), *one = json_object_get(root, "output");
    c->where[0] = '\0';
    if (list && (one || json_object_get(root, "loss")))
        return bad(c, "outputs", "excludes 'output' and a top-level 'loss' (each output "
                   "names its loss)");
    size_t n = list ? json_array_size(list) : 1;
    if (list && (!json_is_array(list) || n < 1 || n > 64))
        return bad(c, "outputs", "must be an array of 1 to 64 output objects");
    if (!(m->outputs = calloc(n, sizeof(*m->outputs))))
        return dl_err_set(c->err, DL_ERR_NOMEM, "outputs");
    dl_status st = DL_OK;
    for (size_t i = 0; list && i < n && st == DL_OK; i++) {
        snprintf(c->where, sizeof(c->where), "outputs[%zu]: ", i);
        st = parse_graph_output(c, json_array_get(list, i), m, &m->outputs[i]);
        m->noutputs = (int)i + 1;
        for (size_t k = 0; st == DL_OK && k < i; k++)
            if (strcmp(m->outputs[k].name, m->outputs[i].name) == 0)
                st = bad(c, "name", "is used twice");
    }
    if (!list) {
        dl_output_conf *oc = &m->outputs[0];
        m->noutputs = 1;
        *oc = (dl_output_conf){ .from = m->nlayers - 1, .weight = 1.0f };
        strcpy(oc->name, "output");
        if ((st = get_loss(c, root, &oc->loss)) == DL_OK && one) {
            static const char *const keys[] = {"name", "labels", NULL};
            snprintf(c->where, sizeof(c->where), "output: ");
            if (!json_is_object(one))
                return bad(c, "output", "must be an object");
            if ((st = check_keys(c, one, keys)) == DL_OK &&
                (st = get_name(c, one, "name", false, oc->name)) == DL_OK)
                st = parse_labels(c, json_object_get(one, "labels"), oc);
        }
    }
    strcpy(m->output_name, m->outputs[0].name);
    m->loss = m->outputs[0].loss;
    m->nlabels = m->outputs[0].nlabels;
    m->labels = m->outputs[0].labels;
    return st;
}

static dl_status parse_training(ctx *c, json_t *t, dl_hparams *h)
{
    static const char *const keys[] = {"epochs", "batch_size", "optimizer", "lr",
        "momentum", "nesterov", "weight_decay", "beta1", "beta2", "eps",
        "clip_norm", "schedule", "seed", NULL};
    static const char *const skeys[] = {"type", "warmup_epochs", "step_epochs",
                                        "gamma", NULL};
    *h = (dl_hparams){ .epochs = 10, .batch_size = 64, .optimizer = DL_OPTIM_SGD,
                       .lr = 0.01, .momentum = 0.9, .beta1 = 0.9, .beta2 = 0.999,
                       .schedule = DL_SCHED_NONE,
                       .step_epochs = 10, .gamma = 0.1, .seed = 1 };
    if (!t)
        return DL_OK;
    snprintf(c->where, sizeof(c->where), "training: ");
    if (!json_is_object(t))
        return bad(c, "training", "must be an object");
    int64_t seed = (int64_t)h->seed;
    dl_status st;
    if ((st = check_keys(c, t, keys)) ||
        (st = get_int(c, t, "epochs", 1, 1000000, false, &h->epochs)) ||
        (st = get_int(c, t, "batch_size", 1, 1 << 20, false, &h->batch_size)) ||
        (st = get_num(c, t, "lr", 0.0, 1e6, &h->lr)) ||
        (st = get_num(c, t, "momentum", 0.0, 1.0, &h->momentum)) ||
        (st = get_bool(c, t, "nesterov", &h->nesterov)) ||
        (st = get_num(c, t, "weight_decay", 0.0, 1e3, &h->weight_decay)) ||
        (st = get_num(c, t, "beta1", 0.0, 0.999999, &h->beta1)) ||
        (st = get_num(c, t, "beta2", 0.0, 0.999999999, &h->beta2)) ||
        (st = get_num(c, t, "eps", 1e-30, 1.0, &h->eps)) ||
        (st = get_num(c, t, "clip_norm", 0.0, 1e6, &h->clip_norm)) ||
        (st = get_int(c, t, "seed", 0, INT64_MAX, false, &seed)))
        return st;
    h->seed = (uint64_t)seed;
    json_t *o = json_object_get(t, "optimizer");
    if (o) {
        const char *s = json_string_value(o);
        if (s && strcmp(s, "sgd") == 0)
            h->optimizer = DL_OPTIM_SGD;
        else if (s && strcmp(s, "momentum") == 0)
            h->optimizer = DL_OPTIM_MOMENTUM;
        else if (s && strcmp(s, "adam") == 0)
            h->optimizer = DL_OPTIM_ADAM;
        else if (s && strcmp(s, "adamw") == 0)
            h->optimizer = DL_OPTIM_ADAMW;
        else if (s && strcmp(s, "adagrad") == 0)
            h->optimizer = DL_OPTIM_ADAGRAD;
        else
            return bad(c, "optimizer", "must be \"sgd\", \"momentum\", \"adam\", "
                       "\"adamw\" or \"adagrad\"");
    }
    json_t *s = json_object_get(t, "schedule");
    if (!s)
        return DL_OK;
    snprintf(c->where, sizeof(c->where), "training.schedule: ");
    if (!json_is_object(s))
        return bad(c, "schedule", "must be an object");
    const char *type = json_string_value(json_object_get(s, "type"));
    if (!type || (strcmp(type, "none") && strcmp(type, "step") && strcmp(type, "cosine")))
        return bad(c, "type", "must be \"none\", \"step\" or \"cosine\"");
    h->schedule = !strcmp(type, "step") ? DL_SCHED_STEP
                : !strcmp(type, "cosine") ? DL_SCHED_COSINE : DL_SCHED_NONE;
    if ((st = check_keys(c, s, skeys)) ||
        (st = get_num(c, s, "warmup_epochs", 0.0, 1e6, &h->warmup_epochs)) ||
        (st = get_int(c, s, "step_epochs", 1, 1000000, false, &h->step_epochs)))
        return st;
    return get_num(c, s, "gamma", 0.0, 1.0, &h->gamma);
}

/* An output with "loss": "crf" reads a crf layer named as the output,
 * added after the others: it holds the transitions ("<output>.transitions")
 * and passes the tag scores through. */
static dl_status add_crf_layers(ctx *c, dl_model_conf *m)
{
    for (int k = 0; k < m->noutputs; k++) {
        dl_output_conf *o = &m->outputs[k];
        if (o->loss != DL_LOSS_CRF)
            continue;
        dl_layer_conf *ls = realloc(m->layers, sizeof(*ls) * (size_t)(m->nlayers + 1));
        if (!ls)
            return dl_err_set(c->err, DL_ERR_NOMEM, "layers");
        m->layers = ls;
        dl_layer_conf *l = &ls[m->nlayers];
        *l = (dl_layer_conf){ .type = DL_LAYER_CRF, .nsrc = 1, .src = { o->from } };
        snprintf(l->name, sizeof(l->name), "%s", o->name);
        o->from = m->nlayers++;
    }
    return DL_OK;
}

static dl_status parse_root(ctx *c, json_t *root, dl_model_conf *m)
{
    /* "serving" is the daemon's (src/serve/serving.c), "generate"
     * dl_gen_conf_read's: known, not read here. */
    static const char *const keys[] = {"name", "description", "input", "inputs", "layers",
                                       "loss", "output", "outputs", "training", "serving",
                                       "generate", NULL};
    if (!json_is_object(root))
        return dl_err_set(c->err, DL_ERR_INVALID, "%s: must be a JSON object", c->what);
    dl_status st = check_keys(c, root, keys);
    if (st || (st = get_name(c, root, "name", true, m->name)))
        return st;
    /* The model's name is also a folder, a URL part and a Redis key. */
    if (m->name[0] == '.')
        return bad(c, "name", "must not start with '.'");
    if (json_object_get(root, "description") && !json_is_string(json_object_get(root, "description")))
        return bad(c, "description", "must be a string");
    m->graph = json_object_get(root, "inputs") || json_object_get(root, "outputs");
    if ((st = parse_inputs(c, json_object_get(root, "inputs"), json_object_get(root, "input"), m)))
        return st;
    c->where[0] = '\0';
    json_t *layers = json_object_get(root, "layers");
    if (!json_is_array(layers) || json_array_size(layers) == 0 || json_array_size(layers) > 1024)
        return bad(c, "layers", "must be a non-empty array of layer objects");
    m->layers = calloc(json_array_size(layers), sizeof(*m->layers));
    if (!m->layers)
        return dl_err_set(c->err, DL_ERR_NOMEM, "layers");
    for (size_t i = 0; i < json_array_size(layers); i++) {
        snprintf(c->where, sizeof(c->where), "layers[%zu]: ", i);
        if ((st = parse_layer(c, layers, i, m)))
            return st;
        m->nlayers = (int)i + 1;
    }
    if ((st = parse_outputs(c, root, m)) || (st = add_crf_layers(c, m)) ||
        (st = parse_training(c, json_object_get(root, "training"), &m->train)))
        return st;
    for (int k = 0; k < m->ninputs; k++)     /* data of sequences comes with targets */
        m->graph = m->graph || m->inputs[k].max_length > 0;
    return conf_check_graph(c->what, m, c->err);
}

dl_status dl_model_conf_parse(const char *text, size_t len, const char *what,
                              dl_model_conf **out, dl_err *err)
{
    *out = NULL;
    json_error_t jerr;
    json_t *root = json_loadb(text, len, JSON_REJECT_DUPLICATES, &jerr);
    if (!root)
        return dl_err_set(err, DL_ERR_INVALID, "%s:%d:%d: invalid JSON: %s", what,
                          jerr.line, jerr.column, jerr.text);
    dl_model_conf *m = calloc(1, sizeof(*m));
    ctx c = { .what = what, .err = err };
    dl_status st = m ? parse_root(&c, root, m) : dl_err_set(err, DL_ERR_NOMEM, "model");
    json_decref(root);
    if (st == DL_OK && !(m->json = strndup(text, len)))
        st = dl_err_set(err, DL_ERR_NOMEM, "model text");
    if (st != DL_OK) {
        dl_model_conf_free(m);
        return st;
    }
    *out = m;
    return DL_OK;
}

dl_status dl_model_conf_load(const char *path, dl_model_conf **out, dl_err *err)
{
    *out = NULL;
    char file[4096];
    struct stat sb;
    size_t n = strlen(path);
    bool is_json = n >= 5 && strcmp(path + n - 5, ".json") == 0;
    if ((stat(path, &sb) == 0 && S_ISDIR(sb.st_mode)) || !is_json)
        snprintf(file, sizeof(file), "%s/model.json", path);
    else
        snprintf(file, sizeof(file), "%s", path);
    char *text;
    size_t len;
    dl_status st = dl_file_read(file, &text, &len, err);
    if (st != DL_OK)
        return st;
    st = dl_model_conf_parse(text, len, file, out, err);
    free(text);
    return st;
}

void dl_model_conf_free(dl_model_conf *conf)
{
    if (!conf)
        return;
    for (int k = 0; k < conf->noutputs; k++) {
        for (int i = 0; i < conf->outputs[k].nlabels; i++)
            free(conf->outputs[k].labels[i]);
        free(conf->outputs[k].labels);
    }
    free(conf->outputs);
    for (int k = 0; k < conf->ninputs; k++)
        free(conf->inputs[k].tok.vocab);
    free(conf->inputs);
    free(conf->tseq);
    free(conf->layers);
    free(conf->json);
    free(conf);
}

dl_scaling dl_scaling_of(const dl_model_conf *conf)
{
    return (dl_scaling){ conf->scale, conf->mean, conf->std };
}

void dl_scaling_apply(const dl_scaling *sc, float *dst, const void *src, int64_t n)
{
    const unsigned char *s = src;
    for (int64_t i = 0; i < n; i++) {
        float v;
        memcpy(&v, s + 4 * i, sizeof(v));
        dst[i] = (v * sc->scale - sc->mean) / sc->std;
    }
}

bool dl_model_name_valid(const char *s, size_t len)
{
    /* A leading '.' would let "." and ".." reach the repository folder. */
    if (len == 0 || len >= DL_NAME_MAX || s[0] == '.')
        return false;
    for (size_t i = 0; i < len; i++) {
        char c = s[i];
        if (!(c == '-' || c == '_' || c == '.' || (c >= '0' && c <= '9') ||
              (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z')))
            return false;
    }
    return true;
}

/* ---- the "generate" block (dl_gen.h) ---------------------------------- */

static int input_named(const dl_model_conf *m, const char *name)
{
    for (int k = 0; k < m->ninputs; k++)
        if (strcmp(m->inputs[k].name, name) == 0)
            return k;
    return -1;
}

/* Checks the block's names against the model: the ids input, the
 * logits output over its positions, the source, and no other input. */
static dl_status check_generate(ctx *c, const dl_model_conf *m, const dl_gen_conf *gc)
{
    int in = input_named(m, gc->input), src = gc->source[0] ? input_named(m, gc->source) : -1;
    if (in < 0)
        return bad(c, "input", "names no input of the model");
    const dl_input_conf *ic = &m->inputs[in];
    if (ic->max_length == 0 || ic->ndim != 1 ||
        (ic->dtype != DL_IN_INT64 && ic->dtype != DL_IN_INT32))
        return bad(c, "input", "must name an INT64 [-1] input (a sequence of ids)");
    if (gc->source[0] && (src < 0 || src == in || m->inputs[src].max_length == 0))
        return bad(c, "source", "must name another sequence input of the model");
    for (int k = 0; k < m->ninputs; k++)
        if (k != in && k != src)
            return dl_err_set(c->err, DL_ERR_INVALID, "%s: generate: the model's input '%s' "
                              "is neither its 'input' nor its 'source'", c->what,
                              m->inputs[k].name);
    if (gc->max_context > ic->max_length)
        return bad(c, "max_context", "is over the input's max_length");
    for (int k = 0; k < m->noutputs; k++)
        if (strcmp(m->outputs[k].name, gc->output) == 0) {
            if (m->tseq[m->ninputs + m->outputs[k].from] != in)
                return bad(c, "output", "must give logits at every position of the input");
            return DL_OK;
        }
    return bad(c, "output", "names no output of the model");
}

static dl_status parse_generate(ctx *c, json_t *g, const dl_model_conf *m, dl_gen_conf *gc)
{
    static const char *const keys[] = {"input", "output", "source", "max_context", "eos",
                                       "tokenizer", NULL};
    if (!json_is_object(g))
        return dl_err_set(c->err, DL_ERR_INVALID, "%s: 'generate' must be an object", c->what);
    dl_status st = check_keys(c, g, keys);
    if (st || (st = get_name(c, g, "input", true, gc->input)) ||
        (st = get_name(c, g, "output", true, gc->output)) ||
        (st = get_name(c, g, "source", false, gc->source)))
        return st;
    int in = input_named(m, gc->input);
    gc->max_context = in >= 0 ? m->inputs[in].max_length : 0;
    if ((st = get_int(c, g, "max_context", 2, INT32_MAX, false, &gc->max_context)))
        return st;
    json_t *eos = json_object_get(g, "eos");
    if (eos && (!json_is_string(eos) || !json_string_length(eos) ||
                json_string_length(eos) >= sizeof(gc->eos)))
        return bad(c, "eos", "must be a non-empty string of under 64 bytes");
    if (eos)
        memcpy(gc->eos, json_string_value(eos), json_string_length(eos) + 1);
    gc->tok.kind = DL_TOK_BYTES;
    json_t *tok = json_object_get(g, "tokenizer");
    if (tok && (st = parse_tokenizer(c, tok, &gc->tok)))
        return st;
    return check_generate(c, m, gc);
}

dl_status dl_gen_conf_read(const char *json, const char *what, const dl_model_conf *conf,
                           dl_gen_conf *gc, bool *has, dl_err *err)
{
    *gc = (dl_gen_conf){0};
    *has = false;
    json_error_t je;
    json_t *root = json && *json ? json_loads(json, 0, &je) : NULL;
    if (json && *json && !root)
        return dl_err_set(err, DL_ERR_INVALID, "%s:%d: %s", what, je.line, je.text);
    ctx c = { .what = what, .where = "generate: ", .err = err };
    json_t *g = json_object_get(root, "generate");
    dl_status st = g ? parse_generate(&c, g, conf, gc) : DL_OK;
    json_decref(root);
    if (st != DL_OK)
        dl_gen_conf_release(gc);
    *has = g && st == DL_OK;
    return st;
}

void dl_gen_conf_release(dl_gen_conf *gc)
{
    free(gc->tok.vocab);
    gc->tok.vocab = NULL;
}
