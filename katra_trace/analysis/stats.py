"""Frame-time statistics in pure numpy: ns in frame order in; ms, fps, % or ratios out.
Each number's definition is in docs/stats.md."""

from __future__ import annotations

import dataclasses
import math
from collections.abc import Iterator, Mapping
from typing import TYPE_CHECKING, Protocol

import numpy as np

from katra_trace.jsontext import JsonObject, record_dict
from katra_trace.metrics import clock_name
from katra_trace.schema import COUNT_CLOCKS, Flag, Kind

if TYPE_CHECKING:
    from katra_trace.io.header import TraceHeader

STUTTER_FACTOR = 2.5
#: Frames in the centred moving-median window of the stutter rule.
STUTTER_WINDOW_FRAMES = 31
EXCLUDED_FLAGS = int(Flag.WARMUP | Flag.SETUP | Flag.SKIPPED | Flag.INTERRUPTED | Flag.REFERENCE)

_NS_PER_MS = 1e6
#: Bounds the moving median's memory at ~window x this x 24 bytes.
_MEDIAN_BLOCK_FRAMES = 8192
_NS_PER_S = 1e9


@dataclasses.dataclass(frozen=True)
class FrameStats:
    """Summary of span durations (frames or zone occurrences)."""

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
        """Non-finite floats become None."""
        return {
            k: v for k, v in record_dict(self).items() if isinstance(v, (int, float, type(None)))
        }


def _rate_hz(count: float, dur_ns: float) -> float:
    if dur_ns <= 0:
        return math.inf
    return count * _NS_PER_S / dur_ns


def low_fps_average(dur_ns: np.ndarray, fraction: float) -> float:
    """fps of the ``ceil(fraction * n)`` longest frames: their count over their summed time."""
    d = np.asarray(dur_ns, dtype=np.float64)
    if d.size == 0:
        raise ValueError("low_fps_average needs at least one duration")
    k = max(1, math.ceil(fraction * d.size - 1e-9))
    slowest = np.sort(d)[-k:]
    return _rate_hz(k, float(slowest.sum()))


def low_fps_integral(dur_ns: np.ndarray, fraction: float) -> float:
    """fps of the frame where the longest frames' running sum reaches ``fraction`` of the total."""
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


def _one_span(ns: float) -> FrameStats:
    ms, rate = ns / _NS_PER_MS, _rate_hz(1, ns)
    return FrameStats(
        **{f: ms for f in ("total_ms", "mean_ms", "median_ms", "min_ms", "max_ms")},
        **{f: ms for f in ("p90_ms", "p95_ms", "p99_ms")},
        **{f: rate for f in ("fps_avg", "fps_low_1pct", "fps_low_0_1pct")},
        fps_low_1pct_integral=rate,
        fps_low_0_1pct_integral=rate,
        n=1,
        stdev_ms=0.0,
        mad_ms=0.0,
        cv=0.0 if ns > 0 else math.nan,
        stutter_pct=0.0,
    )


def moving_median(dur_ns: np.ndarray, window: int = STUTTER_WINDOW_FRAMES) -> np.ndarray:
    """Over ``window`` frames (odd), truncated at the ends."""
    d = np.asarray(dur_ns, dtype=np.float64)
    if window < 1 or window % 2 == 0:
        raise ValueError(f"window must be a positive odd number of frames, got {window}")
    if d.size == 0:
        empty: np.ndarray = d.copy()
        return empty
    half = window // 2
    if d.size <= half + 1:
        whole: np.ndarray = np.full(d.size, np.nan if np.isnan(d).all() else np.nanmedian(d))
        return whole
    padded = np.concatenate([np.full(half, np.nan), d, np.full(half, np.nan)])
    windows = np.lib.stride_tricks.sliding_window_view(padded, window)
    out = np.empty(d.size)
    # blocks bound memory; sorting puts NaN last, so no per-window nanmedian
    for start in range(0, d.size, _MEDIAN_BLOCK_FRAMES):
        stop = min(start + _MEDIAN_BLOCK_FRAMES, d.size)
        block = np.sort(windows[start:stop], axis=1)
        valid = window - np.isnan(block).sum(axis=1)
        rows = np.arange(block.shape[0])
        low, high = block[rows, np.maximum(valid - 1, 0) // 2], block[rows, valid // 2]
        out[start:stop] = np.where(valid > 0, (low + high) / 2, np.nan)
    return out


def stutter_frames(
    dur_ns: np.ndarray, factor: float = STUTTER_FACTOR, window: int = STUTTER_WINDOW_FRAMES
) -> tuple[np.ndarray, np.ndarray]:
    """The stutter rule: ``(slow, median)``, ``slow[i]`` when over ``factor`` x moving median."""
    d = np.asarray(dur_ns, dtype=np.float64)
    median = moving_median(d, window)
    slow: np.ndarray = d > factor * median
    return slow, median


def stutter_pct(
    dur_ns: np.ndarray, factor: float = STUTTER_FACTOR, window: int = STUTTER_WINDOW_FRAMES
) -> float:
    """Percent of total time spent in stutter frames."""
    d = np.asarray(dur_ns, dtype=np.float64)
    total = float(d.sum())
    if d.size == 0 or total <= 0:
        return 0.0
    slow, _ = stutter_frames(d, factor, window)
    return 100.0 * float(d[slow].sum()) / total


def frame_stats(dur_ns: np.ndarray) -> FrameStats:
    """ValueError when empty."""
    d = np.asarray(dur_ns, dtype=np.float64)
    if d.ndim != 1 or d.size == 0:
        raise ValueError(f"frame_stats needs a non-empty 1-D array, got shape {d.shape}")
    n = int(d.size)
    if n == 1:  # common for named draws: skip the numpy calls
        return _one_span(float(d[0]))
    total = float(d.sum())
    mean = total / n
    median = float(np.median(d))
    stdev = float(np.std(d, ddof=1))
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


def measured(events: np.ndarray) -> np.ndarray:
    ev = np.asarray(events)
    keep = ((ev["kind"] == Kind.FRAME) | (ev["kind"] == Kind.ZONE)) & (
        (ev["flags"] & EXCLUDED_FLAGS) == 0
    )
    kept: np.ndarray = ev if keep.all() else ev[keep]
    return kept


def _ordered(ev: np.ndarray) -> np.ndarray:
    """GPU events may be appended late."""
    order = np.lexsort((ev["start_ns"], ev["frame"]))
    return ev[order]


class TraceLike(Protocol):
    events: np.ndarray
    strings: list[str]


class HeadedTrace(TraceLike, Protocol):
    """An opened trace, or a stand-in with the same fields."""

    header: TraceHeader


def scene_labels(events: np.ndarray, strings: list[str]) -> dict[int, str]:
    """Per scene id: its name, then ``name#2`` ... for later ids sharing it (as ``katra3d run``)."""
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
    """``{scene: {clock: values}}`` of measured frames, in frame order."""
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
    """``{scene: {zone: per-frame totals}}`` of measured zones on one clock."""
    labels = scene_labels(events, strings)
    ev = measured(events)
    zones = ev[(ev["kind"] == Kind.ZONE) & (ev["clock"] == clock)]
    out: dict[str, dict[str, np.ndarray]] = {}
    by_scene = groups(zones, "scene")
    for sid in _in_order(zones["scene"], labels):
        for zid, z in groups(by_scene[sid], "name").items():
            frames, inverse = np.unique(z["frame"], return_inverse=True)
            totals = np.zeros(frames.size, dtype=np.float64)
            np.add.at(totals, inverse, z["dur_ns"].astype(np.float64))
            out.setdefault(labels[sid], {})[_name(strings, int(zid))] = totals
    return out


def reference_durations(events: np.ndarray, strings: list[str]) -> dict[str, dict[str, np.ndarray]]:
    """``{scene: {clock: ns}}`` of the reference workload (REFERENCE markers)."""
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


def groups(ev: np.ndarray, key: str) -> dict[int, np.ndarray]:
    """``ev`` split by column ``key``, in order: one stable sort (zones may be many)."""
    if not len(ev):
        return {}
    if (ev[key] == ev[key][0]).all():
        return {int(ev[key][0]): ev}
    order = np.argsort(ev[key], kind="stable")
    values, first = np.unique(ev[key][order], return_index=True)
    parts = np.split(ev[order], first[1:])
    return dict(zip(values.tolist(), parts, strict=True))


def _in_order(scene_ids: np.ndarray, labels: Mapping[int, str]) -> list[int]:
    present = {int(i) for i in np.unique(scene_ids)}
    return [sid for sid in labels if sid in present]


def _name(strings: list[str], sid: int) -> str:
    return strings[sid] if 0 <= sid < len(strings) else f"?{sid}"


@dataclasses.dataclass(frozen=True)
class CountStats:
    """Counts (instructions, cycles) in ``unit``: no frame rates."""

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
        out: dict[str, float | int | None] = {"n": self.n}
        for f in dataclasses.fields(self)[2:-1]:
            out[f"{f.name}_{self.unit}"] = getattr(self, f.name)
        out["cv"] = self.cv
        return out


ClockStats = FrameStats | CountStats


def count_stats(values: np.ndarray, unit: str) -> CountStats:
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
    metrics: Mapping[str, ClockStats]
    zones: Mapping[str, Mapping[str, ClockStats]]

    def metrics_json(self) -> dict[str, dict[str, float | int | None]]:
        return {c: v.as_dict() for c, v in self.metrics.items()}

    def zones_json(self) -> dict[str, dict[str, dict[str, float | int | None]]]:
        return {z: {c: v.as_dict() for c, v in per.items()} for z, per in self.zones.items()}

    def as_dict(self) -> JsonObject:
        return {"metrics": self.metrics_json(), "zones": self.zones_json()}


NO_STATS = SceneStats({}, {})


@dataclasses.dataclass(frozen=True)
class RunStats:
    scenes: Mapping[str, SceneStats]

    def as_dict(self) -> JsonObject:
        return {"scenes": {s: v.as_dict() for s, v in self.scenes.items()}}

    def rows(self, zones: bool = True) -> Iterator[tuple[str, str, str, ClockStats]]:
        """``(scene, zone or "", clock, stats)``, frames then zones."""
        for scene, entry in self.scenes.items():
            for clock, values in entry.metrics.items():
                yield scene, "", clock, values
            if zones:
                for zone, per_clock in entry.zones.items():
                    for clock, values in per_clock.items():
                        yield scene, zone, clock, values


def _group_stats(ev: np.ndarray) -> dict[str, ClockStats]:
    out: dict[str, ClockStats] = {}
    clocks = np.unique(ev["clock"])
    for clock in clocks:
        cname = clock_name(clock)
        on = ev if len(clocks) == 1 else ev[ev["clock"] == clock]
        dur = on["dur_ns"][np.lexsort((on["start_ns"], on["frame"]))]
        out[cname] = count_stats(dur, cname) if int(clock) in COUNT_CLOCKS else frame_stats(dur)
    return out


def events_stats(events: np.ndarray, strings: list[str], zones: bool = True) -> RunStats:
    labels = scene_labels(events, strings)
    ev = measured(events)
    scenes: dict[str, SceneStats] = {}
    by_scene = groups(ev, "scene")
    for sid in _in_order(ev["scene"], labels):
        of_scene = by_scene[sid]
        zev = of_scene[of_scene["kind"] == Kind.ZONE] if zones else of_scene[:0]
        scenes[labels[sid]] = SceneStats(
            _group_stats(of_scene[of_scene["kind"] == Kind.FRAME]),
            {_name(strings, zid): _group_stats(z) for zid, z in groups(zev, "name").items()},
        )
    return RunStats(scenes)


def trace_stats(trace: TraceLike, zones: bool = True) -> RunStats:
    """Per scene and clock, frames and (with ``zones``) each zone; excluded spans left out."""
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
    "groups",
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
