/* dl_gen.h: generation. A model whose model.json has a "generate" block
 * (an INT64 [-1] ids input, an output of next-token logits at every
 * position, [T, V]) generates text token by token: a dl_gen holds a
 * model's running sequences and their decoding state (a key-value cache
 * per attention layer, the state of a recurrent decoder) and advances
 * them all one step a call, sequences joining and leaving between steps
 * (continuous batching). Greedy, temperature, top-k and top-p sampling
 * with a seed, stop strings, max_tokens and beam search.
 *
 * One thread drives a dl_gen (dl_gen_start, dl_gen_step, dl_gen_end);
 * the model it was made with is its own meanwhile. */
#ifndef DL_GEN_H
#define DL_GEN_H

#include "nn/dl_nn.h"

#ifdef __cplusplus
extern "C" {
#endif

#define DL_GEN_MAX_STOP 4       /* stop strings a request */
#define DL_GEN_STOP_MAX 64      /* bytes of one, NUL included */

/* A model.json's "generate" block: {"input": "ids", "output": "logits",
 * "max_context": 256, "eos": "\n", "tokenizer": {"type": "bytes"}}, an
 * encoder-decoder adding "source": "<its source input>". The decoder
 * starts from the eos token when it has no prompt (an encoder-decoder's
 * decoder always). */
typedef struct dl_gen_conf {
    char              input[DL_NAME_MAX];
    char              output[DL_NAME_MAX];
    char              source[DL_NAME_MAX];     /* "" for a decoder-only model */
    int64_t           max_context;             /* positions of the ids input */
    char              eos[DL_GEN_STOP_MAX];    /* its text ("" none) */
    dl_tokenizer_conf tok;                     /* default bytes; vocab owned */
} dl_gen_conf;

/* Reads the "generate" block of model.json text (json, what naming it in
 * errors) for the model conf describes: *has false and DL_OK when there is
 * none. Checks the names against the model: input an INT64 [-1] input,
 * output a [T, V] output read from layers that keep its positions, source
 * a sequence input, max_context at most the input's max_length.
 * dl_gen_conf_release frees what it owns. */
dl_status dl_gen_conf_read(const char *json, const char *what, const dl_model_conf *conf,
                           dl_gen_conf *gc, bool *has, dl_err *err);
void dl_gen_conf_release(dl_gen_conf *gc);

/* A request's decoding parameters (dl_gen_params_init: the defaults
 * noted). */
typedef struct dl_gen_params {
    int64_t  max_tokens;      /* 16; tokens generated at most */
    float    temperature;     /* 0: greedy (1.0 when unset in OpenAI's API: the caller's) */
    int64_t  top_k;           /* 0: all tokens */
    float    top_p;           /* 1: all tokens */
    uint64_t seed;            /* sampling's stream: the same seed, the same text */
    int      nstop;
    char     stop[DL_GEN_MAX_STOP][DL_GEN_STOP_MAX];  /* generation ends before one */
    int      beam_width;      /* 1: no beam search (see below) */
    float    length_penalty;  /* 1: beams ranked by log-probability / length^it */
    bool     beam_search;     /* beam search at beam_width 1 too (tests: it is greedy) */
} dl_gen_params;

void dl_gen_params_init(dl_gen_params *p);

/* Greedy decoding takes the highest logit (the lowest id among equals).
 * Beam search of width W keeps W beams, starting from one: each step
 * every beam's score (its tokens' summed log-softmax) plus each token's
 * log-probability is a candidate; of the best 2W (higher score first,
 * then the lower beam, then the lower id) those among the first W that
 * end in eos finish, ranked by score / (tokens generated, eos
 * included)^length_penalty, and the first W that do not are the next
 * beams. It stops once W have finished,
 * or at max_tokens (or a full context), when the live beams finish too
 * ("length"); the best finished one answers (the first among equals).
 * Width 1 is greedy decoding. Stop strings cut the answer's text. */

/* Checks p: max_tokens >= 1, temperature >= 0, top_k >= 0, top_p in
 * (0, 1], beam_width 1 to 16 (beam search is greedy: no temperature),
 * stop strings not empty. DL_ERR_INVALID names the parameter. */
dl_status dl_gen_params_check(const dl_gen_params *p, dl_err *err);

typedef enum dl_gen_finish {
    DL_GEN_RUNNING,           /* not finished */
    DL_GEN_LENGTH,            /* max_tokens, or the context is full */
    DL_GEN_STOP,              /* eos or a stop string */
} dl_gen_finish;

/* "length" or "stop" as the generate and completions APIs write it
 * (NULL while running). */
const char *dl_gen_finish_name(dl_gen_finish f);

typedef struct dl_gen dl_gen;
typedef struct dl_gen_seq dl_gen_seq;

/* A decoder for model m (built from conf, which has the "generate" block
 * gc) running at most max_seqs sequences at once (a beam of width w counts
 * w), their caches at most cache_bytes together (0: no bound beyond
 * max_seqs). tok: gc's tokenizer, made by the caller, read-only here.
 * m is this dl_gen's until dl_gen_free. */
dl_status dl_gen_new(dl_model *m, const dl_gen_conf *gc, const dl_tokenizer *tok,
                     int64_t max_seqs, size_t cache_bytes, dl_gen **out, dl_err *err);
void dl_gen_free(dl_gen *g);

/* Whether steps run on the key-value cache (one position a sequence a
 * step) or recompute each sequence's whole prefix (a model with layers
 * that cannot run a position at a time). */
bool dl_gen_cached(const dl_gen *g);

/* Makes every step recompute the whole prefix even where the cache could
 * run (tests compare the two); before any dl_gen_start. */
void dl_gen_set_recompute(dl_gen *g, bool on);

/* Bytes of decoding state one sequence takes (its cache at max_context). */
size_t dl_gen_seq_bytes(const dl_gen *g);

/* Starts a sequence for prompt[0..len) (an encoder-decoder's source
 * text, tokenized by the source input's tokenizer when it is BYTES, else
 * by the generate block's). DL_ERR_INVALID: parameters, or a prompt longer than
 * the context (or the source's max_length) allows; DL_ERR_BUSY: no room
 * (max_seqs or cache_bytes) until a sequence ends. The sequence runs from
 * the next dl_gen_step; it is the caller's until dl_gen_end. */
dl_status dl_gen_start(dl_gen *g, const char *prompt, size_t len, const dl_gen_params *p,
                       dl_gen_seq **out, dl_err *err);

/* One step of every running sequence: a started one's prompt (prefill),
 * one token each for the rest. Finished sequences stay until
 * dl_gen_end. A failure (the backend's) finishes no sequence: the caller
 * ends them with its error. */
dl_status dl_gen_step(dl_gen *g, dl_err *err);

/* Running sequences (not yet finished), and their slots (beams count
 * their width). */
int64_t dl_gen_running(const dl_gen *g);
int64_t dl_gen_slots_used(const dl_gen *g);

/* Ends a sequence, finished or not (a client gone), freeing its slots. */
void dl_gen_end(dl_gen *g, dl_gen_seq *s);

/* A sequence's text so far (*len bytes; not NUL-terminated, valid until
 * the next dl_gen_step or dl_gen_end): what it will answer, so text that
 * may yet begin a stop string is held back until it cannot, and a beam
 * search's text appears whole when it finishes. */
const char *dl_gen_text(const dl_gen_seq *s, size_t *len);
dl_gen_finish dl_gen_finished(const dl_gen_seq *s);
int64_t dl_gen_prompt_tokens(const dl_gen_seq *s);
int64_t dl_gen_tokens(const dl_gen_seq *s);       /* generated so far */

/* The ids a sequence generated (n of them), for tests and tools. */
const int32_t *dl_gen_ids(const dl_gen_seq *s, int64_t *n);

/* The text of ids (a tokenizer's inverse: bytes as they are, words with a
 * space between; pad and unknown ids give nothing, "<unk>") appended to
 * buf (cap bytes), returning the bytes it needs. */
size_t dl_detokenize(const dl_tokenizer *t, const int32_t *ids, int64_t n, char *buf,
                     size_t cap);

#ifdef __cplusplus
}
#endif
#endif /* DL_GEN_H */
