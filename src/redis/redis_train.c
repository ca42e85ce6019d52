/* redis_train.c: training's side of Redis: the progress stream
 * (dlserve:train:<model>) and announcing a trained version
 * (dlserve:model:<name> and the dlserve:models channel); `dlserve --train
 * --publish` (src/cmd/publish.c) sends training's events to both. */
#define _XOPEN_SOURCE 700    /* realpath */
#include "redis/link.h"
#include "nn/dl_nn.h"

#include <errno.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define STREAM_MAXLEN "10000"

/* ---- training progress ---------------------------------------------------- */

dl_status dl_redis_progress(dl_redis_link *l, const char *model, const dl_redis_progress_rec *p,
                            dl_err *err)
{
    if (!model || !dl_model_name_valid(model, strlen(model)))
        return dl_err_set(err, DL_ERR_INVALID, "redis progress: bad model name");
    dl_sbuf key = {0};
    redis_key(&key, "dlserve:train:", model, NULL);
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
    redis_nopipe np;
    redis_nopipe_begin(&np);
    redisReply *r;
    dl_status st = redis_link_cmd(l, argc, argv, NULL, &r, err);
    redis_nopipe_end(&np);
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
    redis_key(&key, "dlserve:train:", model, NULL);
    if (key.oom)
        return NULL;
    const char *argv[] = {"XREVRANGE", key.s, "+", "-", "COUNT", "1"};
    redis_nopipe np;
    redis_nopipe_begin(&np);
    redisReply *r;
    dl_status st = redis_link_cmd(l, 6, argv, NULL, &r, NULL);
    redis_nopipe_end(&np);
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
    redis_key(&key, "dlserve:model:", model, NULL);
    if (!text || key.oom) {
        st = dl_err_set(err, DL_ERR_NOMEM, "publish: announcement");
        goto out;
    }

    char addr[300];
    redis_addr(c, addr, sizeof(addr));
    int timeout_ms = redis_timeout(c);
    char why[200];
    redis_nopipe np;
    redis_nopipe_begin(&np);
    redisContext *ctx = redis_open(c, timeout_ms, true, why, sizeof(why));
    if (!ctx) {
        redis_nopipe_end(&np);
        st = dl_err_set(err, DL_ERR_IO, "publish: redis %s: %s", addr, why);
        goto out;
    }
    char ver[24];
    snprintf(ver, sizeof(ver), "%" PRId64, version);
    const char *hset[] = {"HSET", key.s, "version", ver, "path", abs, "sha256", hex};
    const char *pub[] = {"PUBLISH", REDIS_CHANNEL, text};
    redisReply *exec = NULL;
    bool io = false;
    bool ok = redisAppendCommand(ctx, "MULTI") == REDIS_OK &&
              redisAppendCommandArgv(ctx, 8, hset, NULL) == REDIS_OK &&
              redisAppendCommandArgv(ctx, 3, pub, NULL) == REDIS_OK &&
              redisAppendCommand(ctx, "EXEC") == REDIS_OK;
    if (!ok)
        snprintf(why, sizeof(why), "out of memory");
    else
        ok = redis_read_multi(ctx, 2, timeout_ms, &exec, &io, why, sizeof(why));
    redisFree(ctx);
    redis_nopipe_end(&np);
    if (!ok) {
        st = dl_err_set(err, DL_ERR_IO, "publish: redis %s: %s", addr, why);
        goto out;
    }
    long long n = exec->element[1]->type == REDIS_REPLY_INTEGER ? exec->element[1]->integer : 0;
    freeReplyObject(exec);
    if (receivers)
        *receivers = n;
    DL_LOG(DL_LOG_NOTICE, "redis", "published %s version %lld (sha256 %.12s...) on %s at %s: "
           "%lld subscriber%s", model, (long long)version, hex, REDIS_CHANNEL, addr, n,
           n == 1 ? "" : "s");
    st = DL_OK;
out:
    dl_sbuf_free(&key);
    free(text);
    free(abs);
    return st;
}
