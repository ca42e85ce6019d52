/* dl_serve.h: the serving daemon: configuration and the entry point that
 * `dlserve` (no mode flag) runs. Depends on redis, nn, tensor and util;
 * only serve/ sees librdkafka, libmicrohttpd and systemd. */
#ifndef DL_SERVE_H
#define DL_SERVE_H

#include "nn/dl_nn.h"
#include "redis/dl_redis.h"

#ifdef __cplusplus
extern "C" {
#endif

#define DL_PATH_MAX 1024
#define DL_MAX_INSTANCES 16   /* models.instances: copies of each model */

typedef struct dl_http_conf {
    char    address[64];         /* bind address; 127.0.0.1 by default */
    int64_t port;                /* 0: any free port (logged) */
    int64_t max_body_bytes;      /* larger bodies get 413 */
    char    token[256];          /* bearer token; empty: no authentication */
    char    tls_cert[DL_PATH_MAX];
    char    tls_key[DL_PATH_MAX];
    int64_t threads;             /* event-loop threads serving connections; 0: one per core */
    int64_t max_connections;     /* more get 503; 0: as file descriptors allow */
    int64_t metrics_port;        /* GET /metrics only, no token; 0: none */
    int64_t shutdown_grace_s;    /* not ready after SIGTERM, still serving; -1: 5 under
                                    systemd, 0 elsewhere */
} dl_http_conf;

/* [grpc]: the Open Inference Protocol over gRPC (docs/serving.md, "gRPC").
 * TLS and the bearer token are [http]'s: one set of credentials. */
typedef struct dl_grpc_conf {
    char    address[64];         /* bind address; [http] address when empty */
    int64_t port;                /* 0: no gRPC */
    int64_t threads;             /* threads serving every call; 0: one per core */
    int64_t max_message_bytes;   /* larger messages get RESOURCE_EXHAUSTED */
} dl_grpc_conf;

typedef struct dl_batching_conf {
    int64_t max_batch_size;
    int64_t max_queue_delay_us;
    int64_t max_queue_size;      /* queued samples per model before 503 */
    bool    eager;               /* run before the delay when no request is on its way */
    int64_t direct_max_us;       /* a lone request runs on its transport's thread when a
                                    sample takes at most this (0: never) */
    int64_t default_timeout_us;  /* longest a request may queue (0: no limit); a request's
                                    "timeout" parameter overrides it */
    bool    batch_invariant;     /* an answer's bits do not depend on its batch
                                    (dl_model_set_batch_invariant) */
} dl_batching_conf;

/* The inference device, as [models] device names it and parsed once. */
typedef enum dl_device_kind {
    DL_DEVICE_CPU,
    DL_DEVICE_CUDA,
} dl_device_kind;

typedef struct dl_device {
    char           name[32];     /* as written: "cpu", "cuda" or "cuda:N" (for dl_backend_new) */
    dl_device_kind kind;
    int            index;        /* N of "cuda:N" (0..1023); -1: "cuda" (the local rank's GPU), cpu */
} dl_device;

/* [models] control: what loads and reloads models (docs/serving.md,
 * "Model lifecycle"). */
typedef enum dl_models_control {
    DL_MODELS_CONTROL_WATCH,     /* inotify on the repository (with watch = true) */
    DL_MODELS_CONTROL_POLL,      /* a rescan every poll_interval_s */
    DL_MODELS_CONTROL_EXPLICIT,  /* `load` at start, then the repository API alone */
} dl_models_control;

#define DL_MODELS_LOAD_MAX 1024  /* [models] load: bytes of the list */

typedef struct dl_models_conf {
    char    dir[DL_PATH_MAX];    /* the model repository */
    char    policy[128];         /* "latest", "latest:N" or "versions:1,3" */
    int     control;             /* dl_models_control */
    int64_t poll_interval_s;     /* control = poll: seconds between rescans */
    char    load[DL_MODELS_LOAD_MAX];  /* control = explicit: "a,b", the models loaded
                                          at start */
    int64_t load_threads;        /* versions loaded at once; 0: the cores, at most 4 */
    bool    watch;               /* control = watch: inotify on (false: SIGHUP and the
                                    repository API alone) */
    dl_device device;
    int64_t threads;             /* CPU threads for inference, of each instance (0: the
                                    cores less one, or split between instances) */
    int64_t instances;           /* copies of each model, batches computed at once */
} dl_models_conf;

/* The word of a control mode in the configuration ("watch", ...); static. */
const char *dl_models_control_name(dl_models_control mode);

/* The next entry of a [models] load list ("a, b"): *name and *len, the
 * blanks around it left out; *p moves past its comma. Start with *p the
 * list, NULL when it is ""; false once the entries are done. "a," gives
 * "a" and then an empty entry. */
bool dl_models_load_next(const char **p, const char **name, size_t *len);

typedef struct dl_log_conf {
    int     level;               /* DL_LOG_ERR .. DL_LOG_DEBUG */
    char    debug[128];          /* subsystems logged at debug level: "kafka,http" */
    int     format;              /* DL_LOG_FORMAT_TEXT or DL_LOG_FORMAT_JSON */
} dl_log_conf;

/* [trace]: OpenTelemetry spans of inference requests (docs/serving.md,
 * "Tracing"), exported over OTLP/HTTP JSON by a background thread. */
typedef enum dl_trace_level {
    DL_TRACE_LEVEL_OFF,          /* no spans */
    DL_TRACE_LEVEL_TIMESTAMPS,   /* a span a request with its stages' times */
} dl_trace_level;

typedef struct dl_trace_conf {
    char    otlp_endpoint[512];  /* http(s)://host:port/v1/traces; "": no export */
    int     level;               /* dl_trace_level */
    double  rate;                /* share of requests traced, 0..1 */
    int64_t queue_size;          /* spans waiting for export before new ones are dropped */
    int64_t flush_ms;            /* longest a span waits before its batch is sent */
} dl_trace_conf;

/* Which clients a raw librdkafka property is for: its section. */
typedef enum dl_kafka_client {
    DL_KAFKA_CLIENT_ALL,         /* [kafka.client]: every client the daemon makes */
    DL_KAFKA_CLIENT_CONSUMER,    /* [kafka.consumer] */
    DL_KAFKA_CLIENT_PRODUCER,    /* [kafka.producer] */
} dl_kafka_client;

/* The section of a client kind: "kafka.client", ...; static. */
const char *dl_kafka_client_section(dl_kafka_client client);

/* Raw librdkafka properties from [kafka.client], [kafka.consumer] and
 * [kafka.producer], in file order, values expanded (${env:}, ${file:}). */
#define DL_KAFKA_PROPS_MAX 64
typedef struct dl_kafka_prop {
    dl_kafka_client client;
    char    key[128];
    char    value[1024];
    char    origin[DL_PATH_MAX + 16];   /* "file:line", for errors */
} dl_kafka_prop;

/* How Kafka records are delivered ([kafka] delivery; kafka.h says more). */
typedef enum dl_delivery {
    DL_DELIVERY_AT_LEAST_ONCE,
    DL_DELIVERY_EXACTLY_ONCE,
    DL_DELIVERY_REDIS,
} dl_delivery;

/* The word of a delivery mode in the configuration ("at-least-once", ...);
 * static. */
const char *dl_delivery_name(dl_delivery mode);

/* How predictions are written to the output topic ([kafka] output_format). */
typedef enum dl_output_format {
    DL_OUTPUT_DLSERVE,      /* {"id","model","version","class","label","scores","source"} */
    DL_OUTPUT_OIP_JSON,     /* the OIP InferenceResponse, as HTTP answers */
    DL_OUTPUT_OIP_BINARY,   /* the same with the binary tensor data extension */
} dl_output_format;

typedef struct dl_kafka_conf {
    char    brokers[512];        /* bootstrap servers; empty: Kafka off (unless embedded) */
    bool    embedded;            /* start librdkafka's in-process mock cluster */
    int64_t embedded_partitions; /* partitions of the topics the mock creates */
    char    group_id[128];
    char    input_topics[512];   /* comma-separated topic[:model] (dl_kafka_topics_parse) */
    char    output_topic[256];
    char    dead_letter_topic[256];
    dl_delivery delivery;
    char    default_model[DL_NAME_MAX]; /* for {"id","data"} and binary records without a model */
    char    transactional_id[128];      /* exactly-once; empty: dlserve-<group_id>-<host>-<port> */
    int64_t commit_interval_ms;  /* offsets commit / transaction length */
    int64_t max_in_flight;       /* records held before intake stops */
    int64_t max_record_bytes;    /* larger values go to the dead-letter topic */
    int64_t max_record_age_ms;   /* older records (by their timestamp) go to the
                                    dead-letter topic as "expired"; 0: no limit */
    dl_output_format output_format;
    int           nprops;
    dl_kafka_prop props[DL_KAFKA_PROPS_MAX];
} dl_kafka_conf;

/* One entry of [kafka] input_topics: "topic" or "topic:model". */
#define DL_KAFKA_TOPICS_MAX 32
typedef struct dl_kafka_topic {
    char    topic[250];          /* Kafka's longest topic name is 249 */
    char    model[DL_NAME_MAX];  /* records naming no model go here; "": the default */
} dl_kafka_topic;

/* Reads input_topics ("a, b:model, ..."; blanks around entries ignored)
 * into out (max entries), *n of them. DL_ERR_INVALID, saying which entry,
 * for an empty list, an empty entry, a topic of other characters than
 * [A-Za-z0-9._-], an invalid model name, a topic listed twice or more
 * than max entries. */
dl_status dl_kafka_topics_parse(const char *csv, dl_kafka_topic *out, int max, int *n,
                                dl_err *err);

/* [generate]: models that generate text (docs/serving.md, "Generation"). */
typedef struct dl_generate_conf {
    int64_t max_sequences;       /* sequences a version runs at once (a beam counts its width) */
    int64_t cache_bytes;         /* decoding state (key-value caches) of a version; 0: no bound */
    int64_t default_length;      /* a request's max_tokens when it gives none */
    int64_t timeout_us;          /* longest a request waits for room before 503 */
} dl_generate_conf;

/* [cache]: the response cache (docs/serving.md, "Response cache"). */
typedef struct dl_cache_conf {
    int64_t bytes;               /* its bound; 0: no cache */
} dl_cache_conf;

typedef struct dl_serve_conf {
    dl_http_conf     http;
    dl_grpc_conf     grpc;
    dl_batching_conf batching;
    dl_generate_conf generate;
    dl_cache_conf    cache;
    dl_models_conf   models;
    dl_log_conf      log;
    dl_kafka_conf    kafka;
    dl_redis_conf    redis;
    dl_trace_conf    trace;
} dl_serve_conf;

/* The daemon's option table (all sections). */
extern const dl_opt dl_serve_opts[];

/* Loads defaults, then the file (NULL: none), then the environment.
 * Errors name the file and line or the variable. */
dl_status dl_serve_conf_load(dl_serve_conf *conf, const char *path, dl_err *err);

/* Sets one option ([kafka.client], [kafka.consumer] and [kafka.producer]
 * take any key, as raw librdkafka properties); origin names where it came
 * from. */
dl_status dl_serve_conf_set(dl_serve_conf *conf, const char *section, const char *key,
                            const char *value, const char *origin, dl_err *err);

/* Applies "section.key=value" strings (--set), in order; raw librdkafka
 * properties read "kafka.client.some.property=value" (or kafka.consumer.,
 * kafka.producer.). Values expand as in files. Errors name the
 * string; conf may be partly changed then. */
dl_status dl_serve_conf_apply(dl_serve_conf *conf, const char *const *ov, int n, dl_err *err);

/* Cross-field checks (TLS files both or neither, version policy syntax,
 * the debug subsystem list, Redis for redis delivery, security properties
 * only in [kafka.client]), for a configuration changed after
 * dl_serve_conf_load. */
dl_status dl_serve_conf_validate(const dl_serve_conf *conf, dl_err *err);

/* Sets every raw [kafka.*] property, with dlserve's own, on a fresh
 * librdkafka configuration of each client the daemon makes (the producer,
 * then the consumer), as the daemon does at start, so that librdkafka
 * checks their names and values (--check-config); creates no client.
 * DL_ERR_INVALID names the property's origin (file:line, or --set) and
 * librdkafka's reason; DL_ERR_UNAVAILABLE in a build without Kafka. */
dl_status dl_serve_conf_check_kafka(const dl_serve_conf *conf, dl_err *err);

/* Writes the effective configuration (--check-config): every option, then
 * the raw [kafka.*] sections; secrets (dl_conf_secret_key) show as ***. */
void dl_serve_conf_print(const dl_serve_conf *conf, FILE *f);

/* Runs the daemon until SIGTERM/SIGINT; returns the process exit code.
 * config_path may be NULL. overrides: "section.key=value" strings from the
 * command line, applied last. */
int dl_serve_main(const char *config_path, const char *const *overrides, int noverrides);

#ifdef __cplusplus
}
#endif
#endif /* DL_SERVE_H */
