/* test_generator.c: the parts of serve/generator.c that every transport
 * shares without a model: a request's parameters read from JSON (the
 * generate endpoints, OpenAI's API and Kafka records), and generated
 * text as JSON. */
#include <string.h>
#include <criterion/criterion.h>
#include "serve/generator.h"

TestSuite(generator, .timeout = 10);

/* Sets key from JSON text; returns the status, the message in err. */
static dl_status set(dl_gen_params *p, int64_t *timeout, const char *key, const char *json,
                     dl_err *err)
{
    json_t *v = json_loads(json, JSON_DECODE_ANY, NULL);
    cr_assert_not_null(v, "%s", json);
    dl_status st = gen_param_set(p, timeout, key, v, err);
    json_decref(v);
    return st;
}

Test(generator, reads_every_parameter)
{
    dl_gen_params p;
    dl_gen_params_init(&p);
    int64_t timeout = 0;
    dl_err err = {0};
    cr_assert_eq(set(&p, &timeout, "max_tokens", "40", &err), DL_OK, "%s", err.msg);
    cr_assert_eq(set(&p, &timeout, "temperature", "0.5", &err), DL_OK);
    cr_assert_eq(set(&p, &timeout, "top_k", "7", &err), DL_OK);
    cr_assert_eq(set(&p, &timeout, "top_p", "0.9", &err), DL_OK);
    cr_assert_eq(set(&p, &timeout, "seed", "12345678901", &err), DL_OK);
    cr_assert_eq(set(&p, &timeout, "beam_width", "4", &err), DL_OK);
    cr_assert_eq(set(&p, &timeout, "length_penalty", "2", &err), DL_OK);   /* an integer too */
    cr_assert_eq(set(&p, &timeout, "stop", "[\"\\n\\n\", \"END\"]", &err), DL_OK);
    cr_assert_eq(set(&p, &timeout, "timeout", "250000", &err), DL_OK);
    cr_expect_eq(p.max_tokens, 40);
    cr_expect_float_eq(p.temperature, 0.5f, 1e-7);
    cr_expect_eq(p.top_k, 7);
    cr_expect_float_eq(p.top_p, 0.9f, 1e-7);
    cr_expect_eq(p.seed, 12345678901ULL);
    cr_expect_eq(p.beam_width, 4);
    cr_expect_float_eq(p.length_penalty, 2.0f, 1e-7);
    cr_expect_eq(p.nstop, 2);
    cr_expect_str_eq(p.stop[0], "\n\n");
    cr_expect_str_eq(p.stop[1], "END");
    cr_expect_eq(timeout, 250000);
    cr_assert_eq(set(&p, &timeout, "stop", "\"one\"", &err), DL_OK);   /* a string alone */
    cr_expect_eq(p.nstop, 1);
    cr_expect_str_eq(p.stop[0], "one");
}

Test(generator, refuses_values_of_the_wrong_kind)
{
    static const char *const bad[][3] = {
        {"max_tokens", "\"16\"", "max_tokens"}, {"max_tokens", "1.5", "max_tokens"},
        {"temperature", "\"hot\"", "temperature"}, {"seed", "-1", "seed"},
        {"top_k", "null", "top_k"}, {"stop", "3", "stop"}, {"stop", "[\"\"]", "stop"},
        {"stop", "[\"a\", \"b\", \"c\", \"d\", \"e\"]", "at most 4"},
        {"stop", "[1]", "stop"}, {"timeout", "-5", "timeout"}, {"beam_width", "1e9", "beam"},
    };
    for (size_t i = 0; i < sizeof(bad) / sizeof(bad[0]); i++) {
        dl_gen_params p;
        dl_gen_params_init(&p);
        int64_t timeout = 0;
        dl_err err = {0};
        cr_expect_eq(set(&p, &timeout, bad[i][0], bad[i][1], &err), DL_ERR_INVALID,
                     "%s = %s", bad[i][0], bad[i][1]);
        cr_expect_not_null(strstr(err.msg, bad[i][2]), "%s = %s: %s", bad[i][0], bad[i][1],
                           err.msg);
    }
}

Test(generator, unknown_keys_are_not_found)
{
    dl_gen_params p;
    dl_gen_params_init(&p);
    dl_err err = {0};
    int64_t timeout = 0;
    cr_expect_eq(set(&p, &timeout, "colour", "1", &err), DL_ERR_NOT_FOUND);
    cr_expect_not_null(strstr(err.msg, "colour"), "%s", err.msg);
    /* without room for it, timeout is not a parameter (OpenAI's API) */
    cr_expect_eq(set(&p, NULL, "timeout", "1", &err), DL_ERR_NOT_FOUND);
}

Test(generator, text_as_json_replaces_bytes_that_are_not_utf8)
{
    static const struct {
        const char *in;
        size_t      len;
        const char *out;
    } cases[] = {
        {"plain", 5, "plain"},
        {"caf\xC3\xA9", 5, "caf\xC3\xA9"},                 /* two bytes */
        {"\xE2\x82\xAC!", 4, "\xE2\x82\xAC!"},            /* three */
        {"\xF0\x9F\x98\x80", 4, "\xF0\x9F\x98\x80"},       /* four */
        {"a\xFF" "b", 3, "a\xEF\xBF\xBD" "b"},            /* never UTF-8 */
        {"\xC3", 1, "\xEF\xBF\xBD"},                      /* cut short */
        {"\xE2\x82" "x", 3, "\xEF\xBF\xBD\xEF\xBF\xBD" "x"},
        {"", 0, ""},
    };
    for (size_t i = 0; i < sizeof(cases) / sizeof(cases[0]); i++) {
        json_t *j = gen_text_json(cases[i].in, cases[i].len);
        cr_assert_not_null(j, "case %zu", i);
        cr_expect_str_eq(json_string_value(j), cases[i].out, "case %zu", i);
        json_decref(j);
    }
}
