/* cuda_none.c: the "cuda" backend registration in a build without CUDA:
 * the name is known, and asking for it answers "unavailable". */
#include "tensor/backend.h"

static dl_status cuda_create(int index, const dl_backend_params *p, dl_backend **out,
                             dl_err *err)
{
    (void)index;
    (void)p;
    *out = NULL;
    return dl_err_set(err, DL_ERR_UNAVAILABLE, "no CUDA device: this build has no CUDA backend");
}

const dl_backend_reg dl_backend_cuda_reg = {
    .name    = "cuda",
    .indexed = true,
    .create  = cuda_create,
};
