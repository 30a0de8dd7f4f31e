"""Frame-time statistics: pure functions over durations and event arrays.

Everything here is numpy only (no GL, no I/O). Inputs are durations in
**nanoseconds** (``dur_ns``, any numeric numpy array, in frame order);
outputs are in milliseconds (``*_ms``), frames per second (``fps_*``),
percent (``*_pct``) or plain ratios (``cv``). See docs/stats.md for what
each number means.

Definitions (``d`` = measured frame durations, ``T = sum(d)``):

* ``fps_avg`` = ``n / T``: time-weighted average frame rate (what a
  frame counter shows), not the mean of per-frame rates.
* ``fps_low_1pct`` ("average of the slowest 1 %"): the ``k = ceil(0.01 n)``
  longest frames, ``k / sum(their durations)``.
* ``fps_low_1pct_integral`` ("integral" definition): sort frames from
  longest to shortest and accumulate their durations; the frame at which the
  running sum first reaches 1 % of ``T`` gives ``1 / its duration``. Put
  differently: the frame rate below which the capture spent 1 % of its time.
* The 0.1 % lows are the same with 0.1 %.
* ``stutter_pct``: share of ``T`` spent in frames longer than
  :data:`STUTTER_FACTOR` times the moving median of a centred window of
  :data:`STUTTER_WINDOW_FRAMES` frames (truncated at the ends).
* ``mad_ms``: median absolute deviation from the median, unscaled.
* ``stdev_ms``: sample standard deviation (ddof=1; 0 for a single frame).
* percentiles: numpy's default (linear interpolation between order statistics).
"""

from __future__ import annotations

import dataclasses
import math
from collections.abc import Iterable, Mapping
from typing import Any, Protocol

import numpy as np

from katra_trace.schema import Clock, Flag, Kind

#: A frame is a stutter when it is longer than this many times the moving median.
STUTTER_FACTOR = 2.5
#: Width (frames) of the centred moving-median window used for stutter; truncated at the ends.
STUTTER_WINDOW_FRAMES = 31
#: Flags whose events never enter statistics (warmup, setup, skip markers, cut-short spans).
EXCLUDED_FLAGS = int(Flag.WARMUP | Flag.SETUP | Flag.SKIPPED | Flag.INTERRUPTED | Flag.REFERENCE)
#: Clock enum -> the lowercase name used in dict keys ("cpu", "wall", "gpu").
CLOCK_NAMES: dict[int, str] = {int(c): c.name.lower() for c in Clock}

_NS_PER_MS = 1e6
_NS_PER_S = 1e9


@dataclasses.dataclass(frozen=True)
class FrameStats:
    """Summary of one series of span durations (frames or zone occurrences)."""

    n: int
    total_ms: float
    mean_ms: float
    median_ms: float
    min_ms: float
    max_ms: float
    stdev_ms: float
    mad_ms: float
    p90_ms: float
    p95_ms: float
    p99_ms: float
    cv: float
    fps_avg: float
    fps_low_1pct: float
    fps_low_0_1pct: float
    fps_low_1pct_integral: float
    fps_low_0_1pct_integral: float
    stutter_pct: float

    def as_dict(self) -> dict[str, float | int | None]:
        """Field name -> value; non-finite floats (e.g. fps of a 0 ns span) become None."""
        out: dict[str, float | int | None] = {}
        for field in dataclasses.fields(self):
            value = getattr(self, field.name)
            if isinstance(value, float) and not math.isfinite(value):
                out[field.name] = None
            else:
                out[field.name] = value
        return out


def _rate_hz(count: float, dur_ns: float) -> float:
    """``count`` spans over ``dur_ns`` nanoseconds, in 1/s (inf for 0 ns)."""
    if dur_ns <= 0:
        return math.inf
    return count * _NS_PER_S / dur_ns


def low_fps_average(dur_ns: np.ndarray, fraction: float) -> float:
    """'Average of the slowest ``fraction``' frame rate, in fps.

    Takes the ``ceil(fraction * n)`` longest frames (at least one) and returns
    their count divided by their summed duration.
    """
    d = np.asarray(dur_ns, dtype=np.float64)
    if d.size == 0:
        raise ValueError("low_fps_average needs at least one duration")
    k = max(1, math.ceil(fraction * d.size - 1e-9))
    slowest = np.sort(d)[-k:]
    return _rate_hz(k, float(slowest.sum()))


def low_fps_integral(dur_ns: np.ndarray, fraction: float) -> float:
    """'Integral' low frame rate, in fps.

    Frames sorted from longest to shortest; their durations are accumulated
    until the running sum reaches ``fraction`` of the total time; the frame
    that reaches it gives the result, ``1 / its duration``.
    """
    d = np.asarray(dur_ns, dtype=np.float64)
    if d.size == 0:
        raise ValueError("low_fps_integral needs at least one duration")
    desc = np.sort(d)[::-1]
    total = float(desc.sum())
    if total <= 0:
        return math.inf
    cum = np.cumsum(desc)
    idx = int(np.searchsorted(cum, fraction * total - 1e-9 * total, side="left"))
    idx = min(idx, desc.size - 1)
    return _rate_hz(1, float(desc[idx]))


def moving_median(dur_ns: np.ndarray, window: int = STUTTER_WINDOW_FRAMES) -> np.ndarray:
    """Centred moving median over ``window`` frames (odd), truncated at the ends."""
    d = np.asarray(dur_ns, dtype=np.float64)
    if window < 1 or window % 2 == 0:
        raise ValueError(f"window must be a positive odd number of frames, got {window}")
    if d.size == 0:
        return d.copy()
    half = window // 2
    padded = np.concatenate([np.full(half, np.nan), d, np.full(half, np.nan)])
    windows = np.lib.stride_tricks.sliding_window_view(padded, window)
    return np.nanmedian(windows, axis=1)


def stutter_pct(dur_ns: np.ndarray, factor: float = STUTTER_FACTOR,
                window: int = STUTTER_WINDOW_FRAMES) -> float:
    """Percent of total time spent in frames longer than ``factor`` x the moving median."""
    d = np.asarray(dur_ns, dtype=np.float64)
    total = float(d.sum())
    if d.size == 0 or total <= 0:
        return 0.0
    slow = d > factor * moving_median(d, window)
    return 100.0 * float(d[slow].sum()) / total


def frame_stats(dur_ns: np.ndarray) -> FrameStats:
    """Statistics of one series of durations in ns, given in frame order.

    Raises ValueError on an empty series.
    """
    d = np.asarray(dur_ns, dtype=np.float64)
    if d.ndim != 1 or d.size == 0:
        raise ValueError(f"frame_stats needs a non-empty 1-D array, got shape {d.shape}")
    n = int(d.size)
    total = float(d.sum())
    mean = total / n
    median = float(np.median(d))
    stdev = float(np.std(d, ddof=1)) if n > 1 else 0.0
    p90, p95, p99 = (float(v) for v in np.percentile(d, [90.0, 95.0, 99.0]))
    return FrameStats(
        n=n,
        total_ms=total / _NS_PER_MS,
        mean_ms=mean / _NS_PER_MS,
        median_ms=median / _NS_PER_MS,
        min_ms=float(d.min()) / _NS_PER_MS,
        max_ms=float(d.max()) / _NS_PER_MS,
        stdev_ms=stdev / _NS_PER_MS,
        mad_ms=float(np.median(np.abs(d - median))) / _NS_PER_MS,
        p90_ms=p90 / _NS_PER_MS,
        p95_ms=p95 / _NS_PER_MS,
        p99_ms=p99 / _NS_PER_MS,
        cv=stdev / mean if mean > 0 else math.nan,
        fps_avg=_rate_hz(n, total),
        fps_low_1pct=low_fps_average(d, 0.01),
        fps_low_0_1pct=low_fps_average(d, 0.001),
        fps_low_1pct_integral=low_fps_integral(d, 0.01),
        fps_low_0_1pct_integral=low_fps_integral(d, 0.001),
        stutter_pct=stutter_pct(d),
    )


# --------------------------------------------------------------------------- events


def measured(events: np.ndarray) -> np.ndarray:
    """The events that enter statistics: frames and zones without excluded flags."""
    ev = np.asarray(events)
    keep = ((ev["kind"] == Kind.FRAME) | (ev["kind"] == Kind.ZONE)) & (
        (ev["flags"] & EXCLUDED_FLAGS) == 0
    )
    return ev[keep]


def _ordered(ev: np.ndarray) -> np.ndarray:
    """Events in frame order (then start time): GPU events may be appended late."""
    order = np.lexsort((ev["start_ns"], ev["frame"]))
    return ev[order]


def frame_durations(events: np.ndarray, scene_id: int, clock: int) -> np.ndarray:
    """Durations (ns, float64, frame order) of one scene's measured frames on one clock."""
    ev = measured(events)
    sel = ev[(ev["kind"] == Kind.FRAME) & (ev["scene"] == scene_id) & (ev["clock"] == clock)]
    return _ordered(sel)["dur_ns"].astype(np.float64)


class TraceLike(Protocol):
    """What :func:`trace_stats` needs from an opened trace."""

    events: np.ndarray
    strings: list[str]


def scene_durations(events: np.ndarray, strings: list[str]) -> dict[str, dict[str, np.ndarray]]:
    """``{scene: {clock: dur_ns array}}`` of measured frames, in frame order.

    Scenes are keyed by name; several scene ids with one name are merged.
    """
    ev = measured(events)
    frames = ev[ev["kind"] == Kind.FRAME]
    out: dict[str, dict[str, np.ndarray]] = {}
    for sid in np.unique(frames["scene"]):
        name = _name(strings, int(sid))
        of_scene = frames[frames["scene"] == sid]
        for clock in np.unique(of_scene["clock"]):
            cname = CLOCK_NAMES.get(int(clock), f"clock{int(clock)}")
            dur = _ordered(of_scene[of_scene["clock"] == clock])["dur_ns"].astype(np.float64)
            per_scene = out.setdefault(name, {})
            per_scene[cname] = np.concatenate([per_scene[cname], dur]) if cname in per_scene else dur
    return out


def _name(strings: list[str], sid: int) -> str:
    """The string with id ``sid`` (``"?<id>"`` when the table lacks it)."""
    return strings[sid] if 0 <= sid < len(strings) else f"?{sid}"


def _group_stats(ev: np.ndarray) -> dict[str, dict[str, float | int | None]]:
    out: dict[str, dict[str, float | int | None]] = {}
    for clock in np.unique(ev["clock"]):
        cname = CLOCK_NAMES.get(int(clock), f"clock{int(clock)}")
        dur = _ordered(ev[ev["clock"] == clock])["dur_ns"]
        out[cname] = frame_stats(dur).as_dict()
    return out


def events_stats(events: np.ndarray, strings: list[str], zones: bool = True) -> dict[str, Any]:
    """Nested statistics of an event array; see :func:`trace_stats` for the shape."""
    ev = measured(events)
    scenes: dict[str, Any] = {}
    for sid in np.unique(ev["scene"]):
        name = _name(strings, int(sid))
        of_scene = ev[ev["scene"] == sid]
        entry = scenes.setdefault(name, {"metrics": {}, "zones": {}})
        frames = of_scene[of_scene["kind"] == Kind.FRAME]
        entry["metrics"].update(_group_stats(frames))
        if zones:
            zev = of_scene[of_scene["kind"] == Kind.ZONE]
            for zid in np.unique(zev["name"]):
                entry["zones"][_name(strings, int(zid))] = _group_stats(zev[zev["name"] == zid])
    return {"scenes": scenes}


def trace_stats(trace: TraceLike, zones: bool = True) -> dict[str, Any]:
    """Statistics of an opened trace.

    Returns ``{"scenes": {SCENE: {"metrics": {CLOCK: {STAT: value}},
    "zones": {ZONE: {CLOCK: {STAT: value}}}}}}`` where CLOCK is
    ``cpu``/``wall``/``gpu`` and STAT the keys of :meth:`FrameStats.as_dict`.
    Warmup, setup, skipped and interrupted spans and all markers/counters are
    excluded. Scenes with no measured frames or zones are absent.
    """
    return events_stats(trace.events, list(trace.strings), zones=zones)


def flatten(stats: Mapping[str, Any], zones: bool = True) -> Iterable[tuple[str, str, str, dict[str, Any]]]:
    """Rows ``(scene, zone or "", clock, stat dict)`` of a :func:`trace_stats` result."""
    for scene, entry in stats["scenes"].items():
        for clock, values in entry["metrics"].items():
            yield scene, "", clock, values
        if zones:
            for zone, per_clock in entry["zones"].items():
                for clock, values in per_clock.items():
                    yield scene, zone, clock, values


__all__ = [
    "CLOCK_NAMES",
    "EXCLUDED_FLAGS",
    "FrameStats",
    "STUTTER_FACTOR",
    "STUTTER_WINDOW_FRAMES",
    "events_stats",
    "flatten",
    "frame_durations",
    "frame_stats",
    "low_fps_average",
    "low_fps_integral",
    "measured",
    "moving_median",
    "scene_durations",
    "stutter_pct",
    "trace_stats",
]
