/* checkpoint.c: training checkpoints as safetensors files holding the
 * flat "params", "state" and "optimizer" buffers, with the run position
 * as JSON in the metadata. */
#define _POSIX_C_SOURCE 200809L
#include "train/checkpoint.h"

#include <jansson.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

dl_status ckpt_write(const char *model_dir, const ckpt_pos *pos,
                     const float *params, int64_t np, const float *state,
                     int64_t ns, const float *optim, int64_t no, int keep,
                     dl_err *err)
{
    char dir[4096], path[4200], meta[512];
    snprintf(dir, sizeof(dir), "%s/checkpoints", model_dir);
    dl_status st = dl_mkdir(dir, err);
    if (st != DL_OK)
        return st;
    dl_st_tensor t[3] = {
        { .name = "params", .dtype = DL_ST_F32, .ndim = 1, .shape = {np},
          .data = params, .nbytes = (size_t)np * sizeof(float) },
        { .name = "state", .dtype = DL_ST_F32, .ndim = 1, .shape = {ns},
          .data = state, .nbytes = (size_t)ns * sizeof(float) },
        { .name = "optimizer", .dtype = DL_ST_F32, .ndim = 1, .shape = {no},
          .data = optim, .nbytes = (size_t)no * sizeof(float) },
    };
    snprintf(meta, sizeof(meta),
             "{\"step\":%lld,\"optim_steps\":%lld,\"rng_counter\":%llu,\"seed\":%llu,"
             "\"batch_size\":%lld,\"ranks\":%lld}",
             (long long)pos->step, (long long)pos->optim_steps,
             (unsigned long long)pos->rng_counter, (unsigned long long)pos->seed,
             (long long)pos->batch_size, (long long)pos->ranks);
    const char *kv[2] = { "dlserve.checkpoint", meta };
    dl_repo_checkpoint_path(model_dir, pos->step, path, sizeof(path));
    if ((st = dl_st_write(path, t, 3, kv, 1, err)) != DL_OK)
        return st;
    int64_t steps[256];
    int n = dl_repo_checkpoints(model_dir, steps, 256);
    for (int i = keep; i < n; i++) {
        dl_repo_checkpoint_path(model_dir, steps[i], path, sizeof(path));
        unlink(path);
    }
    return DL_OK;
}

static dl_status copy_tensor(const dl_st_file *f, const char *name, float *dst,
                             int64_t n, const char *path, dl_err *err)
{
    const dl_st_tensor *t = dl_st_find(f, name);
    if (!t || t->dtype != DL_ST_F32 || t->ndim != 1 || t->shape[0] != n)
        return dl_err_set(err, DL_ERR_INVALID,
                          "%s: tensor '%s' missing or not F32 [%lld] (a different model "
                          "or optimizer?)", path, name, (long long)n);
    memcpy(dst, t->data, (size_t)n * sizeof(float));
    return DL_OK;
}

/* The position's `key`, an integer >= min, into *out. */
static dl_status pos_int(json_t *j, const char *key, int64_t min, const char *path,
                         int64_t *out, dl_err *err)
{
    json_t *v = json_object_get(j, key);
    if (!json_is_integer(v) || json_integer_value(v) < min)
        return dl_err_set(err, DL_ERR_INVALID,
                          "%s: dlserve.checkpoint metadata: '%s' is not an integer >= %lld",
                          path, key, (long long)min);
    *out = json_integer_value(v);
    return DL_OK;
}

static dl_status read_pos(const dl_st_file *f, const char *path, ckpt_pos *pos,
                          dl_err *err)
{
    const char *meta = dl_st_meta(f, "dlserve.checkpoint");
    json_t *j = meta ? json_loads(meta, 0, NULL) : NULL;
    if (!json_is_object(j)) {
        json_decref(j);
        return dl_err_set(err, DL_ERR_INVALID, "%s: no dlserve.checkpoint metadata", path);
    }
    /* Written by ckpt_write; a position out of these bounds is a damaged file. */
    int64_t rng = 0, seed = 0;
    dl_status st = pos_int(j, "step", 0, path, &pos->step, err);
    if (st == DL_OK)
        st = pos_int(j, "optim_steps", 0, path, &pos->optim_steps, err);
    if (st == DL_OK)
        st = pos_int(j, "rng_counter", 0, path, &rng, err);
    if (st == DL_OK)
        st = pos_int(j, "seed", 0, path, &seed, err);
    if (st == DL_OK)
        st = pos_int(j, "batch_size", 1, path, &pos->batch_size, err);
    if (st == DL_OK)
        st = pos_int(j, "ranks", 1, path, &pos->ranks, err);
    pos->rng_counter = (uint64_t)rng;
    pos->seed = (uint64_t)seed;
    json_decref(j);
    return st;
}

dl_status ckpt_read_latest(const char *model_dir, ckpt_pos *pos, float *params,
                           int64_t np, float *state, int64_t ns, float *optim,
                           int64_t no, char *path, size_t path_len, dl_err *err)
{
    int64_t steps[1];
    if (dl_repo_checkpoints(model_dir, steps, 1) == 0)
        return dl_err_set(err, DL_ERR_IO, "%s/checkpoints: no checkpoint to resume from",
                          model_dir);
    dl_repo_checkpoint_path(model_dir, steps[0], path, path_len);
    dl_st_file *f;
    dl_status st = dl_st_load(path, &f, err);
    if (st != DL_OK)
        return st;
    st = read_pos(f, path, pos, err);
    if (st == DL_OK)
        st = copy_tensor(f, "params", params, np, path, err);
    if (st == DL_OK)
        st = copy_tensor(f, "state", state, ns, path, err);
    if (st == DL_OK)
        st = copy_tensor(f, "optimizer", optim, no, path, err);
    dl_st_free(f);
    return st;
}
