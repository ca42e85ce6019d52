/* numfmt.c: float32 to the shortest decimal text that reads back exactly,
 * without printf: the hot path of every HTTP answer and Kafka output. */
#include "util/dl_util.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

/* 10^k for k in [-45, 53], each the double nearest to it: every float's
 * decimal exponent (-45 to 38) and the factors that bring any float to 9
 * digits before the point (10^-30 to 10^53). */
static const double pow10_tab[] = {
    1e-45, 1e-44, 1e-43, 1e-42, 1e-41, 1e-40, 1e-39, 1e-38, 1e-37, 1e-36,
    1e-35, 1e-34, 1e-33, 1e-32, 1e-31, 1e-30, 1e-29, 1e-28, 1e-27, 1e-26,
    1e-25, 1e-24, 1e-23, 1e-22, 1e-21, 1e-20, 1e-19, 1e-18, 1e-17, 1e-16,
    1e-15, 1e-14, 1e-13, 1e-12, 1e-11, 1e-10, 1e-9, 1e-8, 1e-7, 1e-6,
    1e-5, 1e-4, 1e-3, 1e-2, 1e-1, 1e0, 1e1, 1e2, 1e3, 1e4,
    1e5, 1e6, 1e7, 1e8, 1e9, 1e10, 1e11, 1e12, 1e13, 1e14,
    1e15, 1e16, 1e17, 1e18, 1e19, 1e20, 1e21, 1e22, 1e23, 1e24,
    1e25, 1e26, 1e27, 1e28, 1e29, 1e30, 1e31, 1e32, 1e33, 1e34,
    1e35, 1e36, 1e37, 1e38, 1e39, 1e40, 1e41, 1e42, 1e43, 1e44,
    1e45, 1e46, 1e47, 1e48, 1e49, 1e50, 1e51, 1e52, 1e53,
};
#define POW10(k) pow10_tab[(k) + 45]

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
    /* The decimal exponent e10 = floor(log10(a)): floor(e2 * log10(2))
     * from the binary one (78913 / 2^18 is log10(2) closely enough for
     * |e2| < 1650) is that or one less. No float lies within a rounding of
     * a power of ten without being one, so the comparison is exact. */
    int e2 = bits >= 0x00800000u ? (int)(bits >> 23) - 127 : ilogb(a);   /* denormals */
    int e10 = e2 >= 0 ? (e2 * 78913) >> 18 : -((-e2 * 78913 + (1 << 18) - 1) >> 18);
    if (a >= POW10(e10 + 1))
        e10++;
    /* Scaled so that v has 9 digits before the point: V in [1e8, 1e9),
     * and L, H its interval, each off the exact value by a rounding or
     * two (~1e-7). An integer inside (L + eps, H - eps) is surely inside
     * the interval; the interval is at least 5.9 units wide, so there is
     * one. */
    double s = POW10(8 - e10);
    double V = a * s, L = lo * s, H = hi * s;
    const double eps = 4e-6;
    uint32_t in_lo = (uint32_t)(L + eps) + 1;   /* the first integer above L + eps */
    uint32_t in_hi = (uint32_t)(H - eps);       /* the last one below H - eps */
    if ((double)in_hi == H - eps)
        in_hi--;
    /* The shortest: the largest j with a multiple of 10^j in [in_lo,
     * in_hi]. The multiples' quotients are [qlo, qhi], none of them a
     * multiple of 10 (j would be larger). Of those, the nearest to V. */
    uint32_t qlo = in_lo, qhi = in_hi;
    int j = 0;
    while ((qlo + 9) / 10 <= qhi / 10) {
        qlo = (qlo + 9) / 10;
        qhi /= 10;
        j++;
    }
    static const uint32_t unit[10] = {1, 10, 100, 1000, 10000, 100000, 1000000,
                                      10000000, 100000000, 1000000000};
    uint32_t q = qlo;
    if (qlo < qhi) {
        q = ((uint32_t)(2 * V) + unit[j]) / (2 * unit[j]);   /* V / 10^j rounded half up */
        q = q < qlo ? qlo : q > qhi ? qhi : q;
    }
    /* An integer within eps of an edge may or may not read back as v
     * (a midpoint reads back when v's last bit is 0): strtof settles it,
     * when that integer would be shorter. Rare: the edge zones are 1e-5
     * units wide. */
    uint32_t edge[2] = {in_lo - 1, in_hi + 1};
    bool in_zone[2] = {(double)edge[0] > L - eps, (double)edge[1] < H + eps};
    for (int i = 0; i < 2; i++) {
        if (!in_zone[i] || j >= 9 || edge[i] % unit[j + 1] != 0 ||
            !exact_reads_back((double)edge[i], e10 - 8, av))
            continue;
        int tz = j + 1;
        while (tz < 9 && edge[i] % unit[tz + 1] == 0)
            tz++;
        q = edge[i] / unit[tz];
        j = tz;
    }
    /* q * 10^j has 9 digits, or is 10^9 (9.99.. rounded up to 10.0..). */
    int p = 9 - j;
    if (j == 9) {
        p = 1;
        e10++;
    }
    char ds[12];
    put_digits(ds, q, p);
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
