/* fuzz_oip.c: Open Inference Protocol requests (src/serve/oip/oip_*.c over
 * json_scan.c): infer bodies, JSON or with the binary tensor data
 * extension, checked against a 2x2-input model, the answer written back
 * for what was read; and the URL paths of the router.
 *
 * Input: "R" then a URL path; or "B" then the
 * Inference-Header-Content-Length header's value, '\n', and the body
 * (JSON then raw tensors); anything else is a JSON body whole. */
#include "fuzz.h"
#include "serve/oip/oip.h"

#include <jansson.h>

static dl_model_conf *conf;

int LLVMFuzzerInitialize(int *argc, char ***argv)
{
    (void)argc;
    (void)argv;
    fz_quiet();
    conf = fz_model_conf();
    return 0;
}

static void route(const uint8_t *data, size_t size)
{
    char *path = malloc(size + 1);
    FZ_CHECK(path != NULL, "out of memory");
    memcpy(path, data, size);
    path[size] = '\0';
    oip_route r;
    oip_route_kind k = oip_route_parse(path, &r);
    FZ_CHECK(strlen(r.model) < sizeof(r.model), "model name unterminated");
    if (k != OIP_ROUTE_NONE) {
        FZ_CHECK(!r.model[0] || dl_model_name_valid(r.model, strlen(r.model)),
                 "route names an invalid model '%s'", r.model);
        FZ_CHECK(r.version >= 0, "negative version");
        FZ_CHECK(oip_route_method_ok(k, "GET") || oip_route_method_ok(k, "POST"),
                 "route answers no method");
        FZ_CHECK(oip_route_allow(k) != NULL, "no Allow");
    }
    free(path);
}

/* The answer to a request that passed: its JSON part parses, and it is
 * followed by exactly the binary outputs' bytes. */
static void answer(const oip_request *req)
{
    float *y = calloc((size_t)req->batch * 3, sizeof(float));
    FZ_CHECK(y != NULL, "out of memory");
    for (int64_t i = 0; i < req->batch * 3; i++)
        y[i] = (float)(i % 3) / 3.0f;
    oip_result res = {.model = "tiny", .version = 1, .id = req->id, .conf = conf,
                      .batch = req->batch, .out_dim = 3, .y = y, .nout = req->nout,
                      .out = req->out, .outputs = req->outputs};
    dl_sbuf b = {0};
    size_t json_len = 0;
    dl_err err = {0};
    FZ_CHECK(oip_write_infer(&res, &b, &json_len, &err) == DL_OK, "%s", err.msg);
    FZ_CHECK(json_len <= b.len, "JSON length %zu past the answer's %zu", json_len, b.len);
    json_error_t jerr;
    json_t *j = json_loadb(b.s, json_len, JSON_REJECT_DUPLICATES, &jerr);
    FZ_CHECK(j != NULL, "the answer is not JSON (%s): %.*s", jerr.text, (int)json_len, b.s);
    size_t bin = 0;
    json_t *o;
    size_t i;
    json_array_foreach(json_object_get(j, "outputs"), i, o)
        bin += (size_t)json_integer_value(
            json_object_get(json_object_get(o, "parameters"), "binary_data_size"));
    FZ_CHECK(json_len + bin == b.len, "JSON %zu + binary %zu != %zu bytes", json_len, bin,
             b.len);
    json_decref(j);
    dl_sbuf_free(&b);
    free(y);
}

static void infer(const uint8_t *data, size_t size, const char *header)
{
    /* A copy of exactly the body, so that ASan sees any read past it. */
    char *body = malloc(size ? size : 1);
    FZ_CHECK(body != NULL, "out of memory");
    if (size)
        memcpy(body, data, size);
    dl_err err = {0};
    size_t json_len;
    dl_status st = oip_json_len(header, size, &json_len, &err);
    if (st != DL_OK) {
        fz_check_failure(st, &err);
        free(body);
        return;
    }
    FZ_CHECK(json_len <= size, "JSON length %zu past the body's %zu", json_len, size);
    oip_request req = {0};
    st = oip_parse_infer(body, size, json_len, conf, NULL, 4, &req, &err);
    if (st != DL_OK) {
        fz_check_failure(st, &err);
        FZ_CHECK(!req.x && !req.id && !req.model, "a refused request holds memory");
    } else {
        FZ_CHECK(req.batch >= 1 && req.count == req.batch * 4 && req.x,
                 "batch %lld, count %lld", (long long)req.batch, (long long)req.count);
        FZ_CHECK(req.nout >= 1 && req.nout <= 3, "nout %d", req.nout);
        fz_touch(req.x, (size_t)(req.count) * sizeof(float));
        answer(&req);
    }
    oip_request_fini(&req);
    free(body);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    char header[64];
    if (size >= 1 && data[0] == 'R') {
        route(data + 1, size - 1);
    } else if (size >= 1 && data[0] == 'B') {
        data++;
        size--;
        if (fz_split_line(&data, &size, header, sizeof(header)))
            infer(data, size, header);
    } else {
        infer(data, size, NULL);
    }
    return 0;
}
