/* redis_link.c: connections to Redis (timeouts, AUTH, SELECT, SIGPIPE
 * kept away), their health and reconnect backoff, and links: a connection
 * that reconnects lazily, one command or one MULTI/EXEC at a time. */
#define _POSIX_C_SOURCE 200809L    /* sigtimedwait */
#include "redis/link.h"

#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#define BACKOFF_MIN_S       0.1
#define BACKOFF_MAX_S       5.0
#define DEFAULT_TIMEOUT_MS  1000    /* when timeout_ms <= 0: never wait forever */

/* ---- SIGPIPE: see link.h --------------------------------------------------- */

void redis_nopipe_begin(redis_nopipe *np)
{
    sigset_t set;
    sigemptyset(&set);
    sigaddset(&set, SIGPIPE);
    pthread_sigmask(SIG_BLOCK, &set, &np->old);
}

void redis_nopipe_end(redis_nopipe *np)
{
    if (sigismember(&np->old, SIGPIPE))
        return;                 /* was blocked before us: not ours to drain */
    sigset_t set, pending;
    sigemptyset(&set);
    sigaddset(&set, SIGPIPE);
    sigpending(&pending);
    if (sigismember(&pending, SIGPIPE)) {
        struct timespec zero = {0, 0};
        sigtimedwait(&set, NULL, &zero);
    }
    pthread_sigmask(SIG_SETMASK, &np->old, NULL);
}

/* ---- health and backoff -------------------------------------------------- */

void redis_addr(const dl_redis_conf *c, char *buf, size_t n)
{
    if (c->host[0] == '/')
        snprintf(buf, n, "%s", c->host);
    else if (strchr(c->host, ':'))          /* IPv6 literal */
        snprintf(buf, n, "[%s]:%lld", c->host, (long long)c->port);
    else
        snprintf(buf, n, "%s:%lld", c->host, (long long)c->port);
}

void redis_health_init(redis_health *h, const dl_redis_conf *c, const char *role)
{
    memset(h, 0, sizeof(*h));
    pthread_mutex_init(&h->mu, NULL);
    snprintf(h->role, sizeof(h->role), "%s", role);
    redis_addr(c, h->addr, sizeof(h->addr));
}

void redis_mark_up(redis_health *h, redis_backoff *bo)
{
    pthread_mutex_lock(&h->mu);
    h->connected = true;
    h->connects++;
    bool first = h->connects == 1;
    pthread_mutex_unlock(&h->mu);
    if (bo->down_logged)
        DL_LOG(DL_LOG_NOTICE, "redis", "%s: connected to %s%s", h->role, h->addr,
               first ? "" : " again");
    else if (first)
        DL_LOG(DL_LOG_INFO, "redis", "%s: connected to %s", h->role, h->addr);
    bo->delay = 0;
    bo->next_try = 0;
    bo->down_logged = false;
}

void redis_mark_down(redis_health *h, redis_backoff *bo, const char *why)
{
    pthread_mutex_lock(&h->mu);
    h->connected = false;
    h->errors++;
    snprintf(h->last_error, sizeof(h->last_error), "%s", why);
    pthread_mutex_unlock(&h->mu);
    bo->delay = bo->delay > 0 ? bo->delay * 2 : BACKOFF_MIN_S;
    if (bo->delay > BACKOFF_MAX_S)
        bo->delay = BACKOFF_MAX_S;
    bo->next_try = dl_time_now() + bo->delay;
    if (!bo->down_logged)
        DL_LOG(DL_LOG_WARNING, "redis", "%s: %s: %s (retrying with backoff up to %.0f s)",
               h->role, h->addr, why, BACKOFF_MAX_S);
    else
        DL_LOG(DL_LOG_DEBUG, "redis", "%s: %s: %s (next try in %.1f s)", h->role, h->addr,
               why, bo->delay);
    bo->down_logged = true;
}

void redis_mark_refused(redis_health *h, const char *why)
{
    pthread_mutex_lock(&h->mu);
    bool same = strncmp(h->last_error, why, sizeof(h->last_error) - 1) == 0;
    h->errors++;
    snprintf(h->last_error, sizeof(h->last_error), "%s", why);
    pthread_mutex_unlock(&h->mu);
    if (!same)
        DL_LOG(DL_LOG_WARNING, "redis", "%s: %s: %s", h->role, h->addr, why);
}

/* ---- connections ------------------------------------------------------- */

int redis_timeout(const dl_redis_conf *c)
{
    if (c->timeout_ms <= 0)
        return DEFAULT_TIMEOUT_MS;
    return c->timeout_ms > INT_MAX ? INT_MAX : (int)c->timeout_ms;
}

void redis_io_reason(redisContext *ctx, const char *cmd, int timeout_ms, char *why, size_t n)
{
    if (ctx->err == REDIS_ERR_IO && strstr(ctx->errstr, "temporarily unavailable"))
        snprintf(why, n, "%s: no answer within %d ms", cmd, timeout_ms);
    else if (ctx->err == REDIS_ERR_EOF)
        snprintf(why, n, "%s: connection closed by the server", cmd);
    else
        snprintf(why, n, "%s: %s", cmd, ctx->errstr[0] ? ctx->errstr : "I/O error");
}

/* Runs a command that must answer +OK (AUTH, SELECT); false with *why. */
static bool expect_ok(redisContext *ctx, int argc, const char **argv, int timeout_ms,
                      char *why, size_t n)
{
    redisReply *r = redisCommandArgv(ctx, argc, argv, NULL);
    if (!r) {
        redis_io_reason(ctx, argv[0], timeout_ms, why, n);
        return false;
    }
    bool ok = r->type == REDIS_REPLY_STATUS && strcmp(r->str, "OK") == 0;
    if (!ok)
        snprintf(why, n, "%s: %s", argv[0],
                 r->type == REDIS_REPLY_ERROR ? r->str : "unexpected reply");
    freeReplyObject(r);
    return ok;
}

redisContext *redis_open(const dl_redis_conf *c, int timeout_ms, bool select_db, char *why,
                         size_t n)
{
    struct timeval tv = {timeout_ms / 1000, (timeout_ms % 1000) * 1000};
    redisContext *ctx = c->host[0] == '/'
        ? redisConnectUnixWithTimeout(c->host, tv)
        : redisConnectWithTimeout(c->host, (int)c->port, tv);
    if (!ctx) {
        snprintf(why, n, "connect: out of memory");
        return NULL;
    }
    if (ctx->err) {
        if (strstr(ctx->errstr, "in progress") || strstr(ctx->errstr, "timed out"))
            snprintf(why, n, "connect: no answer within %d ms", timeout_ms);
        else
            snprintf(why, n, "connect: %s", ctx->errstr);
        goto fail;
    }
    if (redisSetTimeout(ctx, tv) != REDIS_OK) {
        snprintf(why, n, "setting the timeout: %s", ctx->errstr);
        goto fail;
    }
    /* A peer that vanishes without closing is noticed by keepalive. */
    if (c->host[0] != '/' && redisEnableKeepAlive(ctx) != REDIS_OK) {
        snprintf(why, n, "keepalive: %s", ctx->errstr);
        goto fail;
    }
    if (c->password[0]) {
        const char *argv[] = {"AUTH", c->password};
        if (!expect_ok(ctx, 2, argv, timeout_ms, why, n))
            goto fail;
    }
    if (select_db && c->db != 0) {
        char db[24];
        snprintf(db, sizeof(db), "%lld", (long long)c->db);
        const char *argv[] = {"SELECT", db};
        if (!expect_ok(ctx, 2, argv, timeout_ms, why, n))
            goto fail;
    }
    return ctx;
fail:
    redisFree(ctx);
    return NULL;
}

/* ---- links ---------------------------------------------------------------- */

dl_status dl_redis_link_new(const dl_redis_conf *c, const char *role, dl_redis_link **out,
                            dl_err *err)
{
    *out = NULL;
    if (!c->host[0])
        return dl_err_set(err, DL_ERR_INVALID, "redis: no host configured");
    if (c->host[0] != '/' && (c->port < 1 || c->port > 65535))
        return dl_err_set(err, DL_ERR_INVALID, "redis: port %lld not in [1, 65535]",
                          (long long)c->port);
    dl_redis_link *l = calloc(1, sizeof(*l));
    if (!l)
        return dl_err_set(err, DL_ERR_NOMEM, "redis link");
    l->conf = *c;
    l->timeout_ms = redis_timeout(c);
    redis_health_init(&l->h, c, role && role[0] ? role : "redis");
    *out = l;
    return DL_OK;
}

void dl_redis_link_free(dl_redis_link *l)
{
    if (!l)
        return;
    if (l->ctx)
        redisFree(l->ctx);
    pthread_mutex_destroy(&l->h.mu);
    free(l);
}

dl_status redis_link_lost(dl_redis_link *l, const char *why, dl_err *err)
{
    if (l->ctx) {
        redisFree(l->ctx);
        l->ctx = NULL;
    }
    redis_mark_down(&l->h, &l->bo, why);
    return dl_err_set(err, DL_ERR_IO, "redis %s: %s", l->h.addr, why);
}

dl_status redis_link_ready(dl_redis_link *l, dl_err *err)
{
    if (l->ctx)
        return DL_OK;
    double wait = l->bo.next_try - dl_time_now();
    if (wait > 0)
        return dl_err_set(err, DL_ERR_IO, "redis %s down (%s); next try in %.0f ms",
                          l->h.addr, l->h.last_error, wait * 1e3);
    char why[200];
    l->ctx = redis_open(&l->conf, l->timeout_ms, true, why, sizeof(why));
    if (!l->ctx)
        return redis_link_lost(l, why, err);
    redis_mark_up(&l->h, &l->bo);
    return DL_OK;
}

/* Error replies that mean this server cannot serve us for now (loading
 * its dataset, a replica after failover, lost authentication): treated
 * like a lost connection, so the link reconnects after the backoff. */
static bool refusal_is_outage(const char *msg)
{
    static const char *const codes[] = {"LOADING", "READONLY", "MASTERDOWN", "NOAUTH",
                                        "BUSY"};
    /* the error code starts the message, or follows our "what: " prefixes */
    for (const char *p = msg; p; p = strstr(p, ": ")) {
        p += p == msg ? 0 : 2;
        for (size_t i = 0; i < sizeof(codes) / sizeof(codes[0]); i++)
            if (strncmp(p, codes[i], strlen(codes[i])) == 0)
                return true;
    }
    return false;
}

dl_status redis_link_refused(dl_redis_link *l, const char *cmd, const char *msg, dl_err *err)
{
    char why[200];
    snprintf(why, sizeof(why), "%s: %s", cmd, msg);
    if (refusal_is_outage(msg))
        return redis_link_lost(l, why, err);
    redis_mark_refused(&l->h, why);
    return dl_err_set(err, DL_ERR_IO, "redis %s: %s", l->h.addr, why);
}

dl_status redis_link_cmd(dl_redis_link *l, int argc, const char **argv, const size_t *lens,
                         redisReply **out, dl_err *err)
{
    *out = NULL;
    dl_status st = redis_link_ready(l, err);
    if (st != DL_OK)
        return st;
    redisReply *r = redisCommandArgv(l->ctx, argc, argv, lens);
    if (!r) {
        char why[200];
        redis_io_reason(l->ctx, argv[0], l->timeout_ms, why, sizeof(why));
        return redis_link_lost(l, why, err);
    }
    if (r->type == REDIS_REPLY_ERROR) {
        st = redis_link_refused(l, argv[0], r->str, err);
        freeReplyObject(r);
        return st;
    }
    *out = r;
    return DL_OK;
}

bool redis_read_multi(redisContext *ctx, int n, int timeout_ms, redisReply **exec, bool *io,
                      char *why, size_t whyn)
{
    *exec = NULL;
    *io = false;
    why[0] = '\0';
    for (int i = 0; i < n + 2; i++) {
        redisReply *r = NULL;
        if (redisGetReply(ctx, (void **)&r) != REDIS_OK || !r) {
            redis_io_reason(ctx, i == 0 ? "MULTI" : i <= n ? "MULTI (queueing)" : "EXEC",
                            timeout_ms, why, whyn);
            *io = true;
            return false;
        }
        if (i < n + 1) {
            /* MULTI answers +OK, each queued command +QUEUED or an error
             * that makes EXEC abort; keep the first reason. */
            if (r->type == REDIS_REPLY_ERROR && !why[0])
                snprintf(why, whyn, "%s: %s", i == 0 ? "MULTI" : "queued command", r->str);
            freeReplyObject(r);
            continue;
        }
        if (r->type == REDIS_REPLY_ARRAY && r->elements == (size_t)n) {
            for (size_t k = 0; k < r->elements; k++) {
                if (r->element[k]->type == REDIS_REPLY_ERROR) {
                    snprintf(why, whyn, "EXEC: command %zu of %d: %s", k + 1, n,
                             r->element[k]->str);
                    freeReplyObject(r);
                    return false;
                }
            }
            *exec = r;
            return true;
        }
        if (!why[0]) {
            if (r->type == REDIS_REPLY_ERROR)
                snprintf(why, whyn, "EXEC: %s", r->str);
            else if (r->type == REDIS_REPLY_NIL)
                snprintf(why, whyn, "EXEC: transaction aborted");
            else
                snprintf(why, whyn, "EXEC: unexpected reply (type %d)", r->type);
        }
        freeReplyObject(r);
        return false;
    }
    return false;                       /* not reached */
}

void redis_key(dl_sbuf *b, const char *prefix, const char *a, const char *c)
{
    b->len = 0;
    dl_sbuf_printf(b, "%s%s", prefix, a);
    if (c)
        dl_sbuf_printf(b, ":%s", c);
}
