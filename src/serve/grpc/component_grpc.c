/* component_grpc.c: gRPC as a daemon component: grpc_transport.h's server started
 * after HTTP, kept answering while the batcher drains at shutdown (new
 * infer requests get UNAVAILABLE), then stopped once the batcher has
 * answered what it held. */
#include "serve/component.h"
#include "serve/grpc/grpc_transport.h"

#include <stdlib.h>

typedef struct grpc_comp {
    grpc_deps deps;    /* outlives the server: freed with the component */
    grpc_srv *srv;     /* NULL once stopped */
    pthread_mutex_t mu;   /* srv against status and metrics during finish */
} grpc_comp;

static dl_status grpc_comp_start(component_env *env, void **state, dl_err *err)
{
    *state = NULL;
    grpc_comp *gc = calloc(1, sizeof(*gc));
    if (!gc)
        return dl_err_set(err, DL_ERR_NOMEM, "grpc component");
    gc->deps = (grpc_deps){ .conf = &env->conf->grpc, .http = &env->conf->http,
                            .reg = env->reg, .bat = env->bat, .st = env->st, .cache = env->cache,
                            .tr = env->tracer,
                            .server_version = DL_VERSION_STRING, .ready = env->ready,
                            .ctx = env->ctx };
    int port;
    dl_status st = grpc_srv_start(&gc->deps, &gc->srv, &port, err);
    if (st != DL_OK) {
        free(gc);
        return st;
    }
    pthread_mutex_init(&gc->mu, NULL);
    *state = gc;
    return DL_OK;
}

static void grpc_comp_finish(void *state)
{
    grpc_comp *gc = state;
    pthread_mutex_lock(&gc->mu);
    grpc_srv *s = gc->srv;
    gc->srv = NULL;
    pthread_mutex_unlock(&gc->mu);
    grpc_srv_stop(s);
}

static void grpc_comp_free(void *state)
{
    grpc_comp *gc = state;
    pthread_mutex_destroy(&gc->mu);
    free(gc);
}

static json_t *grpc_comp_status(void *state)
{
    grpc_comp *gc = state;
    pthread_mutex_lock(&gc->mu);
    json_t *j = gc->srv ? grpc_srv_status(gc->srv) : json_pack("{s:b}", "stopped", 1);
    pthread_mutex_unlock(&gc->mu);
    return j;
}

static void grpc_comp_metrics(void *state, dl_sbuf *out)
{
    grpc_comp *gc = state;
    pthread_mutex_lock(&gc->mu);
    if (gc->srv)
        grpc_srv_metrics(gc->srv, out);
    pthread_mutex_unlock(&gc->mu);
}

/* No stop: gRPC keeps answering while the batcher drains, as HTTP does. */
const component component_grpc = {
    .name = "grpc",
    .wanted = component_grpc_wanted,
    .start = grpc_comp_start,
    .finish = grpc_comp_finish,
    .free = grpc_comp_free,
    .status = grpc_comp_status,
    .metrics = grpc_comp_metrics,
};
