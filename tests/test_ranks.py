"""The Mann-Whitney U test of katra_trace.analysis.ranks against scipy.stats'
on the same samples."""

from __future__ import annotations

import math
import warnings
import zlib

import numpy as np
import pytest
from scipy import stats as sps

from katra_trace.analysis.ranks import EXACT_MAX, average_ranks, mann_whitney_p, u_tail_exact


def _scipy_p(x: np.ndarray, y: np.ndarray) -> float:
    ties = np.unique(np.concatenate([x, y])).size < x.size + y.size
    method = "exact" if not ties and x.size <= EXACT_MAX and y.size <= EXACT_MAX else "asymptotic"
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        return float(sps.mannwhitneyu(x, y, alternative="two-sided", method=method).pvalue)


@pytest.mark.parametrize(
    "kind",
    ["shifted normal", "few distinct values", "exponential", "same distribution", "large samples"],
)
def test_p_values_agree_with_scipy(kind: str) -> None:
    rng = np.random.default_rng(zlib.crc32(kind.encode()))
    for _ in range(60):
        m, n = (int(v) for v in rng.integers(1, 61, size=2))
        if kind == "shifted normal":
            x, y = rng.normal(size=m), rng.normal(0.7, size=n)
        elif kind == "few distinct values":  # ties: the tie-corrected normal approximation
            x, y = (
                rng.integers(0, 4, size=m).astype(float),
                rng.integers(0, 5, size=n).astype(float),
            )
        elif kind == "exponential":
            x, y = rng.exponential(size=m), rng.exponential(1.5, size=n)
        elif kind == "same distribution":
            x, y = rng.normal(size=m), rng.normal(size=n)
        else:
            x, y = rng.normal(size=m * 10), rng.normal(0.1, size=n * 10)
        assert mann_whitney_p(x, y) == pytest.approx(_scipy_p(x, y), rel=1e-9, abs=1e-300)


def test_the_exact_tail_keeps_its_precision_far_out() -> None:
    # two samples of 50 that do not overlap: p = 2 / C(100, 50), about 2e-29
    x, y = np.arange(50.0), np.arange(50.0) + 100.0
    assert mann_whitney_p(x, y) == pytest.approx(2.0 / math.comb(100, 50), rel=1e-9)
    assert mann_whitney_p(x, y) == pytest.approx(_scipy_p(x, y), rel=1e-9)
    tail = u_tail_exact(3, 4)  # small enough to count by hand: 35 orderings, U = 0..12
    assert (
        tail[0] == 1.0 and tail[12] == pytest.approx(1 / 35) and tail[11] == pytest.approx(2 / 35)
    )


def test_average_ranks_and_undefined_cases() -> None:
    ranks, ties = average_ranks(np.array([3.0, 1.0, 3.0, 2.0]))
    assert ranks.tolist() == [3.5, 1.0, 3.5, 2.0] and sorted(ties.tolist()) == [1, 1, 2]
    assert mann_whitney_p(np.array([]), np.array([1.0, 2.0])) == 1.0
    assert mann_whitney_p(np.full(5, 2.0), np.full(7, 2.0)) == 1.0  # every value the same
    assert mann_whitney_p(np.array([1.0]), np.array([2.0])) == 1.0
