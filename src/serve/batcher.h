/* batcher.h (private to serve/): dynamic batching and the inference
 * workers (batcher.c), and infer_req, the request every transport hands
 * the batcher. Any thread may call any function here unless its comment
 * says otherwise. */
#ifndef DL_SERVE_BATCHER_H
#define DL_SERVE_BATCHER_H

#include "serve/cache.h"
#include "serve/registry.h"
#include "serve/stats.h"

typedef struct batcher batcher;

/* One inference request: n samples of the model's input, answered with n
 * rows of outputs (class probabilities for classifiers). */
typedef struct infer_req {
    char         model[DL_NAME_MAX];
    int64_t      version;        /* 0: newest */
    int64_t      n;
    /* n * in_dim RAW float32 values, a sample's inputs side by side in
     * model.json's order, ids as floats (unscaled: the batcher applies
     * each FP32 input's scaling as it gathers them into its batch; x
     * is left as it is), owned by the submitter; any alignment (Kafka: raw
     * float32 records are read where they lie; dl_scaling_apply takes any) */
    const void  *x;
    /* n * out_dim, a sample's outputs side by side (as dl_model_predict
     * gives them): the submitter's room (Kafka: pooled with the input
     * buffer), or NULL, and the batcher allocates it; either way the
     * submitter's after completion */
    float       *out;
    /* The version that answers, as a reference the submitter releases
     * after completion: set it before submitting to pin a version (the
     * caller's own reference), or leave it NULL and the batcher acquires
     * model/version. */
    served      *sv;
    /* filled on completion: err.code is DL_OK, or why the batch failed:
     * DL_ERR_BUSY (out of memory for this batch: retry soon),
     * DL_ERR_UNAVAILABLE (the device is gone) or DL_ERR_BACKEND */
    dl_err       err;
    /* The longest it may wait in the queue, in microseconds (the request's
     * "timeout" parameter); 0: batching.default_timeout_us. A request
     * still queued past it completes with err.code DL_ERR_TIMEOUT. */
    int64_t      timeout_us;
    double       deadline;       /* the batcher's: t_arrival + the timeout; 0: none */
    /* Triton's priority (the request's "priority" parameter): 1 the
     * highest, 0 the model's default_priority_level; ignored by a model
     * without priority_levels. A transport sets it after infer_req_init. */
    int64_t      priority;
    int64_t      level;          /* the batcher's: the level it is served at */
    /* dl_time_now() seconds: submitted, its batch started, the batch's
     * inputs were ready (inference began), the inference ended */
    double       t_arrival, t_start, t_infer, t_end;
    /* completion (required): called once, from the batcher's worker
     * thread, when the request's batch has run; the request belongs to
     * the submitter again from that call on. It must not block: it hands
     * the request to the transport's own thread (HTTP resumes the
     * connection, Kafka queues the record for its output stage). */
    void        (*on_done)(struct infer_req *q, void *ctx);
    void         *ctx;
    struct infer_req *next;      /* batcher's queue link */
    /* The response cache (infer_req_cached): INFER_CACHE_HIT when it
     * answered (no batch ran), INFER_CACHE_MISS when it was looked up in
     * vain; cache_us, the lookup's time and, for a miss, the insertion's. */
    int           cache;
    double        cache_us;
} infer_req;

enum { INFER_CACHE_NONE, INFER_CACHE_HIT, INFER_CACHE_MISS };

/* The transport contract. A transport (http/, kafka/; a new one such as
 * gRPC the same) does, for each request:
 *   1. announce it with batcher_arriving(+1) as it begins to receive it
 *      (Kafka: a poll run), and withdraw it (-1) once it is submitted, run
 *      or dropped, so that eager batching waits for requests on their way;
 *   2. pin a version: registry_acquire the served model (a reference it
 *      releases after completion) and check the input against it;
 *   3. fill its infer_req with infer_req_init, and its priority;
 *   4. run it on its own thread when the batcher allows (batcher_run_now,
 *      batcher_run_batch) or batcher_submit it; on_done, on a worker
 *      thread, only hands it back to the transport's own thread;
 *   5. answer, then account with infer_req_account (answered or not), and
 *      free what it owns (q->out when the batcher allocated it, the
 *      version's reference). */

/* Fills q for the batcher, every other field zeroed: n samples of sv's
 * model at sv's version, pinned (q->sv = sv: the caller's reference, not
 * taken), raw inputs x and room for outputs out (see infer_req; NULL: the
 * batcher allocates), the queue timeout (0: the default) and the
 * completion on_done(q, ctx). */
void infer_req_init(infer_req *q, served *sv, int64_t n, const void *x, float *out,
                    int64_t timeout_us, void (*on_done)(infer_req *q, void *ctx), void *ctx);

/* The response cache, for a transport: looks q up (filled by
 * infer_req_init) in c (NULL: no cache) when its version's serving block
 * sets cache. True on a hit, with q done as if its batch had run: q->out
 * holds the cached outputs (allocated when q->out was NULL), err ok, times
 * now; q is then answered and accounted as any other (step 5 of the
 * contract), without submitting it. */
bool infer_req_cached(cache *c, infer_req *q);

/* After a looked-up request (a miss) completed with its outputs, keeps
 * them in c for the next requests of the same inputs, before it is
 * answered. Does nothing for a request that was not looked up, a hit or a
 * failure. */
void infer_req_cache_store(cache *c, infer_req *q);

/* Records the outcome of a completed (or refused) request q in st, for
 * q->sv's model and version and q->n samples: when ok, the time it queued
 * in the batcher (t_arrival to t_start), its batch's input preparation
 * (t_start to t_infer), inference (t_infer to t_end) and its answer's
 * writing (t_end to now); and the total from t_received (dl_time_now()
 * when the transport received the request) to now. ok: the request was
 * answered with its predictions. q->sv must be set. The one place where
 * HTTP and Kafka turn a request's timestamps into durations. A cache hit
 * counts as answered, with its lookup's time and no queue or compute; a
 * miss adds its lookup and insertion time (Triton's cache_hit and
 * cache_miss). */
void infer_req_account(stats *st, const infer_req *q, double t_received, bool ok);

/* Starts the workers: one per instance of the models (models.instances),
 * worker i running its batches on served->m[i]. */
dl_status batcher_new(const dl_batching_conf *conf, int instances, registry *reg, stats *st,
                      batcher **out, dl_err *err);

/* Queues a request. DL_ERR_BUSY when the model's queue is full,
 * DL_ERR_UNAVAILABLE when intake has stopped (both answer 503: retry);
 * registry_acquire's status for a request that pins no version and names
 * none served; DL_ERR_INVALID for a bad size (400); DL_ERR_NOMEM. On
 * DL_OK the request will complete through q->on_done. */
dl_status batcher_submit(batcher *b, infer_req *q, dl_err *err);

/* A transport announces a request it has begun to receive (delta +1) and
 * withdraws it once submitted or dropped (-1); Kafka announces a poll run.
 * With [batching] eager, a batch runs before max_queue_delay_us when none
 * is on its way. Lock-free but at the last withdrawal. */
void batcher_arriving(batcher *b, int delta);

/* Runs q at once on the calling thread when eager batching would run it
 * alone without waiting: nothing queued, no request on its way but the
 * caller's own, an instance idle, the workers' last batch of one; and its
 * inference is short ([batching] direct_max_us at the model's last rate
 * a sample). q pins its served version (q->sv) and
 * holds at most max_batch_size samples. True with q done (its outputs,
 * q->err and times set; on_done is not called); false, q not run, when it
 * is to be submitted. A thread's direct runs come in streaks of at most
 * BATCHER_DIRECT_STREAK: the next streak waits until the thread has slept
 * (an event loop does when it has nothing to read), so that requests read
 * back to back are batched instead. */
#define BATCHER_DIRECT_STREAK 32
bool batcher_run_now(batcher *b, infer_req *q);

/* Whether `samples` samples of sv may run on a transport's thread as one
 * batch: eager batching, at most max_batch_size, and an inference of at
 * most direct_max_us at the version's last rate a sample. */
bool batcher_fits_thread(batcher *b, served *sv, int64_t samples);

/* Runs a list of requests (linked by next, one served version, at most
 * max_batch_size samples, each with its t_arrival set) as one batch on
 * the calling thread, when an instance is idle: an HTTP event loop's
 * held batch (the requests it read in one pass). True with every request
 * done (outputs, err and times set; on_done is not called); false, none
 * run, when no instance is idle (the caller tries again or submits them).
 * Once stopping, it waits for an instance instead: the batch was accepted
 * before. */
bool batcher_run_batch(batcher *b, infer_req *list);

/* Whether a batch of `requests` requests that an HTTP event loop holds
 * and that has found no idle instance for `waited` seconds may wait on
 * (retried on the loop's next passes) rather than be queued: while the
 * wait costs less than the hand-off to a worker and back would cost its
 * requests, BATCHER_HANDOFF_US a request (docs/benchmarks.md, "HTTP serving"), and
 * at most direct_max_us. A longer wait spins the loop while an instance
 * computes a big batch. */
#define BATCHER_HANDOFF_US 10
bool batcher_may_wait(batcher *b, double waited, int requests);

/* Whether intake has stopped (batcher_drain). */
bool batcher_stopping(batcher *b);

/* Stops intake (submit answers 503), finishes every queued request,
 * then stops the worker. */
void batcher_drain(batcher *b);
void batcher_free(batcher *b);

/* Queued samples per model as JSON (new reference), for /status. */
json_t *batcher_status(batcher *b);

/* The gauges dlserve_batcher_queued_samples{model} (models with nothing
 * queued have none) and dlserve_batcher_queue_limit_samples (the bound,
 * max_queue_size per model), appended to out. */
void batcher_metrics(batcher *b, dl_sbuf *out);
/* The batching configuration the batcher runs with (borrowed, constant). */
const dl_batching_conf *batcher_conf(const batcher *b);

#endif /* DL_SERVE_BATCHER_H */
