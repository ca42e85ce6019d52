/* numparse.c: how fast js_floats reads the numeric arrays of the serving
 * path, and whether every value it reads is strtod's. Built beside the
 * json_scan.c to measure (this tree's, or a variant of it, to compare two
 * in the same run), as the release build compiles it:
 *
 *   cc -O3 -march=native -fno-math-errno -std=c11 -D_GNU_SOURCE -Isrc \
 *      tests/bench/numparse.c src/serve/oip/json_scan.c src/util/sbuf.c \
 *      src/util/err.c -lz -lm -o /tmp/numparse
 *   /tmp/numparse /usr/share/datasets/fashion-mnist/t10k-images-idx3-ubyte.gz [N] [ROUNDS]
 *
 * Reads the first N images (default 1000) of a Fashion-MNIST idx file and
 * writes each one's 784 pixels as the two array forms dlserve is sent:
 * HTTP's FP32 JSON (`[0.0, 12.0, ...]`, as tests/py/make_request.py
 * writes it) and the Kafka `data` form (`[0,12,...]`, UINT8), plus the
 * same integers as Python's json writes them (`[0, 12, ...]`) and mixed
 * decimals (`[0.0471, -1.5, 255, ...]`, values / 255 to 4 places, some
 * negative). Each form is read with js_floats ROUNDS times
 * (default 30) over all N arrays; the best round is printed as ns a number.
 * Every value read is checked against strtod's (exits 1 on a difference). */
#include "serve/oip/json_scan.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <zlib.h>

#define PIXELS 784

static double now_ns(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec * 1e9 + (double)ts.tv_nsec;
}

static unsigned char *read_images(const char *path, int n)
{
    gzFile gz = gzopen(path, "rb");
    if (!gz) {
        fprintf(stderr, "numparse: cannot open %s\n", path);
        exit(2);
    }
    unsigned char head[16];
    unsigned char *img = malloc((size_t)n * PIXELS);
    if (gzread(gz, head, 16) != 16 || !img || gzread(gz, img, (unsigned)n * PIXELS) != n * PIXELS) {
        fprintf(stderr, "numparse: %s: short read\n", path);
        exit(2);
    }
    gzclose(gz);
    return img;
}

typedef struct form {
    const char *name;
    char      **text;
    size_t     *len;
    bool        bytes;
} form;

/* Reads one array; returns how many values js_floats took. */
static size_t read_array(const char *text, size_t len, float *x, bool bytes)
{
    json_scan s;
    js_iter it;
    js_init(&s, text, len);
    size_t got = 0;
    if (js_array(&s, &it))
        got = js_floats(&s, &it, x, PIXELS, bytes);
    js_fini(&s);
    return got;
}

static void check(const form *f, int n)
{
    float x[PIXELS];
    for (int i = 0; i < n; i++) {
        if (read_array(f->text[i], f->len[i], x, f->bytes) != PIXELS) {
            fprintf(stderr, "numparse: %s array %d: not all values read\n", f->name, i);
            exit(1);
        }
        const char *p = f->text[i] + 1;
        for (int j = 0; j < PIXELS; j++) {
            char *e;
            float want = (float)strtod(p, &e);
            if (memcmp(&want, &x[j], sizeof want) != 0) {
                fprintf(stderr, "numparse: %s array %d value %d: %.9g, strtod %.9g\n", f->name, i,
                        j, (double)x[j], (double)want);
                exit(1);
            }
            p = e + 1;
        }
    }
}

static double best_ns(const form *f, int n, int rounds)
{
    float x[PIXELS];
    double best = 1e300;
    volatile float sink = 0;
    for (int r = 0; r < rounds; r++) {
        double t0 = now_ns();
        for (int i = 0; i < n; i++) {
            read_array(f->text[i], f->len[i], x, f->bytes);
            sink += x[i % PIXELS];
        }
        double t = now_ns() - t0;
        best = t < best ? t : best;
    }
    (void)sink;
    return best / ((double)n * PIXELS);
}

int main(int argc, char **argv)
{
    if (argc < 2) {
        fprintf(stderr, "usage: numparse IMAGES_GZ [N] [ROUNDS]\n");
        return 2;
    }
    int n = argc > 2 ? atoi(argv[2]) : 1000, rounds = argc > 3 ? atoi(argv[3]) : 30;
    unsigned char *img = read_images(argv[1], n);
    enum { NFORMS = 4 };
    form forms[NFORMS] = {{"http-fp32", NULL, NULL, false},
                          {"kafka-uint8", NULL, NULL, true},
                          {"decimals", NULL, NULL, false},
                          {"python-uint8", NULL, NULL, true}};
    for (int k = 0; k < NFORMS; k++) {
        forms[k].text = calloc((size_t)n, sizeof(char *));
        forms[k].len = calloc((size_t)n, sizeof(size_t));
        for (int i = 0; i < n; i++) {
            char *t = malloc(PIXELS * 16 + 4), *o = t;
            *o++ = '[';
            for (int j = 0; j < PIXELS; j++) {
                unsigned v = img[(size_t)i * PIXELS + j];
                const char *sep = j ? (k == 1 ? "," : ", ") : "";
                if (k == 0)
                    o += sprintf(o, "%s%u.0", sep, v);
                else if (k == 1 || k == 3)
                    o += sprintf(o, "%s%u", sep, v);
                else if (v % 7 == 0)
                    o += sprintf(o, "%s%u", sep, v);
                else
                    o += sprintf(o, "%s%s%.4f", sep, v % 5 == 0 ? "-" : "", v / 255.0);
            }
            *o++ = ']';
            forms[k].text[i] = t;
            forms[k].len[i] = (size_t)(o - t);
        }
        check(&forms[k], n);
    }
    printf("%-12s %10s\n", "form", "ns/number");
    for (int k = 0; k < NFORMS; k++)
        printf("%-12s %10.2f\n", forms[k].name, best_ns(&forms[k], n, rounds));
    return 0;
}
