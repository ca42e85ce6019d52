/* redis.c: Redis through hiredis: links that reconnect with backoff, the
 * training progress stream, publishing and watching model versions
 * (dlserve:models), the results-and-offsets MULTI/EXEC, status and metrics.
 *
 * hiredis contexts are blocking with SO_RCVTIMEO/SO_SNDTIMEO set, so no
 * call waits longer than the timeout per reply. A NULL reply means the
 * context is dead: it is freed at once and the link backs off. */
#define _XOPEN_SOURCE 700    /* realpath */
#include "redis/dl_redis.h"
#include "nn/dl_nn.h"

#include <errno.h>
#include <fcntl.h>
#include <hiredis/hiredis.h>
#include <inttypes.h>
#include <limits.h>
#include <poll.h>
#include <pthread.h>
#include <signal.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#define BACKOFF_MIN_S       0.1
#define BACKOFF_MAX_S       5.0
#define DEFAULT_TIMEOUT_MS  1000    /* when timeout_ms <= 0: never wait forever */
#define WATCH_TIMEOUT_MS    400     /* watcher's connect/command cap: prompt stop */
#define WATCH_POLL_MS       500     /* watcher's read wait between stop checks */
#define CHANNEL             "dlserve:models"
#define STREAM_MAXLEN       "10000"

/* ---- SIGPIPE ------------------------------------------------------------
 * hiredis writes with write(2): a peer that has closed raises SIGPIPE,
 * which would kill a training job. Block it around our I/O and discard
 * the one our write raised (write then fails with EPIPE, an I/O error). */

typedef struct nopipe {
    sigset_t old;
} nopipe;

static void nopipe_begin(nopipe *np)
{
    sigset_t set;
    sigemptyset(&set);
    sigaddset(&set, SIGPIPE);
    pthread_sigmask(SIG_BLOCK, &set, &np->old);
}

static void nopipe_end(nopipe *np)
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

/* ---- health: what /status and /metrics show ---------------------------- */

/* Written by the owner thread, read by the HTTP thread: under mu. */
typedef struct health {
    pthread_mutex_t mu;
    char    role[32];
    char    addr[300];          /* host:port or socket path */
    bool    connected;
    int64_t connects;           /* successful connects (reconnects = connects - 1) */
    int64_t errors;
    char    last_error[256];
} health;

/* The owner's reconnect schedule. */
typedef struct backoff {
    double delay;               /* seconds; 0 after a success */
    double next_try;            /* dl_time_now() before which we do not connect */
    bool   down_logged;         /* the current outage has been logged */
} backoff;

/* "host:port", "[v6]:port" or the socket path, for messages. */
static void addr_of(const dl_redis_conf *c, char *buf, size_t n)
{
    if (c->host[0] == '/')
        snprintf(buf, n, "%s", c->host);
    else if (strchr(c->host, ':'))          /* IPv6 literal */
        snprintf(buf, n, "[%s]:%lld", c->host, (long long)c->port);
    else
        snprintf(buf, n, "%s:%lld", c->host, (long long)c->port);
}

static void health_init(health *h, const dl_redis_conf *c, const char *role)
{
    memset(h, 0, sizeof(*h));
    pthread_mutex_init(&h->mu, NULL);
    snprintf(h->role, sizeof(h->role), "%s", role);
    addr_of(c, h->addr, sizeof(h->addr));
}

static json_t *health_json(health *h)
{
    pthread_mutex_lock(&h->mu);
    json_t *j = json_pack("{s:s, s:s, s:b, s:I, s:I, s:s}", "role", h->role,
                          "address", h->addr, "connected", h->connected,
                          "reconnects", (json_int_t)(h->connects > 0 ? h->connects - 1 : 0),
                          "errors", (json_int_t)h->errors, "last_error", h->last_error);
    pthread_mutex_unlock(&h->mu);
    return j;
}

/* A connection is up: logs the first one and every return after an
 * outage. */
static void mark_up(health *h, backoff *bo)
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

/* Connecting failed or the connection was lost: counts it, schedules the
 * next try and logs the outage once (later failures at debug level). */
static void mark_down(health *h, backoff *bo, const char *why)
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

/* Redis answered with an error: the connection is fine. Logged when the
 * message changes, so a repeating refusal does not flood the log. */
static void mark_refused(health *h, const char *why)
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

static int timeout_of(const dl_redis_conf *c)
{
    if (c->timeout_ms <= 0)
        return DEFAULT_TIMEOUT_MS;
    return c->timeout_ms > INT_MAX ? INT_MAX : (int)c->timeout_ms;
}

/* hiredis reports a socket timeout as EAGAIN's text: say what it means. */
static void io_reason(redisContext *ctx, const char *cmd, int timeout_ms, char *why, size_t n)
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
        io_reason(ctx, argv[0], timeout_ms, why, n);
        return false;
    }
    bool ok = r->type == REDIS_REPLY_STATUS && strcmp(r->str, "OK") == 0;
    if (!ok)
        snprintf(why, n, "%s: %s", argv[0],
                 r->type == REDIS_REPLY_ERROR ? r->str : "unexpected reply");
    freeReplyObject(r);
    return ok;
}

/* Connects, sets the timeouts, authenticates and selects the database.
 * NULL with *why on failure. */
static redisContext *open_ctx(const dl_redis_conf *c, int timeout_ms, bool select_db,
                              char *why, size_t n)
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

struct dl_redis_link {
    dl_redis_conf conf;
    int           timeout_ms;
    redisContext *ctx;          /* NULL while down */
    backoff       bo;
    health        h;
};

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
    l->timeout_ms = timeout_of(c);
    health_init(&l->h, c, role && role[0] ? role : "redis");
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

/* Drops a dead connection and schedules the reconnect. */
static dl_status link_lost(dl_redis_link *l, const char *why, dl_err *err)
{
    if (l->ctx) {
        redisFree(l->ctx);
        l->ctx = NULL;
    }
    mark_down(&l->h, &l->bo, why);
    return dl_err_set(err, DL_ERR_IO, "redis %s: %s", l->h.addr, why);
}

/* Connected, or DL_ERR_IO: at once during the backoff, else after one
 * connect attempt. */
static dl_status link_ready(dl_redis_link *l, dl_err *err)
{
    if (l->ctx)
        return DL_OK;
    double wait = l->bo.next_try - dl_time_now();
    if (wait > 0)
        return dl_err_set(err, DL_ERR_IO, "redis %s down (%s); next try in %.0f ms",
                          l->h.addr, l->h.last_error, wait * 1e3);
    char why[200];
    l->ctx = open_ctx(&l->conf, l->timeout_ms, true, why, sizeof(why));
    if (!l->ctx)
        return link_lost(l, why, err);
    mark_up(&l->h, &l->bo);
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

/* Redis refused a command: the connection stays unless the refusal means
 * an outage. */
static dl_status link_refused(dl_redis_link *l, const char *cmd, const char *msg, dl_err *err)
{
    char why[200];
    snprintf(why, sizeof(why), "%s: %s", cmd, msg);
    if (refusal_is_outage(msg))
        return link_lost(l, why, err);
    mark_refused(&l->h, why);
    return dl_err_set(err, DL_ERR_IO, "redis %s: %s", l->h.addr, why);
}

/* One command. On DL_OK *out is its reply (new, never an error reply). */
static dl_status link_cmd(dl_redis_link *l, int argc, const char **argv, const size_t *lens,
                          redisReply **out, dl_err *err)
{
    *out = NULL;
    dl_status st = link_ready(l, err);
    if (st != DL_OK)
        return st;
    redisReply *r = redisCommandArgv(l->ctx, argc, argv, lens);
    if (!r) {
        char why[200];
        io_reason(l->ctx, argv[0], l->timeout_ms, why, sizeof(why));
        return link_lost(l, why, err);
    }
    if (r->type == REDIS_REPLY_ERROR) {
        st = link_refused(l, argv[0], r->str, err);
        freeReplyObject(r);
        return st;
    }
    *out = r;
    return DL_OK;
}

/* Reads the replies to MULTI, n queued commands and EXEC, all appended
 * already, so that the connection stays in step whatever happens. On
 * success *exec is EXEC's reply (new): an array of n replies. Otherwise
 * *io tells whether the connection is dead, and *why says what failed. */
static bool read_multi(redisContext *ctx, int n, int timeout_ms, redisReply **exec,
                       bool *io, char *why, size_t whyn)
{
    *exec = NULL;
    *io = false;
    why[0] = '\0';
    for (int i = 0; i < n + 2; i++) {
        redisReply *r = NULL;
        if (redisGetReply(ctx, (void **)&r) != REDIS_OK || !r) {
            io_reason(ctx, i == 0 ? "MULTI" : i <= n ? "MULTI (queueing)" : "EXEC",
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

/* Appends "prefix" + a + [":" + b] to an emptied buffer. */
static void key_of(dl_sbuf *b, const char *prefix, const char *a, const char *c)
{
    b->len = 0;
    dl_sbuf_printf(b, "%s%s", prefix, a);
    if (c)
        dl_sbuf_printf(b, ":%s", c);
}

dl_status dl_redis_commit(dl_redis_link *l, const char *group, const dl_redis_result *res,
                          int nres, const dl_redis_offset *offs, int noffs, int64_t ttl_s,
                          dl_err *err)
{
    if (nres < 0 || noffs < 0 || (nres > 0 && !res) || (noffs > 0 && (!offs || !group)))
        return dl_err_set(err, DL_ERR_INVALID, "dl_redis_commit: bad arguments");
    if (nres == 0 && noffs == 0)
        return DL_OK;
    nopipe np;
    nopipe_begin(&np);
    dl_status st = link_ready(l, err);
    if (st != DL_OK)
        goto out;

    /* Appending only fills hiredis's output buffer; the first read sends
     * it all: one round trip for the whole transaction. */
    redisContext *ctx = l->ctx;
    dl_sbuf key = {0};
    char ttl[24], part[16], next[24];
    snprintf(ttl, sizeof(ttl), "%lld", (long long)ttl_s);
    bool appended = redisAppendCommand(ctx, "MULTI") == REDIS_OK;
    for (int i = 0; appended && i < nres; i++) {
        key_of(&key, "dlserve:result:", res[i].id, NULL);
        const char *argv[] = {"SET", key.s, res[i].value, "EX", ttl};
        size_t lens[] = {3, key.len, res[i].len, 2, strlen(ttl)};
        appended = !key.oom && redisAppendCommandArgv(ctx, ttl_s > 0 ? 5 : 3, argv, lens) == REDIS_OK;
    }
    for (int i = 0; appended && i < noffs; i++) {
        key_of(&key, "dlserve:offsets:", group, offs[i].topic);
        snprintf(part, sizeof(part), "%" PRId32, offs[i].partition);
        snprintf(next, sizeof(next), "%" PRId64, offs[i].next);
        const char *argv[] = {"HSET", key.s, part, next};
        size_t lens[] = {4, key.len, strlen(part), strlen(next)};
        appended = !key.oom && redisAppendCommandArgv(ctx, 4, argv, lens) == REDIS_OK;
    }
    appended = appended && redisAppendCommand(ctx, "EXEC") == REDIS_OK;
    dl_sbuf_free(&key);
    if (!appended) {
        /* half a transaction sits in the output buffer: drop it all */
        st = link_lost(l, "commit: out of memory building the transaction", err);
        goto out;
    }

    redisReply *exec;
    bool io;
    char why[200];
    if (read_multi(ctx, nres + noffs, l->timeout_ms, &exec, &io, why, sizeof(why))) {
        freeReplyObject(exec);
        st = DL_OK;
    } else if (io) {
        st = link_lost(l, why, err);
    } else {
        st = link_refused(l, "commit", why, err);
    }
out:
    nopipe_end(&np);
    return st;
}

/* A whole decimal integer >= 0. */
static bool parse_offset(const char *s, size_t n, int64_t *v)
{
    if (n == 0 || n > 19)
        return false;
    int64_t x = 0;
    for (size_t i = 0; i < n; i++) {
        if (s[i] < '0' || s[i] > '9')
            return false;
        if (x > (INT64_MAX - (s[i] - '0')) / 10)
            return false;               /* past int64_t */
        x = x * 10 + (s[i] - '0');
    }
    *v = x;
    return true;
}

dl_status dl_redis_offset_get(dl_redis_link *l, const char *group, const char *topic,
                              int32_t partition, int64_t *next, dl_err *err)
{
    *next = -1;
    dl_sbuf key = {0};
    key_of(&key, "dlserve:offsets:", group, topic);
    if (key.oom)
        return dl_err_set(err, DL_ERR_NOMEM, "dl_redis_offset_get: key");
    char part[16];
    snprintf(part, sizeof(part), "%" PRId32, partition);
    const char *argv[] = {"HGET", key.s, part};
    size_t lens[] = {4, key.len, strlen(part)};
    nopipe np;
    nopipe_begin(&np);
    redisReply *r;
    dl_status st = link_cmd(l, 3, argv, lens, &r, err);
    nopipe_end(&np);
    if (st == DL_OK) {
        if (r->type == REDIS_REPLY_STRING) {
            if (!parse_offset(r->str, r->len, next))
                st = dl_err_set(err, DL_ERR_INVALID, "redis %s: %s field %s: not an offset: '%.40s'",
                                l->h.addr, key.s, part, r->str);
        } else if (r->type != REDIS_REPLY_NIL) {
            st = dl_err_set(err, DL_ERR_IO, "redis %s: HGET %s: unexpected reply (type %d)",
                            l->h.addr, key.s, r->type);
        }
        freeReplyObject(r);
    }
    dl_sbuf_free(&key);
    return st;
}

/* ---- training progress ---------------------------------------------------- */

dl_status dl_redis_progress(dl_redis_link *l, const char *model, const dl_redis_progress_rec *p,
                            dl_err *err)
{
    if (!model || !dl_model_name_valid(model, strlen(model)))
        return dl_err_set(err, DL_ERR_INVALID, "redis progress: bad model name");
    dl_sbuf key = {0};
    key_of(&key, "dlserve:train:", model, NULL);
    if (key.oom)
        return dl_err_set(err, DL_ERR_NOMEM, "redis progress: key");
    char v[6][32];
    snprintf(v[0], sizeof(v[0]), "%" PRId64, p->step);
    snprintf(v[1], sizeof(v[1]), "%" PRId64, p->epoch);
    snprintf(v[2], sizeof(v[2]), "%.9g", p->loss);
    snprintf(v[3], sizeof(v[3]), "%.9g", p->accuracy);
    snprintf(v[4], sizeof(v[4]), "%.9g", p->samples_per_s);
    snprintf(v[5], sizeof(v[5]), "%" PRId64, p->ranks);
    const char *argv[20] = {"XADD", key.s, "MAXLEN", "~", STREAM_MAXLEN, "*",
                            "step", v[0], "epoch", v[1], "loss", v[2]};
    int argc = 12;
    if (p->accuracy >= 0) {
        argv[argc++] = "accuracy";
        argv[argc++] = v[3];
    }
    argv[argc++] = "samples_per_s";
    argv[argc++] = v[4];
    argv[argc++] = "ranks";
    argv[argc++] = v[5];
    nopipe np;
    nopipe_begin(&np);
    redisReply *r;
    dl_status st = link_cmd(l, argc, argv, NULL, &r, err);
    nopipe_end(&np);
    if (st == DL_OK)
        freeReplyObject(r);
    dl_sbuf_free(&key);
    return st;
}

/* A stream value as JSON: an integer or a number when it reads wholly as
 * one, else a string. */
static json_t *json_of_value(const char *s)
{
    char *end;
    errno = 0;
    long long i = strtoll(s, &end, 10);
    if (*s && !*end && errno == 0)
        return json_integer(i);
    double d = strtod(s, &end);
    json_t *j = *s && !*end && errno == 0 ? json_real(d) : NULL;
    return j ? j : json_string(s);      /* jansson refuses NaN and inf: text */
}

json_t *dl_redis_progress_latest(dl_redis_link *l, const char *model)
{
    if (!model || !dl_model_name_valid(model, strlen(model)))
        return NULL;
    dl_sbuf key = {0};
    key_of(&key, "dlserve:train:", model, NULL);
    if (key.oom)
        return NULL;
    const char *argv[] = {"XREVRANGE", key.s, "+", "-", "COUNT", "1"};
    nopipe np;
    nopipe_begin(&np);
    redisReply *r;
    dl_status st = link_cmd(l, 6, argv, NULL, &r, NULL);
    nopipe_end(&np);
    dl_sbuf_free(&key);
    if (st != DL_OK)
        return NULL;
    /* [[id, [field, value, ...]]] */
    json_t *j = NULL;
    redisReply *e = r->type == REDIS_REPLY_ARRAY && r->elements == 1 ? r->element[0] : NULL;
    if (e && e->type == REDIS_REPLY_ARRAY && e->elements == 2 &&
        e->element[0]->type == REDIS_REPLY_STRING && e->element[1]->type == REDIS_REPLY_ARRAY) {
        redisReply *f = e->element[1];
        j = json_object();
        if (j)
            json_object_set_new(j, "id", json_string(e->element[0]->str));
        for (size_t i = 0; j && i + 1 < f->elements; i += 2) {
            if (f->element[i]->type != REDIS_REPLY_STRING ||
                f->element[i + 1]->type != REDIS_REPLY_STRING)
                continue;
            json_t *v = json_of_value(f->element[i + 1]->str);
            if (v)
                json_object_set_new(j, f->element[i]->str, v);
        }
    }
    freeReplyObject(r);
    return j;
}

/* ---- publishing a trained version ----------------------------------------- */

dl_status dl_redis_publish(const dl_redis_conf *c, const char *model, int64_t version,
                           const char *weights_path, int64_t *receivers, dl_err *err)
{
    if (receivers)
        *receivers = 0;
    if (!c->host[0])
        return dl_err_set(err, DL_ERR_INVALID, "publish: no Redis host configured");
    if (!model || !dl_model_name_valid(model, strlen(model)))
        return dl_err_set(err, DL_ERR_INVALID, "publish: bad model name '%s'",
                          model ? model : "");
    if (version < 1)
        return dl_err_set(err, DL_ERR_INVALID, "publish: version %lld < 1", (long long)version);
    char *abs = realpath(weights_path, NULL);
    if (!abs)
        return dl_err_set(err, DL_ERR_IO, "publish: %s: %s", weights_path, strerror(errno));
    char hex[65];
    dl_status st = dl_sha256_file(abs, hex, err);
    if (st != DL_OK) {
        free(abs);
        return st;
    }
    json_t *msg = json_pack("{s:s, s:I, s:s, s:s}", "model", model, "version",
                            (json_int_t)version, "path", abs, "sha256", hex);
    char *text = msg ? json_dumps(msg, JSON_COMPACT) : NULL;
    json_decref(msg);
    dl_sbuf key = {0};
    key_of(&key, "dlserve:model:", model, NULL);
    if (!text || key.oom) {
        st = dl_err_set(err, DL_ERR_NOMEM, "publish: announcement");
        goto out;
    }

    char addr[300];
    addr_of(c, addr, sizeof(addr));
    int timeout_ms = timeout_of(c);
    char why[200];
    nopipe np;
    nopipe_begin(&np);
    redisContext *ctx = open_ctx(c, timeout_ms, true, why, sizeof(why));
    if (!ctx) {
        nopipe_end(&np);
        st = dl_err_set(err, DL_ERR_IO, "publish: redis %s: %s", addr, why);
        goto out;
    }
    char ver[24];
    snprintf(ver, sizeof(ver), "%" PRId64, version);
    const char *hset[] = {"HSET", key.s, "version", ver, "path", abs, "sha256", hex};
    const char *pub[] = {"PUBLISH", CHANNEL, text};
    redisReply *exec = NULL;
    bool io = false;
    bool ok = redisAppendCommand(ctx, "MULTI") == REDIS_OK &&
              redisAppendCommandArgv(ctx, 8, hset, NULL) == REDIS_OK &&
              redisAppendCommandArgv(ctx, 3, pub, NULL) == REDIS_OK &&
              redisAppendCommand(ctx, "EXEC") == REDIS_OK;
    if (!ok)
        snprintf(why, sizeof(why), "out of memory");
    else
        ok = read_multi(ctx, 2, timeout_ms, &exec, &io, why, sizeof(why));
    redisFree(ctx);
    nopipe_end(&np);
    if (!ok) {
        st = dl_err_set(err, DL_ERR_IO, "publish: redis %s: %s", addr, why);
        goto out;
    }
    long long n = exec->element[1]->type == REDIS_REPLY_INTEGER ? exec->element[1]->integer : 0;
    freeReplyObject(exec);
    if (receivers)
        *receivers = n;
    DL_LOG(DL_LOG_NOTICE, "redis", "published %s version %lld (sha256 %.12s...) on %s at %s: "
           "%lld subscriber%s", model, (long long)version, hex, CHANNEL, addr, n,
           n == 1 ? "" : "s");
    st = DL_OK;
out:
    dl_sbuf_free(&key);
    free(text);
    free(abs);
    return st;
}

/* ---- the registry watcher ------------------------------------------------- */

struct dl_redis_watch {
    dl_redis_conf     conf;
    int               timeout_ms;
    dl_redis_announce_fn on_announce;
    bool              subscribed_before;   /* a later SUBSCRIBE is a reconnection */
    void             *ctx;
    redisContext     *rc;         /* watcher thread only; NULL while down */
    backoff           bo;         /* watcher thread only */
    health            h;
    atomic_bool       stop;
    int               wake[2];    /* a byte on wake[1] interrupts waits */
    pthread_t         thread;
};

/* Subscribes on a fresh connection; on failure marks the outage. */
static void watch_connect(dl_redis_watch *w)
{
    char why[200];
    w->rc = open_ctx(&w->conf, w->timeout_ms, false, why, sizeof(why));
    if (!w->rc) {
        mark_down(&w->h, &w->bo, why);
        return;
    }
    const char *argv[] = {"SUBSCRIBE", CHANNEL};
    redisReply *r = redisCommandArgv(w->rc, 2, argv, NULL);
    bool ok = r && r->type == REDIS_REPLY_ARRAY && r->elements == 3 &&
              r->element[0]->type == REDIS_REPLY_STRING &&
              strcmp(r->element[0]->str, "subscribe") == 0;
    if (!r)
        io_reason(w->rc, "SUBSCRIBE", w->timeout_ms, why, sizeof(why));
    else if (!ok)
        snprintf(why, sizeof(why), "SUBSCRIBE: %s",
                 r->type == REDIS_REPLY_ERROR ? r->str : "unexpected reply");
    if (r)
        freeReplyObject(r);
    if (!ok) {
        redisFree(w->rc);
        w->rc = NULL;
        mark_down(&w->h, &w->bo, why);
        return;
    }
    mark_up(&w->h, &w->bo);
    DL_LOG(DL_LOG_DEBUG, "redis", "%s: subscribed to %s", w->h.role, CHANNEL);
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
    mark_down(&w->h, &w->bo, why);
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
               CHANNEL, why, text, p->len > n ? "..." : "");
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
        io_reason(w->rc, "reading", w->timeout_ms, why, sizeof(why));
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
    /* This thread's writes must not raise SIGPIPE (see nopipe): blocked
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
    w->timeout_ms = timeout_of(c) < WATCH_TIMEOUT_MS ? timeout_of(c) : WATCH_TIMEOUT_MS;
    w->on_announce = on_announce;
    w->ctx = ctx;
    atomic_init(&w->stop, false);
    health_init(&w->h, c, "registry");
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

/* ---- status and metrics --------------------------------------------------- */

json_t *dl_redis_link_status(dl_redis_link *l)
{
    return l ? health_json(&l->h) : NULL;
}

json_t *dl_redis_watch_status(dl_redis_watch *w)
{
    return w ? health_json(&w->h) : NULL;
}

/* A consistent copy of one health, for a scrape. */
typedef struct health_snap {
    char    role[32];
    bool    up;
    int64_t reconnects, errors;
} health_snap;

static void snap(health *h, health_snap *s)
{
    pthread_mutex_lock(&h->mu);
    memcpy(s->role, h->role, sizeof(s->role));
    s->up = h->connected;
    s->reconnects = h->connects > 0 ? h->connects - 1 : 0;
    s->errors = h->errors;
    pthread_mutex_unlock(&h->mu);
}

void dl_redis_metrics(dl_sbuf *out, dl_redis_link *const *links, int nlinks,
                      dl_redis_watch *w)
{
    int n = 0;
    health_snap *s = calloc((size_t)(nlinks > 0 ? nlinks : 0) + 1, sizeof(*s));
    if (!s) {
        out->oom = true;
        return;
    }
    for (int i = 0; i < nlinks; i++)
        if (links[i])
            snap(&links[i]->h, &s[n++]);
    if (w)
        snap(&w->h, &s[n++]);

    static const struct {
        const char *name, *type, *help;
    } fam[] = {
        {"dlserve_redis_up", "gauge", "Whether the Redis connection of a role is up (1) or not (0)."},
        {"dlserve_redis_reconnects_total", "counter", "Redis connections made after the first, per role."},
        {"dlserve_redis_errors_total", "counter",
         "Failed Redis connects, lost connections and error replies, per role."},
    };
    for (int f = 0; n > 0 && f < 3; f++) {
        dl_sbuf_printf(out, "# HELP %s %s\n# TYPE %s %s\n", fam[f].name, fam[f].help,
                       fam[f].name, fam[f].type);
        for (int i = 0; i < n; i++) {
            dl_sbuf_printf(out, "%s{role=\"", fam[f].name);
            dl_prom_label(out, s[i].role);
            int64_t v = f == 0 ? s[i].up : f == 1 ? s[i].reconnects : s[i].errors;
            dl_sbuf_printf(out, "\"} %" PRId64 "\n", v);
        }
    }
    free(s);
}
