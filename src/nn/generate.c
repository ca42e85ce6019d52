/* generate.c: decoding (dl_gen.h). A dl_gen keeps its running sequences
 * in consecutive slots of the model's batch (a beam search's beams side
 * by side), so a pass over slots [a, b) is one batch whose sample j is
 * slot a + j, and a cache is one buffer a layer with a stride a slot.
 *
 * With the cache, a step is up to two passes: one position for every
 * sequence already started (a "step": past > 0, the source's layers not
 * run), then the whole prompt of those started since the last step (a
 * "prefill"). Sequences started since come after every other (they are
 * appended), so each pass is a run of slots. A model with a layer that
 * cannot run a position at a time (a bidirectional or recurrent layer, a
 * convolution over time, any layer the ONNX importer made of attention's
 * parts) instead recomputes every sequence's whole prefix each step.
 *
 * Tokens are chosen on the host from each sequence's last logits. */
#define _POSIX_C_SOURCE 200809L
#include "nn/dl_gen.h"
#include "nn/model.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

#define BEAM_MAX 16

typedef enum pass_kind { PASS_STEP, PASS_PREFILL, PASS_FULL } pass_kind;

/* What a layer caches a slot: a self-attention's keys and values at each
 * position so far, a cross-attention's of its source, a recurrent stack's
 * states. */
typedef enum cache_kind { CACHE_NONE, CACHE_SELF, CACHE_CROSS, CACHE_STATE } cache_kind;

/* A token sampling may draw: its logit (over the temperature). */
typedef struct cand {
    float   logit;
    int32_t id;
} cand;

struct dl_gen_seq {
    dl_gen_params p;
    int           width;          /* beams (1: no beam search) */
    int           nbeams;         /* live beams: 1 until the first step spreads them */
    int64_t       slot;           /* its first slot */
    int32_t      *ids;            /* width rows of max_context: each beam's decoder ids */
    int64_t       nprompt, n;     /* ids of the prompt, ids a beam has now */
    double        score[BEAM_MAX];
    float        *src;            /* encoder-decoder: the source sample, packed */
    int32_t       src_len;
    dl_rng        rng;
    bool          started;
    dl_gen_finish finish;
    /* beam search: the best finished beam so far */
    int64_t       nfinished;
    double        best;
    int32_t      *best_ids;       /* max_context ids */
    int64_t       best_n;
    bool          best_eos;
    /* the answer: ids generated (eos included), their text */
    int32_t      *out;
    int64_t       nout;
    char         *text;
    size_t        len, cap, shown;
};

struct dl_gen {
    dl_model            *m;
    dl_gen_conf          gc;        /* vocab not kept: the tokenizer has it */
    const dl_tokenizer  *tok;
    dl_tokenizer        *src_tok;   /* a BYTES source's own (owned), or NULL */
    int                  in, src, out;    /* model input and output indexes (src -1) */
    int32_t              eos;             /* -1: none */
    int64_t              vocab, ctx;
    int64_t              max_slots, used;
    bool                 cached, recompute;
    bool                *skip;            /* per layer: reads the source only (layer_dec.source) */
    float              **cache;           /* per layer: slot 0's cache (NULL: none) */
    char                *kind;            /* per layer: a cache_kind */
    size_t               seq_bytes;
    dl_gen_seq         **seqs;            /* by slot */
    int64_t              nseqs;
    float               *host_in[2], *dev_in[2];  /* packed rows: ids, source */
    int64_t              width_in[2];
    int32_t             *past, *kv_len, *src_len, *row_len;   /* per slot */
    float               *logits;          /* host: a row a slot */
    cand                *cand;            /* sampling's: vocab of them */
    float               *move;            /* a beam's reorder: BEAM_MAX slots of a cache */
    int64_t              move_stride;
};

/* ---- parameters ------------------------------------------------------------------- */

void dl_gen_params_init(dl_gen_params *p)
{
    *p = (dl_gen_params){ .max_tokens = 16, .temperature = 0.0f, .top_k = 0, .top_p = 1.0f,
                          .seed = 0, .beam_width = 1, .length_penalty = 1.0f };
}

dl_status dl_gen_params_check(const dl_gen_params *p, dl_err *err)
{
    if (p->max_tokens < 1)
        return dl_err_set(err, DL_ERR_INVALID, "max_tokens must be at least 1");
    if (!(p->temperature >= 0.0f) || !isfinite(p->temperature))
        return dl_err_set(err, DL_ERR_INVALID, "temperature must be a number >= 0");
    if (p->top_k < 0)
        return dl_err_set(err, DL_ERR_INVALID, "top_k must be >= 0 (0: every token)");
    if (!(p->top_p > 0.0f && p->top_p <= 1.0f))
        return dl_err_set(err, DL_ERR_INVALID, "top_p must be in (0, 1]");
    if (p->beam_width < 1 || p->beam_width > BEAM_MAX)
        return dl_err_set(err, DL_ERR_INVALID, "beam_width must be from 1 to %d", BEAM_MAX);
    if ((p->beam_width > 1 || p->beam_search) && p->temperature > 0.0f)
        return dl_err_set(err, DL_ERR_INVALID, "beam search is greedy: temperature must be 0 "
                          "with beam_width %d", p->beam_width);
    if (!isfinite(p->length_penalty))
        return dl_err_set(err, DL_ERR_INVALID, "length_penalty must be a number");
    if (p->nstop < 0 || p->nstop > DL_GEN_MAX_STOP)
        return dl_err_set(err, DL_ERR_INVALID, "at most %d stop strings", DL_GEN_MAX_STOP);
    for (int i = 0; i < p->nstop; i++)
        if (!p->stop[i][0])
            return dl_err_set(err, DL_ERR_INVALID, "stop strings must not be empty");
    return DL_OK;
}

const char *dl_gen_finish_name(dl_gen_finish f)
{
    return f == DL_GEN_LENGTH ? "length" : f == DL_GEN_STOP ? "stop" : NULL;
}

/* ---- the model's layers: which can run a position at a time -------------------- */

/* Layers that compute each position from that position alone. */
static bool per_position(dl_layer_type t)
{
    switch (t) {
    case DL_LAYER_DENSE: case DL_LAYER_EMBEDDING: case DL_LAYER_RELU: case DL_LAYER_TANH:
    case DL_LAYER_SIGMOID: case DL_LAYER_ADD: case DL_LAYER_SUB: case DL_LAYER_MUL:
    case DL_LAYER_DIV: case DL_LAYER_IDENTITY: case DL_LAYER_DROPOUT: case DL_LAYER_LAYERNORM:
    case DL_LAYER_GELU: case DL_LAYER_SILU: case DL_LAYER_POW: case DL_LAYER_SQRT:
    case DL_LAYER_ERF: case DL_LAYER_LEAKY_RELU: case DL_LAYER_CLIP:
    case DL_LAYER_HARDSIGMOID: case DL_LAYER_HARDSWISH: case DL_LAYER_CONSTANT:
        return true;
    default:
        return false;
    }
}

/* Marks the layers reading the ids (on_ids) and the source (on_src),
 * through any path; sets g->skip (the source's alone) and whether every
 * layer on the ids' path can run a position at a time (g->cached). */
static dl_status plan_layers(dl_gen *g, dl_err *err)
{
    dl_model *m = g->m;
    int nt = m->ninputs + m->nlayers;
    bool *on_ids = calloc((size_t)nt, 1), *on_src = calloc((size_t)nt, 1);
    g->skip = calloc((size_t)m->nlayers, 1);
    g->kind = calloc((size_t)m->nlayers, 1);
    g->cache = calloc((size_t)m->nlayers, sizeof(*g->cache));
    if (!on_ids || !on_src || !g->skip || !g->kind || !g->cache) {
        free(on_ids), free(on_src);
        return dl_err_set(err, DL_ERR_NOMEM, "generation's layer table");
    }
    on_ids[g->in] = true;
    if (g->src >= 0)
        on_src[g->src] = true;
    g->cached = true;
    for (int i = 0; i < m->nlayers; i++) {
        const dl_layer_conf *c = &m->layers[i].conf[0];
        int t = m->ninputs + i;
        for (int k = 0; k < c->nsrc; k++) {
            on_ids[t] |= on_ids[model_tensor_of(m, c->src[k])];
            on_src[t] |= on_src[model_tensor_of(m, c->src[k])];
        }
        g->skip[i] = on_src[t] && !on_ids[t];
        if (!on_ids[t])
            continue;
        int q = model_tensor_of(m, c->src[0]), kv = model_tensor_of(m, c->src[c->nsrc - 1]);
        bool ok = true;
        if (c->type == DL_LAYER_ATTENTION && c->nsrc == 1)
            ok = c->causal, g->kind[i] = CACHE_SELF;
        else if (c->type == DL_LAYER_ATTENTION)
            ok = !c->causal && on_ids[q] && !on_ids[kv] && on_src[kv], g->kind[i] = CACHE_CROSS;
        else if (c->type == DL_LAYER_LSTM || c->type == DL_LAYER_GRU)
            ok = !c->bidirectional && c->ret_seq, g->kind[i] = CACHE_STATE;
        else
            ok = per_position(c->type) || c->type == DL_LAYER_POS_EMBEDDING;
        for (int k = 0; k < c->nsrc && c->type != DL_LAYER_ATTENTION; k++) {
            int u = model_tensor_of(m, c->src[k]);     /* no source's positions */
            ok &= on_ids[u] || !on_src[u];
        }
        g->cached &= ok;
    }
    free(on_ids), free(on_src);
    return DL_OK;
}

/* Floats of layer i's cache a slot: a self-attention's keys and values
 * at each of max_context positions, a cross-attention's at each of the
 * source's, a recurrent stack's h (and c) of each layer. */
static int64_t cache_stride(const dl_gen *g, int i)
{
    const dl_layer_conf *c = g->m->layers[i].conf;
    int64_t e = g->m->layers[i].ins_shape[0][1];
    if (!g->cached)
        return 0;
    switch ((cache_kind)g->kind[i]) {
    case CACHE_SELF:  return 2 * e * g->ctx;
    case CACHE_CROSS: return 2 * e * g->m->conf->inputs[g->src].max_length;
    case CACHE_STATE: return c->num_layers * c->hidden * (c->type == DL_LAYER_LSTM ? 2 : 1);
    default:          return 0;
    }
}

/* Floats of layer i's cache that a sequence of n positions (source of
 * src_len) holds in its slot. */
static int64_t cache_used(const dl_gen *g, int i, int64_t n, int32_t src_len)
{
    int64_t st = g->m->layers[i].cache_stride;
    switch ((cache_kind)g->kind[i]) {
    case CACHE_SELF:  return st / g->ctx * n;
    case CACHE_CROSS: return st / g->m->conf->inputs[g->src].max_length * src_len;
    default:          return st;
    }
}

static dl_status alloc_caches(dl_gen *g, dl_err *err)
{
    dl_backend *be = g->m->be;
    for (int i = 0; i < g->m->nlayers; i++) {
        int64_t st = cache_stride(g, i);
        if (st == 0)
            continue;
        dl_status s = be->ops->alloc(be, (size_t)(g->max_slots * st) * sizeof(float),
                                     (void **)&g->cache[i], err);
        if (s != DL_OK)
            return s;
        g->m->layers[i].cache_stride = st;
        if (st > g->move_stride)
            g->move_stride = st;
    }
    return g->move_stride ? be->ops->alloc(be, (size_t)(BEAM_MAX * g->move_stride) *
                                                   sizeof(float), (void **)&g->move, err)
                          : DL_OK;
}

static size_t seq_bytes_of(const dl_gen *g)
{
    size_t b = 0;
    for (int i = 0; i < g->m->nlayers; i++)
        b += (size_t)cache_stride(g, i) * sizeof(float);
    return b;
}

/* ---- making one ------------------------------------------------------------------ */

static int index_of(const dl_model *m, const char *name, bool input)
{
    return input ? dl_model_input_index(m, name) : dl_model_output_index(m, name);
}

/* The eos string as one id of the tokenizer. */
static dl_status eos_id(dl_gen *g, dl_err *err)
{
    g->eos = -1;
    if (!g->gc.eos[0])
        return g->src >= 0 ? dl_err_set(err, DL_ERR_INVALID, "generate: an encoder-decoder "
                                        "needs 'eos' (its decoder starts from it)")
                           : DL_OK;
    float id;
    int64_t n;
    dl_tokenize(g->tok, g->gc.eos, strlen(g->gc.eos), &id, 1, &n);
    if (n != 1 || id == DL_TOK_UNK)
        return dl_err_set(err, DL_ERR_INVALID, "generate: eos \"%s\" is not one token of the "
                          "tokenizer", g->gc.eos);
    g->eos = (int32_t)id;
    return DL_OK;
}

static dl_status alloc_staging(dl_gen *g, dl_err *err)
{
    dl_backend *be = g->m->be;
    int idx[2] = { g->in, g->src };
    int64_t ns = g->max_slots;
    for (int k = 0; k < 2; k++) {
        if (idx[k] < 0)
            continue;
        g->width_in[k] = dl_model_input_dim(g->m, idx[k]);
        if (!(g->host_in[k] = calloc((size_t)(ns * g->width_in[k]), sizeof(float))))
            return dl_err_set(err, DL_ERR_NOMEM, "generation's inputs");
        if (be->device >= 0) {
            dl_status st = be->ops->alloc(be, (size_t)(ns * g->width_in[k]) * sizeof(float),
                                          (void **)&g->dev_in[k], err);
            if (st != DL_OK)
                return st;
        }
    }
    if (!(g->past = calloc((size_t)ns, sizeof(int32_t))) ||
        !(g->kv_len = calloc((size_t)ns, sizeof(int32_t))) ||
        !(g->src_len = calloc((size_t)ns, sizeof(int32_t))) ||
        !(g->row_len = calloc((size_t)ns, sizeof(int32_t))) ||
        !(g->logits = malloc((size_t)(ns * g->vocab) * sizeof(float))) ||
        !(g->cand = malloc((size_t)g->vocab * sizeof(*g->cand))) ||
        !(g->seqs = calloc((size_t)ns, sizeof(*g->seqs))))
        return dl_err_set(err, DL_ERR_NOMEM, "generation's buffers");
    return DL_OK;
}

dl_status dl_gen_new(dl_model *m, const dl_gen_conf *gc, const dl_tokenizer *tok,
                     int64_t max_seqs, size_t cache_bytes, dl_gen **out, dl_err *err)
{
    *out = NULL;
    if (max_seqs < 1)
        return dl_err_set(err, DL_ERR_INVALID, "generation needs room for a sequence");
    dl_gen *g = calloc(1, sizeof(*g));
    if (!g)
        return dl_err_set(err, DL_ERR_NOMEM, "generation");
    g->m = m;
    g->gc = *gc;
    g->gc.tok.vocab = NULL;
    g->tok = tok;
    g->in = index_of(m, gc->input, true);
    g->src = gc->source[0] ? index_of(m, gc->source, true) : -1;
    g->out = index_of(m, gc->output, false);
    g->ctx = gc->max_context;
    dl_status st = DL_OK;
    if (g->in < 0 || g->out < 0 || (gc->source[0] && g->src < 0))
        st = dl_err_set(err, DL_ERR_INVALID, "generate: the model lacks its input or output");
    if (st == DL_OK) {
        g->vocab = dl_model_output_dim(m, g->out) / m->conf->inputs[g->in].max_length;
        const dl_input_conf *sc = g->src >= 0 ? &m->conf->inputs[g->src] : NULL;
        if (sc && sc->dtype == DL_IN_BYTES)
            st = dl_tokenizer_new(&sc->tok, &g->src_tok, err);
    }
    if (st == DL_OK)
        st = eos_id(g, err);
    if (st == DL_OK)
        st = plan_layers(g, err);
    if (st == DL_OK) {
        g->seq_bytes = seq_bytes_of(g);
        g->max_slots = max_seqs;
        if (g->cached && cache_bytes > 0 && g->seq_bytes > 0 &&
            (int64_t)(cache_bytes / g->seq_bytes) < max_seqs)
            g->max_slots = (int64_t)(cache_bytes / g->seq_bytes);
        if (g->max_slots < 1)
            st = dl_err_set(err, DL_ERR_INVALID, "generation: a cache of %zu bytes holds no "
                            "sequence (one takes %zu)", cache_bytes, g->seq_bytes);
    }
    if (st == DL_OK)
        st = alloc_staging(g, err);
    if (st == DL_OK && g->cached)
        st = alloc_caches(g, err);
    if (st != DL_OK) {
        dl_gen_free(g);
        return st;
    }
    *out = g;
    return DL_OK;
}

static void seq_free(dl_gen_seq *s)
{
    if (!s)
        return;
    free(s->ids);
    free(s->src);
    free(s->best_ids);
    free(s->out);
    free(s->text);
    free(s);
}

void dl_gen_free(dl_gen *g)
{
    if (!g)
        return;
    dl_backend *be = g->m->be;
    for (int64_t i = 0; i < g->nseqs; i++)
        seq_free(g->seqs[i]);
    for (int i = 0; g->cache && i < g->m->nlayers; i++) {
        if (g->cache[i])
            be->ops->release(be, g->cache[i]);
        g->m->layers[i].cache = NULL;
        g->m->layers[i].cache_stride = 0;
    }
    for (int k = 0; k < 2; k++) {
        free(g->host_in[k]);
        if (g->dev_in[k])
            be->ops->release(be, g->dev_in[k]);
    }
    if (g->move)
        be->ops->release(be, g->move);
    dl_tokenizer_free(g->src_tok);
    free(g->skip), free(g->kind), free(g->cache), free(g->seqs);
    free(g->past), free(g->kv_len), free(g->src_len), free(g->row_len), free(g->logits);
    free(g->cand);
    free(g);
}

bool dl_gen_cached(const dl_gen *g) { return g->cached && !g->recompute; }
void dl_gen_set_recompute(dl_gen *g, bool on) { g->recompute = on; }
size_t dl_gen_seq_bytes(const dl_gen *g) { return g->seq_bytes; }

int64_t dl_gen_running(const dl_gen *g)
{
    int64_t n = 0;
    for (int64_t i = 0; i < g->nseqs; i++)
        n += g->seqs[i]->finish == DL_GEN_RUNNING;
    return n;
}

int64_t dl_gen_slots_used(const dl_gen *g) { return g->used; }

/* ---- starting and ending sequences ----------------------------------------------- */

/* The source sample of an encoder-decoder: the text through the source
 * input's tokenizer (a BYTES input) or the generate block's. */
static dl_status pack_source(dl_gen *g, dl_gen_seq *s, const char *text, size_t len,
                             dl_err *err)
{
    const dl_input_conf *ic = &g->m->conf->inputs[g->src];
    int64_t w = dl_input_width(ic);
    if (!(s->src = calloc((size_t)w, sizeof(float))))
        return dl_err_set(err, DL_ERR_NOMEM, "source");
    dl_status st;
    if (g->src_tok) {
        st = dl_seq_pack_text(ic, g->src_tok, text, len, s->src, err);
    } else {
        float *ids = malloc((size_t)(ic->max_length + 1) * sizeof(float));
        int64_t n;
        if (!ids)
            return dl_err_set(err, DL_ERR_NOMEM, "source");
        dl_tokenize(g->tok, text, len, ids, ic->max_length + 1, &n);
        st = dl_seq_pack(ic, ids, n, s->src, err);
        free(ids);
    }
    s->src_len = (int32_t)s->src[0];
    return st;
}

/* The decoder's first ids: the prompt's tokens (a decoder-only model's),
 * or the eos token alone (an encoder-decoder's, or an empty prompt). */
static dl_status prompt_ids(dl_gen *g, dl_gen_seq *s, const char *text, size_t len,
                            dl_err *err)
{
    float *ids = malloc((size_t)(g->ctx + 1) * sizeof(float));
    int64_t n = 0;
    if (!ids)
        return dl_err_set(err, DL_ERR_NOMEM, "prompt");
    if (g->src < 0)
        dl_tokenize(g->tok, text, len, ids, g->ctx + 1, &n);
    if (n == 0 && g->eos >= 0)
        ids[n++] = (float)g->eos;
    dl_status st = DL_OK;
    if (n == 0)
        st = dl_err_set(err, DL_ERR_INVALID, "an empty prompt (the model has no eos to start "
                        "from)");
    else if (n >= g->ctx)
        st = dl_err_set(err, DL_ERR_INVALID, "the prompt is %lld tokens or more; the model's "
                        "context holds %lld, the prompt's and those generated",
                        (long long)n, (long long)g->ctx);
    for (int b = 0; st == DL_OK && b < s->width; b++)
        for (int64_t i = 0; i < n; i++)
            s->ids[b * g->ctx + i] = (int32_t)ids[i];
    s->nprompt = s->n = n;
    free(ids);
    return st;
}

dl_status dl_gen_start(dl_gen *g, const char *prompt, size_t len, const dl_gen_params *p,
                       dl_gen_seq **out, dl_err *err)
{
    *out = NULL;
    dl_status st = dl_gen_params_check(p, err);
    if (st != DL_OK)
        return st;
    if (g->used + p->beam_width > g->max_slots)
        return dl_err_set(err, DL_ERR_BUSY, "generation is full: %lld of %lld sequence slots "
                          "taken", (long long)g->used, (long long)g->max_slots);
    dl_gen_seq *s = calloc(1, sizeof(*s));
    if (!s)
        return dl_err_set(err, DL_ERR_NOMEM, "sequence");
    s->p = *p;
    s->width = p->beam_width;
    s->nbeams = 1;
    s->best = -INFINITY;
    dl_rng_seed(&s->rng, p->seed);
    if (!(s->ids = malloc((size_t)(s->width * g->ctx) * sizeof(int32_t))) ||
        !(s->best_ids = malloc((size_t)g->ctx * sizeof(int32_t))) ||
        !(s->out = malloc((size_t)g->ctx * sizeof(int32_t))))
        st = dl_err_set(err, DL_ERR_NOMEM, "sequence");
    if (st == DL_OK && g->src >= 0)
        st = pack_source(g, s, prompt, len, err);
    if (st == DL_OK)
        st = prompt_ids(g, s, prompt, len, err);
    if (st != DL_OK) {
        seq_free(s);
        return st;
    }
    s->slot = g->used;
    g->used += s->width;
    g->seqs[g->nseqs++] = s;
    *out = s;
    return DL_OK;
}

/* Copies what slot `from` caches to slot `to` (below it) in every cache. */
static void copy_slot(dl_gen *g, int64_t to, int64_t from, int64_t n, int32_t src_len)
{
    dl_backend *be = g->m->be;
    for (int i = 0; i < g->m->nlayers; i++) {
        if (!g->cache[i])
            continue;
        int64_t st = g->m->layers[i].cache_stride;
        be->ops->copy(be, g->cache[i] + to * st, g->cache[i] + from * st,
                      cache_used(g, i, n, src_len));
    }
}

void dl_gen_end(dl_gen *g, dl_gen_seq *s)
{
    int64_t at = 0;
    while (at < g->nseqs && g->seqs[at] != s)
        at++;
    if (at == g->nseqs)
        return;
    int w = s->width;
    dl_gen_seq *last = g->seqs[g->nseqs - 1];
    if (last != s && last->width == w && last->started) {
        /* the last one fills the hole: every one is started, so the
         * order that keeps prefills at the end holds */
        for (int b = 0; g->cached && b < w; b++)
            copy_slot(g, s->slot + b, last->slot + b, last->n, last->src_len);
        last->slot = s->slot;
        g->seqs[at] = last;
    } else {
        for (int64_t i = at + 1; i < g->nseqs; i++) {     /* the later ones move down */
            dl_gen_seq *t = g->seqs[i];
            for (int b = 0; g->cached && t->started && b < t->width; b++)
                copy_slot(g, t->slot - w + b, t->slot + b, t->n, t->src_len);
            t->slot -= w;
            g->seqs[i - 1] = t;
        }
    }
    g->nseqs--;
    g->used -= w;
    seq_free(s);
}

/* ---- a pass ---------------------------------------------------------------------- */

/* Writes slot r's packed rows: the ids of beam b from position `from`
 * (n - from of them), and the source (or a stand-in of one position in a
 * step, whose source layers do not run). */
static void put_rows(dl_gen *g, int64_t r, const dl_gen_seq *s, int b, int64_t from,
                     pass_kind kind)
{
    float *row = g->host_in[0] + r * g->width_in[0];
    int64_t len = s->n - from;
    memset(row, 0, (size_t)g->width_in[0] * sizeof(float));
    row[0] = (float)len;
    for (int64_t i = 0; i < len; i++)
        row[1 + i] = (float)s->ids[b * g->ctx + from + i];
    g->row_len[r] = (int32_t)len;
    g->past[r] = (int32_t)from;
    g->kv_len[r] = (int32_t)s->n;
    if (g->src < 0)
        return;
    float *sr = g->host_in[1] + r * g->width_in[1];
    g->src_len[r] = s->src_len;
    if (kind == PASS_STEP) {
        memset(sr, 0, (size_t)g->width_in[1] * sizeof(float));
        sr[0] = 1.0f;
    } else {
        memcpy(sr, s->src, (size_t)g->width_in[1] * sizeof(float));
    }
}

/* One pass over slots [a, a + count) of the sequences from seqs[i0] on,
 * leaving each slot's last logits in g->logits. */
static dl_status run_pass(dl_gen *g, int64_t i0, int64_t a, int64_t count, pass_kind kind,
                          dl_err *err)
{
    dl_model *m = g->m;
    dl_backend *be = m->be;
    for (int64_t i = i0; i < g->nseqs && g->seqs[i]->slot < a + count; i++) {
        dl_gen_seq *s = g->seqs[i];
        for (int b = 0; b < s->width; b++)
            put_rows(g, s->slot + b, s, b < s->nbeams ? b : 0,
                     kind == PASS_STEP ? s->n - 1 : 0, kind);
    }
    const float *xs[2] = { NULL, NULL };
    int idx[2] = { g->in, g->src };
    for (int k = 0; k < 2; k++) {
        if (idx[k] < 0)
            continue;
        const float *h = g->host_in[k] + a * g->width_in[k];
        if (g->dev_in[k])
            be->ops->upload(be, g->dev_in[k], h,
                            (size_t)(count * g->width_in[k]) * sizeof(float));
        xs[idx[k]] = g->dev_in[k] ? g->dev_in[k] : h;
    }
    layer_dec dec = { .past = g->past + a, .kv_len = g->kv_len + a,
                      .src_len = g->src_len + a, .source = g->skip,
                      .step = kind == PASS_STEP };
    for (int i = 0; i < m->nlayers; i++)
        m->layers[i].cache = g->cache[i] ? g->cache[i] + a * m->layers[i].cache_stride : NULL;
    dl_status st = model_forward_dec(m, xs, count, false, kind == PASS_FULL ? NULL : &dec,
                                     err);
    if (st != DL_OK)
        return st;
    const float *y = dl_model_output(m, g->out);
    int64_t steps = dl_model_output_steps(m, g->out);
    for (int64_t j = 0; j < count; j++)
        be->ops->download(be, g->logits + (a + j) * g->vocab,
                          y + (j * steps + g->row_len[a + j] - 1) * g->vocab,
                          (size_t)g->vocab * sizeof(float));
    return DL_OK;
}

/* ---- choosing tokens ------------------------------------------------------------- */

static int64_t argmax(const float *x, int64_t n)
{
    int64_t best = 0;
    for (int64_t i = 1; i < n; i++)
        if (x[i] > x[best])
            best = i;
    return best;
}

static int by_logit(const void *a, const void *b)
{
    const cand *x = a, *y = b;
    if (x->logit != y->logit)
        return x->logit < y->logit ? 1 : -1;
    return x->id < y->id ? -1 : x->id > y->id;
}

/* Samples from softmax(logits / temperature) over the top_k highest
 * (0: all) and of those the fewest whose probabilities reach top_p. */
static int32_t sample(dl_gen_seq *s, const float *logits, int64_t v, cand *c)
{
    const dl_gen_params *p = &s->p;
    for (int64_t i = 0; i < v; i++)
        c[i] = (cand){ logits[i] / p->temperature, (int32_t)i };
    int64_t keep = v;
    if (p->top_k > 0 || p->top_p < 1.0f) {
        qsort(c, (size_t)v, sizeof(*c), by_logit);
        if (p->top_k > 0 && p->top_k < keep)
            keep = p->top_k;
    }
    float mx = c[0].logit;
    for (int64_t i = 1; i < keep; i++)
        mx = c[i].logit > mx ? c[i].logit : mx;
    double sum = 0.0;
    for (int64_t i = 0; i < keep; i++)
        sum += exp((double)(c[i].logit - mx));
    if (p->top_p < 1.0f) {
        double acc = 0.0;
        int64_t i = 0;
        while (i < keep && acc < p->top_p * sum)
            acc += exp((double)(c[i++].logit - mx));
        keep = i, sum = acc;
    }
    double u = (double)dl_rng_uniform(&s->rng) * sum;
    for (int64_t i = 0; i < keep; i++) {
        u -= exp((double)(c[i].logit - mx));
        if (u < 0.0)
            return c[i].id;
    }
    return c[keep - 1].id;
}

/* Whether a stop string ends within the text's last `fresh` bytes: then
 * the text is cut before it. */
static bool cut_at_stop(dl_gen_seq *s, size_t fresh)
{
    for (int k = 0; k < s->p.nstop; k++) {
        size_t sl = strlen(s->p.stop[k]);
        size_t from = s->len > fresh + sl ? s->len - fresh - sl : 0;
        for (size_t i = from; i + sl <= s->len; i++)
            if (memcmp(s->text + i, s->p.stop[k], sl) == 0) {
                s->len = i;
                return true;
            }
    }
    return false;
}

/* The bytes of the text that no stop string can still claim: all of it
 * but its longest ending that begins a stop string. */
static size_t safe_len(const dl_gen_seq *s)
{
    size_t keep = 0;
    for (int k = 0; k < s->p.nstop; k++) {
        size_t sl = strlen(s->p.stop[k]);
        for (size_t n = sl - 1; n > keep; n--)
            if (n <= s->len && memcmp(s->text + s->len - n, s->p.stop[k], n) == 0) {
                keep = n;
                break;
            }
    }
    return s->len - keep;
}

static bool append_text(dl_gen *g, dl_gen_seq *s, const int32_t *ids, int64_t n)
{
    size_t need = dl_detokenize(g->tok, ids, n, NULL, 0) + 1;
    if (s->len + need > s->cap) {
        size_t cap = (s->len + need) * 2;
        char *t = realloc(s->text, cap);
        if (!t)
            return false;
        s->text = t, s->cap = cap;
    }
    if (s->len > 0 && need > 1 && g->gc.tok.kind == DL_TOK_WORDS)
        s->text[s->len++] = ' ';
    s->len += dl_detokenize(g->tok, ids, n, s->text + s->len, s->cap - s->len);
    return true;
}

static void finish(dl_gen_seq *s, dl_gen_finish f)
{
    s->finish = f;
    s->shown = s->len;
}

/* Sampling and greedy decoding: the token taken. The eos token ends the
 * sequence, text that a stop string ends is cut, and max_tokens or a
 * full context end it too. */
static dl_status take_token(dl_gen *g, dl_gen_seq *s, int32_t id, dl_err *err)
{
    s->out[s->nout++] = id;
    if (id == g->eos) {
        finish(s, DL_GEN_STOP);
        return DL_OK;
    }
    s->ids[s->n++] = id;
    size_t before = s->len;
    if (!append_text(g, s, &id, 1))
        return dl_err_set(err, DL_ERR_NOMEM, "generated text");
    if (cut_at_stop(s, s->len - before))
        finish(s, DL_GEN_STOP);
    else if (s->nout >= s->p.max_tokens || s->n >= g->ctx)
        finish(s, DL_GEN_LENGTH);
    else
        s->shown = safe_len(s);
    return DL_OK;
}

/* A beam search's answer: its best finished beam's ids and text. */
static dl_status beam_answer(dl_gen *g, dl_gen_seq *s, dl_err *err)
{
    memcpy(s->out, s->best_ids, (size_t)s->best_n * sizeof(int32_t));
    s->nout = s->best_n;
    s->len = 0;
    if (!append_text(g, s, s->out, s->nout - s->best_eos))
        return dl_err_set(err, DL_ERR_NOMEM, "generated text");
    bool cut = cut_at_stop(s, s->len);
    finish(s, cut || s->best_eos ? DL_GEN_STOP : DL_GEN_LENGTH);
    return DL_OK;
}

/* A finished beam (b's generated ids, then `eos` when >= 0) competes for
 * the answer: the first of the best scores keeps it. */
static void beam_done(const dl_gen *g, dl_gen_seq *s, int b, double score, int64_t gen,
                      int32_t eos)
{
    double norm = score / pow((double)gen, (double)s->p.length_penalty);
    if (!(norm > s->best))
        return;
    s->best = norm;
    s->best_n = gen;
    memcpy(s->best_ids, s->ids + b * g->ctx + s->nprompt,
           (size_t)(gen - (eos >= 0)) * sizeof(int32_t));
    if (eos >= 0)
        s->best_ids[gen - 1] = eos;
    s->best_eos = eos >= 0;
}

typedef struct beam_cand {
    double  score;
    int     beam;
    int32_t id;
} beam_cand;

/* The best 2W candidates of the live beams, in order (the first of equals
 * kept ahead: beams and ids are visited in order). */
static int beam_top(const dl_gen *g, const dl_gen_seq *s, beam_cand *top)
{
    int cap = 2 * s->width, n = 0;
    for (int b = 0; b < s->nbeams; b++) {
        const float *row = g->logits + (s->slot + b) * g->vocab;
        float mx = row[argmax(row, g->vocab)];
        double sum = 0.0;
        for (int64_t v = 0; v < g->vocab; v++)
            sum += exp((double)(row[v] - mx));
        double base = s->score[b] - (double)mx - log(sum);
        for (int64_t v = 0; v < g->vocab; v++) {
            double sc = base + (double)row[v];
            if (n == cap && !(sc > top[n - 1].score))
                continue;
            int at = n < cap ? n++ : n - 1;
            while (at > 0 && sc > top[at - 1].score) {
                top[at] = top[at - 1];
                at--;
            }
            top[at] = (beam_cand){ sc, b, (int32_t)v };
        }
    }
    return n;
}

/* Moves the beams' rows (ids and caches) so that beam j continues from
 * beam parent[j]. */
static void beam_reorder(dl_gen *g, dl_gen_seq *s, const int *parent, int nb)
{
    int32_t *rows = malloc((size_t)(nb * g->ctx) * sizeof(int32_t));
    if (rows) {     /* without memory for it, beams go on from where they were */
        for (int j = 0; j < nb; j++)
            memcpy(rows + j * g->ctx, s->ids + parent[j] * g->ctx,
                   (size_t)s->n * sizeof(int32_t));
        memcpy(s->ids, rows, (size_t)(nb * g->ctx) * sizeof(int32_t));
        free(rows);
    }
    if (!dl_gen_cached(g))
        return;
    dl_backend *be = g->m->be;
    for (int i = 0; i < g->m->nlayers; i++) {
        /* a source's keys and values: the same in every beam */
        if (!g->cache[i] || g->kind[i] == CACHE_CROSS)
            continue;
        int64_t st = g->m->layers[i].cache_stride, used = cache_used(g, i, s->n, 0);
        float *c = g->cache[i] + s->slot * st;
        for (int j = 0; j < nb; j++)
            be->ops->copy(be, g->move + j * g->move_stride, c + parent[j] * st, used);
        for (int j = 0; j < nb; j++)
            be->ops->copy(be, c + j * st, g->move + j * g->move_stride, used);
    }
}

/* One step of a beam search (dl_gen.h has its rules). */
static dl_status beam_step(dl_gen *g, dl_gen_seq *s, dl_err *err)
{
    beam_cand top[2 * BEAM_MAX];
    int n = beam_top(g, s, top), parent[BEAM_MAX], nb = 0;
    int32_t tok[BEAM_MAX];
    double score[BEAM_MAX];
    int64_t gen = s->n - s->nprompt + 1;          /* this step's token counted */
    for (int j = 0; j < n; j++) {
        if (top[j].id == g->eos) {
            if (j >= s->width)      /* ranked below the beams that go on */
                continue;
            beam_done(g, s, top[j].beam, top[j].score, gen, g->eos);
            s->nfinished++;
        } else if (nb < s->width) {
            parent[nb] = top[j].beam, tok[nb] = top[j].id, score[nb++] = top[j].score;
        }
    }
    beam_reorder(g, s, parent, nb);
    for (int j = 0; j < nb; j++) {
        s->ids[j * g->ctx + s->n] = tok[j];
        s->score[j] = score[j];
    }
    s->n++;
    s->nbeams = nb;
    if (s->nfinished >= s->width || nb == 0)
        return beam_answer(g, s, err);
    if (gen >= s->p.max_tokens || s->n >= g->ctx) {
        for (int j = 0; j < nb; j++)
            beam_done(g, s, j, s->score[j], gen, -1);
        return beam_answer(g, s, err);
    }
    return DL_OK;
}

/* ---- a step ---------------------------------------------------------------------- */

dl_status dl_gen_step(dl_gen *g, dl_err *err)
{
    int64_t i_new = 0;
    while (i_new < g->nseqs && g->seqs[i_new]->started)
        i_new++;
    int64_t first_new = i_new < g->nseqs ? g->seqs[i_new]->slot : g->used;
    dl_status st = DL_OK;
    if (dl_gen_running(g) == 0)
        return DL_OK;
    if (!dl_gen_cached(g)) {
        st = run_pass(g, 0, 0, g->used, PASS_FULL, err);
    } else {
        if (first_new > 0)
            st = run_pass(g, 0, 0, first_new, PASS_STEP, err);
        if (st == DL_OK && first_new < g->used)
            st = run_pass(g, i_new, first_new, g->used - first_new, PASS_PREFILL, err);
    }
    for (int64_t i = 0; st == DL_OK && i < g->nseqs; i++) {
        dl_gen_seq *s = g->seqs[i];
        s->started = true;
        if (s->finish != DL_GEN_RUNNING)
            continue;
        const float *row = g->logits + s->slot * g->vocab;
        if (s->width > 1 || s->p.beam_search)
            st = beam_step(g, s, err);
        else if (s->p.temperature > 0.0f)
            st = take_token(g, s, sample(s, row, g->vocab, g->cand), err);
        else
            st = take_token(g, s, (int32_t)argmax(row, g->vocab), err);
    }
    return st;
}

/* ---- a sequence's answer --------------------------------------------------------- */

const char *dl_gen_text(const dl_gen_seq *s, size_t *len)
{
    *len = s->shown;
    return s->text ? s->text : "";
}

dl_gen_finish dl_gen_finished(const dl_gen_seq *s) { return s->finish; }

int64_t dl_gen_prompt_tokens(const dl_gen_seq *s)
{
    return s->src ? s->src_len : s->nprompt;
}

int64_t dl_gen_tokens(const dl_gen_seq *s) { return s->nout; }

const int32_t *dl_gen_ids(const dl_gen_seq *s, int64_t *n)
{
    *n = s->nout;
    return s->out;
}
