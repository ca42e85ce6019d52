/* kafka_int.h (private to the Kafka stages): the records, partitions and
 * service state that the stages share, and which thread may touch what.
 *
 * The Kafka service is a pipeline of three threads (see kafka.h):
 *
 *   consumer thread (kafka_in.c)    polls, parses, submits to the batcher,
 *                                   pauses/resumes, runs rebalances, releases
 *                                   done records and commits (kafka_delivery.c)
 *   batcher worker (batcher.c)      infers; its completion callback only
 *                                   hands the record over (kafka_out.c)
 *   output thread (kafka_out.c)     formats, produces outputs and dead
 *                                   letters, serves delivery reports
 *
 * A record's life: taken from the consumer's pool (R_NEW), parsed and
 * submitted (R_BUSY), handed to the output thread by the batcher's
 * completion (or at once when it is refused: a dead letter), produced
 * (R_SENT, or R_DONE when producing is enough), acknowledged (R_DONE),
 * then released by the consumer thread once every record before it in
 * its partition is done, and back to the pool. Its input buffer goes
 * back earlier: the output thread returns it in a batch each round. */
#ifndef DL_SERVE_KAFKA_INT_H
#define DL_SERVE_KAFKA_INT_H

#include "serve/kafka/kafka.h"
#include "serve/kafka/records.h"
#ifdef DL_HAVE_REDIS
#include "redis/dl_redis.h"
#endif

#include <librdkafka/rdkafka.h>
#include <librdkafka/rdkafka_mock.h>

#include <pthread.h>
#include <stdatomic.h>

#define KAFKA_TOPIC_MAX        256
#define KAFKA_FLUSH_TIMEOUT_MS 30000
#define KAFKA_CLOSE_TIMEOUT_MS 5000    /* leaving the group at shutdown */
#define KAFKA_PREFETCH_KB      16384  /* queued.max.messages.kbytes unless set (kafka_conf.c) */
#define KAFKA_PAUSE_AFTER_MS   1000   /* intake stopped this long: partitions pause */
#define KAFKA_TXN_TIMEOUT_MS   30000

/* ---- records ------------------------------------------------------------ */

typedef enum rec_state {
    R_NEW,       /* consumed, not yet given to the batcher (or waiting: queue full) */
    R_BUSY,      /* in the batcher, or handed to the output thread */
    R_SENT,      /* output or dead letter produced, waiting for its delivery report */
    R_DONE,      /* may be committed */
} rec_state;

struct tpart;
typedef struct kgen kgen;

/* Decoded inputs and room for their outputs: a record's from parsing
 * until its output is written, then back to the consumer's pool, so
 * buffers live only while inputs are queued for inference, not while
 * records wait for commits. */
typedef struct kbuf {
    float       *x;
    size_t       cap;              /* floats */
    float       *y;                /* the outputs (req.out) */
    size_t       ycap;             /* floats */
    struct kbuf *next;             /* pool or return list */
} kbuf;

/* One consumed record. The consumer thread owns it (its pool, its ring)
 * except while it is R_BUSY or R_SENT: then the batcher or the output
 * thread works on it, and `state` (release/acquire) hands it back. */
typedef struct krec {
    struct tpart        *tp;
    int64_t              offset;
    atomic_int           state;      /* rec_state */
    /* Forgotten by its partition (a revoke, a rewind) while R_BUSY or
     * R_SENT: nothing is produced for it, and the consumer frees it once
     * it is R_DONE. Set under out_mu. */
    atomic_bool          stale;
    rd_kafka_message_t  *msg;        /* owned until the output is produced */
    record_env           env;
    infer_req            req;        /* req.x is in->x once parsed */
    kbuf                *in;         /* decoded inputs (parsed and not yet inferred) */
    double               t_received; /* dl_time_now() when consumed */
    int64_t              ts_ms;      /* its Kafka timestamp (-1: none), kept by the
                                      * output thread for the delivery report */
    int                  ts_type;    /* rd_kafka_timestamp_type_t of ts_ms */
    record_fault         fault;      /* REC_OK, or why it goes to the dead letters
                                      * (req.err says why) */
    dl_sbuf              result;     /* redis delivery: the output, written with the offsets */
    kgen                *gen;        /* a generate record's generation (kafka_gen.c), or NULL */
    struct krec         *next;       /* overflow list, hand-off list or pool */
    struct krec         *stale_next; /* the consumer's list of stale records */
} krec;

/* ---- partitions --------------------------------------------------------- */

/* One assigned (or once assigned) partition; consumer thread only, but
 * topic and partition never change, so the output thread reads them. */
typedef struct tpart {
    char      topic[KAFKA_TOPIC_MAX];
    int32_t   partition;
    bool      assigned;
    krec    **ring;                  /* records in offset order: ring[(head + i) % cap] */
    size_t    head, count, cap;
    int64_t   next_expected;         /* lower offsets are re-deliveries (-1: any) */
    int64_t   done_next;             /* offset after the done prefix (-1: none yet) */
    int64_t   committed;             /* last committed (-1: none by us) */
} tpart;

static inline krec *tp_at(const tpart *tp, size_t i)
{
    return tp->ring[(tp->head + i) % tp->cap];
}

static inline rec_state rec_state_of(krec *r)
{
    return (rec_state)atomic_load_explicit(&r->state, memory_order_acquire);
}

/* ---- delivery modes (kafka_delivery.c) ---------------------------------- */

/* What makes a delivery mode: the client settings it requires, when a
 * produced record counts as done, and how done records are made durable.
 * One const table a mode; the stages call through it. */
typedef struct kafka_mode {
    const char *name;               /* as dl_delivery_name says it */
    bool        transactional;      /* producer transactional.id, consumer read_committed */
    bool        auto_commit;        /* librdkafka commits the stored offsets */
    bool        done_on_produce;    /* done once produced (the transaction decides);
                                     * else at its delivery report */
    bool        keeps_results;      /* predictions go to krec.result, written with the
                                     * offsets (redis), instead of the output topic */
    /* Output thread, under out_mu: sees a prediction's text before it is
     * produced (at-least-once: a copy to Redis, best effort); may be NULL. */
    void      (*on_output)(kafka_srv *k, const krec *r, const char *text, size_t len);
    /* Consumer thread, once the clients exist (exactly-once: the
     * transactional producer); may be NULL. */
    dl_status (*start)(kafka_srv *k, dl_err *err);
    /* Consumer thread, in a rebalance: sets where newly assigned
     * partitions start (redis: the offsets stored with the results); may
     * be NULL (the committed offsets). */
    void      (*position)(kafka_srv *k, rd_kafka_topic_partition_list_t *l);
    /* Consumer thread: releases the done prefix of every partition,
     * storing or writing the offsets after it. */
    void      (*advance)(kafka_srv *k);
    /* Consumer thread: makes what is done durable: at once when `now`
     * (before a revoke, at shutdown), else when the mode's interval is up. */
    void      (*commit)(kafka_srv *k, bool now);
} kafka_mode;

/* The table of a [kafka] delivery mode (static). */
const kafka_mode *kafka_mode_of(dl_delivery d);

/* ---- the service -------------------------------------------------------- */

/* Counters, read by the HTTP threads. */
typedef struct kcounters {
    atomic_llong consumed, outputs, dead[REC_NFAULTS], redelivered, produce_retries,
                 fetch_wakeups;
    atomic_llong pauses, partition_pauses, assigned, revoked, commits, txn_commits, txn_aborts;
    atomic_llong redis_writes, redis_errors, sink_errors, in_flight;
    atomic_llong brokers_up, brokers_known, broker_outages;
    atomic_llong redis_pending;  /* results waiting for their MULTI/EXEC (redis delivery) */
    atomic_llong records_allocated, buffers_allocated;  /* pool misses (kafka_in.c) */
    atomic_bool  paused;
    atomic_bool  brokers_down;   /* no broker reachable (kafka_health.c) */
} kcounters;

/* dlserve_kafka_record_latency_seconds: from a record's Kafka timestamp to
 * its output's delivery report, by timestamp type (0 create time, 1 log
 * append time). Per-bucket counts (not cumulative); the output thread
 * adds, any thread reads (kafka_stats.c). */
#define KLAT_NBOUNDS 38
typedef struct klatency {
    atomic_llong bucket[2][KLAT_NBOUNDS + 1];   /* the last: past the last bound */
    atomic_llong count[2];
    atomic_llong sum_us[2];
} klatency;

/* What the consumer knows of its brokers (kafka_health.c; snap_mu). */
typedef struct khealth {
    json_t *brokers;   /* [{"name","id","state","up"}] from the last statistics */
    bool    all_down;  /* the last transition logged */
} khealth;

struct kafka_srv {
    dl_kafka_conf        conf;
    dl_redis_conf        rconf;
    registry            *reg;
    batcher             *bat;
    stats               *st;
    tracer              *tr;         /* spans of traced records */
    const kafka_mode    *mode;
    char                 bootstrap[512];
    char                 txn_id[256];  /* the producer's transactional.id (exactly-once) */
    char                 client_id[256];   /* the consumer's client.id, as librdkafka took it */
    /* input_topics, parsed at start; read-only once the threads run */
    dl_kafka_topic       topics[DL_KAFKA_TOPICS_MAX];
    int                  ntopics;

    rd_kafka_t          *mock_rk;    /* embedded cluster's handle */
    rd_kafka_mock_cluster_t *mock;
    rd_kafka_t          *cons, *prod;
    rd_kafka_queue_t    *cq;         /* consumer queue: yielded to wake the consumer's poll */
    rd_kafka_queue_t    *pq;         /* producer's main queue: yielded to wake the output thread */
    rd_kafka_topic_t    *out_rkt, *dlq_rkt;   /* the producer's topics */
    pthread_t            in_thread, out_thread;
    bool                 in_started, out_started;
    atomic_bool          stop;       /* consumer thread: stop intake, settle, leave */
    atomic_bool          out_stop;   /* output thread: leave once nothing is handed over */
#ifdef DL_HAVE_REDIS
    dl_redis_link       *sink;
#endif

    /* Consumer thread only */
    tpart              **tps;
    int                  ntps;
    krec                *over_head, *over_tail;   /* parsed, waiting for room in the batcher */
    krec                *pool;       /* free records */
    int64_t              npool;
    kbuf                *bufs;       /* free input buffers */
    int64_t              nbufs;
    krec                *stale;      /* forgotten records still busy elsewhere */
    int64_t              nstale;
    int64_t              held;       /* records in rings */
    /* Intake stopped at max_in_flight (not polling) since full_since;
     * paused: its partitions paused too, after KAFKA_PAUSE_AFTER_MS
     * stopped or when intake is fatal (see backpressure). */
    bool                 full;
    double               full_since;
    bool                 paused;
    /* librdkafka's bounds on its prefetch queue (queued.max.messages.kbytes
     * in bytes, queued.min.messages), the bytes of the records consumed so
     * far (their mean, with c.consumed, sizes the queue), and whether the
     * queue was seen near a bound since the fetcher was last woken (see
     * wake_if_stalled). */
    int64_t              queue_max_bytes, queue_max_msgs;
    int64_t              consumed_bytes;
    bool                 queue_near_full;
    bool                 txn_open;
    /* The model of records that name none, from a topic without one
     * (kafka_route.c): decided once, at start or when the first models
     * come; "" when there is none (several models, no default_model). */
    char                 def_model[DL_NAME_MAX];
    bool                 def_decided;
    double               last_commit;

    /* The right to produce: held by the output thread while it produces a
     * run of records, by the consumer thread while it commits a
     * transaction or forgets records. So no output is produced for a
     * record being forgotten, and none inside a transaction's commit. */
    pthread_mutex_t      out_mu;
    bool                 txn_dirty;  /* something produced in the open transaction */
    int64_t              dead_logged;

    /* Hand-off to the output thread (hand_mu): finished requests from the
     * batcher, refused records from the consumer. */
    pthread_mutex_t      hand_mu;
    pthread_cond_t       hand_cv;    /* broadcast after each output round (settle waits) */
    uint64_t             rounds;     /* output rounds that made progress */
    krec                *hand_head, *hand_tail;
    kbuf                *bufs_back;  /* input buffers the output thread is done with */
    bool                 out_idle;   /* the output thread waits in rd_kafka_poll: yield pq */
    dl_sbuf              out_text;   /* output thread: the output being written */

    /* Shared with the HTTP threads (snap_mu) */
    pthread_mutex_t      snap_mu;
    json_t              *snap_parts; /* [{"topic","partition",...}] */
    char                 fatal[256];
    khealth              health;
    kcounters            c;
    klatency             lat;
};

/* ---- kafka.c: shared state ---------------------------------------------- */

/* Records a fatal error (the first one wins): intake stops, HTTP serves. */
void kafka_set_fatal(kafka_srv *k, const char *why);
bool kafka_is_fatal(kafka_srv *k);

/* k->txn_id: [kafka] transactional_id, else dlserve-<group_id>-<host>-<http
 * port> (k->conf set). */
void kafka_txn_id_init(kafka_srv *k, int http_port);

/* ---- kafka_in.c: the consumer thread ------------------------------------ */

void *kafka_in_main(void *arg);

/* Frees the partitions, their records and the pool (after both threads
 * have stopped). */
void kafka_in_free(kafka_srv *k);

/* Forgets every record of tp (not committed: Kafka delivers them again);
 * those busy elsewhere become stale. Consumer thread, with out_mu held. */
void kafka_tp_drop(kafka_srv *k, tpart *tp);

/* Releases the first n (done) records of tp's ring to the pool; done_next
 * moves past them. */
void kafka_release(kafka_srv *k, tpart *tp, size_t n);

/* librdkafka callbacks of the consumer (served by the consumer thread). */
void kafka_on_rebalance(rd_kafka_t *rk, rd_kafka_resp_err_t err,
                        rd_kafka_topic_partition_list_t *l, void *opaque);
void kafka_on_commit(rd_kafka_t *rk, rd_kafka_resp_err_t e,
                     rd_kafka_topic_partition_list_t *l, void *opaque);

/* ---- kafka_part.c: partitions and record headers ------------------------ */

/* The partition's state, or NULL when it was never assigned. */
tpart *kafka_tp_find(kafka_srv *k, const char *topic, int32_t partition);

/* The partition's state, created on first use (NULL when out of memory);
 * kept until shutdown so that records in the batcher can always point at
 * it. Consumer thread. */
tpart *kafka_tp_get(kafka_srv *k, const char *topic, int32_t partition);

/* Appends r at the end of tp's ring, growing it; false when out of
 * memory. Removes and returns the record at its head (count > 0). */
bool kafka_tp_push(tpart *tp, krec *r);
krec *kafka_tp_pop(tpart *tp);

/* The number of done records at the head of tp's ring. */
size_t kafka_done_prefix(const tpart *tp);

/* The value of a record's last header `name` as a string in buf (cap
 * bytes), or NULL when absent or too long. */
const char *kafka_header(rd_kafka_message_t *m, const char *name, char *buf, size_t cap);

/* ---- kafka_out.c: the output stage -------------------------------------- */

void *kafka_out_main(void *arg);

/* Hands r (R_BUSY) to the output thread: its prediction when r->fault is
 * REC_OK, else its dead letter. Any thread; wakes the output thread once
 * for a run of hand-offs. */
void kafka_handoff(kafka_srv *k, krec *r);

/* The batcher's completion callback (its worker thread): hands over. */
void kafka_on_infer_done(infer_req *q, void *ctx);

/* Producer delivery reports (served by the output thread). */
void kafka_on_delivery(rd_kafka_t *rk, const rd_kafka_message_t *m, void *opaque);

/* ---- kafka_gen.c: generate records --------------------------------------- */

/* Whether r's value is a generate record (a JSON object with
 * "text_input"). */
bool kafka_gen_is(const krec *r);
/* Parses the generate record r and hands it to its version's generator
 * (its end hands r to the output thread), or refuses it to the dead
 * letters. model_hdr, id_hdr: its dlserve-model and dlserve-id headers
 * (NULL: none). Consumer thread. */
void kafka_gen_submit(kafka_srv *k, krec *r, const char *model_hdr, const char *id_hdr);
/* The output of a generation that ended, into b (reused): R_DONE, or
 * R_NEW with *fault and err saying why it goes to the dead letters.
 * Accounts it in the statistics. Output thread. */
rec_state kafka_gen_output(kafka_srv *k, krec *r, dl_sbuf *b, record_fault *fault,
                           dl_err *err);
/* Frees r's generation, if any. */
void kafka_gen_free(krec *r);

/* ---- kafka_route.c: which model a record goes to ------------------------ */

/* Parses input_topics into k->topics, checks that default_model and each
 * topic's model are served (DL_ERR_INVALID naming the model otherwise),
 * decides the default model if any model is served and logs the routes.
 * Before the threads start. */
dl_status kafka_routes_start(kafka_srv *k, dl_err *err);

/* Decides the default model when none was served at start and some are
 * now; after that, nothing. Consumer thread, once a round. */
void kafka_routes_tick(kafka_srv *k);

/* The model for a record from topic that names none: the topic's, else
 * the default ("" for none). Borrowed from k. Consumer thread. */
const char *kafka_route_model(const kafka_srv *k, const char *topic);

/* ---- kafka_conf.c: clients --------------------------------------------- */

/* Starts the embedded cluster when configured, then creates the producer
 * and the consumer and subscribes. The clients are k's even on failure
 * (kafka_stop frees them). */
dl_status kafka_clients_start(kafka_srv *k, dl_err *err);

/* ---- kafka_stats.c ------------------------------------------------------ */

/* Refreshes the per-partition positions and lag that status and metrics
 * show. Consumer thread. */
void kafka_snapshot(kafka_srv *k);

/* One output acknowledged: its record's Kafka timestamp ts_ms (of type tt)
 * to now into the latency histogram; records without a timestamp are not
 * counted, a timestamp ahead of the clock counts as 0. Output thread. */
void kafka_latency_observe(kafka_srv *k, int64_t ts_ms, int tt);

/* ---- kafka_health.c: broker reachability ------------------------------ */

/* The consumer's statistics callback (consumer thread): each broker's
 * connection state, the brokers_up gauge, a log line per transition
 * between no broker reachable and some. Returns 0 (librdkafka frees json). */
int kafka_health_on_stats(rd_kafka_t *rk, char *json, size_t len, void *opaque);

/* Takes the consumer's error e when it concerns reachability (all brokers
 * down: the state changes at once; a lost connection: the statistics will
 * say); false for any other error. Consumer thread. */
bool kafka_health_on_error(kafka_srv *k, int e);

/* Adds "brokers_up", "brokers_reachable", "broker_outages" and "brokers"
 * to the status object o. Any thread. */
void kafka_health_status(kafka_srv *k, json_t *o);

/* The dlserve_kafka_brokers_up and _broker_outages_total families. */
void kafka_health_metrics(kafka_srv *k, dl_sbuf *b);

/* True while no broker is reachable. Any thread. */
bool kafka_health_all_down(kafka_srv *k);

/* Frees what the health state holds (at kafka_stop). */
void kafka_health_fini(kafka_srv *k);

#endif /* DL_SERVE_KAFKA_INT_H */
