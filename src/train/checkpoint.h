/* checkpoint.h (private to train/): training checkpoints: parameters,
 * state, optimizer state and the position in the run, in one safetensors
 * file under MODEL_DIR/checkpoints/, written atomically. */
#ifndef DL_TRAIN_CHECKPOINT_H
#define DL_TRAIN_CHECKPOINT_H

#include "nn/dl_nn.h"

/* Where a run stands. */
typedef struct ckpt_pos {
    int64_t  step;          /* global optimizer steps done */
    int64_t  optim_steps;   /* the optimizer's own counter (Adam's t) */
    uint64_t rng_counter;   /* dropout pass counter */
    uint64_t seed;
    int64_t  batch_size, ranks;
} ckpt_pos;

/* Writes MODEL_DIR/checkpoints/step-<step>.safetensors (host buffers) and
 * removes all but the newest `keep` checkpoints. */
dl_status ckpt_write(const char *model_dir, const ckpt_pos *pos,
                     const float *params, int64_t np, const float *state,
                     int64_t ns, const float *optim, int64_t no, int keep,
                     dl_err *err);

/* Reads the newest checkpoint into the host buffers, whose sizes must
 * match; DL_ERR_IO when there is none. */
dl_status ckpt_read_latest(const char *model_dir, ckpt_pos *pos, float *params,
                           int64_t np, float *state, int64_t ns, float *optim,
                           int64_t no, char *path, size_t path_len, dl_err *err);

#endif /* DL_TRAIN_CHECKPOINT_H */
