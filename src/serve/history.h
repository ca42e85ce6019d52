/* history.h (private to serve/): the status page's history (history.c): a
 * ring of snapshots the daemon takes every HISTORY_INTERVAL_S seconds, so
 * that the page, opened or reloaded, draws the last HISTORY_SAMPLES of
 * them at once (GET /status/history). A snapshot holds cumulative
 * counters and gauges; the page derives rates and percentiles from two
 * in a row, as it does from its own polls. Any thread may call any
 * function here. */
#ifndef DL_SERVE_HISTORY_H
#define DL_SERVE_HISTORY_H

#include "serve/serve.h"

#define HISTORY_INTERVAL_S 2
#define HISTORY_SAMPLES    450   /* 15 minutes */

typedef struct history history;

dl_status history_new(history **out, dl_err *err);
/* NULL does nothing. */
void history_free(history *hs);

/* A snapshot (new; NULL when out of memory) at uptime t from what /status
 * and /metrics answer: status {"models": registry_status, "batcher":
 * batcher_status, "counters": stats_json, "kafka"?: kafka_status}
 * (borrowed) and the Prometheus text prom:
 *   {"t", "models": [names], "counts": {model: requests},
 *    "buckets": {model: [[le or null (+Inf), cumulative n], ...]},
 *    "queue": {model: samples}, "codes": {http code: answers},
 *    "cpu": CPU seconds, "rss": bytes,
 *    "kafka"?: {"in", "out", "dead", "p50_ms", "p99_ms", "lag": {"topic/p": n or null}}}
 * status.js builds the same object from its own polls. */
json_t *history_snapshot(double t, json_t *status, const char *prom);

/* Appends a snapshot (taken; NULL does nothing), dropping the oldest
 * beyond HISTORY_SAMPLES. */
void history_add(history *hs, json_t *snapshot);

/* {"interval_s", "samples": [oldest .. newest]} (new; NULL when out of
 * memory). */
json_t *history_json(history *hs);

#endif /* DL_SERVE_HISTORY_H */
