/* records.c: Kafka record values. Three forms:
 *   {"id", "model"?, "model_version"?, "inputs": [...]}  as the HTTP infer request
 *   {"id", "model"?, "data": [numbers]}                 flat raw values
 *   raw little-endian float32 values, content-type application/octet-stream
 * Every form carries raw values (pixels 0..255 for the image models), and
 * they stay raw: the batcher applies the model's input scaling. */
#define _POSIX_C_SOURCE 200809L
#include "serve/records.h"
#include "serve/oip.h"

#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static const char *const fault_names[REC_NFAULTS] = {
    "ok", "empty", "oversize", "json", "model", "input", "inference",
};

const char *record_fault_name(record_fault f)
{
    return f >= 0 && f < REC_NFAULTS ? fault_names[f] : "unknown";
}

record_fault record_fault_of(dl_status st)
{
    switch (st) {
    case DL_ERR_INVALID:   return REC_INPUT;
    case DL_ERR_TOO_LARGE: return REC_OVERSIZE;
    case DL_ERR_NOT_FOUND: return REC_MODEL;
    default:               return REC_INFERENCE;
    }
}

/* A refusal of the record: f with err saying why (DL_ERR_TOO_LARGE for an
 * oversize record, DL_ERR_INVALID for the rest). */
static record_fault fault(dl_err *err, record_fault f, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));
static record_fault fault(dl_err *err, record_fault f, const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    dl_err_setv(err, f == REC_OVERSIZE ? DL_ERR_TOO_LARGE : DL_ERR_INVALID, fmt, ap);
    va_end(ap);
    return f;
}

/* An allocation failed: nothing is wrong with the record, the daemon is
 * short of memory (the dead letter says "inference", as a failed batch). */
static record_fault out_of_memory(dl_err *err)
{
    dl_err_set(err, DL_ERR_NOMEM, "out of memory");
    return REC_INFERENCE;
}

static bool utf8_valid(const char *s)
{
    for (size_t n; *s; s += n)
        if (!(n = dl_utf8_len((const unsigned char *)s)))
            return false;
    return true;
}

/* The id: the record's "id" (a string or an integer), the dlserve-id
 * header, or where the record came from. */
static record_fault find_id(const record_in *in, json_t *root, record_env *env, dl_err *err)
{
    char buf[DL_NAME_MAX + 64];
    const char *id = in->id_hdr;
    record_fault f = REC_OK;
    json_t *j = root ? json_object_get(root, "id") : NULL;
    if (json_is_string(j)) {
        id = json_string_value(j);
    } else if (json_is_integer(j)) {
        snprintf(buf, sizeof(buf), "%lld", (long long)json_integer_value(j));
        id = buf;
    } else if (j) {
        f = fault(err, REC_JSON, "'id' must be a string or an integer");
    }
    if (strlen(id ? id : "") > 512)
        f = fault(err, REC_JSON, "'id' is longer than 512 bytes");
    else if (id && !utf8_valid(id))   /* a header's bytes: the output is JSON */
        f = fault(err, REC_JSON, "'id' is not valid UTF-8");
    if (f != REC_OK || !id || !id[0]) {   /* named by its source */
        snprintf(buf, sizeof(buf), "%.*s/%d/%lld", DL_NAME_MAX, in->topic ? in->topic : "",
                 (int)in->partition, (long long)in->offset);
        id = buf;
    }
    env->id = strdup(id);
    if (!env->id)
        return out_of_memory(err);
    return f;
}

/* The model: the record's "model", the dlserve-model header, the default. */
static record_fault find_model(const record_in *in, json_t *root, const char *default_model,
                               record_env *env, dl_err *err)
{
    json_t *m = root ? json_object_get(root, "model") : NULL;
    json_t *v = root ? json_object_get(root, "model_version") : NULL;
    const char *name = in->model_hdr;
    if (m && !json_is_string(m))
        return fault(err, REC_JSON, "'model' must be a string");
    if (m)
        name = json_string_value(m);
    if (!name || !name[0])
        name = default_model;
    if (!name || !name[0])
        return fault(err, REC_MODEL, "the record names no model and [kafka] default_model "
                                     "is not set");
    if (!dl_model_name_valid(name, strlen(name)))
        return fault(err, REC_MODEL, "'%.64s' is not a valid model name", name);
    snprintf(env->model, sizeof(env->model), "%s", name);
    if (json_is_integer(v)) {
        env->version = json_integer_value(v);
    } else if (json_is_string(v)) {
        char *end;
        env->version = strtoll(json_string_value(v), &end, 10);
        if (*end || end == json_string_value(v))
            env->version = -1;
    } else if (v) {
        env->version = -1;
    }
    if (env->version < 0)
        return fault(err, REC_JSON, "'model_version' must be a positive integer");
    return REC_OK;
}

record_fault record_open(const record_in *in, const char *default_model,
                         size_t max_bytes, record_env *env, dl_err *err)
{
    memset(env, 0, sizeof(*env));
    record_fault f = REC_OK;
    if (in->len == 0 || !in->value)
        f = fault(err, REC_EMPTY, "the record is empty");
    else if (in->len > max_bytes)
        f = fault(err, REC_OVERSIZE, "the record has %zu bytes, more than max_record_bytes %zu",
                  in->len, max_bytes);
    if (f == REC_OK && !in->binary) {
        json_error_t je;
        env->root = json_loadb(in->value, in->len, JSON_REJECT_DUPLICATES, &je);
        if (!env->root)
            f = fault(err, REC_JSON, "invalid JSON at line %d column %d: %s", je.line,
                      je.column, je.text);
        else if (!json_is_object(env->root))
            f = fault(err, REC_JSON, "the record must be a JSON object");
    }
    /* The id first, so that even a record refused later is named by it. */
    record_fault fid = find_id(in, f == REC_OK ? env->root : NULL, env, err);
    if (f == REC_OK)
        f = fid;
    if (f == REC_OK)
        f = find_model(in, env->root, default_model, env, err);
    if (f == REC_OK && env->root && !json_object_get(env->root, "inputs") &&
        !json_object_get(env->root, "data"))
        f = fault(err, REC_JSON, "the record has neither 'inputs' nor 'data'");
    return f;
}

/* Makes *x hold at least need floats; false when out of memory (*x is
 * kept as it was). */
static bool reserve(float **x, size_t *cap, size_t need)
{
    if (need <= *cap)
        return true;
    float *p = realloc(*x, need * sizeof(float));
    if (!p)
        return false;
    *x = p;
    *cap = need;
    return true;
}

/* {"data": [numbers]}: a flat array of whole samples. */
static record_fault decode_data(json_t *data, int64_t in_dim, int64_t *n, float **x,
                                size_t *cap, dl_err *err)
{
    if (!json_is_array(data))
        return fault(err, REC_INPUT, "'data' must be a flat array of numbers");
    size_t len = json_array_size(data);
    if (len == 0 || len % (size_t)in_dim)
        return fault(err, REC_INPUT, "'data' has %zu values: expected a multiple of %lld "
                                     "(one sample), at least one", len, (long long)in_dim);
    if (!reserve(x, cap, len))
        return out_of_memory(err);
    float *v = *x;
    for (size_t i = 0; i < len; i++) {
        json_t *e = json_array_get(data, i);
        double d = json_number_value(e);
        if (!json_is_number(e) || !isfinite((float)d))
            return fault(err, REC_INPUT, "data[%zu] is %s", i,
                         json_is_number(e) ? "not a finite float" : "not a number");
        v[i] = (float)d;
    }
    *n = (int64_t)(len / (size_t)in_dim);
    return REC_OK;
}

/* Raw float32 values, whole samples. */
static record_fault decode_binary(const record_in *in, int64_t in_dim, int64_t *n, float **x,
                                  size_t *cap, dl_err *err)
{
    size_t sample = (size_t)in_dim * sizeof(float);
    if (in->len % sample)
        return fault(err, REC_INPUT, "binary record of %zu bytes: expected a multiple of %zu "
                                     "(%lld float32 values a sample)", in->len, sample,
                     (long long)in_dim);
    size_t cnt = in->len / sizeof(float);
    if (!reserve(x, cap, cnt))
        return out_of_memory(err);
    float *v = *x;
    memcpy(v, in->value, in->len);   /* little-endian hosts only, as the wire */
    for (size_t i = 0; i < cnt; i++)
        if (!isfinite(v[i]))
            return fault(err, REC_INPUT, "value %zu is not finite", i);
    *n = (int64_t)(in->len / sample);
    return REC_OK;
}

record_fault record_decode_into(const record_in *in, const record_env *env,
                                const dl_model_conf *conf, int64_t in_dim,
                                int64_t *n, float **x, size_t *cap, dl_err *err)
{
    *n = 0;
    record_fault f;
    if (!env->root) {
        f = decode_binary(in, in_dim, n, x, cap, err);
    } else if (json_object_get(env->root, "inputs")) {
        oip_request req;
        memset(&req, 0, sizeof(req));
        dl_status st = oip_parse_infer(in->value, in->len, in->len, conf, in_dim, &req, err);
        if (st != DL_OK)
            return record_fault_of(st);
        /* the parser's buffer replaces the caller's */
        free(*x);
        *x = req.x;
        *cap = (size_t)(req.batch * in_dim);
        *n = req.batch;
        req.x = NULL;
        oip_request_fini(&req);
        f = REC_OK;
    } else {
        f = decode_data(json_object_get(env->root, "data"), in_dim, n, x, cap, err);
    }
    return f;
}

record_fault record_decode(const record_in *in, const record_env *env,
                           const dl_model_conf *conf, int64_t in_dim,
                           int64_t *n, float **x, dl_err *err)
{
    size_t cap = 0;
    *x = NULL;
    record_fault f = record_decode_into(in, env, conf, in_dim, n, x, &cap, err);
    if (f != REC_OK) {
        free(*x);
        *x = NULL;
    }
    return f;
}

void record_env_fini(record_env *env)
{
    json_decref(env->root);
    free(env->id);
    memset(env, 0, sizeof(*env));
}

/* s as a JSON string: quotes, backslashes and control characters escaped
 * (s is valid UTF-8: record_open checks ids, names are ASCII). Runs of
 * plain bytes are appended whole. */
static void put_string(dl_sbuf *b, const char *s)
{
    static const char hex[] = "0123456789abcdef";
    dl_sbuf_putc(b, '"');
    const char *run = s;
    for (const char *p = s; *p; p++) {
        unsigned char c = (unsigned char)*p;
        if (c != '"' && c != '\\' && c >= 0x20)
            continue;
        dl_sbuf_add(b, run, (size_t)(p - run));
        run = p + 1;
        if (c == '"' || c == '\\') {
            char esc[2] = {'\\', (char)c};
            dl_sbuf_add(b, esc, 2);
        } else {
            char esc[6] = {'\\', 'u', '0', '0', hex[c >> 4], hex[c & 15]};
            dl_sbuf_add(b, esc, 6);
        }
    }
    dl_sbuf_add(b, run, strlen(run));
    dl_sbuf_putc(b, '"');
}

/* The decimal text of v (no printf: this runs a few times a record). */
static void put_int(dl_sbuf *b, long long v)
{
    char buf[24], *p = buf + sizeof(buf);
    unsigned long long u = v < 0 ? 0ULL - (unsigned long long)v : (unsigned long long)v;
    do
        *--p = (char)('0' + u % 10);
    while (u /= 10);
    if (v < 0)
        *--p = '-';
    dl_sbuf_add(b, p, (size_t)(buf + sizeof(buf) - p));
}

static void put_label(dl_sbuf *b, const dl_model_conf *conf, int64_t k)
{
    if (k < conf->nlabels)
        put_string(b, conf->labels[k]);
    else
        dl_sbuf_add(b, "null", 4);
}

static void put_scores(dl_sbuf *b, const float *y, int64_t n)
{
    char num[DL_FLOAT_CHARS];
    dl_sbuf_putc(b, '[');
    for (int64_t j = 0; j < n; j++) {
        if (j)
            dl_sbuf_putc(b, ',');
        dl_sbuf_add(b, num, dl_fmt_float(num, isfinite(y[j]) ? y[j] : 0.0f));
    }
    dl_sbuf_putc(b, ']');
}

/* Appends a string literal. */
#define PUT(b, lit) dl_sbuf_add((b), (lit), sizeof(lit) - 1)

bool record_format(const record_out *o, dl_sbuf *b)
{
    /* Written directly (no JSON tree): this runs once per record. The
     * class of a sample is found twice (class, label): a scan of out_dim
     * scores costs less than keeping them. */
    bool one = o->n == 1;
    PUT(b, "{\"id\":");
    put_string(b, o->id);
    PUT(b, ",\"model\":");
    put_string(b, o->model);
    PUT(b, ",\"version\":");
    put_int(b, (long long)o->version);
    PUT(b, ",\"class\":");
    if (!one)
        PUT(b, "[");
    for (int64_t s = 0; s < o->n; s++) {
        if (s)
            PUT(b, ",");
        put_int(b, (long long)dl_argmax(o->y + s * o->out_dim, o->out_dim));
    }
    if (!one)
        PUT(b, "]");
    PUT(b, ",\"label\":");
    if (!one)
        PUT(b, "[");
    for (int64_t s = 0; s < o->n; s++) {
        if (s)
            PUT(b, ",");
        put_label(b, o->conf, dl_argmax(o->y + s * o->out_dim, o->out_dim));
    }
    if (!one)
        PUT(b, "]");
    PUT(b, ",\"scores\":");
    if (!one)
        PUT(b, "[");
    for (int64_t s = 0; s < o->n; s++) {
        if (s)
            PUT(b, ",");
        put_scores(b, o->y + s * o->out_dim, o->out_dim);
    }
    if (!one)
        PUT(b, "]");
    PUT(b, ",\"source\":{\"topic\":");
    put_string(b, o->topic);
    PUT(b, ",\"partition\":");
    put_int(b, o->partition);
    PUT(b, ",\"offset\":");
    put_int(b, (long long)o->offset);
    PUT(b, "}}");
    return !b->oom;
}

char *record_output(const record_out *o, size_t *len)
{
    dl_sbuf b = {0};
    if (!record_format(o, &b)) {
        dl_sbuf_free(&b);
        return NULL;
    }
    *len = b.len;
    return b.s;
}
