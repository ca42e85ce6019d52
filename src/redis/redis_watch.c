/* redis_watch.c: the registry watcher: a thread with its own connection
 * SUBSCRIBEd to dlserve:models that hands each valid announcement to the
 * daemon and, after a reconnection, asks it to look at the repository
 * again (announcements made meanwhile are lost). */
#define _POSIX_C_SOURCE 200809L
#include "redis/link.h"
#include "nn/dl_nn.h"

#include <errno.h>
#include <fcntl.h>
#include <poll.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#define WATCH_TIMEOUT_MS    400     /* connect/command cap: a prompt stop */
#define WATCH_POLL_MS       500     /* read wait between stop checks */

struct dl_redis_watch {
    dl_redis_conf     conf;
    int               timeout_ms;
    dl_redis_announce_fn on_announce;
    bool              subscribed_before;   /* a later SUBSCRIBE is a reconnection */
    void             *ctx;
    redisContext     *rc;         /* watcher thread only; NULL while down */
    redis_backoff     bo;         /* watcher thread only */
    redis_health      h;
    atomic_bool       stop;
    int               wake[2];    /* a byte on wake[1] interrupts waits */
    pthread_t         thread;
};

/* Subscribes on a fresh connection; on failure marks the outage. */
static void watch_connect(dl_redis_watch *w)
{
    char why[200];
    w->rc = redis_open(&w->conf, w->timeout_ms, false, why, sizeof(why));
    if (!w->rc) {
        redis_mark_down(&w->h, &w->bo, why);
        return;
    }
    const char *argv[] = {"SUBSCRIBE", REDIS_CHANNEL};
    redisReply *r = redisCommandArgv(w->rc, 2, argv, NULL);
    bool ok = r && r->type == REDIS_REPLY_ARRAY && r->elements == 3 &&
              r->element[0]->type == REDIS_REPLY_STRING &&
              strcmp(r->element[0]->str, "subscribe") == 0;
    if (!r)
        redis_io_reason(w->rc, "SUBSCRIBE", w->timeout_ms, why, sizeof(why));
    else if (!ok)
        snprintf(why, sizeof(why), "SUBSCRIBE: %s",
                 r->type == REDIS_REPLY_ERROR ? r->str : "unexpected reply");
    if (r)
        freeReplyObject(r);
    if (!ok) {
        redisFree(w->rc);
        w->rc = NULL;
        redis_mark_down(&w->h, &w->bo, why);
        return;
    }
    redis_mark_up(&w->h, &w->bo);
    DL_LOG(DL_LOG_DEBUG, "redis", "%s: subscribed to %s", w->h.role, REDIS_CHANNEL);
    /* Announcements made while we were away are lost: the caller looks
     * at the repository again instead. */
    if (w->subscribed_before)
        w->on_announce(w->ctx, NULL, 0);
    w->subscribed_before = true;
}

static void watch_lost(dl_redis_watch *w, const char *why)
{
    redisFree(w->rc);
    w->rc = NULL;
    redis_mark_down(&w->h, &w->bo, why);
}

/* Parses one announcement; false with *why when it is not valid. */
static bool parse_announce(const char *text, size_t len, char model[DL_NAME_MAX],
                           int64_t *version, char *why, size_t n)
{
    json_error_t jerr;
    json_t *j = json_loadb(text, len, 0, &jerr);
    if (!j) {
        snprintf(why, n, "not JSON: %s", jerr.text);
        return false;
    }
    json_t *m = json_object_get(j, "model"), *v = json_object_get(j, "version");
    bool ok = false;
    if (!json_is_object(j))
        snprintf(why, n, "not a JSON object");
    else if (!json_is_string(m) || !dl_model_name_valid(json_string_value(m), json_string_length(m)))
        snprintf(why, n, "\"model\" is not a valid model name");
    else if (!json_is_integer(v) || json_integer_value(v) < 1)
        snprintf(why, n, "\"version\" is not an integer >= 1");
    else
        ok = true;
    if (ok) {
        snprintf(model, DL_NAME_MAX, "%s", json_string_value(m));
        *version = json_integer_value(v);
    }
    json_decref(j);
    return ok;
}

/* One pushed reply: ["message", channel, payload] or a subscription
 * confirmation. */
static void watch_handle(dl_redis_watch *w, redisReply *r)
{
    if (r->type != REDIS_REPLY_ARRAY || r->elements != 3 ||
        r->element[0]->type != REDIS_REPLY_STRING) {
        DL_LOG(DL_LOG_DEBUG, "redis", "%s: unexpected push (type %d) ignored", w->h.role, r->type);
        return;
    }
    if (strcmp(r->element[0]->str, "message") != 0 || r->element[2]->type != REDIS_REPLY_STRING)
        return;                         /* (un)subscribe confirmations */
    redisReply *p = r->element[2];
    char model[DL_NAME_MAX], why[200];
    int64_t version;
    if (!parse_announce(p->str, p->len, model, &version, why, sizeof(why))) {
        /* the start of the message, printable, on one log line */
        char text[121];
        size_t n = p->len < sizeof(text) - 1 ? p->len : sizeof(text) - 1;
        for (size_t i = 0; i < n; i++)
            text[i] = p->str[i] >= 0x20 && p->str[i] < 0x7f ? p->str[i] : '?';
        text[n] = '\0';
        DL_LOG(DL_LOG_WARNING, "redis", "%s: ignoring a message on %s: %s: %s%s", w->h.role,
               REDIS_CHANNEL, why, text, p->len > n ? "..." : "");
        return;
    }
    DL_LOG(DL_LOG_INFO, "redis", "%s: %s version %lld announced", w->h.role, model,
           (long long)version);
    w->on_announce(w->ctx, model, version);
}

/* Handles the replies hiredis has buffered, else waits up to
 * WATCH_POLL_MS for data or a stop request. */
static void watch_read(dl_redis_watch *w)
{
    redisReply *r = NULL;
    if (redisGetReplyFromReader(w->rc, (void **)&r) != REDIS_OK) {
        char why[200];
        snprintf(why, sizeof(why), "protocol error: %s", w->rc->errstr);
        watch_lost(w, why);
        return;
    }
    if (r) {
        watch_handle(w, r);
        freeReplyObject(r);
        return;
    }
    /* Silence while subscribed is normal: the timeout only lets us see a
     * stop request. */
    struct pollfd pfd[2] = {{.fd = w->rc->fd, .events = POLLIN},
                            {.fd = w->wake[0], .events = POLLIN}};
    int n = poll(pfd, 2, WATCH_POLL_MS);
    if (n <= 0 || pfd[1].revents)
        return;                         /* timeout, EINTR or stop */
    if (redisBufferRead(w->rc) != REDIS_OK) {
        char why[200];
        redis_io_reason(w->rc, "reading", w->timeout_ms, why, sizeof(why));
        watch_lost(w, why);
    }
}

/* Sleeps up to ms, or less when a stop is requested. */
static void watch_sleep(dl_redis_watch *w, int ms)
{
    struct pollfd pfd = {.fd = w->wake[0], .events = POLLIN};
    poll(&pfd, 1, ms);
}

static void *watch_main(void *arg)
{
    dl_redis_watch *w = arg;
    /* This thread's writes must not raise SIGPIPE (see redis_nopipe): blocked
     * for its whole life, a pending one dies with the thread. */
    sigset_t set;
    sigemptyset(&set);
    sigaddset(&set, SIGPIPE);
    pthread_sigmask(SIG_BLOCK, &set, NULL);
    while (!atomic_load(&w->stop)) {
        if (w->rc) {
            watch_read(w);
            continue;
        }
        double wait = w->bo.next_try - dl_time_now();
        if (wait > 0)
            watch_sleep(w, (int)(wait * 1e3) + 1);
        else
            watch_connect(w);
    }
    if (w->rc) {
        redisFree(w->rc);
        w->rc = NULL;
    }
    return NULL;
}

dl_status dl_redis_watch_start(const dl_redis_conf *c, dl_redis_announce_fn on_announce,
                               void *ctx, dl_redis_watch **out, dl_err *err)
{
    *out = NULL;
    if (!c->host[0] || !on_announce)
        return dl_err_set(err, DL_ERR_INVALID, "redis watcher: %s",
                          !c->host[0] ? "no host configured" : "no callback");
    dl_redis_watch *w = calloc(1, sizeof(*w));
    if (!w)
        return dl_err_set(err, DL_ERR_NOMEM, "redis watcher");
    w->conf = *c;
    w->timeout_ms = redis_timeout(c) < WATCH_TIMEOUT_MS ? redis_timeout(c) : WATCH_TIMEOUT_MS;
    w->on_announce = on_announce;
    w->ctx = ctx;
    atomic_init(&w->stop, false);
    redis_health_init(&w->h, c, "registry");
    if (pipe(w->wake) != 0) {
        dl_status st = dl_err_set(err, DL_ERR_IO, "redis watcher: pipe: %s", strerror(errno));
        pthread_mutex_destroy(&w->h.mu);
        free(w);
        return st;
    }
    fcntl(w->wake[0], F_SETFD, FD_CLOEXEC);
    fcntl(w->wake[1], F_SETFD, FD_CLOEXEC);
    int rc = pthread_create(&w->thread, NULL, watch_main, w);
    if (rc != 0) {
        close(w->wake[0]);
        close(w->wake[1]);
        pthread_mutex_destroy(&w->h.mu);
        free(w);
        return dl_err_set(err, DL_ERR_IO, "redis watcher: thread: %s", strerror(rc));
    }
    *out = w;
    return DL_OK;
}

void dl_redis_watch_stop(dl_redis_watch *w)
{
    if (!w)
        return;
    atomic_store(&w->stop, true);
    char byte = 1;
    if (write(w->wake[1], &byte, 1) < 0)
        DL_LOG(DL_LOG_DEBUG, "redis", "watcher wake-up: %s", strerror(errno));
    pthread_join(w->thread, NULL);
    close(w->wake[0]);
    close(w->wake[1]);
    pthread_mutex_destroy(&w->h.mu);
    free(w);
}
redis_health *redis_watch_health(dl_redis_watch *w)
{
    return &w->h;
}
