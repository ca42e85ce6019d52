/* stats.h (private to serve/): counters and histograms of requests and
 * batches, for /metrics, /status and Triton's statistics extension
 * (stats.c). Any thread may call any function here. */
#ifndef DL_SERVE_STATS_H
#define DL_SERVE_STATS_H

#include "serve/dl_serve.h"
#include "util/dl_util.h"

#include <jansson.h>

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
    /* The response cache: answered from it (a hit), or looked up in vain
     * (a miss); cache_us, the lookup's time and a miss's insertion's. */
    bool   cache_hit, cache_miss;
    double cache_us;
} req_times;

/* stats_request with every duration: ok requests add all of them, failed
 * ones their total (Triton's "fail" duration). As Triton's, a cache hit
 * that was answered counts as a success (its total) and in cache_hit, and
 * in neither the inferences nor the queue and compute durations; a miss
 * counts in cache_miss besides. stats_request(..., queue, compute, total)
 * is this with compute as the infer time. */
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

/* A generate request done: tokens generated, its time to first token and
 * time per output token after it, in seconds (< 0: none to record). */
void stats_generate(stats *st, const char *model, int64_t version, int64_t tokens,
                    double ttft_s, double tpot_s);

/* Triton's statistics extension: the "model_stats" entries (new array) of
 * `model`, every version that has statistics (version 0) or that one;
 * [] when there are none. NULL only when out of memory. */
json_t *stats_model_stats(stats *st, const char *model, int64_t version);
/* An HTTP answer with this status code, to a request of this method
 * (GET, POST, ...) that this handler (the route: "infer", "health_ready",
 * ...) answered. */
void stats_http(stats *st, const char *method, const char *handler, int code);

/* Prometheus text exposition (new string, caller frees): Triton's names
 * (nv_inference_request_success, nv_inference_request_failure,
 * nv_inference_count, nv_inference_exec_count,
 * nv_inference_request_duration_us, nv_inference_queue_duration_us,
 * nv_inference_compute_infer_duration_us,
 * nv_inference_compute_input_duration_us,
 * nv_inference_compute_output_duration_us) with model and version labels,
 * histograms dlserve_request_duration_seconds and dlserve_batch_size,
 * dlserve_generated_tokens_total and the histograms
 * dlserve_time_to_first_token_seconds and
 * dlserve_time_per_output_token_seconds,
 * dlserve_http_responses_total{method,handler,code},
 * dlserve_cache_hits_total and dlserve_cache_misses_total{model,version}
 * (the versions whose requests looked the response cache up), and process metrics
 * (process_resident_memory_bytes, process_cpu_seconds_total,
 * process_start_time_seconds, process_open_fds). `extra` (may be NULL) is
 * appended as is. */
char *stats_prometheus(stats *st, const char *extra);

/* Counters as JSON (new reference) for /status. */
json_t *stats_json(stats *st);

#endif /* DL_SERVE_STATS_H */
