/* fuzz_jsonl.c: JSON Lines datasets (src/data/jsonl.c) and the tokenizers
 * (src/nn/tokenizer.c).
 *
 * Input: one byte, then the rest. Byte & 3 = 0: the rest is a JSON Lines
 * file of a model of every key form (text of words, ids, FP32 pairs a
 * position, fixed values; classes, labels, a list a token, values), with
 * targets unless bit 2 is set. 1: the rest is text for the bytes
 * tokenizer and a words tokenizer (lowercasing when bit 2 is set). 2 or 3:
 * the rest is a vocabulary file (lowercasing when bit 2 is set). */
#include "fuzz.h"
#include "data/dl_data.h"

#include <math.h>

static dl_model_conf *conf;
static dl_tokenizer *bytes_tok, *words_tok[2];
static char vocab_path[600], fuzz_vocab[600];

/* The model of tests/unit/test_jsonl.c, its vocabulary in our folder. */
static const char model_fmt[] =
    "{\"name\": \"seq\", \"inputs\": ["
    " {\"name\": \"text\", \"datatype\": \"BYTES\", \"shape\": [1], \"max_length\": 6,"
    "  \"tokenizer\": {\"type\": \"words\", \"vocab\": \"%s\", \"lowercase\": true}},"
    " {\"name\": \"ids\", \"datatype\": \"INT64\", \"shape\": [-1], \"max_length\": 3},"
    " {\"name\": \"feat\", \"datatype\": \"FP32\", \"shape\": [-1, 2], \"max_length\": 3,"
    "  \"scaling\": {\"scale\": 1, \"mean\": 1, \"std\": 2}},"
    " {\"name\": \"x\", \"datatype\": \"FP32\", \"shape\": [2, 2]},"
    " {\"name\": \"k\", \"datatype\": \"UINT8\", \"shape\": [1]}],"
    " \"layers\": ["
    " {\"name\": \"emb\", \"type\": \"embedding\", \"inputs\": [\"text\"], \"num_embeddings\": 6,"
    "  \"dim\": 3},"
    " {\"name\": \"tags\", \"type\": \"dense\", \"units\": 3},"
    " {\"name\": \"emb2\", \"type\": \"embedding\", \"inputs\": [\"ids\"], \"num_embeddings\": 8,"
    "  \"dim\": 3},"
    " {\"name\": \"tsc\", \"type\": \"dense\", \"units\": 2},"
    " {\"name\": \"lm\", \"type\": \"dense\", \"inputs\": [\"emb2\"], \"units\": 8},"
    " {\"name\": \"fd\", \"type\": \"dense\", \"inputs\": [\"feat\"], \"units\": 2},"
    " {\"name\": \"flat\", \"type\": \"flatten\", \"inputs\": [\"x\"]},"
    " {\"name\": \"ke\", \"type\": \"embedding\", \"inputs\": [\"k\"], \"num_embeddings\": 256,"
    "  \"dim\": 2},"
    " {\"name\": \"kf\", \"type\": \"flatten\"},"
    " {\"name\": \"cat\", \"type\": \"concat\", \"inputs\": [\"flat\", \"kf\"]},"
    " {\"name\": \"cls\", \"type\": \"dense\", \"units\": 3},"
    " {\"name\": \"reg\", \"type\": \"dense\", \"inputs\": [\"cat\"], \"units\": 2}],"
    " \"outputs\": ["
    " {\"name\": \"tags\", \"loss\": \"softmax_cross_entropy\", \"labels\": [\"O\", \"N\", \"V\"]},"
    " {\"name\": \"path\", \"from\": \"tsc\", \"loss\": \"crf\", \"labels\": [\"p\", \"q\"]},"
    " {\"name\": \"lm\", \"loss\": \"next_token\", \"of\": \"ids\"},"
    " {\"name\": \"fd\", \"loss\": \"softmax_cross_entropy\"},"
    " {\"name\": \"cls\", \"loss\": \"softmax_cross_entropy\", \"labels\": [\"lo\", \"mid\", \"hi\"]},"
    " {\"name\": \"reg\", \"loss\": \"mse\"}]}";

static dl_tokenizer *tokenizer(dl_tok_kind kind, const char *vocab, bool lowercase)
{
    dl_tokenizer_conf tc = { .kind = kind, .vocab = (char *)vocab, .lowercase = lowercase };
    dl_tokenizer *t = NULL;
    dl_err err = {0};
    FZ_CHECK(dl_tokenizer_new(&tc, &t, &err) == DL_OK, "%s", err.msg);
    return t;
}

int LLVMFuzzerInitialize(int *argc, char ***argv)
{
    (void)argc;
    (void)argv;
    fz_quiet();
    snprintf(vocab_path, sizeof(vocab_path), "%s/vocab.txt", fz_tmpdir());
    snprintf(fuzz_vocab, sizeof(fuzz_vocab), "%s/fuzz_vocab.txt", fz_tmpdir());
    static const char vocab[] = "the\ncat\nsat\ndon't\ncaf\xc3\xa9\n";
    fz_write(vocab_path, vocab, sizeof(vocab) - 1);
    char json[sizeof(model_fmt) + 600];
    snprintf(json, sizeof(json), model_fmt, vocab_path);
    dl_err err = {0};
    FZ_CHECK(dl_model_conf_parse(json, strlen(json), "seq", &conf, &err) == DL_OK, "%s",
             err.msg);
    bytes_tok = tokenizer(DL_TOK_BYTES, NULL, false);
    words_tok[0] = tokenizer(DL_TOK_WORDS, vocab_path, false);
    words_tok[1] = tokenizer(DL_TOK_WORDS, vocab_path, true);
    return 0;
}

/* What a parsed dataset promises: rows of the model's width with lengths
 * in range and ids its tokenizer knows, classes in range or -1. */
static void check_dataset(const dl_dataset *ds, bool targets)
{
    int64_t dim = 0, tdim = 0;
    for (int k = 0; k < conf->ninputs; k++)
        dim += dl_input_width(&conf->inputs[k]);
    for (int k = 0; targets && k < conf->noutputs; k++)
        tdim += conf->outputs[k].tcols;
    FZ_CHECK(ds->n >= 1 && ds->dim == dim && ds->tdim == tdim, "n %lld dim %lld tdim %lld",
             (long long)ds->n, (long long)ds->dim, (long long)ds->tdim);
    FZ_CHECK(!targets || ds->t, "targets lost");
    fz_touch(ds->x, (size_t)(ds->n * ds->dim) * sizeof(float));
    for (int64_t i = 0; i < ds->n; i++) {
        const float *row = ds->x + i * dim;
        float len = row[0];       /* text: words of the 5-word vocabulary */
        FZ_CHECK(len >= 1 && len <= 6, "text length %g", (double)len);
        for (int64_t p = 0; p < 6; p++)
            FZ_CHECK(p < len ? row[1 + p] >= 1 && row[1 + p] < 7 : row[1 + p] == 0,
                     "text id %g at %lld", (double)row[1 + p], (long long)p);
        FZ_CHECK(row[7] >= 1 && row[7] <= 3, "ids length %g", (double)row[7]);
        FZ_CHECK(row[11] >= 1 && row[11] <= 3, "feat length %g", (double)row[11]);
        FZ_CHECK(row[22] >= 0 && row[22] <= 255, "uint8 %g", (double)row[22]);
    }
    for (int64_t i = 0; targets && i < ds->n; i++) {
        const float *t = ds->t + i * tdim;
        /* tags (6 columns, 3 classes), path (3, 2 tags: none skipped
         * within the length), fd (3, 2 classes), cls, reg (2) */
        for (int j = 0; j < 6; j++)
            FZ_CHECK(t[j] >= -1 && t[j] < 3, "tag %g", (double)t[j]);
        for (int j = 6; j < 12; j++)
            FZ_CHECK(t[j] >= -1 && t[j] < 2, "class %g", (double)t[j]);
        for (int j = 6; j < 6 + ds->x[i * dim + 7]; j++)
            FZ_CHECK(t[j] >= 0, "crf tag %g within the length", (double)t[j]);
        FZ_CHECK(t[12] >= 0 && t[12] < 3, "cls %g", (double)t[12]);
        FZ_CHECK(isfinite(t[13]) && isfinite(t[14]), "reg");
    }
}

static void fuzz_jsonl(const uint8_t *data, size_t size, bool targets)
{
    dl_dataset *ds = NULL;
    dl_err err = {0};
    dl_status st = dl_dataset_parse_jsonl((const char *)data, size, "fuzz.jsonl", conf, targets,
                                          &ds, &err);
    if (st != DL_OK) {
        fz_check_failure(st, &err);
        FZ_CHECK(ds == NULL, "a refused file came back");
        return;
    }
    check_dataset(ds, targets);
    dl_dataset_free(ds);
}

/* Tokenizes text whole and cut to a few ids: the same count, the same
 * first ids, each in [1, size). */
static void check_tokenize(const dl_tokenizer *t, const char *text, size_t len)
{
    enum { MAX = 4096 };
    static float all[MAX], few[3];
    int64_t n, m;
    dl_tokenize(t, text, len, all, MAX, &n);
    dl_tokenize(t, text, len, few, 3, &m);
    FZ_CHECK(n == m && n >= 0 && (size_t)n <= len, "counts %lld and %lld of %zu bytes",
             (long long)n, (long long)m, len);
    for (int64_t i = 0; i < n && i < MAX; i++)
        FZ_CHECK(all[i] >= 1 && all[i] < dl_tokenizer_size(t) && (i >= 3 || few[i] == all[i]),
                 "id %g at %lld", (double)all[i], (long long)i);
}

/* A vocabulary: refused with a message, or each line its own id. */
static void fuzz_vocab_file(const uint8_t *data, size_t size, bool lowercase)
{
    fz_write(fuzz_vocab, data, size);
    dl_tokenizer_conf tc = { .kind = DL_TOK_WORDS, .vocab = fuzz_vocab, .lowercase = lowercase };
    dl_tokenizer *t = NULL;
    dl_err err = {0};
    dl_status st = dl_tokenizer_new(&tc, &t, &err);
    if (st != DL_OK) {
        fz_check_failure(st, &err);
        FZ_CHECK(t == NULL, "a refused vocabulary came back");
        return;
    }
    const char *p = (const char *)data, *end = p + size;
    for (int64_t k = 0; p < end; k++) {
        const char *nl = memchr(p, '\n', (size_t)(end - p)), *e = nl ? nl : end;
        float id;
        int64_t n;
        dl_tokenize(t, p, (size_t)(e - p), &id, 1, &n);
        FZ_CHECK(n == 1 && id == (float)(k + 2), "line %lld: %lld tokens, id %g",
                 (long long)k + 1, (long long)n, (double)id);
        p = e + 1;
    }
    check_tokenize(t, (const char *)data, size);
    dl_tokenizer_free(t);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    if (size < 1)
        return 0;
    int mode = data[0] & 3;
    bool bit = data[0] & 4;
    /* A copy of exactly the rest, so that ASan sees any read past it. */
    uint8_t *rest = malloc(size);
    FZ_CHECK(rest != NULL, "out of memory");
    memcpy(rest, data + 1, size - 1);
    if (mode == 0) {
        fuzz_jsonl(rest, size - 1, !bit);
    } else if (mode == 1) {
        check_tokenize(bytes_tok, (const char *)rest, size - 1);
        check_tokenize(words_tok[bit], (const char *)rest, size - 1);
    } else {
        fuzz_vocab_file(rest, size - 1, bit);
    }
    free(rest);
    return 0;
}
