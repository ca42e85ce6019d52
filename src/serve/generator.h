/* generator.h (private to serve/): generation served (generator.c). A
 * served version whose model.json has a "generate" block gets one
 * generator: a thread owning its own copy of the model and a dl_gen, which
 * runs every request of that version with continuous batching: each pass
 * it starts the requests waiting (while there is room), advances every
 * running sequence one step, hands new text to the streaming ones and
 * completes the finished ones. A request waits at most one step to join.
 *
 * A transport, for each request:
 *   1. pins the version (registry_acquire) and checks that it generates
 *      (sv->gen not NULL);
 *   2. fills a gen_req with gen_req_init and generator_submit's it;
 *   3. takes what on_event tells it (admitted, new text, done) on its own
 *      thread, reading q's results under gen_req_lock;
 *   4. may gen_req_cancel it meanwhile (its client went away): it ends at
 *      the next step;
 *   5. once done, accounts with gen_req_account and frees it
 *      (gen_req_fini), releasing the version after. */
#ifndef DL_SERVE_GENERATOR_H
#define DL_SERVE_GENERATOR_H

#include "nn/dl_gen.h"
#include "serve/dl_serve.h"
#include "serve/stats.h"

#include <jansson.h>
#include <pthread.h>
#include <stdatomic.h>

typedef struct generator generator;
struct served;

typedef struct gen_req {
    /* The submitter's, constant once submitted. */
    struct served *sv;           /* the version (the submitter's reference) */
    const char   *prompt;        /* prompt[0..len), the submitter's until done */
    size_t        len;
    dl_gen_params p;             /* checked by generator_submit */
    int64_t       timeout_us;    /* longest it may wait for room; 0: [generate] timeout_us */
    bool          stream;        /* on_event for each step that adds text */
    /* A socket whose peer closing cancels q, checked before each step
     * (HTTP: a connection suspended while q runs); -1: none. */
    int           watch_fd;
    /* Called from the generator's thread, without q's lock, when q is
     * admitted (started), when its text grew (stream only) and when it is
     * done (the last call: q is the submitter's again from its start).
     * Must not block: it hands q to the transport's own thread. */
    void        (*on_event)(struct gen_req *q, void *ctx);
    void         *ctx;
    /* Set by the generator under the lock (gen_req_lock), read by the
     * submitter under it. */
    pthread_mutex_t mu;
    char         *text;          /* the text so far, text_len bytes (new; NUL after) */
    size_t        text_len, text_cap;
    size_t       *steps;         /* stream: text_len after each step that added text */
    size_t        nsteps, steps_cap;
    bool          started;       /* admitted: its sequence runs */
    bool          done;
    dl_gen_finish finish;        /* DL_GEN_LENGTH or DL_GEN_STOP once done and ok */
    /* Why it failed once done: DL_OK, DL_ERR_INVALID (its prompt or
     * parameters: 400), DL_ERR_TIMEOUT (no room before its deadline: 503),
     * DL_ERR_UNAVAILABLE (cancelled, or the generator stopped),
     * DL_ERR_BACKEND or DL_ERR_NOMEM (a step failed) */
    dl_err        err;
    int64_t       prompt_tokens, tokens;
    /* dl_time_now(): submitted, admitted, its first token, done */
    double        t_arrival, t_start, t_first, t_end;
    atomic_bool   cancel;
    /* The generator's. */
    double        deadline;
    dl_gen_seq   *seq;
    struct gen_req *next;
} gen_req;

/* Fills q (every other field zeroed, its lock made): version sv, the
 * prompt (borrowed) and parameters p, the completion on_event(q, ctx). */
void gen_req_init(gen_req *q, struct served *sv, const char *prompt, size_t len,
                  const dl_gen_params *p, bool stream,
                  void (*on_event)(gen_req *q, void *ctx), void *ctx);
/* Frees what q holds (its text, its lock); q itself is the caller's. */
void gen_req_fini(gen_req *q);
void gen_req_lock(gen_req *q);
void gen_req_unlock(gen_req *q);
/* Asks the generator to end q at its next step (any thread). */
void gen_req_cancel(gen_req *q);
/* Records a done request in st: dlserve_generated_tokens_total, time to
 * first token and time per output token of the version's model. */
void gen_req_account(stats *st, const gen_req *q);

/* Starts a generator for version `version` of model `name`: m (taken: the
 * generator's from here, freed with it; also on failure), gc (taken: its
 * contents move into the generator, *gc zeroed). Each step counts in
 * `counts` as a batch of the sequences it advanced (prefills and steps alike,
 * as the batcher counts its batches; NULL: nowhere). */
dl_status generator_new(const char *name, int64_t version, dl_model **m, dl_gen_conf *gc,
                        const dl_generate_conf *conf, stats *counts, generator **out,
                        dl_err *err);
/* Stops the thread and frees the generator, then *conf (taken, *conf
 * NULLed: the configuration its model was built from, which the model
 * reads to its end); no request may be queued or running (every one holds
 * a reference on the version that owns it). Safe from the generator's
 * own thread (a transport's on_event that drops the last reference): it
 * then ends once that call returns. NULL does nothing (and takes nothing). */
void generator_free(generator *g, dl_model_conf **conf);

/* Queues q (gen_req_init'ed, q->sv's generator g). DL_ERR_INVALID for bad
 * parameters (dl_gen_params_check's message), DL_ERR_UNAVAILABLE once
 * stopping; on DL_OK q completes through on_event. */
dl_status generator_submit(generator *g, gen_req *q, dl_err *err);

/* Sequences running now, requests waiting for room, and requests
 * cancelled so far (their clients gone) (any thread). */
int64_t generator_running(const generator *g);
int64_t generator_waiting(const generator *g);
int64_t generator_cancelled(const generator *g);
/* The generate block the version has (borrowed, constant). */
const dl_gen_conf *generator_conf(const generator *g);
/* Sets the decoding parameter `key` of p from JSON value v: max_tokens,
 * top_k, seed, beam_width (integers), temperature, top_p, length_penalty
 * (numbers), stop (a string or a list of at most DL_GEN_MAX_STOP); and,
 * when timeout_us is not NULL, "timeout" (microseconds >= 0: the longest
 * the request waits for room; 0 the default) into it. For the generate
 * endpoints, OpenAI's API and Kafka records alike. DL_ERR_INVALID naming
 * the key for a value of the wrong kind, DL_ERR_NOT_FOUND for a key that
 * is none of these. */
dl_status gen_param_set(dl_gen_params *p, int64_t *timeout_us, const char *key, json_t *v,
                        dl_err *err);

/* Generated text[0..len) as a JSON string (new reference; NULL out of
 * memory): bytes that are not UTF-8 become U+FFFD. */
json_t *gen_text_json(const char *text, size_t len);

/* The [generate] settings it runs with (borrowed, constant). */
const dl_generate_conf *generator_settings(const generator *g);
/* Whether steps run on the key-value cache (dl_gen_cached). */
bool generator_cached(const generator *g);

#endif /* DL_SERVE_GENERATOR_H */
