"""The numbers behind the report's plots. Frame series keep warmup frames (shaded); the rest use
measured frames only, as ``stats`` does."""

from __future__ import annotations

import dataclasses
import weakref
from collections.abc import Callable, Sequence
from typing import Any, TypeVar, cast

import numpy as np

from katra_trace.analysis.stats import EXCLUDED_FLAGS, HeadedTrace, scene_labels, zone_frame_totals
from katra_trace.metrics import CLOCK_NAMES, CLOCK_PREFERENCE, clock_name, primary_clock_of, unit_of
from katra_trace.schema import Flag, Kind

#: Most points drawn per frame series (min and max of MAX_POINTS / 2 buckets).
MAX_POINTS = 4000
CDF_POINTS = 1000


def minmax_downsample(
    x: np.ndarray, y: np.ndarray, max_points: int = MAX_POINTS
) -> tuple[np.ndarray, np.ndarray]:
    """At most ``max_points`` of ``(x, y)``: each bucket's min and max, so spikes survive."""
    n = len(y)
    if n <= max_points:
        return x, y
    buckets = max(1, max_points // 2)
    size = -(-n // buckets)
    pad = buckets * size - n
    yy = np.concatenate([y.astype(np.float64), np.full(pad, np.nan)]).reshape(buckets, size)
    lo = np.nanargmin(np.where(np.isnan(yy), np.inf, yy), axis=1)
    hi = np.nanargmax(np.where(np.isnan(yy), -np.inf, yy), axis=1)
    base = np.arange(buckets) * size
    keep = np.unique(np.concatenate([base + lo, base + hi]))
    keep = keep[keep < n]
    return x[keep], y[keep]


def primary_clock(trace: HeadedTrace, available: Sequence[str]) -> str | None:
    """The clock a scene's series is drawn on, as ``stats`` and ``info`` choose it."""
    options = trace.header.capture_options
    return primary_clock_of(available, options.measure.mode, options.primary_clock)


def _scale(clock: str) -> float:
    return 1.0 if unit_of(clock) != "ms" else 1e-6


@dataclasses.dataclass(frozen=True)
class FrameSeries:
    frame: np.ndarray  #: downsampled, warmup included
    value: np.ndarray  #: ms or counts, downsampled
    warmup: tuple[int, int] | None  #: first and last warmup frame index
    measured: np.ndarray  #: not downsampled
    total_frames: int
    all_frame: np.ndarray
    all_value: np.ndarray


def frame_series(
    trace: HeadedTrace, scene_id: int, clock: str, max_points: int = MAX_POINTS
) -> FrameSeries:
    ev = trace.events
    cid = next((c for c, n in CLOCK_NAMES.items() if n == clock), -1)
    sel = ev[
        (ev["kind"] == Kind.FRAME)
        & (ev["scene"] == scene_id)
        & (ev["clock"] == cid)
        & ((ev["flags"] & (EXCLUDED_FLAGS & ~int(Flag.WARMUP))) == 0)
    ]
    sel = sel[np.lexsort((sel["start_ns"], sel["frame"]))]
    values = sel["dur_ns"].astype(np.float64) * _scale(clock)
    frames = sel["frame"].astype(np.int64)
    warm = (sel["flags"] & int(Flag.WARMUP)) != 0
    warmup = (int(frames[warm].min()), int(frames[warm].max())) if warm.any() else None
    x, y = minmax_downsample(frames, values, max_points)
    return FrameSeries(x, y, warmup, values[~warm], len(values), frames, values)


#: Fewest runs a side drawn as a median in a band (fewer: a line each).
BAND_MIN_RUNS = 3


@dataclasses.dataclass(frozen=True)
class SideBand:
    """One side's runs frame by frame; when cut, the band is each bucket's envelope, so no slow
    frame falls out of it."""

    frame: np.ndarray
    median: np.ndarray
    band_frame: np.ndarray
    low: np.ndarray  #: fastest run at each of ``band_frame``
    high: np.ndarray
    runs: int


def side_band(series: Sequence[FrameSeries], max_points: int = MAX_POINTS) -> SideBand:
    frames = [s.all_frame for s in series if s.all_frame.size]
    if not frames:
        empty = np.empty(0)
        return SideBand(empty, empty, empty, empty, empty, len(series))
    width = int(max(int(f.max()) for f in frames)) + 1
    grid = np.full((len(series), width), np.nan)
    for row, s in enumerate(series):
        grid[row, s.all_frame] = s.all_value
    present = np.flatnonzero(~np.all(np.isnan(grid), axis=0))
    grid = grid[:, present]
    median = np.nanmedian(grid, axis=0)
    low, high = np.nanmin(grid, axis=0), np.nanmax(grid, axis=0)
    mx, my = minmax_downsample(present, median, max_points)
    bx, blo, bhi = _envelope(present, low, high, max_points)
    return SideBand(mx, my, bx, blo, bhi, len(series))


def _envelope(
    x: np.ndarray, low: np.ndarray, high: np.ndarray, max_points: int
) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    n = x.size
    if n <= max_points:
        return x, low, high
    buckets = max(1, max_points // 2)
    size = -(-n // buckets)
    starts = np.arange(0, n, size)
    ends = np.minimum(starts + size, n) - 1
    lo = np.minimum.reduceat(low, starts)
    hi = np.maximum.reduceat(high, starts)
    bx = np.column_stack([x[starts], x[ends]]).ravel()
    return bx, np.repeat(lo, 2), np.repeat(hi, 2)


def cdf_points(values: np.ndarray, max_points: int = CDF_POINTS) -> tuple[np.ndarray, np.ndarray]:
    """Empirical CDF: (value, percent at or below)."""
    v = np.sort(np.asarray(values, dtype=np.float64))
    n = v.size
    if n == 0:
        return v, v
    if n <= max_points:
        return v, np.arange(1, n + 1) * (100.0 / n)
    idx = np.unique(np.round(np.linspace(0, n - 1, max_points)).astype(np.int64))
    return v[idx], (idx + 1) * (100.0 / n)


def zone_medians(trace: HeadedTrace, scene: str, clock: str) -> dict[str, float]:
    """Median per-frame total of each zone, measured frames only."""
    cid = next((c for c, n in CLOCK_NAMES.items() if n == clock), -1)
    all_totals = _remembered(
        trace,
        ("zone_frame_totals", cid),
        lambda: zone_frame_totals(trace.events, list(trace.strings), cid),
    )
    totals = all_totals.get(scene, {})
    return {zone: float(np.median(v)) * _scale(clock) for zone, v in totals.items() if v.size}


def scenes_of(trace: HeadedTrace) -> dict[str, tuple[int, list[str]]]:
    return _remembered(trace, ("scenes_of",), lambda: _scenes_of(trace))


def _scenes_of(trace: HeadedTrace) -> dict[str, tuple[int, list[str]]]:
    ev = trace.events
    frames = ev[ev["kind"] == Kind.FRAME]
    keys = np.unique(frames["scene"].astype(np.int64) * 256 + frames["clock"])
    clocks_of: dict[int, set[int]] = {}
    for key in keys.tolist():
        clocks_of.setdefault(key // 256, set()).add(key % 256)
    out: dict[str, tuple[int, list[str]]] = {}
    order = {name: i for i, name in enumerate(CLOCK_PREFERENCE)}
    for sid, label in scene_labels(ev, list(trace.strings)).items():
        clocks = sorted(
            clocks_of.get(sid, ()), key=lambda c: (order.get(CLOCK_NAMES.get(c, ""), 99), c)
        )
        if clocks:
            out[label] = (sid, [clock_name(c) for c in clocks])
    return out


#: Per-trace results for all scenes at once (weakly held): keeps many scenes linear.
_REMEMBERED: weakref.WeakKeyDictionary[Any, dict[tuple[Any, ...], Any]] = (
    weakref.WeakKeyDictionary()
)
_T = TypeVar("_T")


def _remembered(trace: HeadedTrace, key: tuple[Any, ...], compute: Callable[[], _T]) -> _T:
    try:
        known = _REMEMBERED.setdefault(trace, {})
    except TypeError:
        return compute()
    if key not in known:
        known[key] = compute()
    return cast(_T, known[key])


__all__ = [
    "BAND_MIN_RUNS",
    "FrameSeries",
    "SideBand",
    "CDF_POINTS",
    "MAX_POINTS",
    "frame_series",
    "cdf_points",
    "minmax_downsample",
    "primary_clock",
    "scenes_of",
    "side_band",
    "unit_of",
    "zone_medians",
]
