/* grpc_server.c: the gRPC server on libgrpc's C core: one completion
 * queue, `threads` threads taking its events, each method's calls
 * requested ahead so that a call finds its state ready, the bearer token
 * checked, unary answers sent, and the server stopped once what it holds
 * is answered. The methods themselves are grpc_calls.c's. */
#define _GNU_SOURCE   /* asprintf, pthread_setname_np */
#include "serve/grpc/grpc_int.h"

#include <grpc/byte_buffer_reader.h>
#include <grpc/grpc_security.h>
#include <grpc/support/log.h>
#include <grpc/support/time.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

/* Calls of a method requested ahead: libgrpc queues the calls that find
 * none, so these only spare a wait for the thread that requests the next. */
#define AHEAD_INFER  16
#define AHEAD_OTHER  2
/* How long open streams may run on after stopping begins. */
#define STREAM_GRACE_S 5

#define CONTAINER(p, type, field) ((type *)(void *)((char *)(p) - offsetof(type, field)))

grpc_status_code gsrv_code(dl_status st)
{
    switch (st) {
    case DL_OK:              return GRPC_STATUS_OK;
    case DL_ERR_INVALID:     return GRPC_STATUS_INVALID_ARGUMENT;
    case DL_ERR_NOT_FOUND:   return GRPC_STATUS_NOT_FOUND;
    case DL_ERR_TOO_LARGE:   return GRPC_STATUS_RESOURCE_EXHAUSTED;
    case DL_ERR_UNAVAILABLE: return GRPC_STATUS_UNAVAILABLE;
    case DL_ERR_BUSY:        return GRPC_STATUS_UNAVAILABLE;
    case DL_ERR_TIMEOUT:     return GRPC_STATUS_DEADLINE_EXCEEDED;
    case DL_ERR_NOMEM:       return GRPC_STATUS_RESOURCE_EXHAUSTED;
    case DL_ERR_IO:          return GRPC_STATUS_INTERNAL;
    case DL_ERR_BACKEND:     return GRPC_STATUS_INTERNAL;
    }
    return GRPC_STATUS_INTERNAL;
}

/* ---- buffers and metadata ------------------------------------------------- */

uint8_t *gsrv_read(grpc_byte_buffer *bb, size_t *len)
{
    *len = 0;
    if (!bb)
        return NULL;
    grpc_byte_buffer_reader rd;
    if (!grpc_byte_buffer_reader_init(&rd, bb))
        return NULL;
    size_t n = grpc_byte_buffer_length(bb);
    uint8_t *p = malloc(n ? n : 1);
    grpc_slice sl;
    size_t at = 0;
    while (p && grpc_byte_buffer_reader_next(&rd, &sl)) {
        size_t k = GRPC_SLICE_LENGTH(sl);
        if (at + k <= n)
            memcpy(p + at, GRPC_SLICE_START_PTR(sl), k);
        at += k;
        grpc_slice_unref(sl);
    }
    grpc_byte_buffer_reader_destroy(&rd);
    if (p && at != n) {   /* cannot happen: the buffer's own length */
        free(p);
        return NULL;
    }
    *len = n;
    return p;
}

grpc_byte_buffer *gsrv_buffer(dl_sbuf *b)
{
    grpc_slice sl = b->len ? grpc_slice_new(b->s, b->len, free) : grpc_empty_slice();
    if (!b->len)
        free(b->s);
    *b = (dl_sbuf){0};
    grpc_byte_buffer *bb = grpc_raw_byte_buffer_create(&sl, 1);
    grpc_slice_unref(sl);
    return bb;
}

int64_t gsrv_time_left_us(const gcall *c)
{
    gpr_timespec d = gpr_convert_clock_type(c->deadline, GPR_CLOCK_MONOTONIC);
    if (gpr_time_cmp(d, gpr_inf_future(GPR_CLOCK_MONOTONIC)) >= 0 || d.tv_sec > INT64_MAX / 2000000)
        return INT64_MAX;
    gpr_timespec left = gpr_time_sub(d, gpr_now(GPR_CLOCK_MONOTONIC));
    return left.tv_sec * 1000000 + left.tv_nsec / 1000;
}

bool gsrv_metadata(const gcall *c, const char *key, char *buf, size_t size)
{
    for (size_t i = 0; i < c->md.count; i++) {
        const grpc_metadata *m = &c->md.metadata[i];
        if (grpc_slice_str_cmp(m->key, key) != 0)
            continue;
        size_t n = GRPC_SLICE_LENGTH(m->value);
        n = n < size - 1 ? n : size - 1;
        memcpy(buf, GRPC_SLICE_START_PTR(m->value), n);
        buf[n] = '\0';
        return true;
    }
    return false;
}

/* Compares in time that depends only on the expected value's length. */
static bool token_ok(const grpc_srv *s, const gcall *c)
{
    if (!s->bearer)
        return true;
    for (size_t i = 0; i < c->md.count; i++) {
        const grpc_metadata *m = &c->md.metadata[i];
        if (grpc_slice_str_cmp(m->key, "authorization") != 0)
            continue;
        const unsigned char *v = GRPC_SLICE_START_PTR(m->value);
        size_t n = strlen(s->bearer), len = GRPC_SLICE_LENGTH(m->value);
        volatile unsigned char diff = (unsigned char)(n != len);
        for (size_t k = 0; k < n; k++)
            diff |= (unsigned char)(s->bearer[k] ^ (k < len ? v[k] : 0));
        return diff == 0;
    }
    return false;
}

/* ---- calls ---------------------------------------------------------------- */

static void call_new(gtag *t, bool ok);
static void call_sent(gtag *t, bool ok);

/* Requests the next call of method mi (-1: any other method). */
static void request_call(grpc_srv *s, int mi)
{
    gcall *c = calloc(1, sizeof(*c));
    if (!c) {
        DL_LOG(DL_LOG_ERR, "grpc", "out of memory requesting a call");
        return;
    }
    c->s = s;
    c->mi = mi;
    c->t_new.fn = call_new;
    c->t_done.fn = call_sent;
    grpc_metadata_array_init(&c->md);
    grpc_call_error e;
    if (mi < 0) {
        grpc_call_details_init(&c->details);
        e = grpc_server_request_call(s->server, &c->call, &c->details, &c->md, s->cq, s->cq,
                                     &c->t_new);
    } else {
        e = grpc_server_request_registered_call(
            s->server, s->handles[mi], &c->call, &c->deadline, &c->md,
            gsrv_methods[mi].stream ? NULL : &c->payload, s->cq, s->cq, &c->t_new);
    }
    if (e != GRPC_CALL_OK) {   /* shutting down */
        grpc_metadata_array_destroy(&c->md);
        if (mi < 0)
            grpc_call_details_destroy(&c->details);
        free(c);
    }
}

void gsrv_call_end(gcall *c)
{
    grpc_srv *s = c->s;
    int code = c->code >= 0 && c->code < GRPC_NCODES ? c->code : GRPC_STATUS_UNKNOWN;
    atomic_fetch_add(&s->counts[(c->mi + 1) * GRPC_NCODES + code], 1);
    atomic_fetch_sub(&s->calls_in_flight, 1);
    if (c->payload)
        grpc_byte_buffer_destroy(c->payload);
    if (c->send)
        grpc_byte_buffer_destroy(c->send);
    grpc_slice_unref(c->details_slice);
    grpc_metadata_array_destroy(&c->md);
    if (c->mi < 0)
        grpc_call_details_destroy(&c->details);
    if (c->call)
        grpc_call_unref(c->call);
    free(c);
}

static void call_sent(gtag *t, bool ok)
{
    (void)ok;   /* a client gone before the answer: nothing more to do */
    gsrv_call_end(CONTAINER(t, gcall, t_done));
}

void gsrv_answer(gcall *c, grpc_status_code code, const char *details, dl_sbuf *msg)
{
    grpc_op ops[4];
    memset(ops, 0, sizeof(ops));
    size_t n = 0;
    ops[n++].op = GRPC_OP_SEND_INITIAL_METADATA;
    if (msg && code == GRPC_STATUS_OK) {
        c->send = gsrv_buffer(msg);
        ops[n].op = GRPC_OP_SEND_MESSAGE;
        ops[n++].data.send_message.send_message = c->send;
    }
    c->code = code;
    c->details_slice = grpc_slice_from_copied_string(details ? details : "");
    ops[n].op = GRPC_OP_SEND_STATUS_FROM_SERVER;
    ops[n].data.send_status_from_server.status = code;
    ops[n++].data.send_status_from_server.status_details = &c->details_slice;
    ops[n].op = GRPC_OP_RECV_CLOSE_ON_SERVER;
    ops[n++].data.recv_close_on_server.cancelled = &c->cancelled;
    if (grpc_call_start_batch(c->call, ops, n, &c->t_done, NULL) != GRPC_CALL_OK) {
        DL_LOG(DL_LOG_ERR, "grpc", "cannot answer a call");
        gsrv_call_end(c);
    }
}

/* A call arrived: the next one of its method is requested, then it is
 * checked (method known, token) and handed to its method. */
static void call_new(gtag *t, bool ok)
{
    gcall *c = CONTAINER(t, gcall, t_new);
    grpc_srv *s = c->s;
    if (!ok) {   /* the server is shutting down: the request was cancelled */
        grpc_metadata_array_destroy(&c->md);
        if (c->mi < 0)
            grpc_call_details_destroy(&c->details);
        free(c);
        return;
    }
    if (!atomic_load(&s->stopping))
        request_call(s, c->mi);
    atomic_fetch_add(&s->calls_in_flight, 1);
    c->t_received = dl_time_now();
    if (c->mi < 0) {
        char path[160];
        size_t n = GRPC_SLICE_LENGTH(c->details.method);
        snprintf(path, sizeof(path), "%.*s", (int)(n < 150 ? n : 150),
                 (const char *)GRPC_SLICE_START_PTR(c->details.method));
        char msg[200];
        snprintf(msg, sizeof(msg), "no such method: %s", path);
        gsrv_answer(c, GRPC_STATUS_UNIMPLEMENTED, msg, NULL);
        return;
    }
    if (!gsrv_methods[c->mi].open && !token_ok(s, c)) {
        gsrv_answer(c, GRPC_STATUS_UNAUTHENTICATED,
                    "a valid bearer token is required (authorization metadata)", NULL);
        return;
    }
    gsrv_methods[c->mi].handle(c);
}

/* ---- threads ----------------------------------------------------------------- */

static void *cq_thread(void *arg)
{
    grpc_srv *s = arg;
    pthread_setname_np(pthread_self(), "grpc");
    for (;;) {
        /* Requests held: a look without waiting, and when nothing is
         * ready the pass is over and they run. */
        bool holding = gsrv_holding();
        grpc_event ev = grpc_completion_queue_next(
            s->cq, holding ? gpr_time_0(GPR_CLOCK_MONOTONIC) : gpr_inf_future(GPR_CLOCK_MONOTONIC),
            NULL);
        if (ev.type == GRPC_QUEUE_TIMEOUT)
            gsrv_pass_end();
        if (ev.type == GRPC_QUEUE_SHUTDOWN)
            return NULL;
        if (ev.type == GRPC_OP_COMPLETE) {
            gtag *t = ev.tag;
            t->fn(t, ev.success != 0);
        }
    }
}

/* Answers the requests whose batch has run: a batcher worker only queues
 * them here (on_done must not block). */
static void *answer_thread(void *arg)
{
    grpc_srv *s = arg;
    pthread_setname_np(pthread_self(), "grpc-answer");
    pthread_mutex_lock(&s->mu);
    for (;;) {
        ireq *r = s->done_head;
        if (!r) {
            if (s->answerer_quit)
                break;
            pthread_cond_wait(&s->cv, &s->mu);
            continue;
        }
        s->done_head = r->next;
        if (!s->done_head)
            s->done_tail = NULL;
        r->queued = false;   /* a generation's later event queues it again */
        pthread_mutex_unlock(&s->mu);
        gsrv_infer_finish(r);
        pthread_mutex_lock(&s->mu);
    }
    pthread_mutex_unlock(&s->mu);
    return NULL;
}

static void shutdown_done(gtag *t, bool ok)
{
    (void)ok;
    grpc_srv *s = CONTAINER(t, grpc_srv, shutdown_tag);
    pthread_mutex_lock(&s->mu);
    s->shut = true;
    pthread_cond_broadcast(&s->cv);
    pthread_mutex_unlock(&s->mu);
}

/* libgrpc's own messages, into the daemon's log. */
static void grpc_log_to_daemon(gpr_log_func_args *a)
{
    int level = a->severity == GPR_LOG_SEVERITY_ERROR ? DL_LOG_ERR
                : a->severity == GPR_LOG_SEVERITY_INFO ? DL_LOG_INFO
                                                       : DL_LOG_DEBUG;
    DL_LOG(level, "grpc", "libgrpc: %s", a->message);
}

/* ---- start and stop ----------------------------------------------------------- */

/* TLS credentials from [http] tls_cert and tls_key, or insecure ones. */
static grpc_server_credentials *credentials(const dl_http_conf *http, bool *tls, dl_err *err)
{
    *tls = http->tls_cert[0] != '\0';
    if (!*tls)
        return grpc_insecure_server_credentials_create();
    char *cert = NULL, *key = NULL;
    size_t len;
    if (dl_file_read(http->tls_cert, &cert, &len, err) != DL_OK) {
        dl_err_prefix(err, "http.tls_cert");
        return NULL;
    }
    if (dl_file_read(http->tls_key, &key, &len, err) != DL_OK) {
        free(cert);
        dl_err_prefix(err, "http.tls_key");
        return NULL;
    }
    grpc_ssl_pem_key_cert_pair pair = {.private_key = key, .cert_chain = cert};
    grpc_server_credentials *cr = grpc_ssl_server_credentials_create(NULL, &pair, 1, 0, NULL);
    free(cert);
    free(key);
    if (!cr)
        dl_err_set(err, DL_ERR_INVALID, "http.tls_cert and http.tls_key: not a PEM "
                   "certificate and key libgrpc accepts");
    return cr;
}

static void release(grpc_srv *s)
{
    if (s->server)
        grpc_server_destroy(s->server);
    if (s->cq)
        grpc_completion_queue_destroy(s->cq);
    free(s->handles);
    free(s->threads);
    free(s->counts);
    free(s->bearer);
    pthread_mutex_destroy(&s->mu);
    pthread_cond_destroy(&s->cv);
    free(s);
    grpc_shutdown();
}

dl_status grpc_srv_start(const grpc_deps *deps, grpc_srv **out, int *port, dl_err *err)
{
    *out = NULL;
    grpc_srv *s = calloc(1, sizeof(*s));
    if (!s)
        return dl_err_set(err, DL_ERR_NOMEM, "grpc server");
    gpr_set_log_function(grpc_log_to_daemon);
    gpr_set_log_verbosity(GPR_LOG_SEVERITY_ERROR);
    grpc_init();
    pthread_mutex_init(&s->mu, NULL);
    pthread_cond_init(&s->cv, NULL);
    s->deps = deps;
    s->shutdown_tag.fn = shutdown_done;
    const dl_grpc_conf *conf = deps->conf;
    s->handles = calloc((size_t)gsrv_nmethods, sizeof(*s->handles));
    s->counts = calloc((size_t)(gsrv_nmethods + 1) * GRPC_NCODES, sizeof(*s->counts));
    bool token_ok = !deps->http->token[0] ||
                    asprintf(&s->bearer, "Bearer %s", deps->http->token) >= 0;
    if (!token_ok)
        s->bearer = NULL;
    if (!s->handles || !s->counts || !token_ok) {
        release(s);
        return dl_err_set(err, DL_ERR_NOMEM, "grpc server");
    }
    int max = (int)conf->max_message_bytes;
    grpc_arg args[] = {
        {.type = GRPC_ARG_INTEGER, .key = GRPC_ARG_MAX_RECEIVE_MESSAGE_LENGTH,
         .value.integer = max},
        {.type = GRPC_ARG_INTEGER, .key = GRPC_ARG_MAX_SEND_MESSAGE_LENGTH,
         .value.integer = max},
    };
    grpc_channel_args ca = {.num_args = 2, .args = args};
    s->server = grpc_server_create(&ca, NULL);
    s->cq = grpc_completion_queue_create_for_next(NULL);
    if (!s->server || !s->cq) {
        release(s);
        return dl_err_set(err, DL_ERR_NOMEM, "grpc server");
    }
    grpc_server_register_completion_queue(s->server, s->cq, NULL);
    for (int i = 0; i < gsrv_nmethods; i++)
        s->handles[i] = grpc_server_register_method(
            s->server, gsrv_methods[i].path, NULL,
            gsrv_methods[i].stream ? GRPC_SRM_PAYLOAD_NONE
                                   : GRPC_SRM_PAYLOAD_READ_INITIAL_BYTE_BUFFER, 0);
    grpc_server_credentials *cr = credentials(deps->http, &s->tls, err);
    if (!cr) {
        release(s);
        return err->code;
    }
    const char *host = conf->address[0] ? conf->address : deps->http->address;
    char addr[96];
    snprintf(addr, sizeof(addr), strchr(host, ':') ? "[%s]:%lld" : "%s:%lld", host,
             (long long)conf->port);
    s->port = grpc_server_add_http2_port(s->server, addr, cr);
    grpc_server_credentials_release(cr);
    if (s->port == 0) {
        release(s);
        return dl_err_set(err, DL_ERR_IO, "grpc: cannot listen on %s (in use, or a bad "
                          "grpc.address)", addr);
    }
    grpc_server_start(s->server);
    for (int i = -1; i < gsrv_nmethods; i++) {
        int ahead = i >= 0 && strcmp(gsrv_methods[i].name, "ModelInfer") == 0 ? AHEAD_INFER
                                                                             : AHEAD_OTHER;
        for (int k = 0; k < ahead; k++)
            request_call(s, i);
    }
    /* One thread per two cores: libgrpc's completion queue serves fewer
     * threads better (its echo on 2 cores: 103k calls/s with one thread,
     * 64k with two), and inference runs on the batcher's own threads. */
    long cores = sysconf(_SC_NPROCESSORS_ONLN);
    s->nthreads = conf->threads > 0 ? (int)conf->threads : cores > 3 ? (int)(cores / 2) : 1;
    s->threads = calloc((size_t)s->nthreads, sizeof(*s->threads));
    int started = 0;
    s->answerer_started = s->threads && pthread_create(&s->answerer, NULL, answer_thread, s) == 0;
    while (s->answerer_started && started < s->nthreads &&
           pthread_create(&s->threads[started], NULL, cq_thread, s) == 0)
        started++;
    if (started < s->nthreads) {
        s->nthreads = started;
        grpc_srv_stop(s);
        return dl_err_set(err, DL_ERR_NOMEM, "grpc: cannot start its threads");
    }
    DL_LOG(DL_LOG_NOTICE, "grpc", "listening on %s%s port %d, %d thread%s%s", host,
           s->tls ? " (TLS)" : "", s->port, s->nthreads, s->nthreads == 1 ? "" : "s",
           s->bearer ? ", token required" : "");
    *port = s->port;
    *out = s;
    return DL_OK;
}

void grpc_srv_stop(grpc_srv *s)
{
    if (!s)
        return;
    atomic_store(&s->stopping, 1);
    grpc_server_shutdown_and_notify(s->server, s->cq, &s->shutdown_tag);
    /* Unary calls end as their answers go (the batcher has run every
     * request it held); open streams get STREAM_GRACE_S, then are cut. */
    struct timespec until;
    clock_gettime(CLOCK_REALTIME, &until);
    until.tv_sec += STREAM_GRACE_S;
    pthread_mutex_lock(&s->mu);
    while (!s->shut && s->nthreads > 0 &&
           pthread_cond_timedwait(&s->cv, &s->mu, &until) == 0) {
    }
    bool cut = !s->shut && s->nthreads > 0;
    pthread_mutex_unlock(&s->mu);
    if (cut) {
        DL_LOG(DL_LOG_WARNING, "grpc", "cancelling the calls still open after %d s",
               STREAM_GRACE_S);
        grpc_server_cancel_all_calls(s->server);
    }
    pthread_mutex_lock(&s->mu);
    while (!s->shut && s->nthreads > 0)
        pthread_cond_wait(&s->cv, &s->mu);
    s->answerer_quit = true;
    pthread_cond_broadcast(&s->cv);
    pthread_mutex_unlock(&s->mu);
    if (s->answerer_started)
        pthread_join(s->answerer, NULL);
    grpc_completion_queue_shutdown(s->cq);
    for (int i = 0; i < s->nthreads; i++)
        pthread_join(s->threads[i], NULL);
    if (s->nthreads == 0) {   /* no thread started: the queue's events run here */
        for (;;) {
            grpc_event ev = grpc_completion_queue_next(s->cq, gpr_inf_future(GPR_CLOCK_MONOTONIC),
                                                       NULL);
            if (ev.type == GRPC_QUEUE_SHUTDOWN)
                break;
            gtag *t = ev.tag;
            t->fn(t, ev.success != 0);
        }
    }
    release(s);
}

/* ---- status and metrics -------------------------------------------------------- */

json_t *grpc_srv_status(grpc_srv *s)
{
    json_t *req = json_object();
    for (int i = 0; req && i < gsrv_nmethods; i++) {
        unsigned long long n = 0;
        for (int k = 0; k < GRPC_NCODES; k++)
            n += atomic_load(&s->counts[(i + 1) * GRPC_NCODES + k]);
        json_object_set_new(req, gsrv_methods[i].name, json_integer((json_int_t)n));
    }
    return json_pack("{s:i, s:b, s:b, s:I, s:I, s:o*}", "port", s->port, "tls", s->tls,
                     "auth", s->bearer != NULL,
                     "calls_in_flight", (json_int_t)atomic_load(&s->calls_in_flight),
                     "streams_open", (json_int_t)atomic_load(&s->streams_open),
                     "requests", req);
}

void grpc_srv_metrics(grpc_srv *s, dl_sbuf *out)
{
    static const char *const codes[GRPC_NCODES] = {
        "OK", "CANCELLED", "UNKNOWN", "INVALID_ARGUMENT", "DEADLINE_EXCEEDED", "NOT_FOUND",
        "ALREADY_EXISTS", "PERMISSION_DENIED", "RESOURCE_EXHAUSTED", "FAILED_PRECONDITION",
        "ABORTED", "OUT_OF_RANGE", "UNIMPLEMENTED", "INTERNAL", "UNAVAILABLE", "DATA_LOSS",
        "UNAUTHENTICATED"};
    dl_prom_family(out, "dlserve_grpc_requests_total", "counter",
                   "gRPC calls ended, by method and status code");
    for (int i = -1; i < gsrv_nmethods; i++)
        for (int k = 0; k < GRPC_NCODES; k++) {
            unsigned long long n = atomic_load(&s->counts[(i + 1) * GRPC_NCODES + k]);
            if (n || (i >= 0 && k == 0))
                dl_prom_sample(out, "dlserve_grpc_requests_total", (double)n, "method",
                               i < 0 ? "unknown" : gsrv_methods[i].name, "code", codes[k],
                               NULL);
        }
    dl_prom_family(out, "dlserve_grpc_calls_in_flight", "gauge",
                   "gRPC calls received and not yet ended (open streams included)");
    dl_prom_sample(out, "dlserve_grpc_calls_in_flight",
                   (double)atomic_load(&s->calls_in_flight), NULL);
    dl_prom_family(out, "dlserve_grpc_streams_open", "gauge", "ModelStreamInfer streams open");
    dl_prom_sample(out, "dlserve_grpc_streams_open", (double)atomic_load(&s->streams_open),
                   NULL);
}
