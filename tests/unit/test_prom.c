/* test_prom.c: the Prometheus text helper: a family's HELP and TYPE lines
 * written once, sample lines with escaped labels, and values that read
 * back exactly (integers as digits, +Inf, -Inf, NaN). */
#include <float.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include <criterion/criterion.h>

#include "util/dl_util.h"

/* dl_prom_fmt_value(v) in a static buffer. */
static const char *fmt(double v)
{
    static char buf[DL_PROM_VALUE_CHARS];
    size_t n = dl_prom_fmt_value(buf, v);
    cr_assert_eq(n, strlen(buf));
    return buf;
}

/* How many times needle occurs in text. */
static int count(const char *text, const char *needle)
{
    int n = 0;
    for (const char *p = strstr(text, needle); p; p = strstr(p + 1, needle))
        n++;
    return n;
}

Test(prom, special_values_spelled_as_the_format_wants)
{
    cr_expect_str_eq(fmt(INFINITY), "+Inf");
    cr_expect_str_eq(fmt(-INFINITY), "-Inf");
    cr_expect_str_eq(fmt(NAN), "NaN");
    cr_expect_str_eq(fmt(-NAN), "NaN");
}

Test(prom, whole_numbers_as_integers)
{
    cr_expect_str_eq(fmt(0), "0");
    cr_expect_str_eq(fmt(-0.0), "0");
    cr_expect_str_eq(fmt(1), "1");
    cr_expect_str_eq(fmt(-42), "-42");
    cr_expect_str_eq(fmt(1024), "1024");
    cr_expect_str_eq(fmt(1e15), "1000000000000000");
    cr_expect_str_eq(fmt(9007199254740991.0), "9007199254740991");   /* 2^53 - 1 */
    /* from 2^53 on, a double is no longer every integer: %g */
    cr_expect_str_eq(fmt(9007199254740992.0), "9007199254740992");
    cr_expect_str_eq(fmt(1e20), "1e+20");
}

Test(prom, fractions_shortest_that_read_back)
{
    cr_expect_str_eq(fmt(0.1), "0.1");
    cr_expect_str_eq(fmt(2.5), "2.5");
    cr_expect_str_eq(fmt(0.00025), "0.00025");
    cr_expect_str_eq(fmt(40 / 1e6), "4e-05");                  /* not 3.9999999999999996e-05 */
    cr_expect_str_eq(fmt(0.1 + 0.2), "0.30000000000000004");   /* needs 17 digits */
    cr_expect_str_eq(fmt(1712345678.25), "1712345678.25");
    cr_expect_str_eq(fmt(-1.5e-300), "-1.5e-300");
}

Test(prom, values_read_back_exactly)
{
    const double v[] = {3.141592653589793, 1.0 / 3, 2.0 / 3 * 1e-7, 123456789.123, DBL_MIN, DBL_MAX,
                        -DBL_EPSILON, 5e-324, 9007199254740993.0 * 3, 0.1 * 3};
    for (size_t i = 0; i < sizeof(v) / sizeof(v[0]); i++) {
        const char *text = fmt(v[i]);
        cr_expect_eq(strtod(text, NULL), v[i], "%.17g written as %s", v[i], text);
        cr_expect_lt(strlen(text), (size_t)DL_PROM_VALUE_CHARS);
    }
}

Test(prom, family_lines_once_then_samples)
{
    dl_sbuf b = {0};
    dl_prom_family(&b, "dlserve_redis_up", "gauge", "Whether it is up (1) or not (0).");
    dl_prom_sample(&b, "dlserve_redis_up", 1, "role", "sink", NULL);
    dl_prom_sample(&b, "dlserve_redis_up", 0, "role", "status", NULL);
    cr_assert_not(b.oom);
    cr_expect_str_eq(b.s,
                     "# HELP dlserve_redis_up Whether it is up (1) or not (0).\n"
                     "# TYPE dlserve_redis_up gauge\n"
                     "dlserve_redis_up{role=\"sink\"} 1\n"
                     "dlserve_redis_up{role=\"status\"} 0\n");
    cr_expect_eq(count(b.s, "# HELP"), 1);
    cr_expect_eq(count(b.s, "# TYPE"), 1);
    dl_sbuf_free(&b);
}

Test(prom, help_text_escaped)
{
    dl_sbuf b = {0};
    dl_prom_family(&b, "x", "counter", "a \\ b\nc \"d\"");
    cr_assert_not(b.oom);
    /* HELP escapes backslash and newline; a quote stays as it is */
    cr_expect_str_eq(b.s, "# HELP x a \\\\ b\\nc \"d\"\n# TYPE x counter\n");
    dl_sbuf_free(&b);
}

Test(prom, samples_without_labels)
{
    dl_sbuf b = {0};
    dl_prom_sample(&b, "process_open_fds", 12, NULL);
    dl_prom_sample(&b, "process_start_time_seconds", 1712345678.5, NULL);
    cr_assert_not(b.oom);
    cr_expect_str_eq(b.s, "process_open_fds 12\nprocess_start_time_seconds 1712345678.5\n");
    dl_sbuf_free(&b);
}

Test(prom, label_values_escaped_in_order)
{
    dl_sbuf b = {0};
    dl_prom_sample(&b, "m", INFINITY, "model", "a\"b\\c\nd", "le", "+Inf", NULL);
    dl_prom_sample(&b, "m", NAN, "model", "bad\xFF", "version", NULL, NULL);
    cr_assert_not(b.oom);
    cr_expect_str_eq(b.s,
                     "m{model=\"a\\\"b\\\\c\\nd\",le=\"+Inf\"} +Inf\n"
                     "m{model=\"bad\xEF\xBF\xBD\",version=\"\"} NaN\n");
    dl_sbuf_free(&b);
}

Test(prom, appends_after_existing_text)
{
    dl_sbuf b = {0};
    dl_sbuf_add(&b, "extra 1\n", 8);
    dl_prom_sample(&b, "y", 0.5, "a", "1", "b", "2", "c", "3", NULL);
    cr_assert_not(b.oom);
    cr_expect_str_eq(b.s, "extra 1\ny{a=\"1\",b=\"2\",c=\"3\"} 0.5\n");
    dl_sbuf_free(&b);
}
