"""The two-sided Mann-Whitney U test of two samples, on numpy and scipy.special alone.

Used for the pooled-frame p-value that compare shows for information (``frame_p_value``). The test
is written here, not taken from ``scipy.stats``, because importing ``scipy.stats`` costs about a
second of CPU in every ``compare``, ``ab``, ``report`` and ``bisect`` process, and the test is
small:

* U of the first sample is its rank sum (ties get their average rank) minus ``m (m + 1) / 2``; the
  statistic is the larger of U and ``m n - U``, and the p-value twice its upper tail, at most 1;
* **exact** (no ties, both samples of at most :data:`EXACT_MAX` values): the upper tail of U's null
  distribution, built by the recurrence ``P(m, n; u) = m / (m + n) P(m - 1, n; u - n) + n / (m + n)
  P(m, n - 1; u)`` (the largest value of the pooled sample is in the first sample or in the second),
  every step a convex combination, so tail probabilities keep their relative precision;
* **asymptotic** (otherwise): the normal approximation with the tie-corrected variance
  ``m n / 12 ((N + 1) - sum(t^3 - t) / (N (N - 1)))`` and a continuity correction of 1/2.

These are the textbook definitions that ``scipy.stats.mannwhitneyu`` also follows (with
``method="exact"`` or ``"asymptotic"``); tests/test_ranks.py checks that the two agree.
"""

from __future__ import annotations

import functools
import math

import numpy as np
from scipy.special import ndtr

#: Both samples at most this long and no ties: the exact null distribution; otherwise the normal
#: one.
EXACT_MAX = 50


def average_ranks(values: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """(ranks 1..N with ties given their average rank, the size of every group of equal values)."""
    _, inverse, counts = np.unique(values, return_inverse=True, return_counts=True)
    below = np.cumsum(counts) - counts  # values smaller than each distinct value
    return (below + (counts + 1) / 2.0)[inverse.reshape(-1)], counts


@functools.lru_cache(maxsize=16)
def u_tail_exact(m: int, n: int) -> np.ndarray:
    """``P(U >= u)`` for u = 0 .. m n, U the Mann-Whitney statistic of samples of m and n tie-free
    values (kept for the last few shapes, read-only: every scene of a comparison usually has the
    same)."""
    # rows[j]: the distribution of U for (i, j) values, i the current row; row i = 0: U = 0 for any
    # j
    rows = [np.ones(1) for _ in range(n + 1)]
    for i in range(1, m + 1):
        new = [np.ones(1)]  # (i, 0): U = 0
        for j in range(1, n + 1):
            pmf = np.zeros(i * j + 1)
            # the largest value is in the first sample (it is above all j of the second): U grows by
            # j
            last_first = rows[j]  # (i - 1, j)
            pmf[j : j + last_first.size] += (i / (i + j)) * last_first
            # in the second: (i, j - 1), U as it was
            pmf[: new[j - 1].size] += (j / (i + j)) * new[j - 1]
            new.append(pmf)
        rows = new
    pmf = rows[n]
    tail = np.cumsum(pmf[::-1])[::-1]
    tail.flags.writeable = False  # shared by every caller through the cache
    return tail


def mann_whitney_p(x: np.ndarray, y: np.ndarray) -> float:
    """Two-sided Mann-Whitney U p-value of samples ``x`` and ``y`` (1.0 when it is undefined)."""
    x = np.asarray(x, dtype=np.float64).reshape(-1)
    y = np.asarray(y, dtype=np.float64).reshape(-1)
    m, n = x.size, y.size
    if m == 0 or n == 0:
        return 1.0
    ranks, ties = average_ranks(np.concatenate([x, y]))
    u1 = float(ranks[:m].sum()) - m * (m + 1) / 2.0
    u = max(u1, m * n - u1)
    if ties.max() == 1 and m <= EXACT_MAX and n <= EXACT_MAX:
        p = 2.0 * float(u_tail_exact(m, n)[int(round(u))])
    else:
        total = m + n
        tie_term = (
            float(np.sum(ties.astype(np.float64) ** 3 - ties)) / (total * (total - 1))
            if total > 1
            else 0.0
        )
        var = m * n / 12.0 * ((total + 1) - tie_term)
        if var <= 0:  # every value the same: no evidence either way
            return 1.0
        p = 2.0 * float(ndtr(-(u - m * n / 2.0 - 0.5) / math.sqrt(var)))
    return min(1.0, max(0.0, p)) if math.isfinite(p) else 1.0


__all__ = ["EXACT_MAX", "average_ranks", "mann_whitney_p", "u_tail_exact"]
