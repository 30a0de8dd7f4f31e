"""The two-sided Mann-Whitney U test (compare's informational ``frame_p_value``), on numpy and
scipy.special alone: importing ``scipy.stats`` costs about a second of CPU in every process.

Exact null distribution without ties for small samples (a recurrence of convex combinations, so
tails keep their relative precision), else the tie-corrected normal approximation with continuity
correction; tests/test_ranks.py checks agreement with ``scipy.stats.mannwhitneyu``."""

from __future__ import annotations

import functools
import math

import numpy as np
from scipy.special import ndtr

#: Both samples at most this long and no ties: the exact null distribution.
EXACT_MAX = 50


def average_ranks(values: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """(ranks 1..N, ties given their average rank; the size of every group of equal values)."""
    _, inverse, counts = np.unique(values, return_inverse=True, return_counts=True)
    below = np.cumsum(counts) - counts
    return (below + (counts + 1) / 2.0)[inverse.reshape(-1)], counts


@functools.lru_cache(maxsize=16)
def u_tail_exact(m: int, n: int) -> np.ndarray:
    """``P(U >= u)`` for u = 0 .. m n without ties; cached read-only, as a comparison's scenes
    usually share one shape."""
    # rows[j]: the distribution of U for (i, j) values, i the current row
    rows = [np.ones(1) for _ in range(n + 1)]
    for i in range(1, m + 1):
        new = [np.ones(1)]
        for j in range(1, n + 1):
            pmf = np.zeros(i * j + 1)
            # the largest value is in the first sample: U grows by j
            last_first = rows[j]  # (i - 1, j)
            pmf[j : j + last_first.size] += (i / (i + j)) * last_first
            # or in the second: U as it was
            pmf[: new[j - 1].size] += (j / (i + j)) * new[j - 1]
            new.append(pmf)
        rows = new
    pmf = rows[n]
    tail = np.cumsum(pmf[::-1])[::-1]
    tail.flags.writeable = False  # shared by every caller through the cache
    return tail


def mann_whitney_p(x: np.ndarray, y: np.ndarray) -> float:
    """Two-sided p-value of ``x`` against ``y`` (1.0 when undefined)."""
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
