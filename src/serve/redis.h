/* redis.h (private to serve/): the daemon's Redis side (hiredis), built
 * when DL_HAVE_REDIS is set.
 *
 *   Kafka sink --redis_commit--> dlserve:result:<id>            (string, TTL)
 *                                dlserve:offsets:<group>:<topic> (hash partition -> next)
 *   training  --dl_redis_publish--> dlserve:model:<name>        (hash version, path, sha256)
 *                                   PUBLISH dlserve:models {"model","version","path","sha256"}
 *             --dl_redis_progress--> dlserve:train:<model>      (stream)
 *   registry watcher <--SUBSCRIBE dlserve:models
 *
 * A redis_link (created with dl_redis_link_new, dl_serve.h) connects
 * lazily and, after any error, drops its connection and reconnects on a
 * later call once its backoff (100 ms doubling to 5 s, reset on success)
 * has passed; calls during the backoff fail at once with DL_ERR_IO. A
 * lost connection is logged once, its return too. Connect and command
 * timeouts are the configuration's timeout_ms. Links ignore SIGPIPE from
 * their own writes, so a closed socket is an error, not a dead process.
 *
 * Thread-safety: a redis_link's commands run on one thread at a time (its
 * owner's); redis_link_status and redis_metrics may run on any thread
 * meanwhile. A redis_watch runs its own thread; its status may be read
 * from any thread. */
#ifndef DL_SERVE_REDIS_H
#define DL_SERVE_REDIS_H

#include "serve/dl_serve.h"

#include <jansson.h>

typedef struct redis_link redis_link;
typedef struct redis_watch redis_watch;

/* ---- the effectively-once sink ------------------------------------------ */

/* One prediction to store: value[0..len) is binary-safe. */
typedef struct redis_result {
    const char *id;
    const char *value;
    size_t      len;
} redis_result;

/* The next offset to consume of one partition. */
typedef struct redis_offset {
    const char *topic;
    int32_t     partition;
    int64_t     next;
} redis_offset;

/* Writes, in one pipelined MULTI/EXEC, `SET dlserve:result:<id> <value>
 * [EX ttl_s]` (EX when ttl_s > 0) per result and `HSET
 * dlserve:offsets:<group>:<topic> <partition> <next>` per offset; nres or
 * noffs may be 0 (both 0: nothing to do, DL_OK). DL_OK only when EXEC
 * applied the transaction and no command in it failed. DL_ERR_IO on any
 * error, with the reason in err: then nothing (connection lost before
 * EXEC, EXECABORT) or, for an error inside EXEC (e.g. WRONGTYPE), the
 * other commands were written; retrying the whole batch is safe. */
dl_status redis_commit(redis_link *l, const char *group, const redis_result *res,
                       int nres, const redis_offset *offs, int noffs, int64_t ttl_s,
                       dl_err *err);

/* The stored next offset of (group, topic, partition) in *next, -1 when
 * none is stored. DL_ERR_IO when Redis is down or refuses;
 * DL_ERR_INVALID when the stored value is not an integer >= 0. */
dl_status redis_offset_get(redis_link *l, const char *group, const char *topic,
                           int32_t partition, int64_t *next, dl_err *err);

/* ---- training progress ---------------------------------------------------- */

/* The newest record of dlserve:train:<model> (XREVRANGE + - COUNT 1) as a
 * new JSON object: {"id": "<stream id>", "step": 120, "loss": 0.31, ...}
 * (numbers as numbers, other values as strings). NULL when there is none,
 * Redis is down or the reply is malformed. */
json_t *redis_progress_latest(redis_link *l, const char *model);

/* ---- the registry watcher ------------------------------------------------- */

/* Called on the watcher thread for each valid announcement: model is a
 * valid model name (borrowed for the call), version >= 1. After each
 * reconnection it is called once with model NULL and version 0:
 * announcements may have been missed, look at the repository again. */
typedef void (*redis_announce_fn)(void *ctx, const char *model, int64_t version);

/* Starts a thread with its own connection that SUBSCRIBEs to
 * dlserve:models and calls on_announce for each valid message
 * ({"model": "<name>", "version": N, ...}); invalid messages are logged
 * and ignored. It reconnects with the links' backoff when the connection
 * drops. Redis being down is not an error here: *out (new) is returned
 * and keeps trying. Fails only for bad arguments or resources. */
dl_status redis_watch_start(const dl_redis_conf *c, redis_announce_fn on_announce,
                            void *ctx, redis_watch **out, dl_err *err);
/* Stops and joins the thread (within about a second: connects and
 * commands on this connection time out after min(timeout_ms, 400 ms)),
 * then frees the watcher. NULL does nothing. */
void redis_watch_stop(redis_watch *w);

/* ---- status and metrics --------------------------------------------------- */

/* New JSON object: {"role", "address": "host:port", "connected": bool,
 * "reconnects": connections made after the first, "errors": failed
 * connects, lost connections and error replies, "last_error": "..." ("" if
 * none)}. Any thread. */
json_t *redis_link_status(redis_link *l);
json_t *redis_watch_status(redis_watch *w);

/* Appends Prometheus text for all links (NULL entries skipped) and the
 * watcher (may be NULL), each family once:
 *   dlserve_redis_up{role}                gauge    1 connected, 0 not
 *   dlserve_redis_reconnects_total{role}  counter
 *   dlserve_redis_errors_total{role}      counter
 * Roles should be distinct. Nothing is appended when there is nothing
 * to report. Any thread. */
void redis_metrics(dl_sbuf *out, redis_link *const *links, int nlinks, redis_watch *w);

#endif /* DL_SERVE_REDIS_H */
