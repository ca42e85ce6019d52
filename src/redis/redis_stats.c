/* redis_stats.c: what /status and /metrics show of Redis: each link's and
 * the watcher's health, as JSON and as the dlserve_redis_* families. */
#define _POSIX_C_SOURCE 200809L
#include "redis/link.h"

#include <stdlib.h>
#include <string.h>

static json_t *health_json(redis_health *h)
{
    pthread_mutex_lock(&h->mu);
    json_t *j = json_pack("{s:s, s:s, s:b, s:I, s:I, s:s}", "role", h->role,
                          "address", h->addr, "connected", h->connected,
                          "reconnects", (json_int_t)(h->connects > 0 ? h->connects - 1 : 0),
                          "errors", (json_int_t)h->errors, "last_error", h->last_error);
    pthread_mutex_unlock(&h->mu);
    return j;
}


json_t *dl_redis_link_status(dl_redis_link *l)
{
    return l ? health_json(&l->h) : NULL;
}

json_t *dl_redis_watch_status(dl_redis_watch *w)
{
    return w ? health_json(redis_watch_health(w)) : NULL;
}

/* A consistent copy of one health, for a scrape. */
typedef struct health_snap {
    char    role[32];
    bool    up;
    int64_t reconnects, errors;
} health_snap;

static void snap(redis_health *h, health_snap *s)
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
        snap(redis_watch_health(w), &s[n++]);

    static const struct {
        const char *name, *type, *help;
    } fam[] = {
        {"dlserve_redis_up", "gauge",
         "Whether the Redis connection of a role is up (1) or not (0)."},
        {"dlserve_redis_reconnects_total", "counter",
         "Redis connections made after the first, per role."},
        {"dlserve_redis_errors_total", "counter",
         "Failed Redis connects, lost connections and error replies, per role."},
    };
    for (int f = 0; n > 0 && f < 3; f++) {
        dl_prom_family(out, fam[f].name, fam[f].type, fam[f].help);
        for (int i = 0; i < n; i++) {
            int64_t v = f == 0 ? s[i].up : f == 1 ? s[i].reconnects : s[i].errors;
            dl_prom_sample(out, fam[f].name, (double)v, "role", s[i].role, NULL);
        }
    }
    free(s);
}
