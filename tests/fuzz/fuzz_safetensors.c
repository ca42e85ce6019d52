/* fuzz_safetensors.c: safetensors files (src/nn/safetensors.c), as model
 * weights and checkpoints are read: the whole file parsed from memory,
 * every tensor and the metadata looked at, and a file that parses loaded
 * as the weights of a small model (src/nn/model_io.c).
 *
 * Input: a file; or, starting with '{', its JSON header, '\n', its data
 * (the harness adds the length: fz_safetensors). */
#include "fuzz.h"

static dl_model_conf *conf;
static dl_backend *be;
static dl_model *model;
static char path[600];

int LLVMFuzzerInitialize(int *argc, char ***argv)
{
    (void)argc;
    (void)argv;
    fz_quiet();
    conf = fz_model_conf();
    be = fz_cpu_backend();
    dl_err err = {0};
    FZ_CHECK(dl_model_new(be, conf, 1, &model, &err) == DL_OK, "%s", err.msg);
    snprintf(path, sizeof(path), "%s/model.safetensors", fz_tmpdir());
    return 0;
}

int LLVMFuzzerTestOneInput(const uint8_t *input, size_t isize)
{
    size_t size;
    uint8_t *data = fz_safetensors(input, isize, &size);
    dl_st_file *f = NULL;
    dl_err err = {0};
    dl_status st = dl_st_parse(data, size, "fuzz.safetensors", &f, &err);
    if (st != DL_OK) {
        fz_check_failure(st, &err);
        FZ_CHECK(f == NULL, "a refused file came back");
        free(data);
        return 0;
    }
    for (int i = 0; i < dl_st_count(f); i++) {
        const dl_st_tensor *t = dl_st_at(f, i);
        FZ_CHECK(t->name && dl_st_find(f, t->name) == t, "tensor %d not found by name", i);
        FZ_CHECK(t->ndim >= 0 && t->ndim <= DL_ST_MAX_DIMS, "ndim %d", t->ndim);
        fz_touch(t->data, t->nbytes);
        (void)dl_st_dtype_name(t->dtype);
    }
    const char *meta = dl_st_meta(f, "format");
    FZ_CHECK(!meta || strlen(meta) < size, "metadata longer than the file");
    dl_st_free(f);

    /* As weights: names, dtypes and shapes against the model's. */
    fz_write(path, data, size);
    st = dl_model_load(model, path, &err);
    fz_check_failure(st, &err);
    free(data);
    return 0;
}
