/* dl_cuda.h: the CUDA backend behind the ops table of dl_tensor.h (cuBLAS
 * GEMMs, our own kernels for everything else, a caching device memory
 * pool, one compute stream), and the few CUDA-only calls that code above
 * the ops table needs: device discovery, TF32 mode, memory figures for
 * /metrics, synchronisation, CUDA graphs, and the device and stream for
 * NCCL. Never includes cuda_runtime.h. The backend lives in a module
 * (libdlserve-cuda.so) loaded by the first call that needs a GPU, so CPU
 * runs never load cuBLAS. In a build without CUDA every call exists and
 * answers "unavailable". */
#ifndef DL_CUDA_H
#define DL_CUDA_H

#include "tensor/dl_tensor.h"

#ifdef __cplusplus
extern "C" {
#endif

/* True when this build has the CUDA backend and the machine at least one
 * usable device; *ndevices (may be NULL) receives their number, 0 when
 * there is none. Loads the module. Thread-safe. */
bool dl_cuda_available(int *ndevices);

/* TF32 tensor-core GEMMs (--math tf32) for the CUDA backends created after
 * this call: the products keep 10 mantissa bits, so a GEMM's relative
 * error grows from about 1e-6 to about 1e-3. Off by default. Call at
 * start-up (not thread-safe); does not load the module. The CPU backend
 * ignores it. */
void dl_cuda_set_tf32(bool on);

/* Creates a CUDA backend (loading the module) on device `device`, or with
 * device < 0 on the GPU of this process's local rank
 * (OMPI_COMM_WORLD_LOCAL_RANK, SLURM_LOCALID, MPI_LOCALRANKID,
 * MV2_COMM_WORLD_LOCAL_RANK or LOCAL_RANK, modulo the number of devices;
 * 0 without a launcher). *out is new; see dl_cuda_backend_destroy for its
 * end. $DLSERVE_CUDA_MODULE names another module file.
 *
 * Errors: DL_ERR_UNAVAILABLE with "no CUDA device" in the message when the
 * build has no CUDA, the module cannot be loaded, or the machine has no
 * usable GPU or driver (CI sees this), or when the GPU is older than
 * sm_90; DL_ERR_INVALID for a device index out of range; DL_ERR_BACKEND or
 * DL_ERR_NOMEM when the device, cuBLAS or the first buffers fail.
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
 *   latched: the next op that returns dl_status (alloc, gemm, embed_fwd)
 *   or dl_cuda_sync fails with that error (DL_ERR_BACKEND, DL_ERR_NOMEM
 *   when a scratch buffer did not fit, DL_ERR_INVALID for a host transfer
 *   inside a graph recording) and its message, and the latch clears.
 * - alloc draws from size-class free lists; it calls cudaMalloc only when
 *   a class is empty (warm-up). Out of device memory it first returns the
 *   cached blocks to the device and retries, then answers DL_ERR_NOMEM; it
 *   never aborts. release returns a block to its list (safe because every
 *   op runs on the one stream).
 * - Results are checked against the CPU backend's (1e-5 relative error in
 *   fp32, tests/gpu/test_gpu_ops.c) and are deterministic for given
 *   inputs: no floating-point atomics. Dropout
 *   masks come from a counter-based hash of (seed, index): same
 *   distribution as the CPU's, same mask for the same seed, not the same
 *   bits as the CPU's. */
dl_status dl_backend_cuda_new(int device, dl_backend **out, dl_err *err);

/* Frees what a CUDA backend holds on the device and the host, then be
 * itself; NULL does nothing. dl_backend_free(be) on a CUDA backend frees
 * only the struct and leaves the device memory, handles and stream to the
 * end of the process (the ops table has no destructor yet). */
void dl_cuda_backend_destroy(dl_backend *be);

/* True when be is a CUDA backend. */
bool dl_backend_is_cuda(const dl_backend *be);

/* Waits until every op queued on be has run, then reports (and clears) a
 * latched error. DL_OK for other backends. */
dl_status dl_cuda_sync(dl_backend *be, dl_err *err);

/* Bytes the pool of be holds on the device (in use plus cached for reuse)
 * and the device's total memory. DL_ERR_INVALID for other backends. */
dl_status dl_cuda_memory(dl_backend *be, size_t *used, size_t *total);

/* The device index of a CUDA backend (-1 for others) and its compute
 * stream, a cudaStream_t (NULL for others; borrowed). For NCCL in
 * train/dist, which queues its collectives on that stream. */
int   dl_cuda_device(const dl_backend *be);
void *dl_cuda_stream(dl_backend *be);

/* ---- CUDA graphs ----------------------------------------------------------
 * Records the ops called on a backend between begin and end into a graph
 * that launch replays as one unit (much cheaper than launching each
 * kernel). Ops that talk to the host (upload, download, xent, mse,
 * embed_fwd) must not be called while recording, and every buffer must
 * already exist: run the work once before recording it. A graph reads and
 * writes the buffers it recorded: they must stay allocated, unchanged in
 * size, while it lives. Not for other backends (DL_ERR_INVALID). */
typedef struct dl_cuda_graph dl_cuda_graph;

dl_status dl_cuda_graph_begin(dl_backend *be, dl_err *err);
/* Ends the recording. *out is new (dl_cuda_graph_free). */
dl_status dl_cuda_graph_end(dl_backend *be, dl_cuda_graph **out, dl_err *err);
/* Queues one replay on the backend's stream. */
dl_status dl_cuda_graph_launch(dl_cuda_graph *g, dl_err *err);
void dl_cuda_graph_free(dl_cuda_graph *g);

#ifdef __cplusplus
}
#endif
#endif /* DL_CUDA_H */
