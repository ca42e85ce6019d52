/* conf.c: the daemon's option table (dlserve.conf) and its loading:
 * defaults, then the file, then DLSERVE_* variables, then --set overrides
 * (dl_serve_conf_apply), then cross-field checks; the raw [kafka.*]
 * sections and the printout of it all. */
#define _POSIX_C_SOURCE 200809L
#include "serve/dl_serve.h"
#include "serve/serving.h"

#include <ctype.h>
#include <stddef.h>
#include <stdlib.h>
#include <string.h>

#define FIELD_SIZE(sec, f) sizeof(((dl_serve_conf *)0)->sec.f)
#define OPT(sec, f, t, dflt, text)                                            \
    .section = #sec, .key = #f, .type = t, .offset = offsetof(dl_serve_conf, sec.f), \
    .def = dflt, .doc = text
#define INT(sec, f, dflt, lo, hi, text)                                       \
    {OPT(sec, f, DL_OPT_INT, dflt, text), .min = lo, .max = hi}
#define BOOL(sec, f, dflt, text) {OPT(sec, f, DL_OPT_BOOL, dflt, text)}
#define STR(sec, f, dflt, text)                                               \
    {OPT(sec, f, DL_OPT_STRING, dflt, text), .size = FIELD_SIZE(sec, f)}
#define DOUBLE(sec, f, dflt, lo, hi, text)                                    \
    {OPT(sec, f, DL_OPT_DOUBLE, dflt, text), .min = lo, .max = hi}
#define ENUM(sec, f, dflt, w, text) {OPT(sec, f, DL_OPT_ENUM, dflt, text), .words = w}
#define CUSTOM(sec, f, dflt, w, p, fmt, text)                                 \
    {OPT(sec, f, DL_OPT_CUSTOM, dflt, text), .size = FIELD_SIZE(sec, f), .words = w, \
     .parse = p, .format = fmt}

/* Enumerations are stored as int by the option table. */
_Static_assert(sizeof(dl_delivery) == sizeof(int), "dl_delivery is stored as an int");
_Static_assert(sizeof(dl_output_format) == sizeof(int), "dl_output_format is stored as an int");

static const dl_opt_word delivery_words[] = {
    {"at-least-once", DL_DELIVERY_AT_LEAST_ONCE},
    {"exactly-once", DL_DELIVERY_EXACTLY_ONCE},
    {"redis", DL_DELIVERY_REDIS},
    {NULL, 0},
};

static const dl_opt_word output_format_words[] = {
    {"dlserve", DL_OUTPUT_DLSERVE},
    {"oip-json", DL_OUTPUT_OIP_JSON},
    {"oip-binary", DL_OUTPUT_OIP_BINARY},
    {NULL, 0},
};

static const dl_opt_word trace_level_words[] = {
    {"off", DL_TRACE_LEVEL_OFF},
    {"timestamps", DL_TRACE_LEVEL_TIMESTAMPS},
    {NULL, 0},
};

const char *dl_delivery_name(dl_delivery mode)
{
    return dl_opt_word_name(delivery_words, (int)mode);
}

static const dl_opt_word control_words[] = {
    {"watch", DL_MODELS_CONTROL_WATCH},
    {"poll", DL_MODELS_CONTROL_POLL},
    {"explicit", DL_MODELS_CONTROL_EXPLICIT},
    {NULL, 0},
};

const char *dl_models_control_name(dl_models_control mode)
{
    return dl_opt_word_name(control_words, (int)mode);
}

/* [models] load: the form it takes (the value is unused). */
static const dl_opt_word load_words[] = {{"name,name,...", 0}, {NULL, 0}};

bool dl_models_load_next(const char **p, const char **name, size_t *len)
{
    if (!*p)
        return false;
    const char *end = strchr(*p, ',');
    size_t n = end ? (size_t)(end - *p) : strlen(*p);
    const char *s = *p;
    while (n > 0 && (*s == ' ' || *s == '\t'))
        s++, n--;
    while (n > 0 && (s[n - 1] == ' ' || s[n - 1] == '\t'))
        n--;
    *name = s;
    *len = n;
    *p = end ? end + 1 : NULL;
    return true;
}

/* "a, b": model names separated by commas (blanks around them ignored),
 * each a valid model name; "" is none. Stored as written. */
static bool parse_load(const char *text, void *field, char *why, size_t whylen)
{
    size_t len = strlen(text);
    if (len >= DL_MODELS_LOAD_MAX) {
        snprintf(why, whylen, "value is too long (%zu characters, at most %d)", len,
                 DL_MODELS_LOAD_MAX - 1);
        return false;
    }
    const char *name;
    size_t n;
    for (const char *p = text[0] ? text : NULL; dl_models_load_next(&p, &name, &n);)
        if (!dl_model_name_valid(name, n)) {
            snprintf(why, whylen, "'%.*s' is not a valid model name (expected name,name,...)",
                     (int)(n < 60 ? n : 60), name);
            return false;
        }
    char *out = field;
    memset(out, 0, DL_MODELS_LOAD_MAX);
    memcpy(out, text, len);
    return true;
}

static void format_load(const void *field, char *buf, size_t len)
{
    snprintf(buf, len, "%s", (const char *)field);
}

/* [models] device: the forms it takes (the values are unused). */
static const dl_opt_word device_words[] = {{"cpu", 0}, {"cuda", 0}, {"cuda:N", 0}, {NULL, 0}};

/* "cpu", "cuda" or "cuda:N" (N in 0..1023) into a dl_device. */
static bool parse_device(const char *text, void *field, char *why, size_t whylen)
{
    dl_device *dev = field;
    size_t len = strlen(text);
    if (len >= sizeof(dev->name)) {
        snprintf(why, whylen, "value is too long (%zu characters, at most %zu)", len,
                 sizeof(dev->name) - 1);
        return false;
    }
    char name[8];
    int64_t index;
    if (!dl_parse_name_num(text, name, sizeof(name), &index) || index > 1023)
        return false;
    dl_device_kind kind;
    if (strcmp(name, "cpu") == 0 && index < 0)
        kind = DL_DEVICE_CPU;
    else if (strcmp(name, "cuda") == 0)
        kind = DL_DEVICE_CUDA;
    else
        return false;
    /* Zero the tail of the name too, so equal configs compare equal byte for byte. */
    memset(dev, 0, sizeof(*dev));
    memcpy(dev->name, text, len);
    dev->kind = kind;
    dev->index = (int)index;
    return true;
}

static void format_device(const void *field, char *buf, size_t len)
{
    const dl_device *dev = field;
    snprintf(buf, len, "%s", dev->name);
}

const dl_opt dl_serve_opts[] = {
    STR(http, address, "127.0.0.1", "address to bind; 0.0.0.0 exposes the server to the network"),
    INT(http, port, "8000", 0, 65535, "TCP port; 0 picks any free port (logged)"),
    INT(http, max_body_bytes, "8388608", 1024, 1 << 30, "larger request bodies get 413"),
    STR(http, token, "", "bearer token required on requests; empty = no authentication"),
    STR(http, tls_cert, "", "PEM certificate file for HTTPS; set with tls_key or not at all"),
    STR(http, tls_key, "", "PEM private key file for HTTPS; set with tls_cert or not at all"),
    INT(http, threads, "0", 0, 256, "threads serving every connection (event loops); 0 = one per core"),
    INT(http, max_connections, "0", 0, 1000000,
        "open connections before new ones get 503; 0 = as file descriptors allow"),
    INT(http, metrics_port, "0", 0, 65535,
        "second port serving GET /metrics only, without the token or TLS; 0 = none"),
    INT(http, shutdown_grace_s, "-1", -1, 300,
        "seconds after SIGTERM that readiness is 503 while requests are still served, so "
        "that load balancers stop sending first; -1 = 5 under systemd, 0 elsewhere"),
    STR(grpc, address, "", "address to bind gRPC; empty = [http] address"),
    INT(grpc, port, "8001", 0, 65535, "gRPC port (Open Inference Protocol, health); 0 = no gRPC"),
    INT(grpc, threads, "0", 0, 256, "threads serving every gRPC call; 0 = one per two cores"),
    INT(grpc, max_message_bytes, "8388608", 1024, 1 << 30,
        "larger gRPC messages get RESOURCE_EXHAUSTED"),
    INT(batching, max_batch_size, "64", 1, 65536, "most samples in one inference batch"),
    INT(batching, max_queue_delay_us, "500", 0, 10000000,
        "longest a request waits for a batch to fill, in microseconds"),
    INT(batching, max_queue_size, "4096", 1, 1 << 24,
        "queued samples per model before requests get 503"),
    BOOL(batching, eager, "true",
         "run a batch before the delay when no request is being received"),
    INT(batching, direct_max_us, "1000", 0, 10000000,
        "with eager, requests run on the HTTP thread that read them (alone at low load, "
        "or those read in one pass as a batch) while their inference takes at most this "
        "long, in microseconds; 0 = never"),
    BOOL(batching, batch_invariant, "false",   /* DL_BATCH_INVARIANT_DEFAULT */
         "every answer the same bits whether its request ran alone, batched with any "
         "others or inside a larger request (docs/serving.md)"),
    INT(batching, default_timeout_us, "0", 0, 3600000000LL,
        "longest a request may queue before it is refused, in microseconds; 0 = no limit"),
    INT(generate, max_sequences, "64", 1, 4096,
        "sequences each generating model version runs at once (a beam counts its width)"),
    INT(generate, cache_bytes, "1073741824", 0, 1LL << 50,
        "bytes of decoding state (key-value caches) each generating version may hold; "
        "requests past it wait for room; 0 = no bound but max_sequences"),
    INT(generate, default_length, "16", 1, 1 << 20,
        "max_tokens of a generate request that gives none: the tokens it makes at most"),
    INT(generate, timeout_us, "30000000", 0, 3600000000LL,
        "longest a generate request waits for room before it gets 503, in microseconds"),
    INT(cache, bytes, "0", 0, 1LL << 50,
        "bytes the response cache holds (keys and answers) for the models whose serving "
        "block sets cache to true, least recently used evicted first; 0 = no cache"),
    STR(models, dir, "models", "the model repository folder"),
    STR(models, policy, "latest", "versions served: latest, latest:N or versions:1,3,..."),
    ENUM(models, control, "watch", control_words,
         "what loads models: watch (the folder, inotify), poll (a rescan every "
         "poll_interval_s: NFS, object-store mounts) or explicit (load at start, then the "
         "repository API alone)"),
    INT(models, poll_interval_s, "10", 1, 86400, "control = poll: seconds between rescans"),
    CUSTOM(models, load, "", load_words, parse_load, format_load,
           "control = explicit: the models loaded at start; the others load through "
           "POST /v2/repository/models/{m}/load"),
    INT(models, load_threads, "0", 0, 64,
        "model versions loaded (read, built, warmed up) at once, at start and on rescans; "
        "0 = one per core, at most 4"),
    BOOL(models, watch, "true",
         "control = watch: reload when the model folder changes; false = only on SIGHUP and "
         "through the repository API (the older spelling)"),
    CUSTOM(models, device, "cpu", device_words, parse_device, format_device,
           "inference device"),
    INT(models, threads, "0", 0, 1024,
        "CPU threads for inference, of each instance; 0 = the cores less one, or split "
        "between instances"),
    INT(models, instances, "0", 0, DL_MAX_INSTANCES,
        "copies of each model, each computing its own batches at the same time (CPU only); "
        "0 = two on a CPU of two cores or more, run by the models whose samples compute "
        "long, one otherwise"),
    ENUM(log, level, "info", dl_log_level_words, "least severe messages logged"),
    STR(log, debug, "", "comma-separated subsystems logged at debug level, e.g. kafka,http"),
    ENUM(log, format, "text", dl_log_format_words,
         "log line format: text, or json (one object a line)"),
    STR(kafka, brokers, "", "bootstrap servers host:port,...; empty: Kafka off unless embedded"),
    BOOL(kafka, embedded, "false", "start an in-process mock Kafka cluster (demos, tests)"),
    INT(kafka, embedded_partitions, "4", 1, 1024, "partitions of each topic the mock creates"),
    STR(kafka, group_id, "dlserve", "consumer group"),
    STR(kafka, input_topics, "dlserve-in",
        "comma-separated topics to consume, each topic or topic:model (the model of its "
        "records that name none)"),
    STR(kafka, output_topic, "dlserve-out", "topic for predictions"),
    STR(kafka, dead_letter_topic, "dlserve-dlq", "topic for records that cannot be served"),
    ENUM(kafka, delivery, "at-least-once", delivery_words, "delivery guarantee"),
    STR(kafka, default_model, "",
        "model for records that name none (nor their topic); empty: the one model served "
        "at start"),
    STR(kafka, transactional_id, "",
        "exactly-once producer id, one a member; empty: dlserve-<group_id>-<host>-<http port>"),
    INT(kafka, commit_interval_ms, "100", 1, 3600000,
        "how often offsets commit (the transaction length in exactly-once)"),
    INT(kafka, max_in_flight, "8192", 1, 1 << 24,
        "records consumed and not yet committed before intake stops"),
    INT(kafka, max_record_bytes, "1048576", 16, 1 << 30,
        "larger records go to the dead-letter topic"),
    INT(kafka, max_record_age_ms, "0", 0, 31536000000LL,
        "records older than this (by their timestamp) go to the dead-letter topic; 0 = no limit"),
    ENUM(kafka, output_format, "dlserve", output_format_words,
         "predictions as dlserve JSON, an OIP InferenceResponse, or one with binary tensors"),
    DL_REDIS_OPTS(offsetof(dl_serve_conf, redis)),
    STR(trace, otlp_endpoint, "",
        "OTLP/HTTP collector URL for spans, e.g. http://127.0.0.1:4318/v1/traces; empty: no "
        "tracing"),
    ENUM(trace, level, "timestamps", trace_level_words,
         "spans recorded: off, or timestamps (a span a request with its queue, compute and "
         "answer stages); settable at run time (/v2/trace/setting)"),
    DOUBLE(trace, rate, "1", 0, 1,
           "share of requests traced, 0..1 (every 1/rate-th request); settable at run time"),
    INT(trace, queue_size, "4096", 16, 1 << 22,
        "spans waiting for export; when full, new ones are dropped and counted"),
    INT(trace, flush_ms, "1000", 10, 60000, "longest a span waits before its batch is sent"),
    {0},
};

/* Sections of raw librdkafka properties, in dl_kafka_client's order. */
static const char *const passthrough[] = {"kafka.client", "kafka.consumer", "kafka.producer",
                                          NULL};

const char *dl_kafka_client_section(dl_kafka_client client)
{
    return passthrough[client];
}

/* Keeps a raw librdkafka property for every client, the consumer or the
 * producer. */
static dl_status kafka_prop(void *ctx, const char *section, const char *key,
                            const char *value, const char *origin, dl_err *err)
{
    dl_kafka_conf *k = ctx;
    if (k->nprops == DL_KAFKA_PROPS_MAX)
        return dl_err_set(err, DL_ERR_INVALID, "%s: more than %d [kafka.*] properties",
                          origin, DL_KAFKA_PROPS_MAX);
    dl_kafka_prop *p = &k->props[k->nprops];
    if (strlen(key) >= sizeof(p->key) || strlen(value) >= sizeof(p->value))
        return dl_err_set(err, DL_ERR_INVALID, "%s: property '%.60s' is too long (values: "
                          "at most %zu bytes)", origin, key, sizeof(p->value) - 1);
    p->client = DL_KAFKA_CLIENT_ALL;
    for (int c = 0; passthrough[c]; c++)
        if (strcmp(section, passthrough[c]) == 0)
            p->client = (dl_kafka_client)c;
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

dl_status dl_serve_conf_apply(dl_serve_conf *conf, const char *const *ov, int n, dl_err *err)
{
    for (int i = 0; i < n; i++) {
        char section[64], key[128];
        const char *dot = strchr(ov[i], '.'), *eq = strchr(ov[i], '=');
        for (int r = 0; passthrough[r]; r++) {
            size_t len = strlen(passthrough[r]);
            if (!strncmp(ov[i], passthrough[r], len) && ov[i][len] == '.')
                dot = ov[i] + len;
        }
        if (!dot || !eq || dot > eq || (size_t)(dot - ov[i]) >= sizeof(section) ||
            (size_t)(eq - dot - 1) >= sizeof(key))
            return dl_err_set(err, DL_ERR_INVALID, "--set '%s': expected section.key=value", ov[i]);
        snprintf(section, sizeof(section), "%.*s", (int)(dot - ov[i]), ov[i]);
        snprintf(key, sizeof(key), "%.*s", (int)(eq - dot - 1), dot + 1);
        char value[DL_CONF_VALUE_MAX];
        dl_status st = dl_conf_expand(eq + 1, value, sizeof(value), err);
        if (st != DL_OK)
            return dl_err_prefix(err, "--set %s.%s", section, key);
        st = dl_serve_conf_set(conf, section, key, value, "--set", err);
        if (st != DL_OK)
            return st;
    }
    return DL_OK;
}

/* One entry, e[0..len), of input_topics into t. */
static dl_status topic_entry(const char *e, size_t len, dl_kafka_topic *t, dl_err *err)
{
    const char *colon = memchr(e, ':', len);
    size_t tlen = colon ? (size_t)(colon - e) : len;
    if (tlen == 0 || tlen >= sizeof(t->topic))
        return dl_err_set(err, DL_ERR_INVALID, "[kafka] input_topics: '%.*s': the topic "
                          "name is %s", (int)len, e, tlen ? "too long" : "empty");
    for (size_t i = 0; i < tlen; i++)
        if (!isalnum((unsigned char)e[i]) && !strchr("._-", e[i]))
            return dl_err_set(err, DL_ERR_INVALID, "[kafka] input_topics: '%.*s': a topic "
                              "name is made of A-Z, a-z, 0-9, '.', '_' and '-'", (int)len, e);
    memset(t, 0, sizeof(*t));
    memcpy(t->topic, e, tlen);
    if (!colon)
        return DL_OK;
    size_t mlen = len - tlen - 1;
    if (!dl_model_name_valid(colon + 1, mlen))
        return dl_err_set(err, DL_ERR_INVALID, "[kafka] input_topics: '%.*s': '%.*s' is not "
                          "a valid model name", (int)len, e, (int)mlen, colon + 1);
    memcpy(t->model, colon + 1, mlen);
    return DL_OK;
}

dl_status dl_kafka_topics_parse(const char *csv, dl_kafka_topic *out, int max, int *n,
                                dl_err *err)
{
    *n = 0;
    for (const char *p = csv;;) {
        while (*p == ' ' || *p == '\t')
            p++;
        const char *end = strchr(p, ',');
        size_t len = end ? (size_t)(end - p) : strlen(p);
        while (len > 0 && (p[len - 1] == ' ' || p[len - 1] == '\t'))
            len--;
        if (len == 0 && (end || *n > 0))
            return dl_err_set(err, DL_ERR_INVALID, "[kafka] input_topics '%.80s' has an "
                              "empty entry", csv);
        if (len == 0)
            return dl_err_set(err, DL_ERR_INVALID, "[kafka] input_topics is empty");
        if (*n == max)
            return dl_err_set(err, DL_ERR_INVALID, "[kafka] input_topics: more than %d "
                              "topics", max);
        dl_status st = topic_entry(p, len, &out[*n], err);
        for (int i = 0; st == DL_OK && i < *n; i++)
            if (!strcmp(out[i].topic, out[*n].topic))
                st = dl_err_set(err, DL_ERR_INVALID, "[kafka] input_topics: topic '%s' is "
                                "listed twice", out[i].topic);
        if (st != DL_OK)
            return st;
        (*n)++;
        if (!end)
            return DL_OK;
        p = end + 1;
    }
}

/* Whether a librdkafka property decides how clients reach the brokers. */
static bool security_key(const char *key)
{
    return !strcmp(key, "security.protocol") || !strncmp(key, "sasl.", 5) ||
           !strncmp(key, "ssl.", 4);
}

/* Security properties belong to every client: in [kafka.client]. One in
 * [kafka.consumer] or [kafka.producer] is refused, even when the other
 * section has it too (any further client would go without it). */
static dl_status security_in_client(const dl_kafka_conf *k, dl_err *err)
{
    for (int i = 0; i < k->nprops; i++) {
        const dl_kafka_prop *p = &k->props[i];
        if (p->client != DL_KAFKA_CLIENT_ALL && security_key(p->key))
            return dl_err_set(err, DL_ERR_INVALID, "%s: [%s] %s: security properties "
                              "(security.protocol, sasl.*, ssl.*) apply to every Kafka "
                              "client: set them in [kafka.client]", p->origin,
                              dl_kafka_client_section(p->client), p->key);
    }
    return DL_OK;
}

dl_status dl_serve_conf_validate(const dl_serve_conf *c, dl_err *err)
{
    dl_status st = security_in_client(&c->kafka, err);
    if (st != DL_OK)
        return st;
    if (!c->http.tls_cert[0] != !c->http.tls_key[0])
        return dl_err_set(err, DL_ERR_INVALID,
                          "[http] tls_cert and tls_key must be set together (%s is empty)",
                          c->http.tls_cert[0] ? "tls_key" : "tls_cert");
    if (!serving_policy_ok(c->models.policy))
        return dl_err_set(err, DL_ERR_INVALID,
                          "[models] policy '%.60s' is invalid: expected latest, latest:N "
                          "or versions:N,N,... with every N >= 1", c->models.policy);
    if (c->models.load[0] && c->models.control != DL_MODELS_CONTROL_EXPLICIT)
        return dl_err_set(err, DL_ERR_INVALID, "[models] load names the models loaded at "
                          "start with control = explicit (control is %s: every model loads)",
                          dl_models_control_name(c->models.control));
    if (c->kafka.delivery == DL_DELIVERY_REDIS && !c->redis.host[0])
        return dl_err_set(err, DL_ERR_INVALID,
                          "[kafka] delivery = redis needs [redis] host");
    const char *otlp = c->trace.otlp_endpoint;
    if (otlp[0] && strncmp(otlp, "http://", 7) != 0 && strncmp(otlp, "https://", 8) != 0)
        return dl_err_set(err, DL_ERR_INVALID, "[trace] otlp_endpoint '%.200s' is not an "
                          "http:// or https:// URL", otlp);
    dl_kafka_topic topics[DL_KAFKA_TOPICS_MAX];
    int ntopics;
    if ((c->kafka.brokers[0] || c->kafka.embedded) &&
        (st = dl_kafka_topics_parse(c->kafka.input_topics, topics, DL_KAFKA_TOPICS_MAX,
                                    &ntopics, err)) != DL_OK)
        return st;
    if (c->kafka.default_model[0] &&
        !dl_model_name_valid(c->kafka.default_model, strlen(c->kafka.default_model)))
        return dl_err_set(err, DL_ERR_INVALID, "[kafka] default_model '%s' is not a valid "
                          "model name", c->kafka.default_model);
    if (!dl_log_debug_valid(c->log.debug))
        return dl_err_set(err, DL_ERR_INVALID,
                          "[log] debug '%s' is invalid: expected subsystem tags (1-15 of "
                          "a-z, 0-9, _ or -) separated by commas, e.g. kafka,http",
                          c->log.debug);
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

#ifndef DL_HAVE_KAFKA
/* With Kafka, kafka/kafka_conf.c's: librdkafka checks the properties. */
dl_status dl_serve_conf_check_kafka(const dl_serve_conf *conf, dl_err *err)
{
    (void)conf;
    return dl_err_set(err, DL_ERR_UNAVAILABLE, "this dlserve was built without Kafka "
                      "(librdkafka)");
}
#endif

void dl_serve_conf_print(const dl_serve_conf *c, FILE *f)
{
    dl_conf_print(dl_serve_opts, c, f);
    for (int s = 0; passthrough[s]; s++) {
        bool header = false;
        for (int i = 0; i < c->kafka.nprops; i++) {
            const dl_kafka_prop *p = &c->kafka.props[i];
            if ((int)p->client != s)
                continue;
            if (!header)
                fprintf(f, "\n[%s]\n", passthrough[s]);
            header = true;
            fprintf(f, "%s = %s\n", p->key,
                    dl_conf_secret_key(p->key) ? DL_CONF_REDACTED : p->value);
        }
    }
}
