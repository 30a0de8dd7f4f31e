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
from collections.abc import Iterator, Mapping
from typing import Any, Protocol

import numpy as np

from katra_trace.jsontext import record_dict
from katra_trace.metrics import clock_name
from katra_trace.schema import COUNT_CLOCKS, Flag, Kind

#: A frame is a stutter when it is longer than this many times the moving median.
STUTTER_FACTOR = 2.5
#: Width (frames) of the centred moving-median window used for stutter; truncated at the ends.
STUTTER_WINDOW_FRAMES = 31
#: Flags whose events never enter statistics (warmup, setup, skip markers, cut-short spans).
EXCLUDED_FLAGS = int(Flag.WARMUP | Flag.SETUP | Flag.SKIPPED | Flag.INTERRUPTED | Flag.REFERENCE)

_NS_PER_MS = 1e6
#: Frames per block of the moving median (bounds its memory at ~window x this x 8 bytes x 3).
_MEDIAN_BLOCK_FRAMES = 8192
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
        return record_dict(self)


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
        empty: np.ndarray = d.copy()
        return empty
    half = window // 2
    padded = np.concatenate([np.full(half, np.nan), d, np.full(half, np.nan)])
    windows = np.lib.stride_tricks.sliding_window_view(padded, window)
    out = np.empty(d.size)
    # in blocks: nanmedian copies its input, so a whole long capture at once would take
    # ~window x its size in memory
    for start in range(0, d.size, _MEDIAN_BLOCK_FRAMES):
        stop = min(start + _MEDIAN_BLOCK_FRAMES, d.size)
        out[start:stop] = np.nanmedian(windows[start:stop], axis=1)
    return out


def stutter_frames(
    dur_ns: np.ndarray, factor: float = STUTTER_FACTOR, window: int = STUTTER_WINDOW_FRAMES
) -> tuple[np.ndarray, np.ndarray]:
    """The stutter rule, the one definition: ``(slow, median)``, where ``slow[i]`` says frame ``i``
    is longer than ``factor`` x ``median[i]``, the centred moving median of ``window`` frames
    (:func:`moving_median`).

    ``stutter_pct`` and the slow frames of :mod:`katra_trace.analysis.slow` both use it.
    """
    d = np.asarray(dur_ns, dtype=np.float64)
    median = moving_median(d, window)
    slow: np.ndarray = d > factor * median
    return slow, median


def stutter_pct(
    dur_ns: np.ndarray, factor: float = STUTTER_FACTOR, window: int = STUTTER_WINDOW_FRAMES
) -> float:
    """Percent of total time spent in frames longer than ``factor`` x the moving median."""
    d = np.asarray(dur_ns, dtype=np.float64)
    total = float(d.sum())
    if d.size == 0 or total <= 0:
        return 0.0
    slow, _ = stutter_frames(d, factor, window)
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
    kept: np.ndarray = ev[keep]
    return kept


def _ordered(ev: np.ndarray) -> np.ndarray:
    """Events in frame order (then start time): GPU events may be appended late."""
    order = np.lexsort((ev["start_ns"], ev["frame"]))
    return ev[order]


class TraceLike(Protocol):
    """What :func:`trace_stats` needs from an opened trace."""

    events: np.ndarray
    strings: list[str]


def scene_labels(events: np.ndarray, strings: list[str]) -> dict[int, str]:
    """A unique label per scene id: its name, and ``name#2``, ``name#3`` ... for further ids sharing
    it.

    Ids are taken in order of first appearance in ``events`` (the order the
    capture ran them), the rule ``katra3d run`` uses for a scene named twice;
    a label already taken by another scene's own name is skipped. ``stats``
    and ``compare`` both key scenes by these labels.
    """
    ev = np.asarray(events)
    if ev.size == 0:
        return {}
    ids, first = np.unique(ev["scene"], return_index=True)
    ordered = [int(i) for i in ids[np.argsort(first, kind="stable")]]
    names = {sid: _name(strings, sid) for sid in ordered}
    taken = set(names.values())
    seen: dict[str, int] = {}
    labels: dict[int, str] = {}
    for sid in ordered:
        name = names[sid]
        seen[name] = seen.get(name, 0) + 1
        label = name
        if seen[name] > 1:
            label = f"{name}#{seen[name]}"
            while label in taken:
                seen[name] += 1
                label = f"{name}#{seen[name]}"
            taken.add(label)
        labels[sid] = label
    return labels


def scene_durations(events: np.ndarray, strings: list[str]) -> dict[str, dict[str, np.ndarray]]:
    """``{scene: {clock: values}}`` of measured frames, in frame order.

    Scenes are keyed by :func:`scene_labels` (ids sharing a name are kept apart).
    Values are ns on time clocks, counts on count clocks (float64).
    """
    labels = scene_labels(events, strings)
    ev = measured(events)
    frames = ev[ev["kind"] == Kind.FRAME]
    out: dict[str, dict[str, np.ndarray]] = {}
    for sid in _in_order(frames["scene"], labels):
        of_scene = frames[frames["scene"] == sid]
        per_scene = out.setdefault(labels[sid], {})
        for clock in np.unique(of_scene["clock"]):
            cname = clock_name(clock)
            per_scene[cname] = _ordered(of_scene[of_scene["clock"] == clock])["dur_ns"].astype(
                np.float64
            )
    return out


def zone_frame_totals(
    events: np.ndarray, strings: list[str], clock: int
) -> dict[str, dict[str, np.ndarray]]:
    """``{scene: {zone: per-frame totals}}`` of measured zones on one clock, in frame order.

    A zone that occurs several times in a frame contributes the sum of its
    occurrences: what that pass cost the frame.
    """
    labels = scene_labels(events, strings)
    ev = measured(events)
    zones = ev[(ev["kind"] == Kind.ZONE) & (ev["clock"] == clock)]
    out: dict[str, dict[str, np.ndarray]] = {}
    for sid in _in_order(zones["scene"], labels):
        of_scene = zones[zones["scene"] == sid]
        for zid in np.unique(of_scene["name"]):
            z = of_scene[of_scene["name"] == zid]
            frames, inverse = np.unique(z["frame"], return_inverse=True)
            totals = np.zeros(frames.size, dtype=np.float64)
            np.add.at(totals, inverse, z["dur_ns"].astype(np.float64))
            out.setdefault(labels[sid], {})[_name(strings, int(zid))] = totals
    return out


def reference_durations(events: np.ndarray, strings: list[str]) -> dict[str, dict[str, np.ndarray]]:
    """``{scene: {clock: ns}}`` of the reference workload (MARKER events flagged REFERENCE).

    Warmup-flagged, interrupted and skipped reference markers are left out, as for frames.
    """
    labels = scene_labels(events, strings)
    ev = np.asarray(events)
    excluded = EXCLUDED_FLAGS & ~int(Flag.REFERENCE)
    sel = ev[
        (ev["kind"] == Kind.MARKER)
        & ((ev["flags"] & int(Flag.REFERENCE)) != 0)
        & ((ev["flags"] & excluded) == 0)
    ]
    out: dict[str, dict[str, np.ndarray]] = {}
    for sid in _in_order(sel["scene"], labels):
        of_scene = sel[sel["scene"] == sid]
        for clock in np.unique(of_scene["clock"]):
            cname = clock_name(clock)
            out.setdefault(labels[sid], {})[cname] = _ordered(of_scene[of_scene["clock"] == clock])[
                "dur_ns"
            ].astype(np.float64)
    return out


def _in_order(scene_ids: np.ndarray, labels: Mapping[int, str]) -> list[int]:
    """The distinct ids of ``scene_ids`` in the order of ``labels`` (first appearance)."""
    present = {int(i) for i in np.unique(scene_ids)}
    return [sid for sid in labels if sid in present]


def _name(strings: list[str], sid: int) -> str:
    """The string with id ``sid`` (``"?<id>"`` when the table lacks it)."""
    return strings[sid] if 0 <= sid < len(strings) else f"?{sid}"


@dataclasses.dataclass(frozen=True)
class CountStats:
    """Summary of one series of counts (instructions, cycles) in ``unit``: no frame rates (a count
    is not a time)."""

    unit: str
    n: int
    total: float
    mean: float
    median: float
    min: float
    max: float
    stdev: float
    mad: float
    p90: float
    p95: float
    p99: float
    cv: float | None

    def as_dict(self) -> dict[str, float | int | None]:
        """``n``, ``total_<unit>`` ... ``p99_<unit>`` and ``cv``."""
        out: dict[str, float | int | None] = {"n": self.n}
        for f in dataclasses.fields(self)[2:-1]:
            out[f"{f.name}_{self.unit}"] = getattr(self, f.name)
        out["cv"] = self.cv
        return out


#: The statistics of one clock: times or counts.
ClockStats = FrameStats | CountStats


def count_stats(values: np.ndarray, unit: str) -> CountStats:
    """Statistics of a series of counts (instructions, cycles) in ``unit``."""
    d = np.asarray(values, dtype=np.float64)
    if d.ndim != 1 or d.size == 0:
        raise ValueError(f"count_stats needs a non-empty 1-D array, got shape {d.shape}")
    mean = float(d.mean())
    median = float(np.median(d))
    stdev = float(np.std(d, ddof=1)) if d.size > 1 else 0.0
    p90, p95, p99 = (float(v) for v in np.percentile(d, [90.0, 95.0, 99.0]))
    return CountStats(
        unit=unit,
        n=int(d.size),
        total=float(d.sum()),
        mean=mean,
        median=median,
        min=float(d.min()),
        max=float(d.max()),
        stdev=stdev,
        mad=float(np.median(np.abs(d - median))),
        p90=p90,
        p95=p95,
        p99=p99,
        cv=stdev / mean if mean > 0 else None,
    )


@dataclasses.dataclass(frozen=True)
class SceneStats:
    """One scene's statistics: its frames' per clock (``metrics``) and its zones' per zone and
    clock."""

    metrics: Mapping[str, ClockStats]
    zones: Mapping[str, Mapping[str, ClockStats]]

    def as_dict(self) -> dict[str, dict[str, Any]]:
        """The JSON of ``stats``: ``{"metrics": {CLOCK: {STAT: value}}, "zones": {ZONE: ...}}``."""
        return {
            "metrics": {c: v.as_dict() for c, v in self.metrics.items()},
            "zones": {z: {c: v.as_dict() for c, v in per.items()} for z, per in self.zones.items()},
        }


#: A scene with no measured frames.
NO_STATS = SceneStats({}, {})


@dataclasses.dataclass(frozen=True)
class RunStats:
    """The statistics of one trace, by scene label (:func:`scene_labels`), in capture order."""

    scenes: Mapping[str, SceneStats]

    def as_dict(self) -> dict[str, Any]:
        """The JSON of ``stats``: ``{"scenes": {SCENE: SceneStats.as_dict()}}``."""
        return {"scenes": {s: v.as_dict() for s, v in self.scenes.items()}}

    def rows(self, zones: bool = True) -> Iterator[tuple[str, str, str, ClockStats]]:
        """``(scene, zone or "", clock, stats)`` for each scene's frames, then its zones."""
        for scene, entry in self.scenes.items():
            for clock, values in entry.metrics.items():
                yield scene, "", clock, values
            if zones:
                for zone, per_clock in entry.zones.items():
                    for clock, values in per_clock.items():
                        yield scene, zone, clock, values


def _group_stats(ev: np.ndarray) -> dict[str, ClockStats]:
    out: dict[str, ClockStats] = {}
    for clock in np.unique(ev["clock"]):
        cname = clock_name(clock)
        dur = _ordered(ev[ev["clock"] == clock])["dur_ns"]
        out[cname] = count_stats(dur, cname) if int(clock) in COUNT_CLOCKS else frame_stats(dur)
    return out


def events_stats(events: np.ndarray, strings: list[str], zones: bool = True) -> RunStats:
    """Statistics of an event array; see :func:`trace_stats`."""
    labels = scene_labels(events, strings)
    ev = measured(events)
    scenes: dict[str, SceneStats] = {}
    for sid in _in_order(ev["scene"], labels):
        of_scene = ev[ev["scene"] == sid]
        zev = of_scene[of_scene["kind"] == Kind.ZONE]
        scenes[labels[sid]] = SceneStats(
            _group_stats(of_scene[of_scene["kind"] == Kind.FRAME]),
            {
                _name(strings, int(zid)): _group_stats(zev[zev["name"] == zid])
                for zid in (np.unique(zev["name"]) if zones else ())
            },
        )
    return RunStats(scenes)


def trace_stats(trace: TraceLike, zones: bool = True) -> RunStats:
    """Statistics of an opened trace: per scene (keyed by :func:`scene_labels`), per clock
    (``cpu``/``wall``/``gpu``/``process`` times as :class:`FrameStats`, ``instructions``/``cycles``
    as :class:`CountStats`), for its frames and, with ``zones``, each zone.
    Warmup, setup, skipped and interrupted spans and all markers/counters are
    excluded. Scenes with no measured frames or zones are absent.
    """
    return events_stats(trace.events, list(trace.strings), zones=zones)


__all__ = [
    "EXCLUDED_FLAGS",
    "NO_STATS",
    "ClockStats",
    "CountStats",
    "FrameStats",
    "RunStats",
    "SceneStats",
    "STUTTER_FACTOR",
    "STUTTER_WINDOW_FRAMES",
    "count_stats",
    "events_stats",
    "frame_stats",
    "low_fps_average",
    "low_fps_integral",
    "measured",
    "reference_durations",
    "moving_median",
    "scene_durations",
    "scene_labels",
    "stutter_frames",
    "stutter_pct",
    "trace_stats",
    "zone_frame_totals",
]
