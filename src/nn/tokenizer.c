/* tokenizer.c: text inputs' tokenizers (bytes, or words of a vocabulary
 * file kept in a hash table) and the packed layout of a sequence sample. */
#define _POSIX_C_SOURCE 200809L
#include "nn/dl_gen.h"

#include <stdlib.h>
#include <string.h>

/* Ids are floats, exact below 2^24: a vocabulary leaves room for 0 and 1. */
#define VOCAB_MAX ((1 << 24) - 2)

struct dl_tokenizer {
    dl_tok_kind kind;
    bool        lowercase;
    char       *text;            /* words: the vocabulary file's bytes (owned) */
    int64_t     nwords;
    int64_t    *word_at;         /* nwords: offset of word k in text */
    int32_t    *word_len;        /* nwords: its length */
    uint32_t   *slot;            /* nslots (a power of 2): word index + 1, 0 empty */
    uint64_t    mask;            /* nslots - 1 */
};

/* The word rule: ASCII letters and digits, apostrophes and every byte of
 * a UTF-8 sequence (>= 0x80) make words; any other byte separates them. */
static bool word_byte(unsigned char c)
{
    return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') ||
           c == '\'' || c >= 0x80;
}

static unsigned char lower(unsigned char c, bool on)
{
    return on && c >= 'A' && c <= 'Z' ? (unsigned char)(c - 'A' + 'a') : c;
}

/* FNV-1a over the word as the tokenizer sees it (lowercased when on). */
static uint64_t word_hash(const char *s, size_t n, bool low)
{
    uint64_t h = 0xcbf29ce484222325ull;
    for (size_t i = 0; i < n; i++)
        h = (h ^ lower((unsigned char)s[i], low)) * 0x100000001b3ull;
    return h;
}

/* The id of word s[0..n) (DL_TOK_UNK when not in the vocabulary). The
 * vocabulary's words are stored as they must match: lowercase already
 * when the tokenizer lowercases (dl_tokenizer_new checks it). */
static int64_t word_id(const dl_tokenizer *t, const char *s, size_t n)
{
    for (uint64_t h = word_hash(s, n, t->lowercase) & t->mask;; h = (h + 1) & t->mask) {
        uint32_t w = t->slot[h];
        if (w == 0)
            return DL_TOK_UNK;
        const char *v = t->text + t->word_at[w - 1];
        if ((size_t)t->word_len[w - 1] != n)
            continue;
        size_t i = 0;
        while (i < n && (unsigned char)v[i] == lower((unsigned char)s[i], t->lowercase))
            i++;
        if (i == n)
            return w - 1 + 2;
    }
}

/* Checks line `line` of the vocabulary (word s[0..n)) and adds it to the
 * table as word k; errors name the file and line. */
static dl_status add_word(dl_tokenizer *t, const dl_tokenizer_conf *tc, int64_t k,
                          int64_t line, const char *s, size_t n, dl_err *err)
{
    const char *path = tc->vocab;
    if (n == 0)
        return dl_err_set(err, DL_ERR_INVALID, "%s:%lld: an empty line (a word a line)",
                          path, (long long)line);
    for (size_t i = 0; i < n; i++) {
        unsigned char c = (unsigned char)s[i];
        if (!word_byte(c))
            return dl_err_set(err, DL_ERR_INVALID, "%s:%lld: byte 0x%02x splits the word "
                              "(a word is ASCII letters and digits, apostrophes and bytes "
                              ">= 0x80)", path, (long long)line, c);
        if (t->lowercase && lower(c, true) != c)
            return dl_err_set(err, DL_ERR_INVALID, "%s:%lld: '%.*s' has capitals, which a "
                              "lowercasing tokenizer never gives", path, (long long)line,
                              (int)(n < 64 ? n : 64), s);
    }
    if (word_id(t, s, n) != DL_TOK_UNK)
        return dl_err_set(err, DL_ERR_INVALID, "%s:%lld: '%.*s' is there already (line "
                          "%lld)", path, (long long)line, (int)(n < 64 ? n : 64), s,
                          (long long)word_id(t, s, n) - 1);
    t->word_at[k] = s - t->text;
    t->word_len[k] = (int32_t)n;
    uint64_t h = word_hash(s, n, false) & t->mask;
    while (t->slot[h])
        h = (h + 1) & t->mask;
    t->slot[h] = (uint32_t)(k + 1);
    return DL_OK;
}

/* Reads the vocabulary: a word a line, '\n' or "\r\n" ended (the last
 * line may lack its end). */
static dl_status load_vocab(dl_tokenizer *t, const dl_tokenizer_conf *tc, dl_err *err)
{
    size_t len;
    dl_status st = dl_file_read(tc->vocab, &t->text, &len, err);
    if (st != DL_OK)
        return st;
    int64_t lines = 0;
    for (size_t i = 0; i < len; i++)
        lines += t->text[i] == '\n' || i + 1 == len;
    if (lines == 0)
        return dl_err_set(err, DL_ERR_INVALID, "%s: no words (a word a line)", tc->vocab);
    if (lines > VOCAB_MAX)
        return dl_err_set(err, DL_ERR_INVALID, "%s: %lld lines, above %d (ids are exact "
                          "floats)", tc->vocab, (long long)lines, VOCAB_MAX);
    uint64_t nslots = 16;
    while (nslots < 2 * (uint64_t)lines)      /* at most half full */
        nslots *= 2;
    t->mask = nslots - 1;
    t->slot = calloc(nslots, sizeof(*t->slot));
    t->word_at = malloc((size_t)lines * sizeof(*t->word_at));
    t->word_len = malloc((size_t)lines * sizeof(*t->word_len));
    if (!t->slot || !t->word_at || !t->word_len)
        return dl_err_set(err, DL_ERR_NOMEM, "%s: vocabulary of %lld words", tc->vocab,
                          (long long)lines);
    const char *p = t->text, *end = t->text + len;
    for (int64_t k = 0; k < lines && st == DL_OK; k++) {
        const char *nl = memchr(p, '\n', (size_t)(end - p));
        const char *e = nl ? nl : end;
        size_t n = (size_t)(e - p) - (e > p && e[-1] == '\r');
        st = add_word(t, tc, k, k + 1, p, n, err);
        p = e + 1;
    }
    t->nwords = lines;
    return st;
}

dl_status dl_tokenizer_new(const dl_tokenizer_conf *tc, dl_tokenizer **out, dl_err *err)
{
    *out = NULL;
    if (tc->kind != DL_TOK_BYTES && tc->kind != DL_TOK_WORDS)
        return dl_err_set(err, DL_ERR_INVALID, "no tokenizer (type bytes or words)");
    if (tc->kind == DL_TOK_WORDS && !tc->vocab)
        return dl_err_set(err, DL_ERR_INVALID, "a words tokenizer without a vocabulary");
    dl_tokenizer *t = calloc(1, sizeof(*t));
    if (!t)
        return dl_err_set(err, DL_ERR_NOMEM, "tokenizer");
    t->kind = tc->kind;
    t->lowercase = tc->lowercase;
    dl_status st = t->kind == DL_TOK_WORDS ? load_vocab(t, tc, err) : DL_OK;
    if (st != DL_OK) {
        dl_tokenizer_free(t);
        return st;
    }
    *out = t;
    return DL_OK;
}

void dl_tokenizer_free(dl_tokenizer *t)
{
    if (!t)
        return;
    free(t->text);
    free(t->word_at);
    free(t->word_len);
    free(t->slot);
    free(t);
}

int64_t dl_tokenizer_size(const dl_tokenizer *t)
{
    return t->kind == DL_TOK_BYTES ? 256 : t->nwords + 2;
}

void dl_tokenize(const dl_tokenizer *t, const char *text, size_t len, float *ids, int64_t max,
                 int64_t *n)
{
    const unsigned char *s = (const unsigned char *)text;
    int64_t k = 0;
    if (t->kind == DL_TOK_BYTES) {
        /* A NUL byte is skipped: id 0 is padding. */
        for (size_t i = 0; i < len; i++)
            if (s[i] && k++ < max)
                ids[k - 1] = (float)s[i];
        *n = k;
        return;
    }
    for (size_t i = 0; i < len;) {
        if (!word_byte(s[i])) {
            i++;
            continue;
        }
        size_t b = i;
        while (i < len && word_byte(s[i]))
            i++;
        if (k++ < max)
            ids[k - 1] = (float)word_id(t, text + b, i - b);
    }
    *n = k;
}

/* Values a position of input ic holds: dim / max_length. */
static int64_t per_position(const dl_input_conf *ic)
{
    return ic->dim / ic->max_length;
}

dl_status dl_seq_pack_text(const dl_input_conf *ic, const dl_tokenizer *t, const char *text,
                           size_t len, float *row, dl_err *err)
{
    int64_t n;
    dl_tokenize(t, text, len, row + 1, ic->max_length, &n);
    if (n == 0)
        return dl_err_set(err, DL_ERR_INVALID, "input '%s': the text has no tokens", ic->name);
    if (n > ic->max_length)
        return dl_err_set(err, DL_ERR_INVALID, "input '%s': %lld tokens, above max_length "
                          "%lld", ic->name, (long long)n, (long long)ic->max_length);
    row[0] = (float)n;
    memset(row + 1 + n, 0, (size_t)(ic->dim - n) * sizeof(float));
    return DL_OK;
}

dl_status dl_seq_pack(const dl_input_conf *ic, const float *values, int64_t len, float *row,
                      dl_err *err)
{
    if (len < 1 || len > ic->max_length)
        return dl_err_set(err, DL_ERR_INVALID, "input '%s': %lld positions, not from 1 to "
                          "max_length %lld", ic->name, (long long)len,
                          (long long)ic->max_length);
    int64_t d = per_position(ic);
    row[0] = (float)len;
    memcpy(row + 1, values, (size_t)(len * d) * sizeof(float));
    memset(row + 1 + len * d, 0, (size_t)((ic->max_length - len) * d) * sizeof(float));
    return DL_OK;
}

size_t dl_detokenize(const dl_tokenizer *t, const int32_t *ids, int64_t n, char *buf,
                     size_t cap)
{
    size_t at = 0;
    for (int64_t i = 0; i < n; i++) {
        const char *w = NULL;
        size_t len = 0;
        char byte;
        if (t->kind == DL_TOK_BYTES && ids[i] > 0 && ids[i] < 256) {
            byte = (char)ids[i];
            w = &byte, len = 1;
        } else if (t->kind == DL_TOK_WORDS && ids[i] == DL_TOK_UNK) {
            w = "<unk>", len = 5;
        } else if (t->kind == DL_TOK_WORDS && ids[i] >= 2 && ids[i] - 2 < t->nwords) {
            w = t->text + t->word_at[ids[i] - 2];
            len = (size_t)t->word_len[ids[i] - 2];
        }
        if (!w)
            continue;
        if (t->kind == DL_TOK_WORDS && at > 0) {
            if (at < cap)
                buf[at] = ' ';
            at++;
        }
        for (size_t k = 0; k < len; k++, at++)
            if (at < cap)
                buf[at] = w[k];
    }
    return at;
}
