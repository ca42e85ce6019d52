/* kafka_in.c: the consumer thread of the Kafka pipeline: polls records into
 * their partition's ring, parses them (records.c) and submits them to the
 * batcher, pauses intake for backpressure, runs rebalances, and releases
 * done records through the delivery mode (kafka_delivery.c).
 *
 * Every record consumed becomes a `krec` in its partition's ring, in
 * offset order. The contiguous done prefix of a ring is what may be
 * committed; records behind an unfinished one wait. Records and input
 * buffers come from pools and go back to them, so a steady stream
 * allocates neither. */
#define _GNU_SOURCE
#include "serve/kafka/kafka_int.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <time.h>

#define HDR_MAX   600
#define POLL_RUN  256    /* records taken between two rounds of housekeeping */
#define BUFS_MAX  4096   /* free input buffers kept (3 KB each for a 28x28 image) */

/* ---- input buffers ------------------------------------------------------- */

static void buf_free(kbuf *b)
{
    if (b) {
        free(b->x);
        free(b->y);
    }
    free(b);
}

/* Back to the pool (freed beyond BUFS_MAX). */
static void buf_put(kafka_srv *k, kbuf *b)
{
    if (k->nbufs >= BUFS_MAX) {
        buf_free(b);
        return;
    }
    b->next = k->bufs;
    k->bufs = b;
    k->nbufs++;
}

/* An input buffer: from the pool, refilled with those the output thread
 * returned (one lock for all of them), else new; NULL when out of memory. */
static kbuf *buf_get(kafka_srv *k)
{
    if (!k->bufs) {
        pthread_mutex_lock(&k->hand_mu);
        kbuf *back = k->bufs_back;
        k->bufs_back = NULL;
        pthread_mutex_unlock(&k->hand_mu);
        for (kbuf *b = back, *next; b; b = next) {
            next = b->next;
            buf_put(k, b);
        }
    }
    kbuf *b = k->bufs;
    if (!b) {
        if (!(b = calloc(1, sizeof(*b))))
            return NULL;
        atomic_fetch_add(&k->c.buffers_allocated, 1);
        return b;
    }
    k->bufs = b->next;
    k->nbufs--;
    b->next = NULL;
    return b;
}

/* ---- the record pool ----------------------------------------------------- */

static void rec_destroy(krec *r)
{
    dl_sbuf_free(&r->result);
    free(r);
}

/* A record from the pool, or a new one; NULL when out of memory. */
static krec *rec_get(kafka_srv *k)
{
    krec *r = k->pool;
    if (r) {
        k->pool = r->next;
        k->npool--;
    } else {
        if (!(r = calloc(1, sizeof(*r))))
            return NULL;
        atomic_fetch_add(&k->c.records_allocated, 1);
    }
    r->next = r->stale_next = NULL;
    return r;
}

/* Frees what the record held for this use and puts it back in the pool;
 * its result text's memory stays for the next use. The output thread has
 * already dropped the message, input buffer, outputs and version of the
 * records it handled; this frees those of records it never saw. */
static void rec_put(kafka_srv *k, krec *r)
{
    if (r->msg)
        rd_kafka_message_destroy(r->msg);
    r->msg = NULL;
    if (r->in)
        buf_put(k, r->in);
    r->in = NULL;
    record_env_fini(&r->env);
    kafka_gen_free(r);
    served_release(r->req.sv);
    r->req.model[0] = '\0';
    r->req.version = r->req.n = 0;
    r->req.timeout_us = 0;
    r->req.x = r->req.out = NULL;
    r->req.sv = NULL;
    r->req.err = (dl_err){0};
    r->req.next = NULL;
    r->tp = NULL;
    r->fault = REC_OK;
    r->result.len = 0;
    atomic_store(&r->stale, false);
    atomic_store(&r->state, R_NEW);
    /* as many as intake may hold: a steady stream reuses them all */
    if (k->npool >= k->conf.max_in_flight) {
        rec_destroy(r);
        return;
    }
    r->next = k->pool;
    k->pool = r;
    k->npool++;
}

/* Stale records the output thread has finished with go back to the pool. */
static void sweep_stale(kafka_srv *k)
{
    krec **pp = &k->stale;
    while (*pp) {
        krec *r = *pp;
        if (rec_state_of(r) == R_DONE) {
            *pp = r->stale_next;
            k->nstale--;
            rec_put(k, r);
        } else {
            pp = &r->stale_next;
        }
    }
}

/* ---- records leaving their rings --------------------------------------- */

void kafka_tp_drop(kafka_srv *k, tpart *tp)
{
    /* the overflow list holds records of many partitions: unlink tp's */
    krec **pp = &k->over_head;
    k->over_tail = NULL;
    while (*pp) {
        if ((*pp)->tp == tp)
            *pp = (*pp)->next;
        else {
            k->over_tail = *pp;
            pp = &(*pp)->next;
        }
    }
    while (tp->count) {
        krec *r = kafka_tp_pop(tp);
        k->held--;
        rec_state st = rec_state_of(r);
        if (st == R_BUSY || st == R_SENT) {
            /* the batcher or the output thread still holds it: freed once done */
            atomic_store(&r->stale, true);
            r->stale_next = k->stale;
            k->stale = r;
            k->nstale++;
        } else {
            rec_put(k, r);
        }
    }
    atomic_store(&k->c.in_flight, k->held);
}

void kafka_release(kafka_srv *k, tpart *tp, size_t n)
{
    for (size_t i = 0; i < n; i++) {
        krec *r = kafka_tp_pop(tp);
        tp->done_next = r->offset + 1;
        rec_put(k, r);
        k->held--;
    }
    atomic_store(&k->c.in_flight, k->held);
}

void kafka_in_free(kafka_srv *k)
{
    for (int i = 0; i < k->ntps; i++) {
        while (k->tps[i]->count)
            rec_put(k, kafka_tp_pop(k->tps[i]));
        free(k->tps[i]->ring);
        free(k->tps[i]);
    }
    free(k->tps);
    sweep_stale(k);   /* what is still busy after the bounded wait is left */
    while (k->pool) {
        krec *r = k->pool;
        k->pool = r->next;
        rec_destroy(r);
    }
    for (kbuf *b = k->bufs, *next; b; b = next) {
        next = b->next;
        buf_free(b);
    }
    for (kbuf *b = k->bufs_back, *next; b; b = next) {
        next = b->next;
        buf_free(b);
    }
}

/* ---- parsing and the batcher ---------------------------------------------- */

/* The value of the last header named `name` in any case (HTTP header
 * names are case-insensitive, and OIP clients spell them either way) as a
 * string in buf, cut to cap - 1 bytes; "" for a header without a value;
 * NULL when there is none. */
static const char *header_nocase(rd_kafka_message_t *m, const char *name, char *buf,
                                 size_t cap)
{
    rd_kafka_headers_t *h;
    const char *found = NULL, *hname;
    const void *v;
    size_t len;
    if (rd_kafka_message_headers(m, &h) != RD_KAFKA_RESP_ERR_NO_ERROR)
        return NULL;
    for (size_t i = 0; rd_kafka_header_get_all(h, i, &hname, &v, &len) ==
                       RD_KAFKA_RESP_ERR_NO_ERROR; i++) {
        if (strcasecmp(hname, name) != 0)
            continue;
        len = v ? (len < cap ? len : cap - 1) : 0;
        memcpy(buf, v ? v : "", len);
        buf[len] = '\0';
        found = buf;
    }
    return found;
}

/* The record as records.c sees it; the header values go to the buffers
 * (HDR_MAX bytes each: longer values are refused by the name checks, and
 * an Inference-Header-Content-Length that long is not a byte count). */
static void record_in_of(const krec *r, record_in *in, char *model, char *id, char *ctype,
                         char *jlen)
{
    const size_t cap = HDR_MAX;
    rd_kafka_message_t *m = r->msg;
    const char *ct = kafka_header(m, "content-type", ctype, cap);
    *in = (record_in){
        .value = m->payload, .len = m->len,
        .binary = ct && strcmp(ct, "application/octet-stream") == 0,
        .json_len_hdr = header_nocase(m, OIP_HEADER_JSON_LEN, jlen, cap),
        .model_hdr = kafka_header(m, "dlserve-model", model, cap),
        .id_hdr = kafka_header(m, "dlserve-id", id, cap),
        .topic = r->tp->topic, .partition = r->tp->partition, .offset = r->offset,
    };
}

/* Sends r to the dead-letter topic, through the output thread; err says
 * why. */
static void refuse(kafka_srv *k, krec *r, record_fault f, const dl_err *err)
{
    r->fault = f;
    r->req.err = *err;
    atomic_store_explicit(&r->state, R_BUSY, memory_order_release);
    kafka_handoff(k, r);
}

/* True when kafka.max_record_age_ms is set and the record's timestamp is
 * older than that; err says by how much. A record without a timestamp
 * has no age. */
static bool expired(const kafka_srv *k, const krec *r, dl_err *err)
{
    if (k->conf.max_record_age_ms <= 0)
        return false;
    rd_kafka_timestamp_type_t tt;
    int64_t ts = rd_kafka_message_timestamp(r->msg, &tt);
    if (ts < 0)
        return false;
    struct timespec now;
    clock_gettime(CLOCK_REALTIME, &now);
    int64_t age = (int64_t)now.tv_sec * 1000 + now.tv_nsec / 1000000 - ts;
    if (age <= k->conf.max_record_age_ms)
        return false;
    dl_err_set(err, DL_ERR_TIMEOUT, "the record is %lld ms old (%s timestamp), over "
               "kafka.max_record_age_ms (%lld)", (long long)age,
               tt == RD_KAFKA_TIMESTAMP_LOG_APPEND_TIME ? "log append" : "create",
               (long long)k->conf.max_record_age_ms);
    return true;
}

/* Parses the record (once) and gives it to the batcher. False when the
 * batcher is full: the record keeps its decoded inputs and waits. */
static bool submit(kafka_srv *k, krec *r)
{
    dl_err err = {0};
    if (!r->req.x && expired(k, r, &err)) {
        refuse(k, r, REC_EXPIRED, &err);
        return true;
    }
    if (!r->req.x && kafka_gen_is(r)) {   /* to its generator, not the batcher */
        char model[HDR_MAX], id[HDR_MAX], ctype[HDR_MAX], jlen[HDR_MAX];
        record_in in;
        record_in_of(r, &in, model, id, ctype, jlen);
        kafka_gen_submit(k, r, in.model_hdr, in.id_hdr);
        return true;
    }
    if (!r->req.x) {
        char model[HDR_MAX], id[HDR_MAX], ctype[HDR_MAX], jlen[HDR_MAX];
        record_in in;
        record_in_of(r, &in, model, id, ctype, jlen);
        record_fault f = record_open(&in, kafka_route_model(k, r->tp->topic),
                                     (size_t)k->conf.max_record_bytes,
                                     &r->env, &err);
        served *sv = NULL;
        /* Not found or nothing served yet: either way this record names
         * no model to run now. */
        if (f == REC_OK &&
            registry_acquire(k->reg, r->env.model, r->env.version, &sv, &err) != DL_OK)
            f = REC_MODEL;
        int64_t n = 0;
        const void *values = NULL;
        if (f == REC_OK && !r->in && !(r->in = buf_get(k)))
            f = record_fault_of(dl_err_set(&err, DL_ERR_NOMEM, "out of memory"));
        if (f == REC_OK)
            f = record_decode_into(&in, &r->env, sv->conf, sv->tok, sv->in_dim, &n, &r->in->x,
                                   &r->in->cap, &values, &err);
        if (f == REC_OK && !record_reserve(&r->in->y, &r->in->ycap, (size_t)(n * sv->out_dim)))
            f = record_fault_of(dl_err_set(&err, DL_ERR_NOMEM, "out of memory"));
        if (f != REC_OK) {
            served_release(sv);
            refuse(k, r, f, &err);
            return true;
        }
        /* raw float32 inputs: the message's own bytes (r->msg) */
        infer_req_init(&r->req, sv, n, values, r->in->y,
                       r->env.scanned ? r->env.req.timeout_us : 0, kafka_on_infer_done, k);
    }
    /* R_BUSY before the batcher has it: its completion may come at once */
    atomic_store_explicit(&r->state, R_BUSY, memory_order_release);
    dl_status st = batcher_submit(k->bat, &r->req, &err);
    if (st == DL_ERR_BUSY || st == DL_ERR_UNAVAILABLE) {   /* full, or stopping */
        atomic_store_explicit(&r->state, R_NEW, memory_order_relaxed);
        return false;
    }
    if (st != DL_OK)
        refuse(k, r, record_fault_of(st), &err);
    return true;
}

static void overflow_push(kafka_srv *k, krec *r)
{
    r->next = NULL;
    if (k->over_tail)
        k->over_tail->next = r;
    else
        k->over_head = r;
    k->over_tail = r;
}

/* Gives waiting records to the batcher, in order, while it has room. */
static void overflow_retry(kafka_srv *k)
{
    while (k->over_head) {
        /* unlinked first: once submitted, its link belongs to the hand-off */
        krec *r = k->over_head;
        k->over_head = r->next;
        if (!k->over_head)
            k->over_tail = NULL;
        if (!submit(k, r)) {
            r->next = k->over_head;
            k->over_head = r;
            if (!k->over_tail)
                k->over_tail = r;
            return;
        }
    }
}

/* A consumed record: into its partition's ring, then to the batcher. */
static void take(kafka_srv *k, rd_kafka_message_t *m)
{
    tpart *tp = kafka_tp_find(k, rd_kafka_topic_name(m->rkt), m->partition);
    if (!tp || !tp->assigned || m->offset < tp->next_expected) {
        atomic_fetch_add(&k->c.redelivered, 1);   /* already held, or not ours */
        rd_kafka_message_destroy(m);
        return;
    }
    krec *r = rec_get(k);
    if (!r || !kafka_tp_push(tp, r)) {
        /* not taken and not committed: seek back so it comes again */
        if (r)
            rec_put(k, r);
        rd_kafka_topic_partition_list_t *l = rd_kafka_topic_partition_list_new(1);
        rd_kafka_topic_partition_list_add(l, tp->topic, tp->partition)->offset = m->offset;
        rd_kafka_error_t *e = rd_kafka_seek_partitions(k->cons, l, 1000);
        if (e)
            rd_kafka_error_destroy(e);
        rd_kafka_topic_partition_list_destroy(l);
        rd_kafka_message_destroy(m);
        return;
    }
    tp->next_expected = m->offset + 1;
    k->consumed_bytes += (int64_t)m->len;
    r->tp = tp;
    r->offset = m->offset;
    r->msg = m;
    r->t_received = dl_time_now();
    k->held++;
    atomic_fetch_add(&k->c.consumed, 1);
    if (k->over_head || !submit(k, r))
        overflow_push(k, r);
}

/* ---- settling ------------------------------------------------------------- */

/* The number of output rounds so far (see wait_rounds). */
static uint64_t rounds_now(kafka_srv *k)
{
    pthread_mutex_lock(&k->hand_mu);
    uint64_t n = k->rounds;
    pthread_mutex_unlock(&k->hand_mu);
    return n;
}

/* Waits until the output thread has made progress since `seen` (or
 * 100 ms: a broker that does not answer makes none). */
static void wait_rounds(kafka_srv *k, uint64_t seen)
{
    struct timespec ts;
    clock_gettime(CLOCK_REALTIME, &ts);
    ts.tv_nsec += 100000000L;
    if (ts.tv_nsec >= 1000000000L) {
        ts.tv_sec++;
        ts.tv_nsec -= 1000000000L;
    }
    pthread_mutex_lock(&k->hand_mu);
    while (k->rounds == seen && pthread_cond_timedwait(&k->hand_cv, &k->hand_mu, &ts) == 0)
        ;
    pthread_mutex_unlock(&k->hand_mu);
}

static bool listed(const tpart *tp, const rd_kafka_topic_partition_list_t *l)
{
    for (int j = 0; l && j < l->cnt; j++)
        if (tp->partition == l->elems[j].partition && !strcmp(tp->topic, l->elems[j].topic))
            return true;
    return !l;
}

/* Records of the partitions in `only` (NULL: all) that the batcher or the
 * output thread holds (*busy) or that wait for a delivery report (*sent). */
static void in_flight(kafka_srv *k, const rd_kafka_topic_partition_list_t *only, bool *busy,
                      bool *sent)
{
    *busy = *sent = false;
    for (int i = 0; i < k->ntps && !*busy; i++) {
        tpart *tp = k->tps[i];
        for (size_t j = 0; listed(tp, only) && j < tp->count && !*busy; j++) {
            rec_state st = rec_state_of(tp_at(tp, j));
            *busy = st == R_BUSY;
            *sent = *sent || st == R_SENT;
        }
    }
}

/* Everything handed on finished, delivered and committed: before
 * partitions are revoked and at shutdown. `only` limits the wait to the
 * records of those partitions (NULL: all). The batcher always completes;
 * delivery reports are waited for KAFKA_FLUSH_TIMEOUT_MS at most. */
static void settle(kafka_srv *k, const rd_kafka_topic_partition_list_t *only)
{
    double t0 = dl_time_now();
    for (;;) {
        uint64_t seen = rounds_now(k);
        bool busy, sent;
        in_flight(k, only, &busy, &sent);
        if (!busy && !sent)
            break;
        if (!busy && dl_time_now() - t0 > KAFKA_FLUSH_TIMEOUT_MS * 1e-3) {
            DL_LOG(DL_LOG_WARNING, "kafka", "delivery reports still missing after %d ms: "
                   "those records stay uncommitted", KAFKA_FLUSH_TIMEOUT_MS);
            break;
        }
        wait_rounds(k, seen);
    }
    k->mode->advance(k);
    k->mode->commit(k, true);
}

/* ---- rebalancing ------------------------------------------------------- */

/* Resumed partitions fetch again at once. librdkafka (2.0) does not wake
 * its fetcher on a resume: the fetch waits for the broker thread's next
 * tick, up to a second, which idled a catching-up daemon at every resume.
 * A seek to the position it resumes at (where intake stopped) wakes it. */
static void wake_fetcher(kafka_srv *k)
{
    rd_kafka_topic_partition_list_t *l = rd_kafka_topic_partition_list_new(k->ntps);
    for (int i = 0; i < k->ntps; i++)
        if (k->tps[i]->assigned && k->tps[i]->next_expected >= 0)
            rd_kafka_topic_partition_list_add(l, k->tps[i]->topic, k->tps[i]->partition)
                ->offset = k->tps[i]->next_expected;
    rd_kafka_error_t *e = l->cnt ? rd_kafka_seek_partitions(k->cons, l, 0) : NULL;
    if (e) {   /* only slower: the fetcher starts at its next tick */
        DL_LOG(DL_LOG_DEBUG, "kafka", "seek on resume: %s", rd_kafka_error_string(e));
        rd_kafka_error_destroy(e);
    }
    rd_kafka_topic_partition_list_destroy(l);
}

/* librdkafka stops fetching a partition while its prefetch queue (one for
 * the whole consumer) holds queued.max.messages.kbytes or
 * queued.min.messages, and 2.0 looks again only at its broker thread's
 * next tick, up to a second later: a daemon catching up on a backlog
 * idled there after every refill of that queue (0.2-0.75 s of a 1.2 s run
 * of 50,000 records). So after each run of polls the queue's length is
 * compared with half of either bound (its bytes estimated from the mean
 * record so far), and once the queue is drained after being near one, the
 * first empty poll wakes the fetcher. An empty queue means nothing fetched
 * is lost by the seek that does it. */
static void note_queue(kafka_srv *k)
{
    int64_t n = (int64_t)rd_kafka_queue_length(k->cq);
    int64_t taken = atomic_load(&k->c.consumed);
    int64_t mean = taken > 0 ? k->consumed_bytes / taken : 0;
    if (2 * n >= k->queue_max_msgs || 2 * n * mean >= k->queue_max_bytes)
        k->queue_near_full = true;
}

static void wake_if_stalled(kafka_srv *k)
{
    if (!k->queue_near_full)
        return;
    k->queue_near_full = false;
    atomic_fetch_add(&k->c.fetch_wakeups, 1);
    wake_fetcher(k);
}

/* Pauses or resumes every assigned partition. librdkafka drops what it
 * has prefetched for a paused partition and fetches it again on resume. */
static void pause_all(kafka_srv *k, bool pause)
{
    rd_kafka_topic_partition_list_t *l = NULL;
    if (rd_kafka_assignment(k->cons, &l) == RD_KAFKA_RESP_ERR_NO_ERROR && l->cnt) {
        (pause ? rd_kafka_pause_partitions : rd_kafka_resume_partitions)(k->cons, l);
        if (!pause)
            wake_fetcher(k);
    }
    if (l)
        rd_kafka_topic_partition_list_destroy(l);
    k->paused = pause;
    if (pause)
        atomic_fetch_add(&k->c.partition_pauses, 1);
    DL_LOG(DL_LOG_DEBUG, "kafka", "%s partitions (%lld records held)",
           pause ? "pausing" : "resuming", (long long)k->held);
}

/* Backpressure. At max_in_flight records held, intake stops: the consumer
 * polls no more, and librdkafka's fetcher stops by itself once its
 * prefetch queue is full, which keeps what it has fetched. Intake goes on
 * as soon as there is room. Only when it stays stopped for
 * KAFKA_PAUSE_AFTER_MS (an output side that does not drain), or when
 * intake is fatal, are the partitions paused too, so that the consumer
 * polls again and serves rebalances; that costs a fetch of what was
 * prefetched once they resume. Pausing at every bound, as the consumer
 * did first, fetched a backlog about twice over: 8,192 records in flight
 * cost 24 us of CPU a record against 18 with the whole backlog in flight. */
static void backpressure(kafka_srv *k, bool fatal)
{
    double now = dl_time_now();
    bool full = fatal || k->held >= k->conf.max_in_flight;
    if (full && !k->full) {
        k->full_since = now;
        atomic_fetch_add(&k->c.pauses, 1);
    }
    k->full = full;
    atomic_store(&k->c.paused, full);
    bool pause = fatal || (k->full && now - k->full_since >= KAFKA_PAUSE_AFTER_MS * 1e-3);
    if (pause && !k->paused)
        pause_all(k, true);
    else if (!pause && k->paused && k->held <= k->conf.max_in_flight / 2)
        pause_all(k, false);   /* at half, not at once: each resume fetches again */
}

static void on_assign(kafka_srv *k, rd_kafka_t *rk, rd_kafka_topic_partition_list_t *l, bool coop)
{
    if (k->mode->position)
        k->mode->position(k, l);
    pthread_mutex_lock(&k->out_mu);
    for (int i = 0; i < l->cnt; i++) {
        tpart *tp = kafka_tp_get(k, l->elems[i].topic, l->elems[i].partition);
        if (!tp) {
            kafka_set_fatal(k, "out of memory assigning partitions");
            break;
        }
        kafka_tp_drop(k, tp);
        tp->assigned = true;
        tp->next_expected = l->elems[i].offset >= 0 ? l->elems[i].offset : -1;
        tp->done_next = tp->committed = tp->next_expected;
    }
    pthread_mutex_unlock(&k->out_mu);
    atomic_fetch_add(&k->c.assigned, l->cnt);
    rd_kafka_error_t *e = NULL;
    rd_kafka_resp_err_t re = RD_KAFKA_RESP_ERR_NO_ERROR;
    if (coop)
        e = rd_kafka_incremental_assign(rk, l);
    else
        re = rd_kafka_assign(rk, l);
    if (e || re)
        DL_LOG(DL_LOG_ERR, "kafka", "assign: %s", e ? rd_kafka_error_string(e) : rd_kafka_err2str(re));
    if (e)
        rd_kafka_error_destroy(e);
    if (k->paused && l->cnt)
        rd_kafka_pause_partitions(rk, l);
    DL_LOG(DL_LOG_INFO, "kafka", "assigned %d partitions", l->cnt);
}

static void on_revoke(kafka_srv *k, rd_kafka_t *rk, rd_kafka_topic_partition_list_t *l, bool coop)
{
    /* Records in the batcher finish and are committed; those still
     * waiting for it are dropped (not committed: the next owner consumes
     * them). */
    if (!kafka_is_fatal(k))
        settle(k, l);
    pthread_mutex_lock(&k->out_mu);
    for (int i = 0; i < l->cnt; i++) {
        tpart *tp = kafka_tp_find(k, l->elems[i].topic, l->elems[i].partition);
        if (tp) {
            kafka_tp_drop(k, tp);
            tp->assigned = false;
        }
    }
    pthread_mutex_unlock(&k->out_mu);
    atomic_fetch_add(&k->c.revoked, l->cnt);
    if (coop) {
        rd_kafka_error_t *e = rd_kafka_incremental_unassign(rk, l);
        if (e) {
            DL_LOG(DL_LOG_ERR, "kafka", "unassign: %s", rd_kafka_error_string(e));
            rd_kafka_error_destroy(e);
        }
    } else {
        rd_kafka_assign(rk, NULL);
    }
    DL_LOG(DL_LOG_INFO, "kafka", "revoked %d partitions after committing what was done",
           l->cnt);
}

void kafka_on_rebalance(rd_kafka_t *rk, rd_kafka_resp_err_t err,
                        rd_kafka_topic_partition_list_t *l, void *opaque)
{
    kafka_srv *k = opaque;
    bool coop = strcmp(rd_kafka_rebalance_protocol(rk), "COOPERATIVE") == 0;
    if (err == RD_KAFKA_RESP_ERR__ASSIGN_PARTITIONS) {
        on_assign(k, rk, l, coop);
    } else if (err == RD_KAFKA_RESP_ERR__REVOKE_PARTITIONS) {
        on_revoke(k, rk, l, coop);
    } else {
        DL_LOG(DL_LOG_ERR, "kafka", "rebalance: %s", rd_kafka_err2str(err));
        if (!coop)
            rd_kafka_assign(rk, NULL);
    }
}

/* Commits (ours and the automatic ones), from the consumer poll. */
void kafka_on_commit(rd_kafka_t *rk, rd_kafka_resp_err_t e,
                     rd_kafka_topic_partition_list_t *l, void *opaque)
{
    (void)rk;
    kafka_srv *k = opaque;
    if (e == RD_KAFKA_RESP_ERR__NO_OFFSET)
        return;
    if (e) {
        DL_LOG(DL_LOG_WARNING, "kafka", "offset commit failed: %s", rd_kafka_err2str(e));
        return;
    }
    atomic_fetch_add(&k->c.commits, 1);
    for (int i = 0; l && i < l->cnt; i++) {
        tpart *tp = kafka_tp_find(k, l->elems[i].topic, l->elems[i].partition);
        if (tp && !l->elems[i].err && l->elems[i].offset >= 0)
            tp->committed = l->elems[i].offset;
    }
}

/* ---- the thread -------------------------------------------------------- */

/* Leaves the group, serving the revocation (kafka_on_rebalance), for
 * KAFKA_CLOSE_TIMEOUT_MS at most: librdkafka's own close waits for the
 * group coordinator, forever when no broker answers. Given up, the group
 * learns of the departure at the session timeout, and what was not
 * committed is consumed again by the member that takes the partitions
 * (at-least-once); kafka_free then destroys the consumer without a
 * second close. */
static void close_consumer(kafka_srv *k)
{
    rd_kafka_queue_t *q = rd_kafka_queue_new(k->cons);
    rd_kafka_error_t *e = rd_kafka_consumer_close_queue(k->cons, q);
    bool closing = e == NULL;
    if (e) {
        DL_LOG(DL_LOG_WARNING, "kafka", "leaving the group: %s", rd_kafka_error_string(e));
        rd_kafka_error_destroy(e);
    }
    for (double t0 = dl_time_now(); closing && !rd_kafka_consumer_closed(k->cons);) {
        if (dl_time_now() - t0 > KAFKA_CLOSE_TIMEOUT_MS * 1e-3) {
            DL_LOG(DL_LOG_WARNING, "kafka", "group %s not left after %d ms (no broker answers): "
                   "its partitions move at the session timeout", k->conf.group_id,
                   KAFKA_CLOSE_TIMEOUT_MS);
            break;
        }
        /* Served as a consumer queue, not with poll_callback: the
         * consumer's queue is forwarded here, and records fetched before
         * the close (a stream flowing at SIGTERM or SIGHUP) would make
         * librdkafka 2.0 assert that a callback took them. They are
         * dropped uncommitted: the next owner consumes them. */
        rd_kafka_message_t *m = rd_kafka_consume_queue(q, 100);
        if (m)
            rd_kafka_message_destroy(m);
    }
    rd_kafka_queue_destroy(q);
}

/* Shutdown: records not yet in the batcher stay uncommitted; the rest
 * finish, are delivered and committed before the group is left. */
static void shutdown_intake(kafka_srv *k)
{
    k->over_head = k->over_tail = NULL;
    for (int i = 0; i < k->ntps; i++) {
        tpart *tp = k->tps[i];
        size_t keep = 0;
        while (keep < tp->count && rec_state_of(tp_at(tp, keep)) != R_NEW)
            keep++;
        while (tp->count > keep) {   /* drop the unsubmitted tail */
            krec *r = tp->ring[(tp->head + tp->count - 1) % tp->cap];
            tp->count--;
            k->held--;
            rec_put(k, r);
        }
    }
    if (!kafka_is_fatal(k))
        settle(k, NULL);
    close_consumer(k);
    pthread_mutex_lock(&k->out_mu);
    for (int i = 0; i < k->ntps; i++)
        kafka_tp_drop(k, k->tps[i]);
    pthread_mutex_unlock(&k->out_mu);
    /* Records dropped earlier and still in the batcher or waiting for a
     * delivery report (bounded: a broker that never answers leaves them). */
    for (double t0 = dl_time_now(); dl_time_now() - t0 < 30.0;) {
        uint64_t seen = rounds_now(k);
        sweep_stale(k);
        if (k->nstale == 0)
            break;
        wait_rounds(k, seen);
    }
}

void *kafka_in_main(void *arg)
{
    kafka_srv *k = arg;
    double last_snap = 0.0;
    pthread_setname_np(pthread_self(), "kafka-in");   /* for top -H and perf */
    while (!atomic_load(&k->stop)) {
        uint64_t seen = rounds_now(k);   /* before the releases below */
        kafka_routes_tick(k);
        sweep_stale(k);
        overflow_retry(k);
        k->mode->advance(k);
        k->mode->commit(k, false);
        /* Records the batcher has no room for wait in the overflow list;
         * at max_in_flight records held, intake stops (backpressure). */
        bool fatal = kafka_is_fatal(k);
        backpressure(k, fatal);
        double now = dl_time_now();
        if (now - last_snap > 0.5) {
            kafka_snapshot(k);
            last_snap = now;
        }
        if (k->full && !k->paused) {   /* until the output thread makes progress */
            wait_rounds(k, seen);
            continue;
        }
        /* Records come in runs (what is already fetched, up to POLL_RUN,
         * until max_in_flight are held) between two rounds of the work
         * above. The first poll of a run waits, briefly while records are
         * held (the output thread's progress also ends the wait): a
         * paused consumer sleeps there rather than spinning. Paused
         * partitions deliver nothing; the poll serves rebalances. */
        batcher_arriving(k->bat, +1);   /* a run's records batch together */
        for (int i = 0; i < POLL_RUN; i++) {
            rd_kafka_message_t *m = rd_kafka_consumer_poll(k->cons, i ? 0 : k->held ? 2 : 100);
            if (!m) {
                if (i == 0)   /* the queue is empty: nothing came in this wait */
                    wake_if_stalled(k);
                break;
            }
            if (m->err) {
                if (m->err != RD_KAFKA_RESP_ERR__PARTITION_EOF)
                    DL_LOG(DL_LOG_WARNING, "kafka", "consumer: %s", rd_kafka_message_errstr(m));
                rd_kafka_message_destroy(m);
            } else if (fatal) {   /* intake stopped: not taken, not committed */
                rd_kafka_message_destroy(m);
            } else {
                take(k, m);
            }
            if (k->held >= k->conf.max_in_flight)
                break;
        }
        batcher_arriving(k->bat, -1);
        atomic_store(&k->c.in_flight, k->held);
        note_queue(k);
    }
    shutdown_intake(k);
    return NULL;
}
