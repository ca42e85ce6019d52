/* prom.c: Prometheus text exposition: a family's HELP and TYPE lines, and
 * sample lines with escaped label values and round-trip exact values. */
#include "util/dl_util.h"

#include <inttypes.h>
#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* Integers below this magnitude are exact in a double. */
#define EXACT_INT 9007199254740992.0    /* 2^53 */

size_t dl_prom_fmt_value(char *buf, double v)
{
    const char *word = isnan(v) ? "NaN" : isinf(v) ? (v > 0 ? "+Inf" : "-Inf") : NULL;
    if (word) {
        size_t n = strlen(word);
        memcpy(buf, word, n + 1);
        return n;
    }
    /* Counters are whole numbers: digits, as an integer type prints them
     * ("1000000000000000", not "1e+15"). -0 is 0. */
    if (v == floor(v) && fabs(v) < EXACT_INT)
        return (size_t)snprintf(buf, DL_PROM_VALUE_CHARS, "%" PRId64, (int64_t)v);
    /* Else the shortest of 15, 16 and 17 significant digits that reads
     * back as v: 4e-05, not 3.9999999999999996e-05. 17 always does. */
    int n = 0;
    for (int prec = 15; prec <= 17; prec++) {
        n = snprintf(buf, DL_PROM_VALUE_CHARS, "%.*g", prec, v);
        if (strtod(buf, NULL) == v)
            break;
    }
    return (size_t)n;
}

void dl_prom_label(dl_sbuf *b, const char *value)
{
    const unsigned char *p = (const unsigned char *)value;
    while (*p) {
        size_t n = dl_utf8_len(p);
        if (n == 0) {
            dl_sbuf_add(b, "\xEF\xBF\xBD", 3);     /* U+FFFD for one bad byte */
            p++;
            continue;
        }
        switch (*p) {
        case '\\': dl_sbuf_add(b, "\\\\", 2); break;
        case '"':  dl_sbuf_add(b, "\\\"", 2); break;
        case '\n': dl_sbuf_add(b, "\\n", 2); break;
        default:   dl_sbuf_add(b, (const char *)p, n); break;
        }
        p += n;
    }
}

/* HELP text escapes backslash and newline only (a quote is literal). */
static void help_text(dl_sbuf *b, const char *help)
{
    for (const char *p = help; *p; p++) {
        if (*p == '\\')
            dl_sbuf_add(b, "\\\\", 2);
        else if (*p == '\n')
            dl_sbuf_add(b, "\\n", 2);
        else
            dl_sbuf_putc(b, *p);
    }
}

void dl_prom_family(dl_sbuf *b, const char *name, const char *type, const char *help)
{
    size_t nlen = strlen(name);
    dl_sbuf_add(b, "# HELP ", 7);
    dl_sbuf_add(b, name, nlen);
    dl_sbuf_putc(b, ' ');
    help_text(b, help);
    dl_sbuf_add(b, "\n# TYPE ", 8);
    dl_sbuf_add(b, name, nlen);
    dl_sbuf_putc(b, ' ');
    dl_sbuf_add(b, type, strlen(type));
    dl_sbuf_putc(b, '\n');
}

void dl_prom_sample(dl_sbuf *b, const char *name, double value, ...)
{
    dl_sbuf_add(b, name, strlen(name));
    va_list ap;
    va_start(ap, value);
    bool labels = false;
    for (const char *key; (key = va_arg(ap, const char *)) != NULL; labels = true) {
        const char *val = va_arg(ap, const char *);
        dl_sbuf_putc(b, labels ? ',' : '{');
        dl_sbuf_add(b, key, strlen(key));
        dl_sbuf_add(b, "=\"", 2);
        dl_prom_label(b, val ? val : "");
        dl_sbuf_putc(b, '"');
    }
    if (labels)
        dl_sbuf_putc(b, '}');
    va_end(ap);
    char text[DL_PROM_VALUE_CHARS];
    size_t n = dl_prom_fmt_value(text, value);
    dl_sbuf_putc(b, ' ');
    dl_sbuf_add(b, text, n);
    dl_sbuf_putc(b, '\n');
}
