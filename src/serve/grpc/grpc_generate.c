/* grpc_generate.c: generation over gRPC, as Triton's decoupled text models
 * answer it: a request to a generating version with one input,
 * "text_input" (BYTES, one string), and decoding parameters by their
 * names (max_tokens, temperature, top_k, top_p, seed, stop, beam_width,
 * length_penalty, timeout) runs on the version's generator. ModelInfer
 * answers the whole text once done; ModelStreamInfer answers each piece
 * as it is generated, then a last answer with the parameter
 * "triton_final_response" true and the "finish_reason". Every answer holds
 * one output, "text_output" (BYTES [1]), in raw_output_contents. */
#include "serve/grpc/grpc_codec.h"
#include "serve/grpc/grpc_int.h"

#include <stdlib.h>
#include <string.h>

static int text_input(const Inference__ModelInferRequest *m)
{
    for (size_t i = 0; i < m->n_inputs; i++)
        if (strcmp(m->inputs[i]->name, "text_input") == 0)
            return (int)i;
    return -1;
}

bool gsrv_gen_wanted(const ireq *r)
{
    return r->sv->gen && text_input(r->msg) >= 0;
}

/* The prompt: text_input's one string, raw (a 4-byte length, then its
 * bytes) or in bytes_contents. Borrowed from m. */
static dl_status prompt_of(const Inference__ModelInferRequest *m, const char **text, size_t *len,
                           dl_err *err)
{
    if (m->n_inputs != 1)
        return dl_err_set(err, DL_ERR_INVALID, "a generation takes one input, text_input");
    const Inference__ModelInferRequest__InferInputTensor *t = m->inputs[0];
    int64_t count = 1;
    for (size_t k = 0; k < t->n_shape; k++)
        count *= t->shape[k];
    if (strcmp(t->datatype, "BYTES") != 0 || count != 1)
        return dl_err_set(err, DL_ERR_INVALID, "text_input must be BYTES holding one string "
                          "(shape [1] or [1, 1])");
    if (m->n_raw_input_contents > 0) {
        const ProtobufCBinaryData *b = &m->raw_input_contents[0];
        uint32_t n = 0;
        if (b->len >= 4)
            n = (uint32_t)b->data[0] | (uint32_t)b->data[1] << 8 | (uint32_t)b->data[2] << 16 |
                (uint32_t)b->data[3] << 24;
        if (m->n_raw_input_contents != 1 || b->len < 4 || n != b->len - 4)
            return dl_err_set(err, DL_ERR_INVALID, "text_input's raw contents must be one "
                              "string: a 4-byte little-endian length, then its bytes");
        *text = (const char *)b->data + 4;
        *len = n;
        return DL_OK;
    }
    if (!t->contents || t->contents->n_bytes_contents != 1)
        return dl_err_set(err, DL_ERR_INVALID, "text_input needs its string in "
                          "contents.bytes_contents or raw_input_contents");
    *text = (const char *)t->contents->bytes_contents[0].data;
    *len = t->contents->bytes_contents[0].len;
    return DL_OK;
}

/* The decoding parameters from the request's; "stream" (which Triton's
 * clients send) is the method's to say and is skipped. */
static dl_status params_of(const Inference__ModelInferRequest *m, dl_gen_params *p,
                           int64_t *timeout_us, dl_err *err)
{
    for (size_t i = 0; i < m->n_parameters; i++) {
        const char *key = m->parameters[i]->key;
        const Inference__InferParameter *v = m->parameters[i]->value;
        if (strcmp(key, "stream") == 0 || !v)
            continue;
        json_t *j = NULL;
        switch (v->parameter_choice_case) {
        case INFERENCE__INFER_PARAMETER__PARAMETER_CHOICE_BOOL_PARAM:
            j = json_boolean(v->bool_param);
            break;
        case INFERENCE__INFER_PARAMETER__PARAMETER_CHOICE_INT64_PARAM:
            j = json_integer((json_int_t)v->int64_param);
            break;
        case INFERENCE__INFER_PARAMETER__PARAMETER_CHOICE_UINT64_PARAM:
            j = json_integer((json_int_t)v->uint64_param);
            break;
        case INFERENCE__INFER_PARAMETER__PARAMETER_CHOICE_DOUBLE_PARAM:
            j = json_real(v->double_param);
            break;
        case INFERENCE__INFER_PARAMETER__PARAMETER_CHOICE_STRING_PARAM:
            j = json_string(v->string_param);
            break;
        default:
            j = json_null();
            break;
        }
        dl_status st = gen_param_set(p, timeout_us, key, j, err);
        json_decref(j);
        if (st == DL_ERR_NOT_FOUND)
            st = dl_err_set(err, DL_ERR_INVALID, "unknown parameter '%.60s' (max_tokens, "
                            "temperature, top_k, top_p, seed, stop, beam_width, "
                            "length_penalty, timeout)", key);
        if (st != DL_OK)
            return st;
    }
    return dl_gen_params_check(p, err);
}

/* Appends the packed answer that carries text[0..len): final, the last. */
static dl_status text_answer(const ireq *r, const char *text, size_t len, bool final,
                             const char *finish, dl_sbuf *out, dl_err *err)
{
    char version[24];
    snprintf(version, sizeof(version), "%lld", (long long)r->sv->version);
    uint8_t *raw = malloc(len + 4);
    if (!raw)
        return dl_err_set(err, DL_ERR_NOMEM, "out of memory");
    raw[0] = (uint8_t)len, raw[1] = (uint8_t)(len >> 8), raw[2] = (uint8_t)(len >> 16);
    raw[3] = (uint8_t)(len >> 24);
    memcpy(raw + 4, text, len);
    ProtobufCBinaryData contents = {len + 4, raw};
    int64_t shape[1] = {1};
    Inference__ModelInferResponse__InferOutputTensor o =
        INFERENCE__MODEL_INFER_RESPONSE__INFER_OUTPUT_TENSOR__INIT;
    o.name = "text_output";
    o.datatype = "BYTES";
    o.n_shape = 1;
    o.shape = shape;
    Inference__ModelInferResponse__InferOutputTensor *outs[1] = {&o};
    Inference__InferParameter pf = INFERENCE__INFER_PARAMETER__INIT, pr = pf;
    pf.parameter_choice_case = INFERENCE__INFER_PARAMETER__PARAMETER_CHOICE_BOOL_PARAM;
    pf.bool_param = final;
    pr.parameter_choice_case = INFERENCE__INFER_PARAMETER__PARAMETER_CHOICE_STRING_PARAM;
    pr.string_param = (char *)(finish ? finish : "");
    Inference__ModelInferResponse__ParametersEntry ef =
        INFERENCE__MODEL_INFER_RESPONSE__PARAMETERS_ENTRY__INIT, er = ef;
    ef.key = "triton_final_response";
    ef.value = &pf;
    er.key = "finish_reason";
    er.value = &pr;
    Inference__ModelInferResponse__ParametersEntry *params[2] = {&ef, &er};
    Inference__ModelInferResponse res = INFERENCE__MODEL_INFER_RESPONSE__INIT;
    res.model_name = (char *)r->sv->name;
    res.model_version = version;
    res.id = r->msg->id;
    res.n_parameters = finish ? 2 : 1;
    res.parameters = params;
    res.n_outputs = 1;
    res.outputs = outs;
    res.n_raw_output_contents = 1;
    res.raw_output_contents = &contents;
    Inference__ModelStreamInferResponse sres = INFERENCE__MODEL_STREAM_INFER_RESPONSE__INIT;
    sres.infer_response = &res;
    const ProtobufCMessage *m = r->stream ? &sres.base : &res.base;
    size_t n = protobuf_c_message_get_packed_size(m);
    uint8_t *p = malloc(n ? n : 1);
    if (p) {
        protobuf_c_message_pack(m, p);
        dl_sbuf_add(out, (const char *)p, n);
    }
    free(p);
    free(raw);
    return p && !out->oom ? DL_OK : dl_err_set(err, DL_ERR_NOMEM, "out of memory");
}

/* A generation's event (the generator's thread): the answer thread takes
 * it. q->done is set just before the last event, so an event that sees it
 * is the last; only then may r be answered and freed: the answer thread
 * may see done while the last event is still on its way. */
static void gen_event(gen_req *q, void *ctx)
{
    ireq *r = ctx;
    gen_req_lock(q);
    bool last = q->done;
    gen_req_unlock(q);
    if (last) {
        pthread_mutex_lock(&r->s->mu);
        r->gen_final = true;
        pthread_mutex_unlock(&r->s->mu);
    }
    gsrv_queue_answer(r);
}

/* Refuses r before it runs: stats, then its answer. */
static void refuse(ireq *r, const dl_err *err)
{
    const grpc_deps *d = r->s->deps;
    stats_request(d->st, r->sv->name, r->sv->version, false, 0, 0, 0,
                  (dl_time_now() - r->t_received) * 1e6);
    dl_sbuf msg = {0};
    dl_err e2 = {0};
    if (r->stream)
        grpc_write_stream_error(err->msg, r->sv->name, r->sv->version,
                                r->msg->id[0] ? r->msg->id : NULL, &msg, &e2);
    r->emit(r, err->code, err, &msg, true);
}

void gsrv_gen_start(ireq *r)
{
    dl_err err = {0};
    const char *text = NULL;
    size_t len = 0;
    dl_gen_params p;
    dl_gen_params_init(&p);
    p.max_tokens = generator_settings(r->sv->gen)->default_length;
    int64_t timeout = 0;
    dl_status st = prompt_of(r->msg, &text, &len, &err);
    if (st == DL_OK)
        st = params_of(r->msg, &p, &timeout, &err);
    gen_req *g = st == DL_OK ? calloc(1, sizeof(*g)) : NULL;
    if (st == DL_OK && !g)
        st = dl_err_set(&err, DL_ERR_NOMEM, "out of memory");
    if (st != DL_OK) {
        refuse(r, &err);
        return;
    }
    /* The call's deadline bounds its wait for room, as a batcher queue's. */
    int64_t left = gsrv_time_left_us(r->c);
    if (left != INT64_MAX && (timeout == 0 || left < timeout))
        timeout = left > 1 ? left : 1;
    gen_req_init(g, r->sv, text, len, &p, r->stream, gen_event, r);
    g->timeout_us = timeout;
    r->g = g;
    if (r->stream)
        gsrv_stream_gen_started(r);
    if (generator_submit(r->sv->gen, g, &err) != DL_OK) {
        gen_req_lock(g);
        g->done = true;
        g->t_arrival = r->t_received;
        g->t_end = dl_time_now();
        g->err = err;
        gen_req_unlock(g);
        gen_event(g, r);
    }
}

void gsrv_gen_cancel(ireq *r)
{
    gen_req_cancel(r->g);
}

/* Counts a done generation in the statistics, as HTTP does. */
static void account(const grpc_deps *d, const gen_req *q)
{
    bool ok = q->err.code == DL_OK;
    gen_req_account(d->st, q);
    double total = (q->t_end - q->t_arrival) * 1e6;
    double queue = q->started ? (q->t_start - q->t_arrival) * 1e6 : total;
    stats_request(d->st, q->sv->name, q->sv->version, ok, 1, queue,
                  ok ? (q->t_end - q->t_start) * 1e6 : 0, total);
}

void gsrv_gen_progress(ireq *r)
{
    grpc_srv *s = r->s;
    /* Queued again meanwhile: that pass sees all this one would (and r may
     * be gone after a last answer). Done only once its last event came. */
    pthread_mutex_lock(&s->mu);
    bool again = r->queued, final = r->gen_final;
    pthread_mutex_unlock(&s->mu);
    if (again)
        return;
    gen_req *g = r->g;
    gen_req_lock(g);
    bool done = g->done && final;
    size_t upto = g->text_len;
    char *piece = NULL;
    size_t from = r->stream || done ? r->sent : upto;
    if (upto > from)
        piece = malloc(upto - from);
    if (piece)
        memcpy(piece, g->text + from, upto - from);
    dl_err gerr = g->err;
    dl_gen_finish finish = g->finish;
    gen_req_unlock(g);
    if (upto > from && !piece) {   /* out of memory: stopped, its last event answers */
        gen_req_cancel(g);
        if (!done)
            return;
        gerr = (dl_err){0};
        dl_err_set(&gerr, DL_ERR_NOMEM, "out of memory");
    }
    dl_sbuf msg = {0};
    dl_err err = {0};
    if (!done) {
        if (r->stream && upto > from &&
            text_answer(r, piece, upto - from, false, NULL, &msg, &err) == DL_OK) {
            r->sent = upto;
            r->emit(r, DL_OK, &err, &msg, false);
        }
        dl_sbuf_free(&msg);
        free(piece);
        return;
    }
    account(s->deps, g);
    if (gerr.code == DL_OK)
        text_answer(r, piece ? piece : "", upto - from, true,
                    finish == DL_GEN_STOP ? "stop" : "length", &msg, &gerr);
    free(piece);
    if (gerr.code != DL_OK && r->stream) {
        dl_sbuf_free(&msg);
        grpc_write_stream_error(gerr.msg, r->sv->name, r->sv->version,
                                r->msg->id[0] ? r->msg->id : NULL, &msg, &err);
    }
    r->emit(r, gerr.code, &gerr, &msg, true);
}
