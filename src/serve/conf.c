/* conf.c: the daemon's option table (dlserve.conf) and its loading:
 * defaults, then the file, then DLSERVE_* variables, then cross-field checks. */
#define _POSIX_C_SOURCE 200809L
#include "serve/dl_serve.h"

#include <ctype.h>
#include <errno.h>
#include <stddef.h>
#include <stdlib.h>
#include <string.h>

#define FIELD_SIZE(sec, f) sizeof(((dl_serve_conf *)0)->sec.f)
#define INT(sec, f, def, lo, hi, doc)                                         \
    {#sec, #f, DL_OPT_INT, offsetof(dl_serve_conf, sec.f), 0, def, lo, hi, doc}
#define BOOL(sec, f, def, doc)                                                \
    {#sec, #f, DL_OPT_BOOL, offsetof(dl_serve_conf, sec.f), 0, def, 0, 0, doc}
#define STR(sec, f, def, doc)                                                 \
    {#sec, #f, DL_OPT_STRING, offsetof(dl_serve_conf, sec.f), FIELD_SIZE(sec, f), \
     def, 0, 0, doc}

const dl_opt dl_serve_opts[] = {
    STR(http, address, "127.0.0.1", "address to bind; 0.0.0.0 exposes the server to the network"),
    INT(http, port, "8000", 0, 65535, "TCP port; 0 picks any free port (logged)"),
    INT(http, max_body_bytes, "8388608", 1024, 1 << 30, "larger request bodies get 413"),
    STR(http, token, "", "bearer token required on requests; empty = no authentication"),
    STR(http, tls_cert, "", "PEM certificate file for HTTPS; set with tls_key or not at all"),
    STR(http, tls_key, "", "PEM private key file for HTTPS; set with tls_cert or not at all"),
    INT(batching, max_batch_size, "64", 1, 65536, "most samples in one inference batch"),
    INT(batching, max_queue_delay_us, "500", 0, 10000000,
        "longest a request waits for a batch to fill, in microseconds"),
    INT(batching, max_queue_size, "4096", 1, 1 << 24,
        "queued samples per model before requests get 503"),
    STR(models, dir, "models", "the model repository folder"),
    STR(models, policy, "latest", "versions served: latest, latest:N or versions:1,3,..."),
    BOOL(models, watch, "true", "reload when the model folder changes"),
    STR(models, device, "cpu", "inference device: cpu, cuda or cuda:N"),
    INT(models, threads, "0", 0, 1024, "CPU threads for inference; 0 = all cores"),
    STR(log, level, "info", "err, warning, notice, info or debug"),
    STR(log, debug, "", "comma-separated subsystems logged at debug level, e.g. http,batch"),
    STR(kafka, brokers, "", "bootstrap servers host:port,...; empty: Kafka off unless embedded"),
    BOOL(kafka, embedded, "false", "start an in-process mock Kafka cluster (demos, tests)"),
    INT(kafka, embedded_partitions, "4", 1, 1024, "partitions of each topic the mock creates"),
    STR(kafka, group_id, "dlserve", "consumer group"),
    STR(kafka, input_topics, "dlserve-in", "comma-separated topics to consume"),
    STR(kafka, output_topic, "dlserve-out", "topic for predictions"),
    STR(kafka, dead_letter_topic, "dlserve-dlq", "topic for records that cannot be served"),
    STR(kafka, delivery, "at-least-once", "at-least-once, exactly-once or redis"),
    STR(kafka, default_model, "", "model for records that name none; empty: the only model"),
    STR(kafka, transactional_id, "", "exactly-once producer id; empty: dlserve-<group_id>"),
    INT(kafka, commit_interval_ms, "100", 1, 3600000,
        "how often offsets commit (the transaction length in exactly-once)"),
    INT(kafka, max_in_flight, "8192", 1, 1 << 24,
        "records consumed and not yet committed before partitions pause"),
    INT(kafka, max_record_bytes, "1048576", 16, 1 << 30,
        "larger records go to the dead-letter topic"),
    DL_REDIS_OPTS(offsetof(dl_serve_conf, redis)),
    {0},
};

/* Sections of raw librdkafka properties. */
static const char *const passthrough[] = {"kafka.consumer", "kafka.producer", NULL};

/* Keeps a raw librdkafka property for the consumer or the producer. */
static dl_status kafka_prop(void *ctx, const char *section, const char *key,
                            const char *value, const char *origin, dl_err *err)
{
    dl_kafka_conf *k = ctx;
    if (k->nprops == DL_KAFKA_PROPS_MAX)
        return dl_err_set(err, DL_ERR_INVALID, "%s: more than %d [kafka.*] properties",
                          origin, DL_KAFKA_PROPS_MAX);
    dl_kafka_prop *p = &k->props[k->nprops];
    if (strlen(key) >= sizeof(p->key) || strlen(value) >= sizeof(p->value))
        return dl_err_set(err, DL_ERR_INVALID, "%s: property '%.60s' is too long", origin, key);
    p->producer = strcmp(section, "kafka.producer") == 0;
    snprintf(p->key, sizeof(p->key), "%s", key);
    snprintf(p->value, sizeof(p->value), "%s", value);
    snprintf(p->origin, sizeof(p->origin), "%s", origin);
    k->nprops++;
    return DL_OK;
}

dl_status dl_serve_conf_set(dl_serve_conf *conf, const char *section, const char *key,
                            const char *value, const char *origin, dl_err *err)
{
    for (int i = 0; passthrough[i]; i++)
        if (strcmp(section, passthrough[i]) == 0)
            return kafka_prop(&conf->kafka, section, key, value, origin, err);
    return dl_conf_set(dl_serve_opts, conf, section, key, value, origin, err);
}

/* A whole decimal number >= 1 at *s; advances *s past it. */
static bool positive_int(const char **s)
{
    if (!isdigit((unsigned char)**s))
        return false;
    char *end;
    errno = 0;
    long long n = strtoll(*s, &end, 10);
    *s = end;
    return errno == 0 && n >= 1;
}

/* "latest", "latest:N" or "versions:N[,N...]", every N >= 1. */
static bool policy_ok(const char *p)
{
    bool list;
    if (!strcmp(p, "latest"))
        return true;
    if (!strncmp(p, "latest:", 7)) {
        p += 7;
        list = false;
    } else if (!strncmp(p, "versions:", 9)) {
        p += 9;
        list = true;
    } else {
        return false;
    }
    for (;;) {
        if (!positive_int(&p))
            return false;
        if (!list || *p != ',')
            break;
        p++;
    }
    return *p == '\0';
}

/* "cpu", "cuda" or "cuda:N", N >= 0. */
static bool device_ok(const char *d)
{
    if (!strcmp(d, "cpu") || !strcmp(d, "cuda"))
        return true;
    if (strncmp(d, "cuda:", 5) || !d[5])
        return false;
    for (d += 5; *d; d++)
        if (!isdigit((unsigned char)*d))
            return false;
    return true;
}

static bool level_ok(const char *l)
{
    static const char *const levels[] = {"err", "warning", "notice", "info", "debug"};
    for (size_t i = 0; i < sizeof(levels) / sizeof(*levels); i++)
        if (!strcmp(l, levels[i]))
            return true;
    return false;
}

dl_status dl_serve_conf_validate(const dl_serve_conf *c, dl_err *err)
{
    if (!c->http.tls_cert[0] != !c->http.tls_key[0])
        return dl_err_set(err, DL_ERR_INVALID,
                          "[http] tls_cert and tls_key must be set together (%s is empty)",
                          c->http.tls_cert[0] ? "tls_key" : "tls_cert");
    if (!policy_ok(c->models.policy))
        return dl_err_set(err, DL_ERR_INVALID,
                          "[models] policy '%.60s' is invalid: expected latest, latest:N "
                          "or versions:N,N,... with every N >= 1", c->models.policy);
    if (!device_ok(c->models.device))
        return dl_err_set(err, DL_ERR_INVALID,
                          "[models] device '%s' is invalid: expected cpu, cuda or cuda:N",
                          c->models.device);
    const char *dl = c->kafka.delivery;
    if (strcmp(dl, "at-least-once") && strcmp(dl, "exactly-once") && strcmp(dl, "redis"))
        return dl_err_set(err, DL_ERR_INVALID,
                          "[kafka] delivery '%s' is invalid: expected at-least-once, "
                          "exactly-once or redis", dl);
    if (!strcmp(dl, "redis") && !c->redis.host[0])
        return dl_err_set(err, DL_ERR_INVALID,
                          "[kafka] delivery = redis needs [redis] host");
    if ((c->kafka.brokers[0] || c->kafka.embedded) && !c->kafka.input_topics[0])
        return dl_err_set(err, DL_ERR_INVALID, "[kafka] input_topics is empty");
    if (!level_ok(c->log.level))
        return dl_err_set(err, DL_ERR_INVALID,
                          "[log] level '%s' is invalid: expected err, warning, notice, "
                          "info or debug", c->log.level);
    return DL_OK;
}

dl_status dl_serve_conf_load(dl_serve_conf *conf, const char *path, dl_err *err)
{
    /* Built in a copy so that a failed reload (SIGHUP) keeps the old config. */
    dl_serve_conf tmp;
    memset(&tmp, 0, sizeof(tmp));
    dl_status st = dl_conf_defaults(dl_serve_opts, &tmp, err);
    /* The raw properties gather on the side: loading writes the options
     * back over tmp only when the whole file is good. */
    dl_kafka_conf *raw = calloc(1, sizeof(*raw));
    if (!raw)
        st = dl_err_set(err, DL_ERR_NOMEM, "configuration");
    if (st == DL_OK && path)
        st = dl_conf_load_file(dl_serve_opts, &tmp, path, passthrough, kafka_prop, raw, err);
    if (st == DL_OK) {
        tmp.kafka.nprops = raw->nprops;
        memcpy(tmp.kafka.props, raw->props, (size_t)raw->nprops * sizeof(raw->props[0]));
    }
    free(raw);
    if (st == DL_OK)
        st = dl_conf_apply_env(dl_serve_opts, &tmp, err);
    if (st == DL_OK)
        st = dl_serve_conf_validate(&tmp, err);
    if (st == DL_OK)
        memcpy(conf, &tmp, sizeof(tmp));
    return st;
}
