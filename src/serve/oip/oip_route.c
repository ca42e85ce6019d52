/* oip_route.c: the Open Inference Protocol's URLs: a path routed strictly
 * to an oip_route (model, version, what is asked), and the methods each
 * route answers. */
#include "serve/oip/oip.h"

#include <limits.h>
#include <stdlib.h>
#include <string.h>

typedef struct seg {
    const char *p;
    size_t      n;
} seg;

/* Splits "/a/b/c" into at most max segments; -1 for a path that does not
 * start with '/', has an empty segment ("//", a trailing '/') or has more
 * segments than max. */
static int split_path(const char *path, seg *s, int max)
{
    if (!path || path[0] != '/')
        return -1;
    int n = 0;
    const char *p = path + 1;
    for (;;) {
        const char *e = strchr(p, '/');
        size_t len = e ? (size_t)(e - p) : strlen(p);
        if (len == 0 || n == max)
            return -1;
        s[n++] = (seg){p, len};
        if (!e)
            return n;
        p = e + 1;
    }
}

static bool seg_is(seg s, const char *word)
{
    return s.n == strlen(word) && memcmp(s.p, word, s.n) == 0;
}

/* A positive decimal integer without leading zeros (at most 18 digits, so
 * it fits int64_t). */
static bool parse_version(seg s, int64_t *v)
{
    if (s.n == 0 || s.n > 18 || s.p[0] == '0')
        return false;
    int64_t x = 0;
    for (size_t i = 0; i < s.n; i++) {
        if (s.p[i] < '0' || s.p[i] > '9')
            return false;
        x = x * 10 + (s.p[i] - '0');
    }
    *v = x;
    return true;
}

static bool take_name(seg s, oip_route *r)
{
    if (!dl_model_name_valid(s.p, s.n))
        return false;
    memcpy(r->model, s.p, s.n);
    r->model[s.n] = '\0';
    return true;
}

/* /v2/models/{m}[/versions/{v}][/ready|/infer|/stats|/config],
 * /v2/models/{m}/trace/setting: s[0] is the name. */
static oip_route_kind route_model(const seg *s, int n, oip_route *r)
{
    if (!take_name(s[0], r))
        return OIP_ROUTE_NONE;
    s++, n--;
    if (n >= 2 && seg_is(s[0], "versions")) {
        if (!parse_version(s[1], &r->version))
            return OIP_ROUTE_NONE;
        s += 2, n -= 2;
    }
    if (n == 0)
        return OIP_ROUTE_MODEL;
    if (n == 1 && seg_is(s[0], "ready"))
        return OIP_ROUTE_MODEL_READY;
    if (n == 1 && seg_is(s[0], "infer"))
        return OIP_ROUTE_INFER;
    if (n == 1 && seg_is(s[0], "stats"))
        return OIP_ROUTE_MODEL_STATS;
    if (n == 1 && seg_is(s[0], "config"))
        return OIP_ROUTE_MODEL_CONFIG;
    if (n == 1 && seg_is(s[0], "generate"))
        return OIP_ROUTE_GENERATE;
    if (n == 1 && seg_is(s[0], "generate_stream"))
        return OIP_ROUTE_GENERATE_STREAM;
    if (n == 2 && seg_is(s[0], "trace") && seg_is(s[1], "setting") && r->version == 0)
        return OIP_ROUTE_TRACE_SETTING;
    return OIP_ROUTE_NONE;
}

/* /v2/repository/index, /v2/repository/models/{m}/load|unload: s[0] follows
 * "repository". */
static oip_route_kind route_repository(const seg *s, int n, oip_route *r)
{
    if (n == 1 && seg_is(s[0], "index"))
        return OIP_ROUTE_REPO_INDEX;
    if (n != 3 || !seg_is(s[0], "models") || !take_name(s[1], r))
        return OIP_ROUTE_NONE;
    if (seg_is(s[2], "load"))
        return OIP_ROUTE_REPO_LOAD;
    if (seg_is(s[2], "unload"))
        return OIP_ROUTE_REPO_UNLOAD;
    return OIP_ROUTE_NONE;
}

/* The status page: /, /ui/{file} (the name in r->model), /status/training,
 * /status/history. */
static oip_route_kind route_page(const seg *s, int n, oip_route *r)
{
    if (n == 0)
        return OIP_ROUTE_PAGE;
    if (n == 2 && seg_is(s[0], "ui") && take_name(s[1], r))
        return OIP_ROUTE_PAGE_FILE;
    if (n == 2 && seg_is(s[0], "status") && seg_is(s[1], "training"))
        return OIP_ROUTE_TRAINING;
    if (n == 2 && seg_is(s[0], "status") && seg_is(s[1], "history"))
        return OIP_ROUTE_HISTORY;
    return OIP_ROUTE_NONE;
}

static oip_route_kind route(const char *path, oip_route *r)
{
    if (path && strcmp(path, "/") == 0)
        return route_page(NULL, 0, r);
    seg s[8];
    int n = split_path(path, s, 8);
    if (n < 1)
        return OIP_ROUTE_NONE;
    if (n == 1 && seg_is(s[0], "metrics"))
        return OIP_ROUTE_METRICS;
    if (n == 1 && seg_is(s[0], "status"))
        return OIP_ROUTE_STATUS;
    if (n == 2 && (seg_is(s[0], "ui") || seg_is(s[0], "status")))
        return route_page(s, n, r);
    if (n == 2 && seg_is(s[0], "v1"))   /* OpenAI's API */
        return seg_is(s[1], "completions") ? OIP_ROUTE_COMPLETIONS
               : seg_is(s[1], "models")    ? OIP_ROUTE_OPENAI_MODELS
                                           : OIP_ROUTE_NONE;
    if (!seg_is(s[0], "v2"))
        return OIP_ROUTE_NONE;
    if (n == 1)
        return OIP_ROUTE_SERVER;
    if (n == 3 && seg_is(s[1], "health"))
        return seg_is(s[2], "live")    ? OIP_ROUTE_LIVE
               : seg_is(s[2], "ready") ? OIP_ROUTE_READY
                                       : OIP_ROUTE_NONE;
    if (n == 3 && seg_is(s[1], "models") && seg_is(s[2], "stats"))
        return OIP_ROUTE_MODEL_STATS;   /* every model's: r->model "" */
    if (n >= 3 && seg_is(s[1], "models"))
        return route_model(s + 2, n - 2, r);
    if (n >= 3 && seg_is(s[1], "repository"))
        return route_repository(s + 2, n - 2, r);
    if (n == 3 && seg_is(s[1], "trace") && seg_is(s[2], "setting"))
        return OIP_ROUTE_TRACE_SETTING;
    return OIP_ROUTE_NONE;
}

oip_route_kind oip_route_parse(const char *path, oip_route *r)
{
    memset(r, 0, sizeof(*r));
    r->kind = route(path, r);
    if (r->kind == OIP_ROUTE_NONE)
        memset(r, 0, sizeof(*r));
    return r->kind;
}

static bool route_is_post(oip_route_kind kind)
{
    return kind == OIP_ROUTE_INFER || kind == OIP_ROUTE_REPO_INDEX ||
           kind == OIP_ROUTE_REPO_LOAD || kind == OIP_ROUTE_REPO_UNLOAD ||
           kind == OIP_ROUTE_GENERATE || kind == OIP_ROUTE_GENERATE_STREAM ||
           kind == OIP_ROUTE_COMPLETIONS;
}

const char *oip_route_allow(oip_route_kind kind)
{
    if (kind == OIP_ROUTE_TRACE_SETTING)
        return "GET, HEAD, POST";
    return route_is_post(kind) ? "POST" : "GET, HEAD";
}

bool oip_route_method_ok(oip_route_kind kind, const char *method)
{
    if (kind == OIP_ROUTE_TRACE_SETTING && strcmp(method, "POST") == 0)
        return true;
    if (route_is_post(kind))
        return strcmp(method, "POST") == 0;
    return strcmp(method, "GET") == 0 || strcmp(method, "HEAD") == 0;
}
