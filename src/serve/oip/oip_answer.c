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

/* Where model output k lies in a row of res->y: *off, and its *dim values
 * as served. */
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
        *off += conf->outputs[j].served;
    *dim = conf->outputs[k].served;
}

int64_t oip_out_length(const dl_model_conf *conf, int k, const void *x, int64_t in_dim,
                       int64_t i)
{
    const dl_output_conf *o = &conf->outputs[k];
    int seq = conf->tseq && o->max_length > 0 ? conf->tseq[conf->ninputs + o->from] : -1;
    if (o->max_length == 0)
        return 0;
    if (!x || seq < 0)
        return o->max_length;
    int64_t at = i * in_dim;   /* the input's length: the head of its packed sample */
    for (int j = 0; j < seq; j++)
        at += dl_input_width(&conf->inputs[j]);
    float len;
    memcpy(&len, (const char *)x + (size_t)at * sizeof(float), sizeof(len));
    return len >= 1 && len <= (float)o->max_length ? (int64_t)len : o->max_length;
}

/* What an answer output holds of each position: values, a class (the
 * top score's index), a crf's tag, a label, the top classes' strings. */
typedef enum view_kind { V_FLOAT, V_CLASS, V_TAG, V_LABEL, V_TOPK } view_kind;

/* How one output of the answer reads res->y: a sample's row holds the
 * model output at off (dim values), as len positions of C values (a whole
 * row: one position of dim values; a crf's path: tags, C 1). */
typedef struct view {
    const oip_result *res;
    oip_output  o;
    view_kind   kind;
    int64_t     off, dim, C, len;
    bool        seq;          /* a per-token output: [batch, len, ...] */
    bool        crf;
    int         nlabels;
    char      **labels;
} view;

static view view_of(const oip_result *res, oip_output o)
{
    const dl_model_conf *conf = res->conf;
    const dl_output_conf *oc = &conf->outputs[o.index];
    dl_loss loss = o.index == 0 ? conf->loss : oc->loss;   /* conf->loss mirrors 0 */
    view v = {.res = res, .o = o, .crf = loss == DL_LOSS_CRF, .len = 1,
              .seq = o.kind == OIP_OUT_TENSOR && oc->max_length > 0,
              .nlabels = o.index == 0 ? conf->nlabels : oc->nlabels,
              .labels = o.index == 0 ? conf->labels : oc->labels};
    segment(res, o.index, &v.off, &v.dim);
    v.C = !v.seq ? v.dim : v.crf ? 1 : v.dim / oc->max_length;
    for (int64_t i = 0; v.seq && i < res->batch; i++) {   /* the longest sample */
        int64_t n = oip_out_length(conf, o.index, res->x, res->in_dim, i);
        v.len = i == 0 || n > v.len ? n : v.len;
    }
    v.kind = o.kind == OIP_OUT_CLASS ? V_CLASS
           : o.kind == OIP_OUT_LABEL ? V_LABEL
           : o.topk > 0             ? V_TOPK
           : o.labels               ? V_LABEL
           : v.crf                  ? V_TAG
                                    : V_FLOAT;
    return v;
}

/* Positions sample i answers (past them, its answer is padding). */
static int64_t sample_len(const view *v, int64_t i)
{
    return v->seq ? oip_out_length(v->res->conf, v->o.index, v->res->x, v->res->in_dim, i) : 1;
}

static const char *label_of(const view *v, int64_t c)
{
    return c >= 0 && c < v->nlabels ? v->labels[c] : "";
}

/* Where the values go: JSON text, binary bytes, or a count of the binary
 * bytes (bytes non-NULL, nothing written). */
typedef struct emitter {
    dl_sbuf *b;
    bool     binary;
    size_t  *bytes;
    bool     first;
} emitter;

static void sep(emitter *e)
{
    if (!e->first)
        dl_sbuf_putc(e->b, ',');
    e->first = false;
}

static void emit_float(emitter *e, float v)
{
    if (e->bytes) {
        *e->bytes += 4;
    } else if (e->binary) {
        uint32_t u;
        memcpy(&u, &v, sizeof(u));
        put_le(e->b, u, 4);
    } else {
        char num[DL_FLOAT_CHARS + 1];
        size_t n = 0;
        if (!e->first)
            num[n++] = ',';
        e->first = false;
        n += dl_fmt_float(num + n, v);   /* JSON's null when not finite */
        dl_sbuf_add(e->b, num, n);
    }
}

static void emit_int(emitter *e, int64_t v)
{
    if (e->bytes) {
        *e->bytes += 8;
    } else if (e->binary) {
        put_le(e->b, (uint64_t)v, 8);
    } else {
        sep(e);
        dl_sbuf_int(e->b, v);
    }
}

static void emit_str(emitter *e, const char *s, size_t n)
{
    if (e->bytes) {
        *e->bytes += 4 + n;
    } else if (e->binary) {
        put_le(e->b, n, 4);
        dl_sbuf_add(e->b, s, n);
    } else {
        sep(e);
        dl_sbuf_json_string(e->b, s);
    }
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
 * "score:index[:label]" (label when the output has labels). Returns its
 * length; buf holds it (NUL-terminated). */
static size_t class_text(const view *v, const float *p, int64_t c, char *buf, size_t cap)
{
    char num[DL_FLOAT_CHARS + 1];
    num[dl_fmt_float(num, p[c])] = '\0';
    int n = c < v->nlabels
                ? snprintf(buf, cap, "%s:%lld:%s", num, (long long)c, v->labels[c])
                : snprintf(buf, cap, "%s:%lld", num, (long long)c);
    return n < 0 ? 0 : (size_t)n < cap ? (size_t)n : cap - 1;
}

/* The top classes of position p (valid: within its sample's length; else
 * as many empty strings), rank: room for v->C. */
static void emit_topk(emitter *e, const view *v, const float *p, bool valid, ranked *rank)
{
    char text[1024];   /* a longer label is cut, alike in size and bytes */
    if (valid)
        rank_classes(p, v->C, rank);
    for (int64_t r = 0; r < v->o.topk && r < v->C; r++) {
        size_t n = valid ? class_text(v, p, rank[r].index, text, sizeof(text)) : 0;
        text[n] = '\0';
        emit_str(e, text, n);
    }
}

/* One position's values (p: its C values; valid: within its sample's
 * length, else padding). */
static void emit_position(emitter *e, const view *v, const float *p, bool valid, ranked *rank)
{
    switch (v->kind) {
    case V_FLOAT:
        for (int64_t j = 0; j < v->C; j++)
            emit_float(e, valid ? p[j] : 0.0f);
        break;
    case V_CLASS:
        emit_int(e, dl_argmax(p, v->C));
        break;
    case V_TAG:
        emit_int(e, valid ? (int64_t)p[0] : -1);
        break;
    case V_LABEL: {
        const char *l = !valid ? "" : label_of(v, v->crf ? (int64_t)p[0] : dl_argmax(p, v->C));
        emit_str(e, l, strlen(l));
        break;
    }
    case V_TOPK:
        emit_topk(e, v, p, valid, rank);
        break;
    }
}

/* One output's values, as JSON ("data", binary false), as binary data,
 * or (bytes non-NULL) only their binary size added to *bytes. */
static void put_values(dl_sbuf *b, const view *v, bool binary, size_t *bytes)
{
    const oip_result *res = v->res;
    ranked *rank = NULL;
    if (v->kind == V_TOPK && !(rank = malloc((size_t)v->C * sizeof(*rank)))) {
        if (b)
            b->oom = true;
        return;
    }
    emitter e = {.b = b, .binary = binary, .bytes = bytes, .first = true};
    for (int64_t i = 0; i < res->batch; i++) {
        const float *row = res->y + i * res->out_dim + v->off;
        int64_t n = sample_len(v, i);
        for (int64_t t = 0; t < v->len; t++)
            emit_position(&e, v, row + t * v->C, t < n, rank);
    }
    free(rank);
}

static size_t binary_size(const view *v)
{
    size_t n = 0;
    put_values(NULL, v, true, &n);
    return n;
}

static void put_output(dl_sbuf *b, const view *v)
{
    const oip_result *res = v->res;
    oip_output o = v->o;
    static const char *const types[] = {
        [V_FLOAT] = "FP32", [V_CLASS] = "INT64", [V_TAG] = "INT64", [V_LABEL] = "BYTES",
        [V_TOPK] = "BYTES"};
    const char *name = o.kind == OIP_OUT_TENSOR  ? res->conf->outputs[o.index].name
                       : o.kind == OIP_OUT_LABEL ? "label"
                                                 : "class";
    put(b, "{\"name\":");
    dl_sbuf_json_string(b, name);
    put(b, ",\"datatype\":\"");
    put(b, types[v->kind]);
    put(b, "\",\"shape\":[");
    /* [batch], then len for a per-token output, then the values of a
     * position (or the top classes) */
    dl_sbuf_int(b, res->batch);
    if (v->seq) {
        dl_sbuf_putc(b, ',');
        dl_sbuf_int(b, v->len);
    }
    if (v->kind == V_FLOAT || v->kind == V_TOPK) {
        dl_sbuf_putc(b, ',');
        dl_sbuf_int(b, v->kind == V_TOPK ? (o.topk < v->C ? o.topk : v->C) : v->C);
    }
    if (o.binary) {
        put(b, "],\"parameters\":{\"binary_data_size\":");
        dl_sbuf_int(b, (int64_t)binary_size(v));
        put(b, "}}");
        return;
    }
    put(b, "],\"data\":[");
    put_values(b, v, false, NULL);
    put(b, "]}");
}

unsigned oip_model_outputs(const dl_model_conf *conf)
{
    if (conf->loss != DL_LOSS_XENT || conf->outputs[0].max_length > 0)
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
        view v = view_of(res, out[i]);
        put_output(b, &v);
    }
    put(b, "]}");
    *json_len = b->len - start;
    for (int i = 0; i < nout; i++) {
        view v = view_of(res, out[i]);
        if (out[i].binary)
            put_values(b, &v, true, NULL);
    }
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
    static const char *const names[] = {"FP32", "UINT8", "INT32", "INT64", "BYTES"};
    return names[t];
}

/* One model input with its datatype and shape [-1, ...]: a sequence's
 * positions -1 too ([-1, -1, ...]) with its max_length in "parameters",
 * a text input [-1, 1] (a string a sample). */
static json_t *input_tensor(const dl_input_conf *in)
{
    int64_t shape[DL_MAX_DIMS + 1] = {-1};
    memcpy(shape + 1, in->shape, (size_t)in->ndim * sizeof(int64_t));
    if (in->max_length > 0)
        shape[1] = in->dtype == DL_IN_BYTES ? 1 : -1;
    json_t *t = tensor(in->name, in_type_name(in->dtype), shape, in->ndim + 1, NULL);
    if (t && in->max_length > 0 &&
        json_object_set_new(t, "parameters", json_pack("{s:I}", "max_length",
                                                       (json_int_t)in->max_length)) != 0) {
        json_decref(t);
        t = NULL;
    }
    return t;
}

/* The model's inputs, in model.json's order. */
static json_t *input_tensors(const dl_model_conf *conf)
{
    json_t *arr = json_array();
    for (int k = 0; arr && k < conf->ninputs; k++)
        if (!add(arr, input_tensor(&conf->inputs[k]))) {
            json_decref(arr);
            arr = NULL;
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
        const dl_output_conf *o = &conf->outputs[k];
        int64_t shape[3] = {-1, conf->noutputs == 1 ? out_dim : o->served};
        /* a per-token output: [-1, -1, C] of scores, a crf's [-1, -1] tags */
        bool crf = (k == 0 ? conf->loss : o->loss) == DL_LOSS_CRF;
        if (o->max_length > 0) {
            shape[2] = o->dim / o->max_length;
            shape[1] = -1;
        }
        json_t *t = all[i].kind != OIP_OUT_TENSOR
                        ? (all[i].kind == OIP_OUT_LABEL ? tensor("label", "BYTES", shape, 1, NULL)
                                                        : tensor("class", "INT64", shape, 1, NULL))
                    : crf ? tensor(o->name, "INT64", shape, 2, NULL)
                          : tensor(o->name, "FP32", shape, o->max_length > 0 ? 3 : 2, NULL);
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
