/* json_scan.c: a strict JSON reader that reads values straight from the
 * bytes (no tree), as strict as jansson with duplicate keys refused. */
#include "serve/oip/json_scan.h"

#include <math.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#if defined(__SSE2__)
#include <emmintrin.h>
#endif

/* ---- failures and buffers ------------------------------------------------ */

/* The first error stops the scan; at the end of the input every error is
 * "unexpected end of input" (the byte that would have fitted is missing). */
static bool fail_at(json_scan *s, const char *at, const char *why)
{
    if (!s->failed) {
        s->failed = true;
        s->fail_at = at;
        s->why = at >= s->end ? "unexpected end of input" : why;
    }
    return false;
}

bool js_fail(json_scan *s, const char *why)
{
    return fail_at(s, s->p, why);
}

static bool out_of_memory(json_scan *s)
{
    if (!s->failed) {
        s->failed = s->nomem = true;
        s->fail_at = s->p;
        s->why = "out of memory";
    }
    return false;
}

static void buf_init(js_buf *b, char *mem, size_t cap)
{
    *b = (js_buf){.p = mem, .cap = cap};
}

static bool buf_add(json_scan *s, js_buf *b, const char *src, size_t n)
{
    if (n > b->cap - b->len) {
        if (n > SIZE_MAX / 4 - b->len)
            return out_of_memory(s);
        size_t cap = b->cap * 2;
        while (cap < b->len + n)
            cap *= 2;
        char *p = b->heap ? realloc(b->p, cap) : malloc(cap);
        if (!p)
            return out_of_memory(s);
        if (!b->heap)
            memcpy(p, b->p, b->len);
        b->p = p;
        b->cap = cap;
        b->heap = true;
    }
    if (n)
        memcpy(b->p + b->len, src, n);
    b->len += n;
    return true;
}

void js_init(json_scan *s, const char *text, size_t len)
{
    memset(s, 0, offsetof(json_scan, slots0));
    s->text = s->p = text ? text : "";
    s->end = s->text + (text ? len : 0);
    buf_init(&s->keys, s->keys0, sizeof(s->keys0));
    buf_init(&s->str, s->str0, sizeof(s->str0));
    memset(s->slots0, 0, sizeof(s->slots0));
    s->slots = s->slots0;
    s->nslots = sizeof(s->slots0) / sizeof(s->slots0[0]);
}

void js_fini(json_scan *s)
{
    if (s->keys.heap)
        free(s->keys.p);
    if (s->str.heap)
        free(s->str.p);
    if (s->slots != s->slots0)
        free(s->slots);
    s->keys.heap = s->str.heap = false;
    s->slots = s->slots0;
}

/* ---- tokens -------------------------------------------------------------- */

static void skip_ws(json_scan *s)
{
    const char *p = s->p;
    while (p < s->end && (*p == ' ' || *p == '\n' || *p == '\r' || *p == '\t'))
        p++;
    s->p = p;
}

static js_kind kind_of(char c)
{
    switch (c) {
    case '{': return JS_OBJECT;
    case '[': return JS_ARRAY;
    case '"': return JS_STRING;
    case 't': return JS_TRUE;
    case 'f': return JS_FALSE;
    case 'n': return JS_NULL;
    case '-': return JS_NUMBER;
    default:  return c >= '0' && c <= '9' ? JS_NUMBER : JS_NONE;
    }
}

js_kind js_peek(json_scan *s)
{
    if (s->failed)
        return JS_NONE;
    skip_ws(s);
    return s->p < s->end ? kind_of(*s->p) : JS_NONE;
}

js_kind js_peek_first(json_scan *s)
{
    if (js_peek(s) != JS_ARRAY)
        return JS_NONE;
    const char *p = s->p + 1;
    while (p < s->end && (*p == ' ' || *p == '\n' || *p == '\r' || *p == '\t'))
        p++;
    return p < s->end ? kind_of(*p) : JS_NONE;
}

static bool is_digit(char c)
{
    return c >= '0' && c <= '9';
}

/* Whether the number text at p has no fraction and no exponent (only
 * for naming it: the syntax is checked when it is read). */
static bool integer_text(const char *p, const char *end)
{
    if (p < end && *p == '-')
        p++;
    while (p < end && is_digit(*p))
        p++;
    return p >= end || (*p != '.' && *p != 'e' && *p != 'E');
}

const char *js_what(json_scan *s)
{
    switch (js_peek(s)) {
    case JS_OBJECT: return "an object";
    case JS_ARRAY:  return "an array";
    case JS_STRING: return "a string";
    case JS_NUMBER: return integer_text(s->p, s->end) ? "an integer" : "a real";
    case JS_TRUE:   return "true";
    case JS_FALSE:  return "false";
    case JS_NULL:   return "null";
    case JS_NONE:   break;
    }
    return "nothing";
}

/* ---- strings ------------------------------------------------------------- */

/* Length of the valid UTF-8 sequence at p (1..4), 0 for invalid bytes;
 * never reads at or past end. */
static size_t utf8_at(const char *p, const char *end)
{
    unsigned char b[5] = {0};
    size_t n = (size_t)(end - p) < 4 ? (size_t)(end - p) : 4;
    memcpy(b, p, n);
    return dl_utf8_len(b);
}

static int hex_digit(char c)
{
    if (c >= '0' && c <= '9')
        return c - '0';
    if (c >= 'a' && c <= 'f')
        return c - 'a' + 10;
    if (c >= 'A' && c <= 'F')
        return c - 'A' + 10;
    return -1;
}

/* The four hex digits at p. */
static bool hex4(const char *p, const char *end, uint32_t *v)
{
    if (end - p < 4)
        return false;
    *v = 0;
    for (int i = 0; i < 4; i++) {
        int d = hex_digit(p[i]);
        if (d < 0)
            return false;
        *v = *v << 4 | (uint32_t)d;
    }
    return true;
}

static size_t utf8_put(char *o, uint32_t cp)
{
    if (cp < 0x80) {
        o[0] = (char)cp;
        return 1;
    }
    if (cp < 0x800) {
        o[0] = (char)(0xC0 | cp >> 6);
        o[1] = (char)(0x80 | (cp & 0x3F));
        return 2;
    }
    if (cp < 0x10000) {
        o[0] = (char)(0xE0 | cp >> 12);
        o[1] = (char)(0x80 | (cp >> 6 & 0x3F));
        o[2] = (char)(0x80 | (cp & 0x3F));
        return 3;
    }
    o[0] = (char)(0xF0 | cp >> 18);
    o[1] = (char)(0x80 | (cp >> 12 & 0x3F));
    o[2] = (char)(0x80 | (cp >> 6 & 0x3F));
    o[3] = (char)(0x80 | (cp & 0x3F));
    return 4;
}

/* The \u escape at p (on the backslash), a surrogate pair as one code
 * point; *next is past it. */
static bool unicode_escape(json_scan *s, const char *p, uint32_t *cp, const char **next)
{
    const char *q = p + 6;
    if (!hex4(p + 2, s->end, cp))
        return fail_at(s, p, "invalid \\u escape");
    if (*cp >= 0xD800 && *cp <= 0xDBFF) {
        uint32_t lo;
        if (s->end - q < 6 || q[0] != '\\' || q[1] != 'u' || !hex4(q + 2, s->end, &lo) ||
            lo < 0xDC00 || lo > 0xDFFF)
            return fail_at(s, p, "invalid Unicode: a high surrogate without its low half");
        *cp = 0x10000 + ((*cp - 0xD800) << 10) + (lo - 0xDC00);
        q += 6;
    } else if (*cp >= 0xDC00 && *cp <= 0xDFFF) {
        return fail_at(s, p, "invalid Unicode: a lone low surrogate");
    }
    if (*cp == 0)
        return fail_at(s, p, "\\u0000 is not allowed in a string");
    *next = q;
    return true;
}

/* The string at s->p (on its opening quote), decoded and appended to out
 * (NULL: checked only). */
static bool read_string(json_scan *s, js_buf *out)
{
    const char *p = s->p + 1, *end = s->end;
    for (;;) {
        const char *run = p;
        while (p < end && (unsigned char)*p >= 0x20 && (unsigned char)*p < 0x80 && *p != '"' &&
               *p != '\\')
            p++;
        if (out && !buf_add(s, out, run, (size_t)(p - run)))
            return false;
        if (p >= end)
            return fail_at(s, p, "unterminated string");
        unsigned char c = (unsigned char)*p;
        if (c == '"') {
            s->p = p + 1;
            return true;
        }
        if (c < 0x20)
            return fail_at(s, p, "control character in a string");
        if (c >= 0x80) {
            size_t n = utf8_at(p, end);
            if (!n)
                return fail_at(s, p, "invalid UTF-8 in a string");
            if (out && !buf_add(s, out, p, n))
                return false;
            p += n;
            continue;
        }
        /* a backslash */
        if (end - p < 2)
            return fail_at(s, end, "unterminated string");
        char ch;
        switch (p[1]) {
        case '"':  ch = '"'; break;
        case '\\': ch = '\\'; break;
        case '/':  ch = '/'; break;
        case 'b':  ch = '\b'; break;
        case 'f':  ch = '\f'; break;
        case 'n':  ch = '\n'; break;
        case 'r':  ch = '\r'; break;
        case 't':  ch = '\t'; break;
        case 'u': {
            uint32_t cp;
            if (!unicode_escape(s, p, &cp, &p))
                return false;
            char u[4];
            if (out && !buf_add(s, out, u, utf8_put(u, cp)))
                return false;
            continue;
        }
        default:
            return fail_at(s, p, "invalid escape in a string");
        }
        if (out && !buf_add(s, out, &ch, 1))
            return false;
        p += 2;
    }
}

bool js_string(json_scan *s, const char **str, size_t *len)
{
    if (js_peek(s) != JS_STRING)
        return js_fail(s, "expected a string");
    s->str.len = 0;
    if (!read_string(s, &s->str) || !buf_add(s, &s->str, "", 1))
        return false;
    *str = s->str.p;
    *len = s->str.len - 1;
    return true;
}

/* ---- numbers and literals -------------------------------------------------- */

/* Exact powers of ten in a double (10^22 is the last one). */
static const double pow10_tab[] = {
    1e0,  1e1,  1e2,  1e3,  1e4,  1e5,  1e6,  1e7,  1e8,  1e9,  1e10, 1e11,
    1e12, 1e13, 1e14, 1e15, 1e16, 1e17, 1e18, 1e19, 1e20, 1e21, 1e22,
};

/* strtod of text[a..b) (a JSON number, which strtod reads the same way in
 * the C locale that dlserve runs in). */
static bool slow_value(json_scan *s, const char *a, const char *b, double *v)
{
    char small[64], *buf = small;
    size_t n = (size_t)(b - a);
    if (n >= sizeof(small) && !(buf = malloc(n + 1)))
        return out_of_memory(s);
    memcpy(buf, a, n);
    buf[n] = '\0';
    *v = strtod(buf, NULL);
    if (buf != small)
        free(buf);
    return true;
}

/* The number at s->p; with value false only its syntax is checked. */
static bool read_number(json_scan *s, js_num *n, bool value)
{
    const char *p = s->p, *end = s->end, *tok = p;
    bool neg = p < end && *p == '-';
    p += neg;
    if (p >= end || !is_digit(*p))
        return fail_at(s, p, "invalid number");
    /* The first 19 significant digits, enough for the exact cases below. */
    uint64_t m = 0;
    int sig = 0;
    long frac = 0, e = 0;
    bool integer = true;
    if (*p == '0')
        p++;   /* no leading zeros: "01" ends at the 0, and the 1 is refused */
    else
        for (; p < end && is_digit(*p); p++, sig++)
            if (sig < 19)
                m = m * 10 + (uint64_t)(*p - '0');
    if (p < end && *p == '.') {
        integer = false;
        if (++p >= end || !is_digit(*p))
            return fail_at(s, p, "invalid number: no digit after '.'");
        for (; p < end && is_digit(*p); p++) {
            if (sig == 0 && *p == '0') {
                frac++;      /* leading zeros of 0.00123 */
            } else if (sig++ < 19) {
                m = m * 10 + (uint64_t)(*p - '0');
                frac++;
            }
        }
    }
    if (p < end && (*p == 'e' || *p == 'E')) {
        integer = false;
        bool eneg = ++p < end && *p == '-';
        if (p < end && (*p == '+' || *p == '-'))
            p++;
        if (p >= end || !is_digit(*p))
            return fail_at(s, p, "invalid number: no digit in the exponent");
        for (; p < end && is_digit(*p); p++)
            if (e < 1000000)   /* saturates: far past the double range */
                e = e * 10 + (*p - '0');
        e = eneg ? -e : e;
    }
    s->p = p;
    if (!value)
        return true;
    n->integer = integer;
    n->fits = integer && sig <= 18;
    n->i = n->fits ? (neg ? -(int64_t)m : (int64_t)m) : 0;
    if (n->fits) {
        n->v = (double)n->i;   /* as jansson reads an integer: -0 is 0 */
        return true;
    }
    /* Up to 15 digits times an exact power of ten up to 10^22: one IEEE
     * operation on exact operands, so correctly rounded, as strtod is. */
    long e10 = e - frac;
    if (sig <= 15 && e10 >= -22 && e10 <= 22) {
        double v = e10 >= 0 ? (double)m * pow10_tab[e10] : (double)m / pow10_tab[-e10];
        n->v = neg ? -v : v;
        return true;
    }
    return slow_value(s, tok, p, &n->v);
}

bool js_number(json_scan *s, js_num *n)
{
    if (js_peek(s) != JS_NUMBER)
        return js_fail(s, "expected a number");
    return read_number(s, n, true);
}

static bool literal(json_scan *s, const char *word, size_t n)
{
    if ((size_t)(s->end - s->p) < n || memcmp(s->p, word, n) != 0)
        return fail_at(s, s->p, "invalid literal (true, false or null expected)");
    s->p += n;
    return true;
}

bool js_bool(json_scan *s, bool *v)
{
    js_kind k = js_peek(s);
    if (k != JS_TRUE && k != JS_FALSE)
        return js_fail(s, "expected true or false");
    *v = k == JS_TRUE;
    return k == JS_TRUE ? literal(s, "true", 4) : literal(s, "false", 5);
}

/* ---- arrays and objects ---------------------------------------------------- */

static bool open_container(json_scan *s, js_kind kind, js_iter *it)
{
    it->n = 0;
    it->obj = 0;
    if (js_peek(s) != kind)
        return js_fail(s, kind == JS_ARRAY ? "expected an array" : "expected an object");
    if (s->depth >= JS_MAX_DEPTH)
        return js_fail(s, "nested too deeply");
    s->depth++;
    s->p++;
    if (kind == JS_OBJECT)
        it->obj = ++s->objects;
    return true;
}

bool js_array(json_scan *s, js_iter *it)
{
    return open_container(s, JS_ARRAY, it);
}

bool js_object(json_scan *s, js_iter *it)
{
    return open_container(s, JS_OBJECT, it);
}

/* Before the next element or member: false at the closing bracket (read)
 * or on an error; true when the scan is on what comes next. */
static bool next_item(json_scan *s, js_iter *it, char close)
{
    if (s->failed)
        return false;
    skip_ws(s);
    if (s->p < s->end && *s->p == close) {
        s->p++;
        s->depth--;
        return false;
    }
    if (it->n > 0) {
        if (s->p >= s->end || *s->p != ',')
            return js_fail(s, close == ']' ? "expected ',' or ']'" : "expected ',' or '}'");
        s->p++;
        skip_ws(s);
    }
    return true;
}

bool js_element(json_scan *s, js_iter *it)
{
    if (!next_item(s, it, ']'))
        return false;
    if (s->p >= s->end || kind_of(*s->p) == JS_NONE)
        return js_fail(s, "expected a value");
    it->n++;
    return true;
}

static bool is_ws(char c)
{
    return c == ' ' || c == '\n' || c == '\r' || c == '\t';
}

/* Where an array's next element starts, from p just after the last one
 * read (n read so far): past blanks, and past the comma and its blanks
 * after an element; NULL when no comma follows the element. */
static const char *next_element(const char *p, const char *end, size_t n)
{
    while (p < end && is_ws(*p))
        p++;
    if (n > 0) {
        if (p >= end || *p != ',')
            return NULL;
        p++;
        while (p < end && is_ws(*p))
            p++;
    }
    return p;
}

/* The common number forms, [-]digits[.digits] with at most 15 digits in
 * all, read inline: the digits over an exact power of ten, one rounding,
 * so exactly strtod's value. False for any other form (read_number's). */
static bool short_number(const char **pp, const char *end, double *v, bool *integer)
{
    const char *p = *pp, *d0;
    bool neg = p < end && *p == '-';
    uint64_t m = 0;   /* wraps past 19 digits: such numbers are not taken */
    p += neg;
    d0 = p;
    if (p < end && *p == '0')
        p++;
    else
        while (p < end && is_digit(*p))
            m = m * 10 + (uint64_t)(*p++ - '0');
    size_t digits = (size_t)(p - d0), frac = 0;
    if (digits == 0)
        return false;
    *integer = true;
    if (p < end && *p == '.') {
        const char *f0 = ++p;
        while (p < end && is_digit(*p))
            m = m * 10 + (uint64_t)(*p++ - '0');
        frac = (size_t)(p - f0);
        if (frac == 0)
            return false;
        *integer = false;
    }
    if (digits + frac > 15 || (p < end && (is_digit(*p) || *p == 'e' || *p == 'E')))
        return false;
    double x = (double)m / pow10_tab[frac];
    /* -0 as an integer is 0 (jansson's reading); -0.0 is -0.0 (strtod's) */
    *v = neg && (m || !*integer) ? -x : x;
    *pp = p;
    return true;
}

#if defined(__SSE2__)
/* Bit i set where p[i] (i < 64) is c, or a digit for c == 0. */
static uint64_t mask64(const char *p, char c)
{
    uint64_t m = 0;
    for (int i = 0; i < 4; i++) {
        __m128i v = _mm_loadu_si128((const __m128i *)(const void *)(p + 16 * i)), hit;
        if (c) {
            hit = _mm_cmpeq_epi8(v, _mm_set1_epi8(c));
        } else {   /* '0'..'9': v - '0' below 10, as signed bytes from -128 */
            __m128i d = _mm_sub_epi8(v, _mm_set1_epi8((char)('0' - 128)));
            hit = _mm_cmplt_epi8(d, _mm_set1_epi8(-128 + 10));
        }
        m |= (uint64_t)(uint16_t)_mm_movemask_epi8(hit) << (16 * i);
    }
    return m;
}

/* The value of the len (1..8) digits at p, from one 8-byte load. */
static uint32_t digits8(const char *p, unsigned len)
{
    uint64_t w;
    memcpy(&w, p, sizeof(w));
    /* bytes past the digits are shifted out: no borrow reaches a digit */
    w = (w - 0x3030303030303030ULL) << (8 * (8 - len));
    w = w * 10 + (w >> 8);
    w = ((w & 0x000000FF000000FFULL) * (100 + (1000000ULL << 32)) +
         ((w >> 16) & 0x000000FF000000FFULL) * (1 + (10000ULL << 32))) >> 32;
    return (uint32_t)w;
}

/* Bits 0..n-1 (n < 64). */
static uint64_t below(unsigned n)
{
    return (1ULL << n) - 1;
}

/* Runs of unsigned integers, "12,0,255,..." or "12, 0, 255, ...", 64
 * bytes of text at a time: the digits, commas and blanks of each block
 * found at once, then each number ended by a comma read from one 8-byte
 * load, none waiting for the one before (a byte loop's branches
 * mispredict on every change of length). p is on the first digit of an
 * element; takes up to max elements of at most 8 digits (bytes: up to
 * 255) while 72 bytes remain, and returns how many, *after on the comma
 * after the last taken. The rest is the byte loop's, which also reports
 * any error. */
static size_t int_run(const char *p, const char *end, float *x, size_t max, bool bytes,
                      const char **after)
{
    size_t got = 0;
    while (got < max && end - p >= 64 + 8) {
        uint64_t d = mask64(p, 0), c = mask64(p, ','), z = mask64(p, '0'), sp = mask64(p, ' ');
        /* the block's form holds up to its first other byte */
        uint64_t other = ~(d | c | sp);
        uint64_t stop = other ? below((unsigned)__builtin_ctzll(other)) : ~0ULL;
        /* Each comma followed by one blank (", "), else none: the elements
         * up to the first blank. */
        unsigned gap = 1;
        sp &= stop;
        if (sp && sp == (c << 1 & stop))
            gap = 2;
        else if (sp)
            stop &= below((unsigned)__builtin_ctzll(sp));
        uint64_t starts = c << gap | 1;
        /* no empty element, no leading zero (a 0 and then a digit) */
        uint64_t bad = (starts & c) | (z & starts & d >> 1);
        if (bad)
            stop &= below((unsigned)__builtin_ctzll(bad));
        /* elements ended by a comma (and its blank) inside the block */
        uint64_t ends = c & stop & (gap == 2 ? sp >> 1 : ~0ULL);
        if (!ends)
            break;
        unsigned at = 0;
        for (; ends && got < max; ends &= ends - 1) {
            unsigned e = (unsigned)__builtin_ctzll(ends), len = e - at;
            if (len > 8)
                break;
            uint32_t v = digits8(p + at, len);
            if (bytes && v > 255)
                break;
            x[got++] = (float)v;
            *after = p + e;
            at = e + gap;
        }
        p += at;
        if (ends)
            break;
    }
    return got;
}
#endif

/* The leading elements of the array that int_run takes, from where the
 * scan stands (js_floats' byte loop reads the rest). Kept apart from the
 * byte loop, whose code it would otherwise slow for the other forms. */
static __attribute__((noinline)) size_t int_run_at(json_scan *s, js_iter *it, float *x,
                                                   size_t max, bool bytes)
{
#if defined(__SSE2__)
    const char *end = s->end, *p = next_element(s->p, end, it->n), *after = p;
    if (!p)
        return 0;
    size_t got = int_run(p, end, x, max, bytes, &after);
    if (got) {
        it->n += got;
        s->p = after;
    }
    return got;
#else
    (void)s, (void)it, (void)x, (void)max, (void)bytes;
    return 0;
#endif
}

size_t js_floats(json_scan *s, js_iter *it, float *x, size_t max, bool bytes)
{
    size_t got = int_run_at(s, it, x, max, bytes);
    while (got < max && !s->failed) {
        /* s->p stays after the last element taken: the caller goes on
         * from there. */
        const char *end = s->end, *p = next_element(s->p, end, it->n);
        if (!p)
            break;
        const char *q = p;
        double v;
        bool integer;
        if (!short_number(&q, end, &v, &integer)) {
            if (p >= end || kind_of(*p) != JS_NUMBER)
                break;
            const char *keep = s->p;
            js_num n;
            s->p = p;
            if (!read_number(s, &n, true))
                return got;
            q = s->p;
            s->p = keep;
            v = n.v;
            integer = n.fits;
        }
        float f = (float)v;
        if (bytes ? !integer || v < 0 || v > 255 : !isfinite(f))
            break;
        x[got++] = f;
        it->n++;
        s->p = q;
    }
    return got;
}

static uint64_t hash_key(const char *p, size_t n, uint32_t obj)
{
    uint64_t h = 14695981039346656037ULL ^ obj;   /* FNV-1a */
    for (size_t i = 0; i < n; i++)
        h = (h ^ (unsigned char)p[i]) * 1099511628211ULL;
    return h;
}

static bool grow_slots(json_scan *s)
{
    size_t n = s->nslots * 2;
    js_slot *t = calloc(n, sizeof(*t));
    if (!t)
        return out_of_memory(s);
    for (size_t i = 0; i < s->nslots; i++) {
        if (!s->slots[i].obj)
            continue;
        size_t j = s->slots[i].hash & (n - 1);
        while (t[j].obj)
            j = (j + 1) & (n - 1);
        t[j] = s->slots[i];
    }
    if (s->slots != s->slots0)
        free(s->slots);
    s->slots = t;
    s->nslots = n;
    return true;
}

/* Records key keys[off..off+len) of object obj; false when the object
 * already has it (or out of memory: s->failed). */
static bool key_unique(json_scan *s, uint32_t obj, size_t off, size_t len)
{
    if ((s->nkeys + 1) * 2 > s->nslots && !grow_slots(s))
        return false;
    uint64_t h = hash_key(s->keys.p + off, len, obj);
    size_t mask = s->nslots - 1;
    for (size_t i = h & mask;; i = (i + 1) & mask) {
        js_slot *e = &s->slots[i];
        if (!e->obj) {
            *e = (js_slot){.hash = h, .off = off, .len = len, .obj = obj};
            s->nkeys++;
            return true;
        }
        if (e->hash == h && e->obj == obj && e->len == len &&
            memcmp(s->keys.p + e->off, s->keys.p + off, len) == 0)
            return false;
    }
}

bool js_member(json_scan *s, js_iter *it, const char **key, size_t *klen)
{
    if (!next_item(s, it, '}'))
        return false;
    if (s->p >= s->end || *s->p != '"')
        return js_fail(s, "expected a key (a string)");
    const char *at = s->p;
    size_t off = s->keys.len;
    if (!read_string(s, &s->keys) || !buf_add(s, &s->keys, "", 1))
        return false;
    size_t len = s->keys.len - off - 1;
    if (!key_unique(s, it->obj, off, len))
        return s->failed ? false : fail_at(s, at, "duplicate key in an object");
    skip_ws(s);
    if (s->p >= s->end || *s->p != ':')
        return js_fail(s, "expected ':' after a key");
    s->p++;
    skip_ws(s);
    if (s->p >= s->end || kind_of(*s->p) == JS_NONE)
        return js_fail(s, "expected a value");
    it->n++;
    if (key)
        *key = s->keys.p + off;
    if (klen)
        *klen = len;
    return true;
}

bool js_skip(json_scan *s)
{
    js_iter it;
    switch (js_peek(s)) {
    case JS_OBJECT:
        if (!js_object(s, &it))
            return false;
        while (js_member(s, &it, NULL, NULL))
            if (!js_skip(s))
                return false;
        return !s->failed;
    case JS_ARRAY:
        if (!js_array(s, &it))
            return false;
        while (js_element(s, &it))
            if (!js_skip(s))
                return false;
        return !s->failed;
    case JS_STRING: return read_string(s, NULL);
    case JS_NUMBER: return read_number(s, NULL, false);
    case JS_TRUE:   return literal(s, "true", 4);
    case JS_FALSE:  return literal(s, "false", 5);
    case JS_NULL:   return literal(s, "null", 4);
    case JS_NONE:   break;
    }
    return js_fail(s, "expected a value");
}

bool js_end(json_scan *s)
{
    if (s->failed)
        return false;
    skip_ws(s);
    return s->p == s->end || js_fail(s, "end of input expected after the value");
}

js_mark js_save(const json_scan *s)
{
    return (js_mark){.p = s->p, .depth = s->depth};
}

void js_restore(json_scan *s, js_mark m)
{
    s->p = m.p;
    s->depth = m.depth;
}

dl_status js_error(const json_scan *s, dl_err *err)
{
    if (s->nomem)
        return dl_err_set(err, DL_ERR_NOMEM, "out of memory reading JSON");
    int line = 1;
    const char *bol = s->text;
    for (const char *p = s->text; p < s->fail_at; p++)
        if (*p == '\n') {
            line++;
            bol = p + 1;
        }
    return dl_err_set(err, DL_ERR_INVALID, "bad JSON at line %d, column %zu: %s", line,
                      (size_t)(s->fail_at - bol) + 1, s->why ? s->why : "?");
}
