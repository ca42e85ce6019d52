/* grpc_int.h (private to serve/grpc/): what the gRPC server's files share.
 *
 *   grpc_server.c   the server: libgrpc's C core, its threads, calls
 *                   requested and answered, the token, status and metrics
 *   grpc_calls.c    every method: health, metadata, the repository,
 *                   statistics, ModelInfer and ModelStreamInfer
 *   grpc_codec.c    the messages read and written (no libgrpc)
 *   pb_json.c       messages from the JSON the HTTP answers are built from
 *
 * Threads: `threads` completion-queue threads take every event (a call
 * arrives, a message is read or written, a call ends) and run what it
 * leads to: a method answered at once, or an infer request run at once
 * (batcher_run_now) or submitted. One answer thread takes the requests
 * whose batch a batcher worker has run (on_done only queues them) and
 * answers them. Nothing blocks a thread for a call: no thread per call. */
#ifndef DL_SERVE_GRPC_INT_H
#define DL_SERVE_GRPC_INT_H

#include "serve/generator.h"
#include "serve/grpc/grpc_transport.h"
#include "serve/oip/oip.h"
#include "serve/oip/trace.h"

#include "grpc_service.pb-c.h"

#include <grpc/grpc.h>
#include <pthread.h>
#include <stdatomic.h>

/* A completion-queue event's tag: what runs when the operation ends. */
typedef struct gtag {
    void (*fn)(struct gtag *t, bool ok);
} gtag;

typedef struct gcall gcall;

/* A method dlserve answers. */
typedef struct gmethod {
    const char *path;      /* "/inference.GRPCInferenceService/ModelInfer" */
    const char *name;      /* "ModelInfer": the metrics' label */
    bool        stream;    /* requests read by the handler itself (no payload) */
    bool        open;      /* answered without the token (health) */
    /* Answers c (its request in c->payload, or none for a stream), now
     * or later, through gsrv_answer (a stream: its own operations). */
    void      (*handle)(gcall *c);
} gmethod;

/* The methods, in the order of their metrics (grpc_calls.c). */
extern const gmethod gsrv_methods[];
extern const int     gsrv_nmethods;

/* gRPC's status codes 0..16, counted per method. */
#define GRPC_NCODES 17

struct grpc_srv {
    const grpc_deps       *deps;
    grpc_server           *server;
    grpc_completion_queue *cq;
    void                 **handles;    /* registered methods, as gsrv_methods */
    int                    nthreads;
    pthread_t             *threads;
    pthread_t              answerer;
    bool                   answerer_started;
    int                    port;
    bool                   tls;
    char                  *bearer;     /* "Bearer <token>", or NULL: no token */
    /* requests whose batch has run, for the answer thread */
    pthread_mutex_t        mu;
    pthread_cond_t         cv;
    struct ireq           *done_head, *done_tail;
    bool                   answerer_quit;
    /* shutdown */
    gtag                   shutdown_tag;
    bool                   shut;       /* the shutdown tag has completed (under mu) */
    atomic_int             stopping;
    /* metrics */
    atomic_long            calls_in_flight;
    atomic_long            streams_open;
    atomic_ullong         *counts;     /* [method][code] */
};

/* A call, from its arrival to its end. A unary method's handler answers
 * it once with gsrv_answer; a stream's owns it (grpc_calls.c). */
struct gcall {
    gtag               t_new;      /* the call arrived (requested) */
    gtag               t_done;     /* its last batch ended */
    grpc_srv          *s;
    int                mi;         /* gsrv_methods index; -1: unknown method */
    grpc_call         *call;
    grpc_call_details  details;    /* the unknown method's name */
    gpr_timespec       deadline;
    grpc_metadata_array md;
    grpc_byte_buffer  *payload;    /* the request of a unary method */
    double             t_received;
    int                cancelled;  /* RECV_CLOSE_ON_SERVER */
    grpc_byte_buffer  *send;       /* the answer being sent */
    grpc_slice         details_slice;
    grpc_status_code   code;
};

/* An infer request (ModelInfer, one of ModelStreamInfer), from its bytes
 * to its packed answer (or answers: a generation streams its text). */
typedef struct ireq {
    grpc_srv      *s;
    gcall         *c;          /* its call */
    bool           stream;
    void          *owner;      /* a stream's: its gstream */
    /* Sends an answer of r: code DL_OK with msg (packed; taken), or a
     * failure (code, err; in a stream, msg is the error's message). last:
     * r's final answer, after which r belongs to the call (freed once
     * sent). Called on the answer thread or the request's own. */
    void         (*emit)(struct ireq *r, dl_status code, const dl_err *err, dl_sbuf *msg,
                         bool last);
    Inference__ModelInferRequest *msg;
    served        *sv;
    oip_request    in;
    infer_req      q;
    trace_ctx      trace;
    double         t_received;
    dl_err         refused;
    dl_sbuf        out;        /* the packed answer */
    struct ireq   *next;       /* the answer thread's list */
    struct ireq   *held_next;  /* its thread's held batch (grpc_calls.c) */
    bool           queued;     /* on that list (under s->mu) */
    /* A generation (text_input to a generating version; grpc_generate.c):
     * its request, and the text answered so far. */
    gen_req       *g;
    size_t         sent;
    bool           gen_final;  /* its last event came (under s->mu) */
    struct ireq   *gen_next;   /* a stream's running generations */
} ireq;

/* ---- grpc_server.c ---------------------------------------------------------- */

/* gRPC's status for a dl_status: the one table. */
grpc_status_code gsrv_code(dl_status st);

/* Answers a unary call and ends it: msg (packed; NULL for an error, with
 * code and details), the call freed once sent. */
void gsrv_answer(gcall *c, grpc_status_code code, const char *details, dl_sbuf *msg);

/* The request's bytes: a new contiguous copy of a byte buffer (free);
 * NULL (and *len 0) for none or out of memory. */
uint8_t *gsrv_read(grpc_byte_buffer *bb, size_t *len);

/* A byte buffer that takes over b's bytes (b emptied). */
grpc_byte_buffer *gsrv_buffer(dl_sbuf *b);

/* Microseconds left until the call's deadline; INT64_MAX when none. */
int64_t gsrv_time_left_us(const gcall *c);

/* The value of metadata key (lowercase) as a NUL-terminated copy in buf
 * (cut to size); false when absent. */
bool gsrv_metadata(const gcall *c, const char *key, char *buf, size_t size);

/* Counts a call's outcome and frees it (its call unreferenced). */
void gsrv_call_end(gcall *c);

/* ---- grpc_calls.c ----------------------------------------------------------- */

/* Reads, checks and runs (or submits) the request in data[0..len) for
 * r->c; r->emit sends its answer, on this thread or the answer thread. */
void gsrv_infer_start(ireq *r, const uint8_t *data, size_t len);
/* Writes the answer of r, whose batch has run or whose generation has
 * moved on (the answer thread), and emits it. */
void gsrv_infer_finish(ireq *r);
/* Hands r to the answer thread (any thread; once while it is queued). */
void gsrv_queue_answer(ireq *r);
/* Whether the calling completion-queue thread holds requests to run, and
 * runs them (or submits them) once its queue has no event ready. */
bool gsrv_holding(void);
void gsrv_pass_end(void);

/* ---- grpc_generate.c ---------------------------------------------------------- */

/* Whether r asks its version for generated text: a generating version
 * and an input named "text_input". */
bool gsrv_gen_wanted(const ireq *r);
/* Starts r's generation (r->sv pinned): parameters from the request's,
 * Triton's names; refused through r->emit. */
void gsrv_gen_start(ireq *r);
/* Emits what r's generation has added since the last call (a stream:
 * each piece as it comes; unary: the whole text once done) (the answer
 * thread). */
void gsrv_gen_progress(ireq *r);
/* Asks r's generation to stop (its client went away; any thread). */
void gsrv_gen_cancel(ireq *r);
/* grpc_calls.c: a stream's generation r starts (before it is submitted). */
void gsrv_stream_gen_started(ireq *r);
/* Frees what r holds (not r itself). */
void gsrv_ireq_fini(ireq *r);

#endif /* DL_SERVE_GRPC_INT_H */
