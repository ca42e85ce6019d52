/* generator.c: a served version's generation: one thread owning a copy of
 * the model and its dl_gen, admitting queued requests between steps,
 * stepping every running sequence at once (continuous batching), and
 * handing each request its new text and its end. */
#define _GNU_SOURCE   /* pthread_setname_np */
#include "serve/generator.h"
#include "serve/registry.h"

#include <errno.h>
#include <sys/socket.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

struct generator {
    char             name[DL_NAME_MAX];
    int64_t          version;
    dl_generate_conf conf;
    dl_gen_conf      gc;          /* owned */
    dl_tokenizer    *tok;         /* owned: gc's tokenizer */
    dl_model        *m;           /* owned; the dl_gen's while it lives */
    dl_model_conf   *conf_m;      /* owned once generator_free takes it: m's */
    dl_gen          *gen;         /* touched by the thread only */
    stats           *st;          /* its steps, as the batcher's batches (NULL: none) */
    pthread_t        thread;
    pthread_mutex_t  mu;          /* the queue, stop */
    pthread_cond_t   cv;          /* a request queued, stop */
    gen_req         *head, *tail; /* submitted, not yet taken by the thread */
    bool             stop;
    bool             self_free;   /* generator_free called on the thread */
    atomic_llong     running, waiting, cancelled;
    /* The thread's own: requests taken from the queue and not yet
     * admitted (in arrival order), and those running. */
    gen_req         *pending, *run;
    bool             freed;       /* a sequence ended since admit last ran */
};

/* ---- requests --------------------------------------------------------------- */

void gen_req_init(gen_req *q, struct served *sv, const char *prompt, size_t len,
                  const dl_gen_params *p, bool stream,
                  void (*on_event)(gen_req *q, void *ctx), void *ctx)
{
    memset(q, 0, sizeof(*q));
    q->sv = sv;
    q->prompt = prompt;
    q->len = len;
    q->p = *p;
    q->stream = stream;
    q->on_event = on_event;
    q->ctx = ctx;
    q->watch_fd = -1;
    pthread_mutex_init(&q->mu, NULL);
    atomic_init(&q->cancel, false);
}

void gen_req_fini(gen_req *q)
{
    free(q->text);
    q->text = NULL;
    free(q->steps);
    q->steps = NULL;
    pthread_mutex_destroy(&q->mu);
}

void gen_req_lock(gen_req *q)
{
    pthread_mutex_lock(&q->mu);
}

void gen_req_unlock(gen_req *q)
{
    pthread_mutex_unlock(&q->mu);
}

void gen_req_cancel(gen_req *q)
{
    atomic_store(&q->cancel, true);
}

void gen_req_account(stats *st, const gen_req *q)
{
    served *sv = q->sv;
    bool first = q->err.code == DL_OK && q->tokens > 0 && q->t_first > 0;
    double ttft = first ? q->t_first - q->t_arrival : -1;
    double tpot = first && q->tokens > 1 ? (q->t_end - q->t_first) / (double)(q->tokens - 1) : -1;
    stats_generate(st, sv->name, sv->version, q->tokens, ttft, tpot);
}

/* ---- parameters ---------------------------------------------------------------- */

/* stop: a string or a list of strings, each 1 to DL_GEN_STOP_MAX - 1 bytes. */
static dl_status set_stop(dl_gen_params *p, json_t *v, dl_err *err)
{
    json_t *one[1] = {v};
    json_t **items = one;
    size_t n = 1;
    if (json_is_array(v)) {
        n = json_array_size(v);
        items = NULL;
    } else if (!json_is_string(v)) {
        return dl_err_set(err, DL_ERR_INVALID, "parameter 'stop' must be a string or a list "
                          "of strings");
    }
    if (n > DL_GEN_MAX_STOP)
        return dl_err_set(err, DL_ERR_INVALID, "parameter 'stop' has %zu strings (at most %d)",
                          n, DL_GEN_MAX_STOP);
    p->nstop = 0;
    for (size_t i = 0; i < n; i++) {
        json_t *s = items ? items[i] : json_array_get(v, i);
        size_t len = json_string_length(s);
        if (!json_is_string(s) || len == 0 || len >= DL_GEN_STOP_MAX)
            return dl_err_set(err, DL_ERR_INVALID, "parameter 'stop': each stop must be a "
                              "string of 1 to %d bytes", DL_GEN_STOP_MAX - 1);
        memcpy(p->stop[p->nstop], json_string_value(s), len + 1);
        p->nstop++;
    }
    return DL_OK;
}

dl_status gen_param_set(dl_gen_params *p, int64_t *timeout_us, const char *key, json_t *v,
                        dl_err *err)
{
    if (timeout_us && !strcmp(key, "timeout")) {
        if (!json_is_integer(v) || json_integer_value(v) < 0)
            return dl_err_set(err, DL_ERR_INVALID, "parameter 'timeout' must be an integer "
                              ">= 0 (microseconds)");
        *timeout_us = json_integer_value(v);
        return DL_OK;
    }
    static const char *const ints[] = {"max_tokens", "top_k", "seed", "beam_width"};
    static const char *const nums[] = {"temperature", "top_p", "length_penalty"};
    if (!strcmp(key, "stop"))
        return set_stop(p, v, err);
    for (size_t i = 0; i < sizeof(ints) / sizeof(ints[0]); i++) {
        if (strcmp(key, ints[i]) != 0)
            continue;
        if (!json_is_integer(v) || (i == 2 && json_integer_value(v) < 0))
            return dl_err_set(err, DL_ERR_INVALID, "parameter '%s' must be an integer%s", key,
                              i == 2 ? " >= 0" : "");
        json_int_t x = json_integer_value(v);
        if (i == 0)
            p->max_tokens = x;
        else if (i == 1)
            p->top_k = x;
        else if (i == 2)
            p->seed = (uint64_t)x;
        else if (x < 0 || x > 1000)
            return dl_err_set(err, DL_ERR_INVALID, "parameter 'beam_width' must be 1 to 16");
        else
            p->beam_width = (int)x;
        return DL_OK;
    }
    for (size_t i = 0; i < sizeof(nums) / sizeof(nums[0]); i++) {
        if (strcmp(key, nums[i]) != 0)
            continue;
        if (!json_is_number(v))
            return dl_err_set(err, DL_ERR_INVALID, "parameter '%s' must be a number", key);
        float x = (float)json_number_value(v);
        *(i == 0 ? &p->temperature : i == 1 ? &p->top_p : &p->length_penalty) = x;
        return DL_OK;
    }
    return dl_err_set(err, DL_ERR_NOT_FOUND, "unknown parameter '%s'", key);
}

json_t *gen_text_json(const char *text, size_t len)
{
    dl_sbuf b = {0};
    dl_sbuf_add(&b, "", 0);
    for (size_t i = 0; i < len;) {
        char one[5] = {0};   /* dl_utf8_len reads to a NUL at most */
        memcpy(one, text + i, len - i < 4 ? len - i : 4);
        size_t u = dl_utf8_len((const unsigned char *)one);
        if (u == 0 || one[0] == '\0') {
            dl_sbuf_add(&b, "\xEF\xBF\xBD", 3);
            i++;
        } else {
            dl_sbuf_add(&b, text + i, u);
            i += u;
        }
    }
    json_t *j = b.oom ? NULL : json_stringn(b.s, b.len);
    free(b.s);
    return j;
}

/* ---- the thread ---------------------------------------------------------------- */

/* Ends q (its sequence freed, if any): done with why (code DL_OK: its
 * finish), handed back to its submitter. False when the generator was
 * freed meanwhile from on_event (the thread must stop at once). */
static bool complete(generator *g, gen_req *q, dl_status code, const char *why)
{
    if (q->seq) {
        q->finish = dl_gen_finished(q->seq);
        q->tokens = dl_gen_tokens(q->seq);
        dl_gen_end(g->gen, q->seq);
        q->seq = NULL;
        g->freed = true;
        atomic_fetch_sub(&g->running, 1);
    }
    gen_req_lock(q);
    q->done = true;
    q->t_end = dl_time_now();
    if (code != DL_OK)
        dl_err_set(&q->err, code, "%s", why);
    gen_req_unlock(q);
    q->on_event(q, q->ctx);   /* q is the submitter's from here */
    return !g->self_free;
}

/* q's text grew to len bytes: copied under q's lock (and, streamed, the
 * step's end noted). */
static dl_status take_text(gen_req *q, const char *text, size_t len)
{
    dl_status st = DL_OK;
    gen_req_lock(q);
    if (len + 1 > q->text_cap) {
        size_t cap = q->text_cap ? q->text_cap : 256;
        while (cap < len + 1)
            cap *= 2;
        char *p = realloc(q->text, cap);
        if (p) {
            q->text = p;
            q->text_cap = cap;
        } else {
            st = DL_ERR_NOMEM;
        }
    }
    if (st == DL_OK && q->stream && q->nsteps == q->steps_cap) {
        size_t cap = q->steps_cap ? 2 * q->steps_cap : 64;
        size_t *p = realloc(q->steps, cap * sizeof(*p));
        if (p) {
            q->steps = p;
            q->steps_cap = cap;
        } else {
            st = DL_ERR_NOMEM;
        }
    }
    if (st == DL_OK) {
        memcpy(q->text + q->text_len, text + q->text_len, len - q->text_len);
        q->text_len = len;
        q->text[len] = '\0';
        if (q->stream)
            q->steps[q->nsteps++] = len;
    }
    gen_req_unlock(q);
    return st;
}

/* Starts the pending requests in arrival order while there is room: one
 * that finds none keeps its place (and those behind it theirs) until its
 * deadline. False when the generator was freed from an on_event. */
static bool admit(generator *g, double now)
{
    gen_req **link = &g->pending;
    bool full = false;
    g->freed = false;
    for (gen_req *q = g->pending; q; q = *link) {
        dl_err err = {0};
        dl_status st = DL_ERR_BUSY;
        if (!atomic_load(&q->cancel) && !full)
            st = dl_gen_start(g->gen, q->prompt, q->len, &q->p, &q->seq, &err);
        bool in_time = q->deadline == 0 || now < q->deadline;
        if (st == DL_ERR_BUSY && !atomic_load(&q->cancel) && in_time) {
            full = true;
            link = &q->next;
            continue;
        }
        *link = q->next;
        atomic_fetch_sub(&g->waiting, 1);
        if (st != DL_OK) {
            bool ok = atomic_load(&q->cancel)
                          ? complete(g, q, DL_ERR_UNAVAILABLE, "cancelled")
                      : st == DL_ERR_BUSY
                          ? complete(g, q, DL_ERR_TIMEOUT, "no room to generate (generate."
                                     "max_sequences or cache_bytes) before the request's deadline")
                          : complete(g, q, st, err.msg);
            if (!ok)
                return false;
            continue;
        }
        atomic_fetch_add(&g->running, 1);
        q->prompt_tokens = dl_gen_prompt_tokens(q->seq);
        gen_req_lock(q);
        q->started = true;
        q->t_start = now;
        gen_req_unlock(q);
        q->next = g->run;
        g->run = q;
        q->on_event(q, q->ctx);
        if (g->self_free)
            return false;
    }
    return true;
}

/* After a step: each running request's new text, its first token's time,
 * its end. A failed step (err) ends them all with it. */
static bool after_step(generator *g, const dl_err *err)
{
    double now = dl_time_now();
    gen_req **link = &g->run;
    for (gen_req *q = g->run; q; q = *link) {
        if (err) {
            *link = q->next;
            if (!complete(g, q, err->code, err->msg))
                return false;
            continue;
        }
        if (q->t_first == 0 && dl_gen_tokens(q->seq) > 0)
            q->t_first = now;
        q->tokens = dl_gen_tokens(q->seq);
        size_t len;
        const char *text = dl_gen_text(q->seq, &len);
        bool grew = len > q->text_len;
        if (grew && take_text(q, text, len) != DL_OK) {
            *link = q->next;
            if (!complete(g, q, DL_ERR_NOMEM, "out of memory for the generated text"))
                return false;
            continue;
        }
        if (dl_gen_finished(q->seq) != DL_GEN_RUNNING) {
            *link = q->next;
            if (!complete(g, q, DL_OK, ""))
                return false;
            continue;
        }
        link = &q->next;
        if (grew && q->stream) {
            q->on_event(q, q->ctx);
            if (g->self_free)
                return false;
        }
    }
    return true;
}

/* Whether the peer of socket fd has closed it (or it failed): a read
 * that would not block finds its end. Bytes waiting (a request sent
 * behind) are left for their reader. */
static bool peer_gone(int fd)
{
    char c;
    ssize_t n = recv(fd, &c, 1, MSG_PEEK | MSG_DONTWAIT);
    return n == 0 || (n < 0 && errno != EAGAIN && errno != EWOULDBLOCK && errno != EINTR);
}

/* Ends the running requests whose clients went away (before a step). */
static bool drop_cancelled(generator *g)
{
    gen_req **link = &g->run;
    for (gen_req *q = g->run; q; q = *link) {
        if (!atomic_load(&q->cancel) && !(q->watch_fd >= 0 && peer_gone(q->watch_fd))) {
            link = &q->next;
            continue;
        }
        *link = q->next;
        atomic_fetch_add(&g->cancelled, 1);
        if (!complete(g, q, DL_ERR_UNAVAILABLE, "cancelled"))
            return false;
    }
    return true;
}

/* Waits for work: requests queued, sequences running, room freed for
 * those pending, or the earliest pending deadline. Called with g->mu
 * held; false once stopping with nothing left. */
static bool wait_work(generator *g)
{
    while (!g->head && !g->run && !g->stop && !(g->pending && g->freed)) {
        double until = 0;
        for (gen_req *q = g->pending; q; q = q->next)
            if (q->deadline > 0 && (until == 0 || q->deadline < until))
                until = q->deadline;
        if (g->pending && until == 0)   /* waiting without deadline, nothing runs: poll */
            until = dl_time_now() + 0.05;
        if (!g->pending) {
            pthread_cond_wait(&g->cv, &g->mu);
            continue;
        }
        double now = dl_time_now();
        if (until <= now)
            return true;
        struct timespec ts;
        clock_gettime(CLOCK_REALTIME, &ts);
        double t = (double)ts.tv_sec + ts.tv_nsec * 1e-9 + (until - now);
        ts.tv_sec = (time_t)t;
        ts.tv_nsec = (long)((t - (double)ts.tv_sec) * 1e9);
        if (pthread_cond_timedwait(&g->cv, &g->mu, &ts) == ETIMEDOUT)
            return true;
    }
    return !(g->stop && !g->head && !g->run && !g->pending);
}

/* One pass: take the queue, admit, step, hand out. False to end. */
static bool pass(generator *g)
{
    pthread_mutex_lock(&g->mu);
    bool go = wait_work(g);
    gen_req *in = g->head;
    g->head = g->tail = NULL;
    pthread_mutex_unlock(&g->mu);
    if (!go)
        return false;
    gen_req **end = &g->pending;   /* arrivals go behind those waiting */
    while (*end)
        end = &(*end)->next;
    *end = in;
    if (!drop_cancelled(g) || !admit(g, dl_time_now()))
        return false;
    if (!g->run)
        return true;
    dl_err err = {0};
    int64_t slots = dl_gen_slots_used(g->gen);
    double t0 = dl_time_now();
    dl_status st = dl_gen_step(g->gen, &err);
    if (st == DL_OK && g->st)   /* a step is a batch of the sequences it ran */
        stats_batch_times(g->st, g->name, g->version, slots, 0, (dl_time_now() - t0) * 1e6, 0);
    return after_step(g, st == DL_OK ? NULL : &err);
}

static void destroy(generator *g)
{
    dl_gen_free(g->gen);
    dl_model_free(g->m);
    dl_model_conf_free(g->conf_m);
    dl_tokenizer_free(g->tok);
    dl_gen_conf_release(&g->gc);
    pthread_mutex_destroy(&g->mu);
    pthread_cond_destroy(&g->cv);
    free(g);
}

static void *gen_main(void *arg)
{
    generator *g = arg;
    pthread_setname_np(pthread_self(), "generate");
    while (pass(g))
        ;
    if (g->self_free)
        destroy(g);   /* detached: nobody joins */
    return NULL;
}

/* ---- the generator ------------------------------------------------------------ */

dl_status generator_new(const char *name, int64_t version, dl_model **m, dl_gen_conf *gc,
                        const dl_generate_conf *conf, stats *counts, generator **out, dl_err *err)
{
    *out = NULL;
    generator *g = calloc(1, sizeof(*g));
    if (!g) {
        dl_model_free(*m);
        *m = NULL;
        dl_gen_conf_release(gc);
        return dl_err_set(err, DL_ERR_NOMEM, "generator");
    }
    snprintf(g->name, sizeof(g->name), "%s", name);
    g->version = version;
    g->conf = *conf;
    g->st = counts;
    g->gc = *gc;
    memset(gc, 0, sizeof(*gc));
    g->m = *m;
    *m = NULL;
    pthread_mutex_init(&g->mu, NULL);
    pthread_cond_init(&g->cv, NULL);
    atomic_init(&g->running, 0);
    atomic_init(&g->waiting, 0);
    atomic_init(&g->cancelled, 0);
    dl_status st = dl_tokenizer_new(&g->gc.tok, &g->tok, err);
    if (st == DL_OK)
        st = dl_gen_new(g->m, &g->gc, g->tok, conf->max_sequences, (size_t)conf->cache_bytes,
                        &g->gen, err);
    if (st == DL_OK && pthread_create(&g->thread, NULL, gen_main, g) != 0)
        st = dl_err_set(err, DL_ERR_IO, "cannot start the generation thread");
    if (st != DL_OK) {
        destroy(g);
        return st;
    }
    *out = g;
    return DL_OK;
}

void generator_free(generator *g, dl_model_conf **conf)
{
    if (!g)
        return;
    g->conf_m = *conf;
    *conf = NULL;
    pthread_mutex_lock(&g->mu);
    g->stop = true;
    pthread_cond_signal(&g->cv);
    pthread_mutex_unlock(&g->mu);
    if (pthread_equal(pthread_self(), g->thread)) {
        g->self_free = true;   /* the thread ends when this on_event returns */
        pthread_detach(g->thread);
        return;
    }
    pthread_join(g->thread, NULL);
    destroy(g);
}

dl_status generator_submit(generator *g, gen_req *q, dl_err *err)
{
    dl_status st = dl_gen_params_check(&q->p, err);
    if (st != DL_OK)
        return st;
    q->t_arrival = dl_time_now();
    int64_t timeout = q->timeout_us > 0 ? q->timeout_us : g->conf.timeout_us;
    q->deadline = timeout > 0 ? q->t_arrival + (double)timeout * 1e-6 : 0;
    q->next = NULL;
    pthread_mutex_lock(&g->mu);
    if (g->stop) {
        pthread_mutex_unlock(&g->mu);
        return dl_err_set(err, DL_ERR_UNAVAILABLE, "generation is stopping");
    }
    if (g->tail)
        g->tail->next = q;
    else
        g->head = q;
    g->tail = q;
    atomic_fetch_add(&g->waiting, 1);
    pthread_cond_signal(&g->cv);
    pthread_mutex_unlock(&g->mu);
    return DL_OK;
}

int64_t generator_running(const generator *g)
{
    return atomic_load(&((generator *)g)->running);
}

int64_t generator_cancelled(const generator *g)
{
    return atomic_load(&((generator *)g)->cancelled);
}

int64_t generator_waiting(const generator *g)
{
    return atomic_load(&((generator *)g)->waiting);
}

const dl_gen_conf *generator_conf(const generator *g)
{
    return &g->gc;
}

bool generator_cached(const generator *g)
{
    return dl_gen_cached(g->gen);
}

const dl_generate_conf *generator_settings(const generator *g)
{
    return &g->conf;
}
