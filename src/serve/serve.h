/* serve.h (private to serve/): the daemon's parts and how they meet.
 *
 *   HTTP (http_api.c) --infer_req--> batcher (batcher.c) --> worker thread
 *        |                              |  takes a reference on the
 *        |                              v  served version (registry.c)
 *        +--> stats (stats.c): counters and histograms for /metrics, /status
 *
 * Thread-safety: every function here may be called from any thread unless
 * its comment says otherwise. */
#ifndef DL_SERVE_SERVE_H
#define DL_SERVE_SERVE_H

#include "serve/dl_serve.h"

#include <jansson.h>
#include <pthread.h>
#include <stdatomic.h>

/* ---- registry: the model repository and version lifecycle ------------- */

typedef struct registry registry;

/* One loaded version of one model. Read-only once published; lives while
 * references are held (registry_acquire / served_release). */
typedef struct served {
    char                 name[DL_NAME_MAX];
    int64_t              version;
    dl_model_conf       *conf;        /* owned */
    /* Owned: one copy a backend of the registry (models.instances), m[i]
     * used by whoever holds the batcher's instance i: its worker, or a
     * transport's thread (batcher_run_now). */
    dl_model            *m[DL_MAX_INSTANCES];
    int64_t              in_dim, out_dim;
    /* Inference us a sample in the last batch run (at first, the
     * warm-up's single sample). */
    atomic_llong         sample_us;
} served;

/* Scans conf->dir and loads what the version policy selects. *out is new.
 * A model that fails to load is logged and recorded (see
 * registry_status), not fatal. */
dl_status registry_new(const dl_models_conf *conf, dl_backend *const *be, int nbe,
                       registry **out, dl_err *err);
void registry_free(registry *r);

/* Rescans the folder: loads, validates and warms up new versions, swaps
 * them in atomically, and drops versions the policy no longer selects (they
 * are freed when their last reference goes). A bad version is refused and
 * the old keeps serving; the reason goes to the log and registry_status.
 * Returns the number of changes. */
int registry_rescan(registry *r);

/* Loads (or reloads) / unloads one model by name, for
 * POST /v2/repository/models/{m}/load|unload. DL_ERR_NOT_FOUND when there
 * is no such model folder (load) or model (unload); DL_ERR_INVALID when
 * its newest version is refused (err says why). */
dl_status registry_load(registry *r, const char *name, dl_err *err);
dl_status registry_unload(registry *r, const char *name, dl_err *err);

/* *out: a reference to version `version` of `name` (0: the newest
 * served); release it with served_release. On failure *out is NULL and
 * the status says why: DL_ERR_NOT_FOUND for an unknown or unloaded model
 * or a version not served, DL_ERR_UNAVAILABLE for a model that has no
 * version ready (yet: a load failed or is under way). */
dl_status registry_acquire(registry *r, const char *name, int64_t version, served **out,
                           dl_err *err);
/* Drops a reference; NULL does nothing. */
void served_release(served *s);

/* True when every model that has versions on disk serves one of them (a
 * model folder without trained weights does not hold readiness back). */
bool registry_ready(registry *r);

/* JSON (new reference): [{"name", "versions": [..], "state":
 * "READY"|"UNAVAILABLE"|"UNLOADED", "reason"}], for /status and
 * /v2/repository/index. */
json_t *registry_status(registry *r);

/* Names of the models (new array of new strings, NULL-terminated). */
char **registry_names(registry *r);

/* ---- stats: counters and histograms ----------------------------------- */

typedef struct stats stats;

dl_status stats_new(stats **out, dl_err *err);
void stats_free(stats *st);

/* One request's outcome, per model and version. Durations in
 * microseconds: queue = waited in the batcher, compute = its batch's
 * inference, total = from arrival to answer. */
void stats_request(stats *st, const char *model, int64_t version, bool ok,
                   int64_t samples, double queue_us, double compute_us,
                   double total_us);
/* One executed batch of `samples` samples. */
void stats_batch(stats *st, const char *model, int64_t version, int64_t samples);

/* A request's durations in microseconds, as Triton's statistics split
 * them: queue (in the batcher), compute input (its batch's inputs
 * assembled and scaled), compute infer (the model's forward pass),
 * compute output (from the inference's end to the answer written), total
 * (from arrival to answer). */
typedef struct req_times {
    double queue_us, input_us, infer_us, output_us, total_us;
} req_times;

/* stats_request with every duration: ok requests add all of them, failed
 * ones their total (Triton's "fail" duration). stats_request(..., queue,
 * compute, total) is this with compute as the infer time. */
void stats_request_times(stats *st, const char *model, int64_t version, bool ok,
                         int64_t samples, const req_times *t);
/* stats_batch with the batch's compute durations (microseconds), kept per
 * batch size for Triton's batch_stats. */
void stats_batch_times(stats *st, const char *model, int64_t version, int64_t samples,
                       double input_us, double infer_us, double output_us);
/* A request refused because it was still queued past its deadline
 * (dlserve_request_timeouts_total); its failure is counted by the
 * transport's stats_request as any other. */
void stats_timeout(stats *st, const char *model, int64_t version);

/* Triton's statistics extension: the "model_stats" entries (new array) of
 * `model`, every version that has statistics (version 0) or that one;
 * [] when there are none. NULL only when out of memory. */
json_t *stats_model_stats(stats *st, const char *model, int64_t version);
/* An HTTP answer with this status code. */
void stats_http(stats *st, int code);

/* Prometheus text exposition (new string, caller frees): Triton's names
 * (nv_inference_request_success, nv_inference_request_failure,
 * nv_inference_count, nv_inference_exec_count,
 * nv_inference_request_duration_us, nv_inference_queue_duration_us,
 * nv_inference_compute_infer_duration_us) with model and version labels,
 * histograms dlserve_request_duration_seconds and dlserve_batch_size,
 * dlserve_http_responses_total{code}, and process metrics
 * (process_resident_memory_bytes, process_cpu_seconds_total,
 * process_start_time_seconds, process_open_fds). `extra` (may be NULL) is
 * appended as is. */
char *stats_prometheus(stats *st, const char *extra);

/* Counters as JSON (new reference) for /status. */
json_t *stats_json(stats *st);

/* ---- batcher: dynamic batching and the inference worker --------------- */

typedef struct batcher batcher;

/* One inference request: n samples of the model's input, answered with n
 * rows of outputs (class probabilities for classifiers). */
typedef struct infer_req {
    char         model[DL_NAME_MAX];
    int64_t      version;        /* 0: newest */
    int64_t      n;
    /* n * in_dim RAW float32 values (unscaled: the batcher applies the
     * served model's input scaling as it gathers them into its batch; x
     * is left as it is), owned by the submitter; any alignment (Kafka: raw
     * float32 records are read where they lie; dl_scaling_apply takes any) */
    const void  *x;
    /* n * out_dim: the submitter's room (Kafka: pooled with the input
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
} infer_req;

/* Records the outcome of a completed (or refused) request q in st, for
 * q->sv's model and version and q->n samples: when ok, the time it queued
 * in the batcher (t_arrival to t_start), its batch's input preparation
 * (t_start to t_infer), inference (t_infer to t_end) and its answer's
 * writing (t_end to now); and the total from t_received (dl_time_now()
 * when the transport received the request) to now. ok: the request was
 * answered with its predictions. q->sv must be set. The one place where
 * HTTP and Kafka turn a request's timestamps into durations. */
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
 * requests, BATCHER_HANDOFF_US a request (tests/bench/RESULTS.md), and
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

/* ---- http ---------------------------------------------------------------- */

typedef struct http_server http_server;

typedef struct http_deps {
    const dl_http_conf *conf;
    registry           *reg;
    batcher            *bat;
    stats              *st;
    double              start_time;     /* dl_time_now() at start */
    const char         *server_version; /* DL_VERSION_STRING */
    const char         *models_dir;     /* the repository, for GET /status/training */
    /* true once models are loaded and warmed (for /v2/health/ready) */
    bool              (*ready)(void *ctx);
    void               *ctx;
    /* extra JSON for /status (new reference), may be NULL */
    json_t           *(*status_extra)(void *ctx);
    /* extra Prometheus text for /metrics (new string), may be NULL */
    char             *(*metrics_extra)(void *ctx);
} http_deps;

/* Triton's statistics extension for GET /v2/models/{m}[/versions/{v}]/stats:
 * {"model_stats": [...]} (*out new), every version with statistics when
 * version is 0. DL_ERR_NOT_FOUND (404) for a model or version the
 * registry does not know (http_stats.c). */
dl_status http_model_stats(const http_deps *d, const char *model, int64_t version, json_t **out,
                           dl_err *err);
/* Triton's model configuration (JSON) of a served version for GET
 * .../config (*out new): name, platform, backend, max_batch_size, input,
 * output, dynamic_batching with its queue policy. registry_acquire's
 * status when the version is not served (404, or 503 for nothing ready). */
dl_status http_model_config(const http_deps *d, const char *model, int64_t version,
                            json_t **out, dl_err *err);

/* Starts listening (deps must outlive the server) with deps->conf->threads
 * event-loop threads (0: one per core) serving every connection. The
 * bound port is in *port (useful with port 0). */
dl_status http_start(const http_deps *deps, http_server **out, int *port, dl_err *err);
/* Stops accepting connections; requests in flight are answered first
 * (for at most 30 s, but always those the batcher holds: call it after
 * batcher_drain, which completes them). */
void http_stop(http_server *h);

#endif /* DL_SERVE_SERVE_H */
