/* pool.c: a fixed pool of worker threads for data-parallel loops.
 * Idle workers sleep on a condition variable (never spin), so they leave
 * the cores to OpenBLAS between our loops: no oversubscription. */
#include "util/dl_util.h"

#include <pthread.h>
#include <stdlib.h>

#define POOL_MAX 256

static struct {
    pthread_mutex_t mu;
    pthread_cond_t  work, done;
    pthread_t       tid[POOL_MAX];
    int             nthreads;     /* including the caller */
    int             started;      /* worker threads running */
    uint64_t        generation;   /* bumped for each job */
    int             pending;      /* workers still busy with the job */
    dl_task_fn      fn;
    void           *ctx;
    int64_t         n;
    int             nchunks;
} pool = { PTHREAD_MUTEX_INITIALIZER, PTHREAD_COND_INITIALIZER,
           PTHREAD_COND_INITIALIZER, {0}, 1, 0, 0, 0, NULL, NULL, 0, 0 };

static _Thread_local int in_task;

static void run_chunk(int i)
{
    int64_t begin = pool.n * i / pool.nchunks;
    int64_t end = pool.n * (i + 1) / pool.nchunks;
    if (begin < end)
        pool.fn(pool.ctx, begin, end);
}

static void *worker(void *arg)
{
    int id = (int)(intptr_t)arg;   /* 1..started */
    uint64_t seen = 0;
    in_task = 1;
    pthread_mutex_lock(&pool.mu);
    for (;;) {
        while (pool.generation == seen)
            pthread_cond_wait(&pool.work, &pool.mu);
        seen = pool.generation;
        int mine = id < pool.nchunks;
        pthread_mutex_unlock(&pool.mu);
        if (mine)
            run_chunk(id);
        pthread_mutex_lock(&pool.mu);
        if (--pool.pending == 0)
            pthread_cond_signal(&pool.done);
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
    while (pool.started < n - 1) {
        int id = pool.started + 1;
        if (pthread_create(&pool.tid[pool.started], NULL, worker,
                           (void *)(intptr_t)id) != 0)
            break;
        pthread_detach(pool.tid[pool.started]);
        pool.started++;
    }
    pool.nthreads = pool.started + 1 < n ? pool.started + 1 : n;
    pthread_mutex_unlock(&pool.mu);
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
    if (chunks < 2 || in_task) {
        fn(ctx, 0, n);
        return;
    }
    pthread_mutex_lock(&pool.mu);
    pool.fn = fn;
    pool.ctx = ctx;
    pool.n = n;
    pool.nchunks = (int)chunks;
    pool.pending = pool.started;
    pool.generation++;
    pthread_cond_broadcast(&pool.work);
    pthread_mutex_unlock(&pool.mu);

    in_task = 1;
    run_chunk(0);
    in_task = 0;

    pthread_mutex_lock(&pool.mu);
    while (pool.pending > 0)
        pthread_cond_wait(&pool.done, &pool.mu);
    pthread_mutex_unlock(&pool.mu);
}
