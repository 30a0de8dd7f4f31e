"""Slow frames on traces no capture writes but ``validate`` passes: gc markers by the thousand that
overlap every frame, or with a generation that is not a number, and zones each with its own name.
The work is sorting (markers + frames, zones), never markers x frames or zones x slow frames."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

from katra_trace.analysis import slow
from katra_trace.analysis.stats import frame_stats
from katra_trace.schema import EVENT_DTYPE, Clock, Kind
from tests.cli_helpers import katra_main
from tests.extreme_traces import WRITERS


def _brute_gc(
    start: np.ndarray, end: np.ndarray, marks: np.ndarray
) -> tuple[list[float], list[int]]:
    ns, gen = [], []
    for s, e in zip(start.tolist(), end.tolist(), strict=True):
        total, top = 0.0, -1
        for m in marks:
            a, b = float(m["start_ns"]), float(m["start_ns"]) + float(m["dur_ns"])
            over = min(e, b) - max(s, a)
            if over > 0:
                total += over
                v = float(m["value"])
                top = max(top, int(v) if np.isfinite(v) and 0 <= v <= 2**31 else -1)
        ns.append(total)
        gen.append(top)
    return ns, gen


@pytest.mark.parametrize("seed", range(6))
def test_gc_time_and_generation_agree_with_every_pair(seed: int) -> None:
    rng = np.random.default_rng(seed)
    starts = np.cumsum(rng.integers(1_000, 5_000, 60)).astype(np.float64)
    ends = starts + rng.integers(500, 1_000, 60)
    marks = np.zeros(40, dtype=EVENT_DTYPE)
    marks["start_ns"] = rng.integers(0, int(ends[-1]), 40)
    marks["dur_ns"] = rng.integers(0, 20_000, 40)
    marks["value"] = rng.choice([0.0, 1.0, 2.0, np.nan, np.inf, 1e300], 40)
    ns, gen = _brute_gc(starts, ends, marks)
    assert np.allclose(slow._gc_time(starts, ends, marks), ns)
    assert slow._generations(starts, ends, marks) == gen


@pytest.mark.parametrize("name", ["gc-marker-nan", "gc-marker-inf", "gc-marker-huge"])
def test_a_generation_that_is_not_a_number_is_one_unknown(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], name: str
) -> None:
    trace = tmp_path / f"{name}.katra"
    WRITERS[name](trace)
    for argv in (
        ["stats", "--slow", str(trace)],
        ["report", str(trace), "-o", str(tmp_path / "r.html"), "--force"],
        ["export", str(trace), "--to", "perfetto", "-o", str(tmp_path / "p"), "--force"],
    ):
        code, out, err = katra_main(capsys, *argv)
        assert code == 0 and "Traceback" not in err, err
    code, out, _ = katra_main(capsys, "stats", "--slow", str(trace))
    assert "gc (generation -1)" in out


def test_the_top_zone_of_each_slow_frame_is_found_per_zone_not_per_pair() -> None:
    """Hundreds of zone names: each slow frame's cause is the zone that grew in it."""
    n, names = 3000, 500
    rows = []
    t = 0
    for i in range(n):
        z = 4_000_000 if i % 9 == 0 else 1_000_000
        rows.append((Kind.ZONE, Clock.WALL, 0, 1, 1, 3 + i % names, i, t, z, 0.0))
        rows.append((Kind.FRAME, Clock.WALL, 0, 0, 1, 2, i, t, z + 500_000, 0.0))
        t += z + 600_000
    strings = ["", "scene", "frame", *(f"z{i}" for i in range(names))]
    found = slow.slow_frames(np.array(rows, dtype=EVENT_DTYPE), strings)["scene"]
    assert [s.frame for s in found.slow] == list(range(0, n, 9))
    assert [(s.cause.kind, s.cause.name) for s in found.slow] == [
        (slow.ZONE, f"z{i % names}") for i in range(0, n, 9)
    ]


@pytest.mark.parametrize("ns", [0.0, 7.5, 16_600_000.0, 2.0**62])
def test_statistics_of_one_span_are_those_of_the_general_rule(ns: float) -> None:
    one = frame_stats(np.array([ns])).as_dict()
    two = frame_stats(np.array([ns, ns])).as_dict()  # the same series statistics, counted twice
    assert one.pop("n") == 1 and one.pop("total_ms") == ns / 1e6
    assert one == {k: v for k, v in two.items() if k not in ("n", "total_ms")}
