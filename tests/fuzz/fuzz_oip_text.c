/* fuzz_oip_text.c: BYTES inputs of Open Inference Protocol requests
 * (src/serve/oip/oip_scan.c): strings read from JSON and from the binary
 * tensor data extension (each a 4-byte little-endian length, then the
 * bytes), tokenized and packed against a text model (bytes tokenizer,
 * max_length 6, a per-token classifier and a crf), and the answer of its
 * per-token outputs written back for what was read.
 *
 * Input: "B" then the Inference-Header-Content-Length header's value,
 * '\n', and the body (JSON then raw tensors); anything else is a JSON body
 * whole. */
#include "fuzz.h"
#include "serve/oip/oip.h"

#include <jansson.h>

#define L 6   /* max_length */

static const char text_json[] =
    "{\"name\": \"tagger\", \"inputs\": [{\"name\": \"text\", \"datatype\": \"BYTES\","
    " \"shape\": [1], \"max_length\": 6, \"tokenizer\": {\"type\": \"bytes\"}}],"
    " \"layers\": [{\"name\": \"emb\", \"type\": \"embedding\", \"num_embeddings\": 256,"
    " \"dim\": 4}, {\"name\": \"fc1\", \"type\": \"dense\", \"units\": 3}, {\"name\": \"fc2\","
    " \"type\": \"dense\", \"units\": 3, \"inputs\": [\"emb\"]}], \"outputs\": [{\"name\":"
    " \"tags\", \"from\": \"fc1\", \"loss\": \"softmax_cross_entropy\", \"labels\": [\"O\","
    " \"B\", \"I\"]}, {\"name\": \"path\", \"from\": \"fc2\", \"loss\": \"crf\"}]}";

static dl_model_conf *conf;
static dl_tokenizer *tok[1];

int LLVMFuzzerInitialize(int *argc, char ***argv)
{
    (void)argc;
    (void)argv;
    fz_quiet();
    dl_err err = {0};
    FZ_CHECK(dl_model_conf_parse(text_json, sizeof(text_json) - 1, "tagger", &conf, &err) ==
                 DL_OK, "%s", err.msg);
    FZ_CHECK(dl_tokenizer_new(&conf->inputs[0].tok, &tok[0], &err) == DL_OK, "%s", err.msg);
    return 0;
}

/* A scanned BYTES input holds exactly `count` strings, each a length then
 * its bytes, and nothing else. */
static void check_layout(const char *bytes, size_t nbytes, int64_t count)
{
    size_t at = 0;
    for (int64_t i = 0; i < count; i++) {
        FZ_CHECK(nbytes - at >= 4, "element %lld has no length", (long long)i);
        uint32_t n = (uint32_t)(unsigned char)bytes[at] |
                     (uint32_t)(unsigned char)bytes[at + 1] << 8 |
                     (uint32_t)(unsigned char)bytes[at + 2] << 16 |
                     (uint32_t)(unsigned char)bytes[at + 3] << 24;
        at += 4;
        FZ_CHECK(n <= nbytes - at, "element %lld past the bytes", (long long)i);
        at += n;
    }
    FZ_CHECK(at == nbytes, "%zu bytes of %zu make the %lld strings", at, nbytes,
             (long long)count);
    fz_touch(bytes, nbytes);
}

/* The request as scanned, without the model. */
static void scanned(const char *body, size_t size, size_t json_len)
{
    oip_request req = {0};
    dl_err err = {0};
    dl_status st = oip_scan_infer(body, size, json_len, &req, &err);
    fz_check_failure(st, &err);
    if (st == DL_OK && req.ninputs >= 1 && req.dtype == OIP_BYTES) {
        FZ_CHECK(req.bytes != NULL && req.x == NULL, "BYTES held as strings");
        check_layout(req.bytes, req.nbytes, req.count);
    }
    for (int i = 1; st == DL_OK && i < req.ninputs && i < OIP_MAX_INPUTS; i++)
        if (req.more[i - 1].dtype == OIP_BYTES)
            check_layout(req.more[i - 1].bytes, req.more[i - 1].nbytes, req.more[i - 1].count);
    oip_request_fini(&req);
}

/* Each packed sample: a length of 1..L, that many ids (bytes, 1..255),
 * zeros after. */
static void check_packed(const oip_request *req)
{
    for (int64_t i = 0; i < req->batch; i++) {
        const float *row = req->x + i * (1 + L);
        FZ_CHECK(row[0] >= 1 && row[0] <= L && row[0] == (float)(int)row[0],
                 "sample %lld has length %g", (long long)i, (double)row[0]);
        for (int t = 0; t < L; t++)
            FZ_CHECK(t < (int)row[0] ? row[1 + t] >= 1 && row[1 + t] <= 255 : row[1 + t] == 0,
                     "sample %lld position %d holds %g", (long long)i, t, (double)row[1 + t]);
    }
}

/* The answer to a request that passed: JSON followed by exactly the
 * binary outputs' bytes, each per-token output [batch, len, ...] with len
 * the longest sample's. */
static void answer(const oip_request *req)
{
    int64_t out_dim = L * 3 + L;
    float *y = calloc((size_t)(req->batch * out_dim), sizeof(float));
    FZ_CHECK(y != NULL, "out of memory");
    int64_t longest = 0;
    for (int64_t i = 0; i < req->batch; i++) {
        int64_t len = (int64_t)req->x[i * (1 + L)];
        longest = len > longest ? len : longest;
        for (int64_t t = 0; t < L; t++) {   /* scores, then the path: -1 past the length */
            y[i * out_dim + t * 3 + t % 3] = 1.0f;
            y[i * out_dim + 3 * L + t] = t < len ? (float)(t % 3) : -1.0f;
        }
    }
    oip_result res = {.model = "tagger", .version = 1, .id = req->id, .conf = conf,
                      .batch = req->batch, .out_dim = out_dim, .y = y, .x = req->x,
                      .in_dim = 1 + L, .nout = req->nout, .out = req->out,
                      .outputs = req->outputs};
    dl_sbuf b = {0};
    size_t json_len = 0;
    dl_err err = {0};
    FZ_CHECK(oip_write_infer(&res, &b, &json_len, &err) == DL_OK, "%s", err.msg);
    json_error_t jerr;
    json_t *j = json_loadb(b.s, json_len, JSON_REJECT_DUPLICATES, &jerr);
    FZ_CHECK(j != NULL, "the answer is not JSON (%s): %.*s", jerr.text, (int)json_len, b.s);
    size_t bin = 0, i;
    json_t *o;
    json_array_foreach(json_object_get(j, "outputs"), i, o) {
        json_t *shape = json_object_get(o, "shape");
        FZ_CHECK(json_integer_value(json_array_get(shape, 0)) == req->batch &&
                     json_integer_value(json_array_get(shape, 1)) == longest,
                 "output %zu's shape is not [%lld, %lld, ...]", i, (long long)req->batch,
                 (long long)longest);
        bin += (size_t)json_integer_value(
            json_object_get(json_object_get(o, "parameters"), "binary_data_size"));
    }
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
    scanned(body, size, json_len);
    oip_request req = {0};
    st = oip_parse_infer(body, size, json_len, conf, tok, 1 + L, &req, &err);
    if (st != DL_OK) {
        fz_check_failure(st, &err);
        FZ_CHECK(!req.x && !req.bytes && !req.id && !req.model, "a refused request holds memory");
    } else {
        FZ_CHECK(req.batch >= 1 && req.count == req.batch * (1 + L) && req.x,
                 "batch %lld, count %lld", (long long)req.batch, (long long)req.count);
        check_packed(&req);
        answer(&req);
    }
    oip_request_fini(&req);
    free(body);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    char header[64];
    if (size >= 1 && data[0] == 'B') {
        data++;
        size--;
        if (fz_split_line(&data, &size, header, sizeof(header)))
            infer(data, size, header);
    } else {
        infer(data, size, NULL);
    }
    return 0;
}
