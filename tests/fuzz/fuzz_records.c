/* fuzz_records.c: Kafka record values (src/serve/kafka/records.c: the JSON
 * forms, the binary extension's payload and raw float32) through
 * record_open and record_decode_into against a 2x2-input model, and the
 * prediction written back for what was read.
 *
 * Input: an optional first line "B LEN MODEL ID" (each '-' when absent; B
 * is 1 for content-type application/octet-stream, LEN the
 * Inference-Header-Content-Length header), then the record value. Without
 * a '\n' the whole input is the value of a record without headers. */
#include "fuzz.h"
#include "serve/kafka/records.h"

#include <jansson.h>

static dl_model_conf *conf;

int LLVMFuzzerInitialize(int *argc, char ***argv)
{
    (void)argc;
    (void)argv;
    fz_quiet();
    conf = fz_model_conf();
    return 0;
}

/* The next space-separated field of *p, NULL for "-" or none. */
static const char *field(char **p)
{
    char *f = *p;
    if (!f)
        return NULL;
    char *sp = strchr(f, ' ');
    *p = sp ? sp + 1 : NULL;
    if (sp)
        *sp = '\0';
    return strcmp(f, "-") ? f : NULL;
}

/* The prediction of n samples is one JSON object naming the record's id. */
static void check_output(const record_env *env, int64_t n)
{
    float *y = calloc((size_t)n * 3, sizeof(float));
    FZ_CHECK(y != NULL, "out of memory");
    for (int64_t i = 0; i < n * 3; i++)
        y[i] = (float)(i % 3) / 3.0f;
    record_out o = {.id = env->id, .model = env->model, .version = env->version,
                    .conf = conf, .n = n, .out_dim = 3, .y = y, .topic = "in",
                    .partition = 0, .offset = 1};
    size_t len;
    char *text = record_output(&o, &len);
    FZ_CHECK(text != NULL, "record_output failed");
    json_error_t jerr;
    json_t *j = json_loadb(text, len, JSON_REJECT_DUPLICATES, &jerr);
    FZ_CHECK(j != NULL, "the prediction is not JSON (%s): %s", jerr.text, text);
    FZ_CHECK(!strcmp(json_string_value(json_object_get(j, "id")), env->id),
             "the prediction names another id");
    json_decref(j);
    free(text);
    free(y);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    char line[256];
    record_in in = {.topic = "in", .partition = 0, .offset = 1};
    if (fz_split_line(&data, &size, line, sizeof(line))) {
        char *p = line;
        const char *b = field(&p);
        in.binary = b && b[0] == '1';
        in.json_len_hdr = field(&p);
        in.model_hdr = field(&p);
        in.id_hdr = field(&p);
    }
    /* A copy of exactly the value's bytes, so that ASan sees any read past it. */
    void *value = malloc(size ? size : 1);
    FZ_CHECK(value != NULL, "out of memory");
    if (size)
        memcpy(value, data, size);
    in.value = value;
    in.len = size;

    record_env env = {0};
    dl_err err = {0};
    record_fault f = record_open(&in, "tiny", 1 << 20, &env, &err);
    FZ_CHECK(env.id != NULL, "no id for the record (fault %d)", (int)f);
    if (f != REC_OK) {
        fz_check_failure(err.code, &err);
    } else {
        float *x = NULL;
        size_t cap = 0;
        int64_t n = 0;
        const void *values = NULL;
        f = record_decode_into(&in, &env, conf, NULL, 4, &n, &x, &cap, &values, &err);
        if (f != REC_OK) {
            fz_check_failure(err.code, &err);
        } else {
            /* scanned: the values are x's; raw float32: the record's own */
            bool in_x = values == x && x && cap >= (size_t)n * 4;
            bool in_value = values == in.value && in.len == (size_t)n * 4 * sizeof(float);
            FZ_CHECK(n >= 1 && (in_x || in_value), "n %lld, cap %zu", (long long)n, cap);
            fz_touch(values, (size_t)(n * 4) * sizeof(float));
            check_output(&env, n);
        }
        free(x);
    }
    record_env_fini(&env);
    free(value);
    return 0;
}
