/* test_grpc_codec.c: the gRPC transport's messages on their own: a
 * ModelInferRequest (raw and typed inputs, BYTES, several inputs,
 * parameters) read as the same oip_request as the equivalent HTTP binary
 * body, its refusals, the ModelInferResponse (bit for bit the HTTP binary
 * answer's bytes), stream wrapping and stream errors, model versions, and
 * messages built from dlserve's JSON answers (pb_from_json). */
#define _POSIX_C_SOURCE 200809L
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <criterion/criterion.h>

#include "fixture.h"
#include "serve/grpc/grpc_codec.h"
#include "serve/grpc/pb_json.h"

static char *labels3[] = {"cat", "dog", "Ankle boot"};
static dl_model_conf conf;
static oip_request req, want;
static dl_err err;

/* ---- building requests ---------------------------------------------------
 * One request at a time in static storage (each Criterion test is its own
 * process): up to 4 inputs, 4 outputs and 4 parameters a map. */

#define NMAX 4

static Inference__ModelInferRequest m;
static Inference__ModelInferRequest__InferInputTensor ins[NMAX], *inp[NMAX];
static Inference__InferTensorContents contents[NMAX];
static int64_t shapes[NMAX][OIP_MAX_DIMS];
static ProtobufCBinaryData raws[NMAX];
static Inference__ModelInferRequest__InferRequestedOutputTensor outs[NMAX], *outp[NMAX];
static Inference__InferParameter pvals[3 * NMAX];
static Inference__ModelInferRequest__ParametersEntry rparams[NMAX], *rparamp[NMAX];
static Inference__ModelInferRequest__InferRequestedOutputTensor__ParametersEntry
    oparams[NMAX][NMAX], *oparamp[NMAX][NMAX];
static int npvals;
static Inference__ModelInferRequest *unpacked;

static void setup(void)
{
    fx_tiny_classifier(&conf, labels3);
    memset(&req, 0, sizeof(req));
    memset(&want, 0, sizeof(want));
    memset(&err, 0, sizeof(err));
    m = (Inference__ModelInferRequest)INFERENCE__MODEL_INFER_REQUEST__INIT;
    m.inputs = inp;
    m.outputs = outp;
    m.parameters = rparamp;
    m.raw_input_contents = raws;
    npvals = 0;
    unpacked = NULL;
}

static void teardown(void)
{
    oip_request_fini(&req);
    oip_request_fini(&want);
    inference__model_infer_request__free_unpacked(unpacked, NULL);
}

TestSuite(grpc_codec, .init = setup, .fini = teardown, .timeout = 10);

static size_t add_input(const char *name, const char *dtype, const int64_t *shape, size_t ndim)
{
    size_t i = m.n_inputs++;
    ins[i] = (Inference__ModelInferRequest__InferInputTensor)
        INFERENCE__MODEL_INFER_REQUEST__INFER_INPUT_TENSOR__INIT;
    ins[i].name = (char *)name;
    ins[i].datatype = (char *)dtype;
    memcpy(shapes[i], shape, ndim * sizeof(*shape));
    ins[i].n_shape = ndim;
    ins[i].shape = shapes[i];
    inp[i] = &ins[i];
    return i;
}

static Inference__InferTensorContents *typed(size_t i)
{
    contents[i] = (Inference__InferTensorContents)INFERENCE__INFER_TENSOR_CONTENTS__INIT;
    ins[i].contents = &contents[i];
    return &contents[i];
}

static void add_raw(const void *data, size_t len)
{
    raws[m.n_raw_input_contents++] = (ProtobufCBinaryData){.len = len, .data = (uint8_t *)data};
}

static Inference__InferParameter *int_param(int64_t v)
{
    Inference__InferParameter *p = &pvals[npvals++];
    *p = (Inference__InferParameter)INFERENCE__INFER_PARAMETER__INIT;
    p->parameter_choice_case = INFERENCE__INFER_PARAMETER__PARAMETER_CHOICE_INT64_PARAM;
    p->int64_param = v;
    return p;
}

static Inference__InferParameter *str_param(const char *s)
{
    Inference__InferParameter *p = &pvals[npvals++];
    *p = (Inference__InferParameter)INFERENCE__INFER_PARAMETER__INIT;
    p->parameter_choice_case = INFERENCE__INFER_PARAMETER__PARAMETER_CHOICE_STRING_PARAM;
    p->string_param = (char *)s;
    return p;
}

static void add_req_param(const char *key, Inference__InferParameter *v)
{
    size_t i = m.n_parameters++;
    rparams[i] = (Inference__ModelInferRequest__ParametersEntry)
        INFERENCE__MODEL_INFER_REQUEST__PARAMETERS_ENTRY__INIT;
    rparams[i].key = (char *)key;
    rparams[i].value = v;
    rparamp[i] = &rparams[i];
}

static size_t add_output(const char *name)
{
    size_t i = m.n_outputs++;
    outs[i] = (Inference__ModelInferRequest__InferRequestedOutputTensor)
        INFERENCE__MODEL_INFER_REQUEST__INFER_REQUESTED_OUTPUT_TENSOR__INIT;
    outs[i].name = (char *)name;
    outs[i].parameters = oparamp[i];
    outp[i] = &outs[i];
    return i;
}

static void add_out_param(size_t o, const char *key, Inference__InferParameter *v)
{
    size_t i = outs[o].n_parameters++;
    oparams[o][i] = (Inference__ModelInferRequest__InferRequestedOutputTensor__ParametersEntry)
        INFERENCE__MODEL_INFER_REQUEST__INFER_REQUESTED_OUTPUT_TENSOR__PARAMETERS_ENTRY__INIT;
    oparams[o][i].key = (char *)key;
    oparams[o][i].value = v;
    oparamp[o][i] = &oparams[o][i];
}

/* The request packed as a client sends it, then read back as the server
 * reads it (grpc_unpack_infer into req). */
static dl_status read_packed(void)
{
    size_t n = inference__model_infer_request__get_packed_size(&m);
    uint8_t *buf = malloc(n ? n : 1);
    cr_assert_not_null(buf);
    cr_assert_eq(inference__model_infer_request__pack(&m, buf), n);
    inference__model_infer_request__free_unpacked(unpacked, NULL);
    oip_request_fini(&req);
    dl_status st = grpc_unpack_infer(buf, n, &unpacked, &req, &err);
    free(buf);
    if (st == DL_OK)
        cr_expect_not_null(unpacked);
    else
        cr_expect_null(unpacked);
    return st;
}

/* The HTTP binary body json (' as ") then len bytes, scanned into want. */
static void http_body(const char *json, const void *bin, size_t len)
{
    dl_sbuf b = {0};
    const char *j = fx_dq(json);
    dl_sbuf_add(&b, j, strlen(j));
    if (len)
        dl_sbuf_add(&b, bin, len);
    cr_assert(!b.oom);
    dl_err e = {0};
    oip_request_fini(&want);
    cr_assert_eq(oip_scan_infer(b.s, b.len, strlen(j), &want, &e), DL_OK, "%s", e.msg);
    dl_sbuf_free(&b);
}

static void expect_same_input(const char *what, const oip_name *na, oip_dtype ta, int nda,
                              const int64_t *sha, int64_t ca, const float *xa, const char *ba,
                              size_t nba, const oip_name *nb, oip_dtype tb, int ndb,
                              const int64_t *shb, int64_t cb, const float *xb, const char *bb,
                              size_t nbb)
{
    cr_expect_str_eq(na->text, nb->text, "%s name", what);
    cr_expect_eq(ta, tb, "%s dtype", what);
    cr_assert_eq(nda, ndb, "%s ndim", what);
    cr_expect_eq(memcmp(sha, shb, (size_t)nda * sizeof(*sha)), 0, "%s shape", what);
    cr_assert_eq(ca, cb, "%s count", what);
    cr_assert_eq(!xa, !xb, "%s x", what);
    if (xa)
        cr_expect_eq(memcmp(xa, xb, (size_t)ca * sizeof(float)), 0, "%s values", what);
    cr_assert_eq(nba, nbb, "%s nbytes", what);
    if (nba)
        cr_expect_eq(memcmp(ba, bb, nba), 0, "%s bytes", what);
}

/* req (read from the message) holds what want (read from HTTP) holds. */
static void expect_same(void)
{
    cr_assert_eq(req.ninputs, want.ninputs);
    expect_same_input("inputs[0]", &req.input, req.dtype, req.ndim, req.shape, req.count, req.x,
                      req.bytes, req.nbytes, &want.input, want.dtype, want.ndim, want.shape,
                      want.count, want.x, want.bytes, want.nbytes);
    cr_expect_eq(req.binary_in, want.binary_in);
    for (int k = 1; k < req.ninputs; k++) {
        const oip_input *a = &req.more[k - 1], *b = &want.more[k - 1];
        char what[32];
        snprintf(what, sizeof(what), "inputs[%d]", k);
        expect_same_input(what, &a->name, a->dtype, a->ndim, a->shape, a->count, a->x, a->bytes,
                          a->nbytes, &b->name, b->dtype, b->ndim, b->shape, b->count, b->x,
                          b->bytes, b->nbytes);
    }
    cr_assert_eq(req.nasked, want.nasked);
    for (int i = 0; i < req.nasked; i++) {
        cr_expect_str_eq(req.asked[i].name.text, want.asked[i].name.text);
        cr_expect_eq(req.asked[i].binary, want.asked[i].binary, "outputs[%d] binary", i);
        cr_expect_eq(req.asked[i].classification, want.asked[i].classification);
        cr_expect_eq(req.asked[i].labels, want.asked[i].labels);
    }
    cr_expect_eq(req.timeout_us, want.timeout_us);
    cr_expect_eq(req.priority, want.priority);
    cr_expect_eq(req.sequence, want.sequence);
    cr_expect_eq(!req.id, !want.id);
    if (req.id && want.id)
        cr_expect_str_eq(req.id, want.id);
}

/* ---- requests ------------------------------------------------------------- */

static const float px[4] = {0.5f, -1.25f, 3.0f, 1e-3f};

/* The little-endian bytes of n floats. */
static void le_floats(const float *v, size_t n, unsigned char *out)
{
    for (size_t i = 0; i < n; i++) {
        uint32_t u;
        memcpy(&u, &v[i], 4);
        for (int k = 0; k < 4; k++)
            out[4 * i + k] = (unsigned char)(u >> (8 * k));
    }
}

Test(grpc_codec, typed_and_raw_inputs_read_as_http)
{
    static const char http[] =
        "{'id':'q-1','inputs':[{'name':'pixels','datatype':'FP32','shape':[1,2,2],"
        "'parameters':{'binary_data_size':16}}],'outputs':[{'name':'probs',"
        "'parameters':{'classification':2}},{'name':'class'}],"
        "'parameters':{'timeout':2500,'priority':1}}";
    unsigned char bin[16];
    le_floats(px, 4, bin);
    http_body(http, bin, sizeof(bin));

    m.id = "q-1";
    add_input("pixels", "FP32", (int64_t[]){1, 2, 2}, 3);
    Inference__InferTensorContents *c = typed(0);
    c->n_fp32_contents = 4;
    c->fp32_contents = (float *)px;
    add_out_param(add_output("probs"), "classification", int_param(2));
    add_output("class");
    add_req_param("timeout", int_param(2500));
    add_req_param("priority", int_param(1));
    add_req_param("something_else", str_param("skipped"));
    cr_assert_eq(read_packed(), DL_OK, "%s", err.msg);
    expect_same();
    cr_expect(req.binary_in);

    /* the same values raw */
    ins[0].contents = NULL;
    add_raw(bin, sizeof(bin));
    cr_assert_eq(read_packed(), DL_OK, "%s", err.msg);
    expect_same();

    /* and checked against the model as HTTP's are */
    cr_assert_eq(oip_check_infer(&req, &conf, NULL, 4, &err), DL_OK, "%s", err.msg);
    cr_expect_eq(req.batch, 1);
    cr_expect_eq(req.nout, 2);
}

Test(grpc_codec, no_id_is_none)
{
    add_input("pixels", "FP32", (int64_t[]){4}, 1);
    typed(0)->n_fp32_contents = 4;
    contents[0].fp32_contents = (float *)px;
    cr_assert_eq(read_packed(), DL_OK, "%s", err.msg);
    cr_expect_null(req.id);
    cr_expect_eq(req.nasked, 0);
}

Test(grpc_codec, bytes_typed_and_raw)
{
    /* two strings: "héllo" and "" */
    static const unsigned char bin[] = {6, 0, 0, 0, 'h', 0xC3, 0xA9, 'l', 'l', 'o', 0, 0, 0, 0};
    http_body("{'inputs':[{'name':'text','datatype':'BYTES','shape':[2],"
              "'parameters':{'binary_data_size':14}}]}", bin, sizeof(bin));
    add_input("text", "BYTES", (int64_t[]){2}, 1);
    ProtobufCBinaryData s[2] = {{6, (uint8_t *)"h\xC3\xA9llo"}, {0, NULL}};
    typed(0)->n_bytes_contents = 2;
    contents[0].bytes_contents = s;
    cr_assert_eq(read_packed(), DL_OK, "%s", err.msg);
    expect_same();
    cr_expect_eq(req.nbytes, sizeof(bin));

    ins[0].contents = NULL;
    add_raw(bin, sizeof(bin));
    cr_assert_eq(read_packed(), DL_OK, "%s", err.msg);
    expect_same();

    /* raw BYTES are walked by the scanner: a length past the end */
    raws[0].len = 8;
    cr_assert_eq(read_packed(), DL_ERR_INVALID);
    cr_expect_not_null(strstr(err.msg, "BYTES element 0 of 2 is 6 bytes long"), "%s", err.msg);
}

Test(grpc_codec, several_inputs_of_every_type)
{
    static const int64_t ids[3] = {7, -2, 1LL << 40};
    static const uint32_t u8[2] = {0, 255};
    static const int32_t i32[2] = {-5, 9};
    unsigned char bin[16 + 24 + 2 + 8];
    le_floats(px, 4, bin);
    for (int i = 0; i < 3; i++)
        for (int k = 0; k < 8; k++)
            bin[16 + 8 * i + k] = (unsigned char)((uint64_t)ids[i] >> (8 * k));
    bin[40] = 0, bin[41] = 255;
    for (int i = 0; i < 2; i++)
        for (int k = 0; k < 4; k++)
            bin[42 + 4 * i + k] = (unsigned char)((uint32_t)i32[i] >> (8 * k));
    http_body("{'inputs':[{'name':'a','datatype':'FP32','shape':[2,2],"
              "'parameters':{'binary_data_size':16}},{'name':'b','datatype':'INT64','shape':[3],"
              "'parameters':{'binary_data_size':24}},{'name':'c','datatype':'UINT8',"
              "'shape':[1,2],'parameters':{'binary_data_size':2}},{'name':'d',"
              "'datatype':'INT32','shape':[2],'parameters':{'binary_data_size':8}}]}",
              bin, sizeof(bin));

    add_input("a", "FP32", (int64_t[]){2, 2}, 2);
    typed(0)->n_fp32_contents = 4;
    contents[0].fp32_contents = (float *)px;
    add_input("b", "INT64", (int64_t[]){3}, 1);
    typed(1)->n_int64_contents = 3;
    contents[1].int64_contents = (int64_t *)ids;
    add_input("c", "UINT8", (int64_t[]){1, 2}, 2);
    typed(2)->n_uint_contents = 2;
    contents[2].uint_contents = (uint32_t *)u8;
    add_input("d", "INT32", (int64_t[]){2}, 1);
    typed(3)->n_int_contents = 2;
    contents[3].int_contents = (int32_t *)i32;
    cr_assert_eq(read_packed(), DL_OK, "%s", err.msg);
    cr_expect_eq(req.ninputs, 4);
    expect_same();

    /* raw, one entry an input */
    for (int i = 0; i < 4; i++)
        ins[i].contents = NULL;
    add_raw(bin, 16);
    add_raw(bin + 16, 24);
    add_raw(bin + 40, 2);
    add_raw(bin + 42, 8);
    cr_assert_eq(read_packed(), DL_OK, "%s", err.msg);
    expect_same();
}

/* read_packed refuses with DL_ERR_INVALID, needle in the message, fault. */
static void refused(const char *needle, oip_fault fault)
{
    cr_assert_eq(read_packed(), DL_ERR_INVALID, "accepted (wanted '%s')", needle);
    cr_expect_not_null(strstr(err.msg, needle), "message was: %s (wanted '%s')", err.msg, needle);
    cr_expect_eq(req.fault, fault, "fault %d for %s", req.fault, err.msg);
    cr_expect_null(req.x);
    cr_expect_null(req.more);
}

static void fp32_input(const char *name, size_t nvalues)
{
    size_t i = add_input(name, "FP32", (int64_t[]){1, 4}, 2);
    typed(i)->n_fp32_contents = nvalues;
    contents[i].fp32_contents = (float *)px;
}

Test(grpc_codec, refuses_raw_and_contents_together)
{
    fp32_input("pixels", 4);
    add_raw(px, 16);
    refused("inputs[0] has contents, but the request has raw_input_contents", OIP_FAULT_TENSOR);
}

Test(grpc_codec, refuses_another_contents_field)
{
    static const int32_t v[4] = {1, 2, 3, 4};
    add_input("pixels", "FP32", (int64_t[]){1, 4}, 2);
    typed(0)->n_int_contents = 4;
    contents[0].int_contents = (int32_t *)v;
    refused("inputs[0].contents.int_contents: datatype FP32 takes its values in fp32_contents",
            OIP_FAULT_TENSOR);
}

Test(grpc_codec, refuses_a_count_that_does_not_fit_the_shape)
{
    fp32_input("pixels", 3);
    refused("inputs[0].contents.fp32_contents has 3 values, but shape [1, 4] takes 4",
            OIP_FAULT_TENSOR);
}

Test(grpc_codec, refuses_raw_entries_that_are_not_one_an_input)
{
    add_input("a", "FP32", (int64_t[]){1, 4}, 2);
    add_input("b", "FP32", (int64_t[]){1, 4}, 2);
    add_raw(px, 16);
    refused("raw_input_contents has 1 entries, but the request has 2 inputs", OIP_FAULT_TENSOR);
}

Test(grpc_codec, refuses_raw_bytes_that_do_not_fit_the_shape)
{
    add_input("pixels", "FP32", (int64_t[]){1, 4}, 2);
    add_raw(px, 12);
    refused("raw_input_contents[0] has 12 bytes, but inputs[0] of shape [1, 4] takes 4 FP32 "
            "values of 4 bytes", OIP_FAULT_TENSOR);
}

Test(grpc_codec, refuses_what_the_http_scanner_refuses)
{
    add_input("pixels", "FP16", (int64_t[]){1, 4}, 2);
    add_raw(px, 8);
    refused("inputs[0].datatype \"FP16\" is not supported", OIP_FAULT_TENSOR);

    teardown();
    setup();
    add_input("pixels", "FP32", (int64_t[]){1, 0}, 2);
    add_raw(px, 0);
    refused("inputs[0].shape[1] must be a positive integer", OIP_FAULT_TENSOR);

    teardown();
    setup();
    fp32_input("pixels", 4);
    add_req_param("timeout", str_param("soon"));
    refused("'parameters'.timeout must be microseconds", OIP_FAULT_ENVELOPE);

    teardown();
    setup();
    fp32_input("pixels", 4);
    add_out_param(add_output("probs"), "classification", str_param("2"));
    refused("outputs[0].parameters.classification must be a class count", OIP_FAULT_TENSOR);

    teardown();
    setup();
    static const float nan4[4] = {0, NAN, 0, 0};
    add_input("pixels", "FP32", (int64_t[]){1, 4}, 2);
    typed(0)->n_fp32_contents = 4;
    contents[0].fp32_contents = (float *)nan4;
    refused("value 1 is not a finite FP32 number", OIP_FAULT_TENSOR);
}

Test(grpc_codec, refuses_inputs_without_values)
{
    m.id = "kept";
    add_input("pixels", "FP32", (int64_t[]){1, 4}, 2);
    refused("inputs[0] has no values: give them in its contents or in raw_input_contents",
            OIP_FAULT_TENSOR);
    cr_assert_not_null(req.id, "a refused request keeps its id, as the scanner does");
    cr_expect_str_eq(req.id, "kept");
}

Test(grpc_codec, refuses_uint8_values_past_255)
{
    static const uint32_t v[2] = {3, 300};
    add_input("img", "UINT8", (int64_t[]){2}, 1);
    typed(0)->n_uint_contents = 2;
    contents[0].uint_contents = (uint32_t *)v;
    refused("inputs[0].contents.uint_contents[1] is 300, not a UINT8", OIP_FAULT_TENSOR);
}

/* The first fault in input order wins, whichever reader finds it. */
Test(grpc_codec, reports_the_first_fault_in_input_order)
{
    add_input("a", "FP64", (int64_t[]){4}, 1);
    typed(0)->n_fp64_contents = 0;
    fp32_input("b", 3);
    refused("inputs[0].datatype \"FP64\" is not supported", OIP_FAULT_TENSOR);
}

Test(grpc_codec, refuses_names_that_are_not_utf8)
{
    fp32_input("pix\xFFls", 4);
    /* read as the server would without the wire (protobuf-c need not check) */
    cr_assert_eq(grpc_read_infer(&m, &req, &err), DL_ERR_INVALID);
    cr_expect_str_eq(err.msg, "inputs[0].name is not valid UTF-8");
    cr_expect_null(req.id);

    ins[0].name = "pixels";
    m.id = "q\xC3";   /* cut inside a character: not kept for the refusal either */
    cr_assert_eq(grpc_read_infer(&m, &req, &err), DL_ERR_INVALID);
    cr_expect_str_eq(err.msg, "id is not valid UTF-8");
    cr_expect_eq(req.fault, OIP_FAULT_ENVELOPE);
    cr_expect_null(req.id);
}

Test(grpc_codec, refuses_what_is_not_a_request)
{
    static const uint8_t junk[] = {0x2a, 0x05, 0x0a, 0xff, 0xff};   /* a truncated field */
    cr_assert_eq(grpc_unpack_infer(junk, sizeof(junk), &unpacked, &req, &err), DL_ERR_INVALID);
    cr_expect_null(unpacked);
    cr_expect_str_eq(err.msg, "not a ModelInferRequest");
    cr_expect_eq(req.fault, OIP_FAULT_SYNTAX);
}

Test(grpc_codec, an_empty_message_has_no_inputs)
{
    cr_assert_eq(read_packed(), DL_OK, "%s", err.msg);
    cr_expect_eq(req.ninputs, 0);
    cr_expect_eq(oip_check_infer(&req, &conf, NULL, 4, &err), DL_ERR_INVALID);
}

/* ---- answers --------------------------------------------------------------- */

static const float y6[6] = {0.1f, 0.2f, 0.7f, 0.6f, 0.3f, 0.1f};

/* res written as gRPC, unpacked. */
static Inference__ModelInferResponse *grpc_answer(const oip_result *res, dl_sbuf *b)
{
    cr_assert_eq(grpc_write_infer(res, false, b, &err), DL_OK, "%s", err.msg);
    Inference__ModelInferResponse *r =
        inference__model_infer_response__unpack(NULL, b->len, (const uint8_t *)b->s);
    cr_assert_not_null(r, "the answer does not unpack");
    return r;
}

/* The answer's raw outputs are the bytes after the JSON of the HTTP binary
 * answer of the same result, and its outputs what that JSON says. */
static void expect_http_bytes(const oip_result *res, const Inference__ModelInferResponse *r)
{
    oip_result bin = *res;
    oip_output all[OIP_MAX_OUTPUTS];
    for (int i = 0; i < res->nout; i++) {
        all[i] = res->out[i];
        all[i].binary = true;
    }
    bin.out = all;
    bin.binary = true;
    dl_sbuf h = {0};
    size_t json_len;
    cr_assert_eq(oip_write_infer(&bin, &h, &json_len, NULL), DL_OK);
    json_t *j = json_loadb(h.s, json_len, 0, NULL);
    cr_assert_not_null(j);
    json_t *outputs = json_object_get(j, "outputs");
    cr_assert_eq(r->n_outputs, json_array_size(outputs));
    cr_assert_eq(r->n_raw_output_contents, r->n_outputs);
    size_t at = json_len;
    for (size_t i = 0; i < r->n_outputs; i++) {
        json_t *o = json_array_get(outputs, i);
        const Inference__ModelInferResponse__InferOutputTensor *t = r->outputs[i];
        cr_expect_str_eq(t->name, json_string_value(json_object_get(o, "name")));
        cr_expect_str_eq(t->datatype, json_string_value(json_object_get(o, "datatype")));
        json_t *shape = json_object_get(o, "shape");
        cr_assert_eq(t->n_shape, json_array_size(shape));
        for (size_t k = 0; k < t->n_shape; k++)
            cr_expect_eq(t->shape[k], json_integer_value(json_array_get(shape, k)));
        cr_expect_eq(t->n_parameters, 0);
        size_t n = (size_t)json_integer_value(
            json_object_get(json_object_get(o, "parameters"), "binary_data_size"));
        cr_assert_eq(r->raw_output_contents[i].len, n, "output %zu", i);
        cr_expect_eq(memcmp(r->raw_output_contents[i].data, h.s + at, n), 0, "output %zu", i);
        at += n;
    }
    cr_expect_eq(at, h.len);
    json_decref(j);
    dl_sbuf_free(&h);
}

Test(grpc_codec, answers_with_the_http_binary_bytes)
{
    const oip_output out[3] = {{.kind = OIP_OUT_CLASS},
                               {.kind = OIP_OUT_TENSOR, .binary = false},
                               {.kind = OIP_OUT_LABEL, .binary = true}};
    const oip_param params[2] = {{.name = "queue_us", .num = 42}, {.name = "note", .str = "é"}};
    oip_result res = {.model = "tiny", .version = 3, .id = "q\"1", .conf = &conf, .batch = 2,
                      .out_dim = 3, .y = y6, .nout = 3, .out = out, .nparams = 2,
                      .params = params};
    dl_sbuf b = {0};
    Inference__ModelInferResponse *r = grpc_answer(&res, &b);
    cr_expect_str_eq(r->model_name, "tiny");
    cr_expect_str_eq(r->model_version, "3");
    cr_expect_str_eq(r->id, "q\"1");
    cr_assert_eq(r->n_parameters, 2);
    cr_expect_str_eq(r->parameters[0]->key, "queue_us");
    cr_expect_eq(r->parameters[0]->value->parameter_choice_case,
                 INFERENCE__INFER_PARAMETER__PARAMETER_CHOICE_INT64_PARAM);
    cr_expect_eq(r->parameters[0]->value->int64_param, 42);
    cr_expect_str_eq(r->parameters[1]->key, "note");
    cr_expect_str_eq(r->parameters[1]->value->string_param, "é");
    cr_assert_eq(r->n_outputs, 3);
    cr_expect_str_eq(r->outputs[0]->name, "class");
    cr_expect_str_eq(r->outputs[0]->datatype, "INT64");
    cr_expect_str_eq(r->outputs[1]->name, "probs");
    cr_expect_str_eq(r->outputs[1]->datatype, "FP32");
    cr_expect_eq(r->outputs[1]->n_shape, 2);
    cr_expect_eq(r->outputs[1]->shape[1], 3);
    cr_expect_str_eq(r->outputs[2]->datatype, "BYTES");
    /* probs written raw although asked as JSON: float32 bits */
    cr_assert_eq(r->raw_output_contents[1].len, 24);
    cr_expect_eq(memcmp(r->raw_output_contents[1].data, y6, 24), 0);   /* a little-endian host */
    expect_http_bytes(&res, r);
    inference__model_infer_response__free_unpacked(r, NULL);
    dl_sbuf_free(&b);
}

Test(grpc_codec, answers_the_default_outputs_raw)
{
    oip_result res = {.model = "tiny", .version = 1, .conf = &conf, .batch = 2, .out_dim = 3,
                      .y = y6, .outputs = OIP_OUT_ALL};
    dl_sbuf b = {0};
    Inference__ModelInferResponse *r = grpc_answer(&res, &b);
    cr_expect_str_eq(r->id, "", "no id: none echoed");
    cr_expect_eq(r->n_parameters, 0);
    cr_expect_eq(r->n_outputs, 3);
    expect_http_bytes(&res, r);
    inference__model_infer_response__free_unpacked(r, NULL);
    dl_sbuf_free(&b);

    /* the top classes as BYTES */
    const oip_output top[1] = {{.kind = OIP_OUT_TENSOR, .topk = 2}};
    res.nout = 1;
    res.out = top;
    r = grpc_answer(&res, &b);
    cr_expect_str_eq(r->outputs[0]->datatype, "BYTES");
    expect_http_bytes(&res, r);
    inference__model_infer_response__free_unpacked(r, NULL);
    dl_sbuf_free(&b);
}

Test(grpc_codec, appends_to_what_the_buffer_holds)
{
    oip_result res = {.model = "tiny", .version = 1, .conf = &conf, .batch = 1, .out_dim = 3,
                      .y = y6, .outputs = OIP_OUT_TENSOR};
    dl_sbuf b = {0}, alone = {0};
    dl_sbuf_add(&b, "xyz", 3);
    cr_assert_eq(grpc_write_infer(&res, false, &b, &err), DL_OK);
    cr_assert_eq(grpc_write_infer(&res, false, &alone, &err), DL_OK);
    cr_assert_eq(b.len, 3 + alone.len);
    cr_expect_eq(memcmp(b.s + 3, alone.s, alone.len), 0);
    dl_sbuf_free(&b);
    dl_sbuf_free(&alone);
}

/* A stream answer is field 2 of ModelStreamInferResponse around the very
 * bytes of the unary answer (error_message "" is not written). */
Test(grpc_codec, wraps_stream_answers)
{
    oip_result res = {.model = "tiny", .version = 2, .id = "s1", .conf = &conf, .batch = 2,
                      .out_dim = 3, .y = y6, .outputs = OIP_OUT_ALL};
    dl_sbuf unary = {0}, stream = {0};
    cr_assert_eq(grpc_write_infer(&res, false, &unary, &err), DL_OK);
    cr_assert_eq(grpc_write_infer(&res, true, &stream, &err), DL_OK);
    unsigned char head[11] = {0x12};   /* field 2, length-delimited; the length's varint */
    size_t nh = 1;
    for (size_t v = unary.len; nh == 1 || v; v >>= 7)
        head[nh++] = (unsigned char)((v & 0x7F) | (v >> 7 ? 0x80 : 0));
    cr_assert_eq(stream.len, nh + unary.len);
    cr_expect_eq(memcmp(stream.s, head, nh), 0);
    cr_expect_eq(memcmp(stream.s + nh, unary.s, unary.len), 0);
    Inference__ModelStreamInferResponse *s =
        inference__model_stream_infer_response__unpack(NULL, stream.len,
                                                       (const uint8_t *)stream.s);
    cr_assert_not_null(s);
    cr_expect_str_eq(s->error_message, "");
    cr_assert_not_null(s->infer_response);
    cr_expect_str_eq(s->infer_response->id, "s1");
    cr_expect_eq(s->infer_response->n_raw_output_contents, 3);
    inference__model_stream_infer_response__free_unpacked(s, NULL);
    dl_sbuf_free(&unary);
    dl_sbuf_free(&stream);
}

static Inference__ModelStreamInferResponse *stream_error(const char *msg, const char *model,
                                                         int64_t version, const char *id)
{
    dl_sbuf b = {0};
    cr_assert_eq(grpc_write_stream_error(msg, model, version, id, &b, &err), DL_OK);
    Inference__ModelStreamInferResponse *s =
        inference__model_stream_infer_response__unpack(NULL, b.len, (const uint8_t *)b.s);
    cr_assert_not_null(s);
    cr_assert_not_null(s->infer_response);
    dl_sbuf_free(&b);
    return s;
}

Test(grpc_codec, writes_stream_errors)
{
    Inference__ModelStreamInferResponse *s = stream_error("inputs[0] is bad", "tiny", 0, "q7");
    cr_expect_str_eq(s->error_message, "inputs[0] is bad");
    cr_expect_str_eq(s->infer_response->model_name, "tiny");
    cr_expect_str_eq(s->infer_response->model_version, "");
    cr_expect_str_eq(s->infer_response->id, "q7");
    cr_expect_eq(s->infer_response->n_outputs, 0);
    cr_expect_eq(s->infer_response->n_raw_output_contents, 0);
    inference__model_stream_infer_response__free_unpacked(s, NULL);

    s = stream_error("no such model", "other", 12, NULL);
    cr_expect_str_eq(s->infer_response->model_version, "12");
    cr_expect_str_eq(s->infer_response->id, "");
    inference__model_stream_infer_response__free_unpacked(s, NULL);
}

Test(grpc_codec, parses_model_versions)
{
    static const struct {
        const char *text;
        int64_t     v;
    } good[] = {{"", 0}, {"1", 1}, {"42", 42}, {"999999999999999999", 999999999999999999LL}};
    for (size_t i = 0; i < sizeof(good) / sizeof(good[0]); i++) {
        int64_t v = -1;
        cr_expect_eq(grpc_parse_version(good[i].text, &v, &err), DL_OK, "'%s'", good[i].text);
        cr_expect_eq(v, good[i].v, "'%s'", good[i].text);
    }
    static const char *const bad[] = {"0", "01", "-1", "+1", "1x", " 1", "1 ", "1.0",
                                      "1234567890123456789", "x"};
    for (size_t i = 0; i < sizeof(bad) / sizeof(bad[0]); i++) {
        int64_t v = -1;
        cr_expect_eq(grpc_parse_version(bad[i], &v, &err), DL_ERR_INVALID, "'%s'", bad[i]);
        char want_msg[80];
        snprintf(want_msg, sizeof(want_msg), "model version '%s' is not a positive integer",
                 bad[i]);
        cr_expect_str_eq(err.msg, want_msg);
    }
}

/* ---- messages from JSON ------------------------------------------------------ */

static json_t *loads(const char *text)
{
    json_error_t je;
    json_t *j = json_loads(fx_dq(text), 0, &je);
    cr_assert_not_null(j, "%s: %s", je.text, text);
    return j;
}

/* pb_from_json of text, packed and unpacked again (so that the message is
 * one protobuf-c can write), then freed: returns the unpacked copy. */
static ProtobufCMessage *from_json(const ProtobufCMessageDescriptor *d, const char *text)
{
    json_t *j = loads(text);
    ProtobufCMessage *msg = pb_from_json(d, j, &err);
    json_decref(j);
    cr_assert_not_null(msg, "%s", err.msg);
    dl_sbuf b = {0};
    cr_assert_eq(pb_pack(msg, &b, &err), DL_OK);
    protobuf_c_message_free_unpacked(msg, NULL);
    ProtobufCMessage *back = protobuf_c_message_unpack(d, NULL, b.len, (const uint8_t *)b.s);
    cr_assert_not_null(back);
    dl_sbuf_free(&b);
    return back;
}

static void from_json_refused(const ProtobufCMessageDescriptor *d, const char *text,
                              const char *msg)
{
    json_t *j = loads(text);
    cr_expect_null(pb_from_json(d, j, &err), "accepted %s", text);
    json_decref(j);
    cr_expect_eq(err.code, DL_ERR_INVALID);
    cr_expect_str_eq(err.msg, msg);
}

/* As model_info.c writes it, with dlserve's own keys (max_length,
 * batch_invariant) that the message does not have. */
static const char model_config_json[] =
    "{'config':{'name':'tiny','platform':'dlserve','backend':'dlserve','max_batch_size':64,"
    "'version_policy':{'latest':{'num_versions':2}},"
    "'input':[{'name':'pixels','data_type':'TYPE_FP32','format':'FORMAT_NONE',"
    "'dims':[1,28,28]},{'name':'ids','data_type':'TYPE_INT64','format':'FORMAT_NONE',"
    "'dims':[-1],'max_length':16}],"
    "'output':[{'name':'probs','data_type':'TYPE_FP32','dims':[10]},"
    "{'name':'label','data_type':'TYPE_STRING','dims':[1],'reshape':{'shape':[]}}],"
    "'dynamic_batching':{'preferred_batch_size':[4,8],'max_queue_delay_microseconds':500,"
    "'preserve_ordering':false,'priority_levels':2,'default_priority_level':1,"
    "'default_queue_policy':{'timeout_action':'REJECT','default_timeout_microseconds':0,"
    "'allow_timeout_override':true,'max_queue_size':128},'batch_invariant':true},"
    "'instance_group':[{'name':'tiny','count':2,'kind':'KIND_CPU'}],"
    "'default_model_filename':'model.safetensors',"
    "'parameters':{'a':{'string_value':'1'},'b':{'string_value':'two'}}}}";

Test(grpc_codec, builds_the_model_config)
{
    Inference__ModelConfigResponse *r = (Inference__ModelConfigResponse *)from_json(
        &inference__model_config_response__descriptor, model_config_json);
    const Inference__ModelConfig *c = r->config;
    cr_assert_not_null(c);
    cr_expect_str_eq(c->name, "tiny");
    cr_expect_str_eq(c->backend, "dlserve");
    cr_expect_eq(c->max_batch_size, 64);
    cr_assert_not_null(c->version_policy);
    cr_expect_eq(c->version_policy->policy_choice_case,
                 INFERENCE__MODEL_VERSION_POLICY__POLICY_CHOICE_LATEST);
    cr_expect_eq(c->version_policy->latest->num_versions, 2);
    cr_assert_eq(c->n_input, 2);
    cr_expect_str_eq(c->input[0]->name, "pixels");
    cr_expect_eq(c->input[0]->data_type, INFERENCE__DATA_TYPE__TYPE_FP32);
    cr_assert_eq(c->input[0]->n_dims, 3);
    cr_expect_eq(c->input[0]->dims[2], 28);
    cr_expect_eq(c->input[1]->data_type, INFERENCE__DATA_TYPE__TYPE_INT64);
    cr_expect_eq(c->input[1]->dims[0], -1);
    cr_assert_eq(c->n_output, 2);
    cr_expect_eq(c->output[1]->data_type, INFERENCE__DATA_TYPE__TYPE_STRING);
    cr_assert_not_null(c->output[1]->reshape, "an empty message is still there");
    cr_expect_eq(c->output[1]->reshape->n_shape, 0);
    const Inference__ModelDynamicBatching *db = c->dynamic_batching;
    cr_assert_not_null(db);
    cr_assert_eq(db->n_preferred_batch_size, 2);
    cr_expect_eq(db->preferred_batch_size[1], 8);
    cr_expect_eq(db->max_queue_delay_microseconds, 500);
    cr_expect_eq(db->priority_levels, 2);
    cr_assert_not_null(db->default_queue_policy);
    cr_expect_eq(db->default_queue_policy->timeout_action,
                 INFERENCE__MODEL_QUEUE_POLICY__TIMEOUT_ACTION__REJECT);
    cr_expect(db->default_queue_policy->allow_timeout_override);
    cr_expect_eq(db->default_queue_policy->max_queue_size, 128);
    cr_assert_eq(c->n_instance_group, 1);
    cr_expect_eq(c->instance_group[0]->kind, INFERENCE__MODEL_INSTANCE_GROUP__KIND__KIND_CPU);
    cr_expect_eq(c->instance_group[0]->count, 2);
    cr_assert_eq(c->n_parameters, 2);
    cr_expect_str_eq(c->parameters[0]->key, "a");
    cr_expect_str_eq(c->parameters[0]->value->string_value, "1");
    cr_expect_str_eq(c->parameters[1]->key, "b");
    cr_expect_str_eq(c->parameters[1]->value->string_value, "two");
    inference__model_config_response__free_unpacked(r, NULL);

    /* the other version policies; enums by number */
    Inference__ModelConfig *s = (Inference__ModelConfig *)from_json(
        &inference__model_config__descriptor,
        "{'version_policy':{'specific':{'versions':[1,'3']}},'input':[{'data_type':9}]}");
    cr_expect_eq(s->version_policy->policy_choice_case,
                 INFERENCE__MODEL_VERSION_POLICY__POLICY_CHOICE_SPECIFIC);
    cr_assert_eq(s->version_policy->specific->n_versions, 2);
    cr_expect_eq(s->version_policy->specific->versions[1], 3);
    cr_expect_eq(s->input[0]->data_type, INFERENCE__DATA_TYPE__TYPE_INT64);
    inference__model_config__free_unpacked(s, NULL);
    s = (Inference__ModelConfig *)from_json(&inference__model_config__descriptor,
                                            "{'version_policy':{'all':{}}}");
    cr_expect_eq(s->version_policy->policy_choice_case,
                 INFERENCE__MODEL_VERSION_POLICY__POLICY_CHOICE_ALL);
    inference__model_config__free_unpacked(s, NULL);
}

/* Freed straight from pb_from_json, without a pack in between: what it
 * allocated is exactly what protobuf_c_message_free_unpacked frees (the
 * sanitizer builds see a leak or a bad free). */
Test(grpc_codec, frees_what_it_builds)
{
    json_t *j = loads(model_config_json);
    ProtobufCMessage *msg = pb_from_json(&inference__model_config_response__descriptor, j, &err);
    cr_assert_not_null(msg, "%s", err.msg);
    protobuf_c_message_free_unpacked(msg, NULL);
    json_decref(j);
    j = loads("{'parameters':{'s':{'string_param':'x'},'e':{},'b':{'bool_param':true}},"
              "'raw_input_contents':['ab','','c'],'id':''}");
    msg = pb_from_json(&inference__model_infer_request__descriptor, j, &err);
    cr_assert_not_null(msg, "%s", err.msg);
    const Inference__ModelInferRequest *r = (const Inference__ModelInferRequest *)msg;
    cr_expect_eq(r->n_raw_input_contents, 3);
    cr_expect_eq(r->raw_input_contents[0].len, 2);
    cr_expect_eq(memcmp(r->raw_input_contents[0].data, "ab", 2), 0);
    cr_expect_str_eq(r->model_name, "", "a field not given keeps its default");
    protobuf_c_message_free_unpacked(msg, NULL);
    json_decref(j);
}

Test(grpc_codec, builds_model_metadata)
{
    json_t *versions = json_pack("[s,s]", "1", "2");
    json_t *j = oip_model_metadata(&conf, 3, versions);
    json_decref(versions);
    cr_assert_not_null(j);
    Inference__ModelMetadataResponse *r = (Inference__ModelMetadataResponse *)pb_from_json(
        &inference__model_metadata_response__descriptor, j, &err);
    json_decref(j);
    cr_assert_not_null(r, "%s", err.msg);
    cr_expect_str_eq(r->name, "tiny");
    cr_expect_str_eq(r->platform, "dlserve");
    cr_assert_eq(r->n_versions, 2);
    cr_expect_str_eq(r->versions[1], "2");
    cr_assert_eq(r->n_inputs, 1);
    cr_expect_str_eq(r->inputs[0]->name, "pixels");
    cr_expect_str_eq(r->inputs[0]->datatype, "FP32");
    cr_assert_eq(r->inputs[0]->n_shape, 4);
    cr_expect_eq(r->inputs[0]->shape[0], -1);
    cr_expect_eq(r->n_outputs, 3);
    cr_expect_str_eq(r->outputs[2]->name, "class");
    inference__model_metadata_response__free_unpacked(r, NULL);
}

Test(grpc_codec, builds_statistics_and_the_repository_index)
{
    Inference__ModelStatisticsResponse *r = (Inference__ModelStatisticsResponse *)from_json(
        &inference__model_statistics_response__descriptor,
        "{'model_stats':[{'name':'tiny','version':'1','last_inference':1764570000123,"
        "'inference_count':'18446744073709551615','execution_count':3,"
        "'inference_stats':{'success':{'count':3,'ns':1500},'fail':{'count':0,'ns':0}},"
        "'batch_stats':[{'batch_size':2,'compute_infer':{'count':1,'ns':99}}],"
        "'memory_usage':[]}]}");
    cr_assert_eq(r->n_model_stats, 1);
    const Inference__ModelStatistics *s = r->model_stats[0];
    cr_expect_str_eq(s->version, "1");
    cr_expect_eq(s->last_inference, 1764570000123ULL);
    cr_expect_eq(s->inference_count, UINT64_MAX, "uint64 past int64 as a string");
    cr_expect_eq(s->inference_stats->success->ns, 1500);
    cr_expect_null(s->inference_stats->queue);
    cr_assert_eq(s->n_batch_stats, 1);
    cr_expect_eq(s->batch_stats[0]->compute_infer->ns, 99);
    inference__model_statistics_response__free_unpacked(r, NULL);

    Inference__RepositoryIndexResponse *x = (Inference__RepositoryIndexResponse *)from_json(
        &inference__repository_index_response__descriptor,
        "{'models':[{'name':'a','version':'2','state':'READY','reason':''},"
        "{'name':'b','version':'','state':'UNAVAILABLE','reason':'unloaded'}]}");
    cr_assert_eq(x->n_models, 2);
    cr_expect_str_eq(x->models[1]->reason, "unloaded");
    inference__repository_index_response__free_unpacked(x, NULL);
}

/* A map of messages whose values are oneofs (InferParameter). */
Test(grpc_codec, builds_maps_of_oneofs)
{
    Inference__ModelInferResponse *r = (Inference__ModelInferResponse *)from_json(
        &inference__model_infer_response__descriptor,
        "{'model_name':'m','parameters':{'n':{'int64_param':'-9223372036854775808'},"
        "'s':{'string_param':'x'},'d':{'double_param':'NaN'},'u':{'uint64_param':7},"
        "'none':{}},'unknown':{'deep':[1,2,{'x':null}]}}");
    cr_assert_eq(r->n_parameters, 5);
    cr_expect_str_eq(r->parameters[0]->key, "n");
    cr_expect_eq(r->parameters[0]->value->int64_param, INT64_MIN);
    cr_expect_eq(r->parameters[1]->value->parameter_choice_case,
                 INFERENCE__INFER_PARAMETER__PARAMETER_CHOICE_STRING_PARAM);
    cr_expect(isnan(r->parameters[2]->value->double_param));
    cr_expect_eq(r->parameters[3]->value->uint64_param, 7);
    cr_expect_eq(r->parameters[4]->value->parameter_choice_case,
                 INFERENCE__INFER_PARAMETER__PARAMETER_CHOICE__NOT_SET);
    inference__model_infer_response__free_unpacked(r, NULL);
}

Test(grpc_codec, refuses_values_that_do_not_fit)
{
    const ProtobufCMessageDescriptor *cr = &inference__model_config_response__descriptor;
    from_json_refused(cr, "{'config':{'max_batch_size':'x'}}",
                      "config.max_batch_size: must be an integer, not a string");
    from_json_refused(cr, "{'config':{'max_batch_size':2147483648}}",
                      "config.max_batch_size: does not fit an int32");
    from_json_refused(cr, "{'config':{'max_batch_size':1.5}}",
                      "config.max_batch_size: must be an integer, not a real");
    from_json_refused(cr, "{'config':{'name':'a','input':[{'name':'x'},{'data_type':'TYPE_X'}]}}",
                      "config.input[1].data_type: \"TYPE_X\" is not a value of "
                      "inference.DataType");
    from_json_refused(cr, "{'config':{'input':{'name':'x'}}}",
                      "config.input: must be an array, not an object");
    from_json_refused(cr, "{'config':{'input':[null]}}", "config.input[0]: must not be null");
    from_json_refused(cr, "{'config':{'version_policy':{'latest':{},'all':{}}}}",
                      "config.version_policy.all: another member of its oneof is set already");
    from_json_refused(cr, "{'config':{'version_policy':{'latest':{'num_versions':-1}}}}",
                      "config.version_policy.latest.num_versions: does not fit a uint32");
    from_json_refused(cr, "{'config':{'parameters':{'k':{'string_value':5}}}}",
                      "config.parameters[\"k\"].string_value: must be a string, not an integer");
    from_json_refused(cr, "{'config':{'dynamic_batching':{'preserve_ordering':1}}}",
                      "config.dynamic_batching.preserve_ordering: must be true or false, not "
                      "an integer");
    from_json_refused(cr, "{'config':[]}", "config: must be an object, not an array");
    from_json_refused(&inference__model_statistics_response__descriptor,
                      "{'model_stats':[{'inference_count':-1}]}",
                      "model_stats[0].inference_count: does not fit a uint64");
    from_json_refused(&inference__model_infer_response__descriptor,
                      "{'parameters':{'x':{'double_param':'fast'}}}",
                      "parameters[\"x\"].double_param: \"fast\" is not a number");

    json_t *a = json_array();
    cr_expect_null(pb_from_json(cr, a, &err));
    cr_expect_str_eq(err.msg, "inference.ModelConfigResponse must be a JSON object, not an array");
    json_decref(a);
}
