/* sha256.c: SHA-256 (FIPS 180-4), one-shot and streaming, and the hex
 * digest of a file, for the weights checksums the model registry carries. */
#define _POSIX_C_SOURCE 200809L
#include "util/dl_util.h"

#include <errno.h>
#include <stdio.h>
#include <string.h>

static const uint32_t K[64] = {
    0x428a2f98, 0x71374491, 0xb5c0fbcf, 0xe9b5dba5, 0x3956c25b, 0x59f111f1,
    0x923f82a4, 0xab1c5ed5, 0xd807aa98, 0x12835b01, 0x243185be, 0x550c7dc3,
    0x72be5d74, 0x80deb1fe, 0x9bdc06a7, 0xc19bf174, 0xe49b69c1, 0xefbe4786,
    0x0fc19dc6, 0x240ca1cc, 0x2de92c6f, 0x4a7484aa, 0x5cb0a9dc, 0x76f988da,
    0x983e5152, 0xa831c66d, 0xb00327c8, 0xbf597fc7, 0xc6e00bf3, 0xd5a79147,
    0x06ca6351, 0x14292967, 0x27b70a85, 0x2e1b2138, 0x4d2c6dfc, 0x53380d13,
    0x650a7354, 0x766a0abb, 0x81c2c92e, 0x92722c85, 0xa2bfe8a1, 0xa81a664b,
    0xc24b8b70, 0xc76c51a3, 0xd192e819, 0xd6990624, 0xf40e3585, 0x106aa070,
    0x19a4c116, 0x1e376c08, 0x2748774c, 0x34b0bcb5, 0x391c0cb3, 0x4ed8aa4a,
    0x5b9cca4f, 0x682e6ff3, 0x748f82ee, 0x78a5636f, 0x84c87814, 0x8cc70208,
    0x90befffa, 0xa4506ceb, 0xbef9a3f7, 0xc67178f2,
};

static uint32_t ror(uint32_t x, int n)
{
    return (x >> n) | (x << (32 - n));
}

/* Mixes one 64-byte block into the state. */
static void compress(uint32_t h[8], const uint8_t *p)
{
    uint32_t w[64];
    for (int i = 0; i < 16; i++)
        w[i] = (uint32_t)p[4 * i] << 24 | (uint32_t)p[4 * i + 1] << 16 |
               (uint32_t)p[4 * i + 2] << 8 | (uint32_t)p[4 * i + 3];
    for (int i = 16; i < 64; i++) {
        uint32_t s0 = ror(w[i - 15], 7) ^ ror(w[i - 15], 18) ^ (w[i - 15] >> 3);
        uint32_t s1 = ror(w[i - 2], 17) ^ ror(w[i - 2], 19) ^ (w[i - 2] >> 10);
        w[i] = w[i - 16] + s0 + w[i - 7] + s1;
    }
    uint32_t a = h[0], b = h[1], c = h[2], d = h[3];
    uint32_t e = h[4], f = h[5], g = h[6], hh = h[7];
    for (int i = 0; i < 64; i++) {
        uint32_t t1 = hh + (ror(e, 6) ^ ror(e, 11) ^ ror(e, 25)) +
                      ((e & f) ^ (~e & g)) + K[i] + w[i];
        uint32_t t2 = (ror(a, 2) ^ ror(a, 13) ^ ror(a, 22)) +
                      ((a & b) ^ (a & c) ^ (b & c));
        hh = g;
        g = f;
        f = e;
        e = d + t1;
        d = c;
        c = b;
        b = a;
        a = t1 + t2;
    }
    h[0] += a; h[1] += b; h[2] += c; h[3] += d;
    h[4] += e; h[5] += f; h[6] += g; h[7] += hh;
}

void dl_sha256_init(dl_sha256_ctx *ctx)
{
    static const uint32_t h0[8] = {
        0x6a09e667, 0xbb67ae85, 0x3c6ef372, 0xa54ff53a,
        0x510e527f, 0x9b05688c, 0x1f83d9ab, 0x5be0cd19,
    };
    memcpy(ctx->h, h0, sizeof(h0));
    ctx->nbytes = 0;
    ctx->nbuf = 0;
}

void dl_sha256_update(dl_sha256_ctx *ctx, const void *data, size_t n)
{
    const uint8_t *p = data;
    ctx->nbytes += n;
    if (ctx->nbuf > 0) {                 /* top up a partial block first */
        size_t take = 64 - ctx->nbuf < n ? 64 - ctx->nbuf : n;
        memcpy(ctx->buf + ctx->nbuf, p, take);
        ctx->nbuf += take;
        p += take;
        n -= take;
        if (ctx->nbuf < 64)
            return;
        compress(ctx->h, ctx->buf);
        ctx->nbuf = 0;
    }
    for (; n >= 64; p += 64, n -= 64)
        compress(ctx->h, p);
    memcpy(ctx->buf, p, n);
    ctx->nbuf = n;
}

void dl_sha256_final(dl_sha256_ctx *ctx, uint8_t out[32])
{
    uint64_t bits = ctx->nbytes * 8;
    /* 0x80, zeros up to 56 mod 64, then the message length in bits (big
     * endian): one or two more blocks. */
    uint8_t pad[72] = {0x80};
    size_t npad = (ctx->nbuf < 56 ? 56 : 120) - ctx->nbuf;
    for (int i = 0; i < 8; i++)
        pad[npad + (size_t)i] = (uint8_t)(bits >> (56 - 8 * i));
    dl_sha256_update(ctx, pad, npad + 8);
    for (int i = 0; i < 8; i++) {
        out[4 * i]     = (uint8_t)(ctx->h[i] >> 24);
        out[4 * i + 1] = (uint8_t)(ctx->h[i] >> 16);
        out[4 * i + 2] = (uint8_t)(ctx->h[i] >> 8);
        out[4 * i + 3] = (uint8_t)ctx->h[i];
    }
}

void dl_sha256(const void *data, size_t n, uint8_t out[32])
{
    dl_sha256_ctx ctx;
    dl_sha256_init(&ctx);
    dl_sha256_update(&ctx, data, n);
    dl_sha256_final(&ctx, out);
}

void dl_sha256_hex(const uint8_t digest[32], char hex[65])
{
    static const char digits[] = "0123456789abcdef";
    for (int i = 0; i < 32; i++) {
        hex[2 * i]     = digits[digest[i] >> 4];
        hex[2 * i + 1] = digits[digest[i] & 15];
    }
    hex[64] = '\0';
}

dl_status dl_sha256_file(const char *path, char hex[65], dl_err *err)
{
    hex[0] = '\0';
    FILE *f = fopen(path, "rb");
    if (!f)
        return dl_err_set(err, DL_ERR_IO, "%s: %s", path, strerror(errno));
    dl_sha256_ctx ctx;
    dl_sha256_init(&ctx);
    uint8_t buf[1 << 16];
    size_t got;
    while ((got = fread(buf, 1, sizeof(buf), f)) > 0)
        dl_sha256_update(&ctx, buf, got);
    if (ferror(f)) {
        int e = errno;
        fclose(f);
        return dl_err_set(err, DL_ERR_IO, "%s: read: %s", path, strerror(e));
    }
    fclose(f);
    uint8_t digest[32];
    dl_sha256_final(&ctx, digest);
    dl_sha256_hex(digest, hex);
    return DL_OK;
}
