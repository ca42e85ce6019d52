/* test_prom_label.c: Prometheus label values (dl_prom_label): the text
 * format's escapes, UTF-8 kept, invalid bytes replaced by U+FFFD. */
#include <stdlib.h>
#include <string.h>

#include <criterion/criterion.h>

#include "util/dl_util.h"

#define FFFD "\xEF\xBF\xBD"

/* value as dl_prom_label writes it (new). */
static char *label(const char *value)
{
    dl_sbuf b = {0};
    dl_sbuf_add(&b, "", 0);               /* "" rather than NULL for an empty label */
    dl_prom_label(&b, value);
    cr_assert_not(b.oom);
    return b.s;
}

static void expect_label(const char *value, const char *want)
{
    char *got = label(value);
    cr_expect_str_eq(got, want, "for '%s'", value);
    free(got);
}

Test(prom_label, plain_values_unchanged)
{
    expect_label("", "");
    expect_label("fashion-mlp", "fashion-mlp");
    expect_label("dlserve-in.v2_a", "dlserve-in.v2_a");
}

Test(prom_label, quotes_backslashes_and_newlines_escaped)
{
    expect_label("a\"b", "a\\\"b");
    expect_label("a\\b", "a\\\\b");
    expect_label("a\nb", "a\\nb");
    expect_label("\"\\\n", "\\\"\\\\\\n");
    /* other control characters are legal in a label value */
    expect_label("a\tb", "a\tb");
}

Test(prom_label, valid_utf8_kept)
{
    expect_label("mod\xC3\xA8le-\xCF\x80", "mod\xC3\xA8le-\xCF\x80");       /* modèle-π */
    expect_label("\xE2\x82\xAC \xF0\x9F\x98\x80", "\xE2\x82\xAC \xF0\x9F\x98\x80");
}

Test(prom_label, invalid_utf8_replaced_byte_by_byte)
{
    expect_label("a\xFF" "b", "a" FFFD "b");
    expect_label("\xC3", FFFD);                                /* truncated at the end */
    expect_label("\xC3" "a", FFFD "a");                        /* truncated inside */
    expect_label("\xC0\xAF", FFFD FFFD);                       /* overlong '/' */
    expect_label("\xED\xA0\x80", FFFD FFFD FFFD);              /* a UTF-16 surrogate */
    expect_label("\xF4\x90\x80\x80", FFFD FFFD FFFD FFFD);     /* past U+10FFFF */
    expect_label("\xFF\"\n", FFFD "\\\"\\n");                  /* then the escapes */
}

Test(prom_label, appends_to_the_buffer)
{
    dl_sbuf b = {0};
    dl_sbuf_printf(&b, "x{topic=\"");
    dl_prom_label(&b, "in\"1");
    dl_sbuf_printf(&b, "\"} 1\n");
    cr_assert_not(b.oom);
    cr_expect_str_eq(b.s, "x{topic=\"in\\\"1\"} 1\n");
    dl_sbuf_free(&b);
}
