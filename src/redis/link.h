/* link.h (private to redis/): what the Redis files share: connections
 * (hiredis contexts with timeouts, AUTH and SELECT), the SIGPIPE guard,
 * each connection's health for /status and /metrics, the reconnect
 * backoff, and the link those make up (redis_link.c).
 *
 *   redis_link.c    connections, health, backoff, links, MULTI/EXEC replies
 *   redis_sink.c    the effectively-once sink: results and offsets
 *   redis_train.c   training progress, announcing versions
 *   redis_watch.c   the registry watcher (SUBSCRIBE dlserve:models)
 *   redis_stats.c   status and metrics of links and the watcher
 *
 * hiredis contexts are blocking with SO_RCVTIMEO/SO_SNDTIMEO set, so no
 * call waits longer than the timeout per reply. A NULL reply means the
 * context is dead: it is freed at once and the link backs off. */
#ifndef DL_REDIS_LINK_H
#define DL_REDIS_LINK_H

#include "redis/dl_redis.h"

#include <hiredis/hiredis.h>
#include <pthread.h>
#include <signal.h>

#define REDIS_CHANNEL "dlserve:models"     /* where versions are announced */

/* ---- SIGPIPE ------------------------------------------------------------
 * hiredis writes with write(2): a peer that has closed raises SIGPIPE,
 * which would kill a training job. Commands run between begin and end,
 * which block it and discard the one our write raised (the write then
 * fails with EPIPE, an I/O error). */

typedef struct redis_nopipe {
    sigset_t old;
} redis_nopipe;

void redis_nopipe_begin(redis_nopipe *np);
void redis_nopipe_end(redis_nopipe *np);

/* ---- health: what /status and /metrics show ------------------------------ */

/* Written by the owner thread, read by the HTTP thread: under mu. */
typedef struct redis_health {
    pthread_mutex_t mu;
    char    role[32];
    char    addr[300];          /* host:port or socket path */
    bool    connected;
    int64_t connects;           /* successful connects (reconnects = connects - 1) */
    int64_t errors;
    char    last_error[256];
} redis_health;

/* The owner's reconnect schedule: 100 ms doubling to 5 s, reset on
 * success. */
typedef struct redis_backoff {
    double delay;               /* seconds; 0 after a success */
    double next_try;            /* dl_time_now() before which we do not connect */
    bool   down_logged;         /* the current outage has been logged */
} redis_backoff;

/* Zeroes h, its mutex initialised, with role and c's address. Destroy
 * h->mu when done. */
void redis_health_init(redis_health *h, const dl_redis_conf *c, const char *role);

/* A connection is up: counts it, resets the backoff and logs the first
 * one and every return after an outage. */
void redis_mark_up(redis_health *h, redis_backoff *bo);

/* Connecting failed or the connection was lost: counts it, schedules the
 * next try and logs the outage once (later failures at debug level). */
void redis_mark_down(redis_health *h, redis_backoff *bo, const char *why);

/* Redis answered with an error: the connection is fine. Logged when the
 * message changes, so a repeating refusal does not flood the log. */
void redis_mark_refused(redis_health *h, const char *why);

/* ---- connections ----------------------------------------------------------- */

/* "host:port", "[v6]:port" or the socket path, for messages. */
void redis_addr(const dl_redis_conf *c, char *buf, size_t n);

/* c's timeout_ms, or 1000 when it is <= 0: never wait forever. */
int redis_timeout(const dl_redis_conf *c);

/* Why a command on ctx got no reply (hiredis reports a socket timeout as
 * EAGAIN's text: this says what it means), as "cmd: reason" in why. */
void redis_io_reason(redisContext *ctx, const char *cmd, int timeout_ms, char *why, size_t n);

/* Connects with timeout_ms for the connect and every reply, turns on
 * keepalive, authenticates and (when select_db) selects c's database.
 * New context, or NULL with *why. */
redisContext *redis_open(const dl_redis_conf *c, int timeout_ms, bool select_db, char *why,
                         size_t n);

/* Reads the replies to MULTI, n queued commands and EXEC, all appended
 * already, so that the connection stays in step whatever happens. On
 * success *exec is EXEC's reply (new): an array of n replies, none an
 * error. Otherwise *io tells whether the connection is dead, and *why
 * says what failed. */
bool redis_read_multi(redisContext *ctx, int n, int timeout_ms, redisReply **exec, bool *io,
                      char *why, size_t whyn);

/* Empties b and writes "prefix" + a [+ ":" + c] into it (b->oom on
 * failure). */
void redis_key(dl_sbuf *b, const char *prefix, const char *a, const char *c);

/* ---- links ------------------------------------------------------------------- */

struct dl_redis_link {
    dl_redis_conf conf;
    int           timeout_ms;
    redisContext *ctx;          /* NULL while down */
    redis_backoff bo;
    redis_health  h;
};

/* Connected, or DL_ERR_IO: at once during the backoff, else after one
 * connect attempt. */
dl_status redis_link_ready(dl_redis_link *l, dl_err *err);

/* Drops a dead connection, schedules the reconnect, and returns
 * DL_ERR_IO "redis <addr>: <why>". */
dl_status redis_link_lost(dl_redis_link *l, const char *why, dl_err *err);

/* Redis refused cmd with msg: DL_ERR_IO. The connection stays unless the
 * refusal means an outage (LOADING, READONLY, MASTERDOWN, NOAUTH, BUSY),
 * which is handled as a lost connection. */
dl_status redis_link_refused(dl_redis_link *l, const char *cmd, const char *msg, dl_err *err);

/* One command (lens may be NULL for NUL-terminated arguments). On DL_OK
 * *out is its reply (new, never an error reply). The caller brackets it
 * with redis_nopipe_begin/end. */
dl_status redis_link_cmd(dl_redis_link *l, int argc, const char **argv, const size_t *lens,
                         redisReply **out, dl_err *err);

/* ---- the watcher ----------------------------------------------------------- */

/* The watcher's health (borrowed), for redis_stats.c. */
redis_health *redis_watch_health(dl_redis_watch *w);

#endif /* DL_REDIS_LINK_H */
