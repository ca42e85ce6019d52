/* cache.h (private to serve/): the response cache (cache.c), Triton's: the
 * answers of inference requests kept in memory, keyed by the model, its
 * version and the request's raw input bytes, so that the same inputs
 * again are answered without running the model. Bounded in bytes, the
 * least recently used entries evicted first. A plain data structure: it
 * knows nothing of requests or models (batcher.h's infer_req_cache_*
 * use it for the transports). Any thread may call any function here. */
#ifndef DL_SERVE_CACHE_H
#define DL_SERVE_CACHE_H

#include "util/dl_util.h"

#include <stddef.h>
#include <stdint.h>

typedef struct cache cache;

/* What one entry is found by: the model's name, its version and which
 * load of that version it is (served's load_id: a version loaded again
 * from disk, its files perhaps changed, never answers from the entries of
 * an earlier load), and the request's raw input bytes. The cache copies
 * what it keeps. */
typedef struct cache_key {
    const char *model;
    int64_t     version;
    uint64_t    load;
    const void *x;
    size_t      x_len;
} cache_key;

/* The bytes an entry holds against the cache's bound: its key (the
 * model's name, 16 bytes of version and load, the inputs) and its value. */
#define CACHE_KEY_FIXED 16
size_t cache_entry_bytes(const cache_key *k, size_t value_len);

/* A cache of at most `bytes` bytes of entries (cache_entry_bytes). *out
 * is new, NULL on failure. */
dl_status cache_new(size_t bytes, cache **out, dl_err *err);
void cache_free(cache *c);

/* Looks k up: on a hit copies the entry's value into dst (dst_len bytes:
 * an entry of another length is a miss) and marks the entry the most
 * recently used. True on a hit. */
bool cache_get(cache *c, const cache_key *k, void *dst, size_t dst_len);

/* Keeps value (len bytes) under k, evicting the least recently used
 * entries until the cache holds at most its bound. An entry already there
 * for k stays as it is (the first answer stored is the one kept); an
 * entry larger than the whole bound is not kept. False when nothing was
 * stored (out of memory, too large, or already there). */
bool cache_put(cache *c, const cache_key *k, const void *value, size_t len);

/* Drops every entry of (model, version, load): a version retired. */
void cache_drop(cache *c, const char *model, int64_t version, uint64_t load);

/* What the cache holds now, and its totals. */
typedef struct cache_usage {
    size_t   bytes, entries, capacity;
    uint64_t inserts, evictions;
} cache_usage;
void cache_get_usage(cache *c, cache_usage *u);

/* The gauges dlserve_cache_bytes, dlserve_cache_entries and
 * dlserve_cache_capacity_bytes and the counters dlserve_cache_inserts_total
 * and dlserve_cache_evictions_total, appended to out. */
void cache_metrics(cache *c, dl_sbuf *out);

#endif /* DL_SERVE_CACHE_H */
