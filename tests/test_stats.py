"""katra_trace.analysis.stats against hand-computed values on small arrays (no GL)."""

from __future__ import annotations

import math

import numpy as np
import pytest

from katra_trace import Clock, Flag, Kind
from katra_trace.analysis.stats import (
    FrameStats,
    events_stats,
    frame_stats,
    low_fps_average,
    low_fps_integral,
    moving_median,
    stutter_pct,
)
from katra_trace.schema import EVENT_DTYPE

MS = 1_000_000  # ns per ms


def test_basic_stats_hand_computed() -> None:
    d = np.array([10, 12, 14, 16, 48]) * MS
    s = frame_stats(d)
    assert s.n == 5
    assert s.total_ms == pytest.approx(100.0)
    assert s.mean_ms == pytest.approx(20.0)
    assert s.median_ms == pytest.approx(14.0)
    assert s.min_ms == pytest.approx(10.0) and s.max_ms == pytest.approx(48.0)
    # deviations from 20: -10 -8 -6 -4 28 -> sum sq = 100+64+36+16+784 = 1000; /4 = 250
    assert s.stdev_ms == pytest.approx(math.sqrt(250.0))
    assert s.cv == pytest.approx(math.sqrt(250.0) / 20.0)
    # |d - 14| = 4 2 0 2 34 -> median 2
    assert s.mad_ms == pytest.approx(2.0)
    # linear interpolation: p90 at rank 3.6 -> 16 + 0.6*32 = 35.2
    assert s.p90_ms == pytest.approx(35.2)
    assert s.p99_ms == pytest.approx(16 + 0.96 * 32)
    # time-weighted: 5 frames in 100 ms = 50 fps (not the mean of per-frame rates)
    assert s.fps_avg == pytest.approx(50.0)


def test_one_pct_low_definitions_differ_as_documented() -> None:
    # 200 frames: one of 50 ms, one of 20 ms, 198 of 10 ms -> total 2050 ms
    d = np.array([10.0] * 99 + [50.0] + [10.0] * 99 + [20.0]) * MS
    # average of the slowest 1 %: ceil(2) = 2 frames, 50 + 20 ms -> 2 / 0.070 s
    assert low_fps_average(d, 0.01) == pytest.approx(2 / 0.070)
    # integral: 1 % of 2050 ms = 20.5 ms; the 50 ms frame alone reaches it -> 20 fps
    assert low_fps_integral(d, 0.01) == pytest.approx(20.0)
    # 0.1 %: k = ceil(0.2) = 1 frame -> 50 ms -> 20 fps; integral 2.05 ms -> 50 ms -> 20 fps
    assert low_fps_average(d, 0.001) == pytest.approx(20.0)
    assert low_fps_integral(d, 0.001) == pytest.approx(20.0)
    s = frame_stats(d)
    assert s.fps_low_1pct == pytest.approx(2 / 0.070)
    assert s.fps_low_1pct_integral == pytest.approx(20.0)


def test_integral_low_reaches_past_the_slowest_frame() -> None:
    # 100 frames: 3 x 12 ms, 97 x 10 ms -> total 1006 ms, 1 % = 10.06 ms
    d = np.array([12.0] * 3 + [10.0] * 97) * MS
    # the first 12 ms frame already exceeds 10.06 ms -> 1000/12 fps
    assert low_fps_integral(d, 0.01) == pytest.approx(1000 / 12)
    # 5 % of 1006 = 50.3 ms: 12+12+12 = 36 < 50.3, +10 = 46 < 50.3, +10 = 56 -> a 10 ms frame
    assert low_fps_integral(d, 0.05) == pytest.approx(100.0)
    # average of the slowest 5 %: 5 frames = 36 + 20 ms -> 5 / 0.056 s
    assert low_fps_average(d, 0.05) == pytest.approx(5 / 0.056)


def test_stutter_counts_time_in_spikes_only() -> None:
    base = np.full(41, 10.0 * MS)
    spiky = base.copy()
    spiky[20] = 30.0 * MS  # > 2.5 x 10 ms moving median
    assert stutter_pct(spiky) == pytest.approx(100 * 30 / (40 * 10 + 30))
    mild = base.copy()
    mild[20] = 24.0 * MS  # < 2.5 x
    assert stutter_pct(mild) == 0.0
    # a sustained step is a new level, not stutter
    step = np.concatenate([np.full(40, 10.0), np.full(40, 30.0)]) * MS
    assert stutter_pct(step) == 0.0
    assert frame_stats(spiky).stutter_pct == pytest.approx(stutter_pct(spiky))


def test_moving_median_truncates_at_ends() -> None:
    d = np.array([1.0, 2.0, 100.0, 4.0, 5.0])
    assert moving_median(d, 3).tolist() == [1.5, 2.0, 4.0, 5.0, 4.5]
    with pytest.raises(ValueError):
        moving_median(d, 4)


def test_single_frame_and_empty() -> None:
    s = frame_stats(np.array([20 * MS]))
    assert s.stdev_ms == 0.0 and s.fps_avg == pytest.approx(50.0)
    with pytest.raises(ValueError):
        frame_stats(np.array([]))


def test_as_dict_unit_keys_and_non_finite() -> None:
    d = frame_stats(np.array([0, 0, 0])).as_dict()
    assert d["fps_avg"] is None  # zero-length spans have no finite rate
    keys = set(frame_stats(np.array([MS, 2 * MS])).as_dict())
    assert {
        "n",
        "median_ms",
        "p99_ms",
        "fps_avg",
        "fps_low_1pct",
        "fps_low_1pct_integral",
        "fps_low_0_1pct",
        "stutter_pct",
        "cv",
        "mad_ms",
    } <= keys
    assert keys == {f.name for f in FrameStats.__dataclass_fields__.values()}


def _ev(
    kind: int,
    clock: int,
    scene: int,
    name: int,
    frame: int,
    dur_ms: float,
    flags: int = 0,
    depth: int = 0,
) -> tuple:
    return (kind, clock, flags, depth, scene, name, frame, frame * 100 * MS, int(dur_ms * MS), 0.0)


def test_events_stats_excludes_warmup_setup_and_markers() -> None:
    strings = ["", "fill", "frame", "draw", "setup"]
    rows = [
        _ev(Kind.MARKER, Clock.WALL, 1, 4, 0, 500.0, flags=Flag.SETUP),
        _ev(Kind.FRAME, Clock.WALL, 1, 2, 0, 900.0, flags=Flag.WARMUP),
        _ev(Kind.ZONE, Clock.WALL, 1, 3, 0, 800.0, flags=Flag.WARMUP, depth=1),
    ]
    # GPU frames appended out of order: stats must sort by frame index
    for i, dur in [(3, 30.0), (1, 10.0), (2, 20.0)]:
        rows.append(_ev(Kind.FRAME, Clock.WALL, 1, 2, i, dur))
        rows.append(_ev(Kind.FRAME, Clock.CPU, 1, 2, i, dur / 10))
        rows.append(_ev(Kind.ZONE, Clock.WALL, 1, 3, i, dur / 2, depth=1))
    ev = np.array(rows, dtype=EVENT_DTYPE)
    fill = events_stats(ev, strings).scenes["fill"]
    assert set(fill.metrics) == {"wall", "cpu"}
    wall = fill.metrics["wall"]
    assert isinstance(wall, FrameStats)
    assert wall.n == 3 and wall.median_ms == pytest.approx(20.0)
    assert wall.max_ms == pytest.approx(30.0)  # the 900 ms warmup frame is excluded
    assert fill.as_dict()["metrics"]["cpu"]["mean_ms"] == pytest.approx(2.0)
    assert fill.zones["draw"]["wall"].n == 3
    assert fill.as_dict()["zones"]["draw"]["wall"]["median_ms"] == pytest.approx(10.0)
    assert "setup" not in fill.zones
    assert events_stats(ev, strings, zones=False).scenes["fill"].zones == {}


from hypothesis import given, settings  # noqa: E402
from hypothesis import strategies as st  # noqa: E402


@settings(max_examples=60, deadline=None)
@given(st.lists(st.integers(min_value=1, max_value=10**9), min_size=1, max_size=400))
def test_invariants_hold_for_any_positive_durations(durs: list[int]) -> None:
    s = frame_stats(np.array(durs, dtype=np.float64))
    slowest_fps = 1000.0 / s.max_ms
    tol = 1 + 1e-9
    assert s.min_ms <= s.median_ms <= s.max_ms
    assert s.p90_ms <= s.p95_ms * tol and s.p95_ms <= s.p99_ms * tol and s.p99_ms <= s.max_ms * tol
    assert slowest_fps <= s.fps_low_0_1pct * tol <= s.fps_low_1pct * tol**2 <= s.fps_avg * tol**3
    assert slowest_fps <= s.fps_low_0_1pct_integral * tol <= s.fps_low_1pct_integral * tol**2
    assert 0.0 <= s.stutter_pct <= 100.0
    assert s.mad_ms >= 0 and s.stdev_ms >= 0
