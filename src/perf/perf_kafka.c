/* perf_kafka.c: dlserve-perf's Kafka target (perf.h): records produced to
 * the daemon's input topic, its answers consumed from the output topic
 * and matched by key, each latency from when the record was due (open
 * loop) or produced (closed loop) to when its answer was consumed: the
 * end-to-end time a Kafka client sees, both hops through the brokers
 * included. Records that went to the dead-letter topic count as errors.
 *
 * Every record carries the same value (the infer request with its
 * "model") and a key and dlserve-id header of its own,
 * "perf-PID-SEQ": the daemon names a JSON record without "id" by that
 * header, and its outputs and dead letters keep the key. The consumer
 * reads the output partitions from their ends as they stood before the
 * first record went out (assigned, not subscribed: no group to join).
 * One thread: librdkafka's own threads do the I/O. */
#define _GNU_SOURCE
#include "perf.h"

#include <librdkafka/rdkafka.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#define DRAIN_NS 10000000000LL
#define LATE_NS  1000000LL
#define META_MS  10000

enum { FREE, SENT, DONE };

typedef struct kafka_target {
    perf_target base;
    rd_kafka_t *producer, *consumer;
    rd_kafka_topic_t *in;
    const char *output_topic, *dead_letter_topic;
    char       *value;
    size_t      value_len;
    int         concurrency;
    long        pid;
    /* per record, by sequence number: state and when it was due */
    unsigned char *state;
    int64_t    *due;
    size_t      cap, next;
    long long   failed;       /* delivery reports with an error */
    uint32_t   *lat;
    size_t      lat_cap;
} kafka_target;

static int64_t now_ns(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (int64_t)ts.tv_sec * 1000000000LL + ts.tv_nsec;
}

static void on_delivery(rd_kafka_t *rk, const rd_kafka_message_t *m, void *opaque)
{
    (void)rk;
    if (m->err)
        ((kafka_target *)opaque)->failed++;
}

static rd_kafka_t *client(rd_kafka_type_t type, const char *brokers, kafka_target *k, char *err,
                          size_t err_len)
{
    rd_kafka_conf_t *conf = rd_kafka_conf_new();
    char e[256];
    char group[64];
    snprintf(group, sizeof(group), "dlserve-perf-%ld", k->pid);
    /* linger 0: a record waits for no batch to fill, its latency is the
     * daemon's and the brokers' */
    if (rd_kafka_conf_set(conf, "bootstrap.servers", brokers, e, sizeof(e)) != RD_KAFKA_CONF_OK ||
        (type == RD_KAFKA_PRODUCER &&
         rd_kafka_conf_set(conf, "linger.ms", "0", e, sizeof(e)) != RD_KAFKA_CONF_OK) ||
        (type == RD_KAFKA_CONSUMER &&
         (rd_kafka_conf_set(conf, "group.id", group, e, sizeof(e)) != RD_KAFKA_CONF_OK ||
          rd_kafka_conf_set(conf, "enable.auto.commit", "false", e, sizeof(e)) !=
              RD_KAFKA_CONF_OK ||
          rd_kafka_conf_set(conf, "fetch.wait.max.ms", "5", e, sizeof(e)) != RD_KAFKA_CONF_OK))) {
        snprintf(err, err_len, "Kafka configuration: %s", e);
        rd_kafka_conf_destroy(conf);
        return NULL;
    }
    rd_kafka_conf_set_opaque(conf, k);
    if (type == RD_KAFKA_PRODUCER)
        rd_kafka_conf_set_dr_msg_cb(conf, on_delivery);
    rd_kafka_t *rk = rd_kafka_new(type, conf, e, sizeof(e));
    if (!rk)
        snprintf(err, err_len, "Kafka client: %s", e);
    return rk;
}

/* Adds topic's partitions at their current ends to list. */
static bool add_ends(kafka_target *k, const char *topic, rd_kafka_topic_partition_list_t *list,
                     bool required, char *err, size_t err_len)
{
    rd_kafka_topic_t *t = rd_kafka_topic_new(k->consumer, topic, NULL);
    const rd_kafka_metadata_t *md;
    rd_kafka_resp_err_t e = rd_kafka_metadata(k->consumer, 0, t, &md, META_MS);
    rd_kafka_topic_destroy(t);
    if (e) {
        snprintf(err, err_len, "cannot reach the Kafka brokers (%s)", rd_kafka_err2str(e));
        return false;
    }
    bool ok = md->topic_cnt == 1 && !md->topics[0].err && md->topics[0].partition_cnt > 0;
    if (!ok && required)
        snprintf(err, err_len, "topic %s: %s", topic,
                 md->topic_cnt ? rd_kafka_err2str(md->topics[0].err) : "not found");
    for (int i = 0; ok && i < md->topics[0].partition_cnt; i++) {
        int32_t p = md->topics[0].partitions[i].id;
        int64_t lo, hi;
        e = rd_kafka_query_watermark_offsets(k->consumer, topic, p, &lo, &hi, META_MS);
        if (e) {
            snprintf(err, err_len, "topic %s [%d]: %s", topic, p, rd_kafka_err2str(e));
            ok = false;
            break;
        }
        rd_kafka_topic_partition_list_add(list, topic, p)->offset = hi;
    }
    rd_kafka_metadata_destroy(md);
    return ok || !required;
}

static bool grow(kafka_target *k)
{
    size_t cap = k->cap ? k->cap * 2 : 1 << 16;
    unsigned char *s = realloc(k->state, cap);
    if (!s)
        return false;
    k->state = s;
    int64_t *d = realloc(k->due, cap * sizeof(*d));
    if (!d)
        return false;
    k->due = d;
    memset(k->state + k->cap, FREE, cap - k->cap);
    k->cap = cap;
    return true;
}

static bool produce(kafka_target *k, int64_t due, char *err, size_t err_len)
{
    if (k->next == k->cap && !grow(k)) {
        snprintf(err, err_len, "out of memory");
        return false;
    }
    char key[64];
    int n = snprintf(key, sizeof(key), "perf-%ld-%zu", k->pid, k->next);
    rd_kafka_headers_t *h = rd_kafka_headers_new(1);
    rd_kafka_header_add(h, "dlserve-id", -1, key, n);
    for (;;) {
        rd_kafka_resp_err_t e = rd_kafka_producev(
            k->producer, RD_KAFKA_V_RKT(k->in), RD_KAFKA_V_KEY(key, (size_t)n),
            RD_KAFKA_V_VALUE(k->value, k->value_len), RD_KAFKA_V_HEADERS(h),
            RD_KAFKA_V_MSGFLAGS(RD_KAFKA_MSG_F_COPY), RD_KAFKA_V_END);
        if (!e)
            break;
        if (e != RD_KAFKA_RESP_ERR__QUEUE_FULL) {
            rd_kafka_headers_destroy(h);
            snprintf(err, err_len, "producing to %s: %s", rd_kafka_topic_name(k->in),
                     rd_kafka_err2str(e));
            return false;
        }
        rd_kafka_poll(k->producer, 1);
    }
    k->state[k->next] = SENT;
    k->due[k->next++] = due;
    return true;
}

/* The sequence number of one of our keys, or -1 (another client's, or
 * another run's). */
static long long seq_of(const kafka_target *k, const rd_kafka_message_t *m)
{
    char buf[64];
    long pid;
    unsigned long long seq;
    if (!m->key || m->key_len >= sizeof(buf))
        return -1;
    memcpy(buf, m->key, m->key_len);
    buf[m->key_len] = '\0';
    if (sscanf(buf, "perf-%ld-%llu", &pid, &seq) != 2 || pid != k->pid || seq >= k->next)
        return -1;
    return (long long)seq;
}

static bool keep(kafka_target *k, size_t n, uint32_t us)
{
    if (n == k->lat_cap) {
        size_t cap = k->lat_cap ? k->lat_cap * 2 : 1 << 16;
        uint32_t *more = realloc(k->lat, cap * sizeof(*more));
        if (!more)
            return false;
        k->lat = more;
        k->lat_cap = cap;
    }
    k->lat[n] = us;
    return true;
}

static bool kafka_run(perf_target *t, double rate, double seconds, hl_stats *st, char *err,
                      size_t err_len)
{
    kafka_target *k = (kafka_target *)t;
    memset(st, 0, sizeof(*st));
    bool closed = rate == 0;
    size_t total = closed ? SIZE_MAX : (size_t)(rate * seconds + 0.5);
    if (!closed && total < 1) {
        snprintf(err, err_len, "rate x seconds must be 1 or more records");
        return false;
    }
    size_t first = k->next, sent = 0, inflight = 0;
    long long failed0 = k->failed;
    int64_t start = now_ns(), t0 = start, last = start, end = start + (int64_t)(seconds * 1e9);
    int64_t deadline = end + DRAIN_NS;
    while ((sent < total || inflight > 0) && t0 < deadline) {
        if (closed && t0 >= end) {
            total = sent;   /* stop producing; wait for what is in flight, uncounted */
            if (inflight == 0)
                break;
        }
        int64_t due = closed ? t0 : start + (int64_t)((double)sent * 1e9 / rate);
        while (sent < total && due <= t0 && (!closed || inflight < (size_t)k->concurrency)) {
            st->late += t0 - due >= LATE_NS;
            if (!produce(k, due, err, err_len))
                return false;
            sent++;
            inflight++;
            st->max_inflight = inflight > st->max_inflight ? inflight : st->max_inflight;
            due = closed ? t0 : start + (int64_t)((double)sent * 1e9 / rate);
        }
        rd_kafka_poll(k->producer, 0);
        int64_t wait = sent < total && !closed ? (due - t0) / 1000000 : 1;
        rd_kafka_message_t *m = rd_kafka_consumer_poll(k->consumer, wait < 0 ? 0 :
                                                       wait > 1 ? 1 : (int)wait);
        t0 = now_ns();
        if (!m)
            continue;
        long long seq = m->err ? -1 : seq_of(k, m);
        if (seq >= (long long)first && k->state[seq] == SENT) {
            k->state[seq] = DONE;
            inflight--;
            bool counted = !closed || (k->due[seq] < end && t0 <= end);
            if (counted) {
                uint32_t us = (uint32_t)((t0 - k->due[seq]) / 1000);
                if (!keep(k, st->answered, us)) {
                    snprintf(err, err_len, "out of memory");
                    rd_kafka_message_destroy(m);
                    return false;
                }
                st->answered++;
                st->sum_us += us;
                last = t0;
                if (strcmp(rd_kafka_topic_name(m->rkt), k->dead_letter_topic) == 0)
                    st->bad_status++;
            }
        } else if (seq >= 0 && seq < (long long)first && k->state[seq] == SENT) {
            k->state[seq] = DONE;   /* a late answer of an earlier window */
        }
        rd_kafka_message_destroy(m);
    }
    st->elapsed_ns = closed ? end - start : last - start;
    st->timeouts = closed ? 0 : (long long)inflight;
    st->lost_write = k->failed - failed0;
    st->lat = k->lat;
    return true;
}

static bool kafka_level(perf_target *t, double value, bool rate_mode, int connections,
                        char *err, size_t err_len)
{
    (void)connections;
    (void)err;
    (void)err_len;
    ((kafka_target *)t)->concurrency = rate_mode ? 0 : (int)value;
    return true;
}

static void kafka_close(perf_target *t)
{
    kafka_target *k = (kafka_target *)t;
    if (k->producer) {
        rd_kafka_flush(k->producer, 5000);
        if (k->in)
            rd_kafka_topic_destroy(k->in);
        rd_kafka_destroy(k->producer);
    }
    if (k->consumer) {
        rd_kafka_consumer_close(k->consumer);
        rd_kafka_destroy(k->consumer);
    }
    free(k->value);
    free(k->state);
    free(k->due);
    free(k->lat);
    free(k);
}

perf_target *perf_kafka_target(const perf_kafka_opts *o, json_t *request, char *err,
                               size_t err_len)
{
    kafka_target *k = calloc(1, sizeof(*k));
    if (!k) {
        snprintf(err, err_len, "out of memory");
        return NULL;
    }
    k->pid = (long)getpid();
    k->output_topic = o->output_topic;
    k->dead_letter_topic = o->dead_letter_topic;
    k->base.run = kafka_run;
    k->base.level = kafka_level;
    k->base.close = kafka_close;
    json_object_del(request, "id");   /* the dlserve-id header names each record */
    k->value = json_dumps(request, JSON_COMPACT);
    if (!k->value) {
        snprintf(err, err_len, "out of memory");
        kafka_close(&k->base);
        return NULL;
    }
    k->value_len = strlen(k->value);
    if (!(k->producer = client(RD_KAFKA_PRODUCER, o->brokers, k, err, err_len)) ||
        !(k->consumer = client(RD_KAFKA_CONSUMER, o->brokers, k, err, err_len))) {
        kafka_close(&k->base);
        return NULL;
    }
    k->in = rd_kafka_topic_new(k->producer, o->input_topic, NULL);
    rd_kafka_topic_partition_list_t *list = rd_kafka_topic_partition_list_new(8);
    rd_kafka_resp_err_t e;
    bool ok = add_ends(k, o->output_topic, list, true, err, err_len) &&
              add_ends(k, o->dead_letter_topic, list, false, err, err_len);
    if (ok && (e = rd_kafka_assign(k->consumer, list)) != 0) {
        snprintf(err, err_len, "assigning %s: %s", o->output_topic, rd_kafka_err2str(e));
        ok = false;
    }
    rd_kafka_topic_partition_list_destroy(list);
    if (!ok) {
        kafka_close(&k->base);
        return NULL;
    }
    /* one record first: a daemon that is not there, or that refuses the
     * request, is told apart from a level of errors */
    int64_t due = now_ns();
    if (!produce(k, due, err, err_len)) {
        kafka_close(&k->base);
        return NULL;
    }
    while (k->state[0] == SENT && now_ns() - due < 3 * DRAIN_NS) {
        rd_kafka_poll(k->producer, 0);
        rd_kafka_message_t *m = rd_kafka_consumer_poll(k->consumer, 100);
        if (!m)
            continue;
        if (!m->err && seq_of(k, m) == 0) {
            k->state[0] = DONE;
            if (strcmp(rd_kafka_topic_name(m->rkt), k->dead_letter_topic) == 0) {
                /* the daemon says why in a header */
                rd_kafka_headers_t *h = NULL;
                const void *why = NULL;
                size_t why_len = 0;
                if (rd_kafka_message_headers(m, &h) || rd_kafka_header_get_last(
                        h, "dlserve-error", &why, &why_len))
                    why = "no dlserve-error header", why_len = strlen(why);
                snprintf(err, err_len, "the first record went to %s: %.*s",
                         k->dead_letter_topic, (int)(why_len < 300 ? why_len : 300),
                         (const char *)why);
                ok = false;
            }
        }
        rd_kafka_message_destroy(m);
    }
    if (ok && k->state[0] == SENT) {
        snprintf(err, err_len, "no answer on %s within %lld s (is the daemon consuming %s?)",
                 o->output_topic, 3 * DRAIN_NS / 1000000000LL, o->input_topic);
        ok = false;
    }
    if (!ok || k->failed) {
        if (ok)
            snprintf(err, err_len, "the first record was not delivered to %s", o->input_topic);
        kafka_close(&k->base);
        return NULL;
    }
    snprintf(k->base.what, sizeof(k->base.what),
             "Kafka at %s: %s -> %s (dead letters %s), %zu-byte records", o->brokers,
             o->input_topic, o->output_topic, o->dead_letter_topic, k->value_len);
    return &k->base;
}
