/* test_oip.c: the Open Inference Protocol layer on its own: strict URL
 * routing, infer-request parsing (flat and nested data, FP32 and UINT8,
 * shapes, every refusal with its message), input scaling and the JSON
 * answers (infer response, model metadata, repository index). */
#define _POSIX_C_SOURCE 200809L
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <criterion/criterion.h>

#include "fixture.h"
#include "serve/oip.h"

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
    return oip_parse_infer(body, strlen(body), strlen(body), &conf, 4, &req, &err);
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

    cr_expect_eq(oip_route_parse("/v2/repository/models/m/load", &r), OIP_ROUTE_REPO_LOAD);
    cr_expect_str_eq(r.model, "m");
    cr_expect_eq(oip_route_parse("/v2/repository/models/m/unload", &r), OIP_ROUTE_REPO_UNLOAD);
}

Test(oip, refuses_loose_paths)
{
    static const char *const bad[] = {
        "", "/", "v2", "//v2", "/v2/", "/v2//health/live", "/v2/health/live/",
        "/v2/health", "/v2/health/dead", "/V2", "/metrics/", "/status/x", "/v1/models/m",
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
    cr_expect_eq(oip_parse_infer(NULL, 0, 0, &conf, 4, &req, &err), DL_ERR_INVALID);
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
            "\"INT32\" is not supported");
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

/* ---- scaling ------------------------------------------------------------ */

Test(oip, scales_like_the_data_loader)
{
    float x[3] = {0, 127.5f, 255};
    oip_scale(&conf, x, 3);
    for (int i = 0; i < 3; i++) {
        float raw = i == 0 ? 0 : i == 1 ? 127.5f : 255;
        cr_expect_eq(x[i], (raw * conf.scale - conf.mean) / conf.std, "x[%d] = %g", i, (double)x[i]);
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
