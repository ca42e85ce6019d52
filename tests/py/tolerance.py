#!/usr/bin/python3
"""tolerance.py: comparing answers that come from different configurations.

Batch-invariant inference ([batching] batch_invariant, --batch-invariant)
makes an answer the same bits whether its request ran alone, batched with
others or inside a larger request, within one configuration: the same
thread count and the same CPU engine. It does not make answers identical
across thread counts (`dlserve --predict` on every core against a daemon
that computes on the cores less one), across engines (DLSERVE_CPU_CONV,
DLSERVE_CPU_GEMM), between training-time evaluation and serving, or
between dlserve and another implementation (numpy, PyTorch): there a sum
taken in another order moves a value in its last bits. Checks that compare
such answers use this module:

    close(a, b)          |a - b| <= ABS + REL * |b|
    near_top(scores, k)  class k is the top class of scores, or short of it
                         by no more than the tolerance (a near tie, which
                         either configuration may break its own way)

ABS = 1e-5 and REL = 1e-4 are far above the float32 rounding of a softmax
(about 1e-7) and far below what a wrong model, input or layer gives.
"""

ABS, REL = 1e-5, 1e-4


def close(a, b):
    """a and b within the tolerance (b the reference)."""
    return abs(a - b) <= ABS + REL * abs(b)


def near_top(scores, k):
    """Class k's score is the highest, or within the tolerance of it."""
    top = max(scores)
    return scores[k] >= top - (ABS + REL * abs(top))
