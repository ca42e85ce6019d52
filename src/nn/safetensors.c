/* safetensors.c: reads, validates and writes the safetensors weight format
 * (u64 LE header length, JSON header, contiguous little-endian data).
 *
 * Alignment: a loaded file keeps its data buffer (the bytes after the
 * header) in its own 16-byte aligned block, so a tensor's data pointer is
 * aligned as far as its offset in the buffer is. Common writers (the
 * safetensors reference, and dl_st_write) place tensors in order of falling
 * element size, so F32 offsets are multiples of 4; the loader refuses an F32
 * tensor whose offset is not, which makes `(const float *)t->data` safe.
 * Data of other dtypes (I64, F64, F16...) is not guaranteed aligned: callers
 * must memcpy it out. */
#define _POSIX_C_SOURCE 200809L
#include "nn/dl_nn.h"

#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <jansson.h>

/* Tensor bytes are copied as they are, so the host must be little-endian
 * like the format. */
#if defined(__BYTE_ORDER__) && __BYTE_ORDER__ != __ORDER_LITTLE_ENDIAN__
#error "safetensors.c assumes a little-endian host"
#endif

#define META_KEY "__metadata__"
#define BUF_ALIGN 16

struct dl_st_file {
    unsigned char *buf;       /* data buffer, BUF_ALIGN-aligned, owned */
    size_t         buflen;
    int            n;
    dl_st_tensor  *tensors;   /* sorted by data offset; names owned */
    int            nmeta;
    char         **meta;      /* meta[2i] = key, meta[2i+1] = value, owned */
};

static const struct {
    const char *name;
    size_t      size;
} dtypes[] = {
    [DL_ST_F32]  = {"F32", 4},  [DL_ST_F16] = {"F16", 2},
    [DL_ST_BF16] = {"BF16", 2}, [DL_ST_F64] = {"F64", 8},
    [DL_ST_I64]  = {"I64", 8},  [DL_ST_I32] = {"I32", 4},
    [DL_ST_I16]  = {"I16", 2},  [DL_ST_I8]  = {"I8", 1},
    [DL_ST_U8]   = {"U8", 1},   [DL_ST_BOOL] = {"BOOL", 1},
};
#define NDTYPES ((int)(sizeof(dtypes) / sizeof(dtypes[0])))

const char *dl_st_dtype_name(dl_st_dtype dt)
{
    if ((int)dt < 0 || (int)dt >= NDTYPES)
        return "?";
    return dtypes[dt].name;
}

static bool dtype_from_name(const char *s, dl_st_dtype *out)
{
    for (int i = 0; i < NDTYPES; i++) {
        if (strcmp(s, dtypes[i].name) == 0) {
            *out = (dl_st_dtype)i;
            return true;
        }
    }
    return false;
}

/* Byte size of a shape of dtype dt; false on overflow of size_t. */
static bool shape_nbytes(dl_st_dtype dt, int ndim, const int64_t *shape,
                         size_t *out)
{
    size_t n = dtypes[dt].size;
    for (int i = 0; i < ndim; i++) {
        size_t d = (size_t)shape[i];
        if ((uint64_t)shape[i] > SIZE_MAX || (d != 0 && n > SIZE_MAX / d))
            return false;
        n *= d;
    }
    *out = n;
    return true;
}

/* "[256, 784]" into buf, for messages. */
static const char *shape_str(int ndim, const int64_t *shape, char *buf,
                             size_t cap)
{
    size_t at = (size_t)snprintf(buf, cap, "[");
    for (int i = 0; i < ndim && at < cap; i++)
        at += (size_t)snprintf(buf + at, cap - at, "%s%" PRId64,
                               i ? ", " : "", shape[i]);
    if (at < cap)
        snprintf(buf + at, cap - at, "]");
    return buf;
}

/* Adds "prefix: " to an error set by a helper; keeps the status. */
static dl_status prefixed(dl_err *err, dl_status st, const char *what)
{
    if (err)
        dl_err_prefix(err, "%s", what);
    return st;
}

/* ---- freeing and lookup --------------------------------------------- */

void dl_st_free(dl_st_file *f)
{
    if (!f)
        return;
    for (int i = 0; i < f->n; i++)
        free((char *)f->tensors[i].name);
    for (int i = 0; i < 2 * f->nmeta; i++)
        free(f->meta[i]);
    free(f->tensors);
    free(f->meta);
    free(f->buf);
    free(f);
}

int dl_st_count(const dl_st_file *f)
{
    return f->n;
}

const dl_st_tensor *dl_st_at(const dl_st_file *f, int i)
{
    if (i < 0 || i >= f->n)
        return NULL;
    return &f->tensors[i];
}

/* Linear: models hold tens to hundreds of tensors, looked up once at load. */
const dl_st_tensor *dl_st_find(const dl_st_file *f, const char *name)
{
    for (int i = 0; i < f->n; i++)
        if (strcmp(f->tensors[i].name, name) == 0)
            return &f->tensors[i];
    return NULL;
}

const char *dl_st_meta(const dl_st_file *f, const char *key)
{
    for (int i = 0; i < f->nmeta; i++)
        if (strcmp(f->meta[2 * i], key) == 0)
            return f->meta[2 * i + 1];
    return NULL;
}

/* ---- parsing one header entry --------------------------------------- */

/* A header entry before its data pointer is known. */
typedef struct entry {
    dl_st_tensor t;
    size_t       begin, end;
} entry;

static dl_status parse_dtype(json_t *obj, dl_st_dtype *out, dl_err *err)
{
    json_t *j = json_object_get(obj, "dtype");
    if (!j)
        return dl_err_set(err, DL_ERR_INVALID, "dtype missing");
    if (!json_is_string(j))
        return dl_err_set(err, DL_ERR_INVALID, "dtype is not a string");
    if (!dtype_from_name(json_string_value(j), out))
        return dl_err_set(err, DL_ERR_INVALID, "unknown dtype '%s'",
                          json_string_value(j));
    return DL_OK;
}

static dl_status parse_shape(json_t *obj, dl_st_tensor *t, dl_err *err)
{
    json_t *j = json_object_get(obj, "shape");
    if (!j)
        return dl_err_set(err, DL_ERR_INVALID, "shape missing");
    if (!json_is_array(j))
        return dl_err_set(err, DL_ERR_INVALID, "shape is not an array");
    if (json_array_size(j) > DL_ST_MAX_DIMS)
        return dl_err_set(err, DL_ERR_INVALID,
                          "shape has %zu dims, more than the %d supported",
                          json_array_size(j), DL_ST_MAX_DIMS);
    t->ndim = (int)json_array_size(j);
    for (int i = 0; i < t->ndim; i++) {
        json_t *d = json_array_get(j, (size_t)i);
        if (!json_is_integer(d))
            return dl_err_set(err, DL_ERR_INVALID,
                              "shape dim %d is not an integer", i);
        if (json_integer_value(d) < 0)
            return dl_err_set(err, DL_ERR_INVALID,
                              "shape dim %d is negative (%" JSON_INTEGER_FORMAT
                              ")", i, json_integer_value(d));
        t->shape[i] = (int64_t)json_integer_value(d);
    }
    return DL_OK;
}

static dl_status parse_offsets(json_t *obj, size_t buflen, entry *e,
                               dl_err *err)
{
    json_t *j = json_object_get(obj, "data_offsets");
    if (!j)
        return dl_err_set(err, DL_ERR_INVALID, "data_offsets missing");
    json_t *jb = json_array_get(j, 0), *je = json_array_get(j, 1);
    if (!json_is_array(j) || json_array_size(j) != 2 ||
        !json_is_integer(jb) || !json_is_integer(je) ||
        json_integer_value(jb) < 0 || json_integer_value(je) < 0)
        return dl_err_set(err, DL_ERR_INVALID, "data_offsets is not "
                          "[begin, end] with non-negative integers");
    json_int_t b = json_integer_value(jb), en = json_integer_value(je);
    if (b > en)
        return dl_err_set(err, DL_ERR_INVALID, "data_offsets [%"
                          JSON_INTEGER_FORMAT ", %" JSON_INTEGER_FORMAT
                          "]: begin is after end", b, en);
    if ((uint64_t)en > buflen)
        return dl_err_set(err, DL_ERR_INVALID, "data_offsets [%"
                          JSON_INTEGER_FORMAT ", %" JSON_INTEGER_FORMAT
                          "] run past the end of the %zu-byte data buffer",
                          b, en, buflen);
    e->begin = (size_t)b;
    e->end = (size_t)en;
    return DL_OK;
}

/* Fills e from one header entry and checks it on its own. */
static dl_status parse_entry(json_t *obj, size_t buflen, entry *e,
                             dl_err *err)
{
    if (!json_is_object(obj))
        return dl_err_set(err, DL_ERR_INVALID, "entry is not an object");
    dl_status st = parse_dtype(obj, &e->t.dtype, err);
    if (st == DL_OK)
        st = parse_shape(obj, &e->t, err);
    if (st == DL_OK)
        st = parse_offsets(obj, buflen, e, err);
    if (st != DL_OK)
        return st;

    char sh[128];
    size_t need;
    if (!shape_nbytes(e->t.dtype, e->t.ndim, e->t.shape, &need))
        return dl_err_set(err, DL_ERR_INVALID,
                          "byte size of shape %s %s overflows",
                          shape_str(e->t.ndim, e->t.shape, sh, sizeof(sh)),
                          dtypes[e->t.dtype].name);
    e->t.nbytes = e->end - e->begin;
    if (e->t.nbytes != need)
        return dl_err_set(err, DL_ERR_INVALID, "data_offsets [%zu, %zu] hold "
                          "%zu bytes but shape %s %s needs %zu", e->begin,
                          e->end, e->t.nbytes,
                          shape_str(e->t.ndim, e->t.shape, sh, sizeof(sh)),
                          dtypes[e->t.dtype].name, need);
    /* Keeps (const float *)data valid: see the note at the top. */
    if (e->t.dtype == DL_ST_F32 && e->begin % 4 != 0)
        return dl_err_set(err, DL_ERR_INVALID, "F32 data at offset %zu is "
                          "not 4-byte aligned", e->begin);
    return DL_OK;
}

/* ---- parsing the whole header --------------------------------------- */

static dl_status parse_meta(json_t *jm, dl_st_file *f, dl_err *err)
{
    if (!json_is_object(jm))
        return dl_err_set(err, DL_ERR_INVALID, "%s is not an object",
                          META_KEY);
    f->meta = calloc(2 * json_object_size(jm) + 1, sizeof(*f->meta));
    if (!f->meta)
        return dl_err_set(err, DL_ERR_NOMEM, "out of memory");
    const char *key;
    json_t *v;
    json_object_foreach(jm, key, v) {
        if (!json_is_string(v))
            return dl_err_set(err, DL_ERR_INVALID, "%s value for '%s' is "
                              "not a string", META_KEY, key);
        char **kv = &f->meta[2 * f->nmeta];
        kv[0] = strdup(key);
        kv[1] = strdup(json_string_value(v));
        f->nmeta++;   /* counted first so dl_st_free frees a half pair */
        if (!kv[0] || !kv[1])
            return dl_err_set(err, DL_ERR_NOMEM, "out of memory");
    }
    return DL_OK;
}

/* Data order, with name as the tie-break for zero-sized tensors so the
 * order of dl_st_at does not depend on qsort. */
static int cmp_entry(const void *pa, const void *pb)
{
    const entry *a = pa, *b = pb;
    if (a->begin != b->begin)
        return a->begin < b->begin ? -1 : 1;
    if (a->end != b->end)
        return a->end < b->end ? -1 : 1;
    return strcmp(a->t.name, b->t.name);
}

/* Entries sorted by offset must tile [0, buflen) exactly, as the reference
 * implementation requires: no overlap, no hole, no trailing bytes. */
static dl_status check_coverage(const entry *es, int n, size_t buflen,
                                dl_err *err)
{
    size_t pos = 0;
    for (int i = 0; i < n; i++) {
        if (es[i].begin < pos)
            return dl_err_set(err, DL_ERR_INVALID, "tensor '%s' at [%zu, %zu]"
                              " overlaps tensor '%s' (ends at %zu)",
                              es[i].t.name, es[i].begin, es[i].end,
                              es[i - 1].t.name, pos);
        if (es[i].begin > pos)
            return dl_err_set(err, DL_ERR_INVALID, "data bytes [%zu, %zu) "
                              "belong to no tensor (hole before '%s')", pos,
                              es[i].begin, es[i].t.name);
        pos = es[i].end;
    }
    if (pos != buflen)
        return dl_err_set(err, DL_ERR_INVALID, "data bytes [%zu, %zu) belong "
                          "to no tensor (trailing bytes)", pos, buflen);
    return DL_OK;
}

/* Parses every tensor entry into f->tensors (sorted by offset), with data
 * pointers into f->buf. */
static dl_status parse_tensors(json_t *root, dl_st_file *f, dl_err *err)
{
    size_t n = json_object_size(root);
    entry *es = calloc(n + 1, sizeof(*es));
    f->tensors = calloc(n + 1, sizeof(*f->tensors));
    if (!es || !f->tensors) {
        free(es);
        return dl_err_set(err, DL_ERR_NOMEM, "out of memory");
    }
    dl_status st = DL_OK;
    int ne = 0;
    const char *key;
    json_t *v;
    json_object_foreach(root, key, v) {
        if (strcmp(key, META_KEY) == 0)
            continue;
        es[ne].t.name = key;   /* borrowed from root until copied below */
        st = parse_entry(v, f->buflen, &es[ne], err);
        if (st != DL_OK) {
            if (err)
                dl_err_prefix(err, "tensor '%s'", key);
            break;
        }
        ne++;
    }
    if (st == DL_OK) {
        qsort(es, (size_t)ne, sizeof(*es), cmp_entry);
        st = check_coverage(es, ne, f->buflen, err);
    }
    for (int i = 0; i < ne && st == DL_OK; i++) {
        f->tensors[i] = es[i].t;
        f->tensors[i].data = f->buf + es[i].begin;
        f->tensors[i].name = strdup(es[i].t.name);
        f->n = i + 1;   /* dl_st_free frees names up to here */
        if (!f->tensors[i].name)
            st = dl_err_set(err, DL_ERR_NOMEM, "out of memory");
    }
    free(es);
    return st;
}

static const char *json_type_name(const json_t *j)
{
    switch (json_typeof(j)) {
    case JSON_OBJECT:  return "object";
    case JSON_ARRAY:   return "array";
    case JSON_STRING:  return "string";
    case JSON_INTEGER:
    case JSON_REAL:    return "number";
    case JSON_TRUE:
    case JSON_FALSE:   return "boolean";
    case JSON_NULL:    return "null";
    }
    return "value";
}

static dl_status parse_header(const char *json, size_t hlen, dl_st_file *f,
                              dl_err *err)
{
    json_error_t jerr;
    /* Trailing spaces (the writers' padding) are accepted by jansson. */
    json_t *root = json_loadb(json, hlen, JSON_REJECT_DUPLICATES, &jerr);
    if (!root)
        return dl_err_set(err, DL_ERR_INVALID, "header is not valid JSON: "
                          "%s (line %d, column %d)", jerr.text, jerr.line,
                          jerr.column);
    dl_status st = DL_OK;
    if (!json_is_object(root)) {
        st = dl_err_set(err, DL_ERR_INVALID, "header is a JSON %s, not an "
                        "object", json_type_name(root));
    } else {
        json_t *jm = json_object_get(root, META_KEY);
        if (jm)
            st = parse_meta(jm, f, err);
        if (st == DL_OK)
            st = parse_tensors(root, f, err);
    }
    json_decref(root);
    return st;
}

static uint64_t get_u64le(const unsigned char *p)
{
    uint64_t v = 0;
    for (int i = 7; i >= 0; i--)
        v = v << 8 | p[i];
    return v;
}

static void put_u64le(unsigned char *p, uint64_t v)
{
    for (int i = 0; i < 8; i++, v >>= 8)
        p[i] = (unsigned char)(v & 0xff);
}

/* Reads the 8-byte length prefix into *hlen, checked against the file. */
static dl_status check_header_len(const unsigned char *b, size_t len,
                                  size_t *hlen, dl_err *err)
{
    if (len < 8)
        return dl_err_set(err, DL_ERR_INVALID, "file is %zu bytes, shorter "
                          "than the 8-byte header length", len);
    uint64_t n = get_u64le(b);
    if (n == 0)
        return dl_err_set(err, DL_ERR_INVALID, "header length is 0");
    if (n > DL_ST_MAX_HEADER)
        return dl_err_set(err, DL_ERR_INVALID, "header length %" PRIu64
                          " exceeds the limit of %u bytes", n,
                          DL_ST_MAX_HEADER);
    if (n > len - 8)
        return dl_err_set(err, DL_ERR_INVALID, "header length %" PRIu64
                          " runs past the end of the file (%zu bytes after "
                          "the length)", n, len - 8);
    *hlen = (size_t)n;
    return DL_OK;
}

dl_status dl_st_parse(const void *bytes, size_t len, const char *what,
                      dl_st_file **out, dl_err *err)
{
    *out = NULL;
    const unsigned char *b = bytes;
    size_t hlen = 0;
    dl_status st = check_header_len(b, len, &hlen, err);
    if (st != DL_OK)
        return prefixed(err, st, what);

    dl_st_file *f = calloc(1, sizeof(*f));
    if (!f)
        return dl_err_set(err, DL_ERR_NOMEM, "%s: out of memory", what);
    f->buflen = len - 8 - hlen;
    /* aligned_alloc wants a size that is a multiple of the alignment; one
     * spare block also keeps the size non-zero for an empty buffer. */
    f->buf = aligned_alloc(BUF_ALIGN, (f->buflen / BUF_ALIGN + 1) * BUF_ALIGN);
    if (!f->buf) {
        dl_st_free(f);
        return dl_err_set(err, DL_ERR_NOMEM, "%s: out of memory for %zu "
                          "data bytes", what, f->buflen);
    }
    memcpy(f->buf, b + 8 + hlen, f->buflen);

    st = parse_header((const char *)b + 8, hlen, f, err);
    if (st != DL_OK) {
        dl_st_free(f);
        return prefixed(err, st, what);
    }
    *out = f;
    return DL_OK;
}

dl_status dl_st_load(const char *path, dl_st_file **out, dl_err *err)
{
    *out = NULL;
    char *bytes = NULL;
    size_t len = 0;
    dl_status st = dl_file_read(path, &bytes, &len, err);  /* names path */
    if (st != DL_OK)
        return st;
    st = dl_st_parse(bytes, len, path, out, err);
    free(bytes);
    return st;
}

/* ---- writing -------------------------------------------------------- */

/* Checks one caller tensor before it goes into a header. */
static dl_status check_tensor(const dl_st_tensor *t, dl_err *err)
{
    if (!t->name)
        return dl_err_set(err, DL_ERR_INVALID, "tensor with no name");
    if (strcmp(t->name, META_KEY) == 0)
        return dl_err_set(err, DL_ERR_INVALID, "tensor name '%s' is "
                          "reserved", META_KEY);
    if ((int)t->dtype < 0 || (int)t->dtype >= NDTYPES)
        return dl_err_set(err, DL_ERR_INVALID, "tensor '%s': unknown dtype "
                          "%d", t->name, (int)t->dtype);
    if (t->ndim < 0 || t->ndim > DL_ST_MAX_DIMS)
        return dl_err_set(err, DL_ERR_INVALID, "tensor '%s': ndim %d not in "
                          "[0, %d]", t->name, t->ndim, DL_ST_MAX_DIMS);
    for (int i = 0; i < t->ndim; i++)
        if (t->shape[i] < 0)
            return dl_err_set(err, DL_ERR_INVALID, "tensor '%s': shape dim "
                              "%d is negative", t->name, i);
    char sh[128];
    size_t need;
    if (!shape_nbytes(t->dtype, t->ndim, t->shape, &need))
        return dl_err_set(err, DL_ERR_INVALID, "tensor '%s': byte size "
                          "overflows", t->name);
    if (t->nbytes != need)
        return dl_err_set(err, DL_ERR_INVALID, "tensor '%s': nbytes %zu but "
                          "shape %s %s needs %zu", t->name, t->nbytes,
                          shape_str(t->ndim, t->shape, sh, sizeof(sh)),
                          dtypes[t->dtype].name, need);
    if (need > 0 && !t->data)
        return dl_err_set(err, DL_ERR_INVALID, "tensor '%s': no data",
                          t->name);
    return DL_OK;
}

/* {"dtype": ..., "shape": [...], "data_offsets": [begin, begin + nbytes]} */
static json_t *tensor_json(const dl_st_tensor *t, size_t begin)
{
    json_t *shape = json_array();
    for (int i = 0; shape && i < t->ndim; i++)
        json_array_append_new(shape, json_integer(t->shape[i]));
    /* "o" steals shape, also when json_pack fails. */
    return json_pack("{s:s, s:o, s:[I, I]}", "dtype", dtypes[t->dtype].name,
                     "shape", shape, "data_offsets", (json_int_t)begin,
                     (json_int_t)(begin + t->nbytes));
}

/* jansson refuses a key or string only for bad UTF-8 or lack of memory;
 * the caller can only cause the former, so that is what we report. */
static dl_status add_tensors(json_t *root, const dl_st_tensor *ts, int n,
                             dl_err *err)
{
    size_t begin = 0;
    for (int i = 0; i < n; i++) {
        dl_status st = check_tensor(&ts[i], err);
        if (st != DL_OK)
            return st;
        if (json_object_get(root, ts[i].name))
            return dl_err_set(err, DL_ERR_INVALID, "tensor '%s' appears "
                              "twice", ts[i].name);
        if (ts[i].nbytes > (size_t)INT64_MAX - begin)
            return dl_err_set(err, DL_ERR_INVALID, "tensors total more than "
                              "%" PRId64 " bytes", INT64_MAX);
        if (json_object_set_new(root, ts[i].name,
                                tensor_json(&ts[i], begin)) != 0)
            return dl_err_set(err, DL_ERR_INVALID, "tensor '%s': name is "
                              "not valid UTF-8", ts[i].name);
        begin += ts[i].nbytes;
    }
    return DL_OK;
}

static dl_status add_meta(json_t *root, const char *const *meta, int nmeta,
                          dl_err *err)
{
    json_t *jm = json_object();
    /* Set first so root owns it (and __metadata__ leads, as in the
     * reference writer); the reference omits it when there is none. */
    if (json_object_set_new(root, META_KEY, jm) != 0)
        return dl_err_set(err, DL_ERR_NOMEM, "out of memory");
    for (int i = 0; i < nmeta; i++) {
        const char *k = meta[2 * i], *v = meta[2 * i + 1];
        if (!k || !v)
            return dl_err_set(err, DL_ERR_INVALID, "metadata pair %d has a "
                              "NULL key or value", i);
        if (json_object_get(jm, k))
            return dl_err_set(err, DL_ERR_INVALID, "metadata key '%s' "
                              "appears twice", k);
        if (json_object_set_new(jm, k, json_string(v)) != 0)
            return dl_err_set(err, DL_ERR_INVALID, "metadata '%s': key or "
                              "value is not valid UTF-8", k);
    }
    return DL_OK;
}

/* Header bytes: u64 LE length, compact JSON, spaces up to a multiple of 8
 * (so the data buffer starts 8-aligned in the file). *out is new. */
static dl_status build_header(const dl_st_tensor *ts, int n,
                              const char *const *meta, int nmeta,
                              unsigned char **out, size_t *len, dl_err *err)
{
    json_t *root = json_object();
    if (!root)
        return dl_err_set(err, DL_ERR_NOMEM, "out of memory");
    dl_status st = nmeta > 0 ? add_meta(root, meta, nmeta, err) : DL_OK;
    if (st == DL_OK)
        st = add_tensors(root, ts, n, err);
    char *json = st == DL_OK ? json_dumps(root, JSON_COMPACT) : NULL;
    json_decref(root);
    if (st != DL_OK)
        return st;
    if (!json)
        return dl_err_set(err, DL_ERR_NOMEM, "out of memory");

    size_t jlen = strlen(json), hlen = (jlen + 7) / 8 * 8;
    if (hlen > DL_ST_MAX_HEADER) {   /* readers would refuse it */
        free(json);
        return dl_err_set(err, DL_ERR_INVALID, "header of %zu bytes exceeds "
                          "the limit of %u", hlen, DL_ST_MAX_HEADER);
    }
    unsigned char *h = malloc(8 + hlen);
    if (!h) {
        free(json);
        return dl_err_set(err, DL_ERR_NOMEM, "out of memory");
    }
    put_u64le(h, hlen);
    memcpy(h + 8, json, jlen);
    memset(h + 8 + jlen, ' ', hlen - jlen);
    free(json);
    *out = h;
    *len = 8 + hlen;
    return DL_OK;
}

dl_status dl_st_write(const char *path, const dl_st_tensor *tensors, int n,
                      const char *const *meta, int nmeta, dl_err *err)
{
    if (n < 0 || nmeta < 0 || (n > 0 && !tensors) || (nmeta > 0 && !meta))
        return dl_err_set(err, DL_ERR_INVALID, "%s: bad tensor or metadata "
                          "list (n %d, nmeta %d)", path, n, nmeta);
    unsigned char *head = NULL;
    size_t hlen = 0;
    dl_status st = build_header(tensors, n, meta, nmeta, &head, &hlen, err);
    if (st != DL_OK)
        return prefixed(err, st, path);

    /* One write: the header, then each tensor's bytes in the given order,
     * which is the order of their data_offsets. */
    const void **parts = malloc(((size_t)n + 1) * sizeof(*parts));
    size_t *lens = malloc(((size_t)n + 1) * sizeof(*lens));
    if (!parts || !lens) {
        st = dl_err_set(err, DL_ERR_NOMEM, "%s: out of memory", path);
    } else {
        parts[0] = head;
        lens[0] = hlen;
        for (int i = 0; i < n; i++) {
            parts[i + 1] = tensors[i].data;
            lens[i + 1] = tensors[i].nbytes;
        }
        st = dl_file_write_atomic(path, (const void *const *)parts, lens,
                                  n + 1, err);
    }
    free(parts);
    free(lens);
    free(head);
    return st;
}
