/* test_jsonl.c: JSON Lines datasets (src/data/jsonl.c): every key form of
 * the inputs (text, sequences flat or a list a position, fixed values) and
 * of the outputs (classes as indices or labels, a list a token, values),
 * packed rows and target columns, inputs-only files, and the refusals with
 * file:line. */
#define _POSIX_C_SOURCE 200809L
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <criterion/criterion.h>

#include "fixture.h"
#include "data/dl_data.h"

static char dir[64];
static dl_model_conf *conf;

/* Five inputs (text of words, ids, FP32 pairs a position scaled, a fixed
 * 2x2, one id) and six outputs: a class a word with labels, a crf over
 * the ids, next_token over them, a class a position of feat without
 * labels, a classifier with labels and a regression of two values. */
static const char model_json[] =
    "{'name': 'seq',"
    " 'inputs': [{'name': 'text', 'datatype': 'BYTES', 'shape': [1], 'max_length': 4,"
    "             'tokenizer': {'type': 'words', 'vocab': 'vocab.txt', 'lowercase': true}},"
    "            {'name': 'ids', 'datatype': 'INT64', 'shape': [-1], 'max_length': 3},"
    "            {'name': 'feat', 'datatype': 'FP32', 'shape': [-1, 2], 'max_length': 3,"
    "             'scaling': {'scale': 1, 'mean': 1, 'std': 2}},"
    "            {'name': 'x', 'datatype': 'FP32', 'shape': [2, 2]},"
    "            {'name': 'k', 'datatype': 'INT64', 'shape': [1]}],"
    " 'layers': [{'name': 'emb', 'type': 'embedding', 'inputs': ['text'],"
    "             'num_embeddings': 6, 'dim': 3},"
    "            {'name': 'tags', 'type': 'dense', 'units': 3},"
    "            {'name': 'emb2', 'type': 'embedding', 'inputs': ['ids'],"
    "             'num_embeddings': 8, 'dim': 3},"
    "            {'name': 'tsc', 'type': 'dense', 'units': 2},"
    "            {'name': 'lm', 'type': 'dense', 'inputs': ['emb2'], 'units': 8},"
    "            {'name': 'fd', 'type': 'dense', 'inputs': ['feat'], 'units': 2},"
    "            {'name': 'flat', 'type': 'flatten', 'inputs': ['x']},"
    "            {'name': 'ke', 'type': 'embedding', 'inputs': ['k'], 'num_embeddings': 5,"
    "             'dim': 2},"
    "            {'name': 'kf', 'type': 'flatten'},"
    "            {'name': 'cat', 'type': 'concat', 'inputs': ['flat', 'kf']},"
    "            {'name': 'cls', 'type': 'dense', 'units': 3},"
    "            {'name': 'reg', 'type': 'dense', 'inputs': ['cat'], 'units': 2}],"
    " 'outputs': [{'name': 'tags', 'loss': 'softmax_cross_entropy',"
    "              'labels': ['O', 'N', 'V']},"
    "             {'name': 'path', 'from': 'tsc', 'loss': 'crf', 'labels': ['p', 'q']},"
    "             {'name': 'lm', 'loss': 'next_token', 'of': 'ids'},"
    "             {'name': 'fd', 'loss': 'softmax_cross_entropy'},"
    "             {'name': 'cls', 'loss': 'softmax_cross_entropy',"
    "              'labels': ['lo', 'mid', 'hi']},"
    "             {'name': 'reg', 'loss': 'mse'}]}";

/* A sample's row: text (1 + 4), ids (1 + 3), feat (1 + 3 * 2), x (4), k (1). */
enum { DIM = 21, TDIM = 4 + 3 + 0 + 3 + 1 + 2 };

/* The two forms of one sample: lists a position and nested values, then
 * the flat forms, labels as strings, then as indices. */
#define LINE_A                                                                             \
    "{'text': 'The cat, SAT', 'ids': [1, 2], 'feat': [[1, 3], [5, 7]], 'x': [[1, 2], [3, 4]]," \
    " 'k': 4, 'tags': ['O', 'N', 'V'], 'path': ['q', 'p'], 'fd': [0, -1], 'cls': 'hi',"    \
    " 'reg': [0.5, -1]}"
#define LINE_B                                                                             \
    "{'reg': [[0.5], [-1]], 'cls': 2, 'fd': [0, -1], 'path': [1, 0], 'tags': [0, 1, 2],"   \
    " 'k': [4], 'x': [1, 2, 3, 4], 'feat': [1, 3, 5, 7], 'ids': [1, 2], 'text': 'the cat sat'}"

static const float row_a[DIM] = {3, 2, 3, 4, 0,   2, 1, 2, 0,   2, 0, 1, 2, 3, 0, 0,
                                 1, 2, 3, 4,   4};
static const float t_a[TDIM] = {0, 1, 2, -1,   1, 0, -1,   0, -1, -1,   2,   0.5f, -1};

static void setup(void)
{
    fx_tmpdir(dir, sizeof(dir), "jsonl");
    fx_write_text(fx_join(dir, "vocab.txt"), "the\ncat\nsat\n");
    const char *json = fx_dq(model_json);
    dl_err err = {0};
    cr_assert_eq(dl_model_conf_parse(json, strlen(json), fx_join(dir, "model.json"), &conf,
                                     &err), DL_OK, "%s", err.msg);
}

static void teardown(void)
{
    dl_model_conf_free(conf);
    fx_rmtree(dir);
}

TestSuite(jsonl, .init = setup, .fini = teardown, .timeout = 30);

/* Parses text (' for ") with targets or not; the status, *out and err. */
static dl_status parse(const char *text, bool targets, dl_dataset **out, dl_err *err)
{
    const char *t = fx_dq(text);
    return dl_dataset_parse_jsonl(t, strlen(t), "test.jsonl", conf, targets, out, err);
}

/* The refusal of text with a message holding want. */
static void refused(const char *text, const char *want)
{
    dl_dataset *ds = NULL;
    dl_err err = {0};
    cr_assert_eq(parse(text, true, &ds, &err), DL_ERR_INVALID, "accepted: %s", text);
    cr_expect_null(ds);
    cr_expect_not_null(strstr(err.msg, want), "message was: %s\n(wanted: %s)", err.msg, want);
}

Test(jsonl, every_key_form)
{
    dl_dataset *ds = NULL;
    dl_err err = {0};
    cr_assert_eq(parse(LINE_A "\n" LINE_B "\n", true, &ds, &err), DL_OK, "%s", err.msg);
    cr_assert_eq(ds->n, 2);
    cr_assert_eq(ds->dim, DIM);
    cr_assert_eq(ds->tdim, TDIM);
    cr_expect_null(ds->y);
    for (int i = 0; i < 2; i++)
        for (int j = 0; j < DIM; j++)
            cr_expect_eq(ds->x[i * DIM + j], row_a[j], "row %d value %d: %g, want %g", i, j,
                         (double)ds->x[i * DIM + j], (double)row_a[j]);
    for (int i = 0; i < 2; i++)
        for (int j = 0; j < TDIM; j++)
            cr_expect_eq(ds->t[i * TDIM + j], t_a[j], "row %d target %d: %g, want %g", i, j,
                         (double)ds->t[i * TDIM + j], (double)t_a[j]);
    dl_dataset_free(ds);
}

Test(jsonl, the_width_the_model_takes)
{
    int64_t w = 0;
    for (int k = 0; k < conf->ninputs; k++)
        w += dl_input_width(&conf->inputs[k]);
    cr_expect_eq(w, DIM);
    int64_t tc = 0;
    for (int k = 0; k < conf->noutputs; k++)
        tc += conf->outputs[k].tcols;
    cr_expect_eq(tc, TDIM);
}

Test(jsonl, file_read_a_line_at_a_time)
{
    const char *path = fx_join(dir, "train.jsonl");
    char text[4096];
    /* CRLF ends, a BOM, trailing blank lines */
    snprintf(text, sizeof(text), "\xef\xbb\xbf%s\r\n%s\n%s\n\n  \n", fx_dq(LINE_A),
             fx_dq(LINE_B), fx_dq(LINE_A));
    fx_write_text(path, text);
    dl_dataset *ds = NULL;
    dl_err err = {0};
    cr_assert_eq(dl_dataset_load_jsonl(path, conf, &ds, &err), DL_OK, "%s", err.msg);
    cr_assert_eq(ds->n, 3);
    cr_expect_arr_eq(ds->x + 2 * DIM, row_a, sizeof(row_a));
    cr_expect_arr_eq(ds->t + 2 * TDIM, t_a, sizeof(t_a));
    /* --limit's truncation keeps the rows */
    dl_dataset_truncate(ds, 1);
    cr_expect_arr_eq(ds->x, row_a, sizeof(row_a));
    dl_dataset_free(ds);
}

Test(jsonl, inputs_only_ignore_output_keys)
{
    dl_dataset *ds = NULL;
    dl_err err = {0};
    cr_assert_eq(parse("{'text': 'cat', 'ids': [3], 'feat': [0, 0], 'x': [0, 0, 0, 0], 'k': 0}\n"
                       LINE_A, false, &ds, &err), DL_OK, "%s", err.msg);
    cr_assert_eq(ds->n, 2);
    cr_expect_null(ds->t);
    cr_expect_eq(ds->tdim, 0);
    cr_expect_eq(ds->x[0], 1);
    cr_expect_eq(ds->x[1], 3);
    cr_expect_arr_eq(ds->x + DIM, row_a, sizeof(row_a));
    dl_dataset_free(ds);
    /* from a file too, the form --predict reads */
    const char *path = fx_join(dir, "in.jsonl");
    fx_write_text(path, fx_dq(LINE_B));
    cr_assert_eq(dl_dataset_load_jsonl_inputs(path, conf, &ds, &err), DL_OK, "%s", err.msg);
    cr_expect_arr_eq(ds->x, row_a, sizeof(row_a));
    dl_dataset_free(ds);
}

/* A line of LINE_A's keys with one replaced (key: value) or removed
 * (value NULL). */
static const char *with(const char *key, const char *value)
{
    static const char *const keys[] = {"text", "ids", "feat", "x", "k", "tags", "path", "fd",
                                       "cls", "reg"};
    static const char *const vals[] = {"'the cat sat'", "[1, 2]", "[[1, 3], [5, 7]]",
                                       "[1, 2, 3, 4]", "4", "[0, 1, 2]", "[1, 0]", "[0, 1]",
                                       "2", "[0.5, -1]"};
    static char line[1024];
    size_t n = (size_t)snprintf(line, sizeof(line), "{");
    for (size_t i = 0; i < sizeof(keys) / sizeof(keys[0]); i++) {
        bool mine = !strcmp(keys[i], key);
        if (mine && !value)
            continue;
        n += (size_t)snprintf(line + n, sizeof(line) - n, "%s'%s': %s", n > 1 ? ", " : "",
                              keys[i], mine ? value : vals[i]);
    }
    if (!strcmp(key, "extra"))
        n += (size_t)snprintf(line + n, sizeof(line) - n, ", %s", value);
    snprintf(line + n, sizeof(line) - n, "}");
    return line;
}

/* The refusal of `line` as line 2 of a file. */
static void refused2(const char *line, const char *want)
{
    char text[2048];
    snprintf(text, sizeof(text), "%s\n%s\n", LINE_A, line);
    refused(text, want);
}

Test(jsonl, the_fixture_line_is_good)
{
    dl_dataset *ds = NULL;
    dl_err err = {0};
    cr_assert_eq(parse(with("", NULL), true, &ds, &err), DL_OK, "%s", err.msg);
    dl_dataset_free(ds);
}

Test(jsonl, keys_refused_with_file_line)
{
    refused2(with("extra", "'colour': 1"), "test.jsonl:2: unknown key 'colour'");
    refused2(with("text", NULL), "test.jsonl:2: no key 'text' (input 'text')");
    refused2(with("cls", NULL), "test.jsonl:2: no key 'cls' (output 'cls')");
    refused2(with("extra", "'lm': [1]"), "test.jsonl:2: output 'lm' (next_token) takes no key");
    refused2("[1, 2]", "test.jsonl:2: not a JSON object");
    refused2("{'text': 'a',", "test.jsonl:2: column");
    refused2("{'text': 'a', 'text': 'b'}", "test.jsonl:2:");
}

Test(jsonl, inputs_refused_with_file_line)
{
    refused2(with("text", "'the cat sat on the mat'"),
             "test.jsonl:2: input 'text': 6 tokens, above max_length 4");
    refused2(with("text", "', ;'"), "test.jsonl:2: input 'text': the text has no tokens");
    refused2(with("text", "3"), "test.jsonl:2: input 'text' (BYTES) must be a string");
    refused2(with("ids", "[1, 2, 3, 4]"), "test.jsonl:2: input 'ids': 4 positions, above "
             "max_length 3");
    refused2(with("ids", "[]"), "test.jsonl:2: input 'ids': 0 positions");
    refused2(with("ids", "[1.5]"), "test.jsonl:2: input 'ids': value 1 (1.5) is not an id");
    refused2(with("ids", "3"), "test.jsonl:2: input 'ids' (a sequence) must be a list");
    refused2(with("feat", "[[1, 3], [5]]"), "test.jsonl:2: input 'feat': position 2 has 1 "
             "values, not 2");
    refused2(with("feat", "[1, 3, 5]"), "test.jsonl:2: input 'feat': 3 values, not a multiple");
    refused2(with("feat", "[[1, 2], [1, 2], [1, 2], [1, 2]]"),
             "test.jsonl:2: input 'feat': 4 positions, above max_length 3");
    refused2(with("x", "[1, 2, 3]"), "test.jsonl:2: input 'x': 3 values, the input takes 4");
    refused2(with("x", "[1, 2, 3, 'a']"), "test.jsonl:2: input 'x': value 4 is not a number");
    refused2(with("x", "[1, 2, 3, 1e39]"), "test.jsonl:2: input 'x': value 4 (1e+39) is out");
    refused2(with("x", "[[[[[[1]]]]], 2, 3, 4]"), "nested deeper");
    refused2(with("k", "16777217"), "test.jsonl:2: input 'k': value 1 (1.67772e+07) is not an id");
}

Test(jsonl, targets_refused_with_file_line)
{
    refused2(with("cls", "'top'"), "test.jsonl:2: output 'cls': 'top' is not one of its 3 "
             "labels");
    refused2(with("cls", "3"), "test.jsonl:2: output 'cls': not a class: give an index in "
             "[0, 3) or a label");
    refused2(with("cls", "-1"), "test.jsonl:2: output 'cls': not a class");
    refused2(with("tags", "[0, 1]"), "test.jsonl:2: output 'tags': 2 labels for the 3 tokens "
             "of input 'text'");
    refused2(with("tags", "[0, 'X', 1]"), "test.jsonl:2: output 'tags' token 2: 'X' is not "
             "one of its 3 labels");
    refused2(with("tags", "'O'"), "test.jsonl:2: output 'tags' (a class a token) must be a "
             "list");
    refused2(with("path", "[1, -1]"), "test.jsonl:2: output 'path' token 2: not a class: "
             "give an index in [0, 2) or a label");
    refused2(with("fd", "[0, 2]"), "test.jsonl:2: output 'fd' token 2: not a class: give an "
             "index in [0, 2) (-1: no label)");
    refused2(with("reg", "[1]"), "test.jsonl:2: output 'reg': 1 values, the output gives 2");
    refused2(with("reg", "[1, 'a']"), "test.jsonl:2: output 'reg': value 2 is not a number");
}

Test(jsonl, file_level_refusals)
{
    refused("", "test.jsonl: no samples");
    refused("\n  \n", "test.jsonl: no samples");
    refused(LINE_A "\n\n" LINE_A, "test.jsonl:2: blank line inside the data");
    dl_dataset *ds = NULL;
    dl_err err = {0};
    cr_expect_eq(dl_dataset_load_jsonl(fx_join(dir, "none.jsonl"), conf, &ds, &err),
                 DL_ERR_IO);
    cr_expect_not_null(strstr(err.msg, "none.jsonl"), "%s", err.msg);
}

Test(jsonl, a_missing_vocabulary_names_the_input)
{
    remove(fx_join(dir, "vocab.txt"));
    dl_dataset *ds = NULL;
    dl_err err = {0};
    cr_assert_neq(parse(LINE_A, true, &ds, &err), DL_OK);
    cr_expect_not_null(strstr(err.msg, "input 'text'"), "%s", err.msg);
    cr_expect_not_null(strstr(err.msg, "vocab.txt"), "%s", err.msg);
}

/* A model of next_token alone has no target columns: a targets buffer
 * all the same (graph models' losses want one), --limit safe. */
Test(jsonl, next_token_alone)
{
    const char *json = fx_dq(
        "{'name': 'lm', 'inputs': [{'name': 'text', 'datatype': 'BYTES', 'shape': [1],"
        " 'max_length': 8, 'tokenizer': {'type': 'bytes'}}],"
        " 'layers': [{'name': 'emb', 'type': 'embedding', 'num_embeddings': 256, 'dim': 4},"
        "            {'name': 'logits', 'type': 'dense', 'units': 256}],"
        " 'outputs': [{'name': 'logits', 'loss': 'next_token', 'of': 'text'}]}");
    dl_model_conf *lm = NULL;
    dl_err err = {0};
    cr_assert_eq(dl_model_conf_parse(json, strlen(json), "lm.json", &lm, &err), DL_OK, "%s",
                 err.msg);
    const char *text = "{\"text\": \"ab\\u0000c\"}\n{\"text\": \"hello\"}\n";
    dl_dataset *ds = NULL;
    cr_assert_eq(dl_dataset_parse_jsonl(text, strlen(text), "lm.jsonl", lm, true, &ds, &err),
                 DL_OK, "%s", err.msg);
    cr_expect_eq(ds->tdim, 0);
    cr_expect_not_null(ds->t);
    cr_expect_eq(ds->dim, 9);
    float want[9] = {3, 'a', 'b', 'c', 0, 0, 0, 0, 0};     /* the NUL byte skipped */
    cr_expect_arr_eq(ds->x, want, sizeof(want));
    dl_dataset_truncate(ds, 1);
    cr_expect_eq(ds->n, 1);
    dl_dataset_free(ds);
    dl_model_conf_free(lm);
}

/* Training data needs a graph model; a classic model reads inputs only. */
Test(jsonl, classic_models)
{
    dl_model_conf *c = NULL;
    const char *json = fx_dq(
        "{'name': 'tiny', 'input': {'name': 'pixels', 'shape': [2]},"
        " 'layers': [{'name': 'fc', 'type': 'dense', 'units': 3}],"
        " 'loss': 'softmax_cross_entropy', 'output': {'name': 'probs'}}");
    dl_err err = {0};
    cr_assert_eq(dl_model_conf_parse(json, strlen(json), "tiny.json", &c, &err), DL_OK, "%s",
                 err.msg);
    const char *text = "{\"pixels\": [1, 2], \"probs\": 1}";
    dl_dataset *ds = NULL;
    cr_expect_eq(dl_dataset_parse_jsonl(text, strlen(text), "t.jsonl", c, true, &ds, &err),
                 DL_ERR_INVALID);
    cr_expect_not_null(strstr(err.msg, "reads IDX or CSV"), "%s", err.msg);
    cr_assert_eq(dl_dataset_parse_jsonl(text, strlen(text), "t.jsonl", c, false, &ds, &err),
                 DL_OK, "%s", err.msg);
    cr_expect(ds->n == 1 && ds->dim == 2 && ds->x[1] == 2);
    dl_dataset_free(ds);
    dl_model_conf_free(c);
}

/* CSV has no lengths: a sequence model's CSV file is refused. */
Test(jsonl, csv_of_a_sequence_model)
{
    const char *path = fx_join(dir, "train.csv");
    fx_write_text(path, "1,2,3\n");
    dl_dataset *ds = NULL;
    dl_err err = {0};
    cr_expect_eq(dl_dataset_load_csv_model(path, conf, &ds, &err), DL_ERR_INVALID);
    cr_expect_not_null(strstr(err.msg, "input 'text' is a sequence: give JSON Lines"), "%s",
                       err.msg);
}
