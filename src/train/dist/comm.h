/* comm.h (private to train/dist/): the MPI state shared by the collective
 * and parameter-server files, and the stall-aware wait. */
#ifndef DL_DIST_COMM_H
#define DL_DIST_COMM_H

#include "train/dist/dl_dist.h"

#include <mpi.h>

/* Returns DL_ERR_BACKEND, with MPI's words, when an MPI call fails. */
#define MPI_CHECK(call, err, what)                                          \
    do {                                                                    \
        int rc_ = (call);                                                   \
        if (rc_ != MPI_SUCCESS) {                                           \
            char msg_[MPI_MAX_ERROR_STRING];                                \
            int len_ = 0;                                                   \
            MPI_Error_string(rc_, msg_, &len_);                             \
            return dl_err_set((err), DL_ERR_BACKEND, "MPI %s: %s", (what), msg_); \
        }                                                                   \
    } while (0)

/* Tags on the control communicator. */
enum { TAG_QUERY = 7001, TAG_REPLY = 7002 };

struct dl_dist {
    dl_dist_conf conf;
    int          rank, size, local_rank;
    bool         is_server, own_mpi;
    int          trainer, ntrainers;
    MPI_Comm     trainers;   /* trainers only (MPI_COMM_NULL on servers) */
    MPI_Comm     ctl;        /* stall queries */
    MPI_Comm     ps;         /* parameter-server traffic */
    MPI_Comm     bcasts;     /* trainers: the broadcasts of deterministic buckets,
                                which are posted in an order of their own */
    uint64_t     bytes;
    double       comm_seconds;
    double       overlap_inflight, overlap_exposed;   /* buckets.c, seconds */
    int64_t      seq;        /* operations waited on so far */
    const char  *what;       /* the operation being waited on */
    float       *scratch;    /* deterministic sums */
    int64_t      scratch_n;
    struct ps_client *client;/* trainer side of the parameter servers */
};

/* Frees the trainer-side parameter-server buffers (param_server.c). */
void ps_client_free(struct ps_client *c);

/* Waits for req, answering other ranks' stall queries meanwhile. After
 * conf.stall_timeout seconds it asks every rank what it is doing, logs
 * which ranks are missing and aborts the job. */
dl_status comm_wait(dl_dist *d, MPI_Request *req, const char *what, dl_err *err);

/* Same for several requests. */
dl_status comm_wait_all(dl_dist *d, int n, MPI_Request *reqs, const char *what,
                        dl_err *err);

/* The loop under both: calls poll(d, ctx, &done, err) until it sets done
 * (or fails), answering stall queries and giving up after the stall
 * timeout in between. Adds the time to comm_seconds. */
typedef dl_status (*comm_poll_fn)(dl_dist *d, void *ctx, bool *done, dl_err *err);
dl_status comm_wait_until(dl_dist *d, comm_poll_fn poll, void *ctx, const char *what,
                          dl_err *err);

/* Bytes a rank moves summing n floats over the trainers: 2 (N-1)/N n
 * floats for the ring allreduce; gather plus broadcast (2 n) when
 * deterministic. */
uint64_t comm_sum_bytes(const dl_dist *d, int64_t n);

/* Deterministic sums: gathered holds nt slices of n floats, rank after
 * rank; out[i] = the slices' i-th values added in rank order. */
void comm_sum_rank_order(const float *gathered, int nt, int64_t n, float *out);

/* Answers pending stall queries (called from every wait loop). */
void comm_serve_queries(dl_dist *d);

/* Gives up the core briefly while polling (ranks may outnumber cores). */
void comm_pause(int spins);

/* Reports a stall and aborts the job. */
_Noreturn void comm_stalled(dl_dist *d, const char *what, double waited);

#endif /* DL_DIST_COMM_H */
