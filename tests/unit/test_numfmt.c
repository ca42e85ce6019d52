/* test_numfmt.c: dl_fmt_float reads back exactly (strtof) and is as short
 * as the shortest %.Ng that does, over special values and millions of
 * random bit patterns; dl_first_nonfinite agrees with isfinite. */
#include <criterion/criterion.h>
#include <math.h>
#include <float.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "util/dl_util.h"

/* Significant digits of the shortest %.Ng that reads back as v. */
static int shortest_printf(float v)
{
    char buf[64];
    for (int p = 1; p <= 9; p++) {
        snprintf(buf, sizeof(buf), "%.*g", p, (double)v);
        if (strtof(buf, NULL) == v)
            return p;
    }
    return 9;
}

/* Significant digits in our text (no leading zeros, no exponent). */
static int digits_of(const char *s)
{
    int n = 0;
    bool lead = true;
    for (; *s && *s != 'e'; s++) {
        if (*s < '0' || *s > '9')
            continue;
        if (lead && *s == '0')
            continue;
        lead = false;
        n++;
    }
    /* trailing zeros of an integer ("100") are not significant */
    return n;
}

/* Of the decimals with as many significant digits as ours, ours is the
 * one nearest v, whenever that nearest one (printf's, correctly rounded)
 * reads back as v at all. Long double holds both decimals within 1e-18
 * of their value; the slack covers the half-way cases, which ours
 * settles from a double approximation of v (error ~1e-7 of the last
 * digit), not the one-digit slips a wrong rounding makes. */
static void check_nearest(float v, const char *buf, int p)
{
    char ref[64];
    snprintf(ref, sizeof(ref), "%.*e", p - 1, (double)v);
    if (strtof(ref, NULL) != v)
        return;
    long double exact = v, ours = strtold(buf, NULL), best = strtold(ref, NULL);
    cr_assert(fabsl(ours - exact) <= fabsl(best - exact) * (1 + 1e-6L),
              "%a printed as '%s', but '%s' is nearer", (double)v, buf, ref);
}

static void check(float v)
{
    char buf[DL_FLOAT_CHARS];
    size_t n = dl_fmt_float(buf, v);
    cr_assert_eq(n, strlen(buf));
    cr_assert_lt(n, DL_FLOAT_CHARS);
    char *end;
    float back = strtof(buf, &end);
    cr_assert_eq(*end, '\0', "'%s' has trailing text", buf);
    cr_assert(memcmp(&back, &v, sizeof(v)) == 0, "%a printed as '%s' reads back as %a",
              (double)v, buf, (double)back);
    if (v != 0.0f && strchr(buf, '.'))   /* integers carry non-significant zeros */
        cr_assert_leq(digits_of(buf), shortest_printf(v), "%a: '%s' is not the shortest",
                      (double)v, buf);
    if (v != 0.0f) {
        int p = digits_of(buf);
        if (!strchr(buf, '.') && !strchr(buf, 'e'))   /* "67108870": 7 of them */
            for (size_t i = n; i > 0 && buf[i - 1] == '0'; i--)
                p--;
        check_nearest(v, buf, p);
    }
}

Test(numfmt, special_values)
{
    char buf[DL_FLOAT_CHARS];
    dl_fmt_float(buf, NAN);
    cr_assert_str_eq(buf, "null");
    dl_fmt_float(buf, -INFINITY);
    cr_assert_str_eq(buf, "null");
    dl_fmt_float(buf, 0.0f);
    cr_assert_str_eq(buf, "0");
    dl_fmt_float(buf, -0.0f);
    cr_assert_str_eq(buf, "-0");
    dl_fmt_float(buf, 0.1f);
    cr_assert_str_eq(buf, "0.1");
    dl_fmt_float(buf, 1.0f);
    cr_assert_str_eq(buf, "1");
    dl_fmt_float(buf, 100.0f);
    cr_assert_str_eq(buf, "100");
    dl_fmt_float(buf, 0.25f);
    cr_assert_str_eq(buf, "0.25");
    dl_fmt_float(buf, 1.5e-7f);
    cr_assert_str_eq(buf, "1.5e-07");
    dl_fmt_float(buf, 3e20f);
    cr_assert_str_eq(buf, "3e+20");
    dl_fmt_float(buf, 0.99999994f);   /* the float just below 1 */
    cr_assert_str_eq(buf, "0.99999994");
    float extremes[] = { FLT_MIN, FLT_MAX, -FLT_MAX, FLT_TRUE_MIN, 1e-5f, 9.9999e-6f,
                         1e15f, 999999999e6f, 16777216.0f, 16777217.0f, 0.3f, 1.0f / 3 };
    for (size_t i = 0; i < sizeof(extremes) / sizeof(extremes[0]); i++)
        check(extremes[i]);
}

/* Every float32 bit pattern is equally likely: all exponents, denormals
 * included. */
Test(numfmt, random_bit_patterns, .timeout = 120)
{
    uint64_t s = 0x9E3779B97F4A7C15ull;
    for (int i = 0; i < 2000000; i++) {
        s ^= s << 13;
        s ^= s >> 7;
        s ^= s << 17;
        uint32_t bits = (uint32_t)(s >> 16);
        float v;
        memcpy(&v, &bits, sizeof(v));
        if (isfinite(v))
            check(v);
    }
}

/* What a classifier emits: probabilities in [0, 1], densely. */
Test(numfmt, probabilities, .timeout = 120)
{
    for (uint32_t bits = 0x3f800000u; bits > 0x30000000u; bits -= 97) {
        float v;
        memcpy(&v, &bits, sizeof(v));
        check(v);
    }
}

/* Every power of two (its interval is narrower below than above) and the
 * floats beside it. */
Test(numfmt, powers_of_two_and_neighbours)
{
    for (uint32_t e = 0; e < 255; e++)
        for (int d = -3; d <= 3; d++) {
            uint32_t bits = (e << 23) + (uint32_t)d;
            if ((e == 0 && d < 0) || (e == 254 && d > 0))
                continue;
            float v;
            memcpy(&v, &bits, sizeof(v));
            check(v);
            check(-v);
        }
}

/* dl_first_nonfinite agrees with isfinite on random bit patterns at any
 * alignment, and finds the first culprit of several. */
Test(numfmt, first_nonfinite)
{
    uint64_t s = 0x243F6A8885A308D3ull;
    unsigned char buf[4 * 67 + 3];
    for (int round = 0; round < 20000; round++) {
        size_t off = (size_t)round % 4, n = (size_t)round % 68, want = n;
        for (size_t i = 0; i < n; i++) {
            s ^= s << 13;
            s ^= s >> 7;
            s ^= s << 17;
            uint32_t bits = (uint32_t)(s >> 16);
            if (round % 3)   /* mostly finite: a culprit far into the values */
                bits &= 0xbfffffffu;
            float v;
            memcpy(&v, &bits, sizeof(v));
            if (want == n && !isfinite(v))
                want = i;
            memcpy(buf + off + 4 * i, &bits, sizeof(bits));
        }
        cr_assert_eq(dl_first_nonfinite(buf + off, n), want, "round %d: n %zu", round, n);
    }
    const float edges[] = {FLT_MAX, -FLT_MAX, FLT_MIN, -0.0f, 1e-45f, INFINITY};
    cr_expect_eq(dl_first_nonfinite(edges, 6), 5);
    cr_expect_eq(dl_first_nonfinite(edges, 5), 5);
}
