/* test_sha256.c: SHA-256 against the FIPS 180-2 vectors, in one call, in
 * odd-sized pieces, and over a file; a missing file is DL_ERR_IO. */
#define _POSIX_C_SOURCE 200809L
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include <criterion/criterion.h>

#include "fixture.h"
#include "util/dl_util.h"

#define MILLION_A "cdc76e5c9914fb9281a1c7e284d73e67f1809a48a497200e046d39ccc7112cd0"

static const struct {
    const char *msg, *hex;
} vectors[] = {
    {"", "e3b0c44298fc1c149afbf4c8996fb92427ae41e4649b934ca495991b7852b855"},
    {"abc", "ba7816bf8f01cfea414140de5dae2223b00361a396177a9cb410ff61f20015ad"},
    /* the 448-bit message: padding spills into a second block */
    {"abcdbcdecdefdefgefghfghighijhijkijkljklmklmnlmnomnopnopq",
     "248d6a61d20638b8e5c026930c3e6039a33ce45964ff2167f6ecedd419db06c1"},
};

static void hex_of(const void *data, size_t n, char hex[65])
{
    uint8_t d[32];
    dl_sha256(data, n, d);
    dl_sha256_hex(d, hex);
}

static char *million_a(void)
{
    char *a = malloc(1000000);
    cr_assert_not_null(a);
    memset(a, 'a', 1000000);
    return a;
}

TestSuite(sha256, .timeout = 30);

Test(sha256, fips_vectors)
{
    char hex[65];
    for (size_t i = 0; i < sizeof(vectors) / sizeof(vectors[0]); i++) {
        hex_of(vectors[i].msg, strlen(vectors[i].msg), hex);
        cr_expect_str_eq(hex, vectors[i].hex, "message \"%s\"", vectors[i].msg);
    }
}

Test(sha256, one_million_a)
{
    char *a = million_a();
    char hex[65];
    hex_of(a, 1000000, hex);
    cr_expect_str_eq(hex, MILLION_A);
    free(a);
}

/* Pieces of every size from 1 to 130 bytes cross block boundaries at
 * every offset; the digest must not depend on how the data was cut. */
Test(sha256, streaming_matches_one_shot)
{
    char *a = million_a();
    dl_sha256_ctx ctx;
    dl_sha256_init(&ctx);
    size_t off = 0, piece = 1;
    while (off < 1000000) {
        size_t n = piece < 1000000 - off ? piece : 1000000 - off;
        dl_sha256_update(&ctx, a + off, n);
        off += n;
        piece = piece % 130 + 1;
    }
    uint8_t d[32];
    char hex[65];
    dl_sha256_final(&ctx, d);
    dl_sha256_hex(d, hex);
    cr_expect_str_eq(hex, MILLION_A);

    /* messages of 0..200 bytes, byte by byte against one shot */
    for (size_t n = 0; n <= 200; n++) {
        char one[65], bytes[65];
        dl_sha256_init(&ctx);
        for (size_t i = 0; i < n; i++)
            dl_sha256_update(&ctx, a + i, 1);
        dl_sha256_final(&ctx, d);
        dl_sha256_hex(d, bytes);
        hex_of(a, n, one);
        cr_expect_str_eq(bytes, one, "length %zu", n);
    }
    free(a);
}

Test(sha256, file)
{
    char path[64];
    fx_tmpfile(path, sizeof(path), "sha256");
    char *a = million_a();
    /* more than one 64 KiB read, and not a multiple of it */
    fx_write(path, a, 1000000);
    free(a);

    char hex[65];
    dl_err err = {0};
    cr_expect_eq(dl_sha256_file(path, hex, &err), DL_OK, "%s", err.msg);
    cr_expect_str_eq(hex, MILLION_A);
    unlink(path);

    cr_expect_eq(dl_sha256_file(path, hex, &err), DL_ERR_IO);
    cr_expect_str_eq(hex, "");
    cr_expect_not_null(strstr(err.msg, path), "message was: %s", err.msg);
}
