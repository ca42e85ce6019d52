/* grpc_codec.c: ModelInferRequest read by transcoding it into an HTTP body
 * of the binary tensor data extension for oip_scan_infer, and
 * ModelInferResponse written from oip_write_infer's binary answer. */
#define _POSIX_C_SOURCE 200809L
#include "serve/grpc/grpc_codec.h"
#include "serve/grpc/pb_json.h"
#include "serve/oip/json_scan.h"

#include <inttypes.h>
#include <limits.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* ---- requests ----------------------------------------------------------------
 * The request becomes {"id","parameters","inputs":[{"name","datatype",
 * "shape","parameters":{"binary_data_size"}}...],"outputs"} then each
 * input's bytes, so that the scanner HTTP uses decides what is accepted.
 * Checks only gRPC has (the contents fields, raw_input_contents against
 * the inputs) are made here, input by input; an input whose datatype or
 * shape the scanner will refuse is written without values and left to
 * it, and once one is, later inputs' faults are too: the first fault in
 * input order is the one reported, as over HTTP. */

typedef struct transcoder {
    const Inference__ModelInferRequest *m;
    dl_sbuf      body;
    oip_request *req;
    dl_err      *err;
    bool         deferred;                /* an input left to the scanner's refusal */
    bool         sent[OIP_MAX_INPUTS];    /* input i's values follow the JSON */
    size_t       size[OIP_MAX_INPUTS];    /* ... taking so many bytes */
} transcoder;

/* What a datatype's values are: its name, its field of
 * InferTensorContents and the bytes of a value (0: BYTES, strings). */
typedef struct dtype_info {
    const char *name;
    const char *field;
    size_t      el;
} dtype_info;

static const dtype_info dtypes[] = {
    [OIP_FP32] = {"FP32", "fp32_contents", 4},   [OIP_UINT8] = {"UINT8", "uint_contents", 1},
    [OIP_INT32] = {"INT32", "int_contents", 4},  [OIP_INT64] = {"INT64", "int64_contents", 8},
    [OIP_BYTES] = {"BYTES", "bytes_contents", 0},
};
_Static_assert(sizeof dtypes / sizeof dtypes[0] == OIP_BYTES + 1, "every datatype has a row");

static int dtype_of(const char *name)
{
    for (int t = 0; t <= OIP_BYTES; t++)
        if (strcmp(name, dtypes[t].name) == 0)
            return t;
    return -1;
}

/* Refuses the request as oip_scan_infer does: DL_ERR_INVALID, fault. */
static dl_status refuse(transcoder *tc, oip_fault fault, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));
static dl_status refuse(transcoder *tc, oip_fault fault, const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    dl_status st = dl_err_setv(tc->err, DL_ERR_INVALID, fmt, ap);
    va_end(ap);
    tc->req->fault = fault;
    return st;
}

/* protobuf-c does not check that strings are UTF-8; JSON must be. */
static bool valid_utf8(const char *s)
{
    for (const unsigned char *p = (const unsigned char *)s; *p;) {
        size_t n = dl_utf8_len(p);
        if (n == 0)
            return false;
        p += n;
    }
    return true;
}

/* s as a JSON string. */
static dl_status put_text(transcoder *tc, const char *s, oip_fault fault, const char *where)
{
    if (!valid_utf8(s))
        return refuse(tc, fault, "%s is not valid UTF-8", where);
    dl_sbuf_json_string(&tc->body, s);
    return DL_OK;
}

/* put_text of list[i].field, its place worded only when it is refused:
 * this runs for every request. */
static dl_status put_field(transcoder *tc, const char *s, const char *list, size_t i,
                           const char *field)
{
    if (!valid_utf8(s))
        return refuse(tc, OIP_FAULT_TENSOR, "%s[%zu].%s is not valid UTF-8", list, i, field);
    dl_sbuf_json_string(&tc->body, s);
    return DL_OK;
}

/* Appends a literal, or a decimal integer, without printf's parsing. */
static void put(dl_sbuf *b, const char *lit)
{
    dl_sbuf_add(b, lit, strlen(lit));
}

static void put_int(dl_sbuf *b, int64_t v)
{
    char buf[24], *p = buf + sizeof(buf);
    uint64_t u = v < 0 ? 0 - (uint64_t)v : (uint64_t)v;
    do
        *--p = (char)('0' + u % 10);
    while (u /= 10);
    if (v < 0)
        *--p = '-';
    dl_sbuf_add(b, p, (size_t)(buf + sizeof(buf) - p));
}

/* An InferParameter as the JSON value HTTP would send (null when unset). */
static dl_status put_param(transcoder *tc, const Inference__InferParameter *p, oip_fault fault,
                           const char *where)
{
    dl_sbuf *b = &tc->body;
    switch (p ? p->parameter_choice_case : INFERENCE__INFER_PARAMETER__PARAMETER_CHOICE__NOT_SET) {
    case INFERENCE__INFER_PARAMETER__PARAMETER_CHOICE_BOOL_PARAM:
        dl_sbuf_printf(b, "%s", p->bool_param ? "true" : "false");
        break;
    case INFERENCE__INFER_PARAMETER__PARAMETER_CHOICE_INT64_PARAM:
        dl_sbuf_int(b, p->int64_param);
        break;
    case INFERENCE__INFER_PARAMETER__PARAMETER_CHOICE_STRING_PARAM:
        return put_text(tc, p->string_param, fault, where);
    case INFERENCE__INFER_PARAMETER__PARAMETER_CHOICE_DOUBLE_PARAM:
        /* not JSON when not finite: the scanner's "not a number" instead */
        if (p->double_param == p->double_param && p->double_param - p->double_param == 0)
            dl_sbuf_printf(b, "%.17g", p->double_param);
        else
            dl_sbuf_printf(b, "null");
        break;
    case INFERENCE__INFER_PARAMETER__PARAMETER_CHOICE_UINT64_PARAM:
        dl_sbuf_printf(b, "%" PRIu64, p->uint64_param);
        break;
    default:
        dl_sbuf_printf(b, "null");
        break;
    }
    return DL_OK;
}

/* The value of `key` in a parameters map (its entries: messages of fields
 * key = 1, value = 2), the last entry of that key as protobuf maps read;
 * false when none has it. */
static bool param_of(ProtobufCMessage *const *entries, size_t n, const char *key,
                     const Inference__InferParameter **value)
{
    bool found = false;
    for (size_t i = 0; i < n; i++) {
        const ProtobufCMessage *e = entries[i];
        const ProtobufCFieldDescriptor *f = e->descriptor->fields;
        const char *k;
        memcpy(&k, (const char *)e + f[0].offset, sizeof(k));
        if (k && strcmp(k, key) == 0) {
            memcpy(value, (const char *)e + f[1].offset, sizeof(*value));
            found = true;
        }
    }
    return found;
}

/* ,"parameters":{...} of the keys the scanner reads (others it would skip,
 * so they are not written: a map's repeated keys would be duplicate JSON
 * keys). `where` names the map in messages. */
static dl_status put_params(transcoder *tc, ProtobufCMessage *const *entries, size_t n,
                            const char *const *keys, size_t nkeys, oip_fault fault,
                            const char *where)
{
    bool first = true;
    for (size_t i = 0; i < nkeys; i++) {
        const Inference__InferParameter *v = NULL;
        if (!param_of(entries, n, keys[i], &v))
            continue;
        dl_sbuf_printf(&tc->body, "%s\"%s\":", first ? ",\"parameters\":{" : ",", keys[i]);
        first = false;
        char at[64];
        snprintf(at, sizeof(at), "%s.%s", where, keys[i]);
        dl_status st = put_param(tc, v, fault, at);
        if (st != DL_OK)
            return st;
    }
    if (!first)
        dl_sbuf_putc(&tc->body, '}');
    return DL_OK;
}

/* The values a shape holds, or -1 when the scanner refuses the shape:
 * 1..OIP_MAX_DIMS positive dimensions whose product fits int64_t. */
static int64_t shape_count(const int64_t *shape, size_t n)
{
    int64_t total = 1;
    if (n < 1 || n > OIP_MAX_DIMS)
        return -1;
    for (size_t i = 0; i < n; i++) {
        if (shape[i] < 1 || shape[i] > INT64_MAX / total)
            return -1;
        total *= shape[i];
    }
    return total;
}

/* "[2, 1, 28, 28]" into buf. */
static const char *shape_text(const int64_t *shape, size_t n, char *buf, size_t cap)
{
    size_t k = (size_t)snprintf(buf, cap, "[");
    for (size_t i = 0; i < n && k < cap; i++)
        k += (size_t)snprintf(buf + k, cap - k, "%s%" PRId64, i ? ", " : "", shape[i]);
    if (k < cap)
        snprintf(buf + k, cap - k, "]");
    return buf;
}

/* The count of repeated field f of message c. */
static size_t field_count(const ProtobufCMessage *c, const ProtobufCFieldDescriptor *f)
{
    size_t n;
    memcpy(&n, (const char *)c + f->quantifier_offset, sizeof(n));
    return n;
}

/* Input i's typed contents: only its datatype's field, count values (at
 * bytes each, 0..255 for UINT8); *size: the bytes they take raw. */
static dl_status check_contents(transcoder *tc, size_t i, oip_dtype t, int64_t count,
                                size_t *size)
{
    const Inference__ModelInferRequest__InferInputTensor *in = tc->m->inputs[i];
    const Inference__InferTensorContents *c = in->contents;
    const ProtobufCMessageDescriptor *d = c->base.descriptor;
    for (unsigned f = 0; f < d->n_fields; f++)
        if (field_count(&c->base, &d->fields[f]) > 0 &&
            strcmp(d->fields[f].name, dtypes[t].field) != 0)
            return refuse(tc, OIP_FAULT_TENSOR, "inputs[%zu].contents.%s: datatype %s takes "
                          "its values in %s", i, d->fields[f].name, dtypes[t].name,
                          dtypes[t].field);
    size_t n = t == OIP_FP32    ? c->n_fp32_contents
               : t == OIP_UINT8 ? c->n_uint_contents
               : t == OIP_INT32 ? c->n_int_contents
               : t == OIP_INT64 ? c->n_int64_contents
                                : c->n_bytes_contents;
    char sh[160];
    if ((uint64_t)n != (uint64_t)count)
        return refuse(tc, OIP_FAULT_TENSOR, "inputs[%zu].contents.%s has %zu values, but shape "
                      "%s takes %" PRId64, i, dtypes[t].field, n,
                      shape_text(in->shape, in->n_shape, sh, sizeof(sh)), count);
    for (size_t k = 0; t == OIP_UINT8 && k < n; k++)
        if (c->uint_contents[k] > 255)
            return refuse(tc, OIP_FAULT_TENSOR, "inputs[%zu].contents.uint_contents[%zu] is "
                          "%" PRIu32 ", not a UINT8 (0 to 255)", i, k, c->uint_contents[k]);
    *size = n * dtypes[t].el;
    for (size_t k = 0; t == OIP_BYTES && k < n; k++) {
        if (c->bytes_contents[k].len > UINT32_MAX)
            return refuse(tc, OIP_FAULT_TENSOR, "inputs[%zu].contents.bytes_contents[%zu] is "
                          "longer than 4 GiB", i, k);
        *size += 4 + c->bytes_contents[k].len;
    }
    return DL_OK;
}

/* Input i's raw_input_contents entry: the bytes its shape takes (BYTES:
 * any, the scanner walks the strings). */
static dl_status check_raw(transcoder *tc, size_t i, oip_dtype t, int64_t count, size_t *size)
{
    const Inference__ModelInferRequest__InferInputTensor *in = tc->m->inputs[i];
    *size = tc->m->raw_input_contents[i].len;
    char sh[160];
    if (t != OIP_BYTES && (count > INT64_MAX / (int64_t)dtypes[t].el ||
                           (uint64_t)*size != (uint64_t)count * dtypes[t].el))
        return refuse(tc, OIP_FAULT_TENSOR, "raw_input_contents[%zu] has %zu bytes, but "
                      "inputs[%zu] of shape %s takes %" PRId64 " %s values of %zu byte%s", i,
                      *size, i, shape_text(in->shape, in->n_shape, sh, sizeof(sh)), count,
                      dtypes[t].name, dtypes[t].el, dtypes[t].el > 1 ? "s" : "");
    return DL_OK;
}

/* inputs[i]'s JSON entry. */
static dl_status put_input(transcoder *tc, size_t i)
{
    const Inference__ModelInferRequest__InferInputTensor *in = tc->m->inputs[i];
    dl_sbuf *b = &tc->body;
    put(b, i ? ",{" : "{");
    if (i >= OIP_MAX_INPUTS) {   /* counted, not read, by the scanner */
        dl_sbuf_putc(b, '}');
        return DL_OK;
    }
    put(b, "\"name\":");
    dl_status st = put_field(tc, in->name, "inputs", i, "name");
    put(b, ",\"datatype\":");
    if (st == DL_OK)
        st = put_field(tc, in->datatype, "inputs", i, "datatype");
    if (st != DL_OK)
        return st;
    put(b, ",\"shape\":[");
    /* past OIP_MAX_DIMS + 1 dimensions the scanner refuses alike */
    for (size_t k = 0; k < in->n_shape && k <= OIP_MAX_DIMS; k++) {
        if (k)
            dl_sbuf_putc(b, ',');
        put_int(b, in->shape[k]);
    }
    dl_sbuf_putc(b, ']');
    int t = dtype_of(in->datatype);
    int64_t count = shape_count(in->shape, in->n_shape);
    if (t < 0 || count < 0) {
        tc->deferred = true;   /* the scanner refuses its datatype or shape */
        dl_sbuf_putc(b, '}');
        return DL_OK;
    }
    size_t size = 0;
    if (tc->m->n_raw_input_contents > 0)
        st = check_raw(tc, i, (oip_dtype)t, count, &size);
    else if (in->contents)
        st = check_contents(tc, i, (oip_dtype)t, count, &size);
    else
        st = refuse(tc, OIP_FAULT_TENSOR, "inputs[%zu] has no values: give them in its "
                    "contents or in raw_input_contents", i);
    if (st != DL_OK && !tc->deferred)
        return st;
    if (st == DL_OK) {
        put(b, ",\"parameters\":{\"binary_data_size\":");
        put_int(b, (int64_t)size);
        dl_sbuf_putc(b, '}');
        tc->sent[i] = true;
        tc->size[i] = size;
    }
    dl_sbuf_putc(b, '}');
    return DL_OK;
}

/* Little-endian values into the body, a block at a time. */
typedef struct le_writer {
    dl_sbuf      *b;
    unsigned char buf[4096];
    size_t        n;
} le_writer;

static void le_put(le_writer *w, uint64_t v, size_t bytes)
{
    if (w->n + bytes > sizeof(w->buf)) {
        dl_sbuf_add(w->b, (const char *)w->buf, w->n);
        w->n = 0;
    }
    for (size_t k = 0; k < bytes; k++)
        w->buf[w->n++] = (unsigned char)(v >> (8 * k));
}

static void le_flush(le_writer *w)
{
    if (w->n > 0)
        dl_sbuf_add(w->b, (const char *)w->buf, w->n);
    w->n = 0;
}

/* Input i's typed contents as raw bytes (checked: check_contents). */
static void put_contents(transcoder *tc, size_t i)
{
    const Inference__InferTensorContents *c = tc->m->inputs[i]->contents;
    le_writer lw = {.b = &tc->body}, *w = &lw;
    for (size_t k = 0; k < c->n_fp32_contents; k++) {
        uint32_t u;
        memcpy(&u, &c->fp32_contents[k], sizeof(u));
        le_put(w, u, 4);
    }
    for (size_t k = 0; k < c->n_uint_contents; k++)
        le_put(w, c->uint_contents[k], 1);   /* UINT8 only: checked 0..255 */
    for (size_t k = 0; k < c->n_int_contents; k++)
        le_put(w, (uint32_t)c->int_contents[k], 4);
    for (size_t k = 0; k < c->n_int64_contents; k++)
        le_put(w, (uint64_t)c->int64_contents[k], 8);
    for (size_t k = 0; k < c->n_bytes_contents; k++) {
        le_put(w, c->bytes_contents[k].len, 4);
        le_flush(w);
        if (c->bytes_contents[k].len > 0)
            dl_sbuf_add(&tc->body, (const char *)c->bytes_contents[k].data,
                        c->bytes_contents[k].len);
    }
    le_flush(w);
}

/* The whole body; *json_len: its JSON's bytes. */
static dl_status transcode(transcoder *tc, size_t *json_len)
{
    const Inference__ModelInferRequest *m = tc->m;
    static const char *const req_keys[] = {"timeout", "priority", "sequence_id",
                                           "sequence_start", "sequence_end"};
    static const char *const out_keys[] = {"binary_data", "classification", "labels"};
    dl_sbuf *b = &tc->body;
    if (m->n_raw_input_contents > 0 && m->n_raw_input_contents != m->n_inputs)
        return refuse(tc, OIP_FAULT_TENSOR, "raw_input_contents has %zu entries, but the "
                      "request has %zu inputs: give one an input", m->n_raw_input_contents,
                      m->n_inputs);
    for (size_t i = 0; i < m->n_inputs && m->n_raw_input_contents > 0; i++)
        if (m->inputs[i]->contents)
            return refuse(tc, OIP_FAULT_TENSOR, "inputs[%zu] has contents, but the request "
                          "has raw_input_contents: send its values one way", i);
    /* inputs first: their faults are reported before the parameters' */
    dl_status st = DL_OK;
    put(b, "{\"inputs\":[");
    for (size_t i = 0; st == DL_OK && i < m->n_inputs; i++)
        st = put_input(tc, i);
    put(b, "],\"outputs\":[");
    /* one past the most the scanner takes: it refuses that one alike */
    for (size_t i = 0; st == DL_OK && i < m->n_outputs && i <= OIP_MAX_OUTPUTS; i++) {
        const Inference__ModelInferRequest__InferRequestedOutputTensor *o = m->outputs[i];
        char at[48];
        put(b, i ? ",{\"name\":" : "{\"name\":");
        st = put_field(tc, o->name, "outputs", i, "name");
        if (st == DL_OK && o->n_parameters > 0)
            snprintf(at, sizeof(at), "outputs[%zu].parameters", i);
        if (st == DL_OK && o->n_parameters > 0)
            st = put_params(tc, (ProtobufCMessage *const *)o->parameters, o->n_parameters,
                            out_keys, sizeof(out_keys) / sizeof(out_keys[0]), OIP_FAULT_TENSOR,
                            at);
        dl_sbuf_putc(b, '}');
    }
    dl_sbuf_putc(b, ']');
    if (st == DL_OK)
        st = put_params(tc, (ProtobufCMessage *const *)m->parameters, m->n_parameters,
                        req_keys, sizeof(req_keys) / sizeof(req_keys[0]), OIP_FAULT_ENVELOPE,
                        "parameters");
    if (st == DL_OK && m->id[0]) {
        put(b, ",\"id\":");
        st = put_text(tc, m->id, OIP_FAULT_ENVELOPE, "id");
    }
    dl_sbuf_putc(b, '}');
    *json_len = b->len;
    for (size_t i = 0; st == DL_OK && i < m->n_inputs && i < OIP_MAX_INPUTS; i++) {
        if (!tc->sent[i])
            continue;
        if (m->n_raw_input_contents > 0 && tc->size[i] > 0)
            dl_sbuf_add(b, (const char *)m->raw_input_contents[i].data, tc->size[i]);
        else if (m->n_raw_input_contents == 0)
            put_contents(tc, i);
    }
    if (st == DL_OK && b->oom)
        return dl_err_set(tc->err, DL_ERR_NOMEM, "out of memory for the request");
    return st;
}

dl_status grpc_read_infer(const Inference__ModelInferRequest *m, oip_request *req, dl_err *err)
{
    memset(req, 0, sizeof(*req));
    transcoder *tc = calloc(1, sizeof(*tc));
    if (!tc)
        return dl_err_set(err, DL_ERR_NOMEM, "out of memory for the request");
    tc->m = m;
    tc->req = req;
    tc->err = err;
    size_t json_len = 0;
    dl_status st = transcode(tc, &json_len);
    if (st == DL_OK) {
        st = oip_scan_infer(tc->body.s, tc->body.len, json_len, req, err);
    } else if (st == DL_ERR_INVALID && m->id[0] && valid_utf8(m->id)) {
        /* as the scanner keeps it: a refusal still names its request */
        req->id = strdup(m->id);
    }
    dl_sbuf_free(&tc->body);
    free(tc);
    return st;
}

dl_status grpc_unpack_infer(const uint8_t *data, size_t len, Inference__ModelInferRequest **m,
                            oip_request *req, dl_err *err)
{
    memset(req, 0, sizeof(*req));
    *m = inference__model_infer_request__unpack(NULL, len, data);
    if (!*m) {
        req->fault = OIP_FAULT_SYNTAX;
        return dl_err_set(err, DL_ERR_INVALID, "not a ModelInferRequest");
    }
    dl_status st = grpc_read_infer(*m, req, err);
    if (st != DL_OK) {
        inference__model_infer_request__free_unpacked(*m, NULL);
        *m = NULL;
    }
    return st;
}

/* ---- answers -------------------------------------------------------------------
 * The answer is oip_write_infer's with every output binary: its JSON part
 * gives each output's name, datatype, shape and byte count, and
 * raw_output_contents point into the bytes after it, packed from there. */

/* One output of the answer, read back from the JSON part. */
typedef struct out_tensor {
    Inference__ModelInferResponse__InferOutputTensor t;
    int64_t shape[OIP_MAX_DIMS];
    char    name[DL_NAME_MAX];
    char    dtype[16];
    size_t  size;            /* its binary_data_size */
} out_tensor;

/* Copies the string that comes next into buf (cut to size). */
static bool scan_text(json_scan *js, char *buf, size_t size)
{
    const char *v;
    size_t n;
    if (!js_string(js, &v, &n))
        return false;
    dl_strlcpy(buf, v, size);
    return true;
}

/* An output's {"name","datatype","shape","parameters":{"binary_data_size"}}. */
static bool scan_output(json_scan *js, out_tensor *ot)
{
    *ot = (out_tensor){.t = INFERENCE__MODEL_INFER_RESPONSE__INFER_OUTPUT_TENSOR__INIT};
    ot->t.name = ot->name;
    ot->t.datatype = ot->dtype;
    ot->t.shape = ot->shape;
    bool sized = false;
    js_iter it, in;
    const char *key;
    if (!js_object(js, &it))
        return false;
    while (js_member(js, &it, &key, NULL)) {
        bool ok;
        if (strcmp(key, "name") == 0) {
            ok = scan_text(js, ot->name, sizeof(ot->name));
        } else if (strcmp(key, "datatype") == 0) {
            ok = scan_text(js, ot->dtype, sizeof(ot->dtype));
        } else if (strcmp(key, "shape") == 0) {
            ok = js_array(js, &in);
            js_num n;
            while (ok && js_element(js, &in))
                ok = ot->t.n_shape < OIP_MAX_DIMS && js_number(js, &n) && n.fits &&
                     (ot->shape[ot->t.n_shape++] = n.i, true);
        } else if (strcmp(key, "parameters") == 0) {
            ok = js_object(js, &in);
            while (ok && js_member(js, &in, &key, NULL)) {
                js_num n;
                if (strcmp(key, "binary_data_size") == 0)
                    ok = js_number(js, &n) && n.fits && n.i >= 0 &&
                         (ot->size = (size_t)n.i, sized = true);
                else
                    ok = js_skip(js);
            }
        } else {
            ok = js_skip(js);
        }
        if (!ok)
            return false;
    }
    return !js->failed && sized;
}

/* The outputs of the JSON part of a binary answer, in order: false when it
 * is not as oip_write_infer writes it. */
static bool scan_outputs(const char *json, size_t len, out_tensor *ot, size_t *nout)
{
    json_scan js;
    js_init(&js, json, len);
    js_iter top, arr;
    const char *key;
    bool ok = js_object(&js, &top);
    *nout = 0;
    while (ok && js_member(&js, &top, &key, NULL)) {
        if (strcmp(key, "outputs") != 0) {
            ok = js_skip(&js);
            continue;
        }
        ok = js_array(&js, &arr);
        while (ok && js_element(&js, &arr))
            ok = *nout < OIP_MAX_OUTPUTS && scan_output(&js, &ot[(*nout)++]);
    }
    ok = ok && !js.failed && js_end(&js);
    js_fini(&js);
    return ok;
}

/* The answer's parameters as InferParameters (strings borrowed from res). */
typedef struct out_params {
    Inference__ModelInferResponse__ParametersEntry **ptrs;
    Inference__ModelInferResponse__ParametersEntry  *entries;
    Inference__InferParameter                       *values;
} out_params;

static bool make_params(const oip_result *res, out_params *p)
{
    size_t n = res->nparams > 0 ? (size_t)res->nparams : 0;
    if (n == 0)
        return true;
    p->ptrs = calloc(n, sizeof(*p->ptrs));
    p->entries = calloc(n, sizeof(*p->entries));
    p->values = calloc(n, sizeof(*p->values));
    if (!p->ptrs || !p->entries || !p->values)
        return false;
    for (size_t i = 0; i < n; i++) {
        const oip_param *op = &res->params[i];
        p->values[i] = (Inference__InferParameter)INFERENCE__INFER_PARAMETER__INIT;
        if (op->str) {
            p->values[i].parameter_choice_case =
                INFERENCE__INFER_PARAMETER__PARAMETER_CHOICE_STRING_PARAM;
            p->values[i].string_param = (char *)op->str;
        } else {
            p->values[i].parameter_choice_case =
                INFERENCE__INFER_PARAMETER__PARAMETER_CHOICE_INT64_PARAM;
            p->values[i].int64_param = op->num;
        }
        p->entries[i] =
            (Inference__ModelInferResponse__ParametersEntry)
                INFERENCE__MODEL_INFER_RESPONSE__PARAMETERS_ENTRY__INIT;
        p->entries[i].key = (char *)op->name;
        p->entries[i].value = &p->values[i];
        p->ptrs[i] = &p->entries[i];
    }
    return true;
}

static void free_params(out_params *p)
{
    free(p->ptrs);
    free(p->entries);
    free(p->values);
}

/* Packs resp (stream: inside a ModelStreamInferResponse) onto out. */
static dl_status pack_answer(Inference__ModelInferResponse *resp, bool stream,
                             const char *error, dl_sbuf *out, dl_err *err)
{
    if (!stream)
        return pb_pack(&resp->base, out, err);
    Inference__ModelStreamInferResponse s = INFERENCE__MODEL_STREAM_INFER_RESPONSE__INIT;
    s.error_message = (char *)error;
    s.infer_response = resp;
    return pb_pack(&s.base, out, err);
}

/* The answer of res whose binary form is ans (json_len bytes of JSON). */
static dl_status write_answer(const oip_result *res, const dl_sbuf *ans, size_t json_len,
                              bool stream, dl_sbuf *out, dl_err *err)
{
    out_tensor ot[OIP_MAX_OUTPUTS];
    size_t nout;
    bool scanned = scan_outputs(ans->s, json_len, ot, &nout);
    DL_ASSERT(scanned);   /* oip_write_infer's own JSON */
    Inference__ModelInferResponse__InferOutputTensor *tensors[OIP_MAX_OUTPUTS];
    ProtobufCBinaryData raw[OIP_MAX_OUTPUTS];
    size_t at = json_len;
    for (size_t i = 0; i < nout; i++) {
        DL_ASSERT(ot[i].size <= ans->len - at);
        tensors[i] = &ot[i].t;
        raw[i] = (ProtobufCBinaryData){.len = ot[i].size, .data = (uint8_t *)ans->s + at};
        at += ot[i].size;
    }
    DL_ASSERT(at == ans->len);
    char version[24];
    snprintf(version, sizeof(version), "%" PRId64, res->version);
    Inference__ModelInferResponse resp = INFERENCE__MODEL_INFER_RESPONSE__INIT;
    resp.model_name = (char *)res->model;
    resp.model_version = version;
    if (res->id)
        resp.id = (char *)res->id;
    resp.n_outputs = resp.n_raw_output_contents = nout;
    resp.outputs = tensors;
    resp.raw_output_contents = raw;
    out_params p = {0};
    dl_status st;
    if (!scanned || !make_params(res, &p)) {
        st = dl_err_set(err, DL_ERR_NOMEM, "out of memory for the answer");
        out->oom = true;
    } else {
        resp.n_parameters = (size_t)res->nparams;
        resp.parameters = p.ptrs;
        st = pack_answer(&resp, stream, "", out, err);
    }
    free_params(&p);
    return st;
}

dl_status grpc_write_infer(const oip_result *res, bool stream, dl_sbuf *out, dl_err *err)
{
    /* every output binary: its bytes are exactly raw_output_contents */
    oip_result r = *res;
    oip_output outs[OIP_MAX_OUTPUTS];
    DL_ASSERT(res->nout >= 0 && res->nout <= OIP_MAX_OUTPUTS);
    for (int i = 0; i < res->nout; i++) {
        outs[i] = res->out[i];
        outs[i].binary = true;
    }
    r.out = outs;
    r.binary = true;
    dl_sbuf ans = {0};
    size_t json_len = 0;
    dl_status st = oip_write_infer(&r, &ans, &json_len, err);
    if (st == DL_OK)
        st = write_answer(&r, &ans, json_len, stream, out, err);
    else
        out->oom = true;
    dl_sbuf_free(&ans);
    return st;
}

dl_status grpc_write_stream_error(const char *msg, const char *model, int64_t version,
                                  const char *id, dl_sbuf *out, dl_err *err)
{
    char v[24] = "";
    if (version != 0)
        snprintf(v, sizeof(v), "%" PRId64, version);
    Inference__ModelInferResponse resp = INFERENCE__MODEL_INFER_RESPONSE__INIT;
    resp.model_name = (char *)model;
    resp.model_version = v;
    if (id)
        resp.id = (char *)id;
    return pack_answer(&resp, true, msg, out, err);
}

dl_status grpc_parse_version(const char *text, int64_t *version, dl_err *err)
{
    size_t n = strlen(text);
    *version = 0;
    if (n == 0)
        return DL_OK;
    /* 18 digits: every such number fits int64_t */
    if (n > 18 || text[0] == '0' || strspn(text, "0123456789") != n)
        return dl_err_set(err, DL_ERR_INVALID, "model version '%.40s%s' is not a positive "
                          "integer", text, n > 40 ? "..." : "");
    *version = strtoll(text, NULL, 10);
    return DL_OK;
}
