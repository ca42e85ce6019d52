/* component_redis.c: Redis as a daemon component: a "status" link that
 * reads training progress for /status, the registry watcher that wakes the
 * main loop when a version is announced, and the dlserve_redis_* families.
 * A reload of [redis] replaces the link and the watcher (Kafka's sink is
 * Kafka's, recreated with its clients). */
#include "serve/component.h"
#include "redis/dl_redis.h"

#include <stdlib.h>
#include <unistd.h>

typedef struct redis_comp {
    component_env  *env;
    /* The status link's commands run on one thread at a time (HTTP
     * threads take turns, under link_mu; NULL once a reload turned Redis
     * off). */
    pthread_mutex_t link_mu;
    dl_redis_link  *link;
    /* The watcher (NULL: registry off, or stopped); watch_mu guards the
     * pointer against stop and is held only briefly. */
    pthread_mutex_t watch_mu;
    dl_redis_watch *watch;
} redis_comp;

/* Watcher thread: a version was announced; the main loop rescans. */
static void on_announce(void *ctx, const char *model, int64_t version)
{
    redis_comp *r = ctx;
    if (model)
        DL_LOG(DL_LOG_NOTICE, "redis", "announced: %s version %lld", model, (long long)version);
    else
        DL_LOG(DL_LOG_INFO, "redis", "registry channel back: rescanning the repository");
    char c = 1;
    if (write(r->env->rescan_fd, &c, 1) < 0)
        DL_LOG(DL_LOG_WARNING, "redis", "cannot wake the main loop");
}

static void redis_free(void *state)
{
    redis_comp *r = state;
    if (!r)
        return;
    dl_redis_watch_stop(r->watch);       /* when start failed before stop */
    dl_redis_link_free(r->link);
    pthread_mutex_destroy(&r->link_mu);
    pthread_mutex_destroy(&r->watch_mu);
    free(r);
}

static dl_status redis_start(component_env *env, void **state, dl_err *err)
{
    *state = NULL;
    redis_comp *r = calloc(1, sizeof(*r));
    if (!r)
        return dl_err_set(err, DL_ERR_NOMEM, "redis component");
    r->env = env;
    pthread_mutex_init(&r->link_mu, NULL);
    pthread_mutex_init(&r->watch_mu, NULL);
    const dl_redis_conf *c = &env->conf->redis;
    dl_status st = dl_redis_link_new(c, "status", &r->link, err);
    if (st == DL_OK && c->registry)
        st = dl_redis_watch_start(c, on_announce, r, &r->watch, err);
    if (st != DL_OK) {
        redis_free(r);
        return st;
    }
    *state = r;
    return DL_OK;
}

static void redis_stop(void *state)
{
    redis_comp *r = state;
    pthread_mutex_lock(&r->watch_mu);
    dl_redis_watch *w = r->watch;
    r->watch = NULL;
    pthread_mutex_unlock(&r->watch_mu);
    dl_redis_watch_stop(w);
}

/* The reloaded [redis] (a rotated password, another server): a new link
 * and watcher in place of the old ones, or none when the configuration
 * names no host any more. Neither connects here, so only bad arguments or
 * resources fail, before anything is replaced. */
static dl_status redis_restart(void *state, dl_err *err)
{
    redis_comp *r = state;
    const dl_redis_conf *c = &r->env->conf->redis;
    dl_redis_link *link = NULL;
    dl_redis_watch *watch = NULL;
    dl_status st = DL_OK;
    if (component_redis_wanted(r->env->conf)) {
        st = dl_redis_link_new(c, "status", &link, err);
        if (st == DL_OK && c->registry)
            st = dl_redis_watch_start(c, on_announce, r, &watch, err);
    }
    if (st != DL_OK) {
        dl_redis_link_free(link);
        redis_stop(r);
        return st;
    }
    redis_stop(r);
    pthread_mutex_lock(&r->watch_mu);
    r->watch = watch;
    pthread_mutex_unlock(&r->watch_mu);
    pthread_mutex_lock(&r->link_mu);
    dl_redis_link *old = r->link;
    r->link = link;
    pthread_mutex_unlock(&r->link_mu);
    dl_redis_link_free(old);
    DL_LOG(DL_LOG_NOTICE, "redis", link ? "links recreated with the reloaded configuration"
                                        : "stopped: the configuration names no host");
    return DL_OK;
}

/* {"links": [watcher, Kafka's sink, status link], "training": {model:
 * newest progress record}}. */
static json_t *redis_status(void *state)
{
    redis_comp *r = state;
    json_t *links = json_array(), *progress = json_object();
    pthread_mutex_lock(&r->watch_mu);
    if (r->watch)
        json_array_append_new(links, dl_redis_watch_status(r->watch));
    pthread_mutex_unlock(&r->watch_mu);
    pthread_mutex_lock(&r->env->mu);
    if (r->env->redis_sink)
        json_array_append_new(links, dl_redis_link_status(r->env->redis_sink));
    pthread_mutex_unlock(&r->env->mu);

    pthread_mutex_lock(&r->link_mu);
    char **names = r->link ? registry_names(r->env->reg) : NULL;
    for (int i = 0; names && names[i]; i++) {
        json_t *p = dl_redis_progress_latest(r->link, names[i]);
        if (p)
            json_object_set_new(progress, names[i], p);
        free(names[i]);
    }
    free(names);
    if (r->link)
        json_array_append_new(links, dl_redis_link_status(r->link));   /* after its use */
    pthread_mutex_unlock(&r->link_mu);
    return json_pack("{s:o, s:o}", "links", links, "training", progress);
}

static void redis_metrics(void *state, dl_sbuf *out)
{
    redis_comp *r = state;
    /* One call for every link, so that each family is written once. */
    pthread_mutex_lock(&r->watch_mu);
    pthread_mutex_lock(&r->env->mu);
    pthread_mutex_lock(&r->link_mu);
    dl_redis_link *links[2] = { r->link, r->env->redis_sink };
    dl_redis_metrics(out, links, 2, r->watch);
    pthread_mutex_unlock(&r->link_mu);
    pthread_mutex_unlock(&r->env->mu);
    pthread_mutex_unlock(&r->watch_mu);
}

const component component_redis = {
    .name = "redis",
    .wanted = component_redis_wanted,
    .start = redis_start,
    .stop = redis_stop,
    .restart = redis_restart,
    .free = redis_free,
    .status = redis_status,
    .metrics = redis_metrics,
};
