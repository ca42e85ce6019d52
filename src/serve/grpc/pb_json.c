/* pb_json.c: protobuf-c messages built from JSON values by walking their
 * descriptors (the protobuf JSON mapping with the proto's field names),
 * and messages packed onto a dl_sbuf. */
#define _POSIX_C_SOURCE 200809L
#include "serve/grpc/pb_json.h"

#include <errno.h>
#include <float.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* Where the reader is, for messages: "config.input[0].data_type". A path
 * too long for the buffer is cut; it only names the field. */
typedef struct pb_path {
    char   text[192];
    size_t len;
} pb_path;

typedef struct pb_reader {
    pb_path path;
    dl_err *err;
} pb_reader;

/* Appends a piece to the path; returns the length to restore. */
static size_t path_push(pb_reader *r, const char *fmt, const char *key, size_t index)
{
    size_t was = r->path.len, cap = sizeof(r->path.text);
    int n = key ? snprintf(r->path.text + was, cap - was, fmt, key)
                : snprintf(r->path.text + was, cap - was, fmt, index);
    r->path.len = n < 0 ? was : was + (size_t)n < cap ? was + (size_t)n : cap - 1;
    return was;
}

static void path_pop(pb_reader *r, size_t was)
{
    r->path.len = was;
    r->path.text[was] = '\0';
}

/* A field's piece of the path: "name", ".name" below the root. */
static size_t path_field(pb_reader *r, const char *name)
{
    return path_push(r, r->path.len ? ".%s" : "%s", name, 0);
}

static const char *json_what(const json_t *v)
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
    return "a value";
}

/* Refuses the value at the path: DL_ERR_INVALID "path: why". */
static dl_status refuse(pb_reader *r, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
static dl_status refuse(pb_reader *r, const char *fmt, ...)
{
    char why[200];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(why, sizeof(why), fmt, ap);
    va_end(ap);
    return dl_err_set(r->err, DL_ERR_INVALID, "%s: %s", r->path.text, why);
}

static dl_status out_of_memory(pb_reader *r)
{
    return dl_err_set(r->err, DL_ERR_NOMEM, "out of memory for %s", r->path.text);
}

/* ---- numbers ------------------------------------------------------------
 * An integer field takes a JSON integer, a real with no fraction, or a
 * string of decimal digits (64-bit values past what JSON numbers hold
 * exactly come as strings). It is read as a sign and a magnitude, so that
 * the whole int64 and uint64 ranges are checked alike. */

typedef struct pb_int {
    bool     neg;
    uint64_t mag;
} pb_int;

static bool int_from_text(const char *s, pb_int *n)
{
    n->neg = *s == '-';
    const char *d = s + n->neg;
    if (*d < '0' || *d > '9')
        return false;
    char *end;
    errno = 0;
    n->mag = strtoull(d, &end, 10);
    return errno == 0 && *end == '\0';
}

static bool int_from_json(const json_t *v, pb_int *n)
{
    if (json_is_integer(v)) {
        json_int_t i = json_integer_value(v);
        n->neg = i < 0;
        n->mag = i < 0 ? 0 - (uint64_t)i : (uint64_t)i;
        return true;
    }
    if (json_is_real(v)) {
        double d = json_real_value(v);
        /* 2^64: the first double past every uint64 */
        if (d != trunc(d) || fabs(d) >= 18446744073709551616.0)
            return false;
        n->neg = d < 0;
        n->mag = (uint64_t)fabs(d);
        return true;
    }
    return json_is_string(v) && int_from_text(json_string_value(v), n);
}

/* n within [-(lo_mag), hi] (lo_mag 0: unsigned). */
static bool int_fits(pb_int n, uint64_t lo_mag, uint64_t hi)
{
    return n.neg ? n.mag <= lo_mag : n.mag <= hi;
}

static dl_status read_int(pb_reader *r, const ProtobufCFieldDescriptor *f, const json_t *v,
                          void *dst)
{
    pb_int n;
    if (!int_from_json(v, &n))
        return refuse(r, "must be an integer, not %s", json_what(v));
    switch (f->type) {
    case PROTOBUF_C_TYPE_INT32:
    case PROTOBUF_C_TYPE_SINT32:
    case PROTOBUF_C_TYPE_SFIXED32: {
        if (!int_fits(n, (uint64_t)INT32_MAX + 1, INT32_MAX))
            return refuse(r, "does not fit an int32");
        int32_t x = (int32_t)(n.neg ? -(int64_t)n.mag : (int64_t)n.mag);
        memcpy(dst, &x, sizeof(x));
        return DL_OK;
    }
    case PROTOBUF_C_TYPE_UINT32:
    case PROTOBUF_C_TYPE_FIXED32: {
        if (!int_fits(n, 0, UINT32_MAX))
            return refuse(r, "does not fit a uint32");
        uint32_t x = (uint32_t)n.mag;
        memcpy(dst, &x, sizeof(x));
        return DL_OK;
    }
    case PROTOBUF_C_TYPE_INT64:
    case PROTOBUF_C_TYPE_SINT64:
    case PROTOBUF_C_TYPE_SFIXED64: {
        if (!int_fits(n, (uint64_t)INT64_MAX + 1, INT64_MAX))
            return refuse(r, "does not fit an int64");
        /* -2^63 has no positive counterpart: negate in unsigned arithmetic */
        uint64_t u = n.neg ? 0 - n.mag : n.mag;
        int64_t x;
        memcpy(&x, &u, sizeof(x));
        memcpy(dst, &x, sizeof(x));
        return DL_OK;
    }
    default: {   /* UINT64, FIXED64 */
        if (!int_fits(n, 0, UINT64_MAX))
            return refuse(r, "does not fit a uint64");
        memcpy(dst, &n.mag, sizeof(n.mag));
        return DL_OK;
    }
    }
}

/* A float or double field: a JSON number, or a string: "NaN", "Infinity",
 * "-Infinity" or a number's text. */
static dl_status read_real(pb_reader *r, const ProtobufCFieldDescriptor *f, const json_t *v,
                           void *dst)
{
    double d;
    if (json_is_number(v)) {
        d = json_number_value(v);
    } else if (json_is_string(v)) {
        const char *s = json_string_value(v);
        char *end;
        if (strcmp(s, "NaN") == 0)
            d = NAN;
        else if (strcmp(s, "Infinity") == 0)
            d = INFINITY;
        else if (strcmp(s, "-Infinity") == 0)
            d = -INFINITY;
        else if (!*s || (d = strtod(s, &end), *end != '\0') || !isfinite(d))
            return refuse(r, "\"%.40s\" is not a number", s);
    } else {
        return refuse(r, "must be a number, not %s", json_what(v));
    }
    if (f->type == PROTOBUF_C_TYPE_DOUBLE) {
        memcpy(dst, &d, sizeof(d));
        return DL_OK;
    }
    if (isfinite(d) && fabs(d) > FLT_MAX)
        return refuse(r, "%g is past the float range", d);
    float x = (float)d;
    memcpy(dst, &x, sizeof(x));
    return DL_OK;
}

/* ---- fields ---------------------------------------------------------------- */

static dl_status read_message(pb_reader *r, const ProtobufCMessageDescriptor *d, const json_t *j,
                              ProtobufCMessage **out);

static dl_status read_enum(pb_reader *r, const ProtobufCFieldDescriptor *f, const json_t *v,
                           void *dst)
{
    const ProtobufCEnumDescriptor *ed = f->descriptor;
    int x;
    if (json_is_string(v)) {
        const ProtobufCEnumValue *ev =
            protobuf_c_enum_descriptor_get_value_by_name(ed, json_string_value(v));
        if (!ev)
            return refuse(r, "\"%.64s\" is not a value of %s", json_string_value(v), ed->name);
        x = ev->value;
    } else {
        /* proto3 enums are open: any int32 number is kept as it is */
        pb_int n;
        if (!json_is_integer(v) || !int_from_json(v, &n) ||
            !int_fits(n, (uint64_t)INT32_MAX + 1, INT32_MAX))
            return refuse(r, "must be a value of %s (a name or an int32), not %s", ed->name,
                          json_what(v));
        x = (int)(n.neg ? -(int64_t)n.mag : (int64_t)n.mag);
    }
    memcpy(dst, &x, sizeof(x));
    return DL_OK;
}

/* A string or bytes field: a JSON string (bytes as they are, not base64),
 * into new memory. */
static dl_status read_text(pb_reader *r, const ProtobufCFieldDescriptor *f, const json_t *v,
                           void *dst)
{
    if (!json_is_string(v))
        return refuse(r, "must be a string, not %s", json_what(v));
    size_t n = json_string_length(v);
    char *s = malloc(n + 1);
    if (!s)
        return out_of_memory(r);
    memcpy(s, json_string_value(v), n);
    s[n] = '\0';
    if (f->type == PROTOBUF_C_TYPE_STRING) {
        memcpy(dst, &s, sizeof(s));
        return DL_OK;
    }
    ProtobufCBinaryData bd = {.len = n, .data = (uint8_t *)s};
    memcpy(dst, &bd, sizeof(bd));
    return DL_OK;
}

/* One value of field f (a singular field, or an element of a repeated
 * one) into dst, which holds its type's C value. */
static dl_status read_value(pb_reader *r, const ProtobufCFieldDescriptor *f, const json_t *v,
                            void *dst)
{
    switch (f->type) {
    case PROTOBUF_C_TYPE_BOOL: {
        if (!json_is_boolean(v))
            return refuse(r, "must be true or false, not %s", json_what(v));
        protobuf_c_boolean b = json_is_true(v);
        memcpy(dst, &b, sizeof(b));
        return DL_OK;
    }
    case PROTOBUF_C_TYPE_FLOAT:
    case PROTOBUF_C_TYPE_DOUBLE:
        return read_real(r, f, v, dst);
    case PROTOBUF_C_TYPE_ENUM:
        return read_enum(r, f, v, dst);
    case PROTOBUF_C_TYPE_STRING:
    case PROTOBUF_C_TYPE_BYTES:
        return read_text(r, f, v, dst);
    case PROTOBUF_C_TYPE_MESSAGE: {
        if (!json_is_object(v))
            return refuse(r, "must be an object, not %s", json_what(v));
        ProtobufCMessage *sub = NULL;
        dl_status st = read_message(r, f->descriptor, v, &sub);
        if (st == DL_OK)
            memcpy(dst, &sub, sizeof(sub));
        return st;
    }
    default:
        return read_int(r, f, v, dst);
    }
}

/* Bytes a value of f takes in a repeated field's array. */
static size_t elem_size(const ProtobufCFieldDescriptor *f)
{
    switch (f->type) {
    case PROTOBUF_C_TYPE_INT64:
    case PROTOBUF_C_TYPE_SINT64:
    case PROTOBUF_C_TYPE_SFIXED64:
    case PROTOBUF_C_TYPE_UINT64:
    case PROTOBUF_C_TYPE_FIXED64:
    case PROTOBUF_C_TYPE_DOUBLE:
        return 8;
    case PROTOBUF_C_TYPE_BOOL:
        return sizeof(protobuf_c_boolean);
    case PROTOBUF_C_TYPE_STRING:
        return sizeof(char *);
    case PROTOBUF_C_TYPE_MESSAGE:
        return sizeof(ProtobufCMessage *);
    case PROTOBUF_C_TYPE_BYTES:
        return sizeof(ProtobufCBinaryData);
    default:   /* 32-bit integers, float, enum */
        return 4;
    }
}

/* A map's entry message as protoc-c writes one: fields key = 1 and
 * value = 2 in a message named "...Entry". */
static bool is_map_entry(const ProtobufCFieldDescriptor *f)
{
    if (f->type != PROTOBUF_C_TYPE_MESSAGE || f->label != PROTOBUF_C_LABEL_REPEATED)
        return false;
    const ProtobufCMessageDescriptor *d = f->descriptor;
    size_t n = strlen(d->short_name);
    return d->n_fields == 2 && d->fields[0].id == 1 && strcmp(d->fields[0].name, "key") == 0 &&
           d->fields[1].id == 2 && strcmp(d->fields[1].name, "value") == 0 && n > 5 &&
           strcmp(d->short_name + n - 5, "Entry") == 0;
}

/* One map entry: its key from the JSON key's text (integer keys as
 * strings of digits, bool keys "true" or "false"), its value from v. */
static dl_status read_entry(pb_reader *r, const ProtobufCMessageDescriptor *d, const char *key,
                            const json_t *v, ProtobufCMessage **out)
{
    ProtobufCMessage *e = malloc(d->sizeof_message);
    if (!e)
        return out_of_memory(r);
    d->message_init(e);
    const ProtobufCFieldDescriptor *kf = &d->fields[0], *vf = &d->fields[1];
    json_t *k = kf->type == PROTOBUF_C_TYPE_BOOL && strcmp(key, "true") == 0    ? json_true()
                : kf->type == PROTOBUF_C_TYPE_BOOL && strcmp(key, "false") == 0 ? json_false()
                                                                                 : json_string(key);
    dl_status st = k ? read_value(r, kf, k, (char *)e + kf->offset) : out_of_memory(r);
    json_decref(k);
    if (st == DL_OK && !json_is_null(v))
        st = read_value(r, vf, v, (char *)e + vf->offset);
    if (st != DL_OK) {
        protobuf_c_message_free_unpacked(e, NULL);
        return st;
    }
    *out = e;
    return DL_OK;
}

/* A repeated field's values from a JSON array, or a map's entries from a
 * JSON object. The count grows with each value read, so that the message
 * frees exactly what was read when a later value is refused. */
static dl_status read_repeated(pb_reader *r, ProtobufCMessage *m, const ProtobufCFieldDescriptor *f,
                               const json_t *v)
{
    bool map = is_map_entry(f) && json_is_object(v);
    if (!map && !json_is_array(v))
        return refuse(r, "must be %s, not %s", is_map_entry(f) ? "an object" : "an array",
                      json_what(v));
    size_t n = map ? json_object_size(v) : json_array_size(v), size = elem_size(f);
    if (n == 0)
        return DL_OK;
    char *arr = calloc(n, size);
    if (!arr)
        return out_of_memory(r);
    size_t *count = (size_t *)((char *)m + f->quantifier_offset);
    memcpy((char *)m + f->offset, &arr, sizeof(arr));
    if (map) {
        const char *key;
        json_t *e;
        json_object_foreach((json_t *)v, key, e) {
            size_t was = path_push(r, "[\"%s\"]", key, 0);
            ProtobufCMessage *entry = NULL;
            dl_status st = read_entry(r, f->descriptor, key, e, &entry);
            if (st != DL_OK)
                return st;
            path_pop(r, was);
            memcpy(arr + *count * size, &entry, sizeof(entry));
            ++*count;
        }
        return DL_OK;
    }
    for (size_t i = 0; i < n; i++) {
        size_t was = path_push(r, "[%zu]", NULL, i);
        const json_t *e = json_array_get(v, i);
        if (json_is_null(e))
            return refuse(r, "must not be null");
        dl_status st = read_value(r, f, e, arr + i * size);
        if (st != DL_OK)
            return st;
        path_pop(r, was);
        ++*count;
    }
    return DL_OK;
}

/* A singular field: a oneof's member also sets its case, after its value,
 * so that the message only ever frees a member it holds. */
static dl_status read_single(pb_reader *r, ProtobufCMessage *m, const ProtobufCFieldDescriptor *f,
                             const json_t *v)
{
    uint32_t *which = NULL;
    if (f->flags & PROTOBUF_C_FIELD_FLAG_ONEOF) {
        which = (uint32_t *)((char *)m + f->quantifier_offset);
        if (*which != 0 && *which != f->id)
            return refuse(r, "another member of its oneof is set already");
    }
    dl_status st = read_value(r, f, v, (char *)m + f->offset);
    if (st != DL_OK)
        return st;
    if (which)
        *which = f->id;
    else if (f->label == PROTOBUF_C_LABEL_OPTIONAL && f->type != PROTOBUF_C_TYPE_STRING &&
             f->type != PROTOBUF_C_TYPE_MESSAGE)
        *(protobuf_c_boolean *)((char *)m + f->quantifier_offset) = 1;   /* has_<field> */
    return DL_OK;
}

/* A new message of descriptor d from the JSON object j; keys that name no
 * field and null values are skipped. */
static dl_status read_message(pb_reader *r, const ProtobufCMessageDescriptor *d, const json_t *j,
                              ProtobufCMessage **out)
{
    ProtobufCMessage *m = malloc(d->sizeof_message);
    if (!m)
        return out_of_memory(r);
    d->message_init(m);
    const char *key;
    json_t *v;
    json_object_foreach((json_t *)j, key, v) {
        const ProtobufCFieldDescriptor *f = protobuf_c_message_descriptor_get_field_by_name(d, key);
        if (!f || json_is_null(v))
            continue;
        size_t was = path_field(r, key);
        dl_status st = f->label == PROTOBUF_C_LABEL_REPEATED ? read_repeated(r, m, f, v)
                                                             : read_single(r, m, f, v);
        if (st != DL_OK) {
            protobuf_c_message_free_unpacked(m, NULL);
            return st;
        }
        path_pop(r, was);
    }
    *out = m;
    return DL_OK;
}

ProtobufCMessage *pb_from_json(const ProtobufCMessageDescriptor *d, const json_t *j,
                               dl_err *err)
{
    pb_reader r = {.err = err};
    if (!json_is_object(j)) {
        dl_err_set(err, DL_ERR_INVALID, "%s must be a JSON object, not %s", d->name,
                   j ? json_what(j) : "nothing");
        return NULL;
    }
    ProtobufCMessage *m = NULL;
    return read_message(&r, d, j, &m) == DL_OK ? m : NULL;
}

/* ---- packing ------------------------------------------------------------------ */

/* protobuf-c's output buffer over a dl_sbuf: packed bytes go straight in. */
typedef struct sbuf_sink {
    ProtobufCBuffer base;
    dl_sbuf        *out;
} sbuf_sink;

static void sink_append(ProtobufCBuffer *b, size_t len, const uint8_t *data)
{
    if (len > 0)
        dl_sbuf_add(((sbuf_sink *)b)->out, (const char *)data, len);
}

dl_status pb_pack(const ProtobufCMessage *m, dl_sbuf *out, dl_err *err)
{
    sbuf_sink sink = {.base = {.append = sink_append}, .out = out};
    protobuf_c_message_pack_to_buffer(m, &sink.base);
    if (out->oom)
        return dl_err_set(err, DL_ERR_NOMEM, "out of memory for a %s", m->descriptor->name);
    return DL_OK;
}
