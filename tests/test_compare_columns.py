"""compare's table shows one statistic a row: the change is the ratio of the levels beside it."""

from __future__ import annotations

import csv
import io

import numpy as np
import pytest

from katra3d.harness.cli._compare import print_comparison
from katra_trace.analysis.decide import compare_runs


def _frames(rng: np.random.Generator, fast_ms: float, slow_ms: float) -> np.ndarray:
    """300 frames (ns): a quarter near ``fast_ms``, the rest near ``slow_ms``, so that the 10th
    percentile and the median move by different amounts."""
    ms = np.concatenate([rng.normal(fast_ms, 0.01, 75), rng.normal(slow_ms, 0.05, 225)])
    return rng.permutation(ms * 1e6)


@pytest.mark.parametrize("stat", ["median", "p10"])
@pytest.mark.parametrize("runs", [1, 2])
def test_the_change_of_too_few_runs_is_the_ratio_of_the_levels_shown(
    stat: str, runs: int, capsys: pytest.CaptureFixture[str]
) -> None:
    rng = np.random.default_rng(3)
    base = {"s": [_frames(rng, 1.0, 2.0) for _ in range(runs)]}
    new = {"s": [_frames(rng, 1.5, 2.2) for _ in range(runs)]}  # p10 +50 %, median +10 %
    result = compare_runs(base, new, metric="wall", value_unit="ms", run_stat=stat)
    (s,) = result.scenes
    assert s.unit == "frames" and s.verdict == "inconclusive"
    assert s.ratio == pytest.approx(s.level_new / s.level_base)
    if stat == "p10":
        assert s.ratio > 1.4 and s.frame_ratio < 1.2  # two statistics, two changes
    print_comparison(result, "csv", "base", "new")
    header, row = list(csv.reader(io.StringIO(capsys.readouterr().out)))
    cells = dict(zip(header, row, strict=True))
    assert f"change ({stat})" in cells and stat in cells and "frame medians: change, p" in cells
    assert cells[f"change ({stat})"] == f"{(s.level_new / s.level_base - 1) * 100:+.1f}%"
