/* dl_onnx.h: ONNX for dlserve's models: writing a model of the repository
 * (model.json and a version's safetensors) as an ONNX graph, and reading
 * ONNX back: translated into the engine's own model.json graph and weights
 * (then loaded by the one validated path: model.json parsing and the
 * safetensors checks). Depends on nn, tensor and util. */
#ifndef DL_ONNX_H
#define DL_ONNX_H

#include "nn/dl_nn.h"

#ifdef __cplusplus
extern "C" {
#endif

/* ---- export ------------------------------------------------------------ */

/* What an export wrote. Plain struct. */
typedef struct dl_onnx_export_info {
    int64_t version;        /* the version exported */
    int     nodes;          /* graph nodes */
    int     initializers;   /* the safetensors tensors, by their names */
    size_t  bytes;          /* file size */
} dl_onnx_export_info;

/* Writes version `version` (<= 0: the newest with weights) of the model in
 * model_dir (model.json, <version>/model.safetensors) to path as ONNX (IR
 * version 8, opset 17), atomically. Every input and output has the
 * symbolic first dimension "batch"; input scaling is done by the graph on
 * raw inputs; outputs are the raw layer outputs (logits for a
 * classifier); metadata "dlserve.model" holds the name and each output's
 * loss, weight (in the summed loss) and labels.
 * A layer type without an ONNX form, a missing version or bad weights are
 * DL_ERR_INVALID with a message naming them. info may be NULL. */
dl_status dl_onnx_export(const char *model_dir, int64_t version, const char *path,
                         dl_onnx_export_info *info, dl_err *err);

/* ---- import ------------------------------------------------------------ */

/* Most bytes of an ONNX file (or of one external data file). */
#define DL_ONNX_MAX_BYTES (INT64_C(2) << 30)
/* The capacity of a symbolic time axis when nothing gives one. */
#define DL_ONNX_MAX_LENGTH 256

/* An ONNX model translated: model.json text and F32 weights with PyTorch
 * names. Read-only once made. */
typedef struct dl_onnx_model dl_onnx_model;

/* Translates the ONNX model in buf (len bytes) into a model called
 * `name`. dir (may be NULL: external data is then refused) holds its
 * external data files; beside (may be NULL) is the text of a model.json
 * beside it, whose name, description, training, "generate" block,
 * per-input scaling (matched by name) and per-output loss, weight and
 * labels (matched by name) apply; its layers are ignored. Without beside, the model's metadata
 * "dlserve.model" gives the outputs' loss, weight and labels; without either,
 * outputs are served as they are ("mse"; a sequence output: per-token
 * "softmax_cross_entropy"). An input whose second dimension is symbolic
 * is a sequence input of capacity "max_length": the model.json beside's
 * for that input, else the metadata's, else the max_context of the
 * beside's "generate" block (kept in the translation) when the input is
 * its ids, else DL_ONNX_MAX_LENGTH; each
 * sample is computed as the graph computes it alone, at its own length
 * (docs/onnx.md, "Sequence models"). An operator or attribute the
 * engine cannot run exactly is refused: "node 'NAME' (OP, opset N):
 * reason". `what` names the source in errors. *out is new. */
dl_status dl_onnx_parse(const void *buf, size_t len, const char *dir, const char *name,
                        const char *beside, const char *what, dl_onnx_model **out,
                        dl_err *err);
/* dl_onnx_parse of a file; dir is the file's folder. */
dl_status dl_onnx_load(const char *path, const char *name, const char *beside,
                       dl_onnx_model **out, dl_err *err);
void dl_onnx_free(dl_onnx_model *om);

/* The model.json text (borrowed), and the weights: count and tensor i
 * (borrowed; F32, names as "<layer>.weight"). */
const char *dl_onnx_json(const dl_onnx_model *om);
int dl_onnx_tensor_count(const dl_onnx_model *om);
const dl_st_tensor *dl_onnx_tensor_at(const dl_onnx_model *om, int i);

/* Parses the translation's model.json (*conf new) and, when m is not
 * NULL, builds the model on be with the translated weights (*m new). */
dl_status dl_onnx_build(const dl_onnx_model *om, dl_backend *be, const char *what,
                        dl_model_conf **conf, dl_model **m, dl_err *err);

/* dlserve --import: translates `path` and writes MODELS_DIR/NAME/model.json
 * (a model.json already there merged in as for dl_onnx_parse, then
 * rewritten with the graph) and
 * MODELS_DIR/NAME/<version>/model.safetensors, version the next free one
 * (written into *version). max_length > 0 (--max-length) is the capacity
 * of every symbolic time axis, before any other. */
dl_status dl_onnx_import(const char *path, const char *models_dir, const char *name,
                         int64_t max_length, int64_t *version, dl_err *err);

/* Whether importing an ONNX graph can give a layer of type t: some
 * operator translates to it (the others are native only, see
 * src/nn/layer_table.c). */
bool dl_onnx_imports_layer(dl_layer_type t);

#ifdef __cplusplus
}
#endif
#endif /* DL_ONNX_H */
