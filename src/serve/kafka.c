/* kafka.c: the Kafka consumer, producer and delivery modes (see kafka.h).
 *
 * Every record consumed becomes a `krec` in its partition's ring, in
 * offset order. A record is done when its output or dead letter is
 * acknowledged (at-least-once), produced inside the open transaction
 * (exactly-once) or ready for Redis (redis). The contiguous done prefix
 * of a ring is what may be committed; records behind an unfinished one
 * wait. Only the Kafka thread touches rings, clients and records, except
 * the batcher's completion callback, which only queues the record. */
#define _GNU_SOURCE
#include "serve/kafka.h"
#include "serve/records.h"
#ifdef DL_HAVE_REDIS
#include "redis/dl_redis.h"
#endif

#include <librdkafka/rdkafka.h>
#include <librdkafka/rdkafka_mock.h>

#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define TOPIC_MAX        256
#define FLUSH_TIMEOUT_MS 30000
#define TXN_TIMEOUT_MS   30000
#define HDR_MAX          600
#define POLL_RUN         256   /* records taken between two rounds of housekeeping */
#define STALE            UINT32_MAX   /* a record's epoch once forgotten */

/* Short names of the delivery modes ([kafka] delivery, parsed by the
 * option table). */
#define MODE_ALO   DL_DELIVERY_AT_LEAST_ONCE
#define MODE_EOS   DL_DELIVERY_EXACTLY_ONCE
#define MODE_REDIS DL_DELIVERY_REDIS

typedef enum {
    R_NEW,       /* consumed, not yet given to the batcher (or waiting: queue full) */
    R_INFER,     /* in the batcher */
    R_SENT,      /* output or dead letter produced, waiting for its delivery report */
    R_DONE,      /* may be committed */
} rec_state;

struct tpart;

typedef struct krec {
    struct tpart        *tp;
    int64_t              offset;
    rec_state            state;
    uint32_t             epoch;      /* k->epoch when consumed; older: stale after a rewind */
    rd_kafka_message_t  *msg;        /* owned until the output is produced */
    record_env           env;
    infer_req            req;
    char                *result;     /* redis mode: the output JSON, written at commit */
    size_t               result_len;
    struct krec         *next;       /* overflow or done list */
} krec;

typedef struct tpart {
    char      topic[TOPIC_MAX];
    int32_t   partition;
    bool      assigned;
    krec    **ring;                  /* records in offset order: ring[(head + i) % cap] */
    size_t    head, count, cap;
    int64_t   next_expected;         /* lower offsets are re-deliveries (-1: any) */
    int64_t   done_next;             /* offset after the done prefix (-1: none yet) */
    int64_t   committed;             /* last committed (-1: none by us) */
} tpart;

/* Counters, read by the HTTP thread. */
typedef struct kcounters {
    atomic_llong consumed, outputs, dead[REC_NFAULTS], redelivered, produce_retries;
    atomic_llong pauses, assigned, revoked, commits, txn_commits, txn_aborts;
    atomic_llong redis_writes, redis_errors, sink_errors, in_flight;
    atomic_bool  paused;
} kcounters;

struct kafka_srv {
    dl_kafka_conf        conf;
    dl_redis_conf        rconf;
    registry            *reg;
    batcher             *bat;
    stats               *st;
    dl_delivery          mode;
    char                 bootstrap[512];
    char                 txn_id[160];

    rd_kafka_t          *mock_rk;    /* embedded cluster's handle */
    rd_kafka_mock_cluster_t *mock;
    rd_kafka_t          *cons, *prod;
    rd_kafka_queue_t    *cq;         /* the consumer queue: yielded to wake the poll */
    pthread_t            thread;
    bool                 started;
    atomic_bool          stop;

    /* Kafka thread only */
    tpart              **tps;
    int                  ntps;
    krec                *over_head, *over_tail;   /* waiting for room in the batcher */
    int64_t              held;       /* records in rings */
    int64_t              stale;      /* records of a rewind still in the batcher */
    uint32_t             epoch;
    bool                 paused;
    bool                 txn_open, txn_dirty;
    char                 def_model[DL_NAME_MAX];   /* see default_model */
    double               last_commit;
    int64_t              dead_logged;
#ifdef DL_HAVE_REDIS
    dl_redis_link       *sink;
#endif

    /* completions from the batcher */
    pthread_mutex_t      done_mu;
    krec                *done_head, *done_tail;

    /* shared with the HTTP thread */
    pthread_mutex_t      snap_mu;
    json_t              *snap_parts; /* [{"topic","partition",...}] */
    char                 fatal[256];
    kcounters            c;
};

/* ---- records ---------------------------------------------------------- */

static void rec_free(krec *r)
{
    if (!r)
        return;
    if (r->msg)
        rd_kafka_message_destroy(r->msg);
    record_env_fini(&r->env);
    free(r->req.x);
    free(r->req.out);
    served_release(r->req.sv);
    infer_req_fini(&r->req);
    free(r->result);
    free(r);
}

/* The value of the last header `name` as a string in buf, or NULL. */
static const char *header(rd_kafka_message_t *m, const char *name, char *buf, size_t cap)
{
    rd_kafka_headers_t *h;
    const void *v;
    size_t len;
    if (rd_kafka_message_headers(m, &h) != RD_KAFKA_RESP_ERR_NO_ERROR ||
        rd_kafka_header_get_last(h, name, &v, &len) != RD_KAFKA_RESP_ERR_NO_ERROR || !v ||
        len >= cap)
        return NULL;
    memcpy(buf, v, len);
    buf[len] = '\0';
    return buf;
}

/* The record as records.c sees it; the header values go to the buffers
 * (HDR_MAX bytes each: longer values are refused by the name checks). */
static void record_in_of(const krec *r, record_in *in, char *model, char *id, char *ctype)
{
    const size_t cap = HDR_MAX;
    rd_kafka_message_t *m = r->msg;
    const char *ct = header(m, "content-type", ctype, cap);
    *in = (record_in){
        .value = m->payload, .len = m->len,
        .binary = ct && strcmp(ct, "application/octet-stream") == 0,
        .model_hdr = header(m, "dlserve-model", model, cap),
        .id_hdr = header(m, "dlserve-id", id, cap),
        .topic = r->tp->topic, .partition = r->tp->partition, .offset = r->offset,
    };
}

/* ---- partitions ------------------------------------------------------- */

static tpart *tp_find(kafka_srv *k, const char *topic, int32_t partition)
{
    for (int i = 0; i < k->ntps; i++)
        if (k->tps[i]->partition == partition && strcmp(k->tps[i]->topic, topic) == 0)
            return k->tps[i];
    return NULL;
}

/* The partition's state, created on first use; kept until shutdown so
 * that records in the batcher can always point at it. */
static tpart *tp_get(kafka_srv *k, const char *topic, int32_t partition)
{
    tpart *tp = tp_find(k, topic, partition);
    if (tp)
        return tp;
    tpart **n = realloc(k->tps, (size_t)(k->ntps + 1) * sizeof(*n));
    if (!n)
        return NULL;
    k->tps = n;
    if (!(tp = calloc(1, sizeof(*tp))))
        return NULL;
    snprintf(tp->topic, sizeof(tp->topic), "%s", topic);
    tp->partition = partition;
    tp->next_expected = tp->done_next = tp->committed = -1;
    k->tps[k->ntps++] = tp;
    return tp;
}

static krec *ring_at(const tpart *tp, size_t i) { return tp->ring[(tp->head + i) % tp->cap]; }

static bool ring_push(tpart *tp, krec *r)
{
    if (tp->count == tp->cap) {
        size_t cap = tp->cap ? tp->cap * 2 : 256;
        krec **n = malloc(cap * sizeof(*n));
        if (!n)
            return false;
        for (size_t i = 0; i < tp->count; i++)
            n[i] = ring_at(tp, i);
        free(tp->ring);
        tp->ring = n;
        tp->cap = cap;
        tp->head = 0;
    }
    tp->ring[(tp->head + tp->count++) % tp->cap] = r;
    return true;
}

static krec *ring_pop(tpart *tp)
{
    krec *r = tp->ring[tp->head];
    tp->head = (tp->head + 1) % tp->cap;
    tp->count--;
    return r;
}

/* Forgets every record of tp: those in the batcher become stale (freed
 * when they complete), the others are freed now. They were not
 * committed, so Kafka delivers them again. */
static void tp_drop(kafka_srv *k, tpart *tp)
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
        krec *r = ring_pop(tp);
        k->held--;
        if (r->state == R_INFER || r->state == R_SENT) {
            /* the batcher or a delivery report still holds it: freed then */
            r->epoch = STALE;
            k->stale++;
        } else {
            rec_free(r);
        }
    }
    atomic_store(&k->c.in_flight, k->held);
}

/* ---- producing -------------------------------------------------------- */

/* Produces to topic, waiting for room in the producer's queue (that is
 * backpressure, not loss). hdrs is taken. value is copied. */
static rd_kafka_resp_err_t produce(kafka_srv *k, const char *topic, const void *key,
                                   size_t key_len, const void *value, size_t len,
                                   rd_kafka_headers_t *hdrs, void *opaque)
{
    for (;;) {
        rd_kafka_resp_err_t e = rd_kafka_producev(
            k->prod, RD_KAFKA_V_TOPIC(topic), RD_KAFKA_V_KEY(key, key_len),
            RD_KAFKA_V_VALUE((void *)value, len), RD_KAFKA_V_MSGFLAGS(RD_KAFKA_MSG_F_COPY),
            RD_KAFKA_V_HEADERS(hdrs), RD_KAFKA_V_OPAQUE(opaque), RD_KAFKA_V_END);
        if (e != RD_KAFKA_RESP_ERR__QUEUE_FULL) {
            if (e)
                rd_kafka_headers_destroy(hdrs);
            return e;
        }
        rd_kafka_poll(k->prod, 10);
    }
}

static void hdr_add_int(rd_kafka_headers_t *h, const char *name, long long v)
{
    char buf[32];
    int n = snprintf(buf, sizeof(buf), "%lld", v);
    rd_kafka_header_add(h, name, -1, buf, n);
}

/* The source's topic/partition/offset headers. */
static void hdr_source(rd_kafka_headers_t *h, const krec *r)
{
    rd_kafka_header_add(h, "dlserve-source-topic", -1, r->tp->topic, -1);
    hdr_add_int(h, "dlserve-source-partition", r->tp->partition);
    hdr_add_int(h, "dlserve-source-offset", r->offset);
    rd_kafka_timestamp_type_t tt;
    int64_t ts = rd_kafka_message_timestamp(r->msg, &tt);
    if (ts >= 0)
        hdr_add_int(h, "dlserve-source-timestamp", ts);
}

/* After a produce: done now in exactly-once (the transaction decides),
 * after the delivery report otherwise. A produce error that is not
 * about room is logged, counted and the record passes as done: its
 * fate is in the log and /metrics rather than blocking the partition. */
static void produced(kafka_srv *k, krec *r, rd_kafka_resp_err_t e, const char *what)
{
    bool is_output = strcmp(what, "output") == 0;
    if (e) {
        DL_LOG(DL_LOG_ERR, "kafka", "cannot produce the %s of %s/%d@%lld: %s", what,
               r->tp->topic, (int)r->tp->partition, (long long)r->offset, rd_kafka_err2str(e));
        atomic_fetch_add(&k->c.produce_retries, 1);
        r->state = R_DONE;
    } else {
        r->state = k->mode == MODE_EOS ? R_DONE : R_SENT;
        k->txn_dirty = true;
        if (is_output && k->mode == MODE_EOS)   /* else counted when delivered */
            atomic_fetch_add(&k->c.outputs, 1);
    }
    rd_kafka_message_destroy(r->msg);
    r->msg = NULL;
}

/* Sends the record, unchanged, to the dead-letter topic with headers
 * naming the error and its source. */
static void dead_letter(kafka_srv *k, krec *r, record_fault f, const char *why)
{
    rd_kafka_message_t *m = r->msg;
    rd_kafka_headers_t *in = NULL, *h;
    h = rd_kafka_message_headers(m, &in) == RD_KAFKA_RESP_ERR_NO_ERROR
            ? rd_kafka_headers_copy(in) : rd_kafka_headers_new(6);
    rd_kafka_header_add(h, "dlserve-error", -1, why, -1);
    rd_kafka_header_add(h, "dlserve-error-kind", -1, record_fault_name(f), -1);
    if (r->env.id)
        rd_kafka_header_add(h, "dlserve-id", -1, r->env.id, -1);
    hdr_source(h, r);
    atomic_fetch_add(&k->c.dead[f], 1);
    if (k->dead_logged++ < 100)
        DL_LOG(DL_LOG_NOTICE, "kafka", "dead letter %s/%d@%lld (%s): %s%s", r->tp->topic,
               (int)r->tp->partition, (long long)r->offset, record_fault_name(f), why,
               k->dead_logged == 100 ? " (further dead letters are counted, not logged)" : "");
    rd_kafka_resp_err_t e = produce(k, k->conf.dead_letter_topic, m->key, m->key_len,
                                    m->payload, m->len, h,
                                    k->mode == MODE_EOS ? NULL : r);
    produced(k, r, e, "dead letter");
}

#ifdef DL_HAVE_REDIS
/* At-least-once with [redis] results: the result also goes to Redis,
 * best effort (a failure is counted; the Kafka output is the record). */
static void sink_result(kafka_srv *k, const krec *r, const char *text, size_t len)
{
    if (!k->sink)
        return;
    dl_redis_result res = { r->env.id, text, len };
    dl_err err = {0};
    if (dl_redis_commit(k->sink, k->conf.group_id, &res, 1, NULL, 0, k->rconf.result_ttl_s,
                     &err) != DL_OK)
        atomic_fetch_add(&k->c.sink_errors, 1);
}
#endif

/* A finished inference: its output to the output topic (or, in redis
 * mode, kept for the next MULTI/EXEC). */
static void output(kafka_srv *k, krec *r)
{
    served *sv = r->req.sv;
    record_out o = {
        .id = r->env.id, .model = sv->name, .version = sv->version, .conf = sv->conf,
        .n = r->req.n, .out_dim = sv->out_dim, .y = r->req.out,
        .topic = r->tp->topic, .partition = r->tp->partition, .offset = r->offset,
    };
    size_t len = 0;
    char *text = record_output(&o, &len);
    if (!text) {
        dead_letter(k, r, REC_INFERENCE, "out of memory writing the output");
        return;
    }
    if (k->mode == MODE_REDIS) {
        r->result = text;
        r->result_len = len;
        r->state = R_DONE;
        rd_kafka_message_destroy(r->msg);
        r->msg = NULL;
        return;
    }
#ifdef DL_HAVE_REDIS
    sink_result(k, r, text, len);
#endif
    rd_kafka_headers_t *h = rd_kafka_headers_new(8);
    hdr_source(h, r);
    rd_kafka_header_add(h, "dlserve-model", -1, sv->name, -1);
    hdr_add_int(h, "dlserve-version", sv->version);
    rd_kafka_header_add(h, "content-type", -1, "application/json", -1);
    rd_kafka_resp_err_t e = produce(k, k->conf.output_topic, r->msg->key, r->msg->key_len,
                                    text, len, h, k->mode == MODE_EOS ? NULL : r);
    free(text);
    produced(k, r, e, "output");
}

/* Delivery reports (Kafka thread, from rd_kafka_poll / flush). A failed
 * delivery is produced again: librdkafka has already retried for
 * message.timeout.ms, so this is an outage, and the record must not be
 * lost. In exactly-once mode the transaction fails instead. */
static void on_delivery(rd_kafka_t *rk, const rd_kafka_message_t *m, void *opaque)
{
    kafka_srv *k = opaque;
    krec *r = m->_private;
    if (!r)
        return;
    if (r->epoch == STALE) {   /* its partition was dropped meanwhile */
        k->stale--;
        rec_free(r);
        return;
    }
    if (m->err == RD_KAFKA_RESP_ERR_NO_ERROR) {
        r->state = R_DONE;
        if (!strcmp(rd_kafka_topic_name(m->rkt), k->conf.output_topic))
            atomic_fetch_add(&k->c.outputs, 1);
        return;
    }
    DL_LOG(DL_LOG_WARNING, "kafka", "delivery to %s failed (%s): producing again",
           rd_kafka_topic_name(m->rkt), rd_kafka_err2str(m->err));
    atomic_fetch_add(&k->c.produce_retries, 1);
    rd_kafka_headers_t *h = NULL;
    if (rd_kafka_message_headers(m, &h) == RD_KAFKA_RESP_ERR_NO_ERROR)
        h = rd_kafka_headers_copy(h);
    else
        h = rd_kafka_headers_new(0);
    rd_kafka_resp_err_t e = rd_kafka_producev(
        rk, RD_KAFKA_V_TOPIC(rd_kafka_topic_name(m->rkt)), RD_KAFKA_V_KEY(m->key, m->key_len),
        RD_KAFKA_V_VALUE(m->payload, m->len), RD_KAFKA_V_MSGFLAGS(RD_KAFKA_MSG_F_COPY),
        RD_KAFKA_V_HEADERS(h), RD_KAFKA_V_OPAQUE(r), RD_KAFKA_V_END);
    if (e) {
        rd_kafka_headers_destroy(h);
        DL_LOG(DL_LOG_ERR, "kafka", "cannot produce again (%s): record %s/%d@%lld stays "
               "uncommitted and is consumed again after a restart", rd_kafka_err2str(e),
               r->tp->topic, (int)r->tp->partition, (long long)r->offset);
    }
}

/* ---- the batcher ------------------------------------------------------- */

/* Batcher thread: queue the record for the Kafka thread and wake it. */
static void on_done(infer_req *q, void *ctx)
{
    kafka_srv *k = ctx;
    krec *r = (krec *)((char *)q - offsetof(krec, req));
    pthread_mutex_lock(&k->done_mu);
    r->next = NULL;
    if (k->done_tail)
        k->done_tail->next = r;
    else
        k->done_head = r;
    k->done_tail = r;
    pthread_mutex_unlock(&k->done_mu);
    rd_kafka_queue_yield(k->cq);
}

/* The model a record without one goes to: the configured default, or
 * the only model being served. Looked up once a round of the thread (not
 * once a record): the served models change only on reloads. */
static void default_model(kafka_srv *k, char *out, size_t cap)
{
    snprintf(out, cap, "%s", k->conf.default_model);
    if (out[0])
        return;
    char **names = registry_names(k->reg);
    int served_models = 0;
    for (int i = 0; names && names[i]; i++) {
        served *sv;
        if (registry_acquire(k->reg, names[i], 0, &sv, NULL) == DL_OK && served_models++ == 0)
            snprintf(out, cap, "%s", names[i]);
        served_release(sv);
        free(names[i]);
    }
    free(names);
    if (served_models != 1)
        out[0] = '\0';
}

/* Parses the record (once) and gives it to the batcher. False when the
 * batcher is full: the record keeps its decoded inputs and waits. */
static bool submit(kafka_srv *k, krec *r)
{
    dl_err err = {0};
    if (!r->req.x) {
        char model[HDR_MAX], id[HDR_MAX], ctype[HDR_MAX];
        record_in in;
        record_in_of(r, &in, model, id, ctype);
        record_fault f = record_open(&in, k->def_model, (size_t)k->conf.max_record_bytes,
                                     &r->env, &err);
        served *sv = NULL;
        /* Not found or nothing served yet: either way this record names
         * no model to run now. */
        if (f == REC_OK &&
            registry_acquire(k->reg, r->env.model, r->env.version, &sv, &err) != DL_OK)
            f = REC_MODEL;
        int64_t n = 0;
        float *x = NULL;
        if (f == REC_OK)
            f = record_decode(&in, &r->env, sv->conf, sv->in_dim, &n, &x, &err);
        if (f != REC_OK) {
            served_release(sv);
            dead_letter(k, r, f, err.msg);
            return true;
        }
        snprintf(r->req.model, sizeof(r->req.model), "%s", sv->name);
        r->req.version = sv->version;
        r->req.sv = sv;
        r->req.n = n;
        r->req.x = x;
        r->req.on_done = on_done;
        r->req.ctx = k;
    }
    dl_status st = batcher_submit(k->bat, &r->req, &err);
    if (st == DL_ERR_BUSY || st == DL_ERR_UNAVAILABLE)   /* full, or stopping */
        return false;
    if (st != DL_OK) {
        dead_letter(k, r, record_fault_of(st), err.msg);
        return true;
    }
    r->state = R_INFER;
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
        /* unlinked first: once submitted, its link belongs to the done list */
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

/* Completed inferences: outputs (or dead letters for failed batches). */
static void drain_done(kafka_srv *k)
{
    pthread_mutex_lock(&k->done_mu);
    krec *r = k->done_head;
    k->done_head = k->done_tail = NULL;
    pthread_mutex_unlock(&k->done_mu);
    for (krec *next; r; r = next) {
        next = r->next;
        infer_req *q = &r->req;
        if (r->epoch != k->epoch) {   /* rewound or revoked meanwhile */
            k->stale--;
            rec_free(r);
            continue;
        }
        stats_request(k->st, q->sv->name, q->sv->version, q->err.code == DL_OK, q->n,
                      (q->t_start - q->t_arrival) * 1e6, (q->t_end - q->t_start) * 1e6,
                      (dl_time_now() - q->t_arrival) * 1e6);
        if (q->err.code == DL_OK)
            output(k, r);
        else
            dead_letter(k, r, REC_INFERENCE, q->err.msg);
        free(q->x);
        free(q->out);
        q->x = q->out = NULL;
        served_release(q->sv);
        q->sv = NULL;
    }
}

/* ---- offsets ----------------------------------------------------------- */

#ifdef DL_HAVE_REDIS
/* Redis mode: the results of the done prefixes and the offsets after them
 * go in one MULTI/EXEC; only then are the records released. */
static void advance_redis(kafka_srv *k)
{
    size_t nres = 0, noffs = 0, cap = 0;
    for (int i = 0; i < k->ntps; i++)
        cap += k->tps[i]->count;
    if (cap == 0)
        return;
    dl_redis_result *res = malloc(cap * sizeof(*res));
    dl_redis_offset *offs = malloc((size_t)k->ntps * sizeof(*offs));
    size_t *cnt = calloc((size_t)k->ntps, sizeof(*cnt));
    if (!res || !offs || !cnt)
        goto out;
    for (int i = 0; i < k->ntps; i++) {
        tpart *tp = k->tps[i];
        while (cnt[i] < tp->count && ring_at(tp, cnt[i])->state == R_DONE) {
            krec *r = ring_at(tp, cnt[i]++);
            if (r->result)
                res[nres++] = (dl_redis_result){ r->env.id, r->result, r->result_len };
        }
        if (cnt[i])
            offs[noffs++] = (dl_redis_offset){ tp->topic, tp->partition,
                                               ring_at(tp, cnt[i] - 1)->offset + 1 };
    }
    if (noffs == 0)
        goto out;
    dl_err err = {0};
    if (dl_redis_commit(k->sink, k->conf.group_id, res, (int)nres, offs, (int)noffs,
                     k->rconf.result_ttl_s, &err) != DL_OK) {
        atomic_fetch_add(&k->c.redis_errors, 1);
        goto out;   /* kept: written at a later try */
    }
    atomic_fetch_add(&k->c.redis_writes, 1);
    atomic_fetch_add(&k->c.outputs, (long long)nres);
    for (int i = 0; i < k->ntps; i++) {
        tpart *tp = k->tps[i];
        for (size_t j = 0; j < cnt[i]; j++) {
            krec *r = ring_pop(tp);
            tp->done_next = tp->committed = r->offset + 1;
            rec_free(r);
            k->held--;
        }
    }
out:
    free(res);
    free(offs);
    free(cnt);
}
#endif

/* Releases the done prefix of every partition; in at-least-once mode the
 * offsets after them are stored for the next commit. */
static void advance(kafka_srv *k)
{
#ifdef DL_HAVE_REDIS
    if (k->mode == MODE_REDIS) {
        advance_redis(k);
        atomic_store(&k->c.in_flight, k->held);
        return;
    }
#endif
    rd_kafka_topic_partition_list_t *store = NULL;
    for (int i = 0; i < k->ntps; i++) {
        tpart *tp = k->tps[i];
        bool moved = false;
        while (tp->count && ring_at(tp, 0)->state == R_DONE) {
            krec *r = ring_pop(tp);
            tp->done_next = r->offset + 1;
            rec_free(r);
            k->held--;
            moved = true;
        }
        if (moved && k->mode == MODE_ALO) {
            if (!store)
                store = rd_kafka_topic_partition_list_new(8);
            rd_kafka_topic_partition_list_add(store, tp->topic, tp->partition)->offset =
                tp->done_next;
        }
    }
    if (store) {
        rd_kafka_resp_err_t e = rd_kafka_offsets_store(k->cons, store);
        if (e)
            DL_LOG(DL_LOG_WARNING, "kafka", "storing offsets: %s", rd_kafka_err2str(e));
        rd_kafka_topic_partition_list_destroy(store);
    }
    atomic_store(&k->c.in_flight, k->held);
}

/* At-least-once: commits the stored offsets now (synchronously; on_commit
 * records the result). */
static void commit_stored(kafka_srv *k)
{
    rd_kafka_resp_err_t e = rd_kafka_commit(k->cons, NULL, 0);
    if (e && e != RD_KAFKA_RESP_ERR__NO_OFFSET)
        DL_LOG(DL_LOG_WARNING, "kafka", "commit: %s", rd_kafka_err2str(e));
}

/* ---- exactly-once ------------------------------------------------------ */

static void set_fatal(kafka_srv *k, const char *why)
{
    pthread_mutex_lock(&k->snap_mu);
    if (!k->fatal[0]) {
        snprintf(k->fatal, sizeof(k->fatal), "%s", why);
        DL_LOG(DL_LOG_ERR, "kafka", "fatal: %s; Kafka intake stops (HTTP keeps serving)", why);
    }
    pthread_mutex_unlock(&k->snap_mu);
}

static bool is_fatal(kafka_srv *k)
{
    pthread_mutex_lock(&k->snap_mu);
    bool f = k->fatal[0] != '\0';
    pthread_mutex_unlock(&k->snap_mu);
    return f;
}

static void txn_begin(kafka_srv *k)
{
    rd_kafka_error_t *e = rd_kafka_begin_transaction(k->prod);
    if (e) {
        set_fatal(k, rd_kafka_error_string(e));
        rd_kafka_error_destroy(e);
        return;
    }
    k->txn_open = true;
    k->txn_dirty = false;
    DL_LOG(DL_LOG_DEBUG, "kafka", "transaction begun");
}

/* After an aborted transaction: forget every record and go back to the
 * committed offsets, so the aborted outputs are produced again. */
static void rewind_to_committed(kafka_srv *k)
{
    k->epoch++;
    rd_kafka_topic_partition_list_t *l = rd_kafka_topic_partition_list_new(8);
    for (int i = 0; i < k->ntps; i++) {
        tpart *tp = k->tps[i];
        tp_drop(k, tp);
        if (tp->assigned)
            rd_kafka_topic_partition_list_add(l, tp->topic, tp->partition);
    }
    rd_kafka_resp_err_t e = rd_kafka_committed(k->cons, l, TXN_TIMEOUT_MS);
    for (int i = 0; e == RD_KAFKA_RESP_ERR_NO_ERROR && i < l->cnt; i++) {
        tpart *tp = tp_find(k, l->elems[i].topic, l->elems[i].partition);
        if (l->elems[i].offset < 0)
            l->elems[i].offset = RD_KAFKA_OFFSET_BEGINNING;
        tp->next_expected = l->elems[i].offset < 0 ? -1 : l->elems[i].offset;
        tp->done_next = tp->committed = tp->next_expected;
    }
    rd_kafka_error_t *se = e ? NULL : rd_kafka_seek_partitions(k->cons, l, TXN_TIMEOUT_MS);
    if (e || se) {
        char why[256];
        snprintf(why, sizeof(why), "cannot rewind to the committed offsets: %s",
                 e ? rd_kafka_err2str(e) : rd_kafka_error_string(se));
        set_fatal(k, why);
    } else {
        DL_LOG(DL_LOG_NOTICE, "kafka", "rewound %d partitions to their committed offsets",
               l->cnt);
    }
    if (se)
        rd_kafka_error_destroy(se);
    rd_kafka_topic_partition_list_destroy(l);
}

/* A failed transactional call: abort and rewind when the transaction
 * can be aborted, stop intake when the producer is fenced or broken. */
static void txn_failed(kafka_srv *k, rd_kafka_error_t *e, const char *what)
{
    if (rd_kafka_error_is_fatal(e)) {
        char why[256];
        snprintf(why, sizeof(why), "%s: %s", what, rd_kafka_error_string(e));
        set_fatal(k, why);
    } else if (rd_kafka_error_txn_requires_abort(e)) {
        DL_LOG(DL_LOG_WARNING, "kafka", "%s: %s: aborting the transaction", what,
               rd_kafka_error_string(e));
        rd_kafka_error_t *ae = rd_kafka_abort_transaction(k->prod, TXN_TIMEOUT_MS);
        k->txn_open = false;
        atomic_fetch_add(&k->c.txn_aborts, 1);
        if (ae) {
            char why[256];
            snprintf(why, sizeof(why), "abort_transaction: %s", rd_kafka_error_string(ae));
            set_fatal(k, why);
            rd_kafka_error_destroy(ae);
        } else {
            DL_LOG(DL_LOG_NOTICE, "kafka", "transaction aborted");
            rewind_to_committed(k);
            txn_begin(k);
        }
    } else {
        DL_LOG(DL_LOG_WARNING, "kafka", "%s: %s (retrying)", what, rd_kafka_error_string(e));
    }
    rd_kafka_error_destroy(e);
}

/* Commits the open transaction with the offsets after the done prefixes,
 * then begins the next one. */
static void txn_commit(kafka_srv *k)
{
    if (!k->txn_open || !k->txn_dirty)
        return;
    rd_kafka_topic_partition_list_t *l = rd_kafka_topic_partition_list_new(8);
    for (int i = 0; i < k->ntps; i++) {
        tpart *tp = k->tps[i];
        if (tp->assigned && tp->done_next > tp->committed)
            rd_kafka_topic_partition_list_add(l, tp->topic, tp->partition)->offset =
                tp->done_next;
    }
    rd_kafka_error_t *e = NULL;
    if (l->cnt) {
        rd_kafka_consumer_group_metadata_t *md = rd_kafka_consumer_group_metadata(k->cons);
        e = rd_kafka_send_offsets_to_transaction(k->prod, l, md, TXN_TIMEOUT_MS);
        rd_kafka_consumer_group_metadata_destroy(md);
    }
    if (e) {
        rd_kafka_topic_partition_list_destroy(l);
        txn_failed(k, e, "send_offsets_to_transaction");
        return;
    }
    if ((e = rd_kafka_commit_transaction(k->prod, TXN_TIMEOUT_MS))) {
        rd_kafka_topic_partition_list_destroy(l);
        txn_failed(k, e, "commit_transaction");
        return;
    }
    for (int i = 0; i < l->cnt; i++)
        tp_find(k, l->elems[i].topic, l->elems[i].partition)->committed = l->elems[i].offset;
    DL_LOG(DL_LOG_DEBUG, "kafka", "transaction committed with the offsets of %d partitions",
           l->cnt);
    rd_kafka_topic_partition_list_destroy(l);
    atomic_fetch_add(&k->c.txn_commits, 1);
    k->txn_open = false;
    txn_begin(k);
}

/* Everything in flight finished, delivered and committed: before
 * partitions are revoked and at shutdown. `only` limits the wait to
 * the records of those partitions (NULL: all). */
static void settle(kafka_srv *k, const rd_kafka_topic_partition_list_t *only)
{
    for (;;) {
        drain_done(k);
        rd_kafka_poll(k->prod, 0);
        bool busy = false;
        for (int i = 0; i < k->ntps && !busy; i++) {
            tpart *tp = k->tps[i];
            bool in = !only;
            for (int j = 0; only && j < only->cnt && !in; j++)
                in = tp->partition == only->elems[j].partition &&
                     !strcmp(tp->topic, only->elems[j].topic);
            for (size_t j = 0; in && j < tp->count && !busy; j++)
                busy = ring_at(tp, j)->state == R_INFER;
        }
        if (!busy)
            break;
        rd_kafka_poll(k->prod, 1);
    }
    if (k->mode != MODE_EOS)
        rd_kafka_flush(k->prod, FLUSH_TIMEOUT_MS);
    advance(k);
    if (k->mode == MODE_ALO)
        commit_stored(k);
    else if (k->mode == MODE_EOS)
        txn_commit(k);
}

/* ---- rebalancing ------------------------------------------------------- */

static void pause_all(kafka_srv *k, bool pause)
{
    rd_kafka_topic_partition_list_t *l = NULL;
    if (rd_kafka_assignment(k->cons, &l) == RD_KAFKA_RESP_ERR_NO_ERROR && l->cnt)
        (pause ? rd_kafka_pause_partitions : rd_kafka_resume_partitions)(k->cons, l);
    if (l)
        rd_kafka_topic_partition_list_destroy(l);
    k->paused = pause;
    atomic_store(&k->c.paused, pause);
    if (pause)
        atomic_fetch_add(&k->c.pauses, 1);
    DL_LOG(DL_LOG_DEBUG, "kafka", "%s intake (%lld records held)", pause ? "pausing" : "resuming",
           (long long)k->held);
}

#ifdef DL_HAVE_REDIS
/* Redis mode: start each partition at the offset stored with the results
 * (waits for Redis: a wrong start would write results twice). */
static void redis_positions(kafka_srv *k, rd_kafka_topic_partition_list_t *l)
{
    for (int i = 0; i < l->cnt; i++) {
        int64_t next = -1;
        dl_err err = {0};
        for (int tries = 0; !atomic_load(&k->stop); tries++) {
            if (dl_redis_offset_get(k->sink, k->conf.group_id, l->elems[i].topic,
                                    l->elems[i].partition, &next, &err) == DL_OK)
                break;
            if (tries == 0)
                DL_LOG(DL_LOG_WARNING, "kafka", "waiting for Redis to read the offset of "
                       "%s/%d: %s", l->elems[i].topic, (int)l->elems[i].partition, err.msg);
            struct timespec ts = { 0, 100000000L };
            nanosleep(&ts, NULL);
        }
        if (next >= 0)
            l->elems[i].offset = next;
    }
}
#endif

static void on_assign(kafka_srv *k, rd_kafka_t *rk, rd_kafka_topic_partition_list_t *l, bool coop)
{
#ifdef DL_HAVE_REDIS
    if (k->mode == MODE_REDIS)
        redis_positions(k, l);
#endif
    for (int i = 0; i < l->cnt; i++) {
        tpart *tp = tp_get(k, l->elems[i].topic, l->elems[i].partition);
        if (!tp) {
            set_fatal(k, "out of memory assigning partitions");
            break;
        }
        tp_drop(k, tp);
        tp->assigned = true;
        tp->next_expected = l->elems[i].offset >= 0 ? l->elems[i].offset : -1;
        tp->done_next = tp->committed = tp->next_expected;
    }
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
     * waiting for it are dropped by tp_drop (not committed: the next
     * owner consumes them). */
    if (!is_fatal(k))
        settle(k, l);
    for (int i = 0; i < l->cnt; i++) {
        tpart *tp = tp_find(k, l->elems[i].topic, l->elems[i].partition);
        if (tp) {
            tp_drop(k, tp);
            tp->assigned = false;
        }
    }
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

static void on_rebalance(rd_kafka_t *rk, rd_kafka_resp_err_t err,
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

/* ---- the thread -------------------------------------------------------- */

/* A consumed record: into its partition's ring, then to the batcher. */
static void take(kafka_srv *k, rd_kafka_message_t *m)
{
    tpart *tp = tp_find(k, rd_kafka_topic_name(m->rkt), m->partition);
    if (!tp || !tp->assigned || m->offset < tp->next_expected) {
        atomic_fetch_add(&k->c.redelivered, 1);   /* already held, or not ours */
        rd_kafka_message_destroy(m);
        return;
    }
    krec *r = calloc(1, sizeof(*r));
    if (r)
        infer_req_init(&r->req);
    if (!r || !ring_push(tp, r)) {
        /* not taken and not committed: seek back so it comes again */
        free(r);
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
    r->tp = tp;
    r->offset = m->offset;
    r->msg = m;
    r->epoch = k->epoch;
    k->held++;
    atomic_fetch_add(&k->c.consumed, 1);
    if (k->over_head || !submit(k, r))
        overflow_push(k, r);
}

/* Per-partition positions and lag for /status and /metrics. */
static void snapshot(kafka_srv *k)
{
    json_t *parts = json_array();
    for (int i = 0; parts && i < k->ntps; i++) {
        tpart *tp = k->tps[i];
        if (!tp->assigned)
            continue;
        int64_t lo = -1, hi = -1;
        rd_kafka_get_watermark_offsets(k->cons, tp->topic, tp->partition, &lo, &hi);
        int64_t done = tp->done_next >= 0 ? tp->done_next : lo;
        json_array_append_new(parts, json_pack(
            "{s:s, s:i, s:I, s:I, s:I, s:I}", "topic", tp->topic, "partition",
            (int)tp->partition, "position", (json_int_t)tp->next_expected, "committed",
            (json_int_t)tp->committed, "high", (json_int_t)hi, "lag",
            (json_int_t)(hi >= 0 && done >= 0 ? hi - done : -1)));
    }
    pthread_mutex_lock(&k->snap_mu);
    json_decref(k->snap_parts);
    k->snap_parts = parts;
    pthread_mutex_unlock(&k->snap_mu);
}

static void *kafka_thread(void *arg)
{
    kafka_srv *k = arg;
    double last_snap = 0.0;
    while (!atomic_load(&k->stop)) {
        default_model(k, k->def_model, sizeof(k->def_model));
        drain_done(k);
        overflow_retry(k);
        rd_kafka_poll(k->prod, 0);
        advance(k);
        double now = dl_time_now();
        if (k->mode == MODE_EOS && now - k->last_commit >= k->conf.commit_interval_ms * 1e-3) {
            txn_commit(k);
            k->last_commit = now;
        }
        /* Records the batcher has no room for wait in the overflow list;
         * intake pauses once max_in_flight records are held, and resumes
         * at half of that (each resume costs a fetch round trip). */
        bool fatal = is_fatal(k);
        if (!k->paused && (fatal || k->held >= k->conf.max_in_flight))
            pause_all(k, true);
        else if (k->paused && !fatal && k->held <= k->conf.max_in_flight / 2)
            pause_all(k, false);
        if (now - last_snap > 0.5) {
            snapshot(k);
            last_snap = now;
        }
        /* Records come in runs (what is already fetched, up to POLL_RUN)
         * between two rounds of the work above; short waits while anything
         * waits for a delivery report. */
        for (int i = 0; i < POLL_RUN && k->held < k->conf.max_in_flight; i++) {
            rd_kafka_message_t *m = rd_kafka_consumer_poll(k->cons, i ? 0 : k->held ? 2 : 100);
            if (!m)
                break;
            if (m->err) {
                if (m->err != RD_KAFKA_RESP_ERR__PARTITION_EOF)
                    DL_LOG(DL_LOG_WARNING, "kafka", "consumer: %s", rd_kafka_message_errstr(m));
                rd_kafka_message_destroy(m);
            } else if (fatal) {   /* intake stopped: not taken, not committed */
                rd_kafka_message_destroy(m);
            } else {
                take(k, m);
            }
        }
    }
    /* Shutdown: records not yet in the batcher stay uncommitted; the rest
     * finish, are delivered and committed before the group is left. */
    k->over_head = k->over_tail = NULL;
    for (int i = 0; i < k->ntps; i++) {
        tpart *tp = k->tps[i];
        size_t keep = 0;
        while (keep < tp->count && ring_at(tp, keep)->state != R_NEW)
            keep++;
        while (tp->count > keep) {   /* drop the unsubmitted tail */
            krec *r = tp->ring[(tp->head + tp->count - 1) % tp->cap];
            tp->count--;
            k->held--;
            rec_free(r);
        }
    }
    if (!is_fatal(k))
        settle(k, NULL);
    rd_kafka_consumer_close(k->cons);
    for (int i = 0; i < k->ntps; i++)
        tp_drop(k, k->tps[i]);
    /* Records dropped earlier and still in the batcher or waiting for a
     * delivery report (bounded: a broker that never answers leaves them). */
    for (double t0 = dl_time_now(); k->stale > 0 && dl_time_now() - t0 < 30.0;) {
        drain_done(k);
        rd_kafka_poll(k->prod, 1);
    }
    return NULL;
}

/* ---- set-up ------------------------------------------------------------ */

/* Commits (ours and the automatic ones), from the consumer poll. */
static void on_commit(rd_kafka_t *rk, rd_kafka_resp_err_t e,
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
        tpart *tp = tp_find(k, l->elems[i].topic, l->elems[i].partition);
        if (tp && !l->elems[i].err && l->elems[i].offset >= 0)
            tp->committed = l->elems[i].offset;
    }
}

static void on_log(const rd_kafka_t *rk, int level, const char *fac, const char *buf)
{
    (void)rk;
    DL_LOG(level <= 3 ? DL_LOG_ERR : level <= 5 ? DL_LOG_NOTICE : DL_LOG_DEBUG, "kafka",
           "librdkafka %s: %s", fac, buf);
}

static void on_error(rd_kafka_t *rk, int e, const char *reason, void *opaque)
{
    kafka_srv *k = opaque;
    char why[256];
    if (e == RD_KAFKA_RESP_ERR__FATAL) {
        rd_kafka_fatal_error(rk, why, sizeof(why));
        set_fatal(k, why);
    } else {
        DL_LOG(DL_LOG_WARNING, "kafka", "%s", reason);
    }
}

static dl_status set(rd_kafka_conf_t *c, const char *key, const char *value, const char *origin,
                     dl_err *err)
{
    char errstr[256];
    if (rd_kafka_conf_set(c, key, value, errstr, sizeof(errstr)) != RD_KAFKA_CONF_OK)
        return dl_err_set(err, DL_ERR_INVALID, "%s: Kafka property '%s': %s", origin, key,
                          errstr);
    return DL_OK;
}

/* Our settings, then the [kafka.consumer] / [kafka.producer] properties,
 * then what the delivery mode requires (it wins: a mode is a contract). */
static dl_status client_conf(kafka_srv *k, bool producer, rd_kafka_conf_t **out, dl_err *err)
{
    rd_kafka_conf_t *c = rd_kafka_conf_new();
    char interval[32];
    snprintf(interval, sizeof(interval), "%lld", (long long)k->conf.commit_interval_ms);
    dl_status st = set(c, "bootstrap.servers", k->bootstrap, "[kafka] brokers", err);
    if (st == DL_OK && producer) {
        st = set(c, "enable.idempotence", "true", "dlserve", err);
        if (st == DL_OK)
            st = set(c, "linger.ms", "2", "dlserve", err);
        /* a dead letter is as large as the record it copies */
        if (st == DL_OK)
            st = set(c, "message.max.bytes", "1000000000", "dlserve", err);
    } else if (st == DL_OK) {
        st = set(c, "group.id", k->conf.group_id, "[kafka] group_id", err);
        if (st == DL_OK)
            st = set(c, "auto.offset.reset", "earliest", "dlserve", err);
        if (st == DL_OK)
            st = set(c, "partition.assignment.strategy", "cooperative-sticky", "dlserve", err);
        if (st == DL_OK)
            st = set(c, "auto.commit.interval.ms", interval, "[kafka] commit_interval_ms", err);
        /* a resumed partition waits for the fetch in flight: keep it short */
        if (st == DL_OK)
            st = set(c, "fetch.wait.max.ms", "100", "dlserve", err);
    }
    for (int i = 0; st == DL_OK && i < k->conf.nprops; i++)
        if (k->conf.props[i].producer == producer)
            st = set(c, k->conf.props[i].key, k->conf.props[i].value, k->conf.props[i].origin,
                     err);
    if (st == DL_OK && producer && k->mode == MODE_EOS)
        st = set(c, "transactional.id", k->txn_id, "[kafka] transactional_id", err);
    if (st == DL_OK && !producer) {
        st = set(c, "enable.auto.offset.store", "false", "delivery mode", err);
        if (st == DL_OK)
            st = set(c, "enable.auto.commit", k->mode == MODE_ALO ? "true" : "false",
                     "delivery mode", err);
        if (st == DL_OK && k->mode == MODE_EOS)
            st = set(c, "isolation.level", "read_committed", "delivery mode", err);
    }
    if (st != DL_OK) {
        rd_kafka_conf_destroy(c);
        return st;
    }
    rd_kafka_conf_set_opaque(c, k);
    rd_kafka_conf_set_log_cb(c, on_log);
    rd_kafka_conf_set_error_cb(c, on_error);
    if (producer)
        rd_kafka_conf_set_dr_msg_cb(c, on_delivery);
    else {
        rd_kafka_conf_set_rebalance_cb(c, on_rebalance);
        rd_kafka_conf_set_offset_commit_cb(c, on_commit);
    }
    *out = c;
    return DL_OK;
}

/* Splits "a,b , c" into a subscription list (new). */
static rd_kafka_topic_partition_list_t *topic_list(const char *csv)
{
    rd_kafka_topic_partition_list_t *l = rd_kafka_topic_partition_list_new(4);
    char buf[sizeof(((dl_kafka_conf *)0)->input_topics)];
    snprintf(buf, sizeof(buf), "%s", csv);
    char *save = NULL;
    for (char *t = strtok_r(buf, ", ", &save); t; t = strtok_r(NULL, ", ", &save))
        rd_kafka_topic_partition_list_add(l, t, RD_KAFKA_PARTITION_UA);
    return l;
}

/* The in-process mock cluster, with every topic the daemon uses. */
static dl_status start_embedded(kafka_srv *k, dl_err *err)
{
    char errstr[256];
    rd_kafka_conf_t *c = rd_kafka_conf_new();
    rd_kafka_conf_set_log_cb(c, on_log);
    rd_kafka_conf_set(c, "log_level", "3", errstr, sizeof(errstr));   /* no "no brokers" warning */
    if (!(k->mock_rk = rd_kafka_new(RD_KAFKA_PRODUCER, c, errstr, sizeof(errstr))))
        return dl_err_set(err, DL_ERR_IO, "embedded Kafka: %s", errstr);
    if (!(k->mock = rd_kafka_mock_cluster_new(k->mock_rk, 1)))
        return dl_err_set(err, DL_ERR_IO, "embedded Kafka: cannot start the mock cluster");
    snprintf(k->bootstrap, sizeof(k->bootstrap), "%s", rd_kafka_mock_cluster_bootstraps(k->mock));
    rd_kafka_topic_partition_list_t *l = topic_list(k->conf.input_topics);
    rd_kafka_topic_partition_list_add(l, k->conf.output_topic, 0);
    rd_kafka_topic_partition_list_add(l, k->conf.dead_letter_topic, 0);
    for (int i = 0; i < l->cnt; i++)
        rd_kafka_mock_topic_create(k->mock, l->elems[i].topic,
                                   (int)k->conf.embedded_partitions, 1);
    rd_kafka_topic_partition_list_destroy(l);
    DL_LOG(DL_LOG_NOTICE, "kafka", "embedded Kafka cluster at %s (topics %s, %s, %s; "
           "%lld partitions each)", k->bootstrap, k->conf.input_topics, k->conf.output_topic,
           k->conf.dead_letter_topic, (long long)k->conf.embedded_partitions);
    return DL_OK;
}

static dl_status start_clients(kafka_srv *k, dl_err *err)
{
    char errstr[512];
    rd_kafka_conf_t *pc = NULL, *cc = NULL;
    dl_status st = client_conf(k, true, &pc, err);
    if (st == DL_OK)
        st = client_conf(k, false, &cc, err);
    if (st != DL_OK) {
        if (pc)
            rd_kafka_conf_destroy(pc);
        return st;
    }
    if (!(k->prod = rd_kafka_new(RD_KAFKA_PRODUCER, pc, errstr, sizeof(errstr)))) {
        rd_kafka_conf_destroy(pc);
        rd_kafka_conf_destroy(cc);
        return dl_err_set(err, DL_ERR_INVALID, "Kafka producer: %s", errstr);
    }
    if (!(k->cons = rd_kafka_new(RD_KAFKA_CONSUMER, cc, errstr, sizeof(errstr)))) {
        rd_kafka_conf_destroy(cc);
        return dl_err_set(err, DL_ERR_INVALID, "Kafka consumer: %s", errstr);
    }
    rd_kafka_poll_set_consumer(k->cons);
    k->cq = rd_kafka_queue_get_consumer(k->cons);
    if (k->mode == MODE_EOS) {
        rd_kafka_error_t *e = rd_kafka_init_transactions(k->prod, TXN_TIMEOUT_MS);
        if (e) {
            st = dl_err_set(err, DL_ERR_IO, "Kafka transactions (%s): %s", k->txn_id,
                            rd_kafka_error_string(e));
            rd_kafka_error_destroy(e);
            return st;
        }
        txn_begin(k);
    }
    rd_kafka_topic_partition_list_t *l = topic_list(k->conf.input_topics);
    rd_kafka_resp_err_t e = rd_kafka_subscribe(k->cons, l);
    rd_kafka_topic_partition_list_destroy(l);
    if (e)
        return dl_err_set(err, DL_ERR_INVALID, "Kafka subscribe to '%s': %s",
                          k->conf.input_topics, rd_kafka_err2str(e));
    return DL_OK;
}

static void kafka_free(kafka_srv *k)
{
    if (k->cq)
        rd_kafka_queue_destroy(k->cq);
    if (k->cons)
        rd_kafka_destroy(k->cons);
    if (k->prod) {
        if (k->mode != MODE_EOS)
            rd_kafka_flush(k->prod, FLUSH_TIMEOUT_MS);
        rd_kafka_destroy(k->prod);
    }
    if (k->mock)
        rd_kafka_mock_cluster_destroy(k->mock);
    if (k->mock_rk)
        rd_kafka_destroy(k->mock_rk);
#ifdef DL_HAVE_REDIS
    dl_redis_link_free(k->sink);
#endif
    for (int i = 0; i < k->ntps; i++) {
        while (k->tps[i]->count)
            rec_free(ring_pop(k->tps[i]));
        free(k->tps[i]->ring);
        free(k->tps[i]);
    }
    free(k->tps);
    json_decref(k->snap_parts);
    pthread_mutex_destroy(&k->done_mu);
    pthread_mutex_destroy(&k->snap_mu);
    free(k);
}

dl_status kafka_start(const kafka_deps *deps, kafka_srv **out, dl_err *err)
{
    *out = NULL;
    kafka_srv *k = calloc(1, sizeof(*k));
    if (!k)
        return dl_err_set(err, DL_ERR_NOMEM, "kafka");
    k->conf = *deps->conf;
    k->rconf = *deps->redis;
    k->reg = deps->reg;
    k->bat = deps->bat;
    k->st = deps->st;
    pthread_mutex_init(&k->done_mu, NULL);
    pthread_mutex_init(&k->snap_mu, NULL);
    k->mode = k->conf.delivery;
    if (k->conf.transactional_id[0])
        snprintf(k->txn_id, sizeof(k->txn_id), "%s", k->conf.transactional_id);
    else
        snprintf(k->txn_id, sizeof(k->txn_id), "dlserve-%s", k->conf.group_id);
    snprintf(k->bootstrap, sizeof(k->bootstrap), "%s", k->conf.brokers);
    dl_status st = DL_OK;
#ifdef DL_HAVE_REDIS
    if (k->rconf.host[0] && (k->mode == MODE_REDIS || k->rconf.results))
        st = dl_redis_link_new(&k->rconf, "sink", &k->sink, err);
#else
    if (k->mode == MODE_REDIS || k->rconf.results)
        st = dl_err_set(err, DL_ERR_UNAVAILABLE, "this dlserve was built without Redis");
#endif
    if (st == DL_OK && k->conf.embedded && !k->conf.brokers[0])
        st = start_embedded(k, err);
    if (st == DL_OK)
        st = start_clients(k, err);
    if (st == DL_OK && pthread_create(&k->thread, NULL, kafka_thread, k) != 0)
        st = dl_err_set(err, DL_ERR_NOMEM, "cannot start the Kafka thread");
    if (st != DL_OK) {
        kafka_free(k);
        return st;
    }
    k->started = true;
    DL_LOG(DL_LOG_NOTICE, "kafka", "consuming %s from %s as group %s, %s delivery",
           k->conf.input_topics, k->bootstrap, k->conf.group_id,
           dl_delivery_name(k->mode));
    *out = k;
    return DL_OK;
}

void kafka_stop(kafka_srv *k)
{
    if (!k)
        return;
    if (k->started) {
        atomic_store(&k->stop, true);
        rd_kafka_queue_yield(k->cq);
        pthread_join(k->thread, NULL);
    }
    kafka_free(k);
}

/* ---- status and metrics ------------------------------------------------ */

json_t *kafka_status(kafka_srv *k)
{
    json_t *dead = json_object();
    for (int f = REC_EMPTY; f < REC_NFAULTS; f++)
        json_object_set_new(dead, record_fault_name(f), json_integer(atomic_load(&k->c.dead[f])));
    pthread_mutex_lock(&k->snap_mu);
    json_t *o = json_pack(
        "{s:s, s:s, s:s, s:s, s:b, s:I, s:I, s:I, s:o, s:I, s:I, s:I, s:I, s:I, s:I, s:I, s:O}",
        "bootstrap", k->bootstrap, "delivery", dl_delivery_name(k->mode), "group_id", k->conf.group_id,
        "input_topics", k->conf.input_topics, "paused", atomic_load(&k->c.paused),
        "in_flight", (json_int_t)atomic_load(&k->c.in_flight),
        "consumed", (json_int_t)atomic_load(&k->c.consumed),
        "outputs", (json_int_t)atomic_load(&k->c.outputs), "dead_letters", dead,
        "redelivered_skipped", (json_int_t)atomic_load(&k->c.redelivered),
        "pauses", (json_int_t)atomic_load(&k->c.pauses),
        "partitions_assigned", (json_int_t)atomic_load(&k->c.assigned),
        "partitions_revoked", (json_int_t)atomic_load(&k->c.revoked),
        "commits", (json_int_t)atomic_load(&k->c.commits),
        "transactions_committed", (json_int_t)atomic_load(&k->c.txn_commits),
        "transactions_aborted", (json_int_t)atomic_load(&k->c.txn_aborts),
        "partitions", k->snap_parts ? k->snap_parts : json_array());
    if (o && k->fatal[0])
        json_object_set_new(o, "fatal", json_string(k->fatal));
    pthread_mutex_unlock(&k->snap_mu);
#ifdef DL_HAVE_REDIS
    if (o && k->sink) {
        json_object_set_new(o, "redis_writes", json_integer(atomic_load(&k->c.redis_writes)));
        json_object_set_new(o, "redis_write_errors",
                            json_integer(atomic_load(&k->c.redis_errors) +
                                         atomic_load(&k->c.sink_errors)));
    }
#endif
    return o;
}

static void family(dl_sbuf *b, const char *name, const char *type, const char *help)
{
    dl_sbuf_printf(b, "# HELP %s %s\n# TYPE %s %s\n", name, help, name, type);
}

void kafka_metrics(kafka_srv *k, dl_sbuf *b)
{
    struct { const char *name, *help; atomic_llong *v; } counters[] = {
        {"dlserve_kafka_records_total", "Records consumed from the input topics.", &k->c.consumed},
        {"dlserve_kafka_outputs_total", "Predictions written (acknowledged by Kafka or Redis).",
         &k->c.outputs},
        {"dlserve_kafka_pauses_total", "Times intake paused for backpressure.", &k->c.pauses},
        {"dlserve_kafka_commits_total", "Synchronous offset commits.", &k->c.commits},
        {"dlserve_kafka_produce_retries_total", "Outputs produced again after a failed delivery.",
         &k->c.produce_retries},
        {"dlserve_kafka_redis_writes_total", "MULTI/EXEC of results and offsets (redis delivery).",
         &k->c.redis_writes},
        {"dlserve_kafka_redis_errors_total", "Failed Redis writes of results (retried).",
         &k->c.redis_errors},
    };
    for (size_t i = 0; i < sizeof(counters) / sizeof(*counters); i++) {
        family(b, counters[i].name, "counter", counters[i].help);
        dl_sbuf_printf(b, "%s %lld\n", counters[i].name, (long long)atomic_load(counters[i].v));
    }
    family(b, "dlserve_kafka_dead_letters_total", "counter",
           "Records sent to the dead-letter topic, by reason.");
    for (int f = REC_EMPTY; f < REC_NFAULTS; f++)
        dl_sbuf_printf(b, "dlserve_kafka_dead_letters_total{reason=\"%s\"} %lld\n",
                       record_fault_name(f), (long long)atomic_load(&k->c.dead[f]));
    family(b, "dlserve_kafka_transactions_total", "counter",
           "Kafka transactions (exactly-once delivery), by result.");
    dl_sbuf_printf(b, "dlserve_kafka_transactions_total{result=\"commit\"} %lld\n"
                      "dlserve_kafka_transactions_total{result=\"abort\"} %lld\n",
                   (long long)atomic_load(&k->c.txn_commits),
                   (long long)atomic_load(&k->c.txn_aborts));
    family(b, "dlserve_kafka_in_flight", "gauge", "Records consumed and not yet committed.");
    dl_sbuf_printf(b, "dlserve_kafka_in_flight %lld\n", (long long)atomic_load(&k->c.in_flight));
    family(b, "dlserve_kafka_paused", "gauge", "1 while intake is paused.");
    dl_sbuf_printf(b, "dlserve_kafka_paused %d\n", atomic_load(&k->c.paused) ? 1 : 0);
    family(b, "dlserve_kafka_up", "gauge", "0 after a fatal Kafka error stopped intake.");
    dl_sbuf_printf(b, "dlserve_kafka_up %d\n", is_fatal(k) ? 0 : 1);
    pthread_mutex_lock(&k->snap_mu);
    kafka_lag_metrics(b, k->snap_parts);
    pthread_mutex_unlock(&k->snap_mu);
}

void kafka_lag_metrics(dl_sbuf *b, json_t *parts)
{
    family(b, "dlserve_kafka_consumer_lag", "gauge",
           "Records in the partition after the committed position.");
    size_t i;
    json_t *p;
    json_array_foreach(parts, i, p) {
        /* Topic names come from the configuration: escaped like any label. */
        const char *topic = json_string_value(json_object_get(p, "topic"));
        dl_sbuf_printf(b, "dlserve_kafka_consumer_lag{topic=\"");
        dl_prom_label(b, topic ? topic : "");
        dl_sbuf_printf(b, "\",partition=\"%lld\"} %lld\n",
                       (long long)json_integer_value(json_object_get(p, "partition")),
                       (long long)json_integer_value(json_object_get(p, "lag")));
    }
}

#ifdef DL_HAVE_REDIS
dl_redis_link *kafka_redis_link(kafka_srv *k)
{
    return k ? k->sink : NULL;
}
#endif
