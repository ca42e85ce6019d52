/* backend.h (private to src/tensor): how a backend makes itself known to
 * dl_backend_new. Each backend file defines one registration; tensor.c
 * lists them, and nothing else in the tree names a backend.
 *
 * Adding a backend NAME:
 *  1. In src/tensor/NAME/ (its own meson.build, appending to core_src and
 *     subdir'd from the top-level meson.build), fill a const
 *     dl_backend_ops (dl_tensor.h) and a create() that returns a
 *     struct dl_backend pointing at it.
 *  2. Define `const dl_backend_reg dl_backend_NAME_reg`, declare it below
 *     and add it to backends[] in tensor.c.
 *  3. Keep everything else in a header of its own in that folder (the
 *     CPU's is cpu/cpu.h, CUDA's cuda/cuda_module.h), and test every op
 *     against the CPU's, as tests/gpu/test_gpu_ops.c does for CUDA. */
#ifndef DL_TENSOR_BACKEND_H
#define DL_TENSOR_BACKEND_H

#include "tensor/dl_tensor.h"

#ifdef __cplusplus
extern "C" {
#endif

typedef struct dl_backend_reg {
    const char *name;      /* the device word, as in ops->name */
    bool        indexed;   /* accepts "NAME:N" */
    /* Creates a backend on device `index` (-1: the default device, or
     * none for a backend without indices); p is never NULL. Errors as
     * dl_backend_new's. */
    dl_status (*create)(int index, const dl_backend_params *p, dl_backend **out,
                        dl_err *err);
} dl_backend_reg;

/* cpu/backend_cpu.c */
extern const dl_backend_reg dl_backend_cpu_reg;
/* cuda/cuda_loader.c in a build with CUDA, cuda/cuda_none.c without:
 * the name is known either way, so "cuda" answers "unavailable" rather
 * than "unknown device" on a machine without it. */
extern const dl_backend_reg dl_backend_cuda_reg;

#ifdef __cplusplus
}
#endif
#endif /* DL_TENSOR_BACKEND_H */
