/* gemm_thin.c: C = A B^T for the thin GEMMs of inference, a few rows of
 * A (the batch) against a dense layer's weights B (n, k), read where
 * they lie. OpenBLAS packs B into its own layout on every call unless it
 * has "small matrix" kernels for the CPU (its AVX-512 builds do): at a
 * batch of a few requests the packing costs more than the multiply
 * (fashion-mlp, batch 1, AVX2: 9k samples/s packed; docs/benchmarks.md,
 * "HTTP serving"). Here each output is a dot product over k, computed in
 * blocks of 3 x 4: twelve accumulators, the three rows of A and one of B
 * in the 16 AVX registers, seven loads for twelve FMAs; with AVX-512, in
 * blocks of 4 x 4 (fashion-mlp, batch 4, one thread, Zen 5: 150k -> 280k
 * samples/s). A block of B rows stays in L1 while the rows of A stream
 * past it from L2. */
#include "tensor/cpu/cpu.h"

#include <cblas.h>
#include <strings.h>

#if defined(__x86_64__) && (defined(__GNUC__) || defined(__clang__))
#include <immintrin.h>

#define MR 3
#define NR 4
#define TARGET __attribute__((target("avx2,fma")))

bool dl_gemm_thin_usable(void)
{
    return __builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma");
}

/* OpenBLAS's small-matrix kernels are its SkylakeX kernels' (which the
 * Cooperlake and SapphireRapids cores use too): other cores, AVX-512 ones
 * included that its CPU table does not know (OpenBLAS 0.3.21 runs AMD's
 * Zen 5 as Haswell), pack the weights on every call. */
bool dl_gemm_thin_preferred(void)
{
    static const char *const small[] = {"skylakex", "cooperlake", "sapphirerapids"};
    if (!dl_gemm_thin_usable())
        return false;
    const char *core = openblas_get_corename();
    for (size_t i = 0; core && i < sizeof(small) / sizeof(small[0]); i++)
        if (strcasecmp(core, small[i]) == 0)
            return false;
    return true;
}

TARGET static inline float hsum(__m256 v)
{
    __m128 s = _mm_add_ps(_mm256_castps256_ps128(v), _mm256_extractf128_ps(v, 1));
    s = _mm_add_ps(s, _mm_movehl_ps(s, s));
    s = _mm_add_ss(s, _mm_movehdup_ps(s));
    return _mm_cvtss_f32(s);
}

/* An mr x nr block of C (mr <= 3, nr <= 4, constants where it is inlined):
 * C[i, j] = dot(A row i, B row j) over k; the last k % 8 values through
 * the mask `tail`. */
TARGET static inline __attribute__((always_inline)) void
block(int mr, int nr, int64_t k, const float *a, int64_t lda, const float *b, int64_t ldb,
      float *c, int64_t ldc, __m256i tail)
{
    __m256 acc[MR][NR];
    for (int i = 0; i < mr; i++)
        for (int j = 0; j < nr; j++)
            acc[i][j] = _mm256_setzero_ps();
    int64_t p = 0;
    for (; p + 8 <= k; p += 8) {
        __m256 av[MR];
        for (int i = 0; i < mr; i++)
            av[i] = _mm256_loadu_ps(a + i * lda + p);
        for (int j = 0; j < nr; j++) {
            __m256 bv = _mm256_loadu_ps(b + j * ldb + p);
            for (int i = 0; i < mr; i++)
                acc[i][j] = _mm256_fmadd_ps(av[i], bv, acc[i][j]);
        }
    }
    if (p < k) {
        __m256 av[MR];
        for (int i = 0; i < mr; i++)
            av[i] = _mm256_maskload_ps(a + i * lda + p, tail);
        for (int j = 0; j < nr; j++) {
            __m256 bv = _mm256_maskload_ps(b + j * ldb + p, tail);
            for (int i = 0; i < mr; i++)
                acc[i][j] = _mm256_fmadd_ps(av[i], bv, acc[i][j]);
        }
    }
    for (int i = 0; i < mr; i++)
        for (int j = 0; j < nr; j++)
            c[i * ldc + j] = hsum(acc[i][j]);
}

TARGET void dl_gemm_thin_avx2(int64_t m, int64_t n, int64_t k, const float *a, int64_t lda,
                              const float *b, int64_t ldb, float *c, int64_t ldc)
{
    __m256i tail = _mm256_cmpgt_epi32(_mm256_set1_epi32((int)(k % 8)),
                                      _mm256_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7));
    for (int64_t j = 0; j < n; j += NR) {
        int nr = n - j < NR ? (int)(n - j) : NR;
        const float *bj = b + j * ldb;
        for (int64_t i = 0; i < m; i += MR) {
            int mr = m - i < MR ? (int)(m - i) : MR;
            const float *ai = a + i * lda;
            float *cij = c + i * ldc + j;
#define BLOCK(R, C) case (R) * 8 + (C): block(R, C, k, ai, lda, bj, ldb, cij, ldc, tail); break
            switch (mr * 8 + nr) {
            BLOCK(3, 4); BLOCK(3, 3); BLOCK(3, 2); BLOCK(3, 1);
            BLOCK(2, 4); BLOCK(2, 3); BLOCK(2, 2); BLOCK(2, 1);
            BLOCK(1, 4); BLOCK(1, 3); BLOCK(1, 2); BLOCK(1, 1);
            }
#undef BLOCK
        }
    }
}

/* The same with AVX-512 (32 registers of 16 floats): blocks of 4 x 4,
 * sixteen accumulators, four rows of A and one of B, eight loads for
 * sixteen FMAs; the last k % 16 values through a load mask. The 4 rows
 * fit the few requests of a batch under load in one pass over B. */
#define MR5 4
#define NR5 4
#define TARGET5 __attribute__((target("avx512f,fma")))

TARGET5 static inline __attribute__((always_inline)) void
block5(int mr, int nr, int64_t k, const float *a, int64_t lda, const float *b, int64_t ldb,
       float *c, int64_t ldc, __mmask16 tail)
{
    __m512 acc[MR5][NR5];
    for (int i = 0; i < mr; i++)
        for (int j = 0; j < nr; j++)
            acc[i][j] = _mm512_setzero_ps();
    int64_t p = 0;
    for (; p + 16 <= k; p += 16) {
        __m512 av[MR5];
        for (int i = 0; i < mr; i++)
            av[i] = _mm512_loadu_ps(a + i * lda + p);
        for (int j = 0; j < nr; j++) {
            __m512 bv = _mm512_loadu_ps(b + j * ldb + p);
            for (int i = 0; i < mr; i++)
                acc[i][j] = _mm512_fmadd_ps(av[i], bv, acc[i][j]);
        }
    }
    if (p < k) {
        __m512 av[MR5];
        for (int i = 0; i < mr; i++)
            av[i] = _mm512_maskz_loadu_ps(tail, a + i * lda + p);
        for (int j = 0; j < nr; j++) {
            __m512 bv = _mm512_maskz_loadu_ps(tail, b + j * ldb + p);
            for (int i = 0; i < mr; i++)
                acc[i][j] = _mm512_fmadd_ps(av[i], bv, acc[i][j]);
        }
    }
    for (int i = 0; i < mr; i++)
        for (int j = 0; j < nr; j++)
            c[i * ldc + j] = _mm512_reduce_add_ps(acc[i][j]);
}

TARGET5 static void dl_gemm_thin_avx512(int64_t m, int64_t n, int64_t k, const float *a, int64_t lda,
                                        const float *b, int64_t ldb, float *c, int64_t ldc)
{
    __mmask16 tail = (__mmask16)((1u << (k % 16)) - 1);
    for (int64_t j = 0; j < n; j += NR5) {
        int nr = n - j < NR5 ? (int)(n - j) : NR5;
        const float *bj = b + j * ldb;
        for (int64_t i = 0; i < m; i += MR5) {
            int mr = m - i < MR5 ? (int)(m - i) : MR5;
            const float *ai = a + i * lda;
            float *cij = c + i * ldc + j;
#define BLOCK(R, C) case (R) * 8 + (C): block5(R, C, k, ai, lda, bj, ldb, cij, ldc, tail); break
            switch (mr * 8 + nr) {
            BLOCK(4, 4); BLOCK(4, 3); BLOCK(4, 2); BLOCK(4, 1);
            BLOCK(3, 4); BLOCK(3, 3); BLOCK(3, 2); BLOCK(3, 1);
            BLOCK(2, 4); BLOCK(2, 3); BLOCK(2, 2); BLOCK(2, 1);
            BLOCK(1, 4); BLOCK(1, 3); BLOCK(1, 2); BLOCK(1, 1);
            }
#undef BLOCK
        }
    }
}

bool dl_gemm_thin_avx512_usable(void)
{
    return dl_gemm_thin_usable() && __builtin_cpu_supports("avx512f");
}

void dl_gemm_thin(int64_t m, int64_t n, int64_t k, const float *a, int64_t lda,
                  const float *b, int64_t ldb, float *c, int64_t ldc)
{
    if (dl_gemm_thin_avx512_usable())
        dl_gemm_thin_avx512(m, n, k, a, lda, b, ldb, c, ldc);
    else
        dl_gemm_thin_avx2(m, n, k, a, lda, b, ldb, c, ldc);
}

#else

bool dl_gemm_thin_usable(void)
{
    return false;
}

bool dl_gemm_thin_preferred(void)
{
    return false;
}

bool dl_gemm_thin_avx512_usable(void)
{
    return false;
}

void dl_gemm_thin(int64_t m, int64_t n, int64_t k, const float *a, int64_t lda,
                  const float *b, int64_t ldb, float *c, int64_t ldc)
{
    for (int64_t i = 0; i < m; i++)
        for (int64_t j = 0; j < n; j++) {
            float s = 0.0f;
            for (int64_t p = 0; p < k; p++)
                s += a[i * lda + p] * b[j * ldb + p];
            c[i * ldc + j] = s;
        }
}

void dl_gemm_thin_avx2(int64_t m, int64_t n, int64_t k, const float *a, int64_t lda,
                       const float *b, int64_t ldb, float *c, int64_t ldc)
{
    dl_gemm_thin(m, n, k, a, lda, b, ldb, c, ldc);
}

#endif
