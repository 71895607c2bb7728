"""Float32 tolerances for the tests, derived from the arithmetic rather than from what
one CPU printed: XLA picks other kernels (and so other summation orders) on another CPU
(AVX-512 or not), another batch shape or another device count.

A sum of n float32 terms, in any order, is within (n - 1) u sum|terms| of the exact sum
of the rounded terms (u = eps32 / 2; Higham, Accuracy and Stability of Numerical
Algorithms, 2002, eq. 4.4); a dot product or a convolution output with n products adds
u |term| per product, so it is within n u sum|products|. Rounding the terms themselves
costs u each. So `float32_sum_atol` = n eps32 sum|terms| bounds both

- one float32 sum against its exact (closed-form) value, and
- two float32 evaluations of the same sum against each other (two orders, two kernels),

in the worst case. Pairwise and vectorised sums do far better; the bound holds for any.

Where exact equality is the point (the same jitted program on the same inputs in the
same process, a resumed run against an uninterrupted one with the same shapes, integer
results), the tests compare bit for bit and say so instead.
"""

import numpy as np

EPS32 = float(np.finfo(np.float32).eps)  # 2**-23, the spacing of float32 at 1


def float32_sum_atol(n, abs_sum):
    """Worst-case difference between float32 evaluations of a sum (or dot product,
    convolution output) of `n` terms whose absolute values sum to `abs_sum` (a scalar
    or an array, one scale per output), or between one of them and the exact value."""
    return n * EPS32 * np.asarray(abs_sum, np.float64)


def assert_float32_sums_close(actual, desired, n, abs_sum):
    """Assert |actual - desired| <= float32_sum_atol(n, abs_sum) elementwise (`abs_sum`
    broadcasts: one scale per output, e.g. |w| conv |x| for a convolution)."""
    actual, desired = np.asarray(actual, np.float64), np.asarray(desired, np.float64)
    assert actual.shape == desired.shape, (actual.shape, desired.shape)
    bound = np.broadcast_to(float32_sum_atol(n, abs_sum), actual.shape)
    excess = np.abs(actual - desired) - bound
    if not np.all(excess <= 0):  # NaN fails too
        i = np.unravel_index(np.argmax(np.nan_to_num(excess, nan=np.inf)), excess.shape)
        raise AssertionError(
            f"{np.sum(~(excess <= 0))} of {excess.size} values differ by more than the "
            f"float32 bound of {n} terms; worst at {tuple(map(int, i))}: "
            f"{float(actual[i])!r} vs {float(desired[i])!r}, bound {float(bound[i]):.3g}")
