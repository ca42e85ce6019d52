/* pool.c: a fixed pool of worker threads for data-parallel loops (or
 * another runner's threads, dl_pool_set_runner). Idle
 * workers spin for a few microseconds (a training step runs many short
 * loops back to back), then sleep on a condition variable, so the pool
 * never holds cores between jobs. OpenBLAS runs single-threaded inside
 * our tasks, so the process uses at most the pool's threads. */
#define _POSIX_C_SOURCE 200809L
#include "util/dl_util.h"

#include <pthread.h>
#include <sched.h>
#include <stdatomic.h>
#include <stdlib.h>

#define POOL_MAX 256
#define SPINS_DEFAULT 20000   /* polls before a worker or the caller sleeps */

static atomic_int spins = SPINS_DEFAULT;

static struct {
    pthread_mutex_t  mu;
    pthread_cond_t   work, done;
    int              nthreads;    /* including the caller */
    int              started;     /* worker threads running */
    atomic_uint_fast64_t generation;  /* bumped for each job */
    atomic_int       pending;     /* workers still busy with the job */
    atomic_int       sleepers;    /* workers blocked on `work` */
    dl_task_fn       fn;
    void            *ctx;
    int64_t          n;
    int              nchunks;
} pool = { PTHREAD_MUTEX_INITIALIZER, PTHREAD_COND_INITIALIZER,
           PTHREAD_COND_INITIALIZER, 1, 0, 0, 0, 0, NULL, NULL, 0, 0 };

static _Thread_local int in_task;

static dl_pool_runner runner;   /* another owner of the loops, or NULL */

/* One caller at a time uses the workers; a concurrent caller (another
 * thread's loop) runs its loop inline. */
static pthread_mutex_t caller = PTHREAD_MUTEX_INITIALIZER;

static void cpu_relax(void)
{
#if defined(__x86_64__) || defined(__i386__)
    __builtin_ia32_pause();
#endif
}

static void run_chunk(int i)
{
    int64_t begin = pool.n * i / pool.nchunks;
    int64_t end = pool.n * (i + 1) / pool.nchunks;
    if (begin < end)
        pool.fn(pool.ctx, begin, end);
}

/* Waits until the generation differs from seen; returns the new one. */
static uint64_t wait_job(uint64_t seen)
{
    for (int i = 0, n = atomic_load(&spins); i < n; i++) {
        uint64_t g = atomic_load(&pool.generation);
        if (g != seen)
            return g;
        cpu_relax();
    }
    pthread_mutex_lock(&pool.mu);
    atomic_fetch_add(&pool.sleepers, 1);
    while (atomic_load(&pool.generation) == seen)
        pthread_cond_wait(&pool.work, &pool.mu);
    atomic_fetch_sub(&pool.sleepers, 1);
    pthread_mutex_unlock(&pool.mu);
    return atomic_load(&pool.generation);
}

static void *worker(void *arg)
{
    int id = (int)(intptr_t)arg;   /* 1..started */
    uint64_t seen = 0;
    in_task = 1;
    for (;;) {
        seen = wait_job(seen);
        if (id < pool.nchunks)
            run_chunk(id);
        if (atomic_fetch_sub(&pool.pending, 1) == 1) {
            pthread_mutex_lock(&pool.mu);
            pthread_cond_signal(&pool.done);
            pthread_mutex_unlock(&pool.mu);
        }
    }
    return NULL;
}

void dl_pool_set_threads(int n)
{
    if (n < 1)
        n = 1;
    if (n > POOL_MAX)
        n = POOL_MAX;
    pthread_mutex_lock(&pool.mu);
    while (!runner && pool.started < n - 1) {
        pthread_t tid;
        if (pthread_create(&tid, NULL, worker, (void *)(intptr_t)(pool.started + 1)) != 0)
            break;
        pthread_detach(tid);
        pool.started++;
    }
    pool.nthreads = runner || pool.started + 1 >= n ? n : pool.started + 1;
    pthread_mutex_unlock(&pool.mu);
}

void dl_pool_set_runner(dl_pool_runner run)
{
    runner = run;
}

void dl_pool_set_spin(int polls)
{
    atomic_store(&spins, polls < 0 ? 0 : polls);
}

int dl_pool_threads(void)
{
    return pool.nthreads;
}

void dl_parallel_for(int64_t n, int64_t grain, dl_task_fn fn, void *ctx)
{
    if (n <= 0)
        return;
    if (grain < 1)
        grain = 1;
    int64_t chunks = n / grain;
    if (chunks > pool.nthreads)
        chunks = pool.nthreads;
    if (chunks < 2) {
        fn(ctx, 0, n);
        return;
    }
    if (in_task || pthread_mutex_trylock(&caller) != 0) {
        /* The workers are busy: the same chunks, one after the other.
         * Work split by chunk (a GEMM a block of rows) then gives the same
         * bits however busy the process is: batch-invariant answers. */
        for (int64_t i = 0; i < chunks; i++)
            fn(ctx, n * i / chunks, n * (i + 1) / chunks);
        return;
    }
    if (runner) {
        in_task = 1;
        runner((int)chunks, n, fn, ctx);
        in_task = 0;
        pthread_mutex_unlock(&caller);
        return;
    }
    pool.fn = fn;
    pool.ctx = ctx;
    pool.n = n;
    pool.nchunks = (int)chunks;
    atomic_store(&pool.pending, pool.started);
    atomic_fetch_add(&pool.generation, 1);
    if (atomic_load(&pool.sleepers) > 0) {
        pthread_mutex_lock(&pool.mu);
        pthread_cond_broadcast(&pool.work);
        pthread_mutex_unlock(&pool.mu);
    }

    in_task = 1;
    run_chunk(0);
    in_task = 0;

    for (int i = 0, n = atomic_load(&spins); i < n && atomic_load(&pool.pending) > 0; i++)
        cpu_relax();
    if (atomic_load(&pool.pending) > 0) {
        pthread_mutex_lock(&pool.mu);
        while (atomic_load(&pool.pending) > 0)
            pthread_cond_wait(&pool.done, &pool.mu);
        pthread_mutex_unlock(&pool.mu);
    }
    pthread_mutex_unlock(&caller);
}
