/* cuda_none.c: dl_cuda.h in a build without CUDA: no device, every call
 * answers "unavailable" or does nothing, so callers need no #ifdef. */
#include "tensor/dl_cuda.h"

bool dl_cuda_available(int *ndevices)
{
    if (ndevices)
        *ndevices = 0;
    return false;
}

void dl_cuda_set_tf32(bool on) { (void)on; }

dl_status dl_backend_cuda_new(int device, dl_backend **out, dl_err *err)
{
    (void)device;
    *out = NULL;
    return dl_err_set(err, DL_ERR_UNAVAILABLE, "no CUDA device: this build has no CUDA backend");
}

void dl_cuda_backend_destroy(dl_backend *be) { dl_backend_free(be); }

bool dl_backend_is_cuda(const dl_backend *be)
{
    (void)be;
    return false;
}

dl_status dl_cuda_sync(dl_backend *be, dl_err *err)
{
    (void)be;
    (void)err;
    return DL_OK;
}

dl_status dl_cuda_memory(dl_backend *be, size_t *used, size_t *total)
{
    (void)be;
    *used = *total = 0;
    return DL_ERR_INVALID;
}

int dl_cuda_device(const dl_backend *be)
{
    (void)be;
    return -1;
}

void *dl_cuda_stream(dl_backend *be)
{
    (void)be;
    return NULL;
}

dl_status dl_cuda_graph_begin(dl_backend *be, dl_err *err)
{
    (void)be;
    return dl_err_set(err, DL_ERR_INVALID, "CUDA graphs need a CUDA backend");
}

dl_status dl_cuda_graph_end(dl_backend *be, dl_cuda_graph **out, dl_err *err)
{
    (void)be;
    *out = NULL;
    return dl_err_set(err, DL_ERR_INVALID, "no CUDA graph is being recorded");
}

dl_status dl_cuda_graph_launch(dl_cuda_graph *g, dl_err *err)
{
    (void)g;
    return dl_err_set(err, DL_ERR_INVALID, "CUDA graphs need a CUDA backend");
}

void dl_cuda_graph_free(dl_cuda_graph *g) { (void)g; }
