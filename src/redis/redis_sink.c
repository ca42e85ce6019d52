/* redis_sink.c: the effectively-once sink of Kafka's redis delivery:
 * results and consumed offsets in one MULTI/EXEC, and offsets read back
 * when partitions are assigned. */
#define _POSIX_C_SOURCE 200809L
#include "redis/link.h"

#include <inttypes.h>
#include <stdio.h>
#include <string.h>

dl_status dl_redis_commit(dl_redis_link *l, const char *group, const dl_redis_result *res,
                          int nres, const dl_redis_offset *offs, int noffs, int64_t ttl_s,
                          dl_err *err)
{
    if (nres < 0 || noffs < 0 || (nres > 0 && !res) || (noffs > 0 && (!offs || !group)))
        return dl_err_set(err, DL_ERR_INVALID, "dl_redis_commit: bad arguments");
    if (nres == 0 && noffs == 0)
        return DL_OK;
    redis_nopipe np;
    redis_nopipe_begin(&np);
    dl_status st = redis_link_ready(l, err);
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
        redis_key(&key, "dlserve:result:", res[i].id, NULL);
        const char *argv[] = {"SET", key.s, res[i].value, "EX", ttl};
        size_t lens[] = {3, key.len, res[i].len, 2, strlen(ttl)};
        appended = !key.oom && redisAppendCommandArgv(ctx, ttl_s > 0 ? 5 : 3, argv, lens) == REDIS_OK;
    }
    for (int i = 0; appended && i < noffs; i++) {
        redis_key(&key, "dlserve:offsets:", group, offs[i].topic);
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
        st = redis_link_lost(l, "commit: out of memory building the transaction", err);
        goto out;
    }

    redisReply *exec;
    bool io;
    char why[200];
    if (redis_read_multi(ctx, nres + noffs, l->timeout_ms, &exec, &io, why, sizeof(why))) {
        freeReplyObject(exec);
        st = DL_OK;
    } else if (io) {
        st = redis_link_lost(l, why, err);
    } else {
        st = redis_link_refused(l, "commit", why, err);
    }
out:
    redis_nopipe_end(&np);
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
    redis_key(&key, "dlserve:offsets:", group, topic);
    if (key.oom)
        return dl_err_set(err, DL_ERR_NOMEM, "dl_redis_offset_get: key");
    char part[16];
    snprintf(part, sizeof(part), "%" PRId32, partition);
    const char *argv[] = {"HGET", key.s, part};
    size_t lens[] = {4, key.len, strlen(part)};
    redis_nopipe np;
    redis_nopipe_begin(&np);
    redisReply *r;
    dl_status st = redis_link_cmd(l, 3, argv, lens, &r, err);
    redis_nopipe_end(&np);
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
