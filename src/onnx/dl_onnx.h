/* dl_onnx.h: ONNX for dlserve's models: writing a model of the repository
 * (model.json and a version's safetensors) as an ONNX graph, and reading
 * ONNX back. Depends on nn, tensor and util. */
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
 * classifier); metadata "dlserve.model" holds the name, losses and labels.
 * A layer type without an ONNX form, a missing version or bad weights are
 * DL_ERR_INVALID with a message naming them. info may be NULL. */
dl_status dl_onnx_export(const char *model_dir, int64_t version, const char *path,
                         dl_onnx_export_info *info, dl_err *err);

#ifdef __cplusplus
}
#endif
#endif /* DL_ONNX_H */
