/* records.c: Kafka record values, read once (oip_scan_record) and checked
 * against their model; predictions written as JSON. Four forms:
 *   {"id", "model"?, "model_version"?, "inputs": [...]}  as the HTTP infer request
 *   {"id", "model"?, "model_version"?, "data": [numbers]} flat raw values
 *   the OIP binary payload: header Inference-Header-Content-Length: N, N bytes
 *     of JSON (the infer request) then its raw tensors (binary_data_size)
 *   raw little-endian float32 values, content-type application/octet-stream
 * Every form carries raw values (pixels 0..255 for the image models), and
 * they stay raw: the batcher applies the model's input scaling. */
#define _POSIX_C_SOURCE 200809L
#include "serve/kafka/records.h"
#include "serve/oip/oip.h"

#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static const char *const fault_names[REC_NFAULTS] = {
    "ok", "empty", "oversize", "json", "model", "input", "inference", "expired",
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
    case DL_ERR_TIMEOUT:   return REC_EXPIRED;
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

/* The id: the record's "id" (a string or an integer, as scanned), the
 * dlserve-id header, or where the record came from. A refusal is worded
 * into err only when err is given (a record already refused keeps its
 * reason). */
static record_fault find_id(const record_in *in, record_env *env, dl_err *err)
{
    char buf[DL_NAME_MAX + 64];
    const char *id = env->req.id ? env->req.id : in->id_hdr;
    record_fault f = REC_OK;
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

/* The model: the record's "model", the dlserve-model header, the default;
 * the version: the record's "model_version" (checked by the scan). */
static record_fault find_model(const record_in *in, const char *default_model,
                               record_env *env, dl_err *err)
{
    const char *name = env->req.model ? env->req.model : in->model_hdr;
    if (!name || !name[0])
        name = default_model;
    if (!name || !name[0])
        return fault(err, REC_MODEL, "the record names no model and [kafka] default_model "
                                     "is not set");
    if (!dl_model_name_valid(name, strlen(name)))
        return fault(err, REC_MODEL, "'%.64s' is not a valid model name", name);
    dl_strlcpy(env->model, name, sizeof(env->model));
    env->version = env->req.model_version;
    return REC_OK;
}

/* Reads a JSON or OIP payload record (json_len bytes of JSON, raw tensors
 * after them) into env->req: the one parse of the record. */
static record_fault scan(const record_in *in, size_t json_len, record_env *env, dl_err *err)
{
    dl_err why = {0};
    env->scanned = true;
    if (oip_scan_record(in->value, in->len, json_len, &env->req, &why) == DL_OK)
        return REC_OK;
    switch (env->req.fault) {
    case OIP_FAULT_SYNTAX:   return fault(err, REC_JSON, "invalid JSON record: %s", why.msg);
    case OIP_FAULT_ENVELOPE: return fault(err, REC_JSON, "%s", why.msg);
    case OIP_FAULT_TENSOR:   return fault(err, REC_INPUT, "%s", why.msg);
    default:                 return out_of_memory(err);   /* OIP_FAULT_NONE */
    }
}

record_fault record_open(const record_in *in, const char *default_model,
                         size_t max_bytes, record_env *env, dl_err *err)
{
    memset(env, 0, sizeof(*env));
    record_fault f = REC_OK;
    size_t json_len = in->len;
    if (in->len == 0 || !in->value)
        f = fault(err, REC_EMPTY, "the record is empty");
    else if (in->len > max_bytes)
        f = fault(err, REC_OVERSIZE, "the record has %zu bytes, more than max_record_bytes %zu",
                  in->len, max_bytes);
    else if (in->json_len_hdr && oip_json_len(in->json_len_hdr, in->len, &json_len, err) != DL_OK)
        f = REC_JSON;   /* err names the header */
    /* Every form but raw float32 (which the payload form's header overrides). */
    if (f == REC_OK && (!in->binary || in->json_len_hdr))
        f = scan(in, json_len, env, err);
    /* The id even so, so that a refused record is named by it. */
    record_fault fid = find_id(in, env, f == REC_OK ? err : NULL);
    if (f == REC_OK)
        f = fid;
    if (f == REC_OK)
        f = find_model(in, default_model, env, err);
    return f;
}

bool record_reserve(float **x, size_t *cap, size_t need)
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

/* The ids of n samples side by side (a model of id inputs; raw float32
 * and "data" records, which oip_check_infer does not see). */
static record_fault check_ids(const dl_model_conf *conf, const void *x, int64_t n, dl_err *err)
{
    return oip_check_ids(conf, x, n, err) == DL_OK ? REC_OK : REC_INPUT;
}

/* Raw float32 values, whole samples, checked where they lie: the batcher
 * copies them from the record into its batch. */
static record_fault check_binary(const record_in *in, const dl_model_conf *conf, int64_t in_dim,
                                 int64_t *n, dl_err *err)
{
    size_t sample = (size_t)in_dim * sizeof(float);
    if (in->len % sample)
        return fault(err, REC_INPUT, "binary record of %zu bytes: expected a multiple of %zu "
                                     "(%lld float32 values a sample)", in->len, sample,
                     (long long)in_dim);
    size_t cnt = in->len / sizeof(float), bad = dl_first_nonfinite(in->value, cnt);
    if (bad < cnt)
        return fault(err, REC_INPUT, "value %zu is not finite", bad);
    *n = (int64_t)(in->len / sample);
    return check_ids(conf, in->value, *n, err);
}

/* A scanned record's values, checked against the model and handed over:
 * the scanner's buffer replaces the caller's. */
static record_fault take_scanned(oip_request *req, const dl_model_conf *conf,
                                 dl_tokenizer *const *tok, int64_t in_dim, int64_t *n, float **x,
                                 size_t *cap, dl_err *err)
{
    if (req->flat) {   /* {"data": [...]}: a flat array of whole samples */
        if (req->count == 0 || req->count % in_dim)
            return fault(err, REC_INPUT, "'data' has %lld values: expected a multiple of %lld "
                                         "(one sample), at least one", (long long)req->count,
                         (long long)in_dim);
        *n = req->count / in_dim;
        record_fault f = check_ids(conf, req->x, *n, err);
        if (f != REC_OK)
            return f;
    } else {
        dl_status st = oip_check_infer(req, conf, tok, in_dim, err);
        if (st != DL_OK)
            return record_fault_of(st);
        *n = req->batch;
    }
    DL_ASSERT(req->x);   /* handed over once per record_open */
    free(*x);
    *x = req->x;
    *cap = (size_t)req->count;
    req->x = NULL;
    return REC_OK;
}

record_fault record_decode_into(const record_in *in, record_env *env,
                                const dl_model_conf *conf, dl_tokenizer *const *tok,
                                int64_t in_dim, int64_t *n, float **x, size_t *cap,
                                const void **values, dl_err *err)
{
    *n = 0;
    *values = NULL;
    record_fault f = env->scanned ? take_scanned(&env->req, conf, tok, in_dim, n, x, cap, err)
                                  : check_binary(in, conf, in_dim, n, err);
    if (f == REC_OK)
        *values = env->scanned ? (const void *)*x : in->value;
    return f;
}

record_fault record_decode(const record_in *in, record_env *env,
                           const dl_model_conf *conf, dl_tokenizer *const *tok, int64_t in_dim,
                           int64_t *n, float **x, dl_err *err)
{
    size_t cap = 0;
    const void *values;
    *x = NULL;
    record_fault f = record_decode_into(in, env, conf, tok, in_dim, n, x, &cap, &values, err);
    if (f == REC_OK && values != *x) {   /* raw float32: a copy of the record's */
        if (record_reserve(x, &cap, (size_t)(*n * in_dim)))
            memcpy(*x, values, (size_t)(*n * in_dim) * sizeof(float));
        else
            f = out_of_memory(err);
    }
    if (f != REC_OK) {
        free(*x);
        *x = NULL;
    }
    return f;
}

void record_env_fini(record_env *env)
{
    oip_request_fini(&env->req);
    free(env->id);
    memset(env, 0, sizeof(*env));
}

static void put_label(dl_sbuf *b, const dl_model_conf *conf, int64_t k)
{
    if (k < conf->nlabels)
        dl_sbuf_json_string(b, conf->labels[k]);
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

/* Where model output k lies in a row of o->y: *off, and its *dim values
 * as served. */
static void segment(const record_out *o, int k, int64_t *off, int64_t *dim)
{
    *off = 0;
    *dim = o->out_dim;
    if (o->conf->noutputs == 1)
        return;
    for (int j = 0; j < k; j++)
        *off += o->conf->outputs[j].served;
    *dim = o->conf->outputs[k].served;
}

/* A crf's path y of len tags: their labels, or the tags themselves
 * without labels. */
static void put_tags(dl_sbuf *b, const dl_model_conf *conf, int k, const float *y, int64_t len)
{
    const dl_output_conf *oc = &conf->outputs[k];
    int nlabels = k == 0 ? conf->nlabels : oc->nlabels;   /* conf mirrors output 0 */
    char **labels = k == 0 ? conf->labels : oc->labels;
    dl_sbuf_putc(b, '[');
    for (int64_t t = 0; t < len; t++) {
        int64_t tag = (int64_t)y[t];
        if (t)
            dl_sbuf_putc(b, ',');
        if (nlabels > 0 && tag >= 0 && tag < nlabels)
            dl_sbuf_json_string(b, labels[tag]);
        else
            dl_sbuf_int(b, tag);
    }
    dl_sbuf_putc(b, ']');
}

/* Sample s's values of model output k: a list; a per-token output's a
 * list a position of its sample's length (of scores; a crf's tags). */
static void put_sample(const record_out *o, int k, int64_t s, dl_sbuf *b)
{
    const dl_output_conf *oc = &o->conf->outputs[k];
    int64_t off, dim;
    segment(o, k, &off, &dim);
    const float *y = o->y + s * o->out_dim + off;
    if (oc->max_length == 0) {
        put_scores(b, y, dim);
        return;
    }
    int64_t len = oip_out_length(o->conf, k, o->x, o->in_dim, s);
    if ((k == 0 ? o->conf->loss : oc->loss) == DL_LOSS_CRF) {
        put_tags(b, o->conf, k, y, len);
        return;
    }
    int64_t c = oc->dim / oc->max_length;
    dl_sbuf_putc(b, '[');
    for (int64_t t = 0; t < len; t++) {
        if (t)
            dl_sbuf_putc(b, ',');
        put_scores(b, y + t * c, c);
    }
    dl_sbuf_putc(b, ']');
}

/* The values of model output k for every sample: one array, or one a
 * sample. */
static void put_all_scores(const record_out *o, int k, dl_sbuf *b)
{
    bool one = o->n == 1;
    if (!one)
        PUT(b, "[");
    for (int64_t s = 0; s < o->n; s++) {
        if (s)
            PUT(b, ",");
        put_sample(o, k, s, b);
    }
    if (!one)
        PUT(b, "]");
}

/* ,"class":..,"label":.. of a classifier (output 0). The class of a
 * sample is found twice: a scan of its scores costs less than keeping
 * them. */
static void put_classes(const record_out *o, dl_sbuf *b)
{
    bool one = o->n == 1;
    int64_t off, dim;
    segment(o, 0, &off, &dim);
    PUT(b, ",\"class\":");
    if (!one)
        PUT(b, "[");
    for (int64_t s = 0; s < o->n; s++) {
        if (s)
            PUT(b, ",");
        dl_sbuf_int(b, dl_argmax(o->y + s * o->out_dim, dim));
    }
    if (!one)
        PUT(b, "]");
    PUT(b, ",\"label\":");
    if (!one)
        PUT(b, "[");
    for (int64_t s = 0; s < o->n; s++) {
        if (s)
            PUT(b, ",");
        put_label(b, o->conf, dl_argmax(o->y + s * o->out_dim, dim));
    }
    if (!one)
        PUT(b, "]");
}

/* ,"outputs":{"name": values, ...} of a model's outputs after the first. */
static void put_more_outputs(const record_out *o, dl_sbuf *b)
{
    PUT(b, ",\"outputs\":{");
    for (int k = 1; k < o->conf->noutputs; k++) {
        if (k > 1)
            PUT(b, ",");
        dl_sbuf_json_string(b, o->conf->outputs[k].name);
        PUT(b, ":");
        put_all_scores(o, k, b);
    }
    PUT(b, "}");
}

bool record_format(const record_out *o, dl_sbuf *b)
{
    /* Written directly (no JSON tree): this runs once per record. */
    PUT(b, "{\"id\":");
    dl_sbuf_json_string(b, o->id);
    PUT(b, ",\"model\":");
    dl_sbuf_json_string(b, o->model);
    PUT(b, ",\"version\":");
    dl_sbuf_int(b, o->version);
    if (oip_model_outputs(o->conf) & OIP_OUT_CLASS) {
        put_classes(o, b);
        PUT(b, ",\"scores\":");
    } else {
        PUT(b, ",\"output\":");
        dl_sbuf_json_string(b, o->conf->output_name);
        PUT(b, ",\"values\":");
    }
    put_all_scores(o, 0, b);
    if (o->conf->noutputs > 1)
        put_more_outputs(o, b);
    PUT(b, ",\"source\":{\"topic\":");
    dl_sbuf_json_string(b, o->topic);
    PUT(b, ",\"partition\":");
    dl_sbuf_int(b, o->partition);
    PUT(b, ",\"offset\":");
    dl_sbuf_int(b, o->offset);
    PUT(b, "}}");
    return !b->oom;
}

bool record_format_oip(const record_out *o, bool binary, dl_sbuf *b, size_t *json_len)
{
    const oip_param params[] = {
        {.name = "source_topic", .str = o->topic ? o->topic : ""},
        {.name = "source_partition", .num = o->partition},
        {.name = "source_offset", .num = o->offset},
    };
    oip_result res = {
        .model = o->model, .version = o->version, .id = o->id, .conf = o->conf,
        .batch = o->n, .out_dim = o->out_dim, .y = o->y, .x = o->x, .in_dim = o->in_dim,
        .outputs = oip_model_outputs(o->conf), .binary = binary,
        .nparams = 3, .params = params,
    };
    return oip_write_infer(&res, b, json_len, NULL) == DL_OK;
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
