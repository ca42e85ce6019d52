/* test_oip.c: the Open Inference Protocol layer on its own: strict URL
 * routing, infer-request parsing (flat and nested data, FP32 and UINT8,
 * shapes, every refusal with its message), the JSON scanner under it
 * (malformed JSON, escapes, duplicate keys, numbers, nesting, truncations),
 * the binary tensor data extension both ways, names checked against the
 * model, input scaling and the answers (infer response, model metadata,
 * repository index). */
#define _POSIX_C_SOURCE 200809L
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <criterion/criterion.h>

#include "fixture.h"
#include "serve/oip/oip.h"

/* A small classifier: samples [1, 2, 2] (4 values), 3 classes. */
static char *labels3[] = {"cat", "dog", "Ankle boot"};
static dl_model_conf conf;
static oip_request req;
static dl_err err;

static void setup(void)
{
    fx_tiny_classifier(&conf, labels3);
    conf.scale = 1.0f / 255.0f, conf.mean = 0.5f, conf.std = 0.25f;
    memset(&req, 0, sizeof(req));
    memset(&err, 0, sizeof(err));
}

static void teardown(void) { oip_request_fini(&req); }

TestSuite(oip, .init = setup, .fini = teardown, .timeout = 10);

static dl_status parse(const char *text)
{
    const char *body = fx_dq(text);
    return oip_parse_infer(body, strlen(body), strlen(body), &conf, NULL, 4, &req, &err);
}

/* Parses text, expects DL_ERR_INVALID with `needle` in the message and an
 * empty request. */
static void refused(const char *text, const char *needle)
{
    cr_assert_eq(parse(text), DL_ERR_INVALID, "accepted: %s", text);
    cr_expect_not_null(strstr(err.msg, needle), "message was: %s (wanted '%s')", err.msg, needle);
    cr_expect_null(req.x);
    cr_expect_null(req.id);
}

static void expect_x(const float *want, int64_t n)
{
    for (int64_t i = 0; i < n; i++)
        cr_expect_float_eq(req.x[i], want[i], 1e-6, "x[%lld] = %g, want %g", (long long)i,
                           (double)req.x[i], (double)want[i]);
}

/* ---- routing ------------------------------------------------------------ */

Test(oip, routes_every_endpoint)
{
    oip_route r;
    cr_expect_eq(oip_route_parse("/v2/health/live", &r), OIP_ROUTE_LIVE);
    cr_expect_eq(oip_route_parse("/v2/health/ready", &r), OIP_ROUTE_READY);
    cr_expect_eq(oip_route_parse("/v2", &r), OIP_ROUTE_SERVER);
    cr_expect_eq(oip_route_parse("/metrics", &r), OIP_ROUTE_METRICS);
    cr_expect_eq(oip_route_parse("/status", &r), OIP_ROUTE_STATUS);
    cr_expect_eq(oip_route_parse("/", &r), OIP_ROUTE_PAGE);
    cr_expect_eq(oip_route_parse("/status/training", &r), OIP_ROUTE_TRAINING);
    cr_expect_eq(oip_route_parse("/ui/status.js", &r), OIP_ROUTE_PAGE_FILE);
    cr_expect_str_eq(r.model, "status.js");
    cr_expect_eq(oip_route_parse("/v2/repository/index", &r), OIP_ROUTE_REPO_INDEX);

    cr_expect_eq(oip_route_parse("/v2/models/fashion-mlp", &r), OIP_ROUTE_MODEL);
    cr_expect_str_eq(r.model, "fashion-mlp");
    cr_expect_eq(r.version, 0);
    cr_expect_eq(oip_route_parse("/v2/models/fashion-mlp/versions/12", &r), OIP_ROUTE_MODEL);
    cr_expect_eq(r.version, 12);
    cr_expect_eq(oip_route_parse("/v2/models/m.1_x/ready", &r), OIP_ROUTE_MODEL_READY);
    cr_expect_str_eq(r.model, "m.1_x");
    cr_expect_eq(oip_route_parse("/v2/models/m/versions/3/ready", &r), OIP_ROUTE_MODEL_READY);
    cr_expect_eq(r.version, 3);
    cr_expect_eq(oip_route_parse("/v2/models/m/infer", &r), OIP_ROUTE_INFER);
    cr_expect_eq(oip_route_parse("/v2/models/m/versions/7/infer", &r), OIP_ROUTE_INFER);
    cr_expect_eq(r.version, 7);
    /* A model may be called "ready" or "versions". */
    cr_expect_eq(oip_route_parse("/v2/models/ready", &r), OIP_ROUTE_MODEL);
    cr_expect_str_eq(r.model, "ready");
    cr_expect_eq(oip_route_parse("/v2/models/versions/infer", &r), OIP_ROUTE_INFER);
    cr_expect_str_eq(r.model, "versions");

    cr_expect_eq(oip_route_parse("/v2/models/m/stats", &r), OIP_ROUTE_MODEL_STATS);
    cr_expect_eq(oip_route_parse("/v2/models/m/versions/2/stats", &r), OIP_ROUTE_MODEL_STATS);
    cr_expect_eq(r.version, 2);
    /* every model's statistics: no model named */
    cr_expect_eq(oip_route_parse("/v2/models/stats", &r), OIP_ROUTE_MODEL_STATS);
    cr_expect_str_eq(r.model, "");
    cr_expect_eq(r.version, 0);
    cr_expect_eq(oip_route_parse("/v2/models/m/config", &r), OIP_ROUTE_MODEL_CONFIG);
    cr_expect_str_eq(r.model, "m");
    cr_expect_eq(oip_route_parse("/v2/models/m/versions/4/config", &r), OIP_ROUTE_MODEL_CONFIG);
    cr_expect_eq(r.version, 4);
    cr_expect(oip_route_method_ok(OIP_ROUTE_MODEL_STATS, "GET"));
    cr_expect_not(oip_route_method_ok(OIP_ROUTE_MODEL_CONFIG, "POST"));

    cr_expect_eq(oip_route_parse("/v2/repository/models/m/load", &r), OIP_ROUTE_REPO_LOAD);
    cr_expect_str_eq(r.model, "m");
    cr_expect_eq(oip_route_parse("/v2/repository/models/m/unload", &r), OIP_ROUTE_REPO_UNLOAD);
}

Test(oip, refuses_loose_paths)
{
    static const char *const bad[] = {
        "", "v2", "//v2", "/v2/", "/v2//health/live", "/v2/health/live/",
        "/v2/health", "/v2/health/dead", "/V2", "/metrics/", "/status/x", "/status/training/", "//", "/ui", "/ui/", "/ui/.hidden",
        "/ui/a/b", "/ui/../x", "/UI/status.js", "/v1/models/m",
        "/v2/models", "/v2/models/", "/v2/models/m/", "/v2/models/m//infer",
        "/v2/models/m/predict", "/v2/models/m/infer/x", "/v2/models/m/versions",
        "/v2/models/m/versions/", "/v2/models/m/versions/0", "/v2/models/m/versions/01",
        "/v2/models/m/versions/-1", "/v2/models/m/versions/1x",
        "/v2/models/m/versions/1234567890123456789",   /* 19 digits */
        "/v2/models/m/versions/1/versions/2", "/v2/models/a b/infer", "/v2/models/a%2Fb",
        "/v2/models/./infer", "/v2/models/../infer", "/v2/models/.hidden",
        "/v2/models/caf\xc3\xa9", "/v2/repository", "/v2/repository/index/x",
        "/v2/repository/models/m", "/v2/repository/models/m/reload",
        "/v2/repository/models/../load",
    };
    for (size_t i = 0; i < sizeof(bad) / sizeof(bad[0]); i++) {
        oip_route r;
        cr_expect_eq(oip_route_parse(bad[i], &r), OIP_ROUTE_NONE, "accepted '%s'", bad[i]);
        cr_expect_str_empty(r.model, "'%s' left model '%s'", bad[i], r.model);
    }
    oip_route r;
    cr_expect_eq(oip_route_parse(NULL, &r), OIP_ROUTE_NONE);
}

Test(oip, bounds_model_names)
{
    char path[512], name[200];
    oip_route r;
    memset(name, 'a', 63);
    name[63] = '\0';
    snprintf(path, sizeof(path), "/v2/models/%s/infer", name);
    cr_expect_eq(oip_route_parse(path, &r), OIP_ROUTE_INFER);
    cr_expect_str_eq(r.model, name);
    memset(name, 'a', 64);
    name[64] = '\0';
    snprintf(path, sizeof(path), "/v2/models/%s/infer", name);
    cr_expect_eq(oip_route_parse(path, &r), OIP_ROUTE_NONE);
    memset(name, 'b', 199);
    name[199] = '\0';
    snprintf(path, sizeof(path), "/v2/repository/models/%s/load", name);
    cr_expect_eq(oip_route_parse(path, &r), OIP_ROUTE_NONE);
    cr_expect(dl_model_name_valid("fashion-mlp", 11));
    cr_expect_not(dl_model_name_valid("fashion/mlp", 11));
    cr_expect_not(dl_model_name_valid("", 0));
}

Test(oip, knows_methods)
{
    cr_expect(oip_route_method_ok(OIP_ROUTE_INFER, "POST"));
    cr_expect_not(oip_route_method_ok(OIP_ROUTE_INFER, "GET"));
    cr_expect_str_eq(oip_route_allow(OIP_ROUTE_INFER), "POST");
    cr_expect(oip_route_method_ok(OIP_ROUTE_REPO_INDEX, "POST"));
    cr_expect(oip_route_method_ok(OIP_ROUTE_LIVE, "GET"));
    cr_expect(oip_route_method_ok(OIP_ROUTE_METRICS, "HEAD"));
    cr_expect_not(oip_route_method_ok(OIP_ROUTE_STATUS, "DELETE"));
    cr_expect_str_eq(oip_route_allow(OIP_ROUTE_MODEL), "GET, HEAD");
}

/* ---- infer requests: accepted ------------------------------------------ */

Test(oip, parses_flat_fp32_batch)
{
    cr_assert_eq(parse("{'inputs':[{'name':'pixels','shape':[2,1,2,2],'datatype':'FP32',"
                       "'data':[0,1,2,3,4.5,5,6,255]}]}"),
                 DL_OK, "%s", err.msg);
    cr_expect_eq(req.batch, 2);
    cr_expect_eq(req.ndim, 4);
    cr_expect_eq(req.outputs, (unsigned)OIP_OUT_ALL);
    cr_expect_null(req.id);
    expect_x((const float[]){0, 1, 2, 3, 4.5f, 5, 6, 255}, 8);
}

Test(oip, parses_nested_data)
{
    cr_assert_eq(parse("{'inputs':[{'name':'pixels','shape':[2,1,2,2],'datatype':'FP32',"
                       "'data':[[[[1,2],[3,4]]],[[[5,6],[7,8]]]]}]}"),
                 DL_OK, "%s", err.msg);
    cr_expect_eq(req.batch, 2);
    expect_x((const float[]){1, 2, 3, 4, 5, 6, 7, 8}, 8);

    oip_request_fini(&req);
    cr_assert_eq(parse("{'inputs':[{'name':'pixels','shape':[3,4],'datatype':'FP32',"
                       "'data':[[1,2,3,4],[5,6,7,8],[9,10,11,12]]}]}"),
                 DL_OK, "%s", err.msg);
    cr_expect_eq(req.batch, 3);
    expect_x((const float[]){1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12}, 12);
}

Test(oip, accepts_any_split_of_a_sample)
{
    cr_expect_eq(parse("{'inputs':[{'name':'pixels','shape':[1,4],'datatype':'FP32','data':[1,2,3,4]}]}"),
                 DL_OK, "%s", err.msg);
    cr_expect_eq(req.batch, 1);
    oip_request_fini(&req);
    cr_expect_eq(parse("{'inputs':[{'name':'pixels','shape':[2,2,2],'datatype':'FP32','data':[1,2,3,4,5,6,7,8]}]}"),
                 DL_OK, "%s", err.msg);
    cr_expect_eq(req.batch, 2);
    oip_request_fini(&req);
    cr_expect_eq(parse("{'inputs':[{'name':'pixels','shape':[1,2,1,2,1],'datatype':'FP32','data':[1,2,3,4]}]}"),
                 DL_OK, "%s", err.msg);
    cr_expect_eq(req.batch, 1);
}

Test(oip, takes_the_sample_shape_as_batch_one)
{
    cr_assert_eq(parse("{'inputs':[{'name':'pixels','shape':[1,2,2],'datatype':'FP32','data':[[[1,2],[3,4]]]}]}"),
                 DL_OK, "%s", err.msg);
    cr_expect_eq(req.batch, 1);
    expect_x((const float[]){1, 2, 3, 4}, 4);

    /* One sample's values in another shape are one sample. */
    static const char *const one[] = {"[4]", "[2,2]", "[1,1,1,4]"};
    for (int i = 0; i < 3; i++) {
        char text[200];
        snprintf(text, sizeof(text),
                 "{'inputs':[{'name':'pixels','shape':%s,'datatype':'FP32','data':[1,2,3,4]}]}", one[i]);
        oip_request_fini(&req);
        cr_assert_eq(parse(text), DL_OK, "%s: %s", one[i], err.msg);
        cr_expect_eq(req.batch, 1, "%s", one[i]);
    }

    /* A one-dimensional model: [4] is one sample. */
    conf.in_ndim = 1;
    conf.in_shape[0] = 4;
    oip_request_fini(&req);
    cr_assert_eq(parse("{'inputs':[{'name':'pixels','shape':[4],'datatype':'FP32','data':[1,2,3,4]}]}"),
                 DL_OK, "%s", err.msg);
    cr_expect_eq(req.batch, 1);
}

Test(oip, parses_uint8)
{
    cr_assert_eq(parse("{'inputs':[{'name':'pixels','shape':[1,4],'datatype':'UINT8','data':[0,17,128,255]}]}"),
                 DL_OK, "%s", err.msg);
    expect_x((const float[]){0, 17, 128, 255}, 4);
    oip_request_fini(&req);
    cr_assert_eq(parse("{'inputs':[{'name':'pixels','shape':[1,1,2,2],'datatype':'UINT8','data':[[[[0,1],[2,3]]]]}]}"),
                 DL_OK, "%s", err.msg);
    expect_x((const float[]){0, 1, 2, 3}, 4);
}

Test(oip, echoes_the_id_and_takes_extras)
{
    cr_assert_eq(parse("{'id':'req-42','parameters':{'x':1},'inputs':[{'name':'pixels','shape':[1,4],"
                       "'datatype':'FP32','parameters':{},'data':[1,2,3,4]}]}"),
                 DL_OK, "%s", err.msg);
    cr_expect_str_eq(req.id, "req-42");
    cr_expect_eq(req.timeout_us, 0);
}

Test(oip, reads_the_timeout_parameter)
{
    cr_assert_eq(parse("{'parameters':{'binary_data_output':false,'timeout':2500},"
                       "'inputs':[{'name':'pixels','shape':[1,4],'datatype':'FP32',"
                       "'data':[1,2,3,4]}]}"),
                 DL_OK, "%s", err.msg);
    cr_expect_eq(req.timeout_us, 2500);
    oip_request_fini(&req);
    refused("{'parameters':{'timeout':-5},'inputs':[{'name':'pixels','shape':[1,4],"
            "'datatype':'FP32','data':[1,2,3,4]}]}", "'parameters'.timeout must be microseconds");
}

Test(oip, selects_outputs)
{
    cr_assert_eq(parse("{'inputs':[{'name':'pixels','shape':[1,4],'datatype':'FP32','data':[1,2,3,4]}],"
                       "'outputs':[{'name':'label'},{'name':'probs','parameters':{}}]}"),
                 DL_OK, "%s", err.msg);
    cr_expect_eq(req.outputs, (unsigned)(OIP_OUT_LABEL | OIP_OUT_TENSOR));
    oip_request_fini(&req);
    cr_assert_eq(parse("{'inputs':[{'name':'pixels','shape':[1,4],'datatype':'FP32','data':[1,2,3,4]}],"
                       "'outputs':[]}"),
                 DL_OK, "%s", err.msg);
    cr_expect_eq(req.outputs, (unsigned)OIP_OUT_ALL);
}

/* ---- infer requests: refused ------------------------------------------- */

Test(oip, refuses_bad_json)
{
    refused("{'inputs':[", "bad JSON");
    refused("", "bad JSON");
    refused("{'inputs':[], 'inputs':[]}", "bad JSON");   /* duplicate key */
    refused("[1,2]", "must be a JSON object");
    cr_expect_eq(oip_parse_infer(NULL, 0, 0, &conf, NULL, 4, &req, &err), DL_ERR_INVALID);
}

Test(oip, refuses_missing_or_extra_inputs)
{
    refused("{}", "'inputs' is missing");
    refused("{'inputs':{}}", "'inputs' must be an array");
    refused("{'inputs':[]}", "exactly one");
    refused("{'inputs':[{'name':'a','shape':[1,4],'datatype':'FP32','data':[1,2,3,4]},"
            "{'name':'b','shape':[1,4],'datatype':'FP32','data':[1,2,3,4]}]}",
            "has 2 inputs");
    refused("{'inputs':[7]}", "inputs[0] must be an object");
}

Test(oip, refuses_wrong_datatype)
{
    refused("{'inputs':[{'name':'pixels','shape':[1,4],'datatype':'INT32','data':[1,2,3,4]}]}",
            "input 'pixels': datatype INT32 does not fit model 'tiny', which takes FP32");
    refused("{'inputs':[{'name':'pixels','shape':[1,4],'datatype':'INT16','data':[1,2,3,4]}]}",
            "\"INT16\" is not supported");
    refused("{'inputs':[{'name':'pixels','shape':[1,4],'datatype':'fp32','data':[1,2,3,4]}]}",
            "not supported");
    refused("{'inputs':[{'name':'pixels','shape':[1,4],'data':[1,2,3,4]}]}", "datatype must be");
    refused("{'inputs':[{'name':7,'shape':[1,4],'datatype':'FP32','data':[1,2,3,4]}]}",
            "name must be a string");
}

Test(oip, refuses_wrong_shapes)
{
    refused("{'inputs':[{'name':'pixels','datatype':'FP32','data':[1,2,3,4]}]}", "shape is missing");
    refused("{'inputs':[{'name':'pixels','shape':[],'datatype':'FP32','data':[]}]}", "shape must be");
    refused("{'inputs':[{'name':'pixels','shape':[1,9,9,9,9,9,9,9,9],'datatype':'FP32','data':[]}]}",
            "shape must be");
    refused("{'inputs':[{'name':'pixels','shape':[0,4],'datatype':'FP32','data':[]}]}",
            "shape[0] must be a positive integer");
    refused("{'inputs':[{'name':'pixels','shape':[1,-4],'datatype':'FP32','data':[1]}]}",
            "shape[1] must be a positive integer");
    refused("{'inputs':[{'name':'pixels','shape':[1,'4'],'datatype':'FP32','data':[1]}]}",
            "shape[1] must be");
    refused("{'inputs':[{'name':'pixels','shape':[2,3],'datatype':'FP32','data':[1,2,3,4,5,6]}]}",
            "shape [2, 3] does not fit model 'tiny'");
    cr_expect_not_null(strstr(err.msg, "[B, 1, 2, 2]"), "%s", err.msg);
    refused("{'inputs':[{'name':'pixels','shape':[8],'datatype':'FP32','data':[1,2,3,4,5,6,7,8]}]}",
            "does not fit");
    refused("{'inputs':[{'name':'pixels','shape':[3,1,2],'datatype':'FP32','data':[1,2,3,4,5,6]}]}",
            "does not fit");
    refused("{'inputs':[{'name':'pixels','shape':[4000000000,4000000000,4000000000],'datatype':'FP32',"
            "'data':[]}]}",
            "too large");
}

Test(oip, refuses_data_of_the_wrong_length)
{
    refused("{'inputs':[{'name':'pixels','shape':[2,4],'datatype':'FP32','data':[1,2,3,4]}]}",
            "data has 4 values; shape [2, 4] needs 8");
    refused("{'inputs':[{'name':'pixels','shape':[1,4],'datatype':'FP32','data':[1,2,3,4,5]}]}",
            "has 5 values");
    /* Nesting that does not follow the shape. */
    refused("{'inputs':[{'name':'pixels','shape':[2,4],'datatype':'FP32','data':[[1,2,3,4],[5,6,7]]}]}",
            "inputs[0].data[1] must be an array of 4 items");
    refused("{'inputs':[{'name':'pixels','shape':[2,4],'datatype':'FP32','data':[[1,2,3,4],5]}]}",
            "inputs[0].data[1] must be an array of 4");
    refused("{'inputs':[{'name':'pixels','shape':[2,2,2],'datatype':'FP32','data':[[1,2,3,4],[5,6,7,8]]}]}",
            "inputs[0].data[0] must be an array of 2 items");
    refused("{'inputs':[{'name':'pixels','shape':[1,4],'datatype':'FP32','data':[[[1],[2],[3],[4]]]}]}",
            "inputs[0].data[0][0] must be a number");
    refused("{'inputs':[{'name':'pixels','shape':[1,4],'datatype':'FP32','data':{}}]}",
            "data must be an array");
    refused("{'inputs':[{'name':'pixels','shape':[1,4],'datatype':'FP32'}]}", "data is missing");
    /* A shape far larger than the body never sizes an allocation. */
    refused("{'inputs':[{'name':'pixels','shape':[1000000000000,4],'datatype':'FP32','data':[1]}]}",
            "data has 1 values; shape [1000000000000, 4] needs 4000000000000");
    refused("{'inputs':[{'name':'pixels','shape':[1000000000000,4],'datatype':'FP32','data':[[1]]}]}",
            "holds fewer than the 4000000000000 values");
}

Test(oip, refuses_non_numeric_data)
{
    refused("{'inputs':[{'name':'pixels','shape':[1,4],'datatype':'FP32','data':[1,'2',3,4]}]}",
            "inputs[0].data[1] must be a number (FP32), not a string");
    refused("{'inputs':[{'name':'pixels','shape':[1,4],'datatype':'FP32','data':[1,2,null,4]}]}",
            "data[2] must be a number");
    refused("{'inputs':[{'name':'pixels','shape':[2,4],'datatype':'FP32','data':[[1,2,3,4],[5,6,true,8]]}]}",
            "inputs[0].data[1][2] must be a number (FP32), not true");
    refused("{'inputs':[{'name':'pixels','shape':[1,4],'datatype':'FP32','data':[1,2,3,1e39]}]}",
            "data[3] is out of the FP32 range");
}

Test(oip, refuses_uint8_out_of_range)
{
    refused("{'inputs':[{'name':'pixels','shape':[1,4],'datatype':'UINT8','data':[1,2,3,256]}]}",
            "data[3] must be an integer in 0..255 (UINT8), not out of range");
    refused("{'inputs':[{'name':'pixels','shape':[1,4],'datatype':'UINT8','data':[-1,2,3,4]}]}",
            "data[0] must be an integer in 0..255");
    refused("{'inputs':[{'name':'pixels','shape':[1,4],'datatype':'UINT8','data':[1,2.5,3,4]}]}",
            "data[1] must be an integer in 0..255 (UINT8), not a real");
}

Test(oip, refuses_bad_ids_and_outputs)
{
    refused("{'id':42,'inputs':[{'name':'pixels','shape':[1,4],'datatype':'FP32','data':[1,2,3,4]}]}",
            "'id' must be a string, not an integer");
    refused("{'parameters':[],'inputs':[{'name':'pixels','shape':[1,4],'datatype':'FP32','data':[1,2,3,4]}]}",
            "'parameters' must be an object");
    refused("{'inputs':[{'name':'pixels','shape':[1,4],'datatype':'FP32','data':[1,2,3,4]}],"
            "'outputs':[{'name':'logits'}]}",
            "model 'tiny' has no output 'logits'");
    refused("{'inputs':[{'name':'pixels','shape':[1,4],'datatype':'FP32','data':[1,2,3,4]}],"
            "'outputs':['probs']}",
            "outputs[0] must be an object");
}

/* ---- scaling: the batcher applies the model's scaling with this ------------ */

Test(oip, scales_like_the_data_loader)
{
    const float raw[3] = {0, 127.5f, 255};
    float x[3] = {0, 127.5f, 255}, y[3] = {0}, z[3] = {0};
    unsigned char odd[1 + sizeof(raw)];   /* a Kafka record's bytes: any alignment */
    memcpy(odd + 1, raw, sizeof(raw));
    dl_scaling sc = dl_scaling_of(&conf);
    dl_scaling_apply(&sc, x, x, 3);       /* in place, as the data loader does */
    dl_scaling_apply(&sc, y, raw, 3);     /* into the batch, as the batcher does */
    dl_scaling_apply(&sc, z, odd + 1, 3); /* UBSan checks the reads' alignment */
    for (int i = 0; i < 3; i++) {
        float want = (raw[i] * conf.scale - conf.mean) / conf.std;
        cr_expect_eq(x[i], want, "x[%d] = %g", i, (double)x[i]);
        cr_expect_eq(y[i], want, "y[%d] = %g", i, (double)y[i]);
        cr_expect_eq(z[i], want, "z[%d] = %g", i, (double)z[i]);
    }
    cr_expect_float_eq(x[0], -2.0f, 1e-6);
    cr_expect_float_eq(x[2], 2.0f, 1e-6);
}

/* ---- answers ------------------------------------------------------------ */

/* The infer answer of res, written as text and read back with jansson. */
static json_t *answer_json(const oip_result *res)
{
    dl_sbuf b = {0};
    size_t json_len;
    cr_assert_eq(oip_write_infer(res, &b, &json_len, NULL), DL_OK);
    cr_assert_eq(json_len, b.len, "a JSON answer has no binary part");
    json_error_t je;
    json_t *back = json_loadb(b.s, json_len, JSON_REJECT_DUPLICATES, &je);
    cr_assert_not_null(back, "%s: %s", je.text, b.s);
    dl_sbuf_free(&b);
    return back;
}

static json_t *dumped_and_back(json_t *j)
{
    char *text = oip_dump(j);
    cr_assert_not_null(text);
    json_t *back = json_loads(text, 0, NULL);
    cr_assert_not_null(back, "%s", text);
    free(text);
    json_decref(j);
    return back;
}

Test(oip, formats_the_infer_response)
{
    const float y[6] = {0.1f, 0.2f, 0.7f, 0.6f, 0.3f, 0.1f};
    oip_result res = {.model = "tiny", .version = 3, .id = "abc", .conf = &conf,
                      .batch = 2, .out_dim = 3, .y = y, .outputs = OIP_OUT_ALL};
    json_t *o = answer_json(&res);
    cr_expect_str_eq(json_string_value(json_object_get(o, "model_name")), "tiny");
    cr_expect_str_eq(json_string_value(json_object_get(o, "model_version")), "3");
    cr_expect_str_eq(json_string_value(json_object_get(o, "id")), "abc");
    json_t *outs = json_object_get(o, "outputs");
    cr_assert_eq(json_array_size(outs), 3);

    json_t *p = json_array_get(outs, 0);
    cr_expect_str_eq(json_string_value(json_object_get(p, "name")), "probs");
    cr_expect_str_eq(json_string_value(json_object_get(p, "datatype")), "FP32");
    json_t *shape = json_object_get(p, "shape");
    cr_expect_eq(json_array_size(shape), 2);
    cr_expect_eq(json_integer_value(json_array_get(shape, 0)), 2);
    cr_expect_eq(json_integer_value(json_array_get(shape, 1)), 3);
    json_t *data = json_object_get(p, "data");
    cr_assert_eq(json_array_size(data), 6);
    for (size_t i = 0; i < 6; i++)   /* 9 digits give every float back exactly */
        cr_expect_eq((float)json_number_value(json_array_get(data, i)), y[i], "data[%zu]", i);

    json_t *l = json_array_get(outs, 1);
    cr_expect_str_eq(json_string_value(json_object_get(l, "name")), "label");
    cr_expect_str_eq(json_string_value(json_object_get(l, "datatype")), "BYTES");
    cr_expect_eq(json_integer_value(json_array_get(json_object_get(l, "shape"), 0)), 2);
    cr_expect_str_eq(json_string_value(json_array_get(json_object_get(l, "data"), 0)), "Ankle boot");
    cr_expect_str_eq(json_string_value(json_array_get(json_object_get(l, "data"), 1)), "cat");

    json_t *c = json_array_get(outs, 2);
    cr_expect_str_eq(json_string_value(json_object_get(c, "name")), "class");
    cr_expect_str_eq(json_string_value(json_object_get(c, "datatype")), "INT64");
    cr_expect_eq(json_integer_value(json_array_get(json_object_get(c, "data"), 0)), 2);
    cr_expect_eq(json_integer_value(json_array_get(json_object_get(c, "data"), 1)), 0);
    json_decref(o);
}

Test(oip, formats_only_what_was_asked)
{
    const float y[3] = {0.1f, 0.8f, 0.1f};
    oip_result res = {.model = "tiny", .version = 1, .conf = &conf, .batch = 1, .out_dim = 3,
                      .y = y, .outputs = OIP_OUT_CLASS};
    json_t *o = answer_json(&res);
    cr_expect_null(json_object_get(o, "id"));
    json_t *outs = json_object_get(o, "outputs");
    cr_assert_eq(json_array_size(outs), 1);
    cr_expect_str_eq(json_string_value(json_object_get(json_array_get(outs, 0), "name")), "class");
    json_decref(o);

    /* A model without labels has no "label" output. */
    conf.nlabels = 0;
    conf.labels = NULL;
    res.outputs = OIP_OUT_ALL;
    o = answer_json(&res);
    outs = json_object_get(o, "outputs");
    cr_assert_eq(json_array_size(outs), 2);
    cr_expect_str_eq(json_string_value(json_object_get(json_array_get(outs, 1), "name")), "class");
    json_decref(o);
}

Test(oip, formats_model_metadata)
{
    json_t *versions = json_pack("[s, s]", "1", "2");
    json_t *o = dumped_and_back(oip_model_metadata(&conf, 3, versions));
    json_decref(versions);
    cr_expect_str_eq(json_string_value(json_object_get(o, "name")), "tiny");
    cr_expect_str_eq(json_string_value(json_object_get(o, "platform")), "dlserve");
    cr_expect_eq(json_array_size(json_object_get(o, "versions")), 2);
    json_t *in = json_array_get(json_object_get(o, "inputs"), 0);
    cr_expect_str_eq(json_string_value(json_object_get(in, "name")), "pixels");
    cr_expect_str_eq(json_string_value(json_object_get(in, "datatype")), "FP32");
    char *shape = json_dumps(json_object_get(in, "shape"), JSON_COMPACT);
    cr_expect_str_eq(shape, "[-1,1,2,2]");
    free(shape);
    json_t *outs = json_object_get(o, "outputs");
    cr_assert_eq(json_array_size(outs), 3);
    json_t *out = json_array_get(outs, 0);
    cr_expect_str_eq(json_string_value(json_object_get(out, "name")), "probs");
    shape = json_dumps(json_object_get(out, "shape"), JSON_COMPACT);
    cr_expect_str_eq(shape, "[-1,3]");
    free(shape);
    json_decref(o);
}

Test(oip, lists_versions_and_the_repository)
{
    json_t *status = json_loads(fx_dq("[{'name':'a','versions':[3,1,2],'state':'READY','reason':''},"
                                   "{'name':'b','versions':[],'state':'UNAVAILABLE','reason':'bad file'}]"),
                                0, NULL);
    cr_assert_not_null(status);
    json_t *v = oip_versions_of(status, "a");
    char *text = json_dumps(v, JSON_COMPACT);
    cr_expect_str_eq(text, "[\"1\",\"2\",\"3\"]");
    free(text);
    json_decref(v);
    v = oip_versions_of(status, "b");
    cr_expect_eq(json_array_size(v), 0);
    json_decref(v);
    cr_expect_null(oip_versions_of(status, "c"));

    json_t *idx = oip_repository_index(status);
    text = json_dumps(idx, JSON_COMPACT);
    cr_expect_str_eq(text, fx_dq("[{'name':'a','version':'3','state':'READY','reason':''},"
                              "{'name':'b','version':'','state':'UNAVAILABLE','reason':'bad file'}]"));
    free(text);
    json_decref(idx);
    json_decref(status);
}

Test(oip, formats_errors)
{
    json_t *e = oip_error("unknown model '%s'", "x");
    char *text = oip_dump(e);
    cr_expect_str_eq(text, "{\"error\":\"unknown model 'x'\"}");
    free(text);
    json_decref(e);
}

/* The one table from error kinds to HTTP codes: every kind. */
Test(oip, maps_each_status_to_its_http_code)
{
    cr_expect_eq(oip_http_code(DL_OK), 200);
    cr_expect_eq(oip_http_code(DL_ERR_INVALID), 400);
    cr_expect_eq(oip_http_code(DL_ERR_NOT_FOUND), 404);
    cr_expect_eq(oip_http_code(DL_ERR_TOO_LARGE), 413);
    cr_expect_eq(oip_http_code(DL_ERR_UNAVAILABLE), 503);
    cr_expect_eq(oip_http_code(DL_ERR_BUSY), 503);
    cr_expect_eq(oip_http_code(DL_ERR_NOMEM), 500);
    cr_expect_eq(oip_http_code(DL_ERR_IO), 500);
    cr_expect_eq(oip_http_code(DL_ERR_BACKEND), 500);
}

/* Refused requests carry DL_ERR_INVALID (400) in err, not only as the
 * returned status. */
Test(oip, refusals_are_invalid_in_err)
{
    cr_assert_eq(parse("{'inputs': 3}"), DL_ERR_INVALID);
    cr_expect_eq(err.code, DL_ERR_INVALID);
    cr_expect_eq(oip_http_code(err.code), 400);
}

/* ---- the JSON scanner, through oip_scan_infer ----------------------------- */

/* Scans body[0..len) from a buffer of exactly len bytes (a read past the
 * end is a read past the allocation: AddressSanitizer builds catch it),
 * json_len bytes of it JSON. */
static dl_status scan_raw(const char *body, size_t len, size_t json_len)
{
    char *copy = malloc(len ? len : 1);
    cr_assert_not_null(copy);
    memcpy(copy, body, len);
    oip_request_fini(&req);
    dl_status st = oip_scan_infer(copy, len, json_len, &req, &err);
    free(copy);
    return st;
}

/* Scans text (with ' as ", see fx_dq), all of it JSON. */
static dl_status scan(const char *text)
{
    const char *body = fx_dq(text);
    return scan_raw(body, strlen(body), strlen(body));
}

/* A valid request around an extra member: "{extra, 'inputs':[...]}". */
static dl_status scan_with(const char *extra)
{
    char text[8000];
    snprintf(text, sizeof(text), "{%s,'inputs':[{'name':'pixels','shape':[1,4],"
             "'datatype':'FP32','data':[1,2,3,4]}]}", extra);
    return scan(text);
}

static void not_json(const char *body, size_t len)
{
    cr_expect_eq(scan_raw(body, len, len), DL_ERR_INVALID, "accepted: %.*s", (int)len, body);
    cr_expect_not_null(strstr(err.msg, "bad JSON"), "%.*s: %s", (int)len, body, err.msg);
    cr_expect_eq(req.fault, OIP_FAULT_SYNTAX, "%.*s", (int)len, body);
    cr_expect_null(req.x);
    cr_expect_null(req.id, "%.*s: an id from a body that is not JSON", (int)len, body);
}

Test(oip, scanner_refuses_what_is_not_json)
{
    static const char *const bad[] = {
        "", " ", "{", "}", "{\"id\":\"a\"", "{\"id\"}", "{\"id\":}", "{\"id\" \"a\"}",
        "{id:\"a\"}", "{'id':'a'}", "{\"a\":1,}", "{,\"a\":1}", "{\"a\":[1,]}",
        "{\"a\":[,1]}", "{\"a\":[1 2]}", "{\"a\":1 \"b\":2}", "{\"a\":01}", "{\"a\":1.}",
        "{\"a\":.5}", "{\"a\":-}", "{\"a\":--1}", "{\"a\":1e}", "{\"a\":1e+}", "{\"a\":+1}",
        "{\"a\":0x10}", "{\"a\":NaN}", "{\"a\":Infinity}", "{\"a\":-Infinity}", "{\"a\":tru}",
        "{\"a\":nul}", "{\"a\":True}", "{\"a\":\"\\x\"}", "{\"a\":\"\\u12\"}",
        "{\"a\":\"\\u12g4\"}", "{\"a\":\"\\ud800\"}", "{\"a\":\"\\ud800\\u0041\"}",
        "{\"a\":\"\\udc00\"}", "{\"a\":\"\\u0000\"}", "{\"a\":\"tab\there\"}",
        "{\"a\":\"\xff\"}", "{\"a\":\"\xc0\xaf\"}", "{\"a\":\"\xed\xa0\x80\"}",
        "{\"a\":\"\xe2\x82\"}", "{\"a\":\"\xf4\x90\x80\x80\"}", "{} x", "{}{}", "{}]",
        "{/*c*/}", "{\"a\":1}//", "{\"a\":'b'}", "{\"a\":[}", "{\"a\":{]}", "{\"a\":\"b}",
        "\xef\xbb\xbf{}", "{\"a\":\"\\", "{\"a\":1,\"a\":2}",
    };
    for (size_t i = 0; i < sizeof(bad) / sizeof(bad[0]); i++)
        not_json(bad[i], strlen(bad[i]));
    /* A NUL byte is a byte like any other: never the end of the body. */
    not_json("{\"a\":1}\0", 8);
    not_json("{\"a\":\"x\0y\"}", 11);
    cr_expect_eq(oip_scan_infer(NULL, 0, 0, &req, &err), DL_ERR_INVALID);
    cr_expect_not_null(strstr(err.msg, "bad JSON at line 1, column 1"), "%s", err.msg);
}

Test(oip, scanner_says_where)
{
    cr_assert_eq(scan("{'inputs':\n  [1,\n   2 3]}"), DL_ERR_INVALID);
    cr_expect_not_null(strstr(err.msg, "bad JSON at line 3, column 6"), "%s", err.msg);
}

Test(oip, scanner_refuses_duplicate_keys_like_jansson)
{
    not_json("{\"inputs\":[],\"inputs\":[]}", 25);
    cr_expect_not_null(strstr(err.msg, "duplicate key"), "%s", err.msg);
    /* The same key, escaped: decoded keys are compared. */
    const char *esc = "{\"inputs\":[],\"\\u0069nputs\":[]}";
    not_json(esc, strlen(esc));
    cr_expect_eq(scan_with("'x':{'a':{'b':1,'b':2}}"), DL_ERR_INVALID);
    cr_expect_not_null(strstr(err.msg, "duplicate key"), "%s", err.msg);
    cr_expect_eq(scan("{'inputs':[{'name':'pixels','name':'pixels','shape':[1,4],"
                      "'datatype':'FP32','data':[1,2,3,4]}]}"),
                 DL_ERR_INVALID);
    /* The same key in different objects, and many keys in one. */
    cr_expect_eq(scan_with("'x':[{'a':1},{'a':2,'b':{'a':3}}],'a':{'a':{'a':4}}"), DL_OK,
                 "%s", err.msg);
    char text[7000];
    size_t k = (size_t)snprintf(text, sizeof(text), "'extra':{");
    for (int i = 0; i < 500; i++)
        k += (size_t)snprintf(text + k, sizeof(text) - k, "%s'k%d':%d", i ? "," : "", i, i);
    snprintf(text + k, sizeof(text) - k, "}");
    cr_expect_eq(scan_with(text), DL_OK, "%s", err.msg);
    snprintf(text + k, sizeof(text) - k, ",'k321':0}");
    cr_expect_eq(scan_with(text), DL_ERR_INVALID);
    cr_expect_not_null(strstr(err.msg, "duplicate key"), "%s", err.msg);
}

Test(oip, scanner_reads_escapes_and_skips_what_it_does_not_know)
{
    const char *body = "{ \"\\u0069d\" : \"a\\\"b\\\\c\\/d\\n\\u00e9\\ud83d\\ude00\xc3\xa9\" ,\n"
                       "\t\"unknown\": [ {\"x\": [true, false, null, -0.5e-3, 1E2, \"s\"]},"
                       " [] , {} ],\r\n"
                       "\"inputs\" : [ { \"name\" : \"pix\\u0065ls\" , \"shape\" : [ 1 , 4 ] ,"
                       " \"datatype\" : \"FP32\" , \"data\" : [ 1 , -0 , 2.5e0 , 4E-1 ] } ] } \n";
    cr_assert_eq(scan_raw(body, strlen(body), strlen(body)), DL_OK, "%s", err.msg);
    cr_expect_str_eq(req.id, "a\"b\\c/d\n\xc3\xa9\xf0\x9f\x98\x80\xc3\xa9");
    cr_expect_str_eq(req.input.text, "pixels");
    cr_expect_eq(req.count, 4);
    expect_x((const float[]){1, 0, 2.5f, 0.4f}, 4);
    cr_expect_eq(req.fault, OIP_FAULT_NONE);
}

Test(oip, scanner_reads_numbers_as_strtod_does)
{
    static const char *const nums[] = {
        "0", "-0", "1", "255", "0.1", "0.30000000000000004", "3.4028234663852886e38",
        "1.17549435e-38", "1.4e-45", "-2.5E+3", "123456789012345678901234567890",
        "0.000000000000000000000000000001", "1e-400", "9007199254740993", "4.35",
        "0.1e1", "100e-2", "7e22", "7e23", "123456789012345e-22",
    };
    for (size_t i = 0; i < sizeof(nums) / sizeof(nums[0]); i++) {
        char text[256];
        snprintf(text, sizeof(text), "{'inputs':[{'name':'pixels','shape':[1],"
                 "'datatype':'FP32','data':[%s]}]}", nums[i]);
        cr_assert_eq(scan(text), DL_OK, "%s: %s", nums[i], err.msg);
        /* Integers are read as integers, as jansson does: -0 is 0. */
        float want = strcmp(nums[i], "-0") == 0 ? 0.0f : (float)strtod(nums[i], NULL);
        cr_expect(memcmp(&req.x[0], &want, sizeof(float)) == 0, "%s read as %.9g, not %.9g",
                  nums[i], (double)req.x[0], (double)want);
    }
}

/* Thousands of numbers of every length up to 18 digits, with and without
 * a sign, a fraction and an exponent, at every offset from the end of the
 * body (the scanner reads digits eight bytes at a time where eight
 * remain): each as strtod reads it. */
Test(oip, scanner_reads_numbers_of_every_length_as_strtod_does)
{
    enum { N = 4000 };
    static char body[N * 32 + 256], nums[N][32];
    uint64_t s = 0x2545F4914F6CDD1Dull;
#define NEXT() (s ^= s << 13, s ^= s >> 7, s ^= s << 17, s)
    size_t k = (size_t)snprintf(body, sizeof(body), "{\"inputs\":[{\"name\":\"pixels\","
                                "\"shape\":[%d],\"datatype\":\"FP32\",\"data\":[", N);
    for (int i = 0; i < N; i++) {
        char *p = nums[i];
        int whole = (int)(NEXT() % 13), frac = (int)(NEXT() % 3 ? NEXT() % 15 : 0);
        if (NEXT() % 5 == 0)
            *p++ = '-';
        if (whole == 0)
            *p++ = '0';
        for (int d = 0; d < whole; d++)
            *p++ = (char)('0' + (d == 0 ? 1 + NEXT() % 9 : NEXT() % 10));
        if (frac) {
            *p++ = '.';
            for (int d = 0; d < frac; d++)
                *p++ = (char)('0' + NEXT() % 10);
        }
        if (NEXT() % 10 == 0)
            p += sprintf(p, "e%d", (int)(NEXT() % 30) - 15);
        *p = '\0';
        if (strcmp(nums[i], "-0") == 0)   /* an integer: read as 0, tested above */
            strcpy(nums[i], "0");
        k += (size_t)snprintf(body + k, sizeof(body) - k, "%s%s", i ? "," : "", nums[i]);
    }
#undef NEXT
    k += (size_t)snprintf(body + k, sizeof(body) - k, "]}]}");
    cr_assert_eq(scan_raw(body, k, k), DL_OK, "%s", err.msg);
    cr_assert_eq(req.count, N);
    int bad = 0;
    for (int i = 0; i < N; i++) {
        float want = (float)strtod(nums[i], NULL);
        if (memcmp(&req.x[i], &want, sizeof(float)) != 0 && bad++ < 5)
            cr_expect_fail("%s read as %.9g, not %.9g", nums[i], (double)req.x[i],
                           (double)want);
    }
    cr_expect_eq(bad, 0, "%d of %d numbers read wrong", bad, N);
}

Test(oip, scanner_survives_huge_numbers_and_deep_nesting)
{
    /* A number of 5000 digits: read (then too large for FP32). */
    char *text = malloc(6000);
    cr_assert_not_null(text);
    size_t k = (size_t)sprintf(text, "{'inputs':[{'name':'pixels','shape':[1,4],"
                               "'datatype':'FP32','data':[1,2,3,");
    memset(text + k, '7', 5000);
    strcpy(text + k + 5000, "]}]}");
    cr_expect_eq(scan(text), DL_ERR_INVALID);
    cr_expect_not_null(strstr(err.msg, "data[3] is out of the FP32 range"), "%s", err.msg);
    free(text);
    cr_expect_eq(scan("{'inputs':[{'name':'pixels','shape':[1,4],'datatype':'FP32',"
                      "'data':[1,2,3,1e999999999999999999]}]}"), DL_ERR_INVALID);
    cr_expect_not_null(strstr(err.msg, "out of the FP32 range"), "%s", err.msg);
    cr_expect_eq(scan("{'inputs':[{'name':'pixels','shape':[99999999999999999999,4],"
                      "'datatype':'FP32','data':[1]}]}"), DL_ERR_INVALID);
    cr_expect_not_null(strstr(err.msg, "shape is too large"), "%s", err.msg);
    cr_expect_eq(scan("{'inputs':[{'name':'pixels','shape':[1,4],'datatype':'UINT8',"
                      "'data':[1,2,3,99999999999999999999]}]}"), DL_ERR_INVALID);
    cr_expect_not_null(strstr(err.msg, "data[3] must be an integer in 0..255"), "%s", err.msg);

    /* Nesting: 2000 levels are JSON, past JS_MAX_DEPTH is refused, and a
     * megabyte of brackets costs neither the stack nor the time. */
    size_t n = 1 << 20;
    char *deep = malloc(2 * n + 200);
    cr_assert_not_null(deep);
    const size_t depths[] = {2000, 2100, n};
    for (size_t d = 0; d < 3; d++) {
        size_t depth = depths[d];
        k = (size_t)sprintf(deep, "{\"deep\":");
        memset(deep + k, '[', depth);
        memset(deep + k + depth, ']', depth);
        k += 2 * depth;
        k += (size_t)sprintf(deep + k, ",\"inputs\":[{\"name\":\"pixels\",\"shape\":[1,4],"
                             "\"datatype\":\"FP32\",\"data\":[1,2,3,4]}]}");
        dl_status st = scan_raw(deep, k, k);
        if (depth == 2000) {
            cr_expect_eq(st, DL_OK, "%s", err.msg);
        } else {
            cr_expect_eq(st, DL_ERR_INVALID, "depth %zu", depth);
            cr_expect_not_null(strstr(err.msg, "nested too deeply"), "%s", err.msg);
        }
    }
    free(deep);
}

/* A valid request with a bit of everything the scanner reads. */
static const char full_request[] =
    "{\"id\":\"r\\u00e9q-1\",\"model\":\"tiny\",\"model_version\":\"3\","
    "\"parameters\":{\"binary_data_output\":false,\"x\":[1,{\"y\":null}]},"
    "\"inputs\":[{\"name\":\"pixels\",\"shape\":[2,1,2,2],\"datatype\":\"FP32\","
    "\"parameters\":{\"z\":1},\"data\":[[[[1,2.5],[3e0,4]]],[[[-5,6],[7,0.125]]]]}],"
    "\"outputs\":[{\"name\":\"class\",\"parameters\":{\"binary_data\":true}},"
    "{\"name\":\"probs\"}]}";

Test(oip, scanner_refuses_every_truncation)
{
    size_t len = sizeof(full_request) - 1;
    cr_assert_eq(scan_raw(full_request, len, len), DL_OK, "%s", err.msg);
    for (size_t n = 0; n < len; n++) {
        cr_expect_eq(scan_raw(full_request, n, n), DL_ERR_INVALID, "accepted %zu bytes", n);
        cr_expect_null(req.x);
    }
    /* Truncated binary data: too few bytes for binary_data_size. */
    const char *json = "{\"inputs\":[{\"name\":\"pixels\",\"shape\":[1,4],\"datatype\":\"UINT8\","
                       "\"parameters\":{\"binary_data_size\":4}}]}";
    char body[256];
    size_t jl = strlen(json);
    memcpy(body, json, jl);
    memcpy(body + jl, "\x01\x02\x03\x04", 4);
    cr_assert_eq(scan_raw(body, jl + 4, jl), DL_OK, "%s", err.msg);
    for (size_t n = jl; n < jl + 4; n++)
        cr_expect_eq(scan_raw(body, n, jl), DL_ERR_INVALID, "accepted %zu bytes", n);
}

/* Every byte of a valid request replaced by each of a few troublesome
 * ones: the scan either succeeds with consistent values or refuses; it
 * never crashes, reads outside the body or leaks (under sanitizers). */
Test(oip, scanner_survives_every_one_byte_change)
{
    static const char subst[] = "\"[]{}:,\\0-.eu\x01\xff ";
    size_t len = sizeof(full_request) - 1;
    char *body = malloc(len);
    cr_assert_not_null(body);
    for (size_t i = 0; i < len; i++) {
        for (size_t j = 0; j < sizeof(subst); j++) {   /* with the NUL */
            memcpy(body, full_request, len);
            body[i] = subst[j];
            dl_status st = scan_raw(body, len, len);
            cr_assert(st == DL_OK || st == DL_ERR_INVALID, "byte %zu: status %d", i, st);
            if (st == DL_OK) {
                cr_assert_not_null(req.x);
                cr_assert_eq(req.count, 8);
            } else {
                cr_assert_null(req.x);
                cr_assert_neq(err.msg[0], '\0');
            }
        }
    }
    free(body);
}

/* ---- reading without the model, checking against it ------------------------ */

Test(oip, scans_without_the_model)
{
    size_t len = sizeof(full_request) - 1;
    cr_assert_eq(scan_raw(full_request, len, len), DL_OK, "%s", err.msg);
    cr_expect_str_eq(req.id, "r\xc3\xa9q-1");
    cr_expect_not(req.id_integer);
    cr_expect_str_eq(req.model, "tiny");
    cr_expect_eq(req.model_version, 3);
    cr_expect_eq(req.ninputs, 1);
    cr_expect_str_eq(req.input.text, "pixels");
    cr_expect_not(req.uint8);
    cr_expect_not(req.binary_in);
    cr_expect_eq(req.ndim, 4);
    cr_expect_eq(req.count, 8);
    expect_x((const float[]){1, 2.5f, 3, 4, -5, 6, 7, 0.125f}, 8);
    cr_expect_eq(req.nasked, 2);
    cr_expect_str_eq(req.asked[0].name.text, "class");
    cr_expect_eq(req.asked[0].binary, 1);
    cr_expect_str_eq(req.asked[1].name.text, "probs");
    cr_expect_eq(req.asked[1].binary, -1);
    cr_expect_not(req.binary_out);

    /* Then against the model: batch and the outputs, in the order asked. */
    cr_assert_eq(oip_check_infer(&req, &conf, NULL, 4, &err), DL_OK, "%s", err.msg);
    cr_expect_eq(req.batch, 2);
    cr_expect_eq(req.nout, 2);
    cr_expect_eq(req.out[0].kind, (unsigned)OIP_OUT_CLASS);
    cr_expect(req.out[0].binary);
    cr_expect_eq(req.out[1].kind, (unsigned)OIP_OUT_TENSOR);
    cr_expect_not(req.out[1].binary);
    cr_expect_eq(req.outputs, (unsigned)(OIP_OUT_CLASS | OIP_OUT_TENSOR));
}

Test(oip, scans_ids_and_model_keys)
{
    cr_assert_eq(scan_with("'id':12345678901234567890123,'model_version':7"), DL_OK, "%s",
                 err.msg);
    cr_expect_str_eq(req.id, "12345678901234567890123");
    cr_expect(req.id_integer);
    cr_expect_eq(req.model_version, 7);
    cr_expect_null(req.model);
    cr_assert_eq(scan_with("'model':'m','model_version':0"), DL_OK, "%s", err.msg);
    cr_expect_null(req.id);
    cr_expect_str_eq(req.model, "m");

    static const char *const envelope[][2] = {
        {"'id':1.5", "'id' must be a string, not a real"},
        {"'id':[1]", "'id' must be a string, not an array"},
        {"'id':null", "'id' must be a string, not null"},
        {"'model':3", "'model' must be a string, not an integer"},
        {"'model_version':-1", "'model_version' must be a positive integer"},
        {"'model_version':'1a'", "'model_version' must be"},
        {"'model_version':true", "'model_version' must be"},
        {"'parameters':[]", "'parameters' must be an object, not an array"},
        {"'parameters':{'binary_data_output':1}", "binary_data_output must be true or false"},
        {"'parameters':{'timeout':-1}", "'parameters'.timeout must be microseconds"},
        {"'parameters':{'timeout':1.5}", "'parameters'.timeout must be microseconds"},
        {"'parameters':{'timeout':'1000'}", "'parameters'.timeout must be microseconds"},
        {"'outputs':{}", "'outputs' must be an array, not an object"},
    };
    for (size_t i = 0; i < sizeof(envelope) / sizeof(envelope[0]); i++) {
        cr_expect_eq(scan_with(envelope[i][0]), DL_ERR_INVALID, "accepted %s", envelope[i][0]);
        cr_expect_not_null(strstr(err.msg, envelope[i][1]), "%s: %s", envelope[i][0], err.msg);
        cr_expect_eq(req.fault, OIP_FAULT_ENVELOPE, "%s", envelope[i][0]);
        cr_expect_null(req.x);
    }
}

/* A refused request keeps its id when it is JSON (a dead letter names it)
 * and the first refusal in document order is the one reported; a syntax
 * error anywhere is reported instead. */
Test(oip, a_refusal_keeps_the_id)
{
    cr_assert_eq(scan("{'inputs':[{'name':'pixels','shape':[1,4],'datatype':'FP32',"
                      "'data':[1,2,'x',4]}],'outputs':[7],'id':'keep-me'}"), DL_ERR_INVALID);
    cr_expect_not_null(strstr(err.msg, "inputs[0].data[2] must be a number"), "%s", err.msg);
    cr_expect_eq(req.fault, OIP_FAULT_TENSOR);
    cr_expect_str_eq(req.id, "keep-me");
    cr_expect_null(req.x);
    cr_assert_eq(scan("{'inputs':[{'name':'pixels','shape':[1,4],'datatype':'FP32',"
                      "'data':[1,2,'x',4]}],'id':'keep-me',}"), DL_ERR_INVALID);
    cr_expect_not_null(strstr(err.msg, "bad JSON"), "%s", err.msg);
    cr_expect_null(req.id);
    /* HTTP's parse keeps nothing. */
    refused("{'id':'k','inputs':[]}", "exactly one");
}

Test(oip, reads_data_before_its_shape)
{
    cr_assert_eq(parse("{'inputs':[{'data':[[[[1,2],[3,4]]],[[[5,6],[7,8]]]],'datatype':'UINT8',"
                       "'shape':[2,1,2,2],'name':'pixels'}]}"),
                 DL_OK, "%s", err.msg);
    cr_expect_eq(req.batch, 2);
    expect_x((const float[]){1, 2, 3, 4, 5, 6, 7, 8}, 8);
    oip_request_fini(&req);
    refused("{'inputs':[{'data':[1,2,3],'shape':[1,4],'datatype':'FP32','name':'pixels'}]}",
            "data has 3 values; shape [1, 4] needs 4");
    refused("{'inputs':[{'data':[[1,2],[3,4,5]],'name':'pixels','datatype':'FP32','shape':[2,2]}]}",
            "inputs[0].data[1] must be an array of 2 items");
}

/* Nested data: an array's wrong length is found before a wrong element
 * inside it, as a walk that checks each length first would. */
Test(oip, refuses_nested_data_outside_in)
{
    refused("{'inputs':[{'name':'pixels','shape':[2,2],'datatype':'FP32',"
            "'data':[[1,'x'],[3,4],[5,6]]}]}",
            "inputs[0].data must be an array of 2 items");
    refused("{'inputs':[{'name':'pixels','shape':[2,2],'datatype':'FP32',"
            "'data':[[1,'x',3],[3,4]]}]}",
            "inputs[0].data[0] must be an array of 2 items");
    refused("{'inputs':[{'name':'pixels','shape':[2,2],'datatype':'FP32',"
            "'data':[[1,'x'],[3,4]]}]}",
            "inputs[0].data[0][1] must be a number (FP32), not a string");
    refused("{'inputs':[{'name':'pixels','shape':[4],'datatype':'FP32','data':[[1,2,3,4]]}]}",
            "inputs[0].data must be an array of 4 items");
    refused("{'inputs':[{'name':'pixels','shape':[1,4],'datatype':'FP32','data':[1,[2],3,4]}]}",
            "inputs[0].data[1] must be a number (FP32), not an array");
    refused("{'inputs':[{'name':'pixels','shape':[1,4],'datatype':'FP32','data':[1,'2',3]}]}",
            "data has 3 values");
}

/* ---- strictness against the model ----------------------------------------- */

Test(oip, refuses_names_the_model_does_not_have)
{
    refused("{'inputs':[{'name':'input','shape':[1,4],'datatype':'FP32','data':[1,2,3,4]}]}",
            "model 'tiny' has no input 'input' (it takes 'pixels')");
    refused("{'inputs':[{'shape':[1,4],'datatype':'FP32','data':[1,2,3,4]}]}",
            "inputs[0].name is missing");
    char text[512], name[101];
    memset(name, 'p', 100);
    name[100] = '\0';
    snprintf(text, sizeof(text), "{'inputs':[{'name':'%s','shape':[1,4],'datatype':'FP32',"
             "'data':[1,2,3,4]}]}", name);
    refused(text, "has no input 'ppppppp");
    refused("{'inputs':[{'name':'pixels','shape':[1,4],'datatype':'FP32','data':[1,2,3,4]}],"
            "'outputs':[{'name':'class'},{'name':'scores'}]}",
            "outputs[1]: model 'tiny' has no output 'scores'");
    refused("{'inputs':[{'name':'pixels','shape':[1,4],'datatype':'FP32','data':[1,2,3,4]}],"
            "'outputs':[{'parameters':{}}]}",
            "outputs[0] must be an object with a string 'name'");
    conf.nlabels = 0;
    conf.labels = NULL;
    refused("{'inputs':[{'name':'pixels','shape':[1,4],'datatype':'FP32','data':[1,2,3,4]}],"
            "'outputs':[{'name':'label'}]}",
            "has no output 'label'");
}

Test(oip, answers_the_outputs_asked_in_their_order)
{
    cr_assert_eq(parse("{'inputs':[{'name':'pixels','shape':[1,4],'datatype':'FP32',"
                       "'data':[1,2,3,4]}],'parameters':{'binary_data_output':true},"
                       "'outputs':[{'name':'label','parameters':{'binary_data':false}},"
                       "{'name':'class'},{'name':'label','parameters':{'binary_data':true}}]}"),
                 DL_OK, "%s", err.msg);
    cr_expect_eq(req.nout, 2, "a name asked twice answers once");
    cr_expect_eq(req.out[0].kind, (unsigned)OIP_OUT_LABEL);
    cr_expect_not(req.out[0].binary, "binary_data: false wins over binary_data_output");
    cr_expect_eq(req.out[1].kind, (unsigned)OIP_OUT_CLASS);
    cr_expect(req.out[1].binary, "binary_data_output when the output does not say");

    oip_request_fini(&req);
    cr_assert_eq(parse("{'inputs':[{'name':'pixels','shape':[1,4],'datatype':'FP32',"
                       "'data':[1,2,3,4]}],'parameters':{'binary_data_output':true}}"),
                 DL_OK, "%s", err.msg);
    cr_expect_eq(req.nout, 3);
    for (int i = 0; i < 3; i++) {
        cr_expect_eq(req.out[i].kind, (unsigned)(1 << i), "the model's order");
        cr_expect(req.out[i].binary);
    }
}

/* ---- the binary tensor data extension: requests ----------------------------- */

/* Scans json followed by nbin bytes of bin, json's length as the header. */
static dl_status scan_bin(const char *json, const void *bin, size_t nbin)
{
    const char *j = fx_dq(json);
    size_t jl = strlen(j);
    char *body = malloc(jl + nbin + 1);
    cr_assert_not_null(body);
    memcpy(body, j, jl);
    if (nbin)
        memcpy(body + jl, bin, nbin);
    dl_status st = scan_raw(body, jl + nbin, jl);
    free(body);
    return st;
}

static void le_floats(unsigned char *out, const float *v, int n)
{
    for (int i = 0; i < n; i++) {
        uint32_t u;
        memcpy(&u, &v[i], 4);
        for (int b = 0; b < 4; b++)
            out[4 * i + b] = (unsigned char)(u >> (8 * b));
    }
}

Test(oip, reads_binary_inputs)
{
    const float v[8] = {0, 1.5f, -2, 255, 1e-7f, 3.25f, 7, -0.0f};
    unsigned char bin[32];
    le_floats(bin, v, 8);
    cr_assert_eq(scan_bin("{'id':'b','inputs':[{'name':'pixels','shape':[2,4],'datatype':'FP32',"
                          "'parameters':{'binary_data_size':32}}]}", bin, 32),
                 DL_OK, "%s", err.msg);
    cr_expect(req.binary_in);
    cr_expect_eq(memcmp(req.x, v, sizeof(v)), 0, "bit for bit");
    cr_assert_eq(oip_check_infer(&req, &conf, NULL, 4, &err), DL_OK, "%s", err.msg);
    cr_expect_eq(req.batch, 2);

    const unsigned char u8[4] = {0, 17, 128, 255};
    cr_assert_eq(scan_bin("{'inputs':[{'name':'pixels','shape':[1,1,2,2],'datatype':'UINT8',"
                          "'parameters':{'binary_data_size':4}}]}", u8, 4),
                 DL_OK, "%s", err.msg);
    expect_x((const float[]){0, 17, 128, 255}, 4);

    /* A header as long as the body: plain JSON. */
    const char *j = fx_dq("{'inputs':[{'name':'pixels','shape':[4],'datatype':'FP32',"
                          "'data':[1,2,3,4]}]}");
    cr_expect_eq(scan_raw(j, strlen(j), strlen(j)), DL_OK, "%s", err.msg);
}

static void bin_refused(const char *json, const void *bin, size_t nbin, const char *needle)
{
    cr_expect_eq(scan_bin(json, bin, nbin), DL_ERR_INVALID, "accepted %s + %zu bytes", json, nbin);
    cr_expect_not_null(strstr(err.msg, needle), "%s (wanted '%s')", err.msg, needle);
    cr_expect_eq(req.fault, OIP_FAULT_TENSOR, "%s", json);
    cr_expect_null(req.x);
}

Test(oip, refuses_binary_sizes_that_do_not_add_up)
{
    unsigned char bin[40] = {0};
    const char *fp4 = "{'inputs':[{'name':'pixels','shape':[1,4],'datatype':'FP32',"
                      "'parameters':{'binary_data_size':16}}]}";
    cr_assert_eq(scan_bin(fp4, bin, 16), DL_OK, "%s", err.msg);
    bin_refused(fp4, bin, 15, "binary_data_size is 16 bytes, but only 15 follow");
    bin_refused(fp4, bin, 0, "only 0 follow");
    bin_refused(fp4, bin, 17, "the body has 17 bytes after its");
    bin_refused("{'inputs':[{'name':'pixels','shape':[1,4],'datatype':'FP32',"
                "'parameters':{'binary_data_size':12}}]}", bin, 12,
                "binary_data_size is 12 bytes, but shape [1, 4] of FP32 takes 4 values of 4 bytes");
    bin_refused("{'inputs':[{'name':'pixels','shape':[1,4],'datatype':'UINT8',"
                "'parameters':{'binary_data_size':16}}]}", bin, 16,
                "shape [1, 4] of UINT8 takes 4 values of 1 byte");
    bin_refused("{'inputs':[{'name':'pixels','shape':[1,4],'datatype':'FP32',"
                "'data':[1,2,3,4]}]}", bin, 4, "the body has 4 bytes after its");
    bin_refused("{'inputs':[{'name':'pixels','shape':[1,4],'datatype':'FP32','data':[1,2,3,4],"
                "'parameters':{'binary_data_size':16}}]}", bin, 16,
                "has both \"data\" and parameters.binary_data_size");
    bin_refused("{'inputs':[{'name':'pixels','shape':[1,4],'datatype':'FP32',"
                "'parameters':{'binary_data_size':'16'}}]}", bin, 16,
                "inputs[0].parameters.binary_data_size must be a byte count");
    bin_refused("{'inputs':[{'name':'pixels','shape':[1,4],'datatype':'FP32',"
                "'parameters':{'binary_data_size':-16}}]}", bin, 16, "must be a byte count");
    bin_refused("{'inputs':[{'name':'pixels','shape':[1000000000000,1000000,4],'datatype':'FP32',"
                "'parameters':{'binary_data_size':16}}]}", bin, 16, "binary_data_size is 16 bytes");
    bin_refused("{'inputs':[{'name':'pixels','shape':[1,4],'datatype':'FP32'}]}", bin, 16,
                "inputs[0].data is missing");
    bin_refused("{'inputs':[{'name':'pixels','shape':[1,4],'datatype':'FP32',"
                "'parameters':{'binary_data_size':16}}],'outputs':[{'name':'class',"
                "'parameters':{'binary_data':'yes'}}]}", bin, 16,
                "outputs[0].parameters.binary_data must be true or false, not a string");
    /* Not finite. */
    const float inf[4] = {1, 2, INFINITY, 4};
    le_floats(bin, inf, 4);
    bin_refused(fp4, bin, 16, "inputs[0] binary data: value 2 is not a finite FP32 number");

    /* A JSON length past the body. */
    cr_expect_eq(oip_scan_infer("{}", 2, 3, &req, &err), DL_ERR_INVALID);
    cr_expect_not_null(strstr(err.msg, "Inference-Header-Content-Length 3 is more than the "
                                       "body's 2 bytes"), "%s", err.msg);
}

Test(oip, reads_the_json_length_header)
{
    size_t n = 0;
    cr_expect_eq(oip_json_len(NULL, 40, &n, &err), DL_OK);
    cr_expect_eq(n, 40);
    cr_expect_eq(oip_json_len("12", 40, &n, &err), DL_OK);
    cr_expect_eq(n, 12);
    cr_expect_eq(oip_json_len("40", 40, &n, &err), DL_OK);
    static const char *const bad[] = {"", "abc", "-1", "+5", "1 2", "0x10", "1.0",
                                      "99999999999999999999"};
    for (size_t i = 0; i < sizeof(bad) / sizeof(bad[0]); i++) {
        cr_expect_eq(oip_json_len(bad[i], 40, &n, &err), DL_ERR_INVALID, "'%s'", bad[i]);
        cr_expect_not_null(strstr(err.msg, "Inference-Header-Content-Length"), "%s", err.msg);
    }
    cr_expect_eq(oip_json_len("41", 40, &n, &err), DL_ERR_INVALID);
    cr_expect_not_null(strstr(err.msg, "41 is more than the body's 40 bytes"), "%s", err.msg);
}

/* ---- the binary tensor data extension: answers ------------------------------ */

static uint64_t le_at(const unsigned char *p, int bytes)
{
    uint64_t v = 0;
    for (int i = 0; i < bytes; i++)
        v |= (uint64_t)p[i] << (8 * i);
    return v;
}

Test(oip, writes_binary_outputs)
{
    const float y[6] = {0.1f, 0.2f, 0.7f, 0.6f, 0.3f, 0.1f};
    const oip_output out[3] = {{.kind = OIP_OUT_CLASS, .binary = true},
                               {.kind = OIP_OUT_TENSOR, .binary = false},
                               {.kind = OIP_OUT_LABEL, .binary = true}};
    oip_result res = {.model = "tiny", .version = 3, .id = "q\"1", .conf = &conf, .batch = 2,
                      .out_dim = 3, .y = y, .nout = 3, .out = out};
    dl_sbuf b = {0};
    size_t json_len;
    cr_assert_eq(oip_write_infer(&res, &b, &json_len, NULL), DL_OK);
    json_t *o = json_loadb(b.s, json_len, JSON_REJECT_DUPLICATES, NULL);
    cr_assert_not_null(o, "%.*s", (int)json_len, b.s);
    cr_expect_str_eq(json_string_value(json_object_get(o, "id")), "q\"1");
    json_t *outs = json_object_get(o, "outputs");
    cr_assert_eq(json_array_size(outs), 3);
    json_t *c = json_array_get(outs, 0), *p = json_array_get(outs, 1), *l = json_array_get(outs, 2);
    cr_expect_str_eq(json_string_value(json_object_get(c, "name")), "class");
    cr_expect_null(json_object_get(c, "data"));
    cr_expect_eq(json_integer_value(json_object_get(json_object_get(c, "parameters"),
                                                    "binary_data_size")), 16);
    cr_expect_str_eq(json_string_value(json_object_get(p, "name")), "probs");
    cr_expect_eq(json_array_size(json_object_get(p, "data")), 6);
    cr_expect_null(json_object_get(p, "parameters"));
    cr_expect_str_eq(json_string_value(json_object_get(l, "name")), "label");
    /* labels "Ankle boot" (10 bytes) and "cat" (3), each after 4 bytes of length */
    cr_expect_eq(json_integer_value(json_object_get(json_object_get(l, "parameters"),
                                                    "binary_data_size")), 4 + 10 + 4 + 3);
    json_decref(o);

    /* The bytes: class (2 x int64), then label (BYTES), in output order. */
    const unsigned char *bin = (const unsigned char *)b.s + json_len;
    cr_assert_eq(b.len - json_len, 16 + 21);
    cr_expect_eq(le_at(bin, 8), 2);
    cr_expect_eq(le_at(bin + 8, 8), 0);
    cr_expect_eq(le_at(bin + 16, 4), 10);
    cr_expect_eq(memcmp(bin + 20, "Ankle boot", 10), 0);
    cr_expect_eq(le_at(bin + 30, 4), 3);
    cr_expect_eq(memcmp(bin + 34, "cat", 3), 0);
    dl_sbuf_free(&b);

    /* FP32 as float32 bits. */
    const oip_output probs[1] = {{.kind = OIP_OUT_TENSOR, .binary = true}};
    res.out = probs;
    res.nout = 1;
    cr_assert_eq(oip_write_infer(&res, &b, &json_len, NULL), DL_OK);
    cr_assert_eq(b.len - json_len, 24);
    for (int i = 0; i < 6; i++) {
        uint32_t u = (uint32_t)le_at((const unsigned char *)b.s + json_len + 4 * i, 4);
        float f;
        memcpy(&f, &u, 4);
        cr_expect(memcmp(&f, &y[i], 4) == 0, "value %d", i);
    }
    dl_sbuf_free(&b);
}

/* Scores are written as the shortest text that reads back exactly, JSON's
 * null when not finite. */
Test(oip, writes_scores_that_read_back_exactly)
{
    const float y[8] = {1.4e-45f, 1.17549435e-38f, 3.40282347e38f, -0.0f, 1.0f / 3.0f,
                        0.1f, NAN, INFINITY};
    oip_result res = {.model = "tiny", .version = 1, .conf = &conf, .batch = 1, .out_dim = 8,
                      .y = y, .outputs = OIP_OUT_TENSOR};
    json_t *o = answer_json(&res);
    json_t *data = json_object_get(json_array_get(json_object_get(o, "outputs"), 0), "data");
    cr_assert_eq(json_array_size(data), 8);
    for (size_t i = 0; i < 6; i++) {
        float back = (float)json_number_value(json_array_get(data, i));
        cr_expect(memcmp(&back, &y[i], 4) == 0 || (back == 0 && y[i] == 0), "data[%zu]", i);
    }
    cr_expect(json_is_null(json_array_get(data, 6)));
    cr_expect(json_is_null(json_array_get(data, 7)));
    json_decref(o);
}

/* ---- Triton's classification extension, priority, sequences ------------- */

#define CLS_INPUT "{'inputs':[{'name':'pixels','shape':[2,4],'datatype':'FP32','data':[1,2,3,4,5,6,7,8]}],"

Test(oip, scans_classification)
{
    cr_assert_eq(parse(CLS_INPUT "'outputs':[{'name':'probs','parameters':{'classification':2}}]}"),
                 DL_OK, "%s", err.msg);
    cr_assert_eq(req.nout, 1);
    cr_expect_eq(req.out[0].kind, OIP_OUT_TENSOR);
    cr_expect_eq(req.out[0].topk, 2);
    cr_expect_eq(oip_check_classes(&req, &conf, 3, &err), DL_OK, "%s", err.msg);
    /* more classes than the model has */
    cr_expect_eq(oip_check_classes(&req, &conf, 1, &err), DL_ERR_INVALID);
    cr_expect_not_null(strstr(err.msg, "top 2 classes, but model 'tiny' has 1"), "%s", err.msg);
}

Test(oip, refuses_bad_classifications)
{
    refused(CLS_INPUT "'outputs':[{'name':'probs','parameters':{'classification':0}}]}",
            "outputs[0].parameters.classification must be a class count (an integer >= 1)");
    refused(CLS_INPUT "'outputs':[{'name':'probs','parameters':{'classification':-3}}]}",
            "an integer >= 1");
    refused(CLS_INPUT "'outputs':[{'name':'probs','parameters':{'classification':'2'}}]}",
            "an integer >= 1), not a string");
    refused(CLS_INPUT "'outputs':[{'name':'class','parameters':{'classification':1}}]}",
            "classification is asked of 'class', which is not a tensor of class scores");
    conf.loss = DL_LOSS_MSE;
    refused(CLS_INPUT "'outputs':[{'name':'probs','parameters':{'classification':1}}]}",
            "model 'tiny' is not a classifier");
}

Test(oip, writes_classifications)
{
    const float y[6] = {0.1f, 0.2f, 0.7f, 0.6f, 0.3f, 0.1f};
    const oip_output out[1] = {{.kind = OIP_OUT_TENSOR, .topk = 2}};
    oip_result res = {.model = "tiny", .version = 1, .conf = &conf, .batch = 2, .out_dim = 3,
                      .y = y, .nout = 1, .out = out};
    dl_sbuf b = {0};
    size_t json_len;
    cr_assert_eq(oip_write_infer(&res, &b, &json_len, NULL), DL_OK);
    json_t *o = json_loadb(b.s, json_len, JSON_REJECT_DUPLICATES, NULL);
    cr_assert_not_null(o, "%.*s", (int)json_len, b.s);
    json_t *p = json_array_get(json_object_get(o, "outputs"), 0);
    cr_expect_str_eq(json_string_value(json_object_get(p, "name")), "probs");
    cr_expect_str_eq(json_string_value(json_object_get(p, "datatype")), "BYTES");
    json_t *shape = json_object_get(p, "shape");
    cr_expect_eq(json_integer_value(json_array_get(shape, 0)), 2);
    cr_expect_eq(json_integer_value(json_array_get(shape, 1)), 2);
    /* "score:index:label", the highest first, row after row */
    const char *want[4] = {"0.7:2:Ankle boot", "0.2:1:dog", "0.6:0:cat", "0.3:1:dog"};
    json_t *data = json_object_get(p, "data");
    cr_assert_eq(json_array_size(data), 4);
    for (int i = 0; i < 4; i++)
        cr_expect_str_eq(json_string_value(json_array_get(data, i)), want[i]);
    json_decref(o);
    dl_sbuf_free(&b);

    /* Without labels: "score:index"; binary: BYTES, a 4-byte length each. */
    conf.nlabels = 0;
    const oip_output bin[1] = {{.kind = OIP_OUT_TENSOR, .binary = true, .topk = 1}};
    res.out = bin;
    cr_assert_eq(oip_write_infer(&res, &b, &json_len, NULL), DL_OK);
    o = json_loadb(b.s, json_len, JSON_REJECT_DUPLICATES, NULL);
    p = json_array_get(json_object_get(o, "outputs"), 0);
    cr_expect_eq(json_integer_value(json_object_get(json_object_get(p, "parameters"),
                                                    "binary_data_size")), 4 + 5 + 4 + 5);
    json_decref(o);
    const unsigned char *bin_at = (const unsigned char *)b.s + json_len;
    cr_assert_eq(b.len - json_len, 18);
    cr_expect_eq(le_at(bin_at, 4), 5);
    cr_expect_eq(memcmp(bin_at + 4, "0.7:2", 5), 0);
    cr_expect_eq(le_at(bin_at + 9, 4), 5);
    cr_expect_eq(memcmp(bin_at + 13, "0.6:0", 5), 0);
    dl_sbuf_free(&b);
}

/* Ties rank the lower index first; a score that is not a number ranks
 * last. */
Test(oip, ranks_ties_by_index)
{
    const float y[4] = {0.25f, NAN, 0.5f, 0.25f};
    const oip_output out[1] = {{.kind = OIP_OUT_TENSOR, .topk = 4}};
    conf.nlabels = 0;
    oip_result res = {.model = "tiny", .version = 1, .conf = &conf, .batch = 1, .out_dim = 4,
                      .y = y, .nout = 1, .out = out};
    dl_sbuf b = {0};
    size_t json_len;
    cr_assert_eq(oip_write_infer(&res, &b, &json_len, NULL), DL_OK);
    json_t *o = json_loadb(b.s, json_len, JSON_REJECT_DUPLICATES, NULL);
    json_t *data = json_object_get(json_array_get(json_object_get(o, "outputs"), 0), "data");
    const char *want[4] = {"0.5:2", "0.25:0", "0.25:3", "null:1"};
    cr_assert_eq(json_array_size(data), 4);
    for (int i = 0; i < 4; i++)
        cr_expect_str_eq(json_string_value(json_array_get(data, i)), want[i]);
    json_decref(o);
    dl_sbuf_free(&b);
}

Test(oip, scans_priority_and_refuses_sequences)
{
    cr_assert_eq(parse(CLS_INPUT "'parameters':{'priority':2,'my_tag':'x'}}"), DL_OK, "%s",
                 err.msg);
    cr_expect_eq(req.priority, 2);
    oip_request_fini(&req);
    refused(CLS_INPUT "'parameters':{'priority':-1}}",
            "'parameters'.priority must be a priority level (an integer >= 0)");
    refused(CLS_INPUT "'parameters':{'sequence_id':42}}",
            "model 'tiny' has no sequence batching: sequence_id is not supported");
    refused(CLS_INPUT "'parameters':{'sequence_start':true}}",
            "sequence_start is not supported");
    refused(CLS_INPUT "'parameters':{'sequence_end':false}}", "sequence_end is not supported");
}

/* ---- a model of several inputs and outputs ----------------------------------
 * "user" (INT64, one id through an embedding of 10 rows) and "feats" (FP32,
 * 2 values); outputs "click" (bce, 1 value) and "rating" (mse, 1 value). */

static dl_model_conf two;
static dl_input_conf two_in[2];
static dl_output_conf two_out[2];
static dl_layer_conf two_layers[1];

static void two_tower(void)
{
    memset(&two, 0, sizeof(two));
    strcpy(two.name, "tt");
    two_in[0] = (dl_input_conf){.ndim = 1, .shape = {1}, .dim = 1, .dtype = DL_IN_INT64};
    two_in[1] = (dl_input_conf){.ndim = 1, .shape = {2}, .dim = 2, .dtype = DL_IN_FP32,
                                .sc = {1, 0, 1}};
    strcpy(two_in[0].name, "user");
    strcpy(two_in[1].name, "feats");
    two_out[0] = (dl_output_conf){.loss = DL_LOSS_BCE, .dim = 1, .served = 1};
    two_out[1] = (dl_output_conf){.loss = DL_LOSS_MSE, .dim = 1, .served = 1};
    strcpy(two_out[0].name, "click");
    strcpy(two_out[1].name, "rating");
    two_layers[0] = (dl_layer_conf){.type = DL_LAYER_EMBEDDING, .num_embeddings = 10, .dim = 4,
                                    .nsrc = 1, .src = {-1}};
    two.ninputs = two.noutputs = 2;
    two.inputs = two_in;
    two.outputs = two_out;
    two.nlayers = 1;
    two.layers = two_layers;
    strcpy(two.input_name, "user");
    strcpy(two.output_name, "click");
    two.loss = DL_LOSS_BCE;
}

static dl_status parse_two(const char *text)
{
    two_tower();
    const char *body = fx_dq(text);
    return oip_parse_infer(body, strlen(body), strlen(body), &two, NULL, 3, &req, &err);
}

Test(oip, lays_several_inputs_side_by_side)
{
    cr_assert_eq(parse_two("{'inputs':[{'name':'feats','datatype':'FP32','shape':[2,2],"
                           "'data':[[0.5,1.5],[2.5,3.5]]},{'name':'user','datatype':'INT32',"
                           "'shape':[2,1],'data':[9,0]}]}"), DL_OK, "%s", err.msg);
    cr_assert_eq(req.batch, 2);
    cr_assert_eq(req.count, 6);
    const float want[6] = {9, 0.5f, 1.5f, 0, 2.5f, 3.5f};
    for (int i = 0; i < 6; i++)
        cr_expect_eq(req.x[i], want[i], "x[%d] = %g", i, (double)req.x[i]);
    cr_expect_eq(req.nout, 2);   /* click, rating; no class of a bce output */
    cr_expect_eq(req.out[1].index, 1);
}

Test(oip, reads_binary_ids)
{
    two_tower();
    const char *head = fx_dq("{'inputs':[{'name':'user','datatype':'INT64','shape':[1,1],"
                             "'parameters':{'binary_data_size':8}},{'name':'feats','datatype':"
                             "'FP32','shape':[1,2],'parameters':{'binary_data_size':8}}]}");
    char body[512];
    size_t n = strlen(head);
    memcpy(body, head, n);
    const unsigned char id[8] = {7, 0, 0, 0, 0, 0, 0, 0};
    const float f[2] = {1, 2};
    memcpy(body + n, id, 8);
    memcpy(body + n + 8, f, 8);
    cr_assert_eq(oip_parse_infer(body, n + 16, n, &two, NULL, 3, &req, &err), DL_OK, "%s", err.msg);
    cr_expect_eq(req.x[0], 7);
    cr_expect_eq(req.x[2], 2);
    oip_request_fini(&req);
    body[n + 7] = (char)0x80;   /* a negative INT64 */
    cr_expect_eq(oip_parse_infer(body, n + 16, n, &two, NULL, 3, &req, &err), DL_ERR_INVALID);
    cr_expect_not_null(strstr(err.msg, "input 'user'"), "%s", err.msg);
}

static void refused_two(const char *text, const char *needle)
{
    cr_expect_eq(parse_two(text), DL_ERR_INVALID, "accepted: %s", text);
    cr_expect_not_null(strstr(err.msg, needle), "message was: %s (wanted '%s')", err.msg, needle);
    cr_expect_null(req.x);
    oip_request_fini(&req);
}

#define TWO_FEATS "{'name':'feats','datatype':'FP32','shape':[1,2],'data':[1,2]}"

Test(oip, refuses_bad_inputs_of_several)
{
    refused_two("{'inputs':[" TWO_FEATS "]}", "input 'user' of model 'tt' is missing");
    refused_two("{'inputs':[" TWO_FEATS ",{'name':'usr','datatype':'INT64','shape':[1,1],"
                "'data':[1]}]}", "inputs[1]: model 'tt' has no input 'usr'");
    refused_two("{'inputs':[" TWO_FEATS "," TWO_FEATS "]}", "input 'feats' is given twice");
    refused_two("{'inputs':[" TWO_FEATS ",{'name':'user','datatype':'FP32','shape':[1,1],"
                "'data':[1]}]}", "input 'user': datatype FP32 does not fit");
    refused_two("{'inputs':[" TWO_FEATS ",{'name':'user','datatype':'INT64','shape':[2,1],"
                "'data':[1,2]}]}", "they must agree");
    refused_two("{'inputs':[" TWO_FEATS ",{'name':'user','datatype':'INT64','shape':[1,1],"
                "'data':[10]}]}", "input 'user': 10 (sample 0) is not an id: model 'tt' takes "
                "integers in [0, 10)");
    refused_two("{'inputs':[" TWO_FEATS ",{'name':'user','datatype':'UINT8','shape':[1,1],"
                "'data':[300]}]}", "inputs[1].data[0] must be an integer in 0..255 (UINT8)");
    refused_two("{'inputs':[" TWO_FEATS ",{'name':'user','datatype':'INT64','shape':[1,1],"
                "'data':[1]}],'outputs':[{'name':'click','parameters':{'classification':1}}]}",
                "classification of 'click'");
}

Test(oip, checks_ids_of_flat_values)
{
    two_tower();
    const float ok[6] = {0, 1, 2, 9, 3, 4}, past[6] = {0, 1, 2, 10, 3, 4};
    cr_expect_eq(oip_check_ids(&two, ok, 2, &err), DL_OK, "%s", err.msg);
    cr_expect_eq(oip_check_ids(&two, past, 2, &err), DL_ERR_INVALID);
    cr_expect_not_null(strstr(err.msg, "10 (sample 1)"), "%s", err.msg);
    cr_expect_eq(oip_id_bound(&two, 0), 10);
}

Test(oip, writes_each_output_by_name)
{
    two_tower();
    const float y[4] = {0.25f, -1.5f, 0.75f, 2.0f};   /* click, rating a sample */
    oip_result res = {.model = "tt", .version = 1, .conf = &two, .batch = 2, .out_dim = 2,
                      .y = y, .outputs = OIP_OUT_ALL};
    dl_sbuf b = {0};
    size_t json_len;
    cr_assert_eq(oip_write_infer(&res, &b, &json_len, NULL), DL_OK);
    json_t *o = json_loadb(b.s, json_len, JSON_REJECT_DUPLICATES, NULL);
    cr_assert_not_null(o, "%.*s", (int)json_len, b.s);
    json_t *outs = json_object_get(o, "outputs");
    cr_assert_eq(json_array_size(outs), 2);
    const char *names[2] = {"click", "rating"};
    const double want[2][2] = {{0.25, 0.75}, {-1.5, 2.0}};
    for (int k = 0; k < 2; k++) {
        json_t *t = json_array_get(outs, (size_t)k);
        cr_expect_str_eq(json_string_value(json_object_get(t, "name")), names[k]);
        json_t *shape = json_object_get(t, "shape"), *data = json_object_get(t, "data");
        cr_expect_eq(json_integer_value(json_array_get(shape, 0)), 2);
        cr_expect_eq(json_integer_value(json_array_get(shape, 1)), 1);
        for (int i = 0; i < 2; i++)
            cr_expect_float_eq(json_number_value(json_array_get(data, (size_t)i)), want[k][i],
                               1e-9);
    }
    json_decref(o);
    dl_sbuf_free(&b);
    json_t *versions = json_array();
    json_t *meta = oip_model_metadata(&two, 2, versions);
    json_decref(versions);
    cr_assert_not_null(meta);
    json_t *in0 = json_array_get(json_object_get(meta, "inputs"), 0);
    cr_expect_str_eq(json_string_value(json_object_get(in0, "datatype")), "INT64");
    cr_expect_eq(json_array_size(json_object_get(meta, "outputs")), 2);
    json_decref(meta);
}

/* ---- sequence and text inputs ------------------------------------------------
 * "tagger": a text input (BYTES, bytes tokenizer, max_length 6) through an
 * embedding to two per-token outputs, "tags" (softmax cross-entropy, 3
 * labels) and "path" (a crf, 3 labels). "steps": a sequence of FP32
 * pairs ([-1, 2], max_length 4) to one per-token output "y" of 3 classes
 * without labels; "ids": INT64 ids [-1] (max_length 4, 10 of them). */

static dl_model_conf *seq_conf;
static dl_tokenizer *seq_tok[2];

static void seq_model(const char *json)
{
    const char *t = fx_dq(json);
    dl_model_conf_free(seq_conf);
    seq_conf = NULL;
    cr_assert_eq(dl_model_conf_parse(t, strlen(t), "seq.json", &seq_conf, &err), DL_OK, "%s",
                 err.msg);
    for (int k = 0; k < seq_conf->ninputs; k++)
        if (seq_conf->inputs[k].dtype == DL_IN_BYTES)
            cr_assert_eq(dl_tokenizer_new(&seq_conf->inputs[k].tok, &seq_tok[k], &err), DL_OK);
}

static void seq_teardown(void)
{
    oip_request_fini(&req);
    dl_model_conf_free(seq_conf);
    seq_conf = NULL;
    for (int k = 0; k < 2; k++) {
        dl_tokenizer_free(seq_tok[k]);
        seq_tok[k] = NULL;
    }
}

TestSuite(oip_seq, .init = setup, .fini = seq_teardown, .timeout = 10);

static void tagger(void)
{
    seq_model("{'name': 'tagger', 'inputs': [{'name': 'text', 'datatype': 'BYTES', 'shape': [1], "
              "'max_length': 6, 'tokenizer': {'type': 'bytes'}}], 'layers': [{'name': 'emb', "
              "'type': 'embedding', 'num_embeddings': 256, 'dim': 4}, {'name': 'fc1', 'type': "
              "'dense', 'units': 3}, {'name': 'fc2', 'type': 'dense', 'units': 3, 'inputs': "
              "['emb']}], 'outputs': [{'name': 'tags', 'from': 'fc1', 'loss': "
              "'softmax_cross_entropy', 'labels': ['O', 'B', 'I']}, {'name': 'path', 'from': "
              "'fc2', 'loss': 'crf', 'labels': ['x', 'y', 'z']}]}");
}

static void steps(void)
{
    seq_model("{'name': 'steps', 'inputs': [{'name': 'vec', 'datatype': 'FP32', 'shape': [-1, 2], "
              "'max_length': 4}], 'layers': [{'name': 'fc', 'type': 'dense', 'units': 3}], "
              "'outputs': [{'name': 'y', 'from': 'fc', 'loss': 'softmax_cross_entropy'}]}");
}

static void ids_model(void)
{
    seq_model("{'name': 'lm', 'inputs': [{'name': 'ids', 'datatype': 'INT64', 'shape': [-1], "
              "'max_length': 4}], 'layers': [{'name': 'emb', 'type': 'embedding', "
              "'num_embeddings': 10, 'dim': 4}, {'name': 'fc', 'type': 'dense', 'units': 10}], "
              "'outputs': [{'name': 'next', 'from': 'fc', 'loss': 'next_token', 'of': 'ids'}]}");
}

/* Parses text (' for ") against seq_conf. */
static dl_status parse_seq(const char *text)
{
    const char *body = fx_dq(text);
    oip_request_fini(&req);
    return oip_parse_infer(body, strlen(body), strlen(body), seq_conf, seq_tok,
                           1 + seq_conf->inputs[0].dim, &req, &err);
}

static void refused_seq(const char *text, const char *needle)
{
    cr_expect_eq(parse_seq(text), DL_ERR_INVALID, "accepted: %s", text);
    cr_expect_not_null(strstr(err.msg, needle), "message was: %s (wanted '%s')", err.msg, needle);
    cr_expect_null(req.x);
}

/* Expects req.x to hold rows of 1 + 6 floats: each text's length, then
 * its bytes, then zeros. */
static void expect_texts(const char *const *texts, int n)
{
    cr_assert_eq(req.batch, n);
    cr_assert_eq(req.count, n * 7);
    for (int i = 0; i < n; i++) {
        const float *row = req.x + i * 7;
        size_t len = strlen(texts[i]);
        cr_expect_eq(row[0], (float)len, "sample %d's length %g", i, (double)row[0]);
        for (size_t t = 0; t < 6; t++)
            cr_expect_eq(row[1 + t], t < len ? (float)(unsigned char)texts[i][t] : 0.0f,
                         "sample %d position %zu", i, t);
    }
}

Test(oip_seq, scans_strings_into_triton_layout)
{
    cr_assert_eq(scan("{'inputs':[{'name':'text','datatype':'BYTES','shape':[2],"
                      "'data':['hi','ab\\u00e9']}]}"), DL_OK, "%s", err.msg);
    cr_expect_eq(req.dtype, OIP_BYTES);
    cr_expect_eq(req.count, 2);
    cr_expect_null(req.x);
    const char want[] = "\2\0\0\0hi\4\0\0\0ab\xc3\xa9";
    cr_assert_eq(req.nbytes, sizeof(want) - 1);
    cr_expect_eq(memcmp(req.bytes, want, sizeof(want) - 1), 0);
    /* nested as the shape says, and an empty string */
    cr_assert_eq(scan("{'inputs':[{'name':'text','datatype':'BYTES','shape':[2,1],"
                      "'data':[['x'],['']]}]}"), DL_OK, "%s", err.msg);
    cr_expect_eq(req.nbytes, 9);
    cr_expect_eq(memcmp(req.bytes, "\1\0\0\0x\0\0\0\0", 9), 0);
}

Test(oip_seq, refuses_what_is_not_strings)
{
    cr_expect_eq(scan("{'inputs':[{'name':'text','datatype':'BYTES','shape':[2],"
                      "'data':['a',7]}]}"), DL_ERR_INVALID);
    cr_expect_not_null(strstr(err.msg, "inputs[0].data[1] must be a string (BYTES), not an "
                              "integer"), "%s", err.msg);
    cr_expect_null(req.bytes);
    cr_expect_eq(scan("{'inputs':[{'name':'text','datatype':'BYTES','shape':[3],"
                      "'data':['a','b']}]}"), DL_ERR_INVALID);
    cr_expect_not_null(strstr(err.msg, ".data has 2 values; shape [3] needs 3"), "%s", err.msg);
    cr_expect_eq(scan("{'inputs':[{'name':'text','datatype':'STRING','shape':[1],"
                      "'data':['a']}]}"), DL_ERR_INVALID);
    cr_expect_not_null(strstr(err.msg, "\"BYTES\""), "%s", err.msg);
}

/* JSON of a binary BYTES input of shape [n] and `size` bytes. */
static const char *bytes_head(int n, size_t size)
{
    static char head[256];
    snprintf(head, sizeof(head), "{'inputs':[{'name':'text','datatype':'BYTES','shape':[%d],"
             "'parameters':{'binary_data_size':%zu}}]}", n, size);
    return head;
}

Test(oip_seq, reads_binary_strings_as_triton_lays_them_out)
{
    const char bin[] = "\3\0\0\0abc\0\0\0\0\1\0\0\0z";
    size_t n = sizeof(bin) - 1;
    cr_assert_eq(scan_bin(bytes_head(3, n), bin, n), DL_OK, "%s", err.msg);
    cr_expect(req.binary_in);
    cr_expect_eq(req.count, 3);
    cr_assert_eq(req.nbytes, n);
    cr_expect_eq(memcmp(req.bytes, bin, n), 0);
}

Test(oip_seq, refuses_malformed_binary_strings_naming_the_input)
{
    /* the second element's length is cut short */
    bin_refused(bytes_head(2, 9), "\3\0\0\0abc\1\0", 9,
                "inputs[0] ('text') binary data: BYTES element 1 of 2 has no 4-byte length");
    /* a length past the bytes there are */
    bin_refused(bytes_head(1, 8), "\x09\0\0\0abcd", 8,
                "BYTES element 0 of 1 is 9 bytes long, but only 4 of binary_data_size 8 remain");
    /* bytes left over once the shape's elements are read */
    bin_refused(bytes_head(1, 6), "\1\0\0\0ab", 6,
                "its 1 BYTES elements take 5 bytes, but binary_data_size is 6");
    /* more than the body holds */
    bin_refused(bytes_head(1, 40), "\1\0\0\0a", 5, "only 5 follow");
    /* an absurd count, refused without reading past the bytes */
    bin_refused(bytes_head(1000000, 4), "\0\0\0\0", 4, "element 1 of 1000000");
}

Test(oip_seq, packs_texts_against_the_model)
{
    tagger();
    static const char *const texts[] = {"hi", "abcdef", "a"};
    cr_assert_eq(parse_seq("{'inputs':[{'name':'text','datatype':'BYTES','shape':[3,1],"
                           "'data':['hi','abcdef','a']}]}"), DL_OK, "%s", err.msg);
    expect_texts(texts, 3);
    /* no "label" or "class" of a per-token model: its tensors alone */
    cr_expect_eq(req.nout, 2);
    cr_expect_eq(req.outputs, OIP_OUT_TENSOR);

    /* the same through the binary extension */
    const char bin[] = "\2\0\0\0hi\6\0\0\0abcdef\1\0\0\0a";
    const char *head = fx_dq(bytes_head(3, sizeof(bin) - 1));
    char body[512];
    size_t hl = strlen(head);
    memcpy(body, head, hl);
    memcpy(body + hl, bin, sizeof(bin) - 1);
    oip_request_fini(&req);
    cr_assert_eq(oip_parse_infer(body, hl + sizeof(bin) - 1, hl, seq_conf, seq_tok, 7, &req,
                                 &err), DL_OK, "%s", err.msg);
    expect_texts(texts, 3);
}

Test(oip_seq, refuses_texts_that_do_not_fit)
{
    tagger();
    refused_seq("{'inputs':[{'name':'text','datatype':'BYTES','shape':[2],'data':['ok',"
                "'abcdefg']}]}", "input 'text': 7 tokens, above max_length 6");
    refused_seq("{'inputs':[{'name':'text','datatype':'BYTES','shape':[1],'data':['']}]}",
                "input 'text': the text has no tokens");
    refused_seq("{'inputs':[{'name':'text','datatype':'INT64','shape':[1,2],'data':[1,2]}]}",
                "input 'text': datatype INT64 does not fit model 'tagger', which takes BYTES");
    refused_seq("{'inputs':[{'name':'text','datatype':'BYTES','shape':[1,2],'data':['a','b']}]}",
                "input 'text': shape [1, 2] does not fit model 'tagger': it takes [B] or "
                "[B, 1] strings");
}

Test(oip_seq, packs_sequences_of_any_length)
{
    steps();
    cr_assert_eq(parse_seq("{'inputs':[{'name':'vec','datatype':'FP32','shape':[2,3,2],"
                           "'data':[[[1,2],[3,4],[5,6]],[[7,8],[9,10],[11,12]]]}]}"), DL_OK,
                 "%s", err.msg);
    cr_assert_eq(req.batch, 2);
    cr_assert_eq(req.count, 2 * 9);
    const float want[18] = {3, 1, 2, 3, 4, 5, 6, 0, 0, 3, 7, 8, 9, 10, 11, 12, 0, 0};
    for (int i = 0; i < 18; i++)
        cr_expect_eq(req.x[i], want[i], "x[%d] = %g", i, (double)req.x[i]);
    cr_assert_eq(parse_seq("{'inputs':[{'name':'vec','datatype':'FP32','shape':[1,4,2],"
                           "'data':[1,2,3,4,5,6,7,8]}]}"), DL_OK, "%s", err.msg);
    cr_expect_eq(req.x[0], 4);
    cr_expect_eq(req.x[8], 8);
    refused_seq("{'inputs':[{'name':'vec','datatype':'FP32','shape':[1,5,2],"
                "'data':[1,2,3,4,5,6,7,8,9,10]}]}",
                "input 'vec': 5 positions, above max_length 4 of model 'steps'");
    refused_seq("{'inputs':[{'name':'vec','datatype':'FP32','shape':[1,2,3],"
                "'data':[1,2,3,4,5,6]}]}", "input 'vec': shape [1, 2, 3] does not fit model "
                "'steps': it takes sequences of [B, len, 2] with len from 1 to max_length 4");
    refused_seq("{'inputs':[{'name':'vec','datatype':'FP32','shape':[4,2],"
                "'data':[1,2,3,4,5,6,7,8]}]}", "does not fit");
    refused_seq("{'inputs':[{'name':'vec','datatype':'FP32','shape':[1,0,2],'data':[]}]}",
                "inputs[0].shape[1] must be a positive integer");
}

Test(oip_seq, checks_the_ids_of_a_sequence)
{
    ids_model();
    cr_assert_eq(parse_seq("{'inputs':[{'name':'ids','datatype':'INT32','shape':[1,2],"
                           "'data':[9,0]}]}"), DL_OK, "%s", err.msg);
    const float want[5] = {2, 9, 0, 0, 0};
    for (int i = 0; i < 5; i++)
        cr_expect_eq(req.x[i], want[i], "x[%d] = %g", i, (double)req.x[i]);
    refused_seq("{'inputs':[{'name':'ids','datatype':'INT64','shape':[2,2],'data':[1,2,3,10]}]}",
                "input 'ids': 10 (sample 1) is not an id: model 'lm' takes integers in [0, 10)");
    /* packed rows, as Kafka's flat and raw records carry them */
    const float ok[10] = {2, 1, 2, 0, 0, 4, 9, 9, 9, 9};
    cr_expect_eq(oip_check_ids(seq_conf, ok, 2, &err), DL_OK, "%s", err.msg);
    const float zero[5] = {0, 1, 2, 0, 0}, longer[5] = {5, 1, 2, 3, 4}, half[5] = {1.5f};
    const float past[5] = {1, 1, 10, 0, 0};
    cr_expect_eq(oip_check_ids(seq_conf, zero, 1, &err), DL_ERR_INVALID);
    cr_expect_not_null(strstr(err.msg, "input 'ids': sample 0 has length 0, not a whole number "
                              "from 1 to max_length 4"), "%s", err.msg);
    cr_expect_eq(oip_check_ids(seq_conf, longer, 1, &err), DL_ERR_INVALID);
    cr_expect_eq(oip_check_ids(seq_conf, half, 1, &err), DL_ERR_INVALID);
    cr_expect_eq(oip_check_ids(seq_conf, past, 1, &err), DL_ERR_INVALID, "padding holds ids too");
}

Test(oip_seq, bounds_what_a_request_packs_into)
{
    /* a sequence of max_length 2^20: a thousand samples of one position
     * would pack into 4 GB */
    seq_model("{'name': 'long', 'inputs': [{'name': 'vec', 'datatype': 'FP32', 'shape': [-1, 1],"
              " 'max_length': 1048576}], 'layers': [{'name': 'fc', 'type': 'dense', 'units': 2}],"
              " 'outputs': [{'name': 'y', 'from': 'fc', 'loss': 'softmax_cross_entropy'}]}");
    char text[8192];
    int n = snprintf(text, sizeof(text), "{'inputs':[{'name':'vec','datatype':'FP32','shape':"
                     "[1000,1,1],'data':[0");
    for (int i = 1; i < 1000; i++)
        n += snprintf(text + n, sizeof(text) - (size_t)n, ",0");
    snprintf(text + n, sizeof(text) - (size_t)n, "]}]}");
    cr_expect_eq(parse_seq(text), DL_ERR_TOO_LARGE);
    cr_expect_not_null(strstr(err.msg, "more than a request may"), "%s", err.msg);
    cr_expect_null(req.x);
}

Test(oip_seq, asks_per_token_outputs_for_labels_and_classes)
{
    tagger();
    const char *in = "{'name':'text','datatype':'BYTES','shape':[1],'data':['ab']}";
    char text[1024];
    snprintf(text, sizeof(text), "{'inputs':[%s],'outputs':[{'name':'tags','parameters':"
             "{'labels':true}},{'name':'path','parameters':{'classification':1}},{'name':"
             "'tags','parameters':{'classification':2}}]}", in);
    cr_assert_eq(parse_seq(text), DL_OK, "%s", err.msg);
    cr_assert_eq(req.nout, 2, "tags listed twice answers once");
    cr_expect(req.out[0].labels && req.out[0].topk == 0);
    cr_expect(req.out[1].labels && req.out[1].topk == 0, "a crf's classification: its labels");
    snprintf(text, sizeof(text), "{'inputs':[%s],'outputs':[{'name':'path','parameters':"
             "{'classification':2}}]}", in);
    refused_seq(text, "a crf output answers one tag a position");
    snprintf(text, sizeof(text), "{'inputs':[%s],'outputs':[{'name':'class'}]}", in);
    refused_seq(text, "has no output 'class' (it has 'tags', 'path')");
    snprintf(text, sizeof(text), "{'inputs':[%s],'outputs':[{'name':'tags','parameters':"
             "{'classification':4}}]}", in);
    cr_assert_eq(parse_seq(text), DL_OK, "%s", err.msg);
    cr_expect_eq(oip_check_classes(&req, seq_conf, 6 * 3 + 6, &err), DL_ERR_INVALID);
    cr_expect_not_null(strstr(err.msg, "top 4 classes, but model 'tagger' has 3"), "%s", err.msg);

    steps();   /* no labels */
    refused_seq("{'inputs':[{'name':'vec','datatype':'FP32','shape':[1,1,2],'data':[1,2]}],"
                "'outputs':[{'name':'y','parameters':{'labels':true}}]}",
                "labels of 'y': the output of model 'steps' has no labels");
}

/* tagger's outputs for 2 samples as served: "tags" 6 positions of 3
 * scores, then "path" 6 tags (-1 past the length); the packed inputs
 * give the lengths (3 and `len1`). */
static float tag_y[2 * 24];
static float tag_x[2 * 7];

static oip_result tagger_result(int len1, const oip_output *out, int nout)
{
    const int lens[2] = {3, len1};
    for (int i = 0; i < 2; i++) {
        for (int t = 0; t < 6; t++) {
            float *p = tag_y + i * 24 + t * 3;
            float odd = 0.125f * (float)(t % 2);
            p[0] = 0.5f, p[1] = 0.25f + odd, p[2] = 0.25f - odd + (float)i / 16.0f;
            tag_y[i * 24 + 18 + t] = t < lens[i] ? (float)((t + i) % 3) : -1.0f;
        }
        tag_x[i * 7] = (float)lens[i];
    }
    return (oip_result){.model = "tagger", .version = 1, .conf = seq_conf, .batch = 2,
                        .out_dim = 24, .y = tag_y, .x = tag_x, .in_dim = 7, .nout = nout,
                        .out = out, .outputs = OIP_OUT_TENSOR};
}

static void expect_shape(json_t *t, const char *type, const int64_t *shape, int nd)
{
    cr_expect_str_eq(json_string_value(json_object_get(t, "datatype")), type);
    json_t *s = json_object_get(t, "shape");
    cr_assert_eq(json_array_size(s), (size_t)nd, "%s", json_dumps(s, 0));
    for (int i = 0; i < nd; i++)
        cr_expect_eq(json_integer_value(json_array_get(s, (size_t)i)), shape[i], "shape[%d]", i);
}

Test(oip_seq, answers_per_token_outputs_trimmed_to_the_length)
{
    tagger();
    oip_result res = tagger_result(3, NULL, 0);
    json_t *o = answer_json(&res);
    json_t *outs = json_object_get(o, "outputs");
    cr_assert_eq(json_array_size(outs), 2);
    json_t *tags = json_array_get(outs, 0), *path = json_array_get(outs, 1);
    expect_shape(tags, "FP32", (const int64_t[]){2, 3, 3}, 3);
    json_t *data = json_object_get(tags, "data");
    cr_assert_eq(json_array_size(data), 18);
    for (int i = 0; i < 2; i++)
        for (int j = 0; j < 9; j++)
            cr_expect_eq((float)json_number_value(json_array_get(data, (size_t)(i * 9 + j))),
                         tag_y[i * 24 + j], "sample %d value %d", i, j);
    expect_shape(path, "INT64", (const int64_t[]){2, 3}, 2);
    const int64_t want[6] = {0, 1, 2, 1, 2, 0};
    for (int j = 0; j < 6; j++)
        cr_expect_eq(json_integer_value(json_array_get(json_object_get(path, "data"),
                                                       (size_t)j)), want[j]);
    json_decref(o);

    /* samples of other lengths (a Kafka record's): the longest, padded */
    res = tagger_result(1, NULL, 0);
    o = answer_json(&res);
    outs = json_object_get(o, "outputs");
    tags = json_array_get(outs, 0), path = json_array_get(outs, 1);
    expect_shape(tags, "FP32", (const int64_t[]){2, 3, 3}, 3);
    data = json_object_get(tags, "data");
    cr_expect_eq(json_number_value(json_array_get(data, 12)), 0.0, "past sample 1's length");
    cr_expect_eq(json_integer_value(json_array_get(json_object_get(path, "data"), 4)), -1);
    json_decref(o);
}

Test(oip_seq, answers_labels_and_classifications_of_positions)
{
    tagger();
    const oip_output out[3] = {
        {.kind = OIP_OUT_TENSOR, .index = 0, .labels = true},
        {.kind = OIP_OUT_TENSOR, .index = 1, .labels = true},
        {.kind = OIP_OUT_TENSOR, .index = 0, .topk = 2},
    };
    oip_result res = tagger_result(2, out, 3);
    json_t *o = answer_json(&res);
    json_t *outs = json_object_get(o, "outputs");
    json_t *tags = json_array_get(outs, 0), *path = json_array_get(outs, 1),
           *top = json_array_get(outs, 2);
    expect_shape(tags, "BYTES", (const int64_t[]){2, 3}, 2);
    static const char *const want_tags[6] = {"O", "O", "O", "O", "O", ""};
    static const char *const want_path[6] = {"x", "y", "z", "y", "z", ""};
    for (int j = 0; j < 6; j++) {
        cr_expect_str_eq(json_string_value(json_array_get(json_object_get(tags, "data"),
                                                          (size_t)j)), want_tags[j]);
        cr_expect_str_eq(json_string_value(json_array_get(json_object_get(path, "data"),
                                                          (size_t)j)), want_path[j]);
    }
    expect_shape(top, "BYTES", (const int64_t[]){2, 3, 2}, 3);
    json_t *d = json_object_get(top, "data");
    cr_expect_str_eq(json_string_value(json_array_get(d, 0)), "0.5:0:O");
    cr_expect_str_eq(json_string_value(json_array_get(d, 1)), "0.25:1:B");
    cr_expect_str_eq(json_string_value(json_array_get(d, 3)), "0.375:1:B");
    cr_expect_str_eq(json_string_value(json_array_get(d, 11)), "", "past sample 1's length");
    json_decref(o);
}

Test(oip_seq, writes_per_token_outputs_in_binary)
{
    tagger();
    const oip_output out[3] = {
        {.kind = OIP_OUT_TENSOR, .index = 0, .binary = true},
        {.kind = OIP_OUT_TENSOR, .index = 1, .binary = true},
        {.kind = OIP_OUT_TENSOR, .index = 1, .binary = true, .labels = true},
    };
    oip_result res = tagger_result(3, out, 3);
    dl_sbuf b = {0};
    size_t json_len;
    cr_assert_eq(oip_write_infer(&res, &b, &json_len, NULL), DL_OK);
    json_t *o = json_loadb(b.s, json_len, 0, NULL);
    cr_assert_not_null(o);
    json_t *outs = json_object_get(o, "outputs");
    size_t sizes[3], want[3] = {2 * 3 * 3 * 4, 2 * 3 * 8, 6 * 5};
    for (int k = 0; k < 3; k++) {
        sizes[k] = (size_t)json_integer_value(json_object_get(json_object_get(
            json_array_get(outs, (size_t)k), "parameters"), "binary_data_size"));
        cr_expect_eq(sizes[k], want[k], "output %d: %zu bytes", k, sizes[k]);
    }
    cr_assert_eq(b.len, json_len + want[0] + want[1] + want[2]);
    const unsigned char *p = (const unsigned char *)b.s + json_len;
    cr_expect_eq(memcmp(p, tag_y, 36), 0, "sample 0's 3 positions, as they are");
    cr_expect_eq(memcmp(p + 36, tag_y + 24, 36), 0, "sample 1's");
    p += want[0];
    cr_expect_eq(le_at(p + 8, 8), 1, "tags as INT64");
    p += want[1];
    cr_expect_eq(memcmp(p, "\1\0\0\0x\1\0\0\0y", 10), 0);
    json_decref(o);
    dl_sbuf_free(&b);
}

Test(oip_seq, describes_sequences_in_the_metadata)
{
    tagger();
    json_t *versions = json_array();
    json_t *meta = oip_model_metadata(seq_conf, 24, versions);
    json_decref(versions);
    cr_assert_not_null(meta);
    json_t *in = json_array_get(json_object_get(meta, "inputs"), 0);
    expect_shape(in, "BYTES", (const int64_t[]){-1, 1}, 2);
    cr_expect_eq(json_integer_value(json_object_get(json_object_get(in, "parameters"),
                                                    "max_length")), 6);
    json_t *outs = json_object_get(meta, "outputs");
    cr_assert_eq(json_array_size(outs), 2, "no label or class");
    expect_shape(json_array_get(outs, 0), "FP32", (const int64_t[]){-1, -1, 3}, 3);
    expect_shape(json_array_get(outs, 1), "INT64", (const int64_t[]){-1, -1}, 2);
    json_decref(meta);

    steps();
    versions = json_array();
    meta = oip_model_metadata(seq_conf, 12, versions);
    json_decref(versions);
    in = json_array_get(json_object_get(meta, "inputs"), 0);
    expect_shape(in, "FP32", (const int64_t[]){-1, -1, 2}, 3);
    json_decref(meta);
}
