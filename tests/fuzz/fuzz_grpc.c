/* fuzz_grpc.c: gRPC infer requests (src/serve/grpc/grpc_codec.c over
 * protobuf-c and oip_scan.c): a ModelInferRequest unpacked and read
 * (typed contents or raw_input_contents, transcoded for the HTTP
 * scanner), checked against a 2x2-input model, and the answer written
 * back for what was read, unary and streamed, then unpacked again.
 *
 * Input: the packed ModelInferRequest, whole. */
#include "fuzz.h"
#include "serve/grpc/grpc_codec.h"

#include <limits.h>

static dl_model_conf *conf;

int LLVMFuzzerInitialize(int *argc, char ***argv)
{
    (void)argc;
    (void)argv;
    fz_quiet();
    conf = fz_model_conf();
    return 0;
}

/* The answer as a client reads it: one raw entry an output, each of the
 * bytes its datatype and shape take (BYTES: a length then the bytes, each
 * string). */
static void check_answer(const Inference__ModelInferResponse *r, const oip_request *req)
{
    FZ_CHECK(r->n_outputs == (size_t)req->nout, "%zu outputs for %d", r->n_outputs, req->nout);
    FZ_CHECK(r->n_raw_output_contents == r->n_outputs, "%zu raw entries for %zu outputs",
             r->n_raw_output_contents, r->n_outputs);
    FZ_CHECK(strcmp(r->model_name, "tiny") == 0 && strcmp(r->model_version, "1") == 0,
             "model '%s' version '%s'", r->model_name, r->model_version);
    FZ_CHECK(strcmp(r->id, req->id ? req->id : "") == 0, "id '%s'", r->id);
    for (size_t i = 0; i < r->n_outputs; i++) {
        const Inference__ModelInferResponse__InferOutputTensor *t = r->outputs[i];
        const ProtobufCBinaryData *raw = &r->raw_output_contents[i];
        int64_t count = 1;
        for (size_t k = 0; k < t->n_shape; k++)
            count *= t->shape[k];
        FZ_CHECK(t->n_shape >= 1 && t->shape[0] == req->batch, "output %zu: batch", i);
        if (strcmp(t->datatype, "BYTES") == 0) {
            size_t at = 0;
            for (int64_t k = 0; k < count; k++) {
                FZ_CHECK(raw->len - at >= 4, "output %zu: string %lld has no length", i,
                         (long long)k);
                const uint8_t *p = raw->data + at;
                size_t n = (size_t)p[0] | (size_t)p[1] << 8 | (size_t)p[2] << 16 |
                           (size_t)p[3] << 24;
                FZ_CHECK(n <= raw->len - at - 4, "output %zu: string %lld past the end", i,
                         (long long)k);
                at += 4 + n;
            }
            FZ_CHECK(at == raw->len, "output %zu: %zu bytes past its strings", i,
                     raw->len - at);
        } else {
            size_t el = strcmp(t->datatype, "INT64") == 0 ? 8 : 4;
            FZ_CHECK(raw->len == (size_t)count * el, "output %zu: %zu bytes for %lld values",
                     i, raw->len, (long long)count);
        }
        fz_touch(raw->data, raw->len);
    }
}

/* The answer to a request that passed, unary and streamed: it unpacks,
 * and holds what the request asked. */
static void answer(const oip_request *req)
{
    float *y = calloc((size_t)req->batch * 3, sizeof(float));
    FZ_CHECK(y != NULL, "out of memory");
    for (int64_t i = 0; i < req->batch * 3; i++)
        y[i] = (float)(i % 3) / 3.0f;
    oip_result res = {.model = "tiny", .version = 1, .id = req->id, .conf = conf,
                      .batch = req->batch, .out_dim = 3, .y = y, .nout = req->nout,
                      .out = req->out, .outputs = req->outputs};
    for (int stream = 0; stream < 2; stream++) {
        dl_sbuf b = {0};
        dl_err err = {0};
        FZ_CHECK(grpc_write_infer(&res, stream, &b, &err) == DL_OK, "%s", err.msg);
        if (stream) {
            Inference__ModelStreamInferResponse *s = inference__model_stream_infer_response__unpack(
                NULL, b.len, (const uint8_t *)b.s);
            FZ_CHECK(s && s->infer_response && s->error_message[0] == '\0',
                     "the stream answer does not unpack");
            check_answer(s->infer_response, req);
            inference__model_stream_infer_response__free_unpacked(s, NULL);
        } else {
            Inference__ModelInferResponse *r =
                inference__model_infer_response__unpack(NULL, b.len, (const uint8_t *)b.s);
            FZ_CHECK(r != NULL, "the answer does not unpack");
            check_answer(r, req);
            inference__model_infer_response__free_unpacked(r, NULL);
        }
        dl_sbuf_free(&b);
    }
    free(y);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    /* A copy of exactly the message, so that ASan sees any read past it. */
    uint8_t *msg = malloc(size ? size : 1);
    FZ_CHECK(msg != NULL, "out of memory");
    if (size)
        memcpy(msg, data, size);
    Inference__ModelInferRequest *m = NULL;
    oip_request req = {0};
    dl_err err = {0};
    dl_status st = grpc_unpack_infer(msg, size, &m, &req, &err);
    if (st != DL_OK) {
        fz_check_failure(st, &err);
        FZ_CHECK(m == NULL, "a refused message is kept");
        FZ_CHECK(!req.x && !req.bytes && !req.more && !req.model,
                 "a refused request holds memory");
    } else {
        FZ_CHECK(m != NULL, "an accepted request without its message");
        FZ_CHECK(req.ninputs == (int)(m->n_inputs > INT_MAX ? INT_MAX : m->n_inputs),
                 "%d inputs read of %zu", req.ninputs, m->n_inputs);
        FZ_CHECK((req.id == NULL) == (m->id[0] == '\0'), "id");
        st = oip_check_infer(&req, conf, NULL, 4, &err);
        if (st != DL_OK) {
            fz_check_failure(st, &err);
        } else {
            FZ_CHECK(req.batch >= 1 && req.count == req.batch * 4 && req.x,
                     "batch %lld, count %lld", (long long)req.batch, (long long)req.count);
            FZ_CHECK(req.nout >= 1 && req.nout <= 3, "nout %d", req.nout);
            fz_touch(req.x, (size_t)req.count * sizeof(float));
            answer(&req);
        }
    }
    oip_request_fini(&req);
    inference__model_infer_request__free_unpacked(m, NULL);
    free(msg);
    return 0;
}
