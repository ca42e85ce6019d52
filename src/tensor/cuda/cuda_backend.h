/* cuda_backend.h (private to tensor/cuda/, C++ only): what the two files
 * of the CUDA module share: the kernel launchers of kernels.cu that
 * backend_cuda.cu calls. Every launcher queues its work on
 * stream s and returns the launch status (cudaGetLastError); pointers are
 * device memory. Shapes and semantics are those of the ops table in
 * dl_tensor.h; "scratch" is device memory of at least the size the
 * matching *_scratch_bytes function names, owned by the caller. */
#ifndef DL_TENSOR_CUDA_BACKEND_H
#define DL_TENSOR_CUDA_BACKEND_H

/* dl_util.h declares dl_assert_fail with C11's _Noreturn, which C++ spells
 * [[noreturn]]. */
#if defined(__cplusplus) && !defined(_Noreturn)
#define _Noreturn [[noreturn]]
#endif

#include "tensor/cuda/cuda_module.h"

#include <cuda_runtime.h>

/* The module links nothing of the core: DL_LOG and dl_err_set go through
 * the host table that dl_cuda_module_entry received. */
extern dl_cuda_host cuda_host;
#define dl_log_level (*cuda_host.log_level)
#define dl_log_write cuda_host.log_write
#define dl_err_set   cuda_host.err_set

/* What a loss kernel hands back to the host in one small copy. */
typedef struct loss_result {
    double    loss;
    long long count;
} loss_result;

/* x[i] = value; and x = beta * x (beta != 0). */
cudaError_t k_fill(cudaStream_t s, float *x, int64_t n, float value);
cudaError_t k_scale(cudaStream_t s, float *x, int64_t n, float beta);

cudaError_t k_bias_add(cudaStream_t s, float *y, const float *b, int64_t rows, int64_t cols);
cudaError_t k_bias_add_nchw(cudaStream_t s, float *y, const float *b, int64_t n,
                            int64_t c, int64_t hw);

cudaError_t k_act_fwd(cudaStream_t s, dl_act act, const float *x, float *y, int64_t n);
/* C (m, n) = post(A B^T + bias), each output by one warp in one fixed
 * order whatever m: the batch-invariant dense forward. bias and post may
 * be NULL. */
cudaError_t k_gemm_rows(cudaStream_t s, int64_t m, int64_t n, int64_t k, const float *a,
                        const float *b, const float *bias, const dl_act *post, float *c);
cudaError_t k_act_bwd(cudaStream_t s, dl_act act, const float *y, const float *dy,
                      float *dx, int64_t n);
cudaError_t k_softmax_fwd(cudaStream_t s, const float *x, float *y, int64_t rows,
                          int64_t cols);
cudaError_t k_softmax_bwd(cudaStream_t s, const float *y, const float *dy, float *dx,
                          int64_t rows, int64_t cols);

cudaError_t k_im2col(cudaStream_t s, const dl_conv_geom *g, const float *x, float *cols);
cudaError_t k_col2im(cudaStream_t s, const dl_conv_geom *g, const float *cols, float *dx);
cudaError_t k_swap_outer(cudaStream_t s, const float *x, float *y, int64_t a, int64_t b,
                         int64_t hw);
cudaError_t k_pool_fwd(cudaStream_t s, dl_pool_kind kind, const dl_conv_geom *g,
                       const float *x, float *y, int32_t *argmax);
cudaError_t k_pool_bwd(cudaStream_t s, dl_pool_kind kind, const dl_conv_geom *g,
                       const float *dy, const int32_t *argmax, float *dx);

/* Batch normalisation: partial sums per channel in double, then one
 * thread per channel, then an elementwise pass. */
size_t k_bn_scratch_bytes(int64_t n, int64_t c, int64_t hw);
cudaError_t k_bn_fwd_train(cudaStream_t s, void *scratch, const float *x, float *y,
                           const float *gamma, const float *beta, float *save_mean,
                           float *save_invstd, float *run_mean, float *run_var,
                           float momentum, float eps, int64_t n, int64_t c, int64_t hw);
cudaError_t k_bn_fwd_infer(cudaStream_t s, const float *x, float *y, const float *gamma,
                           const float *beta, const float *run_mean, const float *run_var,
                           float eps, int64_t n, int64_t c, int64_t hw);
cudaError_t k_bn_bwd(cudaStream_t s, void *scratch, const float *x, const float *dy,
                     const float *gamma, const float *save_mean, const float *save_invstd,
                     float *dx, float *dgamma, float *dbeta, int64_t n, int64_t c,
                     int64_t hw);

/* Dropout with keep = 1 / (1 - p); key is the pre-mixed seed. */
cudaError_t k_dropout(cudaStream_t s, const float *x, float *y, float *mask, int64_t n,
                      float p, float keep, uint64_t key);
cudaError_t k_mul(cudaStream_t s, const float *a, const float *b, float *y, int64_t n);

/* Rows of bad ids set *bad (device, preset to ULLONG_MAX) to the smallest
 * bad position and their output rows to 0. */
cudaError_t k_embed_fwd(cudaStream_t s, const float *ids, const float *table, float *y,
                        int64_t nids, int64_t dim, int64_t vocab, unsigned long long *bad);
/* Deterministic: ids are sorted (stable radix sort) so that every table
 * row sums its gradients in position order, as the CPU does. nids must
 * fit an int. */
size_t k_embed_bwd_scratch_bytes(int64_t nids);
cudaError_t k_embed_bwd(cudaStream_t s, void *scratch, size_t scratch_bytes,
                        const float *ids, const float *dy, float *dtable, int64_t nids,
                        int64_t dim);

/* labels: device copy of the host labels. *out: summed loss and the
 * number of rows whose argmax is the label. */
size_t k_xent_scratch_bytes(int64_t rows);
cudaError_t k_xent(cudaStream_t s, void *scratch, const float *logits,
                   const int32_t *labels, int64_t rows, int64_t cols, float *dlogits,
                   float scale, loss_result *out);
/* target: device copy of the host targets. out->loss: sum of squares. */
size_t k_mse_scratch_bytes(int64_t n);
cudaError_t k_mse(cudaStream_t s, void *scratch, const float *pred, const float *target,
                  int64_t n, float *dpred, float scale, loss_result *out);

cudaError_t k_sgd(cudaStream_t s, float *p, const float *g, float *v, int64_t n, float lr,
                  float mu, bool nesterov, float wd);
/* c1 = lr / (1 - b1^t), c2 = 1 / sqrt(1 - b2^t), as the CPU computes them;
 * p *= decay first (1 for Adam; AdamW: 1 - lr wd, with wd 0). */
cudaError_t k_adam(cudaStream_t s, float *p, const float *g, float *m, float *v,
                   int64_t n, float b1, float b2, float eps, float wd, float decay, float c1,
                   float c2);
cudaError_t k_adagrad(cudaStream_t s, float *p, const float *g, float *sum, int64_t n,
                      float lr, float eps, float wd);
cudaError_t k_axpy(cudaStream_t s, float alpha, const float *x, float *y, int64_t n);
/* out->loss: the sum of x[i]^2, in double, in an order fixed by n. */
size_t k_sumsq_scratch_bytes(int64_t n);
cudaError_t k_sumsq(cudaStream_t s, void *scratch, const float *x, int64_t n,
                    loss_result *out);

/* The graph layers' kernels (binary_fwd .. seq_pool_bwd in dl_tensor.h),
 * over the per-index bodies of graph_body.h. Deterministic: a broadcast
 * gradient or a reduction is gathered by one thread an output element
 * (sums in double), never scattered through atomics. */
cudaError_t k_binary_fwd(cudaStream_t s, dl_binop op, const dl_strided *g, const float *a,
                         const float *b, const dl_act *post, float *y);
cudaError_t k_binary_bwd(cudaStream_t s, dl_binop op, const dl_strided *g, int k,
                         const float *a, const float *b, const float *dy, float *dx);
cudaError_t k_copy_strided(cudaStream_t s, const dl_strided *g, const float *x, float *y);
cudaError_t k_reduce_fwd(cudaStream_t s, const dl_strided *g, const float *x, float *y,
                         float scale);
cudaError_t k_reduce_bwd(cudaStream_t s, const dl_strided *g, const float *dy, float *dx,
                         float scale);
cudaError_t k_unary_fwd(cudaStream_t s, const dl_unary *u, const float *x, float *y, int64_t n);
cudaError_t k_unary_bwd(cudaStream_t s, const dl_unary *u, const float *x, const float *y,
                        const float *dy, float *dx, int64_t n);
/* Attention (dl_attn) between its cuBLAS products: the probabilities of
 * `rows` rows of tk scores of one sample in place, one thread a row (row
 * r is query r % tq: a causal row ends at it; keys from kn on get no
 * weight, rows of queries from qn on are zeros), and the scores' gradient
 * from them. */
cudaError_t k_attn_softmax(cudaStream_t s, float *p, int64_t rows, int64_t tq, int64_t tk,
                           float scale, bool causal, int64_t qn, int64_t kn, int64_t off);
cudaError_t k_attn_softmax_bwd(cudaStream_t s, const float *p, float *dp, int64_t rows,
                               int64_t tk, float scale);
cudaError_t k_softmax_axis_fwd(cudaStream_t s, bool log, const float *x, float *y,
                               int64_t outer, int64_t len, int64_t inner);
cudaError_t k_softmax_axis_bwd(cudaStream_t s, bool log, const float *y, const float *dy,
                               float *dx, int64_t outer, int64_t len, int64_t inner);
/* Layernorm: one block a row (block sums in double). The backward keeps
 * each row's mean and rstd in scratch, then sums dw and db by one thread
 * a column over the rows in order. */
cudaError_t k_layernorm_fwd(cudaStream_t s, const float *x, const float *w, const float *b,
                            float *y, int64_t rows, int64_t d, float eps);
size_t k_layernorm_scratch_bytes(int64_t rows);
cudaError_t k_layernorm_bwd(cudaStream_t s, void *scratch, const float *x, const float *w,
                            const float *dy, float *dx, float *dw, float *db, int64_t rows,
                            int64_t d, float eps);
/* Sequences (dl_seq), with len the lengths on the device (NULL: all t)
 * in place of q->len. */
cudaError_t k_seq_mask(cudaStream_t s, const dl_seq *q, const int32_t *len, const float *x,
                       float *y);
cudaError_t k_seq_pool_fwd(cudaStream_t s, dl_seq_pool_kind kind, const dl_seq *q,
                           const int32_t *len, const float *x, float *y);
cudaError_t k_seq_pool_bwd(cudaStream_t s, dl_seq_pool_kind kind, const dl_seq *q,
                           const int32_t *len, const float *x, const float *dy, float *dx);

#endif /* DL_TENSOR_CUDA_BACKEND_H */
