/* fuzz.h: what the libFuzzer harnesses share: quiet logs, a private
 * temporary folder for parsers that read a path, the contract every parser
 * keeps on bad input (a status with a message, never a crash), and a small
 * classifier's model.json to check requests against.
 *
 * Each harness is one LLVMFuzzerTestOneInput over one parser; libFuzzer
 * runs it under AddressSanitizer, UBSan and its leak checker (README.md
 * in this folder). Not thread-safe: libFuzzer calls a harness from one
 * thread. */
#ifndef DL_FUZZ_H
#define DL_FUZZ_H

#ifndef _POSIX_C_SOURCE
#define _POSIX_C_SOURCE 200809L   /* mkdtemp, open_memstream */
#endif

#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "nn/dl_nn.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);
int LLVMFuzzerInitialize(int *argc, char ***argv);

/* Stops the run (a libFuzzer crash, the input saved) when a parser breaks
 * its contract. */
#define FZ_CHECK(cond, ...)                                                   \
    do {                                                                      \
        if (!(cond)) {                                                        \
            fprintf(stderr, "fuzz contract broken at %s:%d: %s: ", __FILE__,  \
                    __LINE__, #cond);                                         \
            fprintf(stderr, __VA_ARGS__);                                     \
            fputc('\n', stderr);                                              \
            abort();                                                          \
        }                                                                     \
    } while (0)

/* A failure must come with a message that says why, its kind in err. */
static inline void fz_check_failure(dl_status st, const dl_err *err)
{
    if (st == DL_OK)
        return;
    FZ_CHECK(err->code == st, "status %d, err->code %d", (int)st, (int)err->code);
    FZ_CHECK(err->msg[0] != '\0', "status %d without a message", (int)st);
}

/* Reads n bytes at p, so that ASan checks that all of them are the
 * parser's to hand out. */
static volatile unsigned fz_sink;
static inline void fz_touch(const void *p, size_t n)
{
    unsigned sum = 0;
    for (size_t i = 0; i < n; i++)
        sum += ((const unsigned char *)p)[i];
    fz_sink += sum;
}

/* Errors and warnings only: a parser's notices would flood the run. */
static inline void fz_quiet(void)
{
    dl_log_set(DL_LOG_ERR - 1, NULL, NULL);
}

/* A one-thread CPU backend for harnesses that build models; stops the
 * run if there is none. */
static inline dl_backend *fz_cpu_backend(void)
{
    dl_backend *be = NULL;
    dl_err err = {0};
    FZ_CHECK(dl_backend_cpu_new(1, &be, &err) == DL_OK, "%s", err.msg);
    return be;
}

/* The harness's own folder under $TMPDIR (else /dev/shm or /tmp), made
 * once, removed at exit. */
static char fz_dir[512];

static inline void fz_rmdir(void)
{
    char cmd[600];
    snprintf(cmd, sizeof(cmd), "rm -rf '%s'", fz_dir);
    if (fz_dir[0] && system(cmd) != 0)
        fprintf(stderr, "fuzz: could not remove %s\n", fz_dir);
}

static inline const char *fz_tmpdir(void)
{
    if (fz_dir[0])
        return fz_dir;
    /* Memory-backed when the machine has it: every input is a file write. */
    const char *tmp = getenv("TMPDIR");
    if (!tmp || !*tmp)
        tmp = access("/dev/shm", W_OK) == 0 ? "/dev/shm" : "/tmp";
    snprintf(fz_dir, sizeof(fz_dir), "%s/dl_fuzz.XXXXXX", tmp);
    if (!mkdtemp(fz_dir)) {
        perror(fz_dir);
        abort();
    }
    atexit(fz_rmdir);
    return fz_dir;
}

/* Writes data[0..size) to path, replacing it. */
static inline void fz_write(const char *path, const void *data, size_t size)
{
    FILE *f = fopen(path, "wb");
    if (!f || (size && fwrite(data, 1, size, f) != size) || fclose(f) != 0) {
        perror(path);
        abort();
    }
}

/* A model of 2x2 inputs, three classes with labels: small enough that
 * fuzzed shapes and batches hit it. */
static const char fz_model_json[] =
    "{\"name\": \"tiny\", \"input\": {\"name\": \"input\", \"shape\": [2, 2],"
    " \"scaling\": {\"scale\": 1, \"mean\": 0, \"std\": 1}},"
    " \"layers\": [{\"name\": \"flatten\", \"type\": \"flatten\"},"
    " {\"name\": \"fc\", \"type\": \"dense\", \"units\": 3}],"
    " \"loss\": \"softmax_cross_entropy\","
    " \"output\": {\"name\": \"probabilities\", \"labels\": [\"a\", \"b\", \"c\"]}}";

/* The tiny model's configuration (new; kept for the whole run). */
static inline dl_model_conf *fz_model_conf(void)
{
    dl_model_conf *conf = NULL;
    dl_err err = {0};
    if (dl_model_conf_parse(fz_model_json, sizeof(fz_model_json) - 1, "tiny", &conf,
                            &err) != DL_OK) {
        fprintf(stderr, "fuzz: tiny model: %s\n", err.msg);
        abort();
    }
    return conf;
}

/* Splits the input at its first '\n': *line (new, NUL-terminated, at most
 * max bytes kept) and the rest. False when there is no '\n'. */
static inline bool fz_split_line(const uint8_t **data, size_t *size, char *line,
                                 size_t max)
{
    const uint8_t *nl = memchr(*data, '\n', *size);
    if (!nl)
        return false;
    size_t n = (size_t)(nl - *data);
    if (n >= max)
        n = max - 1;
    memcpy(line, *data, n);
    line[n] = '\0';
    *size -= (size_t)(nl - *data) + 1;
    *data = nl + 1;
    return true;
}

/* A safetensors file from an input: taken as it is, unless it starts with
 * '{': then the header is the input up to its first '\n' (or all of it)
 * and the data the rest, framed with the 8-byte length, so that mutations
 * of the header keep a length that fits. *out is new; *len its bytes. */
static inline uint8_t *fz_safetensors(const uint8_t *data, size_t size, size_t *len)
{
    bool framed = size > 0 && data[0] == '{';
    const uint8_t *nl = framed ? memchr(data, '\n', size) : NULL;
    size_t hlen = nl ? (size_t)(nl - data) : size;
    *len = framed ? 8 + size - (nl ? 1 : 0) : size;
    uint8_t *f = malloc(*len ? *len : 1);
    FZ_CHECK(f != NULL, "out of memory");
    if (!framed) {
        if (size)
            memcpy(f, data, size);
        return f;
    }
    for (int i = 0; i < 8; i++)
        f[i] = (uint8_t)((uint64_t)hlen >> (8 * i));
    memcpy(f + 8, data, hlen);
    if (nl)
        memcpy(f + 8 + hlen, nl + 1, size - hlen - 1);
    return f;
}

#endif /* DL_FUZZ_H */
