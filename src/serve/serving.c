/* serving.c: the "serving" block of a model's model.json, read and checked
 * here (the model's own definition, src/nn/, never sees it): per-model
 * overrides of the daemon's [batching] and [models] settings. */
#include "serve/serving.h"

#include <ctype.h>
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

void serving_init(serving_conf *sc)
{
    memset(sc, 0, sizeof(*sc));
    sc->max_queue_delay_us = -1;
    sc->default_timeout_us = -1;
    sc->batch_invariant = -1;
}

/* An integer key of the block in [least, most] into *to (left alone when
 * absent). */
static dl_status int_key(json_t *block, const char *key, int64_t least, int64_t most,
                         int64_t *to, dl_err *err)
{
    json_t *v = json_object_get(block, key);
    if (!v)
        return DL_OK;
    if (!json_is_integer(v) || json_integer_value(v) < least || json_integer_value(v) > most)
        return dl_err_set(err, DL_ERR_INVALID,
                          "serving.%s must be an integer from %lld to %lld", key,
                          (long long)least, (long long)most);
    *to = json_integer_value(v);
    return DL_OK;
}

static int cmp_i64(const void *a, const void *b)
{
    int64_t x = *(const int64_t *)a, y = *(const int64_t *)b;
    return (x > y) - (x < y);
}

static dl_status preferred(json_t *block, serving_conf *sc, dl_err *err)
{
    json_t *arr = json_object_get(block, "preferred_batch_size");
    if (!arr)
        return DL_OK;
    size_t n = json_array_size(arr);
    if (!json_is_array(arr) || n < 1 || n > SERVING_MAX_PREFERRED)
        return dl_err_set(err, DL_ERR_INVALID, "serving.preferred_batch_size must be a list "
                          "of 1 to %d batch sizes", SERVING_MAX_PREFERRED);
    for (size_t i = 0; i < n; i++) {
        json_t *v = json_array_get(arr, i);
        if (!json_is_integer(v) || json_integer_value(v) < 1)
            return dl_err_set(err, DL_ERR_INVALID, "serving.preferred_batch_size[%zu] must "
                              "be an integer >= 1", i);
        if (sc->max_batch_size > 0 && json_integer_value(v) > sc->max_batch_size)
            return dl_err_set(err, DL_ERR_INVALID, "serving.preferred_batch_size[%zu] is %lld, "
                              "over serving.max_batch_size %lld", i,
                              (long long)json_integer_value(v), (long long)sc->max_batch_size);
        sc->preferred[i] = json_integer_value(v);
    }
    qsort(sc->preferred, n, sizeof(int64_t), cmp_i64);
    for (size_t i = 1; i < n; i++)
        if (sc->preferred[i] == sc->preferred[i - 1])
            return dl_err_set(err, DL_ERR_INVALID, "serving.preferred_batch_size lists %lld "
                              "twice", (long long)sc->preferred[i]);
    sc->npreferred = (int)n;
    return DL_OK;
}

/* A whole decimal number >= 1 at *s; advances *s past it. */
static bool positive_int(const char **s)
{
    if (!isdigit((unsigned char)**s))
        return false;
    char *end;
    errno = 0;
    long long n = strtoll(*s, &end, 10);
    *s = end;
    return errno == 0 && n >= 1;
}

bool serving_policy_ok(const char *p)
{
    if (!strncmp(p, "versions:", 9)) {
        p += 9;
        for (;;) {
            if (!positive_int(&p))
                return false;
            if (*p != ',')
                break;
            p++;
        }
        return *p == '\0';
    }
    char name[16];
    int64_t n;
    return dl_parse_name_num(p, name, sizeof(name), &n) && !strcmp(name, "latest") &&
           n != 0;
}

static dl_status policy(json_t *block, serving_conf *sc, dl_err *err)
{
    json_t *v = json_object_get(block, "version_policy");
    if (!v)
        return DL_OK;
    const char *p = json_string_value(v);
    if (!p || strlen(p) >= sizeof(sc->version_policy) || !serving_policy_ok(p))
        return dl_err_set(err, DL_ERR_INVALID, "serving.version_policy must be \"latest\", "
                          "\"latest:N\" or \"versions:N,N,...\" with every N >= 1");
    snprintf(sc->version_policy, sizeof(sc->version_policy), "%s", p);
    return DL_OK;
}

static dl_status priority(json_t *block, serving_conf *sc, dl_err *err)
{
    dl_status st = int_key(block, "priority_levels", 0, SERVING_MAX_PRIORITY,
                           &sc->priority_levels, err);
    if (st != DL_OK)
        return st;
    bool given = json_object_get(block, "default_priority_level") != NULL;
    if (sc->priority_levels == 0 && given)
        return dl_err_set(err, DL_ERR_INVALID, "serving.default_priority_level needs "
                          "serving.priority_levels");
    if (sc->priority_levels > 0 && !given)
        return dl_err_set(err, DL_ERR_INVALID, "serving.priority_levels needs "
                          "serving.default_priority_level (1 to %lld)",
                          (long long)sc->priority_levels);
    return int_key(block, "default_priority_level", 1,
                   sc->priority_levels > 0 ? sc->priority_levels : 1,
                   &sc->default_priority_level, err);
}

dl_status serving_parse(json_t *block, int64_t max_instances, serving_conf *sc, dl_err *err)
{
    static const char *const keys[] = {
        "max_batch_size", "max_queue_delay_us", "preferred_batch_size", "max_queue_size",
        "instances", "version_policy", "default_timeout_us", "priority_levels",
        "default_priority_level", "batch_invariant", "cache", NULL};
    serving_init(sc);
    if (!block)
        return DL_OK;
    if (!json_is_object(block))
        return dl_err_set(err, DL_ERR_INVALID, "serving must be an object");
    const char *key;
    json_t *v;
    json_object_foreach(block, key, v) {
        bool known = false;
        for (int i = 0; keys[i] && !known; i++)
            known = strcmp(key, keys[i]) == 0;
        if (!known)
            return dl_err_set(err, DL_ERR_INVALID, "serving: unknown key '%.60s'", key);
    }
    const int64_t most = INT64_C(1) << 40;
    dl_status st;
    if ((st = int_key(block, "max_batch_size", 1, most, &sc->max_batch_size, err)) ||
        (st = int_key(block, "max_queue_delay_us", 0, most, &sc->max_queue_delay_us, err)) ||
        (st = int_key(block, "max_queue_size", 1, most, &sc->max_queue_size, err)) ||
        (st = int_key(block, "instances", 1, max_instances, &sc->instances, err)) ||
        (st = int_key(block, "default_timeout_us", 0, most, &sc->default_timeout_us, err)) ||
        (st = preferred(block, sc, err)) || (st = policy(block, sc, err)) ||
        (st = priority(block, sc, err)))
        return st;
    json_t *bi = json_object_get(block, "batch_invariant");
    if (bi && !json_is_boolean(bi))
        return dl_err_set(err, DL_ERR_INVALID, "serving.batch_invariant must be true or false");
    if (bi)
        sc->batch_invariant = json_is_true(bi);
    json_t *cache = json_object_get(block, "cache");
    if (cache && !json_is_boolean(cache))
        return dl_err_set(err, DL_ERR_INVALID, "serving.cache must be true or false");
    sc->cache = json_is_true(cache);
    if (sc->max_batch_size > 0 && sc->max_queue_size > 0 &&
        sc->max_batch_size > sc->max_queue_size)
        return dl_err_set(err, DL_ERR_INVALID, "serving.max_batch_size %lld is over "
                          "serving.max_queue_size %lld", (long long)sc->max_batch_size,
                          (long long)sc->max_queue_size);
    return DL_OK;
}

dl_status serving_read(const char *text, size_t len, int64_t max_instances, serving_conf *sc,
                       dl_err *err)
{
    serving_init(sc);
    json_error_t je;
    json_t *root = json_loadb(text, len, JSON_REJECT_DUPLICATES, &je);
    if (!json_is_object(root)) {
        json_decref(root);
        return dl_err_set(err, DL_ERR_INVALID, "model.json: line %d: %s", je.line,
                          root ? "must be a JSON object" : je.text);
    }
    dl_status st = serving_parse(json_object_get(root, "serving"), max_instances, sc, err);
    json_decref(root);
    return st;
}

json_t *serving_json(const serving_conf *sc)
{
    json_t *o = json_object();
    if (!o)
        return NULL;
    if (sc->max_batch_size)
        json_object_set_new(o, "max_batch_size", json_integer(sc->max_batch_size));
    if (sc->max_queue_delay_us >= 0)
        json_object_set_new(o, "max_queue_delay_us", json_integer(sc->max_queue_delay_us));
    if (sc->npreferred) {
        json_t *p = json_array();
        for (int i = 0; p && i < sc->npreferred; i++)
            json_array_append_new(p, json_integer(sc->preferred[i]));
        json_object_set_new(o, "preferred_batch_size", p);
    }
    if (sc->max_queue_size)
        json_object_set_new(o, "max_queue_size", json_integer(sc->max_queue_size));
    if (sc->instances)
        json_object_set_new(o, "instances", json_integer(sc->instances));
    if (sc->version_policy[0])
        json_object_set_new(o, "version_policy", json_string(sc->version_policy));
    if (sc->default_timeout_us >= 0)
        json_object_set_new(o, "default_timeout_us", json_integer(sc->default_timeout_us));
    if (sc->batch_invariant >= 0)
        json_object_set_new(o, "batch_invariant", json_boolean(sc->batch_invariant));
    if (sc->cache)
        json_object_set_new(o, "cache", json_true());
    if (sc->priority_levels) {
        json_object_set_new(o, "priority_levels", json_integer(sc->priority_levels));
        json_object_set_new(o, "default_priority_level",
                            json_integer(sc->default_priority_level));
    }
    return o;
}
