"""Two-sided Mann-Whitney U (``frame_p_value``) without ``scipy.stats`` (a second to import): exact
for small untied samples (convex combinations keep tails precise), else tie-corrected normal."""

from __future__ import annotations

import functools
import math

import numpy as np
from scipy.special import ndtr

EXACT_MAX = 50


def average_ranks(values: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """(ranks 1..N with ties averaged, size of each group of equal values)."""
    _, inverse, counts = np.unique(values, return_inverse=True, return_counts=True)
    below = np.cumsum(counts) - counts
    return (below + (counts + 1) / 2.0)[inverse.reshape(-1)], counts


@functools.lru_cache(maxsize=16)
def u_tail_exact(m: int, n: int) -> np.ndarray:
    """``P(U >= u)`` for u = 0 .. m n without ties; cached (scenes usually share one shape)."""
    # rows[j]: U's distribution for (i, j) values
    rows = [np.ones(1) for _ in range(n + 1)]
    for i in range(1, m + 1):
        new = [np.ones(1)]
        for j in range(1, n + 1):
            pmf = np.zeros(i * j + 1)
            # largest value in the first sample: U grows by j; else U as it was
            last_first = rows[j]
            pmf[j : j + last_first.size] += (i / (i + j)) * last_first
            pmf[: new[j - 1].size] += (j / (i + j)) * new[j - 1]
            new.append(pmf)
        rows = new
    pmf = rows[n]
    tail = np.cumsum(pmf[::-1])[::-1]
    tail.flags.writeable = False
    return tail


def mann_whitney_p(x: np.ndarray, y: np.ndarray) -> float:
    """1.0 when undefined."""
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
        if var <= 0:
            return 1.0
        p = 2.0 * float(ndtr(-(u - m * n / 2.0 - 0.5) / math.sqrt(var)))
    return min(1.0, max(0.0, p)) if math.isfinite(p) else 1.0


__all__ = ["EXACT_MAX", "average_ranks", "mann_whitney_p", "u_tail_exact"]
