"""Sides captured in separate batches: compare tells from the capture start times that
the runs were not interleaved, says so, and its interval allows for the machine's drift between
batches; interleaved runs of the same traces get no allowance. The allowance and the default metric
come from ``python -m bench defaults``."""

from __future__ import annotations

import json
import math
from pathlib import Path

import numpy as np
import pytest

from katra_trace.analysis.defaults import BATCH_DRIFT_SD, SOFTWARE_TIME_DEFAULT, batch_drift_sd
from katra_trace.analysis.intervals import runs_needed, welch
from tests.test_compare_cli import write_run


def test_the_drift_widens_welch_and_no_run_count_outweighs_a_drift_as_wide_as_the_margin() -> None:
    lb, ln = np.log([10.0, 10.1, 9.9, 10.05]), np.log([10.6, 10.7, 10.5, 10.65])
    plain, drifted = welch(lb, ln), welch(lb, ln, drift_sd=0.05)
    assert drifted.estimate == plain.estimate and drifted.se == pytest.approx(
        math.hypot(plain.se, 0.05)
    )
    # the drift is a given variance (infinite degrees of freedom): Welch-Satterthwaite over the
    # total
    assert drifted.dof == pytest.approx(plain.dof * (drifted.se / plain.se) ** 4)
    assert runs_needed(0.02, 0.05, 0.01, 1, paired=False) is not None
    # more runs do not shrink it
    assert runs_needed(0.02, 0.05, 0.01, 1, paired=False, drift_sd=0.05) is None
    few = runs_needed(0.02, 0.2, 0.01, 1, paired=False)
    many = runs_needed(0.02, 0.2, 0.01, 1, paired=False, drift_sd=0.05)
    assert few is not None and many is not None and many >= few


def test_every_measured_method_has_an_allowance_and_the_default_is_one_of_them() -> None:
    assert SOFTWARE_TIME_DEFAULT in BATCH_DRIFT_SD and all(v > 0 for v in BATCH_DRIFT_SD.values())
    # not measured: the widest
    assert batch_drift_sd("gpu", "median") == max(BATCH_DRIFT_SD.values())


def _sides(tmp: Path, *, interleaved: bool, drift: float) -> tuple[Path, Path]:
    """Five runs a side of identical code, NEW's batch ``drift`` slower as a whole (the machine
    drifted); written in rounds (start times interleave) or as two batches (every BASE run first).
    """
    base, new = tmp / "base", tmp / "new"
    base.mkdir()
    new.mkdir()
    order = (
        [("b", i) for i in range(5)] + [("n", i) for i in range(5)]
        if not interleaved
        else [(side, i) for i in range(5) for side in ("b", "n")]
    )
    for side, i in order:
        folder = base if side == "b" else new
        write_run(
            folder / f"run-{i}.katra",
            10.0,
            seed=(100 if side == "b" else 200) + i,
            process=True,
            slow=None if side == "b" else {"fill": drift, "mesh": drift},
        )
    return base, new


@pytest.mark.parametrize("interleaved", [False, True])
def test_a_drift_between_batches_is_no_verdict_unless_the_runs_interleave(
    tmp_path: Path, katra_cli, interleaved: bool
) -> None:
    """A 6 % slower NEW batch of identical code: separate batches stay below a verdict (the default
    metric's drift allowance), and say why; the same change in interleaved runs is a regression."""
    base, new = _sides(tmp_path, interleaved=interleaved, drift=1.06)
    r = katra_cli("compare", str(base), str(new), "--format", "json")
    out = json.loads(r.stdout)
    assert (out["metric"], out["run_stat"]) == SOFTWARE_TIME_DEFAULT
    batches = [n for n in out["notes"] if "captured in separate batches" in n]
    verdicts = {s["verdict"] for s in out["scenes"].values()}
    if interleaved:
        assert r.returncode == 1 and verdicts == {"regression"} and not batches, r.stdout
        assert all(s["drift_allowance_pct"] is None for s in out["scenes"].values())
    else:
        assert r.returncode == 0 and verdicts == {"inconclusive"} and len(batches) == 1, r.stdout
        allowance = 100 * math.expm1(BATCH_DRIFT_SD[SOFTWARE_TIME_DEFAULT])
        for scene in out["scenes"].values():
            assert scene["drift_allowance_pct"] == pytest.approx(allowance)
            assert f"allowing +-{allowance:.1f}% drift between separate batches" in scene["reason"]


def test_counts_captured_apart_get_no_drift_note(tmp_path: Path, katra_cli) -> None:
    """Counts do not drift with the machine: two counted batches get neither the note nor an
    allowance.
    """
    from katra_trace import Clock
    from tests.test_history_store import make_trace

    for side, seed in (("base", 1), ("new", 2)):
        (tmp_path / side).mkdir()
        make_trace(
            tmp_path / side / "run.katra", {"fill": 2e6}, seed=seed, clock=Clock.INSTRUCTIONS
        )
    out = json.loads(
        katra_cli(
            "compare", str(tmp_path / "base"), str(tmp_path / "new"), "--format", "json"
        ).stdout
    )
    assert out["metric"] == "instructions" and out["metric_choice"] == "counts"
    assert not any("separate batches" in n for n in out["notes"])
    assert all(s["drift_allowance_pct"] is None for s in out["scenes"].values())
