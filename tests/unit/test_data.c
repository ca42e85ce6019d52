/* test_data.c: datasets (IDX plain and gzip'd, CSV, data folders), their
 * error messages, the epoch shuffle, rank sharding and gathering. */
#define _POSIX_C_SOURCE 200809L
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>
#include <zlib.h>
#include <criterion/criterion.h>

#include "fixture.h"
#include "data/dl_data.h"

#ifndef FASHION_DIR
#define FASHION_DIR "/usr/share/datasets/fashion-mnist"
#endif

static char dir[64];

static void setup(void) { fx_tmpdir(dir, sizeof(dir), "data"); }

static void teardown(void) { fx_rmtree(dir); }

TestSuite(data, .init = setup, .fini = teardown, .timeout = 60);

/* ---- fixtures ------------------------------------------------------- */

/* Path of `name` in the temp folder (fx_join's rotating buffers). */
static const char *fx(const char *name) { return fx_join(dir, name); }

static void write_bytes(const char *path, bool gz, const void *buf,
                        size_t len)
{
    if (gz) {
        gzFile f = gzopen(path, "wb");
        cr_assert_not_null(f);
        cr_assert_eq(gzwrite(f, buf, (unsigned)len), (int)len);
        cr_assert_eq(gzclose(f), Z_OK);
    } else {
        fx_write(path, buf, len);
    }
}

/* An IDX file in memory: magic, big-endian dims, then `len` payload bytes
 * (which need not match the dims: that is what the error tests want).
 * The result is new. */
static unsigned char *make_idx(uint32_t magic, int nd, const uint32_t *dims,
                               const unsigned char *data, size_t len,
                               size_t *total)
{
    *total = 4 + 4 * (size_t)nd + len;
    unsigned char *b = malloc(*total);
    cr_assert_not_null(b);
    for (int i = 0; i <= nd; i++) {
        uint32_t v = i == 0 ? magic : dims[i - 1];
        b[4 * i] = (unsigned char)(v >> 24);
        b[4 * i + 1] = (unsigned char)(v >> 16);
        b[4 * i + 2] = (unsigned char)(v >> 8);
        b[4 * i + 3] = (unsigned char)v;
    }
    if (len)
        memcpy(b + 4 + 4 * nd, data, len);
    return b;
}

static void write_idx(const char *path, bool gz, uint32_t magic, int nd,
                      const uint32_t *dims, const unsigned char *data,
                      size_t len)
{
    size_t total;
    unsigned char *b = make_idx(magic, nd, dims, data, len, &total);
    write_bytes(path, gz, b, total);
    free(b);
}

/* Fixture contents, recomputable from the index alone. */
static unsigned char pixel(int64_t k)
{
    return (unsigned char)((k * 7 + 3) % 256);
}

static unsigned char label(int64_t i)
{
    return (unsigned char)(i % 10);
}

/* n images of h x w (pixel(k) at flat index k) and n labels (label(i)). */
static void write_mnist(const char *images, const char *labels, bool gz,
                        uint32_t n, uint32_t h, uint32_t w)
{
    size_t len = (size_t)n * h * w;
    unsigned char *px = malloc(len), *lb = malloc(n);
    cr_assert(px && lb);
    for (size_t k = 0; k < len; k++)
        px[k] = pixel((int64_t)k);
    for (uint32_t i = 0; i < n; i++)
        lb[i] = label(i);
    uint32_t idims[3] = {n, h, w};
    write_idx(images, gz, 0x803, 3, idims, px, len);
    if (labels)
        write_idx(labels, gz, 0x801, 1, &n, lb, n);
    free(px);
    free(lb);
}

/* Checks the code and that the message names the file and says why. */
#define expect_error(st, err, want, file, word)                             \
    do {                                                                    \
        cr_assert_eq((st), (want), "status %d, message: %s", (int)(st),     \
                     (err).msg);                                            \
        cr_expect_not_null(strstr((err).msg, (file)),                       \
                           "no '%s' in: %s", (file), (err).msg);            \
        cr_expect_not_null(strstr((err).msg, (word)),                       \
                           "no '%s' in: %s", (word), (err).msg);            \
    } while (0)

/* ---- IDX ------------------------------------------------------------ */

static void check_mnist(const dl_dataset *ds, int64_t n, int64_t h, int64_t w,
                        const dl_scaling *sc)
{
    cr_assert_eq(ds->n, n);
    cr_assert_eq(ds->ndim, 3);
    cr_assert_eq(ds->shape[0], 1);
    cr_assert_eq(ds->shape[1], h);
    cr_assert_eq(ds->shape[2], w);
    cr_assert_eq(ds->dim, h * w);
    for (int64_t k = 0; k < n * h * w; k++) {
        float raw = pixel(k);
        float want = sc ? (raw * sc->scale - sc->mean) / sc->std : raw;
        cr_assert_float_eq(ds->x[k], want, 1e-6, "x[%lld]", (long long)k);
    }
    cr_assert_not_null(ds->y);
    for (int64_t i = 0; i < n; i++)
        cr_assert_eq(ds->y[i], label(i));
}

Test(data, idx_plain_round_trip)
{
    write_mnist(fx("img"), fx("lab"), false, 5, 3, 4);
    dl_dataset *ds = NULL;
    dl_err err = {0};
    cr_assert_eq(dl_dataset_load_idx(fx("img"), fx("lab"), NULL, &ds, &err),
                 DL_OK, "%s", err.msg);
    check_mnist(ds, 5, 3, 4, NULL);
    dl_dataset_free(ds);
}

Test(data, idx_gzip_round_trip_with_scaling)
{
    write_mnist(fx("img.gz"), fx("lab.gz"), true, 7, 2, 5);
    dl_scaling sc = {1.0f / 255.0f, 0.5f, 0.25f};
    dl_dataset *ds = NULL;
    dl_err err = {0};
    cr_assert_eq(dl_dataset_load_idx(fx("img.gz"), fx("lab.gz"), &sc, &ds,
                                     &err), DL_OK, "%s", err.msg);
    check_mnist(ds, 7, 2, 5, &sc);
    dl_dataset_free(ds);
}

Test(data, idx_gzip_detected_by_content_not_name)
{
    write_mnist(fx("img.raw"), NULL, true, 2, 2, 2);
    dl_dataset *ds = NULL;
    dl_err err = {0};
    cr_assert_eq(dl_dataset_load_idx(fx("img.raw"), NULL, NULL, &ds, &err),
                 DL_OK, "%s", err.msg);
    cr_expect_eq(ds->n, 2);
    cr_expect_null(ds->y);
    cr_expect_float_eq(ds->x[5], pixel(5), 0);
    dl_dataset_free(ds);
}

Test(data, idx_sample_shapes)
{
    unsigned char px[2 * 3 * 4 * 5] = {0};
    uint32_t d1[2] = {2, 6}, d3[4] = {2, 3, 4, 5};
    write_idx(fx("vec"), false, 0x802, 2, d1, px, 12);
    write_idx(fx("chw"), false, 0x804, 4, d3, px, sizeof(px));
    dl_dataset *ds = NULL;
    dl_err err = {0};

    cr_assert_eq(dl_dataset_load_idx(fx("vec"), NULL, NULL, &ds, &err), DL_OK,
                 "%s", err.msg);
    cr_expect_eq(ds->ndim, 1);
    cr_expect_eq(ds->shape[0], 6);
    cr_expect_eq(ds->dim, 6);
    dl_dataset_free(ds);

    cr_assert_eq(dl_dataset_load_idx(fx("chw"), NULL, NULL, &ds, &err), DL_OK,
                 "%s", err.msg);
    cr_expect_eq(ds->ndim, 3);
    cr_expect(ds->shape[0] == 3 && ds->shape[1] == 4 && ds->shape[2] == 5);
    cr_expect_eq(ds->dim, 60);
    dl_dataset_free(ds);
}

Test(data, idx_rejects_bad_image_magic)
{
    unsigned char px[4] = {0};
    uint32_t dims[3] = {1, 2, 2};
    write_idx(fx("bad-images"), false, 0x903, 3, dims, px, 4);
    dl_dataset *ds = NULL;
    dl_err err = {0};
    dl_status st = dl_dataset_load_idx(fx("bad-images"), NULL, NULL, &ds, &err);
    expect_error(st, err, DL_ERR_INVALID, "bad-images", "magic 0x00000903");
    cr_expect_null(ds);
}

Test(data, idx_rejects_bad_label_magic)
{
    write_mnist(fx("img"), NULL, false, 2, 2, 2);
    unsigned char lb[2] = {0, 1};
    uint32_t n = 2;
    write_idx(fx("bad-labels"), false, 0x803, 1, &n, lb, 2);
    dl_dataset *ds = NULL;
    dl_err err = {0};
    dl_status st = dl_dataset_load_idx(fx("img"), fx("bad-labels"), NULL, &ds,
                                       &err);
    expect_error(st, err, DL_ERR_INVALID, "bad-labels", "magic");
    cr_expect_null(ds);
}

Test(data, idx_rejects_truncated_data)
{
    unsigned char px[7] = {0};
    uint32_t dims[3] = {2, 2, 2};
    write_idx(fx("short-images.gz"), true, 0x803, 3, dims, px, 7);
    dl_dataset *ds = NULL;
    dl_err err = {0};
    dl_status st = dl_dataset_load_idx(fx("short-images.gz"), NULL, NULL, &ds,
                                       &err);
    expect_error(st, err, DL_ERR_INVALID, "short-images.gz", "truncated");
}

Test(data, idx_rejects_trailing_bytes)
{
    unsigned char px[9] = {0};
    uint32_t dims[3] = {2, 2, 2};
    write_idx(fx("long-images"), false, 0x803, 3, dims, px, 9);
    dl_dataset *ds = NULL;
    dl_err err = {0};
    dl_status st = dl_dataset_load_idx(fx("long-images"), NULL, NULL, &ds,
                                       &err);
    expect_error(st, err, DL_ERR_INVALID, "long-images", "trailing");
}

Test(data, idx_rejects_count_mismatch)
{
    write_mnist(fx("img"), NULL, false, 3, 2, 2);
    unsigned char lb[4] = {0};
    uint32_t n = 4;
    write_idx(fx("four-labels"), false, 0x801, 1, &n, lb, 4);
    dl_dataset *ds = NULL;
    dl_err err = {0};
    dl_status st = dl_dataset_load_idx(fx("img"), fx("four-labels"), NULL, &ds,
                                       &err);
    expect_error(st, err, DL_ERR_INVALID, "four-labels", "mismatch");
}

Test(data, idx_rejects_short_header_and_bad_dims)
{
    dl_dataset *ds = NULL;
    dl_err err = {0};
    write_bytes(fx("tiny"), false, "\0\0\x08", 3);
    expect_error(dl_dataset_load_idx(fx("tiny"), NULL, NULL, &ds, &err), err,
                 DL_ERR_INVALID, "tiny", "too short");
    write_bytes(fx("half-header"), false, "\0\0\x08\x03\0\0\0\x01", 8);
    expect_error(dl_dataset_load_idx(fx("half-header"), NULL, NULL, &ds, &err),
                 err, DL_ERR_INVALID, "half-header", "too short");
    write_bytes(fx("empty"), false, "", 0);
    expect_error(dl_dataset_load_idx(fx("empty"), NULL, NULL, &ds, &err), err,
                 DL_ERR_INVALID, "empty", "too short");

    uint32_t zero[3] = {2, 0, 2};
    write_idx(fx("zero-dim"), false, 0x803, 3, zero, NULL, 0);
    expect_error(dl_dataset_load_idx(fx("zero-dim"), NULL, NULL, &ds, &err),
                 err, DL_ERR_INVALID, "zero-dim", "zero");

    /* 2^96 values: must be refused without overflowing or allocating. */
    uint32_t huge[4] = {0xffffffffu, 0xffffffffu, 0xffffffffu, 0xffffffffu};
    write_idx(fx("huge"), false, 0x804, 4, huge, NULL, 0);
    expect_error(dl_dataset_load_idx(fx("huge"), NULL, NULL, &ds, &err), err,
                 DL_ERR_INVALID, "huge", "absurd");

    uint32_t big[3] = {0xffffffffu, 0xffffffu, 1};
    write_idx(fx("big"), false, 0x803, 3, big, NULL, 0);
    expect_error(dl_dataset_load_idx(fx("big"), NULL, NULL, &ds, &err), err,
                 DL_ERR_INVALID, "big", "truncated");
    cr_expect_null(ds);
}

Test(data, idx_rejects_corrupt_gzip)
{
    write_mnist(fx("img.gz"), NULL, true, 50, 8, 8);
    size_t len;
    char *buf = fx_read(fx("img.gz"), &len);
    cr_assert_gt(len, 40);

    /* Flipped bits in the deflate data: bad codes or a failed CRC. */
    for (size_t i = 20; i < len - 8; i += 3)
        buf[i] = (char)(buf[i] ^ 0x5a);
    write_bytes(fx("corrupt-images.gz"), false, buf, len);
    dl_dataset *ds = NULL;
    dl_err err = {0};
    dl_status st = dl_dataset_load_idx(fx("corrupt-images.gz"), NULL, NULL,
                                       &ds, &err);
    expect_error(st, err, DL_ERR_INVALID, "corrupt-images.gz", "gzip");

    /* A stream cut in half ends early: zlib must not call that clean. */
    free(buf);
    buf = fx_read(fx("img.gz"), &len);
    write_bytes(fx("cut-images.gz"), false, buf, len / 2);
    st = dl_dataset_load_idx(fx("cut-images.gz"), NULL, NULL, &ds, &err);
    expect_error(st, err, DL_ERR_INVALID, "cut-images.gz", "gzip");
    cr_expect_null(ds);
    free(buf);
}

Test(data, idx_missing_file_is_io_error)
{
    dl_dataset *ds = NULL;
    dl_err err = {0};
    dl_status st = dl_dataset_load_idx(fx("nope-images"), NULL, NULL, &ds,
                                       &err);
    expect_error(st, err, DL_ERR_IO, "nope-images", "No such file");
}

Test(data, rejects_bad_scaling)
{
    write_mnist(fx("img"), NULL, false, 1, 1, 1);
    dl_scaling sc = {1.0f, 0.0f, 0.0f};
    dl_dataset *ds = NULL;
    dl_err err = {0};
    cr_expect_eq(dl_dataset_load_idx(fx("img"), NULL, &sc, &ds, &err),
                 DL_ERR_INVALID);
    cr_expect_not_null(strstr(err.msg, "std"), "%s", err.msg);
    fx_write_text(fx("a.csv"), "1,2\n");
    cr_expect_eq(dl_dataset_load_csv(fx("a.csv"), 1, true, &sc, &ds, &err),
                 DL_ERR_INVALID);
    cr_expect_null(ds);
}

/* ---- CSV ------------------------------------------------------------ */

static dl_status load_csv_text(const char *name, const char *text,
                               int64_t dim, bool has_label, dl_dataset **ds,
                               dl_err *err)
{
    fx_write_text(fx(name), text);
    return dl_dataset_load_csv(fx(name), dim, has_label, NULL, ds, err);
}

Test(data, csv_round_trip)
{
    const char *text = "label,a,b,c\r\n"
                       "3, 0.5,-2,1e2\r\n"
                       "0,7,8.25,  9 \n"
                       "12,-0,+4,.5\n"
                       "\n  \n";
    dl_dataset *ds = NULL;
    dl_err err = {0};
    cr_assert_eq(load_csv_text("data.csv", text, 3, true, &ds, &err), DL_OK,
                 "%s", err.msg);
    cr_assert_eq(ds->n, 3);
    cr_assert_eq(ds->ndim, 1);
    cr_assert_eq(ds->shape[0], 3);
    cr_assert_eq(ds->dim, 3);
    float want[9] = {0.5f, -2, 100, 7, 8.25f, 9, 0, 4, 0.5f};
    for (int i = 0; i < 9; i++)
        cr_expect_float_eq(ds->x[i], want[i], 0, "x[%d] = %g", i,
                           (double)ds->x[i]);
    cr_expect(ds->y[0] == 3 && ds->y[1] == 0 && ds->y[2] == 12);
    dl_dataset_free(ds);
}

Test(data, csv_parses_from_memory_within_its_length)
{
    /* The text is not NUL-terminated: the last field is "4", not "45". */
    const char text[] = {'1', ',', '2', '\n', '3', ',', '4', '5'};
    dl_dataset *ds = NULL;
    dl_err err = {0};
    cr_assert_eq(dl_dataset_parse_csv(text, 7, "mem.csv", 1, true, NULL, &ds, &err), DL_OK,
                 "%s", err.msg);
    cr_assert_eq(ds->n, 2);
    cr_expect(ds->y[0] == 1 && ds->y[1] == 3);
    cr_expect_float_eq(ds->x[0], 2, 0);
    cr_expect_float_eq(ds->x[1], 4, 0);
    dl_dataset_free(ds);

    cr_assert_eq(dl_dataset_parse_csv("1,x\n", 4, "mem.csv", 1, true, NULL, &ds, &err),
                 DL_ERR_INVALID);
    cr_expect_null(ds);
    cr_expect_not_null(strstr(err.msg, "mem.csv:1: field 2 is not a number"), "%s", err.msg);
}

Test(data, csv_scaling_and_no_labels)
{
    fx_write_text(fx("f.csv"), "10,20\n30,40");
    dl_scaling sc = {0.5f, 1.0f, 2.0f};
    dl_dataset *ds = NULL;
    dl_err err = {0};
    cr_assert_eq(dl_dataset_load_csv(fx("f.csv"), 2, false, &sc, &ds, &err),
                 DL_OK, "%s", err.msg);
    cr_assert_eq(ds->n, 2);
    cr_expect_null(ds->y);
    float want[4] = {2, 4.5f, 7, 9.5f};
    for (int i = 0; i < 4; i++)
        cr_expect_float_eq(ds->x[i], want[i], 1e-6);
    dl_dataset_free(ds);
}

Test(data, csv_rejects_wrong_field_count)
{
    dl_dataset *ds = NULL;
    dl_err err = {0};
    dl_status st = load_csv_text("data.csv", "1,2,3,4\n1,2,3,4\n5,6,7\n",
                                 3, true, &ds, &err);
    expect_error(st, err, DL_ERR_INVALID, "data.csv:3: ",
                 "expected 4 fields, found 3");
    st = load_csv_text("more.csv", "h\n1,2,3,4\n1,2,3,4,5,6\n", 3, true, &ds,
                       &err);
    expect_error(st, err, DL_ERR_INVALID, "more.csv:3: ", "found 6");
    cr_expect_null(ds);
}

Test(data, csv_rejects_non_numeric)
{
    dl_dataset *ds = NULL;
    dl_err err = {0};
    dl_status st = load_csv_text("data.csv", "1,2,3\n1,x2,3\n", 2, true, &ds,
                                 &err);
    expect_error(st, err, DL_ERR_INVALID, "data.csv:2: ", "not a number");
    cr_expect_not_null(strstr(err.msg, "x2"), "%s", err.msg);
    st = load_csv_text("empty-field.csv", "1,,3\n", 2, true, &ds, &err);
    expect_error(st, err, DL_ERR_INVALID, "empty-field.csv:1: ", "field 2");
    st = load_csv_text("inf.csv", "1,2,inf\n", 2, true, &ds, &err);
    expect_error(st, err, DL_ERR_INVALID, "inf.csv:1: ", "not a number");
    st = load_csv_text("junk.csv", "1,2,3abc\n", 2, true, &ds, &err);
    expect_error(st, err, DL_ERR_INVALID, "junk.csv:1: ", "not a number");
    cr_expect_null(ds);
}

Test(data, csv_rejects_bad_labels)
{
    dl_dataset *ds = NULL;
    dl_err err = {0};
    dl_status st = load_csv_text("neg.csv", "1,2\n-1,2\n", 1, true, &ds, &err);
    expect_error(st, err, DL_ERR_INVALID, "neg.csv:2: ", "label");
    st = load_csv_text("frac.csv", "1.5,2\n", 1, true, &ds, &err);
    expect_error(st, err, DL_ERR_INVALID, "frac.csv:1: ", "label");
    st = load_csv_text("word.csv", "1,2\ncat,2\n", 1, true, &ds, &err);
    expect_error(st, err, DL_ERR_INVALID, "word.csv:2: ", "label");
    cr_expect_null(ds);
}

Test(data, csv_rejects_empty_and_inner_blank_lines)
{
    dl_dataset *ds = NULL;
    dl_err err = {0};
    dl_status st = load_csv_text("empty.csv", "", 2, true, &ds, &err);
    expect_error(st, err, DL_ERR_INVALID, "empty.csv", "no samples");
    st = load_csv_text("header-only.csv", "label,a,b\n\n", 2, true, &ds, &err);
    expect_error(st, err, DL_ERR_INVALID, "header-only.csv", "no samples");
    st = load_csv_text("gap.csv", "1,2,3\n\n1,2,3\n", 2, true, &ds, &err);
    expect_error(st, err, DL_ERR_INVALID, "gap.csv:2: ", "blank");
    st = load_csv_text("ok.csv", "1,2,3\n", 0, true, &ds, &err);
    expect_error(st, err, DL_ERR_INVALID, "ok.csv", "dim");
    st = dl_dataset_load_csv(fx("missing.csv"), 2, true, NULL, &ds, &err);
    expect_error(st, err, DL_ERR_IO, "missing.csv", "No such file");
    cr_expect_null(ds);
}

Test(data, csv_large_file)
{
    /* 6000 MNIST-like lines of 785 integer fields, about 12 MB. */
    const int64_t n = 6000, dim = 784;
    size_t cap = (size_t)n * (dim + 1) * 4 + 64, len = 0;
    char *text = malloc(cap);
    cr_assert_not_null(text);
    len += (size_t)sprintf(text, "label");
    for (int64_t j = 0; j < dim; j++)
        len += (size_t)sprintf(text + len, ",p%lld", (long long)j);
    text[len++] = '\n';
    for (int64_t i = 0; i < n; i++) {
        len += (size_t)sprintf(text + len, "%d", label(i));
        for (int64_t j = 0; j < dim; j++)
            len += (size_t)sprintf(text + len, ",%d", pixel(i * dim + j));
        text[len++] = '\n';
    }
    text[len] = '\0';
    dl_dataset *ds = NULL;
    dl_err err = {0};
    cr_assert_eq(load_csv_text("big.csv", text, dim, true, &ds, &err), DL_OK,
                 "%s", err.msg);
    free(text);
    cr_assert_eq(ds->n, n);
    for (int64_t k = 0; k < n * dim; k++)
        if (ds->x[k] != pixel(k))
            cr_assert_fail("x[%lld] = %g", (long long)k, (double)ds->x[k]);
    for (int64_t i = 0; i < n; i++)
        cr_assert_eq(ds->y[i], label(i));
    dl_dataset_free(ds);
}

/* ---- data folder ---------------------------------------------------- */

Test(data, dir_prefers_gzip)
{
    write_mnist(fx("train-images-idx3-ubyte.gz"),
                fx("train-labels-idx1-ubyte.gz"), true, 4, 2, 3);
    /* The plain pair has another count: loading it would show. */
    write_mnist(fx("train-images-idx3-ubyte"), fx("train-labels-idx1-ubyte"),
                false, 9, 2, 3);
    write_mnist(fx("t10k-images-idx3-ubyte"), fx("t10k-labels-idx1-ubyte"),
                false, 3, 2, 3);
    dl_dataset *ds = NULL;
    dl_err err = {0};
    cr_assert_eq(dl_dataset_load_dir(dir, "train", 6, NULL, &ds, &err), DL_OK,
                 "%s", err.msg);
    check_mnist(ds, 4, 2, 3, NULL);
    dl_dataset_free(ds);
    cr_assert_eq(dl_dataset_load_dir(dir, "test", 0, NULL, &ds, &err), DL_OK,
                 "%s", err.msg);
    check_mnist(ds, 3, 2, 3, NULL);
    dl_dataset_free(ds);
}

Test(data, dir_checks_dim_and_split)
{
    write_mnist(fx("train-images-idx3-ubyte"), fx("train-labels-idx1-ubyte"),
                false, 2, 2, 3);
    dl_dataset *ds = NULL;
    dl_err err = {0};
    dl_status st = dl_dataset_load_dir(dir, "train", 784, NULL, &ds, &err);
    expect_error(st, err, DL_ERR_INVALID, "train-images-idx3-ubyte", "784");
    st = dl_dataset_load_dir(dir, "valid", 6, NULL, &ds, &err);
    expect_error(st, err, DL_ERR_INVALID, "valid", "split");
    /* Half a pair is reported, not skipped. */
    st = dl_dataset_load_dir(dir, "test", 6, NULL, &ds, &err);
    expect_error(st, err, DL_ERR_IO, dir, "t10k-images-idx3-ubyte");
    write_mnist(fx("t10k-images-idx3-ubyte"), NULL, false, 2, 2, 3);
    st = dl_dataset_load_dir(dir, "test", 6, NULL, &ds, &err);
    expect_error(st, err, DL_ERR_IO, "t10k-images-idx3-ubyte", "labels");
    cr_expect_null(ds);
}

Test(data, dir_falls_back_to_csv)
{
    fx_write_text(fx("train.csv"), "label,a,b\n1,2,3\n4,5,6\n");
    dl_dataset *ds = NULL;
    dl_err err = {0};
    cr_assert_eq(dl_dataset_load_dir(dir, "train", 2, NULL, &ds, &err), DL_OK,
                 "%s", err.msg);
    cr_expect_eq(ds->n, 2);
    cr_expect_eq(ds->dim, 2);
    cr_expect(ds->y[0] == 1 && ds->y[1] == 4);
    cr_expect_float_eq(ds->x[3], 6, 0);
    dl_dataset_free(ds);
    dl_status st = dl_dataset_load_dir(dir, "train", 3, NULL, &ds, &err);
    expect_error(st, err, DL_ERR_INVALID, "train.csv:2: ", "expected 4");
}

Test(data, dir_missing)
{
    dl_dataset *ds = NULL;
    dl_err err = {0};
    dl_status st = dl_dataset_load_dir(fx("no-such-folder"), "train", 784,
                                       NULL, &ds, &err);
    expect_error(st, err, DL_ERR_IO, "no-such-folder", "No such file");
    st = dl_dataset_load_dir(dir, "test", 784, NULL, &ds, &err);
    expect_error(st, err, DL_ERR_IO, dir, "t10k-images-idx3-ubyte");
    cr_expect_not_null(strstr(err.msg, "test.csv"), "%s", err.msg);
    cr_expect_null(ds);
}

Test(data, fashion_mnist)
{
    if (access(FASHION_DIR "/train-images-idx3-ubyte.gz", R_OK) != 0)
        cr_skip_test("Fashion-MNIST not installed in " FASHION_DIR
                     " (package dataset-fashion-mnist)");
    const char *splits[2] = {"train", "test"};
    const int64_t counts[2] = {60000, 10000};
    for (int s = 0; s < 2; s++) {
        dl_dataset *ds = NULL;
        dl_err err = {0};
        dl_scaling sc = {1.0f / 255.0f, 0.0f, 1.0f};
        cr_assert_eq(dl_dataset_load_dir(FASHION_DIR, splits[s], 784, &sc, &ds,
                                         &err), DL_OK, "%s", err.msg);
        cr_assert_eq(ds->n, counts[s]);
        cr_assert_eq(ds->ndim, 3);
        cr_assert(ds->shape[0] == 1 && ds->shape[1] == 28 &&
                  ds->shape[2] == 28);
        int64_t per_class[10] = {0};
        for (int64_t i = 0; i < ds->n; i++) {
            cr_assert(ds->y[i] >= 0 && ds->y[i] < 10, "y[%lld] = %d",
                      (long long)i, ds->y[i]);
            per_class[ds->y[i]]++;
        }
        /* Fashion-MNIST is exactly balanced. */
        for (int c = 0; c < 10; c++)
            cr_expect_eq(per_class[c], counts[s] / 10);
        float lo = 1, hi = 0;
        for (int64_t k = 0; k < ds->n * ds->dim; k++) {
            lo = ds->x[k] < lo ? ds->x[k] : lo;
            hi = ds->x[k] > hi ? ds->x[k] : hi;
        }
        cr_expect(lo == 0.0f && hi == 1.0f, "range [%g, %g]", (double)lo,
                  (double)hi);
        dl_dataset_free(ds);
    }
}

/* ---- truncate, shuffle, shard, gather ------------------------------- */

Test(data, truncate)
{
    write_mnist(fx("img"), fx("lab"), false, 10, 2, 2);
    dl_dataset *ds = NULL;
    dl_err err = {0};
    cr_assert_eq(dl_dataset_load_idx(fx("img"), fx("lab"), NULL, &ds, &err),
                 DL_OK);
    dl_dataset_truncate(ds, 0);
    dl_dataset_truncate(ds, 10);
    dl_dataset_truncate(ds, 20);
    cr_expect_eq(ds->n, 10);
    dl_dataset_truncate(ds, 4);
    check_mnist(ds, 4, 2, 2, NULL);
    dl_dataset_free(ds);
    dl_dataset_free(NULL);
}

static bool is_permutation(const int64_t *perm, int64_t n)
{
    bool *seen = calloc((size_t)n + 1, 1);
    bool ok = seen != NULL;
    for (int64_t i = 0; ok && i < n; i++) {
        ok = perm[i] >= 0 && perm[i] < n && !seen[perm[i]];
        if (ok)
            seen[perm[i]] = true;
    }
    free(seen);
    return ok;
}

Test(data, permutation)
{
    enum { N = 1000 };
    int64_t a[N], b[N], c[N], d[N];
    dl_data_permutation(42, 3, N, a);
    dl_data_permutation(42, 3, N, b);
    dl_data_permutation(42, 4, N, c);
    dl_data_permutation(43, 3, N, d);
    cr_assert(is_permutation(a, N));
    cr_assert(is_permutation(c, N));
    cr_assert_arr_eq(a, b, sizeof(a));
    cr_expect_neq(memcmp(a, c, sizeof(a)), 0, "epochs 3 and 4 agree");
    cr_expect_neq(memcmp(a, d, sizeof(a)), 0, "seeds 42 and 43 agree");
    int64_t fixed = 0;
    for (int i = 0; i < N; i++)
        fixed += a[i] == i;
    cr_expect_lt(fixed, 10, "%lld fixed points: barely shuffled",
                 (long long)fixed);
    for (int64_t n = 0; n < 5; n++) {
        int64_t p[4] = {-1, -1, -1, -1};
        dl_data_permutation(7, 0, n, p);
        cr_expect(is_permutation(p, n));
    }
}

Test(data, steps)
{
    cr_expect_eq(dl_data_steps(0, 32), 0);
    cr_expect_eq(dl_data_steps(1, 32), 1);
    cr_expect_eq(dl_data_steps(64, 32), 2);
    cr_expect_eq(dl_data_steps(65, 32), 3);
    cr_expect_eq(dl_data_steps(60000, 128), 469);
}

/* The nranks shards of each step, in rank order, tile exactly the
 * single-process batch of that step; no rank gets more than `batch`. */
static void check_shards(int64_t n, int64_t batch, int nranks)
{
    int64_t g = batch * nranks;
    int64_t steps = dl_data_steps(n, g);
    int64_t covered = 0;
    for (int64_t s = 0; s < steps + 2; s++) {
        int64_t b1, c1;
        dl_data_shard(n, g, 0, 1, s, &b1, &c1);
        int64_t pos = b1;
        for (int r = 0; r < nranks; r++) {
            int64_t b, c;
            dl_data_shard(n, batch, r, nranks, s, &b, &c);
            cr_assert(c >= 0 && c <= batch, "n %lld batch %lld ranks %d step "
                      "%lld rank %d: count %lld", (long long)n,
                      (long long)batch, nranks, (long long)s, r, (long long)c);
            if (c > 0)
                cr_assert_eq(b, pos, "n %lld batch %lld ranks %d step %lld "
                             "rank %d", (long long)n, (long long)batch,
                             nranks, (long long)s, r);
            if (s < steps && n - s * g >= g)
                cr_assert_eq(c, batch);
            pos += c;
        }
        cr_assert_eq(pos - b1, c1, "n %lld batch %lld ranks %d step %lld",
                     (long long)n, (long long)batch, nranks, (long long)s);
        if (s >= steps)
            cr_assert_eq(c1, 0);
        covered += c1;
    }
    cr_assert_eq(covered, n > 0 ? n : 0);
}

Test(data, shard_tiles_single_process_batches)
{
    for (int64_t n = 0; n <= 70; n++)
        for (int64_t batch = 1; batch <= 9; batch++)
            for (int nranks = 1; nranks <= 6; nranks++)
                check_shards(n, batch, nranks);
    check_shards(60000, 128, 4);
    check_shards(60001, 128, 3);
    check_shards(10000, 100, 7);
}

Test(data, shard_full_and_partial_batches)
{
    int64_t b, c;
    dl_data_shard(100, 8, 2, 4, 1, &b, &c);   /* full: [32, 64) */
    cr_expect(b == 48 && c == 8);
    /* n = 10, G = 8: the last step holds 2 samples for 4 ranks. */
    int64_t want_b[4] = {8, 9, 10, 10}, want_c[4] = {1, 1, 0, 0};
    for (int r = 0; r < 4; r++) {
        dl_data_shard(10, 2, r, 4, 1, &b, &c);
        cr_expect(c == want_c[r] && (c == 0 || b == want_b[r]),
                  "rank %d: begin %lld count %lld", r, (long long)b,
                  (long long)c);
    }
    /* 7 left for 3 ranks: 3, 2, 2. */
    int64_t cs[3];
    for (int r = 0; r < 3; r++)
        dl_data_shard(37, 10, r, 3, 1, &b, &cs[r]);
    cr_expect(cs[0] == 3 && cs[1] == 2 && cs[2] == 2);
}

Test(data, gather)
{
    write_mnist(fx("img"), fx("lab"), false, 6, 2, 2);
    dl_dataset *ds = NULL;
    dl_err err = {0};
    cr_assert_eq(dl_dataset_load_idx(fx("img"), fx("lab"), NULL, &ds, &err),
                 DL_OK);
    int64_t idx[3] = {5, 0, 3};
    float x[12];
    int32_t y[3];
    dl_data_gather(ds, idx, 3, x, y);
    for (int i = 0; i < 3; i++) {
        cr_expect_eq(y[i], label(idx[i]));
        for (int j = 0; j < 4; j++)
            cr_expect_float_eq(x[i * 4 + j], pixel(idx[i] * 4 + j), 0);
    }
    float x2[4] = {0};
    dl_data_gather(ds, idx + 2, 1, x2, NULL);
    cr_expect_arr_eq(x2, x + 8, sizeof(x2));
    dl_dataset_free(ds);
}
