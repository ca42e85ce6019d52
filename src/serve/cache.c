/* cache.c: the response cache: a hash table of entries chained in
 * buckets, and a list of them from the most to the least recently used,
 * under one mutex. Keys are hashed and entries built or freed outside it:
 * inside, a lookup compares the full key and copies the value, an
 * insertion links the entry and unlinks what it evicts. */
#define _POSIX_C_SOURCE 200809L
#include "serve/cache.h"

#include <pthread.h>
#include <stdlib.h>
#include <string.h>

#define FIRST_BUCKETS 256

typedef struct centry {
    struct centry *chain;           /* the next in its bucket */
    struct centry *newer, *older;   /* the recency list */
    uint64_t       hash;
    int64_t        version;
    uint64_t       load;
    size_t         model_len, x_len, value_len;
    size_t         bytes;           /* cache_entry_bytes */
    unsigned char  data[];          /* the value, the model's name, the inputs */
} centry;

struct cache {
    pthread_mutex_t mu;
    centry        **buckets;
    size_t          nbuckets;       /* a power of two */
    centry         *newest, *oldest;
    size_t          bytes, entries, capacity;
    uint64_t        inserts, evictions;
};

/* ---- hashing -------------------------------------------------------------- */

/* xxHash64's primes and rounds, four lanes over 32-byte stripes: the
 * inputs are kilobytes of floats, hashed at several bytes a cycle. */
#define P1 UINT64_C(0x9E3779B185EBCA87)
#define P2 UINT64_C(0xC2B2AE3D27D4EB4F)
#define P3 UINT64_C(0x165667B19E3779F9)
#define P4 UINT64_C(0x85EBCA77C2B2AE63)

static uint64_t rotl(uint64_t v, int r)
{
    return (v << r) | (v >> (64 - r));
}

static uint64_t round64(uint64_t acc, uint64_t in)
{
    return rotl(acc + in * P2, 31) * P1;
}

static uint64_t word(const unsigned char *p)
{
    uint64_t w;
    memcpy(&w, p, sizeof(w));
    return w;
}

static uint64_t hash_bytes(uint64_t seed, const void *data, size_t n)
{
    const unsigned char *p = data, *end = p + n;
    uint64_t h;
    if (n >= 32) {
        uint64_t a = seed + P1 + P2, b = seed + P2, c = seed, d = seed - P1;
        for (; end - p >= 32; p += 32) {
            a = round64(a, word(p));
            b = round64(b, word(p + 8));
            c = round64(c, word(p + 16));
            d = round64(d, word(p + 24));
        }
        h = rotl(a, 1) + rotl(b, 7) + rotl(c, 12) + rotl(d, 18);
        h = (h ^ round64(0, a)) * P1 + P4;
        h = (h ^ round64(0, b)) * P1 + P4;
        h = (h ^ round64(0, c)) * P1 + P4;
        h = (h ^ round64(0, d)) * P1 + P4;
    } else {
        h = seed + P3;
    }
    h += (uint64_t)n;
    for (; end - p >= 8; p += 8)
        h = rotl(h ^ round64(0, word(p)), 27) * P1 + P4;
    for (; p < end; p++)
        h = rotl(h ^ (*p * P3), 11) * P1;
    h ^= h >> 33;
    h *= P2;
    h ^= h >> 29;
    h *= P3;
    return h ^ (h >> 32);
}

static uint64_t key_hash(const cache_key *k, size_t model_len)
{
    uint64_t h = hash_bytes(0, k->model, model_len);
    h = hash_bytes(h, &k->version, sizeof(k->version));
    h = hash_bytes(h, &k->load, sizeof(k->load));
    return hash_bytes(h, k->x, k->x_len);
}

/* ---- entries ---------------------------------------------------------------- */

size_t cache_entry_bytes(const cache_key *k, size_t value_len)
{
    return strlen(k->model) + CACHE_KEY_FIXED + k->x_len + value_len;
}

static const unsigned char *entry_model(const centry *e)
{
    return e->data + e->value_len;
}

static const unsigned char *entry_x(const centry *e)
{
    return e->data + e->value_len + e->model_len;
}

static bool matches(const centry *e, const cache_key *k, uint64_t h, size_t model_len)
{
    return e->hash == h && e->version == k->version && e->load == k->load &&
           e->model_len == model_len && e->x_len == k->x_len &&
           memcmp(entry_model(e), k->model, model_len) == 0 &&
           memcmp(entry_x(e), k->x, k->x_len) == 0;
}

/* ---- lifecycle ---------------------------------------------------------------- */

dl_status cache_new(size_t bytes, cache **out, dl_err *err)
{
    *out = NULL;
    cache *c = calloc(1, sizeof(*c));
    if (c)
        c->buckets = calloc(FIRST_BUCKETS, sizeof(*c->buckets));
    if (!c || !c->buckets) {
        free(c);
        return dl_err_set(err, DL_ERR_NOMEM, "response cache");
    }
    pthread_mutex_init(&c->mu, NULL);
    c->nbuckets = FIRST_BUCKETS;
    c->capacity = bytes;
    *out = c;
    return DL_OK;
}

static void free_list(centry *e)
{
    while (e) {
        centry *next = e->chain;
        free(e);
        e = next;
    }
}

void cache_free(cache *c)
{
    if (!c)
        return;
    for (centry *e = c->newest, *next; e; e = next) {
        next = e->older;
        free(e);
    }
    free(c->buckets);
    pthread_mutex_destroy(&c->mu);
    free(c);
}

/* ---- the list and the table (c->mu held) ---------------------------------------- */

static void list_unlink(cache *c, centry *e)
{
    if (e->newer)
        e->newer->older = e->older;
    else
        c->newest = e->older;
    if (e->older)
        e->older->newer = e->newer;
    else
        c->oldest = e->newer;
    e->newer = e->older = NULL;
}

static void list_push(cache *c, centry *e)
{
    e->newer = NULL;
    e->older = c->newest;
    if (c->newest)
        c->newest->newer = e;
    else
        c->oldest = e;
    c->newest = e;
}

/* Takes e out of the table and the list; its chain link is free after. */
static void unlink_entry(cache *c, centry *e)
{
    centry **link = &c->buckets[e->hash & (c->nbuckets - 1)];
    while (*link != e)
        link = &(*link)->chain;
    *link = e->chain;
    list_unlink(c, e);
    c->bytes -= e->bytes;
    c->entries--;
}

/* Twice the buckets once there are more entries than buckets; a table
 * that cannot grow keeps its longer chains. */
static void maybe_grow(cache *c)
{
    if (c->entries < c->nbuckets)
        return;
    size_t n = c->nbuckets * 2;
    centry **b = calloc(n, sizeof(*b));
    if (!b)
        return;
    for (size_t i = 0; i < c->nbuckets; i++)
        for (centry *e = c->buckets[i], *next; e; e = next) {
            next = e->chain;
            e->chain = b[e->hash & (n - 1)];
            b[e->hash & (n - 1)] = e;
        }
    free(c->buckets);
    c->buckets = b;
    c->nbuckets = n;
}

/* ---- lookups and insertions -------------------------------------------------------- */

bool cache_get(cache *c, const cache_key *k, void *dst, size_t dst_len)
{
    size_t model_len = strlen(k->model);
    uint64_t h = key_hash(k, model_len);
    bool hit = false;
    pthread_mutex_lock(&c->mu);
    for (centry *e = c->buckets[h & (c->nbuckets - 1)]; e; e = e->chain) {
        if (!matches(e, k, h, model_len))
            continue;
        if (e->value_len == dst_len) {
            memcpy(dst, e->data, dst_len);
            list_unlink(c, e);
            list_push(c, e);
            hit = true;
        }
        break;
    }
    pthread_mutex_unlock(&c->mu);
    return hit;
}

bool cache_put(cache *c, const cache_key *k, const void *value, size_t len)
{
    size_t bytes = cache_entry_bytes(k, len);
    if (bytes > c->capacity)
        return false;
    size_t model_len = strlen(k->model);
    centry *e = malloc(sizeof(*e) + len + model_len + k->x_len);
    if (!e)
        return false;
    *e = (centry){.hash = key_hash(k, model_len), .version = k->version, .load = k->load,
                  .model_len = model_len, .x_len = k->x_len, .value_len = len, .bytes = bytes};
    memcpy(e->data, value, len);
    memcpy(e->data + len, k->model, model_len);
    memcpy(e->data + len + model_len, k->x, k->x_len);

    centry *evicted = NULL;
    pthread_mutex_lock(&c->mu);
    for (centry *o = c->buckets[e->hash & (c->nbuckets - 1)]; o; o = o->chain) {
        if (matches(o, k, e->hash, model_len)) {   /* the first answer stays */
            pthread_mutex_unlock(&c->mu);
            free(e);
            return false;
        }
    }
    maybe_grow(c);
    centry **bucket = &c->buckets[e->hash & (c->nbuckets - 1)];
    e->chain = *bucket;
    *bucket = e;
    list_push(c, e);
    c->bytes += bytes;
    c->entries++;
    c->inserts++;
    while (c->bytes > c->capacity) {   /* e alone fits: it is never the oldest here */
        centry *old = c->oldest;
        unlink_entry(c, old);
        old->chain = evicted;
        evicted = old;
        c->evictions++;
    }
    pthread_mutex_unlock(&c->mu);
    free_list(evicted);
    return true;
}

void cache_drop(cache *c, const char *model, int64_t version, uint64_t load)
{
    size_t model_len = strlen(model);
    centry *dropped = NULL;
    pthread_mutex_lock(&c->mu);
    for (centry *e = c->newest, *next; e; e = next) {
        next = e->older;
        if (e->version == version && e->load == load && e->model_len == model_len &&
            memcmp(entry_model(e), model, model_len) == 0) {
            unlink_entry(c, e);
            e->chain = dropped;
            dropped = e;
        }
    }
    pthread_mutex_unlock(&c->mu);
    free_list(dropped);
}

void cache_get_usage(cache *c, cache_usage *u)
{
    pthread_mutex_lock(&c->mu);
    *u = (cache_usage){.bytes = c->bytes, .entries = c->entries, .capacity = c->capacity,
                       .inserts = c->inserts, .evictions = c->evictions};
    pthread_mutex_unlock(&c->mu);
}

void cache_metrics(cache *c, dl_sbuf *out)
{
    cache_usage u;
    cache_get_usage(c, &u);
    dl_prom_family(out, "dlserve_cache_bytes", "gauge",
                   "Bytes of the response cache's entries (keys and answers).");
    dl_prom_sample(out, "dlserve_cache_bytes", (double)u.bytes, NULL);
    dl_prom_family(out, "dlserve_cache_entries", "gauge", "Answers in the response cache.");
    dl_prom_sample(out, "dlserve_cache_entries", (double)u.entries, NULL);
    dl_prom_family(out, "dlserve_cache_capacity_bytes", "gauge",
                   "The response cache's bound in bytes ([cache] bytes).");
    dl_prom_sample(out, "dlserve_cache_capacity_bytes", (double)u.capacity, NULL);
    dl_prom_family(out, "dlserve_cache_inserts_total", "counter",
                   "Answers stored in the response cache.");
    dl_prom_sample(out, "dlserve_cache_inserts_total", (double)u.inserts, NULL);
    dl_prom_family(out, "dlserve_cache_evictions_total", "counter",
                   "Answers evicted from the response cache to make room, least recently "
                   "used first.");
    dl_prom_sample(out, "dlserve_cache_evictions_total", (double)u.evictions, NULL);
}
