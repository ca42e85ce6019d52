/* json_scan.h (private to serve/): a small, strict JSON reader for the hot
 * paths (infer requests, Kafka records): the document is read token by
 * token straight from its bytes, and the caller decides what to keep, so
 * numeric arrays become floats without a tree of nodes.
 *
 * Strict as jansson's json_loadb(JSON_REJECT_DUPLICATES) is: RFC 8259
 * syntax only (no comments, no trailing commas, no NaN), strings of valid
 * UTF-8 without raw control characters, \u escapes with paired
 * surrogates and no \u0000, duplicate keys in an object refused, one value
 * followed by nothing but white space, at most JS_MAX_DEPTH nested arrays
 * and objects. Never reads outside [text, text + len): the text need not
 * be NUL-terminated.
 *
 * Usage: js_init, then the calls below in document order; the first
 * syntax error stops the scan (every later call returns false at once)
 * and js_error words it with its line and column. A scanner is used by
 * one thread at a time; js_fini frees what it allocated. */
#ifndef DL_SERVE_JSON_SCAN_H
#define DL_SERVE_JSON_SCAN_H

#include "util/dl_util.h"

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

/* jansson's limit too: deeper documents are refused, and the recursion of
 * js_skip stays within a few hundred kilobytes of stack. */
#define JS_MAX_DEPTH 2048

/* What the next value is, from its first byte. */
typedef enum js_kind {
    JS_NONE,      /* end of input, or a byte no value starts with */
    JS_OBJECT, JS_ARRAY, JS_STRING, JS_NUMBER, JS_TRUE, JS_FALSE, JS_NULL,
} js_kind;

/* A number as read: v is strtod's value of the text (correctly rounded;
 * +-HUGE_VAL past the double range). */
typedef struct js_num {
    double  v;
    bool    integer;   /* written without a fraction or an exponent */
    bool    fits;      /* an integer within int64_t: then i holds it exactly */
    int64_t i;
} js_num;

/* Where a scan stands, to go back to (js_save / js_restore). */
typedef struct js_mark {
    const char *p;
    int         depth;
} js_mark;

/* The state of one open array or object (js_array / js_object). */
typedef struct js_iter {
    size_t   n;        /* elements or members read so far */
    uint32_t obj;      /* the object's number, for its keys */
} js_iter;

/* A slot of the table of keys seen (duplicate detection). */
typedef struct js_slot {
    uint64_t hash;
    size_t   off, len;     /* the decoded key in keys */
    uint32_t obj;          /* 0: empty slot */
} js_slot;

/* Bytes that grow, starting in the scanner's own storage. */
typedef struct js_buf {
    char  *p;
    size_t len, cap;
    bool   heap;           /* p was allocated (else it is the scanner's) */
} js_buf;

typedef struct json_scan {
    const char *text, *p, *end;
    int         depth;
    bool        failed;      /* a syntax error (or nomem) stopped the scan */
    bool        nomem;       /* ... because an allocation failed */
    const char *fail_at;     /* where */
    const char *why;         /* static text */
    uint32_t    objects;     /* objects opened so far */
    js_buf      keys;        /* every key read, decoded, NUL-terminated */
    js_buf      str;         /* the last string read by js_string */
    js_slot    *slots;       /* open addressing, a power of two */
    size_t      nslots, nkeys;
    js_slot     slots0[64];
    char        keys0[512], str0[256];
} json_scan;

/* Starts a scan of text[0..len) (text may be NULL when len is 0). The
 * scanner holds pointers into itself: do not copy or move it. */
void js_init(json_scan *s, const char *text, size_t len);
/* Frees what the scan allocated; s may be scanned no more. */
void js_fini(json_scan *s);

/* The kind of the next value, after white space (JS_NONE at the end). */
js_kind js_peek(json_scan *s);

/* What the next value is, for messages: "an object", "an array", "a
 * string", "an integer", "a real", "true", "false", "null" ("nothing" when
 * there is none). Reads ahead without moving. */
const char *js_what(json_scan *s);

/* Reads the string that comes next: *str (NUL-terminated, *len bytes, no
 * NUL inside) is valid until the next js_string call. */
bool js_string(json_scan *s, const char **str, size_t *len);

/* Reads the number that comes next. */
bool js_number(json_scan *s, js_num *n);

/* The kind of the first element of the array that comes next (JS_NONE
 * when it is empty or malformed). Reads ahead without moving. */
js_kind js_peek_first(json_scan *s);

/* Reads true or false. */
bool js_bool(json_scan *s, bool *v);

/* Skips the next value, checking its syntax. */
bool js_skip(json_scan *s);

/* Opens the array / object that comes next; *it is then its iterator. */
bool js_array(json_scan *s, js_iter *it);
bool js_object(json_scan *s, js_iter *it);

/* True when one more element follows (the scan is then on it); false at
 * the closing bracket, which it reads, or on an error (s->failed). */
bool js_element(json_scan *s, js_iter *it);

/* The fast path for numeric arrays: reads up to max further elements of
 * the open array `it` into x[0..) as long as each is a number with a
 * finite float value (bytes: an integer 0..255). Stops before the first
 * element that is not (read it with the calls above), and before the
 * closing bracket (read it with js_element). Returns how many it read;
 * it->n counts them. */
size_t js_floats(json_scan *s, js_iter *it, float *x, size_t max, bool bytes);

/* True when one more member follows: its key (decoded, NUL-terminated,
 * valid until the next call on s) in *key / *klen (either may be NULL)
 * and the ':' are read and the scan is on its value. False at the closing
 * brace, which it reads, or on an error (s->failed): a duplicate key is
 * one. */
bool js_member(json_scan *s, js_iter *it, const char **key, size_t *klen);

/* Reads the white space after the document; false if anything else is
 * left. */
bool js_end(json_scan *s);

/* A position to come back to (for reading a value twice: first to check
 * it, or after a value was refused half-way, to skip it whole). */
js_mark js_save(const json_scan *s);
void    js_restore(json_scan *s, js_mark m);

/* Fails the scan at the current position with a static message (for a
 * caller's own syntax rule); returns false. */
bool js_fail(json_scan *s, const char *why);

/* Words the error that stopped the scan: DL_ERR_NOMEM, or DL_ERR_INVALID
 * with "bad JSON at line L, column C: why". */
dl_status js_error(const json_scan *s, dl_err *err);

#endif /* DL_SERVE_JSON_SCAN_H */
