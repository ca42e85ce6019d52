/* test_safetensors.c: safetensors round trip, atomic writes, a PyTorch-style
 * file assembled by hand, and refusal of malformed files with a clear reason. */
#define _POSIX_C_SOURCE 200809L
#include <dirent.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include <criterion/criterion.h>
#include "fixture.h"

#include "nn/dl_nn.h"

static char dir[64];
static char path[128];

static void setup(void)
{
    fx_tmpdir(dir, sizeof(dir), "safetensors");
    snprintf(path, sizeof(path), "%s/m.safetensors", dir);
}

static void teardown(void) { fx_rmtree(dir); }

TestSuite(safetensors, .init = setup, .fini = teardown, .timeout = 10);

/* ---- helpers ---------------------------------------------------------- */

static int count_dir_entries(const char *folder)
{
    DIR *d = opendir(folder);
    cr_assert_not_null(d);
    int n = 0;
    for (struct dirent *e; (e = readdir(d));)
        if (strcmp(e->d_name, ".") != 0 && strcmp(e->d_name, "..") != 0)
            n++;
    closedir(d);
    return n;
}

/* A file whose length prefix says hlen, then header, then buflen data
 * bytes (0, 1, 2, ...). */
static void write_st_len(uint64_t hlen, const char *header, size_t buflen)
{
    size_t jlen = strlen(header), total = 8 + jlen + buflen;
    unsigned char *b = malloc(total);
    cr_assert_not_null(b);
    for (int i = 0; i < 8; i++)
        b[i] = (unsigned char)(hlen >> (8 * i));
    memcpy(b + 8, header, jlen);
    for (size_t i = 0; i < buflen; i++)
        b[8 + jlen + i] = (unsigned char)i;
    fx_write(path, b, total);
    free(b);
}

static void write_st(const char *header, size_t buflen)
{
    write_st_len(strlen(header), header, buflen);
}

/* Loading path must fail with DL_ERR_INVALID and a message that starts
 * with the path and contains needle. */
static void expect_invalid(const char *needle)
{
    dl_st_file *f = (dl_st_file *)1;
    dl_err err = {0};
    cr_assert_eq(dl_st_load(path, &f, &err), DL_ERR_INVALID,
                 "message was: %s", err.msg);
    cr_expect_null(f);
    cr_expect_eq(err.code, DL_ERR_INVALID);
    cr_expect_eq(strncmp(err.msg, path, strlen(path)), 0,
                 "message does not start with the path: %s", err.msg);
    cr_expect_not_null(strstr(err.msg, needle),
                       "expected '%s' in message: %s", needle, err.msg);
}

static uint64_t file_header_len(const char *p, long *fsize)
{
    FILE *f = fopen(p, "rb");
    cr_assert_not_null(f);
    unsigned char b[8];
    cr_assert_eq(fread(b, 1, 8, f), 8u);
    fseek(f, 0, SEEK_END);
    *fsize = ftell(f);
    fclose(f);
    uint64_t n = 0;
    for (int i = 7; i >= 0; i--)
        n = n << 8 | b[i];
    return n;
}

static dl_st_tensor f32_tensor(const char *name, int ndim,
                               const int64_t *shape, const float *data)
{
    dl_st_tensor t = {.name = name, .dtype = DL_ST_F32, .ndim = ndim,
                      .data = data};
    size_t n = 1;
    for (int i = 0; i < ndim; i++) {
        t.shape[i] = shape[i];
        n *= (size_t)shape[i];
    }
    t.nbytes = n * sizeof(float);
    return t;
}

/* ---- round trip and writing ------------------------------------------- */

Test(safetensors, round_trip)
{
    static float conv[4 * 3 * 2 * 2], fcw[5 * 7], bias[1] = {-0.25f};
    for (size_t i = 0; i < sizeof(conv) / sizeof(conv[0]); i++)
        conv[i] = (float)i * 0.5f - 3.0f;
    for (size_t i = 0; i < sizeof(fcw) / sizeof(fcw[0]); i++)
        fcw[i] = 1.0f / (float)(i + 1);
    dl_st_tensor ts[3] = {
        f32_tensor("conv1.weight", 4, (int64_t[]){4, 3, 2, 2}, conv),
        f32_tensor("fc.bias", 1, (int64_t[]){1}, bias),
        f32_tensor("fc.weight", 2, (int64_t[]){5, 7}, fcw),
    };
    const char *meta[] = {"format", "pt", "model", "{\"name\": \"mnist\"}"};
    dl_err err = {0};
    cr_assert_eq(dl_st_write(path, ts, 3, meta, 2, &err), DL_OK, "%s",
                 err.msg);

    long fsize;
    uint64_t hlen = file_header_len(path, &fsize);
    cr_expect_eq((8 + hlen) % 8, 0u, "8 + N = %llu", (unsigned long long)(8 + hlen));
    cr_expect_eq((uint64_t)fsize,
                 8 + hlen + sizeof(conv) + sizeof(bias) + sizeof(fcw));

    dl_st_file *f = NULL;
    cr_assert_eq(dl_st_load(path, &f, &err), DL_OK, "%s", err.msg);
    cr_assert_eq(dl_st_count(f), 3);
    for (int i = 0; i < 3; i++) {
        const dl_st_tensor *t = dl_st_at(f, i);  /* in data order */
        cr_expect_str_eq(t->name, ts[i].name);
        cr_expect_eq(t->dtype, DL_ST_F32);
        cr_expect_eq(t->ndim, ts[i].ndim);
        for (int d = 0; d < t->ndim; d++)
            cr_expect_eq(t->shape[d], ts[i].shape[d]);
        cr_assert_eq(t->nbytes, ts[i].nbytes);
        cr_expect_eq(memcmp(t->data, ts[i].data, t->nbytes), 0);
        cr_expect_eq((uintptr_t)t->data % 4, 0u, "F32 data must be aligned");
        cr_expect_eq(dl_st_find(f, ts[i].name), t);
    }
    cr_expect_eq(((const float *)dl_st_find(f, "fc.bias")->data)[0], -0.25f);
    cr_expect_null(dl_st_at(f, 3));
    cr_expect_null(dl_st_find(f, "nope"));
    cr_expect_str_eq(dl_st_meta(f, "format"), "pt");
    cr_expect_str_eq(dl_st_meta(f, "model"), "{\"name\": \"mnist\"}");
    cr_expect_null(dl_st_meta(f, "nope"));
    dl_st_free(f);
}

Test(safetensors, empty_file_round_trip)
{
    dl_err err = {0};
    cr_assert_eq(dl_st_write(path, NULL, 0, NULL, 0, &err), DL_OK, "%s",
                 err.msg);
    dl_st_file *f = NULL;
    cr_assert_eq(dl_st_load(path, &f, &err), DL_OK, "%s", err.msg);
    cr_expect_eq(dl_st_count(f), 0);
    cr_expect_null(dl_st_meta(f, "format"));
    dl_st_free(f);
    dl_st_free(NULL);
}

Test(safetensors, zero_sized_tensor_between_others)
{
    float a[2] = {1, 2}, c[1] = {3};
    dl_st_tensor ts[3] = {
        f32_tensor("a", 1, (int64_t[]){2}, a),
        f32_tensor("b", 2, (int64_t[]){0, 5}, NULL),
        f32_tensor("c", 1, (int64_t[]){1}, c),
    };
    dl_err err = {0};
    cr_assert_eq(dl_st_write(path, ts, 3, NULL, 0, &err), DL_OK, "%s",
                 err.msg);
    dl_st_file *f = NULL;
    cr_assert_eq(dl_st_load(path, &f, &err), DL_OK, "%s", err.msg);
    cr_assert_eq(dl_st_count(f), 3);
    cr_expect_eq(dl_st_find(f, "b")->nbytes, 0u);
    cr_expect_eq(((const float *)dl_st_find(f, "c")->data)[0], 3.0f);
    dl_st_free(f);
}

Test(safetensors, write_is_atomic_and_replaces)
{
    float v1[2] = {1, 2}, v2[3] = {4, 5, 6};
    dl_st_tensor t1 = f32_tensor("w", 1, (int64_t[]){2}, v1);
    dl_st_tensor t2 = f32_tensor("w", 1, (int64_t[]){3}, v2);
    dl_err err = {0};
    cr_assert_eq(dl_st_write(path, &t1, 1, NULL, 0, &err), DL_OK);
    cr_assert_eq(dl_st_write(path, &t2, 1, NULL, 0, &err), DL_OK);
    cr_expect_eq(count_dir_entries(dir), 1, "a temporary file was left");

    dl_st_file *f = NULL;
    cr_assert_eq(dl_st_load(path, &f, &err), DL_OK, "%s", err.msg);
    cr_expect_eq(dl_st_find(f, "w")->shape[0], 3);
    cr_expect_eq(memcmp(dl_st_find(f, "w")->data, v2, sizeof(v2)), 0);
    dl_st_free(f);
}

Test(safetensors, write_to_missing_folder_leaves_nothing)
{
    char bad[200], sub[160];
    snprintf(sub, sizeof(sub), "%s/missing", dir);
    snprintf(bad, sizeof(bad), "%s/m.safetensors", sub);
    float v[1] = {1};
    dl_st_tensor t = f32_tensor("w", 1, (int64_t[]){1}, v);
    dl_err err = {0};
    cr_assert_eq(dl_st_write(bad, &t, 1, NULL, 0, &err), DL_ERR_IO);
    cr_expect_not_null(strstr(err.msg, sub), "message was: %s", err.msg);
    struct stat sb;
    cr_expect_neq(stat(sub, &sb), 0);
    cr_expect_eq(count_dir_entries(dir), 0);
}

Test(safetensors, write_rejects_size_mismatch)
{
    float v[4] = {0};
    dl_st_tensor t = f32_tensor("fc.weight", 2, (int64_t[]){2, 2}, v);
    t.nbytes = 12;
    dl_err err = {0};
    cr_assert_eq(dl_st_write(path, &t, 1, NULL, 0, &err), DL_ERR_INVALID);
    cr_expect_not_null(strstr(err.msg, "nbytes 12 but shape [2, 2] F32 "
                              "needs 16"), "message was: %s", err.msg);
    cr_expect_eq(strncmp(err.msg, path, strlen(path)), 0);
    cr_expect_eq(count_dir_entries(dir), 0);
}

Test(safetensors, write_rejects_duplicate_and_reserved_names)
{
    float v[1] = {0};
    dl_st_tensor ts[2] = {f32_tensor("w", 1, (int64_t[]){1}, v),
                          f32_tensor("w", 1, (int64_t[]){1}, v)};
    dl_err err = {0};
    cr_assert_eq(dl_st_write(path, ts, 2, NULL, 0, &err), DL_ERR_INVALID);
    cr_expect_not_null(strstr(err.msg, "'w' appears twice"), "%s", err.msg);

    ts[0].name = "__metadata__";
    cr_assert_eq(dl_st_write(path, ts, 1, NULL, 0, &err), DL_ERR_INVALID);
    cr_expect_not_null(strstr(err.msg, "reserved"), "%s", err.msg);

    const char *meta[] = {"k", "a", "k", "b"};
    cr_assert_eq(dl_st_write(path, ts + 1, 1, meta, 2, &err),
                 DL_ERR_INVALID);
    cr_expect_not_null(strstr(err.msg, "metadata key 'k' appears twice"),
                       "%s", err.msg);
    cr_expect_eq(count_dir_entries(dir), 0);
}

/* ---- files as other tools write them ---------------------------------- */

/* Exactly the bytes of a PyTorch state_dict saved with safetensors:
 * header length 96 (already a multiple of 8), header, 4 F32 values. */
Test(safetensors, loads_hand_assembled_pytorch_file)
{
    static const char header[] =
        "{\"fc.weight\":{\"dtype\":\"F32\",\"shape\":[2,2],"
        "\"data_offsets\":[0,16]},\"__metadata__\":{\"format\":\"pt\"}}";
    static const unsigned char len[8] = {0x60, 0, 0, 0, 0, 0, 0, 0};
    static const unsigned char data[16] = {
        0x00, 0x00, 0x80, 0x3f,   /* 1.0f */
        0x00, 0x00, 0x00, 0x40,   /* 2.0f */
        0x00, 0x00, 0x40, 0x40,   /* 3.0f */
        0x00, 0x00, 0x80, 0x40,   /* 4.0f */
    };
    cr_assert_eq(sizeof(header) - 1, 0x60u);
    unsigned char file[8 + 0x60 + 16];
    memcpy(file, len, 8);
    memcpy(file + 8, header, 0x60);
    memcpy(file + 8 + 0x60, data, 16);
    fx_write(path, file, sizeof(file));

    dl_st_file *f = NULL;
    dl_err err = {0};
    cr_assert_eq(dl_st_load(path, &f, &err), DL_OK, "%s", err.msg);
    cr_assert_eq(dl_st_count(f), 1);
    const dl_st_tensor *t = dl_st_find(f, "fc.weight");
    cr_assert_not_null(t);
    cr_expect_eq(t->ndim, 2);
    cr_expect_eq(t->shape[0], 2);
    cr_expect_eq(t->shape[1], 2);
    const float *w = t->data;
    cr_expect_eq(w[0], 1.0f);
    cr_expect_eq(w[3], 4.0f);
    cr_expect_str_eq(dl_st_meta(f, "format"), "pt");
    dl_st_free(f);
}

/* The reference writer's layout: __metadata__ first, tensors in data
 * order, JSON of 155 bytes padded with 5 spaces to 160. */
Test(safetensors, loads_space_padded_header)
{
    static const char header[] =
        "{\"__metadata__\":{\"format\":\"pt\"},"
        "\"fc.bias\":{\"dtype\":\"F32\",\"shape\":[2],\"data_offsets\":[0,8]},"
        "\"fc.weight\":{\"dtype\":\"F32\",\"shape\":[2,2],"
        "\"data_offsets\":[8,24]}}     ";
    cr_assert_eq(strlen(header), 160u);
    write_st(header, 24);

    dl_st_file *f = NULL;
    dl_err err = {0};
    cr_assert_eq(dl_st_load(path, &f, &err), DL_OK, "%s", err.msg);
    cr_assert_eq(dl_st_count(f), 2);
    cr_expect_str_eq(dl_st_at(f, 0)->name, "fc.bias");
    cr_expect_str_eq(dl_st_at(f, 1)->name, "fc.weight");
    cr_expect_eq(((const unsigned char *)dl_st_at(f, 1)->data)[0], 8);
    dl_st_free(f);
}

/* PyTorch's batchnorm num_batches_tracked: an I64 scalar, shape []. */
Test(safetensors, loads_i64_scalar)
{
    write_st("{\"bn.num_batches_tracked\":{\"dtype\":\"I64\",\"shape\":[],"
             "\"data_offsets\":[0,8]},"
             "\"bn.running_mean\":{\"dtype\":\"F32\",\"shape\":[2],"
             "\"data_offsets\":[8,16]}}", 16);
    dl_st_file *f = NULL;
    dl_err err = {0};
    cr_assert_eq(dl_st_load(path, &f, &err), DL_OK, "%s", err.msg);
    const dl_st_tensor *t = dl_st_find(f, "bn.num_batches_tracked");
    cr_assert_not_null(t);
    cr_expect_eq(t->dtype, DL_ST_I64);
    cr_expect_str_eq(dl_st_dtype_name(t->dtype), "I64");
    cr_expect_eq(t->ndim, 0);
    cr_expect_eq(t->nbytes, 8u);
    int64_t v;
    memcpy(&v, t->data, sizeof(v));   /* non-F32 data may be unaligned */
    cr_expect_eq(v, 0x0706050403020100);
    dl_st_free(f);
}

/* ---- malformed files: each refused with its reason -------------------- */

Test(safetensors, rejects_truncated_file)
{
    fx_write(path, "\x10\x00\x00", 3);
    expect_invalid("3 bytes, shorter than the 8-byte header length");
}

Test(safetensors, rejects_zero_header_length)
{
    write_st_len(0, "", 4);
    expect_invalid("header length is 0");
}

Test(safetensors, rejects_header_length_beyond_file)
{
    write_st_len(100, "{}", 0);
    expect_invalid("header length 100 runs past the end of the file");
}

Test(safetensors, rejects_huge_header_length)
{
    write_st_len(UINT64_MAX, "{}", 0);
    expect_invalid("exceeds the limit of 104857600 bytes");
}

Test(safetensors, rejects_header_not_json)
{
    write_st("{\"w\": {\"dtype\": ", 0);
    expect_invalid("header is not valid JSON");
}

Test(safetensors, rejects_header_with_bad_utf8)
{
    write_st("{\"w\xff\": 1}", 0);
    expect_invalid("header is not valid JSON");
}

Test(safetensors, rejects_header_json_array)
{
    write_st("[1, 2]", 0);
    expect_invalid("header is a JSON array, not an object");
}

Test(safetensors, rejects_entry_not_object)
{
    write_st("{\"w\": 3}", 0);
    expect_invalid("tensor 'w': entry is not an object");
}

Test(safetensors, rejects_unknown_dtype)
{
    write_st("{\"w\":{\"dtype\":\"F8\",\"shape\":[1],\"data_offsets\":[0,1]}}",
             1);
    expect_invalid("tensor 'w': unknown dtype 'F8'");
}

Test(safetensors, rejects_missing_dtype)
{
    write_st("{\"w\":{\"shape\":[1],\"data_offsets\":[0,4]}}", 4);
    expect_invalid("tensor 'w': dtype missing");
}

Test(safetensors, rejects_negative_dim)
{
    write_st("{\"w\":{\"dtype\":\"F32\",\"shape\":[-2,2],"
             "\"data_offsets\":[0,16]}}", 16);
    expect_invalid("shape dim 0 is negative (-2)");
}

Test(safetensors, rejects_non_integer_dim)
{
    write_st("{\"w\":{\"dtype\":\"F32\",\"shape\":[2.5],"
             "\"data_offsets\":[0,8]}}", 8);
    expect_invalid("shape dim 0 is not an integer");
}

Test(safetensors, rejects_shape_not_array)
{
    write_st("{\"w\":{\"dtype\":\"F32\",\"shape\":4,\"data_offsets\":[0,16]}}",
             16);
    expect_invalid("shape is not an array");
}

Test(safetensors, rejects_too_many_dims)
{
    write_st("{\"w\":{\"dtype\":\"U8\",\"shape\":[1,1,1,1,1,1,1,1,1],"
             "\"data_offsets\":[0,1]}}", 1);
    expect_invalid("shape has 9 dims, more than the 8 supported");
}

Test(safetensors, rejects_byte_size_overflow)
{
    write_st("{\"w\":{\"dtype\":\"F32\",\"shape\":[4294967296,4294967296,4],"
             "\"data_offsets\":[0,4]}}", 4);
    expect_invalid("overflows");
}

Test(safetensors, rejects_offsets_beyond_buffer)
{
    write_st("{\"w\":{\"dtype\":\"F32\",\"shape\":[4],\"data_offsets\":[0,16]}}",
             8);
    expect_invalid("data_offsets [0, 16] run past the end of the 8-byte "
                   "data buffer");
}

Test(safetensors, rejects_begin_after_end)
{
    write_st("{\"w\":{\"dtype\":\"F32\",\"shape\":[2],\"data_offsets\":[8,0]}}",
             8);
    expect_invalid("data_offsets [8, 0]: begin is after end");
}

Test(safetensors, rejects_size_mismatch)
{
    write_st("{\"fc1.weight\":{\"dtype\":\"F32\",\"shape\":[2,2],"
             "\"data_offsets\":[0,8]}}", 8);
    expect_invalid("tensor 'fc1.weight': data_offsets [0, 8] hold 8 bytes but "
                   "shape [2, 2] F32 needs 16");
}

Test(safetensors, rejects_overlapping_tensors)
{
    write_st("{\"a\":{\"dtype\":\"F32\",\"shape\":[2],\"data_offsets\":[0,8]},"
             "\"b\":{\"dtype\":\"F32\",\"shape\":[2],\"data_offsets\":[4,12]}}",
             12);
    expect_invalid("tensor 'b' at [4, 12] overlaps tensor 'a'");
}

Test(safetensors, rejects_hole_between_tensors)
{
    write_st("{\"a\":{\"dtype\":\"F32\",\"shape\":[1],\"data_offsets\":[0,4]},"
             "\"b\":{\"dtype\":\"F32\",\"shape\":[1],\"data_offsets\":[8,12]}}",
             12);
    expect_invalid("data bytes [4, 8) belong to no tensor (hole before 'b')");
}

Test(safetensors, rejects_trailing_bytes)
{
    write_st("{\"a\":{\"dtype\":\"F32\",\"shape\":[1],\"data_offsets\":[0,4]}}",
             8);
    expect_invalid("data bytes [4, 8) belong to no tensor (trailing bytes)");
}

Test(safetensors, rejects_metadata_not_object)
{
    write_st("{\"__metadata__\":[\"pt\"]}", 0);
    expect_invalid("__metadata__ is not an object");
}

Test(safetensors, rejects_metadata_value_not_string)
{
    write_st("{\"__metadata__\":{\"format\":\"pt\",\"epochs\":3}}", 0);
    expect_invalid("__metadata__ value for 'epochs' is not a string");
}

Test(safetensors, rejects_duplicate_keys)
{
    write_st("{\"a\":{\"dtype\":\"F32\",\"shape\":[1],\"data_offsets\":[0,4]},"
             "\"a\":{\"dtype\":\"F32\",\"shape\":[1],\"data_offsets\":[4,8]}}",
             8);
    expect_invalid("duplicate object key");
}

Test(safetensors, rejects_missing_data_offsets)
{
    write_st("{\"w\":{\"dtype\":\"F32\",\"shape\":[1]}}", 4);
    expect_invalid("tensor 'w': data_offsets missing");
}

Test(safetensors, rejects_malformed_data_offsets)
{
    write_st("{\"w\":{\"dtype\":\"F32\",\"shape\":[1],\"data_offsets\":[0]}}",
             4);
    expect_invalid("data_offsets is not [begin, end] with non-negative "
                   "integers");
}

Test(safetensors, rejects_negative_data_offset)
{
    write_st("{\"w\":{\"dtype\":\"U8\",\"shape\":[0],"
             "\"data_offsets\":[-1,-1]}}", 0);
    expect_invalid("data_offsets is not [begin, end] with non-negative "
                   "integers");
}

Test(safetensors, rejects_misaligned_f32)
{
    write_st("{\"b\":{\"dtype\":\"U8\",\"shape\":[2],\"data_offsets\":[0,2]},"
             "\"w\":{\"dtype\":\"F32\",\"shape\":[1],\"data_offsets\":[2,6]}}",
             6);
    expect_invalid("tensor 'w': F32 data at offset 2 is not 4-byte aligned");
}

/* ---- other sources of errors ------------------------------------------ */

Test(safetensors, missing_file_is_io_error)
{
    dl_st_file *f = NULL;
    dl_err err = {0};
    cr_assert_eq(dl_st_load(path, &f, &err), DL_ERR_IO);
    cr_expect_null(f);
    cr_expect_not_null(strstr(err.msg, path), "message was: %s", err.msg);
}

Test(safetensors, parse_names_its_source)
{
    static const unsigned char b[] = {2, 0, 0, 0, 0, 0, 0, 0, '[', ']'};
    dl_st_file *f = NULL;
    dl_err err = {0};
    cr_assert_eq(dl_st_parse(b, sizeof(b), "upload", &f, &err),
                 DL_ERR_INVALID);
    cr_expect_null(f);
    cr_expect_str_eq(err.msg, "upload: header is a JSON array, not an "
                     "object");
    /* err may be NULL */
    cr_expect_eq(dl_st_parse(b, sizeof(b), "upload", &f, NULL),
                 DL_ERR_INVALID);
}
