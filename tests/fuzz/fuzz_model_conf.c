/* fuzz_model_conf.c: model.json (src/nn/model_conf.c): parsed and
 * validated, layer chain and labels included; a configuration that passes
 * is looked at whole. */
#include "fuzz.h"

int LLVMFuzzerInitialize(int *argc, char ***argv)
{
    (void)argc;
    (void)argv;
    fz_quiet();
    return 0;
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
    }
    dl_model_conf_free(conf);
    free(text);
    return 0;
}
