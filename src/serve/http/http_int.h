/* http_int.h (private to serve/http/): what the HTTP server's files share:
 * the server, a request and its stage, an answer. http_server.c starts and
 * stops the server, http_request.c reads requests and gives early answers,
 * http_infer.c runs infer requests (held batches included), http_routes.c
 * answers every other route, http_answer.c builds the answers.
 *
 * Threads: a small fixed pool of event loops (http_loop.c: each runs an
 * MHD daemon's epoll, http.threads of them) serves every connection, which
 * an acceptor thread deals out to them. No thread waits for the batcher:
 * an infer request's connection is suspended before the request is
 * queued, the batch's completion (on the batcher's worker thread) resumes
 * it, and the access handler, called again, formats and queues the
 * answer. The infer requests an event loop reads in one pass are held
 * instead (not suspended: MHD calls the handler of a request with no
 * answer again on its next pass) and run as one batch by that loop on its
 * next pass. Idle keep-alive connections cost a socket and a little
 * memory, not a thread. A request is touched only by its connection's
 * event loop, but for infer_done, which resumes its connection. */
#ifndef DL_SERVE_HTTP_INT_H
#define DL_SERVE_HTTP_INT_H

#include "serve/http/http.h"
#include "serve/oip/oip.h"
#include "serve/oip/trace.h"

#include <pthread.h>
#include <stdarg.h>
#include <stdatomic.h>
#include <stdint.h>
#include <sys/socket.h>
#include <sys/types.h>

#include <microhttpd.h>
#include <zlib.h>

/* Idle keep-alive connections are closed after this. */
#define HTTP_IDLE_TIMEOUT_S 60
/* http_stop waits at most this long for requests in flight (but always
 * for those the batcher holds: their connections are suspended). */
#define HTTP_DRAIN_S 30
/* File descriptors kept from connections for everything else: models,
 * logs, Kafka and Redis sockets, the event loops' epoll and eventfd
 * descriptors. */
#define HTTP_FD_RESERVE 128
/* Connections past http.max_connections that are still accepted, to tell
 * them 503 (beyond these new ones wait in the listen backlog). */
#define HTTP_OVER_CONNS 64
/* Room in MHD's own limit above max_conns: the acceptor counts open
 * connections from MHD's notifications, which trail a burst of accepts. */
#define HTTP_ACCEPT_SLACK 32
/* Longer URLs get 414 (MHD itself answers 414 past its 32 KiB buffer). */
#define HTTP_URL_MAX 8192
/* A refused body (413, or any answer decided before the body) is read and
 * discarded, so that a client sending it whole reads the answer, for at
 * most this long from its first dropped byte, and at most
 * max(HTTP_LINGER_BYTES, 4 x http.max_body_bytes) bytes; past either the
 * answer goes at once and the connection closes. */
#define HTTP_LINGER_S 10.0
#define HTTP_LINGER_BYTES ((size_t)512 << 20)
/* Smaller answers go uncompressed whatever Accept-Encoding says: gzip's
 * header and the work would not pay for themselves. */
#define HTTP_GZIP_MIN 1024
/* Retry-After of every 503, in seconds: a queue drains, a version loads,
 * another replica takes over from one that is stopping. */
#define HTTP_RETRY_AFTER "1"

#define CT_JSON "application/json"
#define CT_BINARY "application/octet-stream"   /* JSON then binary tensors */
#define CT_METRICS "text/plain; version=0.0.4"
/* The status page's files: same-origin scripts and styles only (no inline
 * code, nothing fetched elsewhere), revalidated on each load. */
#define PAGE_CSP "default-src 'self'"
#define PAGE_CACHE "no-cache"

/* An event loop (http_loop.c): a thread running one MHD daemon. */
typedef struct http_loop http_loop;

struct http_server {
    const http_deps   *deps;
    http_loop         *loops;                /* `threads` of them */
    atomic_uint        next_loop;            /* the acceptor's round robin */
    int                listen_fd;
    pthread_t          acceptor;             /* accepts for the event loops */
    char              *tls_cert, *tls_key;   /* PEM text, kept while MHD runs */
    atomic_bool        stopping;
    int                threads;              /* event loops */
    unsigned           max_conns;            /* connections the acceptor lets in */
    pthread_mutex_t    mu;
    pthread_cond_t     cv;                   /* inflight or waiting went down */
    int64_t            inflight;             /* requests begun, not completed */
    int64_t            waiting;              /* of which suspended in the batcher */
    atomic_llong       conns;                /* open connections */
    struct MHD_Daemon *metrics_d;            /* http.metrics_port's listener, or NULL */
};

/* An answer ready to queue. */
typedef struct answer {
    int         code;
    char       *body;           /* new, NUL-terminated; NULL: out of memory (500) */
    size_t      len;            /* body bytes; 0: strlen(body) */
    size_t      json_len;       /* > 0: a binary answer, JSON then tensors
                                   (Inference-Header-Content-Length) */
    const char *ctype;
    const char *hname, *hvalue; /* one extra header, or NULL */
    bool        page;           /* body is an embedded file of the status page
                                   (static, not freed unless gzip), sent with
                                   its headers */
    bool        gzip;           /* body is compressed (new even for a page) */
    /* A generate_stream or streamed completions answer: server-sent
     * events that http_generate_read writes as the generation goes, for
     * this request (body NULL). */
    struct request *events;
} answer;

/* Where a request stands, which decides what the access handler does when
 * MHD calls it again. Only its connection's event loop reads or writes it. */
typedef enum req_stage {
    /* Its body is being read, then it is answered on this thread: every
     * route, and an infer request that fails before it reaches the
     * batcher. Announced to the batcher (batcher_arriving) until its
     * completion. */
    REQ_READING,
    /* An answer given before the body (a refusal, in `refusal`), sent once
     * the body has been read and discarded, so that a client that sends
     * its whole body before reading gets it (keep_refusal); back to
     * REQ_READING once sent. Announced, as in REQ_READING. */
    REQ_REFUSED_DRAINING,
    /* The first request of its event loop's held batch, which has not run
     * yet: it holds the list and runs it on its next call, after the
     * pass's other requests. */
    REQ_HOLDS_BATCH,
    /* Another request of a held batch that has not run yet: its calls
     * wait. */
    REQ_HELD,
    /* Its held batch found no idle instance: it queues itself (suspended)
     * on its next call. */
    REQ_HELD_TO_QUEUE,
    /* q went to the batcher: run on this thread, in a held batch, or
     * queued with the connection suspended until infer_done resumes it.
     * Called in this stage, the access handler answers from q. */
    REQ_SUBMITTED,
    /* Completed (its connection closed) while REQ_HELD: still linked in
     * its held batch, whose first request frees it. */
    REQ_GONE,
    /* A generate or completions request handed to its version's generator
     * (gen): suspended until it starts (streams) or ends, then answered,
     * a stream's events written as they come. */
    REQ_GENERATING,
} req_stage;

/* One request, from its first access-handler call to its completion
 * (http_on_completed frees it). */
typedef struct request {
    double    arrival;          /* dl_time_now() */
    req_stage stage;
    oip_route route;
    bool      post;             /* the method is POST (routes that take GET too) */
    char     *body;
    size_t    len, cap;
    size_t    dropped;          /* body bytes discarded past the limit */
    double    drop_since;       /* dl_time_now() at the first byte dropped */
    size_t    declared;         /* Content-Length (within the limit), or 0 */
    /* How reading the body went (in REQ_READING), answered once it is
     * complete: outcomes rather than stages, since the rest of the body is
     * still read (and dropped) after either. */
    bool      too_big, nomem;
    /* A body sent with Content-Encoding gzip or deflate: its decoder (new,
     * NULL for an identity body); body and len are the inflated bytes. */
    z_stream   *z;
    const char *coding;         /* "gzip" or "deflate" */
    size_t      coded;          /* encoded bytes read */
    bool        z_end;          /* the stream ended */
    bool        bad_coding;     /* corrupt: 400 naming the coding */
    char        coding_err[128];
    const char *json_len;       /* Inference-Header-Content-Length, or NULL
                                   (MHD's copy: valid for the request) */
    answer   *refusal;          /* REQ_REFUSED_DRAINING: the answer to send */
    trace_ctx   trace;          /* traceparent / tracestate, echoed on the answer */
    /* An infer request handed to the batcher. From its submission until
     * infer_done resumes the connection, q belongs to the batcher; then
     * the access handler, called again, answers from it. */
    http_server           *h;
    struct MHD_Connection *c;
    http_loop             *loop;    /* c's event loop, woken with the resume */
    dl_err       refused;       /* why batcher_submit refused q (code DL_OK: it ran) */
    served      *sv;            /* a reference, released with the request */
    oip_request  in;            /* the parsed input; q.x points into it */
    infer_req    q;             /* zeroed until it is filled for the batcher */
    /* A held batch: the infer requests an event loop read in one pass,
     * their connections not suspended, run on that loop by the first
     * one's next access-handler call. The first request holds the list. */
    struct request *batch_next;   /* the next request of the batch */
    struct request *batch_tail;   /* (first request) the last one */
    int64_t      batch_samples;   /* (first request) samples in all */
    double       busy_since;      /* (first request) when its batch first found
                                     no idle instance, or 0 */
    /* REQ_GENERATING: the generation (http_generate.c; new, it may
     * outlive rq when the client goes first). */
    struct gen_http *gen;
} request;

/* ---- http_request.c: the request cycle ----------------------------------- */

/* MHD's access handler and completion callback (cls: the server). */
enum MHD_Result http_on_request(void *cls, struct MHD_Connection *c, const char *url,
                                const char *method, const char *version, const char *upload,
                                size_t *upload_size, void **con_cls);
void http_on_completed(void *cls, struct MHD_Connection *c, void **con_cls,
                       enum MHD_RequestTerminationCode toe);
/* The method label of dlserve_http_responses_total: the methods of RFC
 * 9110 and PATCH, else "other" (a client cannot grow the series). */
const char *http_method_name(const char *method);
/* Frees rq and what it holds (its infer request has completed). */
void http_request_free(request *rq);

/* ---- http_answer.c: answers ---------------------------------------------- */

/* JSON as an answer; takes j (NULL: out of memory, 500). */
answer http_json_answer(int code, json_t *j);
/* {"error": message} for a failure of kind st, with the code that
 * oip_http_code gives it. */
answer http_status_answer(dl_status st, const char *fmt, ...)
    __attribute__((format(printf, 2, 3)));
/* {"error": message} with a code of its own: for refusals of the
 * protocol (401, 405) that no dl_status names. */
answer http_error_answer(int code, const char *fmt, ...) __attribute__((format(printf, 2, 3)));

/* ---- http_loop.c: the event loops ------------------------------------------ */

/* Starts h->threads event loops, each an MHD daemon started with flags
 * (MHD_USE_EPOLL, no thread of MHD's own) and a thread of ours that runs
 * it; none are left running on failure. */
dl_status http_loops_start(http_server *h, unsigned flags, dl_err *err);
/* Gives the accepted connection fd (peer a) to the next event loop, which
 * adds it to its daemon; takes fd. Called by the acceptor thread only. */
void http_loops_give(http_server *h, int fd, const struct sockaddr *a, socklen_t alen);
/* Stops the loops' threads, then their daemons (closing every connection,
 * none of which may be suspended). Does nothing when none were started. */
void http_loops_stop(http_server *h);
/* The event loop of the calling thread (NULL off the loops' threads). */
http_loop *http_loop_current(void);
/* Resumes connection c of loop l (MHD_resume_connection) and wakes l so
 * that its next pass takes c up. Any thread; c belongs to l from here on. */
void http_loop_resume(http_loop *l, struct MHD_Connection *c);

/* ---- http_metrics.c: http.metrics_port ------------------------------------ */

/* Starts the listener of http.metrics_port (none when 0) at ss's address
 * (its port replaced); flags: the main server's (MHD_USE_IPv6). */
dl_status http_metrics_start(http_server *h, const struct sockaddr_storage *ss, unsigned flags,
                             dl_err *err);
/* Stops it, if started. */
void http_metrics_stop(http_server *h);

/* ---- http_body.c: content codings ---------------------------------------- */

/* Takes Content-Encoding ce (NULL: none): true for identity, gzip and
 * deflate (rq->z set up for the last two), false for any other coding
 * (415). */
bool http_body_coding(request *rq, const char *ce);
/* Inflates n encoded bytes onto rq's body, holding at most max + 1 bytes:
 * past max, too_big (the body freed, the rest not inflated); a corrupt
 * stream sets bad_coding. */
void http_body_inflate(request *rq, const char *data, size_t n, size_t max);
/* The complete body's coding failed (corrupt or cut short): true with a
 * 400 in *a. */
bool http_body_error(request *rq, answer *a);
/* Frees rq's decoder. */
void http_body_fini(request *rq);
/* Compresses a (2xx) with gzip when it is worth it and the request's
 * Accept-Encoding asks for it; true when the answer depends on
 * Accept-Encoding (to say so with Vary), compressed or not. */
bool http_answer_compress(struct MHD_Connection *c, answer *a);

/* ---- http_routes.c: the routes ---------------------------------------------- */

/* A reference to the route's model and version, or NULL with err saying
 * why: DL_ERR_NOT_FOUND (404) or DL_ERR_UNAVAILABLE (503, nothing served
 * yet). */
served *http_acquire(http_server *h, const oip_route *r, dl_err *err);
/* The answer to a request whose body is complete, in *a; false when it
 * comes later: an infer request waits in the batcher. */
bool http_dispatch(http_server *h, struct MHD_Connection *c, request *rq, answer *a);
/* GET /metrics: the Prometheus exposition (500 out of memory). */
answer http_metrics_answer(http_server *h);

/* ---- http_generate.c: generation (Triton's generate, OpenAI's API) --------- */

/* Parses a generate, generate_stream or completions request and hands it
 * to its version's generator (REQ_GENERATING, the connection suspended):
 * false then; true with the answer in *a when it is refused first. */
bool http_generate_start(http_server *h, struct MHD_Connection *c, request *rq, answer *a);
/* The access handler called again for a REQ_GENERATING request: true
 * with its answer in *a (the JSON answer, an error, or a stream's
 * events), false while it waits (suspended again). */
bool http_generate_resume(http_server *h, struct MHD_Connection *c, request *rq, answer *a);
/* rq's connection has closed: its generation is cancelled if running and
 * freed when it ends. */
void http_generate_closed(request *rq);
/* MHD's content reader of a stream's events (cls: the request). */
ssize_t http_generate_read(void *cls, uint64_t pos, char *buf, size_t max);
/* GET /v1/models: the models that generate, as OpenAI lists them. */
answer http_openai_models(http_server *h);

/* ---- http_infer.c: infer requests and held batches -------------------------- */

/* Parses an infer request and hands it to the batcher. False when it
 * waits, held by its event loop or queued with its connection suspended
 * (http_infer_resume answers it on a later call); true with the answer in
 * *a when it ran on this thread or cannot be run. */
bool http_infer_start(http_server *h, struct MHD_Connection *c, request *rq, answer *a);
/* The access handler called again for an infer request past REQ_READING:
 * true with its answer in *a, false while it waits. */
bool http_infer_resume(http_server *h, struct MHD_Connection *c, request *rq, answer *a);
/* rq's connection has closed: true when rq may be freed now, false when a
 * held batch still links it (its first request frees it). */
bool http_infer_closed(request *rq);

#endif /* DL_SERVE_HTTP_INT_H */
