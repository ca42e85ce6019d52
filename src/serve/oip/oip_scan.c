/* oip_scan.c: Open Inference Protocol infer requests read in one pass
 * without a JSON tree (JSON, and JSON then binary tensors), as a request
 * over HTTP or a Kafka record, then checked against the model. */
#define _POSIX_C_SOURCE 200809L
#include "serve/oip/oip.h"
#include "serve/oip/json_scan.h"

#include <limits.h>
#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* ---- infer requests: reading -----------------------------------------------
 * One pass over the body with json_scan: each key is handled as it comes,
 * numbers go straight into floats. A refusal (a key of the wrong type, a
 * bad value) is worded once, the first in document order, and the scan
 * goes on, only checking syntax from then on: a syntax error anywhere
 * still wins (the body is not JSON, as jansson would say), and the id is
 * still read so that a dead letter can name it. Each scan_* function
 * below reads one value whole, refusing what is wrong in it through
 * refuse(), and returns false only when the scan itself failed (not JSON,
 * or out of memory): then the callers stop at once. */

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

/* Copies at most cap - 1 bytes of s[0..n) into buf, cut at a UTF-8
 * character boundary (messages go out as JSON, which must stay valid). */
static const char *clip(const char *s, size_t n, char *buf, size_t cap)
{
    if (n > cap - 1) {
        n = cap - 1;
        while (n > 0 && ((unsigned char)s[n] & 0xC0) == 0x80)
            n--;   /* s[n] continues a character: cut before it starts */
    }
    memcpy(buf, s, n);
    buf[n] = '\0';
    return buf;
}

typedef struct scan_ctx {
    json_scan    js;
    oip_request *req;
    dl_err      *err;
    dl_status    st;           /* the first refusal; DL_OK so far */
    bool         record;       /* oip_scan_record: a Kafka record, "data" allowed */
    bool         saw_inputs;
    char         at[16];       /* the input being read: "inputs[0]" */
    size_t       json_len;
    const unsigned char *bin;  /* the binary part: bin[0..bin_len) */
    size_t       bin_len, bin_used;
} scan_ctx;

/* Refuses the request (the first refusal only is kept). */
static void refuse(scan_ctx *c, oip_fault kind, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));
static void refuse(scan_ctx *c, oip_fault kind, const char *fmt, ...)
{
    if (c->st != DL_OK)
        return;
    va_list ap;
    va_start(ap, fmt);
    c->st = dl_err_setv(c->err, DL_ERR_INVALID, fmt, ap);
    va_end(ap);
    c->req->fault = kind;
}

/* Refuses the input being read: the message follows its name
 * ("inputs[1]"). */
static void refuse_in(scan_ctx *c, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
static void refuse_in(scan_ctx *c, const char *fmt, ...)
{
    char msg[sizeof(((dl_err *)0)->msg)];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(msg, sizeof(msg), fmt, ap);
    va_end(ap);
    refuse(c, OIP_FAULT_TENSOR, "%s%s", c->at, msg);
}

static void out_of_memory(scan_ctx *c, const char *what)
{
    if (c->st == DL_OK)
        c->st = dl_err_set(c->err, DL_ERR_NOMEM, "out of memory for %s", what);
}

/* Skips the value that starts at m whole, after a refusal half-way in. */
static bool skip_from(scan_ctx *c, js_mark m)
{
    js_restore(&c->js, m);
    return js_skip(&c->js);
}

/* A string value into a tensor name. */
static bool scan_name(scan_ctx *c, const char *where, oip_name *name)
{
    json_scan *s = &c->js;
    if (js_peek(s) != JS_STRING) {
        refuse(c, OIP_FAULT_TENSOR, "%s must be a string, not %s", where, js_what(s));
        return js_skip(s);
    }
    const char *v;
    size_t n;
    if (!js_string(s, &v, &n))
        return false;
    clip(v, n, name->text, sizeof(name->text));
    name->given = true;
    name->too_long = n >= sizeof(name->text);
    return true;
}

static bool scan_id(scan_ctx *c)
{
    json_scan *s = &c->js;
    oip_request *req = c->req;
    js_kind k = js_peek(s);
    const char *v = s->p;   /* an integer's own text */
    size_t n = 0;
    js_num num = {0};
    if (k == JS_STRING && !js_string(s, &v, &n))
        return false;
    if (k == JS_NUMBER && !js_number(s, &num))
        return false;
    if (k == JS_NUMBER && num.integer) {
        n = (size_t)(s->p - v);
        req->id_integer = true;
    } else if (k != JS_STRING) {
        refuse(c, OIP_FAULT_ENVELOPE, "'id' must be a string%s, not %s",
               c->record ? " or an integer" : "", k == JS_NUMBER ? "a real" : js_what(s));
        return k == JS_NUMBER || js_skip(s);
    }
    if (!(req->id = malloc(n + 1))) {
        out_of_memory(c, "the request id");
        return true;
    }
    memcpy(req->id, v, n);
    req->id[n] = '\0';
    return true;
}

static bool scan_model(scan_ctx *c)
{
    json_scan *s = &c->js;
    if (js_peek(s) != JS_STRING) {
        refuse(c, OIP_FAULT_ENVELOPE, "'model' must be a string, not %s", js_what(s));
        return js_skip(s);
    }
    const char *v;
    size_t n;
    if (!js_string(s, &v, &n))
        return false;
    if (!(c->req->model = strdup(v)))
        out_of_memory(c, "the model name");
    return true;
}

/* "model_version": an integer >= 0, or a string of digits (Kafka records
 * write it either way). */
static bool scan_version(scan_ctx *c)
{
    json_scan *s = &c->js;
    js_kind k = js_peek(s);
    int64_t v = -1;
    if (k == JS_NUMBER) {
        js_num num;
        if (!js_number(s, &num))
            return false;
        if (num.fits && num.i >= 0)
            v = num.i;
    } else if (k == JS_STRING) {
        const char *t;
        size_t n;
        if (!js_string(s, &t, &n))
            return false;
        if (n >= 1 && n <= 18 && strspn(t, "0123456789") == n)
            v = strtoll(t, NULL, 10);
    } else if (!js_skip(s)) {
        return false;
    }
    if (v < 0)
        refuse(c, OIP_FAULT_ENVELOPE, "'model_version' must be a positive integer");
    else
        c->req->model_version = v;
    return true;
}

/* One key of a "parameters" object that matters here; the others are
 * skipped. */
typedef enum param_kind {
    PARAM_BOOL,    /* true or false into *to.flag (1 or 0) */
    PARAM_COUNT,   /* an integer >= 0 into *to.count */
    PARAM_POSITIVE,/* an integer >= 1 into *to.count */
    PARAM_SEEN,    /* any value, skipped: *to.flag set to 1 */
} param_kind;

typedef struct param_spec {
    const char *key;
    param_kind  kind;
    const char *unit;   /* PARAM_COUNT: what the integer is, in messages ("a byte count") */
    union {
        int     *flag;
        int64_t *count;
    } to;
} param_spec;

/* The value of p's key, in "parameters" object `what`. */
static bool scan_param(scan_ctx *c, const char *what, oip_fault kind, const param_spec *p)
{
    json_scan *s = &c->js;
    js_kind vk = js_peek(s);
    if (p->kind == PARAM_SEEN) {
        *p->to.flag = 1;
        return js_skip(s);
    }
    if (p->kind == PARAM_BOOL && (vk == JS_TRUE || vk == JS_FALSE)) {
        bool v;
        bool ok = js_bool(s, &v);
        *p->to.flag = v;
        return ok;
    }
    int least = p->kind == PARAM_POSITIVE ? 1 : 0;
    if (p->kind != PARAM_BOOL && vk == JS_NUMBER) {
        js_num n = {0};
        if (!js_number(s, &n))
            return false;   /* not JSON: the syntax error is what the caller reports */
        if (n.fits && n.i >= least)
            *p->to.count = n.i;
        else
            refuse(c, kind, "%s.%s must be %s (an integer >= %d)", what, p->key, p->unit, least);
        return true;
    }
    if (p->kind == PARAM_BOOL)
        refuse(c, kind, "%s.%s must be true or false, not %s", what, p->key, js_what(s));
    else
        refuse(c, kind, "%s.%s must be %s (an integer >= %d), not %s", what, p->key, p->unit,
               least, js_what(s));
    return js_skip(s);
}

/* A "parameters" object (`what` names it in messages, `kind` is the fault
 * of a refusal) read against the nspec keys of spec. */
static bool scan_params(scan_ctx *c, const char *what, oip_fault kind, const param_spec *spec,
                        size_t nspec)
{
    json_scan *s = &c->js;
    if (js_peek(s) != JS_OBJECT) {
        refuse(c, kind, "%s must be an object, not %s", what, js_what(s));
        return js_skip(s);
    }
    js_iter it;
    const char *k;
    if (!js_object(s, &it))
        return false;
    while (js_member(s, &it, &k, NULL)) {
        const param_spec *p = NULL;
        for (size_t i = 0; i < nspec && !p && c->st == DL_OK; i++)
            if (strcmp(k, spec[i].key) == 0)
                p = &spec[i];
        if (!(p ? scan_param(c, what, kind, p) : js_skip(s)))
            return false;
    }
    return !s->failed;
}

#define DTYPES "\"FP32\", \"UINT8\", \"INT32\", \"INT64\" or \"BYTES\""

/* The name of a datatype, as requests and answers spell it. */
static const char *dtype_name(oip_dtype t)
{
    static const char *const names[] = {"FP32", "UINT8", "INT32", "INT64", "BYTES"};
    return names[t];
}

static bool scan_datatype(scan_ctx *c)
{
    json_scan *s = &c->js;
    if (js_peek(s) != JS_STRING) {
        refuse_in(c, ".datatype must be " DTYPES ", not %s", js_what(s));
        return js_skip(s);
    }
    const char *v;
    size_t n;
    if (!js_string(s, &v, &n))
        return false;
    int t = 0;
    while (t <= OIP_BYTES && strcmp(v, dtype_name((oip_dtype)t)) != 0)
        t++;
    if (t > OIP_BYTES) {
        char dt[33];
        refuse_in(c, ".datatype \"%s\" is not supported: use " DTYPES, clip(v, n, dt, sizeof(dt)));
        return true;
    }
    c->req->dtype = (oip_dtype)t;
    c->req->uint8 = t == OIP_UINT8;
    return true;
}

/* An input's shape: 1..OIP_MAX_DIMS positive integers with a product that
 * fits int64_t. */
static bool scan_shape(scan_ctx *c)
{
    json_scan *s = &c->js;
    oip_request *req = c->req;
    js_kind k = js_peek(s);
    js_mark m = js_save(s);
    js_iter it;
    int64_t total = 1;
    if (k != JS_ARRAY) {
        refuse_in(c, ".shape must be an array of 1 to %d integers", OIP_MAX_DIMS);
        return js_skip(s);
    }
    if (!js_array(s, &it))
        return false;
    while (js_element(s, &it)) {
        size_t i = it.n - 1;
        js_num d = {0};
        if (i >= OIP_MAX_DIMS) {
            refuse_in(c, ".shape must be an array of 1 to %d integers", OIP_MAX_DIMS);
            return skip_from(c, m);
        }
        if (js_peek(s) == JS_NUMBER && !js_number(s, &d))
            return false;
        if (!d.integer || d.v < 1) {
            refuse_in(c, ".shape[%zu] must be a positive integer", i);
            return skip_from(c, m);
        }
        if (!d.fits || d.i > INT64_MAX / total) {
            refuse_in(c, ".shape is too large");
            return skip_from(c, m);
        }
        total *= d.i;
        req->shape[i] = d.i;
    }
    if (s->failed)
        return false;
    if (it.n == 0)
        refuse_in(c, ".shape must be an array of 1 to %d integers", OIP_MAX_DIMS);
    req->ndim = (int)it.n;
    req->count = total;
    return true;
}

/* ---- an input's data ---------------------------------------------------------
 * Flat (the first element is not an array): exactly `count` values. Nested:
 * an array of shape[0] arrays of shape[1]... values. Refusals follow the
 * order of a walk that checks each array's length before its elements:
 * a wrong element is reported only once the arrays around it are known to
 * have the right lengths. */

typedef struct filler {
    scan_ctx *c;
    bool      nested;
    bool      fast;                     /* FP32 or UINT8: runs through js_floats */
    float    *x;                        /* count values; NULL: counting only (or BYTES) */
    dl_sbuf  *text;                     /* BYTES: the strings, in Triton's layout;
                                           NULL: counting only (or numbers) */
    int64_t   pos;
    size_t    idx[OIP_MAX_DIMS];        /* where the walk is, for messages */
    js_mark   start[OIP_MAX_DIMS];      /* where the array at each depth began */
    char      why[sizeof(((dl_err *)0)->msg)];   /* the first refusal */
} filler;

/* "inputs[0].data[1][3]" for the first `depth` indices. */
static const char *where(const filler *f, int depth, char *buf, size_t cap)
{
    size_t k = (size_t)snprintf(buf, cap, "%s.data", f->c->at);
    for (int i = 0; i < depth && k < cap; i++)
        k += (size_t)snprintf(buf + k, cap - k, "[%zu]", f->idx[i]);
    return buf;
}

/* Elements of the array at m (the scan comes back to where it was). */
static int64_t count_items(json_scan *s, js_mark m)
{
    js_mark here = js_save(s);
    js_iter it;
    js_restore(s, m);
    if (js_array(s, &it))
        while (js_element(s, &it) && js_skip(s))
            ;
    js_restore(s, here);
    return (int64_t)it.n;
}

static void size_fault(filler *f, int depth);

/* Words the refusal of the value at `depth` (once): for nested data, the
 * enclosing arrays' lengths are checked first, and a wrong one is the
 * refusal instead. */
static void fault_at(filler *f, int depth, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));
static void fault_at(filler *f, int depth, const char *fmt, ...)
{
    if (f->why[0])
        return;
    const oip_request *req = f->c->req;
    for (int k = 0; f->nested && k < depth; k++) {
        int64_t n = count_items(&f->c->js, f->start[k]);
        if (f->c->js.failed)
            return;   /* not JSON: that is the refusal */
        if (n != req->shape[k]) {
            size_fault(f, k);
            return;
        }
    }
    where(f, depth, f->why, sizeof(f->why) - 1);
    size_t k = strlen(f->why);
    f->why[k++] = ' ';
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(f->why + k, sizeof(f->why) - k, fmt, ap);
    va_end(ap);
}

/* The array at depth does not have shape[depth] elements (or is none). */
static void size_fault(filler *f, int depth)
{
    const oip_request *req = f->c->req;
    char s[160];
    fault_at(f, depth, "must be an array of %lld items to match shape %s",
             (long long)req->shape[depth], shape_text(req->shape, req->ndim, s, sizeof(s)));
}

/* Appends v as 4 little-endian bytes. */
static void put_le32(dl_sbuf *b, uint32_t v)
{
    char le[4] = {(char)v, (char)(v >> 8), (char)(v >> 16), (char)(v >> 24)};
    dl_sbuf_add(b, le, 4);
}

/* One BYTES element, a JSON string, onto f->text: its length (4 bytes,
 * little-endian), then its bytes. A refusal as put_value's. */
static bool put_string(filler *f, int depth)
{
    json_scan *s = &f->c->js;
    if (js_peek(s) != JS_STRING) {
        fault_at(f, depth, "must be a string (BYTES), not %s", js_what(s));
        return js_skip(s);
    }
    const char *v;
    size_t n;
    if (!js_string(s, &v, &n))
        return false;
    if (n > UINT32_MAX)
        fault_at(f, depth, "is longer than 4 GiB");
    else if (f->text) {
        put_le32(f->text, (uint32_t)n);
        dl_sbuf_add(f->text, v, n);
        f->pos++;
    }
    return true;
}

/* One value into x[pos++] (a string onto text for BYTES); a refusal is
 * worded in f->why and the value skipped. False on a syntax error. */
static bool put_value(filler *f, int depth)
{
    json_scan *s = &f->c->js;
    oip_dtype t = f->c->req->dtype;
    if (t == OIP_BYTES)
        return put_string(f, depth);
    static const char *const want[] = {"a number (FP32)", "an integer in 0..255 (UINT8)",
                                       "an integer (INT32)", "an integer (INT64)"};
    if (js_peek(s) != JS_NUMBER) {
        fault_at(f, depth, "must be %s, not %s", want[t], js_what(s));
        return js_skip(s);
    }
    js_num n;
    if (!js_number(s, &n))
        return false;
    float v = (float)n.v;
    bool range = t == OIP_UINT8   ? n.fits && n.i >= 0 && n.i <= 255
                 : t == OIP_INT32 ? n.fits && n.i >= INT32_MIN && n.i <= INT32_MAX
                                  : n.fits;
    if (t != OIP_FP32 && (!n.integer || !range))
        fault_at(f, depth, "must be %s, not %s", want[t],
                 n.integer ? "out of range" : "a real");
    else if (!isfinite(v))
        fault_at(f, depth, "is out of the FP32 range");
    else if (f->x)
        f->x[f->pos++] = v;
    return true;
}

/* One level of nested data: an array of shape[depth] items, each an array
 * one level down or, at the last dimension, a value. False on a syntax
 * error or a refusal (f->why). */
static bool put_nested(filler *f, int depth)
{
    json_scan *s = &f->c->js;
    const oip_request *req = f->c->req;
    int64_t want = req->shape[depth];
    js_iter it;
    if (js_peek(s) != JS_ARRAY) {
        size_fault(f, depth);
        return false;
    }
    f->start[depth] = js_save(s);
    if (!js_array(s, &it))
        return false;
    for (;;) {
        /* The last dimension's numbers in one run; the rest one by one. */
        if (depth + 1 == req->ndim && f->x && f->fast && (int64_t)it.n < want)
            f->pos += (int64_t)js_floats(s, &it, f->x + f->pos, (size_t)(want - (int64_t)it.n),
                                         req->uint8);
        if (!js_element(s, &it))
            break;
        if ((int64_t)it.n > want) {
            size_fault(f, depth);
            return false;
        }
        f->idx[depth] = it.n - 1;
        bool ok = depth + 1 == req->ndim ? put_value(f, depth + 1) : put_nested(f, depth + 1);
        if (!ok || f->why[0])
            return false;
    }
    if (s->failed)
        return false;
    if ((int64_t)it.n != want) {
        size_fault(f, depth);
        return false;
    }
    return true;
}

/* Flat data: values until the closing bracket, counted to the end when
 * they are too many or one is refused, as the count is refused first. */
static bool put_flat(filler *f, int64_t *n)
{
    json_scan *s = &f->c->js;
    int64_t total = f->c->req->count;
    js_iter it;
    if (!js_array(s, &it))
        return false;
    for (;;) {
        /* Runs of numbers in one go; the rest one by one. */
        if (f->x && f->fast && !f->why[0] && (int64_t)it.n < total)
            f->pos += (int64_t)js_floats(s, &it, f->x + f->pos, (size_t)(total - (int64_t)it.n),
                                         f->c->req->uint8);
        if (!js_element(s, &it))
            break;
        f->idx[0] = it.n - 1;
        bool keep = (f->x || f->text) && !f->why[0] && (int64_t)it.n <= total;
        bool ok = keep ? put_value(f, 1) : js_skip(s);
        if (!ok)
            return false;
    }
    *n = (int64_t)it.n;
    return !s->failed;
}

/* An input's data, once datatype and shape are known. */
static bool scan_data(scan_ctx *c)
{
    json_scan *s = &c->js;
    oip_request *req = c->req;
    int64_t total = req->count, n = 0;
    char sh[160];
    if (js_peek(s) != JS_ARRAY) {
        refuse_in(c, ".data must be an array, not %s", js_what(s));
        return js_skip(s);
    }
    js_mark m = js_save(s);
    dl_sbuf text = {0};
    bool bytes = req->dtype == OIP_BYTES;
    filler f = {.c = c, .nested = js_peek_first(s) == JS_ARRAY,
                .fast = req->dtype == OIP_FP32 || req->dtype == OIP_UINT8};
    /* Every value takes at least two bytes ("1,") but the last: a larger
     * shape cannot match, and must not size an allocation. */
    bool room = (uint64_t)total <= (uint64_t)(s->end - s->p) / 2 + 1;
    if (f.nested && !room) {
        refuse_in(c, ".data holds fewer than the %lld values of shape %s", (long long)total,
                  shape_text(req->shape, req->ndim, sh, sizeof(sh)));
        return js_skip(s);
    }
    if (room && bytes)
        f.text = &text;   /* grows as the strings come */
    else if (room && !(f.x = malloc((size_t)total * sizeof(float)))) {
        out_of_memory(c, "the input values");
        return js_skip(s);
    }
    bool ok = f.nested ? put_nested(&f, 0) : put_flat(&f, &n);
    if (text.oom)
        out_of_memory(c, "the input strings");
    if (s->failed) {
        free(f.x);
        dl_sbuf_free(&text);
        return false;
    }
    if (!f.nested && n != total)
        refuse_in(c, ".data has %lld values; shape %s needs %lld", (long long)n,
                  shape_text(req->shape, req->ndim, sh, sizeof(sh)), (long long)total);
    else if (f.why[0])
        refuse(c, OIP_FAULT_TENSOR, "%s", f.why);
    if (c->st != DL_OK) {
        free(f.x);
        dl_sbuf_free(&text);
        return ok || skip_from(c, m);   /* nested data stopped half-way */
    }
    req->x = f.x;
    req->bytes = text.s;
    req->nbytes = text.len;
    return true;
}

/* Little-endian loads, whatever the host's order. */
static uint32_t le32(const unsigned char *p)
{
    return (uint32_t)p[0] | (uint32_t)p[1] << 8 | (uint32_t)p[2] << 16 | (uint32_t)p[3] << 24;
}

/* Little-endian int64, whatever the host's order. */
static int64_t le64(const unsigned char *p)
{
    return (int64_t)((uint64_t)le32(p) | (uint64_t)le32(p + 4) << 32);
}

/* n values of datatype t from b into x; the index of the first that is not
 * a finite float (FP32 only), else n. */
static size_t load_binary(const unsigned char *b, oip_dtype t, float *x, size_t n)
{
    for (size_t i = 0; i < n; i++) {
        if (t == OIP_UINT8) {
            x[i] = b[i];
        } else if (t == OIP_INT32) {
            x[i] = (float)(int32_t)le32(b + 4 * i);
        } else if (t == OIP_INT64) {
            x[i] = (float)le64(b + 8 * i);
        } else {
            uint32_t u = le32(b + 4 * i);
            memcpy(&x[i], &u, sizeof(float));
        }
    }
    return t == OIP_FP32 ? dl_first_nonfinite(x, n) : n;
}

/* " ('text')": the name of the input being read, when it gave one. */
static const char *named(const scan_ctx *c, char *buf, size_t cap)
{
    const oip_name *name = &c->req->input;
    buf[0] = '\0';
    if (name->given)
        snprintf(buf, cap, " ('%s%s')", name->text, name->too_long ? "..." : "");
    return buf;
}

/* A BYTES input's strings from the binary part, as Triton lays them out:
 * count elements, each a 4-byte little-endian length then its bytes,
 * filling exactly `size` bytes from where the inputs before it stopped;
 * kept as they are. */
static void take_binary_strings(scan_ctx *c, int64_t size)
{
    oip_request *req = c->req;
    size_t avail = c->bin_len - c->bin_used;
    char nm[DL_NAME_MAX + 8];
    named(c, nm, sizeof(nm));
    if ((uint64_t)size > avail) {
        refuse_in(c, "%s.parameters.binary_data_size is %lld bytes, but only %zu follow the "
                  "%zu bytes of JSON (%s)", nm, (long long)size, avail, c->json_len,
                  OIP_HEADER_JSON_LEN);
        return;
    }
    const unsigned char *p = c->bin + c->bin_used;
    uint64_t at = 0, end = (uint64_t)size;
    for (int64_t i = 0; i < req->count; i++) {
        if (end - at < 4) {
            refuse_in(c, "%s binary data: BYTES element %lld of %lld has no 4-byte length: "
                      "binary_data_size %lld ends %llu bytes in", nm, (long long)i,
                      (long long)req->count, (long long)size, (unsigned long long)at);
            return;
        }
        uint64_t n = le32(p + at);
        at += 4;
        if (n > end - at) {
            refuse_in(c, "%s binary data: BYTES element %lld of %lld is %llu bytes long, but "
                      "only %llu of binary_data_size %lld remain", nm, (long long)i,
                      (long long)req->count, (unsigned long long)n,
                      (unsigned long long)(end - at), (long long)size);
            return;
        }
        at += n;
    }
    if (at != end) {
        refuse_in(c, "%s binary data: its %lld BYTES elements take %llu bytes, but "
                  "binary_data_size is %lld", nm, (long long)req->count,
                  (unsigned long long)at, (long long)size);
        return;
    }
    if (!(req->bytes = malloc(size ? (size_t)size : 1))) {
        out_of_memory(c, "the input strings");
        return;
    }
    memcpy(req->bytes, p, (size_t)size);
    req->nbytes = (size_t)size;
    req->binary_in = true;
    c->bin_used += (size_t)size;
}

/* An input's values from the binary part: `size` bytes from where the
 * inputs before it stopped. */
static void take_binary(scan_ctx *c, int64_t size)
{
    oip_request *req = c->req;
    static const size_t bytes[] = {4, 1, 4, 8};
    if (req->dtype == OIP_BYTES) {
        take_binary_strings(c, size);
        return;
    }
    size_t el = bytes[req->dtype], avail = c->bin_len - c->bin_used;
    char sh[160];
    if (req->count > INT64_MAX / (int64_t)el || size != req->count * (int64_t)el) {
        refuse_in(c, ".parameters.binary_data_size is %lld bytes, but shape %s of %s takes "
                  "%lld values of %zu byte%s", (long long)size,
                  shape_text(req->shape, req->ndim, sh, sizeof(sh)), dtype_name(req->dtype),
                  (long long)req->count, el, el > 1 ? "s" : "");
        return;
    }
    if ((uint64_t)size > avail) {
        refuse_in(c, ".parameters.binary_data_size is %lld bytes, but only %zu follow the %zu "
                  "bytes of JSON (%s)", (long long)size, avail, c->json_len,
                  OIP_HEADER_JSON_LEN);
        return;
    }
    float *x = malloc((size_t)req->count * sizeof(float));
    if (!x) {
        out_of_memory(c, "the input values");
        return;
    }
    size_t cnt = (size_t)req->count;
    size_t bad = load_binary(c->bin + c->bin_used, req->dtype, x, cnt);
    if (bad < cnt) {
        refuse_in(c, " binary data: value %zu is not a finite FP32 number", bad);
        free(x);
        return;
    }
    req->x = x;
    req->binary_in = true;
    c->bin_used += (size_t)size;
}

/* dst (room for 32 bytes) = a then b, short texts of this file. */
static void join(char *dst, const char *a, const char *b)
{
    size_t na = strlen(a), nb = strlen(b);
    DL_ASSERT(na + nb < 32);
    memcpy(dst, a, na);
    memcpy(dst + na, b, nb + 1);
}

/* Reads the value of member key of an object (the scanner is on it);
 * false when the scan failed. arg: the caller's state. */
typedef bool (*member_fn)(scan_ctx *c, const char *key, void *arg);

/* The members of the object the scanner is on, each read by fn, or
 * skipped once the request is refused; false when the scan failed. */
static bool scan_members(scan_ctx *c, member_fn fn, void *arg)
{
    json_scan *s = &c->js;
    js_iter it;
    const char *key;
    if (!js_object(s, &it))
        return false;
    while (js_member(s, &it, &key, NULL))
        if (!(c->st != DL_OK ? js_skip(s) : fn(c, key, arg)))
            return false;
    return true;
}

/* What an entry of "inputs" has given so far. */
typedef struct input_seen {
    bool    dtype, shape, data, deferred;
    int64_t size;                 /* parameters.binary_data_size; -1: none */
    js_mark data_at;              /* "data", when deferred */
    char    name[32], params[32]; /* for messages: "inputs[1].name" */
} input_seen;

static bool input_member(scan_ctx *c, const char *key, void *arg)
{
    json_scan *s = &c->js;
    input_seen *in = arg;
    bool ok;
    if (strcmp(key, "name") == 0) {
        ok = scan_name(c, in->name, &c->req->input);
    } else if (strcmp(key, "datatype") == 0) {
        ok = scan_datatype(c);
        in->dtype = true;
    } else if (strcmp(key, "shape") == 0) {
        ok = scan_shape(c);
        in->shape = true;
    } else if (strcmp(key, "parameters") == 0) {
        const param_spec p = {"binary_data_size", PARAM_COUNT, "a byte count",
                              {.count = &in->size}};
        ok = scan_params(c, in->params, OIP_FAULT_TENSOR, &p, 1);
    } else if (strcmp(key, "data") == 0) {
        in->data = true;
        in->deferred = !in->dtype || !in->shape;
        if (in->deferred) {
            js_peek(s);
            in->data_at = js_save(s);
        }
        ok = in->deferred ? js_skip(s) : scan_data(c);
    } else {
        ok = js_skip(s);
    }
    return ok;
}

/* An entry of "inputs": its keys in any order. "data" before "datatype"
 * or "shape" is checked as JSON, then read once they are known. */
static bool scan_input(scan_ctx *c)
{
    json_scan *s = &c->js;
    input_seen in = {.size = -1};
    join(in.name, c->at, ".name");
    join(in.params, c->at, ".parameters");
    if (js_peek(s) != JS_OBJECT) {
        refuse_in(c, " must be an object, not %s", js_what(s));
        return js_skip(s);
    }
    if (!scan_members(c, input_member, &in))
        return false;
    if (s->failed || c->st != DL_OK)
        return !s->failed;
    if (!in.dtype)
        refuse_in(c, ".datatype must be " DTYPES);
    else if (!in.shape)
        refuse_in(c, ".shape is missing");
    else if (in.data && in.size >= 0)
        refuse_in(c, " has both \"data\" and parameters.binary_data_size: send its values "
                  "one way");
    else if (in.size >= 0)
        take_binary(c, in.size);
    else if (!in.data)
        refuse_in(c, ".data is missing");
    else if (in.deferred) {
        js_mark end = js_save(s);
        js_restore(s, in.data_at);
        bool ok = scan_data(c);
        js_restore(s, end);
        return ok;
    }
    return true;
}

/* inputs[i] for i >= 1: read as inputs[0] is, into a request of its
 * own, then kept in req->more[i - 1]. */
static bool scan_more(scan_ctx *c, size_t i)
{
    oip_request *req = c->req, one = {0};
    if (!req->more && !(req->more = calloc(OIP_MAX_INPUTS - 1, sizeof(*req->more)))) {
        out_of_memory(c, "the inputs");
        return js_skip(&c->js);
    }
    c->req = &one;
    bool ok = scan_input(c);
    c->req = req;
    if (c->st != DL_OK) {
        req->fault = one.fault;
        free(one.x);
        free(one.bytes);
        return ok;
    }
    req->more[i - 1] = (oip_input){.name = one.input, .dtype = one.dtype,
                                   .binary_in = one.binary_in, .ndim = one.ndim,
                                   .count = one.count, .x = one.x, .bytes = one.bytes,
                                   .nbytes = one.nbytes};
    memcpy(req->more[i - 1].shape, one.shape, sizeof(one.shape));
    return ok;
}

static bool scan_inputs(scan_ctx *c)
{
    json_scan *s = &c->js;
    js_iter it;
    c->saw_inputs = true;
    if (js_peek(s) != JS_ARRAY) {
        refuse(c, OIP_FAULT_ENVELOPE, "'inputs' must be an array, not %s", js_what(s));
        return js_skip(s);
    }
    if (!js_array(s, &it))
        return false;
    while (js_element(s, &it)) {
        size_t i = it.n - 1;
        bool read = c->st == DL_OK && i < OIP_MAX_INPUTS;
        if (read && i == 0)
            memcpy(c->at, "inputs[0]", sizeof("inputs[0]"));
        else if (read)
            snprintf(c->at, sizeof(c->at), "inputs[%d]", (int)i);
        if (!(read ? (i == 0 ? scan_input(c) : scan_more(c, i)) : js_skip(s)))
            return false;
    }
    c->req->ninputs = it.n > INT_MAX ? INT_MAX : (int)it.n;
    return !s->failed;
}

/* Entry i of "outputs", being read. */
typedef struct output_at {
    size_t     i;
    oip_asked *o;
} output_at;

static bool output_member(scan_ctx *c, const char *key, void *arg)
{
    output_at *at = arg;
    oip_asked *o = at->o;
    char w[48];
    bool ok;
    if (strcmp(key, "name") == 0) {
        snprintf(w, sizeof(w), "outputs[%zu].name", at->i);
        ok = scan_name(c, w, &o->name);
    } else if (strcmp(key, "parameters") == 0) {
        snprintf(w, sizeof(w), "outputs[%zu].parameters", at->i);
        const param_spec p[] = {
            {"binary_data", PARAM_BOOL, NULL, {.flag = &o->binary}},
            {"classification", PARAM_POSITIVE, "a class count", {.count = &o->classification}},
            {"labels", PARAM_BOOL, NULL, {.flag = &o->labels}},
        };
        ok = scan_params(c, w, OIP_FAULT_TENSOR, p, 3);
    } else {
        ok = js_skip(&c->js);
    }
    return ok;
}

static bool scan_output(scan_ctx *c, size_t i, oip_asked *o)
{
    json_scan *s = &c->js;
    output_at at = {i, o};
    o->binary = -1;
    o->labels = -1;
    if (js_peek(s) != JS_OBJECT) {
        refuse(c, OIP_FAULT_TENSOR, "outputs[%zu] must be an object with a string 'name'", i);
        return js_skip(s);
    }
    if (!scan_members(c, output_member, &at))
        return false;
    if (!s->failed && !o->name.given)
        refuse(c, OIP_FAULT_TENSOR, "outputs[%zu] must be an object with a string 'name'", i);
    return !s->failed;
}

static bool scan_outputs(scan_ctx *c)
{
    json_scan *s = &c->js;
    oip_request *req = c->req;
    js_iter it;
    if (js_peek(s) != JS_ARRAY) {
        refuse(c, OIP_FAULT_ENVELOPE, "'outputs' must be an array, not %s", js_what(s));
        return js_skip(s);
    }
    if (!js_array(s, &it))
        return false;
    while (js_element(s, &it)) {
        size_t i = it.n - 1;
        if (i == OIP_MAX_OUTPUTS)
            refuse(c, OIP_FAULT_TENSOR, "'outputs' lists more than %d outputs", OIP_MAX_OUTPUTS);
        if (!(c->st == DL_OK ? scan_output(c, i, &req->asked[i]) : js_skip(s)))
            return false;
    }
    req->nasked = it.n > OIP_MAX_OUTPUTS ? OIP_MAX_OUTPUTS : (int)it.n;
    return !s->failed;
}

/* A record's "data": a flat array of numbers, each finite as a float32,
 * read straight into a buffer that grows as needed (the count is checked
 * against the model later: oip_check_infer does not apply). */
static bool scan_flat(scan_ctx *c)
{
    json_scan *s = &c->js;
    oip_request *req = c->req;
    if (js_peek(s) != JS_ARRAY) {
        refuse(c, OIP_FAULT_TENSOR, "'data' must be a flat array of numbers");
        return js_skip(s);
    }
    js_mark m = js_save(s);
    js_iter it;
    if (!js_array(s, &it))
        return false;
    /* Every value takes at least two bytes ("1,") but the last: start at
     * a sample's worth or what the rest of the text can hold, whichever
     * is less, and double when full. */
    size_t n = 0, cap = (size_t)(s->end - s->p) / 2 + 1;
    cap = cap < 1024 ? cap : 1024;
    float *x = malloc(cap * sizeof(float));
    if (!x) {
        out_of_memory(c, "the input values");
        return skip_from(c, m);
    }
    for (;;) {
        n += js_floats(s, &it, x + n, cap - n, false);
        if (n == cap) {
            float *p = realloc(x, 2 * cap * sizeof(float));
            if (!p) {
                free(x);
                out_of_memory(c, "the input values");
                return skip_from(c, m);
            }
            x = p;
            cap *= 2;
            continue;
        }
        if (!js_element(s, &it))
            break;
        /* js_floats stopped before this element: not a finite float */
        refuse(c, OIP_FAULT_TENSOR, "data[%zu] is %s", it.n - 1,
               js_peek(s) == JS_NUMBER ? "not a finite float" : "not a number");
        free(x);
        return skip_from(c, m);
    }
    if (s->failed) {
        free(x);
        return false;
    }
    req->x = x;
    req->count = (int64_t)n;
    req->flat = true;
    return true;
}

/* "inputs" after a record's "data": the inputs are the record's values. */
static void drop_flat(oip_request *req)
{
    if (req->flat) {
        free(req->x);
        req->x = NULL;
        req->count = 0;
        req->flat = false;
    }
}

static bool scan_root(scan_ctx *c)
{
    json_scan *s = &c->js;
    js_iter it;
    const char *key;
    int binary_out = 0, seq_id = 0, seq_start = 0, seq_end = 0;
    /* timeout: microseconds the request may queue (0: the server's
     * default); priority: Triton's level (1 the highest, 0 the default);
     * the sequence batcher's keys, noted to be refused */
    const param_spec params[] = {
        {"binary_data_output", PARAM_BOOL, NULL, {.flag = &binary_out}},
        {"timeout", PARAM_COUNT, "microseconds", {.count = &c->req->timeout_us}},
        {"priority", PARAM_COUNT, "a priority level", {.count = &c->req->priority}},
        {"sequence_id", PARAM_SEEN, NULL, {.flag = &seq_id}},
        {"sequence_start", PARAM_SEEN, NULL, {.flag = &seq_start}},
        {"sequence_end", PARAM_SEEN, NULL, {.flag = &seq_end}},
    };
    if (js_peek(s) != JS_OBJECT) {
        if (js_peek(s) != JS_NONE)
            refuse(c, OIP_FAULT_ENVELOPE, "the %s must be a JSON object, not %s",
                   c->record ? "record" : "request", js_what(s));
        return js_skip(s);
    }
    if (!js_object(s, &it))
        return false;
    while (js_member(s, &it, &key, NULL)) {
        bool ok;
        if (strcmp(key, "id") == 0) {
            ok = scan_id(c);   /* even after a refusal: a dead letter names it */
        } else if (c->st != DL_OK) {
            ok = js_skip(s);
        } else if (strcmp(key, "inputs") == 0) {
            drop_flat(c->req);
            ok = scan_inputs(c);
        } else if (strcmp(key, "data") == 0 && c->record) {
            ok = c->saw_inputs ? js_skip(s) : scan_flat(c);   /* "inputs" wins */
        } else if (strcmp(key, "outputs") == 0) {
            ok = scan_outputs(c);
        } else if (strcmp(key, "parameters") == 0) {
            ok = scan_params(c, "'parameters'", OIP_FAULT_ENVELOPE, params,
                             sizeof(params) / sizeof(params[0]));
        } else if (strcmp(key, "model") == 0) {
            ok = scan_model(c);
        } else if (strcmp(key, "model_version") == 0) {
            ok = scan_version(c);
        } else {
            ok = js_skip(s);
        }
        if (!ok)
            return false;
    }
    c->req->binary_out = binary_out == 1;
    c->req->sequence = seq_id ? "sequence_id" : seq_start ? "sequence_start"
                     : seq_end ? "sequence_end" : NULL;
    return !s->failed;
}

/* oip_scan_infer, or with `record` oip_scan_record. */
static dl_status scan_request(const char *body, size_t len, size_t json_len, bool record,
                              oip_request *req, dl_err *err)
{
    memset(req, 0, sizeof(*req));
    if (json_len > len) {
        req->fault = OIP_FAULT_SYNTAX;
        return bad(err, "%s %zu is more than the body's %zu bytes", OIP_HEADER_JSON_LEN,
                   json_len, len);
    }
    scan_ctx c = {.req = req, .err = err, .record = record, .json_len = json_len,
                  .bin_len = len - json_len};
    if (body)
        c.bin = (const unsigned char *)body + json_len;
    js_init(&c.js, body, json_len);
    if (scan_root(&c) && js_end(&c.js) && c.st == DL_OK) {
        if (!c.saw_inputs && record && !req->flat)
            refuse(&c, OIP_FAULT_ENVELOPE, "the record has neither 'inputs' nor 'data'");
        else if (!c.saw_inputs && !record)
            refuse(&c, OIP_FAULT_ENVELOPE, "'inputs' is missing");
        else if (req->flat && c.bin_len > 0)
            refuse(&c, OIP_FAULT_TENSOR, "the body has %zu bytes after its %zu bytes of JSON "
                   "(%s), but 'data' takes none", c.bin_len, json_len, OIP_HEADER_JSON_LEN);
        else if (req->ninputs >= 1 && c.bin_used != c.bin_len)
            refuse(&c, OIP_FAULT_TENSOR, "the body has %zu bytes after its %zu bytes of JSON "
                   "(%s), but the inputs' binary_data_size add up to %zu", c.bin_len,
                   json_len, OIP_HEADER_JSON_LEN, c.bin_used);
    }
    dl_status st = c.st;
    if (c.js.failed) {
        st = js_error(&c.js, err);
        req->fault = c.js.nomem ? OIP_FAULT_NONE : OIP_FAULT_SYNTAX;
    }
    js_fini(&c.js);
    if (st == DL_OK)
        return DL_OK;
    /* Nothing but the id stays, and that only from well-formed JSON. */
    char *id = c.js.failed ? NULL : req->id;
    bool id_integer = req->id_integer;
    oip_fault fault = req->fault;
    if (id)
        req->id = NULL;   /* kept from oip_request_fini */
    oip_request_fini(req);
    req->id = id;
    req->id_integer = id && id_integer;
    req->fault = fault;
    return st;
}

dl_status oip_scan_infer(const char *body, size_t len, size_t json_len, oip_request *req,
                         dl_err *err)
{
    return scan_request(body, len, json_len, false, req, err);
}

dl_status oip_scan_record(const char *body, size_t len, size_t json_len, oip_request *req,
                          dl_err *err)
{
    return scan_request(body, len, json_len, true, req, err);
}

/* ---- infer requests: against the model ------------------------------------ */

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
    if (req->count == in_dim) {
        req->batch = 1;
        return DL_OK;
    }
    char got[160], want[160];
    return bad(err, "inputs[0].shape %s does not fit model '%s': it takes [B, ...] with %lld "
               "values per sample, e.g. [B, %s",
               shape_text(req->shape, req->ndim, got, sizeof(got)), conf->name,
               (long long)in_dim,
               shape_text(conf->in_shape, conf->in_ndim, want, sizeof(want)) + 1);
}

/* ---- inputs against the model ---- */

/* One input of the request, wherever the request holds it. */
typedef struct req_input {
    const oip_name *name;
    oip_dtype       dtype;
    int             ndim;
    const int64_t  *shape;
    int64_t         count;
    const float    *x;
    const char     *bytes;   /* BYTES: count strings, Triton's layout */
} req_input;

static req_input input_at(const oip_request *req, int i)
{
    if (i == 0)
        return (req_input){&req->input, req->dtype, req->ndim, req->shape, req->count, req->x,
                           req->bytes};
    const oip_input *in = &req->more[i - 1];
    return (req_input){&in->name, in->dtype, in->ndim, in->shape, in->count, in->x, in->bytes};
}

/* Whether a request's datatype suits a model input: FP32 or UINT8 (image
 * bytes) for a float input, BYTES for text, an integer type for ids. */
static bool dtype_fits(oip_dtype t, const dl_input_conf *in)
{
    if (in->dtype == DL_IN_BYTES || t == OIP_BYTES)
        return in->dtype == DL_IN_BYTES && t == OIP_BYTES;
    return in->dtype == DL_IN_FP32 ? t == OIP_FP32 || t == OIP_UINT8 : t != OIP_FP32;
}

static const char *input_type_name(dl_in_type t)
{
    static const char *const names[] = {"FP32", "UINT8", "INT32", "INT64", "BYTES"};
    return names[t];
}

int64_t oip_id_bound(const dl_model_conf *conf, int k)
{
    int64_t bound = conf->inputs[k].dtype == DL_IN_UINT8 ? 256 : (int64_t)1 << 24;
    for (int i = 0; i < conf->nlayers; i++) {
        const dl_layer_conf *l = &conf->layers[i];
        if (l->type == DL_LAYER_EMBEDDING && l->nsrc == 1 && l->src[0] == -1 - k &&
            l->num_embeddings < bound)
            bound = l->num_embeddings;
    }
    return bound;
}

/* n ids of model input k (float32 values at x, any alignment), of sample
 * `sample`. */
static dl_status check_id_run(const dl_model_conf *conf, int k, const void *x, int64_t n,
                              int64_t sample, dl_err *err)
{
    const dl_input_conf *in = &conf->inputs[k];
    int64_t bound = oip_id_bound(conf, k);
    for (int64_t j = 0; j < n; j++) {
        float v;   /* any alignment: a Kafka record's raw values */
        memcpy(&v, (const char *)x + (size_t)j * sizeof(float), sizeof(v));
        if (!(v >= 0 && v < (float)bound && v == floorf(v)))
            return bad(err, "input '%s': %.9g (sample %lld) is not an id: model '%s' "
                       "takes integers in [0, %lld)", in->name, (double)v, (long long)sample,
                       conf->name, (long long)bound);
    }
    return DL_OK;
}

/* Ids of model input k: n samples of `per` values, `stride` floats apart. */
static dl_status check_ids(const dl_model_conf *conf, int k, const void *x, int64_t n,
                           int64_t per, int64_t stride, dl_err *err)
{
    dl_status st = DL_OK;
    for (int64_t i = 0; i < n && st == DL_OK; i++)
        st = check_id_run(conf, k, (const float *)x + i * stride, per, i, err);
    return st;
}

/* The length at the head of a packed sample of sequence input `in` (any
 * alignment): 1..max_length, a whole number. */
static dl_status check_length(const dl_model_conf *conf, const dl_input_conf *in,
                              const void *row, int64_t sample, dl_err *err)
{
    float len;
    memcpy(&len, row, sizeof(len));
    if (!(len >= 1 && len <= (float)in->max_length && len == floorf(len)))
        return bad(err, "input '%s': sample %lld has length %.9g, not a whole number from 1 "
                   "to max_length %lld of model '%s'", in->name, (long long)sample,
                   (double)len, (long long)in->max_length, conf->name);
    return DL_OK;
}

dl_status oip_check_ids(const dl_model_conf *conf, const void *x, int64_t n, dl_err *err)
{
    int64_t stride = 0, at = 0;
    for (int k = 0; k < conf->ninputs; k++)
        stride += dl_input_width(&conf->inputs[k]);
    dl_status st = DL_OK;
    for (int k = 0; k < conf->ninputs && st == DL_OK; at += dl_input_width(&conf->inputs[k++])) {
        const dl_input_conf *in = &conf->inputs[k];
        const float *v = (const float *)x + at;   /* not read through: any alignment */
        for (int64_t i = 0; in->max_length && i < n && st == DL_OK; i++)
            st = check_length(conf, in, v + i * stride, i, err);
        if (st == DL_OK && in->dtype != DL_IN_FP32)
            st = check_ids(conf, k, v + (in->max_length > 0), n, in->dim, stride, err);
    }
    return st;
}

/* The samples in input t of model input `in` ([B, ...] with in->dim
 * values per sample, or one sample's values alone); -1 when it fits not.
 * A sequence: [B, len, ...] with the model's sizes of a position after
 * len (*len set; it is checked against max_length after), or for text
 * [B] or [B, 1] strings. */
static int64_t samples_of(const req_input *t, const dl_input_conf *in, int64_t *len)
{
    *len = 0;
    if (in->dtype == DL_IN_BYTES)
        return t->ndim == 1 || (t->ndim == 2 && t->shape[1] == 1) ? t->shape[0] : -1;
    if (in->max_length > 0) {
        if (t->ndim != in->ndim + 1 || memcmp(t->shape + 2, in->shape + 1,
                                              (size_t)(in->ndim - 1) * sizeof(int64_t)))
            return -1;
        *len = t->shape[1];
        return t->shape[0];
    }
    if (t->ndim >= 2 && product(t->shape + 1, t->ndim - 1) == in->dim)
        return t->shape[0];
    return t->count == in->dim ? 1 : -1;
}

/* "[B, len, 4]": the shape a sequence input takes, into buf. */
static const char *seq_shape_text(const dl_input_conf *in, char *buf, size_t cap)
{
    size_t k = (size_t)snprintf(buf, cap, "[B, len");
    for (int i = 1; i < in->ndim && k < cap; i++)
        k += (size_t)snprintf(buf + k, cap - k, ", %lld", (long long)in->shape[i]);
    if (k < cap)
        snprintf(buf + k, cap - k, "]");
    return buf;
}

/* A refusal of input t's shape against model input k. */
static dl_status shape_misfit(const req_input *t, const dl_model_conf *conf, int k, dl_err *err)
{
    const dl_input_conf *in = &conf->inputs[k];
    char got[160], want[160];
    shape_text(t->shape, t->ndim, got, sizeof(got));
    if (in->dtype == DL_IN_BYTES)
        return bad(err, "input '%s': shape %s does not fit model '%s': it takes [B] or [B, 1] "
                   "strings (BYTES), a text a sample", in->name, got, conf->name);
    if (in->max_length > 0)
        return bad(err, "input '%s': shape %s does not fit model '%s': it takes sequences of "
                   "%s with len from 1 to max_length %lld", in->name, got, conf->name,
                   seq_shape_text(in, want, sizeof(want)), (long long)in->max_length);
    return bad(err, "input '%s': shape %s does not fit model '%s': it takes [B, ...] with "
               "%lld values per sample, e.g. [B, %s", in->name, got, conf->name,
               (long long)in->dim, shape_text(in->shape, in->ndim, want, sizeof(want)) + 1);
}

/* Input t against model input k: datatype, shape (its samples into *n,
 * a sequence's positions into *len), ids. */
static dl_status check_input(const req_input *t, const dl_model_conf *conf, int k, int64_t *n,
                             int64_t *len, dl_err *err)
{
    const dl_input_conf *in = &conf->inputs[k];
    if (!dtype_fits(t->dtype, in))
        return bad(err, "input '%s': datatype %s does not fit model '%s', which takes %s%s",
                   in->name, dtype_name(t->dtype), conf->name, input_type_name(in->dtype),
                   in->dtype == DL_IN_FP32    ? " (or UINT8)"
                   : in->dtype == DL_IN_BYTES ? " (a string a sample)"
                                              : " ids (or INT32, INT64, UINT8)");
    *n = samples_of(t, in, len);
    if (*n < 0)
        return shape_misfit(t, conf, k, err);
    if (*len > in->max_length)
        return bad(err, "input '%s': %lld positions, above max_length %lld of model '%s'",
                   in->name, (long long)*len, (long long)in->max_length, conf->name);
    if (in->dtype == DL_IN_FP32 || in->dtype == DL_IN_BYTES)
        return DL_OK;   /* text: its ids are checked once made */
    int64_t per = in->max_length ? *len * (in->dim / in->max_length) : in->dim;
    return check_ids(conf, k, t->x, *n, per, per, err);
}

/* Which request input is model input k, each request input named once by
 * a model input: of[k]. */
static dl_status match_inputs(const oip_request *req, const dl_model_conf *conf, int *of,
                              dl_err *err)
{
    for (int k = 0; k < conf->ninputs; k++)
        of[k] = -1;
    int read = req->ninputs < OIP_MAX_INPUTS ? req->ninputs : OIP_MAX_INPUTS;
    if (req->ninputs > conf->ninputs)
        return bad(err, "'inputs' has %d inputs; model '%s' takes %d", req->ninputs,
                   conf->name, conf->ninputs);
    for (int i = 0; i < read; i++) {
        const oip_name *name = input_at(req, i).name;
        int k = 0;
        while (k < conf->ninputs && (name->too_long || strcmp(name->text, conf->inputs[k].name)))
            k++;
        if (!name->given)
            return bad(err, "inputs[%d].name is missing", i);
        if (k == conf->ninputs)
            return bad(err, "inputs[%d]: model '%s' has no input '%s%s'", i, conf->name,
                       name->text, name->too_long ? "..." : "");
        if (of[k] >= 0)
            return bad(err, "inputs[%d]: input '%s' is given twice", i, name->text);
        of[k] = i;
    }
    for (int k = 0; k < conf->ninputs; k++)
        if (of[k] < 0)
            return bad(err, "input '%s' of model '%s' is missing", conf->inputs[k].name,
                       conf->name);
    return DL_OK;
}

/* Text input t as n packed samples of model input k (rows of x, stride
 * floats apart): each string tokenized, then its ids checked. */
static dl_status pack_text(const req_input *t, const dl_model_conf *conf, int k,
                           const dl_tokenizer *tok, int64_t n, float *x, int64_t stride,
                           dl_err *err)
{
    const dl_input_conf *in = &conf->inputs[k];
    const unsigned char *p = (const unsigned char *)t->bytes;
    DL_ASSERT(tok);   /* the registry makes one for every text input */
    dl_status st = DL_OK;
    for (int64_t i = 0; i < n && st == DL_OK; i++) {
        /* checked when scanned: count elements, each a length, then its bytes */
        size_t len = (size_t)le32(p);
        float *row = x + i * stride;
        st = dl_seq_pack_text(in, tok, (const char *)p + 4, len, row, err);
        if (st == DL_OK)
            st = check_id_run(conf, k, row + 1, (int64_t)row[0], i, err);
        p += 4 + len;
    }
    return st;
}

/* Input t as n samples of model input k (of len positions for a
 * sequence), into rows of x `stride` floats apart: copied, or packed. */
static dl_status pack_input(const req_input *t, const dl_model_conf *conf, int k,
                            const dl_tokenizer *tok, int64_t n, int64_t len, float *x,
                            int64_t stride, dl_err *err)
{
    const dl_input_conf *in = &conf->inputs[k];
    if (in->dtype == DL_IN_BYTES)
        return pack_text(t, conf, k, tok, n, x, stride, err);
    int64_t per = in->max_length ? len * (in->dim / in->max_length) : in->dim;
    dl_status st = DL_OK;
    for (int64_t i = 0; i < n && st == DL_OK; i++) {
        if (in->max_length)
            st = dl_seq_pack(in, t->x + i * per, len, x + i * stride, err);
        else
            memcpy(x + i * stride, t->x + i * per, (size_t)per * sizeof(float));
    }
    return st;
}

/* The model's inputs from the request's (model input k is request input
 * of[k]): each checked, the same batch; then, for several inputs or a
 * sequence, every sample's inputs side by side in req->x, sequences
 * packed. */
static dl_status gather_inputs(oip_request *req, const dl_model_conf *conf,
                               dl_tokenizer *const *tok, const int *of, dl_err *err)
{
    int64_t batch = 0, stride = 0, lens[OIP_MAX_INPUTS];
    bool packed = conf->ninputs > 1;
    dl_status st = DL_OK;
    for (int k = 0; k < conf->ninputs && st == DL_OK; k++) {
        req_input t = input_at(req, of[k]);
        int64_t n = 0;
        stride += dl_input_width(&conf->inputs[k]);
        st = check_input(&t, conf, k, &n, &lens[k], err);
        if (st == DL_OK && k > 0 && n != batch)
            st = bad(err, "input '%s' has %lld samples, input '%s' %lld: they must agree",
                     conf->inputs[k].name, (long long)n, conf->inputs[0].name,
                     (long long)batch);
        batch = n;
        packed = packed || conf->inputs[k].max_length > 0;
    }
    if (st != DL_OK || !packed) {
        req->batch = batch;
        return st;
    }
    if (batch > OIP_MAX_PACKED_BYTES / (int64_t)sizeof(float) / stride)
        return dl_err_set(err, DL_ERR_TOO_LARGE, "%lld samples of model '%s' take %.0f MiB "
                          "packed (%lld floats a sample), more than a request may (%lld MiB)",
                          (long long)batch, conf->name,
                          (double)batch * (double)stride * sizeof(float) / (1 << 20),
                          (long long)stride, (long long)(OIP_MAX_PACKED_BYTES >> 20));
    float *x = malloc((size_t)(batch * stride) * sizeof(float));
    if (!x)
        return dl_err_set(err, DL_ERR_NOMEM, "out of memory for the input values");
    int64_t at = 0;
    for (int k = 0; k < conf->ninputs && st == DL_OK; at += dl_input_width(&conf->inputs[k++])) {
        req_input t = input_at(req, of[k]);
        st = pack_input(&t, conf, k, tok ? tok[k] : NULL, batch, lens[k], x + at, stride, err);
    }
    if (st != DL_OK) {
        free(x);
        return st;
    }
    free(req->x);
    req->x = x;
    req->count = batch * stride;
    req->batch = batch;
    return DL_OK;
}

/* A request for a model of several inputs. */
static dl_status check_inputs(oip_request *req, const dl_model_conf *conf,
                              dl_tokenizer *const *tok, dl_err *err)
{
    int of[OIP_MAX_INPUTS];
    if (conf->ninputs > OIP_MAX_INPUTS)
        return bad(err, "model '%s' has %d inputs; requests carry at most %d", conf->name,
                   conf->ninputs, OIP_MAX_INPUTS);
    dl_status st = match_inputs(req, conf, of, err);
    return st == DL_OK ? gather_inputs(req, conf, tok, of, err) : st;
}

/* A request for a model of one input. */
static dl_status check_one_input(oip_request *req, const dl_model_conf *conf,
                                 dl_tokenizer *const *tok, int64_t in_dim, dl_err *err)
{
    if (req->ninputs != 1)
        return bad(err, "'inputs' has %d inputs; model '%s' takes exactly one ('%s')",
                   req->ninputs, conf->name, conf->input_name);
    if (!req->input.given)
        return bad(err, "inputs[0].name is missing: model '%s' takes '%s'", conf->name,
                   conf->input_name);
    if (req->input.too_long || strcmp(req->input.text, conf->input_name) != 0)
        return bad(err, "inputs[0]: model '%s' has no input '%s%s' (it takes '%s')", conf->name,
                   req->input.text, req->input.too_long ? "..." : "", conf->input_name);
    const dl_input_conf *in = &conf->inputs[0];
    if (in->dtype == DL_IN_FP32 && !in->max_length && dtype_fits(req->dtype, in))
        return fit_shape(req, conf, in_dim, err);   /* the common case, as it always was */
    const int of[1] = {0};
    return gather_inputs(req, conf, tok, of, err);
}

/* ---- outputs against the model ---- */

/* Whether the model's first output has one value row a sample (not a
 * per-token output), so that "class" and "label" mean something. */
static bool whole_samples(const dl_model_conf *conf)
{
    return conf->outputs[0].max_length == 0;
}

/* The OIP_OUT_* kind a name stands for (*index: which model output, for
 * OIP_OUT_TENSOR); 0 for none. The model's output names come first. */
static unsigned output_kind(const oip_name *name, const dl_model_conf *conf, int *index)
{
    if (name->too_long)
        return 0;
    for (*index = 0; *index < conf->noutputs; ++*index)
        if (strcmp(name->text, conf->outputs[*index].name) == 0)
            return OIP_OUT_TENSOR;
    *index = 0;
    if (strcmp(name->text, "label") == 0 && conf->nlabels > 0 && whole_samples(conf))
        return OIP_OUT_LABEL;
    if (strcmp(name->text, "class") == 0 && whole_samples(conf))
        return OIP_OUT_CLASS;
    return 0;
}

static void add_output(oip_request *req, unsigned kind, int index, bool binary, int64_t topk,
                       bool labels)
{
    for (int i = 0; i < req->nout; i++)
        if (req->out[i].kind == kind && req->out[i].index == index)
            return;   /* listed twice: answered once */
    if (req->nout == OIP_MAX_OUTPUTS)
        return;
    req->outputs |= kind;
    req->out[req->nout++] = (oip_output){.kind = kind, .index = index, .binary = binary,
                                         .topk = topk, .labels = labels};
}

int oip_default_outputs(const dl_model_conf *conf, bool binary, oip_output *out)
{
    int n = 0;
    for (int k = 0; k < conf->noutputs && n < OIP_MAX_OUTPUTS - 2; k++)
        out[n++] = (oip_output){.kind = OIP_OUT_TENSOR, .index = k, .binary = binary};
    if ((conf->noutputs > 1 && conf->loss != DL_LOSS_XENT) || !whole_samples(conf))
        return n;   /* a class of a value, of a probability or of a sequence means nothing */
    if (conf->nlabels > 0)
        out[n++] = (oip_output){.kind = OIP_OUT_LABEL, .binary = binary};
    out[n++] = (oip_output){.kind = OIP_OUT_CLASS, .binary = binary};
    return n;
}

/* "'click', 'rating'": the model's output names, for messages. */
static const char *output_names(const dl_model_conf *conf, char *buf, size_t cap)
{
    size_t k = 0;
    buf[0] = '\0';
    for (int i = 0; i < conf->noutputs && k < cap; i++)
        k += (size_t)snprintf(buf + k, cap - k, "%s'%s'", i ? ", " : "", conf->outputs[i].name);
    return buf;
}

/* The answer entry i asks for of model output k (kind OIP_OUT_TENSOR):
 * its classification (topk) or labels, checked against the output. */
static dl_status check_asked(const oip_asked *a, int i, const dl_model_conf *conf, int k,
                             int64_t *topk, bool *labels, dl_err *err)
{
    const dl_output_conf *o = &conf->outputs[k];
    dl_loss loss = k == 0 ? conf->loss : o->loss;   /* conf->loss mirrors 0 */
    int nlabels = k == 0 ? conf->nlabels : o->nlabels;
    const char *which = conf->noutputs > 1 ? "this output" : "the output";
    bool crf = loss == DL_LOSS_CRF;
    /* a crf answers its best path, a tag a position: its classification
     * is that path's labels */
    *topk = crf ? 0 : a->classification;
    *labels = a->labels == 1 || (crf && a->classification > 0);
    if (crf && a->classification > 1)
        return bad(err, "outputs[%d]: classification of '%s' asks for %lld classes: a crf "
                   "output answers one tag a position (its best path); ask for 1, or for "
                   "parameters.labels", i, a->name.text, (long long)a->classification);
    if (*topk > 0 && loss != DL_LOSS_XENT && loss != DL_LOSS_NEXT_TOKEN)
        return bad(err, "outputs[%d]: classification of '%s': %s of model '%s' is not a "
                   "classifier (its loss is not softmax cross-entropy)", i, a->name.text,
                   which, conf->name);
    if (*labels && *topk == 0 && ((loss != DL_LOSS_XENT && !crf) || nlabels == 0))
        return bad(err, "outputs[%d]: labels of '%s': %s of model '%s' has no labels", i,
                   a->name.text, which, conf->name);
    return DL_OK;
}

static dl_status check_outputs(oip_request *req, const dl_model_conf *conf, dl_err *err)
{
    req->outputs = 0;
    req->nout = 0;
    if (req->nasked == 0) {
        req->nout = oip_default_outputs(conf, req->binary_out, req->out);
        for (int i = 0; i < req->nout; i++)
            req->outputs |= req->out[i].kind;
        return DL_OK;
    }
    for (int i = 0; i < req->nasked; i++) {
        const oip_asked *a = &req->asked[i];
        int k;
        unsigned kind = output_kind(&a->name, conf, &k);
        char names[256];
        bool whole = whole_samples(conf);
        if (!kind)
            return bad(err, "outputs[%d]: model '%s' has no output '%s%s' (it has %s%s%s)", i,
                       conf->name, a->name.text, a->name.too_long ? "..." : "",
                       output_names(conf, names, sizeof(names)),
                       conf->nlabels > 0 && whole ? ", 'label'" : "",
                       whole ? " and 'class'" : "");
        if ((a->classification > 0 || a->labels == 1) && kind != OIP_OUT_TENSOR)
            return bad(err, "outputs[%d]: %s asked of '%s', which is not a tensor of class "
                       "scores: ask %s of '%s'", i, a->classification > 0 ?
                       "classification is" : "labels are", a->name.text,
                       a->classification > 0 ? "it" : "them", conf->output_name);
        int64_t topk = 0;
        bool labels = false;
        dl_status st = kind == OIP_OUT_TENSOR ? check_asked(a, i, conf, k, &topk, &labels, err)
                                              : DL_OK;
        if (st != DL_OK)
            return st;
        add_output(req, kind, k, a->binary >= 0 ? a->binary == 1 : req->binary_out, topk,
                   labels);
    }
    return DL_OK;
}

dl_status oip_check_infer(oip_request *req, const dl_model_conf *conf,
                          dl_tokenizer *const *tok, int64_t in_dim, dl_err *err)
{
    if (req->sequence)
        return bad(err, "model '%s' has no sequence batching: %s is not supported", conf->name,
                   req->sequence);
    dl_status st = conf->ninputs > 1 ? check_inputs(req, conf, tok, err)
                                     : check_one_input(req, conf, tok, in_dim, err);
    return st == DL_OK ? check_outputs(req, conf, err) : st;
}

dl_status oip_check_classes(const oip_request *req, const dl_model_conf *conf, int64_t out_dim,
                            dl_err *err)
{
    for (int i = 0; i < req->nout; i++) {
        const dl_output_conf *o = &conf->outputs[req->out[i].index];
        int64_t dim = conf->noutputs == 1 ? out_dim : o->served;
        if (o->max_length > 0)
            dim /= o->max_length;   /* the classes of a position */
        if (req->out[i].topk > dim)
            return bad(err, "classification of '%s' asks for the top %lld classes, but model "
                       "'%s' has %lld", o->name, (long long)req->out[i].topk, conf->name,
                       (long long)dim);
    }
    return DL_OK;
}

dl_status oip_parse_infer(const char *body, size_t len, size_t json_len,
                          const dl_model_conf *conf, dl_tokenizer *const *tok, int64_t in_dim,
                          oip_request *req, dl_err *err)
{
    dl_status st = oip_scan_infer(body, len, json_len, req, err);
    if (st == DL_OK && req->id_integer) {
        req->fault = OIP_FAULT_ENVELOPE;
        st = bad(err, "'id' must be a string, not an integer");
    }
    if (st == DL_OK)
        st = oip_check_infer(req, conf, tok, in_dim, err);
    if (st != DL_OK) {
        oip_fault fault = req->fault;
        oip_request_fini(req);
        req->fault = fault;
    }
    return st;
}

void oip_request_fini(oip_request *req)
{
    for (int i = 0; req->more && i < OIP_MAX_INPUTS - 1; i++) {
        free(req->more[i].x);
        free(req->more[i].bytes);
    }
    free(req->more);
    free(req->bytes);
    free(req->id);
    free(req->model);
    free(req->x);
    memset(req, 0, sizeof(*req));
}

dl_status oip_json_len(const char *header, size_t len, size_t *json_len, dl_err *err)
{
    *json_len = len;
    if (!header)
        return DL_OK;
    size_t n = strlen(header);
    char v[24];
    if (n == 0 || n > 18 || strspn(header, "0123456789") != n)
        return bad(err, "%s '%s' is not a byte count", OIP_HEADER_JSON_LEN,
                   clip(header, n, v, sizeof(v)));
    unsigned long long x = strtoull(header, NULL, 10);
    if (x > len)
        return bad(err, "%s %llu is more than the body's %zu bytes", OIP_HEADER_JSON_LEN, x,
                   len);
    *json_len = (size_t)x;
    return DL_OK;
}
