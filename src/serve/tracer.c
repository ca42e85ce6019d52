/* tracer.c: OpenTelemetry spans of inference requests: sampling by the
 * trace settings (global and per model, Triton's trace extension), the
 * bounded queue of traced requests, and their OTLP/HTTP JSON. */
#define _GNU_SOURCE   /* getrandom */
#include "serve/tracer.h"

#include <errno.h>
#include <pthread.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/random.h>
#include <time.h>

#define MODELS_MAX 256   /* models with settings of their own */

/* Which settings a model sets itself (the others follow the global ones). */
enum { SET_LEVEL = 1, SET_RATE = 2, SET_COUNT = 4, SET_LOG_FREQ = 8 };

typedef struct setting {
    int     level;          /* dl_trace_level */
    double  rate;           /* 0..1 */
    int64_t count;          /* traces left to take; -1: no limit */
    int64_t log_frequency;  /* accepted and reported: OTLP export batches instead */
} setting;

typedef struct model_setting {
    char    name[DL_NAME_MAX];
    unsigned set;           /* SET_* */
    setting s;
    double  acc;            /* the sampler's credit: a trace each time it reaches 1 */
} model_setting;

/* A traced request, as queued: times in Unix nanoseconds. */
typedef struct span_rec {
    char    trace_id[33], parent_id[17];
    char    model[DL_NAME_MAX];
    char    topic[256];
    int64_t version, offset;
    int     partition, http_status;
    bool    ok, kafka, stages;
    int64_t t_received, t_arrival, t_start, t_end, t_done;
} span_rec;

struct tracer {
    char            endpoint[sizeof(((dl_trace_conf *)0)->otlp_endpoint)];   /* for status */
    pthread_mutex_t mu;     /* the settings, the endpoint and the queue */
    pthread_cond_t  cv;
    setting         global;
    double          acc;
    model_setting   models[MODELS_MAX];
    int             nmodels;
    span_rec       *ring;
    size_t          cap, head, len;
    bool            exporting, woken;
    int64_t         exported, dropped, failures;
    char            last_error[256];
};

dl_status tracer_new(const dl_trace_conf *conf, tracer **out, dl_err *err)
{
    *out = NULL;
    tracer *tr = calloc(1, sizeof(*tr));
    if (tr)
        tr->ring = calloc((size_t)conf->queue_size, sizeof(*tr->ring));
    if (!tr || !tr->ring) {
        free(tr);
        return dl_err_set(err, DL_ERR_NOMEM, "trace queue of %lld spans",
                          (long long)conf->queue_size);
    }
    snprintf(tr->endpoint, sizeof(tr->endpoint), "%s", conf->otlp_endpoint);
    tr->cap = (size_t)conf->queue_size;
    tr->global = (setting){.level = conf->level, .rate = conf->rate, .count = -1};
    pthread_mutex_init(&tr->mu, NULL);
    pthread_cond_init(&tr->cv, NULL);
    *out = tr;
    return DL_OK;
}

void tracer_free(tracer *tr)
{
    if (!tr)
        return;
    pthread_mutex_destroy(&tr->mu);
    pthread_cond_destroy(&tr->cv);
    free(tr->ring);
    free(tr);
}

void tracer_configure(tracer *tr, const dl_trace_conf *conf)
{
    pthread_mutex_lock(&tr->mu);
    tr->global.level = conf->level;
    tr->global.rate = conf->rate;
    snprintf(tr->endpoint, sizeof(tr->endpoint), "%s", conf->otlp_endpoint);
    pthread_mutex_unlock(&tr->mu);
}

void tracer_set_exporting(tracer *tr, bool on)
{
    pthread_mutex_lock(&tr->mu);
    tr->exporting = on;
    pthread_mutex_unlock(&tr->mu);
}

/* ---- sampling ------------------------------------------------------------ */

static model_setting *model_find(tracer *tr, const char *model)
{
    for (int i = 0; model && i < tr->nmodels; i++)
        if (strcmp(tr->models[i].name, model) == 0)
            return &tr->models[i];
    return NULL;
}

/* model's settings, each its own or the global one. */
static setting effective(tracer *tr, const model_setting *ms)
{
    setting s = tr->global;
    if (ms) {
        if (ms->set & SET_LEVEL)    s.level = ms->s.level;
        if (ms->set & SET_RATE)     s.rate = ms->s.rate;
        if (ms->set & SET_COUNT)    s.count = ms->s.count;
        if (ms->set & SET_LOG_FREQ) s.log_frequency = ms->s.log_frequency;
    }
    return s;
}

/* Whether the next request of model is traced: every 1/rate-th one (a
 * credit of rate a request, a trace each whole credit), while the count
 * lasts. Called with mu held. */
static bool sample(tracer *tr, const char *model)
{
    model_setting *ms = model_find(tr, model);
    setting s = effective(tr, ms);
    if (s.level == DL_TRACE_LEVEL_OFF || s.rate <= 0 || s.count == 0)
        return false;
    bool own_rate = ms && (ms->set & SET_RATE);
    double *acc = own_rate ? &ms->acc : &tr->acc;
    *acc += s.rate;
    if (*acc < 1.0 - 1e-9)
        return false;
    *acc -= 1.0;
    if (*acc < 0)
        *acc = 0;
    if (s.count > 0) {   /* the count is kept where it is set */
        if (ms && (ms->set & SET_COUNT))
            ms->s.count--;
        else
            tr->global.count--;
    }
    return true;
}

/* ---- recording ------------------------------------------------------------ */

static void random_hex(char *out, size_t digits)
{
    static _Thread_local dl_rng rng;
    static _Thread_local bool seeded;
    if (!seeded) {
        uint64_t seed = 0;
        if (getrandom(&seed, sizeof(seed), 0) != sizeof(seed))
            seed = (uint64_t)time(NULL) ^ (uint64_t)(uintptr_t)&seed;
        dl_rng_seed(&rng, seed);
        seeded = true;
    }
    static const char hex[] = "0123456789abcdef";
    uint64_t bits = 0;
    bool nonzero = false;
    for (size_t i = 0; i < digits; i++) {
        if (i % 16 == 0)
            bits = dl_rng_next(&rng);
        int d = (int)(bits & 15);
        bits >>= 4;
        nonzero |= d != 0;
        out[i] = hex[d];
    }
    if (!nonzero)
        out[digits - 1] = '1';   /* all zeros is not a valid id */
    out[digits] = '\0';
}

/* dl_time_now() (monotonic) seconds t as Unix nanoseconds, by the offset
 * between the clocks now. */
static int64_t unix_ns(double t, double mono_now, int64_t real_now)
{
    return t > 0 ? real_now - (int64_t)llround((mono_now - t) * 1e9) : 0;
}

static void fill_rec(span_rec *r, const trace_done *d)
{
    memset(r, 0, sizeof(*r));
    if (d->ctx && trace_present(d->ctx)) {
        trace_id_of(d->ctx, r->trace_id);
        memcpy(r->parent_id, d->ctx->parent + 36, 16);
    } else {
        random_hex(r->trace_id, 32);
    }
    snprintf(r->model, sizeof(r->model), "%s", d->model ? d->model : "");
    snprintf(r->topic, sizeof(r->topic), "%s", d->topic ? d->topic : "");
    r->version = d->version;
    r->offset = d->offset;
    r->partition = d->partition;
    r->http_status = d->http_status;
    r->ok = d->ok;
    r->kafka = d->topic != NULL;
    struct timespec ts;
    clock_gettime(CLOCK_REALTIME, &ts);
    int64_t real_now = (int64_t)ts.tv_sec * 1000000000LL + ts.tv_nsec;
    double now = dl_time_now();
    r->t_received = unix_ns(d->t_received, now, real_now);
    r->t_done = real_now;
    const infer_req *q = d->q;
    r->stages = q && q->t_arrival > 0 && q->t_start > 0 && q->t_end > 0;
    if (r->stages) {
        r->t_arrival = unix_ns(q->t_arrival, now, real_now);
        r->t_start = unix_ns(q->t_start, now, real_now);
        r->t_end = unix_ns(q->t_end, now, real_now);
    }
}

void tracer_record(tracer *tr, const trace_done *d)
{
    if (!tr)
        return;
    pthread_mutex_lock(&tr->mu);
    bool traced = tr->exporting && sample(tr, d->model);
    bool full = tr->len == tr->cap;
    if (traced && full)
        tr->dropped++;
    pthread_mutex_unlock(&tr->mu);
    if (!traced || full)
        return;
    span_rec r;
    fill_rec(&r, d);   /* outside the lock: the clock and the ids */
    pthread_mutex_lock(&tr->mu);
    if (tr->len == tr->cap) {
        tr->dropped++;
    } else {
        tr->ring[(tr->head + tr->len) % tr->cap] = r;
        tr->len++;
    }
    pthread_mutex_unlock(&tr->mu);
}

/* ---- the exporter's side ----------------------------------------------------- */

size_t tracer_wait(tracer *tr, size_t batch, double timeout_s)
{
    struct timespec ts;
    clock_gettime(CLOCK_REALTIME, &ts);
    int64_t ns = ts.tv_nsec + (int64_t)(timeout_s * 1e9);
    ts.tv_sec += (time_t)(ns / 1000000000LL);
    ts.tv_nsec = (long)(ns % 1000000000LL);
    pthread_mutex_lock(&tr->mu);
    while (tr->len < batch && !tr->woken)
        if (pthread_cond_timedwait(&tr->cv, &tr->mu, &ts) == ETIMEDOUT)
            break;
    tr->woken = false;
    size_t n = tr->len;
    pthread_mutex_unlock(&tr->mu);
    return n;
}

void tracer_wake(tracer *tr)
{
    pthread_mutex_lock(&tr->mu);
    tr->woken = true;
    pthread_cond_broadcast(&tr->cv);
    pthread_mutex_unlock(&tr->mu);
}

/* The OTLP JSON is written straight into a string buffer: at rate 1,
 * building it as jansson objects and dumping them cost more CPU than the
 * request being traced. */
#define PUT(b, lit) dl_sbuf_add((b), (lit), sizeof(lit) - 1)

static void attr_str(dl_sbuf *b, const char *key, const char *v)
{
    PUT(b, "{\"key\":");
    dl_sbuf_json_string(b, key);
    PUT(b, ",\"value\":{\"stringValue\":");
    dl_sbuf_json_string(b, v);
    PUT(b, "}}");
}

static void attr_int(dl_sbuf *b, const char *key, int64_t v)
{
    PUT(b, "{\"key\":");
    dl_sbuf_json_string(b, key);
    PUT(b, ",\"value\":{\"intValue\":\"");   /* OTLP JSON: int64 as a string */
    dl_sbuf_int(b, v);
    PUT(b, "\"}}");
}

/* A span up to its open "attributes" array: ids, name, kind and times. */
static void span_open(dl_sbuf *b, const char *trace_id, const char *id, const char *parent,
                      const char *name, int kind, int64_t t0, int64_t t1)
{
    PUT(b, "{\"traceId\":");
    dl_sbuf_json_string(b, trace_id);
    PUT(b, ",\"spanId\":");
    dl_sbuf_json_string(b, id);
    if (parent[0]) {
        PUT(b, ",\"parentSpanId\":");
        dl_sbuf_json_string(b, parent);
    }
    PUT(b, ",\"name\":");
    dl_sbuf_json_string(b, name);
    PUT(b, ",\"kind\":");
    dl_sbuf_int(b, kind);
    PUT(b, ",\"startTimeUnixNano\":\"");
    dl_sbuf_int(b, t0);
    PUT(b, "\",\"endTimeUnixNano\":\"");
    dl_sbuf_int(b, t1 > t0 ? t1 : t0);
    PUT(b, "\",\"attributes\":[");
}

/* The request's own span: SERVER (HTTP) or CONSUMER (Kafka), with its
 * attributes and its status. */
static void root_span(dl_sbuf *b, const span_rec *r, const char *id)
{
    char name[300];
    if (r->kafka)
        snprintf(name, sizeof(name), "%s process", r->topic);
    else
        snprintf(name, sizeof(name), "POST /v2/models/{model}/infer");
    span_open(b, r->trace_id, id, r->parent_id, name, r->kafka ? 5 : 2, r->t_received, r->t_done);
    attr_str(b, "dlserve.model", r->model);
    dl_sbuf_putc(b, ',');
    attr_int(b, "dlserve.model_version", r->version);
    if (r->kafka) {
        char part[16];
        snprintf(part, sizeof(part), "%d", r->partition);
        dl_sbuf_putc(b, ',');
        attr_str(b, "messaging.system", "kafka");
        dl_sbuf_putc(b, ',');
        attr_str(b, "messaging.operation.type", "process");
        dl_sbuf_putc(b, ',');
        attr_str(b, "messaging.destination.name", r->topic);
        dl_sbuf_putc(b, ',');
        attr_str(b, "messaging.destination.partition.id", part);
        dl_sbuf_putc(b, ',');
        attr_int(b, "messaging.kafka.offset", r->offset);
    } else {
        dl_sbuf_putc(b, ',');
        attr_str(b, "http.request.method", "POST");
        dl_sbuf_putc(b, ',');
        attr_str(b, "http.route", "/v2/models/{model}/infer");
        dl_sbuf_putc(b, ',');
        attr_int(b, "http.response.status_code", r->http_status);
    }
    bool error = r->kafka ? !r->ok : r->http_status >= 500;
    PUT(b, "],\"status\":{\"code\":");
    dl_sbuf_int(b, error ? 2 : 0);
    PUT(b, "}}");
}

/* r's spans appended to b's spans array (a comma before each but the first). */
static void rec_spans(dl_sbuf *b, const span_rec *r, bool first)
{
    char id[17], child[17];
    random_hex(id, 16);
    if (!first)
        dl_sbuf_putc(b, ',');
    root_span(b, r, id);
    if (!r->stages)
        return;
    const struct { const char *name; int64_t t0, t1; } stage[] = {
        {"queue", r->t_arrival, r->t_start},
        {"compute", r->t_start, r->t_end},
        {"answer", r->t_end, r->t_done},
    };
    for (size_t i = 0; i < 3; i++) {
        random_hex(child, 16);
        dl_sbuf_putc(b, ',');
        span_open(b, r->trace_id, child, id, stage[i].name, 1, stage[i].t0, stage[i].t1);
        PUT(b, "]}");
    }
}

static char *otlp_body(const span_rec *recs, size_t n)
{
    dl_sbuf b = {0};
    PUT(&b, "{\"resourceSpans\":[{\"resource\":{\"attributes\":[");
    attr_str(&b, "service.name", "dlserve");
    PUT(&b, "]},\"scopeSpans\":[{\"scope\":{\"name\":\"dlserve\",\"version\":");
    dl_sbuf_json_string(&b, DL_VERSION_STRING);
    PUT(&b, "},\"spans\":[");
    for (size_t i = 0; i < n; i++)
        rec_spans(&b, &recs[i], i == 0);
    PUT(&b, "]}]}]}");
    if (b.oom) {
        dl_sbuf_free(&b);
        return NULL;
    }
    return b.s;
}

char *tracer_take(tracer *tr, size_t max, size_t *n)
{
    pthread_mutex_lock(&tr->mu);
    size_t k = tr->len < max ? tr->len : max;
    span_rec *recs = k ? malloc(k * sizeof(*recs)) : NULL;
    for (size_t i = 0; recs && i < k; i++)
        recs[i] = tr->ring[(tr->head + i) % tr->cap];
    if (k) {   /* taken either way: out of memory drops them */
        tr->head = (tr->head + k) % tr->cap;
        tr->len -= k;
    }
    pthread_mutex_unlock(&tr->mu);
    char *body = recs ? otlp_body(recs, k) : NULL;
    free(recs);
    if (k && !body) {
        pthread_mutex_lock(&tr->mu);
        tr->dropped += (int64_t)k;
        pthread_mutex_unlock(&tr->mu);
    }
    *n = body ? k : 0;
    return body;
}

void tracer_exported(tracer *tr, size_t n, bool ok, const char *why)
{
    pthread_mutex_lock(&tr->mu);
    if (ok) {
        tr->exported += (int64_t)n;
    } else {
        tr->failures++;
        tr->dropped += (int64_t)n;
        snprintf(tr->last_error, sizeof(tr->last_error), "%s", why ? why : "export failed");
    }
    pthread_mutex_unlock(&tr->mu);
}

json_t *tracer_status(tracer *tr)
{
    pthread_mutex_lock(&tr->mu);
    json_t *o = json_pack("{s:s, s:s, s:f, s:I, s:I, s:I, s:I}", "endpoint",
                          tr->endpoint, "level",
                          tr->global.level == DL_TRACE_LEVEL_OFF ? "off" : "timestamps", "rate",
                          tr->global.rate, "queued", (json_int_t)tr->len, "exported",
                          (json_int_t)tr->exported, "dropped", (json_int_t)tr->dropped,
                          "export_failures", (json_int_t)tr->failures);
    if (o && tr->last_error[0])
        json_object_set_new(o, "last_error", json_string(tr->last_error));
    pthread_mutex_unlock(&tr->mu);
    return o;
}

void tracer_metrics(tracer *tr, dl_sbuf *out)
{
    pthread_mutex_lock(&tr->mu);
    int64_t exported = tr->exported, dropped = tr->dropped, failures = tr->failures;
    size_t len = tr->len;
    pthread_mutex_unlock(&tr->mu);
    dl_prom_family(out, "dlserve_trace_spans_exported_total", "counter",
                   "Traced requests whose spans reached the OTLP collector.");
    dl_prom_sample(out, "dlserve_trace_spans_exported_total", (double)exported, NULL);
    dl_prom_family(out, "dlserve_trace_spans_dropped_total", "counter",
                   "Traced requests whose spans were dropped: the queue was full or the "
                   "export failed.");
    dl_prom_sample(out, "dlserve_trace_spans_dropped_total", (double)dropped, NULL);
    dl_prom_family(out, "dlserve_trace_export_failures_total", "counter",
                   "OTLP export requests that failed.");
    dl_prom_sample(out, "dlserve_trace_export_failures_total", (double)failures, NULL);
    dl_prom_family(out, "dlserve_trace_queue_spans", "gauge",
                   "Traced requests waiting for export.");
    dl_prom_sample(out, "dlserve_trace_queue_spans", (double)len, NULL);
}

/* ---- Triton's trace extension ---------------------------------------------------- */

json_t *tracer_setting(tracer *tr, const char *model)
{
    pthread_mutex_lock(&tr->mu);
    setting s = effective(tr, model_find(tr, model));
    pthread_mutex_unlock(&tr->mu);
    char rate[32], count[24], freq[24];
    if (s.rate <= 0)
        snprintf(rate, sizeof(rate), "0");
    else
        snprintf(rate, sizeof(rate), "%.0f", 1.0 / s.rate);
    snprintf(count, sizeof(count), "%lld", (long long)s.count);
    snprintf(freq, sizeof(freq), "%lld", (long long)s.log_frequency);
    return json_pack("{s:[s], s:s, s:s, s:s, s:s}", "trace_level",
                     s.level == DL_TRACE_LEVEL_OFF ? "OFF" : "TIMESTAMPS", "trace_rate", rate,
                     "trace_count", count, "log_frequency", freq, "trace_mode", "opentelemetry");
}

/* A setting's value as text: Triton sends strings; numbers are taken too. */
static bool value_text(json_t *v, char *buf, size_t len)
{
    if (json_is_string(v))
        snprintf(buf, len, "%s", json_string_value(v));
    else if (json_is_integer(v))
        snprintf(buf, len, "%lld", (long long)json_integer_value(v));
    else if (json_is_real(v))
        snprintf(buf, len, "%.17g", json_real_value(v));
    else
        return false;
    return true;
}

static bool parse_int(const char *s, int64_t lo, int64_t *out)
{
    char *end;
    errno = 0;
    long long v = strtoll(s, &end, 10);
    if (!*s || *end || errno || v < lo)
        return false;
    *out = v;
    return true;
}

/* trace_level: ["OFF"] or ["TIMESTAMPS"] (a string is taken too). */
static dl_status parse_level(json_t *v, int *level, dl_err *err)
{
    json_t *one = json_is_array(v) && json_array_size(v) == 1 ? json_array_get(v, 0) : v;
    const char *s = json_string_value(one);
    if (s && strcmp(s, "OFF") == 0)
        *level = DL_TRACE_LEVEL_OFF;
    else if (s && strcmp(s, "TIMESTAMPS") == 0)
        *level = DL_TRACE_LEVEL_TIMESTAMPS;
    else
        return dl_err_set(err, DL_ERR_INVALID, "trace_level: [\"OFF\"] or [\"TIMESTAMPS\"] "
                          "(TENSORS is not supported)");
    return DL_OK;
}

/* trace_rate: "N", every N-th request ("0": none); or a share "0.25". */
static dl_status parse_rate(json_t *v, double *rate, dl_err *err)
{
    char s[64];
    int64_t n;
    if (value_text(v, s, sizeof(s))) {
        if (strchr(s, '.')) {
            char *end;
            double r = strtod(s, &end);
            if (!*end && r >= 0 && r <= 1) {
                *rate = r;
                return DL_OK;
            }
        } else if (parse_int(s, 0, &n)) {
            *rate = n == 0 ? 0.0 : 1.0 / (double)n;
            return DL_OK;
        }
    }
    return dl_err_set(err, DL_ERR_INVALID, "trace_rate: \"N\" (every N-th request, \"0\": "
                      "none) or a share from \"0.0\" to \"1.0\"");
}

/* One setting into s (its SET_* bit into *set); a null resets it for a model. */
static dl_status apply_one(const char *key, json_t *v, bool model, setting *s, unsigned *set,
                           dl_err *err)
{
    unsigned bit = strcmp(key, "trace_level") == 0     ? SET_LEVEL
                   : strcmp(key, "trace_rate") == 0    ? SET_RATE
                   : strcmp(key, "trace_count") == 0   ? SET_COUNT
                   : strcmp(key, "log_frequency") == 0 ? SET_LOG_FREQ
                                                       : 0;
    if (!bit) {
        if (strcmp(key, "trace_file") == 0 || strcmp(key, "trace_mode") == 0)
            return dl_err_set(err, DL_ERR_INVALID, "%s cannot be set: spans go to [trace] "
                              "otlp_endpoint (trace_mode opentelemetry)", key);
        return dl_err_set(err, DL_ERR_INVALID, "unknown trace setting '%.64s'", key);
    }
    if (json_is_null(v)) {
        if (!model)
            return dl_err_set(err, DL_ERR_INVALID, "%s: null resets a model's setting; the "
                              "global one needs a value", key);
        *set &= ~bit;
        return DL_OK;
    }
    char text[64];
    dl_status st = DL_OK;
    if (bit == SET_LEVEL)
        st = parse_level(v, &s->level, err);
    else if (bit == SET_RATE)
        st = parse_rate(v, &s->rate, err);
    else if (!value_text(v, text, sizeof(text)) ||
             !parse_int(text, bit == SET_COUNT ? -1 : 0,
                        bit == SET_COUNT ? &s->count : &s->log_frequency))
        st = dl_err_set(err, DL_ERR_INVALID, "%s: an integer %s", key,
                        bit == SET_COUNT ? "(-1: no limit)" : "of 0 or more");
    if (st == DL_OK)
        *set |= bit;
    return st;
}

dl_status tracer_update(tracer *tr, const char *model, const char *body, size_t len,
                        dl_err *err)
{
    json_error_t je;
    json_t *j = json_loadb(body, len, 0, &je);
    if (!json_is_object(j)) {
        json_decref(j);
        return dl_err_set(err, DL_ERR_INVALID, "the body must be a JSON object of trace "
                          "settings");
    }
    pthread_mutex_lock(&tr->mu);
    model_setting *ms = model_find(tr, model);
    model_setting fresh = {0};
    if (model && !ms)
        snprintf(fresh.name, sizeof(fresh.name), "%s", model);
    model_setting work = ms ? *ms : fresh;
    setting s = model ? work.s : tr->global;
    unsigned set = work.set;
    dl_status st = DL_OK;
    const char *key;
    json_t *v;
    json_object_foreach(j, key, v) {
        if ((st = apply_one(key, v, model != NULL, &s, &set, err)) != DL_OK)
            break;
    }
    if (st == DL_OK && model && !ms && tr->nmodels == MODELS_MAX)
        st = dl_err_set(err, DL_ERR_INVALID, "too many models with trace settings (%d)",
                        MODELS_MAX);
    if (st == DL_OK && !model) {
        tr->global = s;
    } else if (st == DL_OK) {
        if (!ms)
            ms = &tr->models[tr->nmodels++];
        work.s = s;
        work.set = set;
        *ms = work;
    }
    pthread_mutex_unlock(&tr->mu);
    json_decref(j);
    return st;
}
