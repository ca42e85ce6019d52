/* http_routes.c: the answers to every route but infer (Open Inference
 * Protocol metadata and health, the model repository, /status, /metrics,
 * the status page) and the dispatch of a complete request to its route. */
#define _GNU_SOURCE   /* microhttpd.h's socket types */
#include "serve/http/http_int.h"
#include "serve/http/status_page.h"
#include "serve/model_info.h"

#include <stdlib.h>
#include <string.h>

/* ---- models ------------------------------------------------------------- */

served *http_acquire(http_server *h, const oip_route *r, dl_err *err)
{
    served *sv;
    registry_acquire(h->deps->reg, r->model, r->version, &sv, err);
    return sv;
}

static answer model_metadata(http_server *h, const oip_route *r)
{
    dl_err err = {0};
    served *sv = http_acquire(h, r, &err);
    if (!sv)
        return http_status_answer(err.code, "%s", err.msg);
    json_t *status = registry_status(h->deps->reg);
    json_t *versions = oip_versions_of(status, r->model);
    if (!versions)   /* unloaded since acquire: still answer for sv */
        versions = json_array();
    json_t *meta = versions ? oip_model_metadata(sv->conf, sv->out_dim, versions) : NULL;
    json_decref(versions);
    json_decref(status);
    served_release(sv);
    return http_json_answer(200, meta);
}

static answer model_ready(http_server *h, const oip_route *r)
{
    dl_err err = {0};
    served *sv = http_acquire(h, r, &err);
    if (!sv)
        return http_json_answer(oip_http_code(err.code),
                                json_pack("{s:s, s:b, s:s}", "name", r->model, "ready", 0,
                                          "error", err.msg));
    served_release(sv);
    return http_json_answer(200, json_pack("{s:s, s:b}", "name", r->model, "ready", 1));
}

/* ---- repository, server, status ----------------------------------------- */

/* load / unload take an empty body or a JSON object (parameters ignored). */
static answer repo_change(http_server *h, request *rq, bool load)
{
    if (rq->len > 0) {
        json_error_t je;
        json_t *j = json_loadb(rq->body, rq->len, 0, &je);
        bool object = json_is_object(j);
        json_decref(j);
        if (!object)
            return http_status_answer(DL_ERR_INVALID, "the body must be empty or a JSON object");
    }
    dl_err err = {0};
    dl_status st = load ? registry_load(h->deps->reg, rq->route.model, &err)
                        : registry_unload(h->deps->reg, rq->route.model, &err);
    if (st == DL_OK) {
        DL_LOG(DL_LOG_NOTICE, "http", "model '%s' %s", rq->route.model,
               load ? "loaded" : "unloaded");
        return http_json_answer(200, json_object());
    }
    return http_status_answer(st, "%s", err.msg);   /* unknown model: 404; refused: 400 */
}

static answer repo_index(http_server *h)
{
    json_t *status = registry_status(h->deps->reg);
    json_t *index = status ? oip_repository_index(status) : NULL;
    json_decref(status);
    return http_json_answer(200, index);
}

static answer server_metadata(http_server *h)
{
    const char *version = h->deps->server_version ? h->deps->server_version : DL_VERSION_STRING;
    return http_json_answer(200, json_pack("{s:s, s:s, s:[s, s, s, s, s, s, s, s]}", "name",
                                           "dlserve", "version", version, "extensions",
                                           "model_repository", "metrics", "status",
                                           "binary_tensor_data", "statistics",
                                           "model_configuration", "classification",
                                           "trace"));
}

static bool server_ready(http_server *h)
{
    const http_deps *d = h->deps;
    return d->ready ? d->ready(d->ctx) : registry_ready(d->reg);
}

static answer status(http_server *h)
{
    const http_deps *d = h->deps;
    pthread_mutex_lock(&h->mu);
    int64_t inflight = h->inflight - 1;   /* not counting this request */
    pthread_mutex_unlock(&h->mu);
    json_t *o = json_pack("{s:s, s:f, s:b, s:o, s:o, s:o, s:{s:I, s:b, s:b}}", "version",
                          d->server_version ? d->server_version : DL_VERSION_STRING,
                          "uptime_seconds", dl_time_now() - d->start_time, "ready",
                          server_ready(h), "models", registry_status(d->reg), "batcher",
                          batcher_status(d->bat), "counters", stats_json(d->st), "http",
                          "requests_in_flight", (json_int_t)inflight, "tls",
                          d->conf->tls_cert[0] != '\0', "auth", d->conf->token[0] != '\0');
    json_t *extra = d->status_extra ? d->status_extra(d->ctx) : NULL;
    if (o && json_is_object(extra))
        json_object_update_missing(o, extra);   /* extras never hide the core keys */
    json_decref(extra);
    return http_json_answer(200, o);
}

answer http_metrics_answer(http_server *h)
{
    answer a = {.code = 200, .ctype = CT_METRICS};
    char *extra = h->deps->metrics_extra ? h->deps->metrics_extra(h->deps->ctx) : NULL;
    a.body = stats_prometheus(h->deps->st, extra);
    free(extra);
    if (!a.body)
        return http_status_answer(DL_ERR_NOMEM, "out of memory");
    return a;
}

/* A model's statistics or configuration (model_info.h). */
static answer model_json(http_server *h, const oip_route *r,
                         dl_status (*get)(const model_info_deps *, const char *, int64_t,
                                          json_t **, dl_err *))
{
    json_t *j;
    dl_err err = {0};
    model_info_deps mi = { h->deps->reg, h->deps->bat, h->deps->st };
    if (get(&mi, r->model, r->version, &j, &err) != DL_OK)
        return http_status_answer(err.code, "%s", err.msg);
    return http_json_answer(200, j);
}

/* ---- the status page ------------------------------------------------------ */

/* An embedded file of the page: GET / is index.html (only there, where the
 * token is asked for), GET /ui/{file} the rest. */
static answer page_file(const char *name, bool top)
{
    const ui_asset *f = top == (strcmp(name, "index.html") == 0) ? ui_asset_find(name) : NULL;
    if (!f)
        return http_status_answer(DL_ERR_NOT_FOUND, "no such file: /ui/%.100s", name);
    return (answer){.code = 200, .body = (char *)f->data, .len = f->len, .ctype = f->ctype,
                    .page = true};
}

static answer training(http_server *h)
{
    json_t *j = status_training(h->deps->reg, h->deps->models_dir ? h->deps->models_dir : "");
    return j ? http_json_answer(200, j) : http_status_answer(DL_ERR_NOMEM, "out of memory");
}

/* Triton's trace extension: GET reads, POST changes the settings of every
 * model or of one the registry serves; both answer the settings. */
static answer trace_setting(http_server *h, request *rq)
{
    const char *model = rq->route.model[0] ? rq->route.model : NULL;
    dl_err err = {0};
    if (model) {
        served *sv = http_acquire(h, &rq->route, &err);
        if (!sv)
            return http_status_answer(err.code, "%s", err.msg);
        served_release(sv);
    }
    if (rq->post) {
        if (tracer_update(h->deps->tr, model, rq->body, rq->len, &err) != DL_OK)
            return http_status_answer(err.code, "%s", err.msg);
        DL_LOG(DL_LOG_NOTICE, "http", "trace settings of %s changed",
               model ? model : "all models");
    }
    return http_json_answer(200, tracer_setting(h->deps->tr, model));
}

/* The status page's history: what the page draws when it opens. */
static answer history(http_server *h)
{
    json_t *j = h->deps->history ? h->deps->history(h->deps->ctx)
                                 : json_pack("{s:i, s:[]}", "interval_s", 2, "samples");
    return j ? http_json_answer(200, j) : http_status_answer(DL_ERR_NOMEM, "out of memory");
}

bool http_dispatch(http_server *h, struct MHD_Connection *c, request *rq, answer *a)
{
    if (rq->too_big) {
        *a = http_status_answer(DL_ERR_TOO_LARGE, "the body is over http.max_body_bytes (%lld)",
                                (long long)h->deps->conf->max_body_bytes);
        return true;
    }
    if (rq->nomem) {
        *a = http_status_answer(DL_ERR_NOMEM, "out of memory for the request body");
        return true;
    }
    if (http_body_error(rq, a))   /* a corrupt gzip or deflate body: 400 */
        return true;
    switch (rq->route.kind) {
    case OIP_ROUTE_INFER:       return http_infer_start(h, c, rq, a);
    case OIP_ROUTE_GENERATE:
    case OIP_ROUTE_GENERATE_STREAM:
    case OIP_ROUTE_COMPLETIONS: return http_generate_start(h, c, rq, a);
    case OIP_ROUTE_OPENAI_MODELS: *a = http_openai_models(h); break;
    case OIP_ROUTE_LIVE:        *a = http_json_answer(200, json_pack("{s:b}", "live", 1)); break;
    case OIP_ROUTE_READY: {
        bool ready = server_ready(h);
        *a = http_json_answer(ready ? 200 : 503, json_pack("{s:b}", "ready", ready));
        break;
    }
    case OIP_ROUTE_SERVER:      *a = server_metadata(h); break;
    case OIP_ROUTE_MODEL:       *a = model_metadata(h, &rq->route); break;
    case OIP_ROUTE_MODEL_READY: *a = model_ready(h, &rq->route); break;
    case OIP_ROUTE_REPO_INDEX:  *a = repo_index(h); break;
    case OIP_ROUTE_REPO_LOAD:   *a = repo_change(h, rq, true); break;
    case OIP_ROUTE_REPO_UNLOAD: *a = repo_change(h, rq, false); break;
    case OIP_ROUTE_MODEL_STATS:  *a = model_json(h, &rq->route, model_info_stats); break;
    case OIP_ROUTE_MODEL_CONFIG: *a = model_json(h, &rq->route, model_info_config); break;
    case OIP_ROUTE_METRICS:     *a = http_metrics_answer(h); break;
    case OIP_ROUTE_STATUS:      *a = status(h); break;
    case OIP_ROUTE_PAGE:        *a = page_file("index.html", true); break;
    case OIP_ROUTE_PAGE_FILE:   *a = page_file(rq->route.model, false); break;
    case OIP_ROUTE_TRAINING:    *a = training(h); break;
    case OIP_ROUTE_HISTORY:     *a = history(h); break;
    case OIP_ROUTE_TRACE_SETTING: *a = trace_setting(h, rq); break;
    case OIP_ROUTE_NONE:        *a = http_status_answer(DL_ERR_NOT_FOUND, "not found"); break;
    }
    return true;
}
