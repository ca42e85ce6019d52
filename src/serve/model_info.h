/* model_info.h (private to serve/): Triton's statistics and model
 * configuration extensions as JSON (model_info.c), for every transport. */
#ifndef DL_SERVE_MODEL_INFO_H
#define DL_SERVE_MODEL_INFO_H

#include "serve/batcher.h"
#include "serve/registry.h"
#include "serve/stats.h"

#include <jansson.h>

typedef struct model_info_deps {
    registry *reg;
    batcher  *bat;
    stats    *st;
} model_info_deps;

/* Triton's statistics extension: {"model_stats": [...]} (*out new): every
 * model's when model is "", each version with statistics and each served
 * version (zero counts when it has answered nothing), or only `version`
 * when it is not 0. DL_ERR_NOT_FOUND for a model or version the registry
 * does not know. */
dl_status model_info_stats(const model_info_deps *d, const char *model, int64_t version,
                           json_t **out, dl_err *err);

/* Triton's model configuration (JSON) of a served version (*out new):
 * name, platform, backend, max_batch_size, input, output, dynamic_batching
 * with its queue policy, dlserve's own "batch_invariant" and a sequence
 * input's "max_length". registry_acquire's status when the version is not
 * served (not found, or unavailable when nothing is ready). */
dl_status model_info_config(const model_info_deps *d, const char *model, int64_t version,
                            json_t **out, dl_err *err);

#endif /* DL_SERVE_MODEL_INFO_H */
