/* oip_answer.c: the Open Inference Protocol's answers: the infer answer
 * written directly (JSON, or JSON then binary tensors), and the metadata,
 * repository index, error and status-code answers through jansson. */
#define _POSIX_C_SOURCE 200809L
#include "serve/oip/oip.h"

#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* ---- the infer answer, written directly ------------------------------------ */

static void put(dl_sbuf *b, const char *s)
{
    dl_sbuf_add(b, s, strlen(s));
}

/* Little-endian bytes of v, whatever the host's order. */
static void put_le(dl_sbuf *b, uint64_t v, int bytes)
{
    char le[8];
    for (int i = 0; i < bytes; i++)
        le[i] = (char)(v >> (8 * i));
    dl_sbuf_add(b, le, (size_t)bytes);
}

static const char *label_of(const oip_result *res, int64_t c)
{
    return c < res->conf->nlabels ? res->conf->labels[c] : "";
}

/* Where model output k lies in a row of res->y: *off, and its *dim values. */
static void segment(const oip_result *res, int k, int64_t *off, int64_t *dim)
{
    const dl_model_conf *conf = res->conf;
    if (conf->noutputs == 1) {
        *off = 0;
        *dim = res->out_dim;
        return;
    }
    *off = 0;
    for (int j = 0; j < k; j++)
        *off += conf->outputs[j].dim;
    *dim = conf->outputs[k].dim;
}

/* Sample i's values of model output k (*dim of them). */
static const float *row_of(const oip_result *res, int64_t i, int k, int64_t *dim)
{
    int64_t off;
    segment(res, k, &off, dim);
    return res->y + i * res->out_dim + off;
}

/* A class and its score, for ranking. */
typedef struct ranked {
    float   score;
    int64_t index;
} ranked;

/* Higher scores first (NaN last), then the lower index. */
static int cmp_ranked(const void *a, const void *b)
{
    const ranked *x = a, *y = b;
    bool xn = isnan(x->score), yn = isnan(y->score);
    if (xn != yn)
        return xn ? 1 : -1;
    if (!xn && x->score != y->score)
        return x->score > y->score ? -1 : 1;
    return (x->index > y->index) - (x->index < y->index);
}

/* Ranks the n classes of row p into rank (room for n), highest first. */
static void rank_classes(const float *p, int64_t n, ranked *rank)
{
    for (int64_t j = 0; j < n; j++)
        rank[j] = (ranked){p[j], j};
    qsort(rank, (size_t)n, sizeof(*rank), cmp_ranked);
}

/* Triton's classification string of class c of row p:
 * "score:index[:label]" (label when the model has labels). Returns its
 * length; buf holds it (NUL-terminated). */
static size_t class_text(const oip_result *res, int k, const float *p, int64_t c, char *buf,
                         size_t cap)
{
    /* output 0's labels as the model's own (conf->labels mirrors them) */
    const dl_model_conf *conf = res->conf;
    int nlabels = k == 0 ? conf->nlabels : conf->outputs[k].nlabels;
    char **labels = k == 0 ? conf->labels : conf->outputs[k].labels;
    char num[DL_FLOAT_CHARS + 1];
    num[dl_fmt_float(num, p[c])] = '\0';
    int n = c < nlabels
                ? snprintf(buf, cap, "%s:%lld:%s", num, (long long)c, labels[c])
                : snprintf(buf, cap, "%s:%lld", num, (long long)c);
    return n < 0 ? 0 : (size_t)n < cap ? (size_t)n : cap - 1;
}

/* A classification output's values (o.topk of each row), as JSON strings
 * or binary BYTES; *bytes (when not NULL) adds up their binary size
 * instead of writing them. */
static void put_classes(dl_sbuf *b, const oip_result *res, oip_output o, size_t *bytes)
{
    int64_t dim;
    row_of(res, 0, o.index, &dim);
    ranked *rank = malloc((size_t)dim * sizeof(*rank));
    if (!rank) {
        if (b)
            b->oom = true;
        return;
    }
    char text[1024];   /* a longer label is cut, alike in size and bytes */
    for (int64_t i = 0; i < res->batch; i++) {
        const float *p = row_of(res, i, o.index, &dim);
        rank_classes(p, dim, rank);
        for (int64_t r = 0; r < o.topk && r < dim; r++) {
            size_t n = class_text(res, o.index, p, rank[r].index, text, sizeof(text));
            if (bytes) {
                *bytes += 4 + n;
            } else if (o.binary) {
                put_le(b, n, 4);
                dl_sbuf_add(b, text, n);
            } else {
                if (i > 0 || r > 0)
                    dl_sbuf_putc(b, ',');
                dl_sbuf_json_string(b, text);
            }
        }
    }
    free(rank);
}

/* Bytes of an output's binary data. */
static size_t binary_size(const oip_result *res, oip_output o)
{
    unsigned kind = o.kind;
    if (o.topk > 0) {
        size_t n = 0;
        put_classes(NULL, res, o, &n);
        return n;
    }
    int64_t dim;
    row_of(res, 0, o.index, &dim);
    if (kind == OIP_OUT_TENSOR)
        return (size_t)(res->batch * dim) * sizeof(float);
    if (kind == OIP_OUT_CLASS)
        return (size_t)res->batch * sizeof(int64_t);
    size_t n = 0;
    for (int64_t i = 0; i < res->batch; i++) {
        const float *p = row_of(res, i, 0, &dim);
        n += 4 + strlen(label_of(res, dl_argmax(p, dim)));
    }
    return n;
}

/* One output's values, as JSON ("data") or as binary data. */
static void put_values(dl_sbuf *b, const oip_result *res, oip_output o, bool binary)
{
    unsigned kind = o.kind;
    if (o.topk > 0) {
        o.binary = binary;
        put_classes(b, res, o, NULL);
        return;
    }
    for (int64_t i = 0; i < res->batch; i++) {
        int64_t dim;   /* a label or class is output 0's (o.index is 0) */
        const float *p = row_of(res, i, o.index, &dim);
        if (kind == OIP_OUT_TENSOR) {
            for (int64_t j = 0; j < dim; j++) {
                if (binary) {
                    uint32_t u;
                    memcpy(&u, &p[j], sizeof(u));
                    put_le(b, u, 4);
                    continue;
                }
                char num[DL_FLOAT_CHARS + 1];
                size_t n = 0;
                if (i > 0 || j > 0)
                    num[n++] = ',';
                n += dl_fmt_float(num + n, p[j]);   /* JSON's null when not finite */
                dl_sbuf_add(b, num, n);
            }
            continue;
        }
        int64_t c = dl_argmax(p, dim);
        if (!binary && i > 0)
            dl_sbuf_putc(b, ',');
        if (kind == OIP_OUT_CLASS && binary) {
            put_le(b, (uint64_t)c, 8);
        } else if (kind == OIP_OUT_CLASS) {
            dl_sbuf_int(b, c);
        } else if (binary) {
            const char *l = label_of(res, c);
            put_le(b, strlen(l), 4);
            put(b, l);
        } else {
            dl_sbuf_json_string(b, label_of(res, c));
        }
    }
}

static void put_output(dl_sbuf *b, const oip_result *res, oip_output o)
{
    int64_t dim;
    row_of(res, 0, o.index, &dim);
    const char *name = o.kind == OIP_OUT_TENSOR  ? res->conf->outputs[o.index].name
                       : o.kind == OIP_OUT_LABEL ? "label"
                                                 : "class";
    const char *type = o.kind == OIP_OUT_TENSOR  ? (o.topk > 0 ? "BYTES" : "FP32")
                       : o.kind == OIP_OUT_LABEL ? "BYTES"
                                                 : "INT64";
    put(b, "{\"name\":");
    dl_sbuf_json_string(b, name);
    put(b, ",\"datatype\":\"");
    put(b, type);
    put(b, "\",\"shape\":[");
    dl_sbuf_int(b, res->batch);
    if (o.kind == OIP_OUT_TENSOR) {
        dl_sbuf_putc(b, ',');
        dl_sbuf_int(b, o.topk > 0 ? o.topk : dim);
    }
    if (o.binary) {
        put(b, "],\"parameters\":{\"binary_data_size\":");
        dl_sbuf_int(b, (int64_t)binary_size(res, o));
        put(b, "}}");
        return;
    }
    put(b, "],\"data\":[");
    put_values(b, res, o, false);
    put(b, "]}");
}

unsigned oip_model_outputs(const dl_model_conf *conf)
{
    if (conf->loss != DL_LOSS_XENT)
        return OIP_OUT_TENSOR;
    return OIP_OUT_TENSOR | OIP_OUT_CLASS | (conf->nlabels > 0 ? OIP_OUT_LABEL : 0);
}

/* ,"parameters":{...} when the answer has any. */
static void put_params(dl_sbuf *b, const oip_result *res)
{
    if (res->nparams == 0)
        return;
    put(b, ",\"parameters\":{");
    for (int i = 0; i < res->nparams; i++) {
        const oip_param *p = &res->params[i];
        if (i > 0)
            dl_sbuf_putc(b, ',');
        dl_sbuf_json_string(b, p->name);
        dl_sbuf_putc(b, ':');
        if (p->str)
            dl_sbuf_json_string(b, p->str);
        else
            dl_sbuf_int(b, p->num);
    }
    dl_sbuf_putc(b, '}');
}

dl_status oip_write_infer(const oip_result *res, dl_sbuf *b, size_t *json_len, dl_err *err)
{
    /* Without a list: the default outputs of the mask's kinds, as JSON
     * (or all binary). */
    oip_output all[OIP_MAX_OUTPUTS];
    const oip_output *out = res->out;
    int nout = res->nout;
    if (nout == 0) {
        int n = oip_default_outputs(res->conf, res->binary, all);
        for (int i = 0; i < n; i++)
            if (res->outputs & all[i].kind)
                all[nout++] = all[i];
        out = all;
    }
    size_t start = b->len;
    put(b, "{\"model_name\":");
    dl_sbuf_json_string(b, res->model);
    put(b, ",\"model_version\":\"");
    dl_sbuf_int(b, res->version);
    dl_sbuf_putc(b, '"');
    if (res->id) {
        put(b, ",\"id\":");
        dl_sbuf_json_string(b, res->id);
    }
    put_params(b, res);
    put(b, ",\"outputs\":[");
    for (int i = 0; i < nout; i++) {
        if (i > 0)
            dl_sbuf_putc(b, ',');
        put_output(b, res, out[i]);
    }
    put(b, "]}");
    *json_len = b->len - start;
    for (int i = 0; i < nout; i++)
        if (out[i].binary)
            put_values(b, res, out[i], true);
    if (b->oom)
        return dl_err_set(err, DL_ERR_NOMEM, "out of memory for the answer");
    return DL_OK;
}

/* ---- other answers (jansson: not on the hot path) ---------------------------- */

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

static const char *in_type_name(dl_in_type t)
{
    static const char *const names[] = {"FP32", "UINT8", "INT32", "INT64"};
    return names[t];
}

/* The model's inputs, each with its datatype and shape [-1, ...]. */
static json_t *input_tensors(const dl_model_conf *conf)
{
    json_t *arr = json_array();
    for (int k = 0; arr && k < conf->ninputs; k++) {
        const dl_input_conf *in = &conf->inputs[k];
        int64_t shape[DL_MAX_DIMS + 1] = {-1};
        memcpy(shape + 1, in->shape, (size_t)in->ndim * sizeof(int64_t));
        if (!add(arr, tensor(in->name, in_type_name(in->dtype), shape, in->ndim + 1, NULL))) {
            json_decref(arr);
            arr = NULL;
        }
    }
    return arr;
}

/* The outputs an answer holds by default (oip_default_outputs). */
static json_t *output_tensors(const dl_model_conf *conf, int64_t out_dim)
{
    oip_output all[OIP_MAX_OUTPUTS];
    int n = oip_default_outputs(conf, false, all);
    json_t *arr = json_array();
    for (int i = 0; arr && i < n; i++) {
        int k = all[i].index;
        int64_t shape[2] = {-1, conf->noutputs == 1 ? out_dim : conf->outputs[k].dim};
        json_t *t = all[i].kind == OIP_OUT_TENSOR
                        ? tensor(conf->outputs[k].name, "FP32", shape, 2, NULL)
                    : all[i].kind == OIP_OUT_LABEL ? tensor("label", "BYTES", shape, 1, NULL)
                                                   : tensor("class", "INT64", shape, 1, NULL);
        if (!add(arr, t)) {
            json_decref(arr);
            arr = NULL;
        }
    }
    return arr;
}

json_t *oip_model_metadata(const dl_model_conf *conf, int64_t out_dim, json_t *versions)
{
    /* Shapes with -1 for the batch dimension, as Triton reports them. */
    return json_pack("{s:s, s:O, s:s, s:o, s:o}", "name", conf->name, "versions", versions,
                     "platform", "dlserve", "inputs", input_tensors(conf), "outputs",
                     output_tensors(conf, out_dim));
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
    case DL_ERR_TIMEOUT:     return 503;   /* as Triton answers "Request timeout expired" */
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
