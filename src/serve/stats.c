/* stats.c: the daemon's counters and histograms (per model and version),
 * rendered as Prometheus text for /metrics and as JSON for /status.
 *
 * Metric families and what feeds them:
 *
 *   nv_inference_request_success / _failure   counter  stats_request (ok / !ok)
 *   nv_inference_count                        counter  stats_request: samples of ok requests
 *   nv_inference_exec_count                   counter  stats_batch: one per executed batch
 *   nv_inference_request_duration_us          counter  stats_request: total_us of ok requests
 *   nv_inference_queue_duration_us            counter  stats_request: queue_us of ok requests
 *   nv_inference_compute_infer_duration_us    counter  stats_request: compute_us of ok requests
 *   nv_inference_compute_input_duration_us    counter  stats_request_times: input_us of ok requests
 *   nv_inference_compute_output_duration_us   counter  stats_request_times: output_us of ok requests
 *       labels {model, version}; names, types and semantics as Triton's
 *       (cumulative microseconds of successful requests, so that
 *       rate(x_duration_us) / rate(nv_inference_request_success) is the
 *       mean in microseconds).
 *   dlserve_request_duration_seconds          histogram {model}: total of ok requests
 *   dlserve_batch_size                        histogram {model}: samples per batch
 *   dlserve_request_timeouts_total            counter  {model, version}: stats_timeout
 *   dlserve_generated_tokens_total            counter  {model, version}: stats_generate
 *   dlserve_time_to_first_token_seconds       histogram {model}: stats_generate
 *   dlserve_time_per_output_token_seconds     histogram {model}: stats_generate
 *   dlserve_cache_hits_total / _misses_total  counter  {model, version}: stats_request_times
 *       (only the series that looked the response cache up)
 *   dlserve_http_responses_total              counter  {method, handler, code}
 *   process_*                                 read from /proc/self at each scrape
 *
 * promtool (Debian 12: prometheus 2.42) and the Triton names.
 * `promtool check metrics` exits 0 when the text is clean, 1 when it does
 * not parse and 3 when it parses but its linter (client_golang's promlint)
 * reports a problem; 2.42 has no flag to turn the linter off (--lint came
 * in later releases). The Triton families trip three lint rules:
 *   - "counter metrics should have "_total" suffix" (all seven),
 *   - "metric names should not contain abbreviated units" (the three
 *     *_duration_us), and
 *   - "non-histogram and non-summary metrics should not have "_count"
 *     suffix" (nv_inference_count, nv_inference_exec_count).
 * Typing them `gauge` or `untyped` silences the first rule only (the other
 * two look at the name whatever the type) and would mislabel monotonic
 * counters, so they stay `counter`, as Triton exposes them. The
 * Triton names are part of the contract (docs/serving.md, "The HTTP
 * API"): the lint findings on them are expected, and the unit test
 * asserts that promtool parses the whole text (exit 0 or 3), that those
 * are the only findings, and that everything else (dlserve_*, process_*)
 * passes with exit 0.
 *
 * Cardinality: series are created by the names callers pass. After
 * STATS_MAX_SERIES (model, version) pairs or STATS_MAX_MODELS models,
 * further new ones are counted under model="_other", version="0", so that
 * a flood of bad names cannot grow memory or the scrape without bound. */
#define _POSIX_C_SOURCE 200809L

#include "serve/serve.h"

#include <dirent.h>
#include <inttypes.h>
#include <math.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <sys/times.h>
#include <time.h>
#include <unistd.h>

#define STATS_MAX_SERIES 4096
#define STATS_MAX_MODELS 1024
#define STATS_OTHER      "_other"

/* Upper bounds (le) of dlserve_request_duration_seconds, in seconds. */
static const double req_bounds[] = {
    0.0001, 0.00025, 0.0005, 0.001, 0.0025, 0.005, 0.01,
    0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10,
};
#define N_REQ_BOUNDS (sizeof(req_bounds) / sizeof(req_bounds[0]))

/* Upper bounds of dlserve_batch_size, in samples. */
static const double batch_bounds[] = {
    1, 2, 4, 8, 16, 32, 64, 128, 256, 512, 1024,
};
#define N_BATCH_BOUNDS (sizeof(batch_bounds) / sizeof(batch_bounds[0]))

#define HTTP_CODE_MIN 100
#define HTTP_CODE_MAX 599
/* Distinct (method, handler, code) series of dlserve_http_responses_total:
 * methods and handlers come from small fixed sets, so these are plenty;
 * past them answers are not counted. */
#define STATS_MAX_HTTP 1024
#define HTTP_LABEL_MAX 24

/* One series of dlserve_http_responses_total. */
typedef struct http_count {
    char     method[HTTP_LABEL_MAX], handler[HTTP_LABEL_MAX];
    int      code;
    uint64_t n;
} http_count;

/* Distinct batch sizes kept per series for Triton's batch_stats; sizes
 * past these are counted in the series but get no entry of their own. */
#define STATS_MAX_BATCH_SIZES 256

/* One batch size's executions and their compute durations (microseconds). */
typedef struct batch_stat {
    int64_t  size;
    uint64_t count;
    double   input_us, infer_us, output_us;
} batch_stat;

/* One (model, version): Triton's counters. Durations are summed in
 * microseconds. */
typedef struct series {
    char    *model;           /* owned */
    int64_t  version;
    uint64_t success, failure;
    uint64_t inferences;      /* samples of successful requests */
    uint64_t executions;      /* batches */
    uint64_t timeouts;        /* requests refused: queued past their deadline */
    uint64_t gen_tokens;      /* tokens generated */
    uint64_t computed;        /* successful requests that ran (not answered by the cache) */
    uint64_t cache_hits, cache_misses;
    double   cache_hit_us, cache_miss_us;
    double   request_us, queue_us, compute_us;   /* compute_us: the infer part */
    double   input_us, output_us, fail_us;
    double   last_inference;  /* Unix seconds of the last successful request; 0: none */
    batch_stat *batches;      /* owned, sorted by size */
    size_t      nbatches, capbatches;
} series;

/* One model: its histograms, with per-bucket (not cumulative) counts; the
 * last bucket is +Inf. */
typedef struct model_stats {
    char    *name;            /* owned */
    uint64_t req_buckets[N_REQ_BOUNDS + 1];
    uint64_t req_count;
    double   req_sum;         /* seconds */
    uint64_t batch_buckets[N_BATCH_BOUNDS + 1];
    uint64_t batch_count;
    double   batch_sum;       /* samples */
    /* generation: time to first token, time per output token (seconds) */
    uint64_t ttft_buckets[N_REQ_BOUNDS + 1];
    uint64_t ttft_count;
    double   ttft_sum;
    uint64_t tpot_buckets[N_REQ_BOUNDS + 1];
    uint64_t tpot_count;
    double   tpot_sum;
} model_stats;

struct stats {
    pthread_mutex_t mu;
    series        **series;    /* sorted by (model, version) */
    size_t          nseries, capseries;
    model_stats   **models;    /* sorted by name */
    size_t          nmodels, capmodels;
    http_count     *http;      /* sorted by (handler, method, code) */
    size_t          nhttp;
    double          start_time; /* Unix seconds */
};

/* ---- process start time ------------------------------------------------ */

/* Unix time at which this process started: /proc/self/stat field 22
 * (starttime, clock ticks after boot) plus btime from /proc/stat, as the
 * Prometheus client libraries compute it. Falls back to "now". */
static double process_start_time(void)
{
    double now = (double)time(NULL);
    long tck = sysconf(_SC_CLK_TCK);
    char buf[1024];
    FILE *f = fopen("/proc/self/stat", "r");
    if (!f || tck <= 0) {
        if (f)
            fclose(f);
        return now;
    }
    size_t n = fread(buf, 1, sizeof(buf) - 1, f);
    fclose(f);
    buf[n] = '\0';
    /* comm (field 2) may hold spaces and parentheses: fields resume after
     * the last ')'; the next token is field 3 (state). */
    char *p = strrchr(buf, ')');
    if (!p)
        return now;
    p++;
    unsigned long long starttime = 0;
    int field = 2;
    char *save = NULL;
    for (char *tok = strtok_r(p, " ", &save); tok; tok = strtok_r(NULL, " ", &save)) {
        if (++field == 22) {
            starttime = strtoull(tok, NULL, 10);
            break;
        }
    }
    if (field != 22)
        return now;

    f = fopen("/proc/stat", "r");
    if (!f)
        return now;
    unsigned long long btime = 0;
    char line[256];
    bool found = false;
    while (fgets(line, sizeof(line), f)) {
        if (sscanf(line, "btime %llu", &btime) == 1) {
            found = true;
            break;
        }
    }
    fclose(f);
    if (!found)
        return now;
    return (double)btime + (double)starttime / (double)tck;
}

/* ---- lifecycle --------------------------------------------------------- */

dl_status stats_new(stats **out, dl_err *err)
{
    *out = NULL;
    stats *st = calloc(1, sizeof(*st));
    if (!st)
        return dl_err_set(err, DL_ERR_NOMEM, "stats");
    if (pthread_mutex_init(&st->mu, NULL) != 0) {
        free(st);
        return dl_err_set(err, DL_ERR_NOMEM, "stats: mutex");
    }
    st->start_time = process_start_time();
    *out = st;
    return DL_OK;
}

void stats_free(stats *st)
{
    if (!st)
        return;
    for (size_t i = 0; i < st->nseries; i++) {
        free(st->series[i]->model);
        free(st->series[i]->batches);
        free(st->series[i]);
    }
    free(st->series);
    for (size_t i = 0; i < st->nmodels; i++) {
        free(st->models[i]->name);
        free(st->models[i]);
    }
    free(st->models);
    free(st->http);
    pthread_mutex_destroy(&st->mu);
    free(st);
}

/* ---- lookup (caller holds st->mu) ---------------------------------------- */

static int series_cmp(const char *model, int64_t version, const series *s)
{
    int c = strcmp(model, s->model);
    if (c != 0)
        return c;
    return (version > s->version) - (version < s->version);
}

/* Room for one more element in arr (n used of *cap): arr itself, or a
 * larger copy; NULL when out of memory (arr is then untouched). */
static void *grow(void *arr, size_t n, size_t *cap, size_t elem)
{
    if (n < *cap)
        return arr;
    size_t ncap = *cap ? *cap * 2 : 16;
    void *p = realloc(arr, ncap * elem);
    if (p)
        *cap = ncap;
    return p;
}

/* Binary search: index of the match, or where it would go (*found false). */
static size_t series_find(const stats *st, const char *model, int64_t version, bool *found)
{
    size_t lo = 0, hi = st->nseries;
    while (lo < hi) {
        size_t mid = lo + (hi - lo) / 2;
        int c = series_cmp(model, version, st->series[mid]);
        if (c == 0) {
            *found = true;
            return mid;
        }
        if (c < 0)
            hi = mid;
        else
            lo = mid + 1;
    }
    *found = false;
    return lo;
}

/* The series of (model, version), created if new; NULL only when out of
 * memory. Past the cardinality cap, new pairs map to the overflow series. */
static series *series_get(stats *st, const char *model, int64_t version)
{
    bool found;
    size_t i = series_find(st, model, version, &found);
    if (found)
        return st->series[i];
    if (st->nseries >= STATS_MAX_SERIES && strcmp(model, STATS_OTHER) != 0)
        return series_get(st, STATS_OTHER, 0);

    series *s = calloc(1, sizeof(*s));
    if (!s)
        return NULL;
    series **arr = grow(st->series, st->nseries, &st->capseries, sizeof(*arr));
    if (arr)
        st->series = arr;   /* realloc may have moved it */
    s->model = strdup(model);
    if (!s->model || !arr) {
        free(s->model);
        free(s);
        return NULL;
    }
    s->version = version;
    memmove(&st->series[i + 1], &st->series[i], (st->nseries - i) * sizeof(*st->series));
    st->series[i] = s;
    st->nseries++;
    return s;
}

static model_stats *model_get(stats *st, const char *name)
{
    size_t lo = 0, hi = st->nmodels;
    while (lo < hi) {
        size_t mid = lo + (hi - lo) / 2;
        int c = strcmp(name, st->models[mid]->name);
        if (c == 0)
            return st->models[mid];
        if (c < 0)
            hi = mid;
        else
            lo = mid + 1;
    }
    if (st->nmodels >= STATS_MAX_MODELS && strcmp(name, STATS_OTHER) != 0)
        return model_get(st, STATS_OTHER);

    model_stats *ms = calloc(1, sizeof(*ms));
    if (!ms)
        return NULL;
    model_stats **arr = grow(st->models, st->nmodels, &st->capmodels, sizeof(*arr));
    if (arr)
        st->models = arr;
    ms->name = strdup(name);
    if (!ms->name || !arr) {
        free(ms->name);
        free(ms);
        return NULL;
    }
    memmove(&st->models[lo + 1], &st->models[lo], (st->nmodels - lo) * sizeof(*st->models));
    st->models[lo] = ms;
    st->nmodels++;
    return ms;
}

/* Index of the first bucket whose bound is >= v (le is inclusive); nb for
 * +Inf. */
static size_t bucket_of(const double *bounds, size_t nb, double v)
{
    size_t i = 0;
    while (i < nb && v > bounds[i])
        i++;
    return i;
}

/* Durations from callers are clamped to [0, inf): a NaN or a negative
 * (clock step) must not poison a cumulative counter. */
static double nonneg(double v)
{
    return (v > 0 && isfinite(v)) ? v : 0.0;
}

/* ---- recording --------------------------------------------------------- */

void stats_request(stats *st, const char *model, int64_t version, bool ok,
                   int64_t samples, double queue_us, double compute_us,
                   double total_us)
{
    req_times t = {.queue_us = queue_us, .infer_us = compute_us, .total_us = total_us};
    stats_request_times(st, model, version, ok, samples, &t);
}

void stats_request_times(stats *st, const char *model, int64_t version, bool ok,
                         int64_t samples, const req_times *t)
{
    if (!model)
        model = "";
    double queue_us = nonneg(t->queue_us), input_us = nonneg(t->input_us);
    double compute_us = nonneg(t->infer_us), output_us = nonneg(t->output_us);
    double total_us = nonneg(t->total_us);
    struct timespec wall;
    clock_gettime(CLOCK_REALTIME, &wall);

    pthread_mutex_lock(&st->mu);
    series *s = series_get(st, model, version);
    if (s) {
        if (t->cache_hit) {
            s->cache_hits++;
            s->cache_hit_us += nonneg(t->cache_us);
        } else if (t->cache_miss) {
            s->cache_misses++;
            s->cache_miss_us += nonneg(t->cache_us);
        }
        if (ok) {
            s->success++;
            s->request_us += total_us;
            s->last_inference = (double)wall.tv_sec + (double)wall.tv_nsec * 1e-9;
        }
        if (ok && !t->cache_hit) {
            s->computed++;
            s->inferences += samples > 0 ? (uint64_t)samples : 0;
            s->queue_us += queue_us;
            s->compute_us += compute_us;
            s->input_us += input_us;
            s->output_us += output_us;
        } else if (!ok) {
            s->failure++;
            s->fail_us += total_us;
        }
    }
    if (ok) {
        model_stats *ms = model_get(st, model);
        if (ms) {
            /* "/ 1e6", not "* 1e-6": 40 us is then 4e-05, not 3.9999999999999996e-05 */
            double sec = total_us / 1e6;
            ms->req_buckets[bucket_of(req_bounds, N_REQ_BOUNDS, sec)]++;
            ms->req_count++;
            ms->req_sum += sec;
        }
    }
    pthread_mutex_unlock(&st->mu);
}

/* The batch_stat of `size` in s, created if new; NULL past
 * STATS_MAX_BATCH_SIZES sizes or out of memory. */
static batch_stat *batch_stat_get(series *s, int64_t size)
{
    size_t lo = 0, hi = s->nbatches;
    while (lo < hi) {
        size_t mid = lo + (hi - lo) / 2;
        if (s->batches[mid].size == size)
            return &s->batches[mid];
        if (size < s->batches[mid].size)
            hi = mid;
        else
            lo = mid + 1;
    }
    if (s->nbatches >= STATS_MAX_BATCH_SIZES)
        return NULL;
    batch_stat *arr = grow(s->batches, s->nbatches, &s->capbatches, sizeof(*arr));
    if (!arr)
        return NULL;
    s->batches = arr;
    memmove(&arr[lo + 1], &arr[lo], (s->nbatches - lo) * sizeof(*arr));
    arr[lo] = (batch_stat){.size = size};
    s->nbatches++;
    return &arr[lo];
}

void stats_batch(stats *st, const char *model, int64_t version, int64_t samples)
{
    stats_batch_times(st, model, version, samples, 0, 0, 0);
}

void stats_timeout(stats *st, const char *model, int64_t version)
{
    pthread_mutex_lock(&st->mu);
    series *s = series_get(st, model ? model : "", version);
    if (s)
        s->timeouts++;
    pthread_mutex_unlock(&st->mu);
}

/* One observation v (seconds) of a histogram over req_bounds. */
static void observe(uint64_t *buckets, uint64_t *count, double *sum, double v)
{
    buckets[bucket_of(req_bounds, N_REQ_BOUNDS, v)]++;
    (*count)++;
    *sum += v;
}

void stats_generate(stats *st, const char *model, int64_t version, int64_t tokens,
                    double ttft_s, double tpot_s)
{
    if (!model)
        model = "";
    pthread_mutex_lock(&st->mu);
    series *s = series_get(st, model, version);
    if (s)
        s->gen_tokens += tokens > 0 ? (uint64_t)tokens : 0;
    model_stats *ms = model_get(st, model);
    if (ms && ttft_s >= 0 && isfinite(ttft_s))
        observe(ms->ttft_buckets, &ms->ttft_count, &ms->ttft_sum, ttft_s);
    if (ms && tpot_s >= 0 && isfinite(tpot_s))
        observe(ms->tpot_buckets, &ms->tpot_count, &ms->tpot_sum, tpot_s);
    pthread_mutex_unlock(&st->mu);
}

void stats_batch_times(stats *st, const char *model, int64_t version, int64_t samples,
                       double input_us, double infer_us, double output_us)
{
    if (!model)
        model = "";
    if (samples < 0)
        samples = 0;

    pthread_mutex_lock(&st->mu);
    series *s = series_get(st, model, version);
    if (s) {
        s->executions++;
        batch_stat *bs = batch_stat_get(s, samples);
        if (bs) {
            bs->count++;
            bs->input_us += nonneg(input_us);
            bs->infer_us += nonneg(infer_us);
            bs->output_us += nonneg(output_us);
        }
    }
    model_stats *ms = model_get(st, model);
    if (ms) {
        ms->batch_buckets[bucket_of(batch_bounds, N_BATCH_BOUNDS, (double)samples)]++;
        ms->batch_count++;
        ms->batch_sum += (double)samples;
    }
    pthread_mutex_unlock(&st->mu);
}

/* Orders http_count by (handler, method, code). */
static int http_cmp(const char *handler, const char *method, int code, const http_count *c)
{
    int r = strcmp(handler, c->handler);
    if (r == 0)
        r = strcmp(method, c->method);
    return r ? r : (code > c->code) - (code < c->code);
}

void stats_http(stats *st, const char *method, const char *handler, int code)
{
    /* Codes outside 100..599 are not HTTP status codes: not counted. */
    if (code < HTTP_CODE_MIN || code > HTTP_CODE_MAX)
        return;
    char m[HTTP_LABEL_MAX], hd[HTTP_LABEL_MAX];
    snprintf(m, sizeof(m), "%s", method ? method : "");
    snprintf(hd, sizeof(hd), "%s", handler ? handler : "");
    pthread_mutex_lock(&st->mu);
    size_t i = 0;
    int r = 1;
    while (i < st->nhttp && (r = http_cmp(hd, m, code, &st->http[i])) > 0)
        i++;
    if (i < st->nhttp && r == 0) {
        st->http[i].n++;
    } else if (st->nhttp < STATS_MAX_HTTP) {
        if (!st->http)
            st->http = calloc(STATS_MAX_HTTP, sizeof(*st->http));
        if (st->http) {
            memmove(&st->http[i + 1], &st->http[i], (st->nhttp - i) * sizeof(*st->http));
            st->http[i] = (http_count){.code = code, .n = 1};
            memcpy(st->http[i].method, m, sizeof(m));
            memcpy(st->http[i].handler, hd, sizeof(hd));
            st->nhttp++;
        }
    }
    pthread_mutex_unlock(&st->mu);
}

/* ---- text ---------------------------------------------------------------- */

/* name{model="..",version=".."} value */
static void sample_series(dl_sbuf *b, const char *name, const series *s, double v)
{
    char version[24];
    snprintf(version, sizeof(version), "%" PRId64, s->version);
    dl_prom_sample(b, name, v, "model", s->model, "version", version, NULL);
}

/* The _bucket/_sum/_count lines of one model's histogram; buckets are
 * made cumulative here. */
static void sample_histo(dl_sbuf *b, const char *name, const char *model, const double *bounds,
                         size_t nb, const uint64_t *buckets, uint64_t count, double sum)
{
    char bucket[128], sum_name[128], count_name[128], le[DL_PROM_VALUE_CHARS];
    snprintf(bucket, sizeof(bucket), "%s_bucket", name);
    snprintf(sum_name, sizeof(sum_name), "%s_sum", name);
    snprintf(count_name, sizeof(count_name), "%s_count", name);
    uint64_t cum = 0;
    for (size_t i = 0; i <= nb; i++) {
        cum += buckets[i];
        dl_prom_fmt_value(le, i < nb ? bounds[i] : INFINITY);
        dl_prom_sample(b, bucket, (double)cum, "model", model, "le", le, NULL);
    }
    dl_prom_sample(b, sum_name, sum, "model", model, NULL);
    dl_prom_sample(b, count_name, (double)count, "model", model, NULL);
}

/* ---- process metrics --------------------------------------------------- */

/* Open descriptors: the entries of /proc/self/fd, less the one that
 * reading the folder itself holds. -1 when /proc is not there. */
static long open_fds(void)
{
    DIR *d = opendir("/proc/self/fd");
    if (!d)
        return -1;
    long n = 0;
    struct dirent *e;
    while ((e = readdir(d)))
        if (e->d_name[0] != '.')
            n++;
    closedir(d);
    return n > 0 ? n - 1 : 0;
}

static void process_metrics(dl_sbuf *b, double start_time)
{
    long page = sysconf(_SC_PAGESIZE);
    unsigned long long vsz = 0, rss = 0;
    FILE *f = fopen("/proc/self/statm", "r");
    bool have_statm = false;
    if (f) {
        have_statm = fscanf(f, "%llu %llu", &vsz, &rss) == 2 && page > 0;
        fclose(f);
    }

    /* times() counts every thread of the process, user and system. */
    struct tms t;
    long tck = sysconf(_SC_CLK_TCK);
    bool have_cpu = times(&t) != (clock_t)-1 && tck > 0;

    long fds = open_fds();
    struct rlimit rl;
    bool have_max = getrlimit(RLIMIT_NOFILE, &rl) == 0 && rl.rlim_cur != RLIM_INFINITY;

    if (have_cpu) {
        dl_prom_family(b, "process_cpu_seconds_total", "counter",
                       "Total user and system CPU time spent in seconds.");
        dl_prom_sample(b, "process_cpu_seconds_total",
                       (double)(t.tms_utime + t.tms_stime) / (double)tck, NULL);
    }
    if (fds >= 0) {
        dl_prom_family(b, "process_open_fds", "gauge", "Number of open file descriptors.");
        dl_prom_sample(b, "process_open_fds", (double)fds, NULL);
    }
    if (have_max) {
        dl_prom_family(b, "process_max_fds", "gauge", "Maximum number of open file descriptors.");
        dl_prom_sample(b, "process_max_fds", (double)rl.rlim_cur, NULL);
    }
    if (have_statm) {
        dl_prom_family(b, "process_resident_memory_bytes", "gauge",
                       "Resident memory size in bytes.");
        dl_prom_sample(b, "process_resident_memory_bytes", (double)(rss * (unsigned long long)page),
                       NULL);
        dl_prom_family(b, "process_virtual_memory_bytes", "gauge", "Virtual memory size in bytes.");
        dl_prom_sample(b, "process_virtual_memory_bytes", (double)(vsz * (unsigned long long)page),
                       NULL);
    }
    dl_prom_family(b, "process_start_time_seconds", "gauge",
                   "Start time of the process since unix epoch in seconds.");
    dl_prom_sample(b, "process_start_time_seconds", start_time, NULL);
}

/* ---- exposition -------------------------------------------------------- */

enum { F_SUCCESS, F_FAILURE, F_COUNT, F_EXEC };

char *stats_prometheus(stats *st, const char *extra)
{
    dl_sbuf b = {0};
    static const struct {
        const char *name, *help;
    } counters[] = {
        [F_SUCCESS] = {"nv_inference_request_success",
                       "Number of successful inference requests, all batch sizes"},
        [F_FAILURE] = {"nv_inference_request_failure",
                       "Number of failed inference requests, all batch sizes"},
        [F_COUNT]   = {"nv_inference_count",
                       "Number of inferences performed (samples of successful requests)"},
        [F_EXEC]    = {"nv_inference_exec_count",
                       "Number of model executions performed (batches)"},
    };
    static const struct {
        const char *name, *help;
    } durations[] = {
        {"nv_inference_request_duration_us",
         "Cumulative inference request duration in microseconds (successful requests)"},
        {"nv_inference_queue_duration_us",
         "Cumulative inference queuing duration in microseconds (successful requests)"},
        {"nv_inference_compute_infer_duration_us",
         "Cumulative compute inference duration in microseconds (successful requests)"},
        {"nv_inference_compute_input_duration_us",
         "Cumulative compute input duration in microseconds (successful requests)"},
        {"nv_inference_compute_output_duration_us",
         "Cumulative compute output duration in microseconds (successful requests)"},
    };

    pthread_mutex_lock(&st->mu);
    for (size_t f = 0; f < sizeof(counters) / sizeof(counters[0]); f++) {
        dl_prom_family(&b, counters[f].name, "counter", counters[f].help);
        for (size_t i = 0; i < st->nseries; i++) {
            const series *s = st->series[i];
            uint64_t v = f == F_SUCCESS ? s->success
                       : f == F_FAILURE ? s->failure
                       : f == F_COUNT   ? s->inferences
                                        : s->executions;
            sample_series(&b, counters[f].name, s, (double)v);
        }
    }
    for (size_t f = 0; f < sizeof(durations) / sizeof(durations[0]); f++) {
        dl_prom_family(&b, durations[f].name, "counter", durations[f].help);
        for (size_t i = 0; i < st->nseries; i++) {
            const series *s = st->series[i];
            double v = f == 0 ? s->request_us : f == 1 ? s->queue_us
                     : f == 2 ? s->compute_us : f == 3 ? s->input_us : s->output_us;
            sample_series(&b, durations[f].name, s, v);
        }
    }

    dl_prom_family(&b, "dlserve_request_duration_seconds", "histogram",
              "Time from arrival to answer of successful inference requests in seconds.");
    for (size_t i = 0; i < st->nmodels; i++) {
        const model_stats *ms = st->models[i];
        if (ms->req_count)
            sample_histo(&b, "dlserve_request_duration_seconds", ms->name, req_bounds,
                         N_REQ_BOUNDS, ms->req_buckets, ms->req_count, ms->req_sum);
    }
    dl_prom_family(&b, "dlserve_batch_size", "histogram", "Samples per executed batch.");
    for (size_t i = 0; i < st->nmodels; i++) {
        const model_stats *ms = st->models[i];
        if (ms->batch_count)
            sample_histo(&b, "dlserve_batch_size", ms->name, batch_bounds, N_BATCH_BOUNDS,
                         ms->batch_buckets, ms->batch_count, ms->batch_sum);
    }

    dl_prom_family(&b, "dlserve_request_timeouts_total", "counter",
              "Inference requests refused because they were queued past their timeout.");
    for (size_t i = 0; i < st->nseries; i++)
        sample_series(&b, "dlserve_request_timeouts_total", st->series[i],
                      (double)st->series[i]->timeouts);

    dl_prom_family(&b, "dlserve_generated_tokens_total", "counter",
                   "Tokens generated, by model and version.");
    for (size_t i = 0; i < st->nseries; i++)
        sample_series(&b, "dlserve_generated_tokens_total", st->series[i],
                      (double)st->series[i]->gen_tokens);
    dl_prom_family(&b, "dlserve_time_to_first_token_seconds", "histogram",
                   "Time from arrival to the first generated token, in seconds.");
    for (size_t i = 0; i < st->nmodels; i++) {
        const model_stats *ms = st->models[i];
        if (ms->ttft_count)
            sample_histo(&b, "dlserve_time_to_first_token_seconds", ms->name, req_bounds,
                         N_REQ_BOUNDS, ms->ttft_buckets, ms->ttft_count, ms->ttft_sum);
    }
    dl_prom_family(&b, "dlserve_time_per_output_token_seconds", "histogram",
                   "Time per generated token after the first, in seconds.");
    for (size_t i = 0; i < st->nmodels; i++) {
        const model_stats *ms = st->models[i];
        if (ms->tpot_count)
            sample_histo(&b, "dlserve_time_per_output_token_seconds", ms->name, req_bounds,
                         N_REQ_BOUNDS, ms->tpot_buckets, ms->tpot_count, ms->tpot_sum);
    }

    dl_prom_family(&b, "dlserve_cache_hits_total", "counter",
                   "Inference requests answered from the response cache.");
    for (size_t i = 0; i < st->nseries; i++)
        if (st->series[i]->cache_hits + st->series[i]->cache_misses)
            sample_series(&b, "dlserve_cache_hits_total", st->series[i],
                          (double)st->series[i]->cache_hits);
    dl_prom_family(&b, "dlserve_cache_misses_total", "counter",
                   "Inference requests looked up in the response cache in vain, then computed.");
    for (size_t i = 0; i < st->nseries; i++)
        if (st->series[i]->cache_hits + st->series[i]->cache_misses)
            sample_series(&b, "dlserve_cache_misses_total", st->series[i],
                          (double)st->series[i]->cache_misses);

    dl_prom_family(&b, "dlserve_http_responses_total", "counter",
              "HTTP responses sent, by method, handler (the route) and status code.");
    for (size_t i = 0; i < st->nhttp; i++) {
        const http_count *c = &st->http[i];
        char code[8];
        snprintf(code, sizeof(code), "%d", c->code);
        dl_prom_sample(&b, "dlserve_http_responses_total", (double)c->n, "method", c->method,
                       "handler", c->handler, "code", code, NULL);
    }
    double start_time = st->start_time;
    pthread_mutex_unlock(&st->mu);

    /* /proc is read outside the lock: requests need not wait for it. */
    process_metrics(&b, start_time);
    if (extra)
        dl_sbuf_add(&b, extra, strlen(extra));

    if (b.oom) {
        free(b.s);
        return NULL;
    }
    return b.s;
}

/* ---- JSON -------------------------------------------------------------- */

/* json_int_t is long long: counters past 2^63 would need 292 years at a
 * billion a second, so the cast is safe. */
static json_t *jint(uint64_t v)
{
    return json_integer((json_int_t)v);
}

/* Adds one series under models[name][version]. jansson refuses keys that
 * are not UTF-8, so invalid bytes become U+FFFD as in the text format. */
static bool json_add_series(json_t *models, const series *s)
{
    dl_sbuf key = {0};
    const unsigned char *p = (const unsigned char *)s->model;
    dl_sbuf_add(&key, "", 0);
    while (*p) {
        size_t n = dl_utf8_len(p);
        dl_sbuf_add(&key, n ? (const char *)p : "\xEF\xBF\xBD", n ? n : 3);
        p += n ? n : 1;
    }
    if (key.oom) {
        free(key.s);
        return false;
    }
    json_t *mv = json_object_get(models, key.s);
    if (!mv) {
        mv = json_object();
        if (json_object_set_new(models, key.s, mv) != 0) {
            free(key.s);
            return false;
        }
    }
    free(key.s);

    char vkey[24];
    snprintf(vkey, sizeof(vkey), "%" PRId64, s->version);
    json_t *v = json_pack("{s:o, s:o, s:o, s:o, s:f, s:f, s:f, s:o}",
                          "success", jint(s->success),
                          "failure", jint(s->failure),
                          "inferences", jint(s->inferences),
                          "executions", jint(s->executions),
                          "request_duration_us", s->request_us,
                          "queue_duration_us", s->queue_us,
                          "compute_infer_duration_us", s->compute_us,
                          "generated_tokens", jint(s->gen_tokens));
    return v && json_object_set_new(mv, vkey, v) == 0;
}

json_t *stats_json(stats *st)
{
    json_t *http = json_object();
    json_t *models = json_object();
    uint64_t succ = 0, fail = 0, inf = 0, exec = 0;
    bool ok = http && models;

    pthread_mutex_lock(&st->mu);
    for (size_t i = 0; ok && i < st->nseries; i++) {
        const series *s = st->series[i];
        succ += s->success;
        fail += s->failure;
        inf += s->inferences;
        exec += s->executions;
        ok = json_add_series(models, s);
    }
    /* /status keeps counting by code alone */
    for (size_t i = 0; ok && i < st->nhttp; i++) {
        char key[16];
        snprintf(key, sizeof(key), "%d", st->http[i].code);
        json_t *had = json_object_get(http, key);
        uint64_t n = st->http[i].n + (had ? (uint64_t)json_integer_value(had) : 0);
        ok = json_object_set_new(http, key, jint(n)) == 0;
    }
    pthread_mutex_unlock(&st->mu);

    if (!ok) {
        json_decref(http);
        json_decref(models);
        return NULL;
    }
    /* "o" steals http and models, also when packing fails. */
    return json_pack("{s:o, s:o, s:o, s:o, s:o, s:o}",
                     "requests_success", jint(succ),
                     "requests_failure", jint(fail),
                     "inferences", jint(inf),
                     "executions", jint(exec),
                     "http", http,
                     "models", models);
}

/* ---- Triton's statistics extension ------------------------------------ */

/* {"count": n, "ns": cumulative nanoseconds} */
static json_t *duration_stat(uint64_t count, double us)
{
    return json_pack("{s:o, s:o}", "count", jint(count), "ns", jint((uint64_t)llround(us * 1e3)));
}

/* One $model_stat of Triton's statistics extension. */
static json_t *model_stat(const series *s)
{
    json_t *batches = json_array();
    for (size_t i = 0; batches && i < s->nbatches; i++) {
        const batch_stat *bs = &s->batches[i];
        json_t *e = json_pack("{s:I, s:o, s:o, s:o}", "batch_size", (json_int_t)bs->size,
                              "compute_input", duration_stat(bs->count, bs->input_us),
                              "compute_infer", duration_stat(bs->count, bs->infer_us),
                              "compute_output", duration_stat(bs->count, bs->output_us));
        if (!e || json_array_append_new(batches, e) != 0) {
            json_decref(batches);
            return NULL;
        }
    }
    if (!batches)
        return NULL;
    char version[24];
    snprintf(version, sizeof(version), "%" PRId64, s->version);
    /* last_inference: milliseconds since the epoch, as Triton's */
    /* as Triton's: success counts cache hits, queue and compute do not */
    json_t *inference = json_pack(
        "{s:o, s:o, s:o, s:o, s:o, s:o, s:o, s:o}",
        "success", duration_stat(s->success, s->request_us),
        "fail", duration_stat(s->failure, s->fail_us),
        "queue", duration_stat(s->computed, s->queue_us),
        "compute_input", duration_stat(s->computed, s->input_us),
        "compute_infer", duration_stat(s->computed, s->compute_us),
        "compute_output", duration_stat(s->computed, s->output_us),
        "cache_hit", duration_stat(s->cache_hits, s->cache_hit_us),
        "cache_miss", duration_stat(s->cache_misses, s->cache_miss_us));
    return json_pack("{s:s, s:s, s:o, s:o, s:o, s:o, s:o, s:[]}", "name", s->model,
                     "version", version, "last_inference",
                     jint((uint64_t)llround(s->last_inference * 1e3)), "inference_count",
                     jint(s->inferences), "execution_count", jint(s->executions),
                     "inference_stats", inference, "batch_stats", batches, "memory_usage");
}

json_t *stats_model_stats(stats *st, const char *model, int64_t version)
{
    json_t *arr = json_array();
    if (!arr)
        return NULL;
    pthread_mutex_lock(&st->mu);
    bool found;
    /* the model's series are adjacent, versions ascending */
    size_t i = version > 0 ? series_find(st, model, version, &found)
                           : series_find(st, model, INT64_MIN, &found);
    for (; i < st->nseries && strcmp(st->series[i]->model, model) == 0; i++) {
        if (version > 0 && st->series[i]->version != version)
            break;
        json_t *e = model_stat(st->series[i]);
        if (!e || json_array_append_new(arr, e) != 0) {
            json_decref(arr);
            arr = NULL;
            break;
        }
    }
    pthread_mutex_unlock(&st->mu);
    return arr;
}
