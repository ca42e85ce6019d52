/* test_log.c: log lines as text and as JSON objects (util/log.c): the
 * members, escaping, the thread's request ids, and journald's priority
 * prefix when stderr is the journal's stream. */
#define _POSIX_C_SOURCE 200809L
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>
#include <criterion/criterion.h>
#include <criterion/redirect.h>
#include <jansson.h>

#include "util/dl_util.h"

static void setup(void)
{
    cr_redirect_stderr();
    unsetenv("JOURNAL_STREAM");
    dl_log_set(DL_LOG_INFO, "", NULL);
    dl_log_set_format(DL_LOG_FORMAT_TEXT);   /* looks at stderr again */
}

static void teardown(void)
{
    dl_log_set_format(DL_LOG_FORMAT_TEXT);
}

TestSuite(log, .init = setup, .fini = teardown, .timeout = 10);

/* The next line written to stderr (without its newline), into buf. */
static char *next_line(char *buf, size_t cap)
{
    fflush(stderr);
    FILE *f = cr_get_redirected_stderr();
    cr_assert_not_null(fgets(buf, (int)cap, f));
    buf[strcspn(buf, "\n")] = '\0';
    return buf;
}

static const char *member(json_t *o, const char *key)
{
    return json_string_value(json_object_get(o, key));
}

Test(log, json_line_has_the_members)
{
    dl_log_set_format(DL_LOG_FORMAT_JSON);
    DL_LOG(DL_LOG_WARNING, "http", "a \"quoted\" tab\there, bad \xff byte, é kept");
    char line[4096];
    next_line(line, sizeof(line));
    json_error_t je;
    json_t *o = json_loads(line, 0, &je);
    cr_assert_not_null(o, "not JSON (%s): %s", je.text, line);
    cr_expect_str_eq(member(o, "level"), "warning");
    cr_expect_eq(json_integer_value(json_object_get(o, "priority")), DL_LOG_WARNING);
    cr_expect_str_eq(member(o, "subsystem"), "http");
    cr_expect_str_eq(member(o, "message"), "a \"quoted\" tab\there, bad \xEF\xBF\xBD byte, é kept");
    const char *t = member(o, "time");
    cr_assert_not_null(t);
    cr_expect_eq(strlen(t), strlen("2026-12-01T05:52:49.123456Z"), "%s", t);
    cr_expect_eq(t[strlen(t) - 1], 'Z');
    cr_expect_null(json_object_get(o, "request_id"));
    json_decref(o);
}

Test(log, json_line_carries_the_threads_ids)
{
    dl_log_set_format(DL_LOG_FORMAT_JSON);
    dl_log_ids ids = {.request_id = "req-1", .model = "m", .trace_id = "4bf92f35"};
    const dl_log_ids *prev = dl_log_ids_push(&ids);
    DL_LOG(DL_LOG_INFO, "kafka", "with ids");
    dl_log_ids_pop(prev);
    DL_LOG(DL_LOG_INFO, "kafka", "without");
    char line[4096];
    json_t *o = json_loads(next_line(line, sizeof(line)), 0, NULL);
    cr_assert_not_null(o, "%s", line);
    cr_expect_str_eq(member(o, "request_id"), "req-1");
    cr_expect_str_eq(member(o, "model"), "m");
    cr_expect_str_eq(member(o, "trace_id"), "4bf92f35");
    json_decref(o);
    o = json_loads(next_line(line, sizeof(line)), 0, NULL);
    cr_assert_not_null(o, "%s", line);
    cr_expect_null(json_object_get(o, "request_id"));
    json_decref(o);
}

Test(log, long_messages_stay_one_object)
{
    dl_log_set_format(DL_LOG_FORMAT_JSON);
    char msg[900];
    memset(msg, '"', sizeof(msg) - 1);   /* each one escaped: twice the bytes */
    msg[sizeof(msg) - 1] = '\0';
    DL_LOG(DL_LOG_INFO, "http", "%s", msg);
    char line[8192];
    json_t *o = json_loads(next_line(line, sizeof(line)), 0, NULL);
    cr_assert_not_null(o, "%s", line);
    cr_expect_gt(strlen(member(o, "message")), 500);
    json_decref(o);
}

/* JOURNAL_STREAM naming stderr's device and inode, as systemd sets it. */
static void stderr_is_the_journal(void)
{
    struct stat st;
    cr_assert_eq(fstat(STDERR_FILENO, &st), 0);
    char js[64];
    snprintf(js, sizeof(js), "%llu:%llu", (unsigned long long)st.st_dev,
             (unsigned long long)st.st_ino);
    setenv("JOURNAL_STREAM", js, 1);
}

Test(log, text_line_has_time_and_level)
{
    dl_log_set_format(DL_LOG_FORMAT_TEXT);
    DL_LOG(DL_LOG_NOTICE, "http", "plain");
    dl_log_ids ids = {.request_id = "req-2", .trace_id = "abc"};
    const dl_log_ids *prev = dl_log_ids_push(&ids);
    DL_LOG(DL_LOG_INFO, "http", "traced");
    dl_log_ids_pop(prev);
    char line[1024];
    int y, mo, d, h, mi, s, us, n = 0;
    next_line(line, sizeof(line));
    cr_assert_eq(sscanf(line, "%4d-%2d-%2dT%2d:%2d:%2d.%6dZ %n", &y, &mo, &d, &h, &mi, &s, &us,
                        &n), 7, "%s", line);
    cr_expect_eq(n, 28, "%s", line);
    cr_expect_str_eq(line + n, "notice http: plain");
    next_line(line, sizeof(line));
    cr_expect_str_eq(line + 28, "info http: traced (id=req-2, trace=abc)");
}

Test(log, text_line_under_journald_has_the_priority_only)
{
    stderr_is_the_journal();
    dl_log_set_format(DL_LOG_FORMAT_TEXT);
    DL_LOG(DL_LOG_NOTICE, "http", "plain");
    DL_LOG(DL_LOG_ERR, "daemon", "bad");
    char line[1024];
    cr_expect_str_eq(next_line(line, sizeof(line)), "<5>http: plain");
    cr_expect_str_eq(next_line(line, sizeof(line)), "<3>daemon: bad");
}

Test(log, journal_stream_of_another_file_is_not_the_journal)
{
    setenv("JOURNAL_STREAM", "1:1", 1);
    dl_log_set_format(DL_LOG_FORMAT_TEXT);
    DL_LOG(DL_LOG_NOTICE, "http", "plain");
    char line[1024];
    next_line(line, sizeof(line));
    cr_expect_neq(line[0], '<', "%s", line);
    cr_expect_str_eq(line + 28, "notice http: plain");
}

Test(log, json_keeps_journald_priority_prefix)
{
    stderr_is_the_journal();
    dl_log_set_format(DL_LOG_FORMAT_JSON);
    DL_LOG(DL_LOG_ERR, "daemon", "to the journal");
    char line[4096];
    next_line(line, sizeof(line));
    cr_assert_eq(strncmp(line, "<3>{", 4), 0, "%s", line);
    json_t *o = json_loads(line + 3, 0, NULL);
    cr_assert_not_null(o, "%s", line);
    cr_expect_str_eq(member(o, "message"), "to the journal");
    json_decref(o);
}
