/* kafka_stats.c: what the Kafka service shows: per-partition positions and
 * lag (a snapshot the consumer thread refreshes), /status JSON and the
 * dlserve_kafka_* Prometheus families. */
#include "serve/kafka/kafka_int.h"

#include <math.h>
#include <time.h>

/* ---- record latency ------------------------------------------------------ */

/* Seconds: 1 ms (a record answered as it arrives) to 10 s (a backlog),
 * each bound at most a third above the one before from 3 ms on: a
 * quantile interpolated within its bucket (histogram_quantile) stays
 * within about 10% of the exact one, where the 1-2.5-5 series moved a
 * p99 by up to 40% (and 1 to 2.5 s by 80%). */
static const double lat_bounds[KLAT_NBOUNDS] = {
    0.001, 0.002, 0.003, 0.004, 0.005, 0.006, 0.008, 0.010, 0.012, 0.015, 0.020,
    0.025, 0.030, 0.040, 0.050, 0.060, 0.080, 0.100, 0.120, 0.150, 0.200, 0.250,
    0.300, 0.400, 0.500, 0.600, 0.800, 1, 1.2, 1.5, 2, 2.5, 3, 4, 5, 6, 8, 10,
};
static const char *const lat_types[2] = {"create_time", "log_append_time"};

void kafka_latency_observe(kafka_srv *k, int64_t ts_ms, int tt)
{
    if (ts_ms < 0 || (tt != RD_KAFKA_TIMESTAMP_CREATE_TIME &&
                      tt != RD_KAFKA_TIMESTAMP_LOG_APPEND_TIME))
        return;
    int t = tt == RD_KAFKA_TIMESTAMP_LOG_APPEND_TIME;
    struct timespec now;
    clock_gettime(CLOCK_REALTIME, &now);   /* Kafka timestamps are wall-clock ms */
    int64_t us = (int64_t)now.tv_sec * 1000000 + now.tv_nsec / 1000 - ts_ms * 1000;
    if (us < 0)   /* the producer's clock ahead of ours */
        us = 0;
    double sec = (double)us / 1e6;
    int i = 0;
    while (i < KLAT_NBOUNDS && sec > lat_bounds[i])
        i++;
    atomic_fetch_add_explicit(&k->lat.bucket[t][i], 1, memory_order_relaxed);
    atomic_fetch_add_explicit(&k->lat.sum_us[t], us, memory_order_relaxed);
    atomic_fetch_add_explicit(&k->lat.count[t], 1, memory_order_relaxed);
}

/* The bound (ms) of the bucket that holds quantile q of type t; null past
 * the last bound or with nothing counted. */
static json_t *lat_quantile(kafka_srv *k, int t, int64_t count, double q)
{
    int64_t want = (int64_t)ceil(q * (double)count), cum = 0;
    for (int i = 0; count > 0 && i < KLAT_NBOUNDS; i++) {
        cum += atomic_load_explicit(&k->lat.bucket[t][i], memory_order_relaxed);
        if (cum >= want)
            return json_real(lat_bounds[i] * 1000);
    }
    return json_null();
}

/* "record_latency": {type: {"count", "mean_ms", "p50_ms", "p99_ms"}}, the
 * quantiles as the upper bounds of their histogram buckets. */
static json_t *lat_status(kafka_srv *k)
{
    json_t *o = json_object();
    for (int t = 0; o && t < 2; t++) {
        int64_t n = atomic_load_explicit(&k->lat.count[t], memory_order_relaxed);
        double sum_ms = (double)atomic_load_explicit(&k->lat.sum_us[t], memory_order_relaxed);
        sum_ms /= 1e3;
        json_object_set_new(o, lat_types[t], json_pack(
            "{s:I, s:f, s:o, s:o}", "count", (json_int_t)n,
            "mean_ms", n ? sum_ms / (double)n : 0.0,
            "p50_ms", lat_quantile(k, t, n, 0.5), "p99_ms", lat_quantile(k, t, n, 0.99)));
    }
    return o;
}

/* The histogram's family, both timestamp types (each always present, so
 * that a rate over them never starts from nothing). */
static void lat_metrics(kafka_srv *k, dl_sbuf *b)
{
    dl_prom_family(b, "dlserve_kafka_record_latency_seconds", "histogram",
                   "From a record's Kafka timestamp to its output's acknowledgement (delivery "
                   "report), by the timestamp's type.");
    char le[DL_PROM_VALUE_CHARS];
    for (int t = 0; t < 2; t++) {
        long long cum = 0;
        for (int i = 0; i <= KLAT_NBOUNDS; i++) {
            cum += atomic_load_explicit(&k->lat.bucket[t][i], memory_order_relaxed);
            dl_prom_fmt_value(le, i < KLAT_NBOUNDS ? lat_bounds[i] : INFINITY);
            dl_prom_sample(b, "dlserve_kafka_record_latency_seconds_bucket", (double)cum,
                           "timestamp_type", lat_types[t], "le", le, NULL);
        }
        dl_prom_sample(b, "dlserve_kafka_record_latency_seconds_sum",
                       (double)atomic_load(&k->lat.sum_us[t]) / 1e6, "timestamp_type",
                       lat_types[t], NULL);
        dl_prom_sample(b, "dlserve_kafka_record_latency_seconds_count",
                       (double)atomic_load(&k->lat.count[t]), "timestamp_type", lat_types[t],
                       NULL);
    }
}

/* ---- partitions ---------------------------------------------------------- */

void kafka_snapshot(kafka_srv *k)
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

/* This member's share of the group: "topic/partition" of each partition
 * the snapshot holds (the assigned ones), in its order. */
static json_t *assignment(json_t *parts)
{
    json_t *l = json_array();
    size_t i;
    json_t *p;
    json_array_foreach(parts, i, p) {
        const char *topic = json_string_value(json_object_get(p, "topic"));
        json_t *s = json_sprintf("%s/%lld", topic ? topic : "",
                                 (long long)json_integer_value(json_object_get(p, "partition")));
        if (!s || json_array_append_new(l, s) != 0) {
            json_decref(l);
            return NULL;
        }
    }
    return l;
}

json_t *kafka_status(kafka_srv *k)
{
    json_t *dead = json_object();
    for (int f = REC_EMPTY; f < REC_NFAULTS; f++)
        json_object_set_new(dead, record_fault_name(f), json_integer(atomic_load(&k->c.dead[f])));
    pthread_mutex_lock(&k->snap_mu);
    json_t *o = json_pack(
        "{s:s, s:s, s:s, s:s, s:s, s:b, s:I, s:I, s:I, s:o, s:I, s:I, s:I, s:I, s:I, s:I, s:I, "
        "s:I, s:o}",
        "bootstrap", k->bootstrap, "delivery", k->mode->name, "group_id", k->conf.group_id,
        "client_id", k->client_id,
        "input_topics", k->conf.input_topics, "paused", atomic_load(&k->c.paused),
        "in_flight", (json_int_t)atomic_load(&k->c.in_flight),
        "consumed", (json_int_t)atomic_load(&k->c.consumed),
        "outputs", (json_int_t)atomic_load(&k->c.outputs), "dead_letters", dead,
        "redelivered_skipped", (json_int_t)atomic_load(&k->c.redelivered),
        "pauses", (json_int_t)atomic_load(&k->c.pauses),
        "partition_pauses", (json_int_t)atomic_load(&k->c.partition_pauses),
        "partitions_assigned", (json_int_t)atomic_load(&k->c.assigned),
        "partitions_revoked", (json_int_t)atomic_load(&k->c.revoked),
        "commits", (json_int_t)atomic_load(&k->c.commits),
        "transactions_committed", (json_int_t)atomic_load(&k->c.txn_commits),
        "transactions_aborted", (json_int_t)atomic_load(&k->c.txn_aborts),
        /* a reference of its own either way ("o" takes it): an "O" of a
         * new empty array leaked it before the first statistics came */
        "partitions", k->snap_parts ? json_incref(k->snap_parts) : json_array());
    if (o && k->mode->transactional)
        json_object_set_new(o, "transactional_id", json_string(k->txn_id));
    if (o && k->fatal[0])
        json_object_set_new(o, "fatal", json_string(k->fatal));
    json_t *mine = o ? assignment(k->snap_parts) : NULL;
    if (mine) {
        json_int_t n = (json_int_t)json_array_size(mine);
        json_object_set_new(o, "assigned_partitions", json_integer(n));
        json_object_set_new(o, "assignment", mine);
    }
    pthread_mutex_unlock(&k->snap_mu);
    if (o) {
        json_object_set_new(o, "record_latency", lat_status(k));
        kafka_health_status(k, o);
    }
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

void kafka_metrics(kafka_srv *k, dl_sbuf *b)
{
    struct { const char *name, *help; atomic_llong *v; } counters[] = {
        {"dlserve_kafka_records_total", "Records consumed from the input topics.", &k->c.consumed},
        {"dlserve_kafka_outputs_total", "Predictions written (acknowledged by Kafka or Redis).",
         &k->c.outputs},
        {"dlserve_kafka_pauses_total",
         "Times intake stopped for backpressure (max_in_flight records held).", &k->c.pauses},
        {"dlserve_kafka_partition_pauses_total",
         "Times intake stayed stopped for a second (or stopped on a fatal error) and its "
         "partitions were paused; they fetch again what was prefetched when they resume.",
         &k->c.partition_pauses},
        {"dlserve_kafka_fetch_wakeups_total",
         "Times the fetcher was woken after librdkafka's prefetch queue had neared its bound.",
         &k->c.fetch_wakeups},
        {"dlserve_kafka_commits_total", "Synchronous offset commits.", &k->c.commits},
        {"dlserve_kafka_produce_retries_total", "Outputs produced again after a failed delivery.",
         &k->c.produce_retries},
        {"dlserve_kafka_redis_writes_total", "MULTI/EXEC of results and offsets (redis delivery).",
         &k->c.redis_writes},
        {"dlserve_kafka_redis_errors_total", "Failed Redis writes of results (retried).",
         &k->c.redis_errors},
        {"dlserve_kafka_records_allocated_total",
         "Record slots allocated because the pool was empty (flat in a steady stream).",
         &k->c.records_allocated},
        {"dlserve_kafka_buffers_allocated_total",
         "Input buffers allocated because the pool was empty (flat in a steady stream).",
         &k->c.buffers_allocated},
    };
    for (size_t i = 0; i < sizeof(counters) / sizeof(*counters); i++) {
        dl_prom_family(b, counters[i].name, "counter", counters[i].help);
        dl_prom_sample(b, counters[i].name, (double)atomic_load(counters[i].v), NULL);
    }
    dl_prom_family(b, "dlserve_kafka_dead_letters_total", "counter",
                   "Records sent to the dead-letter topic, by reason.");
    for (int f = REC_EMPTY; f < REC_NFAULTS; f++)
        dl_prom_sample(b, "dlserve_kafka_dead_letters_total",
                       (double)atomic_load(&k->c.dead[f]), "reason", record_fault_name(f), NULL);
    dl_prom_family(b, "dlserve_kafka_transactions_total", "counter",
                   "Kafka transactions (exactly-once delivery), by result.");
    dl_prom_sample(b, "dlserve_kafka_transactions_total", (double)atomic_load(&k->c.txn_commits),
                   "result", "commit", NULL);
    dl_prom_sample(b, "dlserve_kafka_transactions_total", (double)atomic_load(&k->c.txn_aborts),
                   "result", "abort", NULL);
    dl_prom_family(b, "dlserve_kafka_in_flight", "gauge", "Records consumed and not yet committed.");
    dl_prom_sample(b, "dlserve_kafka_in_flight", (double)atomic_load(&k->c.in_flight), NULL);
    dl_prom_family(b, "dlserve_kafka_max_in_flight", "gauge",
                   "Records held before intake stops (max_in_flight): the bound of in_flight.");
    dl_prom_sample(b, "dlserve_kafka_max_in_flight", (double)k->conf.max_in_flight, NULL);
    dl_prom_family(b, "dlserve_kafka_redis_pending", "gauge",
                   "Results waiting for Redis to come back (redis delivery; held records, "
                   "so within max_in_flight).");
    dl_prom_sample(b, "dlserve_kafka_redis_pending", (double)atomic_load(&k->c.redis_pending),
                   NULL);
    dl_prom_family(b, "dlserve_kafka_paused", "gauge",
                   "1 while intake is stopped for backpressure or paused.");
    dl_prom_sample(b, "dlserve_kafka_paused", atomic_load(&k->c.paused) ? 1 : 0, NULL);
    dl_prom_family(b, "dlserve_kafka_up", "gauge",
                   "0 after a fatal Kafka error stopped intake, or while no broker is reachable.");
    dl_prom_sample(b, "dlserve_kafka_up", kafka_is_fatal(k) || kafka_health_all_down(k) ? 0 : 1,
                   NULL);
    lat_metrics(k, b);
    kafka_health_metrics(k, b);
    pthread_mutex_lock(&k->snap_mu);
    kafka_lag_metrics(b, k->snap_parts);
    pthread_mutex_unlock(&k->snap_mu);
}

void kafka_lag_metrics(dl_sbuf *b, json_t *parts)
{
    dl_prom_family(b, "dlserve_kafka_consumer_lag", "gauge",
                   "Records in the partition after the committed position.");
    size_t i;
    json_t *p;
    json_array_foreach(parts, i, p) {
        /* Topic names come from the configuration: dl_prom_sample escapes
         * them like any label value. */
        const char *topic = json_string_value(json_object_get(p, "topic"));
        char part[24];
        snprintf(part, sizeof(part), "%lld",
                 (long long)json_integer_value(json_object_get(p, "partition")));
        dl_prom_sample(b, "dlserve_kafka_consumer_lag",
                       (double)json_integer_value(json_object_get(p, "lag")),
                       "topic", topic ? topic : "", "partition", part, NULL);
    }
}

#ifdef DL_HAVE_REDIS
dl_redis_link *kafka_redis_link(kafka_srv *k)
{
    return k ? k->sink : NULL;
}
#endif
