/* http_generate.c: generation over HTTP: Triton's generate and
 * generate_stream, OpenAI's /v1/completions (streamed or not) and
 * /v1/models. A request is handed to its version's generator with its
 * connection suspended; the generator's events resume it: a stream's
 * answer is server-sent events, written as the text grows. */
#define _GNU_SOURCE   /* microhttpd.h's socket types */
#include "serve/http/http_int.h"

#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

/* Which API a request speaks: its body, answers and errors. */
typedef enum gen_api { GEN_API_TRITON, GEN_API_OPENAI } gen_api;

/* One generation over HTTP. Between generator_submit and its last event,
 * q belongs to the generator but for what gen_req_lock guards: text,
 * done, and here rq and suspended. */
typedef struct gen_http {
    gen_req                q;
    char                  *prompt;     /* owned */
    gen_api                api;
    bool                   stream;
    http_server           *h;
    struct MHD_Connection *c;
    http_loop             *loop;
    request               *rq;         /* under q's lock: NULL once the connection closed */
    bool                   suspended;  /* under q's lock: waiting for an event */
    dl_err                 refused;    /* generator_submit's refusal */
    int64_t                timeout_us; /* its "timeout" parameter (0: none) */
    /* The stream's writer (the event loop's): text bytes sent, the last
     * event written, the answer queued */
    size_t                 sent;
    size_t                 step;       /* the first of q's steps not wholly sent */
    bool                   finished;
    char                   id[40];     /* OpenAI's "cmpl-..." */
    int64_t                created;    /* Unix seconds */
} gen_http;

/* ---- text as JSON ------------------------------------------------------------- */

/* The bytes of text[0..len) that end on a character boundary: an
 * incomplete UTF-8 sequence at the end is held back while more may come. */
static size_t utf8_cut(const char *text, size_t len)
{
    size_t i = len, k = 0;
    while (i > 0 && k < 3 && ((unsigned char)text[i - 1] & 0xC0) == 0x80)
        i--, k++;
    if (i == 0)
        return len;
    unsigned char lead = (unsigned char)text[i - 1];
    size_t need = lead >= 0xF0 ? 4 : lead >= 0xE0 ? 3 : lead >= 0xC0 ? 2 : 1;
    return need > k + 1 && lead >= 0xC0 ? i - 1 : len;
}

/* ---- answers ------------------------------------------------------------------- */

/* OpenAI's error object: {"error": {"message", "type", "code"}}. */
static answer openai_error(dl_status st, const char *msg)
{
    int code = oip_http_code(st);
    const char *type = code == 400 || code == 404 ? "invalid_request_error" : "server_error";
    const char *ecode = code == 404 ? "model_not_found"
                        : code == 503 ? "service_unavailable"
                        : code == 400 ? "invalid_value" : "internal_error";
    return http_json_answer(code, json_pack("{s:{s:s, s:s, s:s}}", "error", "message", msg,
                                            "type", type, "code", ecode));
}

static answer error_answer(gen_api api, dl_status st, const char *msg)
{
    return api == GEN_API_OPENAI ? openai_error(st, msg) : http_status_answer(st, "%s", msg);
}

static const char *finish_name(const gen_req *q)
{
    const char *f = dl_gen_finish_name(q->finish);
    return f ? f : "length";
}

/* The answer object (or, in a stream, an event's) for text[0..len):
 * finish NULL while running. */
static json_t *result_json(const gen_http *g, const char *text, size_t len, const char *finish,
                           bool usage)
{
    const served *sv = g->q.sv;
    if (g->api == GEN_API_TRITON) {
        char v[24];
        snprintf(v, sizeof(v), "%" PRId64, sv->version);
        json_t *o = json_pack("{s:s, s:s, s:o}", "model_name", sv->name, "model_version", v,
                              "text_output", gen_text_json(text, len));
        if (o && finish)
            json_object_set_new(o, "finish_reason", json_string(finish));
        return o;
    }
    json_t *o = json_pack("{s:s, s:s, s:I, s:s, s:[{s:o, s:i, s:n, s:o}]}", "id", g->id,
                          "object", "text_completion", "created", (json_int_t)g->created,
                          "model", sv->name, "choices", "text", gen_text_json(text, len),
                          "index", 0, "logprobs", "finish_reason",
                          finish ? json_string(finish) : json_null());
    if (o && usage)
        json_object_set_new(o, "usage",
                            json_pack("{s:I, s:I, s:I}", "prompt_tokens",
                                      (json_int_t)g->q.prompt_tokens, "completion_tokens",
                                      (json_int_t)g->q.tokens, "total_tokens",
                                      (json_int_t)(g->q.prompt_tokens + g->q.tokens)));
    return o;
}

/* ---- the generator's events --------------------------------------------------------- */

static void gen_free(gen_http *g)
{
    served *sv = g->q.sv;
    gen_req_fini(&g->q);
    free(g->prompt);
    free(g);
    served_release(sv);   /* last: it may free the generator (ending after this event) */
}

/* Counts a done generation in the statistics. */
static void account(http_server *h, gen_http *g)
{
    const gen_req *q = &g->q;
    bool ok = q->err.code == DL_OK;
    gen_req_account(h->deps->st, q);
    double total = (q->t_end - q->t_arrival) * 1e6;
    double queue = q->started ? (q->t_start - q->t_arrival) * 1e6 : total;
    stats_request(h->deps->st, q->sv->name, q->sv->version, ok, 1, queue,
                  ok ? (q->t_end - q->t_start) * 1e6 : 0, total);
}

/* An event (generator thread): resumes a connection waiting for it, or
 * frees a generation whose client went away once it is done. */
static void on_event(gen_req *q, void *ctx)
{
    gen_http *g = ctx;
    gen_req_lock(q);
    bool orphan = g->rq == NULL, done = q->done;
    bool wake = g->suspended && (done || (g->stream && q->started));
    if (wake)
        g->suspended = false;
    gen_req_unlock(q);
    if (orphan) {
        if (done) {
            account(g->h, g);
            gen_free(g);
        }
        return;
    }
    if (!wake)
        return;
    http_server *h = g->h;
    http_loop_resume(g->loop, g->c);
    pthread_mutex_lock(&h->mu);
    h->waiting--;
    pthread_cond_broadcast(&h->cv);
    pthread_mutex_unlock(&h->mu);
}

/* Suspends g's connection until the next event (called on its loop, with
 * q's lock held). */
static void suspend(gen_http *g)
{
    MHD_suspend_connection(g->c);
    g->suspended = true;
    pthread_mutex_lock(&g->h->mu);
    g->h->waiting++;
    pthread_mutex_unlock(&g->h->mu);
}

/* ---- requests ---------------------------------------------------------------------- */

/* Triton's body: {"text_input": "...", "parameters": {...}} ("id" is
 * taken and ignored). */
static dl_status parse_triton(json_t *body, gen_http *g, dl_err *err)
{
    json_t *text = json_object_get(body, "text_input");
    json_t *params = json_object_get(body, "parameters");
    if (!json_is_string(text))
        return dl_err_set(err, DL_ERR_INVALID, "'text_input' must be a string");
    const char *key;
    json_t *v;
    json_object_foreach(body, key, v)
        if (strcmp(key, "text_input") && strcmp(key, "parameters") && strcmp(key, "id"))
            return dl_err_set(err, DL_ERR_INVALID, "unknown key '%.60s' (text_input, "
                              "parameters)", key);
    if (params && !json_is_object(params))
        return dl_err_set(err, DL_ERR_INVALID, "'parameters' must be an object");
    json_object_foreach(params, key, v) {
        dl_status st = gen_param_set(&g->q.p, &g->timeout_us, key, v, err);
        if (st == DL_ERR_NOT_FOUND)
            st = dl_err_set(err, DL_ERR_INVALID, "unknown parameter '%.60s' (max_tokens, "
                            "temperature, top_k, top_p, seed, stop, beam_width, "
                            "length_penalty, timeout)", key);
        if (st != DL_OK)
            return st;
    }
    g->prompt = strndup(json_string_value(text), json_string_length(text));
    g->q.len = json_string_length(text);
    return g->prompt ? DL_OK : dl_err_set(err, DL_ERR_NOMEM, "out of memory");
}

/* An OpenAI key that takes one value only (n, best_of, echo, ...): DL_OK
 * when v is it (or null). */
static dl_status openai_fixed(const char *key, json_t *v, json_t *only, dl_err *err)
{
    bool ok = json_is_null(v) || json_equal(v, only);
    char *want = json_dumps(only, JSON_ENCODE_ANY);
    dl_status st = ok ? DL_OK
                      : dl_err_set(err, DL_ERR_INVALID, "'%s' must be %s (or left out)", key,
                                   want ? want : "its default");
    free(want);
    json_decref(only);
    return st;
}

/* One key of OpenAI's completions body. */
static dl_status openai_key(gen_http *g, const char *key, json_t *v, dl_err *err)
{
    if (!strcmp(key, "model") || !strcmp(key, "prompt") || !strcmp(key, "user"))
        return DL_OK;   /* read by parse_openai; user is for the caller's logs */
    if (!strcmp(key, "stream")) {
        if (!json_is_boolean(v) && !json_is_null(v))
            return dl_err_set(err, DL_ERR_INVALID, "'stream' must be true or false");
        g->stream = json_is_true(v);
        return DL_OK;
    }
    if (!strcmp(key, "n") || !strcmp(key, "best_of"))
        return openai_fixed(key, v, json_integer(1), err);
    if (!strcmp(key, "echo"))
        return openai_fixed(key, v, json_false(), err);
    if (!strcmp(key, "logprobs") || !strcmp(key, "suffix"))
        return openai_fixed(key, v, json_null(), err);
    if (!strcmp(key, "presence_penalty") || !strcmp(key, "frequency_penalty"))
        return json_is_null(v) || (json_is_number(v) && json_number_value(v) == 0)
                   ? DL_OK
                   : dl_err_set(err, DL_ERR_INVALID, "'%s' must be 0 (or left out)", key);
    if (json_is_null(v))
        return DL_OK;
    dl_status st = strcmp(key, "beam_width") && strcmp(key, "length_penalty")
                       ? gen_param_set(&g->q.p, NULL, key, v, err)
                       : DL_ERR_NOT_FOUND;
    if (st == DL_ERR_NOT_FOUND)
        st = dl_err_set(err, DL_ERR_INVALID, "unrecognized request argument supplied: %.60s",
                        key);
    return st;
}

/* OpenAI's body: {"model", "prompt" (a string, or a list of one), ...};
 * its model's name in route->model. */
static dl_status parse_openai(json_t *body, gen_http *g, oip_route *route, dl_err *err)
{
    json_t *model = json_object_get(body, "model"), *prompt = json_object_get(body, "prompt");
    if (!json_is_string(model) || !dl_model_name_valid(json_string_value(model),
                                                       json_string_length(model)))
        return dl_err_set(err, DL_ERR_INVALID, "'model' must name a model");
    snprintf(route->model, sizeof(route->model), "%s", json_string_value(model));
    if (json_is_array(prompt) && json_array_size(prompt) == 1)
        prompt = json_array_get(prompt, 0);
    else if (json_is_array(prompt))
        return dl_err_set(err, DL_ERR_INVALID, "'prompt' must be a string or a list of one "
                          "string");
    if (!json_is_string(prompt))
        return dl_err_set(err, DL_ERR_INVALID, "'prompt' must be a string");
    g->q.p.temperature = 1;   /* OpenAI's defaults */
    g->q.p.max_tokens = 16;
    const char *key;
    json_t *v;
    json_object_foreach(body, key, v) {
        dl_status st = openai_key(g, key, v, err);
        if (st != DL_OK)
            return st;
    }
    g->prompt = strndup(json_string_value(prompt), json_string_length(prompt));
    g->q.len = json_string_length(prompt);
    return g->prompt ? DL_OK : dl_err_set(err, DL_ERR_NOMEM, "out of memory");
}

/* Reads the body into g and pins the version: DL_OK, or why not (*sv
 * NULL). */
static dl_status parse(http_server *h, request *rq, gen_http *g, served **sv, dl_err *err)
{
    *sv = NULL;
    json_error_t je;
    json_t *body = json_loadb(rq->body ? rq->body : "", rq->len, 0, &je);
    dl_status st = DL_OK;
    if (!json_is_object(body))
        st = dl_err_set(err, DL_ERR_INVALID, "the body must be a JSON object%s%s",
                        body ? "" : ": ", body ? "" : je.text);
    dl_gen_params_init(&g->q.p);
    g->stream = rq->route.kind == OIP_ROUTE_GENERATE_STREAM;
    /* OpenAI's body names the model: the version is then the newest. */
    if (st == DL_OK && g->api == GEN_API_OPENAI)
        st = parse_openai(body, g, &rq->route, err);
    if (st == DL_OK && !(*sv = http_acquire(h, &rq->route, err)))
        st = err->code;
    if (st == DL_OK && !(*sv)->gen)
        st = dl_err_set(err, DL_ERR_INVALID, "model '%s' does not generate (its model.json "
                        "has no \"generate\" block)", (*sv)->name);
    if (st == DL_OK && g->api == GEN_API_TRITON) {
        g->q.p.max_tokens = generator_settings((*sv)->gen)->default_length;
        st = parse_triton(body, g, err);
    }
    if (st == DL_OK)
        st = dl_gen_params_check(&g->q.p, err);
    json_decref(body);
    return st;
}

bool http_generate_start(http_server *h, struct MHD_Connection *c, request *rq, answer *a)
{
    gen_http *g = calloc(1, sizeof(*g));
    gen_api api = rq->route.kind == OIP_ROUTE_COMPLETIONS ? GEN_API_OPENAI : GEN_API_TRITON;
    if (!g) {
        *a = error_answer(api, DL_ERR_NOMEM, "out of memory");
        return true;
    }
    g->api = api;
    served *sv;
    dl_err err = {0};
    if (parse(h, rq, g, &sv, &err) != DL_OK) {
        *a = error_answer(api, err.code, err.msg);
        if (sv)
            stats_request(h->deps->st, sv->name, sv->version, false, 0, 0, 0,
                          (dl_time_now() - rq->arrival) * 1e6);
        served_release(sv);
        free(g->prompt);
        free(g);
        return true;
    }
    dl_gen_params p = g->q.p;
    gen_req_init(&g->q, sv, g->prompt, g->q.len, &p, g->stream, on_event, g);
    g->q.timeout_us = g->timeout_us;
    if (!g->stream) {
        /* suspended until it ends: the generator watches its socket */
        const union MHD_ConnectionInfo *ci =
            MHD_get_connection_info(c, MHD_CONNECTION_INFO_CONNECTION_FD);
        g->q.watch_fd = ci ? ci->connect_fd : -1;
    }
    g->h = h;
    g->c = c;
    g->loop = http_loop_current();
    g->rq = rq;
    g->created = (int64_t)time(NULL);
    static atomic_uint serial;
    snprintf(g->id, sizeof(g->id), "cmpl-%016llx%08x", (unsigned long long)(dl_time_now() * 1e9),
             atomic_fetch_add(&serial, 1));
    rq->gen = g;
    rq->stage = REQ_GENERATING;   /* no longer announced to the batcher */
    batcher_arriving(h->deps->bat, -1);
    /* Suspended before it is submitted, so that its first event always
     * finds it so; a refusal resumes it at once. */
    gen_req_lock(&g->q);
    suspend(g);
    gen_req_unlock(&g->q);
    if (generator_submit(sv->gen, &g->q, &g->refused) != DL_OK) {
        gen_req_lock(&g->q);
        g->q.done = true;
        g->q.t_end = dl_time_now();
        g->q.t_arrival = rq->arrival;
        g->q.err = g->refused;
        gen_req_unlock(&g->q);
        on_event(&g->q, g);
    }
    return false;
}

bool http_generate_resume(http_server *h, struct MHD_Connection *c, request *rq, answer *a)
{
    (void)h;
    (void)c;
    gen_http *g = rq->gen;
    gen_req *q = &g->q;
    gen_req_lock(q);
    bool done = q->done, started = q->started;
    if (!done && !(g->stream && started)) {   /* not for us yet */
        suspend(g);
        gen_req_unlock(q);
        return false;
    }
    gen_req_unlock(q);
    if (q->err.code != DL_OK && !(g->stream && started)) {
        /* refused before it started: 400 (prompt, parameters), 503 (no
         * room before its deadline, stopping) */
        *a = error_answer(g->api, q->err.code, q->err.msg);
        return true;
    }
    if (g->stream) {
        *a = (answer){.code = 200, .ctype = "text/event-stream", .events = rq};
        return true;
    }
    *a = http_json_answer(200, result_json(g, q->text ? q->text : "", q->text_len,
                                           finish_name(q), true));
    return true;
}

/* One server-sent event "data: <json>\n\n" into b. */
static void sse_event(dl_sbuf *b, json_t *j)
{
    char *s = j ? oip_dump(j) : NULL;
    json_decref(j);
    dl_sbuf_printf(b, "data: %s\n\n", s ? s : "{\"error\":\"out of memory\"}");
    free(s);
}

/* The stream's last event: its error, or its text's end with finish_reason
 * (and OpenAI's [DONE]). */
static void last_event(dl_sbuf *b, gen_http *g, size_t upto)
{
    const gen_req *q = &g->q;
    if (q->err.code != DL_OK)
        sse_event(b, g->api == GEN_API_OPENAI
                         ? json_pack("{s:{s:s, s:s}}", "error", "message", q->err.msg, "type",
                                     "server_error")
                         : json_pack("{s:s}", "error", q->err.msg));
    else
        sse_event(b, result_json(g, q->text + g->sent, upto - g->sent, finish_name(q), false));
    if (g->api == GEN_API_OPENAI)
        dl_sbuf_printf(b, "data: [DONE]\n\n");
}

ssize_t http_generate_read(void *cls, uint64_t pos, char *buf, size_t max)
{
    (void)pos;
    request *rq = cls;
    gen_http *g = rq->gen;
    gen_req *q = &g->q;
    if (g->finished)
        return MHD_CONTENT_READER_END_OF_STREAM;
    dl_sbuf b = {0};
    gen_req_lock(q);
    const char *text = q->text ? q->text : "";
    /* An event a step that added text, as many as fit (a byte takes at
     * most 6 in JSON, the rest of an event less than 512); a step's text
     * longer than that is split. Text is cut between characters: a
     * character split between steps goes out whole with the next. */
    while (!g->finished) {
        while (g->step < q->nsteps && q->steps[g->step] <= g->sent)
            g->step++;
        bool pending = g->step < q->nsteps;
        if (!pending && !q->done)
            break;   /* until the next step */
        size_t upto = pending ? q->steps[g->step] : q->text_len;
        size_t room = max > b.len + 512 ? (max - b.len - 512) / 6 : 0;
        if (upto > g->sent + room)
            upto = g->sent + room;
        bool last = q->done && upto == q->text_len;
        if (last) {
            last_event(&b, g, upto);
            g->sent = upto;
            g->finished = true;
            break;
        }
        upto = utf8_cut(text, upto);
        if (upto <= g->sent) {
            if (room == 0 || g->step + 1 >= q->nsteps)
                break;   /* full, or the rest of a character is to come */
            g->step++;   /* this step ends inside a character: join the next */
            continue;
        }
        sse_event(&b, result_json(g, text + g->sent, upto - g->sent, NULL, false));
        g->sent = upto;
    }
    if (b.len == 0 && !g->finished)
        suspend(g);   /* until the next event */
    gen_req_unlock(q);
    if (b.oom || b.len > max) {
        free(b.s);
        return MHD_CONTENT_READER_END_WITH_ERROR;
    }
    memcpy(buf, b.s ? b.s : "", b.len);
    free(b.s);
    return (ssize_t)b.len;
}

void http_generate_closed(request *rq)
{
    gen_http *g = rq->gen;
    if (!g)
        return;
    rq->gen = NULL;
    gen_req_lock(&g->q);
    g->rq = NULL;
    bool done = g->q.done;
    gen_req_unlock(&g->q);
    if (done) {
        account(g->h, g);
        gen_free(g);
    } else {
        gen_req_cancel(&g->q);   /* freed by its last event */
    }
}

answer http_openai_models(http_server *h)
{
    char **names = registry_names(h->deps->reg);
    json_t *data = json_array();
    /* the daemon's start, as Unix seconds */
    json_int_t created = (json_int_t)(time(NULL) - (time_t)(dl_time_now() - h->deps->start_time));
    for (size_t i = 0; names && names[i]; i++) {
        served *sv = NULL;
        registry_acquire(h->deps->reg, names[i], 0, &sv, NULL);
        if (sv && sv->gen)
            json_array_append_new(data, json_pack("{s:s, s:s, s:I, s:s}", "id", sv->name,
                                                  "object", "model", "created", created,
                                                  "owned_by", "dlserve"));
        served_release(sv);
        free(names[i]);
    }
    free(names);
    return http_json_answer(200, json_pack("{s:s, s:o}", "object", "list", "data", data));
}
