/* sbuf.c: a growable, NUL-terminated string buffer for text built piece
 * by piece (Prometheus exposition, CSV, SVG), a UTF-8 check for it, and a
 * bounded string copy. */
#define _POSIX_C_SOURCE 200809L   /* strnlen */
#include "util/dl_util.h"

#include <stdlib.h>
#include <string.h>

static void reserve(dl_sbuf *b, size_t more)
{
    if (b->oom || b->len + more + 1 <= b->cap)
        return;
    size_t cap = b->cap ? b->cap : 4096;
    while (cap < b->len + more + 1)
        cap *= 2;
    char *p = realloc(b->s, cap);
    if (!p) {
        b->oom = true;
        return;
    }
    b->s = p;
    b->cap = cap;
}

void dl_sbuf_add(dl_sbuf *b, const char *s, size_t n)
{
    reserve(b, n);
    if (b->oom)
        return;
    memcpy(b->s + b->len, s, n);
    b->len += n;
    b->s[b->len] = '\0';
}

void dl_sbuf_putc(dl_sbuf *b, char c)
{
    dl_sbuf_add(b, &c, 1);
}

void dl_sbuf_printf(dl_sbuf *b, const char *fmt, ...)
{
    if (b->oom)
        return;
    va_list ap;
    va_start(ap, fmt);
    int n = vsnprintf(NULL, 0, fmt, ap);
    va_end(ap);
    if (n < 0) {
        b->oom = true;
        return;
    }
    reserve(b, (size_t)n);
    if (b->oom)
        return;
    va_start(ap, fmt);
    vsnprintf(b->s + b->len, (size_t)n + 1, fmt, ap);
    va_end(ap);
    b->len += (size_t)n;
}

void dl_sbuf_free(dl_sbuf *b)
{
    free(b->s);
    memset(b, 0, sizeof(*b));
}

size_t dl_utf8_len(const unsigned char *p)
{
    if (p[0] < 0x80)
        return 1;
    size_t n;
    uint32_t cp;
    if ((p[0] & 0xE0) == 0xC0) { n = 2; cp = p[0] & 0x1F; }
    else if ((p[0] & 0xF0) == 0xE0) { n = 3; cp = p[0] & 0x0F; }
    else if ((p[0] & 0xF8) == 0xF0) { n = 4; cp = p[0] & 0x07; }
    else return 0;
    for (size_t i = 1; i < n; i++) {
        if ((p[i] & 0xC0) != 0x80)   /* also stops at the terminating NUL */
            return 0;
        cp = (cp << 6) | (p[i] & 0x3F);
    }
    static const uint32_t min_cp[5] = {0, 0, 0x80, 0x800, 0x10000};
    if (cp < min_cp[n] || cp > 0x10FFFF || (cp >= 0xD800 && cp <= 0xDFFF))
        return 0;
    return n;
}

void dl_sbuf_json_string(dl_sbuf *b, const char *s)
{
    static const char hex[] = "0123456789abcdef";
    dl_sbuf_putc(b, '"');
    for (const char *run = s;; s++) {
        unsigned char c = (unsigned char)*s;
        if (c >= 0x20 && c != '"' && c != '\\')
            continue;
        dl_sbuf_add(b, run, (size_t)(s - run));
        if (!c)
            break;
        if (c == '"' || c == '\\') {
            char e[2] = {'\\', (char)c};
            dl_sbuf_add(b, e, 2);
        } else {
            char e[6] = {'\\', 'u', '0', '0', hex[c >> 4], hex[c & 15]};
            dl_sbuf_add(b, e, 6);
        }
        run = s + 1;
    }
    dl_sbuf_putc(b, '"');
}

void dl_sbuf_int(dl_sbuf *b, int64_t v)
{
    char tmp[24];
    size_t n = 0;
    uint64_t u = v < 0 ? 0 - (uint64_t)v : (uint64_t)v;
    do {
        tmp[sizeof(tmp) - 1 - n++] = (char)('0' + u % 10);
        u /= 10;
    } while (u);
    if (v < 0)
        tmp[sizeof(tmp) - 1 - n++] = '-';
    dl_sbuf_add(b, tmp + sizeof(tmp) - n, n);
}

void dl_strlcpy(char *dst, const char *src, size_t cap)
{
    size_t n = strnlen(src, cap - 1);
    memcpy(dst, src, n);
    dst[n] = '\0';
}
