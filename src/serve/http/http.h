/* http.h (private to serve/): the HTTP server (http_server.c, with the
 * files that http_int.h lists) as the daemon starts and stops it. */
#ifndef DL_SERVE_HTTP_H
#define DL_SERVE_HTTP_H

#include "serve/batcher.h"
#include "serve/dl_serve.h"
#include "serve/registry.h"
#include "serve/stats.h"
#include "serve/tracer.h"

typedef struct http_server http_server;

typedef struct http_deps {
    const dl_http_conf *conf;
    registry           *reg;
    batcher            *bat;
    stats              *st;
    cache              *cache;          /* the response cache, NULL when off */
    double              start_time;     /* dl_time_now() at start */
    const char         *server_version; /* DL_VERSION_STRING */
    const char         *models_dir;     /* the repository, for GET /status/training */
    /* true once models are loaded and warmed (for /v2/health/ready) */
    bool              (*ready)(void *ctx);
    void               *ctx;
    /* extra JSON for /status (new reference), may be NULL */
    json_t           *(*status_extra)(void *ctx);
    /* extra Prometheus text for /metrics (new string), may be NULL */
    char             *(*metrics_extra)(void *ctx);
    /* the spans of traced requests and Triton's trace settings (tracer.h) */
    tracer             *tr;
    /* the status page's history for GET /status/history (new), may be NULL */
    json_t           *(*history)(void *ctx);
} http_deps;

/* Starts listening (deps must outlive the server) with deps->conf->threads
 * event-loop threads (0: one per core) serving every connection. The
 * bound port is in *port (useful with port 0). */
dl_status http_start(const http_deps *deps, http_server **out, int *port, dl_err *err);
/* Stops accepting connections; requests in flight are answered first
 * (for at most 30 s, but always those the batcher holds: call it after
 * batcher_drain, which completes them). */
void http_stop(http_server *h);

#endif /* DL_SERVE_HTTP_H */
