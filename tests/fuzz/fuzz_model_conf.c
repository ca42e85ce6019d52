/* fuzz_model_conf.c: model.json (src/nn/model_conf.c): parsed and
 * validated, layer chain and labels included; a configuration that passes
 * is looked at whole and, when it is small, built (src/nn/model.c) and run
 * forward on two samples, as the daemon does with every model it loads. */
#include "fuzz.h"

static dl_backend *be;

int LLVMFuzzerInitialize(int *argc, char ***argv)
{
    (void)argc;
    (void)argv;
    fz_quiet();
    be = fz_cpu_backend();
    return 0;
}

/* Small enough to build at every input: a few thousand values a sample
 * and at most 64 units, filters or embedding dimensions a layer. */
static bool small(const dl_model_conf *conf)
{
    int64_t n = 1;
    for (int i = 0; i < conf->in_ndim; i++) {
        if (conf->in_shape[i] > 4096)
            return false;
        n *= conf->in_shape[i];
        if (n > 4096)
            return false;
    }
    for (int i = 0; i < conf->nlayers; i++) {
        const dl_layer_conf *l = &conf->layers[i];
        if (l->units > 64 || l->filters > 64 || l->dim > 64 || l->num_embeddings > 1024)
            return false;
    }
    return true;
}

/* Builds the model and predicts two samples of zeros (valid ids for an
 * embedding too). */
static void run(const dl_model_conf *conf)
{
    dl_model *m = NULL;
    dl_err err = {0};
    dl_status st = dl_model_new(be, conf, 1, &m, &err);
    fz_check_failure(st, &err);
    if (st != DL_OK)
        return;
    int64_t in_dim = dl_model_in_dim(m), out_dim = dl_model_out_dim(m);
    FZ_CHECK(in_dim >= 1 && out_dim >= 1, "in_dim %lld, out_dim %lld", (long long)in_dim,
             (long long)out_dim);
    float *x = calloc((size_t)(2 * in_dim), sizeof(float));
    float *y = calloc((size_t)(2 * out_dim), sizeof(float));
    FZ_CHECK(x && y, "out of memory");
    st = dl_model_predict(m, x, 2, 2, y, &err);
    fz_check_failure(st, &err);
    free(x);
    free(y);
    dl_model_free(m);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    /* A copy of exactly the text, so that ASan sees any read past it. */
    char *text = malloc(size ? size : 1);
    FZ_CHECK(text != NULL, "out of memory");
    if (size)
        memcpy(text, data, size);
    dl_model_conf *conf = NULL;
    dl_err err = {0};
    dl_status st = dl_model_conf_parse(text, size, "model.json", &conf, &err);
    if (st != DL_OK) {
        fz_check_failure(st, &err);
        FZ_CHECK(conf == NULL, "a refused model.json came back");
    } else {
        FZ_CHECK(dl_model_name_valid(conf->name, strlen(conf->name)), "name '%s'", conf->name);
        FZ_CHECK(conf->in_ndim >= 1 && conf->in_ndim <= DL_MAX_DIMS, "in_ndim %d",
                 conf->in_ndim);
        FZ_CHECK(conf->nlayers >= 1 && conf->layers, "no layers");
        for (int i = 0; i < conf->nlabels; i++)
            FZ_CHECK(conf->labels[i] != NULL, "label %d", i);
        dl_scaling sc = dl_scaling_of(conf);
        FZ_CHECK(sc.std > 0, "std %g", (double)sc.std);
        (void)dl_layer_type_name(conf->layers[conf->nlayers - 1].type);
        if (small(conf))
            run(conf);
    }
    dl_model_conf_free(conf);
    free(text);
    return 0;
}
