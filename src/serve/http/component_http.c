/* component_http.c: HTTP as a daemon component: http.h's server started
 * first, kept answering while the batcher drains at shutdown (new infer
 * requests get 503), then stopped once the batcher has answered what it held. */
#include "serve/component.h"
#include "serve/http/http.h"

#include <stdlib.h>
#include <time.h>

/* After intake stops, the listener stays open this long answering 503,
 * so that connections already queued in the kernel are answered rather
 * than reset when it closes (clients and load balancers see 503 and go). */
#define LAME_DUCK_NS 250000000L

typedef struct http_comp {
    http_deps    deps;     /* outlives the server: freed with the component */
    http_server *srv;      /* NULL once stopped */
} http_comp;

static bool http_wanted(const dl_serve_conf *c)
{
    (void)c;
    return true;
}

static dl_status http_comp_start(component_env *env, void **state, dl_err *err)
{
    *state = NULL;
    http_comp *hc = calloc(1, sizeof(*hc));
    if (!hc)
        return dl_err_set(err, DL_ERR_NOMEM, "http component");
    hc->deps = (http_deps){ .conf = &env->conf->http, .reg = env->reg, .bat = env->bat,
                            .st = env->st, .cache = env->cache, .start_time = env->start_time,
                            .server_version = DL_VERSION_STRING,
                            .models_dir = env->conf->models.dir, .ready = env->ready,
                            .ctx = env->ctx, .status_extra = env->status_extra,
                            .metrics_extra = env->metrics_extra, .tr = env->tracer,
                            .history = env->history };
    dl_status st = http_start(&hc->deps, &hc->srv, &env->http_port, err);
    if (st != DL_OK) {
        free(hc);
        return st;
    }
    *state = hc;
    return DL_OK;
}

/* The batcher has drained: a last moment of 503s, then the requests in
 * flight are answered and the connections close. */
static void http_comp_finish(void *state)
{
    http_comp *hc = state;
    struct timespec ts = { 0, LAME_DUCK_NS };
    nanosleep(&ts, NULL);
    http_stop(hc->srv);
    hc->srv = NULL;
}

static void http_comp_free(void *state)
{
    free(state);   /* the server stopped in finish */
}

/* No stop: HTTP keeps answering while the batcher drains. Its status and
 * metrics are the daemon's own (/status's "http", dlserve_http_*). */
const component component_http = {
    .name = "http",
    .wanted = http_wanted,
    .start = http_comp_start,
    .finish = http_comp_finish,
    .free = http_comp_free,
};
