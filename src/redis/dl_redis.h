/* dl_redis.h: Redis for training and serving (hiredis): the [redis]
 * configuration, links that reconnect with backoff, the training progress
 * stream, announcing and watching model versions, the daemon's
 * effectively-once sink, and status and metrics. Depends on nn and util;
 * only src/redis sees hiredis.
 *
 *   training --dl_redis_progress--> dlserve:train:<model>        (stream)
 *            --dl_redis_publish---> dlserve:model:<name>         (hash version, path, sha256)
 *                                   PUBLISH dlserve:models {"model","version","path","sha256"}
 *   daemon   <--dl_redis_watch----- SUBSCRIBE dlserve:models      (registry reloads)
 *            --dl_redis_commit----> dlserve:result:<id>          (string, TTL)
 *                                   dlserve:offsets:<group>:<topic> (hash partition -> next)
 *
 * The configuration struct and its option rows are always available; the
 * functions exist only in builds with hiredis, whose users see
 * DL_HAVE_REDIS.
 *
 * A link connects lazily and, after any error, drops its connection and
 * reconnects on a later call once its backoff (100 ms doubling to 5 s,
 * reset on success) has passed; calls during the backoff fail at once
 * with DL_ERR_IO. A lost connection is logged once, its return too.
 * Connect and command timeouts are the configuration's timeout_ms. Links
 * ignore SIGPIPE from their own writes, so a closed socket is an error,
 * not a dead process.
 *
 * Thread-safety: a link's commands run on one thread at a time (its
 * owner's); dl_redis_link_status and dl_redis_metrics may run on any
 * thread meanwhile. A watcher runs its own thread; its status may be read
 * from any thread. */
#ifndef DL_REDIS_H
#define DL_REDIS_H

#include "util/dl_util.h"

#include <stddef.h>
#include <jansson.h>

#ifdef __cplusplus
extern "C" {
#endif

/* ---- configuration: [redis] ------------------------------------------- */

typedef struct dl_redis_conf {
    char    host[256];           /* empty: Redis off; a leading '/' is a socket path */
    int64_t port;
    char    password[256];
    int64_t db;
    int64_t timeout_ms;          /* connect and command timeout */
    bool    results;             /* write dlserve:result:<id> (always in redis delivery) */
    int64_t result_ttl_s;        /* 0: results do not expire */
    bool    registry;            /* load versions announced on dlserve:models */
} dl_redis_conf;

/* The [redis] rows of an option table (util's dl_opt) whose config struct
 * holds a dl_redis_conf at byte offset `base`: the daemon's table lists
 * DL_REDIS_OPTS(offsetof(dl_serve_conf, redis)). */
#define DL_REDIS_OPT_(base, f, t, sz, dflt, lo, hi, text)                     \
    {.section = "redis", .key = #f, .type = (t),                              \
     .offset = (base) + offsetof(dl_redis_conf, f), .size = (sz),             \
     .def = (dflt), .min = (lo), .max = (hi), .doc = (text)}
#define DL_REDIS_STR_(base, f, dflt, text)                                    \
    DL_REDIS_OPT_(base, f, DL_OPT_STRING, sizeof(((dl_redis_conf *)0)->f), dflt, 0, 0, text)
#define DL_REDIS_INT_(base, f, dflt, lo, hi, text)                            \
    DL_REDIS_OPT_(base, f, DL_OPT_INT, 0, dflt, lo, hi, text)
#define DL_REDIS_BOOL_(base, f, dflt, text)                                   \
    DL_REDIS_OPT_(base, f, DL_OPT_BOOL, 0, dflt, 0, 0, text)
#define DL_REDIS_OPTS(base)                                                   \
    DL_REDIS_STR_(base, host, "", "Redis host; empty: Redis off"),            \
    DL_REDIS_INT_(base, port, "6379", 1, 65535, "Redis port"),                \
    DL_REDIS_STR_(base, password, "", "AUTH password; empty: none"),          \
    DL_REDIS_INT_(base, db, "0", 0, 1 << 20, "database number (SELECT)"),     \
    DL_REDIS_INT_(base, timeout_ms, "1000", 1, 600000, "connect and command timeout"), \
    DL_REDIS_BOOL_(base, results, "false",                                    \
        "also write dlserve:result:<id> in at-least-once mode (always in redis mode)"), \
    DL_REDIS_INT_(base, result_ttl_s, "86400", 0, 1LL << 40, "expiry of result keys; 0: none"), \
    DL_REDIS_BOOL_(base, registry, "true", "load versions announced on the dlserve:models channel")

/* ---- links -------------------------------------------------------------- */

typedef struct dl_redis_link dl_redis_link;

/* *out is new. role ("sink", "status", "train", ...) names the link in
 * logs, /status and /metrics. Does not connect (the first command does),
 * so it fails only for bad arguments (DL_ERR_INVALID: empty host, port
 * out of range) or memory. */
dl_status dl_redis_link_new(const dl_redis_conf *c, const char *role,
                            dl_redis_link **out, dl_err *err);
/* Closes the connection; NULL does nothing. */
void dl_redis_link_free(dl_redis_link *l);

/* ---- training progress -------------------------------------------------- */

/* One training progress record. */
typedef struct dl_redis_progress_rec {
    int64_t step;            /* optimizer steps so far (whole job) */
    int64_t epoch;           /* 1-based */
    double  loss;            /* mean training loss */
    double  accuracy;        /* test accuracy in [0, 1]; < 0: not measured, left out */
    double  samples_per_s;   /* training throughput of the whole job */
    int64_t ranks;           /* trainers in the job */
} dl_redis_progress_rec;

/* `XADD dlserve:train:<model> MAXLEN ~ 10000 * step .. epoch .. loss ..
 * accuracy .. samples_per_s .. ranks ..`. DL_ERR_INVALID for a bad model
 * name; DL_ERR_IO when Redis is down (including during the link's
 * backoff: the call does not block then) or refuses; training goes on
 * either way. */
dl_status dl_redis_progress(dl_redis_link *l, const char *model,
                            const dl_redis_progress_rec *p, dl_err *err);

/* The newest record of dlserve:train:<model> (XREVRANGE + - COUNT 1) as a
 * new JSON object: {"id": "<stream id>", "step": 120, "loss": 0.31, ...}
 * (numbers as numbers, other values as strings). NULL when there is none,
 * Redis is down or the reply is malformed. */
json_t *dl_redis_progress_latest(dl_redis_link *l, const char *model);

/* ---- announcing versions ------------------------------------------------ */

/* Announces a trained version: the SHA-256 of weights_path, then in one
 * MULTI/EXEC `HSET dlserve:model:<model> version <v> path <absolute path>
 * sha256 <hex>` and `PUBLISH dlserve:models {"model", "version", "path",
 * "sha256"}`. *receivers (may be NULL) gets the number of subscribers
 * the announcement reached (also logged). Connects for this call only.
 * DL_ERR_INVALID for no host, a bad model name or version < 1; DL_ERR_IO
 * when the file cannot be read or Redis is unreachable or refuses (err
 * says which, naming host:port). */
dl_status dl_redis_publish(const dl_redis_conf *c, const char *model, int64_t version,
                           const char *weights_path, int64_t *receivers, dl_err *err);

/* Called on the watcher thread for each valid announcement: model is a
 * valid model name (borrowed for the call), version >= 1. After each
 * reconnection it is called once with model NULL and version 0:
 * announcements may have been missed, look at the repository again. */
typedef void (*dl_redis_announce_fn)(void *ctx, const char *model, int64_t version);

typedef struct dl_redis_watch dl_redis_watch;

/* Starts a thread with its own connection that SUBSCRIBEs to
 * dlserve:models and calls on_announce for each valid message
 * ({"model": "<name>", "version": N, ...}); invalid messages are logged
 * and ignored. It reconnects with the links' backoff when the connection
 * drops. Redis being down is not an error here: *out (new) is returned
 * and keeps trying. Fails only for bad arguments or resources. */
dl_status dl_redis_watch_start(const dl_redis_conf *c, dl_redis_announce_fn on_announce,
                               void *ctx, dl_redis_watch **out, dl_err *err);
/* Stops and joins the thread (within about a second: connects and
 * commands on this connection time out after min(timeout_ms, 400 ms)),
 * then frees the watcher. NULL does nothing. */
void dl_redis_watch_stop(dl_redis_watch *w);

/* ---- the effectively-once sink ------------------------------------------ */

/* One prediction to store: value[0..len) is binary-safe. */
typedef struct dl_redis_result {
    const char *id;
    const char *value;
    size_t      len;
} dl_redis_result;

/* The next offset to consume of one partition. */
typedef struct dl_redis_offset {
    const char *topic;
    int32_t     partition;
    int64_t     next;
} dl_redis_offset;

/* Writes, in one pipelined MULTI/EXEC, `SET dlserve:result:<id> <value>
 * [EX ttl_s]` (EX when ttl_s > 0) per result and `HSET
 * dlserve:offsets:<group>:<topic> <partition> <next>` per offset; nres or
 * noffs may be 0 (both 0: nothing to do, DL_OK). DL_OK only when EXEC
 * applied the transaction and no command in it failed. DL_ERR_IO on any
 * error, with the reason in err: then nothing (connection lost before
 * EXEC, EXECABORT) or, for an error inside EXEC (e.g. WRONGTYPE), the
 * other commands were written; retrying the whole batch is safe. */
dl_status dl_redis_commit(dl_redis_link *l, const char *group, const dl_redis_result *res,
                          int nres, const dl_redis_offset *offs, int noffs, int64_t ttl_s,
                          dl_err *err);

/* The stored next offset of (group, topic, partition) in *next, -1 when
 * none is stored. DL_ERR_IO when Redis is down or refuses;
 * DL_ERR_INVALID when the stored value is not an integer >= 0. */
dl_status dl_redis_offset_get(dl_redis_link *l, const char *group, const char *topic,
                              int32_t partition, int64_t *next, dl_err *err);

/* ---- status and metrics ------------------------------------------------- */

/* New JSON object: {"role", "address": "host:port", "connected": bool,
 * "reconnects": connections made after the first, "errors": failed
 * connects, lost connections and error replies, "last_error": "..." ("" if
 * none)}; NULL for a NULL link or watcher. Any thread. */
json_t *dl_redis_link_status(dl_redis_link *l);
json_t *dl_redis_watch_status(dl_redis_watch *w);

/* Appends Prometheus text for all links (NULL entries skipped) and the
 * watcher (may be NULL), each family once:
 *   dlserve_redis_up{role}                gauge    1 connected, 0 not
 *   dlserve_redis_reconnects_total{role}  counter
 *   dlserve_redis_errors_total{role}      counter
 * Roles should be distinct. Nothing is appended when there is nothing
 * to report. Any thread. */
void dl_redis_metrics(dl_sbuf *out, dl_redis_link *const *links, int nlinks,
                      dl_redis_watch *w);

#ifdef __cplusplus
}
#endif
#endif /* DL_REDIS_H */
