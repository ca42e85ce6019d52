/* perf_grpc.c: dlserve-perf's gRPC target (perf.h): ModelInfer calls of
 * the Open Inference Protocol's GRPCInferenceService on libgrpc's C core,
 * the request packed once (its inputs in raw_input_contents) and shared
 * by every call.
 *
 * A call is one batch of the six client ops, so it completes once, on
 * the completion queue of the thread that polls it. Closed loop: the
 * level's concurrency of callers, each starting its next call as soon as
 * its last one ends, as HTTP's connections do, spread over the channels
 * (each its own HTTP/2 connection: one local subchannel pool a channel)
 * and the threads; latency from a call's start to its status. Open loop:
 * call i is started when it is due, at i / rate, by thread i mod threads,
 * its latency from when it was due. Calls still in flight when a
 * closed-loop window ends are waited for and not counted. */
#define _GNU_SOURCE
#include "perf.h"

#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include <grpc/byte_buffer_reader.h>
#include <grpc/grpc.h>
#include <grpc/grpc_security.h>
#include <grpc/support/alloc.h>

#include "grpc_service.pb-c.h"

#define MAX_CHANNELS   64
#define MAX_THREADS    64
#define MAX_METADATA   16
#define CALL_SECONDS   10           /* a call's deadline: past it, a timeout */
#define LATE_NS        1000000      /* open loop: started this late counts as late */
#define NEAR_NS        3000000      /* open loop: this close to a call's due time, */
#define NAP_NS         50000        /* ... poll, then sleep this long at most */
#define INFER_METHOD   "/inference.GRPCInferenceService/ModelInfer"
#define META_METHOD    "/inference.GRPCInferenceService/ModelMetadata"

typedef struct grpc_target grpc_target;
typedef struct worker worker;

/* One call in flight and what its batch writes into; only the thread
 * polling its worker's queue touches it once it runs. */
typedef struct caller {
    worker             *w;
    int                 channel;
    grpc_call          *call;
    grpc_byte_buffer   *send, *recv;
    grpc_metadata_array initial, trailing;
    grpc_status_code    status;
    grpc_slice          details;
    int64_t             start_ns;   /* the call's start, or when it was due */
    bool                again;      /* closed loop: a caller that calls again */
} caller;

/* A polling thread: its completion queue, and its share of a window. */
struct worker {
    grpc_target           *g;
    pthread_t              tid;
    grpc_completion_queue *cq;
    int                    inflight;
    size_t                 next;         /* open loop: the next call of its share */
    uint32_t              *lat;          /* this window's counted latencies, us */
    size_t                 nlat, cap;
    double                 sum_us;
    long long              bad, timeouts, lost, late;
    int64_t                last_ns;      /* the last counted answer */
    bool                   oom;
};

struct grpc_target {
    perf_target     base;
    grpc_channel   *channels[MAX_CHANNELS];
    void           *method[MAX_CHANNELS];
    int             nchannels, nthreads;
    worker          workers[MAX_THREADS];
    grpc_slice      request;
    grpc_metadata   md[MAX_METADATA];
    size_t          nmd;
    int             concurrency;
    caller         *callers;        /* closed loop, concurrency of them */
    /* the window being run */
    bool            closed;
    double          rate;
    size_t          total;          /* open loop: calls due */
    int64_t         start_ns, end_ns;
    uint32_t       *lat;            /* every thread's latencies, for hl_stats */
    size_t          lat_cap;
    pthread_mutex_t lock;           /* first_error */
};

static int64_t now_ns(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (int64_t)ts.tv_sec * 1000000000LL + ts.tv_nsec;
}

/* One channel a connection: a local subchannel pool keeps channels with
 * the same target and arguments from sharing one. Answers are not capped
 * at the 4 MiB default. */
static grpc_channel *channel_new(const char *target)
{
    grpc_arg args[] = {
        {.type = GRPC_ARG_INTEGER, .key = GRPC_ARG_USE_LOCAL_SUBCHANNEL_POOL,
         .value.integer = 1},
        {.type = GRPC_ARG_INTEGER, .key = GRPC_ARG_MAX_RECEIVE_MESSAGE_LENGTH,
         .value.integer = -1},
    };
    grpc_channel_args ca = {.num_args = sizeof args / sizeof args[0], .args = args};
    grpc_channel_credentials *creds = grpc_insecure_credentials_create();
    grpc_channel *ch = grpc_channel_create(target, creds, &ca);
    grpc_channel_credentials_release(creds);
    return ch;
}

static void metadata_free(grpc_metadata *md, size_t n)
{
    for (size_t i = 0; i < n; i++) {
        grpc_slice_unref(md[i].key);
        grpc_slice_unref(md[i].value);
    }
}

/* -H "Name: value" lines as metadata (keys lower case, as HTTP/2 wants);
 * false with a message in err for a line that is not one. */
static bool metadata_of(const perf_grpc_opts *o, grpc_metadata *md, size_t *n, char *err,
                        size_t err_len)
{
    *n = 0;
    for (int i = 0; i < o->nheaders && i < MAX_METADATA; i++) {
        const char *h = o->headers[i], *colon = strchr(h, ':');
        if (!colon || colon == h) {
            snprintf(err, err_len, "-H %s: want 'Name: value'", h);
            metadata_free(md, *n);
            *n = 0;
            return false;
        }
        char key[256];
        size_t klen = (size_t)(colon - h) < sizeof(key) - 1 ? (size_t)(colon - h)
                                                             : sizeof(key) - 1;
        for (size_t j = 0; j < klen; j++)
            key[j] = (char)(h[j] >= 'A' && h[j] <= 'Z' ? h[j] - 'A' + 'a' : h[j]);
        key[klen] = '\0';
        const char *v = colon + 1;
        while (*v == ' ' || *v == '\t')
            v++;
        memset(&md[*n], 0, sizeof(md[*n]));
        md[*n].key = grpc_slice_from_copied_string(key);
        md[*n].value = grpc_slice_from_copied_string(v);
        (*n)++;
    }
    return true;
}

static const char *status_name(grpc_status_code s)
{
    static const char *names[] = {
        "OK", "CANCELLED", "UNKNOWN", "INVALID_ARGUMENT", "DEADLINE_EXCEEDED", "NOT_FOUND",
        "ALREADY_EXISTS", "PERMISSION_DENIED", "RESOURCE_EXHAUSTED", "FAILED_PRECONDITION",
        "ABORTED", "OUT_OF_RANGE", "UNIMPLEMENTED", "INTERNAL", "UNAVAILABLE", "DATA_LOSS",
        "UNAUTHENTICATED",
    };
    return s >= 0 && (size_t)s < sizeof(names) / sizeof(names[0]) ? names[s] : "?";
}

/* One unary call, blocking: METHOD with request on ch; the answer's bytes
 * in *answer (a slice to unref) when the status is OK, else false with
 * the status and details in err. */
static bool unary(grpc_channel *ch, const char *method, grpc_slice request, grpc_metadata *md,
                  size_t nmd, grpc_slice *answer, char *err, size_t err_len)
{
    grpc_completion_queue *cq = grpc_completion_queue_create_for_pluck(NULL);
    gpr_timespec deadline = gpr_time_add(gpr_now(GPR_CLOCK_MONOTONIC),
                                         gpr_time_from_seconds(CALL_SECONDS, GPR_TIMESPAN));
    grpc_slice m = grpc_slice_from_static_string(method);
    grpc_call *call = grpc_channel_create_call(ch, NULL, GRPC_PROPAGATE_DEFAULTS, cq, m, NULL,
                                               deadline, NULL);
    grpc_byte_buffer *send = grpc_raw_byte_buffer_create(&request, 1), *recv = NULL;
    grpc_metadata_array initial, trailing;
    grpc_metadata_array_init(&initial);
    grpc_metadata_array_init(&trailing);
    grpc_status_code status = GRPC_STATUS_UNKNOWN;
    grpc_slice details = grpc_empty_slice();
    grpc_op ops[6];
    memset(ops, 0, sizeof ops);
    ops[0].op = GRPC_OP_SEND_INITIAL_METADATA;
    ops[0].data.send_initial_metadata.count = nmd;
    ops[0].data.send_initial_metadata.metadata = nmd ? md : NULL;
    ops[1].op = GRPC_OP_SEND_MESSAGE;
    ops[1].data.send_message.send_message = send;
    ops[2].op = GRPC_OP_SEND_CLOSE_FROM_CLIENT;
    ops[3].op = GRPC_OP_RECV_INITIAL_METADATA;
    ops[3].data.recv_initial_metadata.recv_initial_metadata = &initial;
    ops[4].op = GRPC_OP_RECV_MESSAGE;
    ops[4].data.recv_message.recv_message = &recv;
    ops[5].op = GRPC_OP_RECV_STATUS_ON_CLIENT;
    ops[5].data.recv_status_on_client.trailing_metadata = &trailing;
    ops[5].data.recv_status_on_client.status = &status;
    ops[5].data.recv_status_on_client.status_details = &details;
    bool ok = false;
    grpc_call_error e = grpc_call_start_batch(call, ops, 6, call, NULL);
    if (e != GRPC_CALL_OK) {
        snprintf(err, err_len, "%s: %s", method, grpc_call_error_to_string(e));
    } else {
        grpc_event ev = grpc_completion_queue_pluck(cq, call, gpr_inf_future(GPR_CLOCK_REALTIME),
                                                    NULL);
        if (!ev.success) {
            snprintf(err, err_len, "%s: the call failed", method);
        } else if (status != GRPC_STATUS_OK) {
            char *d = grpc_slice_to_c_string(details);
            snprintf(err, err_len, "%s answered %s (%d): %.300s", method, status_name(status),
                     (int)status, d);
            gpr_free(d);
        } else {
            grpc_byte_buffer_reader r;
            if (recv && grpc_byte_buffer_reader_init(&r, recv)) {
                *answer = grpc_byte_buffer_reader_readall(&r);
                grpc_byte_buffer_reader_destroy(&r);
                ok = true;
            } else {
                snprintf(err, err_len, "%s: an OK status without an answer", method);
            }
        }
    }
    grpc_byte_buffer_destroy(send);
    if (recv)
        grpc_byte_buffer_destroy(recv);
    grpc_metadata_array_destroy(&initial);
    grpc_metadata_array_destroy(&trailing);
    grpc_slice_unref(details);
    grpc_call_unref(call);
    grpc_completion_queue_shutdown(cq);
    while (grpc_completion_queue_pluck(cq, NULL, gpr_inf_future(GPR_CLOCK_REALTIME),
                                       NULL).type != GRPC_QUEUE_SHUTDOWN) {
    }
    grpc_completion_queue_destroy(cq);
    return ok;
}

/* "... (is the server running?)" where the status says it cannot be reached. */
static void hint_unreachable(char *err, size_t err_len)
{
    if (strstr(err, "UNAVAILABLE") || strstr(err, "DEADLINE_EXCEEDED")) {
        size_t n = strlen(err);
        snprintf(err + n, err_len - n, " (is the server running?)");
    }
}

json_t *perf_grpc_metadata(const perf_grpc_opts *o, char *err, size_t err_len)
{
    grpc_init();
    grpc_metadata md[MAX_METADATA];
    size_t nmd;
    json_t *meta = NULL;
    if (!metadata_of(o, md, &nmd, err, err_len)) {
        grpc_shutdown();
        return NULL;
    }
    Inference__ModelMetadataRequest req = INFERENCE__MODEL_METADATA_REQUEST__INIT;
    req.name = (char *)o->model;
    grpc_slice packed = grpc_slice_malloc(inference__model_metadata_request__get_packed_size(&req));
    inference__model_metadata_request__pack(&req, GRPC_SLICE_START_PTR(packed));
    grpc_channel *ch = channel_new(o->target);
    grpc_slice answer;
    if (unary(ch, META_METHOD, packed, md, nmd, &answer, err, err_len)) {
        Inference__ModelMetadataResponse *res = inference__model_metadata_response__unpack(
            NULL, GRPC_SLICE_LENGTH(answer), GRPC_SLICE_START_PTR(answer));
        grpc_slice_unref(answer);
        if (!res) {
            snprintf(err, err_len, "%s: the answer is not a ModelMetadataResponse", META_METHOD);
        } else {
            json_t *inputs = json_array();
            for (size_t i = 0; i < res->n_inputs; i++) {
                json_t *shape = json_array();
                for (size_t j = 0; j < res->inputs[i]->n_shape; j++)
                    json_array_append_new(shape, json_integer(res->inputs[i]->shape[j]));
                json_array_append_new(inputs, json_pack("{s:s, s:s, s:o}",
                                                        "name", res->inputs[i]->name,
                                                        "datatype", res->inputs[i]->datatype,
                                                        "shape", shape));
            }
            meta = json_pack("{s:o}", "inputs", inputs);
            inference__model_metadata_response__free_unpacked(res, NULL);
        }
    } else {
        hint_unreachable(err, err_len);
    }
    grpc_slice_unref(packed);
    grpc_channel_destroy(ch);
    metadata_free(md, nmd);
    grpc_shutdown();
    return meta;
}

/* ---- calls ---------------------------------------------------------- */

/* Starts c's call, its latency to run from start_ns. */
static bool call_start(grpc_target *g, caller *c, int64_t start_ns)
{
    gpr_timespec deadline = gpr_time_add(gpr_now(GPR_CLOCK_MONOTONIC),
                                         gpr_time_from_seconds(CALL_SECONDS, GPR_TIMESPAN));
    c->call = grpc_channel_create_registered_call(g->channels[c->channel], NULL,
                                                  GRPC_PROPAGATE_DEFAULTS, c->w->cq,
                                                  g->method[c->channel], deadline, NULL);
    c->send = grpc_raw_byte_buffer_create(&g->request, 1);   /* a reference, not a copy */
    c->recv = NULL;
    grpc_metadata_array_init(&c->initial);
    grpc_metadata_array_init(&c->trailing);
    c->details = grpc_empty_slice();

    grpc_op ops[6];
    memset(ops, 0, sizeof ops);
    ops[0].op = GRPC_OP_SEND_INITIAL_METADATA;
    ops[0].data.send_initial_metadata.count = g->nmd;
    ops[0].data.send_initial_metadata.metadata = g->nmd ? g->md : NULL;
    ops[1].op = GRPC_OP_SEND_MESSAGE;
    ops[1].data.send_message.send_message = c->send;
    ops[2].op = GRPC_OP_SEND_CLOSE_FROM_CLIENT;
    ops[3].op = GRPC_OP_RECV_INITIAL_METADATA;
    ops[3].data.recv_initial_metadata.recv_initial_metadata = &c->initial;
    ops[4].op = GRPC_OP_RECV_MESSAGE;
    ops[4].data.recv_message.recv_message = &c->recv;
    ops[5].op = GRPC_OP_RECV_STATUS_ON_CLIENT;
    ops[5].data.recv_status_on_client.trailing_metadata = &c->trailing;
    ops[5].data.recv_status_on_client.status = &c->status;
    ops[5].data.recv_status_on_client.status_details = &c->details;

    c->start_ns = start_ns;
    if (grpc_call_start_batch(c->call, ops, 6, c, NULL) != GRPC_CALL_OK) {
        grpc_byte_buffer_destroy(c->send);
        grpc_metadata_array_destroy(&c->initial);
        grpc_metadata_array_destroy(&c->trailing);
        grpc_call_unref(c->call);
        c->call = NULL;
        return false;
    }
    c->w->inflight++;
    return true;
}

static void note_error(grpc_target *g, grpc_status_code s, const char *details)
{
    pthread_mutex_lock(&g->lock);
    if (!g->base.first_error[0])
        snprintf(g->base.first_error, sizeof(g->base.first_error), "gRPC %s (%d): %.300s",
                 status_name(s), (int)s, details);
    pthread_mutex_unlock(&g->lock);
}

static void keep(worker *w, uint32_t us, int64_t t)
{
    if (w->nlat == w->cap) {
        size_t cap = w->cap ? 2 * w->cap : 65536;
        uint32_t *more = realloc(w->lat, cap * sizeof(*more));
        if (!more) {
            w->oom = true;
            return;
        }
        w->lat = more;
        w->cap = cap;
    }
    w->lat[w->nlat++] = us;
    w->sum_us += us;
    w->last_ns = t;
}

/* c's call has ended: counts it (a closed-loop call ending after the
 * window does not count), frees it, and starts the caller's next call in
 * a closed loop before the window's end; open-loop calls are freed. */
static void call_done(grpc_target *g, caller *c, bool ok)
{
    int64_t t = now_ns();
    worker *w = c->w;
    w->inflight--;
    grpc_status_code s = ok ? c->status : GRPC_STATUS_UNKNOWN;
    bool counted = !g->closed || t <= g->end_ns;
    if (s != GRPC_STATUS_OK) {
        char *d = ok ? grpc_slice_to_c_string(c->details) : NULL;
        note_error(g, s, ok ? d : "the call's batch failed");
        gpr_free(d);
    }
    if (counted && s == GRPC_STATUS_DEADLINE_EXCEEDED) {
        w->timeouts++;
    } else if (counted) {
        w->bad += s != GRPC_STATUS_OK;
        keep(w, (uint32_t)((t - c->start_ns) / 1000), t);
    }
    grpc_byte_buffer_destroy(c->send);
    if (c->recv)
        grpc_byte_buffer_destroy(c->recv);
    grpc_metadata_array_destroy(&c->initial);
    grpc_metadata_array_destroy(&c->trailing);
    grpc_slice_unref(c->details);
    grpc_call_unref(c->call);
    c->call = NULL;
    if (!c->again)
        free(c);
    else if (t < g->end_ns && !call_start(g, c, now_ns()))
        w->lost++;   /* the caller stops */
}

/* Open loop: starts the calls of w's share that are due by now; returns
 * when the next one is due (INT64_MAX: none left). */
static int64_t start_due(grpc_target *g, worker *w, int64_t now)
{
    while (w->next < g->total) {
        int64_t due = g->start_ns + (int64_t)((double)w->next * 1e9 / g->rate);
        if (due > now)
            return due;
        caller *c = calloc(1, sizeof(*c));
        if (!c) {
            w->oom = true;
            return INT64_MAX;
        }
        c->w = w;
        c->channel = (int)(w->next % (size_t)g->nchannels);
        w->late += now - due >= LATE_NS;
        if (!call_start(g, c, due)) {
            free(c);
            w->lost++;
        }
        w->next += (size_t)g->nthreads;
    }
    return INT64_MAX;
}

static void *worker_run(void *arg)
{
    worker *w = arg;
    grpc_target *g = w->g;
    for (;;) {
        int64_t now = now_ns(), due = g->closed ? INT64_MAX : start_due(g, w, now);
        if (w->inflight == 0 && due == INT64_MAX)
            break;
        /* libgrpc's timers wake a millisecond or more late: near a call's
         * due time, poll without waiting and sleep in short steps */
        int64_t wait = due == INT64_MAX ? 200000000 : due - now - NEAR_NS;
        wait = wait > 200000000 ? 200000000 : wait;
        gpr_timespec wake = wait > 0 ? gpr_time_add(gpr_now(GPR_CLOCK_MONOTONIC),
                                                    gpr_time_from_nanos(wait, GPR_TIMESPAN))
                                     : gpr_inf_past(GPR_CLOCK_MONOTONIC);
        grpc_event ev = grpc_completion_queue_next(w->cq, wake, NULL);
        if (ev.type == GRPC_OP_COMPLETE) {
            call_done(g, ev.tag, ev.success != 0);
        } else if (ev.type == GRPC_QUEUE_SHUTDOWN) {
            break;
        } else if (wait <= 0) {
            int64_t left = due - now_ns();
            struct timespec nap = {0, left < NAP_NS ? (left > 0 ? left : 0) : NAP_NS};
            nanosleep(&nap, NULL);
        }
    }
    return NULL;
}

/* ---- the target ------------------------------------------------------ */

static bool grpc_run(perf_target *t, double rate, double seconds, hl_stats *st, char *err,
                     size_t err_len)
{
    grpc_target *g = (grpc_target *)t;
    memset(st, 0, sizeof(*st));
    g->closed = rate == 0;
    g->rate = rate;
    g->total = g->closed ? 0 : (size_t)(rate * seconds + 0.5);
    if (!g->closed && g->total < 1) {
        snprintf(err, err_len, "rate x seconds must be 1 or more calls");
        return false;
    }
    int nthreads = g->closed && g->concurrency < g->nthreads ? g->concurrency : g->nthreads;
    for (int i = 0; i < nthreads; i++) {
        worker *w = &g->workers[i];
        w->next = (size_t)i;
        w->nlat = 0;
        w->sum_us = 0;
        w->bad = w->timeouts = w->lost = w->late = 0;
        w->oom = false;
    }
    g->start_ns = now_ns();
    g->end_ns = g->start_ns + (int64_t)(seconds * 1e9);
    for (int i = 0; g->closed && i < g->concurrency; i++) {
        caller *c = &g->callers[i];
        c->w = &g->workers[i % nthreads];
        c->channel = i % g->nchannels;
        c->again = true;
        if (!call_start(g, c, now_ns())) {
            snprintf(err, err_len, "grpc_call_start_batch failed");
            return false;
        }
    }
    for (int i = 0; i < nthreads; i++)
        g->workers[i].last_ns = g->start_ns;
    int started = 0;
    for (; started < nthreads; started++)
        if (pthread_create(&g->workers[started].tid, NULL, worker_run, &g->workers[started]))
            break;
    if (started < nthreads)   /* run what did not start here, then say so */
        for (int i = started; i < nthreads; i++)
            worker_run(&g->workers[i]);
    for (int i = 0; i < started; i++)
        pthread_join(g->workers[i].tid, NULL);

    size_t n = 0;
    int64_t last = g->start_ns;
    bool oom = false;
    for (int i = 0; i < nthreads; i++)
        n += g->workers[i].nlat;
    if (n > g->lat_cap) {
        uint32_t *more = realloc(g->lat, n * sizeof(*more));
        if (!more) {
            snprintf(err, err_len, "out of memory");
            return false;
        }
        g->lat = more;
        g->lat_cap = n;
    }
    for (int i = 0; i < nthreads; i++) {
        worker *w = &g->workers[i];
        if (w->nlat)
            memcpy(g->lat + st->answered, w->lat, w->nlat * sizeof(*w->lat));
        st->answered += w->nlat;
        st->sum_us += w->sum_us;
        st->bad_status += w->bad;
        st->timeouts += w->timeouts;
        st->lost_write += w->lost;
        st->late += (size_t)w->late;
        last = w->last_ns > last ? w->last_ns : last;
        oom |= w->oom;
    }
    if (oom) {
        snprintf(err, err_len, "out of memory");
        return false;
    }
    st->lat = g->lat;
    st->max_inflight = g->closed ? (size_t)g->concurrency : 0;
    st->elapsed_ns = g->closed ? g->end_ns - g->start_ns : last - g->start_ns;
    if (started < nthreads) {
        snprintf(err, err_len, "pthread_create failed");
        return false;
    }
    return true;
}

static bool grpc_level(perf_target *t, double value, bool rate_mode, int connections,
                       char *err, size_t err_len)
{
    (void)connections;   /* the channels, opened once */
    grpc_target *g = (grpc_target *)t;
    g->base.first_error[0] = '\0';
    if (rate_mode)
        return true;
    caller *c = realloc(g->callers, (size_t)value * sizeof(*c));
    if (!c) {
        snprintf(err, err_len, "out of memory");
        return false;
    }
    memset(c, 0, (size_t)value * sizeof(*c));
    g->callers = c;
    g->concurrency = (int)value;
    return true;
}

static void grpc_close(perf_target *t)
{
    grpc_target *g = (grpc_target *)t;
    for (int i = 0; i < g->nthreads; i++) {
        grpc_completion_queue_shutdown(g->workers[i].cq);
        while (grpc_completion_queue_next(g->workers[i].cq, gpr_inf_future(GPR_CLOCK_REALTIME),
                                          NULL).type != GRPC_QUEUE_SHUTDOWN) {
        }
        grpc_completion_queue_destroy(g->workers[i].cq);
        free(g->workers[i].lat);
    }
    for (int i = 0; i < g->nchannels; i++)
        grpc_channel_destroy(g->channels[i]);
    metadata_free(g->md, g->nmd);
    grpc_slice_unref(g->request);
    pthread_mutex_destroy(&g->lock);
    free(g->callers);
    free(g->lat);
    free(g);
    grpc_shutdown();
}

perf_target *perf_grpc_target(const perf_grpc_opts *o, const perf_grpc_input *in, size_t n,
                              char *err, size_t err_len)
{
    if (o->channels < 1 || o->channels > MAX_CHANNELS || o->threads < 1 ||
        o->threads > MAX_THREADS) {
        snprintf(err, err_len, "gRPC: 1..%d channels (--connections) and 1..%d threads",
                 MAX_CHANNELS, MAX_THREADS);
        return NULL;
    }
    grpc_target *g = calloc(1, sizeof(*g));
    Inference__ModelInferRequest__InferInputTensor *tensors = calloc(n, sizeof(*tensors));
    Inference__ModelInferRequest__InferInputTensor **inputs = calloc(n, sizeof(*inputs));
    ProtobufCBinaryData *contents = calloc(n, sizeof(*contents));
    if (!g || !tensors || !inputs || !contents) {
        free(g);
        free(tensors);
        free(inputs);
        free(contents);
        snprintf(err, err_len, "out of memory");
        return NULL;
    }
    grpc_init();
    for (size_t i = 0; i < n; i++) {
        inference__model_infer_request__infer_input_tensor__init(&tensors[i]);
        tensors[i].name = (char *)in[i].name;
        tensors[i].datatype = (char *)in[i].datatype;
        tensors[i].n_shape = in[i].ndims;
        tensors[i].shape = (int64_t *)in[i].shape;
        inputs[i] = &tensors[i];
        contents[i] = (ProtobufCBinaryData){.len = in[i].raw_len, .data = (uint8_t *)in[i].raw};
    }
    Inference__ModelInferRequest req = INFERENCE__MODEL_INFER_REQUEST__INIT;
    req.model_name = (char *)o->model;
    req.n_inputs = n;
    req.inputs = inputs;
    req.n_raw_input_contents = n;
    req.raw_input_contents = contents;
    size_t len = inference__model_infer_request__get_packed_size(&req);
    g->request = grpc_slice_malloc(len);
    inference__model_infer_request__pack(&req, GRPC_SLICE_START_PTR(g->request));
    free(tensors);
    free(inputs);
    free(contents);
    pthread_mutex_init(&g->lock, NULL);
    g->nchannels = o->channels;
    g->nthreads = o->threads;
    bool ok = metadata_of(o, g->md, &g->nmd, err, err_len);
    for (int i = 0; i < g->nchannels; i++) {
        g->channels[i] = channel_new(o->target);
        g->method[i] = grpc_channel_register_call(g->channels[i], INFER_METHOD, NULL, NULL);
    }
    for (int i = 0; i < g->nthreads; i++) {
        g->workers[i].g = g;
        g->workers[i].cq = grpc_completion_queue_create_for_next(NULL);
    }
    g->base.run = grpc_run;
    g->base.level = grpc_level;
    g->base.close = grpc_close;

    /* one call first: a refusal is reported with its status, not as a
     * level of errors; the answer must be a ModelInferResponse */
    grpc_slice answer;
    if (ok && unary(g->channels[0], INFER_METHOD, g->request, g->md, g->nmd, &answer, err,
                    err_len)) {
        Inference__ModelInferResponse *res = inference__model_infer_response__unpack(
            NULL, GRPC_SLICE_LENGTH(answer), GRPC_SLICE_START_PTR(answer));
        grpc_slice_unref(answer);
        if (res)
            inference__model_infer_response__free_unpacked(res, NULL);
        else {
            snprintf(err, err_len, "%s: the answer is not a ModelInferResponse", INFER_METHOD);
            ok = false;
        }
    } else if (ok) {
        hint_unreachable(err, err_len);
        ok = false;
    }
    if (!ok) {
        grpc_close(&g->base);
        return NULL;
    }
    snprintf(g->base.what, sizeof(g->base.what),
             "gRPC ModelInfer to %.300s, inputs in raw_input_contents, %zu-byte request, "
             "%d channel%s, %d thread%s", o->target, len, g->nchannels,
             g->nchannels == 1 ? "" : "s", g->nthreads, g->nthreads == 1 ? "" : "s");
    return &g->base;
}
