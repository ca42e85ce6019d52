/* dl_dist.h: distributed training under MPI: job layout (ranks, trainers,
 * parameter servers), collectives over the trainers that give up after a
 * stall timeout and name the missing ranks, parameter averaging and the
 * sharded parameter server. The only module that sees MPI; without MPI
 * every job is a job of one. */
#ifndef DL_DIST_H
#define DL_DIST_H

#include "nn/dl_nn.h"

#ifdef __cplusplus
extern "C" {
#endif

typedef enum dl_dist_mode {
    DL_DIST_ALLREDUCE,   /* synchronous gradient averaging (the default) */
    DL_DIST_AVG,         /* parameter averaging every K local steps */
    DL_DIST_PS_SYNC,     /* parameter servers, barrier per step */
    DL_DIST_PS_ASYNC,    /* parameter servers, bounded staleness */
} dl_dist_mode;

/* Default gradient bucket size in KiB (--bucket-kb): see docs/training.md. */
#define DL_DIST_BUCKET_KB 128

typedef struct dl_dist_conf {
    dl_dist_mode mode;
    int          avg_k;           /* DL_DIST_AVG: local steps between averages */
    int          servers;         /* parameter servers (PS modes) */
    int          max_staleness;   /* PS async: steps a trainer may run ahead */
    double       stall_timeout;   /* seconds before a wait gives up */
    bool         deterministic;   /* reductions in a fixed order */
    int64_t      bucket_kb;       /* allreduce on the CPU: gradient buckets of at
                                     least this many KiB, reduced during backward;
                                     0: one reduction after backward */
} dl_dist_conf;

/* Parses "--dist" values: allreduce, avg, avg:K, ps-sync, ps-async. */
dl_status dl_dist_parse_mode(const char *s, dl_dist_conf *conf, dl_err *err);
const char *dl_dist_mode_name(dl_dist_mode mode);

typedef struct dl_dist dl_dist;

/* Joins the job: initialises MPI when the build has it (a process started
 * without a launcher is a job of one), splits servers (the last
 * conf->servers ranks in PS modes) from trainers. *out is new. */
dl_status dl_dist_new(const dl_dist_conf *conf, int *argc, char ***argv,
                      dl_dist **out, dl_err *err);
/* Leaves the job (MPI_Finalize). */
void dl_dist_free(dl_dist *d);

/* Aborts the whole job with `code` (MPI_Abort): for a rank that cannot go
 * on while others wait for it. Returns only without MPI. */
void dl_dist_abort(dl_dist *d, int code);

/* True when built with MPI. */
bool dl_dist_available(void);

const dl_dist_conf *dl_dist_conf_of(const dl_dist *d);
int  dl_dist_rank(const dl_dist *d);
int  dl_dist_size(const dl_dist *d);
/* Rank on this node, from the launcher's environment (0 if unknown). */
int  dl_dist_local_rank(const dl_dist *d);
bool dl_dist_is_server(const dl_dist *d);
/* Index among the trainers and their number. */
int  dl_dist_trainer(const dl_dist *d);
int  dl_dist_trainers(const dl_dist *d);
/* Bytes this rank sent and received so far (payload, not headers). */
uint64_t dl_dist_bytes(const dl_dist *d);
/* Seconds this rank spent waiting in communication. */
double dl_dist_comm_seconds(const dl_dist *d);

/* Sum over the trainers, in place; in deterministic mode summed in rank
 * order so that the result does not depend on timing. `what` names the
 * operation in stall messages. */
dl_status dl_dist_sum(dl_dist *d, float *buf, int64_t n, const char *what,
                      dl_err *err);
dl_status dl_dist_sum_f64(dl_dist *d, double *buf, int n, const char *what,
                          dl_err *err);
/* Trainer 0's buffer to every trainer. */
dl_status dl_dist_bcast(dl_dist *d, float *buf, int64_t n, const char *what,
                        dl_err *err);
/* Minimum and maximum over the trainers of one value. */
dl_status dl_dist_minmax(dl_dist *d, double v, double *min, double *max,
                         dl_err *err);

/* Sums a buffer of a CUDA backend (device memory) over the trainers with
 * NCCL, in place, then scales it (scale 1: a plain sum). Collective: every
 * trainer calls it with the same n, in step with the other collectives.
 * The first call starts NCCL: trainer 0 makes the unique id, MPI
 * broadcasts it, each trainer joins on its backend's GPU. The collective
 * is queued on the backend's stream; the call returns when it is done,
 * waiting with the stall timeout like the others. Returns
 * DL_ERR_UNAVAILABLE, leaving err alone, when NCCL cannot serve the job
 * (build without NCCL, not a CUDA backend, one trainer, --deterministic,
 * trainers sharing a GPU, DLSERVE_NCCL=0, NCCL failed to start): every
 * trainer gets that same answer and reduces through host memory with
 * dl_dist_sum instead. The communicator lives until the process exits. */
dl_status dl_dist_sum_device(dl_dist *d, dl_backend *be, float *buf, int64_t n,
                             float scale, const char *what, dl_err *err);

/* ---- gradient sum in buckets, overlapped with backward ---------------- */

/* A sum over the trainers of one host buffer of n floats, cut into
 * buckets that are reduced with non-blocking collectives as soon as
 * their part of the buffer is final (the gradients of the layers that
 * backward has finished), while the rest is still being computed.
 * Buckets are contiguous ranges gathered from the end of the buffer
 * toward the start; every trainer plans the same ones and starts them in
 * the same order. Deterministic mode gathers each bucket to trainer 0,
 * sums it in rank order and broadcasts it: the result is bit-identical
 * to dl_dist_sum's. Not thread-safe: the calls come from the thread that
 * joined MPI. */
typedef struct dl_dist_buckets dl_dist_buckets;

/* Plans the buckets: cuts[0..ncuts) are the offsets where a bucket may
 * begin (the layers' gradient starts, dl_model_grad_range), in ascending
 * order (equal neighbours allowed: layers without parameters); going from
 * n down, a bucket closes at the first cut that makes it at
 * least bucket_bytes long, and whatever is left at the start is the last
 * bucket. Every trainer must call it with the same arguments. *out is new;
 * it borrows d. DL_ERR_INVALID for n beyond one MPI count. */
dl_status dl_dist_buckets_new(dl_dist *d, int64_t n, const int64_t *cuts, int ncuts,
                              size_t bucket_bytes, dl_dist_buckets **out, dl_err *err);
void dl_dist_buckets_free(dl_dist_buckets *bk);
/* Planned buckets (for the log). */
int  dl_dist_buckets_count(const dl_dist_buckets *bk);

/* Starts a new sum over buf (host memory, n floats, borrowed until
 * dl_dist_buckets_finish returns); nothing travels yet. */
void dl_dist_buckets_begin(dl_dist_buckets *bk, float *buf);
/* [from, n) of the buffer is final: starts each planned bucket inside it
 * not yet started, then advances the reductions in flight (MPI makes
 * progress on non-blocking collectives only inside its calls). Never
 * waits. */
dl_status dl_dist_buckets_ready(dl_dist_buckets *bk, int64_t from, dl_err *err);
/* The whole buffer is final: starts the buckets left and waits for all of
 * them (with the stall timeout, answering stall queries); buf then holds
 * the sum. Counts the bytes as dl_dist_sum does. `what` names the
 * operation in stall messages. */
dl_status dl_dist_buckets_finish(dl_dist_buckets *bk, const char *what, dl_err *err);

/* How much of the bucketed reductions ran under backward, cumulative over
 * the run: *inflight, seconds during which at least one bucket was in
 * flight (a bucket's end is seen at the next layer boundary or in
 * finish); *exposed, the part of those spent waiting in
 * dl_dist_buckets_finish after backward. The hidden share is
 * 1 - exposed / inflight. Zeros without buckets. */
void dl_dist_overlap(const dl_dist *d, double *inflight, double *exposed);

/* ---- parameter server ------------------------------------------------- */

/* Counters of a server, for the progress line. */
typedef struct dl_ps_stats {
    int64_t updates;        /* gradients applied */
    int64_t discarded;      /* async: gradients older than the bound */
    int64_t max_staleness;  /* largest staleness applied */
    double  staleness_sum;  /* for the mean */
} dl_ps_stats;

/* How the servers split the flattened parameters: an optional embedding
 * table first, [0, rows * dim), whose row r lives on server r % S and
 * travels only when a batch touches it; then the dense values, in S
 * contiguous shards. rows = 0: everything is dense. */
typedef struct dl_ps_layout {
    int64_t nparams;
    int64_t rows, dim;
} dl_ps_layout;

/* Runs a server until every trainer has finished: owns its rows and dense
 * shard (initial values from params, host memory, the whole buffer) and
 * the optimizer state for them, and updates them densely (a row no batch
 * touched gets a zero gradient, exactly as in one process). lr_at gives
 * the learning rate for an update number. */
typedef double (*dl_lr_fn)(void *ctx, int64_t update);
dl_status dl_ps_serve(dl_dist *d, dl_backend *be, const dl_hparams *hp,
                      const float *params, const dl_ps_layout *lay, dl_lr_fn lr_at,
                      void *lr_ctx, dl_ps_stats *stats, dl_err *err);

/* Trainer side. ids: the table rows this step touches, sorted and unique
 * (nids of them); ids = NULL means every row. pull: the latest dense
 * values and those rows into params (host, whole buffer); returns the
 * version they carry. push: the dense gradient and those rows' gradients
 * (grads: host, whole buffer) computed on `version`. done: tells the
 * servers this trainer is finished. */
dl_status dl_ps_pull(dl_dist *d, float *params, const dl_ps_layout *lay,
                     const int64_t *ids, int64_t nids, int64_t *version, dl_err *err);
dl_status dl_ps_push(dl_dist *d, const float *grads, const dl_ps_layout *lay,
                     const int64_t *ids, int64_t nids, int64_t version, dl_err *err);
dl_status dl_ps_done(dl_dist *d, dl_err *err);
/* Trainer 0 only, after dl_ps_done: every parameter, once every trainer
 * is done, and the servers' statistics summed. */
dl_status dl_ps_finish(dl_dist *d, float *params, const dl_ps_layout *lay,
                       dl_ps_stats *total, dl_err *err);

/* The shard of server s (0-based among servers) of n parameters. */
void dl_ps_shard(int64_t n, int servers, int s, int64_t *begin, int64_t *end);

#ifdef __cplusplus
}
#endif
#endif /* DL_DIST_H */
