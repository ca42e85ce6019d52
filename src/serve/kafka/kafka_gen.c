/* kafka_gen.c: generate records over Kafka: a record {"id", "model",
 * "text_input", "parameters"} goes to its version's generator instead of
 * the batcher (the consumer thread submits it), its end hands it to the
 * output thread (from the generator's thread), which writes
 * {"id", "model", "model_version", "text_output", "finish_reason"} or its
 * dead letter. Delivery (offsets, transactions) is the same as for every
 * record: only the stage between intake and output differs. */
#define _GNU_SOURCE   /* memmem, strndup */
#include "serve/kafka/kafka_int.h"

#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* A record's generation: the request and what it borrows. */
struct kgen {
    gen_req    q;
    kafka_srv *k;
    krec      *r;
    char      *prompt;     /* owned */
    int64_t    timeout_us; /* its "timeout" parameter (0: none) */
};

bool kafka_gen_is(const krec *r)
{
    static const char key[] = "\"text_input\"";
    const rd_kafka_message_t *m = r->msg;
    return m->payload && m->len > 0 && ((const char *)m->payload)[0] == '{' &&
           memmem(m->payload, m->len, key, sizeof(key) - 1) != NULL;
}

void kafka_gen_free(krec *r)
{
    if (!r->gen)
        return;
    gen_req_fini(&r->gen->q);
    free(r->gen->prompt);
    free(r->gen);
    r->gen = NULL;
}

/* The generation ended (the generator's thread): to the output thread. */
static void on_event(gen_req *q, void *ctx)
{
    kgen *g = ctx;
    gen_req_lock(q);
    bool done = q->done;
    gen_req_unlock(q);
    if (done)
        kafka_handoff(g->k, g->r);
}

/* Refuses r to the dead letters (consumer thread). */
static void refuse(kafka_srv *k, krec *r, record_fault f, const dl_err *err)
{
    r->fault = f;
    r->req.err = *err;
    atomic_store_explicit(&r->state, R_BUSY, memory_order_release);
    kafka_handoff(k, r);
}

/* The record's id (a string or an integer), else the dlserve-id header,
 * else topic/partition/offset, into r->env.id. */
static void take_id(krec *r, json_t *id, const char *id_hdr)
{
    char buf[64];
    const char *s = json_string_value(id);
    if (!s && json_is_integer(id)) {
        snprintf(buf, sizeof(buf), "%" JSON_INTEGER_FORMAT, json_integer_value(id));
        s = buf;
    }
    if (!s && id_hdr)
        s = id_hdr;
    if (!s) {
        snprintf(buf, sizeof(buf), "%.40s/%d/%lld", r->tp->topic, (int)r->tp->partition,
                 (long long)r->offset);
        s = buf;
    }
    r->env.id = strdup(s);
}

/* The record's body read into g and the version to run it pinned
 * (r->req.sv): REC_OK, or why not with err set. */
static record_fault parse(kafka_srv *k, krec *r, json_t *body, const char *model_hdr,
                          kgen *g, dl_err *err)
{
    if (!json_is_object(body))
        return dl_err_set(err, DL_ERR_INVALID, "not a JSON object"), REC_JSON;
    json_t *text = json_object_get(body, "text_input");
    json_t *params = json_object_get(body, "parameters");
    json_t *model = json_object_get(body, "model");
    const char *key;
    json_t *v;
    json_object_foreach(body, key, v)
        if (strcmp(key, "text_input") && strcmp(key, "parameters") && strcmp(key, "id") &&
            strcmp(key, "model") && strcmp(key, "model_version"))
            return dl_err_set(err, DL_ERR_INVALID, "unknown key '%.60s' (id, model, "
                              "model_version, text_input, parameters)", key), REC_JSON;
    if (!json_is_string(text))
        return dl_err_set(err, DL_ERR_INVALID, "'text_input' must be a string"), REC_JSON;
    if (params && !json_is_object(params))
        return dl_err_set(err, DL_ERR_INVALID, "'parameters' must be an object"), REC_JSON;
    const char *name = json_is_string(model) ? json_string_value(model)
                       : model_hdr           ? model_hdr
                                             : kafka_route_model(k, r->tp->topic);
    json_t *ver = json_object_get(body, "model_version");
    int64_t version = json_is_integer(ver) ? json_integer_value(ver) : 0;
    if (!name[0] || !dl_model_name_valid(name, strlen(name)) || (ver && version < 1))
        return dl_err_set(err, DL_ERR_INVALID, "the record names no valid model (or "
                          "model_version)"), REC_MODEL;
    snprintf(r->env.model, sizeof(r->env.model), "%s", name);
    if (registry_acquire(k->reg, name, version, &r->req.sv, err) != DL_OK)
        return REC_MODEL;
    served *sv = r->req.sv;
    if (!sv->gen)
        return dl_err_set(err, DL_ERR_INVALID, "model '%s' does not generate (its model.json "
                          "has no \"generate\" block)", name), REC_MODEL;
    dl_gen_params_init(&g->q.p);
    g->q.p.max_tokens = generator_settings(sv->gen)->default_length;
    json_object_foreach(params, key, v) {
        dl_status st = gen_param_set(&g->q.p, &g->timeout_us, key, v, err);
        if (st == DL_ERR_NOT_FOUND)
            st = dl_err_set(err, DL_ERR_INVALID, "unknown parameter '%.60s'", key);
        if (st != DL_OK)
            return REC_INPUT;
    }
    if (dl_gen_params_check(&g->q.p, err) != DL_OK)
        return REC_INPUT;
    g->q.len = json_string_length(text);
    if (!(g->prompt = strndup(json_string_value(text), g->q.len)))
        return dl_err_set(err, DL_ERR_NOMEM, "out of memory"), REC_INFERENCE;
    return REC_OK;
}

void kafka_gen_submit(kafka_srv *k, krec *r, const char *model_hdr, const char *id_hdr)
{
    dl_err err = {0};
    rd_kafka_message_t *m = r->msg;
    if (m->len > (size_t)k->conf.max_record_bytes) {
        dl_err_set(&err, DL_ERR_TOO_LARGE, "the record (%zu bytes) is over "
                   "kafka.max_record_bytes (%lld)", m->len, (long long)k->conf.max_record_bytes);
        refuse(k, r, REC_OVERSIZE, &err);
        return;
    }
    json_error_t je;
    json_t *body = json_loadb(m->payload, m->len, 0, &je);
    kgen *g = calloc(1, sizeof(*g));
    record_fault f = REC_OK;
    take_id(r, json_object_get(body, "id"), id_hdr);
    if (!body)
        f = (dl_err_set(&err, DL_ERR_INVALID, "not JSON: %s", je.text), REC_JSON);
    else if (!g)
        f = (dl_err_set(&err, DL_ERR_NOMEM, "out of memory"), REC_INFERENCE);
    else
        f = parse(k, r, body, model_hdr, g, &err);
    json_decref(body);
    if (f != REC_OK) {
        if (g)
            free(g->prompt);
        free(g);
        refuse(k, r, f, &err);
        return;
    }
    dl_gen_params p = g->q.p;
    gen_req_init(&g->q, r->req.sv, g->prompt, g->q.len, &p, false, on_event, g);
    g->q.timeout_us = g->timeout_us;
    g->k = k;
    g->r = r;
    r->gen = g;
    /* R_BUSY before the generator has it: its end may come at once */
    atomic_store_explicit(&r->state, R_BUSY, memory_order_release);
    if (generator_submit(r->req.sv->gen, &g->q, &err) != DL_OK) {
        kafka_gen_free(r);
        r->fault = record_fault_of(err.code);
        r->req.err = err;
        kafka_handoff(k, r);
    }
}

/* The output object of a generation. */
static bool format(const krec *r, dl_sbuf *b)
{
    const gen_req *q = &r->gen->q;
    const served *sv = q->sv;
    const char *finish = dl_gen_finish_name(q->finish);
    json_t *o = json_pack("{s:s, s:s, s:I, s:o, s:s}", "id", r->env.id ? r->env.id : "",
                          "model", sv->name, "model_version", (json_int_t)sv->version,
                          "text_output", gen_text_json(q->text ? q->text : "", q->text_len),
                          "finish_reason", finish ? finish : "length");
    char *s = o ? json_dumps(o, JSON_COMPACT) : NULL;
    json_decref(o);
    b->len = 0;
    b->oom = false;
    if (s)
        dl_sbuf_add(b, s, strlen(s));
    free(s);
    return s && !b->oom;
}

rec_state kafka_gen_output(kafka_srv *k, krec *r, dl_sbuf *b, record_fault *fault,
                           dl_err *err)
{
    const gen_req *q = &r->gen->q;
    gen_req_account(k->st, q);
    bool ok = q->err.code == DL_OK;
    double total = (dl_time_now() - r->t_received) * 1e6;
    stats_request(k->st, q->sv->name, q->sv->version, ok, 1,
                  q->started ? (q->t_start - q->t_arrival) * 1e6 : total,
                  ok ? (q->t_end - q->t_start) * 1e6 : 0, total);
    if (!ok) {
        *fault = q->err.code == DL_ERR_TIMEOUT ? REC_EXPIRED : record_fault_of(q->err.code);
        *err = q->err;
        return R_NEW;   /* the caller writes the dead letter */
    }
    if (!format(r, b)) {
        *fault = REC_INFERENCE;
        dl_err_set(err, DL_ERR_NOMEM, "out of memory writing the output");
        return R_NEW;
    }
    *fault = REC_OK;
    return R_DONE;
}
