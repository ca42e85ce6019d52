/* test_json_scan.c: js_floats, the numeric arrays' fast path, on arrays
 * made at random of elements whose reading is known: every value it
 * takes is strtod's, it stops exactly where the first element that is
 * not a finite float (bytes: an integer 0..255) begins, and the whole
 * array is accepted exactly when jansson accepts it. The arrays are
 * mostly runs of unsigned integers ("12,0,255" or "12, 0, 255"), read 64
 * bytes at a time, with faults and other forms at random places, block
 * edges among them. */
#define _POSIX_C_SOURCE 200809L
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <criterion/criterion.h>
#include <jansson.h>

#include "serve/oip/json_scan.h"

#define MAX_ELEMS 400

typedef enum kind {
    UINT,          /* digits, no leading zero: the fast path's form */
    OTHER_NUMBER,  /* a valid number of another form: -7, 0.25, 3e2, -0 */
    HUGE_NUMBER,   /* valid JSON, not a finite float: 1e39 */
    LEADING_ZERO,  /* 012: the scanner reads the 0, then refuses the 1 */
    EMPTY,         /* nothing between two commas */
    BROKEN,        /* - or 1. : refused where it stands */
} kind;

typedef struct elem {
    kind k;
    char text[24];
} elem;

static unsigned long long rng = 88172645463325252ULL;

static unsigned rnd(unsigned n)
{
    rng ^= rng << 13, rng ^= rng >> 7, rng ^= rng << 17;   /* xorshift64 */
    return (unsigned)(rng % n);
}

static void make_elem(elem *e, bool faults)
{
    static const char *other[] = {"-7", "0.25", "3e2", "-0", "255.0", "1E1", "0"};
    static const char *broken[] = {"-", "1.", "1e", "+1", "x"};
    unsigned r = rnd(1000);
    if (faults && r < 6) {
        e->k = LEADING_ZERO;
        snprintf(e->text, sizeof(e->text), "0%u", rnd(100));
    } else if (faults && r < 10) {
        e->k = EMPTY;
        e->text[0] = '\0';
    } else if (faults && r < 14) {
        e->k = BROKEN;
        snprintf(e->text, sizeof(e->text), "%s", broken[rnd(5)]);
    } else if (r < 30) {
        e->k = OTHER_NUMBER;
        snprintf(e->text, sizeof(e->text), "%s", other[rnd(7)]);
    } else if (r < 33) {
        e->k = HUGE_NUMBER;
        snprintf(e->text, sizeof(e->text), "1e39");
    } else {
        /* 1 to 10 digits, the short ones most often (pixels, counts) */
        unsigned len = r < 900 ? 1 + rnd(3) : 1 + rnd(10);
        e->k = UINT;
        if (len == 1) {
            snprintf(e->text, sizeof(e->text), "%u", rnd(10));
        } else {
            e->text[0] = (char)('1' + rnd(9));
            for (unsigned i = 1; i < len; i++)
                e->text[i] = (char)('0' + rnd(10));
            e->text[len] = '\0';
        }
    }
}

/* Whether js_floats takes the element (as the value strtod reads). */
static bool taken(const elem *e, bool bytes)
{
    if (e->k == LEADING_ZERO)
        return true;   /* its 0, as JSON's grammar reads it */
    if (e->k != UINT && e->k != OTHER_NUMBER)
        return false;
    double v = strtod(e->text, NULL);
    if (bytes)
        return strpbrk(e->text, ".eE") == NULL && v >= 0 && v <= 255;
    return isfinite((float)v);
}

/* One array of n elements into text, their separator sep but now and
 * then another; returns its length. */
static size_t make_array(char *text, elem *el, size_t n, const char *sep, bool faults)
{
    static const char *seps[] = {",", ", ", " ,", ",\n", ",  ", " , "};
    size_t len = 0;
    text[len++] = '[';
    for (size_t i = 0; i < n; i++) {
        make_elem(&el[i], faults);
        if (i)
            len += (size_t)sprintf(text + len, "%s", rnd(100) < 2 ? seps[rnd(6)] : sep);
        len += (size_t)sprintf(text + len, "%s", el[i].text);
    }
    text[len++] = ']';
    text[len] = '\0';
    return len;
}

static void check_array(const char *text, size_t len, const elem *el, size_t n, size_t max,
                        bool bytes)
{
    json_scan s;
    js_iter it;
    float x[MAX_ELEMS + 8];
    js_init(&s, text, len);
    cr_assert(js_array(&s, &it));
    size_t got = js_floats(&s, &it, x, max, bytes);

    size_t want = 0;
    while (want < n && want < max && taken(&el[want], bytes)) {
        want++;
        if (el[want - 1].k == LEADING_ZERO)
            break;
    }
    cr_assert_eq(got, want, "%s (bytes %d, max %zu): %zu taken, want %zu", text, bytes, max,
                 got, want);
    cr_assert_eq(it.n, got);
    for (size_t i = 0; i < got; i++) {
        /* -0 as an integer is 0, as jansson reads it */
        float v = el[i].k == LEADING_ZERO || strcmp(el[i].text, "-0") == 0
                      ? 0.0f
                      : (float)strtod(el[i].text, NULL);
        cr_assert(memcmp(&v, &x[i], sizeof(v)) == 0, "%s: element %zu read %.9g, want %.9g",
                  text, i, (double)x[i], (double)v);
    }

    /* The rest of the array, element by element, then the verdict. */
    while (js_element(&s, &it)) {
        if (js_peek(&s) != JS_NUMBER) {
            js_fail(&s, "not a number");
            break;
        }
        js_num num;
        if (!js_number(&s, &num))
            break;
    }
    bool accepted = !s.failed && s.p == s.end;
    js_fini(&s);
    json_error_t jerr;
    json_t *j = json_loadb(text, len, 0, &jerr);
    cr_assert_eq(accepted, j != NULL, "%s: scanner %s, jansson %s", text,
                 accepted ? "accepts" : "refuses", j ? "accepts" : jerr.text);
    json_decref(j);
}

Test(json_scan, floats_of_random_arrays)
{
    static char text[MAX_ELEMS * 32];
    static elem el[MAX_ELEMS];
    for (int round = 0; round < 4000; round++) {
        size_t n = 1 + rnd(MAX_ELEMS);
        /* compact, as most serializers write; ", " as Python's json does */
        size_t len = make_array(text, el, n, round % 5 < 3 ? "," : ", ", round % 4 != 0);
        size_t max = rnd(4) == 0 ? rnd((unsigned)n + 3) : n;
        check_array(text, len, el, n, max, round % 3 == 0);
    }
}

/* Elements that end on the last bytes of a 64-byte block, or cross into
 * the next, compact or with ", ", with one fault at each place in turn:
 * a bad element, or a separator other than the array's. */
Test(json_scan, floats_across_block_edges)
{
    static char text[4096];
    static elem el[MAX_ELEMS];
    static const char *other_sep[] = {",", ", ", ",  ", " ,"};
    for (unsigned fault_at = 1; fault_at < 120; fault_at++) {
        for (unsigned width = 1; width <= 18; width++) {
            for (int sep_fault = 0; sep_fault < 5; sep_fault++) {
                const char *sep = width > 9 ? ", " : ",";
                size_t n = 150, len = 0;
                text[len++] = '[';
                for (size_t i = 0; i < n; i++) {
                    if (i)
                        len += (size_t)sprintf(text + len, "%s",
                                               sep_fault && i == fault_at
                                                   ? other_sep[sep_fault - 1] : sep);
                    elem *e = &el[i];
                    if (!sep_fault && i == fault_at) {
                        e->k = i % 3 == 0 ? LEADING_ZERO : i % 3 == 1 ? EMPTY : BROKEN;
                        snprintf(e->text, sizeof(e->text), "%s",
                                 e->k == LEADING_ZERO ? "07" : e->k == EMPTY ? "" : "1.");
                    } else {
                        e->k = UINT;
                        /* widths vary so that commas fall on every offset */
                        unsigned w = (unsigned)(1 + (i * width) % 9);
                        for (unsigned d = 0; d < w; d++)
                            e->text[d] = (char)('1' + (i + d) % 9);
                        e->text[w] = '\0';
                    }
                    len += (size_t)sprintf(text + len, "%s", e->text);
                }
                text[len++] = ']';
                text[len] = '\0';
                check_array(text, len, el, n, n, false);
                check_array(text, len, el, n, n, true);
            }
        }
    }
}

/* An array of ", " with one separator of another form, its comma at each
 * offset of the first two 64-byte blocks in turn (the last byte of a
 * block among them), the element after it of each kind. */
Test(json_scan, floats_separator_changes)
{
    static char text[4096];
    static elem el[MAX_ELEMS];
    static const char *seps[] = {",", ",\n", ",  ", " ,", ","};
    static const char *next[] = {"5", "23", "5", "7", "-7"};
    for (unsigned at = 1; at < 140; at++) {
        for (int v = 0; v < 5; v++) {
            /* the first element's width puts a comma at offset `at` */
            unsigned w0 = 1 + (at - 1) % 3;
            size_t n = 0, len = 0;
            text[len++] = '[';
            for (unsigned i = 0; i < w0; i++)
                el[n].text[i] = (char)('1' + i);
            el[n].text[w0] = '\0';
            el[n++].k = UINT;
            len += (size_t)sprintf(text + len, "%s", el[0].text);
            for (unsigned k = 0; k < (at - w0) / 3; k++) {
                snprintf(el[n].text, sizeof(el[n].text), "%zu", n % 10);
                el[n].k = UINT;
                len += (size_t)sprintf(text + len, ", %s", el[n++].text);
            }
            cr_assert_eq(len - 1, at);   /* the other separator's comma at `at` */
            snprintf(el[n].text, sizeof(el[n].text), "%s", next[v]);
            el[n].k = next[v][0] == '-' ? OTHER_NUMBER : UINT;
            len += (size_t)sprintf(text + len, "%s%s", seps[v], el[n++].text);
            for (int i = 0; i < 60; i++) {
                snprintf(el[n].text, sizeof(el[n].text), "%d", 10 + i);
                el[n].k = UINT;
                len += (size_t)sprintf(text + len, ", %s", el[n++].text);
            }
            text[len++] = ']';
            text[len] = '\0';
            check_array(text, len, el, n, n, false);
            check_array(text, len, el, n, n, true);
        }
    }
}
