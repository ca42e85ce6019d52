/* backend_cuda.cu: the CUDA backend module: device selection, the caching
 * device memory pool, one compute stream, cuBLAS GEMMs, staged uploads,
 * error latching, CUDA graphs, the ops table over the kernels of
 * kernels.cu, and the module's entry point (cuda_module.h). */
#include "tensor/cuda/cuda_backend.h"

#include <cublas_v2.h>
#ifdef DL_HAVE_CUDNN
#include <cudnn.h>
#endif

#include <pthread.h>

#include <climits>
#include <cmath>
#include <cstdarg>
#include <cstdio>
#include <cstdlib>
#include <cstring>

namespace {

constexpr size_t STAGE_BYTES = (size_t)4 << 20;    /* per pinned upload slot */
constexpr size_t BLAS_WS_BYTES = (size_t)32 << 20; /* cuBLAS workspace (Hopper: 32 MiB) */
constexpr int POOL_CLASSES = 256;

/* ---- the memory pool --------------------------------------------------------
 * Sizes round up to classes 512 B apart below 1 KiB and a quarter of a
 * power of two above (at most 25% slack); each class keeps a free list.
 * A block is handed out again only to ops queued after its release on the
 * same stream, so reuse never races the GPU. */

struct block {
    void  *ptr;
    size_t size;
    int    cls;
    block *next;
};

struct pool {
    pthread_mutex_t mu;
    block  *free_list[POOL_CLASSES];
    block **live;              /* hash of blocks in use, by pointer */
    size_t  nbuckets, nlive;
    block  *spare;             /* unused block records */
    size_t  in_use, cached;    /* bytes */
};

/* Host memory that the GPU writes small results into (pinned). */
struct host_area {
    loss_result        res;
    unsigned long long bad;
    float              id;
};

struct retired_buf {
    void        *ptr;
    retired_buf *next;
};

#ifdef DL_HAVE_CUDNN
/* A recurrent stack's cuDNN descriptor and where its parameters lie in
 * cuDNN's weight space: blocks of floats copied from (forward) and added
 * back to (backward) PyTorch's layout, adjacent ones merged. */
constexpr int RNN_CACHE = 8;

struct rnn_block {
    int64_t src, dst, count;
};

struct rnn_entry {
    bool                 used;
    dl_rnn_cell          cell;
    int64_t              in, hidden;
    int                  layers, dirs;
    bool                 bias;
    cudnnRNNDescriptor_t desc;
    size_t               wbytes;       /* its weight space */
    rnn_block           *blocks;
    int                  nblocks;
};
#endif

struct cuda_ctx {
    int             dev;
    char            name[256];
    cudaStream_t    stream;
    cublasHandle_t  blas;
    bool            tf32;
    pool            pl;
    void           *blas_ws;
    void           *scratch;          /* per-op temporaries */
    size_t          scratch_bytes;
    void           *ones;             /* 1.0f vector for bias gradients */
    size_t          ones_bytes;
    void           *stage[2];         /* pinned upload slots */
    cudaEvent_t     stage_ev[2];
    int             stage_next;
    host_area      *host;             /* pinned */
    void           *dev_res;          /* device side of host_area's results */
    dl_status       latched;
    char            latched_msg[200];
    bool            capturing;
    int             graphs;           /* alive */
    retired_buf    *retired;          /* internal buffers a graph may still use */
#ifdef DL_HAVE_CUDNN
    cudnnHandle_t   dnn;              /* made by the first recurrent op */
    cudnnDropoutDescriptor_t nodrop;  /* dropout 0 between stacked layers */
    rnn_entry       rnn[RNN_CACHE];   /* descriptors by geometry */
    int             rnn_next;         /* the entry replaced next */
    void           *rnn_w, *rnn_dw;   /* a weight space and its gradient */
    size_t          rnn_w_bytes, rnn_dw_bytes;
#endif
};


int size_class(size_t n, size_t *size)
{
    if (n <= 512) {
        *size = 512;
        return 0;
    }
    if (n > ((size_t)1 << 56))
        return -1;
    int e = 63 - __builtin_clzll((unsigned long long)(n - 1));   /* 2^e < n <= 2^(e+1) */
    size_t step = (size_t)1 << (e - 2);
    size_t q = (n + step - 1) / step;                             /* 5..8 */
    *size = q * step;
    return 1 + (e - 9) * 4 + (int)(q - 5);
}

size_t bucket_of(const pool *p, const void *ptr)
{
    uint64_t h = ((uint64_t)(uintptr_t)ptr >> 8) * 0x9E3779B97F4A7C15ull;
    return (size_t)(h >> 32) & (p->nbuckets - 1);
}

/* Doubles the live table when chains get long; keeps the old one if the
 * host is out of memory (longer chains, still correct). */
void live_grow(pool *p)
{
    size_t nb = p->nbuckets * 2;
    block **t = (block **)calloc(nb, sizeof(*t));
    if (!t)
        return;
    block **old = p->live;
    size_t ob = p->nbuckets;
    p->live = t;
    p->nbuckets = nb;
    for (size_t i = 0; i < ob; i++)
        for (block *b = old[i], *next; b; b = next) {
            next = b->next;
            size_t k = bucket_of(p, b->ptr);
            b->next = t[k];
            t[k] = b;
        }
    free(old);
}

void live_insert(pool *p, block *b)
{
    if (p->nlive + 1 > 2 * p->nbuckets)
        live_grow(p);
    size_t k = bucket_of(p, b->ptr);
    b->next = p->live[k];
    p->live[k] = b;
    p->nlive++;
}

block *live_remove(pool *p, const void *ptr)
{
    for (block **at = &p->live[bucket_of(p, ptr)]; *at; at = &(*at)->next)
        if ((*at)->ptr == ptr) {
            block *b = *at;
            *at = b->next;
            p->nlive--;
            return b;
        }
    return nullptr;
}

bool pool_init(pool *p)
{
    memset(p, 0, sizeof(*p));
    pthread_mutex_init(&p->mu, nullptr);
    p->nbuckets = 1024;
    p->live = (block **)calloc(p->nbuckets, sizeof(*p->live));
    return p->live != nullptr;
}

/* Returns every cached block to the device. */
void pool_trim(pool *p)
{
    block *all = nullptr;
    pthread_mutex_lock(&p->mu);
    for (int i = 0; i < POOL_CLASSES; i++) {
        while (block *b = p->free_list[i]) {
            p->free_list[i] = b->next;
            b->next = all;
            all = b;
        }
    }
    p->cached = 0;
    pthread_mutex_unlock(&p->mu);
    while (all) {
        block *b = all;
        all = b->next;
        cudaFree(b->ptr);   /* waits for the device: no kernel still uses it */
        pthread_mutex_lock(&p->mu);
        b->next = p->spare;
        p->spare = b;
        pthread_mutex_unlock(&p->mu);
    }
}

cudaError_t pool_alloc(pool *p, size_t n, void **out)
{
    *out = nullptr;
    size_t size;
    int cls = size_class(n, &size);
    if (cls < 0)
        return cudaErrorMemoryAllocation;
    pthread_mutex_lock(&p->mu);
    block *b = p->free_list[cls];
    if (b) {
        p->free_list[cls] = b->next;
        p->cached -= b->size;
    }
    pthread_mutex_unlock(&p->mu);
    if (!b) {
        void *ptr = nullptr;
        cudaError_t e = cudaMalloc(&ptr, size);
        if (e == cudaErrorMemoryAllocation) {
            cudaGetLastError();   /* not sticky: keep it from later checks */
            pool_trim(p);
            e = cudaMalloc(&ptr, size);
        }
        if (e != cudaSuccess) {
            cudaGetLastError();
            return e;
        }
        pthread_mutex_lock(&p->mu);
        b = p->spare;
        if (b)
            p->spare = b->next;
        pthread_mutex_unlock(&p->mu);
        if (!b && !(b = (block *)malloc(sizeof(*b)))) {
            cudaFree(ptr);
            return cudaErrorMemoryAllocation;
        }
        b->ptr = ptr;
        b->size = size;
        b->cls = cls;
    }
    pthread_mutex_lock(&p->mu);
    live_insert(p, b);
    p->in_use += b->size;
    pthread_mutex_unlock(&p->mu);
    *out = b->ptr;
    return cudaSuccess;
}

void pool_release(pool *p, void *ptr)
{
    pthread_mutex_lock(&p->mu);
    block *b = live_remove(p, ptr);
    if (b) {
        p->in_use -= b->size;
        b->next = p->free_list[b->cls];
        p->free_list[b->cls] = b;
        p->cached += b->size;
    }
    pthread_mutex_unlock(&p->mu);
    if (!b)
        DL_LOG(DL_LOG_ERR, "cuda", "release of %p, which this backend did not allocate", ptr);
}

/* Gives every block, cached or in use, back to the device. */
void pool_fini(pool *p)
{
    if (!p->live)
        return;
    pool_trim(p);
    for (size_t i = 0; i < p->nbuckets; i++)
        while (block *b = p->live[i]) {
            p->live[i] = b->next;
            cudaFree(b->ptr);
            free(b);
        }
    while (block *b = p->spare) {
        p->spare = b->next;
        free(b);
    }
    free(p->live);
    p->live = nullptr;
    pthread_mutex_destroy(&p->mu);
}

/* ---- errors --------------------------------------------------------------- */

cuda_ctx *ctx_of(dl_backend *be) { return (cuda_ctx *)be->ctx; }

__attribute__((format(printf, 3, 4)))
void latch(cuda_ctx *c, dl_status code, const char *fmt, ...)
{
    char msg[sizeof(c->latched_msg)];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(msg, sizeof(msg), fmt, ap);
    va_end(ap);
    DL_LOG(DL_LOG_ERR, "cuda", "cuda:%d: %s", c->dev, msg);
    if (c->latched == DL_OK) {
        c->latched = code;
        snprintf(c->latched_msg, sizeof(c->latched_msg), "%s", msg);
    }
}

/* The check macros of this file: a failure is logged and latched; the
 * caller returns (void ops) or hands the latched error on (status ops). */
bool cuda_check(cuda_ctx *c, cudaError_t e, const char *what)
{
    if (e == cudaSuccess)
        return true;
    latch(c, e == cudaErrorMemoryAllocation ? DL_ERR_NOMEM : DL_ERR_BACKEND, "%s: %s", what,
          cudaGetErrorString(e));
    return false;
}

bool cublas_check(cuda_ctx *c, cublasStatus_t st, const char *what)
{
    if (st == CUBLAS_STATUS_SUCCESS)
        return true;
    latch(c, st == CUBLAS_STATUS_ALLOC_FAILED ? DL_ERR_NOMEM : DL_ERR_BACKEND, "%s: cuBLAS %s",
          what, cublasGetStatusString(st));
    return false;
}

#define CUDA_CHECK(c, call, what)   cuda_check((c), (call), (what))
#define CUBLAS_CHECK(c, call, what) cublas_check((c), (call), (what))

dl_status take_latched(cuda_ctx *c, dl_err *err)
{
    dl_status st = c->latched;
    c->latched = DL_OK;
    return dl_err_set(err, st, "cuda:%d: %s", c->dev, c->latched_msg);
}

/* Ops that hand data to or from the host cannot be part of a graph. */
bool refuse_capture(cuda_ctx *c, const char *op)
{
    if (!c->capturing)
        return false;
    latch(c, DL_ERR_INVALID, "%s cannot be recorded in a CUDA graph: it exchanges data "
          "with the host", op);
    return true;
}

/* Makes c's device current on the calling thread. */
void bind(cuda_ctx *c)
{
    int cur = -1;
    if (cudaGetDevice(&cur) != cudaSuccess || cur != c->dev)
        cudaSetDevice(c->dev);
}

/* ---- internal buffers ------------------------------------------------------ */

void release_retired(cuda_ctx *c)
{
    while (retired_buf *r = c->retired) {
        c->retired = r->next;
        pool_release(&c->pl, r->ptr);
        free(r);
    }
}

/* An internal buffer being replaced: back to the pool, unless a graph may
 * have recorded it (then it waits for the last graph to go). */
void retire(cuda_ctx *c, void *ptr)
{
    if (c->graphs == 0 && !c->capturing) {
        pool_release(&c->pl, ptr);
        return;
    }
    retired_buf *r = (retired_buf *)malloc(sizeof(*r));
    if (!r)
        return;   /* stays in use until the backend is destroyed */
    r->ptr = ptr;
    r->next = c->retired;
    c->retired = r;
}

bool grow(cuda_ctx *c, void **buf, size_t *cap, size_t need, const char *what)
{
    if (*buf && *cap >= need)
        return true;
    size_t want = need < 2 * *cap ? 2 * *cap : need;
    void *nb;
    if (!CUDA_CHECK(c, pool_alloc(&c->pl, want, &nb), what))
        return false;
    if (*buf)
        retire(c, *buf);
    *buf = nb;
    *cap = want;
    return true;
}

void *scratch(cuda_ctx *c, size_t need)
{
    return grow(c, &c->scratch, &c->scratch_bytes, need ? need : 1, "scratch buffer")
               ? c->scratch : nullptr;
}

const float *ones(cuda_ctx *c, int64_t n)
{
    size_t need = (size_t)n * sizeof(float);
    if (c->ones && c->ones_bytes >= need)
        return (const float *)c->ones;
    if (!grow(c, &c->ones, &c->ones_bytes, need, "ones vector") ||
        !CUDA_CHECK(c, k_fill(c->stream, (float *)c->ones,
                              (int64_t)(c->ones_bytes / sizeof(float)), 1.0f), "fill ones"))
        return nullptr;
    return (const float *)c->ones;
}

/* Host to device through two pinned slots: the caller's buffer is free
 * on return and the copy overlaps with queued work. Large copies go
 * directly and wait. */
cudaError_t stage_h2d(cuda_ctx *c, void *dst, const void *src, size_t n)
{
    if (n > 2 * STAGE_BYTES) {
        cudaError_t e = cudaMemcpyAsync(dst, src, n, cudaMemcpyHostToDevice, c->stream);
        return e != cudaSuccess ? e : cudaStreamSynchronize(c->stream);
    }
    char *d = (char *)dst;
    const char *s = (const char *)src;
    while (n) {
        size_t k = n < STAGE_BYTES ? n : STAGE_BYTES;
        int slot = c->stage_next;
        c->stage_next ^= 1;
        cudaError_t e = cudaEventSynchronize(c->stage_ev[slot]);   /* slot's last copy */
        if (e != cudaSuccess)
            return e;
        memcpy(c->stage[slot], s, k);
        if ((e = cudaMemcpyAsync(d, c->stage[slot], k, cudaMemcpyHostToDevice,
                                 c->stream)) != cudaSuccess ||
            (e = cudaEventRecord(c->stage_ev[slot], c->stream)) != cudaSuccess)
            return e;
        d += k;
        s += k;
        n -= k;
    }
    return cudaSuccess;
}

size_t align256(size_t n) { return (n + 255) / 256 * 256; }

/* Checks a size for the int-sized cuBLAS and CUB interfaces. */
bool fits_int(cuda_ctx *c, const char *op, int64_t v)
{
    if (v <= INT_MAX)
        return true;
    latch(c, DL_ERR_INVALID, "%s: %lld elements exceed this backend's int32 limit", op,
          (long long)v);
    return false;
}

/* ---- the ops ---------------------------------------------------------------- */

dl_status cu_alloc(dl_backend *be, size_t nbytes, void **out, dl_err *err)
{
    cuda_ctx *c = ctx_of(be);
    *out = nullptr;
    if (c->latched)
        return take_latched(c, err);
    bind(c);
    cudaError_t e = pool_alloc(&c->pl, nbytes ? nbytes : 1, out);
    if (e == cudaErrorMemoryAllocation)
        return dl_err_set(err, DL_ERR_NOMEM,
                          "cuda:%d: out of device memory for %zu bytes (%zu MiB in use)",
                          c->dev, nbytes, c->pl.in_use >> 20);
    if (e != cudaSuccess)
        return dl_err_set(err, DL_ERR_BACKEND, "cuda:%d: cudaMalloc of %zu bytes: %s", c->dev,
                          nbytes, cudaGetErrorString(e));
    return DL_OK;
}

void cu_release(dl_backend *be, void *ptr)
{
    if (ptr)
        pool_release(&ctx_of(be)->pl, ptr);
}

void cu_upload(dl_backend *be, void *dst, const void *host, size_t nbytes)
{
    cuda_ctx *c = ctx_of(be);
    if (!nbytes || refuse_capture(c, "upload"))
        return;
    bind(c);
    CUDA_CHECK(c, stage_h2d(c, dst, host, nbytes), "upload");
}

void cu_download(dl_backend *be, void *host, const void *src, size_t nbytes)
{
    cuda_ctx *c = ctx_of(be);
    if (!nbytes || refuse_capture(c, "download"))
        return;
    bind(c);
    if (CUDA_CHECK(c, cudaMemcpyAsync(host, src, nbytes, cudaMemcpyDeviceToHost, c->stream),
                   "download"))
        CUDA_CHECK(c, cudaStreamSynchronize(c->stream), "download");
}

void cu_fill(dl_backend *be, float *x, int64_t n, float value)
{
    cuda_ctx *c = ctx_of(be);
    if (n <= 0)
        return;
    bind(c);
    if (value == 0.0f)
        CUDA_CHECK(c, cudaMemsetAsync(x, 0, (size_t)n * sizeof(float), c->stream), "fill");
    else
        CUDA_CHECK(c, k_fill(c->stream, x, n, value), "fill");
}

void cu_copy(dl_backend *be, float *dst, const float *src, int64_t n)
{
    cuda_ctx *c = ctx_of(be);
    if (n <= 0 || dst == src)
        return;
    bind(c);
    size_t bytes = (size_t)n * sizeof(float);
    if (dst < src + n && src < dst + n) {   /* overlapping: memmove through scratch */
        void *tmp = scratch(c, bytes);
        if (tmp && CUDA_CHECK(c, cudaMemcpyAsync(tmp, src, bytes, cudaMemcpyDeviceToDevice,
                                                 c->stream), "copy"))
            CUDA_CHECK(c, cudaMemcpyAsync(dst, tmp, bytes, cudaMemcpyDeviceToDevice, c->stream),
                       "copy");
        return;
    }
    CUDA_CHECK(c, cudaMemcpyAsync(dst, src, bytes, cudaMemcpyDeviceToDevice, c->stream), "copy");
}

/* Row-major C = op(A) op(B) is column-major C^T = op(B)^T op(A)^T: cuBLAS
 * gets the operands swapped, each row-major matrix read as its transpose. */
dl_status cu_gemm(dl_backend *be, bool ta, bool tb, int64_t m, int64_t n, int64_t k,
                  float alpha, const float *a, const float *b, float beta, float *cc,
                  dl_err *err)
{
    cuda_ctx *c = ctx_of(be);
    if (c->latched)
        return take_latched(c, err);
    if (m > INT_MAX || n > INT_MAX || k > INT_MAX)
        return dl_err_set(err, DL_ERR_INVALID, "gemm of %lldx%lldx%lld is too large",
                          (long long)m, (long long)n, (long long)k);
    if (m == 0 || n == 0)
        return DL_OK;
    bind(c);
    bool ok;
    if (k == 0)
        ok = beta == 0.0f
                 ? CUDA_CHECK(c, cudaMemsetAsync(cc, 0, (size_t)(m * n) * sizeof(float),
                                                 c->stream), "gemm")
                 : CUDA_CHECK(c, k_scale(c->stream, cc, m * n, beta), "gemm");
    else
        ok = CUBLAS_CHECK(c, cublasGemmEx(c->blas, tb ? CUBLAS_OP_T : CUBLAS_OP_N,
                                          ta ? CUBLAS_OP_T : CUBLAS_OP_N, (int)n, (int)m, (int)k,
                                          &alpha, b, CUDA_R_32F, (int)(tb ? k : n), a,
                                          CUDA_R_32F, (int)(ta ? m : k), &beta, cc, CUDA_R_32F,
                                          (int)n,
                                          c->tf32 ? CUBLAS_COMPUTE_32F_FAST_TF32
                                                  : CUBLAS_COMPUTE_32F,
                                          CUBLAS_GEMM_DEFAULT), "gemm");
    return ok ? DL_OK : take_latched(c, err);
}

static dl_status cu_gemm_bias_act_rows(dl_backend *be, int64_t m, int64_t n, int64_t k,
                                       const float *a, const float *b, const float *bias,
                                       const dl_act *post, float *cc, dl_err *err)
{
    cuda_ctx *c = ctx_of(be);
    if (c->latched)
        return take_latched(c, err);
    if (m == 0 || n == 0)
        return DL_OK;
    bind(c);
    return CUDA_CHECK(c, k_gemm_rows(c->stream, m, n, k, a, b, bias, post, cc), "gemm_rows")
               ? DL_OK
               : take_latched(c, err);
}

void cu_bias_add(dl_backend *be, float *y, const float *b, int64_t rows, int64_t cols)
{
    cuda_ctx *c = ctx_of(be);
    if (rows <= 0 || cols <= 0)
        return;
    bind(c);
    CUDA_CHECK(c, k_bias_add(c->stream, y, b, rows, cols), "bias_add");
}

/* db += dy^T 1: a cuBLAS GEMV over a ones vector (no atomics, so the
 * same sums every run). */
void cu_bias_grad(dl_backend *be, float *db, const float *dy, int64_t rows, int64_t cols)
{
    cuda_ctx *c = ctx_of(be);
    if (rows <= 0 || cols <= 0 || !fits_int(c, "bias_grad", rows) ||
        !fits_int(c, "bias_grad", cols))
        return;
    bind(c);
    const float *one = ones(c, rows);
    float alpha = 1.0f, beta = 1.0f;
    if (one)
        CUBLAS_CHECK(c, cublasSgemv(c->blas, CUBLAS_OP_N, (int)cols, (int)rows, &alpha, dy,
                                    (int)cols, one, 1, &beta, db, 1), "bias_grad");
}

void cu_bias_add_nchw(dl_backend *be, float *y, const float *b, int64_t n, int64_t c_,
                      int64_t hw)
{
    cuda_ctx *c = ctx_of(be);
    if (n * c_ * hw <= 0)
        return;
    bind(c);
    CUDA_CHECK(c, k_bias_add_nchw(c->stream, y, b, n, c_, hw), "bias_add_nchw");
}

/* Two GEMVs: per-plane sums tmp (N, C) = dy (N*C, HW) 1, then
 * db += tmp^T 1. */
void cu_bias_grad_nchw(dl_backend *be, float *db, const float *dy, int64_t n, int64_t c_,
                       int64_t hw)
{
    cuda_ctx *c = ctx_of(be);
    if (n * c_ * hw <= 0 || !fits_int(c, "bias_grad_nchw", n * c_) ||
        !fits_int(c, "bias_grad_nchw", hw))
        return;
    bind(c);
    const float *one = ones(c, n > hw ? n : hw);
    float alpha = 1.0f, zero = 0.0f;
    const float *planes = dy;
    if (!one)
        return;
    if (hw > 1) {
        float *tmp = (float *)scratch(c, (size_t)(n * c_) * sizeof(float));
        if (!tmp || !CUBLAS_CHECK(c, cublasSgemv(c->blas, CUBLAS_OP_T, (int)hw, (int)(n * c_),
                                                 &alpha, dy, (int)hw, one, 1, &zero, tmp, 1),
                                  "bias_grad_nchw"))
            return;
        planes = tmp;
    }
    CUBLAS_CHECK(c, cublasSgemv(c->blas, CUBLAS_OP_N, (int)c_, (int)n, &alpha, planes, (int)c_,
                                one, 1, &alpha, db, 1), "bias_grad_nchw");
}

void cu_act_fwd(dl_backend *be, dl_act act, const float *x, float *y, int64_t n)
{
    cuda_ctx *c = ctx_of(be);
    if (n <= 0)
        return;
    bind(c);
    CUDA_CHECK(c, k_act_fwd(c->stream, act, x, y, n), "act_fwd");
}

void cu_act_bwd(dl_backend *be, dl_act act, const float *y, const float *dy, float *dx,
                int64_t n)
{
    cuda_ctx *c = ctx_of(be);
    if (n <= 0)
        return;
    bind(c);
    CUDA_CHECK(c, k_act_bwd(c->stream, act, y, dy, dx, n), "act_bwd");
}

void cu_softmax_fwd(dl_backend *be, const float *x, float *y, int64_t rows, int64_t cols)
{
    cuda_ctx *c = ctx_of(be);
    bind(c);
    CUDA_CHECK(c, k_softmax_fwd(c->stream, x, y, rows, cols), "softmax_fwd");
}

void cu_softmax_bwd(dl_backend *be, const float *y, const float *dy, float *dx, int64_t rows,
                    int64_t cols)
{
    cuda_ctx *c = ctx_of(be);
    bind(c);
    CUDA_CHECK(c, k_softmax_bwd(c->stream, y, dy, dx, rows, cols), "softmax_bwd");
}

void cu_im2col(dl_backend *be, const dl_conv_geom *g, const float *x, float *cols)
{
    cuda_ctx *c = ctx_of(be);
    bind(c);
    CUDA_CHECK(c, k_im2col(c->stream, g, x, cols), "im2col");
}

void cu_col2im(dl_backend *be, const dl_conv_geom *g, const float *cols, float *dx)
{
    cuda_ctx *c = ctx_of(be);
    bind(c);
    CUDA_CHECK(c, k_col2im(c->stream, g, cols, dx), "col2im");
}

void cu_swap_outer(dl_backend *be, const float *x, float *y, int64_t a, int64_t b, int64_t hw)
{
    cuda_ctx *c = ctx_of(be);
    bind(c);
    CUDA_CHECK(c, k_swap_outer(c->stream, x, y, a, b, hw), "swap_outer");
}

void cu_pool_fwd(dl_backend *be, dl_pool_kind kind, const dl_conv_geom *g, const float *x,
                 float *y, int32_t *argmax)
{
    cuda_ctx *c = ctx_of(be);
    bind(c);
    CUDA_CHECK(c, k_pool_fwd(c->stream, kind, g, x, y, argmax), "pool_fwd");
}

void cu_pool_bwd(dl_backend *be, dl_pool_kind kind, const dl_conv_geom *g, const float *dy,
                 const int32_t *argmax, float *dx)
{
    cuda_ctx *c = ctx_of(be);
    bind(c);
    CUDA_CHECK(c, k_pool_bwd(c->stream, kind, g, dy, argmax, dx), "pool_bwd");
}

void cu_bn_fwd_train(dl_backend *be, const float *x, float *y, const float *gamma,
                     const float *beta, float *save_mean, float *save_invstd, float *run_mean,
                     float *run_var, float momentum, float eps, int64_t n, int64_t c_,
                     int64_t hw)
{
    cuda_ctx *c = ctx_of(be);
    if (n * c_ * hw <= 0)
        return;
    bind(c);
    void *s = scratch(c, k_bn_scratch_bytes(n, c_, hw));
    if (s)
        CUDA_CHECK(c, k_bn_fwd_train(c->stream, s, x, y, gamma, beta, save_mean, save_invstd,
                                     run_mean, run_var, momentum, eps, n, c_, hw),
                   "bn_fwd_train");
}

void cu_bn_fwd_infer(dl_backend *be, const float *x, float *y, const float *gamma,
                     const float *beta, const float *run_mean, const float *run_var, float eps,
                     int64_t n, int64_t c_, int64_t hw)
{
    cuda_ctx *c = ctx_of(be);
    bind(c);
    CUDA_CHECK(c, k_bn_fwd_infer(c->stream, x, y, gamma, beta, run_mean, run_var, eps, n, c_,
                                 hw), "bn_fwd_infer");
}

void cu_bn_bwd(dl_backend *be, const float *x, const float *dy, const float *gamma,
               const float *save_mean, const float *save_invstd, float *dx, float *dgamma,
               float *dbeta, int64_t n, int64_t c_, int64_t hw)
{
    cuda_ctx *c = ctx_of(be);
    if (n * c_ * hw <= 0)
        return;
    bind(c);
    void *s = scratch(c, k_bn_scratch_bytes(n, c_, hw));
    if (s)
        CUDA_CHECK(c, k_bn_bwd(c->stream, s, x, dy, gamma, save_mean, save_invstd, dx, dgamma,
                               dbeta, n, c_, hw), "bn_bwd");
}

uint64_t mix64(uint64_t z)
{
    z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
    z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
    return z ^ (z >> 31);
}

void cu_dropout_fwd(dl_backend *be, const float *x, float *y, float *mask, int64_t n, float p,
                    uint64_t seed)
{
    cuda_ctx *c = ctx_of(be);
    if (n <= 0)
        return;
    bind(c);
    /* The seed is mixed once so that nearby seeds give unrelated streams. */
    CUDA_CHECK(c, k_dropout(c->stream, x, y, mask, n, p, 1.0f / (1.0f - p),
                            mix64(seed ^ 0xD1B54A32D192ED03ull)), "dropout_fwd");
}

void cu_mul(dl_backend *be, const float *a, const float *b, float *y, int64_t n)
{
    cuda_ctx *c = ctx_of(be);
    if (n <= 0)
        return;
    bind(c);
    CUDA_CHECK(c, k_mul(c->stream, a, b, y, n), "mul");
}

dl_status cu_embed_fwd(dl_backend *be, const float *ids, const float *table, float *y,
                       int64_t nids, int64_t dim, int64_t vocab, dl_err *err)
{
    cuda_ctx *c = ctx_of(be);
    if (c->latched)
        return take_latched(c, err);
    if (nids <= 0 || dim <= 0)
        return DL_OK;
    if (refuse_capture(c, "embed_fwd"))
        return take_latched(c, err);
    bind(c);
    unsigned long long *bad = (unsigned long long *)((char *)c->dev_res + 64);
    host_area *h = c->host;
    bool ok = CUDA_CHECK(c, cudaMemsetAsync(bad, 0xff, sizeof(*bad), c->stream), "embed_fwd") &&
              CUDA_CHECK(c, k_embed_fwd(c->stream, ids, table, y, nids, dim, vocab, bad),
                         "embed_fwd") &&
              CUDA_CHECK(c, cudaMemcpyAsync(&h->bad, bad, sizeof(*bad), cudaMemcpyDeviceToHost,
                                            c->stream), "embed_fwd") &&
              CUDA_CHECK(c, cudaStreamSynchronize(c->stream), "embed_fwd");
    if (!ok)
        return take_latched(c, err);
    if (h->bad == ULLONG_MAX)
        return DL_OK;
    long long at = (long long)h->bad;
    ok = CUDA_CHECK(c, cudaMemcpyAsync(&h->id, ids + at, sizeof(float), cudaMemcpyDeviceToHost,
                                       c->stream), "embed_fwd") &&
         CUDA_CHECK(c, cudaStreamSynchronize(c->stream), "embed_fwd");
    if (!ok)
        return take_latched(c, err);
    return dl_err_set(err, DL_ERR_INVALID,
                      "embedding id %g at position %lld is not an integer in [0, %lld)",
                      (double)h->id, at, (long long)vocab);
}

void cu_embed_bwd(dl_backend *be, const float *ids, const float *dy, float *dtable,
                  int64_t nids, int64_t dim)
{
    cuda_ctx *c = ctx_of(be);
    if (nids <= 0 || dim <= 0 || !fits_int(c, "embed_bwd", nids))
        return;
    bind(c);
    size_t need = k_embed_bwd_scratch_bytes(nids);
    void *s = scratch(c, need);
    if (s)
        CUDA_CHECK(c, k_embed_bwd(c->stream, s, need, ids, dy, dtable, nids, dim), "embed_bwd");
}

/* Labels go up through the pinned slots, the per-row results are summed
 * on the device, and one 16-byte copy brings loss and count back. */
void cu_xent(dl_backend *be, const float *logits, const int32_t *labels, int64_t rows,
             int64_t cols, float *dlogits, float scale, double *loss_sum, int64_t *correct)
{
    cuda_ctx *c = ctx_of(be);
    *loss_sum = 0.0;
    *correct = 0;
    if (rows <= 0 || cols <= 0 || refuse_capture(c, "xent"))
        return;
    bind(c);
    size_t lab = align256((size_t)rows * sizeof(int32_t));
    char *s = (char *)scratch(c, lab + k_xent_scratch_bytes(rows));
    loss_result *res = (loss_result *)c->dev_res;
    if (!s || !CUDA_CHECK(c, stage_h2d(c, s, labels, (size_t)rows * sizeof(int32_t)), "xent") ||
        !CUDA_CHECK(c, k_xent(c->stream, s + lab, logits, (const int32_t *)s, rows, cols,
                              dlogits, scale, res), "xent") ||
        !CUDA_CHECK(c, cudaMemcpyAsync(&c->host->res, res, sizeof(*res),
                                       cudaMemcpyDeviceToHost, c->stream), "xent") ||
        !CUDA_CHECK(c, cudaStreamSynchronize(c->stream), "xent"))
        return;
    *loss_sum = c->host->res.loss;
    *correct = c->host->res.count;
}

void cu_mse(dl_backend *be, const float *pred, const float *target, int64_t n, float *dpred,
            float scale, double *loss_sum)
{
    cuda_ctx *c = ctx_of(be);
    *loss_sum = 0.0;
    if (n <= 0 || refuse_capture(c, "mse"))
        return;
    bind(c);
    size_t tb = align256((size_t)n * sizeof(float));
    char *s = (char *)scratch(c, tb + k_mse_scratch_bytes(n));
    loss_result *res = (loss_result *)c->dev_res;
    if (!s || !CUDA_CHECK(c, stage_h2d(c, s, target, (size_t)n * sizeof(float)), "mse") ||
        !CUDA_CHECK(c, k_mse(c->stream, s + tb, pred, (const float *)s, n, dpred, scale, res),
                    "mse") ||
        !CUDA_CHECK(c, cudaMemcpyAsync(&c->host->res, res, sizeof(*res),
                                       cudaMemcpyDeviceToHost, c->stream), "mse") ||
        !CUDA_CHECK(c, cudaStreamSynchronize(c->stream), "mse"))
        return;
    *loss_sum = c->host->res.loss;
}

void cu_sgd_step(dl_backend *be, float *p, const float *g, float *v, int64_t n, float lr,
                 float mu, bool nesterov, float wd)
{
    cuda_ctx *c = ctx_of(be);
    if (n <= 0)
        return;
    bind(c);
    CUDA_CHECK(c, k_sgd(c->stream, p, g, v, n, lr, mu, nesterov, wd), "sgd_step");
}

void cu_adam_step(dl_backend *be, float *p, const float *g, float *m, float *v, int64_t n,
                  float lr, float b1, float b2, float eps, float wd, bool decoupled, int64_t t)
{
    cuda_ctx *c = ctx_of(be);
    if (n <= 0)
        return;
    bind(c);
    /* As the CPU: p -= lr / (1 - b1^t) * m / (sqrt(v) / sqrt(1 - b2^t) + eps),
     * AdamW first p *= 1 - lr wd. */
    double bc1 = 1.0 - pow(b1, (double)t), bc2 = 1.0 - pow(b2, (double)t);
    float decay = decoupled ? (float)(1.0 - (double)lr * wd) : 1.0f;
    CUDA_CHECK(c, k_adam(c->stream, p, g, m, v, n, b1, b2, eps, decoupled ? 0.0f : wd, decay,
                         (float)(lr / bc1), (float)(1.0 / sqrt(bc2))), "adam_step");
}

void cu_adagrad_step(dl_backend *be, float *p, const float *g, float *sum, int64_t n,
                     float lr, float eps, float wd)
{
    cuda_ctx *c = ctx_of(be);
    if (n <= 0)
        return;
    bind(c);
    CUDA_CHECK(c, k_adagrad(c->stream, p, g, sum, n, lr, eps, wd), "adagrad_step");
}

void cu_axpy(dl_backend *be, float alpha, const float *x, float *y, int64_t n)
{
    cuda_ctx *c = ctx_of(be);
    if (n <= 0)
        return;
    bind(c);
    CUDA_CHECK(c, k_axpy(c->stream, alpha, x, y, n), "axpy");
}

void cu_scale(dl_backend *be, float *x, int64_t n, float alpha)
{
    cuda_ctx *c = ctx_of(be);
    if (n <= 0)
        return;
    bind(c);
    CUDA_CHECK(c, k_scale(c->stream, x, n, alpha), "scale");
}

/* Partial sums on the device, one 16-byte copy back, as mse's. */
void cu_sumsq(dl_backend *be, const float *x, int64_t n, double *sum)
{
    cuda_ctx *c = ctx_of(be);
    *sum = 0.0;
    if (n <= 0 || refuse_capture(c, "sumsq"))
        return;
    bind(c);
    void *s = scratch(c, k_sumsq_scratch_bytes(n));
    loss_result *res = (loss_result *)c->dev_res;
    if (!s || !CUDA_CHECK(c, k_sumsq(c->stream, s, x, n, res), "sumsq") ||
        !CUDA_CHECK(c, cudaMemcpyAsync(&c->host->res, res, sizeof(*res),
                                       cudaMemcpyDeviceToHost, c->stream), "sumsq") ||
        !CUDA_CHECK(c, cudaStreamSynchronize(c->stream), "sumsq"))
        return;
    *sum = c->host->res.loss;
}

/* ---- the graph layers' kernels ------------------------------------------------ */

void cu_binary_fwd(dl_backend *be, dl_binop op, const dl_strided *g, const float *a,
                   const float *b, const dl_act *post, float *y)
{
    cuda_ctx *c = ctx_of(be);
    bind(c);
    CUDA_CHECK(c, k_binary_fwd(c->stream, op, g, a, b, post, y), "binary_fwd");
}

void cu_binary_bwd(dl_backend *be, dl_binop op, const dl_strided *g, int k, const float *a,
                   const float *b, const float *dy, float *dx)
{
    cuda_ctx *c = ctx_of(be);
    bind(c);
    CUDA_CHECK(c, k_binary_bwd(c->stream, op, g, k, a, b, dy, dx), "binary_bwd");
}

void cu_copy_strided(dl_backend *be, const dl_strided *g, const float *x, float *y)
{
    cuda_ctx *c = ctx_of(be);
    bind(c);
    CUDA_CHECK(c, k_copy_strided(c->stream, g, x, y), "copy_strided");
}

void cu_reduce_fwd(dl_backend *be, const dl_strided *g, const float *x, float *y, float scale)
{
    cuda_ctx *c = ctx_of(be);
    bind(c);
    CUDA_CHECK(c, k_reduce_fwd(c->stream, g, x, y, scale), "reduce_fwd");
}

void cu_reduce_bwd(dl_backend *be, const dl_strided *g, const float *dy, float *dx,
                   float scale)
{
    cuda_ctx *c = ctx_of(be);
    bind(c);
    CUDA_CHECK(c, k_reduce_bwd(c->stream, g, dy, dx, scale), "reduce_bwd");
}

void cu_unary_fwd(dl_backend *be, const dl_unary *u, const float *x, float *y, int64_t n)
{
    cuda_ctx *c = ctx_of(be);
    if (n <= 0)
        return;
    bind(c);
    CUDA_CHECK(c, k_unary_fwd(c->stream, u, x, y, n), "unary_fwd");
}

void cu_unary_bwd(dl_backend *be, const dl_unary *u, const float *x, const float *y,
                  const float *dy, float *dx, int64_t n)
{
    cuda_ctx *c = ctx_of(be);
    if (n <= 0)
        return;
    bind(c);
    CUDA_CHECK(c, k_unary_bwd(c->stream, u, x, y, dy, dx, n), "unary_bwd");
}

void cu_layernorm_fwd(dl_backend *be, const float *x, const float *w, const float *b,
                      float *y, int64_t rows, int64_t d, float eps)
{
    cuda_ctx *c = ctx_of(be);
    if (rows <= 0 || d <= 0)
        return;
    bind(c);
    CUDA_CHECK(c, k_layernorm_fwd(c->stream, x, w, b, y, rows, d, eps), "layernorm_fwd");
}

void cu_layernorm_bwd(dl_backend *be, const float *x, const float *w, const float *dy,
                      float *dx, float *dw, float *db, int64_t rows, int64_t d, float eps)
{
    cuda_ctx *c = ctx_of(be);
    if (rows <= 0 || d <= 0)
        return;
    bind(c);
    void *s = scratch(c, k_layernorm_scratch_bytes(rows));
    if (s)
        CUDA_CHECK(c, k_layernorm_bwd(c->stream, s, x, w, dy, dx, dw, db, rows, d, eps),
                   "layernorm_bwd");
}

void cu_softmax_axis_fwd(dl_backend *be, bool log, const float *x, float *y, int64_t outer,
                         int64_t len, int64_t inner)
{
    cuda_ctx *c = ctx_of(be);
    if (outer <= 0 || len <= 0 || inner <= 0)
        return;
    bind(c);
    CUDA_CHECK(c, k_softmax_axis_fwd(c->stream, log, x, y, outer, len, inner),
               "softmax_axis_fwd");
}

void cu_softmax_axis_bwd(dl_backend *be, bool log, const float *y, const float *dy, float *dx,
                         int64_t outer, int64_t len, int64_t inner)
{
    cuda_ctx *c = ctx_of(be);
    if (outer <= 0 || len <= 0 || inner <= 0)
        return;
    bind(c);
    CUDA_CHECK(c, k_softmax_axis_bwd(c->stream, log, y, dy, dx, outer, len, inner),
               "softmax_axis_bwd");
}

/* cu_gemm's row-major-through-column-major swap, batched: cuBLAS's A is
 * our B (stride sb), its B our A (stride sa); a stride of 0 reuses one
 * matrix for every q. */
dl_status cu_gemm_batched(dl_backend *be, bool ta, bool tb, int64_t m, int64_t n, int64_t k,
                          float alpha, const float *a, int64_t sa, const float *b, int64_t sb,
                          float beta, float *cc, int64_t sc, int64_t batch, dl_err *err)
{
    cuda_ctx *c = ctx_of(be);
    if (c->latched)
        return take_latched(c, err);
    if (m > INT_MAX || n > INT_MAX || k > INT_MAX || batch > INT_MAX)
        return dl_err_set(err, DL_ERR_INVALID, "gemm_batched of %lld x %lldx%lldx%lld is too "
                          "large", (long long)batch, (long long)m, (long long)n, (long long)k);
    if (m <= 0 || n <= 0 || batch <= 0)
        return DL_OK;
    bind(c);
    bool ok = true;
    if (k <= 0) {   /* C_q = beta C_q */
        bool whole = sc == m * n;
        for (int64_t q = 0; ok && q < (whole ? 1 : batch); q++) {
            float *cq = cc + q * sc;
            int64_t len = whole ? m * n * batch : m * n;
            ok = beta == 0.0f
                     ? CUDA_CHECK(c, cudaMemsetAsync(cq, 0, (size_t)len * sizeof(float),
                                                     c->stream), "gemm_batched")
                     : CUDA_CHECK(c, k_scale(c->stream, cq, len, beta), "gemm_batched");
        }
    } else {
        ok = CUBLAS_CHECK(c, cublasGemmStridedBatchedEx(
                                 c->blas, tb ? CUBLAS_OP_T : CUBLAS_OP_N,
                                 ta ? CUBLAS_OP_T : CUBLAS_OP_N, (int)n, (int)m, (int)k, &alpha,
                                 b, CUDA_R_32F, (int)(tb ? k : n), (long long)sb, a, CUDA_R_32F,
                                 (int)(ta ? m : k), (long long)sa, &beta, cc, CUDA_R_32F, (int)n,
                                 (long long)sc, (int)batch,
                                 c->tf32 ? CUBLAS_COMPUTE_32F_FAST_TF32 : CUBLAS_COMPUTE_32F,
                                 CUBLAS_GEMM_DEFAULT), "gemm_batched");
    }
    return ok ? DL_OK : take_latched(c, err);
}

/* Attention (dl_attn), a sample at a time: each product one strided
 * batched GEMM over the heads (a head's columns at h * dk of the rows,
 * rows at their own strides), the probabilities in scratch (heads x tq x
 * tk floats; backward twice that). A sample's lengths go to the softmax
 * as arguments: the products keep their full size, and the zero
 * probabilities of padded keys and queries make the padded rows of O,
 * dQ, dK and dV zeros. */
static bool attn_gemm(cuda_ctx *c, bool ta, bool tb, int64_t m, int64_t n, int64_t k,
                      const float *a, int64_t lda, int64_t sa, const float *b, int64_t ldb,
                      int64_t sb, float *cc, int64_t ldc, int64_t sc, int64_t heads)
{
    const float one = 1.0f, zero = 0.0f;
    return CUBLAS_CHECK(c, cublasGemmStridedBatchedEx(
                               c->blas, tb ? CUBLAS_OP_T : CUBLAS_OP_N,
                               ta ? CUBLAS_OP_T : CUBLAS_OP_N, (int)n, (int)m, (int)k, &one, b,
                               CUDA_R_32F, (int)ldb, (long long)sb, a, CUDA_R_32F, (int)lda,
                               (long long)sa, &zero, cc, CUDA_R_32F, (int)ldc, (long long)sc,
                               (int)heads,
                               c->tf32 ? CUBLAS_COMPUTE_32F_FAST_TF32 : CUBLAS_COMPUTE_32F,
                               CUBLAS_GEMM_DEFAULT), "attention");
}

/* Sample s's valid rows of a side of cap rows (len NULL: all of them). */
static int64_t attn_rows_of(const int32_t *len, int64_t s, int64_t cap)
{
    if (!len)
        return cap;
    return len[s] < 0 ? 0 : len[s] < cap ? len[s] : cap;
}

static dl_status attn_fits(const dl_attn *a, dl_err *err)
{
    if (a->tq * a->tk > INT_MAX || a->q_row > INT_MAX || a->k_row > INT_MAX ||
        a->v_row > INT_MAX || a->o_row > INT_MAX || a->heads > INT_MAX)
        return dl_err_set(err, DL_ERR_INVALID, "attention of %lld x %lld positions is too "
                          "large", (long long)a->tq, (long long)a->tk);
    return DL_OK;
}

dl_status cu_attn_fwd(dl_backend *be, const dl_attn *a, const float *q, const float *k,
                      const float *v, float *o, dl_err *err)
{
    cuda_ctx *c = ctx_of(be);
    if (c->latched)
        return take_latched(c, err);
    dl_status st = attn_fits(a, err);
    if (st != DL_OK || a->n <= 0 || a->tq <= 0 || a->tk <= 0)
        return st;
    bind(c);
    int64_t tt = a->tq * a->tk;
    float *p = (float *)scratch(c, (size_t)(a->heads * tt) * sizeof(float));
    bool ok = p != nullptr;
    for (int64_t s = 0; ok && s < a->n; s++) {
        ok = attn_gemm(c, false, true, a->tq, a->tk, a->dk, q + s * a->q_smp, a->q_row, a->dk,
                       k + s * a->k_smp, a->k_row, a->dk, p, a->tk, tt, a->heads) &&
             CUDA_CHECK(c, k_attn_softmax(c->stream, p, a->heads * a->tq, a->tq, a->tk,
                                          a->scale, a->causal,
                                          attn_rows_of(a->q_len, s, a->tq),
                                          attn_rows_of(a->k_len, s, a->tk),
                                          a->q_off ? a->q_off[s] : 0), "attention") &&
             attn_gemm(c, false, false, a->tq, a->dv, a->tk, p, a->tk, tt, v + s * a->v_smp,
                       a->v_row, a->dv, o + s * a->o_smp, a->o_row, a->dv, a->heads);
    }
    return ok ? DL_OK : take_latched(c, err);
}

dl_status cu_attn_bwd(dl_backend *be, const dl_attn *a, const float *q, const float *k,
                      const float *v, const float *dout, float *dq, float *dk, float *dv,
                      dl_err *err)
{
    cuda_ctx *c = ctx_of(be);
    if (c->latched)
        return take_latched(c, err);
    dl_status st = attn_fits(a, err);
    if (st != DL_OK || a->n <= 0 || a->tq <= 0 || a->tk <= 0)
        return st;
    bind(c);
    int64_t tt = a->tq * a->tk, rows = a->heads * a->tq;
    float *p = (float *)scratch(c, (size_t)(2 * a->heads * tt) * sizeof(float));
    float *dp = p ? p + a->heads * tt : nullptr;
    bool ok = p != nullptr;
    for (int64_t s = 0; ok && s < a->n; s++) {
        const float *qs = q + s * a->q_smp, *ks = k + s * a->k_smp, *vs = v + s * a->v_smp;
        const float *dos = dout + s * a->o_smp;
        ok = attn_gemm(c, false, true, a->tq, a->tk, a->dk, qs, a->q_row, a->dk, ks, a->k_row,
                       a->dk, p, a->tk, tt, a->heads) &&
             CUDA_CHECK(c, k_attn_softmax(c->stream, p, rows, a->tq, a->tk, a->scale,
                                          a->causal, attn_rows_of(a->q_len, s, a->tq),
                                          attn_rows_of(a->k_len, s, a->tk),
                                          a->q_off ? a->q_off[s] : 0), "attention") &&
             attn_gemm(c, true, false, a->tk, a->dv, a->tq, p, a->tk, tt, dos, a->o_row, a->dv,
                       dv + s * a->v_smp, a->v_row, a->dv, a->heads) &&
             attn_gemm(c, false, true, a->tq, a->tk, a->dv, dos, a->o_row, a->dv, vs, a->v_row,
                       a->dv, dp, a->tk, tt, a->heads) &&
             CUDA_CHECK(c, k_attn_softmax_bwd(c->stream, p, dp, rows, a->tk, a->scale),
                        "attention") &&
             attn_gemm(c, false, false, a->tq, a->dk, a->tk, dp, a->tk, tt, ks, a->k_row, a->dk,
                       dq + s * a->q_smp, a->q_row, a->dk, a->heads) &&
             attn_gemm(c, true, false, a->tk, a->dk, a->tq, dp, a->tk, tt, qs, a->q_row, a->dk,
                       dk + s * a->k_smp, a->k_row, a->dk, a->heads);
    }
    return ok ? DL_OK : take_latched(c, err);
}

/* Sequences: the lengths go up through the pinned slots into scratch
 * before each kernel (a kernel or two a layer, n int32 each). NULL when q
 * has none, or after a failure (*ok false, latched). */
const int32_t *seq_lengths(cuda_ctx *c, const dl_seq *q, const char *what, bool *ok)
{
    *ok = true;
    if (!q->len)
        return nullptr;
    size_t bytes = (size_t)q->n * sizeof(int32_t);
    void *s = refuse_capture(c, what) ? nullptr : scratch(c, bytes);
    *ok = s && CUDA_CHECK(c, stage_h2d(c, s, q->len, bytes), what);
    return (const int32_t *)s;
}

void cu_seq_mask(dl_backend *be, const dl_seq *q, const float *x, float *y)
{
    cuda_ctx *c = ctx_of(be);
    bool ok;
    if (q->n <= 0)
        return;
    bind(c);
    const int32_t *len = seq_lengths(c, q, "seq_mask", &ok);
    if (ok)
        CUDA_CHECK(c, k_seq_mask(c->stream, q, len, x, y), "seq_mask");
}

void cu_seq_pool_fwd(dl_backend *be, dl_seq_pool_kind kind, const dl_seq *q, const float *x,
                     float *y)
{
    cuda_ctx *c = ctx_of(be);
    bool ok;
    if (q->n <= 0)
        return;
    bind(c);
    const int32_t *len = seq_lengths(c, q, "seq_pool_fwd", &ok);
    if (ok)
        CUDA_CHECK(c, k_seq_pool_fwd(c->stream, kind, q, len, x, y), "seq_pool_fwd");
}

void cu_seq_pool_bwd(dl_backend *be, dl_seq_pool_kind kind, const dl_seq *q, const float *x,
                     const float *dy, float *dx)
{
    cuda_ctx *c = ctx_of(be);
    bool ok;
    if (q->n <= 0)
        return;
    bind(c);
    const int32_t *len = seq_lengths(c, q, "seq_pool_bwd", &ok);
    if (ok)
        CUDA_CHECK(c, k_seq_pool_bwd(c->stream, kind, q, len, x, dy, dx), "seq_pool_bwd");
}

#ifdef DL_HAVE_CUDNN
/* ---- recurrent stacks on cuDNN (dl_rnn) -------------------------------------
 * cuDNN's RNN API over padded batch-major data with each sample's length
 * (CUDNN_RNN_PADDED_IO_ENABLED): the reverse direction starts at a
 * sample's last valid position, y is zero past it, and hy holds PyTorch's
 * h_n. cuDNN keeps the parameters in a weight space of its own layout:
 * each call copies them in through the entry's blocks, and backward adds
 * the weight-space gradient back through the same blocks. The reserve
 * (r->reserve) holds cuDNN's reserve space, then, for a stack returning
 * its last states, the full output sequence backward reads. */

bool cudnn_check(cuda_ctx *c, cudnnStatus_t st, const char *what)
{
    if (st == CUDNN_STATUS_SUCCESS)
        return true;
    latch(c, DL_ERR_BACKEND, "%s: cuDNN %s", what, cudnnGetErrorString(st));
    return false;
}
#define CUDNN_CHECK(c, call, what) cudnn_check((c), (call), (what))

/* The cuDNN handle on c's stream, made on first use. */
bool rnn_handle(cuda_ctx *c)
{
    if (c->dnn)
        return true;
    if (!CUDNN_CHECK(c, cudnnCreate(&c->dnn), "cuDNN handle"))
        return false;
    return CUDNN_CHECK(c, cudnnSetStream(c->dnn, c->stream), "cuDNN stream") &&
           CUDNN_CHECK(c, cudnnCreateDropoutDescriptor(&c->nodrop), "cuDNN dropout") &&
           CUDNN_CHECK(c, cudnnSetDropoutDescriptor(c->nodrop, c->dnn, 0.0f, nullptr, 0, 0),
                       "cuDNN dropout");
}

void rnn_entry_clear(rnn_entry *e)
{
    if (e->desc)
        cudnnDestroyRNNDescriptor(e->desc);
    free(e->blocks);
    *e = rnn_entry{};
}

int rnn_gates(const rnn_entry *e) { return e->cell == DL_RNN_LSTM ? 4 : 3; }

/* Appends a block, merged with the last one where both continue it. */
void rnn_add_block(rnn_entry *e, int64_t src, int64_t dst, int64_t count)
{
    rnn_block *b = e->nblocks ? &e->blocks[e->nblocks - 1] : nullptr;
    if (b && b->src + b->count == src && b->dst + b->count == dst) {
        b->count += count;
        return;
    }
    e->blocks[e->nblocks++] = rnn_block{ src, dst, count };
}

/* Floats of the tensor cuDNN describes in d. */
int64_t rnn_desc_floats(cudnnTensorDescriptor_t d)
{
    cudnnDataType_t dt;
    int nd = 0, dims[8], strides[8];
    if (cudnnGetTensorNdDescriptor(d, 8, &dt, &nd, dims, strides) != CUDNN_STATUS_SUCCESS)
        return -1;
    int64_t n = 1;
    for (int i = 0; i < nd; i++)
        n *= dims[i];
    return n;
}

/* The blocks of e: for each layer and direction (cuDNN's pseudo-layer),
 * the gates of W_ih, then of W_hh (linear layers 0 .. 2G-1), then their
 * biases, in PyTorch's order. */
bool rnn_map(cuda_ctx *c, rnn_entry *e)
{
    int g = rnn_gates(e);
    int64_t h = e->hidden, at = 0;
    e->blocks = (rnn_block *)calloc((size_t)(e->layers * e->dirs * 4 * g), sizeof(rnn_block));
    cudnnTensorDescriptor_t md = nullptr, bd = nullptr;
    bool ok = e->blocks && grow(c, &c->rnn_w, &c->rnn_w_bytes, e->wbytes, "rnn weight space") &&
              CUDNN_CHECK(c, cudnnCreateTensorDescriptor(&md), "rnn weights") &&
              CUDNN_CHECK(c, cudnnCreateTensorDescriptor(&bd), "rnn weights");
    if (!e->blocks)
        latch(c, DL_ERR_NOMEM, "rnn weight blocks");
    for (int pl = 0; ok && pl < e->layers * e->dirs; pl++) {
        int64_t in = pl < e->dirs ? e->in : h * e->dirs;
        for (int bias = 0; ok && bias <= (int)e->bias; bias++)
            for (int id = 0; ok && id < 2 * g; id++) {
                void *m = nullptr, *b = nullptr;
                ok = CUDNN_CHECK(c, cudnnGetRNNWeightParams(c->dnn, e->desc, pl, e->wbytes,
                                                            c->rnn_w, id, md, &m, bd, &b),
                                 "rnn weights");
                bool ih = id < g;
                int64_t cols = ih ? in : h, gate = ih ? id : id - g;
                int64_t src = bias ? at + g * h * (in + h) + (ih ? 0 : g * h) + gate * h
                                   : at + (ih ? 0 : g * h * in) + gate * h * cols;
                int64_t count = bias ? h : h * cols;
                void *p = bias ? b : m;
                if (ok && (!p || rnn_desc_floats(bias ? bd : md) != count)) {
                    latch(c, DL_ERR_BACKEND, "rnn weights: cuDNN's linear layer %d of "
                          "pseudo-layer %d is not the [%lld] block expected", id, pl,
                          (long long)count);
                    ok = false;
                }
                if (ok)
                    rnn_add_block(e, src, ((char *)p - (char *)c->rnn_w) / (int64_t)sizeof(float),
                                  count);
            }
        at += g * h * (in + h) + (e->bias ? 2 * g * h : 0);
    }
    if (md)
        cudnnDestroyTensorDescriptor(md);
    if (bd)
        cudnnDestroyTensorDescriptor(bd);
    return ok;
}

/* The entry of r's geometry: cached, else made (replacing the oldest). */
rnn_entry *rnn_entry_for(cuda_ctx *c, const dl_rnn *r)
{
    for (int i = 0; i < RNN_CACHE; i++) {
        rnn_entry *e = &c->rnn[i];
        if (e->used && e->cell == r->cell && e->in == r->in && e->hidden == r->hidden &&
            e->layers == r->layers && e->dirs == r->dirs && e->bias == r->bias)
            return e;
    }
    if (!rnn_handle(c))
        return nullptr;
    rnn_entry *e = &c->rnn[c->rnn_next];
    c->rnn_next = (c->rnn_next + 1) % RNN_CACHE;
    rnn_entry_clear(e);
    *e = rnn_entry{ true, r->cell, r->in, r->hidden, r->layers, r->dirs, r->bias,
                    nullptr, 0, nullptr, 0 };
    bool ok = CUDNN_CHECK(c, cudnnCreateRNNDescriptor(&e->desc), "rnn descriptor") &&
              CUDNN_CHECK(c, cudnnSetRNNDescriptor_v8(
                                 e->desc, CUDNN_RNN_ALGO_STANDARD,
                                 r->cell == DL_RNN_LSTM ? CUDNN_LSTM : CUDNN_GRU,
                                 r->bias ? CUDNN_RNN_DOUBLE_BIAS : CUDNN_RNN_NO_BIAS,
                                 r->dirs == 2 ? CUDNN_BIDIRECTIONAL : CUDNN_UNIDIRECTIONAL,
                                 CUDNN_LINEAR_INPUT, CUDNN_DATA_FLOAT, CUDNN_DATA_FLOAT,
                                 c->tf32 ? CUDNN_DEFAULT_MATH : CUDNN_FMA_MATH, (int32_t)r->in,
                                 (int32_t)r->hidden, (int32_t)r->hidden, r->layers, c->nodrop,
                                 CUDNN_RNN_PADDED_IO_ENABLED), "rnn descriptor") &&
              CUDNN_CHECK(c, cudnnGetRNNWeightSpaceSize(c->dnn, e->desc, &e->wbytes),
                          "rnn weight space") &&
              rnn_map(c, e);
    if (!ok) {
        rnn_entry_clear(e);
        return nullptr;
    }
    return e;
}

/* The descriptors of one call over n samples of host lengths len. */
struct rnn_call {
    cudnnRNNDataDescriptor_t xd, yd;
    cudnnTensorDescriptor_t  hd;
};

void rnn_call_free(rnn_call *k)
{
    if (k->xd)
        cudnnDestroyRNNDataDescriptor(k->xd);
    if (k->yd)
        cudnnDestroyRNNDataDescriptor(k->yd);
    if (k->hd)
        cudnnDestroyTensorDescriptor(k->hd);
}

bool rnn_call_init(cuda_ctx *c, const dl_rnn *r, int64_t n, const int32_t *len, rnn_call *k)
{
    *k = rnn_call{};
    float zero = 0.0f;
    int dims[3] = { r->layers * r->dirs, (int)n, (int)r->hidden };
    int strides[3] = { (int)(n * r->hidden), (int)r->hidden, 1 };
    return CUDNN_CHECK(c, cudnnCreateRNNDataDescriptor(&k->xd), "rnn data") &&
           CUDNN_CHECK(c, cudnnCreateRNNDataDescriptor(&k->yd), "rnn data") &&
           CUDNN_CHECK(c, cudnnCreateTensorDescriptor(&k->hd), "rnn states") &&
           CUDNN_CHECK(c, cudnnSetRNNDataDescriptor(k->xd, CUDNN_DATA_FLOAT,
                                                    CUDNN_RNN_DATA_LAYOUT_BATCH_MAJOR_UNPACKED,
                                                    (int)r->t, (int)n, (int)r->in, len, &zero),
                       "rnn data") &&
           CUDNN_CHECK(c, cudnnSetRNNDataDescriptor(k->yd, CUDNN_DATA_FLOAT,
                                                    CUDNN_RNN_DATA_LAYOUT_BATCH_MAJOR_UNPACKED,
                                                    (int)r->t, (int)n,
                                                    (int)(r->hidden * r->dirs), len, &zero),
                       "rnn data") &&
           CUDNN_CHECK(c, cudnnSetTensorNdDescriptor(k->hd, CUDNN_DATA_FLOAT, 3, dims, strides),
                       "rnn states");
}

/* n host lengths: r's, or t each. New (free). */
int32_t *rnn_lengths(const dl_rnn *r, int64_t n, const int32_t *len)
{
    int32_t *l = (int32_t *)malloc((size_t)(n > 0 ? n : 1) * sizeof(int32_t));
    for (int64_t i = 0; l && i < n; i++)
        l[i] = len ? len[i] : (int32_t)r->t;
    return l;
}

/* Floats of the output sequence [n, t, hidden * dirs] and of hy. */
int64_t rnn_seq_floats(const dl_rnn *r, int64_t n) { return n * r->t * r->hidden * r->dirs; }
int64_t rnn_state_floats(const dl_rnn *r, int64_t n)
{
    return (int64_t)r->layers * r->dirs * n * r->hidden;
}

/* cuDNN's workspace and (training) reserve for n samples of r, at the
 * lengths the call gives. */
bool rnn_spaces(cuda_ctx *c, rnn_entry *e, const rnn_call *k, bool train, size_t *ws,
                size_t *rs)
{
    return CUDNN_CHECK(c, cudnnGetRNNTempSpaceSizes(c->dnn, e->desc,
                                                    train ? CUDNN_FWD_MODE_TRAINING
                                                          : CUDNN_FWD_MODE_INFERENCE,
                                                    k->xd, ws, rs), "rnn workspace");
}

/* The reserve's layout for n samples, whatever the lengths: cuDNN's
 * reserve at all t steps, then (last states) the output sequence. */
bool rnn_reserve(cuda_ctx *c, rnn_entry *e, const dl_rnn *r, int64_t n, size_t *rs,
                 size_t *total)
{
    int32_t *full = rnn_lengths(r, n, nullptr);
    rnn_call k;
    size_t ws = 0;
    bool ok = full && rnn_call_init(c, r, n, full, &k) && rnn_spaces(c, e, &k, true, &ws, rs);
    if (full)
        rnn_call_free(&k);
    free(full);
    if (!full)
        latch(c, DL_ERR_NOMEM, "rnn lengths");
    *total = align256(*rs) + (r->ret_seq ? 0 : (size_t)rnn_seq_floats(r, n) * sizeof(float));
    return ok;
}

/* Copies r's parameters into the weight space (or, back, adds the weight
 * space's gradient to r->dw). */
bool rnn_weights_in(cuda_ctx *c, const rnn_entry *e, const dl_rnn *r)
{
    bool ok = true;
    for (int i = 0; ok && i < e->nblocks; i++) {
        const rnn_block *b = &e->blocks[i];
        ok = CUDA_CHECK(c, cudaMemcpyAsync((float *)c->rnn_w + b->dst, r->w + b->src,
                                           (size_t)b->count * sizeof(float),
                                           cudaMemcpyDeviceToDevice, c->stream), "rnn weights");
    }
    return ok;
}

bool rnn_grads_out(cuda_ctx *c, const rnn_entry *e, const dl_rnn *r)
{
    bool ok = true;
    for (int i = 0; ok && i < e->nblocks; i++) {
        const rnn_block *b = &e->blocks[i];
        ok = CUDA_CHECK(c, k_axpy(c->stream, 1.0f, (const float *)c->rnn_dw + b->dst,
                                  r->dw + b->src, b->count), "rnn gradients");
    }
    return ok;
}

/* hy's top layer to y [n, hidden * dirs], or back (to_y false: y to the
 * top layer's slots of hy). */
bool rnn_last(cuda_ctx *c, const dl_rnn *r, int64_t n, float *hy, float *y, bool to_y)
{
    int64_t h = r->hidden;
    dl_strided g = { .nd = 3, .shape = { n, r->dirs, h }, .st = {} };
    int64_t hs[3] = { h, n * h, 1 }, ys[3] = { r->dirs * h, h, 1 };
    memcpy(g.st[to_y ? 0 : 1], hs, sizeof(hs));
    memcpy(g.st[to_y ? 1 : 0], ys, sizeof(ys));
    float *top = hy + (int64_t)(r->layers - 1) * r->dirs * n * h;
    return CUDA_CHECK(c, to_y ? k_copy_strided(c->stream, &g, top, y)
                              : k_copy_strided(c->stream, &g, y, top), "rnn last states");
}

/* One forward over samples [i0, i0 + n) of r. */
bool rnn_fwd_run(cuda_ctx *c, rnn_entry *e, const dl_rnn *r, int64_t i0, int64_t n,
                 const float *x, float *y)
{
    int32_t *len = rnn_lengths(r, n, r->len ? r->len + i0 : nullptr);
    if (!len) {
        latch(c, DL_ERR_NOMEM, "rnn lengths");
        return false;
    }
    rnn_call k;
    size_t ws = 0, rs = 0, rs_total = 0, unused = 0;
    bool ok = rnn_call_init(c, r, n, len, &k) && rnn_spaces(c, e, &k, r->train, &ws, &unused) &&
              (!r->train || rnn_reserve(c, e, r, n, &rs, &rs_total));
    /* scratch: the lengths, the workspace, hy and (inference, last
     * states) the output sequence */
    size_t at_ws = align256((size_t)n * sizeof(int32_t)), at_hy = at_ws + align256(ws);
    size_t at_seq = at_hy + align256((size_t)rnn_state_floats(r, n) * sizeof(float));
    size_t need = at_seq + (r->ret_seq || r->train ? 0
                                                  : (size_t)rnn_seq_floats(r, n) * sizeof(float));
    char *s = ok ? (char *)scratch(c, need) : nullptr;
    ok = s && CUDA_CHECK(c, stage_h2d(c, s, len, (size_t)n * sizeof(int32_t)), "rnn lengths") &&
         rnn_weights_in(c, e, r);
    float *hy = r->ret_seq ? r->hy : (float *)(s + at_hy);
    float *seq = r->ret_seq ? y : r->train ? (float *)((char *)r->reserve + align256(rs))
                                           : (float *)(s + at_seq);
    ok = ok && CUDNN_CHECK(c, cudnnRNNForward(c->dnn, e->desc,
                                              r->train ? CUDNN_FWD_MODE_TRAINING
                                                       : CUDNN_FWD_MODE_INFERENCE,
                                              (const int32_t *)s, k.xd, x, k.yd, seq, k.hd,
                                              r->hx, hy, k.hd, r->cx, r->cy, e->wbytes,
                                              c->rnn_w, ws, s + at_ws, r->train ? rs : 0,
                                              r->train ? r->reserve : nullptr), "rnn forward");
    if (ok && !r->ret_seq)
        ok = rnn_last(c, r, n, hy, y, true);
    rnn_call_free(&k);
    free(len);
    return ok;
}

bool rnn_geom_ok(cuda_ctx *c, const dl_rnn *r)
{
    if (r->n * r->t * (r->in > r->hidden * r->dirs ? r->in : r->hidden * r->dirs) > INT_MAX ||
        r->hidden > INT_MAX / 4) {
        latch(c, DL_ERR_INVALID, "rnn of %lld x %lld steps is too large", (long long)r->n,
              (long long)r->t);
        return false;
    }
    return true;
}

dl_status cu_rnn_size(dl_backend *be, const dl_rnn *r, size_t *reserve, size_t *work,
                      dl_err *err)
{
    cuda_ctx *c = ctx_of(be);
    *reserve = *work = 0;
    if (c->latched)
        return take_latched(c, err);
    bind(c);
    rnn_entry *e = rnn_geom_ok(c, r) ? rnn_entry_for(c, r) : nullptr;
    size_t rs = 0;
    if (!e || (r->n > 0 && !rnn_reserve(c, e, r, r->n, &rs, reserve)))
        return take_latched(c, err);
    return DL_OK;
}

/* Batch-invariant inference runs a sample at a time: one shape whatever
 * the batch around it. */
dl_status cu_rnn_fwd(dl_backend *be, const dl_rnn *r, const float *x, float *y, dl_err *err)
{
    cuda_ctx *c = ctx_of(be);
    if (c->latched)
        return take_latched(c, err);
    if (r->n <= 0)
        return DL_OK;
    if (refuse_capture(c, "rnn_fwd") || !rnn_geom_ok(c, r))
        return take_latched(c, err);
    bind(c);
    rnn_entry *e = rnn_entry_for(c, r);
    bool ok = e != nullptr;
    int64_t ys = r->ret_seq ? r->t * r->hidden * r->dirs : r->hidden * r->dirs;
    /* Batch-invariant: a sample at a time, but for decoding's states
     * ([layers, n, h] over the whole batch, as cuDNN reads them) */
    if (ok && r->invariant && !r->train && !r->hx && !r->hy && !r->cy)
        for (int64_t i = 0; ok && i < r->n; i++)
            ok = rnn_fwd_run(c, e, r, i, 1, x + i * r->t * r->in, y + i * ys);
    else if (ok)
        ok = rnn_fwd_run(c, e, r, 0, r->n, x, y);
    return ok ? DL_OK : take_latched(c, err);
}

/* Backward data, then weights. A stack returning its last states reads
 * zeros for the sequence's gradient and dy in dhy's top layer; dx, also
 * when the caller wants none, is cuDNN's to write, then zeroed past the
 * lengths. */
dl_status cu_rnn_bwd(dl_backend *be, const dl_rnn *r, const float *x, const float *y,
                     const float *dy, float *dx, dl_err *err)
{
    cuda_ctx *c = ctx_of(be);
    if (c->latched)
        return take_latched(c, err);
    if (r->n <= 0)
        return DL_OK;
    if (refuse_capture(c, "rnn_bwd") || !rnn_geom_ok(c, r))
        return take_latched(c, err);
    bind(c);
    int64_t n = r->n;
    rnn_entry *e = rnn_entry_for(c, r);
    int32_t *len = rnn_lengths(r, n, r->len);
    rnn_call k{};
    size_t ws = 0, unused = 0, rs = 0, rs_total = 0;
    bool ok = e && len && rnn_call_init(c, r, n, len, &k) &&
              rnn_spaces(c, e, &k, true, &ws, &unused) && rnn_reserve(c, e, r, n, &rs, &rs_total) &&
              grow(c, &c->rnn_dw, &c->rnn_dw_bytes, e->wbytes, "rnn weight gradients");
    if (!len)
        latch(c, DL_ERR_NOMEM, "rnn lengths");
    /* scratch: the lengths, the workspace, then (last states) the
     * sequence's zero gradient and dhy, then dx when the caller has none */
    size_t at_ws = align256((size_t)n * sizeof(int32_t)), at_dseq = at_ws + align256(ws);
    size_t seq_bytes = r->ret_seq ? 0 : (size_t)rnn_seq_floats(r, n) * sizeof(float);
    size_t at_dhy = at_dseq + align256(seq_bytes);
    size_t at_dx = at_dhy + align256(r->ret_seq ? 0 : (size_t)rnn_state_floats(r, n) *
                                                          sizeof(float));
    size_t need = at_dx + (dx ? 0 : (size_t)(n * r->t * r->in) * sizeof(float));
    char *s = ok ? (char *)scratch(c, need) : nullptr;
    ok = s && CUDA_CHECK(c, stage_h2d(c, s, len, (size_t)n * sizeof(int32_t)), "rnn lengths") &&
         rnn_weights_in(c, e, r);
    const int32_t *dlen = (const int32_t *)s;
    const float *seq = r->ret_seq ? y : (const float *)((const char *)r->reserve + align256(rs));
    const float *dseq = dy;
    float *dhy = nullptr, *dxs = dx ? dx : (float *)(s + at_dx);
    if (ok && !r->ret_seq) {
        dseq = (const float *)(s + at_dseq);
        dhy = (float *)(s + at_dhy);
        ok = CUDA_CHECK(c, cudaMemsetAsync(s + at_dseq, 0, at_dx - at_dseq, c->stream),
                        "rnn gradients") &&
             rnn_last(c, r, n, dhy, (float *)dy, false);
    }
    ok = ok && CUDNN_CHECK(c, cudnnRNNBackwardData_v8(c->dnn, e->desc, dlen, k.yd, seq, dseq,
                                                      k.xd, dxs, k.hd, nullptr, dhy, nullptr,
                                                      k.hd, nullptr, nullptr, nullptr, e->wbytes,
                                                      c->rnn_w, ws, s + at_ws, rs, r->reserve),
                           "rnn backward data");
    dl_seq q = { n, r->t, r->in, r->len };
    if (ok && dx)
        ok = CUDA_CHECK(c, k_seq_mask(c->stream, &q, r->len ? dlen : nullptr, dx, dx),
                        "rnn backward data");
    ok = ok && CUDA_CHECK(c, cudaMemsetAsync(c->rnn_dw, 0, e->wbytes, c->stream),
                          "rnn backward weights") &&
         CUDNN_CHECK(c, cudnnRNNBackwardWeights_v8(c->dnn, e->desc, CUDNN_WGRAD_MODE_ADD, dlen,
                                                   k.xd, x, k.hd, nullptr, k.yd, seq, e->wbytes,
                                                   c->rnn_dw, ws, s + at_ws, rs, r->reserve),
                     "rnn backward weights") &&
         rnn_grads_out(c, e, r);
    rnn_call_free(&k);
    free(len);
    return ok ? DL_OK : take_latched(c, err);
}

void rnn_fini(cuda_ctx *c)
{
    for (int i = 0; i < RNN_CACHE; i++)
        rnn_entry_clear(&c->rnn[i]);
    if (c->nodrop)
        cudnnDestroyDropoutDescriptor(c->nodrop);
    if (c->dnn)
        cudnnDestroy(c->dnn);
}
#endif

/* Defined below with creation and graphs. */
void      mod_backend_destroy(dl_backend *be);
dl_status mod_sync(dl_backend *be, dl_err *err);
dl_status mod_memory(dl_backend *be, size_t *used, size_t *total);
void     *mod_stream(dl_backend *be);
dl_status mod_graph_begin(dl_backend *be, dl_err *err);
dl_status mod_graph_end(dl_backend *be, dl_graph **out, dl_err *err);
dl_status mod_graph_launch(dl_backend *be, dl_graph *g, dl_err *err);
void      mod_graph_free(dl_backend *be, dl_graph *g);

const dl_backend_ops cuda_ops = {
    .name           = "cuda",
    .free           = mod_backend_destroy,
    .sync           = mod_sync,
    .memory         = mod_memory,
    .stream         = mod_stream,
    .graph_begin    = mod_graph_begin,
    .graph_end      = mod_graph_end,
    .graph_launch   = mod_graph_launch,
    .graph_free     = mod_graph_free,
    .alloc          = cu_alloc,
    .release        = cu_release,
    .upload         = cu_upload,
    .download       = cu_download,
    .fill           = cu_fill,
    .copy           = cu_copy,
    .gemm           = cu_gemm,
    .bias_add       = cu_bias_add,
    .bias_grad      = cu_bias_grad,
    .bias_add_nchw  = cu_bias_add_nchw,
    .bias_grad_nchw = cu_bias_grad_nchw,
    .act_fwd        = cu_act_fwd,
    .act_bwd        = cu_act_bwd,
    .softmax_fwd    = cu_softmax_fwd,
    .softmax_bwd    = cu_softmax_bwd,
    .im2col         = cu_im2col,
    .col2im         = cu_col2im,
    .swap_outer     = cu_swap_outer,
    .swap_bias_act  = NULL,   /* swap_outer, bias_add_nchw, act_fwd */
    .pool_fwd       = cu_pool_fwd,
    .pool_bwd       = cu_pool_bwd,
    /* no convolution engine, no fused dense epilogue: the generic paths */
    .conv_fwd         = NULL,
    .conv_fwd_unary   = NULL,
    .conv_fwd_add     = NULL,
    .conv_bwd_data    = NULL,
    .conv_bwd_weights = NULL,
    .pool2d_fwd       = NULL,
    .pool2d_bwd       = NULL,
    .fix_weights      = NULL,
    .gemm_bias_act    = NULL,
    .gemm_bias_act_rows = cu_gemm_bias_act_rows,
    .gemm_bias_unary  = NULL,
    .bn_fwd_train   = cu_bn_fwd_train,
    .bn_fwd_infer   = cu_bn_fwd_infer,
    .bn_bwd         = cu_bn_bwd,
    .bn_fwd_train_blk = NULL,
    .bn_fwd_infer_blk = NULL,
    .bn_bwd_blk     = NULL,
    .dropout_fwd    = cu_dropout_fwd,
    .mul            = cu_mul,
    .embed_fwd      = cu_embed_fwd,
    .embed_bwd      = cu_embed_bwd,
    .xent           = cu_xent,
    .mse            = cu_mse,
    .sgd_step       = cu_sgd_step,
    .adam_step      = cu_adam_step,
    .adagrad_step   = cu_adagrad_step,
    .axpy           = cu_axpy,
    .scale          = cu_scale,
    .sumsq          = cu_sumsq,
    .binary_fwd       = cu_binary_fwd,
    .binary_bwd       = cu_binary_bwd,
    .copy_strided     = cu_copy_strided,
    .reduce_fwd       = cu_reduce_fwd,
    .reduce_bwd       = cu_reduce_bwd,
    .unary_fwd        = cu_unary_fwd,
    .unary_bwd        = cu_unary_bwd,
    .layernorm_fwd    = cu_layernorm_fwd,
    .layernorm_bwd    = cu_layernorm_bwd,
    .softmax_axis_fwd = cu_softmax_axis_fwd,
    .softmax_axis_bwd = cu_softmax_axis_bwd,
    .gemm_batched     = cu_gemm_batched,
    .attn_fwd         = cu_attn_fwd,
    .attn_bwd         = cu_attn_bwd,
    .seq_mask         = cu_seq_mask,
    .seq_pool_fwd     = cu_seq_pool_fwd,
    .seq_pool_bwd     = cu_seq_pool_bwd,
#ifdef DL_HAVE_CUDNN
    .rnn_size         = cu_rnn_size,
    .rnn_fwd          = cu_rnn_fwd,
    .rnn_bwd          = cu_rnn_bwd,
#else
    .rnn_size         = NULL,
    .rnn_fwd          = NULL,
    .rnn_bwd          = NULL,
#endif
};

/* ---- creation and teardown -------------------------------------------------- */

int local_rank(void)
{
    static const char *const names[] = { "OMPI_COMM_WORLD_LOCAL_RANK", "SLURM_LOCALID",
                                         "MPI_LOCALRANKID", "MV2_COMM_WORLD_LOCAL_RANK",
                                         "LOCAL_RANK", nullptr };
    for (const char *const *n = names; *n; n++) {
        const char *v = getenv(*n);
        if (v && *v >= '0' && *v <= '9')
            return atoi(v);
    }
    return 0;
}

void ctx_destroy(cuda_ctx *c)
{
    if (!c)
        return;
    cudaSetDevice(c->dev);
    if (c->stream)
        cudaStreamSynchronize(c->stream);
    release_retired(c);
#ifdef DL_HAVE_CUDNN
    rnn_fini(c);
#endif
    if (c->blas)
        cublasDestroy(c->blas);
    pool_fini(&c->pl);
    for (int i = 0; i < 2; i++) {
        if (c->stage[i])
            cudaFreeHost(c->stage[i]);
        if (c->stage_ev[i])
            cudaEventDestroy(c->stage_ev[i]);
    }
    if (c->host)
        cudaFreeHost(c->host);
    if (c->stream)
        cudaStreamDestroy(c->stream);
    cudaGetLastError();
    free(c);
}

/* Everything but the device check; fails with the first error. */
dl_status ctx_setup(cuda_ctx *c, dl_err *err)
{
    cudaError_t e;
#define SETUP(call, what)                                                        \
    do {                                                                         \
        if ((e = (call)) != cudaSuccess) {                                       \
            cudaGetLastError();                                                  \
            return dl_err_set(err, e == cudaErrorMemoryAllocation ? DL_ERR_NOMEM \
                                                                  : DL_ERR_BACKEND, \
                              "cuda:%d: %s: %s", c->dev, what, cudaGetErrorString(e)); \
        }                                                                        \
    } while (0)
    SETUP(cudaSetDevice(c->dev), "cudaSetDevice");
    SETUP(cudaStreamCreateWithFlags(&c->stream, cudaStreamNonBlocking), "stream");
    for (int i = 0; i < 2; i++) {
        SETUP(cudaHostAlloc(&c->stage[i], STAGE_BYTES, cudaHostAllocDefault), "pinned staging");
        SETUP(cudaEventCreateWithFlags(&c->stage_ev[i], cudaEventDisableTiming), "event");
    }
    SETUP(cudaHostAlloc((void **)&c->host, sizeof(host_area), cudaHostAllocDefault),
          "pinned results");
    SETUP(pool_alloc(&c->pl, 256, &c->dev_res), "result buffer");
    SETUP(pool_alloc(&c->pl, BLAS_WS_BYTES, &c->blas_ws), "cuBLAS workspace");
#undef SETUP
    cublasStatus_t bs = cublasCreate(&c->blas);
    if (bs == CUBLAS_STATUS_SUCCESS)
        bs = cublasSetStream(c->blas, c->stream);
    /* Our own workspace: cuBLAS then never allocates, even inside a graph. */
    if (bs == CUBLAS_STATUS_SUCCESS)
        bs = cublasSetWorkspace(c->blas, c->blas_ws, BLAS_WS_BYTES);
    /* No atomics: cuBLAS then picks one algorithm for a shape, the same on
     * every call, and gives the same bits for it. The batch-invariant
     * forward (dl_model_set_batch_invariant) rests on that: it runs
     * convolutions a sample at a time, one shape whatever the batch (its
     * dense layers take k_gemm_rows). */
    if (bs == CUBLAS_STATUS_SUCCESS)
        bs = cublasSetAtomicsMode(c->blas, CUBLAS_ATOMICS_NOT_ALLOWED);
    if (bs != CUBLAS_STATUS_SUCCESS)
        return dl_err_set(err, bs == CUBLAS_STATUS_ALLOC_FAILED ? DL_ERR_NOMEM : DL_ERR_BACKEND,
                          "cuda:%d: cuBLAS: %s", c->dev, cublasGetStatusString(bs));
    return DL_OK;
}

/* ---- the module's table ---------------------------------------------------- */

dl_status mod_backend_new(int device, bool tf32, dl_backend **out, dl_err *err)
{
    *out = nullptr;
    int n = 0;
    cudaError_t e = cudaGetDeviceCount(&n);
    if (e != cudaSuccess || n == 0) {
        cudaGetLastError();
        return dl_err_set(err, DL_ERR_UNAVAILABLE, "no CUDA device (%s)",
                          e != cudaSuccess ? cudaGetErrorString(e) : "the driver lists none");
    }
    if (device < 0)
        device = local_rank() % n;
    else if (device >= n)
        return dl_err_set(err, DL_ERR_INVALID, "cuda:%d: this machine has %d CUDA device%s",
                          device, n, n > 1 ? "s" : "");
    int major = 0, minor = 0, sms = 0;
    cudaDeviceGetAttribute(&major, cudaDevAttrComputeCapabilityMajor, device);
    cudaDeviceGetAttribute(&minor, cudaDevAttrComputeCapabilityMinor, device);
    cudaDeviceGetAttribute(&sms, cudaDevAttrMultiProcessorCount, device);
    if (major < 9)
        return dl_err_set(err, DL_ERR_UNAVAILABLE,
                          "cuda:%d is sm_%d%d: this build has code for sm_90 and newer only",
                          device, major, minor);

    cuda_ctx *c = (cuda_ctx *)calloc(1, sizeof(*c));
    dl_backend *be = (dl_backend *)calloc(1, sizeof(*be));
    if (!c || !be || !pool_init(&c->pl)) {
        if (c && c->pl.live)
            pool_fini(&c->pl);
        free(c);
        free(be);
        return dl_err_set(err, DL_ERR_NOMEM, "cuda backend");
    }
    c->dev = device;
    c->tf32 = tf32;
    dl_status st = ctx_setup(c, err);
    if (st != DL_OK) {
        ctx_destroy(c);
        free(be);
        return st;
    }
    cudaDeviceProp prop;
    if (cudaGetDeviceProperties(&prop, device) == cudaSuccess)
        snprintf(c->name, sizeof(c->name), "%s", prop.name);
    size_t mfree = 0, mtotal = 0;
    cudaMemGetInfo(&mfree, &mtotal);
    int blas_version = 0;
    cublasGetVersion(c->blas, &blas_version);
    char dnn[32] = "";
#ifdef DL_HAVE_CUDNN
    snprintf(dnn, sizeof(dnn), ", cuDNN %zu", cudnnGetVersion());
#endif
    DL_LOG(DL_LOG_INFO, "cuda", "cuda:%d: %s, sm_%d%d, %d SMs, %.1f GiB; cuBLAS %d%s; %s GEMMs",
           device, c->name, major, minor, sms, (double)mtotal / (1 << 30), blas_version, dnn,
           c->tf32 ? "TF32" : "FP32");
    be->ops = &cuda_ops;
    be->ctx = c;
    be->device = device;
    be->threads = 1;
    be->chunk_floats = 32 << 20;   /* 128 MB of im2col: few launches per batch */
    be->conv_dilation = false;     /* im2col_kernel steps the window by one */
    *out = be;
    return DL_OK;
}

void mod_backend_destroy(dl_backend *be)
{
    ctx_destroy(ctx_of(be));
    free(be);
}

dl_status mod_sync(dl_backend *be, dl_err *err)
{
    cuda_ctx *c = ctx_of(be);
    bind(c);
    CUDA_CHECK(c, cudaStreamSynchronize(c->stream), "sync");
    return c->latched ? take_latched(c, err) : DL_OK;
}

dl_status mod_memory(dl_backend *be, size_t *used, size_t *total)
{
    *used = *total = 0;
    cuda_ctx *c = ctx_of(be);
    pthread_mutex_lock(&c->pl.mu);
    *used = c->pl.in_use + c->pl.cached;
    pthread_mutex_unlock(&c->pl.mu);
    bind(c);
    size_t mfree = 0;
    if (cudaMemGetInfo(&mfree, total) != cudaSuccess) {
        cudaGetLastError();
        *total = 0;
    }
    return DL_OK;
}

void *mod_stream(dl_backend *be) { return (void *)ctx_of(be)->stream; }

}  // namespace

/* ---- graphs ------------------------------------------------------------------ */

struct dl_graph {
    cuda_ctx       *c;
    cudaGraph_t     graph;
    cudaGraphExec_t exec;
};

namespace {

dl_status mod_graph_begin(dl_backend *be, dl_err *err)
{
    cuda_ctx *c = ctx_of(be);
    if (c->latched)
        return take_latched(c, err);
    if (c->capturing)
        return dl_err_set(err, DL_ERR_INVALID, "cuda:%d: already recording a graph", c->dev);
    bind(c);
    /* Relaxed: a cudaMalloc on a pool miss is allowed while recording
     * (internal buffers it replaces wait in the retired list). */
    if (!CUDA_CHECK(c, cudaStreamBeginCapture(c->stream, cudaStreamCaptureModeRelaxed),
                    "graph capture"))
        return take_latched(c, err);
    c->capturing = true;
    return DL_OK;
}

dl_status mod_graph_end(dl_backend *be, dl_graph **out, dl_err *err)
{
    *out = nullptr;
    if (!ctx_of(be)->capturing)
        return dl_err_set(err, DL_ERR_INVALID, "no CUDA graph is being recorded");
    cuda_ctx *c = ctx_of(be);
    bind(c);
    cudaGraph_t graph = nullptr;
    cudaGraphExec_t exec = nullptr;
    bool ok = CUDA_CHECK(c, cudaStreamEndCapture(c->stream, &graph), "graph capture");
    c->capturing = false;
    if (ok && c->latched == DL_OK)
        ok = CUDA_CHECK(c, cudaGraphInstantiate(&exec, graph, 0), "graph instantiate");
    dl_graph *g = ok && c->latched == DL_OK
                           ? (dl_graph *)calloc(1, sizeof(*g)) : nullptr;
    if (!g) {
        if (exec)
            cudaGraphExecDestroy(exec);
        if (graph)
            cudaGraphDestroy(graph);
        if (c->latched)
            return take_latched(c, err);
        return dl_err_set(err, DL_ERR_NOMEM, "graph");
    }
    g->c = c;
    g->graph = graph;
    g->exec = exec;
    c->graphs++;
    *out = g;
    return DL_OK;
}

dl_status mod_graph_launch(dl_backend *be, dl_graph *g, dl_err *err)
{
    (void)be;
    cuda_ctx *c = g->c;
    if (c->latched)
        return take_latched(c, err);
    bind(c);
    return CUDA_CHECK(c, cudaGraphLaunch(g->exec, c->stream), "graph launch")
               ? DL_OK : take_latched(c, err);
}

void mod_graph_free(dl_backend *be, dl_graph *g)
{
    (void)be;
    cuda_ctx *c = g->c;
    bind(c);
    cudaGraphExecDestroy(g->exec);
    cudaGraphDestroy(g->graph);
    if (--c->graphs == 0)
        release_retired(c);
    free(g);
}

const dl_cuda_module cuda_module = {
    .abi         = DL_CUDA_MODULE_ABI,
    .ops_size    = sizeof(dl_backend_ops),
    .backend_new = mod_backend_new,
};

}  // namespace

dl_cuda_host cuda_host;

extern "C" __attribute__((visibility("default")))
const dl_cuda_module *dl_cuda_module_entry(const dl_cuda_host *host)
{
    cuda_host = *host;
    return &cuda_module;
}
