/* test_tokenizer.c: the bytes and words tokenizers (the word rule, the
 * vocabulary's ids, lowercasing, unknown words, too many tokens), the
 * vocabulary file's errors with file:line, and packing a sequence sample
 * (dl_seq_pack_text, dl_seq_pack). */
#define _POSIX_C_SOURCE 200809L
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <criterion/criterion.h>

#include "fixture.h"

static char dir[64];

static void setup(void) { fx_tmpdir(dir, sizeof(dir), "tok"); }

static void teardown(void) { fx_rmtree(dir); }

TestSuite(tokenizer, .init = setup, .fini = teardown, .timeout = 30);

/* A words tokenizer over a vocabulary file holding `vocab`. */
static dl_tokenizer *words(const char *vocab, bool lowercase)
{
    char *path = strdup(fx_join(dir, "vocab.txt"));
    fx_write_text(path, vocab);
    dl_tokenizer_conf tc = { .kind = DL_TOK_WORDS, .vocab = path, .lowercase = lowercase };
    dl_tokenizer *t = NULL;
    dl_err err = {0};
    cr_assert_eq(dl_tokenizer_new(&tc, &t, &err), DL_OK, "%s", err.msg);
    free(path);
    return t;
}

/* dl_tokenizer_new's refusal of a vocabulary holding `vocab`, with a
 * message holding `want`. */
static void refused(const char *vocab, bool lowercase, const char *want)
{
    char path[600];
    snprintf(path, sizeof(path), "%s", fx_join(dir, "bad.txt"));
    fx_write_text(path, vocab);
    dl_tokenizer_conf tc = { .kind = DL_TOK_WORDS, .vocab = path, .lowercase = lowercase };
    dl_tokenizer *t = NULL;
    dl_err err = {0};
    cr_assert_eq(dl_tokenizer_new(&tc, &t, &err), DL_ERR_INVALID, "accepted %s", vocab);
    cr_expect_null(t);
    char full[700];
    snprintf(full, sizeof(full), "%s%s", path, want);
    cr_expect_not_null(strstr(err.msg, full), "message was: %s (wanted %s)", err.msg, full);
}

/* The ids of text as integers, n of them at most. */
static int64_t ids_of(const dl_tokenizer *t, const char *text, int64_t *out, int64_t max)
{
    float f[64];
    int64_t n;
    dl_tokenize(t, text, strlen(text), f, max < 64 ? max : 64, &n);
    for (int64_t i = 0; i < n && i < max; i++)
        out[i] = (int64_t)f[i];
    return n;
}

Test(tokenizer, bytes_are_their_values_nul_skipped)
{
    dl_tokenizer_conf tc = { .kind = DL_TOK_BYTES };
    dl_tokenizer *t = NULL;
    dl_err err = {0};
    cr_assert_eq(dl_tokenizer_new(&tc, &t, &err), DL_OK, "%s", err.msg);
    cr_expect_eq(dl_tokenizer_size(t), 256);
    const char text[] = "Ab\0\xff ";
    float ids[8];
    int64_t n;
    dl_tokenize(t, text, sizeof(text) - 1, ids, 8, &n);
    cr_assert_eq(n, 4, "the NUL byte is skipped: %lld ids", (long long)n);
    float want[] = {65, 98, 255, 32};
    for (int i = 0; i < 4; i++)
        cr_expect_eq(ids[i], want[i], "id %d: %g", i, (double)ids[i]);
    dl_tokenize(t, "hello", 5, ids, 2, &n);
    cr_expect_eq(n, 5, "the count goes past max");
    cr_expect(ids[0] == 'h' && ids[1] == 'e');
    dl_tokenizer_free(t);
}

Test(tokenizer, words_take_ids_from_their_line)
{
    dl_tokenizer *t = words("the\nlord\nsaid\ndon't\ncaf\xc3\xa9\n42\n", false);
    cr_expect_eq(dl_tokenizer_size(t), 8);
    int64_t ids[16];
    int64_t n = ids_of(t, "  the Lord said,don't--caf\xc3\xa9 42 x43 the", ids, 16);
    int64_t want[] = {2, DL_TOK_UNK, 4, 5, 6, 7, DL_TOK_UNK, 2};
    cr_assert_eq(n, 8, "%lld tokens", (long long)n);
    for (int i = 0; i < 8; i++)
        cr_expect_eq(ids[i], want[i], "token %d: %lld, want %lld", i, (long long)ids[i],
                     (long long)want[i]);
    cr_expect_eq(ids_of(t, " ,.;\t\n", ids, 16), 0, "separators alone give no token");
    dl_tokenizer_free(t);
}

Test(tokenizer, lowercase_folds_ascii_only)
{
    dl_tokenizer *t = words("the\nlord\n\xc3\x89t\xc3\xa9\n", true);
    int64_t ids[8];
    cr_assert_eq(ids_of(t, "THE LoRd \xc3\x89T\xc3\xa9 \xc3\x89t\xc3\xa9", ids, 8), 4);
    /* "ÉT" lowercases its ASCII T only: "Ét" matches, É stays. */
    cr_expect(ids[0] == 2 && ids[1] == 3 && ids[2] == 4 && ids[3] == 4,
              "%lld %lld %lld %lld", (long long)ids[0], (long long)ids[1],
              (long long)ids[2], (long long)ids[3]);
    dl_tokenizer_free(t);
}

Test(tokenizer, case_kept_without_lowercase)
{
    dl_tokenizer *t = words("The\nthe\n", false);
    int64_t ids[4];
    cr_assert_eq(ids_of(t, "the The THE", ids, 4), 3);
    cr_expect(ids[0] == 3 && ids[1] == 2 && ids[2] == DL_TOK_UNK);
    dl_tokenizer_free(t);
}

Test(tokenizer, crlf_and_no_final_newline)
{
    dl_tokenizer *t = words("a\r\nb\r\nc", false);
    int64_t ids[4];
    cr_expect_eq(dl_tokenizer_size(t), 5);
    cr_assert_eq(ids_of(t, "c b a", ids, 4), 3);
    cr_expect(ids[0] == 4 && ids[1] == 3 && ids[2] == 2);
    dl_tokenizer_free(t);
}

/* Many words, each found at its own id: the table, not a scan. */
Test(tokenizer, large_vocabulary)
{
    enum { N = 50000 };
    char *v = malloc(N * 8), *p = v;
    for (int i = 0; i < N; i++)
        p += sprintf(p, "w%d\n", i);
    dl_tokenizer *t = words(v, false);
    free(v);
    cr_expect_eq(dl_tokenizer_size(t), N + 2);
    for (int i = 0; i < N; i += 997) {
        char w[16];
        int64_t id;
        snprintf(w, sizeof(w), "w%d", i);
        cr_assert_eq(ids_of(t, w, &id, 1), 1);
        cr_expect_eq(id, i + 2, "%s: %lld", w, (long long)id);
    }
    int64_t id;
    ids_of(t, "w50000", &id, 1);
    cr_expect_eq(id, DL_TOK_UNK);
    dl_tokenizer_free(t);
}

Test(tokenizer, vocabulary_errors_name_file_and_line)
{
    refused("", false, ": no words");
    refused("a\n\nb\n", false, ":2: an empty line");
    refused("a\nb\na\n", false, ":3: 'a' is there already (line 1)");
    refused("a\nnew york\n", false, ":2: byte 0x20 splits the word");
    refused("a\nb,c\n", false, ":2: byte 0x2c splits the word");
    refused("a\nThe\n", true, ":2: 'The' has capitals");
    refused("x\ny\n\n", false, ":3: an empty line");
}

Test(tokenizer, missing_vocabulary_and_bad_conf)
{
    dl_tokenizer_conf tc = { .kind = DL_TOK_WORDS, .vocab = "/nonexistent/vocab.txt" };
    dl_tokenizer *t = NULL;
    dl_err err = {0};
    cr_expect_neq(dl_tokenizer_new(&tc, &t, &err), DL_OK);
    cr_expect_null(t);
    cr_expect_not_null(strstr(err.msg, "/nonexistent/vocab.txt"), "%s", err.msg);
    tc = (dl_tokenizer_conf){ .kind = DL_TOK_NONE };
    cr_expect_eq(dl_tokenizer_new(&tc, &t, &err), DL_ERR_INVALID);
    dl_tokenizer_free(NULL);
}

/* A BYTES input of max_length 4. */
static dl_input_conf text_input(void)
{
    dl_input_conf ic = { .name = "text", .ndim = 1, .shape = {4}, .dim = 4,
                         .dtype = DL_IN_BYTES, .max_length = 4,
                         .tok = { .kind = DL_TOK_BYTES } };
    return ic;
}

Test(tokenizer, pack_text)
{
    dl_input_conf ic = text_input();
    dl_tokenizer *t = NULL;
    dl_err err = {0};
    cr_assert_eq(dl_tokenizer_new(&ic.tok, &t, &err), DL_OK);
    float row[5] = {9, 9, 9, 9, 9};
    cr_assert_eq(dl_seq_pack_text(&ic, t, "hi", 2, row, &err), DL_OK, "%s", err.msg);
    float want[5] = {2, 'h', 'i', 0, 0};
    cr_expect_arr_eq(row, want, sizeof(want));
    cr_assert_eq(dl_seq_pack_text(&ic, t, "abcd", 4, row, &err), DL_OK);
    cr_expect(row[0] == 4 && row[4] == 'd');
    cr_expect_eq(dl_seq_pack_text(&ic, t, "abcde", 5, row, &err), DL_ERR_INVALID);
    cr_expect_str_eq(err.msg, "input 'text': 5 tokens, above max_length 4");
    cr_expect_eq(dl_seq_pack_text(&ic, t, "\0", 1, row, &err), DL_ERR_INVALID);
    cr_expect_str_eq(err.msg, "input 'text': the text has no tokens");
    dl_tokenizer_free(t);
}

Test(tokenizer, pack_values)
{
    /* [-1, 2] of max_length 3: 1 + 6 floats a sample. */
    dl_input_conf ic = { .name = "feat", .ndim = 2, .shape = {3, 2}, .dim = 6,
                         .max_length = 3 };
    cr_assert_eq(dl_input_width(&ic), 7);
    float v[] = {1, 2, 3, 4}, row[7] = {9, 9, 9, 9, 9, 9, 9};
    dl_err err = {0};
    cr_assert_eq(dl_seq_pack(&ic, v, 2, row, &err), DL_OK, "%s", err.msg);
    float want[7] = {2, 1, 2, 3, 4, 0, 0};
    cr_expect_arr_eq(row, want, sizeof(want));
    cr_expect_eq(dl_seq_pack(&ic, v, 0, row, &err), DL_ERR_INVALID);
    cr_expect_eq(dl_seq_pack(&ic, v, 4, row, &err), DL_ERR_INVALID);
    cr_expect_not_null(strstr(err.msg, "input 'feat': 4 positions"), "%s", err.msg);
}
