/* component.h (private to serve/): the daemon's optional parts (Redis,
 * Kafka) behind one table of {start, stop, free, status, metrics}, so that
 * daemon.c starts, stops, reports and scrapes them in loops, and a build
 * without a library differs only in the table's registration.
 *
 * Life of a component, driven by daemon.c:
 *
 *   start     after HTTP, in table order, when `wanted` says the
 *             configuration asks for it
 *   status    } from HTTP threads, any time between start and free,
 *   metrics   } also while stop runs and after it
 *   stop      on SIGTERM (or a failed start), in reverse order, before the
 *             batcher drains: intake stops, threads end, work is committed
 *   free      in reverse order, once HTTP has stopped: nothing else runs
 *
 * So a component's status and metrics must stay safe against its own stop
 * (each guards what stop releases); free needs no locking. */
#ifndef DL_SERVE_COMPONENT_H
#define DL_SERVE_COMPONENT_H

#include "serve/serve.h"

#include <pthread.h>

/* What the daemon lends its components; it outlives them. */
typedef struct component_env {
    const dl_serve_conf *conf;
    registry            *reg;
    batcher             *bat;
    stats               *st;
    int                  http_port;  /* the port HTTP listens on (chosen when 0 was asked) */
    /* A byte written here wakes the daemon's main loop, which rescans the
     * model repository (non-blocking; any thread). */
    int                  rescan_fd;
    /* The Kafka result sink's Redis link (NULL: none), which the Redis
     * component reports beside its own links. The Kafka component sets it
     * after starting and clears it before stopping; read and written under
     * mu, which is held only briefly. */
    pthread_mutex_t      mu;
    dl_redis_link       *redis_sink;
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
    void      (*free)(void *state);
    /* New JSON for /status under `name`, or NULL for nothing. */
    json_t   *(*status)(void *state);
    /* Appends its Prometheus families to out (util's dl_prom_*). */
    void      (*metrics)(void *state, dl_sbuf *out);
} component;

/* Whether the configuration asks for Redis ([redis] host) or Kafka
 * ([kafka] brokers, or the embedded cluster); any build. */
bool component_redis_wanted(const dl_serve_conf *c);
bool component_kafka_wanted(const dl_serve_conf *c);

/* With hiredis (component_redis.c): the status link (training progress in
 * /status), the registry watcher, and the dlserve_redis_* families. */
extern const component component_redis;
/* With librdkafka (component_kafka.c): kafka.h's service. */
extern const component component_kafka;

/* Stand-ins for builds without them (component.c). */
extern const component component_redis_missing;
extern const component component_kafka_missing;

#endif /* DL_SERVE_COMPONENT_H */
