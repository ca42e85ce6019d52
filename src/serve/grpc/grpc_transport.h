/* grpc_transport.h (private to serve/): the gRPC server (grpc_server.c, with the
 * files that grpc_int.h lists) as the daemon starts and stops it. */
#ifndef DL_SERVE_GRPC_TRANSPORT_H
#define DL_SERVE_GRPC_TRANSPORT_H

#include "serve/batcher.h"
#include "serve/dl_serve.h"
#include "serve/registry.h"
#include "serve/stats.h"
#include "serve/tracer.h"

typedef struct grpc_srv grpc_srv;

typedef struct grpc_deps {
    const dl_grpc_conf *conf;
    const dl_http_conf *http;           /* its address, token and TLS files */
    registry           *reg;
    batcher            *bat;
    stats              *st;
    cache              *cache;          /* the response cache, NULL when off */
    tracer             *tr;
    const char         *server_version; /* DL_VERSION_STRING */
    /* true once models are loaded and warmed, false again after SIGTERM
     * (health: SERVING, ServerReady) */
    bool              (*ready)(void *ctx);
    void               *ctx;
} grpc_deps;

/* Starts listening on deps->conf's address and port (deps must outlive
 * the server) with deps->conf->threads threads (0: one per two cores) serving
 * every call from one completion queue. The bound port is in *port. */
dl_status grpc_srv_start(const grpc_deps *deps, grpc_srv **out, int *port, dl_err *err);
/* Stops: no new calls; those in flight are answered (call it after
 * batcher_drain, which completes the requests the batcher holds), open
 * streams end after at most 5 s; then everything is freed. */
void grpc_srv_stop(grpc_srv *s);

/* {"port", "tls", "auth", "calls_in_flight", "streams_open", "requests"} (new). */
json_t *grpc_srv_status(grpc_srv *s);
/* dlserve_grpc_requests_total{method,code}, dlserve_grpc_calls_in_flight,
 * dlserve_grpc_streams_open. */
void grpc_srv_metrics(grpc_srv *s, dl_sbuf *out);

#endif /* DL_SERVE_GRPC_TRANSPORT_H */
