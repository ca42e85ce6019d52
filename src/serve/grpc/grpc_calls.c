/* grpc_calls.c: every method of inference.GRPCInferenceService and
 * grpc.health.v1.Health. Metadata, configuration, statistics and the
 * repository index are the JSON HTTP answers with, turned into their
 * messages (pb_json.h); infer requests follow the transport contract of
 * batcher.h, as HTTP's do (the response cache's answers included); a
 * stream reads its requests one after the other, runs them side by side
 * and writes each answer as it comes. */
#define _GNU_SOURCE
#include "serve/grpc/grpc_codec.h"
#include "serve/grpc/grpc_int.h"
#include "serve/grpc/pb_json.h"
#include "serve/model_info.h"

#include "health.pb-c.h"

#include <stdlib.h>
#include <string.h>

#define CONTAINER(p, type, field) ((type *)(void *)((char *)(p) - offsetof(type, field)))

/* ---- answering ---------------------------------------------------------------- */

static void answer_error(gcall *c, dl_status st, const char *msg)
{
    gsrv_answer(c, gsrv_code(st), msg, NULL);
}

static void answer_message(gcall *c, const ProtobufCMessage *m)
{
    dl_sbuf b = {0};
    dl_err err = {0};
    if (pb_pack(m, &b, &err) != DL_OK) {
        dl_sbuf_free(&b);
        answer_error(c, err.code, err.msg);
        return;
    }
    gsrv_answer(c, GRPC_STATUS_OK, NULL, &b);
}

/* Answers j (taken) as a message of descriptor d. */
static void answer_json(gcall *c, const ProtobufCMessageDescriptor *d, json_t *j)
{
    dl_err err = {0};
    ProtobufCMessage *m = j ? pb_from_json(d, j, &err)
                            : (dl_err_set(&err, DL_ERR_NOMEM, "out of memory"), NULL);
    json_decref(j);
    if (!m) {
        answer_error(c, err.code, err.msg);
        return;
    }
    answer_message(c, m);
    protobuf_c_message_free_unpacked(m, NULL);
}

/* The call's request as a message of descriptor d (free_unpacked), or
 * NULL with the call answered INVALID_ARGUMENT. */
static ProtobufCMessage *request_of(gcall *c, const ProtobufCMessageDescriptor *d)
{
    size_t len;
    uint8_t *data = gsrv_read(c->payload, &len);
    ProtobufCMessage *m = protobuf_c_message_unpack(d, NULL, len, data ? data : (uint8_t *)"");
    free(data);
    if (!m) {
        char msg[160];
        snprintf(msg, sizeof(msg), "the request is not a %s", d->name);
        answer_error(c, DL_ERR_INVALID, msg);
    }
    return m;
}

/* The served version that name and version text name, or NULL with the
 * call answered (NOT_FOUND, UNAVAILABLE, INVALID_ARGUMENT). */
static served *acquire(gcall *c, const char *name, const char *version)
{
    dl_err err = {0};
    int64_t v;
    served *sv = NULL;
    if (grpc_parse_version(version, &v, &err) == DL_OK)
        registry_acquire(c->s->deps->reg, name, v, &sv, &err);
    if (!sv)
        answer_error(c, err.code, err.msg);
    return sv;
}

/* ---- health and metadata ------------------------------------------------------ */

static bool server_ready(const grpc_srv *s)
{
    const grpc_deps *d = s->deps;
    return d->ready ? d->ready(d->ctx) : registry_ready(d->reg);
}

static void server_live(gcall *c)
{
    Inference__ServerLiveResponse r = INFERENCE__SERVER_LIVE_RESPONSE__INIT;
    r.live = 1;
    answer_message(c, &r.base);
}

static void server_ready_call(gcall *c)
{
    Inference__ServerReadyResponse r = INFERENCE__SERVER_READY_RESPONSE__INIT;
    r.ready = server_ready(c->s);
    answer_message(c, &r.base);
}

/* ready false for a model known but with nothing served yet; NOT_FOUND
 * for one the repository does not hold. */
static void model_ready(gcall *c)
{
    Inference__ModelReadyRequest *q =
        (void *)request_of(c, &inference__model_ready_request__descriptor);
    if (!q)
        return;
    dl_err err = {0};
    int64_t v;
    served *sv = NULL;
    dl_status st = grpc_parse_version(q->version, &v, &err);
    if (st == DL_OK)
        st = registry_acquire(c->s->deps->reg, q->name, v, &sv, &err);
    inference__model_ready_request__free_unpacked(q, NULL);
    if (st != DL_OK && st != DL_ERR_UNAVAILABLE) {
        answer_error(c, st, err.msg);
        return;
    }
    served_release(sv);
    Inference__ModelReadyResponse r = INFERENCE__MODEL_READY_RESPONSE__INIT;
    r.ready = st == DL_OK;
    answer_message(c, &r.base);
}

static void server_metadata(gcall *c)
{
    static char *extensions[] = {"model_repository", "statistics", "model_configuration",
                                 "classification", "binary_tensor_data", "trace",
                                 "grpc_health"};
    Inference__ServerMetadataResponse r = INFERENCE__SERVER_METADATA_RESPONSE__INIT;
    r.name = "dlserve";
    r.version = (char *)(c->s->deps->server_version ? c->s->deps->server_version
                                                    : DL_VERSION_STRING);
    r.n_extensions = sizeof(extensions) / sizeof(extensions[0]);
    r.extensions = extensions;
    answer_message(c, &r.base);
}

static void model_metadata(gcall *c)
{
    Inference__ModelMetadataRequest *q =
        (void *)request_of(c, &inference__model_metadata_request__descriptor);
    if (!q)
        return;
    served *sv = acquire(c, q->name, q->version);
    inference__model_metadata_request__free_unpacked(q, NULL);
    if (!sv)
        return;
    json_t *status = registry_status(c->s->deps->reg);
    json_t *versions = oip_versions_of(status, sv->name);
    json_decref(status);
    json_t *meta = oip_model_metadata(sv->conf, sv->out_dim, versions ? versions : json_array());
    json_decref(versions);
    served_release(sv);
    answer_json(c, &inference__model_metadata_response__descriptor, meta);
}

/* ---- configuration, statistics, repository ------------------------------------------ */

/* dlserve's own keys of the JSON configuration, which Triton's message
 * has no field for, become its parameters. */
static void own_keys_as_parameters(json_t *cfg)
{
    json_t *params = json_object();
    json_t *bi = json_object_get(cfg, "batch_invariant");
    if (bi)
        json_object_set_new(params, "batch_invariant",
                            json_pack("{s:s}", "string_value", json_is_true(bi) ? "true"
                                                                                  : "false"));
    size_t i;
    json_t *in;
    json_array_foreach(json_object_get(cfg, "input"), i, in) {
        json_t *ml = json_object_get(in, "max_length");
        if (!json_is_integer(ml))
            continue;
        char key[DL_NAME_MAX + 16], val[32];
        snprintf(key, sizeof(key), "max_length.%s", json_string_value(json_object_get(in, "name")));
        snprintf(val, sizeof(val), "%lld", (long long)json_integer_value(ml));
        json_object_set_new(params, key, json_pack("{s:s}", "string_value", val));
    }
    json_object_set_new(cfg, "parameters", params);
}

/* A string field of a request by its name (ModelConfigRequest and
 * ModelStatisticsRequest both have "name" and "version"). */
static const char *string_field(const ProtobufCMessage *m, const char *name)
{
    const ProtobufCFieldDescriptor *f =
        protobuf_c_message_descriptor_get_field_by_name(m->descriptor, name);
    return *(char *const *)(const void *)((const char *)m + f->offset);
}

/* A model's configuration (config) or statistics: the JSON HTTP answers
 * with, as the answer's message. Statistics of no model name are every
 * model's. */
static void model_info_call(gcall *c, const ProtobufCMessageDescriptor *req,
                            const ProtobufCMessageDescriptor *ans, bool config)
{
    ProtobufCMessage *q = request_of(c, req);
    if (!q)
        return;
    const grpc_deps *d = c->s->deps;
    model_info_deps mi = {d->reg, d->bat, d->st};
    const char *name = string_field(q, "name");
    dl_err err = {0};
    int64_t v;
    json_t *j = NULL;
    dl_status st = grpc_parse_version(string_field(q, "version"), &v, &err);
    if (st == DL_OK && v != 0 && !name[0])
        st = dl_err_set(&err, DL_ERR_INVALID, "a version needs a model name");
    if (st == DL_OK)
        st = config ? model_info_config(&mi, name, v, &j, &err)
                    : model_info_stats(&mi, name, v, &j, &err);
    protobuf_c_message_free_unpacked(q, NULL);
    if (st != DL_OK) {
        answer_error(c, st, err.msg);
        return;
    }
    if (config) {
        own_keys_as_parameters(j);
        j = json_pack("{s:o}", "config", j);
    }
    answer_json(c, ans, j);
}

static void model_config(gcall *c)
{
    model_info_call(c, &inference__model_config_request__descriptor,
                    &inference__model_config_response__descriptor, true);
}

static void model_statistics(gcall *c)
{
    model_info_call(c, &inference__model_statistics_request__descriptor,
                    &inference__model_statistics_response__descriptor, false);
}

static void repository_index(gcall *c)
{
    Inference__RepositoryIndexRequest *q =
        (void *)request_of(c, &inference__repository_index_request__descriptor);
    if (!q)
        return;
    bool only_ready = q->ready;
    inference__repository_index_request__free_unpacked(q, NULL);
    json_t *status = registry_status(c->s->deps->reg);
    json_t *index = status ? oip_repository_index(status) : NULL;
    json_decref(status);
    size_t i;
    json_t *e;
    json_array_foreach(index, i, e) {
        if (only_ready && strcmp(json_string_value(json_object_get(e, "state")), "READY") != 0)
            json_array_remove(index, i--);
    }
    answer_json(c, &inference__repository_index_response__descriptor,
                index ? json_pack("{s:o}", "models", index) : NULL);
}

static void repository_change(gcall *c, bool load)
{
    ProtobufCMessage *m =
        request_of(c, load ? &inference__repository_model_load_request__descriptor
                           : &inference__repository_model_unload_request__descriptor);
    if (!m)
        return;
    const char *name = string_field(m, "model_name");
    registry *reg = c->s->deps->reg;
    dl_err err = {0};
    dl_status st = load ? registry_load(reg, name, &err) : registry_unload(reg, name, &err);
    if (st == DL_OK)
        DL_LOG(DL_LOG_NOTICE, "grpc", "model '%s' %s", name, load ? "loaded" : "unloaded");
    protobuf_c_message_free_unpacked(m, NULL);
    if (st != DL_OK) {
        answer_error(c, st, err.msg);
        return;
    }
    Inference__RepositoryModelLoadResponse r = INFERENCE__REPOSITORY_MODEL_LOAD_RESPONSE__INIT;
    answer_message(c, &r.base);   /* both answers are empty messages */
}

static void repository_load(gcall *c)
{
    repository_change(c, true);
}

static void repository_unload(gcall *c)
{
    repository_change(c, false);
}

/* Service "" (and the inference service's name): SERVING once ready,
 * NOT_SERVING before and during the shutdown grace, for readiness.
 * "liveness": SERVING while the process answers, for liveness probes.
 * Others: NOT_FOUND. */
static void health_check(gcall *c)
{
    Grpc__Health__V1__HealthCheckRequest *q =
        (void *)request_of(c, &grpc__health__v1__health_check_request__descriptor);
    if (!q)
        return;
    bool ready = !q->service[0] || strcmp(q->service, "inference.GRPCInferenceService") == 0;
    bool live = strcmp(q->service, "liveness") == 0;
    grpc__health__v1__health_check_request__free_unpacked(q, NULL);
    if (!ready && !live) {
        answer_error(c, DL_ERR_NOT_FOUND, "unknown service (\"\", "
                     "\"inference.GRPCInferenceService\" or \"liveness\")");
        return;
    }
    Grpc__Health__V1__HealthCheckResponse r = GRPC__HEALTH__V1__HEALTH_CHECK_RESPONSE__INIT;
    r.status = live || (server_ready(c->s) && !atomic_load(&c->s->stopping))
                   ? GRPC__HEALTH__V1__HEALTH_CHECK_RESPONSE__SERVING_STATUS__SERVING
                   : GRPC__HEALTH__V1__HEALTH_CHECK_RESPONSE__SERVING_STATUS__NOT_SERVING;
    answer_message(c, &r.base);
}

/* ---- inference ------------------------------------------------------------------- */

void gsrv_queue_answer(ireq *r)
{
    grpc_srv *s = r->s;
    pthread_mutex_lock(&s->mu);
    if (!r->queued) {
        r->queued = true;
        r->next = NULL;
        if (s->done_tail)
            s->done_tail->next = r;
        else
            s->done_head = r;
        s->done_tail = r;
        pthread_cond_signal(&s->cv);
    }
    pthread_mutex_unlock(&s->mu);
}

/* The batch has run (a batcher worker): the answer thread answers. */
static void infer_done(infer_req *q, void *ctx)
{
    (void)q;
    gsrv_queue_answer(ctx);
}

/* The requests a completion-queue thread has read in its current pass,
 * for one version: run together as one batch on that thread once the
 * queue has no event ready (gsrv_pass_end), as an HTTP event loop runs
 * the requests it read in one pass. Calls arrive one event at a time; run
 * one by one, they would each be a batch. */
static _Thread_local ireq *held, *held_tail;
static _Thread_local int64_t held_samples;

/* Adds r to this thread's held batch: with eager batching, while the
 * batch fits max_batch_size and the inference a thread may compute
 * (direct_max_us). False when r is to be submitted instead. */
static bool hold(batcher *bat, ireq *r)
{
    int64_t samples = (held ? held_samples : 0) + r->q.n;
    if ((held && held->sv != r->sv) || !batcher_fits_thread(bat, r->sv, samples) ||
        (!held && batcher_stopping(bat)))
        return false;
    r->q.t_arrival = dl_time_now();
    r->held_next = NULL;
    if (held)
        held_tail->held_next = r;
    else
        held = r;
    held_tail = r;
    held_samples = samples;
    return true;
}

/* The request's trace context from its metadata. */
static void trace_take(ireq *r)
{
    char parent[TRACE_PARENT_MAX + 1], state[TRACE_STATE_MAX + 1];
    bool p = gsrv_metadata(r->c, TRACE_PARENT_HEADER, parent, sizeof(parent));
    bool st = gsrv_metadata(r->c, TRACE_STATE_HEADER, state, sizeof(state));
    trace_set(&r->trace, p ? parent : NULL, (size_t)-1, st ? state : NULL, (size_t)-1);
}

void gsrv_infer_start(ireq *r, const uint8_t *data, size_t len)
{
    const grpc_deps *d = r->s->deps;
    batcher *bat = d->bat;
    r->t_received = dl_time_now();
    batcher_arriving(bat, +1);
    trace_take(r);
    dl_err err = {0};
    int64_t version = 0;
    dl_status st = grpc_unpack_infer(data, len, &r->msg, &r->in, &err);
    if (st == DL_OK)
        st = grpc_parse_version(r->msg->model_version, &version, &err);
    if (st == DL_OK)
        st = registry_acquire(d->reg, r->msg->model_name, version, &r->sv, &err);
    served *sv = r->sv;
    if (st == DL_OK && gsrv_gen_wanted(r)) {
        batcher_arriving(bat, -1);   /* the generator's, not the batcher's */
        gsrv_gen_start(r);
        return;
    }
    if (st == DL_OK)
        st = oip_check_infer(&r->in, sv->conf, sv->tok, sv->in_dim, &err);
    if (st == DL_OK)
        st = oip_check_classes(&r->in, sv->conf, sv->out_dim, &err);
    if (st != DL_OK) {
        if (sv)
            stats_request(d->st, sv->name, sv->version, false, 0, 0, 0,
                          (dl_time_now() - r->t_received) * 1e6);
        batcher_arriving(bat, -1);
        r->refused = err;
        gsrv_infer_finish(r);
        return;
    }
    /* The call's deadline bounds its time in the queue: one that passes
     * there completes as a timeout, DEADLINE_EXCEEDED. */
    int64_t timeout = r->in.timeout_us, left = gsrv_time_left_us(r->c);
    if (left != INT64_MAX && (timeout == 0 || left < timeout))
        timeout = left > 1 ? left : 1;
    infer_req_init(&r->q, sv, r->in.batch, r->in.x, NULL, timeout, infer_done, r);
    r->q.priority = r->in.priority;
    if (infer_req_cached(d->cache, &r->q)) {   /* answered from the response cache */
        batcher_arriving(bat, -1);
        gsrv_infer_finish(r);
        return;
    }
    if (hold(bat, r)) {
        batcher_arriving(bat, -1);
        return;
    }
    if (batcher_submit(bat, &r->q, &r->refused) != DL_OK) {
        batcher_arriving(bat, -1);
        gsrv_infer_finish(r);
        return;
    }
    batcher_arriving(bat, -1);   /* r may be answered already: bat, not r */
}

bool gsrv_holding(void)
{
    return held != NULL;
}

void gsrv_pass_end(void)
{
    ireq *first = held;
    if (!first)
        return;
    held = held_tail = NULL;
    batcher *bat = first->s->deps->bat;
    for (ireq *r = first; r; r = r->held_next)
        r->q.next = r->held_next ? &r->held_next->q : NULL;
    bool ran = batcher_run_batch(bat, &first->q);
    for (ireq *r = first, *next; r; r = next) {
        next = r->held_next;   /* r is answered, and may be freed, below */
        r->q.next = NULL;
        if (ran || batcher_submit(bat, &r->q, &r->refused) != DL_OK)
            gsrv_infer_finish(r);
    }
}

void gsrv_infer_finish(ireq *r)
{
    if (r->g) {
        gsrv_gen_progress(r);
        return;
    }
    const grpc_deps *d = r->s->deps;
    const infer_req *q = &r->q;
    served *sv = r->sv;
    dl_err err = {0};
    if (r->refused.code != DL_OK) {
        err = r->refused;
    } else if (q->err.code == DL_ERR_TIMEOUT) {
        err = q->err;
    } else if (q->err.code != DL_OK) {
        dl_err_set(&err, q->err.code, "inference failed: %s", q->err.msg);
    } else {
        infer_req_cache_store(d->cache, &r->q);   /* a miss computed: kept */
        oip_result res = {.model = sv->name, .version = sv->version,
                          .id = r->msg->id[0] ? r->msg->id : NULL, .conf = sv->conf,
                          .batch = r->in.batch, .out_dim = sv->out_dim, .y = q->out,
                          .x = r->in.x, .in_dim = sv->in_dim, .nout = r->in.nout,
                          .out = r->in.out};
        grpc_write_infer(&res, r->stream, &r->out, &err);
    }
    if (sv && q->sv) {   /* it reached the batcher */
        infer_req_account(d->st, q, r->t_received, err.code == DL_OK);
        trace_done td = {.ctx = &r->trace, .q = r->refused.code == DL_OK ? q : NULL,
                         .t_received = r->t_received, .model = sv->name,
                         .version = sv->version, .http_status = oip_http_code(err.code),
                         .ok = err.code == DL_OK};
        tracer_record(d->tr, &td);
    }
    if (err.code != DL_OK && r->stream) {
        dl_sbuf_free(&r->out);
        dl_err e2 = {0};
        grpc_write_stream_error(err.msg, r->msg ? r->msg->model_name : "", sv ? sv->version : 0,
                                r->msg && r->msg->id[0] ? r->msg->id : NULL, &r->out, &e2);
    }
    r->emit(r, err.code, &err, &r->out, true);
}

void gsrv_ireq_fini(ireq *r)
{
    if (r->q.sv && r->q.out)
        free(r->q.out);   /* the batcher allocated it */
    oip_request_fini(&r->in);
    if (r->msg)
        inference__model_infer_request__free_unpacked(r->msg, NULL);
    if (r->g) {
        gen_req_fini(r->g);
        free(r->g);
    }
    dl_sbuf_free(&r->out);
    served_release(r->sv);   /* last: it may free the version's generator */
}

static void unary_emit(ireq *r, dl_status code, const dl_err *err, dl_sbuf *msg, bool last)
{
    if (!last) {   /* a unary call answers once: pieces are not sent */
        dl_sbuf_free(msg);
        return;
    }
    gcall *c = r->c;
    if (code == DL_OK)
        gsrv_answer(c, GRPC_STATUS_OK, NULL, msg);
    else
        answer_error(c, code, err->msg);
    gsrv_ireq_fini(r);
    free(r);
}

static void model_infer(gcall *c)
{
    ireq *r = calloc(1, sizeof(*r));
    if (!r) {
        answer_error(c, DL_ERR_NOMEM, "out of memory");
        return;
    }
    r->s = c->s;
    r->c = c;
    r->emit = unary_emit;
    size_t len;
    uint8_t *data = gsrv_read(c->payload, &len);
    gsrv_infer_start(r, data ? data : (const uint8_t *)"", len);
    free(data);
}

/* ---- ModelStreamInfer ------------------------------------------------------------- */

/* An answer waiting to be written on a stream; done: the request it ends. */
typedef struct gmsg {
    grpc_byte_buffer *bb;
    ireq             *done;
    struct gmsg      *next;
} gmsg;

/* Requests of one stream in the server at once (read, not yet answered):
 * past it the stream is not read until one is answered, and the client's
 * next requests wait in HTTP/2's flow control, so that one stream cannot
 * fill the batcher's queue that every client shares. */
#define STREAM_MAX_REQUESTS 1024

/* A stream: one read outstanding at a time, requests running side by side,
 * their answers written one at a time in the order they come. It ends
 * (status OK) once the client has closed its side and every answer is
 * written, or at once when the call is cancelled (the client gone), its
 * generations then stopped. */
typedef struct gstream {
    gcall            *c;
    gtag              t_read, t_write, t_status, t_close;
    grpc_byte_buffer *recv;
    gmsg             *writing;     /* the answer being written */
    gmsg             *wq_head, *wq_tail;
    ireq             *gens;        /* generations running */
    pthread_mutex_t   mu;
    int               pending;     /* operations outstanding + requests not yet answered */
    int               requests;    /* requests not yet answered */
    bool              read_paused; /* STREAM_MAX_REQUESTS reached: no read outstanding */
    bool              read_done, closed, status_sent;
    int               cancelled;
} gstream;

static void stream_free(gstream *gs)
{
    grpc_srv *s = gs->c->s;
    gs->c->code = gs->status_sent && !gs->cancelled ? GRPC_STATUS_OK : GRPC_STATUS_CANCELLED;
    gsrv_call_end(gs->c);
    atomic_fetch_sub(&s->streams_open, 1);
    pthread_mutex_destroy(&gs->mu);
    free(gs);
}

/* Under gs->mu: writes the next answer when none is being written. */
static void stream_write_next(gstream *gs)
{
    if (gs->writing || !gs->wq_head)
        return;
    gmsg *m = gs->wq_head;
    gs->wq_head = m->next;
    if (!gs->wq_head)
        gs->wq_tail = NULL;
    gs->writing = m;
    grpc_op op = {.op = GRPC_OP_SEND_MESSAGE};
    op.data.send_message.send_message = m->bb;
    if (grpc_call_start_batch(gs->c->call, &op, 1, &gs->t_write, NULL) != GRPC_CALL_OK)
        DL_LOG(DL_LOG_ERR, "grpc", "cannot write on a stream");
}

/* Under gs->mu: ends the stream once nothing more can come; true when it
 * is over and gs is to be freed (after unlocking). */
static bool stream_settle(gstream *gs)
{
    if (gs->read_done && !gs->status_sent && !gs->closed && !gs->writing && !gs->wq_head &&
        gs->pending == 1) {   /* only the close watch is left */
        gs->status_sent = true;
        gs->pending++;
        grpc_op op = {.op = GRPC_OP_SEND_STATUS_FROM_SERVER};
        op.data.send_status_from_server.status = GRPC_STATUS_OK;
        if (grpc_call_start_batch(gs->c->call, &op, 1, &gs->t_status, NULL) != GRPC_CALL_OK)
            gs->pending--;
    }
    return gs->pending == 0;
}

static void stream_post_read(gstream *gs);

/* Under gs->mu: one of the stream's requests is answered (or dropped);
 * reading resumes when it had paused. */
static void stream_request_ended(gstream *gs)
{
    gs->pending--;
    gs->requests--;
    if (gs->read_paused && gs->requests < STREAM_MAX_REQUESTS && !gs->closed) {
        gs->read_paused = false;
        gs->pending++;   /* the read */
        stream_post_read(gs);
    }
}

static void stream_emit(ireq *r, dl_status code, const dl_err *err, dl_sbuf *msg, bool last)
{
    (void)code, (void)err;   /* a failure's message is in msg */
    gstream *gs = r->owner;
    gmsg *m = calloc(1, sizeof(*m));
    if (m)
        m->bb = gsrv_buffer(msg);
    else
        dl_sbuf_free(msg);
    pthread_mutex_lock(&gs->mu);
    if (last && r->g) {   /* off the running generations */
        ireq **link = &gs->gens;
        while (*link && *link != r)
            link = &(*link)->gen_next;
        if (*link)
            *link = r->gen_next;
    }
    if (m) {
        m->done = last ? r : NULL;
        if (gs->wq_tail)
            gs->wq_tail->next = m;
        else
            gs->wq_head = m;
        gs->wq_tail = m;
        stream_write_next(gs);
    } else if (last) {   /* out of memory: the request ends unanswered */
        stream_request_ended(gs);
    }
    bool over = stream_settle(gs);
    pthread_mutex_unlock(&gs->mu);
    if (!m && last) {
        gsrv_ireq_fini(r);
        free(r);
    }
    if (over)
        stream_free(gs);
}

/* A generation of the stream starts (grpc_generate.c calls it before
 * submitting): listed, so that a cancelled stream stops it. */
void gsrv_stream_gen_started(ireq *r)
{
    gstream *gs = r->owner;
    pthread_mutex_lock(&gs->mu);
    r->gen_next = gs->gens;
    gs->gens = r;
    bool closed = gs->closed;
    pthread_mutex_unlock(&gs->mu);
    if (closed)
        gsrv_gen_cancel(r);
}

static void stream_post_read(gstream *gs)
{
    grpc_op op = {.op = GRPC_OP_RECV_MESSAGE};
    op.data.recv_message.recv_message = &gs->recv;
    if (grpc_call_start_batch(gs->c->call, &op, 1, &gs->t_read, NULL) != GRPC_CALL_OK) {
        gs->read_done = true;
        gs->pending--;
    }
}

static void stream_read(gtag *t, bool ok)
{
    gstream *gs = CONTAINER(t, gstream, t_read);
    grpc_byte_buffer *bb = gs->recv;
    gs->recv = NULL;
    ireq *r = ok && bb ? calloc(1, sizeof(*r)) : NULL;
    size_t len = 0;
    uint8_t *data = r ? gsrv_read(bb, &len) : NULL;
    if (bb)
        grpc_byte_buffer_destroy(bb);
    pthread_mutex_lock(&gs->mu);
    if (r) {
        gs->pending++;             /* the request, until its last answer is written */
        if (++gs->requests < STREAM_MAX_REQUESTS) {
            stream_post_read(gs);  /* the next one (this read's count carries over) */
        } else {
            gs->read_paused = true;
            gs->pending--;         /* no read outstanding until a request is answered */
        }
    } else {
        gs->read_done = true;      /* the client closed its side, or the call ended */
        gs->pending--;
    }
    bool over = stream_settle(gs);
    pthread_mutex_unlock(&gs->mu);
    if (r) {
        r->s = gs->c->s;
        r->c = gs->c;
        r->stream = true;
        r->owner = gs;
        r->emit = stream_emit;
        gsrv_infer_start(r, data ? data : (const uint8_t *)"", len);
    }
    free(data);
    if (over)
        stream_free(gs);
}

static void stream_written(gtag *t, bool ok)
{
    (void)ok;   /* a client gone: the answers left are dropped as they come */
    gstream *gs = CONTAINER(t, gstream, t_write);
    pthread_mutex_lock(&gs->mu);
    gmsg *m = gs->writing;
    gs->writing = NULL;
    if (m->done)
        stream_request_ended(gs);
    stream_write_next(gs);
    bool over = stream_settle(gs);
    pthread_mutex_unlock(&gs->mu);
    grpc_byte_buffer_destroy(m->bb);
    if (m->done) {
        gsrv_ireq_fini(m->done);
        free(m->done);
    }
    free(m);
    if (over)
        stream_free(gs);
}

static void stream_status_sent(gtag *t, bool ok)
{
    (void)ok;
    gstream *gs = CONTAINER(t, gstream, t_status);
    pthread_mutex_lock(&gs->mu);
    gs->pending--;
    bool over = stream_settle(gs);
    pthread_mutex_unlock(&gs->mu);
    if (over)
        stream_free(gs);
}

/* The call is over: sent its status, or cancelled (the client gone), when
 * its running generations stop at their next step. */
static void stream_closed(gtag *t, bool ok)
{
    (void)ok;
    gstream *gs = CONTAINER(t, gstream, t_close);
    pthread_mutex_lock(&gs->mu);
    gs->closed = true;
    gs->pending--;
    for (ireq *r = gs->gens; r; r = r->gen_next)
        gsrv_gen_cancel(r);
    bool over = stream_settle(gs);
    pthread_mutex_unlock(&gs->mu);
    if (over)
        stream_free(gs);
}

static void model_stream_infer(gcall *c)
{
    gstream *gs = calloc(1, sizeof(*gs));
    if (!gs) {
        answer_error(c, DL_ERR_NOMEM, "out of memory");
        return;
    }
    gs->c = c;
    gs->t_read.fn = stream_read;
    gs->t_write.fn = stream_written;
    gs->t_status.fn = stream_status_sent;
    gs->t_close.fn = stream_closed;
    pthread_mutex_init(&gs->mu, NULL);
    atomic_fetch_add(&c->s->streams_open, 1);
    grpc_op ops[2];
    memset(ops, 0, sizeof(ops));
    ops[0].op = GRPC_OP_SEND_INITIAL_METADATA;
    ops[1].op = GRPC_OP_RECV_CLOSE_ON_SERVER;
    ops[1].data.recv_close_on_server.cancelled = &gs->cancelled;
    pthread_mutex_lock(&gs->mu);
    gs->pending = 2;   /* the close watch and the first read */
    if (grpc_call_start_batch(c->call, ops, 2, &gs->t_close, NULL) != GRPC_CALL_OK) {
        gs->pending--;
        gs->closed = true;
    }
    stream_post_read(gs);
    bool over = stream_settle(gs);
    pthread_mutex_unlock(&gs->mu);
    if (over)
        stream_free(gs);
}

/* ---- the table ------------------------------------------------------------------- */

#define SVC "/inference.GRPCInferenceService/"
const gmethod gsrv_methods[] = {
    {SVC "ServerLive", "ServerLive", false, true, server_live},
    {SVC "ServerReady", "ServerReady", false, true, server_ready_call},
    {SVC "ModelReady", "ModelReady", false, false, model_ready},
    {SVC "ServerMetadata", "ServerMetadata", false, false, server_metadata},
    {SVC "ModelMetadata", "ModelMetadata", false, false, model_metadata},
    {SVC "ModelInfer", "ModelInfer", false, false, model_infer},
    {SVC "ModelStreamInfer", "ModelStreamInfer", true, false, model_stream_infer},
    {SVC "ModelConfig", "ModelConfig", false, false, model_config},
    {SVC "ModelStatistics", "ModelStatistics", false, false, model_statistics},
    {SVC "RepositoryIndex", "RepositoryIndex", false, false, repository_index},
    {SVC "RepositoryModelLoad", "RepositoryModelLoad", false, false, repository_load},
    {SVC "RepositoryModelUnload", "RepositoryModelUnload", false, false, repository_unload},
    {"/grpc.health.v1.Health/Check", "HealthCheck", false, true, health_check},
};
const int gsrv_nmethods = sizeof(gsrv_methods) / sizeof(gsrv_methods[0]);
