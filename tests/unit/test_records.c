/* test_records.c: Kafka record values on their own: the three forms,
 * ids, models, every refusal with its fault kind, and the output JSON. */
#define _POSIX_C_SOURCE 200809L
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <criterion/criterion.h>

#include "fixture.h"
#include "serve/records.h"

/* A small classifier: samples [1, 2, 2] (4 values), 3 classes. */
static char *labels3[] = {"cat", "dog", "bird"};
static dl_model_conf conf;
static record_env env;
static dl_err err;
static float *x;

static void setup(void)
{
    fx_tiny_classifier(&conf, labels3);
    conf.scale = 1.0f, conf.mean = 0.0f, conf.std = 2.0f;
    memset(&env, 0, sizeof(env));
    memset(&err, 0, sizeof(err));
    x = NULL;
}

static void teardown(void)
{
    record_env_fini(&env);
    free(x);
}

TestSuite(records, .init = setup, .fini = teardown, .timeout = 10);

static record_in json_in(const char *text)
{
    return (record_in){ .value = text, .len = strlen(text), .topic = "in", .partition = 3,
                        .offset = 42 };
}

/* Opens and decodes; returns the first fault. */
static record_fault take(const record_in *in, const char *def, int64_t *n)
{
    record_fault f = record_open(in, def, 1024, &env, &err);
    if (f == REC_OK)
        f = record_decode(in, &env, &conf, 4, n, &x, &err);
    return f;
}

Test(records, data_form_raw)
{
    record_in in = json_in("{\"id\": \"a1\", \"data\": [2, 4, 6, 8, 10, 12, 14, 16]}");
    int64_t n = 0;
    cr_assert_eq(take(&in, "tiny", &n), REC_OK, "%s", err.msg);
    cr_expect_str_eq(env.id, "a1");
    cr_expect_str_eq(env.model, "tiny");
    cr_assert_eq(n, 2);
    /* raw: the batcher, not the decoder, applies the scaling (std 2) */
    cr_expect_float_eq(x[0], 2.0f, 1e-6);
    cr_expect_float_eq(x[7], 16.0f, 1e-6);
}

Test(records, oip_form_with_model_and_version)
{
    record_in in = json_in("{\"id\": \"r\", \"model\": \"tiny\", \"model_version\": \"3\", "
                           "\"inputs\": [{\"name\": \"pixels\", \"shape\": [1, 4], "
                           "\"datatype\": \"UINT8\", \"data\": [0, 2, 4, 6]}]}");
    int64_t n = 0;
    cr_assert_eq(take(&in, NULL, &n), REC_OK, "%s", err.msg);
    cr_expect_eq(env.version, 3);
    cr_assert_eq(n, 1);
    cr_expect_float_eq(x[3], 6.0f, 1e-6);
}

Test(records, binary_form_header_model_and_id)
{
    float v[4] = {2, 2, 2, 2};
    record_in in = { .value = v, .len = sizeof(v), .binary = true, .model_hdr = "tiny",
                     .id_hdr = "b-1", .topic = "in", .partition = 0, .offset = 1 };
    int64_t n = 0;
    cr_assert_eq(take(&in, NULL, &n), REC_OK, "%s", err.msg);
    cr_expect_str_eq(env.id, "b-1");
    cr_expect_eq(n, 1);
    cr_expect_float_eq(x[0], 2.0f, 1e-6);
}

Test(records, id_from_integer_and_from_the_source)
{
    record_in in = json_in("{\"id\": 17, \"data\": [1, 2, 3, 4]}");
    int64_t n;
    cr_assert_eq(take(&in, "tiny", &n), REC_OK, "%s", err.msg);
    cr_expect_str_eq(env.id, "17");
    record_env_fini(&env);
    free(x);
    x = NULL;
    in = json_in("{\"data\": [1, 2, 3, 4]}");
    cr_assert_eq(take(&in, "tiny", &n), REC_OK, "%s", err.msg);
    cr_expect_str_eq(env.id, "in/3/42");
}

/* Every refusal: its kind, a message naming the problem, and the id kept. */
static void refused(const record_in *in, const char *def, record_fault want, const char *needle)
{
    int64_t n;
    record_fault f = take(in, def, &n);
    cr_expect_eq(f, want, "fault %s, want %s (%s)", record_fault_name(f), record_fault_name(want),
                 err.msg);
    cr_expect_not_null(strstr(err.msg, needle), "'%s' lacks '%s'", err.msg, needle);
    cr_expect_not_null(env.id, "the dead letter is still named");
    cr_expect_null(x);
    record_env_fini(&env);
    free(x);
    x = NULL;
}

Test(records, refusals)
{
    record_in in = json_in("");
    refused(&in, "tiny", REC_EMPTY, "empty");
    char big[2000];
    memset(big, ' ', sizeof(big) - 1);
    big[sizeof(big) - 1] = '\0';
    in = json_in(big);
    refused(&in, "tiny", REC_OVERSIZE, "max_record_bytes");
    in = json_in("{\"id\": \"a\", \"data\": [1, 2");
    refused(&in, "tiny", REC_JSON, "invalid JSON");
    in = json_in("[1, 2, 3, 4]");
    refused(&in, "tiny", REC_JSON, "JSON object");
    in = json_in("{\"id\": \"a\", \"values\": [1, 2, 3, 4]}");
    refused(&in, "tiny", REC_JSON, "neither 'inputs' nor 'data'");
    in = json_in("{\"id\": [1], \"data\": [1, 2, 3, 4]}");
    refused(&in, "tiny", REC_JSON, "'id'");
    in = json_in("{\"id\": \"a\", \"data\": [1, 2, 3, 4]}");
    refused(&in, NULL, REC_MODEL, "default_model");
    in = json_in("{\"id\": \"a\", \"model\": \"../x\", \"data\": [1, 2, 3, 4]}");
    refused(&in, "tiny", REC_MODEL, "not a valid model name");
    in = json_in("{\"id\": \"a\", \"data\": [1, 2, 3]}");
    refused(&in, "tiny", REC_INPUT, "multiple of 4");
    in = json_in("{\"id\": \"a\", \"data\": [1, 2, \"3\", 4]}");
    refused(&in, "tiny", REC_INPUT, "not a number");
    in = json_in("{\"id\": \"a\", \"data\": [1, 2, 1e39, 4]}");
    refused(&in, "tiny", REC_INPUT, "not a finite float");
    in = json_in("{\"id\": \"a\", \"inputs\": [{\"name\": \"pixels\", \"shape\": [1, 4], "
                 "\"datatype\": \"BOOL\", \"data\": [1, 0, 1, 0]}]}");
    refused(&in, "tiny", REC_INPUT, "BOOL");
    float nan4[4] = {1, NAN, 1, 1};
    in = (record_in){ .value = nan4, .len = sizeof(nan4), .binary = true, .id_hdr = "n" };
    refused(&in, "tiny", REC_INPUT, "not finite");
    in.len = 6;
    refused(&in, "tiny", REC_INPUT, "multiple of 16");
    float ok4[4] = {1, 1, 1, 1};
    in = (record_in){ .value = ok4, .len = sizeof(ok4), .binary = true, .id_hdr = "\xff\xfe" };
    refused(&in, "tiny", REC_JSON, "UTF-8");
}

Test(records, output_json)
{
    float y[6] = {0.1f, 0.7f, 0.2f, 0.5f, 0.2f, 0.3f};
    record_out o = { .id = "a\"1", .model = "tiny", .version = 2, .conf = &conf, .n = 1,
                     .out_dim = 3, .y = y, .topic = "in", .partition = 1, .offset = 9 };
    size_t len;
    char *text = record_output(&o, &len);
    cr_assert_not_null(text);
    cr_expect_eq(len, strlen(text));
    cr_expect_str_eq(text, "{\"id\":\"a\\\"1\",\"model\":\"tiny\",\"version\":2,\"class\":1,"
                           "\"label\":\"dog\",\"scores\":[0.1,0.7,0.2],"
                           "\"source\":{\"topic\":\"in\",\"partition\":1,\"offset\":9}}");
    free(text);
    o.n = 2;   /* two samples: arrays */
    text = record_output(&o, &len);
    cr_assert_not_null(text);
    cr_expect_str_eq(text, "{\"id\":\"a\\\"1\",\"model\":\"tiny\",\"version\":2,\"class\":[1,0],"
                           "\"label\":[\"dog\",\"cat\"],\"scores\":[[0.1,0.7,0.2],[0.5,0.2,0.3]],"
                           "\"source\":{\"topic\":"
                           "\"in\",\"partition\":1,\"offset\":9}}");
    free(text);
    conf.nlabels = 0;   /* no labels: null; control characters escaped */
    o.n = 1;
    o.id = "tab\there";
    text = record_output(&o, &len);
    cr_assert_not_null(text);
    cr_expect_not_null(strstr(text, "\"id\":\"tab\\u0009here\""), "%s", text);
    cr_expect_not_null(strstr(text, "\"label\":null,"), "%s", text);
    free(text);
}

/* The pipeline's reuse: outputs formatted into one buffer, inputs decoded
 * into one buffer that grows only when a record needs more. */
Test(records, buffers_reused)
{
    float y[3] = {0.25f, 0.5f, 0.25f};
    record_out o = { .id = "r", .model = "tiny", .version = 1, .conf = &conf, .n = 1,
                     .out_dim = 3, .y = y, .topic = "in", .partition = 0, .offset = 1 };
    dl_sbuf b = {0};
    cr_assert(record_format(&o, &b));
    char *first = strdup(b.s);
    char *mem = b.s;
    b.len = 0;
    cr_assert(record_format(&o, &b));
    cr_expect_str_eq(b.s, first);
    cr_expect_eq(b.s, mem, "the buffer was not reused");
    free(first);
    dl_sbuf_free(&b);

    float eight[8] = {1, 2, 3, 4, 5, 6, 7, 8};
    record_in in = { .value = eight, .len = sizeof(eight), .binary = true, .id_hdr = "b" };
    float *buf = NULL;
    size_t cap = 0;
    int64_t n = 0;
    cr_assert_eq(record_open(&in, "tiny", 1024, &env, &err), REC_OK, "%s", err.msg);
    cr_assert_eq(record_decode_into(&in, &env, &conf, 4, &n, &buf, &cap, &err), REC_OK);
    cr_expect_eq(n, 2);
    cr_expect_eq(cap, 8);
    float *kept = buf;
    in.len = 4 * sizeof(float);   /* one sample: fits */
    cr_assert_eq(record_decode_into(&in, &env, &conf, 4, &n, &buf, &cap, &err), REC_OK);
    cr_expect_eq(n, 1);
    cr_expect_eq(buf, kept, "the buffer was not reused");
    in.len = 6;   /* refused: the buffer stays the caller's */
    cr_expect_eq(record_decode_into(&in, &env, &conf, 4, &n, &buf, &cap, &err), REC_INPUT);
    cr_expect_eq(buf, kept);
    free(buf);
}

/* What err->code says about a refusal: the record's fault (invalid, too
 * large) as against the daemon's (out of memory, not testable here). */
Test(records, refusal_statuses)
{
    int64_t n;
    char big[2000];
    memset(big, ' ', sizeof(big) - 1);
    big[sizeof(big) - 1] = '\0';
    record_in in = json_in(big);
    cr_expect_eq(take(&in, "tiny", &n), REC_OVERSIZE);
    cr_expect_eq(err.code, DL_ERR_TOO_LARGE, "%s", dl_status_str(err.code));
    record_env_fini(&env);
    in = json_in("{\"id\": \"a\", \"data\": [1, 2");
    cr_expect_eq(take(&in, "tiny", &n), REC_JSON);
    cr_expect_eq(err.code, DL_ERR_INVALID, "%s", dl_status_str(err.code));
    record_env_fini(&env);
    in = json_in("{\"id\": \"a\", \"data\": [1, 2, 3]}");
    cr_expect_eq(take(&in, "tiny", &n), REC_INPUT);
    cr_expect_eq(err.code, DL_ERR_INVALID, "%s", dl_status_str(err.code));
}

/* The dead-letter kind of a status met once the model is known. */
Test(records, fault_of_status)
{
    cr_expect_eq(record_fault_of(DL_ERR_INVALID), REC_INPUT);
    cr_expect_eq(record_fault_of(DL_ERR_TOO_LARGE), REC_OVERSIZE);
    cr_expect_eq(record_fault_of(DL_ERR_NOT_FOUND), REC_MODEL);
    cr_expect_eq(record_fault_of(DL_ERR_NOMEM), REC_INFERENCE);
    cr_expect_eq(record_fault_of(DL_ERR_BACKEND), REC_INFERENCE);
    cr_expect_eq(record_fault_of(DL_ERR_UNAVAILABLE), REC_INFERENCE);
}
