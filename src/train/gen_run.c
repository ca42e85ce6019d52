/* gen_run.c: `dlserve --generate`: a version of a model with a "generate"
 * block decodes one prompt or a file of them, all run together (continuous
 * batching), and prints a JSON line an answer, in the prompts' order. */
#define _POSIX_C_SOURCE 200809L
#include "train/session.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

void dl_gen_run_opts_init(dl_gen_run_opts *g)
{
    memset(g, 0, sizeof(*g));
    g->max_tokens = g->top_k = g->beam_width = -1;
    g->temperature = g->top_p = g->length_penalty = -1.0;
}

/* The request's parameters: the defaults, then what the command line gives. */
static void gen_params(const dl_gen_run_opts *g, const dl_run_opts *o, dl_gen_params *p)
{
    dl_gen_params_init(p);
    if (g->max_tokens > 0)
        p->max_tokens = g->max_tokens;
    if (g->temperature >= 0)
        p->temperature = (float)g->temperature;
    if (g->top_k >= 0)
        p->top_k = g->top_k;
    if (g->top_p >= 0)
        p->top_p = (float)g->top_p;
    if (g->beam_width > 0)
        p->beam_width = (int)g->beam_width;
    if (g->length_penalty >= 0)
        p->length_penalty = (float)g->length_penalty;
    if (o->seed >= 0)
        p->seed = (uint64_t)o->seed;
    p->nstop = g->nstop;
    for (int i = 0; i < g->nstop; i++)
        dl_strlcpy(p->stop[i], g->stop[i], sizeof(p->stop[i]));
}

/* The prompts: --prompt's text, or the lines of --prompts FILE ("-":
 * standard input; "\r\n" ends a line too, a last line needs no newline).
 * *buf owns the text the prompts point into. */
typedef struct prompts {
    char    *buf;
    char   **text;
    size_t  *len;
    int64_t  n;
} prompts;

static void prompts_free(prompts *ps)
{
    free(ps->buf);
    free(ps->text);
    free(ps->len);
}

static dl_status read_stdin(char **out, size_t *len, dl_err *err)
{
    dl_sbuf b = {0};
    char chunk[65536];
    size_t n;
    while ((n = fread(chunk, 1, sizeof(chunk), stdin)) > 0)
        dl_sbuf_add(&b, chunk, n);
    if (b.oom || ferror(stdin)) {
        dl_sbuf_free(&b);
        return dl_err_set(err, b.oom ? DL_ERR_NOMEM : DL_ERR_IO, "standard input: cannot read");
    }
    *out = b.s ? b.s : calloc(1, 1);
    *len = b.len;
    return *out ? DL_OK : dl_err_set(err, DL_ERR_NOMEM, "prompts");
}

static dl_status prompts_load(const dl_gen_run_opts *g, prompts *ps, dl_err *err)
{
    memset(ps, 0, sizeof(*ps));
    size_t size = 0;
    dl_status st;
    if (g->prompt) {
        size = strlen(g->prompt);
        ps->buf = malloc(size + 1);
        st = ps->buf ? DL_OK : dl_err_set(err, DL_ERR_NOMEM, "prompt");
        if (st == DL_OK)
            memcpy(ps->buf, g->prompt, size + 1);
    } else if (strcmp(g->prompts, "-") == 0)
        st = read_stdin(&ps->buf, &size, err);
    else
        st = dl_file_read(g->prompts, &ps->buf, &size, err);
    if (st != DL_OK)
        return st;
    int64_t lines = 1;
    for (size_t i = 0; i < size; i++)
        lines += ps->buf[i] == '\n';
    ps->text = calloc((size_t)lines, sizeof(*ps->text));
    ps->len = calloc((size_t)lines, sizeof(*ps->len));
    if (!ps->text || !ps->len)
        return dl_err_set(err, DL_ERR_NOMEM, "prompts");
    if (g->prompt) {
        ps->text[0] = ps->buf;
        ps->len[0] = size;
        ps->n = 1;
        return DL_OK;
    }
    for (size_t at = 0; at < size;) {
        char *nl = memchr(ps->buf + at, '\n', size - at);
        size_t end = nl ? (size_t)(nl - ps->buf) : size, n = end - at;
        if (n && ps->buf[at + n - 1] == '\r')
            n--;
        ps->text[ps->n] = ps->buf + at;
        ps->len[ps->n++] = n;
        at = end + 1;
    }
    if (ps->n == 0)
        return dl_err_set(err, DL_ERR_INVALID, "%s: no prompts (a prompt a line)",
                          strcmp(g->prompts, "-") == 0 ? "standard input" : g->prompts);
    return DL_OK;
}

/* One prompt's answer, kept until the answers before it are printed. */
typedef struct answer {
    dl_gen_seq   *seq;         /* while it runs */
    bool          done;
    dl_gen_finish finish;
    char         *text;        /* new, NUL-terminated */
    size_t        len;
    int32_t      *ids;
    int64_t       nids, prompt_tokens;
} answer;

/* Copies a finished sequence's answer out of the decoder, then ends it. */
static dl_status collect(dl_gen *g, answer *a, dl_err *err)
{
    size_t len;
    const char *text = dl_gen_text(a->seq, &len);
    int64_t n;
    const int32_t *ids = dl_gen_ids(a->seq, &n);
    a->text = malloc(len + 1);
    a->ids = malloc((size_t)(n + 1) * sizeof(*ids));
    if (!a->text || !a->ids)
        return dl_err_set(err, DL_ERR_NOMEM, "an answer");
    memcpy(a->text, text, len);
    a->text[len] = '\0';
    a->len = len;
    if (n)
        memcpy(a->ids, ids, (size_t)n * sizeof(*ids));
    a->nids = n;
    a->finish = dl_gen_finished(a->seq);
    a->prompt_tokens = dl_gen_prompt_tokens(a->seq);
    dl_gen_end(g, a->seq);
    a->seq = NULL;
    a->done = true;
    return DL_OK;
}

/* The length of the valid UTF-8 sequence at s[0..n), 0 if none starts there. */
static size_t utf8_len(const unsigned char *s, size_t n)
{
    size_t k = s[0] < 0x80 ? 1 : (s[0] & 0xe0) == 0xc0 ? 2 : (s[0] & 0xf0) == 0xe0 ? 3
             : (s[0] & 0xf8) == 0xf0 ? 4 : 0;
    if (k == 0 || k > n || (k == 2 && s[0] < 0xc2))
        return 0;
    for (size_t i = 1; i < k; i++)
        if ((s[i] & 0xc0) != 0x80)
            return 0;
    return k;
}

/* text as a JSON string: bytes that are not UTF-8 (a byte model may
 * generate any) become U+FFFD, NULs too. */
static void json_text(dl_sbuf *b, const char *text, size_t len)
{
    dl_sbuf clean = {0};
    const unsigned char *s = (const unsigned char *)text;
    for (size_t i = 0; i < len;) {
        size_t k = s[i] ? utf8_len(s + i, len - i) : 0;
        if (k)
            dl_sbuf_add(&clean, text + i, k);
        else
            dl_sbuf_add(&clean, "\xef\xbf\xbd", 3);
        i += k ? k : 1;
    }
    dl_sbuf_json_string(b, clean.s ? clean.s : "");
    b->oom |= clean.oom;
    dl_sbuf_free(&clean);
}

/* {"index", "text_output", "finish_reason", "prompt_tokens", "tokens"
 * [, "ids"]} on stdout. */
static void print_answer(int64_t i, const answer *a, bool with_ids)
{
    dl_sbuf b = {0};
    dl_sbuf_printf(&b, "{\"index\":%lld,\"text_output\":", (long long)i);
    json_text(&b, a->text, a->len);
    dl_sbuf_printf(&b, ",\"finish_reason\":\"%s\",\"prompt_tokens\":%lld,\"tokens\":%lld",
                   dl_gen_finish_name(a->finish), (long long)a->prompt_tokens,
                   (long long)a->nids);
    if (with_ids) {
        dl_sbuf_add(&b, ",\"ids\":[", 8);
        for (int64_t k = 0; k < a->nids; k++) {
            if (k)
                dl_sbuf_putc(&b, ',');
            dl_sbuf_int(&b, a->ids[k]);
        }
        dl_sbuf_putc(&b, ']');
    }
    dl_sbuf_add(&b, "}\n", 2);
    if (!b.oom)
        fputs(b.s, stdout);
    fflush(stdout);
    dl_sbuf_free(&b);
}

/* Where prompt i came from, for its errors. */
static void prompt_where(const dl_gen_run_opts *g, int64_t i, char *buf, size_t len)
{
    if (g->prompt)
        snprintf(buf, len, "--prompt");
    else
        snprintf(buf, len, "%s:%lld", strcmp(g->prompts, "-") == 0 ? "standard input"
                 : g->prompts, (long long)i + 1);
}

/* The decoding loop: prompts start while the decoder has room (the
 * others wait for a sequence to end), every running one advances a step
 * a call, finished ones are collected and answers printed in order. */
static dl_status generate_all(dl_gen *gen, const dl_gen_run_opts *g, const prompts *ps,
                              const dl_gen_params *p, answer *as, int64_t *tokens,
                              dl_err *err)
{
    int64_t next = 0, printed = 0;
    dl_status st = DL_OK;
    while (st == DL_OK && printed < ps->n) {
        while (next < ps->n) {
            dl_err e = {0};
            st = dl_gen_start(gen, ps->text[next], ps->len[next], p, &as[next].seq, &e);
            if (st == DL_ERR_BUSY && dl_gen_running(gen) > 0) {
                st = DL_OK;
                break;
            }
            if (st != DL_OK) {
                char where[4200];
                prompt_where(g, next, where, sizeof(where));
                return dl_err_set(err, st, "%s: %s", where, e.msg);
            }
            next++;
        }
        st = dl_gen_step(gen, err);
        for (int64_t i = printed; st == DL_OK && i < next; i++)
            if (as[i].seq && dl_gen_finished(as[i].seq) != DL_GEN_RUNNING)
                st = collect(gen, &as[i], err);
        for (; st == DL_OK && printed < next && as[printed].done; printed++) {
            print_answer(printed, &as[printed], g->ids);
            *tokens += as[printed].nids;
        }
    }
    return st;
}

/* The model's generate block, its tokenizer and a decoder over the model. */
static dl_status open_decoder(session *s, const dl_run_opts *o, const dl_gen_run_opts *g,
                              dl_gen_conf *gc, dl_tokenizer **tok, dl_gen **gen, dl_err *err)
{
    bool has = false;
    char what[4200];
    snprintf(what, sizeof(what), "%s/model.json", o->model_dir);
    dl_status st = dl_gen_conf_read(s->conf->json, what, s->conf, gc, &has, err);
    if (st == DL_OK && !has)
        st = dl_err_set(err, DL_ERR_INVALID, "%s: no \"generate\" block: model '%s' does "
                        "not generate", what, s->conf->name);
    if (st == DL_OK)
        st = dl_tokenizer_new(&gc->tok, tok, err);
    if (st == DL_OK)
        st = dl_gen_new(s->m, gc, *tok, g->max_seqs > 0 ? g->max_seqs : DL_GEN_RUN_SEQS, 0,
                        gen, err);
    if (st == DL_OK && g->recompute)
        dl_gen_set_recompute(*gen, true);
    return st;
}

dl_status dl_gen_run(const dl_run_opts *o, const dl_gen_run_opts *g, dl_err *err)
{
    dl_gen_params p;
    gen_params(g, o, &p);
    dl_status st = dl_gen_params_check(&p, err);
    if (st != DL_OK)
        return st;
    prompts ps;
    st = prompts_load(g, &ps, err);
    if (st != DL_OK) {
        prompts_free(&ps);
        return st;
    }
    session s;
    st = session_open(&s, o, 1, true, err);
    if (st != DL_OK) {
        prompts_free(&ps);
        return st;
    }
    dl_gen_conf gc;
    memset(&gc, 0, sizeof(gc));
    dl_tokenizer *tok = NULL;
    dl_gen *gen = NULL;
    answer *as = calloc((size_t)ps.n, sizeof(*as));
    st = as ? session_load_weights(&s, o, err) : dl_err_set(err, DL_ERR_NOMEM, "answers");
    if (st == DL_OK) {
        session_serve(&s, o);
        st = open_decoder(&s, o, g, &gc, &tok, &gen, err);
    }
    int64_t tokens = 0;
    double t0 = dl_time_now();
    if (st == DL_OK)
        st = generate_all(gen, g, &ps, &p, as, &tokens, err);
    if (st == DL_OK) {
        double secs = dl_time_now() - t0;
        DL_LOG(DL_LOG_INFO, "gen", "%s version %lld: %lld prompts, %lld tokens in %.2f s "
               "(%.0f tokens/s, %s)", s.conf->name, (long long)s.version, (long long)ps.n,
               (long long)tokens, secs, secs > 0 ? (double)tokens / secs : 0.0,
               dl_gen_cached(gen) ? "key-value cache" : "prefix recomputed");
    }
    for (int64_t i = 0; as && i < ps.n; i++) {
        if (as[i].seq)
            dl_gen_end(gen, as[i].seq);
        free(as[i].text);
        free(as[i].ids);
    }
    free(as);
    dl_gen_free(gen);     /* before the model it decodes with */
    dl_tokenizer_free(tok);
    dl_gen_conf_release(&gc);
    session_close(&s);
    prompts_free(&ps);
    return st;
}
