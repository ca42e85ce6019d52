/* component_otlp.c: the OTLP/HTTP exporter of tracer.h's spans as a daemon
 * component (the only file that sees libcurl): a thread that sends the
 * queued spans as JSON to [trace] otlp_endpoint, a batch when enough are
 * queued or flush_ms has passed; SIGHUP restarts it on a new endpoint. It
 * stops last, after HTTP has answered its last requests, sending what is
 * queued then. */
#include "serve/component.h"
#include "serve/tracer.h"

#include <curl/curl.h>
#include <stdatomic.h>
#include <stdlib.h>

#define BATCH_SPANS 512     /* requests' spans in one export request */
#define TIMEOUT_MS  5000L   /* one export request's limit */

typedef struct otlp {
    tracer       *tr;
    const dl_trace_conf *conf;   /* the daemon's: read only while the thread is stopped */
    char          url[sizeof(((dl_trace_conf *)0)->otlp_endpoint)];   /* the thread's copies */
    double        flush_s;
    CURL         *curl;
    pthread_t     thread;
    bool          running;       /* the thread; main thread only */
    atomic_bool   stopping;
} otlp;

static size_t discard(char *p, size_t size, size_t n, void *ctx)
{
    (void)p, (void)ctx;
    return size * n;
}

/* POSTs one batch; false with why filled when it did not reach the collector. */
static bool post(otlp *o, const char *body, char *why, size_t whylen)
{
    char errbuf[CURL_ERROR_SIZE] = "";
    curl_easy_setopt(o->curl, CURLOPT_POSTFIELDS, body);
    curl_easy_setopt(o->curl, CURLOPT_ERRORBUFFER, errbuf);
    CURLcode rc = curl_easy_perform(o->curl);
    long code = 0;
    curl_easy_getinfo(o->curl, CURLINFO_RESPONSE_CODE, &code);
    if (rc != CURLE_OK)
        snprintf(why, whylen, "%.400s: %.300s", o->url,
                 errbuf[0] ? errbuf : curl_easy_strerror(rc));
    else if (code < 200 || code > 299)
        snprintf(why, whylen, "%.400s answered HTTP %ld", o->url, code);
    return rc == CURLE_OK && code >= 200 && code <= 299;
}

/* Sends batches while any is queued. */
static void drain(otlp *o)
{
    size_t n;
    char *body;
    while ((body = tracer_take(o->tr, BATCH_SPANS, &n))) {
        char why[1024] = "";
        bool ok = post(o, body, why, sizeof(why));
        free(body);
        if (!ok)
            DL_LOG(DL_LOG_WARNING, "trace", "spans of %zu requests lost: %s", n, why);
        tracer_exported(o->tr, n, ok, ok ? NULL : why);
    }
}

static void *export_main(void *arg)
{
    otlp *o = arg;
    while (!atomic_load(&o->stopping)) {
        tracer_wait(o->tr, BATCH_SPANS, o->flush_s);
        drain(o);
    }
    drain(o);   /* what the last requests left */
    return NULL;
}

/* The export thread on the configuration's endpoint and flush time. */
static dl_status run(otlp *o, dl_err *err)
{
    snprintf(o->url, sizeof(o->url), "%s", o->conf->otlp_endpoint);
    o->flush_s = (double)o->conf->flush_ms * 1e-3;
    curl_easy_setopt(o->curl, CURLOPT_URL, o->url);
    atomic_store(&o->stopping, false);
    if (pthread_create(&o->thread, NULL, export_main, o) != 0)
        return dl_err_set(err, DL_ERR_NOMEM, "OTLP exporter thread");
    o->running = true;
    tracer_set_exporting(o->tr, true);
    DL_LOG(DL_LOG_NOTICE, "trace", "exporting spans to %s", o->url);
    return DL_OK;
}

static void otlp_free(void *state);

static dl_status otlp_start(component_env *env, void **state, dl_err *err)
{
    *state = NULL;
    if (curl_global_init(CURL_GLOBAL_DEFAULT) != CURLE_OK)   /* before any other thread */
        return dl_err_set(err, DL_ERR_UNAVAILABLE, "libcurl did not initialize");
    otlp *o = calloc(1, sizeof(*o));
    if (!o || !(o->curl = curl_easy_init())) {
        free(o);
        curl_global_cleanup();
        return dl_err_set(err, DL_ERR_NOMEM, "OTLP exporter");
    }
    o->tr = env->tracer;
    o->conf = &env->conf->trace;
    struct curl_slist *h = curl_slist_append(NULL, "Content-Type: application/json");
    curl_easy_setopt(o->curl, CURLOPT_HTTPHEADER, h);
    curl_easy_setopt(o->curl, CURLOPT_TIMEOUT_MS, TIMEOUT_MS);
    curl_easy_setopt(o->curl, CURLOPT_NOSIGNAL, 1L);
    curl_easy_setopt(o->curl, CURLOPT_WRITEFUNCTION, discard);
    curl_easy_setopt(o->curl, CURLOPT_PRIVATE, h);
    dl_status st = run(o, err);
    if (st != DL_OK) {
        otlp_free(o);
        return st;
    }
    *state = o;
    return DL_OK;
}

/* After HTTP's last answers: their spans are sent, then the thread ends. */
static void otlp_finish(void *state)
{
    otlp *o = state;
    if (!o->running)
        return;
    tracer_set_exporting(o->tr, false);
    atomic_store(&o->stopping, true);
    tracer_wake(o->tr);
    pthread_join(o->thread, NULL);
    o->running = false;
}

/* A new endpoint or flush time (SIGHUP): the spans queued go to the old
 * endpoint, then the thread starts again on the new one; none: it stays
 * stopped and spans are no longer recorded. */
static dl_status otlp_restart(void *state, dl_err *err)
{
    otlp *o = state;
    otlp_finish(o);
    if (!o->conf->otlp_endpoint[0]) {
        DL_LOG(DL_LOG_NOTICE, "trace", "export stopped: [trace] otlp_endpoint is empty");
        return DL_OK;
    }
    return run(o, err);
}

static void otlp_free(void *state)
{
    otlp *o = state;
    struct curl_slist *h = NULL;
    curl_easy_getinfo(o->curl, CURLINFO_PRIVATE, (char **)&h);
    curl_slist_free_all(h);
    curl_easy_cleanup(o->curl);
    curl_global_cleanup();
    free(o);
}

static json_t *otlp_status(void *state)
{
    return tracer_status(((otlp *)state)->tr);
}

static void otlp_metrics(void *state, dl_sbuf *out)
{
    tracer_metrics(((otlp *)state)->tr, out);
}

const component component_otlp = {
    .name = "trace",
    .wanted = component_otlp_wanted,
    .start = otlp_start,
    .finish = otlp_finish,
    .restart = otlp_restart,
    .free = otlp_free,
    .status = otlp_status,
    .metrics = otlp_metrics,
};
