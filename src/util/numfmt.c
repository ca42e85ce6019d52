/* numfmt.c: float32 to the shortest decimal text that reads back exactly,
 * without printf: the hot path of every HTTP answer and Kafka output. */
#include "util/dl_util.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

/* Exact powers of ten in a double (10^22 is the last one). */
static const double pow10_tab[] = {
    1e0,  1e1,  1e2,  1e3,  1e4,  1e5,  1e6,  1e7,  1e8,  1e9,  1e10, 1e11,
    1e12, 1e13, 1e14, 1e15, 1e16, 1e17, 1e18, 1e19, 1e20, 1e21, 1e22,
};

/* d * 10^k with at most two roundings (|k| <= 66 covers every float). */
static double scale10(double d, int k)
{
    while (k > 22) {
        d *= 1e22;
        k -= 22;
    }
    while (k < -22) {
        d /= 1e22;
        k += 22;
    }
    return k >= 0 ? d * pow10_tab[k] : d / pow10_tab[-k];
}

static size_t put_uint(char *buf, uint64_t u)
{
    char tmp[24];
    size_t n = 0;
    do {
        tmp[n++] = (char)('0' + u % 10);
        u /= 10;
    } while (u);
    for (size_t i = 0; i < n; i++)
        buf[i] = tmp[n - 1 - i];
    return n;
}

/* "00" to "99". */
static const char two_digits[201] =
    "00010203040506070809101112131415161718192021222324252627282930313233343536373839"
    "40414243444546474849505152535455565758596061626364656667686970717273747576777879"
    "8081828384858687888990919293949596979899";

/* The p decimal digits of u (u < 10^p), two at a time from the end. */
static void put_digits(char *buf, uint32_t u, int p)
{
    char *e = buf + p;
    while (u >= 100) {
        e -= 2;
        memcpy(e, two_digits + 2 * (u % 100), 2);
        u /= 100;
    }
    if (u >= 10) {
        e -= 2;
        memcpy(e, two_digits + 2 * u, 2);
    } else {
        *--e = (char)('0' + u);
    }
}

/* True when strtof reads d * 10^e back as v: the slow, exact check for a
 * candidate on the edge of v's interval. */
static bool exact_reads_back(double d, int e, float v)
{
    char text[48];
    size_t n = put_uint(text, (uint64_t)d);
    text[n++] = 'e';
    if (e < 0) {
        text[n++] = '-';
        e = -e;
    }
    n += put_uint(text + n, (uint64_t)e);
    text[n] = '\0';
    return strtof(text, NULL) == v;
}

size_t dl_fmt_float(char *buf, float v)
{
    if (!isfinite(v)) {
        memcpy(buf, "null", 5);
        return 4;
    }
    size_t n = 0;
    if (signbit(v))
        buf[n++] = '-';
    float av = fabsf(v);
    if (av == 0.0f) {
        buf[n++] = '0';
        buf[n] = '\0';
        return n;
    }
    /* v's rounding interval (lo, hi): the midpoints to its neighbours,
     * which a double holds exactly; past FLT_MAX it ends where the next
     * float would be. */
    double a = av;
    uint32_t bits;
    memcpy(&bits, &av, sizeof(bits));
    uint32_t down = bits - 1, up = bits + 1;   /* the neighbours (av > 0) */
    float fdown, fup;
    memcpy(&fdown, &down, sizeof(fdown));
    memcpy(&fup, &up, sizeof(fup));
    double lo = (a + (double)fdown) / 2;
    double hi = isinf(fup) ? a + (a - lo) : (a + (double)fup) / 2;
    /* Scaled by 10^k so that v has 9 digits before the point: V in
     * [1e8, 1e9). The decimal exponent comes from the binary one (its
     * estimate is off by at most one). */
    int e2 = (int)(bits >> 23) - 127;
    int e10 = (int)floor(e2 * 0.30102999566398120);
    double V = scale10(a, 8 - e10);
    while (V >= 1e9)
        V = scale10(a, 8 - ++e10);
    while (V < 1e8)
        V = scale10(a, 8 - --e10);
    double L = scale10(lo, 8 - e10), H = scale10(hi, 8 - e10);
    /* V, L and H are within a few ulps (~1e-7) of the exact values: a
     * candidate that close to an edge is settled by strtof (rare). At 9
     * digits the interval is at least 3 units wide, so the loop ends. */
    const double eps = 4e-6;
    /* The candidate of p digits is V rounded to a multiple of 10^(9-p):
     * from N = floor(V), (N + 10^(9-p) / 2) / 10^(9-p) is that quotient
     * for p < 9 (V's fraction cannot carry it further). The loop over the
     * constant table unrolls, so that each division is a multiplication. */
    static const uint32_t unit[9] = {100000000, 10000000, 1000000, 100000, 10000,
                                     1000, 100, 10, 1};
    uint64_t N = (uint64_t)V, q = 0;
    int p = 1;
#if defined(__GNUC__) && !defined(__clang__)
#pragma GCC unroll 9
#endif
    for (int i = 0; i < 9; i++) {
        q = i < 8 ? (N + unit[i] / 2) / unit[i] : (uint64_t)(V + 0.5);   /* round half up */
        double d = (double)(q * unit[i]);
        p = i + 1;
        if (d > L + eps && d < H - eps)
            break;
        if (d > L - eps && d < H + eps && exact_reads_back(d, e10 - 8, av))
            break;
    }
    if (q * unit[p - 1] >= 1000000000u) {   /* 9.99.. rounded up to 10.0.. */
        q /= 10;   /* a power of ten: p digits again after the strip below */
        e10++;
    }
    while (p > 1 && q % 10 == 0) {   /* 1.50 -> 1.5 */
        q /= 10;
        p--;
    }
    char ds[12];
    put_digits(ds, (uint32_t)q, p);
    if (e10 >= -5 && e10 < 15) {
        if (e10 < 0) {                          /* 0.000ddd */
            buf[n++] = '0';
            buf[n++] = '.';
            for (int i = -1; i > e10; i--)
                buf[n++] = '0';
            memcpy(buf + n, ds, (size_t)p);
            n += (size_t)p;
        } else if (e10 + 1 >= p) {              /* ddd000 */
            memcpy(buf + n, ds, (size_t)p);
            n += (size_t)p;
            for (int i = p; i <= e10; i++)
                buf[n++] = '0';
        } else {                                 /* dd.ddd */
            memcpy(buf + n, ds, (size_t)e10 + 1);
            n += (size_t)e10 + 1;
            buf[n++] = '.';
            memcpy(buf + n, ds + e10 + 1, (size_t)(p - e10 - 1));
            n += (size_t)(p - e10 - 1);
        }
    } else {                                     /* d.ddde-XX */
        buf[n++] = ds[0];
        if (p > 1) {
            buf[n++] = '.';
            memcpy(buf + n, ds + 1, (size_t)p - 1);
            n += (size_t)p - 1;
        }
        buf[n++] = 'e';
        buf[n++] = e10 < 0 ? '-' : '+';
        int ae = e10 < 0 ? -e10 : e10;
        if (ae < 10)
            buf[n++] = '0';
        n += put_uint(buf + n, (uint64_t)ae);
    }
    buf[n] = '\0';
    return n;
}

/* Without its sign a value is Inf or NaN when it is 0x7f800000 or more,
 * which adding 0x00800000 carries into bit 31: and, add and or over every
 * value, which the compiler vectorizes. */
size_t dl_first_nonfinite(const void *p, size_t n)
{
    const unsigned char *b = p;
    uint32_t acc = 0;
    for (size_t i = 0; i < n; i++) {
        uint32_t u;
        memcpy(&u, b + 4 * i, sizeof(u));
        acc |= (u & 0x7fffffffu) + 0x00800000u;
    }
    if (!(acc & 0x80000000u))
        return n;
    size_t i = 0;
    for (uint32_t u; i < n; i++) {
        memcpy(&u, b + 4 * i, sizeof(u));
        if ((u & 0x7f800000u) == 0x7f800000u)
            break;
    }
    return i;
}
