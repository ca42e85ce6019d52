/* http_request.c: the HTTP request cycle on libmicrohttpd: a request's
 * first call (limits, token, route and method checked before any body),
 * the body read or drained, refusals kept until it has been, the answer
 * queued with its headers, logged and counted; and its completion. */
#define _GNU_SOURCE   /* strncasecmp; microhttpd.h's socket types */
#include "serve/http/http_int.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>

/* ---- the log line of an answer ------------------------------------------ */

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

/* The handler label of dlserve_http_responses_total: the route's name. */
static const char *handler_name(oip_route_kind kind)
{
    static const char *const names[] = {
        [OIP_ROUTE_NONE] = "unknown",          [OIP_ROUTE_LIVE] = "health_live",
        [OIP_ROUTE_READY] = "health_ready",    [OIP_ROUTE_SERVER] = "server_metadata",
        [OIP_ROUTE_MODEL] = "model_metadata",  [OIP_ROUTE_MODEL_READY] = "model_ready",
        [OIP_ROUTE_INFER] = "infer",           [OIP_ROUTE_MODEL_STATS] = "model_stats",
        [OIP_ROUTE_MODEL_CONFIG] = "model_config", [OIP_ROUTE_REPO_INDEX] = "repository_index",
        [OIP_ROUTE_REPO_LOAD] = "repository_load", [OIP_ROUTE_REPO_UNLOAD] = "repository_unload",
        [OIP_ROUTE_METRICS] = "metrics",       [OIP_ROUTE_STATUS] = "status",
        [OIP_ROUTE_PAGE] = "page",             [OIP_ROUTE_PAGE_FILE] = "page_file",
        [OIP_ROUTE_TRAINING] = "training",
        [OIP_ROUTE_GENERATE] = "generate",     [OIP_ROUTE_GENERATE_STREAM] = "generate_stream",
        [OIP_ROUTE_COMPLETIONS] = "completions", [OIP_ROUTE_OPENAI_MODELS] = "models",
    };
    size_t k = (size_t)kind;
    return k < sizeof(names) / sizeof(names[0]) && names[k] ? names[k] : "unknown";
}

const char *http_method_name(const char *method)
{
    static const char *const known[] = {"GET", "HEAD", "POST", "PUT", "DELETE",
                                        "OPTIONS", "PATCH", "TRACE", "CONNECT"};
    for (size_t i = 0; method && i < sizeof(known) / sizeof(known[0]); i++)
        if (strcmp(method, known[i]) == 0)
            return known[i];
    return "other";
}

/* Queues a (taking its body), counts and logs it. */
static enum MHD_Result respond(http_server *h, struct MHD_Connection *c, const request *rq,
                               const char *method, const char *url, answer a)
{
    static const char oom[] = "{\"error\":\"out of memory\"}";
    bool vary = !a.events && http_answer_compress(c, &a);
    size_t len = a.len ? a.len : a.body ? strlen(a.body) : 0;
    struct MHD_Response *resp =
        a.events ? MHD_create_response_from_callback(MHD_SIZE_UNKNOWN, 4096, http_generate_read,
                                                     a.events, NULL)
        : a.body ? MHD_create_response_from_buffer(len, a.body,
                                                   a.page && !a.gzip ? MHD_RESPMEM_PERSISTENT
                                                                     : MHD_RESPMEM_MUST_FREE)
                 : MHD_create_response_from_buffer(sizeof(oom) - 1, (void *)oom,
                                                   MHD_RESPMEM_PERSISTENT);
    if (!resp) {
        if (!a.page || a.gzip)
            free(a.body);
        return MHD_NO;
    }
    if (a.events)
        MHD_add_response_header(resp, MHD_HTTP_HEADER_CACHE_CONTROL, "no-cache");
    if (a.page) {
        MHD_add_response_header(resp, MHD_HTTP_HEADER_CACHE_CONTROL, PAGE_CACHE);
        MHD_add_response_header(resp, "Content-Security-Policy", PAGE_CSP);
        MHD_add_response_header(resp, "X-Content-Type-Options", "nosniff");
    }
    MHD_add_response_header(resp, MHD_HTTP_HEADER_CONTENT_TYPE,
                            a.json_len ? CT_BINARY : a.ctype ? a.ctype : CT_JSON);
    trace_answer(resp, &rq->trace);
    if (vary)
        MHD_add_response_header(resp, MHD_HTTP_HEADER_VARY, MHD_HTTP_HEADER_ACCEPT_ENCODING);
    if (a.gzip)
        MHD_add_response_header(resp, MHD_HTTP_HEADER_CONTENT_ENCODING, "gzip");
    if (a.hname)
        MHD_add_response_header(resp, a.hname, a.hvalue);
    if (a.json_len) {
        char n[24];
        snprintf(n, sizeof(n), "%zu", a.json_len);
        MHD_add_response_header(resp, OIP_HEADER_JSON_LEN, n);
    }
    /* Every 503 says when to come back (RFC 9110 15.6.4). */
    if (a.code == 503)
        MHD_add_response_header(resp, MHD_HTTP_HEADER_RETRY_AFTER, HTTP_RETRY_AFTER);
    /* While stopping, keep-alive connections end with this answer. */
    if (atomic_load(&h->stopping))
        MHD_add_response_header(resp, MHD_HTTP_HEADER_CONNECTION, "close");
    enum MHD_Result r = MHD_queue_response(c, (unsigned)a.code, resp);
    MHD_destroy_response(resp);
    stats_http(h->deps->st, http_method_name(method), handler_name(rq->route.kind), a.code);
    log_answer_ids(rq, method, url, &a);
    return r;
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
        *a = http_status_answer(DL_ERR_UNAVAILABLE,
                                "too many connections (http.max_connections %lld)",
                                (long long)max);
        a->hname = MHD_HTTP_HEADER_CONNECTION;
        a->hvalue = "close";
        return true;
    }
    if (url_length(c, url) > HTTP_URL_MAX) {
        *a = http_error_answer(414, "the URL is over %d bytes", HTTP_URL_MAX);
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
    rq->post = strcmp(method, "POST") == 0;
    rq->json_len = MHD_lookup_connection_value(c, MHD_HEADER_KIND, OIP_HEADER_JSON_LEN);
    if (atomic_load(&h->stopping)) {
        *a = http_status_answer(DL_ERR_UNAVAILABLE, "the server is stopping");
        return true;
    }
    if (over_limits(h, c, url, a))
        return true;
    /* The page's scripts and styles are the same in every dlserve and
     * carry no data: a browser fetches them without the token. */
    bool open = kind == OIP_ROUTE_LIVE || kind == OIP_ROUTE_READY || kind == OIP_ROUTE_PAGE_FILE;
    if (!open && !authorized(h, c, kind)) {
        *a = http_error_answer(401, kind == OIP_ROUTE_PAGE
                                        ? "a valid token is required: open /?token=TOKEN"
                                        : "a valid bearer token is required");
        a->hname = MHD_HTTP_HEADER_WWW_AUTHENTICATE;
        a->hvalue = "Bearer realm=\"dlserve\"";
        return true;
    }
    if (kind == OIP_ROUTE_NONE) {
        *a = http_status_answer(DL_ERR_NOT_FOUND, "no such path: %.200s", url);
        return true;
    }
    if (!oip_route_method_ok(kind, method)) {
        *a = http_error_answer(405, "%.200s answers %s only", url, oip_route_allow(kind));
        a->hname = MHD_HTTP_HEADER_ALLOW;
        a->hvalue = oip_route_allow(kind);
        return true;
    }
    const char *ce =
        MHD_lookup_connection_value(c, MHD_HEADER_KIND, MHD_HTTP_HEADER_CONTENT_ENCODING);
    if (!http_body_coding(rq, ce)) {
        *a = http_error_answer(415, "Content-Encoding '%.60s' is not supported (gzip, deflate "
                               "or identity)", ce);
        a->hname = MHD_HTTP_HEADER_ACCEPT_ENCODING;   /* RFC 9110 15.5.16 */
        a->hvalue = "gzip, deflate";
        return true;
    }
    const char *cl =
        MHD_lookup_connection_value(c, MHD_HEADER_KIND, MHD_HTTP_HEADER_CONTENT_LENGTH);
    unsigned long long declared = cl ? strtoull(cl, NULL, 10) : 0;
    if (declared > (unsigned long long)h->deps->conf->max_body_bytes) {
        *a = http_status_answer(DL_ERR_TOO_LARGE,
                                "the body (%.20s bytes) is over http.max_body_bytes (%lld)", cl,
                                (long long)h->deps->conf->max_body_bytes);
        return true;
    }
    rq->declared = (size_t)declared;
    return false;
}

static bool linger(const http_server *h, request *rq, size_t n);

/* Appends upload data to the request body. Past the limit the rest is
 * read and dropped (a chunked body has no Content-Length to refuse up
 * front) while linger allows; false then: answer 413 at once. */
static bool take_body(http_server *h, request *rq, const char *data, size_t n)
{
    size_t max = (size_t)h->deps->conf->max_body_bytes;
    if (rq->z && !rq->too_big && !rq->nomem && !rq->bad_coding) {
        /* the limit holds for the encoded bytes too: no endless stream of
         * empty blocks */
        rq->coded += n;
        if (rq->coded > max)
            rq->too_big = true;
        else
            http_body_inflate(rq, data, n, max);
        return true;
    }
    if (rq->z || rq->bad_coding)   /* refused, or corrupt: the rest is dropped */
        return linger(h, rq, n);
    if (!rq->too_big && !rq->nomem && n > max - rq->len) {
        rq->too_big = true;
        free(rq->body);
        rq->body = NULL;
        rq->len = rq->cap = 0;
    }
    if (rq->too_big || rq->nomem)
        return linger(h, rq, n);
    if (rq->len + n > rq->cap) {
        /* One allocation for a body of the declared length. */
        size_t cap = rq->cap ? rq->cap : rq->declared > 0 ? rq->declared : 4096;
        while (cap < rq->len + n)
            cap *= 2;
        char *p = realloc(rq->body, cap);
        if (!p) {
            rq->nomem = true;
            return linger(h, rq, n);
        }
        rq->body = p;
        rq->cap = cap;
    }
    memcpy(rq->body + rq->len, data, n);
    rq->len += n;
    return true;
}

/* The most body bytes read and discarded after a refusal before it is
 * sent: far above the body limit. */
static size_t linger_bytes(const http_server *h)
{
    size_t four = 4 * (size_t)h->deps->conf->max_body_bytes;
    return four > HTTP_LINGER_BYTES ? four : HTTP_LINGER_BYTES;
}

/* Discards n body bytes after a refusal (or past the limit): true while
 * the rest is still read and dropped, for HTTP_LINGER_S from the first
 * byte dropped and up to linger_bytes (as nginx lingers on a refused
 * body), so that a client which sends its whole body before it reads
 * (Python's http.client and urllib) reads the answer. False past either
 * bound: the answer goes at once, and the connection closes after it (a
 * client still sending may see a reset). */
static bool linger(const http_server *h, request *rq, size_t n)
{
    double now = dl_time_now();
    if (rq->dropped == 0)
        rq->drop_since = now;
    rq->dropped += n;
    return rq->dropped <= linger_bytes(h) && now - rq->drop_since <= HTTP_LINGER_S;
}

/* Whether a body follows the headers that the client sends without
 * waiting for an answer: a declared length within linger_bytes, or a
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
        return n > 0 && n <= linger_bytes(h);
    }
    const char *te =
        MHD_lookup_connection_value(c, MHD_HEADER_KIND, MHD_HTTP_HEADER_TRANSFER_ENCODING);
    size_t n = te ? strlen(te) : 0;   /* chunked comes last */
    return n >= 7 && strcasecmp(te + n - 7, "chunked") == 0;
}

/* Keeps the refusal a until the body has been read and discarded (the
 * access handler's last call sends it); false when it cannot be kept (out
 * of memory): send it now. */
static bool keep_refusal(request *rq, answer a)
{
    rq->refusal = malloc(sizeof(*rq->refusal));
    if (!rq->refusal)
        return false;
    *rq->refusal = a;
    rq->stage = REQ_REFUSED_DRAINING;
    return true;
}

/* The kept refusal, taken from rq, which is back to REQ_READING. */
static answer take_refusal(request *rq)
{
    answer a = *rq->refusal;
    free(rq->refusal);
    rq->refusal = NULL;
    rq->stage = REQ_READING;
    return a;
}

void http_request_free(request *rq)
{
    if (rq->refusal)
        free(take_refusal(rq).body);
    free(rq->q.out);   /* NULL unless its batch ran */
    http_generate_closed(rq);
    oip_request_fini(&rq->in);
    http_body_fini(rq);
    served_release(rq->sv);
    free(rq->body);
    free(rq);
}

/* Whether rq is still announced to the batcher (batcher_arriving): from
 * begin until http_infer_start hands it over, or until its completion. */
static bool announced(const request *rq)
{
    return rq->stage == REQ_READING || rq->stage == REQ_REFUSED_DRAINING;
}

static request *begin(http_server *h)
{
    request *rq = calloc(1, sizeof(*rq));
    if (!rq)
        return NULL;
    rq->arrival = dl_time_now();
    rq->stage = REQ_READING;   /* announced: withdrawn when handed over or completed */
    batcher_arriving(h->deps->bat, +1);
    pthread_mutex_lock(&h->mu);
    h->inflight++;
    pthread_mutex_unlock(&h->mu);
    return rq;
}

/* Upload data: kept as the body, or discarded after a refusal or past the
 * limit; an answer once too much has come. */
static enum MHD_Result on_upload(http_server *h, struct MHD_Connection *c, request *rq,
                                 const char *method, const char *url, const char *upload,
                                 size_t n)
{
    if (rq->stage == REQ_REFUSED_DRAINING)   /* discarded: the answer is already decided */
        return linger(h, rq, n) ? MHD_YES : respond(h, c, rq, method, url, take_refusal(rq));
    if (take_body(h, rq, upload, n))
        return MHD_YES;
    return respond(h, c, rq, method, url,
                   http_status_answer(DL_ERR_TOO_LARGE,
                                      "the body is over http.max_body_bytes (%lld)",
                                      (long long)h->deps->conf->max_body_bytes));
}

enum MHD_Result http_on_request(void *cls, struct MHD_Connection *c, const char *url,
                                const char *method, const char *version, const char *upload,
                                size_t *upload_size, void **con_cls)
{
    (void)version;
    http_server *h = cls;
    request *rq = *con_cls;
    answer a;
    if (!rq) {
        /* First call: headers only. Refusals go out before any body. */
        if (!(rq = *con_cls = begin(h)))
            return MHD_NO;
        trace_take(c, rq);
        if (!early_answer(h, c, url, method, rq, &a))
            return MHD_YES;
        if (body_follows(h, c) && keep_refusal(rq, a))
            return MHD_YES;
        return respond(h, c, rq, method, url, a);
    }
    if (*upload_size > 0) {
        size_t n = *upload_size;
        *upload_size = 0;
        return on_upload(h, c, rq, method, url, upload, n);
    }
    /* The body is complete. */
    if (rq->stage == REQ_REFUSED_DRAINING)   /* the body was read and discarded */
        a = take_refusal(rq);
    else if (rq->stage == REQ_READING) {
        if (!http_dispatch(h, c, rq, &a))
            return MHD_YES;   /* held, or suspended until its batch completes */
    } else if (rq->stage == REQ_GENERATING) {
        if (!http_generate_resume(h, c, rq, &a))
            return MHD_YES;   /* waiting for its generation */
    } else if (!http_infer_resume(h, c, rq, &a))
        return MHD_YES;   /* still held, or queued */
    return respond(h, c, rq, method, url, a);
}

void http_on_completed(void *cls, struct MHD_Connection *c, void **con_cls,
                       enum MHD_RequestTerminationCode toe)
{
    (void)c;
    (void)toe;
    http_server *h = cls;
    request *rq = *con_cls;
    if (!rq)
        return;
    *con_cls = NULL;
    if (announced(rq))
        batcher_arriving(h->deps->bat, -1);
    if (http_infer_closed(rq))
        http_request_free(rq);
    pthread_mutex_lock(&h->mu);
    h->inflight--;
    pthread_cond_broadcast(&h->cv);
    pthread_mutex_unlock(&h->mu);
}
