/* test_records.c: Kafka record values on their own: the four forms,
 * ids, models, every refusal with its fault kind, and the output JSON. */
#define _POSIX_C_SOURCE 200809L
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <criterion/criterion.h>

#include "fixture.h"
#include "serve/kafka/records.h"

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
        f = record_decode(in, &env, &conf, NULL, 4, n, &x, &err);
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

/* [kafka] output_format = oip-json: the InferenceResponse that HTTP
 * answers, with the source as "parameters". */
Test(records, output_oip_json)
{
    float y[3] = {0.1f, 0.7f, 0.2f};
    record_out o = { .id = "a1", .model = "tiny", .version = 2, .conf = &conf, .n = 1,
                     .out_dim = 3, .y = y, .topic = "in", .partition = 1, .offset = 9 };
    dl_sbuf b = {0};
    size_t json_len;
    cr_assert(record_format_oip(&o, false, &b, &json_len));
    cr_expect_eq(json_len, b.len);
    cr_expect_str_eq(b.s, "{\"model_name\":\"tiny\",\"model_version\":\"2\",\"id\":\"a1\","
                          "\"parameters\":{\"source_topic\":\"in\",\"source_partition\":1,"
                          "\"source_offset\":9},\"outputs\":["
                          "{\"name\":\"probs\",\"datatype\":\"FP32\",\"shape\":[1,3],"
                          "\"data\":[0.1,0.7,0.2]},"
                          "{\"name\":\"label\",\"datatype\":\"BYTES\",\"shape\":[1],"
                          "\"data\":[\"dog\"]},"
                          "{\"name\":\"class\",\"datatype\":\"INT64\",\"shape\":[1],"
                          "\"data\":[1]}]}");
    dl_sbuf_free(&b);
}

/* oip-binary: the same JSON with binary_data_size instead of "data", the
 * tensors' bytes after it in output order. */
Test(records, output_oip_binary)
{
    float y[6] = {0.1f, 0.7f, 0.2f, 0.5f, 0.2f, 0.3f};
    record_out o = { .id = "b", .model = "tiny", .version = 1, .conf = &conf, .n = 2,
                     .out_dim = 3, .y = y, .topic = "in", .partition = 0, .offset = 5 };
    dl_sbuf b = {0};
    size_t json_len;
    cr_assert(record_format_oip(&o, true, &b, &json_len));
    char *json = strndup(b.s, json_len);
    cr_expect_not_null(strstr(json, "\"shape\":[2,3],\"parameters\":{\"binary_data_size\":24}"),
                       "%s", json);
    cr_expect_not_null(strstr(json, "\"name\":\"label\",\"datatype\":\"BYTES\",\"shape\":[2],"
                                    "\"parameters\":{\"binary_data_size\":14}"), "%s", json);
    cr_expect_not_null(strstr(json, "\"shape\":[2],\"parameters\":{\"binary_data_size\":16}"),
                       "%s", json);
    cr_expect_null(strstr(json, "\"data\""), "%s", json);
    free(json);
    /* 24 bytes of probabilities, "dog" and "cat" with their lengths, 1 and 0 */
    cr_assert_eq(b.len - json_len, 24 + 14 + 16);
    const unsigned char *p = (const unsigned char *)b.s + json_len;
    cr_expect_eq(memcmp(p, y, 24), 0);   /* the test runs on little-endian hosts */
    cr_expect_eq(memcmp(p + 24, "\3\0\0\0dog\3\0\0\0cat", 14), 0);
    int64_t cls[2];
    memcpy(cls, p + 38, sizeof(cls));
    cr_expect(cls[0] == 1 && cls[1] == 0);
    dl_sbuf_free(&b);
}

/* A model of two outputs (click: bce, rating: mse; two samples): the
 * dlserve form gives the first as "output"/"values" and the other in
 * "outputs"; the OIP form every output by name. */
Test(records, output_of_two_outputs)
{
    dl_output_conf outs[2] = {{.name = "click", .loss = DL_LOSS_BCE, .dim = 1, .served = 1},
                              {.name = "rating", .loss = DL_LOSS_MSE, .dim = 1, .served = 1}};
    float y[4] = {0.25f, -1.5f, 0.75f, 2.0f};
    conf.loss = DL_LOSS_BCE;
    conf.noutputs = 2;
    conf.outputs = outs;
    strcpy(conf.output_name, "click");
    record_out o = { .id = "r", .model = "tt", .version = 1, .conf = &conf, .n = 2,
                     .out_dim = 2, .y = y, .topic = "in", .partition = 0, .offset = 7 };
    size_t len;
    char *text = record_output(&o, &len);
    cr_assert_not_null(text);
    cr_expect_str_eq(text, "{\"id\":\"r\",\"model\":\"tt\",\"version\":1,"
                           "\"output\":\"click\",\"values\":[[0.25],[0.75]],"
                           "\"outputs\":{\"rating\":[[-1.5],[2]]},"
                           "\"source\":{\"topic\":\"in\",\"partition\":0,\"offset\":7}}");
    free(text);
    dl_sbuf b = {0};
    cr_assert(record_format_oip(&o, false, &b, &len));
    cr_expect_not_null(strstr(b.s, "\"outputs\":[{\"name\":\"click\",\"datatype\":\"FP32\","
                                   "\"shape\":[2,1],\"data\":[0.25,0.75]},{\"name\":\"rating\","
                                   "\"datatype\":\"FP32\",\"shape\":[2,1],\"data\":[-1.5,2]}]}"),
                       "%s", b.s);
    dl_sbuf_free(&b);
}

/* A model that is not a classifier (mean squared error) has only its
 * tensor: no class or label in either form. */
Test(records, output_not_a_classifier)
{
    float y[3] = {1.5f, -2.0f, 0.25f};
    conf.loss = DL_LOSS_MSE;
    record_out o = { .id = "r", .model = "tiny", .version = 1, .conf = &conf, .n = 1,
                     .out_dim = 3, .y = y, .topic = "in", .partition = 0, .offset = 7 };
    size_t len;
    char *text = record_output(&o, &len);
    cr_assert_not_null(text);
    cr_expect_str_eq(text, "{\"id\":\"r\",\"model\":\"tiny\",\"version\":1,"
                           "\"output\":\"probs\",\"values\":[1.5,-2,0.25],"
                           "\"source\":{\"topic\":\"in\",\"partition\":0,\"offset\":7}}");
    free(text);
    dl_sbuf b = {0};
    cr_assert(record_format_oip(&o, false, &b, &len));
    cr_expect_not_null(strstr(b.s, "\"outputs\":[{\"name\":\"probs\",\"datatype\":"
                                   "\"FP32\",\"shape\":[1,3],\"data\":[1.5,-2,0.25]}]}"),
                       "%s", b.s);
    dl_sbuf_free(&b);
}

/* The pipeline's reuse: outputs formatted into one buffer, raw float32
 * inputs read where they lie. */
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

    /* Raw float32 values are checked where they lie, at any alignment,
     * and not copied: the caller's buffer stays as it was. */
    float eight[8] = {1, 2, 3, 4, 5, 6, 7, 8};
    static unsigned char raw[1 + sizeof(eight)];
    memcpy(raw + 1, eight, sizeof(eight));
    record_in in = { .value = raw + 1, .len = sizeof(eight), .binary = true, .id_hdr = "b" };
    float *buf = NULL;
    size_t cap = 0;
    int64_t n = 0;
    const void *values = NULL;
    cr_assert_eq(record_open(&in, "tiny", 1024, &env, &err), REC_OK, "%s", err.msg);
    cr_assert_eq(record_decode_into(&in, &env, &conf, NULL, 4, &n, &buf, &cap, &values, &err),
                 REC_OK);
    cr_expect_eq(n, 2);
    cr_expect_eq(values, raw + 1, "raw values were copied");
    cr_expect_null(buf);
    cr_expect_eq(cap, 0);
    float v7;
    memcpy(&v7, (const unsigned char *)values + 7 * sizeof(float), sizeof(v7));
    cr_expect_eq(v7, 8.0f);
    in.len = 6;   /* refused: not whole samples */
    cr_expect_eq(record_decode_into(&in, &env, &conf, NULL, 4, &n, &buf, &cap, &values, &err),
                 REC_INPUT);
    cr_expect_null(values);
    in.len = sizeof(eight);
    float nan = NAN;   /* the sixth value, unaligned */
    memcpy(raw + 1 + 5 * sizeof(float), &nan, sizeof(nan));
    cr_expect_eq(record_decode_into(&in, &env, &conf, NULL, 4, &n, &buf, &cap, &values, &err),
                 REC_INPUT);
    cr_expect_not_null(strstr(err.msg, "value 5 is not finite"), "%s", err.msg);
    cr_expect_null(buf);
}

/* Raw float32: every Inf and NaN bit pattern is refused by its index, the
 * largest, smallest and negative finite values are taken. */
Test(records, binary_finite_edges)
{
    const uint32_t bad[] = {0x7f800000u, 0xff800000u, 0x7fc00000u, 0xffc00000u,
                            0x7f800001u, 0x7fffffffu, 0xffffffffu};
    const uint32_t good[] = {0x7f7fffffu, 0xff7fffffu, 0x00000001u, 0x80000000u,
                             0x00800000u, 0x3f800000u, 0xbf800000u, 0x00000000u};
    uint32_t v[12];
    record_in in = { .value = v, .len = sizeof(v), .binary = true, .id_hdr = "e" };
    int64_t n = 0;
    for (size_t i = 0; i < sizeof(good) / sizeof(good[0]); i++)
        v[i] = good[i];
    for (size_t i = 8; i < 12; i++)
        v[i] = good[i - 8];
    cr_assert_eq(take(&in, "tiny", &n), REC_OK, "%s", err.msg);
    cr_expect_eq(n, 3);
    for (size_t b = 0; b < sizeof(bad) / sizeof(bad[0]); b++) {
        size_t at = (b * 5 + 3) % 12;
        uint32_t keep = v[at];
        v[at] = bad[b];
        free(x);
        x = NULL;
        record_env_fini(&env);
        char want[32];
        snprintf(want, sizeof(want), "value %zu is not finite", at);
        cr_expect_eq(take(&in, "tiny", &n), REC_INPUT, "0x%08x taken", bad[b]);
        cr_expect_not_null(strstr(err.msg, want), "0x%08x: %s", bad[b], err.msg);
        v[at] = keep;
    }
}

/* An OIP binary payload record: json_len bytes of JSON, then the values. */
static char payload[512];
static record_in payload_in(const char *json, const float *v, size_t nv, const char *hdr)
{
    size_t jl = strlen(json);
    memcpy(payload, json, jl);
    memcpy(payload + jl, v, nv * sizeof(float));   /* little-endian hosts, as the wire */
    return (record_in){ .value = payload, .len = jl + nv * sizeof(float), .json_len_hdr = hdr,
                        .topic = "in", .partition = 1, .offset = 7 };
}

#define PAYLOAD_JSON(size) "{\"id\": \"p1\", \"model\": \"tiny\", \"inputs\": [{\"name\": " \
    "\"pixels\", \"shape\": [1, 4], \"datatype\": \"FP32\", \"parameters\": " \
    "{\"binary_data_size\": " size "}}]}"

Test(records, binary_payload_form)
{
    const char *json = PAYLOAD_JSON("16");
    char hdr[16];
    snprintf(hdr, sizeof(hdr), "%zu", strlen(json));
    float v[4] = {1.5f, 2, 3, 250};
    record_in in = payload_in(json, v, 4, hdr);
    in.binary = true;   /* content-type octet-stream too: the header decides */
    int64_t n = 0;
    cr_assert_eq(take(&in, NULL, &n), REC_OK, "%s", err.msg);
    cr_expect_str_eq(env.id, "p1");
    cr_expect_str_eq(env.model, "tiny");
    cr_assert_eq(n, 1);
    for (int i = 0; i < 4; i++)
        cr_expect_eq(x[i], v[i], "x[%d] %g", i, x[i]);
}

Test(records, binary_payload_refusals)
{
    const char *json = PAYLOAD_JSON("16");
    char hdr[16];
    snprintf(hdr, sizeof(hdr), "%zu", strlen(json));
    float v[4] = {1, 2, 3, 4};
    /* the header is not a byte count, or more than the value holds */
    record_in in = payload_in(json, v, 4, "12x");
    refused(&in, "tiny", REC_JSON, "Inference-Header-Content-Length");
    in = payload_in(json, v, 4, "100000");
    refused(&in, "tiny", REC_JSON, "Inference-Header-Content-Length");
    /* sizes that do not add up: 12 bytes follow where 16 are announced, 16
     * where the JSON ends earlier than the header says, 20 of which 4 are
     * left over */
    in = payload_in(json, v, 3, hdr);
    refused(&in, "tiny", REC_INPUT, "binary_data_size");
    in = payload_in(json, v, 4, "10");
    refused(&in, "tiny", REC_JSON, "invalid JSON");
    float v5[5] = {1, 2, 3, 4, 5};
    in = payload_in(json, v5, 5, hdr);
    refused(&in, "tiny", REC_INPUT, "add up to 16");
    const char *data = "{\"id\": \"d\", \"data\": [1, 2, 3, 4]}";
    snprintf(hdr, sizeof(hdr), "%zu", strlen(data));
    in = payload_in(data, v, 1, hdr);
    refused(&in, "tiny", REC_INPUT, "'data' takes none");
}

/* {"model": "tiny", "data": [0, 1, ... n - 1 (mod 256)]} into text, with
 * element bad (if < n) written as true. */
static void data_text(char *text, int n, int bad)
{
    size_t k = (size_t)sprintf(text, "{\"model\": \"tiny\", \"data\": [");
    for (int i = 0; i < n; i++)
        k += (size_t)sprintf(text + k, i == bad ? "%strue" : "%s%d", i ? "," : "", i % 256);
    strcpy(text + k, "]}");
}

/* The {"data"} form as the scanner reads it: more values than its first
 * buffer holds, a refused element named by its index, whole samples. */
Test(records, data_form_scanned)
{
    enum { N = 3000 };   /* 750 samples of 4 */
    static char text[N * 8 + 64];
    data_text(text, N, N);
    record_in in = json_in(text);
    int64_t n = 0;
    cr_assert_eq(record_open(&in, NULL, sizeof(text), &env, &err), REC_OK, "%s", err.msg);
    cr_assert_eq(record_decode(&in, &env, &conf, NULL, 4, &n, &x, &err), REC_OK, "%s", err.msg);
    cr_assert_eq(n, N / 4);
    cr_expect_eq(x[N - 1], (N - 1) % 256);
    record_env_fini(&env);
    free(x);
    x = NULL;

    data_text(text, N, 2500);
    in = json_in(text);
    cr_expect_eq(record_open(&in, NULL, sizeof(text), &env, &err), REC_INPUT);
    cr_expect_not_null(strstr(err.msg, "data[2500] is not a number"), "%s", err.msg);
    cr_expect_not_null(env.id);
    record_env_fini(&env);

    /* not whole samples: refused against the model */
    in = json_in("{\"id\": \"a\", \"data\": [1, 2, 3, 4, 5, 6]}");
    cr_assert_eq(record_open(&in, "tiny", 1024, &env, &err), REC_OK, "%s", err.msg);
    cr_expect_eq(record_decode(&in, &env, &conf, NULL, 4, &n, &x, &err), REC_INPUT);
    cr_expect_not_null(strstr(err.msg, "6 values: expected a multiple of 4"), "%s", err.msg);
    cr_expect_null(x);
}

/* A record with both "inputs" and "data" is read as its "inputs". */
Test(records, inputs_win_over_data)
{
    record_in in = json_in("{\"data\": [9, 9, 9, 9], \"inputs\": [{\"name\": \"pixels\", "
                           "\"shape\": [1, 4], \"datatype\": \"FP32\", \"data\": [1, 2, 3, 4]}]}");
    int64_t n = 0;
    cr_assert_eq(take(&in, "tiny", &n), REC_OK, "%s", err.msg);
    cr_assert_eq(n, 1);
    cr_expect_eq(x[0], 1.0f);
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

/* dl_strlcpy, which copies model names on the hot paths: whole when they
 * fit, cut and terminated when they do not. */
Test(records, strlcpy)
{
    char b[6];
    memset(b, 'x', sizeof(b));
    dl_strlcpy(b, "tiny", sizeof(b));
    cr_expect_str_eq(b, "tiny");
    dl_strlcpy(b, "fashion", sizeof(b));
    cr_expect_str_eq(b, "fashi");
    dl_strlcpy(b, "", sizeof(b));
    cr_expect_str_eq(b, "");
    dl_strlcpy(b, "abc", 1);
    cr_expect_str_eq(b, "");
}

/* ---- a tagger: text in, per-token outputs ------------------------------------
 * "text" (BYTES, bytes tokenizer, max_length 6) to "tags" (softmax
 * cross-entropy a position, 3 labels) and "path" (a crf, 3 labels). */

static dl_model_conf *tconf;
static dl_tokenizer *ttok[1];

static void tagger_setup(void)
{
    setup();
    const char *t = fx_dq(
        "{'name': 'tagger', 'inputs': [{'name': 'text', 'datatype': 'BYTES', 'shape': [1], "
        "'max_length': 6, 'tokenizer': {'type': 'bytes'}}], 'layers': [{'name': 'emb', "
        "'type': 'embedding', 'num_embeddings': 256, 'dim': 4}, {'name': 'fc1', 'type': "
        "'dense', 'units': 3}, {'name': 'fc2', 'type': 'dense', 'units': 3, 'inputs': "
        "['emb']}], 'outputs': [{'name': 'tags', 'from': 'fc1', 'loss': "
        "'softmax_cross_entropy', 'labels': ['O', 'B', 'I']}, {'name': 'path', 'from': "
        "'fc2', 'loss': 'crf', 'labels': ['x', 'y', 'z']}]}");
    cr_assert_eq(dl_model_conf_parse(t, strlen(t), "tagger.json", &tconf, &err), DL_OK, "%s",
                 err.msg);
    cr_assert_eq(dl_tokenizer_new(&tconf->inputs[0].tok, &ttok[0], &err), DL_OK, "%s", err.msg);
}

static void tagger_teardown(void)
{
    teardown();
    dl_tokenizer_free(ttok[0]);
    dl_model_conf_free(tconf);
}

TestSuite(records_seq, .init = tagger_setup, .fini = tagger_teardown, .timeout = 10);

static record_fault take_text(const char *text, int64_t *n)
{
    record_in in = json_in(text);
    record_fault f = record_open(&in, "tagger", 1024, &env, &err);
    if (f == REC_OK)
        f = record_decode(&in, &env, tconf, ttok, 7, n, &x, &err);
    return f;
}

Test(records_seq, texts_tokenized_and_packed)
{
    int64_t n = 0;
    cr_assert_eq(take_text("{\"id\": \"t\", \"inputs\": [{\"name\": \"text\", \"datatype\": "
                           "\"BYTES\", \"shape\": [2], \"data\": [\"ab\", \"xyz\"]}]}", &n),
                 REC_OK, "%s", err.msg);
    cr_assert_eq(n, 2);
    const float want[14] = {2, 'a', 'b', 0, 0, 0, 0, 3, 'x', 'y', 'z', 0, 0, 0};
    for (int i = 0; i < 14; i++)
        cr_expect_eq(x[i], want[i], "x[%d] = %g", i, (double)x[i]);
}

Test(records_seq, over_long_and_malformed_texts_are_input_faults)
{
    int64_t n = 0;
    cr_expect_eq(take_text("{\"id\": \"t\", \"inputs\": [{\"name\": \"text\", \"datatype\": "
                           "\"BYTES\", \"shape\": [1], \"data\": [\"abcdefg\"]}]}", &n),
                 REC_INPUT);
    cr_expect_not_null(strstr(err.msg, "input 'text': 7 tokens, above max_length 6"), "%s",
                       err.msg);
    record_env_fini(&env);
    cr_expect_eq(take_text("{\"id\": \"t\", \"inputs\": [{\"name\": \"text\", \"datatype\": "
                           "\"BYTES\", \"shape\": [1], \"data\": [5]}]}", &n), REC_INPUT);
    cr_expect_not_null(strstr(err.msg, "must be a string (BYTES)"), "%s", err.msg);
    record_env_fini(&env);
    /* packed rows in a flat record: the length is checked */
    cr_expect_eq(take_text("{\"id\": \"t\", \"data\": [7, 97, 98, 99, 100, 101, 102]}", &n),
                 REC_INPUT);
    cr_expect_not_null(strstr(err.msg, "sample 0 has length 7"), "%s", err.msg);
    record_env_fini(&env);
    cr_expect_eq(take_text("{\"id\": \"t\", \"data\": [2, 97, 98, 0, 0, 0, 0]}", &n), REC_OK,
                 "%s", err.msg);
}

/* Two samples of lengths 2 and 1, as served: 6 positions of 3 scores,
 * then 6 tags. */
static const float ty[2 * 24] = {
    0.5f, 0.25f, 0.25f, 0.125f, 0.75f, 0.125f, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0,
    2, 0, -1, -1, -1, -1,
    0.25f, 0.25f, 0.5f, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0,
    1, -1, -1, -1, -1, -1,
};
static const float tx[2 * 7] = {2, 'a', 'b', 0, 0, 0, 0, 1, 'c', 0, 0, 0, 0, 0};

Test(records_seq, output_of_per_token_outputs)
{
    record_out o = {.id = "t", .model = "tagger", .version = 1, .conf = tconf, .n = 2,
                    .out_dim = 24, .y = ty, .x = tx, .in_dim = 7, .topic = "in",
                    .partition = 0, .offset = 9};
    size_t len;
    char *text = record_output(&o, &len);
    cr_assert_not_null(text);
    cr_expect_str_eq(text, "{\"id\":\"t\",\"model\":\"tagger\",\"version\":1,"
                           "\"output\":\"tags\",\"values\":[[[0.5,0.25,0.25],[0.125,0.75,0.125]],"
                           "[[0.25,0.25,0.5]]],\"outputs\":{\"path\":[[\"z\",\"x\"],[\"y\"]]},"
                           "\"source\":{\"topic\":\"in\",\"partition\":0,\"offset\":9}}");
    free(text);
    /* the OIP form: [batch, the longest length, ...], padded */
    dl_sbuf b = {0};
    size_t json_len;
    cr_assert(record_format_oip(&o, false, &b, &json_len));
    cr_expect_not_null(strstr(b.s, "{\"name\":\"tags\",\"datatype\":\"FP32\",\"shape\":[2,2,3],"
                                   "\"data\":[0.5,0.25,0.25,0.125,0.75,0.125,"
                                   "0.25,0.25,0.5,0,0,0]}"), "%s", b.s);
    cr_expect_not_null(strstr(b.s, "{\"name\":\"path\",\"datatype\":\"INT64\",\"shape\":[2,2],"
                                   "\"data\":[2,0,1,-1]}"), "%s", b.s);
    dl_sbuf_free(&b);
    /* a crf without labels: its tags */
    int nlabels = tconf->outputs[1].nlabels;
    tconf->outputs[1].nlabels = 0;
    o.n = 1;
    text = record_output(&o, &len);
    tconf->outputs[1].nlabels = nlabels;   /* for dl_model_conf_free */
    cr_expect_not_null(strstr(text, "\"outputs\":{\"path\":[2,0]}"), "%s", text);
    free(text);
}
