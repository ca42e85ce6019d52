/* http_api.c: the HTTP/JSON endpoints (Open Inference Protocol v2, /metrics,
 * /status, the status page) on libmicrohttpd, with bearer tokens, TLS and
 * body limits.
 *
 * Threads: a small fixed pool of event loops (MHD's internal epoll,
 * http.threads of them) serves every connection, which an acceptor
 * thread deals out to them (MHD_add_connection). No thread waits for the
 * batcher: an infer request's connection is suspended before the request
 * is queued, the batch's completion (on the batcher's worker thread)
 * resumes it, and the access handler, called again, formats and queues
 * the answer. The infer requests an event loop reads in one pass are
 * held instead (not suspended: MHD calls the handler of a request with
 * no answer again on its next pass) and run as one batch by that loop
 * on its next pass. Idle keep-alive connections cost a socket and a
 * little memory, not a thread. */
#define _GNU_SOURCE   /* accept4, pthread_setname_np; strncasecmp; microhttpd.h's socket types */
#include "serve/http/http.h"
#include "serve/http/status_page.h"
#include "serve/oip/oip.h"
#include "serve/oip/trace.h"

#include <arpa/inet.h>
#include <errno.h>
#include <netinet/in.h>
#include <pthread.h>
#include <stdarg.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <sys/resource.h>
#include <sys/socket.h>
#include <time.h>
#include <unistd.h>

#include <microhttpd.h>

/* Idle keep-alive connections are closed after this. */
#define HTTP_IDLE_TIMEOUT_S 60
/* http_stop waits at most this long for requests in flight (but always
 * for those the batcher holds: their connections are suspended). */
#define HTTP_DRAIN_S 30
/* File descriptors kept from connections for everything else: models,
 * logs, Kafka and Redis sockets, MHD's own epoll and ITC descriptors. */
#define HTTP_FD_RESERVE 128
/* Connections past http.max_connections that are still accepted, to tell
 * them 503 (beyond these new ones wait in the listen backlog). */
#define HTTP_OVER_CONNS 64
/* Room in MHD's own limit above max_conns: the acceptor counts open
 * connections from MHD's notifications, which trail a burst of accepts. */
#define HTTP_ACCEPT_SLACK 32
/* Longer URLs get 414 (MHD itself answers 414 past its 32 KiB buffer). */
#define HTTP_URL_MAX 8192

#define CT_JSON "application/json"
#define CT_BINARY "application/octet-stream"   /* JSON then binary tensors */
#define CT_METRICS "text/plain; version=0.0.4"
/* The status page's files: same-origin scripts and styles only (no inline
 * code, nothing fetched elsewhere), revalidated on each load. */
#define PAGE_CSP "default-src 'self'"
#define PAGE_CACHE "no-cache"

struct http_server {
    const http_deps   *deps;
    struct MHD_Daemon *d;
    int                listen_fd;
    pthread_t          acceptor;             /* accepts for MHD's event loops */
    char              *tls_cert, *tls_key;   /* PEM text, kept while MHD runs */
    atomic_bool        stopping;
    int                threads;              /* event loops */
    unsigned           max_conns;            /* connections the acceptor lets in */
    pthread_mutex_t    mu;
    pthread_cond_t     cv;                   /* inflight or waiting went down */
    int64_t            inflight;             /* requests begun, not completed */
    int64_t            waiting;              /* of which suspended in the batcher */
    atomic_llong       conns;                /* open connections */
};

/* Where a request of a held batch stands; all on its event loop. */
typedef enum hold_state {
    HOLD_NONE,      /* not held, or its batch has run: q holds the answer */
    HOLD_WAITING,   /* its batch has not run yet */
    HOLD_QUEUE,     /* its batch found no idle instance: it queues itself
                       on its next access-handler call */
} hold_state;

/* One request, from its first access-handler call to its completion
 * (on_completed frees it). */
typedef struct request {
    double    arrival;          /* dl_time_now() */
    oip_route route;
    char     *body;
    size_t    len, cap;
    size_t    dropped;          /* body bytes discarded past the limit */
    size_t    declared;         /* Content-Length (within the limit), or 0 */
    bool      too_big, nomem;
    const char *json_len;       /* Inference-Header-Content-Length, or NULL
                                   (MHD's copy: valid for the request) */
    /* An answer given before the body (a refusal), sent once the body has
     * been read and discarded, so that a client that sends its whole body
     * before reading gets it (see hold_answer). */
    struct answer *held;
    trace_ctx   trace;          /* traceparent / tracestate, echoed on the answer */
    /* An infer request handed to the batcher. From its submission until
     * infer_done resumes the connection, q belongs to the batcher; then
     * the access handler, called again, answers from it. */
    http_server           *h;
    struct MHD_Connection *c;
    bool         queued;        /* q is initialised and was handed over */
    bool         arriving;      /* announced to the batcher, not yet withdrawn */
    dl_err       refused;       /* why batcher_submit refused q (code DL_OK: it ran) */
    served      *sv;            /* a reference, released with the request */
    oip_request  in;            /* the parsed input; q.x points into it */
    infer_req    q;
    /* A held batch: the infer requests an event loop read in one pass,
     * their connections not suspended, run on that loop by the first
     * one's next access-handler call, which comes after the pass's other
     * requests. The first request holds the list. */
    struct request *batch_next;   /* the next request of the batch */
    struct request *batch_tail;   /* (first request) the last one */
    int64_t      batch_samples;   /* (first request) samples in all */
    bool         holds_batch;     /* first request, its batch not run yet */
    double       busy_since;      /* (first request) when its batch first found
                                     no idle instance, or 0 */
    hold_state   hold;            /* (every request of a held batch) */
    bool         gone;            /* completed (closed) while held: the first
                                     request frees it */
} request;

static void request_free(request *rq);

/* The first request of the calling event loop's open held batch, or NULL. */
static _Thread_local struct request *open_batch;

/* An answer ready to queue. */
typedef struct answer {
    int         code;
    char       *body;           /* new, NUL-terminated; NULL: out of memory (500) */
    size_t      len;            /* body bytes; 0: strlen(body) */
    size_t      json_len;       /* > 0: a binary answer, JSON then tensors
                                   (Inference-Header-Content-Length) */
    const char *ctype;
    const char *hname, *hvalue; /* one extra header, or NULL */
    bool        page;           /* body is an embedded file of the status page
                                   (static, not freed), sent with its headers */
} answer;

/* ---- answers ------------------------------------------------------------ */

/* Takes j (NULL: out of memory). */
static answer json_answer(int code, json_t *j)
{
    answer a = {.code = code, .ctype = CT_JSON};
    a.body = j ? oip_dump(j) : NULL;
    json_decref(j);
    if (!a.body)
        a.code = 500;
    return a;
}

static answer error_answer_v(int code, const char *fmt, va_list ap)
    __attribute__((format(printf, 2, 0)));
static answer error_answer_v(int code, const char *fmt, va_list ap)
{
    char msg[512];
    vsnprintf(msg, sizeof(msg), fmt, ap);
    return json_answer(code, oip_error("%s", msg));
}

/* {"error": message} with a code of its own: for refusals of the
 * protocol (401, 405) that no dl_status names. */
static answer error_answer(int code, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
static answer error_answer(int code, const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    answer a = error_answer_v(code, fmt, ap);
    va_end(ap);
    return a;
}

/* {"error": message} for a failure of kind st, with the code that
 * oip_http_code gives it. */
static answer status_answer(dl_status st, const char *fmt, ...)
    __attribute__((format(printf, 2, 3)));
static answer status_answer(dl_status st, const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    answer a = error_answer_v(oip_http_code(st), fmt, ap);
    va_end(ap);
    return a;
}

static void log_answer(const request *rq, const char *method, const char *url, const answer *a)
{
    double ms = (dl_time_now() - rq->arrival) * 1e3;
    if (a->code < 400)
        DL_LOG(DL_LOG_DEBUG, "http", "%s %.200s: %d (%.1f ms)", method, url, a->code, ms);
    else
        DL_LOG(a->code >= 500 && a->code != 503 ? DL_LOG_WARNING : DL_LOG_INFO, "http",
               "%s %.200s: %d %.300s", method, url, a->code,
               a->body ? a->body : "out of memory");
}

/* ---- trace context -------------------------------------------------------- */

/* The request's traceparent and tracestate headers (an invalid traceparent
 * is ignored, and its tracestate with it). */
static void trace_take(struct MHD_Connection *c, request *rq)
{
    trace_set(&rq->trace,
              MHD_lookup_connection_value(c, MHD_HEADER_KIND, TRACE_PARENT_HEADER), (size_t)-1,
              MHD_lookup_connection_value(c, MHD_HEADER_KIND, TRACE_STATE_HEADER), (size_t)-1);
}

/* The answer carries the request's trace context back. */
static void trace_answer(struct MHD_Response *resp, const trace_ctx *t)
{
    if (!trace_present(t))
        return;
    MHD_add_response_header(resp, TRACE_PARENT_HEADER, t->parent);
    if (t->state[0])
        MHD_add_response_header(resp, TRACE_STATE_HEADER, t->state);
}

/* log_answer with the request's id, model and trace id on the line. */
static void log_answer_ids(const request *rq, const char *method, const char *url,
                           const answer *a)
{
    char trace_id[33];
    trace_id_of(&rq->trace, trace_id);
    dl_log_ids ids = {.request_id = rq->in.id, .model = rq->route.model[0] ? rq->route.model : NULL,
                      .trace_id = trace_id[0] ? trace_id : NULL};
    const dl_log_ids *prev = dl_log_ids_push(&ids);
    log_answer(rq, method, url, a);
    dl_log_ids_pop(prev);
}

/* Queues a (taking its body), counts and logs it. */
static enum MHD_Result respond(http_server *h, struct MHD_Connection *c, const request *rq,
                               const char *method, const char *url, answer a)
{
    static const char oom[] = "{\"error\":\"out of memory\"}";
    size_t len = a.len ? a.len : a.body ? strlen(a.body) : 0;
    struct MHD_Response *resp =
        a.body ? MHD_create_response_from_buffer(len, a.body, a.page ? MHD_RESPMEM_PERSISTENT
                                                                     : MHD_RESPMEM_MUST_FREE)
               : MHD_create_response_from_buffer(sizeof(oom) - 1, (void *)oom,
                                                 MHD_RESPMEM_PERSISTENT);
    if (!resp) {
        if (!a.page)
            free(a.body);
        return MHD_NO;
    }
    if (a.page) {
        MHD_add_response_header(resp, MHD_HTTP_HEADER_CACHE_CONTROL, PAGE_CACHE);
        MHD_add_response_header(resp, "Content-Security-Policy", PAGE_CSP);
        MHD_add_response_header(resp, "X-Content-Type-Options", "nosniff");
    }
    MHD_add_response_header(resp, MHD_HTTP_HEADER_CONTENT_TYPE,
                            a.json_len ? CT_BINARY : a.ctype ? a.ctype : CT_JSON);
    trace_answer(resp, &rq->trace);
    if (a.hname)
        MHD_add_response_header(resp, a.hname, a.hvalue);
    if (a.json_len) {
        char n[24];
        snprintf(n, sizeof(n), "%zu", a.json_len);
        MHD_add_response_header(resp, OIP_HEADER_JSON_LEN, n);
    }
    /* While stopping, keep-alive connections end with this answer. */
    if (atomic_load(&h->stopping))
        MHD_add_response_header(resp, MHD_HTTP_HEADER_CONNECTION, "close");
    enum MHD_Result r = MHD_queue_response(c, (unsigned)a.code, resp);
    MHD_destroy_response(resp);
    stats_http(h->deps->st, a.code);
    log_answer_ids(rq, method, url, &a);
    return r;
}

/* ---- models ------------------------------------------------------------- */

/* A reference to the route's model and version, or NULL with err saying
 * why: DL_ERR_NOT_FOUND (404) or DL_ERR_UNAVAILABLE (503, nothing served
 * yet). */
static served *acquire(http_server *h, const oip_route *r, dl_err *err)
{
    served *sv;
    registry_acquire(h->deps->reg, r->model, r->version, &sv, err);
    return sv;
}

static answer model_metadata(http_server *h, const oip_route *r)
{
    dl_err err = {0};
    served *sv = acquire(h, r, &err);
    if (!sv)
        return status_answer(err.code, "%s", err.msg);
    json_t *status = registry_status(h->deps->reg);
    json_t *versions = oip_versions_of(status, r->model);
    if (!versions)   /* unloaded since acquire: still answer for sv */
        versions = json_array();
    json_t *meta = versions ? oip_model_metadata(sv->conf, sv->out_dim, versions) : NULL;
    json_decref(versions);
    json_decref(status);
    served_release(sv);
    return json_answer(200, meta);
}

static answer model_ready(http_server *h, const oip_route *r)
{
    dl_err err = {0};
    served *sv = acquire(h, r, &err);
    if (!sv)
        return json_answer(oip_http_code(err.code),
                           json_pack("{s:s, s:b, s:s}", "name", r->model, "ready", 0,
                                     "error", err.msg));
    served_release(sv);
    return json_answer(200, json_pack("{s:s, s:b}", "name", r->model, "ready", 1));
}

/* ---- infer -------------------------------------------------------------- */

/* The infer answer (JSON, or JSON then binary outputs) as an answer. */
static answer result_answer(const oip_result *res)
{
    dl_sbuf b = {0};
    size_t json_len;
    dl_err err = {0};
    if (oip_write_infer(res, &b, &json_len, &err) != DL_OK) {
        dl_sbuf_free(&b);
        return status_answer(err.code, "%s", err.msg);
    }
    return (answer){.code = 200, .body = b.s, .len = b.len, .ctype = CT_JSON,
                    .json_len = json_len < b.len ? json_len : 0};
}

/* The batch's completion, on the batcher's worker thread: wakes the
 * connection so that the access handler answers. */
static void infer_done(infer_req *q, void *ctx)
{
    (void)q;
    request *rq = ctx;
    http_server *h = rq->h;
    MHD_resume_connection(rq->c);   /* rq belongs to MHD's thread from here on */
    pthread_mutex_lock(&h->mu);
    h->waiting--;   /* http_stop counts the suspended requests */
    pthread_cond_broadcast(&h->cv);
    pthread_mutex_unlock(&h->mu);
}

/* The answer to a request that infer_start queued, once resumed (or once
 * run on this thread). */
static answer infer_answer(http_server *h, request *rq)
{
    const infer_req *q = &rq->q;
    served *sv = rq->sv;
    answer a;
    if (rq->refused.code != DL_OK) {
        a = status_answer(rq->refused.code, "%s", rq->refused.msg);
    } else if (q->err.code == DL_ERR_TIMEOUT) {
        a = status_answer(q->err.code, "%s", q->err.msg);   /* queued past its timeout: 503 */
    } else if (q->err.code != DL_OK) {
        /* 503 when the batch may succeed again (it ran short of memory),
         * 500 when the backend failed */
        a = status_answer(q->err.code, "inference failed: %s", q->err.msg);
    } else {
        oip_result res = {.model = sv->name, .version = sv->version, .id = rq->in.id,
                          .conf = sv->conf, .batch = rq->in.batch, .out_dim = sv->out_dim,
                          .y = q->out, .nout = rq->in.nout, .out = rq->in.out};
        a = result_answer(&res);
    }
    infer_req_account(h->deps->st, q, rq->arrival, a.code == 200);
    return a;
}

/* Adds rq to the calling event loop's held batch, opening one if none
 * is: with eager batching, while the batch fits max_batch_size and its
 * inference direct_max_us (what an event loop may compute). False when
 * rq is to be queued instead. */
static bool hold(batcher *bat, request *rq)
{
    request *first = open_batch;
    int64_t samples = (first ? first->batch_samples : 0) + rq->q.n;
    if ((first && first->sv != rq->sv) || !batcher_fits_thread(bat, rq->sv, samples) ||
        (!first && batcher_stopping(bat)))   /* intake stopped: no new batch */
        return false;
    rq->q.t_arrival = dl_time_now();
    rq->hold = HOLD_WAITING;
    if (first) {
        first->batch_tail->batch_next = rq;
        first->batch_tail = rq;
        first->batch_samples = samples;
    } else {
        rq->holds_batch = true;
        rq->batch_tail = rq;
        rq->batch_samples = samples;
        open_batch = rq;
    }
    return true;
}

/* Suspends rq's connection and queues rq; the batch's completion
 * resumes it (at once when refused). */
static void queue_suspended(http_server *h, struct MHD_Connection *c, request *rq)
{
    /* Suspended before it is queued, so that the completion always finds
     * the connection suspended. A refusal (queue full: 503; sizes: 400)
     * resumes it at once, and the next call answers it the same way. */
    MHD_suspend_connection(c);
    pthread_mutex_lock(&h->mu);
    h->waiting++;
    pthread_mutex_unlock(&h->mu);
    rq->q.next = NULL;
    if (batcher_submit(h->deps->bat, &rq->q, &rq->refused) != DL_OK)
        infer_done(&rq->q, rq);
}

/* Drops from first's held batch the requests completed (their
 * connections closed) since they were held. */
static void drop_gone(request *first)
{
    request **link = &first->batch_next;
    for (request *r = first->batch_next; r; r = *link) {
        if (r->gone) {
            *link = r->batch_next;
            request_free(r);
        } else {
            link = &r->batch_next;
        }
    }
}

/* Closes the held batch that first holds (its completed requests
 * dropped); the others are left `hold`. */
static void close_batch(request *first, hold_state hold)
{
    first->holds_batch = false;
    first->hold = HOLD_NONE;
    if (open_batch == first)
        open_batch = NULL;
    for (request *r = first->batch_next; r; r = r->batch_next)
        r->hold = hold;
}

/* rq's held batch, its loop's pass ended: run here when an instance is
 * idle (true, with rq's answer in *a: the others answer on their next
 * call). Else it stays open, to be tried again on the loop's next pass,
 * while batcher_may_wait allows; then it is queued (rq now, the others on
 * their next call). */
static bool run_held(http_server *h, struct MHD_Connection *c, request *rq, answer *a)
{
    batcher *bat = h->deps->bat;
    drop_gone(rq);
    int requests = 0;
    for (request *r = rq; r; r = r->batch_next, requests++)
        r->q.next = r->batch_next ? &r->batch_next->q : NULL;
    if (batcher_run_batch(bat, &rq->q)) {
        close_batch(rq, HOLD_NONE);   /* the others' next calls come after this one */
        *a = infer_answer(h, rq);
        return true;
    }
    double now = dl_time_now();
    if (rq->busy_since == 0)
        rq->busy_since = now;
    if (batcher_may_wait(bat, now - rq->busy_since, requests))
        return false;
    close_batch(rq, HOLD_QUEUE);
    queue_suspended(h, c, rq);
    return false;
}

/* Parses an infer request and hands it to the batcher. False when it
 * waits, held by its event loop or queued with its connection suspended
 * (infer_answer answers it on a later call); true with the answer in *a
 * when it ran on this thread or cannot be run. */
static bool infer_start(http_server *h, struct MHD_Connection *c, request *rq, answer *a)
{
    dl_err err = {0};
    rq->sv = acquire(h, &rq->route, &err);
    if (!rq->sv) {
        *a = status_answer(err.code, "%s", err.msg);
        return true;
    }
    served *sv = rq->sv;
    size_t json_len;
    /* A bad Inference-Header-Content-Length is a 400 like a bad body. */
    if (oip_json_len(rq->json_len, rq->len, &json_len, &err) != DL_OK ||
        oip_parse_infer(rq->body, rq->len, json_len, sv->conf, sv->in_dim, &rq->in, &err) !=
            DL_OK) {
        *a = status_answer(err.code, "%s", err.msg);   /* 400, or 500 out of memory */
        stats_request(h->deps->st, sv->name, sv->version, false, 0, 0, 0,
                      (dl_time_now() - rq->arrival) * 1e6);
        return true;
    }
    infer_req *q = &rq->q;   /* zeroed with rq */
    dl_strlcpy(q->model, sv->name, sizeof(q->model));
    q->version = sv->version;
    q->n = rq->in.batch;
    q->timeout_us = rq->in.timeout_us;
    q->x = rq->in.x;   /* raw: the batcher scales its batch */
    q->sv = sv;        /* pinned: the version whose input size we checked */
    q->on_done = infer_done;
    q->ctx = rq;
    rq->h = h;
    rq->c = c;
    rq->queued = true;
    batcher *bat = h->deps->bat;
    if (!open_batch && batcher_run_now(bat, q)) {   /* answered on this thread: nothing to wait for */
        rq->arriving = false;
        batcher_arriving(bat, -1);
        *a = infer_answer(h, rq);
        return true;
    }
    /* Withdrawn after the submission, so that its batch waits for it; rq
     * may be answered by then (bat, not rq, is used). */
    rq->arriving = false;
    if (!hold(bat, rq))
        queue_suspended(h, c, rq);
    batcher_arriving(bat, -1);
    return false;
}

/* ---- repository, server, status ----------------------------------------- */

/* load / unload take an empty body or a JSON object (parameters ignored). */
static answer repo_change(http_server *h, request *rq, bool load)
{
    if (rq->len > 0) {
        json_error_t je;
        json_t *j = json_loadb(rq->body, rq->len, 0, &je);
        bool object = json_is_object(j);
        json_decref(j);
        if (!object)
            return status_answer(DL_ERR_INVALID, "the body must be empty or a JSON object");
    }
    dl_err err = {0};
    dl_status st = load ? registry_load(h->deps->reg, rq->route.model, &err)
                        : registry_unload(h->deps->reg, rq->route.model, &err);
    if (st == DL_OK) {
        DL_LOG(DL_LOG_NOTICE, "http", "model '%s' %s", rq->route.model,
               load ? "loaded" : "unloaded");
        return json_answer(200, json_object());
    }
    return status_answer(st, "%s", err.msg);   /* unknown model: 404; refused: 400 */
}

static answer repo_index(http_server *h)
{
    json_t *status = registry_status(h->deps->reg);
    json_t *index = status ? oip_repository_index(status) : NULL;
    json_decref(status);
    return json_answer(200, index);
}

static answer server_metadata(http_server *h)
{
    return json_answer(200, json_pack("{s:s, s:s, s:[s, s, s, s, s, s]}", "name", "dlserve",
                                      "version",
                                      h->deps->server_version ? h->deps->server_version
                                                              : DL_VERSION_STRING,
                                      "extensions", "model_repository", "metrics", "status",
                                      "binary_tensor_data", "statistics",
                                      "model_configuration"));
}

static bool server_ready(http_server *h)
{
    const http_deps *d = h->deps;
    return d->ready ? d->ready(d->ctx) : registry_ready(d->reg);
}

static answer status(http_server *h)
{
    const http_deps *d = h->deps;
    pthread_mutex_lock(&h->mu);
    int64_t inflight = h->inflight - 1;   /* not counting this request */
    pthread_mutex_unlock(&h->mu);
    json_t *o = json_pack("{s:s, s:f, s:b, s:o, s:o, s:o, s:{s:I, s:b, s:b}}", "version",
                          d->server_version ? d->server_version : DL_VERSION_STRING,
                          "uptime_seconds", dl_time_now() - d->start_time, "ready",
                          server_ready(h), "models", registry_status(d->reg), "batcher",
                          batcher_status(d->bat), "counters", stats_json(d->st), "http",
                          "requests_in_flight", (json_int_t)inflight, "tls",
                          d->conf->tls_cert[0] != '\0', "auth", d->conf->token[0] != '\0');
    json_t *extra = d->status_extra ? d->status_extra(d->ctx) : NULL;
    if (o && json_is_object(extra))
        json_object_update_missing(o, extra);   /* extras never hide the core keys */
    json_decref(extra);
    return json_answer(200, o);
}

static answer metrics(http_server *h)
{
    answer a = {.code = 200, .ctype = CT_METRICS};
    char *extra = h->deps->metrics_extra ? h->deps->metrics_extra(h->deps->ctx) : NULL;
    a.body = stats_prometheus(h->deps->st, extra);
    free(extra);
    if (!a.body)
        return status_answer(DL_ERR_NOMEM, "out of memory");
    return a;
}

/* A model's statistics or configuration (http_stats.c). */
static answer model_json(http_server *h, const oip_route *r,
                         dl_status (*get)(const http_deps *, const char *, int64_t, json_t **,
                                          dl_err *))
{
    json_t *j;
    dl_err err = {0};
    if (get(h->deps, r->model, r->version, &j, &err) != DL_OK)
        return status_answer(err.code, "%s", err.msg);
    return json_answer(200, j);
}

/* ---- the status page ------------------------------------------------------ */

/* An embedded file of the page: GET / is index.html (only there, where the
 * token is asked for), GET /ui/{file} the rest. */
static answer page_file(const char *name, bool top)
{
    const ui_asset *f = top == (strcmp(name, "index.html") == 0) ? ui_asset_find(name) : NULL;
    if (!f)
        return status_answer(DL_ERR_NOT_FOUND, "no such file: /ui/%.100s", name);
    return (answer){.code = 200, .body = (char *)f->data, .len = f->len, .ctype = f->ctype,
                    .page = true};
}

static answer training(http_server *h)
{
    json_t *j = status_training(h->deps->reg, h->deps->models_dir ? h->deps->models_dir : "");
    return j ? json_answer(200, j) : status_answer(DL_ERR_NOMEM, "out of memory");
}

/* The answer to a request whose body is complete, in *a; false when it
 * comes later: an infer request waits in the batcher. */
static bool dispatch(http_server *h, struct MHD_Connection *c, request *rq, answer *a)
{
    if (rq->too_big) {
        *a = status_answer(DL_ERR_TOO_LARGE, "the body is over http.max_body_bytes (%lld)",
                           (long long)h->deps->conf->max_body_bytes);
        return true;
    }
    if (rq->nomem) {
        *a = status_answer(DL_ERR_NOMEM, "out of memory for the request body");
        return true;
    }
    switch (rq->route.kind) {
    case OIP_ROUTE_INFER:       return infer_start(h, c, rq, a);
    case OIP_ROUTE_LIVE:        *a = json_answer(200, json_pack("{s:b}", "live", 1)); break;
    case OIP_ROUTE_READY: {
        bool ready = server_ready(h);
        *a = json_answer(ready ? 200 : 503, json_pack("{s:b}", "ready", ready));
        break;
    }
    case OIP_ROUTE_SERVER:      *a = server_metadata(h); break;
    case OIP_ROUTE_MODEL:       *a = model_metadata(h, &rq->route); break;
    case OIP_ROUTE_MODEL_READY: *a = model_ready(h, &rq->route); break;
    case OIP_ROUTE_REPO_INDEX:  *a = repo_index(h); break;
    case OIP_ROUTE_REPO_LOAD:   *a = repo_change(h, rq, true); break;
    case OIP_ROUTE_REPO_UNLOAD: *a = repo_change(h, rq, false); break;
    case OIP_ROUTE_MODEL_STATS:  *a = model_json(h, &rq->route, http_model_stats); break;
    case OIP_ROUTE_MODEL_CONFIG: *a = model_json(h, &rq->route, http_model_config); break;
    case OIP_ROUTE_METRICS:     *a = metrics(h); break;
    case OIP_ROUTE_STATUS:      *a = status(h); break;
    case OIP_ROUTE_PAGE:        *a = page_file("index.html", true); break;
    case OIP_ROUTE_PAGE_FILE:   *a = page_file(rq->route.model, false); break;
    case OIP_ROUTE_TRAINING:    *a = training(h); break;
    case OIP_ROUTE_NONE:        *a = status_answer(DL_ERR_NOT_FOUND, "not found"); break;
    }
    return true;
}

/* ---- the request cycle --------------------------------------------------- */

/* Compares in time that depends only on the token's length. */
static bool token_equal(const char *given, const char *want)
{
    size_t n = strlen(want), m = strlen(given);
    volatile unsigned char diff = (unsigned char)(n != m);
    for (size_t i = 0; i < n; i++)
        diff |= (unsigned char)(want[i] ^ (i < m ? given[i] : 0));
    return diff == 0;
}

/* The bearer token when http.token is set. The status page also takes it
 * as ?token=, since a browser sends no header when it opens a link; the
 * page's own requests carry it as a bearer token. */
static bool authorized(const http_server *h, struct MHD_Connection *c, oip_route_kind kind)
{
    const char *token = h->deps->conf->token;
    if (!token[0])
        return true;
    const char *q = kind == OIP_ROUTE_PAGE
                        ? MHD_lookup_connection_value(c, MHD_GET_ARGUMENT_KIND, "token")
                        : NULL;
    if (q && token_equal(q, token))
        return true;
    const char *v = MHD_lookup_connection_value(c, MHD_HEADER_KIND, MHD_HTTP_HEADER_AUTHORIZATION);
    if (!v || strncasecmp(v, "Bearer ", 7) != 0)
        return false;
    for (v += 7; *v == ' '; v++)
        ;
    return token_equal(v, token);
}

static enum MHD_Result add_length(void *cls, enum MHD_ValueKind kind, const char *key,
                                  const char *value)
{
    (void)kind;
    *(size_t *)cls += strlen(key) + (value ? strlen(value) : 0) + 2;
    return MHD_YES;
}

/* The request target's length: MHD gives the path, the query apart. */
static size_t url_length(struct MHD_Connection *c, const char *url)
{
    size_t n = strlen(url);
    MHD_get_connection_values(c, MHD_GET_ARGUMENT_KIND, add_length, &n);
    return n;
}

/* Refusals for the server's limits: connections (503, then close) and URL
 * length (414). */
static bool over_limits(http_server *h, struct MHD_Connection *c, const char *url, answer *a)
{
    int64_t max = h->deps->conf->max_connections;
    if (max > 0 && atomic_load(&h->conns) > max) {
        *a = status_answer(DL_ERR_UNAVAILABLE, "too many connections (http.max_connections %lld)",
                           (long long)max);
        a->hname = MHD_HTTP_HEADER_CONNECTION;
        a->hvalue = "close";
        return true;
    }
    if (url_length(c, url) > HTTP_URL_MAX) {
        *a = error_answer(414, "the URL is over %d bytes", HTTP_URL_MAX);
        return true;
    }
    return false;
}

/* An answer due before the body is read (stopping, unknown path, wrong
 * method, no token, declared body too large); false when there is none. */
static bool early_answer(http_server *h, struct MHD_Connection *c, const char *url,
                         const char *method, request *rq, answer *a)
{
    oip_route_kind kind = oip_route_parse(url, &rq->route);
    rq->json_len = MHD_lookup_connection_value(c, MHD_HEADER_KIND, OIP_HEADER_JSON_LEN);
    if (atomic_load(&h->stopping)) {
        *a = status_answer(DL_ERR_UNAVAILABLE, "the server is stopping");
        return true;
    }
    if (over_limits(h, c, url, a))
        return true;
    /* The page's scripts and styles are the same in every dlserve and
     * carry no data: a browser fetches them without the token. */
    bool open = kind == OIP_ROUTE_LIVE || kind == OIP_ROUTE_READY || kind == OIP_ROUTE_PAGE_FILE;
    if (!open && !authorized(h, c, kind)) {
        *a = error_answer(401, kind == OIP_ROUTE_PAGE
                                   ? "a valid token is required: open /?token=TOKEN"
                                   : "a valid bearer token is required");
        a->hname = MHD_HTTP_HEADER_WWW_AUTHENTICATE;
        a->hvalue = "Bearer realm=\"dlserve\"";
        return true;
    }
    if (kind == OIP_ROUTE_NONE) {
        *a = status_answer(DL_ERR_NOT_FOUND, "no such path: %.200s", url);
        return true;
    }
    if (!oip_route_method_ok(kind, method)) {
        *a = error_answer(405, "%.200s answers %s only", url, oip_route_allow(kind));
        a->hname = MHD_HTTP_HEADER_ALLOW;
        a->hvalue = oip_route_allow(kind);
        return true;
    }
    const char *cl =
        MHD_lookup_connection_value(c, MHD_HEADER_KIND, MHD_HTTP_HEADER_CONTENT_LENGTH);
    unsigned long long declared = cl ? strtoull(cl, NULL, 10) : 0;
    if (declared > (unsigned long long)h->deps->conf->max_body_bytes) {
        *a = status_answer(DL_ERR_TOO_LARGE,
                           "the body (%.20s bytes) is over http.max_body_bytes (%lld)", cl,
                           (long long)h->deps->conf->max_body_bytes);
        return true;
    }
    rq->declared = (size_t)declared;
    return false;
}

static size_t drain_limit(const http_server *h);

/* Appends upload data to the request body. Past the limit the rest is
 * read and dropped (a chunked body has no Content-Length to refuse up
 * front), up to the drain limit; false then: answer 413 at once. */
static bool take_body(http_server *h, request *rq, const char *data, size_t n)
{
    size_t max = (size_t)h->deps->conf->max_body_bytes;
    if (!rq->too_big && !rq->nomem && n > max - rq->len) {
        rq->too_big = true;
        free(rq->body);
        rq->body = NULL;
        rq->len = rq->cap = 0;
    }
    if (rq->too_big || rq->nomem) {
        rq->dropped += n;
        return rq->dropped <= drain_limit(h);
    }
    if (rq->len + n > rq->cap) {
        /* One allocation for a body of the declared length. */
        size_t cap = rq->cap ? rq->cap : rq->declared > 0 ? rq->declared : 4096;
        while (cap < rq->len + n)
            cap *= 2;
        char *p = realloc(rq->body, cap);
        if (!p) {
            rq->nomem = true;
            rq->dropped += n;
            return true;
        }
        rq->body = p;
        rq->cap = cap;
    }
    memcpy(rq->body + rq->len, data, n);
    rq->len += n;
    return true;
}

/* Body bytes read and discarded after an early answer before it is sent:
 * twice the body limit. A larger body gets the answer at once (and the
 * connection closes: a client still sending may see a reset). */
static size_t drain_limit(const http_server *h)
{
    return 2 * (size_t)h->deps->conf->max_body_bytes;
}

/* Whether a body follows the headers that the client sends without
 * waiting for an answer: a declared length within the drain limit, or a
 * chunked body. A client that sent "Expect: 100-continue" waits for
 * one: it gets the answer at once. */
static bool body_follows(const http_server *h, struct MHD_Connection *c)
{
    const char *expect = MHD_lookup_connection_value(c, MHD_HEADER_KIND, MHD_HTTP_HEADER_EXPECT);
    if (expect && strncasecmp(expect, "100-continue", 12) == 0)
        return false;
    const char *cl =
        MHD_lookup_connection_value(c, MHD_HEADER_KIND, MHD_HTTP_HEADER_CONTENT_LENGTH);
    if (cl) {
        unsigned long long n = strtoull(cl, NULL, 10);
        return n > 0 && n <= drain_limit(h);
    }
    const char *te =
        MHD_lookup_connection_value(c, MHD_HEADER_KIND, MHD_HTTP_HEADER_TRANSFER_ENCODING);
    size_t n = te ? strlen(te) : 0;   /* chunked comes last */
    return n >= 7 && strcasecmp(te + n - 7, "chunked") == 0;
}

/* Keeps a until the body has been read (the access handler's last call
 * sends it); false when it cannot be kept (out of memory): send it now. */
static bool hold_answer(request *rq, answer a)
{
    rq->held = malloc(sizeof(*rq->held));
    if (!rq->held)
        return false;
    *rq->held = a;
    return true;
}

/* The held answer, taken from rq. */
static answer take_held(request *rq)
{
    answer a = *rq->held;
    free(rq->held);
    rq->held = NULL;
    return a;
}

/* Frees rq and what it holds (its infer request has completed). */
static void request_free(request *rq)
{
    if (rq->held)
        free(take_held(rq).body);
    if (rq->queued)
        free(rq->q.out);
    oip_request_fini(&rq->in);
    served_release(rq->sv);
    free(rq->body);
    free(rq);
}

static request *begin(http_server *h)
{
    request *rq = calloc(1, sizeof(*rq));
    if (!rq)
        return NULL;
    rq->arrival = dl_time_now();
    rq->arriving = true;   /* withdrawn when queued or answered */
    batcher_arriving(h->deps->bat, +1);
    pthread_mutex_lock(&h->mu);
    h->inflight++;
    pthread_mutex_unlock(&h->mu);
    return rq;
}

static enum MHD_Result on_request(void *cls, struct MHD_Connection *c, const char *url,
                                  const char *method, const char *version,
                                  const char *upload, size_t *upload_size, void **con_cls)
{
    (void)version;
    http_server *h = cls;
    request *rq = *con_cls;
    if (!rq) {
        /* First call: headers only. Refusals go out before any body. */
        if (!(rq = *con_cls = begin(h)))
            return MHD_NO;
        trace_take(c, rq);
        answer a;
        if (!early_answer(h, c, url, method, rq, &a))
            return MHD_YES;
        if (body_follows(h, c) && hold_answer(rq, a))
            return MHD_YES;
        return respond(h, c, rq, method, url, a);
    }
    if (*upload_size > 0) {
        size_t n = *upload_size;
        *upload_size = 0;
        if (rq->held) {   /* discarded: the answer is already decided */
            rq->dropped += n;
            return rq->dropped <= drain_limit(h) ? MHD_YES
                                                 : respond(h, c, rq, method, url, take_held(rq));
        }
        if (take_body(h, rq, upload, n))
            return MHD_YES;
        return respond(h, c, rq, method, url,
                       status_answer(DL_ERR_TOO_LARGE, "the body is over http.max_body_bytes (%lld)",
                                     (long long)h->deps->conf->max_body_bytes));
    }
    answer a;
    if (rq->held)   /* the body was read and discarded */
        a = take_held(rq);
    else if (rq->holds_batch) {   /* called again: its loop's pass has ended */
        if (!run_held(h, c, rq, &a))
            return MHD_YES;   /* waiting for an instance, or queued */
    } else if (rq->hold == HOLD_WAITING)
        return MHD_YES;   /* its batch has not run yet: called again */
    else if (rq->hold == HOLD_QUEUE) {
        rq->hold = HOLD_NONE;
        queue_suspended(h, c, rq);
        return MHD_YES;
    } else if (rq->queued)   /* called again: its batch has run */
        a = infer_answer(h, rq);
    else if (!dispatch(h, c, rq, &a))
        return MHD_YES;   /* suspended until its batch completes */
    return respond(h, c, rq, method, url, a);
}

static void on_completed(void *cls, struct MHD_Connection *c, void **con_cls,
                         enum MHD_RequestTerminationCode toe)
{
    (void)c;
    (void)toe;
    http_server *h = cls;
    request *rq = *con_cls;
    if (!rq)
        return;
    *con_cls = NULL;
    if (rq->arriving)
        batcher_arriving(h->deps->bat, -1);
    if (rq->holds_batch) {   /* gone before its batch ran: the others queue themselves */
        drop_gone(rq);
        close_batch(rq, HOLD_QUEUE);
    }
    if (rq->hold == HOLD_WAITING)
        rq->gone = true;   /* in its held batch's list: freed when that closes */
    else
        request_free(rq);
    pthread_mutex_lock(&h->mu);
    h->inflight--;
    pthread_cond_broadcast(&h->cv);
    pthread_mutex_unlock(&h->mu);
}

static void on_connection(void *cls, struct MHD_Connection *c, void **socket_context,
                          enum MHD_ConnectionNotificationCode toe)
{
    (void)c;
    (void)socket_context;
    http_server *h = cls;
    atomic_fetch_add(&h->conns, toe == MHD_CONNECTION_NOTIFY_STARTED ? 1 : -1);
}

static void on_mhd_log(void *cls, const char *fmt, va_list ap)
{
    (void)cls;
    char msg[512];
    vsnprintf(msg, sizeof(msg), fmt, ap);
    size_t n = strlen(msg);
    while (n > 0 && (msg[n - 1] == '\n' || msg[n - 1] == '\r'))
        msg[--n] = '\0';
    DL_LOG(DL_LOG_WARNING, "http", "microhttpd: %s", msg);
}

/* ---- start and stop ------------------------------------------------------ */

/* conf->address:conf->port as a socket address (IPv4 or IPv6). */
static dl_status bind_address(const dl_http_conf *conf, struct sockaddr_storage *ss,
                              unsigned *flags, dl_err *err)
{
    memset(ss, 0, sizeof(*ss));
    if (conf->port < 0 || conf->port > 65535)
        return dl_err_set(err, DL_ERR_INVALID, "http.port %lld is not in 0..65535",
                          (long long)conf->port);
    struct sockaddr_in *v4 = (struct sockaddr_in *)ss;
    struct sockaddr_in6 *v6 = (struct sockaddr_in6 *)ss;
    if (inet_pton(AF_INET, conf->address, &v4->sin_addr) == 1) {
        v4->sin_family = AF_INET;
        v4->sin_port = htons((uint16_t)conf->port);
        return DL_OK;
    }
    if (inet_pton(AF_INET6, conf->address, &v6->sin6_addr) == 1) {
        v6->sin6_family = AF_INET6;
        v6->sin6_port = htons((uint16_t)conf->port);
        *flags |= MHD_USE_IPv6;
        return DL_OK;
    }
    return dl_err_set(err, DL_ERR_INVALID, "http.address '%s' is not an IPv4 or IPv6 address",
                      conf->address);
}

/* Reads the certificate and key named in conf, if any. */
static dl_status load_tls(http_server *h, const dl_http_conf *conf, unsigned *flags, dl_err *err)
{
    bool cert = conf->tls_cert[0] != '\0', key = conf->tls_key[0] != '\0';
    if (!cert && !key)
        return DL_OK;
    if (!cert || !key)
        return dl_err_set(err, DL_ERR_INVALID, "TLS needs both http.tls_cert and http.tls_key");
    if (MHD_is_feature_supported(MHD_FEATURE_TLS) != MHD_YES)
        return dl_err_set(err, DL_ERR_INVALID, "this libmicrohttpd was built without TLS");
    size_t len;
    dl_status st = dl_file_read(conf->tls_cert, &h->tls_cert, &len, err);
    if (st != DL_OK)
        return dl_err_prefix(err, "http.tls_cert");
    st = dl_file_read(conf->tls_key, &h->tls_key, &len, err);
    if (st != DL_OK)
        return dl_err_prefix(err, "http.tls_key");
    *flags |= MHD_USE_TLS;
    return DL_OK;
}

static void server_free(http_server *h)
{
    if (!h)
        return;
    if (h->listen_fd >= 0)
        close(h->listen_fd);
    free(h->tls_cert);
    if (h->tls_key) {
        /* The private key does not outlive its use. */
        memset(h->tls_key, 0, strlen(h->tls_key));
        free(h->tls_key);
    }
    pthread_mutex_destroy(&h->mu);
    pthread_cond_destroy(&h->cv);
    free(h);
}

static struct MHD_Daemon *start_daemon(http_server *h, unsigned flags)
{
    struct MHD_OptionItem opt[4];
    int n = 0;
    if (flags & MHD_USE_TLS) {
        opt[n++] = (struct MHD_OptionItem){MHD_OPTION_HTTPS_MEM_CERT, 0, h->tls_cert};
        opt[n++] = (struct MHD_OptionItem){MHD_OPTION_HTTPS_MEM_KEY, 0, h->tls_key};
    }
    if (h->threads > 1)   /* MHD refuses a pool of one: its own thread is that */
        opt[n++] = (struct MHD_OptionItem){MHD_OPTION_THREAD_POOL_SIZE, h->threads, NULL};
    opt[n] = (struct MHD_OptionItem){MHD_OPTION_END, 0, NULL};
    /* The logger first, so that MHD's own messages about later options
     * reach it. */
    return MHD_start_daemon(flags, 0, NULL, NULL, on_request, h,
                            MHD_OPTION_EXTERNAL_LOGGER, on_mhd_log, NULL,
                            MHD_OPTION_NOTIFY_COMPLETED, on_completed, h,
                            MHD_OPTION_NOTIFY_CONNECTION, on_connection, h,
                            MHD_OPTION_CONNECTION_TIMEOUT, (unsigned)HTTP_IDLE_TIMEOUT_S,
                            MHD_OPTION_CONNECTION_LIMIT, h->max_conns + HTTP_ACCEPT_SLACK,
                            MHD_OPTION_ARRAY, opt, MHD_OPTION_END);
}

/* The listening socket at ss (SO_REUSEADDR, and IPv6 only for an IPv6
 * address, as libmicrohttpd would set them); its port into *port. */
static dl_status listen_on(const struct sockaddr_storage *ss, int *fd, int *port, dl_err *err)
{
    bool v6 = ss->ss_family == AF_INET6;
    socklen_t len = v6 ? sizeof(struct sockaddr_in6) : sizeof(struct sockaddr_in);
    int on = 1, s = socket(ss->ss_family, SOCK_STREAM | SOCK_CLOEXEC, 0);
    struct sockaddr_storage at;
    socklen_t atlen = sizeof(at);
    if (s < 0 || setsockopt(s, SOL_SOCKET, SO_REUSEADDR, &on, sizeof(on)) != 0 ||
        (v6 && setsockopt(s, IPPROTO_IPV6, IPV6_V6ONLY, &on, sizeof(on)) != 0) ||
        bind(s, (const struct sockaddr *)ss, len) != 0 || listen(s, SOMAXCONN) != 0 ||
        getsockname(s, (struct sockaddr *)&at, &atlen) != 0) {
        dl_err_set(err, DL_ERR_IO, "%s", strerror(errno));
        if (s >= 0)
            close(s);
        return DL_ERR_IO;
    }
    *fd = s;
    *port = ntohs(v6 ? ((struct sockaddr_in6 *)&at)->sin6_port
                     : ((struct sockaddr_in *)&at)->sin_port);
    return DL_OK;
}

/* Accepts connections and gives them to MHD's pool, which spreads them
 * over its event loops. Left to accept for themselves, the loops raced for
 * the listening socket, and one of them often took every connection of a
 * burst (all 32 of a benchmark's) while the others stayed idle. */
static void *acceptor_main(void *arg)
{
    http_server *h = arg;
    pthread_setname_np(pthread_self(), "http-accept");
    const struct timespec retry_pause = {.tv_nsec = 10 * 1000 * 1000};   /* before a retry */
    bool short_of_fds = false;
    for (;;) {
        struct sockaddr_storage a;
        socklen_t alen = sizeof(a);
        int fd = accept4(h->listen_fd, (struct sockaddr *)&a, &alen, SOCK_NONBLOCK | SOCK_CLOEXEC);
        if (fd >= 0) {
            short_of_fds = false;
            /* At the limit this one waits here unread and the next ones in
             * the listen backlog (as when MHD accepted), rather than be
             * accepted only to be closed. */
            while (atomic_load(&h->conns) >= (long long)h->max_conns &&
                   !atomic_load(&h->stopping))
                nanosleep(&retry_pause, NULL);
            if (atomic_load(&h->stopping)) {
                close(fd);
                break;
            }
            MHD_add_connection(h->d, fd, (struct sockaddr *)&a, alen);   /* closes fd if refused */
            continue;
        }
        if (atomic_load(&h->stopping))   /* http_stop shut the socket down */
            break;
        if (errno == EBADF || errno == ENOTSOCK || errno == EINVAL) {   /* not a socket now */
            DL_LOG(DL_LOG_ERR, "http", "accept: %s; no more connections are taken",
                   strerror(errno));
            break;
        }
        if (errno == EMFILE || errno == ENFILE || errno == ENOBUFS || errno == ENOMEM) {
            if (!short_of_fds)
                DL_LOG(DL_LOG_WARNING, "http", "cannot accept a connection (%s): retrying",
                       strerror(errno));
            short_of_fds = true;
            nanosleep(&retry_pause, NULL);
        }
        /* else EINTR, or an error of that one connection (ECONNABORTED,
         * EPROTO, EPERM, ...), which accept(2) says to take as EAGAIN */
    }
    return NULL;
}

/* As many connections as file descriptors allow, less a reserve (MHD's
 * default, FD_SETSIZE - 4, would turn clients away at 1,020 whatever the
 * descriptor limit). */
static unsigned connection_limit(void)
{
    struct rlimit rl;
    rlim_t fds = getrlimit(RLIMIT_NOFILE, &rl) == 0 ? rl.rlim_cur : 1024;
    if (fds == RLIM_INFINITY || fds > 1000000)
        fds = 1000000;
    return fds > 2 * HTTP_FD_RESERVE ? (unsigned)(fds - HTTP_FD_RESERVE) : (unsigned)(fds / 2);
}

dl_status http_start(const http_deps *deps, http_server **out, int *port, dl_err *err)
{
    *out = NULL;
    const dl_http_conf *conf = deps->conf;
    if (conf->max_body_bytes < 1)
        return dl_err_set(err, DL_ERR_INVALID, "http.max_body_bytes must be positive");
    http_server *h = calloc(1, sizeof(*h));
    if (!h)
        return dl_err_set(err, DL_ERR_NOMEM, "http server");
    h->deps = deps;
    h->listen_fd = -1;
    atomic_init(&h->stopping, false);
    pthread_mutex_init(&h->mu, NULL);
    pthread_cond_init(&h->cv, NULL);
    long cores = sysconf(_SC_NPROCESSORS_ONLN);
    h->threads = conf->threads > 0 ? (int)conf->threads : cores > 0 ? (int)cores : 1;
    h->max_conns = connection_limit();
    if (conf->max_connections > 0 && conf->max_connections + HTTP_OVER_CONNS < h->max_conns)
        h->max_conns = (unsigned)(conf->max_connections + HTTP_OVER_CONNS);
    /* ITC (inter-thread communication, which MHD_ALLOW_SUSPEND_RESUME
     * implies too): how MHD_resume_connection and MHD_add_connection wake
     * the event loops. The listening socket is the acceptor's. */
    unsigned flags = MHD_USE_EPOLL_INTERNAL_THREAD | MHD_ALLOW_SUSPEND_RESUME |
                     MHD_USE_ERROR_LOG | MHD_USE_ITC | MHD_USE_NO_LISTEN_SOCKET;
    struct sockaddr_storage ss;
    int bound = 0;
    dl_status st = bind_address(conf, &ss, &flags, err);
    if (st == DL_OK)
        st = load_tls(h, conf, &flags, err);
    if (st == DL_OK && listen_on(&ss, &h->listen_fd, &bound, err) != DL_OK)
        st = dl_err_prefix(err, "cannot listen on %s port %lld", conf->address,
                           (long long)conf->port);
    if (st == DL_OK) {
        errno = 0;
        h->d = start_daemon(h, flags);
        if (!h->d)
            st = dl_err_set(err, DL_ERR_IO, "cannot start the HTTP event loops%s%s",
                            errno ? ": " : "", errno ? strerror(errno) : " (see the log)");
    }
    if (st == DL_OK && pthread_create(&h->acceptor, NULL, acceptor_main, h) != 0)
        st = dl_err_set(err, DL_ERR_IO, "cannot start the HTTP acceptor thread");
    if (st != DL_OK) {
        if (h->d)
            MHD_stop_daemon(h->d);
        server_free(h);
        return st;
    }
    if (port)
        *port = bound;
    DL_LOG(DL_LOG_NOTICE, "http",
           "listening on %s://%s%s%s:%d, %d thread%s, up to %u connections%s",
           flags & MHD_USE_TLS ? "https" : "http", flags & MHD_USE_IPv6 ? "[" : "", conf->address,
           flags & MHD_USE_IPv6 ? "]" : "", bound, h->threads, h->threads == 1 ? "" : "s",
           h->max_conns, conf->token[0] ? ", bearer token required" : "");
    *out = h;
    return DL_OK;
}

void http_stop(http_server *h)
{
    if (!h)
        return;
    atomic_store(&h->stopping, true);
    shutdown(h->listen_fd, SHUT_RDWR);   /* accept returns: no new connections */
    pthread_join(h->acceptor, NULL);
    /* Requests already begun are answered (with Connection: close); new
     * ones on open connections get 503. */
    struct timespec until;
    clock_gettime(CLOCK_REALTIME, &until);
    until.tv_sec += HTTP_DRAIN_S;
    pthread_mutex_lock(&h->mu);
    int rc = 0;
    while (h->inflight > 0 && rc != ETIMEDOUT)
        rc = pthread_cond_timedwait(&h->cv, &h->mu, &until);
    int64_t left = h->inflight;
    if (h->waiting > 0)
        DL_LOG(DL_LOG_WARNING, "http", "waiting for the batcher to answer %lld requests",
               (long long)h->waiting);
    /* MHD must not stop with a connection suspended, and a request the
     * batcher holds is resumed only by its completion: wait for those
     * (after batcher_drain there are none). */
    while (h->waiting > 0)
        pthread_cond_wait(&h->cv, &h->mu);
    pthread_mutex_unlock(&h->mu);
    if (left > 0)
        DL_LOG(DL_LOG_WARNING, "http", "stopping with %lld requests unanswered after %d s",
               (long long)left, HTTP_DRAIN_S);
    MHD_stop_daemon(h->d);
    server_free(h);
}
