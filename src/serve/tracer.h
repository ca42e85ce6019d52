/* tracer.h (private to serve/): OpenTelemetry spans of inference requests
 * (tracer.c): which requests are traced ([trace] level and rate, changed at
 * run time through Triton's trace extension, for every model or one), the
 * spans a traced request leaves in a bounded queue, and the OTLP/HTTP JSON
 * body a batch of them makes. The exporter (component_otlp.c, libcurl)
 * drains the queue on its own thread; a request never waits for it: a full
 * queue drops the span and counts it. Any thread may call any function. */
#ifndef DL_SERVE_TRACER_H
#define DL_SERVE_TRACER_H

#include "serve/batcher.h"
#include "serve/oip/trace.h"

typedef struct tracer tracer;

/* The tracer of conf (read now); it records nothing until an exporter
 * says it runs (tracer_set_exporting). */
dl_status tracer_new(const dl_trace_conf *conf, tracer **out, dl_err *err);
/* NULL does nothing. */
void tracer_free(tracer *tr);

/* A reloaded [trace] (SIGHUP): its level and rate become the global
 * settings, as a POST /v2/trace/setting would make them (models' own
 * settings stay), and /status shows its endpoint. queue_size stays. */
void tracer_configure(tracer *tr, const dl_trace_conf *conf);

/* Whether an exporter drains the queue: spans are recorded only then. */
void tracer_set_exporting(tracer *tr, bool on);

/* One finished request, as a transport saw it. */
typedef struct trace_done {
    const trace_ctx *ctx;        /* the incoming traceparent; empty: a new trace */
    const infer_req *q;          /* its stages' times (t_arrival .. t_end); NULL or
                                    zero times: refused before the batcher ran it */
    double           t_received; /* dl_time_now() when the transport received it */
    const char      *model;
    int64_t          version;
    int              http_status; /* HTTP: the answer's code; 0: a Kafka record */
    const char      *topic;       /* Kafka: where the record was read */
    int              partition;
    int64_t          offset;
    bool             ok;          /* answered with its predictions */
} trace_done;

/* Samples the request (level and rate of its model) and, when traced,
 * queues its spans (server or consumer span, with queue, compute and answer
 * children), ended now. Never blocks on export. tr may be NULL. */
void tracer_record(tracer *tr, const trace_done *d);

/* ---- the exporter's side ------------------------------------------------ */

/* Waits until `batch` spans are queued, timeout_s passed or tracer_wake;
 * returns how many are queued. */
size_t tracer_wait(tracer *tr, size_t batch, double timeout_s);
/* Wakes tracer_wait. */
void tracer_wake(tracer *tr);
/* Takes up to max queued requests' spans as one OTLP/HTTP JSON
 * ExportTraceServiceRequest (new; NULL when none is queued or out of
 * memory: those are counted as dropped); *n: how many requests. */
char *tracer_take(tracer *tr, size_t max, size_t *n);
/* Counts n requests' spans as exported (ok) or lost to a failed export,
 * with the reason (copied; NULL when ok). */
void tracer_exported(tracer *tr, size_t n, bool ok, const char *why);

/* {"endpoint", "level", "rate", "queued", "exported", "dropped",
 *  "export_failures", "last_error"?} (new). */
json_t *tracer_status(tracer *tr);
/* dlserve_trace_spans_exported_total, dlserve_trace_spans_dropped_total,
 * dlserve_trace_export_failures_total, dlserve_trace_queue_spans. */
void tracer_metrics(tracer *tr, dl_sbuf *out);

/* ---- Triton's trace extension ------------------------------------------- */

/* The settings of model (NULL: the global ones) as Triton answers GET
 * /v2[/models/{m}]/trace/setting: {"trace_level": [..], "trace_rate",
 * "trace_count", "log_frequency", "trace_mode"} (new). */
json_t *tracer_setting(tracer *tr, const char *model);
/* POST: applies the JSON object body[0..len) to model's settings (NULL:
 * the global ones; a null value resets a model's setting to the global
 * one). DL_ERR_INVALID, nothing changed, for a malformed body, an unknown
 * or unsupported setting or a bad value. */
dl_status tracer_update(tracer *tr, const char *model, const char *body, size_t len,
                        dl_err *err);

#endif /* DL_SERVE_TRACER_H */
