/* batcher.c: dynamic batching with Triton's semantics. Requests queue per
 * served version. A worker thread per instance of the models
 * (models.instances, Triton's instance_group count: worker i computes on
 * copy i of a served version, so that as many batches compute at once)
 * takes the queue whose oldest request is oldest, and runs it as one batch
 * once it holds max_batch_size samples or its oldest request has waited
 * max_queue_delay_us; with `eager`, also as soon as no request is on its
 * way (the transports announce the requests they are receiving: see
 * batcher_arriving), since waiting could not fill it sooner. Beyond
 * max_queue_size queued samples per model, submissions are refused (503).
 * When eager batching would run a request alone and at once (nothing
 * queued, no other request on its way, an instance idle), the transport's
 * thread runs it instead (batcher_run_now): the same batch of one, without
 * the hand-off to a worker and back, provided that its inference is
 * short (direct_max_us: that thread answers other connections too) and
 * that the workers' batches are of one too (the last one taken): under
 * more load, requests that could join a batch keep going to the queue.
 * A thread's direct runs come in streaks, each after it slept, so that
 * one event loop reading requests back to back batches them instead of
 * computing them one by one. An event loop may also run the requests it
 * read in one pass as one batch (batcher_run_batch, an idle instance
 * claimed as batcher_run_now claims one), without the hand-off either.
 * Requests carry raw values: the served model's input scaling is applied
 * here, once, to the assembled batch. Deadlines follow Triton's queue
 * policy with REJECT: a request still queued past its timeout ("timeout"
 * parameter, else default_timeout_us) completes with DL_ERR_TIMEOUT,
 * without running. Each served version may override these settings (its
 * model's serving block: batch size, delay, preferred batch sizes, queue
 * bound, timeout, instances it runs on), and with priority_levels its
 * queue is ordered by Triton's priority level, highest first. */
#define _GNU_SOURCE   /* RUSAGE_THREAD */
#include "serve/serve.h"

#include <errno.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <time.h>

typedef struct queue {
    served    *sv;              /* the version these requests run on */
    infer_req *head, *tail;     /* by priority level, then arrival */
    int64_t    samples;
    double     first;           /* the earliest t_arrival queued */
} queue;

/* A worker: its thread, its instance of the models, its batch staging. */
typedef struct worker_ctx {
    struct batcher *b;
    int             instance;
    pthread_t       thread;
    atomic_llong    batches;    /* run so far, for /status */
    bool            busy;       /* its instance computes (under the lock) */
    float          *bx, *by;
    int64_t         bcap_in, bcap_out;
} worker_ctx;

struct batcher {
    dl_batching_conf conf;
    registry        *reg;
    stats           *st;
    pthread_mutex_t  mu;
    pthread_cond_t   cv;
    queue           *q;
    int              nq, capq;
    bool             stopping;
    atomic_int       arriving;  /* requests the transports are receiving */
    worker_ctx       workers[DL_MAX_INSTANCES];
    int              nworkers;  /* started */
    int              next_now;  /* the instance batcher_run_now tries first */
    int64_t          last_take; /* samples of the last batch a worker took */
    atomic_llong     direct;    /* requests batcher_run_now ran */
    atomic_llong     held;      /* batches batcher_run_batch ran */
    bool             joined;    /* drained: every worker has ended */
    /* The earliest deadline of a queued request (0: none); may be stale
     * (earlier than any left), which costs one needless scan. */
    double           next_deadline;
};

/* ---- a served version's settings: its serving block, else [batching] ---- */

static int64_t max_batch(const batcher *b, const served *sv)
{
    return sv->serving.max_batch_size > 0 ? sv->serving.max_batch_size : b->conf.max_batch_size;
}

static int64_t max_queue(const batcher *b, const served *sv)
{
    return sv->serving.max_queue_size > 0 ? sv->serving.max_queue_size : b->conf.max_queue_size;
}

static int64_t queue_delay_us(const batcher *b, const served *sv)
{
    return sv->serving.max_queue_delay_us >= 0 ? sv->serving.max_queue_delay_us
                                               : b->conf.max_queue_delay_us;
}

static int64_t default_timeout_us(const batcher *b, const served *sv)
{
    return sv->serving.default_timeout_us >= 0 ? sv->serving.default_timeout_us
                                               : b->conf.default_timeout_us;
}

/* The priority level a request is served at, Triton's way: 1 is the
 * highest; 0, or a level past the model's priority_levels, is the model's
 * default level; a model without levels serves every request alike (0). */
static int64_t level_of(const served *sv, int64_t priority)
{
    const serving_conf *sc = &sv->serving;
    if (sc->priority_levels == 0)
        return 0;
    return priority == 0 || priority > sc->priority_levels ? sc->default_priority_level
                                                           : priority;
}

/* Whether worker `instance` may run sv's batches (sv's serving.instances). */
static bool runs_on(const served *sv, int instance)
{
    return instance < sv->instances;
}

void infer_req_init(infer_req *q, served *sv, int64_t n, const void *x, float *out,
                    int64_t timeout_us, void (*on_done)(infer_req *q, void *ctx), void *ctx)
{
    *q = (infer_req){.version = sv->version, .n = n, .x = x, .out = out, .sv = sv,
                     .timeout_us = timeout_us, .on_done = on_done, .ctx = ctx};
    dl_strlcpy(q->model, sv->name, sizeof(q->model));
}

/* The key of q's inputs: its version (that very load) and raw bytes. */
static cache_key key_of(const infer_req *q)
{
    return (cache_key){.model = q->sv->name, .version = q->sv->version,
                       .load = q->sv->load_id, .x = q->x,
                       .x_len = (size_t)(q->n * q->sv->in_dim) * sizeof(float)};
}

bool infer_req_cached(cache *c, infer_req *q)
{
    if (!c || !q->sv->serving.cache)
        return false;
    double t0 = dl_time_now();
    size_t len = (size_t)(q->n * q->sv->out_dim) * sizeof(float);
    bool given = q->out != NULL;
    if (!given)
        q->out = malloc(len);
    cache_key k = key_of(q);
    bool hit = q->out && cache_get(c, &k, q->out, len);
    if (!hit && !given) {
        free(q->out);   /* the batcher allocates it, as without a cache */
        q->out = NULL;
    }
    double now = dl_time_now();
    q->cache = hit ? INFER_CACHE_HIT : INFER_CACHE_MISS;
    q->cache_us = (now - t0) * 1e6;
    if (hit) {
        q->err = (dl_err){0};
        q->t_arrival = q->t_start = q->t_infer = q->t_end = now;
    }
    return hit;
}

void infer_req_cache_store(cache *c, infer_req *q)
{
    if (!c || q->cache != INFER_CACHE_MISS || q->err.code != DL_OK || !q->out)
        return;
    double t0 = dl_time_now();
    cache_key k = key_of(q);
    cache_put(c, &k, q->out, (size_t)(q->n * q->sv->out_dim) * sizeof(float));
    q->cache_us += (dl_time_now() - t0) * 1e6;
}

void infer_req_account(stats *st, const infer_req *q, double t_received, bool ok)
{
    /* queue: submission to its batch's start; input, infer: the batch's
     * preparation and inference; output: the answer's writing; total:
     * from the transport's receipt to now. A request that did not run (or
     * failed) has only a total; a cache hit, its lookup. */
    double now = dl_time_now();
    req_times t = {.total_us = (now - t_received) * 1e6,
                   .cache_hit = q->cache == INFER_CACHE_HIT,
                   .cache_miss = q->cache == INFER_CACHE_MISS, .cache_us = q->cache_us};
    if (ok && !t.cache_hit) {
        t.queue_us = (q->t_start - q->t_arrival) * 1e6;
        t.input_us = (q->t_infer - q->t_start) * 1e6;
        t.infer_us = (q->t_end - q->t_infer) * 1e6;
        t.output_us = (now - q->t_end) * 1e6;
    }
    stats_request_times(st, q->sv->name, q->sv->version, ok, q->n, &t);
}

static void complete(infer_req *q)
{
    q->on_done(q, q->ctx);
}

/* Samples queued for a model, over all its versions. */
static int64_t model_samples(const batcher *b, const char *name)
{
    int64_t n = 0;
    for (int i = 0; i < b->nq; i++)
        if (strcmp(b->q[i].sv->name, name) == 0)
            n += b->q[i].samples;
    return n;
}

static queue *queue_for(batcher *b, served *sv)
{
    for (int i = 0; i < b->nq; i++)
        if (b->q[i].sv == sv)
            return &b->q[i];
    if (b->nq == b->capq) {
        int cap = b->capq ? b->capq * 2 : 8;
        queue *nq = realloc(b->q, (size_t)cap * sizeof(*nq));
        if (!nq)
            return NULL;
        b->q = nq;
        b->capq = cap;
    }
    queue *q = &b->q[b->nq++];
    memset(q, 0, sizeof(*q));
    q->sv = sv;
    return q;
}

/* Whether q has room for its outputs, allocated here unless the caller
 * gave it. */
static bool has_outputs(infer_req *q)
{
    if (!q->out)
        q->out = malloc((size_t)(q->n * q->sv->out_dim) * sizeof(float));
    return q->out != NULL;
}

/* Links q into qu after every request of its level or a higher one (1 is
 * the highest): requests of one level in arrival order. */
static void enqueue(queue *qu, infer_req *q)
{
    if (!qu->head || q->t_arrival < qu->first)
        qu->first = q->t_arrival;
    if (!qu->tail || qu->tail->level <= q->level) {   /* the common case: at the end */
        if (qu->tail)
            qu->tail->next = q;
        else
            qu->head = q;
        qu->tail = q;
        return;
    }
    infer_req **pp = &qu->head;
    while ((*pp)->level <= q->level)
        pp = &(*pp)->next;
    q->next = *pp;
    *pp = q;
}

/* Whether growing a queue of sv from `before` to `after` samples reached
 * one of its preferred batch sizes. */
static bool preferred_reached(const served *sv, int64_t before, int64_t after)
{
    for (int i = 0; i < sv->serving.npreferred; i++)
        if (before < sv->serving.preferred[i] && after >= sv->serving.preferred[i])
            return true;
    return false;
}

/* Wakes the worker that runs a batch of a version that runs on
 * `instances` instances: any one, unless that is fewer than there are
 * workers (then all, so that one of its own wakes). */
static void wake_workers(batcher *b, int instances)
{
    if (instances < b->nworkers)
        pthread_cond_broadcast(&b->cv);
    else
        pthread_cond_signal(&b->cv);
}

dl_status batcher_submit(batcher *b, infer_req *q, dl_err *err)
{
    bool pinned = q->sv != NULL;
    if (!pinned) {
        dl_status st = registry_acquire(b->reg, q->model, q->version, &q->sv, err);
        if (st != DL_OK)
            return st;
    }
    dl_status st = DL_OK;
    if (q->n < 1)
        st = dl_err_set(err, DL_ERR_INVALID, "empty batch");
    else if (q->n > max_queue(b, q->sv))
        st = dl_err_set(err, DL_ERR_INVALID, "batch of %lld exceeds max_queue_size %lld",
                        (long long)q->n, (long long)max_queue(b, q->sv));
    bool given = q->out != NULL;
    if (st == DL_OK && !has_outputs(q))
        st = dl_err_set(err, DL_ERR_NOMEM, "outputs");
    DL_ASSERT(q->on_done);
    q->t_arrival = dl_time_now();
    int64_t timeout_us = q->timeout_us > 0 ? q->timeout_us : default_timeout_us(b, q->sv);
    q->deadline = timeout_us > 0 ? q->t_arrival + (double)timeout_us * 1e-6 : 0;
    q->level = level_of(q->sv, q->priority);
    q->next = NULL;
    bool wake = false;
    int instances = q->sv->instances;   /* q is the worker's once queued */
    pthread_mutex_lock(&b->mu);
    queue *qu = st == DL_OK ? queue_for(b, q->sv) : NULL;
    if (st == DL_OK && b->stopping)
        st = dl_err_set(err, DL_ERR_UNAVAILABLE, "the server is stopping");
    else if (st == DL_OK && model_samples(b, q->sv->name) + q->n > max_queue(b, q->sv))
        st = dl_err_set(err, DL_ERR_BUSY, "queue of model '%s' is full (%lld samples)",
                        q->sv->name, (long long)max_queue(b, q->sv));
    else if (st == DL_OK && !qu)
        st = dl_err_set(err, DL_ERR_NOMEM, "queue");
    if (st == DL_OK) {
        /* The worker needs waking only for a queue's first request (to
         * start its delay) or a full batch (to run it now); in between it
         * sleeps until the oldest request's deadline. The wake-up comes
         * after the unlock: a worker woken inside the lock would only wait
         * for it again. */
        bool first = qu->head == NULL;
        enqueue(qu, q);
        int64_t before = qu->samples, most = max_batch(b, q->sv);
        qu->samples += q->n;
        bool sooner = q->deadline > 0 && (b->next_deadline == 0 || q->deadline < b->next_deadline);
        if (sooner)   /* the worker's wait must end by this deadline */
            b->next_deadline = q->deadline;
        wake = first || sooner || (before < most && qu->samples >= most) ||
               preferred_reached(q->sv, before, qu->samples);
    }
    pthread_mutex_unlock(&b->mu);
    if (wake)
        wake_workers(b, instances);
    if (st != DL_OK) {
        if (!given) {
            free(q->out);
            q->out = NULL;
        }
        if (!pinned) {
            served_release(q->sv);
            q->sv = NULL;
        }
    }
    return st;
}

void batcher_arriving(batcher *b, int delta)
{
    /* The last request on its way has arrived: a waiting batch can run.
     * The lock orders this wake-up after the worker's look at the count. */
    if (atomic_fetch_add(&b->arriving, delta) + delta == 0 && b->conf.eager) {
        pthread_mutex_lock(&b->mu);
        if (b->nq > 0)
            pthread_cond_signal(&b->cv);
        pthread_mutex_unlock(&b->mu);
    }
}

/* The non-empty queue that worker `instance` runs next, or NULL: of those
 * whose version runs on it, the one that has waited longest. (Priority
 * levels are a model's own, as Triton's are: they order its queue, not
 * the models.) */
static queue *oldest(batcher *b, int instance)
{
    queue *best = NULL;
    for (int i = 0; i < b->nq; i++) {
        queue *qu = &b->q[i];
        if (qu->head && runs_on(qu->sv, instance) && (!best || qu->first < best->first))
            best = qu;
    }
    return best;
}

/* The earliest arrival in qu's list (after a change to it). */
static void refresh_first(queue *qu)
{
    qu->first = 0;
    for (infer_req *r = qu->head; r; r = r->next)
        if (r == qu->head || r->t_arrival < qu->first)
            qu->first = r->t_arrival;
}

/* The samples to take from qu now: max_batch_size when it holds that
 * many, else the largest preferred batch size it holds; 0 when none is
 * reached (the batch waits for its delay). */
static int64_t ready_samples(const batcher *b, const queue *qu)
{
    int64_t most = max_batch(b, qu->sv);
    if (qu->samples >= most)
        return most;
    const serving_conf *sc = &qu->sv->serving;
    for (int i = sc->npreferred - 1; i >= 0; i--)
        if (qu->samples >= sc->preferred[i])
            return sc->preferred[i];
    return 0;
}

static void deadline(double t, struct timespec *ts)
{
    /* pthread_cond_timedwait takes CLOCK_REALTIME: convert the monotonic gap. */
    double gap = t - dl_time_now();
    clock_gettime(CLOCK_REALTIME, ts);
    if (gap < 0)
        gap = 0;
    long long ns = ts->tv_nsec + (long long)(gap * 1e9);
    ts->tv_sec += (time_t)(ns / 1000000000LL);
    ts->tv_nsec = (long)(ns % 1000000000LL);
}

/* Unlinks every queued request whose deadline is past `now` onto *expired
 * (each completed as refused: DL_ERR_TIMEOUT, counted) and recomputes
 * next_deadline. Called with the lock held. */
static void expire(batcher *b, double now, infer_req **expired)
{
    double next = 0;
    for (int i = 0; i < b->nq;) {
        queue *qu = &b->q[i];
        infer_req **pp = &qu->head, *last = NULL;
        while (*pp) {
            infer_req *r = *pp;
            if (r->deadline > 0 && r->deadline <= now) {
                *pp = r->next;
                qu->samples -= r->n;
                dl_err_set(&r->err, DL_ERR_TIMEOUT,
                           "request timeout expired: queued %.0f us, over its timeout of %.0f us",
                           (now - r->t_arrival) * 1e6, (r->deadline - r->t_arrival) * 1e6);
                r->t_start = r->t_infer = r->t_end = now;
                stats_timeout(b->st, r->sv->name, r->sv->version);
                r->next = *expired;
                *expired = r;
                continue;
            }
            if (r->deadline > 0 && (next == 0 || r->deadline < next))
                next = r->deadline;
            last = r;
            pp = &r->next;
        }
        qu->tail = last;
        refresh_first(qu);
        if (!qu->head)   /* drop the empty queue, as take does */
            *qu = b->q[--b->nq];
        else
            i++;
    }
    b->next_deadline = next;
}

/* Takes up to `most` samples of whole requests from qu (at least one
 * request), in queue order. Called with the lock held. */
static infer_req *take(batcher *b, queue *qu, int64_t most, int64_t *samples)
{
    infer_req *first = qu->head, *last = NULL;
    *samples = 0;
    for (infer_req *r = qu->head; r; r = r->next) {
        if (last && *samples + r->n > most)
            break;
        *samples += r->n;
        last = r;
    }
    qu->head = last->next;
    last->next = NULL;
    if (!qu->head)
        qu->tail = NULL;
    qu->samples -= *samples;
    refresh_first(qu);
    if (!qu->head)   /* drop the empty queue: its version may retire */
        *qu = b->q[--b->nq];
    return first;
}

static bool grow(float **p, int64_t *cap, int64_t n)
{
    if (n <= *cap)
        return true;
    float *np = realloc(*p, (size_t)n * sizeof(float));
    if (!np)
        return false;
    *p = np;
    *cap = n;
    return true;
}

/* What a failed batch means to each of its requests. They were checked on
 * submission, so the failure is the server's: out of (device) memory
 * fails this batch only (retry soon), a device gone is unavailable, and
 * anything else is the backend's failure. */
static dl_status batch_status(dl_status st)
{
    switch (st) {
    case DL_OK:
    case DL_ERR_UNAVAILABLE:
    case DL_ERR_BUSY:
        return st;
    case DL_ERR_NOMEM:
        return DL_ERR_BUSY;
    default:
        return DL_ERR_BACKEND;
    }
}

/* n samples of raw values (in_dim a sample, any alignment) from src into
 * dst, scaled as model.json says: each FP32 input with its own scaling,
 * ids as they are, a sequence's length (the head of its packed sample)
 * too. */
static void scale_inputs(const dl_model_conf *conf, int64_t in_dim, float *dst, const void *src,
                         int64_t n)
{
    const dl_input_conf *in0 = &conf->inputs[0];
    if (conf->ninputs == 1 && in0->dtype == DL_IN_FP32 && !in0->max_length) {
        dl_scaling sc = dl_scaling_of(conf);
        dl_scaling_apply(&sc, dst, src, n * in_dim);
        return;
    }
    const char *p = src;
    for (int64_t i = 0; i < n; i++) {
        int64_t at = i * in_dim;
        for (int k = 0; k < conf->ninputs; at += dl_input_width(&conf->inputs[k++])) {
            const dl_input_conf *in = &conf->inputs[k];
            int64_t head = in->max_length > 0;   /* the length, kept as it is */
            if (head)
                memcpy(dst + at, p + at * 4, sizeof(float));
            if (in->dtype == DL_IN_FP32)
                dl_scaling_apply(&in->sc, dst + at + head, p + (at + head) * 4, in->dim);
            else
                memcpy(dst + at + head, p + (at + head) * 4, (size_t)in->dim * sizeof(float));
        }
    }
}

/* Runs one batch of requests (a list) on w's copy of their served
 * version; the caller completes them. */
static void run(batcher *b, worker_ctx *w, infer_req *list, int64_t samples)
{
    served *sv = list->sv;
    double t0 = dl_time_now();
    dl_err err = {0};
    dl_status st = DL_OK;
    if (!grow(&w->bx, &w->bcap_in, samples * sv->in_dim) ||
        !grow(&w->by, &w->bcap_out, samples * sv->out_dim))
        st = dl_err_set(&err, DL_ERR_NOMEM, "batch buffers");
    /* bx: (samples, in_dim), each request's raw values scaled as the
     * training data was, in the one pass that gathers them */
    int64_t off = 0;
    for (infer_req *r = list; st == DL_OK && r; r = r->next) {
        scale_inputs(sv->conf, sv->in_dim, w->bx + off * sv->in_dim, r->x, r->n);
        off += r->n;
    }
    double t_in = t0;
    if (st == DL_OK) {
        t_in = dl_time_now();
        st = dl_model_predict(sv->m[w->instance], w->bx, samples, samples, w->by, &err);
    }
    double t1 = dl_time_now();
    dl_err outcome = {0};
    if (st != DL_OK)
        dl_err_set(&outcome, batch_status(st), "%s", err.msg);
    off = 0;
    for (infer_req *r = list; r; r = r->next) {
        r->err = outcome;
        if (st == DL_OK)
            memcpy(r->out, w->by + off * sv->out_dim, (size_t)(r->n * sv->out_dim) * sizeof(float));
        off += r->n;
        r->t_start = t0;
        r->t_infer = t_in;
        r->t_end = t1;
    }
    if (st == DL_OK) {
        stats_batch_times(b->st, sv->name, sv->version, samples, (t_in - t0) * 1e6,
                          (t1 - t_in) * 1e6, (dl_time_now() - t1) * 1e6);
        atomic_store(&sv->sample_us, (long long)((t1 - t_in) * 1e6 / (double)samples));
    }
    atomic_fetch_add(&w->batches, 1);
}

/* Completes a list of requests (without the lock). */
static void complete_all(infer_req *list)
{
    for (infer_req *r = list, *next; r; r = next) {
        next = r->next;
        r->next = NULL;
        complete(r);
    }
}

static void *worker(void *arg)
{
    worker_ctx *w = arg;
    batcher *b = w->b;
    pthread_mutex_lock(&b->mu);
    for (;;) {
        double now = dl_time_now();
        if (b->next_deadline > 0 && now >= b->next_deadline) {
            infer_req *expired = NULL;
            expire(b, now, &expired);
            if (expired) {
                pthread_mutex_unlock(&b->mu);
                complete_all(expired);
                pthread_mutex_lock(&b->mu);
                continue;
            }
        }
        queue *qu = oldest(b, w->instance);
        if (w->busy || !qu) {   /* busy: a transport's thread runs a request on it */
            if (!w->busy && b->stopping)
                break;
            pthread_cond_wait(&b->cv, &b->mu);
            continue;
        }
        double due = qu->first + (double)queue_delay_us(b, qu->sv) * 1e-6;
        bool more = !b->conf.eager || atomic_load(&b->arriving) > 0;
        int64_t ready = ready_samples(b, qu);
        if (ready == 0 && more && !b->stopping && now < due) {
            /* until the batch is due or a queued request's deadline */
            double until = b->next_deadline > 0 && b->next_deadline < due ? b->next_deadline : due;
            struct timespec ts;
            deadline(until, &ts);
            pthread_cond_timedwait(&b->cv, &b->mu, &ts);
            continue;   /* something arrived, or a time came: look again */
        }
        int64_t samples;
        infer_req *list = take(b, qu, ready > 0 ? ready : max_batch(b, qu->sv), &samples);
        b->last_take = samples;
        if (b->nworkers > 1 && b->nq > 0)   /* what is left is another worker's */
            pthread_cond_broadcast(&b->cv);
        w->busy = true;
        pthread_mutex_unlock(&b->mu);
        run(b, w, list, samples);
        complete_all(list);
        pthread_mutex_lock(&b->mu);
        w->busy = false;
    }
    pthread_mutex_unlock(&b->mu);
    return NULL;
}

/* How often the calling thread has slept (its voluntary context
 * switches): an event loop sleeps in epoll_wait when it has nothing to
 * read. */
static long thread_sleeps(void)
{
    struct rusage ru;
    return getrusage(RUSAGE_THREAD, &ru) == 0 ? ru.ru_nvcsw : -1;
}

/* The calling thread's direct runs in its streak, and thread_sleeps() at
 * the streak's end (BATCHER_DIRECT_STREAK runs). */
static _Thread_local int  direct_streak;
static _Thread_local long sleeps_at_streak;

/* Claims an idle instance for a run on the calling thread (the instances
 * take turns, as the workers do), or NULL. With `lone`, only when eager
 * batching would run a request alone: nothing queued, the workers' last
 * batch of one, no other request on its way; and not once stopping. */
static worker_ctx *claim(batcher *b, bool lone, const served *sv)
{
    worker_ctx *w = NULL;
    pthread_mutex_lock(&b->mu);
    if (!lone || (!b->stopping && b->nq == 0 && b->last_take <= 1 &&
                  atomic_load(&b->arriving) <= 1))
        for (int i = 0; i < b->nworkers && !w; i++) {
            worker_ctx *c = &b->workers[(b->next_now + i) % b->nworkers];
            if (!c->busy && runs_on(sv, c->instance))
                w = c;
        }
    if (w) {
        w->busy = true;
        b->next_now = (w->instance + 1) % b->nworkers;
    }
    pthread_mutex_unlock(&b->mu);
    return w;
}

bool batcher_stopping(batcher *b)
{
    pthread_mutex_lock(&b->mu);
    bool stopping = b->stopping;
    pthread_mutex_unlock(&b->mu);
    return stopping;
}

/* Gives w back. Requests queued meanwhile wait for this instance; a drain
 * waits for it too. Otherwise the workers sleep on: no wake-up. */
static void release(batcher *b, worker_ctx *w, int64_t samples)
{
    pthread_mutex_lock(&b->mu);
    w->busy = false;
    if (samples > 0)
        b->last_take = samples;
    bool wake = b->nq > 0 || b->stopping;
    pthread_mutex_unlock(&b->mu);
    if (wake)
        pthread_cond_broadcast(&b->cv);
}

bool batcher_fits_thread(batcher *b, served *sv, int64_t samples)
{
    return b->conf.eager && b->conf.direct_max_us > 0 && sv && samples >= 1 &&
           samples <= max_batch(b, sv) &&
           atomic_load(&sv->sample_us) * samples <= b->conf.direct_max_us;
}

bool batcher_may_wait(batcher *b, double waited, int requests)
{
    double most = (double)requests * BATCHER_HANDOFF_US;
    if (most > (double)b->conf.direct_max_us)
        most = (double)b->conf.direct_max_us;
    return waited * 1e6 < most;
}

bool batcher_run_now(batcher *b, infer_req *q)
{
    if (!batcher_fits_thread(b, q->sv, q->n))
        return false;
    /* An event loop that has not slept since its streak ended read this
     * request right behind the others: requests are arriving back to
     * back. They are batched (held by the loop, or queued for a worker
     * that computes while the loop goes on reading). (With one event loop
     * nothing else would end the streak: nothing is ever queued while the
     * loop computes.) */
    if (direct_streak == BATCHER_DIRECT_STREAK) {
        if (thread_sleeps() == sleeps_at_streak)
            return false;
        direct_streak = 0;
    }
    worker_ctx *w = claim(b, true, q->sv);
    if (!w)
        return false;
    bool ran = has_outputs(q);
    if (ran) {
        q->t_arrival = dl_time_now();
        q->deadline = 0;
        q->next = NULL;
        run(b, w, q, q->n);
        atomic_fetch_add(&b->direct, 1);
        if (++direct_streak == BATCHER_DIRECT_STREAK)
            sleeps_at_streak = thread_sleeps();
    }
    release(b, w, 0);
    return ran;
}

bool batcher_run_batch(batcher *b, infer_req *list)
{
    int64_t samples = 0;
    for (infer_req *r = list; r; r = r->next) {
        if (!has_outputs(r))
            return false;
        r->deadline = 0;
        samples += r->n;
    }
    worker_ctx *w = claim(b, false, list->sv);
    /* Once stopping, the queue takes nothing more, and the batch was
     * accepted: it waits for an instance (the workers are draining). */
    while (!w && batcher_stopping(b)) {
        struct timespec ts = {0, 100000};
        nanosleep(&ts, NULL);
        w = claim(b, false, list->sv);
    }
    if (!w)
        return false;
    run(b, w, list, samples);
    atomic_fetch_add(&b->held, 1);
    release(b, w, samples);
    return true;
}

dl_status batcher_new(const dl_batching_conf *conf, int instances, registry *reg, stats *st,
                      batcher **out, dl_err *err)
{
    *out = NULL;
    DL_ASSERT(instances >= 1 && instances <= DL_MAX_INSTANCES);
    batcher *b = calloc(1, sizeof(*b));
    if (!b)
        return dl_err_set(err, DL_ERR_NOMEM, "batcher");
    b->conf = *conf;
    b->reg = reg;
    b->st = st;
    pthread_mutex_init(&b->mu, NULL);
    pthread_cond_init(&b->cv, NULL);
    for (int i = 0; i < instances; i++) {
        worker_ctx *w = &b->workers[i];
        w->b = b;
        w->instance = i;
        if (pthread_create(&w->thread, NULL, worker, w) != 0) {
            batcher_free(b);
            return dl_err_set(err, DL_ERR_NOMEM, "cannot start inference worker %d", i);
        }
        b->nworkers++;
    }
    *out = b;
    return DL_OK;
}

void batcher_drain(batcher *b)
{
    if (!b || b->joined)
        return;
    pthread_mutex_lock(&b->mu);
    b->stopping = true;
    pthread_cond_broadcast(&b->cv);
    pthread_mutex_unlock(&b->mu);
    for (int i = 0; i < b->nworkers; i++)
        pthread_join(b->workers[i].thread, NULL);
    b->joined = true;
}

void batcher_free(batcher *b)
{
    if (!b)
        return;
    batcher_drain(b);
    free(b->q);
    for (int i = 0; i < b->nworkers; i++) {
        free(b->workers[i].bx);
        free(b->workers[i].by);
    }
    pthread_mutex_destroy(&b->mu);
    pthread_cond_destroy(&b->cv);
    free(b);
}

const dl_batching_conf *batcher_conf(const batcher *b)
{
    return &b->conf;
}

json_t *batcher_status(batcher *b)
{
    json_t *o = json_object();
    pthread_mutex_lock(&b->mu);
    for (int i = 0; i < b->nq; i++) {
        const char *name = b->q[i].sv->name;
        json_t *cur = json_object_get(o, name);
        json_int_t n = (cur ? json_integer_value(cur) : 0) + b->q[i].samples;
        json_object_set_new(o, name, json_integer(n));
    }
    json_t *batches = json_array();
    for (int i = 0; i < b->nworkers; i++)
        json_array_append_new(batches, json_integer(atomic_load(&b->workers[i].batches)));
    json_t *res = json_pack("{s:o, s:i, s:o, s:I, s:I, s:I, s:I, s:I, s:I, s:b, s:b}",
                            "queued_samples", o,
                            "instances", b->nworkers, "batches_by_instance", batches,
                            "direct_runs", (json_int_t)atomic_load(&b->direct),
                            "held_batches", (json_int_t)atomic_load(&b->held),
                            "direct_max_us", (json_int_t)b->conf.direct_max_us,
                            "max_batch_size", (json_int_t)b->conf.max_batch_size,
                            "max_queue_delay_us", (json_int_t)b->conf.max_queue_delay_us,
                            "max_queue_size", (json_int_t)b->conf.max_queue_size,
                            "eager", b->conf.eager, "stopping", b->stopping);
    pthread_mutex_unlock(&b->mu);
    return res;
}

/* Requests queued for version `version` of `model` (under b->mu). */
static int64_t queued_requests(const batcher *b, const char *model, int64_t version)
{
    int64_t n = 0;
    for (int i = 0; i < b->nq; i++)
        if (b->q[i].sv->version == version && strcmp(b->q[i].sv->name, model) == 0)
            for (const infer_req *r = b->q[i].head; r; r = r->next)
                n++;
    return n;
}

/* Triton's nv_inference_pending_request_count{model,version}: requests
 * queued for a batch that has not run yet, for every version served (0
 * when none waits). */
static void pending_requests(batcher *b, dl_sbuf *out)
{
    dl_prom_family(out, "nv_inference_pending_request_count", "gauge",
                   "Instantaneous number of pending requests awaiting execution per-model.");
    json_t *models = registry_status(b->reg), *m, *v;
    size_t i, k;
    pthread_mutex_lock(&b->mu);
    json_array_foreach(models, i, m) {
        const char *name = json_string_value(json_object_get(m, "name"));
        json_array_foreach(json_object_get(m, "versions"), k, v) {
            char ver[24];
            snprintf(ver, sizeof(ver), "%lld", (long long)json_integer_value(v));
            dl_prom_sample(out, "nv_inference_pending_request_count",
                           (double)queued_requests(b, name, json_integer_value(v)), "model",
                           name, "version", ver, NULL);
        }
    }
    pthread_mutex_unlock(&b->mu);
    json_decref(models);
}

void batcher_metrics(batcher *b, dl_sbuf *out)
{
    json_t *st = batcher_status(b);
    dl_prom_family(out, "dlserve_batcher_queued_samples", "gauge",
                   "Samples queued for inference, by model.");
    const char *model;
    json_t *n;
    json_object_foreach(json_object_get(st, "queued_samples"), model, n)
        dl_prom_sample(out, "dlserve_batcher_queued_samples", (double)json_integer_value(n),
                       "model", model, NULL);
    pending_requests(b, out);
    dl_prom_family(out, "dlserve_batcher_queue_limit_samples", "gauge",
                   "Samples a model may queue before requests get 503 (max_queue_size).");
    dl_prom_sample(out, "dlserve_batcher_queue_limit_samples",
                   (double)json_integer_value(json_object_get(st, "max_queue_size")), NULL);
    dl_prom_family(out, "dlserve_batcher_direct_runs_total", "counter",
                   "Requests computed on the HTTP thread that read them, without the hand-off "
                   "to the batcher's worker (batching.direct_max_us).");
    dl_prom_sample(out, "dlserve_batcher_direct_runs_total",
                   (double)json_integer_value(json_object_get(st, "direct_runs")), NULL);
    dl_prom_family(out, "dlserve_batcher_held_batches_total", "counter",
                   "Batches computed on the HTTP thread that read their requests in one pass "
                   "(batching.direct_max_us).");
    dl_prom_sample(out, "dlserve_batcher_held_batches_total",
                   (double)json_integer_value(json_object_get(st, "held_batches")), NULL);
    json_decref(st);
}
