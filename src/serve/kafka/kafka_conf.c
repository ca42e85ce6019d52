/* kafka_conf.c: the Kafka clients: their configuration (ours, then
 * [kafka.client], then [kafka.consumer] / [kafka.producer], then what the
 * delivery mode requires), its check by librdkafka for --check-config,
 * the embedded mock cluster, creation and subscription. */
#define _GNU_SOURCE
#include "serve/kafka/kafka_int.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static void on_log(const rd_kafka_t *rk, int level, const char *fac, const char *buf)
{
    (void)rk;
    /* A broker connection failing comes once a retry: kafka_health.c logs
     * the transitions between no broker reachable and some instead. */
    int prio = strcmp(fac, "FAIL") == 0 ? DL_LOG_DEBUG
               : level <= 3 ? DL_LOG_ERR : level <= 5 ? DL_LOG_NOTICE : DL_LOG_DEBUG;
    DL_LOG(prio, "kafka", "librdkafka %s: %s", fac, buf);
}

static void on_error(rd_kafka_t *rk, int e, const char *reason, void *opaque)
{
    kafka_srv *k = opaque;
    char why[256];
    if (e == RD_KAFKA_RESP_ERR__FATAL) {
        rd_kafka_fatal_error(rk, why, sizeof(why));
        kafka_set_fatal(k, why);
    } else if (e == RD_KAFKA_RESP_ERR__ALL_BROKERS_DOWN || e == RD_KAFKA_RESP_ERR__TRANSPORT) {
        /* retried by librdkafka: the consumer's health logs transitions only */
        if (rd_kafka_type(rk) == RD_KAFKA_CONSUMER)
            kafka_health_on_error(k, e);
        DL_LOG(DL_LOG_DEBUG, "kafka", "%s", reason);
    } else {
        DL_LOG(DL_LOG_WARNING, "kafka", "%s", reason);
    }
}

/* An integer property of a client as configured, or def when unreadable. */
static int64_t conf_int(rd_kafka_t *rk, const char *key, int64_t def)
{
    char buf[32];
    size_t n = sizeof(buf);
    if (rd_kafka_conf_get(rd_kafka_conf(rk), key, buf, &n) != RD_KAFKA_CONF_OK)
        return def;
    char *end;
    long long v = strtoll(buf, &end, 10);
    return end != buf && v > 0 ? v : def;
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

/* Whether a property of [kafka.client] or of the client's own section is
 * for this client. */
static bool prop_for(const dl_kafka_prop *p, bool producer)
{
    return p->client == DL_KAFKA_CLIENT_ALL ||
           p->client == (producer ? DL_KAFKA_CLIENT_PRODUCER : DL_KAFKA_CLIENT_CONSUMER);
}

/* Whether [kafka.client] or the client's own section sets key. */
static bool user_sets(const kafka_srv *k, bool producer, const char *key)
{
    for (int i = 0; i < k->conf.nprops; i++)
        if (prop_for(&k->conf.props[i], producer) && strcmp(k->conf.props[i].key, key) == 0)
            return true;
    return false;
}

/* [kafka.client]'s properties, then those of the client's own section
 * (in file order within each, so the later of two settings wins). */
static dl_status user_props(kafka_srv *k, rd_kafka_conf_t *c, bool producer, dl_err *err)
{
    dl_status st = DL_OK;
    for (int pass = 0; pass < 2; pass++) {
        for (int i = 0; st == DL_OK && i < k->conf.nprops; i++) {
            const dl_kafka_prop *p = &k->conf.props[i];
            if ((p->client == DL_KAFKA_CLIENT_ALL) == (pass == 0) && prop_for(p, producer))
                st = set(c, p->key, p->value, p->origin, err);
        }
    }
    return st;
}

/* Whether key=value is in a conf dump (key, value, key, value, ...). */
static bool in_dump(const char **d, size_t n, const char *key, const char *value)
{
    for (size_t i = 0; i + 1 < n; i += 2)
        if (!strcmp(d[i], key))
            return !strcmp(d[i + 1], value);
    return false;
}

/* Logs (debug, kafka) the client's effective properties that are not
 * librdkafka's defaults or that a [kafka.*] section sets, secrets as ***:
 * what each client gets, without its secrets. */
static void log_effective(kafka_srv *k, rd_kafka_conf_t *c, const char *client)
{
    if (DL_LOG_DEBUG > dl_log_level)   /* no subsystem logs at debug level */
        return;
    bool producer = strcmp(client, "consumer") != 0;
    rd_kafka_conf_t *def_conf = rd_kafka_conf_new();
    size_t n, ndef;
    const char **d = rd_kafka_conf_dump(c, &n), **def = rd_kafka_conf_dump(def_conf, &ndef);
    char line[3072];
    size_t off = 0;
    line[0] = '\0';
    for (size_t i = 0; i + 1 < n && off < sizeof(line); i += 2) {
        /* default_topic_conf's value is a pointer: it says nothing */
        if ((in_dump(def, ndef, d[i], d[i + 1]) && !user_sets(k, producer, d[i])) ||
            !strcmp(d[i], "default_topic_conf"))
            continue;
        int w = snprintf(line + off, sizeof(line) - off, " %s=%s", d[i],
                         dl_conf_secret_key(d[i]) ? DL_CONF_REDACTED : d[i + 1]);
        off += w > 0 ? (size_t)w : 0;
    }
    DL_LOG(DL_LOG_DEBUG, "kafka", "%s client configuration (librdkafka's defaults left "
           "out):%s%s", client, line, off >= sizeof(line) ? "..." : "");
    rd_kafka_conf_dump_free(d, n);
    rd_kafka_conf_dump_free(def, ndef);
    rd_kafka_conf_destroy(def_conf);
}

/* Our settings, then [kafka.client], then [kafka.consumer] /
 * [kafka.producer], then what the delivery mode requires (it wins: a mode
 * is a contract), into a new configuration *out. The properties only:
 * --check-config sets them as the daemon does (dl_serve_conf_check_kafka). */
static dl_status client_props(kafka_srv *k, bool producer, rd_kafka_conf_t **out, dl_err *err)
{
    *out = NULL;
    rd_kafka_conf_t *c = rd_kafka_conf_new();
    char interval[32], prefetch[32];
    snprintf(interval, sizeof(interval), "%lld", (long long)k->conf.commit_interval_ms);
    snprintf(prefetch, sizeof(prefetch), "%d", KAFKA_PREFETCH_KB);
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
        /* A member gone silent loses its partitions after 10 s (Kafka's
         * default before 3.0; librdkafka's is 45 s), and a heartbeat a
         * second tells the others of a rebalance soon. librdkafka 2.0's
         * mock cluster holds every rebalance after the first for the
         * session timeout less a second, and refuses a follower's
         * SyncGroup that comes after the leader's (the follower rejoins:
         * one more rebalance), so at 45 s a daemon joining a running
         * group there idled 44-88 s (docs/kafka.md, "Scaling out"). */
        if (st == DL_OK)
            st = set(c, "session.timeout.ms", "10000", "dlserve", err);
        if (st == DL_OK)
            st = set(c, "heartbeat.interval.ms", "1000", "dlserve", err);
        /* A resumed partition waits for the fetch in flight: keep it
         * short. The embedded cluster (librdkafka's mock) answers a fetch
         * only once the wait is over, even with data waiting, so there
         * the wait is the latency: 1 ms (p99 14.9 and 16.5 ms at 10,000
         * records/s against 18.8 and 22.7 with 5 in the rounds the
         * machine left alone, docs/benchmarks.md "Kafka latency and
         * scale-out"), for an idle fetch loop of about twice the CPU. A real broker
         * answers once data comes, and 5 ms bounds the requests an idle
         * consumer sends. */
        if (st == DL_OK)
            st = set(c, "fetch.wait.max.ms", k->mock ? "1" : "5", "dlserve", err);
        /* each broker's state, for kafka_health.c */
        if (st == DL_OK)
            st = set(c, "statistics.interval.ms", "1000", "dlserve", err);
        /* A prefetch that stays in the cache: librdkafka's 64 MB queue
         * and 50 MB fetches outgrow it, so a record is read from memory
         * and each fetch's buffer faults its pages in again. With 16 MB
         * and 4 MB a backlog of binary records streamed about a quarter
         * faster, and with 1 MB fetches (librdkafka's default
         * message.max.bytes, 1,000,000, fits) a quarter faster again, the
         * broker's work a record halved (docs/benchmarks.md, "Kafka serving").
         * librdkafka wants a fetch to hold the largest message: a
         * message.max.bytes of the user's leaves the fetch size to it. */
        if (st == DL_OK)
            st = set(c, "queued.max.messages.kbytes", prefetch, "dlserve", err);
        if (st == DL_OK && !user_sets(k, false, "message.max.bytes"))
            st = set(c, "fetch.max.bytes", "1048576", "dlserve", err);
    }
    if (st == DL_OK)
        st = user_props(k, c, producer, err);
    if (st == DL_OK && producer && k->mode->transactional)
        st = set(c, "transactional.id", k->txn_id, "[kafka] transactional_id", err);
    if (st == DL_OK && !producer) {
        st = set(c, "enable.auto.offset.store", "false", "delivery mode", err);
        if (st == DL_OK)
            st = set(c, "enable.auto.commit", k->mode->auto_commit ? "true" : "false",
                     "delivery mode", err);
        if (st == DL_OK && k->mode->transactional)
            st = set(c, "isolation.level", "read_committed", "delivery mode", err);
    }
    if (st != DL_OK) {
        rd_kafka_conf_destroy(c);
        return st;
    }
    *out = c;
    return DL_OK;
}

/* A client's properties (client_props), logged, with our callbacks. */
static dl_status client_conf(kafka_srv *k, bool producer, rd_kafka_conf_t **out, dl_err *err)
{
    rd_kafka_conf_t *c;
    dl_status st = client_props(k, producer, &c, err);
    if (st != DL_OK)
        return st;
    log_effective(k, c, producer ? k->mode->transactional ? "transactional producer"
                                                          : "producer" : "consumer");
    rd_kafka_conf_set_opaque(c, k);
    rd_kafka_conf_set_log_cb(c, on_log);
    rd_kafka_conf_set_error_cb(c, on_error);
    if (producer)
        rd_kafka_conf_set_dr_msg_cb(c, kafka_on_delivery);
    else {
        rd_kafka_conf_set_rebalance_cb(c, kafka_on_rebalance);
        rd_kafka_conf_set_offset_commit_cb(c, kafka_on_commit);
        rd_kafka_conf_set_stats_cb(c, kafka_health_on_stats);
    }
    *out = c;
    return DL_OK;
}

/* The input topics as a list (new). */
static rd_kafka_topic_partition_list_t *kafka_topic_list(const kafka_srv *k)
{
    rd_kafka_topic_partition_list_t *l = rd_kafka_topic_partition_list_new(k->ntopics + 2);
    for (int i = 0; i < k->ntopics; i++)
        rd_kafka_topic_partition_list_add(l, k->topics[i].topic, RD_KAFKA_PARTITION_UA);
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
    rd_kafka_topic_partition_list_t *l = kafka_topic_list(k);
    rd_kafka_topic_partition_list_add(l, k->conf.output_topic, 0);
    rd_kafka_topic_partition_list_add(l, k->conf.dead_letter_topic, 0);
    for (int i = 0; i < l->cnt; i++)
        rd_kafka_mock_topic_create(k->mock, l->elems[i].topic,
                                   (int)k->conf.embedded_partitions, 1);
    rd_kafka_topic_partition_list_destroy(l);
    DL_LOG(DL_LOG_NOTICE, "kafka", "embedded Kafka cluster at %s (topics %s, %s, %s; "
           "%lld partitions each)", k->bootstrap, k->conf.input_topics, k->conf.output_topic,
           k->conf.dead_letter_topic, (long long)k->conf.embedded_partitions);
    /* librdkafka's mock keeps 5 MiB or 100,000 batches a partition and
     * drops the oldest past that, consumed or not. */
    DL_LOG(DL_LOG_WARNING, "kafka", "the embedded cluster is for demos and tests: it keeps about "
           "5 MiB a partition (%lld MiB a topic), in memory, and drops the oldest records past "
           "that, read or not; give records keys to spread them over the partitions",
           (long long)k->conf.embedded_partitions * 5);
    return DL_OK;
}

dl_status kafka_clients_start(kafka_srv *k, dl_err *err)
{
    dl_status st = DL_OK;
    if (k->conf.embedded && !k->conf.brokers[0] && (st = start_embedded(k, err)) != DL_OK)
        return st;
    char errstr[512];
    rd_kafka_conf_t *pc = NULL, *cc = NULL;
    st = client_conf(k, true, &pc, err);
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
    k->pq = rd_kafka_queue_get_main(k->prod);
    /* The output topics' metadata now, not at the first output: else the
     * first delivery reports come a metadata round trip late (hundreds of
     * ms, with intake paused when a backlog fills max_in_flight) */
    k->out_rkt = rd_kafka_topic_new(k->prod, k->conf.output_topic, NULL);
    k->dlq_rkt = rd_kafka_topic_new(k->prod, k->conf.dead_letter_topic, NULL);
    if (!(k->cons = rd_kafka_new(RD_KAFKA_CONSUMER, cc, errstr, sizeof(errstr)))) {
        rd_kafka_conf_destroy(cc);
        return dl_err_set(err, DL_ERR_INVALID, "Kafka consumer: %s", errstr);
    }
    rd_kafka_poll_set_consumer(k->cons);
    k->cq = rd_kafka_queue_get_consumer(k->cons);
    k->queue_max_bytes = conf_int(k->cons, "queued.max.messages.kbytes", KAFKA_PREFETCH_KB) * 1024;
    k->queue_max_msgs = conf_int(k->cons, "queued.min.messages", 100000);
    if (k->mode->start && (st = k->mode->start(k, err)) != DL_OK)
        return st;
    rd_kafka_topic_partition_list_t *l = kafka_topic_list(k);
    rd_kafka_resp_err_t e = rd_kafka_subscribe(k->cons, l);
    rd_kafka_topic_partition_list_destroy(l);
    if (e)
        return dl_err_set(err, DL_ERR_INVALID, "Kafka subscribe to '%s': %s",
                          k->conf.input_topics, rd_kafka_err2str(e));
    return DL_OK;
}

dl_status dl_serve_conf_check_kafka(const dl_serve_conf *conf, dl_err *err)
{
    kafka_srv *k = calloc(1, sizeof(*k));
    if (!k)
        return dl_err_set(err, DL_ERR_NOMEM, "kafka");
    k->conf = conf->kafka;
    /* redis delivery in a build without Redis: the daemon refuses it when
     * Kafka starts; the properties are the same in every mode but for the
     * transactional ones, so they are checked as at-least-once's */
    k->mode = kafka_mode_of(conf->kafka.delivery);
    if (!k->mode)
        k->mode = kafka_mode_of(DL_DELIVERY_AT_LEAST_ONCE);
    /* the embedded cluster's address comes at start: any will do here */
    snprintf(k->bootstrap, sizeof(k->bootstrap), "%s",
             conf->kafka.brokers[0] ? conf->kafka.brokers : "127.0.0.1:9092");
    kafka_txn_id_init(k, (int)conf->http.port);
    dl_status st = DL_OK;
    for (int producer = 1; st == DL_OK && producer >= 0; producer--) {
        rd_kafka_conf_t *c;
        st = client_props(k, producer != 0, &c, err);
        if (st == DL_OK)
            rd_kafka_conf_destroy(c);
    }
    free(k);
    return st;
}
