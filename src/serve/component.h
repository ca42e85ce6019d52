/* component.h (private to serve/): the daemon's parts that take requests
 * or talk to the outside (the OTLP span exporter, HTTP, gRPC, Redis, Kafka)
 * behind one table of {start, stop, finish, free, status, metrics}, so
 * that daemon.c starts, stops, reports and frees them in loops, and a
 * build without a library differs only in the table's registration.
 *
 * Life of a component, driven by daemon.c:
 *
 *   start     in table order (the span exporter, then HTTP), when
 *             `wanted` says the configuration asks for it
 *   status    } from HTTP threads, any time between start and free,
 *   metrics   } also while stop and finish run and after them
 *   stop      on SIGTERM (or a failed start), in reverse order, before the
 *             batcher drains: intake stops, threads end, work is committed
 *   finish    in reverse order, once the batcher has drained: a transport
 *             that kept taking requests meanwhile (HTTP: new infer requests
 *             get 503) answers those in flight and closes
 *   free      in reverse order, after the registry and batcher are freed:
 *             nothing else runs
 *   restart   on SIGHUP, from the main loop, when the reload changed the
 *             component's settings in env->conf: it stops as stop and
 *             finish would, then starts again with the new settings in
 *             place (its state stays: HTTP threads may hold it), or stays
 *             stopped when the configuration no longer wants it
 *
 * So a component's status and metrics must stay safe against its own stop
 * and restart (each guards what they release); free needs no locking. stop,
 * finish, restart, status and metrics may be NULL: nothing to do. */
#ifndef DL_SERVE_COMPONENT_H
#define DL_SERVE_COMPONENT_H

#include "serve/serve.h"
#include "serve/tracer.h"

#include <pthread.h>

/* What the daemon lends its components; it outlives them. */
typedef struct component_env {
    const dl_serve_conf *conf;
    registry            *reg;
    batcher             *bat;
    stats               *st;
    /* The response cache (cache.h), NULL when off: a transport looks its
     * requests up (infer_req_cached) and stores their answers. */
    cache               *cache;
    /* A byte written here wakes the daemon's main loop, which rescans the
     * model repository (non-blocking; any thread). */
    int                  rescan_fd;
    /* The Kafka result sink's Redis link (NULL: none), which the Redis
     * component reports beside its own links. The Kafka component sets it
     * after starting and clears it before stopping; read and written under
     * mu, which is held only briefly. */
    pthread_mutex_t      mu;
    dl_redis_link       *redis_sink;
    /* For the HTTP component (http.h's http_deps): the daemon's start
     * time, its readiness and its own parts of /status and /metrics,
     * called with ctx from HTTP threads. */
    double               start_time;
    bool               (*ready)(void *ctx);
    json_t            *(*status_extra)(void *ctx);
    char              *(*metrics_extra)(void *ctx);
    void                *ctx;
    /* The port HTTP listens on, written by its start (0 until then). */
    int                  http_port;
    /* The spans of traced requests (tracer.h), for every build and
     * transport; exported by component_otlp while it runs. */
    tracer              *tracer;
    /* The status page's history (GET /status/history, new), or NULL. */
    json_t            *(*history)(void *ctx);
} component_env;

typedef struct component {
    const char *name;       /* its key in /status */
    /* True when the configuration asks for this component. */
    bool      (*wanted)(const dl_serve_conf *c);
    /* Set only in the stand-in for a component this dlserve was built
     * without (start and the rest are NULL then): wanting it stops start-up
     * with this reason. */
    const char *missing;
    /* *state (new, NULL on failure) goes to the other hooks. On failure
     * the component has released what it started. */
    dl_status (*start)(component_env *env, void **state, dl_err *err);
    void      (*stop)(void *state);
    void      (*finish)(void *state);
    void      (*free)(void *state);
    /* NULL: its settings apply at restart only. On failure the component
     * is stopped and err says why; restart may be called again. */
    dl_status (*restart)(void *state, dl_err *err);
    /* New JSON for /status under `name`, or NULL for nothing. */
    json_t   *(*status)(void *state);
    /* Appends its Prometheus families to out (util's dl_prom_*). */
    void      (*metrics)(void *state, dl_sbuf *out);
} component;

/* Whether the configuration asks for Redis ([redis] host) or Kafka
 * ([kafka] brokers, or the embedded cluster); any build. */
bool component_redis_wanted(const dl_serve_conf *c);
bool component_kafka_wanted(const dl_serve_conf *c);
bool component_otlp_wanted(const dl_serve_conf *c);
bool component_grpc_wanted(const dl_serve_conf *c);

/* HTTP (http/component_http.c): http.h's server, in every build. */
extern const component component_http;
/* With libgrpc and protobuf-c (grpc/component_grpc.c): grpc_transport.h's server. */
extern const component component_grpc;
/* With hiredis (component_redis.c): the status link (training progress in
 * /status), the registry watcher, and the dlserve_redis_* families. */
extern const component component_redis;
/* With librdkafka (component_kafka.c): kafka.h's service. */
extern const component component_kafka;
/* With libcurl (component_otlp.c): the OTLP/HTTP exporter of env->tracer's
 * spans ([trace] otlp_endpoint). */
extern const component component_otlp;

/* Stand-ins for builds without them (component.c). */
extern const component component_redis_missing;
extern const component component_kafka_missing;
extern const component component_otlp_missing;
extern const component component_grpc_missing;

#endif /* DL_SERVE_COMPONENT_H */
