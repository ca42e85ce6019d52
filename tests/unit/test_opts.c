/* test_opts.c: the util layer's option tables without the daemon:
 * enumerations (words, values, errors that list them, printouts), custom
 * options, "name:N" splitting, and the per-subsystem debug list of the log. */
#define _POSIX_C_SOURCE 200809L
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>
#include <criterion/criterion.h>

#include "util/dl_util.h"

TestSuite(opts, .timeout = 10);

/* ---- dl_parse_name_num ---------------------------------------------------- */

Test(opts, name_num_splits)
{
    char name[16];
    int64_t n = 0;
    cr_assert(dl_parse_name_num("cuda", name, sizeof(name), &n));
    cr_expect_str_eq(name, "cuda");
    cr_expect_eq(n, -1);
    cr_assert(dl_parse_name_num("cuda:3", name, sizeof(name), &n));
    cr_expect_str_eq(name, "cuda");
    cr_expect_eq(n, 3);
    cr_assert(dl_parse_name_num("avg:007", name, sizeof(name), &n));
    cr_expect_str_eq(name, "avg");
    cr_expect_eq(n, 7);
    cr_assert(dl_parse_name_num("x:999999999999999999", name, sizeof(name), &n));
    cr_expect_eq(n, INT64_C(999999999999999999));
    cr_assert(dl_parse_name_num("", name, sizeof(name), &n));
    cr_expect_str_eq(name, "");
    cr_expect_eq(n, -1);
    cr_assert(dl_parse_name_num(":5", name, sizeof(name), &n));
    cr_expect_str_eq(name, "");
    cr_expect_eq(n, 5);
}

Test(opts, name_num_truncates_the_name)
{
    char name[5];
    int64_t n;
    cr_assert(dl_parse_name_num("latest:2", name, sizeof(name), &n));
    cr_expect_str_eq(name, "late");
    cr_expect_eq(n, 2);
}

Test(opts, name_num_refuses_what_is_not_digits)
{
    static const char *const bad[] = {"cuda:", "cuda:x", "cuda:-1", "cuda:+1", "cuda: 1",
                                      "cuda:1 ", "cuda:1x", "cuda:1:2", "a:b:1",
                                      "x:1000000000000000000" /* 19 digits */};
    for (size_t i = 0; i < sizeof(bad) / sizeof(*bad); i++) {
        char name[16];
        int64_t n;
        cr_expect_not(dl_parse_name_num(bad[i], name, sizeof(name), &n), "%s", bad[i]);
    }
    /* the name is there even then, for the caller's message */
    char name[16];
    int64_t n;
    cr_expect_not(dl_parse_name_num("avg:x", name, sizeof(name), &n));
    cr_expect_str_eq(name, "avg");
}

/* ---- enumerations and custom options -------------------------------------- */

typedef enum color { RED = 10, GREEN = 20, BLUE = 30 } color;

typedef struct pair {
    char word[8];
    int  n;
} pair;

typedef struct test_conf {
    int64_t count;
    int     color;    /* color */
    pair    pair;
} test_conf;

static const dl_opt_word colors[] = {{"red", RED}, {"green", GREEN}, {"blue", BLUE}, {NULL, 0}};
static const dl_opt_word pair_forms[] = {{"a", 0}, {"b:N", 0}, {NULL, 0}};

/* "a" or "b:N": a custom option. */
static bool parse_pair(const char *text, void *field, char *why, size_t whylen)
{
    pair *p = field;
    if (strlen(text) > 20) {
        snprintf(why, whylen, "far too long");
        return false;
    }
    char name[8];
    int64_t n;
    if (!dl_parse_name_num(text, name, sizeof(name), &n) || n > 99)
        return false;
    if (!((strcmp(name, "a") == 0 && n < 0) || (strcmp(name, "b") == 0 && n >= 0)))
        return false;
    memset(p, 0, sizeof(*p));
    snprintf(p->word, sizeof(p->word), "%s", name);
    p->n = (int)n;
    return true;
}

static void format_pair(const void *field, char *buf, size_t len)
{
    const pair *p = field;
    if (p->n >= 0)
        snprintf(buf, len, "%s:%d", p->word, p->n);
    else
        snprintf(buf, len, "%s", p->word);
}

static const dl_opt table[] = {
    {.section = "s", .key = "count", .type = DL_OPT_INT, .offset = offsetof(test_conf, count),
     .def = "1", .min = 0, .max = 9, .doc = "a count"},
    {.section = "s", .key = "color", .type = DL_OPT_ENUM, .offset = offsetof(test_conf, color),
     .def = "green", .doc = "a color", .words = colors},
    {.section = "s", .key = "pair", .type = DL_OPT_CUSTOM, .offset = offsetof(test_conf, pair),
     .size = sizeof(pair), .def = "a", .doc = "a pair", .words = pair_forms,
     .parse = parse_pair, .format = format_pair},
    {0},
};

static char *print_to_string(bool markdown, const test_conf *c)
{
    char *text = NULL;
    size_t len = 0;
    FILE *f = open_memstream(&text, &len);
    cr_assert_not_null(f);
    if (markdown)
        dl_conf_print_markdown(table, f);
    else
        dl_conf_print(table, c, f);
    fclose(f);
    return text;
}

Test(opts, enum_default_and_words)
{
    test_conf c;
    dl_err err = {0};
    cr_assert_eq(dl_conf_defaults(table, &c, &err), DL_OK, "%s", err.msg);
    cr_expect_eq(c.color, GREEN);
    cr_assert_eq(dl_conf_set(table, &c, "s", "color", "blue", "test", &err), DL_OK);
    cr_expect_eq(c.color, BLUE);
}

Test(opts, enum_error_lists_the_words)
{
    test_conf c;
    dl_err err = {0};
    cr_assert_eq(dl_conf_defaults(table, &c, &err), DL_OK);
    cr_assert_eq(dl_conf_set(table, &c, "s", "color", "Blue", "x.conf:3", &err),
                 DL_ERR_INVALID);
    cr_expect_str_eq(err.msg, "x.conf:3: [s] color 'Blue' is invalid: expected red, green or blue");
    cr_expect_eq(c.color, GREEN, "unchanged on error");
}

Test(opts, custom_parses_once_into_its_field)
{
    test_conf c;
    dl_err err = {0};
    cr_assert_eq(dl_conf_defaults(table, &c, &err), DL_OK, "%s", err.msg);
    cr_expect_str_eq(c.pair.word, "a");
    cr_expect_eq(c.pair.n, -1);
    cr_assert_eq(dl_conf_set(table, &c, "s", "pair", "b:12", "test", &err), DL_OK);
    cr_expect_str_eq(c.pair.word, "b");
    cr_expect_eq(c.pair.n, 12);
    cr_assert_eq(dl_conf_set(table, &c, "s", "pair", "a:1", "DLSERVE_S_PAIR", &err),
                 DL_ERR_INVALID);
    cr_expect_str_eq(err.msg, "DLSERVE_S_PAIR: [s] pair 'a:1' is invalid: expected a or b:N");
    cr_assert_eq(dl_conf_set(table, &c, "s", "pair", "aaaaaaaaaaaaaaaaaaaaaaaaa", "t", &err),
                 DL_ERR_INVALID);
    cr_expect_str_eq(err.msg, "t: [s] pair: far too long");
    cr_expect_eq(c.pair.n, 12, "unchanged on error");
}

Test(opts, printouts_name_the_words)
{
    test_conf c;
    dl_err err = {0};
    cr_assert_eq(dl_conf_defaults(table, &c, &err), DL_OK);
    cr_assert_eq(dl_conf_set(table, &c, "s", "color", "red", "test", &err), DL_OK);
    cr_assert_eq(dl_conf_set(table, &c, "s", "pair", "b:4", "test", &err), DL_OK);
    char *ini = print_to_string(false, &c);
    cr_expect_not_null(strstr(ini, "# a color (red, green or blue)\ncolor = red\n"), "%s", ini);
    cr_expect_not_null(strstr(ini, "# a pair (a or b:N)\npair = b:4\n"), "%s", ini);
    free(ini);
    char *md = print_to_string(true, &c);
    cr_expect_not_null(strstr(md, "| s | color | `green` | red, green or blue | a color |"),
                       "%s", md);
    cr_expect_not_null(strstr(md, "| s | pair | `a` | a or b:N | a pair |"), "%s", md);
    free(md);
}

Test(opts, words_helpers)
{
    char buf[64];
    dl_opt_words_str(colors, buf, sizeof(buf));
    cr_expect_str_eq(buf, "red, green or blue");
    static const dl_opt_word one[] = {{"only", 1}, {NULL, 0}};
    dl_opt_words_str(one, buf, sizeof(buf));
    cr_expect_str_eq(buf, "only");
    dl_opt_words_str(colors, buf, 6);
    cr_expect_str_eq(buf, "red, ");
    int v = 0;
    cr_expect(dl_opt_word_value(colors, "blue", &v));
    cr_expect_eq(v, BLUE);
    cr_expect_not(dl_opt_word_value(colors, "BLUE", &v));
    cr_expect_str_eq(dl_opt_word_name(colors, RED), "red");
    cr_expect_str_eq(dl_opt_word_name(colors, 99), "?");
    cr_expect_str_eq(dl_opt_word_name(dl_log_level_words, DL_LOG_NOTICE), "notice");
}

/* ---- the log's debug list ----------------------------------------------------- */

/* Runs the DL_LOG lines below with stderr in a file; returns what they wrote. */
static char *logged(void (*body)(void))
{
    char path[] = "/tmp/dl_test_log.XXXXXX";
    int fd = mkstemp(path);
    cr_assert_geq(fd, 0);
    fflush(stderr);
    int saved = dup(2);
    dup2(fd, 2);
    body();
    fflush(stderr);
    dup2(saved, 2);
    close(saved);
    char *text = NULL;
    size_t len = 0;
    dl_err err = {0};
    cr_assert_eq(dl_file_read(path, &text, &len, &err), DL_OK, "%s", err.msg);
    close(fd);
    unlink(path);
    /* Lines start with their time (stderr is not journald's): dropped. */
    char *w = text;
    for (const char *r = text; *r;) {
        const char *sp = strchr(r, ' ');
        const char *nl = strchr(r, '\n');
        r = sp && (!nl || sp < nl) ? sp + 1 : r;
        size_t n = nl ? (size_t)(nl - r) + 1 : strlen(r);
        memmove(w, r, n);
        w += n;
        r += n;
    }
    *w = '\0';
    return text;
}

static void some_lines(void)
{
    DL_LOG(DL_LOG_DEBUG, "kafka", "k debug");
    DL_LOG(DL_LOG_DEBUG, "http", "h debug");
    DL_LOG(DL_LOG_DEBUG, "redis", "r debug");
    DL_LOG(DL_LOG_INFO, "redis", "r info");
    DL_LOG(DL_LOG_NOTICE, "http", "h notice");
}

Test(opts, log_debug_list_turns_up_only_its_subsystems)
{
    dl_err err = {0};
    cr_assert_eq(dl_log_set(DL_LOG_INFO, " kafka , http", &err), DL_OK, "%s", err.msg);
    cr_expect_eq(dl_log_level, DL_LOG_DEBUG, "DL_LOG must let debug lines reach the filter");
    char *text = logged(some_lines);
    cr_expect_str_eq(text, "debug kafka: k debug\ndebug http: h debug\ninfo redis: r info\n"
                           "notice http: h notice\n");
    free(text);
}

Test(opts, log_level_applies_to_the_others)
{
    dl_err err = {0};
    cr_assert_eq(dl_log_set(DL_LOG_NOTICE, "redis", &err), DL_OK, "%s", err.msg);
    char *text = logged(some_lines);
    cr_expect_str_eq(text, "debug redis: r debug\ninfo redis: r info\nnotice http: h notice\n");
    free(text);

    /* no list: one level for all, and DL_LOG's own test stops the rest */
    cr_assert_eq(dl_log_set(DL_LOG_NOTICE, "", &err), DL_OK, "%s", err.msg);
    cr_expect_eq(dl_log_level, DL_LOG_NOTICE);
    text = logged(some_lines);
    cr_expect_str_eq(text, "notice http: h notice\n");
    free(text);
}

Test(opts, log_debug_list_syntax)
{
    static const char *const good[] = {"", "kafka", "kafka,http", "a-b_c9 , d"};
    static const char *const bad[] = {",", "kafka,", ",kafka", "kafka,,http", "Kafka",
                                      "kafka http", "k!", "a234567890123456"};
    for (size_t i = 0; i < sizeof(good) / sizeof(*good); i++)
        cr_expect(dl_log_debug_valid(good[i]), "%s", good[i]);
    cr_expect(dl_log_debug_valid(NULL));
    for (size_t i = 0; i < sizeof(bad) / sizeof(*bad); i++)
        cr_expect_not(dl_log_debug_valid(bad[i]), "%s", bad[i]);

    dl_err err = {0};
    cr_assert_eq(dl_log_set(DL_LOG_INFO, "kafka", &err), DL_OK);
    cr_assert_eq(dl_log_set(DL_LOG_ERR, "kafka,", &err), DL_ERR_INVALID);
    cr_expect_not_null(strstr(err.msg, "'kafka,'"), "%s", err.msg);
    cr_expect_eq(dl_log_level, DL_LOG_DEBUG, "a refused list changes nothing");
}

Test(opts, log_debug_tags_are_bounded)
{
    dl_err err = {0};
    char list[DL_LOG_TAGS_MAX * 8] = "";
    for (int i = 0; i < DL_LOG_TAGS_MAX; i++)
        snprintf(list + strlen(list), sizeof(list) - strlen(list), "%st%d", i ? "," : "", i);
    cr_assert_eq(dl_log_set(DL_LOG_INFO, list, &err), DL_OK, "%s", err.msg);
    /* naming them again takes no new slot; one more does not fit */
    cr_assert_eq(dl_log_set(DL_LOG_INFO, "t0,t31", &err), DL_OK, "%s", err.msg);
    cr_assert_eq(dl_log_set(DL_LOG_INFO, "t0,extra", &err), DL_ERR_INVALID);
    cr_expect_not_null(strstr(err.msg, "more than 32"), "%s", err.msg);
}
