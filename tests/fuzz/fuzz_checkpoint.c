/* fuzz_checkpoint.c: training checkpoints (src/train/checkpoint.c), read
 * as a resumed run reads them: the newest step-<N>.safetensors of a model
 * folder, its run position in the metadata and three flat F32 buffers of
 * the sizes the run expects (15 parameters, no state, 30 optimizer
 * values: the 2x2-input model under Adam).
 *
 * Input: as fuzz_safetensors's (a file, or '{' header '\n' data). */
#include "fuzz.h"
#include "train/checkpoint.h"

static char path[700];

int LLVMFuzzerInitialize(int *argc, char ***argv)
{
    (void)argc;
    (void)argv;
    fz_quiet();
    char dir[600];
    snprintf(dir, sizeof(dir), "%s/checkpoints", fz_tmpdir());
    dl_err err = {0};
    FZ_CHECK(dl_mkdir(dir, &err) == DL_OK, "%s", err.msg);
    dl_repo_checkpoint_path(fz_tmpdir(), 1, path, sizeof(path));
    return 0;
}

int LLVMFuzzerTestOneInput(const uint8_t *input, size_t isize)
{
    size_t size;
    uint8_t *data = fz_safetensors(input, isize, &size);
    fz_write(path, data, size);
    free(data);
    float params[15], optim[30], state[1];
    ckpt_pos pos;
    char at[700];
    dl_err err = {0};
    dl_status st = ckpt_read_latest(fz_tmpdir(), &pos, params, 15, state, 0, optim, 30, at,
                                    sizeof(at), &err);
    if (st != DL_OK) {
        fz_check_failure(st, &err);
        return 0;
    }
    FZ_CHECK(pos.step >= 0 && pos.optim_steps >= 0 && pos.batch_size >= 1 && pos.ranks >= 1,
             "step %lld, optim_steps %lld, batch_size %lld, ranks %lld", (long long)pos.step,
             (long long)pos.optim_steps, (long long)pos.batch_size, (long long)pos.ranks);
    return 0;
}
