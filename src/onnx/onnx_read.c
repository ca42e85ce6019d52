/* onnx_read.c: a protobuf wire reader of our own (varints, length-
 * delimited fields, fixed32/64, packed repeated fields) decoding the parts
 * of an ONNX ModelProto that dlserve translates: opset, metadata, nodes
 * with attributes, initializers (inline or external data), graph inputs
 * and outputs. Every read is bounds-checked and every count capped: a
 * truncated or corrupted file gets a reason, never a crash. */
#define _XOPEN_SOURCE 700   /* realpath */
#include "onnx/onnx.h"
#include "onnx/onnx_pb.h"

#include <limits.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

/* Caps on what one file may hold. */
#define MAX_COUNT   1000000               /* nodes, initializers, attributes... */
#define MAX_ELEMS   (INT64_C(1) << 31)    /* elements of one tensor */

/* ---- arena ---------------------------------------------------------- */

struct onnx_arena {
    onnx_arena *next;
    max_align_t align;                    /* blocks start aligned after it */
};

void *onnx_alloc(onnx_arena *a, size_t n)
{
    onnx_arena *b = calloc(1, sizeof(*b) + n);
    if (!b)
        return NULL;
    b->next = a->next;
    a->next = b;
    return b + 1;
}

char *onnx_strdup(onnx_arena *a, const char *s)
{
    char *d = onnx_alloc(a, strlen(s) + 1);
    return d ? strcpy(d, s) : NULL;
}

static void arena_free(onnx_arena *a)
{
    while (a) {
        onnx_arena *n = a->next;
        free(a);
        a = n;
    }
}

/* ---- wire format ----------------------------------------------------- */

typedef struct rd {
    onnx_arena *a;
    const char *what, *dir;
    dl_err     *err;
} rd;

typedef struct pb {
    const uint8_t *p, *end;
} pb;

typedef struct field {
    int            num, wt;
    uint64_t       v;                     /* varint, fixed32, fixed64 */
    const uint8_t *data;                  /* length-delimited */
    size_t         len;
} field;

static dl_status bad(rd *r, const char *where, const char *why)
{
    return dl_err_set(r->err, DL_ERR_INVALID, "%s: %s: %s", r->what, where, why);
}

static bool varint(pb *b, uint64_t *out)
{
    uint64_t v = 0;
    for (int shift = 0; shift < 64; shift += 7) {
        if (b->p >= b->end)
            return false;
        uint8_t c = *b->p++;
        v |= (uint64_t)(c & 0x7f) << shift;
        if (!(c & 0x80)) {
            *out = v;
            return true;
        }
    }
    return false;
}

static uint64_t le(const uint8_t *p, int n)
{
    uint64_t v = 0;
    for (int k = n - 1; k >= 0; k--)
        v = v << 8 | p[k];
    return v;
}

/* The next field of b into f: 1, or 0 at the end, or -1 (err filled). */
static int next(rd *r, pb *b, const char *where, field *f)
{
    f->data = NULL;
    f->len = 0;
    if (b->p >= b->end)
        return 0;
    uint64_t key;
    if (!varint(b, &key) || key >> 3 == 0 || key >> 3 > 536870911) {
        bad(r, where, "a field key is truncated or invalid (the file is cut short or "
            "is not ONNX)");
        return -1;
    }
    f->num = (int)(key >> 3);
    f->wt = (int)(key & 7);
    size_t left = (size_t)(b->end - b->p);
    switch (f->wt) {
    case PB_VARINT:
        if (varint(b, &f->v))
            return 1;
        break;
    case PB_I64:
    case PB_I32: {
        size_t n = f->wt == PB_I64 ? 8 : 4;
        if (left < n)
            break;
        f->v = le(b->p, (int)n);
        b->p += n;
        return 1;
    }
    case PB_LEN:
        if (!varint(b, &f->v) || f->v > (uint64_t)(b->end - b->p))
            break;
        f->data = b->p;
        f->len = (size_t)f->v;
        b->p += f->len;
        return 1;
    default:
        bad(r, where, "a field has an unknown wire type (the file is corrupted)");
        return -1;
    }
    bad(r, where, "a field runs past the end of its message (the file is cut short)");
    return -1;
}

/* The bytes of a length-delimited field; empty for any other. */
static pb sub(const field *f)
{
    return f->data ? (pb){ f->data, f->data + f->len } : (pb){ NULL, NULL };
}

static dl_status need(rd *r, const char *where, const field *f, int wt)
{
    if (f->wt == wt)
        return DL_OK;
    char msg[96];
    snprintf(msg, sizeof(msg), "field %d has wire type %d, expected %d", f->num, f->wt, wt);
    return bad(r, where, msg);
}

/* A string field, NUL-terminated in the arena. */
static dl_status str(rd *r, const char *where, const field *f, const char **out)
{
    dl_status st = need(r, where, f, PB_LEN);
    if (st)
        return st;
    if (memchr(f->data, 0, f->len))
        return bad(r, where, "a name holds a NUL byte");
    char *s = onnx_alloc(r->a, f->len + 1);
    if (!s)
        return dl_err_set(r->err, DL_ERR_NOMEM, "%s: strings", r->what);
    memcpy(s, f->data, f->len);
    *out = s;
    return DL_OK;
}

/* How many fields numbered num a message holds (-1 on a wire error). */
static int count(rd *r, pb b, const char *where, int num)
{
    field f;
    int n = 0, got;
    while ((got = next(r, &b, where, &f)) == 1)
        n += f.num == num;
    if (got < 0)
        return -1;
    if (n > MAX_COUNT) {
        bad(r, where, "holds more than 1000000 entries of one kind");
        return -1;
    }
    return n;
}

/* Appends the elements of one repeated numeric field (packed or not) to
 * out[*n..cap); with fixed set, 4-byte or 8-byte elements. */
static dl_status numbers(rd *r, const char *where, const field *f, int fixed, int64_t cap,
                         int64_t *n, void *out, bool as_float)
{
    pb b = { NULL, NULL };
    bool packed = f->wt == PB_LEN;
    if (packed)
        b = sub(f);
    for (;;) {
        uint64_t v;
        if (packed && b.p >= b.end)
            return DL_OK;
        if (packed && fixed) {
            if ((size_t)(b.end - b.p) < (size_t)fixed)
                return bad(r, where, "a packed field is cut short");
            v = le(b.p, fixed);
            b.p += fixed;
        } else if (packed) {
            if (!varint(&b, &v))
                return bad(r, where, "a packed field is cut short");
        } else {
            if (f->wt != (fixed == 4 ? PB_I32 : fixed == 8 ? PB_I64 : PB_VARINT))
                return bad(r, where, "a number field has the wrong wire type");
            v = f->v;
        }
        if (*n >= cap)
            return bad(r, where, "holds more values than its dimensions say");
        if (as_float && fixed == 4) {
            uint32_t u = (uint32_t)v;
            memcpy((float *)out + *n, &u, 4);
        } else if (as_float) {
            double d;
            memcpy(&d, &v, 8);
            ((float *)out)[*n] = (float)d;
        } else {
            ((int64_t *)out)[*n] = fixed == 4 ? (int64_t)(int32_t)(uint32_t)v : (int64_t)v;
        }
        (*n)++;
        if (!packed)
            return DL_OK;
    }
}

/* ---- tensors --------------------------------------------------------- */

static size_t elem_size(int dt)
{
    switch (dt) {
    case DT_FLOAT: case DT_INT32: case DT_UINT32: return 4;
    case DT_DOUBLE: case DT_INT64: case DT_UINT64: return 8;
    case DT_INT16: case DT_UINT16: return 2;
    case DT_INT8: case DT_UINT8: case DT_BOOL: return 1;
    default: return 0;
    }
}

static bool is_float(int dt) { return dt == DT_FLOAT || dt == DT_DOUBLE; }

/* raw little-endian bytes into t->f or t->i. */
static void from_raw(onnx_tensor *t, const uint8_t *p)
{
    size_t es = elem_size(t->dtype);
    for (int64_t k = 0; k < t->n; k++, p += es) {
        uint64_t v = le(p, (int)es);
        if (t->dtype == DT_FLOAT) {
            uint32_t u = (uint32_t)v;
            memcpy(&t->f[k], &u, 4);
        } else if (t->dtype == DT_DOUBLE) {
            double d;
            memcpy(&d, &v, 8);
            t->f[k] = (float)d;
        } else if (t->dtype == DT_INT8) {
            t->i[k] = (int8_t)v;
        } else if (t->dtype == DT_INT16) {
            t->i[k] = (int16_t)v;
        } else if (t->dtype == DT_INT32) {
            t->i[k] = (int32_t)v;
        } else {
            t->i[k] = (int64_t)v;
        }
    }
}

/* An external data file's bytes [offset, offset + len) into *buf (new):
 * the location must stay inside the model's folder, and the file hold
 * those bytes (checked before anything is allocated). */
static dl_status external(rd *r, const char *where, const char *loc, uint64_t off,
                          size_t len, uint8_t **buf)
{
    if (!r->dir)
        return bad(r, where, "external data is not allowed here");
    if (!loc || !*loc || loc[0] == '/' || strstr(loc, "..") || strchr(loc, '\\'))
        return bad(r, where, "the external data location must be a relative path inside "
                   "the model's folder");
    char path[4200], real[PATH_MAX], realdir[PATH_MAX];
    snprintf(path, sizeof(path), "%s/%s", r->dir, loc);
    size_t n = realpath(r->dir, realdir) ? strlen(realdir) : 0;
    if (n && realpath(path, real) && (strncmp(real, realdir, n) || real[n] != '/'))
        return bad(r, where, "the external data file lies outside the model's folder (a link)");
    FILE *fp = fopen(path, "rb");
    struct stat sb;
    if (!fp)
        return dl_err_set(r->err, DL_ERR_IO, "%s: %s: cannot open external data '%s'",
                          r->what, where, loc);
    bool ok = fstat(fileno(fp), &sb) == 0 && off <= (uint64_t)sb.st_size &&
              len <= (uint64_t)sb.st_size - off && fseeko(fp, (off_t)off, SEEK_SET) == 0;
    *buf = ok ? malloc(len ? len : 1) : NULL;
    ok = ok && *buf && fread(*buf, 1, len, fp) == len;
    fclose(fp);
    if (ok)
        return DL_OK;
    free(*buf);
    *buf = NULL;
    return bad(r, where, "the external data file is shorter than the tensor");
}

/* The dims, type and value fields of a TensorProto (first pass). */
typedef struct tinfo {
    const uint8_t *raw;
    size_t         rawlen;
    const char    *loc;
    uint64_t       off;
    bool           ext;
} tinfo;

static dl_status tensor_meta(rd *r, pb b, const char *where, onnx_tensor *t, tinfo *ti)
{
    field f;
    int got;
    dl_status st = DL_OK;
    t->n = 1;
    while (st == DL_OK && (got = next(r, &b, where, &f)) == 1) {
        if (f.num == TENSOR_DIMS) {
            int64_t n = t->ndim;
            if ((st = numbers(r, where, &f, 0, ONNX_MAX_DIMS, &n, t->dims, false)))
                return st;
            for (; t->ndim < n; t->ndim++) {
                int64_t d = t->dims[t->ndim];
                if (d < 0 || d > MAX_ELEMS || (t->n *= d) > MAX_ELEMS)
                    return bad(r, where, "a tensor's dimensions are negative or too large");
            }
        } else if (f.num == TENSOR_DATA_TYPE) {
            t->dtype = (int)f.v;
        } else if (f.num == TENSOR_NAME) {
            st = str(r, where, &f, &t->name);
        } else if (f.num == TENSOR_RAW_DATA) {
            st = need(r, where, &f, PB_LEN);
            ti->raw = f.data;
            ti->rawlen = f.len;
        } else if (f.num == TENSOR_DATA_LOCATION) {
            ti->ext = f.v == DATA_LOCATION_EXTERNAL;
        } else if (f.num == TENSOR_EXTERNAL_DATA) {
            pb e = sub(&f);
            field kv;
            const char *k = NULL, *v = NULL;
            while (st == DL_OK && (got = next(r, &e, where, &kv)) == 1)
                if (kv.num == ENTRY_KEY)
                    st = str(r, where, &kv, &k);
                else if (kv.num == ENTRY_VALUE)
                    st = str(r, where, &kv, &v);
            if (got < 0)
                return DL_ERR_INVALID;
            if (k && v && !strcmp(k, "location"))
                ti->loc = v;
            else if (k && v && !strcmp(k, "offset"))
                ti->off = strtoull(v, NULL, 10);
        }
    }
    if (st == DL_OK && got < 0)
        st = DL_ERR_INVALID;
    if (st == DL_OK && !t->name)
        t->name = "";
    return st;
}

/* The field a tensor's values are in, and their size when fixed (0: varints). */
static int value_field(int dt, int *fixed)
{
    *fixed = dt == DT_FLOAT ? 4 : dt == DT_DOUBLE ? 8 : 0;
    return dt == DT_FLOAT ? TENSOR_FLOAT_DATA
         : dt == DT_DOUBLE ? TENSOR_DOUBLE_DATA
         : dt == DT_INT64 ? TENSOR_INT64_DATA
         : dt == DT_UINT64 || dt == DT_UINT32 ? TENSOR_UINT64_DATA
         : TENSOR_INT32_DATA;
}

/* Most values the typed fields of a TensorProto can hold (each value takes
 * at least one byte, or its fixed size): checked before allocating. */
static int64_t values_present(rd *r, pb b, const char *where, int want, int fixed)
{
    field f;
    int64_t n = 0;
    while (next(r, &b, where, &f) == 1)
        if (f.num == want)
            n += f.wt == PB_LEN ? (int64_t)f.len / (fixed ? fixed : 1) : 1;
    return n;
}

/* Where a tensor's bytes are, checked against its dimensions before its
 * values are allocated; *ext (new) holds external data. */
static dl_status tensor_source(rd *r, pb b, const char *where, const onnx_tensor *t,
                               const tinfo *ti, uint8_t **ext)
{
    int fixed, want = value_field(t->dtype, &fixed);
    size_t nbytes = (size_t)t->n * elem_size(t->dtype);
    *ext = NULL;
    if (ti->ext)
        return external(r, where, ti->loc, ti->off, nbytes, ext);
    if (ti->raw && ti->rawlen != nbytes)
        return bad(r, where, "raw_data's length does not match its dimensions");
    if (!ti->raw && values_present(r, b, where, want, fixed) < t->n)
        return bad(r, where, "holds fewer values than its dimensions say");
    return DL_OK;
}

static dl_status tensor(rd *r, pb b, onnx_tensor *t)
{
    tinfo ti = {0};
    char where[160];
    snprintf(where, sizeof(where), "tensor");
    dl_status st = tensor_meta(r, b, where, t, &ti);
    if (st)
        return st;
    snprintf(where, sizeof(where), "tensor '%.100s'", t->name);
    if (!elem_size(t->dtype))
        return bad(r, where, "has a data type dlserve does not read (float, double and "
                   "integer types only)");
    uint8_t *ext;
    if ((st = tensor_source(r, b, where, t, &ti, &ext)))
        return st;
    void *vals = onnx_alloc(r->a, (size_t)(t->n ? t->n : 1) * 8);
    if (!vals) {
        free(ext);
        return dl_err_set(r->err, DL_ERR_NOMEM, "%s: %s", r->what, where);
    }
    if (is_float(t->dtype))
        t->f = vals;
    else
        t->i = vals;
    if (ext || ti.raw) {
        from_raw(t, ext ? ext : ti.raw);
        free(ext);
        return DL_OK;
    }
    int64_t n = 0;
    field f;
    int got, fixed, want = value_field(t->dtype, &fixed);
    while (st == DL_OK && (got = next(r, &b, where, &f)) == 1)
        if (f.num == want)
            st = numbers(r, where, &f, fixed, t->n, &n, vals, is_float(t->dtype));
    if (st == DL_OK && got < 0)
        return DL_ERR_INVALID;
    if (st == DL_OK && n != t->n)
        return bad(r, where, "holds fewer values than its dimensions say");
    return st;
}

/* ---- nodes ------------------------------------------------------------- */

static dl_status attribute(rd *r, pb b, const char *where, onnx_attr *at)
{
    field f;
    int got;
    dl_status st = DL_OK;
    int ni = count(r, b, where, ATTR_INTS), nf = count(r, b, where, ATTR_FLOATS);
    if (ni < 0 || nf < 0)
        return DL_ERR_INVALID;
    /* A packed field holds up to len values: count bytes, not fields. */
    pb c = b;
    int64_t capi = 0, capf = 0;
    while ((got = next(r, &c, where, &f)) == 1) {
        capi += f.num == ATTR_INTS ? (f.wt == PB_LEN ? (int64_t)f.len : 1) : 0;
        capf += f.num == ATTR_FLOATS ? (f.wt == PB_LEN ? (int64_t)f.len / 4 : 1) : 0;
    }
    at->ints = onnx_alloc(r->a, (size_t)(capi + 1) * sizeof(int64_t));
    at->floats = onnx_alloc(r->a, (size_t)(capf + 1) * sizeof(float));
    if (!at->ints || !at->floats)
        return dl_err_set(r->err, DL_ERR_NOMEM, "%s: attributes", r->what);
    int64_t nints = 0, nfl = 0;
    at->name = "";
    while (st == DL_OK && (got = next(r, &b, where, &f)) == 1) {
        switch (f.num) {
        case ATTR_NAME: st = str(r, where, &f, &at->name); break;
        case ATTR_TYPE: at->type = (int)f.v; break;
        case ATTR_I:    at->i = (int64_t)f.v; break;
        case ATTR_S:    st = str(r, where, &f, &at->s); break;
        case ATTR_F: {
            uint32_t u = (uint32_t)f.v;
            memcpy(&at->f, &u, 4);
            break;
        }
        case ATTR_INTS:
            st = numbers(r, where, &f, 0, capi, &nints, at->ints, false);
            break;
        case ATTR_FLOATS:
            st = numbers(r, where, &f, 4, capf, &nfl, at->floats, true);
            break;
        case ATTR_T:
            if (!(st = need(r, where, &f, PB_LEN))) {
                if (!(at->t = onnx_alloc(r->a, sizeof(*at->t))))
                    return dl_err_set(r->err, DL_ERR_NOMEM, "%s: attributes", r->what);
                st = tensor(r, sub(&f), at->t);
            }
            break;
        default:
            break;    /* graphs and the rest: the op is refused later */
        }
    }
    at->nints = (int)nints;
    at->nfloats = (int)nfl;
    return st == DL_OK && got < 0 ? DL_ERR_INVALID : st;
}

static dl_status node(rd *r, pb b, int idx, onnx_node *n)
{
    char where[64];
    snprintf(where, sizeof(where), "node %d", idx);
    int nin = count(r, b, where, NODE_INPUT), nout = count(r, b, where, NODE_OUTPUT);
    int na = count(r, b, where, NODE_ATTRIBUTE);
    if (nin < 0 || nout < 0 || na < 0)
        return DL_ERR_INVALID;
    n->in = onnx_alloc(r->a, (size_t)(nin + 1) * sizeof(char *));
    n->out = onnx_alloc(r->a, (size_t)(nout + 1) * sizeof(char *));
    n->attrs = onnx_alloc(r->a, (size_t)(na + 1) * sizeof(*n->attrs));
    if (!n->in || !n->out || !n->attrs)
        return dl_err_set(r->err, DL_ERR_NOMEM, "%s: nodes", r->what);
    n->name = n->op = n->domain = "";
    field f;
    int got;
    dl_status st = DL_OK;
    while (st == DL_OK && (got = next(r, &b, where, &f)) == 1) {
        switch (f.num) {
        case NODE_INPUT:  st = str(r, where, &f, &n->in[n->nin++]); break;
        case NODE_OUTPUT: st = str(r, where, &f, &n->out[n->nout++]); break;
        case NODE_NAME:   st = str(r, where, &f, &n->name); break;
        case NODE_OP_TYPE: st = str(r, where, &f, &n->op); break;
        case NODE_DOMAIN: st = str(r, where, &f, &n->domain); break;
        case NODE_ATTRIBUTE:
            if (!(st = need(r, where, &f, PB_LEN)))
                st = attribute(r, sub(&f), where, &n->attrs[n->nattrs++]);
            break;
        default:
            break;
        }
    }
    return st == DL_OK && got < 0 ? DL_ERR_INVALID : st;
}

/* ---- graph inputs and outputs -------------------------------------------- */

static dl_status shape(rd *r, pb b, const char *where, onnx_value *v)
{
    field f, g;
    int got, got2;
    v->has_shape = true;
    while ((got = next(r, &b, where, &f)) == 1) {
        if (f.num != SHAPE_DIM || need(r, where, &f, PB_LEN))
            continue;
        if (v->ndim >= ONNX_MAX_DIMS)
            return bad(r, where, "has more than 8 dimensions");
        pb d = sub(&f);
        int64_t dim = -1;
        while ((got2 = next(r, &d, where, &g)) == 1)
            if (g.num == DIM_VALUE && g.wt == PB_VARINT)
                dim = (int64_t)g.v > 0 && g.v < (1u << 30) ? (int64_t)g.v : -1;
        if (got2 < 0)
            return DL_ERR_INVALID;
        v->dims[v->ndim++] = dim;
    }
    return got < 0 ? DL_ERR_INVALID : DL_OK;
}

static dl_status value(rd *r, pb b, onnx_value *v)
{
    const char *where = "graph input or output";
    field f, t, tt;
    int got;
    dl_status st = DL_OK;
    v->name = "";
    while (st == DL_OK && (got = next(r, &b, where, &f)) == 1) {
        if (f.num == VALUE_NAME) {
            st = str(r, where, &f, &v->name);
        } else if (f.num == VALUE_TYPE && !(st = need(r, where, &f, PB_LEN))) {
            pb tb = sub(&f);
            while (st == DL_OK && (got = next(r, &tb, where, &t)) == 1) {
                if (t.num != TYPE_TENSOR || (st = need(r, where, &t, PB_LEN)))
                    continue;
                pb ttb = sub(&t);
                while (st == DL_OK && (got = next(r, &ttb, where, &tt)) == 1)
                    if (tt.num == TTYPE_ELEM_TYPE)
                        v->elem = (int)tt.v;
                    else if (tt.num == TTYPE_SHAPE && !(st = need(r, where, &tt, PB_LEN)))
                        st = shape(r, sub(&tt), where, v);
            }
        }
    }
    return st == DL_OK && got < 0 ? DL_ERR_INVALID : st;
}

/* ---- graph and model ----------------------------------------------------- */

static dl_status graph(rd *r, pb b, onnx_graph *g)
{
    const char *where = "graph";
    int nn = count(r, b, where, GRAPH_NODE), ni = count(r, b, where, GRAPH_INITIALIZER);
    int nin = count(r, b, where, GRAPH_INPUT), nout = count(r, b, where, GRAPH_OUTPUT);
    if (nn < 0 || ni < 0 || nin < 0 || nout < 0)
        return DL_ERR_INVALID;
    g->nodes = onnx_alloc(r->a, (size_t)(nn + 1) * sizeof(*g->nodes));
    g->inits = onnx_alloc(r->a, (size_t)(ni + 1) * sizeof(*g->inits));
    g->inputs = onnx_alloc(r->a, (size_t)(nin + 1) * sizeof(*g->inputs));
    g->outputs = onnx_alloc(r->a, (size_t)(nout + 1) * sizeof(*g->outputs));
    if (!g->nodes || !g->inits || !g->inputs || !g->outputs)
        return dl_err_set(r->err, DL_ERR_NOMEM, "%s: graph", r->what);
    field f;
    int got;
    dl_status st = DL_OK;
    while (st == DL_OK && (got = next(r, &b, where, &f)) == 1) {
        if (f.num == GRAPH_SPARSE_INITIALIZER)
            return bad(r, where, "sparse initializers are not supported");
        if (f.num != GRAPH_NODE && f.num != GRAPH_INITIALIZER && f.num != GRAPH_INPUT &&
            f.num != GRAPH_OUTPUT)
            continue;
        if ((st = need(r, where, &f, PB_LEN)))
            break;
        if (f.num == GRAPH_NODE)
            st = node(r, sub(&f), g->nnodes, &g->nodes[g->nnodes]), g->nnodes++;
        else if (f.num == GRAPH_INITIALIZER)
            st = tensor(r, sub(&f), &g->inits[g->ninits++]);
        else if (f.num == GRAPH_INPUT)
            st = value(r, sub(&f), &g->inputs[g->ninputs++]);
        else
            st = value(r, sub(&f), &g->outputs[g->noutputs++]);
    }
    return st == DL_OK && got < 0 ? DL_ERR_INVALID : st;
}

/* An opset_import entry or a metadata_props entry. */
static dl_status model_entry(rd *r, const field *f, onnx_graph *g)
{
    const char *where = f->num == MODEL_OPSET_IMPORT ? "opset_import" : "metadata_props";
    dl_status st = need(r, where, f, PB_LEN);
    pb b = sub(f);
    field e;
    int got;
    const char *k = "", *v = NULL;
    int64_t version = 0;
    while (st == DL_OK && (got = next(r, &b, where, &e)) == 1) {
        if (e.num == 1)
            st = str(r, where, &e, &k);
        else if (e.num == 2 && f->num == MODEL_OPSET_IMPORT)
            version = (int64_t)e.v;
        else if (e.num == 2)
            st = str(r, where, &e, &v);
    }
    if (st == DL_OK && got < 0)
        return DL_ERR_INVALID;
    if (f->num == MODEL_OPSET_IMPORT && (!*k || !strcmp(k, "ai.onnx")))
        g->opset = version;
    else if (f->num == MODEL_METADATA_PROPS && v && !strcmp(k, "dlserve.model"))
        g->meta_model = v;
    return st;
}

dl_status onnx_read(const void *buf, size_t len, const char *dir, const char *what,
                    onnx_graph **out, dl_err *err)
{
    *out = NULL;
    onnx_graph *g = calloc(1, sizeof(*g));
    onnx_arena *a = calloc(1, sizeof(*a));
    if (!g || !a) {
        free(g);
        free(a);
        return dl_err_set(err, DL_ERR_NOMEM, "%s: model", what);
    }
    g->arena = a;
    rd r = { a, what, dir, err };
    pb b = { buf, (const uint8_t *)buf + len };
    field f;
    int got, ngraphs = 0;
    dl_status st = DL_OK;
    while (st == DL_OK && (got = next(&r, &b, "model", &f)) == 1) {
        if (f.num == MODEL_GRAPH && !(st = need(&r, "model", &f, PB_LEN)))
            st = ngraphs++ ? bad(&r, "model", "holds two graphs") : graph(&r, sub(&f), g);
        else if (f.num == MODEL_OPSET_IMPORT || f.num == MODEL_METADATA_PROPS)
            st = model_entry(&r, &f, g);
    }
    if (st == DL_OK && got < 0)
        st = DL_ERR_INVALID;
    if (st == DL_OK && (!ngraphs || g->nnodes == 0))
        st = bad(&r, "model", "holds no graph with nodes (an empty, truncated or non-ONNX "
                 "file)");
    if (st == DL_OK && g->opset <= 0)
        st = bad(&r, "model", "names no opset of the default ONNX domain");
    if (st != DL_OK) {
        onnx_graph_free(g);
        return st;
    }
    *out = g;
    return DL_OK;
}

void onnx_graph_free(onnx_graph *g)
{
    if (!g)
        return;
    arena_free(g->arena);
    free(g);
}

const onnx_attr *onnx_attr_find(const onnx_node *n, const char *name)
{
    for (int k = 0; k < n->nattrs; k++)
        if (!strcmp(n->attrs[k].name, name))
            return &n->attrs[k];
    return NULL;
}
