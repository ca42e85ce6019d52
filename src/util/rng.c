/* rng.c: a small deterministic generator (xorshift128+ seeded through
 * splitmix64) and the clock. Same seed, same stream, on every machine. */
#define _POSIX_C_SOURCE 200809L
#include "util/dl_util.h"

#include <math.h>
#include <time.h>

static uint64_t splitmix64(uint64_t *x)
{
    uint64_t z = (*x += 0x9E3779B97F4A7C15ull);
    z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
    z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
    return z ^ (z >> 31);
}

void dl_rng_seed(dl_rng *rng, uint64_t seed)
{
    uint64_t x = seed;
    rng->s[0] = splitmix64(&x);
    rng->s[1] = splitmix64(&x);
    if (!rng->s[0] && !rng->s[1])
        rng->s[1] = 1;
}

uint64_t dl_rng_next(dl_rng *rng)
{
    uint64_t s1 = rng->s[0];
    const uint64_t s0 = rng->s[1];
    const uint64_t result = s0 + s1;
    rng->s[0] = s0;
    s1 ^= s1 << 23;
    rng->s[1] = s1 ^ s0 ^ (s1 >> 18) ^ (s0 >> 5);
    return result;
}

float dl_rng_uniform(dl_rng *rng)
{
    return (float)(dl_rng_next(rng) >> 40) * (1.0f / 16777216.0f);
}

float dl_rng_normal(dl_rng *rng)
{
    double u1 = ((double)(dl_rng_next(rng) >> 11) + 1.0) * (1.0 / 9007199254740993.0);
    double u2 = (double)(dl_rng_next(rng) >> 11) * (1.0 / 9007199254740992.0);
    return (float)(sqrt(-2.0 * log(u1)) * cos(6.283185307179586 * u2));
}

uint64_t dl_rng_below(dl_rng *rng, uint64_t n)
{
    uint64_t limit = UINT64_MAX - UINT64_MAX % n;
    uint64_t r;
    do
        r = dl_rng_next(rng);
    while (r >= limit);
    return r % n;
}

double dl_time_now(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + (double)ts.tv_nsec * 1e-9;
}
