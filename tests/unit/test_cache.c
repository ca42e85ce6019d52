/* test_cache.c: the response cache (serve/cache.c): hits and misses by
 * the whole key, eviction of the least recently used by bytes, the bytes
 * it counts, versions and loads kept apart, a version's entries dropped,
 * and threads hitting and filling one small cache at once. */
#include <criterion/criterion.h>

#include "serve/cache.h"

#include <pthread.h>
#include <stdlib.h>
#include <string.h>

#define IN 16    /* floats of input */
#define OUT 4    /* floats of output */

static cache_key key(const char *model, int64_t version, uint64_t load, const float *x)
{
    return (cache_key){.model = model, .version = version, .load = load, .x = x,
                       .x_len = IN * sizeof(float)};
}

/* Inputs and outputs that tell sample `i` apart. */
static void fill(float *x, float *y, int i)
{
    for (int k = 0; k < IN; k++)
        x[k] = (float)i + (float)k * 0.25f;
    for (int k = 0; y && k < OUT; k++)
        y[k] = (float)i * 10.0f + (float)k;
}

static cache *new_cache(size_t bytes)
{
    cache *c = NULL;
    dl_err err = {0};
    cr_assert_eq(cache_new(bytes, &c, &err), DL_OK, "%s", err.msg);
    return c;
}

Test(cache, hit_and_miss_by_the_whole_key)
{
    cache *c = new_cache(1 << 20);
    float x[IN], y[OUT], got[OUT];
    fill(x, y, 1);
    cache_key k = key("m", 1, 7, x);
    cr_expect_not(cache_get(c, &k, got, sizeof(got)), "empty: a miss");
    cr_assert(cache_put(c, &k, y, sizeof(y)));
    memset(got, 0, sizeof(got));
    cr_assert(cache_get(c, &k, got, sizeof(got)));
    cr_expect_eq(memcmp(got, y, sizeof(y)), 0, "the stored bits");

    float x2[IN];
    memcpy(x2, x, sizeof(x));
    x2[IN - 1] = -x2[IN - 1];   /* one input differs */
    cache_key k2 = key("m", 1, 7, x2);
    cr_expect_not(cache_get(c, &k2, got, sizeof(got)));
    cache_key other = key("n", 1, 7, x);
    cr_expect_not(cache_get(c, &other, got, sizeof(got)), "another model");
    cache_key shorter = k;
    shorter.x_len -= sizeof(float);
    cr_expect_not(cache_get(c, &shorter, got, sizeof(got)), "a prefix of the inputs");
    cr_expect_not(cache_get(c, &k, got, sizeof(got) - 4), "another answer length");

    /* the first answer stays */
    float y2[OUT] = {9, 9, 9, 9};
    cr_expect_not(cache_put(c, &k, y2, sizeof(y2)));
    cr_assert(cache_get(c, &k, got, sizeof(got)));
    cr_expect_eq(memcmp(got, y, sizeof(y)), 0);
    cache_free(c);
}

Test(cache, versions_and_loads_apart)
{
    cache *c = new_cache(1 << 20);
    float x[IN], y1[OUT], y2[OUT], got[OUT];
    fill(x, y1, 1);
    fill(x, y2, 2);
    fill(x, NULL, 1);   /* the same inputs for both versions */
    cache_key v1 = key("m", 1, 1, x), v2 = key("m", 2, 2, x), reload = key("m", 1, 3, x);
    cr_assert(cache_put(c, &v1, y1, sizeof(y1)));
    cr_expect_not(cache_get(c, &v2, got, sizeof(got)), "version 2 never answers from 1's");
    cr_expect_not(cache_get(c, &reload, got, sizeof(got)), "nor does version 1 loaded again");
    cr_assert(cache_put(c, &v2, y2, sizeof(y2)));
    cr_assert(cache_get(c, &v2, got, sizeof(got)));
    cr_expect_eq(memcmp(got, y2, sizeof(y2)), 0);
    cr_assert(cache_get(c, &v1, got, sizeof(got)));
    cr_expect_eq(memcmp(got, y1, sizeof(y1)), 0);

    /* version 1 retired: its entries go, version 2's stay */
    cache_drop(c, "m", 1, 1);
    cr_expect_not(cache_get(c, &v1, got, sizeof(got)));
    cr_expect(cache_get(c, &v2, got, sizeof(got)));
    cache_usage u;
    cache_get_usage(c, &u);
    cr_expect_eq(u.entries, 1);
    cr_expect_eq(u.bytes, cache_entry_bytes(&v2, sizeof(y2)));
    cache_free(c);
}

Test(cache, bytes_counted)
{
    float x[IN], y[OUT];
    fill(x, y, 0);
    cache_key k = key("model", 1, 1, x);
    size_t one = cache_entry_bytes(&k, sizeof(y));
    cr_expect_eq(one, strlen("model") + CACHE_KEY_FIXED + sizeof(x) + sizeof(y));

    cache *c = new_cache(10 * one);
    for (int i = 0; i < 5; i++) {
        fill(x, y, i);
        cr_assert(cache_put(c, &k, y, sizeof(y)));
    }
    cache_usage u;
    cache_get_usage(c, &u);
    cr_expect_eq(u.entries, 5);
    cr_expect_eq(u.bytes, 5 * one);
    cr_expect_eq(u.capacity, 10 * one);
    cr_expect_eq(u.inserts, 5);
    cr_expect_eq(u.evictions, 0);

    /* an answer larger than the whole cache is not kept */
    size_t big = 10 * one;
    void *huge = calloc(1, big);
    cr_expect_not(cache_put(c, &k, huge, big));
    free(huge);
    cache_get_usage(c, &u);
    cr_expect_eq(u.bytes, 5 * one);

    dl_sbuf b = {0};
    cache_metrics(c, &b);
    cr_assert_not_null(b.s);
    char line[128];
    snprintf(line, sizeof(line), "\ndlserve_cache_bytes %zu\n", 5 * one);
    cr_expect_not_null(strstr(b.s, line), "%s", b.s);
    cr_expect_not_null(strstr(b.s, "\ndlserve_cache_entries 5\n"), "%s", b.s);
    dl_sbuf_free(&b);
    cache_free(c);
}

Test(cache, least_recently_used_evicted_by_size)
{
    float xa[IN], xb[IN], xc[IN], ya[OUT], yb[OUT], yc[OUT], got[OUT];
    fill(xa, ya, 1);
    fill(xb, yb, 2);
    fill(xc, yc, 3);
    cache_key a = key("m", 1, 1, xa), b = key("m", 1, 1, xb), c3 = key("m", 1, 1, xc);
    size_t one = cache_entry_bytes(&a, sizeof(ya));
    cache *c = new_cache(2 * one + one / 2);   /* room for two */
    cr_assert(cache_put(c, &a, ya, sizeof(ya)));
    cr_assert(cache_put(c, &b, yb, sizeof(yb)));
    cr_assert(cache_get(c, &a, got, sizeof(got)));   /* a used last: b is the oldest */
    cr_assert(cache_put(c, &c3, yc, sizeof(yc)));
    cr_expect_not(cache_get(c, &b, got, sizeof(got)), "b evicted");
    cr_expect(cache_get(c, &a, got, sizeof(got)));
    cr_expect_eq(memcmp(got, ya, sizeof(ya)), 0);
    cr_expect(cache_get(c, &c3, got, sizeof(got)));
    cache_usage u;
    cache_get_usage(c, &u);
    cr_expect_eq(u.entries, 2);
    cr_expect_eq(u.bytes, 2 * one);
    cr_expect_eq(u.evictions, 1);

    /* a larger entry evicts as many as it needs */
    float big[3 * OUT / 2];
    memset(big, 0, sizeof(big));
    float xd[IN];
    fill(xd, NULL, 4);
    cache_key d = key("m", 1, 1, xd);
    size_t dbytes = cache_entry_bytes(&d, sizeof(big));
    cr_assert_leq(dbytes, 2 * one + one / 2);
    cr_assert(cache_put(c, &d, big, sizeof(big)));
    cache_get_usage(c, &u);
    cr_expect_leq(u.bytes, 2 * one + one / 2);
    cr_expect(cache_get(c, &d, big, sizeof(big)));
    cache_free(c);
}

Test(cache, many_entries)
{
    cache *c = new_cache(64 << 20);
    float x[IN], y[OUT], got[OUT];
    for (int i = 0; i < 20000; i++) {
        fill(x, y, i);
        cache_key k = key("m", 1, 1, x);
        cr_assert(cache_put(c, &k, y, sizeof(y)));
    }
    for (int i = 0; i < 20000; i += 7) {
        fill(x, y, i);
        cache_key k = key("m", 1, 1, x);
        cr_assert(cache_get(c, &k, got, sizeof(got)), "entry %d", i);
        cr_assert_eq(memcmp(got, y, sizeof(y)), 0, "entry %d", i);
    }
    cache_usage u;
    cache_get_usage(c, &u);
    cr_expect_eq(u.entries, 20000);
    cache_free(c);
}

/* Threads filling and reading one cache that holds a fraction of their
 * keys: every hit holds its own key's answer. */
#define THREADS 4
#define KEYS 2000

static void *worker(void *arg)
{
    cache *c = arg;
    float x[IN], y[OUT], got[OUT];
    unsigned seed = (unsigned)(uintptr_t)&x;
    long bad = 0;
    for (int n = 0; n < 20000; n++) {
        int i = (int)(rand_r(&seed) % KEYS);
        fill(x, y, i);
        cache_key k = key(i % 2 ? "odd" : "even", 1 + i % 3, 1, x);
        if (cache_get(c, &k, got, sizeof(got))) {
            bad += memcmp(got, y, sizeof(y)) != 0;
        } else {
            cache_put(c, &k, y, sizeof(y));
        }
        if (n % 5000 == 0)
            cache_drop(c, "odd", 2, 1);
    }
    return (void *)bad;
}

Test(cache, threads)
{
    float x[IN];
    fill(x, NULL, 0);
    cache_key k = key("even", 1, 1, x);
    size_t one = cache_entry_bytes(&k, OUT * sizeof(float));
    cache *c = new_cache(300 * one);
    pthread_t t[THREADS];
    for (int i = 0; i < THREADS; i++)
        cr_assert_eq(pthread_create(&t[i], NULL, worker, c), 0);
    long bad = 0;
    for (int i = 0; i < THREADS; i++) {
        void *r;
        pthread_join(t[i], &r);
        bad += (long)r;
    }
    cr_expect_eq(bad, 0, "answers of other keys");
    cache_usage u;
    cache_get_usage(c, &u);
    cr_expect_leq(u.bytes, 300 * one);
    cr_expect_gt(u.evictions, 0);
    /* "odd" and "even" differ by one byte: each entry is one or one - 1 */
    cr_expect_leq(u.bytes, u.entries * one);
    cr_expect_geq(u.bytes, u.entries * (one - 1));
    cache_free(c);
}
