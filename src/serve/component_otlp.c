/* component_otlp.c: the OTLP/HTTP exporter of tracer.h's spans as a daemon
 * component (the only file that sees libcurl): a thread that sends the
 * queued spans as JSON to [trace] otlp_endpoint, a batch when enough are
 * queued or flush_ms has passed. It stops last, after HTTP has answered
 * its last requests, sending what is queued then. */
#include "serve/component.h"
#include "serve/tracer.h"

#include <curl/curl.h>
#include <stdatomic.h>
#include <stdlib.h>

#define BATCH_SPANS 512     /* requests' spans in one export request */
#define TIMEOUT_MS  5000L   /* one export request's limit */

typedef struct otlp {
    tracer       *tr;
    const dl_trace_conf *conf;
    CURL         *curl;
    pthread_t     thread;
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
        snprintf(why, whylen, "%.400s: %.300s", o->conf->otlp_endpoint,
                 errbuf[0] ? errbuf : curl_easy_strerror(rc));
    else if (code < 200 || code > 299)
        snprintf(why, whylen, "%.400s answered HTTP %ld", o->conf->otlp_endpoint, code);
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
    double flush_s = (double)o->conf->flush_ms * 1e-3;
    while (!atomic_load(&o->stopping)) {
        tracer_wait(o->tr, BATCH_SPANS, flush_s);
        drain(o);
    }
    drain(o);   /* what the last requests left */
    return NULL;
}

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
    curl_easy_setopt(o->curl, CURLOPT_URL, o->conf->otlp_endpoint);
    curl_easy_setopt(o->curl, CURLOPT_HTTPHEADER, h);
    curl_easy_setopt(o->curl, CURLOPT_TIMEOUT_MS, TIMEOUT_MS);
    curl_easy_setopt(o->curl, CURLOPT_NOSIGNAL, 1L);
    curl_easy_setopt(o->curl, CURLOPT_WRITEFUNCTION, discard);
    curl_easy_setopt(o->curl, CURLOPT_PRIVATE, h);
    if (pthread_create(&o->thread, NULL, export_main, o) != 0) {
        curl_slist_free_all(h);
        curl_easy_cleanup(o->curl);
        curl_global_cleanup();
        free(o);
        return dl_err_set(err, DL_ERR_NOMEM, "OTLP exporter thread");
    }
    tracer_set_exporting(o->tr, true);
    DL_LOG(DL_LOG_NOTICE, "trace", "exporting spans to %s", o->conf->otlp_endpoint);
    *state = o;
    return DL_OK;
}

/* After HTTP's last answers: their spans are sent, then the thread ends. */
static void otlp_finish(void *state)
{
    otlp *o = state;
    tracer_set_exporting(o->tr, false);
    atomic_store(&o->stopping, true);
    tracer_wake(o->tr);
    pthread_join(o->thread, NULL);
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
    .free = otlp_free,
    .status = otlp_status,
    .metrics = otlp_metrics,
};
