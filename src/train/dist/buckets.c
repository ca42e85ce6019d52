/* buckets.c: the gradient sum in buckets, overlapped with backward: each
 * bucket's non-blocking reduction starts once its layers are done, is
 * advanced at every layer boundary and waited for after backward. */
#include "train/dist/comm.h"

#include <stdlib.h>

/* A bucket's way: IDLE -> SUM -> DONE (Iallreduce), or, deterministic,
 * IDLE -> GATHER -> GATHERED -> BCAST -> DONE. */
typedef enum bucket_state {
    B_IDLE, B_SUM, B_GATHER, B_GATHERED, B_BCAST, B_DONE,
} bucket_state;

typedef struct bucket {
    int64_t      begin, end;    /* floats of the buffer */
    bucket_state state;
    MPI_Request  req;
} bucket;

struct dl_dist_buckets {
    dl_dist *d;
    int64_t  n;
    float   *buf;
    float   *gathered;    /* deterministic, trainer 0: nt x n, bucket by bucket */
    int      nb;
    bucket  *b;           /* in starting order: b[0] ends at n */
    int      started;     /* buckets started this step (a prefix of b) */
    int      bcasts;      /* deterministic: broadcasts posted (a prefix of b) */
    int      inflight;
    double   busy_since;  /* MPI_Wtime when inflight last left 0 */
};

/* Fills bk->b going down from n over the ascending cuts; returns the
 * number of buckets. */
static int plan(dl_dist_buckets *bk, const int64_t *cuts, int ncuts, int64_t min_floats)
{
    int nb = 0;
    int64_t hi = bk->n;
    for (int i = ncuts - 1; i >= 0; i--)
        if (cuts[i] > 0 && cuts[i] < hi && hi - cuts[i] >= min_floats) {
            bk->b[nb++] = (bucket){ .begin = cuts[i], .end = hi };
            hi = cuts[i];
        }
    if (hi > 0)
        bk->b[nb++] = (bucket){ .begin = 0, .end = hi };
    return nb;
}

dl_status dl_dist_buckets_new(dl_dist *d, int64_t n, const int64_t *cuts, int ncuts,
                              size_t bucket_bytes, dl_dist_buckets **out, dl_err *err)
{
    *out = NULL;
    if (n < 0 || n > INT32_MAX || ncuts < 0)
        return dl_err_set(err, DL_ERR_INVALID, "gradient buckets: %lld values",
                          (long long)n);
    for (int i = 1; i < ncuts; i++)
        DL_ASSERT(cuts[i - 1] <= cuts[i]);
    dl_dist_buckets *bk = calloc(1, sizeof(*bk));
    if (bk)
        bk->b = calloc((size_t)ncuts + 1, sizeof(*bk->b));
    if (!bk || !bk->b) {
        dl_dist_buckets_free(bk);
        return dl_err_set(err, DL_ERR_NOMEM, "gradient buckets");
    }
    bk->d = d;
    bk->n = n;
    int64_t min_floats = (int64_t)(bucket_bytes / sizeof(float));
    bk->nb = plan(bk, cuts, ncuts, min_floats > 0 ? min_floats : 1);
    bool root = d->trainer == 0 && d->ntrainers > 1;
    if (d->conf.deterministic && root &&
        !(bk->gathered = malloc((size_t)(n * d->ntrainers + 1) * sizeof(float)))) {
        dl_dist_buckets_free(bk);
        return dl_err_set(err, DL_ERR_NOMEM, "gradient buckets: reduction buffer");
    }
    *out = bk;
    return DL_OK;
}

void dl_dist_buckets_free(dl_dist_buckets *bk)
{
    if (!bk)
        return;
    free(bk->gathered);
    free(bk->b);
    free(bk);
}

int dl_dist_buckets_count(const dl_dist_buckets *bk) { return bk->nb; }

void dl_dist_buckets_begin(dl_dist_buckets *bk, float *buf)
{
    DL_ASSERT(bk->inflight == 0);
    bk->buf = buf;
    bk->started = bk->bcasts = 0;
    for (int k = 0; k < bk->nb; k++)
        bk->b[k].state = B_IDLE;
}

static bool active(const dl_dist_buckets *bk)
{
    const dl_dist *d = bk->d;
    return d->ntrainers > 1 && !d->is_server && bk->n > 0;
}

static dl_status start(dl_dist_buckets *bk, bucket *b, dl_err *err)
{
    dl_dist *d = bk->d;
    int len = (int)(b->end - b->begin);
    float *p = bk->buf + b->begin;
    if (d->conf.deterministic) {
        /* Trainer 0 receives the bucket's nt slices at nt x begin. */
        float *into = bk->gathered ? bk->gathered + b->begin * d->ntrainers : NULL;
        MPI_CHECK(MPI_Igather(p, len, MPI_FLOAT, into, len, MPI_FLOAT, 0, d->trainers,
                              &b->req), err, "gradient bucket");
        b->state = B_GATHER;
    } else {
        MPI_CHECK(MPI_Iallreduce(MPI_IN_PLACE, p, len, MPI_FLOAT, MPI_SUM, d->trainers,
                                 &b->req), err, "gradient bucket");
        b->state = B_SUM;
    }
    if (bk->inflight++ == 0)
        bk->busy_since = MPI_Wtime();
    return DL_OK;
}

/* A gathered bucket: trainer 0 sums it in rank order, then everyone joins
 * its broadcast. Broadcasts go out in bucket order on their own
 * communicator: a gather may finish earlier on one trainer than on
 * another, and collectives must be posted in the same order everywhere. */
static dl_status broadcast(dl_dist_buckets *bk, bucket *b, dl_err *err)
{
    dl_dist *d = bk->d;
    int64_t len = b->end - b->begin;
    if (bk->gathered)
        comm_sum_rank_order(bk->gathered + b->begin * d->ntrainers, d->ntrainers, len,
                            bk->buf + b->begin);
    MPI_CHECK(MPI_Ibcast(bk->buf + b->begin, (int)len, MPI_FLOAT, 0, d->bcasts, &b->req),
              err, "gradient bucket");
    b->state = B_BCAST;
    bk->bcasts++;
    return DL_OK;
}

/* Tests each started bucket once and moves it on; sets *done when every
 * bucket is done. */
static dl_status advance(dl_dist *d, void *ctx, bool *done, dl_err *err)
{
    dl_dist_buckets *bk = ctx;
    for (int k = 0; k < bk->started; k++) {
        bucket *b = &bk->b[k];
        int flag = 0;
        if (b->state == B_SUM || b->state == B_GATHER || b->state == B_BCAST) {
            if (MPI_Test(&b->req, &flag, MPI_STATUS_IGNORE) != MPI_SUCCESS)
                return dl_err_set(err, DL_ERR_BACKEND, "MPI gradient bucket failed");
            if (flag)
                b->state = b->state == B_GATHER ? B_GATHERED : B_DONE;
            if (flag && b->state == B_DONE && --bk->inflight == 0)
                d->overlap_inflight += MPI_Wtime() - bk->busy_since;
        }
        dl_status st;
        if (b->state == B_GATHERED && k == bk->bcasts && (st = broadcast(bk, b, err)) != DL_OK)
            return st;
    }
    *done = bk->started == bk->nb && bk->inflight == 0;
    return DL_OK;
}

dl_status dl_dist_buckets_ready(dl_dist_buckets *bk, int64_t from, dl_err *err)
{
    if (!active(bk))
        return DL_OK;
    dl_status st = DL_OK;
    while (st == DL_OK && bk->started < bk->nb && bk->b[bk->started].begin >= from)
        st = start(bk, &bk->b[bk->started++], err);
    bool done;
    return st == DL_OK ? advance(bk->d, bk, &done, err) : st;
}

dl_status dl_dist_buckets_finish(dl_dist_buckets *bk, const char *what, dl_err *err)
{
    if (!active(bk))
        return DL_OK;
    dl_dist *d = bk->d;
    double t0 = MPI_Wtime();
    dl_status st = dl_dist_buckets_ready(bk, 0, err);
    if (st == DL_OK)
        st = comm_wait_until(d, advance, bk, what, err);
    if (st != DL_OK)
        return st;
    d->overlap_exposed += MPI_Wtime() - t0;
    d->bytes += comm_sum_bytes(d, bk->n);
    return DL_OK;
}
