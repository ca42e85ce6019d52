/* loader.c: the per-epoch deterministic shuffle, steps per epoch, the
 * split of each global batch across ranks, and gathering samples. */
#include "data/dl_data.h"

#include <string.h>

/* A bijective 64-bit finaliser (murmur3's fmix64): distinct epochs give
 * distinct, well-spread seeds even for adjacent values. */
static uint64_t mix64(uint64_t x)
{
    x ^= x >> 33;
    x *= 0xff51afd7ed558ccdull;
    x ^= x >> 33;
    x *= 0xc4ceb9fe1a85ec53ull;
    x ^= x >> 33;
    return x;
}

void dl_data_permutation(uint64_t seed, int64_t epoch, int64_t n,
                         int64_t *perm)
{
    dl_rng rng;
    dl_rng_seed(&rng, seed ^ mix64((uint64_t)epoch + 0x9E3779B97F4A7C15ull));
    for (int64_t i = 0; i < n; i++)
        perm[i] = i;
    /* Fisher-Yates from the top: perm[i] swaps with a uniform j <= i. */
    for (int64_t i = n - 1; i > 0; i--) {
        int64_t j = (int64_t)dl_rng_below(&rng, (uint64_t)i + 1);
        int64_t t = perm[i];
        perm[i] = perm[j];
        perm[j] = t;
    }
}

int64_t dl_data_steps(int64_t n, int64_t global_batch)
{
    DL_ASSERT(global_batch > 0);
    if (n <= 0)
        return 0;
    return n / global_batch + (n % global_batch != 0);
}

void dl_data_shard(int64_t n, int64_t batch, int rank, int nranks,
                   int64_t step, int64_t *begin, int64_t *count)
{
    DL_ASSERT(batch > 0 && nranks > 0 && rank >= 0 && rank < nranks);
    DL_ASSERT(step >= 0);
    int64_t g = batch * nranks;
    *begin = n > 0 ? n : 0;
    *count = 0;
    /* Past the last step there is nothing; checking first keeps step * g
     * from overflowing. */
    if (step >= dl_data_steps(n, g))
        return;
    int64_t start = step * g;
    int64_t len = n - start < g ? n - start : g;
    /* len samples in nranks contiguous parts, the first len % nranks one
     * longer; a full batch gives exactly `batch` each. */
    int64_t q = len / nranks, rem = len % nranks;
    *begin = start + rank * q + (rank < rem ? rank : rem);
    *count = q + (rank < rem);
}

void dl_data_gather(const dl_dataset *ds, const int64_t *idx, int64_t count,
                    float *x, int32_t *y)
{
    /* Asking for labels a dataset lacks is a bug in the caller. */
    DL_ASSERT(!y || ds->y);
    size_t row = (size_t)ds->dim * sizeof(float);
    for (int64_t i = 0; i < count; i++) {
        int64_t k = idx[i];
        DL_ASSERT(k >= 0 && k < ds->n);
        memcpy(x + i * ds->dim, ds->x + k * ds->dim, row);
        if (y)
            y[i] = ds->y[k];
    }
}

void dl_data_gather_targets(const dl_dataset *ds, const int64_t *idx, int64_t count,
                            float *t)
{
    DL_ASSERT(ds->t);
    for (int64_t i = 0; i < count; i++)
        memcpy(t + i * ds->tdim, ds->t + idx[i] * ds->tdim, (size_t)ds->tdim * sizeof(float));
}
