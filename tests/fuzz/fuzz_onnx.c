/* fuzz_onnx.c: ONNX files (src/onnx/onnx_read.c and onnx_import.c), as
 * --import and the daemon read a version's model.onnx: the protobuf
 * decoded, the graph translated, and a translation that succeeds parsed
 * as model.json and built with its weights on the CPU.
 *
 * Input: an ONNX file (corpus: small models exported by PyTorch,
 * make_onnx_corpus.py). External data is refused (no folder given). */
#include "fuzz.h"
#include "onnx/dl_onnx.h"

static dl_backend *be;

int LLVMFuzzerInitialize(int *argc, char ***argv)
{
    (void)argc;
    (void)argv;
    fz_quiet();
    be = fz_cpu_backend();
    return 0;
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    dl_onnx_model *om = NULL;
    dl_err err = {0};
    dl_status st = dl_onnx_parse(data, size, NULL, "fuzz", NULL, "fuzz.onnx", &om, &err);
    if (st != DL_OK) {
        fz_check_failure(st, &err);
        FZ_CHECK(om == NULL, "a refused file came back");
        return 0;
    }
    dl_model_conf *conf = NULL;
    dl_model *m = NULL;
    st = dl_onnx_build(om, be, "fuzz.onnx", &conf, &m, &err);
    if (st != DL_OK)
        fz_check_failure(st, &err);
    dl_model_free(m);
    dl_model_conf_free(conf);
    dl_onnx_free(om);
    return 0;
}
