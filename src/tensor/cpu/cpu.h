/* cpu.h (private to src/tensor/cpu, and the unit tests that check its
 * kernels): what the CPU backend's files share beyond its registration.
 * backend_cpu.c picks, per call, between OpenBLAS and the thin GEMM kernel
 * of gemm_thin.c, and between im2col and the oneDNN primitives of
 * backend_dnnl.c; both choices follow DLSERVE_CPU_GEMM and DLSERVE_CPU_CONV
 * (dl_tensor.h). */
#ifndef DL_TENSOR_CPU_H
#define DL_TENSOR_CPU_H

#include "tensor/dl_tensor.h"

/* gemm_thin.c: C (m, n) = A (m, k) B (n, k)^T, row-major with these
 * leading dimensions, reading both where they lie. dl_gemm_thin_usable:
 * whether this CPU has the AVX2 and FMA the kernel runs on (call it only
 * then; off x86 it is a plain loop, never chosen); _preferred: usable and
 * OpenBLAS runs a core without its small-matrix kernels (SkylakeX and
 * its successors), which read thin operands in place themselves. */
bool dl_gemm_thin_usable(void);
bool dl_gemm_thin_preferred(void);
void dl_gemm_thin(int64_t m, int64_t n, int64_t k, const float *a, int64_t lda,
                  const float *b, int64_t ldb, float *c, int64_t ldc);
/* dl_gemm_thin runs the AVX-512 kernel where the CPU has AVX-512
 * (dl_gemm_thin_avx512_usable), the AVX2 one otherwise;
 * dl_gemm_thin_avx2 is always the AVX2 one (the tests check both). */
bool dl_gemm_thin_avx512_usable(void);
void dl_gemm_thin_avx2(int64_t m, int64_t n, int64_t k, const float *a, int64_t lda,
                       const float *b, int64_t ldb, float *c, int64_t ldc);

/* backend_dnnl.c, in a build with oneDNN: convolution and pooling
 * primitives for the CPU backend, over NCHW (or blocked, as g->blocked
 * says) and OIHW buffers, each
 * created on the first call with its geometry and kept (up to a bound).
 * Calls are serialised on the context's mutex; they run on oneDNN's OpenMP
 * team of `threads` threads. DL_ERR_UNAVAILABLE means oneDNN has no
 * implementation for this geometry (the caller then uses im2col). */
typedef struct dl_dnnl dl_dnnl;
dl_status dl_dnnl_new(int threads, dl_dnnl **out, dl_err *err);
/* Hands dl_parallel_for's loops to oneDNN's OpenMP team (process-wide). */
void      dl_dnnl_own_loops(void);
void      dl_dnnl_free(dl_dnnl *d);
/* The channel block of the blocked activation layout (be->engine_block). */
int       dl_dnnl_block(const dl_dnnl *d);
dl_status dl_dnnl_conv_fwd(dl_dnnl *d, const dl_conv_geom *g, const float *x,
                           const float *w, const float *b, const dl_act *post, float *y,
                           dl_err *err);
/* See dl_backend_ops.fix_weights. */
void      dl_dnnl_fix_weights(dl_dnnl *d, const void *w, size_t bytes, bool fixed);
dl_status dl_dnnl_conv_bwd_data(dl_dnnl *d, const dl_conv_geom *g, const float *dy,
                                const float *w, float *dx, dl_err *err);
dl_status dl_dnnl_conv_bwd_weights(dl_dnnl *d, const dl_conv_geom *g, const float *x,
                                   const float *dy, float *dw, float *db, dl_err *err);
dl_status dl_dnnl_pool_fwd(dl_dnnl *d, dl_pool_kind kind, const dl_conv_geom *g,
                           const float *x, float *y, void *ws, size_t ws_bytes, dl_err *err);
dl_status dl_dnnl_pool_bwd(dl_dnnl *d, dl_pool_kind kind, const dl_conv_geom *g,
                           const float *dy, const void *ws, size_t ws_bytes, float *dx,
                           dl_err *err);

#endif /* DL_TENSOR_CPU_H */
