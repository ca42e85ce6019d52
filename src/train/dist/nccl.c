/* nccl.c: sums of CUDA backend buffers over the trainers through NCCL,
 * bootstrapped over MPI (trainer 0's unique id broadcast to the others);
 * in builds without NCCL, a stub that sends callers to host staging. */
#define _POSIX_C_SOURCE 200809L
#include "train/dist/dl_dist.h"

#ifndef DL_HAVE_NCCL

dl_status dl_dist_sum_device(dl_dist *d, dl_backend *be, float *buf, int64_t n,
                             float scale, const char *what, dl_err *err)
{
    (void)d;
    (void)be;
    (void)buf;
    (void)n;
    (void)scale;
    (void)what;
    (void)err;
    return DL_ERR_UNAVAILABLE;
}

#else /* DL_HAVE_NCCL */

#include "train/dist/comm.h"

#include <nccl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define NCCL_CHECK(call, err, what)                                              \
    do {                                                                         \
        ncclResult_t rc_ = (call);                                               \
        if (rc_ != ncclSuccess)                                                  \
            return dl_err_set((err), DL_ERR_BACKEND, "NCCL %s: %s", (what),      \
                              ncclGetErrorString(rc_));                          \
    } while (0)

typedef enum { NCCL_UNTRIED, NCCL_UP, NCCL_OFF } nccl_state;

/* One job per process: the communicator of the dl_dist that started it. */
static struct {
    const dl_dist *owner;
    nccl_state     state;
    ncclComm_t     comm;
    cudaEvent_t    done;
    int            dev;
    bool           at_exit;
} nc;

/* abort: without waiting for the other ranks (at exit, when they may be
 * gone already). */
static void nccl_close(bool abort)
{
    if (nc.comm && abort)
        ncclCommAbort(nc.comm);
    else if (nc.comm)
        ncclCommDestroy(nc.comm);
    if (nc.done)
        cudaEventDestroy(nc.done);
    nc.comm = NULL;
    nc.done = NULL;
    nc.state = NCCL_UNTRIED;
}

static void nccl_at_exit(void) { nccl_close(true); }

/* True when two trainers of this node sit on the same GPU (NCCL refuses
 * that); collective over the trainers. */
static bool gpus_shared(dl_dist *d, int dev)
{
    MPI_Comm node;
    if (MPI_Comm_split_type(d->trainers, MPI_COMM_TYPE_SHARED, d->trainer, MPI_INFO_NULL,
                            &node) != MPI_SUCCESS)
        return true;
    int nn = 1, small[64];
    MPI_Comm_size(node, &nn);
    int *devs = nn <= 64 ? small : malloc((size_t)nn * sizeof(int));
    if (!devs) {
        DL_LOG(DL_LOG_ERR, "dist", "NCCL start: out of memory");
        MPI_Abort(MPI_COMM_WORLD, 1);
    }
    bool shared = MPI_Allgather(&dev, 1, MPI_INT, devs, 1, MPI_INT, node) != MPI_SUCCESS;
    for (int i = 0; i < nn && !shared; i++)
        for (int j = 0; j < i; j++)
            if (devs[i] >= 0 && devs[i] == devs[j])
                shared = true;
    if (devs != small)
        free(devs);
    MPI_Comm_free(&node);
    return shared;
}

/* Decides with every trainer whether NCCL serves this job, and starts it. */
static void nccl_start(dl_dist *d, dl_backend *be)
{
    nc.owner = d;
    nc.state = NCCL_OFF;
    int dev = be->ops->stream ? be->device : -1;
    const char *off = getenv("DLSERVE_NCCL");
    const char *why = NULL;
    if (dev < 0)
        why = "not a CUDA backend";
    else if (d->conf.deterministic)
        why = "--deterministic sums in rank order on the host";
    else if (off && strcmp(off, "0") == 0)
        why = "DLSERVE_NCCL=0";
    if (gpus_shared(d, dev) && !why)
        why = "trainers share a GPU";
    int ok = why == NULL, all = 0;
    MPI_Allreduce(&ok, &all, 1, MPI_INT, MPI_MIN, d->trainers);
    if (!all) {
        DL_LOG(DL_LOG_INFO, "dist", "gradient sums go through host memory: %s",
               why ? why : "another trainer cannot use NCCL");
        return;
    }
    struct { int ok; ncclUniqueId id; } boot;
    memset(&boot, 0, sizeof(boot));
    if (d->trainer == 0)
        boot.ok = ncclGetUniqueId(&boot.id) == ncclSuccess;
    MPI_Bcast(&boot, (int)sizeof(boot), MPI_BYTE, 0, d->trainers);
    int good = 0;
    if (boot.ok) {
        cudaSetDevice(dev);
        ncclResult_t r = ncclCommInitRank(&nc.comm, d->ntrainers, boot.id, d->trainer);
        if (r != ncclSuccess) {
            DL_LOG(DL_LOG_ERR, "dist", "NCCL start on GPU %d: %s", dev, ncclGetErrorString(r));
            nc.comm = NULL;
        }
        good = r == ncclSuccess &&
               cudaEventCreateWithFlags(&nc.done, cudaEventDisableTiming) == cudaSuccess;
    }
    MPI_Allreduce(&good, &all, 1, MPI_INT, MPI_MIN, d->trainers);
    if (!all) {
        nccl_close(true);
        nc.state = NCCL_OFF;
        DL_LOG(DL_LOG_WARNING, "dist", "NCCL did not start on every trainer: gradient sums "
               "go through host memory");
        return;
    }
    nc.state = NCCL_UP;
    nc.dev = dev;
    if (!nc.at_exit)
        nc.at_exit = atexit(nccl_at_exit) == 0;
    int v = 0;
    ncclGetVersion(&v);
    DL_LOG0(DL_LOG_INFO, "dist", "gradient sums through NCCL %d.%d.%d over %d GPUs",
            v / 10000, v / 100 % 100, v % 100, d->ntrainers);
}

/* Waits for what is queued on s, answering stall queries. `comm`: the
 * wait is communication (counted, and given up after the stall timeout). */
static dl_status wait_stream(dl_dist *d, cudaStream_t s, const char *what, bool comm,
                             dl_err *err)
{
    cudaError_t e = cudaEventRecord(nc.done, s);
    if (e != cudaSuccess)
        return dl_err_set(err, DL_ERR_BACKEND, "%s: CUDA %s", what, cudaGetErrorString(e));
    double t0 = MPI_Wtime();
    if (comm) {
        d->what = what;
        d->seq++;
    }
    dl_status st = DL_OK;
    for (int spins = 0;; spins++) {
        if ((e = cudaEventQuery(nc.done)) == cudaSuccess)
            break;
        if (e != cudaErrorNotReady) {
            st = dl_err_set(err, DL_ERR_BACKEND, "%s: CUDA %s", what, cudaGetErrorString(e));
            break;
        }
        ncclResult_t ar = ncclSuccess;
        ncclCommGetAsyncError(nc.comm, &ar);
        if (ar != ncclSuccess && ar != ncclInProgress) {
            st = dl_err_set(err, DL_ERR_BACKEND, "%s: NCCL %s", what, ncclGetErrorString(ar));
            break;
        }
        comm_serve_queries(d);
        double waited = MPI_Wtime() - t0;
        if (comm && waited > d->conf.stall_timeout) {
            ncclCommAbort(nc.comm);   /* frees the GPU from the hung collective */
            nc.comm = NULL;
            nc.state = NCCL_OFF;
            comm_stalled(d, what, waited);
        }
        comm_pause(spins);
    }
    if (comm) {
        d->what = NULL;
        d->comm_seconds += MPI_Wtime() - t0;
    }
    return st;
}

dl_status dl_dist_sum_device(dl_dist *d, dl_backend *be, float *buf, int64_t n,
                             float scale, const char *what, dl_err *err)
{
    if (!be->ops->stream || d->ntrainers <= 1 || d->is_server || n <= 0)
        return DL_ERR_UNAVAILABLE;
    if (nc.owner != d) {
        if (nc.state == NCCL_UP)
            nccl_close(false);
        nc.state = NCCL_UNTRIED;
    }
    if (nc.state == NCCL_UNTRIED)
        nccl_start(d, be);
    if (nc.state != NCCL_UP)
        return DL_ERR_UNAVAILABLE;
    if (be->device != nc.dev)
        return dl_err_set(err, DL_ERR_INVALID, "%s: NCCL runs on GPU %d, this backend on GPU %d",
                          what, nc.dev, be->device);
    cudaStream_t s = (cudaStream_t)be->ops->stream(be);
    /* The backward pass queued before the sum is compute: not counted. */
    dl_status st = wait_stream(d, s, what, false, err);
    if (st != DL_OK)
        return st;
    ncclRedOp_t op = ncclSum;
    if (scale != 1.0f)   /* sum of scale * x: the scaling rides in the collective */
        NCCL_CHECK(ncclRedOpCreatePreMulSum(&op, &scale, ncclFloat32, ncclScalarHostImmediate,
                                            nc.comm), err, what);
    ncclResult_t r = ncclAllReduce(buf, buf, (size_t)n, ncclFloat32, op, nc.comm, s);
    if (scale != 1.0f)
        ncclRedOpDestroy(op, nc.comm);
    if (r != ncclSuccess)
        return dl_err_set(err, DL_ERR_BACKEND, "NCCL %s: %s (%s)", what, ncclGetErrorString(r),
                          ncclGetLastError(nc.comm));
    /* A ring allreduce moves 2 (N-1)/N of the buffer per rank. */
    d->bytes += (uint64_t)(2.0 * (d->ntrainers - 1) / d->ntrainers * (double)n * sizeof(float));
    return wait_stream(d, s, what, true, err);
}

#endif /* DL_HAVE_NCCL */
