/* test_trace.c: the W3C traceparent format check and the trace context
 * kept for a request (serve/oip/trace.c). */
#include <string.h>
#include <criterion/criterion.h>

#include "serve/oip/trace.h"

#define GOOD "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01"

static bool valid(const char *s)
{
    return trace_parent_valid(s, strlen(s));
}

Test(trace, accepts_the_w3c_example)
{
    cr_expect(valid(GOOD));
    cr_expect(valid("00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-00"));
}

Test(trace, refuses_uppercase_hex)
{
    cr_expect_not(valid("00-4BF92F3577B34DA6A3CE929D0E0E4736-00f067aa0ba902b7-01"));
    cr_expect_not(valid("00-4bf92f3577b34da6a3ce929d0e0e4736-00F067AA0BA902B7-01"));
    cr_expect_not(valid("0A-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01"));
}

Test(trace, refuses_wrong_lengths_and_separators)
{
    cr_expect_not(valid(""));
    cr_expect_not(valid("00-4bf92f3577b34da6a3ce929d0e0e473-00f067aa0ba902b7-01"));   /* 31 */
    cr_expect_not(valid("00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b-01"));   /* 15 */
    cr_expect_not(valid("00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-1"));
    cr_expect_not(valid("00_4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01"));
    cr_expect_not(valid("00-4bf92f3577b34da6a3ce929d0e0e4736_00f067aa0ba902b7-01"));
    cr_expect_not(valid(GOOD " "));
    cr_expect_not(valid(GOOD "-extra"));   /* version 00 has exactly four fields */
}

Test(trace, refuses_zero_ids_and_version_ff)
{
    cr_expect_not(valid("00-00000000000000000000000000000000-00f067aa0ba902b7-01"));
    cr_expect_not(valid("00-4bf92f3577b34da6a3ce929d0e0e4736-0000000000000000-01"));
    cr_expect_not(valid("ff-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01"));
}

Test(trace, accepts_later_versions_with_more_fields)
{
    cr_expect(valid("01-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01"));
    cr_expect(valid("01-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01-later"));
    cr_expect_not(valid("01-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01x"));
}

Test(trace, reads_only_len_bytes)
{
    /* no NUL within the length given: the check stays inside it */
    char buf[TRACE_PARENT_LEN];
    memcpy(buf, GOOD, sizeof(buf));
    cr_expect(trace_parent_valid(buf, sizeof(buf)));
    cr_expect_not(trace_parent_valid(buf, sizeof(buf) - 1));
    cr_expect_not(trace_parent_valid(NULL, 0));
}

Test(trace, set_keeps_state_only_with_a_valid_parent)
{
    trace_ctx t;
    cr_assert(trace_set(&t, GOOD, (size_t)-1, "congo=t61rcWkgMzE", (size_t)-1));
    cr_expect_str_eq(t.parent, GOOD);
    cr_expect_str_eq(t.state, "congo=t61rcWkgMzE");
    char id[33];
    trace_id_of(&t, id);
    cr_expect_str_eq(id, "4bf92f3577b34da6a3ce929d0e0e4736");

    cr_expect_not(trace_set(&t, "00-bad", (size_t)-1, "congo=t61rcWkgMzE", (size_t)-1));
    cr_expect_not(trace_present(&t));
    cr_expect_str_eq(t.state, "");
    trace_id_of(&t, id);
    cr_expect_str_eq(id, "");

    cr_expect_not(trace_set(&t, NULL, 0, "congo=t61rcWkgMzE", (size_t)-1));
    cr_expect_not(trace_present(&t));
}

Test(trace, drops_a_bad_or_long_state)
{
    trace_ctx t;
    cr_assert(trace_set(&t, GOOD, (size_t)-1, "a=1\nb=2", (size_t)-1));
    cr_expect_str_eq(t.state, "");
    char longs[TRACE_STATE_MAX + 2];
    memset(longs, 'a', sizeof(longs) - 1);
    longs[sizeof(longs) - 1] = '\0';
    cr_assert(trace_set(&t, GOOD, (size_t)-1, longs, (size_t)-1));
    cr_expect_str_eq(t.state, "");
    longs[TRACE_STATE_MAX] = '\0';   /* exactly the most carried */
    cr_assert(trace_set(&t, GOOD, (size_t)-1, longs, (size_t)-1));
    cr_expect_eq(strlen(t.state), TRACE_STATE_MAX);
}
