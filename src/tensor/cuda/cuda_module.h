/* cuda_module.h (private to tensor/cuda/): the interface between the core
 * and the CUDA backend module, libdlserve-cuda.so. The module links cuBLAS,
 * whose loading alone costs a process about 0.1 s and 90 MB of private
 * memory; cuda_loader.c opens the module on the first CUDA request, so
 * runs that never touch a GPU never pay for it. The module links nothing
 * of the core: it gets logging and error formatting from the host table. */
#ifndef DL_TENSOR_CUDA_MODULE_H
#define DL_TENSOR_CUDA_MODULE_H

#include "tensor/dl_tensor.h"

#ifdef __cplusplus
extern "C" {
#endif

/* Bumped whenever this file or dl_backend_ops changes shape. */
#define DL_CUDA_MODULE_ABI 4

/* What the core lends the module. */
typedef struct dl_cuda_host {
    int  *log_level;                                   /* &dl_log_level */
    void (*log_write)(int level, const char *subsys, const char *fmt, ...)
        __attribute__((format(printf, 3, 4)));
    dl_status (*err_set)(dl_err *err, dl_status code, const char *fmt, ...)
        __attribute__((format(printf, 3, 4)));
} dl_cuda_host;

/* What the module offers; everything else a CUDA backend does goes
 * through its ops table (free, sync, memory, stream and graphs included).
 *
 * backend_new creates a CUDA backend on device `device`, or with device < 0
 * on the GPU of this process's local rank (OMPI_COMM_WORLD_LOCAL_RANK,
 * SLURM_LOCALID, MPI_LOCALRANKID, MV2_COMM_WORLD_LOCAL_RANK or LOCAL_RANK,
 * modulo the number of devices; 0 without a launcher), with TF32 GEMMs
 * when tf32 is set. *out is new (dl_backend_free).
 *
 * Errors: DL_ERR_UNAVAILABLE with "no CUDA device" in the message when the
 * machine has no usable GPU or driver (CI sees this), or when the GPU is
 * older than sm_90; DL_ERR_INVALID for a device index out of range;
 * DL_ERR_BACKEND or DL_ERR_NOMEM when the device, cuBLAS or the first
 * buffers fail.
 *
 * How the ops behave on this backend:
 * - Ops are queued on one stream in call order and may return before the
 *   GPU has run them. Anything that hands results to the host (download,
 *   xent, mse, embed_fwd's status check) waits for the queue first, so a
 *   caller sees exactly the CPU backend's semantics. Host buffers given to
 *   upload, xent (labels) and mse (targets) may be reused on return.
 * - One thread at a time may use a backend (any thread; the device is
 *   selected on each call).
 * - Errors of ops that return void are logged (subsystem "cuda") and
 *   latched: the next op that returns dl_status (alloc, gemm, embed_fwd,
 *   sync, the graph ops) fails with that error (DL_ERR_BACKEND,
 *   DL_ERR_NOMEM when a scratch buffer did not fit, DL_ERR_INVALID for a
 *   host transfer inside a graph recording) and its message, and the
 *   latch clears.
 * - alloc draws from size-class free lists; it calls cudaMalloc only when
 *   a class is empty (warm-up). Out of device memory it first returns the
 *   cached blocks to the device and retries, then answers DL_ERR_NOMEM; it
 *   never aborts. release returns a block to its list (safe because every
 *   op runs on the one stream).
 * - Results are checked against the CPU backend's (1e-5 relative error in
 *   fp32, tests/gpu/test_gpu_ops.c) and are deterministic for given
 *   inputs: no floating-point atomics. Dropout masks come from a
 *   counter-based hash of (seed, index): same distribution as the CPU's,
 *   same mask for the same seed, not the same bits as the CPU's. */
typedef struct dl_cuda_module {
    int       abi;        /* DL_CUDA_MODULE_ABI */
    size_t    ops_size;   /* sizeof(dl_backend_ops) */
    dl_status (*backend_new)(int device, bool tf32, dl_backend **out, dl_err *err);
} dl_cuda_module;

/* The module's one exported symbol, DL_CUDA_ENTRY: keeps host (borrowed
 * for the life of the process) and returns the module's table. */
#define DL_CUDA_ENTRY "dl_cuda_module_entry"
typedef const dl_cuda_module *(*dl_cuda_entry_fn)(const dl_cuda_host *host);

#ifdef __cplusplus
}
#endif
#endif /* DL_TENSOR_CUDA_MODULE_H */
