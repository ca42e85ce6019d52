/* history.c: the status page's history: snapshots of /status and /metrics
 * in a ring, answered as JSON. */
#define _GNU_SOURCE   /* memrchr */
#include "serve/history.h"

#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

struct history {
    pthread_mutex_t mu;
    json_t         *ring[HISTORY_SAMPLES];
    size_t          head, len;
};

dl_status history_new(history **out, dl_err *err)
{
    *out = calloc(1, sizeof(**out));
    if (!*out)
        return dl_err_set(err, DL_ERR_NOMEM, "status history");
    pthread_mutex_init(&(*out)->mu, NULL);
    return DL_OK;
}

void history_free(history *hs)
{
    if (!hs)
        return;
    for (size_t i = 0; i < hs->len; i++)
        json_decref(hs->ring[(hs->head + i) % HISTORY_SAMPLES]);
    pthread_mutex_destroy(&hs->mu);
    free(hs);
}

void history_add(history *hs, json_t *snapshot)
{
    if (!snapshot)
        return;
    pthread_mutex_lock(&hs->mu);
    if (hs->len == HISTORY_SAMPLES) {
        json_decref(hs->ring[hs->head]);
        hs->ring[hs->head] = snapshot;
        hs->head = (hs->head + 1) % HISTORY_SAMPLES;
    } else {
        hs->ring[(hs->head + hs->len++) % HISTORY_SAMPLES] = snapshot;
    }
    pthread_mutex_unlock(&hs->mu);
}

json_t *history_json(history *hs)
{
    json_t *samples = json_array();
    pthread_mutex_lock(&hs->mu);
    for (size_t i = 0; samples && i < hs->len; i++)   /* copies: HTTP threads dump them */
        json_array_append_new(samples, json_deep_copy(hs->ring[(hs->head + i) % HISTORY_SAMPLES]));
    pthread_mutex_unlock(&hs->mu);
    return json_pack("{s:i, s:o*}", "interval_s", HISTORY_INTERVAL_S, "samples", samples);
}

/* ---- a snapshot ------------------------------------------------------------ */

/* The value of label key in a Prometheus sample line's labels, into buf
 * (model names and numbers: no escapes to undo). */
static bool prom_label(const char *labels, size_t len, const char *key, char *buf, size_t size)
{
    char pat[32];
    snprintf(pat, sizeof(pat), "%s=\"", key);
    size_t plen = strlen(pat);
    for (size_t i = 0; i + plen <= len; i++) {
        if ((i == 0 || labels[i - 1] == '{' || labels[i - 1] == ',') &&
            memcmp(labels + i, pat, plen) == 0) {
            const char *v = labels + i + plen, *e = memchr(v, '"', len - i - plen);
            if (!e || (size_t)(e - v) >= size)
                return false;
            memcpy(buf, v, (size_t)(e - v));
            buf[e - v] = '\0';
            return true;
        }
    }
    return false;
}

/* One Prometheus sample line: a bucket of the request histogram
 * added to buckets, or CPU time or resident memory into o. */
static void prom_line(const char *line, size_t len, json_t *o, json_t *buckets)
{
    static const char bucket[] = "dlserve_request_duration_seconds_bucket{";
    const char *sp = memrchr(line, ' ', len);
    if (!sp)
        return;
    double v = strtod(sp + 1, NULL);
    if (strncmp(line, "process_cpu_seconds_total ", 26) == 0) {
        json_object_set_new(o, "cpu", json_real(v));
    } else if (strncmp(line, "process_resident_memory_bytes ", 30) == 0) {
        json_object_set_new(o, "rss", json_real(v));
    } else if (strncmp(line, bucket, sizeof(bucket) - 1) == 0) {
        char model[DL_NAME_MAX], le[32];
        size_t lablen = (size_t)(sp - line);
        if (!prom_label(line, lablen, "model", model, sizeof(model)) ||
            !prom_label(line, lablen, "le", le, sizeof(le)))
            return;
        json_t *list = json_object_get(buckets, model);
        if (!list)
            json_object_set_new(buckets, model, list = json_array());
        json_t *bound = strcmp(le, "+Inf") == 0 ? json_null() : json_real(strtod(le, NULL));
        json_array_append_new(list, json_pack("[o, f]", bound, v));
    }
}

static void prom_fields(const char *prom, json_t *o)
{
    json_t *buckets = json_object();
    for (const char *p = prom; p && *p;) {
        const char *nl = strchr(p, '\n');
        size_t len = nl ? (size_t)(nl - p) : strlen(p);
        if (len && p[0] != '#')
            prom_line(p, len, o, buckets);
        p = nl ? nl + 1 : NULL;
    }
    json_object_set_new(o, "buckets", buckets);
}

/* Requests (success + failure) per model, over its versions. */
static json_t *counts_of(json_t *counters)
{
    json_t *counts = json_object(), *versions, *v;
    const char *model, *ver;
    json_object_foreach(json_object_get(counters, "models"), model, versions) {
        json_int_t n = 0;
        json_object_foreach(versions, ver, v)
            n += json_integer_value(json_object_get(v, "success")) +
                 json_integer_value(json_object_get(v, "failure"));
        json_object_set_new(counts, model, json_integer(n));
    }
    return counts;
}

/* The record latency quantiles of the first timestamp type with records. */
static void kafka_latency(json_t *lat, json_t *out)
{
    const char *type;
    json_t *l;
    json_object_foreach(lat, type, l) {
        if (json_integer_value(json_object_get(l, "count")) > 0) {
            json_object_set(out, "p50_ms", json_object_get(l, "p50_ms"));
            json_object_set(out, "p99_ms", json_object_get(l, "p99_ms"));
            return;
        }
    }
}

static json_t *kafka_fields(json_t *k)
{
    json_int_t dead = 0;
    const char *why;
    json_t *n, *p;
    json_object_foreach(json_object_get(k, "dead_letters"), why, n)
        dead += json_integer_value(n);
    json_t *lag = json_object();
    size_t i;
    json_array_foreach(json_object_get(k, "partitions"), i, p) {
        char key[300];
        snprintf(key, sizeof(key), "%s/%lld", json_string_value(json_object_get(p, "topic")),
                 (long long)json_integer_value(json_object_get(p, "partition")));
        json_int_t l = json_integer_value(json_object_get(p, "lag"));
        json_object_set_new(lag, key, l >= 0 ? json_integer(l) : json_null());
    }
    json_t *o = json_pack("{s:O, s:O, s:I, s:n, s:n, s:o}", "in", json_object_get(k, "consumed"),
                          "out", json_object_get(k, "outputs"), "dead", dead, "p50_ms", "p99_ms",
                          "lag", lag);
    if (o)
        kafka_latency(json_object_get(k, "record_latency"), o);
    return o;
}

json_t *history_snapshot(double t, json_t *status, const char *prom)
{
    json_t *names = json_array(), *m;
    size_t i;
    json_array_foreach(json_object_get(status, "models"), i, m)
        json_array_append(names, json_object_get(m, "name"));
    json_t *counters = json_object_get(status, "counters");
    json_t *queue = json_object_get(json_object_get(status, "batcher"), "queued_samples");
    json_t *codes = json_object_get(counters, "http");
    json_t *o = json_pack("{s:f, s:o, s:o, s:o, s:o}", "t", t, "models", names, "counts",
                          counts_of(counters), "queue", queue ? json_incref(queue) : json_object(),
                          "codes", codes ? json_incref(codes) : json_object());
    if (!o)
        return NULL;
    prom_fields(prom, o);
    json_t *k = json_object_get(status, "kafka");
    if (k)
        json_object_set_new(o, "kafka", kafka_fields(k));
    return o;
}
