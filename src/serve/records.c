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

/* {"data": [numbers]}: a flat array of whole samples. */
static record_fault decode_data(json_t *data, int64_t in_dim, int64_t *n, float **x, dl_err *err)
{
    if (!json_is_array(data))
        return fault(err, REC_INPUT, "'data' must be a flat array of numbers");
    size_t len = json_array_size(data);
    if (len == 0 || len % (size_t)in_dim)
        return fault(err, REC_INPUT, "'data' has %zu values: expected a multiple of %lld "
                                     "(one sample), at least one", len, (long long)in_dim);
    float *v = malloc(len * sizeof(float));
    if (!v)
        return out_of_memory(err);
    for (size_t i = 0; i < len; i++) {
        json_t *e = json_array_get(data, i);
        double d = json_number_value(e);
        if (!json_is_number(e) || !isfinite((float)d)) {
            free(v);
            return fault(err, REC_INPUT, "data[%zu] is %s", i,
                         json_is_number(e) ? "not a finite float" : "not a number");
        }
        v[i] = (float)d;
    }
    *n = (int64_t)(len / (size_t)in_dim);
    *x = v;
    return REC_OK;
}

/* Raw float32 values, whole samples. */
static record_fault decode_binary(const record_in *in, int64_t in_dim, int64_t *n, float **x,
                                  dl_err *err)
{
    size_t sample = (size_t)in_dim * sizeof(float);
    if (in->len % sample)
        return fault(err, REC_INPUT, "binary record of %zu bytes: expected a multiple of %zu "
                                     "(%lld float32 values a sample)", in->len, sample,
                     (long long)in_dim);
    float *v = malloc(in->len);
    if (!v)
        return out_of_memory(err);
    memcpy(v, in->value, in->len);   /* little-endian hosts only, as the wire */
    size_t cnt = in->len / sizeof(float);
    for (size_t i = 0; i < cnt; i++)
        if (!isfinite(v[i])) {
            free(v);
            return fault(err, REC_INPUT, "value %zu is not finite", i);
        }
    *n = (int64_t)(in->len / sample);
    *x = v;
    return REC_OK;
}

record_fault record_decode(const record_in *in, const record_env *env,
                           const dl_model_conf *conf, int64_t in_dim,
                           int64_t *n, float **x, dl_err *err)
{
    *n = 0;
    *x = NULL;
    record_fault f;
    if (!env->root) {
        f = decode_binary(in, in_dim, n, x, err);
    } else if (json_object_get(env->root, "inputs")) {
        oip_request req;
        memset(&req, 0, sizeof(req));
        dl_status st = oip_parse_infer(in->value, in->len, in->len, conf, in_dim, &req, err);
        if (st != DL_OK)
            return record_fault_of(st);
        *n = req.batch;
        *x = req.x;
        req.x = NULL;
        oip_request_fini(&req);
        f = REC_OK;
    } else {
        f = decode_data(json_object_get(env->root, "data"), in_dim, n, x, err);
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
 * (s is valid UTF-8: record_open checks ids, names are ASCII). */
static void put_string(dl_sbuf *b, const char *s)
{
    dl_sbuf_putc(b, '"');
    for (const char *p = s; *p; p++) {
        unsigned char c = (unsigned char)*p;
        if (c == '"' || c == '\\')
            dl_sbuf_printf(b, "\\%c", c);
        else if (c < 0x20)
            dl_sbuf_printf(b, "\\u%04x", c);
        else
            dl_sbuf_putc(b, (char)c);
    }
    dl_sbuf_putc(b, '"');
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
    dl_sbuf_putc(b, '[');
    for (int64_t j = 0; j < n; j++)   /* 9 digits give every float back exactly */
        dl_sbuf_printf(b, j ? ",%.9g" : "%.9g", isfinite(y[j]) ? (double)y[j] : 0.0);
    dl_sbuf_putc(b, ']');
}

char *record_output(const record_out *o, size_t *len)
{
    /* Written directly (no JSON tree): this runs once per record. */
    int64_t one_class, *cls = o->n == 1 ? &one_class : malloc((size_t)o->n * sizeof(*cls));
    if (!cls)
        return NULL;
    for (int64_t s = 0; s < o->n; s++)
        cls[s] = dl_argmax(o->y + s * o->out_dim, o->out_dim);
    dl_sbuf b = {0};
    bool one = o->n == 1;
    dl_sbuf_add(&b, "{\"id\":", 6);
    put_string(&b, o->id);
    dl_sbuf_add(&b, ",\"model\":", 9);
    put_string(&b, o->model);
    dl_sbuf_printf(&b, ",\"version\":%lld,\"class\":%s", (long long)o->version, one ? "" : "[");
    for (int64_t s = 0; s < o->n; s++)
        dl_sbuf_printf(&b, s ? ",%lld" : "%lld", (long long)cls[s]);
    dl_sbuf_add(&b, one ? ",\"label\":" : "],\"label\":[", one ? 9 : 11);
    for (int64_t s = 0; s < o->n; s++) {
        if (s)
            dl_sbuf_putc(&b, ',');
        put_label(&b, o->conf, cls[s]);
    }
    dl_sbuf_add(&b, one ? ",\"scores\":" : "],\"scores\":[", one ? 10 : 12);
    for (int64_t s = 0; s < o->n; s++) {
        if (s)
            dl_sbuf_putc(&b, ',');
        put_scores(&b, o->y + s * o->out_dim, o->out_dim);
    }
    dl_sbuf_printf(&b, "%s,\"source\":{\"topic\":", one ? "" : "]");
    put_string(&b, o->topic);
    dl_sbuf_printf(&b, ",\"partition\":%d,\"offset\":%lld}}", (int)o->partition,
                   (long long)o->offset);
    if (cls != &one_class)
        free(cls);
    if (b.oom) {
        dl_sbuf_free(&b);
        return NULL;
    }
    *len = b.len;
    return b.s;
}
