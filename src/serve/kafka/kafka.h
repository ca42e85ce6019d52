/* kafka.h (private to serve/): Kafka ingestion as a pipeline of three
 * threads that run concurrently: the consumer polls and parses records and
 * feeds them to the same batcher HTTP uses (never waiting on inference);
 * the batcher's worker infers; the output thread writes each prediction
 * to the output topic (or Redis) and each unservable record to the
 * dead-letter topic. Only what has been answered is committed:
 *
 *   consumer --record--> records.c (parse) --infer_req--> batcher
 *   (kafka_in.c)             | fault                         | on_done
 *       ^                    v                               v
 *       |               hand-off --------------------> output thread (kafka_out.c)
 *       |                                               format, produce
 *   commit <-- contiguous done prefix <-- delivery report <--+
 *
 * Delivery modes (kafka_delivery.c): at-least-once (offsets stored after
 * the output's delivery report), exactly-once (one transaction holds the
 * outputs, dead letters and consumed offsets) and redis (results and
 * offsets in one MULTI/EXEC). See docs/kafka.md, "Delivery modes". */
#ifndef DL_SERVE_KAFKA_H
#define DL_SERVE_KAFKA_H

#include "serve/batcher.h"
#include "serve/dl_serve.h"
#include "serve/registry.h"
#include "serve/stats.h"
#include "serve/tracer.h"

typedef struct kafka_srv kafka_srv;

typedef struct kafka_deps {
    const dl_kafka_conf *conf;     /* borrowed; must outlive the service */
    const dl_redis_conf *redis;
    registry            *reg;
    batcher             *bat;
    stats               *st;
    tracer              *tr;         /* spans of traced records (tracer.h) */
    int                  http_port;  /* names the member in the default transactional id */
} kafka_deps;

/* Starts the embedded cluster when configured, creates the clients and
 * the consumer thread. Errors: a bad property (named with its file and
 * line), an unreachable Redis offset store is NOT an error (it retries). */
dl_status kafka_start(const kafka_deps *deps, kafka_srv **out, dl_err *err);

/* Stops intake, waits for the records in flight, writes their outputs,
 * commits, leaves the group and frees everything. NULL does nothing. */
void kafka_stop(kafka_srv *k);

/* {"bootstrap", "delivery", "group_id", "client_id" (the consumer's),
 *  "transactional_id"? (exactly-once), "paused", "in_flight", "consumed",
 *  "outputs", "dead_letters": {reason: n}, ...,
 *  "partitions": [{"topic","partition","position","committed","high","lag"}],
 *  "assigned_partitions": n, "assignment": ["topic/partition", ...],
 *  "record_latency": {"create_time"|"log_append_time": {"count","mean_ms",
 *  "p50_ms","p99_ms"}}, "fatal"?} (new reference). */
json_t *kafka_status(kafka_srv *k);

/* Prometheus families dlserve_kafka_* appended to out. */
void kafka_metrics(kafka_srv *k, dl_sbuf *out);

/* The dlserve_kafka_consumer_lag family (HELP, TYPE and one sample per
 * partition) of a partitions snapshot, the "partitions" array of
 * kafka_status: [{"topic", "partition", "lag", ...}] (borrowed; NULL:
 * none), appended to out. Topic labels are escaped (dl_prom_label).
 * kafka_metrics uses it; any thread, with parts not changed meanwhile. */
void kafka_lag_metrics(dl_sbuf *out, json_t *parts);

#ifdef DL_HAVE_REDIS
/* The Redis link of the result sink (for its metrics), or NULL. */
dl_redis_link *kafka_redis_link(kafka_srv *k);
#endif

#endif /* DL_SERVE_KAFKA_H */
