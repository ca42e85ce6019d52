/* crf.h (private to nn/): a linear-chain conditional random field over one
 * sample's tag scores, on the host: the negative log-likelihood of a tag
 * path with its gradients (forward-backward), and the best path (Viterbi).
 *
 * Shapes and layout, shared by every function here:
 *   emit   (T, C) row-major: emit[t * C + j] scores tag j at position t.
 *          Positions t < len are the sample; t >= len are padding, never read.
 *   trans  (C + 2, C) row-major, as PaddlePaddle's linear_chain_crf lays it
 *          out: row 0 start weights (tag j at position 0), row 1 end weights
 *          (tag j at position len - 1), row 2 + i the weight of tag i
 *          followed by tag j.
 * A path's score is start[y0] + sum_t emit[t][y_t] + sum_{t>0} w[y_{t-1}][y_t]
 * + end[y_{len-1}]. Sums run in double; inputs and gradients are float.
 *
 * Preconditions, which the caller guarantees and nothing here checks:
 *   1 <= len <= T and C >= 1; emit holds at least len * C floats, d_emit
 *   T * C, trans and d_trans (C + 2) * C, path len.
 *   Scores are finite, except that trans may hold -INFINITY to forbid a
 *   start, end or transition, so long as some path stays allowed (a NaN,
 *   +inf, or every path forbidden gives NaN or inf results, not an error).
 *   Tags are in [0, C): one outside reads out of bounds.
 *   work is at least crf_work_size(len, C) bytes, aligned for double (as
 *   malloc returns), and not shared with another call running at once.
 * Nothing allocates or keeps state: calls on distinct buffers are
 * thread-safe. */
#ifndef DL_NN_CRF_H
#define DL_NN_CRF_H

#include <stddef.h>
#include <stdint.h>

/* Bytes of scratch crf_nll and crf_viterbi need for a sample of len
 * positions and C tags: one buffer of this size serves either, and one
 * sized for T every len <= T. */
size_t crf_work_size(int64_t len, int64_t C);

/* The negative log-likelihood of the path tags[0..len): log Z (forward
 * algorithm, log-sum-exp) minus the path's score; >= 0 up to rounding,
 * unscaled, +inf for a path through a -inf weight. When d_emit is not
 * NULL, writes scale * d(nll)/d(emit) (the tag marginals minus the path's
 * one-hot) to its T * C floats, zeros at positions len..T-1. When d_trans
 * is not NULL, ADDS scale * d(nll)/d(trans) to its (C + 2) * C floats, so a
 * batch sums into one gradient. */
double crf_nll(const float *emit, int64_t T, int64_t len, int64_t C, const float *trans,
               const int32_t *tags, float scale, float *d_emit, float *d_trans, void *work);

/* The highest-scoring path into path[0..len) and, when score is not NULL,
 * its score. Among paths of exactly equal score (in double), the one with
 * the lowest last tag wins, then the lowest tag before it, and so on
 * (deterministic; with one best path that path). */
void crf_viterbi(const float *emit, int64_t len, int64_t C, const float *trans,
                 int32_t *path, double *score, void *work);

#endif
