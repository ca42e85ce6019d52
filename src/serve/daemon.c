/* daemon.c: the serving daemon's life: configuration, models and batcher
 * started in order, then the components (HTTP, Redis, Kafka) from one
 * table; READY=1 once models are loaded and warmed up; a main loop that
 * reloads models as [models] control says (inotify on the model folder, or
 * a rescan every poll_interval_s, or nothing: the repository API alone),
 * reloads on SIGHUP (what changed applied live, components restarted on
 * new settings, the rest logged by name), pets the systemd watchdog, and on SIGTERM stops
 * intake, answers every queued request and exits 0. Signal handlers only
 * set flags. */
#define _GNU_SOURCE
#include "serve/component.h"
#include "serve/history.h"

#include <dirent.h>
#include <fcntl.h>
#include <poll.h>
#include <pthread.h>
#include <signal.h>
#include <stdarg.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/inotify.h>
#include <time.h>
#include <unistd.h>

#ifdef DL_HAVE_SYSTEMD
#include <systemd/sd-daemon.h>
#endif

#define DEBOUNCE_S 0.3   /* quiet time after a folder change before a rescan */
/* http.shutdown_grace_s = -1 under systemd: a few of a load balancer's
 * health checks (Kubernetes probes every 10 s by default, and marks a
 * pod not ready as soon as it is terminating), short enough that the
 * unit's TimeoutStopSec (40 s) covers the grace and HTTP's 30 s drain. */
#define DEFAULT_GRACE_S 5

static volatile sig_atomic_t stop_flag, reload_flag, stop_signal;

/* Counts the stop signals: a second one ends the grace period. */
static void on_stop(int sig) { stop_signal = sig; stop_flag = stop_flag + 1; }
static void on_reload(int sig) { (void)sig; reload_flag = 1; }

/* sd_notify, or nothing without systemd. */
static void notify(const char *fmt, ...) __attribute__((format(printf, 1, 2)));
static void notify(const char *fmt, ...)
{
#ifdef DL_HAVE_SYSTEMD
    char buf[512];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(buf, sizeof(buf), fmt, ap);
    va_end(ap);
    sd_notify(0, buf);
#else
    (void)fmt;
#endif
}

static double watchdog_seconds(void)
{
#ifdef DL_HAVE_SYSTEMD
    uint64_t usec = 0;
    if (sd_watchdog_enabled(0, &usec) > 0)
        return (double)usec * 1e-6;
#endif
    return 0.0;
}

/* Watches the repository, its model folders and their version folders:
 * a new version appears as a folder, then its weights renamed in. Adding
 * a watch twice is harmless, so this runs before every rescan. */
static void watch_tree(int fd, const char *dir, int depth)
{
    inotify_add_watch(fd, dir, IN_CREATE | IN_MOVED_TO | IN_MOVED_FROM | IN_DELETE |
                                   IN_CLOSE_WRITE | IN_ONLYDIR);
    if (depth == 0)
        return;
    DIR *d = opendir(dir);
    if (!d)
        return;
    struct dirent *de;
    while ((de = readdir(d))) {
        if (de->d_name[0] == '.' || de->d_type != DT_DIR)
            continue;
        char sub[2 * DL_PATH_MAX];
        snprintf(sub, sizeof(sub), "%s/%s", dir, de->d_name);
        watch_tree(fd, sub, depth - 1);
    }
    closedir(d);
}

/* The components, started in this order (the span exporter, HTTP, gRPC)
 * and stopped in reverse before the batcher drains: Kafka's records in
 * flight are answered and committed first, then the Redis watcher stops;
 * HTTP and gRPC take no stop (new infer requests get 503 or UNAVAILABLE
 * meanwhile) but finish once the batcher has drained, answering what is
 * in flight; Redis's
 * status link is freed after HTTP has stopped; the span exporter finishes
 * last, sending the spans of HTTP's last answers. A build without a
 * library registers its stand-in, which refuses a configuration that asks
 * for it. */
static const component *const components[] = {
#ifdef DL_HAVE_OTLP
    &component_otlp,
#else
    &component_otlp_missing,
#endif
    &component_http,
#ifdef DL_HAVE_GRPC
    &component_grpc,
#else
    &component_grpc_missing,
#endif
#ifdef DL_HAVE_REDIS
    &component_redis,
#else
    &component_redis_missing,
#endif
#ifdef DL_HAVE_KAFKA
    &component_kafka,
#else
    &component_kafka_missing,
#endif
};
#define NCOMPONENTS (sizeof(components) / sizeof(components[0]))

typedef struct daemon_ctx {
    /* The running configuration: a reload writes into it only what it
     * applies live, so that it always says what runs. */
    dl_serve_conf conf;
    const char   *config_path;
    const char *const *overrides;   /* --set, applied again on each reload */
    int           noverrides;
    dl_backend   *be[DL_MAX_INSTANCES];   /* one an instance (models.instances) */
    int           nbe;
    registry     *reg;
    stats        *st;
    batcher      *bat;
    cache        *cache;         /* the response cache; NULL: [cache] bytes = 0 */
    tracer       *tr;
    history      *hs;            /* the status page's history */
    double        start;
    int64_t       reloads;
    component_env env;
    /* Each component's state, NULL when not started. Written by the main
     * thread, read by HTTP threads for /status and /metrics. */
    void *_Atomic state[NCOMPONENTS];
    int           wake[2];        /* a byte here wakes the main loop: rescan the repository */
} daemon_ctx;

/* A version the registry stops serving takes its cached answers along. */
static void retired(void *ctx, const served *sv)
{
    cache_drop(ctx, sv->name, sv->version, sv->load_id);
}

static bool is_ready(void *ctx)
{
    daemon_ctx *d = ctx;
    return !stop_flag && registry_ready(d->reg);
}

static json_t *status_extra(void *ctx)
{
    daemon_ctx *d = ctx;
    json_t *o = json_pack("{s:I, s:s, s:s, s:i, s:i, s:i}", "reloads", (json_int_t)d->reloads,
                          "models_dir", d->conf.models.dir, "models_control",
                          dl_models_control_name(d->conf.models.control), "model_load_threads",
                          registry_load_threads(d->reg), "port", d->env.http_port,
                          "inference_threads", d->be[0]->threads);
    if (o && d->cache) {
        cache_usage u;
        cache_get_usage(d->cache, &u);
        json_object_set_new(o, "cache", json_pack("{s:I, s:I, s:I, s:I, s:I}", "bytes",
                                                  (json_int_t)u.bytes, "entries",
                                                  (json_int_t)u.entries, "capacity",
                                                  (json_int_t)u.capacity, "inserts",
                                                  (json_int_t)u.inserts, "evictions",
                                                  (json_int_t)u.evictions));
    }
    for (size_t i = 0; o && i < NCOMPONENTS; i++) {
        void *state = atomic_load(&d->state[i]);
        json_t *j = state && components[i]->status ? components[i]->status(state) : NULL;
        if (j)
            json_object_set_new(o, components[i]->name, j);
    }
    return o;
}

static char *metrics_extra(void *ctx)
{
    daemon_ctx *d = ctx;
    dl_sbuf b = {0};
    size_t used, total;
    if (dl_backend_memory(d->be[0], &used, &total) == DL_OK) {
        const char *device = d->conf.models.device.name;
        dl_prom_family(&b, "dlserve_gpu_memory_used_bytes", "gauge",
                       "GPU memory held by dlserve's pool.");
        dl_prom_sample(&b, "dlserve_gpu_memory_used_bytes", (double)used, "device", device, NULL);
        dl_prom_family(&b, "dlserve_gpu_memory_total_bytes", "gauge", "GPU memory of the device.");
        dl_prom_sample(&b, "dlserve_gpu_memory_total_bytes", (double)total, "device", device, NULL);
    }
    dl_prom_family(&b, "dlserve_build_info", "gauge",
                   "dlserve's version, the commit it was built from and its inference backend "
                   "(always 1).");
    dl_prom_sample(&b, "dlserve_build_info", 1, "version", DL_VERSION_STRING, "commit",
                   dl_serve_commit, "backend", d->nbe ? d->be[0]->ops->name : "none", NULL);
    if (d->reg)
        registry_metrics(d->reg, &b);
    if (d->bat)
        batcher_metrics(d->bat, &b);
    if (d->cache)
        cache_metrics(d->cache, &b);
    for (size_t i = 0; i < NCOMPONENTS; i++) {
        void *state = atomic_load(&d->state[i]);
        if (state && components[i]->metrics)
            components[i]->metrics(state, &b);
    }
    if (b.oom) {
        dl_sbuf_free(&b);
        return NULL;
    }
    return b.s;
}

static json_t *history_of(void *ctx)
{
    return history_json(((daemon_ctx *)ctx)->hs);
}

/* A snapshot for the status page's history, from what /status and
 * /metrics answer now. */
static void take_snapshot(daemon_ctx *d)
{
    json_t *status = json_pack("{s:o, s:o, s:o}", "models", registry_status(d->reg), "batcher",
                               batcher_status(d->bat), "counters", stats_json(d->st));
    json_t *extra = status_extra(d);
    json_t *kafka = json_object_get(extra, "kafka");
    if (status && kafka)
        json_object_set(status, "kafka", kafka);
    char *prom = stats_prometheus(d->st, NULL);
    if (status && prom)
        history_add(d->hs, history_snapshot(dl_time_now() - d->start, status, prom));
    free(prom);
    json_decref(extra);
    json_decref(status);
}

static void status_line(daemon_ctx *d)
{
    json_t *models = registry_status(d->reg);
    size_t i, ready = 0;
    json_t *m;
    json_array_foreach(models, i, m)
        ready += strcmp(json_string_value(json_object_get(m, "state")), "READY") == 0;
    notify("STATUS=%zu/%zu models ready, http port %d", ready, json_array_size(models),
           d->env.http_port);
    json_decref(models);
}

/* ---- SIGHUP --------------------------------------------------------------- */

/* Whether Kafka writes to Redis (its sink): redis delivery, or results. */
static bool kafka_uses_redis(const dl_serve_conf *c)
{
    return component_kafka_wanted(c) && component_redis_wanted(c) &&
           (c->kafka.delivery == DL_DELIVERY_REDIS || c->redis.results);
}

/* Whether a changed option applies live, from old to fresh: [log];
 * [trace] but its queue_size (the tracer's settings, as Triton's trace
 * extension changes them, and the exporter restarted on a new endpoint);
 * [models] policy, watch, poll_interval_s and control between watch and
 * poll (the main loop's); [kafka] (new clients) unless the cluster is the
 * embedded one, which a restart of the clients would lose; [redis] (new
 * links, and new Kafka clients where Kafka writes to Redis: not with the
 * embedded cluster). The others need a restart: listening sockets, thread
 * pools, loaded backends, the response cache. */
static bool live_option(const dl_opt *o, const dl_serve_conf *old, const dl_serve_conf *fresh)
{
    const char *s = o->section, *k = o->key;
    if (!strcmp(s, "log"))
        return true;
    if (!strcmp(s, "trace"))
        return strcmp(k, "queue_size") != 0;
    if (!strcmp(s, "models"))
        return !strcmp(k, "policy") || !strcmp(k, "watch") || !strcmp(k, "poll_interval_s") ||
               (!strcmp(k, "control") && old->models.control != DL_MODELS_CONTROL_EXPLICIT &&
                fresh->models.control != DL_MODELS_CONTROL_EXPLICIT);
    if (!strcmp(s, "kafka"))
        return !old->kafka.embedded && !fresh->kafka.embedded;
    if (!strcmp(s, "redis"))
        return !(old->kafka.embedded && kafka_uses_redis(old)) &&
               !(fresh->kafka.embedded && kafka_uses_redis(fresh));
    return false;
}

/* The value of an option for the log: secrets are not written. */
static void shown(const dl_opt *o, const dl_serve_conf *c, char *buf, size_t len)
{
    dl_conf_format(o, c, buf, len);
    if (dl_conf_secret_key(o->key))
        snprintf(buf, len, "%s", DL_CONF_REDACTED);
    else if (strlen(buf) > 120)
        snprintf(buf + 117, len - 117, "...");
}

/* The raw [kafka.*] property of c for p's client and key, or NULL. */
static const dl_kafka_prop *prop_find(const dl_kafka_conf *c, const dl_kafka_prop *p)
{
    for (int i = 0; i < c->nprops; i++)
        if (c->props[i].client == p->client && !strcmp(c->props[i].key, p->key))
            return &c->props[i];
    return NULL;
}

/* Logs each raw [kafka.*] property that differs (say: what becomes of it;
 * NULL: nothing logged); returns how many. Values are not logged: these
 * are where secrets go. */
static int props_changed(const dl_kafka_conf *old, const dl_kafka_conf *fresh, const char *say)
{
    int n = 0;
    for (int pass = 0; pass < 2; pass++) {
        const dl_kafka_conf *a = pass ? old : fresh, *b = pass ? fresh : old;
        for (int i = 0; i < a->nprops; i++) {
            const dl_kafka_prop *p = &a->props[i], *q = prop_find(b, p);
            if (q && (pass || !strcmp(p->value, q->value)))   /* a change counts once */
                continue;
            n++;
            if (say)
                DL_LOG(DL_LOG_NOTICE, "conf", "%s.%s %s%s", dl_kafka_client_section(p->client),
                       p->key, pass ? "removed" : q ? "changed" : "added", say);
        }
    }
    return n;
}

/* What a reload changed, by what applies it. */
typedef struct changes {
    bool log, tracer, exporter, policy, control, kafka, redis;
    int  restart;                /* options that apply at restart */
} changes;

/* Into next (a copy of the running configuration) the options of fresh
 * that apply live; ch says which changed. With log set, each change is
 * logged by name: applied, or at restart. */
static void diff(const dl_serve_conf *cur, const dl_serve_conf *fresh, dl_serve_conf *next,
                 changes *ch, bool log)
{
    memset(ch, 0, sizeof(*ch));
    for (const dl_opt *o = dl_serve_opts; o->key; o++) {
        char a[DL_CONF_VALUE_MAX], b[DL_CONF_VALUE_MAX];
        dl_conf_format(o, cur, a, sizeof(a));
        dl_conf_format(o, fresh, b, sizeof(b));
        if (!strcmp(a, b))
            continue;
        bool live = live_option(o, cur, fresh);
        if (log) {
            shown(o, cur, a, sizeof(a));
            shown(o, fresh, b, sizeof(b));
            DL_LOG(live ? DL_LOG_NOTICE : DL_LOG_WARNING, "conf", "%s.%s changed (%s -> %s): %s",
                   o->section, o->key, a, b, live ? "applied" : "applies at restart");
        }
        if (!live) {
            ch->restart++;
            continue;
        }
        dl_conf_copy(o, next, fresh);
        const char *s = o->section, *k = o->key;
        ch->log |= !strcmp(s, "log");
        ch->tracer |= !strcmp(s, "trace");
        ch->exporter |= !strcmp(s, "trace") && (!strcmp(k, "otlp_endpoint") ||
                                                !strcmp(k, "flush_ms"));
        ch->policy |= !strcmp(s, "models") && !strcmp(k, "policy");
        ch->control |= !strcmp(s, "models") && strcmp(k, "policy") != 0;
        ch->kafka |= !strcmp(s, "kafka");
        ch->redis |= !strcmp(s, "redis");
    }
    bool embedded = cur->kafka.embedded || fresh->kafka.embedded;
    int props = props_changed(&cur->kafka, &fresh->kafka,
                              !log ? NULL : embedded ? ": applies at restart" : ": applied");
    if (props && embedded) {
        ch->restart += props;
    } else if (props) {
        ch->kafka = true;
        next->kafka.nprops = fresh->kafka.nprops;
        memcpy(next->kafka.props, fresh->kafka.props,
               (size_t)fresh->kafka.nprops * sizeof(fresh->kafka.props[0]));
    }
}

/* The index of the component named name in the table (with or without
 * its library: both carry the name). */
static size_t component_named(const char *name)
{
    for (size_t i = 0; i < NCOMPONENTS; i++)
        if (!strcmp(components[i]->name, name))
            return i;
    DL_ASSERT(!"component not in the table");
    return 0;
}

/* The systemd watchdog, petted from a thread of its own while the main
 * loop waits for a component's restart: Kafka's stop may wait 30 s for
 * delivery reports and 5 s to leave the group, longer than WatchdogSec. */
typedef struct petter {
    pthread_t   thread;
    double      every_s;
    atomic_bool done;
} petter;

static void *pet_main(void *arg)
{
    petter *p = arg;
    const struct timespec tick = {.tv_nsec = 100 * 1000 * 1000};
    for (double last = 0.0; !atomic_load(&p->done); nanosleep(&tick, NULL))
        if (dl_time_now() - last > p->every_s) {
            notify("WATCHDOG=1");
            last = dl_time_now();
        }
    return NULL;
}

/* A component on the configuration as it is now: restarted when running,
 * started when newly wanted. */
static dl_status restart_component(daemon_ctx *d, size_t i, dl_err *err)
{
    const component *c = components[i];
    void *state = atomic_load(&d->state[i]);
    if (!state && !c->wanted(&d->conf))
        return DL_OK;
    if (!state && c->missing)
        return dl_err_set(err, DL_ERR_UNAVAILABLE, "%s", c->missing);
    petter p = {.every_s = watchdog_seconds() / 4};
    bool petting = p.every_s > 0 && pthread_create(&p.thread, NULL, pet_main, &p) == 0;
    dl_status st = DL_OK;
    if (state && c->restart) {
        st = c->restart(state, err);
    } else if (!state) {
        st = c->start(&d->env, &state, err);
        atomic_store(&d->state[i], state);
    }
    if (petting) {
        atomic_store(&p.done, true);
        pthread_join(p.thread, NULL);
    }
    return st;
}

/* Kafka on new clients; when they cannot start, on the running [kafka]
 * again (prev): a reload never leaves Kafka stopped if it ran. */
static void restart_kafka(daemon_ctx *d, const dl_kafka_conf *prev)
{
    size_t i = component_named("kafka");
    dl_err err = {0};
    if (restart_component(d, i, &err) == DL_OK)
        return;
    DL_LOG(DL_LOG_ERR, "conf", "Kafka did not start on the reloaded configuration: %s; "
           "going on with the running one", err.msg);
    memcpy(&d->conf.kafka, prev, sizeof(*prev));
    if (restart_component(d, i, &err) != DL_OK)
        DL_LOG(DL_LOG_ERR, "kafka", "stopped: %s", err.msg);
}

/* The configuration file again (with the --set overrides): each change
 * that can apply live is applied, each other one logged by name as
 * applying at restart. A bad file, or one whose live changes do not hold
 * together with what runs, keeps the running configuration. Returns true
 * when [models] control, watch or poll_interval_s changed (the main
 * loop's). */
static bool reload_conf(daemon_ctx *d)
{
    dl_serve_conf *fresh = malloc(sizeof(*fresh)), *next = malloc(sizeof(*next)),
                  *prev = malloc(sizeof(*prev));
    dl_err err = {0};
    dl_status st = fresh && next && prev ? DL_OK : dl_err_set(&err, DL_ERR_NOMEM, "reload");
    changes ch;
    if (st == DL_OK)
        st = dl_serve_conf_load(fresh, d->config_path, &err);
    if (st == DL_OK)
        st = dl_serve_conf_apply(fresh, d->overrides, d->noverrides, &err);
    if (st == DL_OK)
        st = dl_serve_conf_validate(fresh, &err);
    if (st == DL_OK) {
        memcpy(next, &d->conf, sizeof(*next));
        diff(&d->conf, fresh, next, &ch, false);
        /* what runs with what changes must hold together too */
        if ((st = dl_serve_conf_validate(next, &err)) != DL_OK)
            dl_err_prefix(&err, "with the settings that apply at restart kept");
    }
#ifdef DL_HAVE_KAFKA
    if (st == DL_OK && ch.kafka && component_kafka_wanted(next))
        st = dl_serve_conf_check_kafka(next, &err);
#endif
    if (st == DL_OK && ch.log)
        st = dl_log_set(next->log.level, next->log.debug, &err);
    if (st != DL_OK) {
        DL_LOG(DL_LOG_ERR, "conf", "reload refused, keeping the running configuration: %s",
               err.msg);
        free(fresh), free(next), free(prev);
        return false;
    }
    diff(&d->conf, fresh, next, &ch, true);
    memcpy(prev, &d->conf, sizeof(*prev));
    memcpy(&d->conf, next, sizeof(*next));
    if (ch.log)
        dl_log_set_format(d->conf.log.format);
    if (ch.tracer)
        tracer_configure(d->tr, &d->conf.trace);
    if (ch.exporter && restart_component(d, component_named("trace"), &err) != DL_OK)
        DL_LOG(DL_LOG_ERR, "trace", "span export stopped: %s", err.msg);
    if (ch.policy)
        registry_set_policy(d->reg, d->conf.models.policy);
    if (ch.redis) {
        if (restart_component(d, component_named("redis"), &err) != DL_OK)
            DL_LOG(DL_LOG_ERR, "redis", "stopped: %s", err.msg);
        ch.kafka |= kafka_uses_redis(prev) || kafka_uses_redis(&d->conf);   /* its sink */
    }
    if (ch.kafka)
        restart_kafka(d, &prev->kafka);
    if (ch.restart)
        DL_LOG(DL_LOG_WARNING, "conf", "%d changed setting%s appl%s at restart", ch.restart,
               ch.restart == 1 ? "" : "s", ch.restart == 1 ? "ies" : "y");
    free(fresh), free(next), free(prev);
    return ch.control;
}

/* SIGHUP: the configuration file again (what can change live), then the
 * models, unless control = explicit (Triton's: only the repository API
 * loads); the rescan applies a new version policy. */
static bool reload(daemon_ctx *d)
{
    notify("RELOADING=1");
    d->reloads++;
    bool control = d->config_path && reload_conf(d);
    if (d->conf.models.control != DL_MODELS_CONTROL_EXPLICIT)
        registry_rescan(d->reg);
    notify("READY=1");
    status_line(d);
    DL_LOG(DL_LOG_NOTICE, "daemon", "reloaded");
    return control;
}

/* What reloads models, in the log at start. */
static void log_control(const dl_models_conf *mc, bool watching)
{
    if (mc->control == DL_MODELS_CONTROL_POLL)
        DL_LOG(DL_LOG_NOTICE, "models", "control = poll: rescanning %s every %lld s", mc->dir,
               (long long)mc->poll_interval_s);
    else if (mc->control == DL_MODELS_CONTROL_EXPLICIT)
        DL_LOG(DL_LOG_NOTICE, "models", "control = explicit: models load and unload through "
               "the repository API only");
    else if (watching)
        DL_LOG(DL_LOG_INFO, "models", "control = watch: reloading on changes in %s", mc->dir);
    else
        DL_LOG(DL_LOG_NOTICE, "models", "control = watch, watch = false: reloading on SIGHUP "
               "and through the repository API only");
}

/* What [models] control asks of the main loop: an inotify descriptor
 * (watch), or a rescan time (poll). */
typedef struct control {
    int    fd;          /* -1: none */
    bool   polling;
    double next_poll;
} control;

/* The main loop's part of [models] control, at start and after a reload
 * changed it. */
static void control_setup(daemon_ctx *d, control *c)
{
    const dl_models_conf *mc = &d->conf.models;
    if (c->fd >= 0)
        close(c->fd);
    c->polling = mc->control == DL_MODELS_CONTROL_POLL;
    c->fd = mc->control == DL_MODELS_CONTROL_WATCH && mc->watch
            ? inotify_init1(IN_NONBLOCK | IN_CLOEXEC) : -1;
    if (c->fd >= 0)
        watch_tree(c->fd, mc->dir, 2);
    log_control(mc, c->fd >= 0);
    c->next_poll = dl_time_now() + (double)mc->poll_interval_s;
}

static void main_loop(daemon_ctx *d)
{
    const dl_models_conf *mc = &d->conf.models;
    control ctl = {.fd = -1};
    control_setup(d, &ctl);
    double wd = watchdog_seconds(), last_pet = 0.0, changed = 0.0, next_snapshot = 0.0;
    bool dirty = false;
    while (!stop_flag) {
        if (dl_time_now() >= next_snapshot) {
            take_snapshot(d);
            next_snapshot = dl_time_now() + HISTORY_INTERVAL_S;
        }
        int timeout = dirty ? 50 : wd > 0 ? (int)(wd * 250) : 1000;
        int until_snapshot = (int)((next_snapshot - dl_time_now()) * 1000) + 1;
        if (until_snapshot < timeout)
            timeout = until_snapshot;
        int until_poll = (int)((ctl.next_poll - dl_time_now()) * 1000) + 1;
        if (ctl.polling && until_poll < timeout)
            timeout = until_poll;
        struct pollfd p[2] = { { .fd = ctl.fd, .events = POLLIN },
                               { .fd = d->wake[0], .events = POLLIN } };
        char buf[16384];
        if (poll(p, 2, timeout > 0 ? timeout : 1) > 0) {
            if (p[0].revents) {
                while (read(ctl.fd, buf, sizeof(buf)) > 0)
                    ;
                dirty = true;
                changed = dl_time_now();
            }
            if (p[1].revents) {   /* an announced version: load it now */
                while (read(d->wake[0], buf, sizeof(buf)) > 0)
                    ;
                if (mc->control == DL_MODELS_CONTROL_EXPLICIT)
                    DL_LOG(DL_LOG_NOTICE, "models", "announced version not loaded: with "
                           "control = explicit, POST /v2/repository/models/{m}/load loads it");
                else if (registry_rescan(d->reg) > 0)
                    status_line(d);
            }
        }
        if (reload_flag) {
            reload_flag = 0;
            if (reload(d)) {
                control_setup(d, &ctl);
                dirty = false;
            }
        }
        if (ctl.polling && dl_time_now() >= ctl.next_poll) {
            int changes = registry_rescan(d->reg);
            if (changes > 0) {
                DL_LOG(DL_LOG_NOTICE, "models", "poll: %d changes in %s", changes, mc->dir);
                status_line(d);
            }
            ctl.next_poll = dl_time_now() + (double)mc->poll_interval_s;
        }
        if (dirty && ctl.fd >= 0 && dl_time_now() - changed > DEBOUNCE_S) {
            dirty = false;
            watch_tree(ctl.fd, d->conf.models.dir, 2);
            if (registry_rescan(d->reg) > 0)
                status_line(d);
        }
        if (wd > 0 && dl_time_now() - last_pet > wd / 4) {
            notify("WATCHDOG=1");
            last_pet = dl_time_now();
        }
    }
    if (ctl.fd >= 0)
        close(ctl.fd);
}

/* Under systemd: it names the service's invocation. */
static bool under_systemd(void)
{
    const char *id = getenv("INVOCATION_ID");
    return id && id[0];
}

/* After SIGTERM, http.shutdown_grace_s with /v2/health/ready at 503
 * (is_ready sees stop_flag) while every request is still served: a load
 * balancer or Kubernetes notices and stops sending before the drain
 * refuses anything. SIGINT (Ctrl-C) and a second SIGTERM skip it. */
static void grace(const daemon_ctx *d)
{
    int64_t s = d->conf.http.shutdown_grace_s;
    if (s < 0)
        s = under_systemd() ? DEFAULT_GRACE_S : 0;
    if (s == 0 || stop_signal != SIGTERM)
        return;
    DL_LOG(DL_LOG_NOTICE, "daemon", "not ready: serving for %lld s before stopping",
           (long long)s);
    double until = dl_time_now() + (double)s;
    const struct timespec tick = {.tv_nsec = 50 * 1000 * 1000};
    while (stop_flag < 2 && dl_time_now() < until)
        nanosleep(&tick, NULL);
}

static void install_signals(void)
{
    struct sigaction sa;
    memset(&sa, 0, sizeof(sa));
    sigemptyset(&sa.sa_mask);
    sa.sa_handler = on_stop;
    sigaction(SIGTERM, &sa, NULL);
    sigaction(SIGINT, &sa, NULL);
    sa.sa_handler = on_reload;
    sigaction(SIGHUP, &sa, NULL);
    sa.sa_handler = SIG_IGN;
    sigaction(SIGPIPE, &sa, NULL);
}

static dl_status start(daemon_ctx *d, dl_err *err)
{
    /* The connection threads share the cores: idle workers must sleep. */
    dl_pool_set_spin(0);
    /* Models come and go: any may have convolutions. A backend an
     * instance, each with its share of the cores unless models.threads
     * says how many. One instance leaves a core to the request path
     * (HTTP, Kafka), which on a machine of few cores would otherwise
     * stall a batch's helper threads: on two cores, one inference thread
     * served 10% more binary HTTP requests and 8-17% more Kafka records
     * than two (docs/benchmarks.md, "HTTP serving"). models.instances = 0
     * (the default) starts two on a CPU of two cores or more, and the
     * registry runs on both only the models whose samples compute long
     * (REGISTRY_AUTO_SAMPLE_US), on one the others: a long computation
     * leaves the request path's core idle while it computes (fashion-cnn
     * on two cores: 0.65x its batch-256 rate with two instances against
     * 0.50x with one; fashion-mlp 4-9% short of one instance's rate with
     * two at 32 connections; docs/benchmarks.md, "HTTP serving"). */
    long cores = sysconf(_SC_NPROCESSORS_ONLN);
    int instances = (int)d->conf.models.instances;
    if (instances > 1 && d->conf.models.device.kind != DL_DEVICE_CPU)
        return dl_err_set(err, DL_ERR_INVALID, "models.instances = %d: instances are for the "
                          "CPU; %s runs one", instances, d->conf.models.device.name);
    if (instances == 0)
        instances = d->conf.models.device.kind == DL_DEVICE_CPU && cores >= 2 ? 2 : 1;
    int threads = d->conf.models.threads > 0 ? (int)d->conf.models.threads
                  : instances > 1 ? (int)(cores > instances ? cores / instances : 1)
                  : (int)(cores > 1 ? cores - 1 : 1);
    dl_backend_params bp = { .threads = threads, .keep_pool = true, .engine_layers = true };
    dl_status st = DL_OK;
    for (int i = 0; st == DL_OK && i < instances; i++)
        if ((st = dl_backend_new(d->conf.models.device.name, &bp, &d->be[i], err)) == DL_OK)
            d->nbe++;
    if (st == DL_OK)
        st = stats_new(&d->st, err);
    if (st == DL_OK)
        st = registry_new(&d->conf.models, d->conf.batching.batch_invariant, &d->conf.generate,
                          d->st, d->be, d->nbe, &d->reg, err);
    if (st == DL_OK && d->conf.cache.bytes > 0) {
        st = cache_new((size_t)d->conf.cache.bytes, &d->cache, err);
        if (st == DL_OK)
            registry_on_retire(d->reg, retired, d->cache);
    }
    if (st == DL_OK)
        st = batcher_new(&d->conf.batching, instances, d->reg, d->st, &d->bat, err);
    if (st == DL_OK)
        st = tracer_new(&d->conf.trace, &d->tr, err);
    if (st == DL_OK)
        st = history_new(&d->hs, err);
    if (st != DL_OK)
        return st;
    d->env.conf = &d->conf;
    d->env.reg = d->reg;
    d->env.bat = d->bat;
    d->env.cache = d->cache;
    d->env.st = d->st;
    d->env.tracer = d->tr;
    d->env.history = history_of;
    d->env.rescan_fd = d->wake[1];
    d->env.start_time = d->start;
    d->env.ready = is_ready;
    d->env.status_extra = status_extra;
    d->env.metrics_extra = metrics_extra;
    d->env.ctx = d;
    for (size_t i = 0; st == DL_OK && i < NCOMPONENTS; i++) {
        const component *c = components[i];
        if (!c->wanted(&d->conf))
            continue;
        if (c->missing)
            return dl_err_set(err, DL_ERR_UNAVAILABLE, "%s", c->missing);
        void *state = NULL;
        st = c->start(&d->env, &state, err);
        atomic_store(&d->state[i], state);
    }
    return st;
}

static void stop(daemon_ctx *d)
{
    /* Kafka's records in flight finish and are committed, then the Redis
     * watcher stops; HTTP threads may still ask for their status and
     * metrics meanwhile. */
    for (size_t i = NCOMPONENTS; i-- > 0;) {
        void *state = atomic_load(&d->state[i]);
        if (state && components[i]->stop)
            components[i]->stop(state);
    }
    batcher_drain(d->bat);   /* intake stops; every queued request is answered */
    /* then HTTP's connections finish and close */
    for (size_t i = NCOMPONENTS; i-- > 0;) {
        void *state = atomic_load(&d->state[i]);
        if (state && components[i]->finish)
            components[i]->finish(state);
    }
    batcher_free(d->bat);
    registry_free(d->reg);
    cache_free(d->cache);   /* after the registry: its last versions retire into it */
    stats_free(d->st);
    for (int i = 0; i < d->nbe; i++)
        dl_backend_free(d->be[i]);
    /* Nothing reads the components any more: Redis's status link goes last. */
    for (size_t i = NCOMPONENTS; i-- > 0;) {
        void *state = atomic_exchange(&d->state[i], NULL);
        if (state)
            components[i]->free(state);
    }
    tracer_free(d->tr);
    history_free(d->hs);
    pthread_mutex_destroy(&d->env.mu);
    close(d->wake[0]);
    close(d->wake[1]);
}

int dl_serve_main(const char *config_path, const char *const *overrides, int noverrides)
{
    static daemon_ctx d;
    memset(&d, 0, sizeof(d));
    d.config_path = config_path;
    d.overrides = overrides;
    d.noverrides = noverrides;
    d.start = dl_time_now();
    dl_err err = {0};
    dl_status st = dl_serve_conf_load(&d.conf, config_path, &err);
    if (st == DL_OK)
        st = dl_serve_conf_apply(&d.conf, overrides, noverrides, &err);
    if (st == DL_OK)
        st = dl_serve_conf_validate(&d.conf, &err);
    if (st == DL_OK)
        st = dl_log_set(d.conf.log.level, d.conf.log.debug, &err);
    if (st == DL_OK)
        dl_log_set_format(d.conf.log.format);
    if (st != DL_OK) {
        fprintf(stderr, "dlserve: %s\n", err.msg);
        return 2;
    }
    install_signals();
    if (pipe2(d.wake, O_NONBLOCK | O_CLOEXEC) != 0) {
        perror("dlserve: pipe");
        return 1;
    }
    pthread_mutex_init(&d.env.mu, NULL);
    if ((st = start(&d, &err)) != DL_OK) {
        DL_LOG(DL_LOG_ERR, "daemon", "%s", err.msg);
        stop(&d);
        return 1;
    }
    notify("READY=1");
    status_line(&d);
    main_loop(&d);
    notify("STOPPING=1");
    grace(&d);
    DL_LOG(DL_LOG_NOTICE, "daemon", "stopping: answering queued requests");
    stop(&d);
    DL_LOG(DL_LOG_NOTICE, "daemon", "stopped");
    return 0;
}
