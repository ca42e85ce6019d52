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
/* A dense layer's forward, y (m, n) = post(x (m, k) W^T + b), when its
 * weights lie in fixed weights (a model that only serves); else
 * DL_ERR_UNAVAILABLE with err untouched (the caller's GEMM runs it). */
dl_status dl_dnnl_dense_fwd(dl_dnnl *d, int64_t m, int64_t n, int64_t k, const float *x,
                            const float *w, const float *b, const dl_act *post, float *y,
                            dl_err *err);
/* The same with a unary op fused (dl_backend_ops.gemm_bias_unary). */
dl_status dl_dnnl_dense_fwd_unary(dl_dnnl *d, int64_t m, int64_t n, int64_t k, const float *x,
                                  const float *w, const float *b, const dl_unary *u, float *y,
                                  dl_err *err);
/* See dl_backend_ops.conv_fwd_unary. */
dl_status dl_dnnl_conv_fwd_unary(dl_dnnl *d, const dl_conv_geom *g, const float *x,
                                 const float *w, const float *b, const dl_unary *u,
                                 float *y, dl_err *err);
/* See dl_backend_ops.conv_fwd_add. */
dl_status dl_dnnl_conv_fwd_add(dl_dnnl *d, const dl_conv_geom *g, const float *x,
                               const float *w, const float *b, const float *r,
                               const dl_act *post, float *y, dl_err *err);
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

/* ---- the ops of backend_cpu.c's table, by file (dl_backend_ops) ---------- */

/* Elements below which a loop stays on one thread. */
#define CPU_GRAIN 16384

/* An elementwise loop compiled for AVX-512, AVX2 and the x86-64 baseline,
 * the widest the CPU has picked when the library loads (GCC's function
 * multiversioning): the build targets the baseline, whose SSE2 vectors
 * are 4 floats. Other compilers get the baseline alone. */
#if defined(__GNUC__) && !defined(__clang__) && defined(__x86_64__)
#define CPU_WIDE __attribute__((target_clones("avx512f", "avx2", "default")))
#else
#define CPU_WIDE
#endif

/* backend_cpu.c: the sum of n floats (vectorized, in a fixed order). */
float cpu_sum_floats(const float *p, int64_t n);

/* exp(x) within 2 ulp of expf, for x up to 88 (larger x give exp(88)),
 * NaN passed on: Cephes' polynomial after reduction by ln 2, written in
 * arithmetic and compares so that loops over it vectorize. libm's expf
 * is a call the compiler does not vectorize without -ffast-math: in
 * sigmoid, silu and softmax it took most of their time. */
static inline float cpu_expf(float x)
{
    float c = x > -87.33654f ? x : -87.33654f;   /* exp's smallest normal */
    c = c < 88.0f ? c : 88.0f;
    float n = (c * 1.44269504088896341f + 12582912.0f) - 12582912.0f;   /* round(c / ln 2) */
    float r = c - n * 0.693359375f;
    r = r + n * 2.12194440e-4f;
    float p = 1.9875691500e-4f;
    p = p * r + 1.3981999507e-3f;
    p = p * r + 8.3334519073e-3f;
    p = p * r + 4.1665795894e-2f;
    p = p * r + 1.6666665459e-1f;
    p = p * r + 5.0000001201e-1f;
    p = p * r * r + r + 1.0f;
    union { int32_t i; float f; } two_n = { .i = ((int32_t)n + 127) << 23 };
    return x == x ? p * two_n.f : x;
}

/* tanh(x) within a few ulp of tanhf, written so that loops over it
 * vectorize (tanhf is a call): Cephes' odd polynomial below |x| = 0.625,
 * 1 - 2 / (exp(2|x|) + 1) with x's sign above. */
static inline float cpu_tanhf(float x)
{
    float a = x < 0.0f ? -x : x;
    float big = 1.0f - 2.0f / (cpu_expf(2.0f * a) + 1.0f);
    big = x < 0.0f ? -big : big;
    float z = x * x;
    float p = -5.70498872745e-3f;
    p = p * z + 2.06390887954e-2f;
    p = p * z - 5.37397155531e-2f;
    p = p * z + 1.33314422036e-1f;
    p = p * z - 3.33332819422e-1f;
    float small = x + x * z * p;
    return a > 0.625f ? big : small;
}

/* 1 / (1 + exp(-x)), vectorizable. */
static inline float cpu_sigmoidf(float x)
{
    return 1.0f / (1.0f + cpu_expf(-x));
}

/* cpu_act.c; cpu_act_rows: y = act(y) in place (the GEMM epilogues). */
void cpu_act_rows(dl_act act, float *restrict y, int64_t n);
void cpu_act_fwd(dl_backend *be, dl_act act, const float *x, float *y,
                 int64_t n);
void cpu_act_bwd(dl_backend *be, dl_act act, const float *y,
                 const float *dy, float *dx, int64_t n);
void cpu_softmax_fwd(dl_backend *be, const float *x, float *y,
                     int64_t rows, int64_t cols);
void cpu_softmax_bwd(dl_backend *be, const float *y, const float *dy,
                     float *dx, int64_t rows, int64_t cols);
void cpu_dropout_fwd(dl_backend *be, const float *x, float *y, float *mask,
                     int64_t n, float p, uint64_t seed);
void cpu_mul(dl_backend *be, const float *a, const float *b, float *y,
             int64_t n);
dl_status cpu_embed_fwd(dl_backend *be, const float *ids, const float *table,
                        float *y, int64_t nids, int64_t dim, int64_t vocab,
                        dl_err *err);
void cpu_embed_bwd(dl_backend *be, const float *ids, const float *dy,
                   float *dtable, int64_t nids, int64_t dim);

/* cpu_conv.c */
void cpu_im2col(dl_backend *be, const dl_conv_geom *g, const float *x,
                float *cols);
void cpu_col2im(dl_backend *be, const dl_conv_geom *g, const float *cols,
                float *dx);
void cpu_swap_outer(dl_backend *be, const float *x, float *y, int64_t a,
                    int64_t b, int64_t hw);
void cpu_swap_bias_act(dl_backend *be, const float *x, float *y, int64_t a,
                       int64_t b, int64_t hw, const float *bias, const dl_act *post);
void cpu_pool_fwd(dl_backend *be, dl_pool_kind kind, const dl_conv_geom *g,
                  const float *x, float *y, int32_t *argmax);
void cpu_pool_bwd(dl_backend *be, dl_pool_kind kind, const dl_conv_geom *g,
                  const float *dy, const int32_t *argmax, float *dx);

/* cpu_norm.c */
void cpu_bn_fwd_train(dl_backend *be, const float *x, float *y,
                      const float *gamma, const float *beta,
                      float *save_mean, float *save_invstd,
                      float *run_mean, float *run_var, float momentum,
                      float eps, int64_t n, int64_t c, int64_t hw);
void cpu_bn_fwd_infer(dl_backend *be, const float *x, float *y,
                      const float *gamma, const float *beta,
                      const float *run_mean, const float *run_var,
                      float eps, int64_t n, int64_t c, int64_t hw);
void cpu_bn_bwd(dl_backend *be, const float *x, const float *dy,
                const float *gamma, const float *save_mean,
                const float *save_invstd, float *dx, float *dgamma,
                float *dbeta, int64_t n, int64_t c, int64_t hw);
void cpu_bn_fwd_train_blk(dl_backend *be, const float *x, float *y,
                          const float *gamma, const float *beta,
                          float *save_mean, float *save_invstd,
                          float *run_mean, float *run_var, float momentum,
                          float eps, int64_t n, int64_t c, int64_t hw);
void cpu_bn_fwd_infer_blk(dl_backend *be, const float *x, float *y,
                          const float *gamma, const float *beta,
                          const float *run_mean, const float *run_var,
                          float eps, int64_t n, int64_t c, int64_t hw);
void cpu_bn_bwd_blk(dl_backend *be, const float *x, const float *dy,
                    const float *gamma, const float *save_mean,
                    const float *save_invstd, float *dx, float *dgamma,
                    float *dbeta, int64_t n, int64_t c, int64_t hw);

/* cpu_train.c */
void cpu_xent(dl_backend *be, const float *logits, const int32_t *labels,
              int64_t rows, int64_t cols, float *dlogits, float scale,
              double *loss_sum, int64_t *correct);
void cpu_mse(dl_backend *be, const float *pred, const float *target,
             int64_t n, float *dpred, float scale, double *loss_sum);
void cpu_sgd_step(dl_backend *be, float *p, const float *g, float *v,
                  int64_t n, float lr, float mu, bool nesterov, float wd);
void cpu_adam_step(dl_backend *be, float *p, const float *g, float *m,
                   float *v, int64_t n, float lr, float b1, float b2,
                   float eps, float wd, bool decoupled, int64_t t);
void cpu_adagrad_step(dl_backend *be, float *p, const float *g, float *sum,
                      int64_t n, float lr, float eps, float wd);
void cpu_axpy(dl_backend *be, float alpha, const float *x, float *y,
              int64_t n);
void cpu_scale(dl_backend *be, float *x, int64_t n, float alpha);
void cpu_sumsq(dl_backend *be, const float *x, int64_t n, double *sum);

/* cpu_graph.c: the graph layers' kernels (see dl_backend_ops). */
void cpu_binary_fwd(dl_backend *be, dl_binop op, const dl_strided *g, const float *a,
                    const float *b, const dl_act *post, float *y);
void cpu_binary_bwd(dl_backend *be, dl_binop op, const dl_strided *g, int k,
                    const float *a, const float *b, const float *dy, float *dx);
void cpu_copy_strided(dl_backend *be, const dl_strided *g, const float *x, float *y);
void cpu_reduce_fwd(dl_backend *be, const dl_strided *g, const float *x, float *y,
                    float scale);
void cpu_reduce_bwd(dl_backend *be, const dl_strided *g, const float *dy, float *dx,
                    float scale);
void cpu_unary_fwd(dl_backend *be, const dl_unary *u, const float *x, float *y, int64_t n);
void cpu_unary_bwd(dl_backend *be, const dl_unary *u, const float *x, const float *y,
                   const float *dy, float *dx, int64_t n);
void cpu_layernorm_fwd(dl_backend *be, const float *x, const float *w, const float *b,
                       float *y, int64_t rows, int64_t d, float eps);
void cpu_layernorm_bwd(dl_backend *be, const float *x, const float *w, const float *dy,
                       float *dx, float *dw, float *db, int64_t rows, int64_t d, float eps);
/* cpu_attn.c: the attention kernels (dl_attn). */
dl_status cpu_attn_fwd(dl_backend *be, const dl_attn *a, const float *q, const float *k,
                       const float *v, float *o, dl_err *err);
dl_status cpu_attn_bwd(dl_backend *be, const dl_attn *a, const float *q, const float *k,
                       const float *v, const float *dout, float *dq, float *dk, float *dv,
                       dl_err *err);
/* cpu_seq.c: the sequence kernels (dl_seq). */
void cpu_seq_mask(dl_backend *be, const dl_seq *q, const float *x, float *y);
void cpu_seq_pool_fwd(dl_backend *be, dl_seq_pool_kind kind, const dl_seq *q, const float *x,
                      float *y);
void cpu_seq_pool_bwd(dl_backend *be, dl_seq_pool_kind kind, const dl_seq *q, const float *x,
                      const float *dy, float *dx);
/* cpu_rnn.c: LSTM and GRU stacks (dl_rnn). */
dl_status cpu_rnn_size(dl_backend *be, const dl_rnn *r, size_t *reserve, size_t *work,
                       dl_err *err);
dl_status cpu_rnn_fwd(dl_backend *be, const dl_rnn *r, const float *x, float *y, dl_err *err);
dl_status cpu_rnn_bwd(dl_backend *be, const dl_rnn *r, const float *x, const float *y,
                      const float *dy, float *dx, dl_err *err);
void cpu_softmax_axis_fwd(dl_backend *be, bool log, const float *x, float *y,
                          int64_t outer, int64_t len, int64_t inner);
void cpu_softmax_axis_bwd(dl_backend *be, bool log, const float *y, const float *dy,
                          float *dx, int64_t outer, int64_t len, int64_t inner);

#endif /* DL_TENSOR_CPU_H */
