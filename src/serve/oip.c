/* oip.c: the Open Inference Protocol v2 as pure functions: strict URL
 * routing, infer-request parsing (jansson) and the JSON answers. */
#define _POSIX_C_SOURCE 200809L
#include "serve/oip.h"

#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* ---- routing ------------------------------------------------------------ */

typedef struct seg {
    const char *p;
    size_t      n;
} seg;

/* Splits "/a/b/c" into at most max segments; -1 for a path that does not
 * start with '/', has an empty segment ("//", a trailing '/') or has more
 * segments than max. */
static int split_path(const char *path, seg *s, int max)
{
    if (!path || path[0] != '/')
        return -1;
    int n = 0;
    const char *p = path + 1;
    for (;;) {
        const char *e = strchr(p, '/');
        size_t len = e ? (size_t)(e - p) : strlen(p);
        if (len == 0 || n == max)
            return -1;
        s[n++] = (seg){p, len};
        if (!e)
            return n;
        p = e + 1;
    }
}

static bool seg_is(seg s, const char *word)
{
    return s.n == strlen(word) && memcmp(s.p, word, s.n) == 0;
}

/* A positive decimal integer without leading zeros (at most 18 digits, so
 * it fits int64_t). */
static bool parse_version(seg s, int64_t *v)
{
    if (s.n == 0 || s.n > 18 || s.p[0] == '0')
        return false;
    int64_t x = 0;
    for (size_t i = 0; i < s.n; i++) {
        if (s.p[i] < '0' || s.p[i] > '9')
            return false;
        x = x * 10 + (s.p[i] - '0');
    }
    *v = x;
    return true;
}

static bool take_name(seg s, oip_route *r)
{
    if (!dl_model_name_valid(s.p, s.n))
        return false;
    memcpy(r->model, s.p, s.n);
    r->model[s.n] = '\0';
    return true;
}

/* /v2/models/{m}[/versions/{v}][/ready|/infer]: s[0] is the name. */
static oip_route_kind route_model(const seg *s, int n, oip_route *r)
{
    if (!take_name(s[0], r))
        return OIP_ROUTE_NONE;
    s++, n--;
    if (n >= 2 && seg_is(s[0], "versions")) {
        if (!parse_version(s[1], &r->version))
            return OIP_ROUTE_NONE;
        s += 2, n -= 2;
    }
    if (n == 0)
        return OIP_ROUTE_MODEL;
    if (n == 1 && seg_is(s[0], "ready"))
        return OIP_ROUTE_MODEL_READY;
    if (n == 1 && seg_is(s[0], "infer"))
        return OIP_ROUTE_INFER;
    return OIP_ROUTE_NONE;
}

/* /v2/repository/index, /v2/repository/models/{m}/load|unload: s[0] follows
 * "repository". */
static oip_route_kind route_repository(const seg *s, int n, oip_route *r)
{
    if (n == 1 && seg_is(s[0], "index"))
        return OIP_ROUTE_REPO_INDEX;
    if (n != 3 || !seg_is(s[0], "models") || !take_name(s[1], r))
        return OIP_ROUTE_NONE;
    if (seg_is(s[2], "load"))
        return OIP_ROUTE_REPO_LOAD;
    if (seg_is(s[2], "unload"))
        return OIP_ROUTE_REPO_UNLOAD;
    return OIP_ROUTE_NONE;
}

static oip_route_kind route(const char *path, oip_route *r)
{
    seg s[8];
    int n = split_path(path, s, 8);
    if (n < 1)
        return OIP_ROUTE_NONE;
    if (n == 1 && seg_is(s[0], "metrics"))
        return OIP_ROUTE_METRICS;
    if (n == 1 && seg_is(s[0], "status"))
        return OIP_ROUTE_STATUS;
    if (!seg_is(s[0], "v2"))
        return OIP_ROUTE_NONE;
    if (n == 1)
        return OIP_ROUTE_SERVER;
    if (n == 3 && seg_is(s[1], "health"))
        return seg_is(s[2], "live")    ? OIP_ROUTE_LIVE
               : seg_is(s[2], "ready") ? OIP_ROUTE_READY
                                       : OIP_ROUTE_NONE;
    if (n >= 3 && seg_is(s[1], "models"))
        return route_model(s + 2, n - 2, r);
    if (n >= 3 && seg_is(s[1], "repository"))
        return route_repository(s + 2, n - 2, r);
    return OIP_ROUTE_NONE;
}

oip_route_kind oip_route_parse(const char *path, oip_route *r)
{
    memset(r, 0, sizeof(*r));
    r->kind = route(path, r);
    if (r->kind == OIP_ROUTE_NONE)
        memset(r, 0, sizeof(*r));
    return r->kind;
}

static bool route_is_post(oip_route_kind kind)
{
    return kind == OIP_ROUTE_INFER || kind == OIP_ROUTE_REPO_INDEX ||
           kind == OIP_ROUTE_REPO_LOAD || kind == OIP_ROUTE_REPO_UNLOAD;
}

const char *oip_route_allow(oip_route_kind kind)
{
    return route_is_post(kind) ? "POST" : "GET, HEAD";
}

bool oip_route_method_ok(oip_route_kind kind, const char *method)
{
    if (route_is_post(kind))
        return strcmp(method, "POST") == 0;
    return strcmp(method, "GET") == 0 || strcmp(method, "HEAD") == 0;
}

/* ---- infer requests ----------------------------------------------------- */

/* A refusal of the request: DL_ERR_INVALID (answer 400) with a message. */
static dl_status bad(dl_err *err, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
static dl_status bad(dl_err *err, const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    dl_status st = dl_err_setv(err, DL_ERR_INVALID, fmt, ap);
    va_end(ap);
    return st;
}

static const char *type_name(const json_t *v)
{
    switch (json_typeof(v)) {
    case JSON_OBJECT:  return "an object";
    case JSON_ARRAY:   return "an array";
    case JSON_STRING:  return "a string";
    case JSON_INTEGER: return "an integer";
    case JSON_REAL:    return "a real";
    case JSON_TRUE:    return "true";
    case JSON_FALSE:   return "false";
    case JSON_NULL:    return "null";
    }
    return "?";
}

/* "[2, 1, 28, 28]" into buf (truncated to cap). */
static const char *shape_text(const int64_t *shape, int ndim, char *buf, size_t cap)
{
    size_t k = (size_t)snprintf(buf, cap, "[");
    for (int i = 0; i < ndim && k < cap; i++)
        k += (size_t)snprintf(buf + k, cap - k, "%s%lld", i ? ", " : "", (long long)shape[i]);
    if (k < cap)
        snprintf(buf + k, cap - k, "]");
    return buf;
}

static dl_status parse_id(json_t *root, oip_request *req, dl_err *err)
{
    json_t *id = json_object_get(root, "id");
    if (!id)
        return DL_OK;
    if (!json_is_string(id))
        return bad(err, "'id' must be a string, not %s", type_name(id));
    req->id = strdup(json_string_value(id));
    return req->id ? DL_OK : dl_err_set(err, DL_ERR_NOMEM, "request id");
}

/* The "outputs" list: which outputs to answer with (all when absent or empty). */
static dl_status parse_outputs(json_t *list, const dl_model_conf *conf, unsigned *mask,
                               dl_err *err)
{
    *mask = OIP_OUT_ALL;
    if (!list)
        return DL_OK;
    if (!json_is_array(list))
        return bad(err, "'outputs' must be an array, not %s", type_name(list));
    if (json_array_size(list) == 0)
        return DL_OK;
    *mask = 0;
    size_t i;
    json_t *o;
    json_array_foreach(list, i, o) {
        const char *name = json_string_value(json_object_get(o, "name"));
        if (!json_is_object(o) || !name)
            return bad(err, "outputs[%zu] must be an object with a string 'name'", i);
        if (strcmp(name, conf->output_name) == 0)
            *mask |= OIP_OUT_TENSOR;
        else if (strcmp(name, "label") == 0 && conf->nlabels > 0)
            *mask |= OIP_OUT_LABEL;
        else if (strcmp(name, "class") == 0)
            *mask |= OIP_OUT_CLASS;
        else
            return bad(err, "outputs[%zu]: model '%s' has no output '%.64s' (it has '%s'%s and "
                       "'class')", i, conf->name, name, conf->output_name,
                       conf->nlabels > 0 ? ", 'label'" : "");
    }
    return DL_OK;
}

/* inputs[0].shape: 1..OIP_MAX_DIMS positive integers with a product that
 * fits int64_t. */
static dl_status parse_shape(json_t *in, oip_request *req, dl_err *err)
{
    json_t *shape = json_object_get(in, "shape");
    if (!shape)
        return bad(err, "inputs[0].shape is missing");
    size_t n = json_array_size(shape);
    if (!json_is_array(shape) || n < 1 || n > OIP_MAX_DIMS)
        return bad(err, "inputs[0].shape must be an array of 1 to %d integers",
                   OIP_MAX_DIMS);
    int64_t total = 1;
    for (size_t i = 0; i < n; i++) {
        json_t *d = json_array_get(shape, i);
        json_int_t v = json_integer_value(d);
        if (!json_is_integer(d) || v < 1)
            return bad(err, "inputs[0].shape[%zu] must be a positive integer", i);
        if (v > INT64_MAX / total)
            return bad(err, "inputs[0].shape is too large");
        total *= v;
        req->shape[i] = v;
    }
    req->ndim = (int)n;
    return DL_OK;
}

static int64_t product(const int64_t *d, int n)
{
    int64_t p = 1;
    for (int i = 0; i < n; i++)
        p *= d[i];
    return p;
}

/* The batch size the shape implies: [B, ...] with in_dim values per
 * sample; failing that, a shape holding exactly one sample's values (the
 * model's sample shape, [784], [28, 28]...) is one sample. No shape fits
 * both readings unless B is 1. */
static dl_status fit_shape(oip_request *req, const dl_model_conf *conf, int64_t in_dim,
                           dl_err *err)
{
    if (req->ndim >= 2 && product(req->shape + 1, req->ndim - 1) == in_dim) {
        req->batch = req->shape[0];
        return DL_OK;
    }
    if (product(req->shape, req->ndim) == in_dim) {
        req->batch = 1;
        return DL_OK;
    }
    char got[160], want[160];
    return dl_err_set(err, DL_ERR_INVALID,
                      "inputs[0].shape %s does not fit model '%s': it takes [B, ...] with %lld "
                      "values per sample, e.g. [B, %s",
                      shape_text(req->shape, req->ndim, got, sizeof(got)), conf->name,
                      (long long)in_dim,
                      shape_text(conf->in_shape, conf->in_ndim, want, sizeof(want)) + 1);
}

/* Filling x from data, flat or nested, with positions for messages. */
typedef struct filler {
    const oip_request *req;
    bool               u8;
    float             *x;
    int64_t            pos;
    size_t             idx[OIP_MAX_DIMS];
    dl_err            *err;
} filler;

/* "inputs[0].data[1][3]" for the first `depth` indices. */
static const char *where(const filler *f, int depth, char *buf, size_t cap)
{
    size_t k = (size_t)snprintf(buf, cap, "inputs[0].data");
    for (int i = 0; i < depth && k < cap; i++)
        k += (size_t)snprintf(buf + k, cap - k, "[%zu]", f->idx[i]);
    return buf;
}

static dl_status put_value(filler *f, json_t *v, int depth)
{
    char w[128];
    if (f->u8) {
        json_int_t i = json_integer_value(v);
        if (!json_is_integer(v) || i < 0 || i > 255)
            return bad(f->err, "%s must be an integer in 0..255 (UINT8), not %s",
                       where(f, depth, w, sizeof(w)),
                       json_is_integer(v) ? "out of range" : type_name(v));
        f->x[f->pos++] = (float)i;
        return DL_OK;
    }
    if (!json_is_number(v))
        return bad(f->err, "%s must be a number (FP32), not %s",
                   where(f, depth, w, sizeof(w)), type_name(v));
    float x = (float)json_number_value(v);
    if (!isfinite(x))
        return bad(f->err, "%s is out of the FP32 range",
                   where(f, depth, w, sizeof(w)));
    f->x[f->pos++] = x;
    return DL_OK;
}

/* One level of nested data: an array of shape[depth] items, each an array
 * one level down or, at the last dimension, a value. */
static dl_status put_nested(filler *f, json_t *a, int depth)
{
    int64_t want = f->req->shape[depth];
    if (!json_is_array(a) || (int64_t)json_array_size(a) != want) {
        char w[128], s[160];
        return dl_err_set(f->err, DL_ERR_INVALID,
                          "%s must be an array of %lld items to match shape %s",
                          where(f, depth, w, sizeof(w)), (long long)want,
                          shape_text(f->req->shape, f->req->ndim, s, sizeof(s)));
    }
    size_t i;
    json_t *v;
    json_array_foreach(a, i, v) {
        f->idx[depth] = i;
        dl_status st = depth + 1 == f->req->ndim ? put_value(f, v, depth + 1)
                                                 : put_nested(f, v, depth + 1);
        if (st != DL_OK)
            return st;
    }
    return DL_OK;
}

static dl_status put_flat(filler *f, json_t *a)
{
    size_t i;
    json_t *v;
    json_array_foreach(a, i, v) {
        f->idx[0] = i;
        dl_status st = put_value(f, v, 1);
        if (st != DL_OK)
            return st;
    }
    return DL_OK;
}

/* Values of a flat data array read straight from the body (see fast_scan),
 * or NULL. */
typedef struct fast_data {
    float  *x;
    int64_t n;
    bool    integers;   /* every value an integer in 0..255 */
} fast_data;

static dl_status parse_data(json_t *in, bool u8, size_t body_len, const fast_data *fast,
                            oip_request *req, dl_err *err)
{
    json_t *data = json_object_get(in, "data");
    if (fast && json_is_array(data) && json_array_size(data) == 0 &&
        fast->n == product(req->shape, req->ndim) && (!u8 || fast->integers)) {
        req->x = fast->x;   /* takes the values */
        return DL_OK;
    }
    if (!json_is_array(data))
        return data ? bad(err, "inputs[0].data must be an array, not %s", type_name(data))
                    : bad(err, "inputs[0].data is missing");
    int64_t total = product(req->shape, req->ndim);
    bool nested = json_is_array(json_array_get(data, 0));
    char s[160];
    if (!nested && (int64_t)json_array_size(data) != total)
        return bad(err, "inputs[0].data has %zu values; shape %s needs %lld",
                   json_array_size(data), shape_text(req->shape, req->ndim, s, sizeof(s)),
                   (long long)total);
    /* Every value takes at least one byte of the body: a larger shape
     * cannot match nested data either, and must not size an allocation. */
    if ((uint64_t)total > body_len)
        return bad(err, "inputs[0].data holds fewer than the %lld values of shape %s",
                   (long long)total, shape_text(req->shape, req->ndim, s, sizeof(s)));
    req->x = malloc((size_t)total * sizeof(float));
    if (!req->x)
        return dl_err_set(err, DL_ERR_NOMEM, "input of %lld values", (long long)total);
    filler f = {.req = req, .u8 = u8, .x = req->x, .err = err};
    return nested ? put_nested(&f, data, 0) : put_flat(&f, data);
}

static dl_status parse_input(json_t *in, const dl_model_conf *conf, int64_t in_dim,
                             size_t body_len, const fast_data *fast, oip_request *req,
                             dl_err *err)
{
    if (!json_is_object(in))
        return bad(err, "inputs[0] must be an object, not %s", type_name(in));
    json_t *name = json_object_get(in, "name"), *params = json_object_get(in, "parameters");
    if (name && !json_is_string(name))
        return bad(err, "inputs[0].name must be a string");
    if (params && !json_is_object(params))
        return bad(err, "inputs[0].parameters must be an object");
    const char *dt = json_string_value(json_object_get(in, "datatype"));
    if (!dt)
        return bad(err, "inputs[0].datatype must be \"FP32\" or \"UINT8\"");
    bool u8 = strcmp(dt, "UINT8") == 0;
    if (!u8 && strcmp(dt, "FP32") != 0)
        return bad(err, "inputs[0].datatype \"%.32s\" is not supported: use \"FP32\" or \"UINT8\"",
                   dt);
    dl_status st = parse_shape(in, req, err);
    if (st == DL_OK)
        st = fit_shape(req, conf, in_dim, err);
    if (st == DL_OK)
        st = parse_data(in, u8, body_len, fast, req, err);
    return st;
}

static dl_status parse_root(json_t *root, const dl_model_conf *conf, int64_t in_dim,
                            size_t body_len, const fast_data *fast, oip_request *req,
                            dl_err *err)
{
    if (!json_is_object(root))
        return bad(err, "the request must be a JSON object, not %s", type_name(root));
    json_t *inputs = json_object_get(root, "inputs"), *params = json_object_get(root, "parameters");
    if (params && !json_is_object(params))
        return bad(err, "'parameters' must be an object");
    if (!inputs)
        return bad(err, "'inputs' is missing");
    if (!json_is_array(inputs))
        return bad(err, "'inputs' must be an array, not %s", type_name(inputs));
    if (json_array_size(inputs) != 1)
        return bad(err, "'inputs' has %zu inputs; model '%s' takes exactly one ('%s')",
                   json_array_size(inputs), conf->name, conf->input_name);
    dl_status st = parse_id(root, req, err);
    if (st == DL_OK)
        st = parse_outputs(json_object_get(root, "outputs"), conf, &req->outputs, err);
    if (st == DL_OK)
        st = parse_input(json_array_get(inputs, 0), conf, in_dim, body_len, fast, req, err);
    return st;
}

/* ---- the fast path for flat numeric data ---------------------------------
 * Decoding hundreds of numbers into a jansson tree (a node and a strtod
 * each) costs most of a request. So the body's first "data": [numbers]
 * array is read straight into floats, and jansson parses the rest with
 * that array replaced by []. Only a clean, flat array of plain numbers
 * takes this path; anything else (nesting, strings, a "data" elsewhere,
 * values UINT8 cannot hold) goes through jansson whole, which also words
 * every error. */

/* The end of the string starting at p (on its opening quote), or NULL. */
static const char *skip_string(const char *p, const char *end)
{
    for (p++; p < end; p++) {
        if (*p == '\\')
            p++;
        else if (*p == '"')
            return p + 1;
    }
    return NULL;
}

/* One JSON number at *p into *v (strtod's value), noting whether it is an
 * integer; false if none is there. Short decimals are converted exactly
 * without strtod: digits / 10^k is correctly rounded, as strtod is. */
static bool read_number(const char **pp, const char *end, double *v, bool *integer)
{
    static const double pow10[] = { 1, 1e1, 1e2, 1e3, 1e4, 1e5, 1e6, 1e7, 1e8, 1e9,
                                    1e10, 1e11, 1e12, 1e13, 1e14, 1e15 };
    const char *p = *pp;
    bool neg = p < end && *p == '-';
    p += neg;
    uint64_t m = 0;
    int digits = 0, frac = 0;
    if (p >= end || *p < '0' || *p > '9' || (*p == '0' && p + 1 < end && p[1] >= '0' && p[1] <= '9'))
        return false;
    for (; p < end && *p >= '0' && *p <= '9'; p++, digits++)
        m = m * 10 + (uint64_t)(*p - '0');
    if (p < end && *p == '.') {
        const char *f = ++p;
        for (; p < end && *p >= '0' && *p <= '9'; p++, digits++, frac++)
            m = m * 10 + (uint64_t)(*p - '0');
        if (p == f)
            return false;
    }
    bool expo = p < end && (*p == 'e' || *p == 'E');
    *integer = frac == 0 && !expo;
    if (digits <= 15 && !expo) {
        *v = (double)m / pow10[frac];
        *v = neg ? -*v : *v;
        *pp = p;
        return true;
    }
    char buf[64];
    size_t n = (size_t)(end - *pp) < sizeof(buf) - 1 ? (size_t)(end - *pp) : sizeof(buf) - 1;
    memcpy(buf, *pp, n);
    buf[n] = '\0';
    char *stop;
    *v = strtod(buf, &stop);
    if (stop == buf)
        return false;
    *pp += stop - buf;
    return true;
}

/* Reads the flat array of numbers at p (on '['); returns its end or NULL. */
static const char *read_flat(const char *p, const char *end, fast_data *fd)
{
    size_t cap = (size_t)(end - p) / 2 + 1;     /* at most one value per 2 bytes */
    fd->x = malloc(cap * sizeof(float));
    fd->n = 0;
    fd->integers = true;
    if (!fd->x)
        return NULL;
    for (p++;;) {
        while (p < end && (*p == ' ' || *p == '\n' || *p == '\r' || *p == '\t'))
            p++;
        if (p < end && *p == ']' && fd->n == 0)
            return p + 1;
        double v;
        bool integer;
        if (!read_number(&p, end, &v, &integer) || !isfinite((float)v))
            return NULL;
        fd->integers = fd->integers && integer && v >= 0 && v <= 255;
        fd->x[fd->n++] = (float)v;
        while (p < end && (*p == ' ' || *p == '\n' || *p == '\r' || *p == '\t'))
            p++;
        if (p < end && *p == ']')
            return p + 1;
        if (p >= end || *p != ',')
            return NULL;
        p++;
    }
}

/* Finds the first key "data" whose value is a flat array of numbers; on
 * success *copy is the body with that array replaced by [] (new). */
static bool fast_scan(const char *body, size_t len, fast_data *fd, char **copy, size_t *clen)
{
    const char *end = body + len, *p = body;
    memset(fd, 0, sizeof(*fd));
    while (p < end) {
        if (*p != '"') {
            p++;
            continue;
        }
        const char *s = p;
        if (!(p = skip_string(p, end)))
            return false;
        if (p - s != 6 || memcmp(s, "\"data\"", 6) != 0)
            continue;
        while (p < end && (*p == ' ' || *p == ':' || *p == '\n' || *p == '\t' || *p == '\r'))
            p++;
        if (p >= end || *p != '[')
            return false;
        const char *a = p, *z = read_flat(p, end, fd);
        if (!z) {
            free(fd->x);
            fd->x = NULL;
            return false;
        }
        size_t head = (size_t)(a - body), tail = (size_t)(end - z);
        if (!(*copy = malloc(head + tail + 3))) {
            free(fd->x);
            fd->x = NULL;
            return false;
        }
        memcpy(*copy, body, head);
        memcpy(*copy + head, "[]", 2);
        memcpy(*copy + head + 2, z, tail);
        *clen = head + 2 + tail;
        return true;
    }
    return false;
}

static dl_status parse_json(const char *body, size_t len, const dl_model_conf *conf,
                            int64_t in_dim, size_t body_len, const fast_data *fast,
                            oip_request *req, dl_err *err)
{
    memset(req, 0, sizeof(*req));
    json_error_t je;
    json_t *root = json_loadb(body ? body : "", body ? len : 0, JSON_REJECT_DUPLICATES, &je);
    if (!root)
        return bad(err, "bad JSON at line %d, column %d: %s", je.line, je.column, je.text);
    dl_status st = parse_root(root, conf, in_dim, body_len, fast, req, err);
    json_decref(root);
    return st;
}

dl_status oip_parse_infer(const char *body, size_t len, const dl_model_conf *conf,
                          int64_t in_dim, oip_request *req, dl_err *err)
{
    fast_data fd;
    char *rest = NULL;
    size_t rest_len = 0;
    if (body && fast_scan(body, len, &fd, &rest, &rest_len)) {
        dl_status st = parse_json(rest, rest_len, conf, in_dim, len, &fd, req, err);
        free(rest);
        if (st == DL_OK && req->x == fd.x)
            return DL_OK;            /* the fast values were used */
        free(fd.x);
        oip_request_fini(req);      /* otherwise jansson reads it all */
    }
    dl_status st = parse_json(body, len, conf, in_dim, len, NULL, req, err);
    if (st != DL_OK)
        oip_request_fini(req);
    return st;
}

void oip_request_fini(oip_request *req)
{
    free(req->id);
    free(req->x);
    memset(req, 0, sizeof(*req));
}

void oip_scale(const dl_model_conf *conf, float *x, int64_t n)
{
    /* The data loader's function: bit-identical inputs to a file's. */
    dl_scaling sc = dl_scaling_of(conf);
    dl_scaling_apply(&sc, x, n);
}

/* ---- answers ------------------------------------------------------------ */

/* Appends v (a new reference, may be NULL: then it fails); like every
 * jansson "_new" call and json_pack's "o", it takes v even on failure, so
 * builders check once at the end. */
static bool add(json_t *arr, json_t *v)
{
    return v && json_array_append_new(arr, v) == 0;
}

static json_t *version_string(int64_t v)
{
    char buf[32];
    snprintf(buf, sizeof(buf), "%lld", (long long)v);
    return json_string(buf);
}

/* {"name","datatype","shape":[...],"data"?}; takes data (NULL: omitted). */
static json_t *tensor(const char *name, const char *datatype, const int64_t *shape, int ndim,
                      json_t *data)
{
    json_t *s = json_array();
    for (int i = 0; s && i < ndim; i++)
        if (!add(s, json_integer(shape[i]))) {
            json_decref(s);
            s = NULL;
        }
    return json_pack("{s:s, s:s, s:o, s:o*}", "name", name, "datatype", datatype, "shape", s,
                     "data", data);
}

/* Fills the data arrays of an infer response (each may be NULL: not
 * asked for) in one pass over the rows. */
static bool infer_data(const oip_result *res, json_t *probs, json_t *labels, json_t *classes)
{
    const dl_model_conf *conf = res->conf;
    for (int64_t i = 0; i < res->batch; i++) {
        const float *p = res->y + i * res->out_dim;
        /* JSON has no NaN or infinity: a broken model answers null. */
        for (int64_t j = 0; probs && j < res->out_dim; j++)
            if (!add(probs, isfinite(p[j]) ? json_real(p[j]) : json_null()))
                return false;
        int64_t c = dl_argmax(p, res->out_dim);
        if (classes && !add(classes, json_integer(c)))
            return false;
        if (labels && !add(labels, json_string(c < conf->nlabels ? conf->labels[c] : "")))
            return false;
    }
    return true;
}

json_t *oip_infer_response(const oip_result *res)
{
    unsigned m = res->outputs;
    if (res->conf->nlabels == 0)
        m &= ~(unsigned)OIP_OUT_LABEL;
    json_t *probs = m & OIP_OUT_TENSOR ? json_array() : NULL;
    json_t *labels = m & OIP_OUT_LABEL ? json_array() : NULL;
    json_t *classes = m & OIP_OUT_CLASS ? json_array() : NULL;
    bool ok = !!probs == !!(m & OIP_OUT_TENSOR) && !!labels == !!(m & OIP_OUT_LABEL) &&
              !!classes == !!(m & OIP_OUT_CLASS) && infer_data(res, probs, labels, classes);
    int64_t shape[2] = {res->batch, res->out_dim};
    json_t *outs = json_array();
    /* tensor() and add() take their arguments whatever happens. */
    if (probs)
        ok = add(outs, tensor(res->conf->output_name, "FP32", shape, 2, probs)) && ok;
    if (labels)
        ok = add(outs, tensor("label", "BYTES", shape, 1, labels)) && ok;
    if (classes)
        ok = add(outs, tensor("class", "INT64", shape, 1, classes)) && ok;
    json_t *o = json_pack("{s:s, s:o, s:s*, s:o}", "model_name", res->model, "model_version",
                          version_string(res->version), "id", res->id, "outputs", outs);
    if (!ok) {
        json_decref(o);
        return NULL;
    }
    return o;
}

json_t *oip_model_metadata(const dl_model_conf *conf, int64_t out_dim, json_t *versions)
{
    /* Shapes with -1 for the batch dimension, as Triton reports them. */
    int64_t in[DL_MAX_DIMS + 1] = {-1}, out[2] = {-1, out_dim};
    memcpy(in + 1, conf->in_shape, (size_t)conf->in_ndim * sizeof(int64_t));
    json_t *label = conf->nlabels > 0 ? tensor("label", "BYTES", out, 1, NULL) : NULL;
    return json_pack("{s:s, s:O, s:s, s:[o], s:[o, o*, o]}", "name", conf->name, "versions",
                     versions, "platform", "dlserve", "inputs",
                     tensor(conf->input_name, "FP32", in, conf->in_ndim + 1, NULL), "outputs",
                     tensor(conf->output_name, "FP32", out, 2, NULL), label,
                     tensor("class", "INT64", out, 1, NULL));
}

/* A version as registry_status lists it (integer, or digits as a string). */
static int64_t version_of(json_t *v)
{
    if (json_is_integer(v))
        return json_integer_value(v);
    const char *s = json_string_value(v);
    return s ? strtoll(s, NULL, 10) : 0;
}

static int cmp_i64(const void *a, const void *b)
{
    int64_t x = *(const int64_t *)a, y = *(const int64_t *)b;
    return (x > y) - (x < y);
}

static json_t *find_model(json_t *status, const char *name)
{
    size_t i;
    json_t *e;
    json_array_foreach(status, i, e) {
        const char *n = json_string_value(json_object_get(e, "name"));
        if (n && strcmp(n, name) == 0)
            return e;
    }
    return NULL;
}

json_t *oip_versions_of(json_t *status, const char *name)
{
    json_t *e = find_model(status, name);
    if (!e)
        return NULL;
    json_t *vs = json_object_get(e, "versions");
    size_t n = json_array_size(vs);
    int64_t *v = malloc((n + 1) * sizeof(int64_t));
    json_t *out = json_array();
    bool ok = v && out;
    for (size_t i = 0; ok && i < n; i++)
        v[i] = version_of(json_array_get(vs, i));
    if (ok)
        qsort(v, n, sizeof(int64_t), cmp_i64);
    for (size_t i = 0; ok && i < n; i++)
        ok = add(out, version_string(v[i]));
    free(v);
    if (!ok) {
        json_decref(out);
        return NULL;
    }
    return out;
}

static json_t *index_entry(json_t *e)
{
    json_t *vs = json_object_get(e, "versions");
    int64_t newest = 0;
    size_t i;
    json_t *v;
    json_array_foreach(vs, i, v)
        if (version_of(v) > newest)
            newest = version_of(v);
    const char *name = json_string_value(json_object_get(e, "name"));
    const char *state = json_string_value(json_object_get(e, "state"));
    const char *reason = json_string_value(json_object_get(e, "reason"));
    return json_pack("{s:s, s:o, s:s, s:s}", "name", name ? name : "", "version",
                     newest > 0 ? version_string(newest) : json_string(""), "state",
                     state ? state : "UNAVAILABLE", "reason", reason ? reason : "");
}

json_t *oip_repository_index(json_t *status)
{
    json_t *out = json_array();
    size_t i;
    json_t *e;
    json_array_foreach(status, i, e) {
        if (out && !add(out, index_entry(e))) {
            json_decref(out);
            out = NULL;
        }
    }
    return out;
}

int oip_http_code(dl_status st)
{
    switch (st) {
    case DL_OK:              return 200;
    case DL_ERR_INVALID:     return 400;
    case DL_ERR_NOT_FOUND:   return 404;
    case DL_ERR_TOO_LARGE:   return 413;
    case DL_ERR_UNAVAILABLE: return 503;
    case DL_ERR_BUSY:        return 503;
    case DL_ERR_NOMEM:       return 500;
    case DL_ERR_IO:          return 500;
    case DL_ERR_BACKEND:     return 500;
    }
    return 500;
}

json_t *oip_error(const char *fmt, ...)
{
    char msg[512];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(msg, sizeof(msg), fmt, ap);
    va_end(ap);
    return json_pack("{s:s}", "error", msg);
}

char *oip_dump(const json_t *j)
{
    return json_dumps(j, JSON_COMPACT | JSON_REAL_PRECISION(9));
}
