/* http_infer.c: infer requests over HTTP: parsed, answered at once from
 * the response cache when it holds their inputs' answer, run on the event
 * loop when the batcher allows, held with the others its loop read in one
 * pass and run as one batch, or queued with the connection suspended
 * until the batch's completion resumes it; then answered from the result
 * (kept in the cache when it was looked up). */
#define _GNU_SOURCE   /* microhttpd.h's socket types */
#include "serve/http/http_int.h"

#include <stdlib.h>

/* The first request of the calling event loop's open held batch, or NULL. */
static _Thread_local struct request *open_batch;

/* The infer answer (JSON, or JSON then binary outputs) as an answer. */
static answer result_answer(const oip_result *res)
{
    dl_sbuf b = {0};
    size_t json_len;
    dl_err err = {0};
    if (oip_write_infer(res, &b, &json_len, &err) != DL_OK) {
        dl_sbuf_free(&b);
        return http_status_answer(err.code, "%s", err.msg);
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
    http_loop_resume(rq->loop, rq->c);   /* rq belongs to its loop from here on */
    pthread_mutex_lock(&h->mu);
    h->waiting--;   /* http_stop counts the suspended requests */
    pthread_cond_broadcast(&h->cv);
    pthread_mutex_unlock(&h->mu);
}

/* The answer to a request that http_infer_start queued, once resumed (or once
 * run on this thread). */
static answer infer_answer(http_server *h, request *rq)
{
    const infer_req *q = &rq->q;
    served *sv = rq->sv;
    answer a;
    if (rq->refused.code != DL_OK) {
        a = http_status_answer(rq->refused.code, "%s", rq->refused.msg);
    } else if (q->err.code == DL_ERR_TIMEOUT) {
        a = http_status_answer(q->err.code, "%s", q->err.msg);   /* queued past its timeout: 503 */
    } else if (q->err.code != DL_OK) {
        /* 503 when the batch may succeed again (it ran short of memory),
         * 500 when the backend failed */
        a = http_status_answer(q->err.code, "inference failed: %s", q->err.msg);
    } else {
        infer_req_cache_store(h->deps->cache, &rq->q);   /* a miss computed: kept */
        oip_result res = {.model = sv->name, .version = sv->version, .id = rq->in.id,
                          .conf = sv->conf, .batch = rq->in.batch, .out_dim = sv->out_dim,
                          .y = q->out, .x = rq->in.x, .in_dim = sv->in_dim,
                          .nout = rq->in.nout, .out = rq->in.out};
        a = result_answer(&res);
    }
    infer_req_account(h->deps->st, q, rq->arrival, a.code == 200);
    trace_done d = {.ctx = &rq->trace, .q = rq->refused.code == DL_OK ? q : NULL,
                    .t_received = rq->arrival, .model = sv->name, .version = sv->version,
                    .http_status = a.code, .ok = a.code == 200};
    tracer_record(h->deps->tr, &d);
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
    rq->stage = first ? REQ_HELD : REQ_HOLDS_BATCH;
    if (first) {
        first->batch_tail->batch_next = rq;
        first->batch_tail = rq;
        first->batch_samples = samples;
    } else {
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
    rq->stage = REQ_SUBMITTED;
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
        if (r->stage == REQ_GONE) {
            *link = r->batch_next;
            http_request_free(r);
        } else {
            link = &r->batch_next;
        }
    }
}

/* Closes the held batch that first holds (its completed requests
 * dropped); the others are left in `stage` (REQ_SUBMITTED: it ran, or
 * REQ_HELD_TO_QUEUE). The caller moves first on. */
static void close_batch(request *first, req_stage stage)
{
    if (open_batch == first)
        open_batch = NULL;
    for (request *r = first->batch_next; r; r = r->batch_next)
        r->stage = stage;
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
        close_batch(rq, REQ_SUBMITTED);   /* the others' next calls come after this one */
        rq->stage = REQ_SUBMITTED;
        *a = infer_answer(h, rq);
        return true;
    }
    double now = dl_time_now();
    if (rq->busy_since == 0)
        rq->busy_since = now;
    if (batcher_may_wait(bat, now - rq->busy_since, requests))
        return false;
    close_batch(rq, REQ_HELD_TO_QUEUE);
    queue_suspended(h, c, rq);
    return false;
}

bool http_infer_start(http_server *h, struct MHD_Connection *c, request *rq, answer *a)
{
    dl_err err = {0};
    rq->sv = http_acquire(h, &rq->route, &err);
    if (!rq->sv) {
        *a = http_status_answer(err.code, "%s", err.msg);
        return true;
    }
    served *sv = rq->sv;
    size_t json_len;
    /* A bad Inference-Header-Content-Length is a 400 like a bad body. */
    if (oip_json_len(rq->json_len, rq->len, &json_len, &err) != DL_OK ||
        oip_parse_infer(rq->body, rq->len, json_len, sv->conf, sv->tok, sv->in_dim, &rq->in,
                        &err) != DL_OK ||
        oip_check_classes(&rq->in, sv->conf, sv->out_dim, &err) != DL_OK) {
        *a = http_status_answer(err.code, "%s", err.msg);   /* 400, or 500 out of memory */
        stats_request(h->deps->st, sv->name, sv->version, false, 0, 0, 0,
                      (dl_time_now() - rq->arrival) * 1e6);
        return true;
    }
    infer_req *q = &rq->q;
    /* Pinned to the version whose input size was checked; raw inputs (the
     * batcher scales its batch); outputs allocated by the batcher. */
    infer_req_init(q, sv, rq->in.batch, rq->in.x, NULL, rq->in.timeout_us, infer_done, rq);
    q->priority = rq->in.priority;
    rq->h = h;
    rq->c = c;
    rq->loop = http_loop_current();
    batcher *bat = h->deps->bat;
    /* Answered from the response cache, or run on this thread: nothing to wait for. */
    if (infer_req_cached(h->deps->cache, q) || (!open_batch && batcher_run_now(bat, q))) {
        rq->stage = REQ_SUBMITTED;   /* no longer announced */
        batcher_arriving(bat, -1);
        *a = infer_answer(h, rq);
        return true;
    }
    /* Withdrawn after the submission (hold or queue_suspended moves rq on
     * from REQ_READING), so that its batch waits for it; rq may be
     * answered by then (bat, not rq, is used). */
    if (!hold(bat, rq))
        queue_suspended(h, c, rq);
    batcher_arriving(bat, -1);
    return false;
}

bool http_infer_resume(http_server *h, struct MHD_Connection *c, request *rq, answer *a)
{
    switch (rq->stage) {
    case REQ_HOLDS_BATCH:   /* called again: its loop's pass has ended */
        return run_held(h, c, rq, a);   /* false: waiting for an instance, or queued */
    case REQ_HELD:          /* its batch has not run yet: called again */
        return false;
    case REQ_HELD_TO_QUEUE:
        queue_suspended(h, c, rq);
        return false;
    case REQ_SUBMITTED:     /* called again: its batch has run */
        *a = infer_answer(h, rq);
        return true;
    case REQ_READING:
    case REQ_REFUSED_DRAINING:
    case REQ_GONE:
    case REQ_GENERATING:
        break;
    }
    DL_ASSERT(false);   /* only an infer request past REQ_READING gets here */
    return false;
}

bool http_infer_closed(request *rq)
{
    if (rq->stage == REQ_HOLDS_BATCH) {   /* gone before its batch ran: the others queue */
        drop_gone(rq);
        close_batch(rq, REQ_HELD_TO_QUEUE);
    } else if (rq->stage == REQ_HELD) {
        rq->stage = REQ_GONE;   /* in its held batch's list: freed when that closes */
        return false;
    }
    return true;
}
