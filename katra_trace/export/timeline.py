"""A trace as timeline tracks for the exporters (docs/export.md); span ends are clamped so that
they nest, or a viewer closes the wrong slice."""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping, Sequence

import numpy as np

from katra_trace.analysis.stats import scene_labels
from katra_trace.jsontext import JsonValue
from katra_trace.metrics import CLOCK_PREFERENCE, clock_name
from katra_trace.schema import VALUE_CLOCKS, Clock, Flag, Kind

CLOCK_ORDER: tuple[int, ...] = tuple(int(Clock[name.upper()]) for name in CLOCK_PREFERENCE)


def flag_names(flags: int) -> str:
    """The set bits of ``flags`` as ``warmup|setup``."""
    names = [f.name.lower() for f in Flag if f.value and flags & f.value and f.name]
    unknown = int(flags) & ~sum(int(f.value) for f in Flag)
    if unknown:
        names.append(f"bits{unknown:#x}")
    return "|".join(names)


@dataclasses.dataclass(frozen=True)
class SliceTrack:
    """One scene x clock track: indices of its spans and instants."""

    scene_id: int
    scene: str
    clock: int
    spans: np.ndarray  #: in (start, depth) order
    instants: np.ndarray  #: in start order

    @property
    def name(self) -> str:
        return f"{self.scene}: {clock_name(self.clock)}"


@dataclasses.dataclass(frozen=True)
class CounterTrack:
    scene_id: int
    scene: str
    clock: int
    name_id: int
    label: str
    rows: np.ndarray  #: in start order
    from_durations: bool  #: values are ``dur_ns`` (value clocks), else ``value``

    @property
    def name(self) -> str:
        return f"{self.scene}: {self.label} ({clock_name(self.clock)})"

    @property
    def unit(self) -> str:
        if self.from_durations:
            return "ns" if self.clock == Clock.PROCESS else clock_name(self.clock)
        return "ns" if self.label.endswith("_ns") else ""


@dataclasses.dataclass
class Timeline:
    """A trace's events on tracks, host times in ns since capture start."""

    events: np.ndarray
    strings: list[str]
    scenes: dict[int, str]  #: scene id -> unique label
    start_ns: np.ndarray  #: GPU drift-corrected
    end_ns: np.ndarray  #: clamped so that spans nest
    slice_tracks: list[SliceTrack]
    counter_tracks: list[CounterTrack]
    clamped: int
    gpu_drift_ppm: float | None

    def name(self, sid: int) -> str:
        return self.strings[sid] if 0 <= sid < len(self.strings) else f"?{sid}"

    @property
    def span_count(self) -> int:
        return sum(len(t.spans) for t in self.slice_tracks)


#: Largest |time| (ns) mapped, keeping int64/float math in range.
_SYNC_LIMIT_NS = 2**61


def _sync_pairs(clock_syncs: Sequence[Mapping[str, JsonValue]]) -> list[tuple[int, int]]:
    pairs = []
    for rec in clock_syncs:
        h, g = rec.get("host_ns"), rec.get("gpu_ns")
        if (
            isinstance(h, int)
            and isinstance(g, int)
            and not isinstance(h, bool)
            and not isinstance(g, bool)
        ):
            pairs.append((h, g))
    return pairs


def gpu_to_host(
    start_ns: np.ndarray, clock_syncs: Sequence[Mapping[str, JsonValue]]
) -> tuple[np.ndarray, float | None]:
    """GPU times mapped piecewise through all CLOCK_SYNC pairs, removing drift: (host times,
    drift ppm), unchanged and None with under two usable pairs."""
    pairs = _sync_pairs(clock_syncs)
    t = np.asarray(start_ns, dtype=np.int64)
    if len(pairs) < 2 or not t.size:
        return t.copy(), None
    h0, g0 = pairs[0]
    if (
        any(abs(v) > _SYNC_LIMIT_NS for p in pairs for v in p)
        or max(abs(int(t.min()) - (h0 - g0)), abs(int(t.max()) - (h0 - g0))) > _SYNC_LIMIT_NS
    ):
        return t.copy(), None
    gpu = t - np.int64(h0 - g0)
    pairs = sorted(set(pairs), key=lambda p: p[1])
    gs = np.array([p[1] for p in pairs], dtype=np.int64)
    hs = np.array([p[0] for p in pairs], dtype=np.int64)
    if np.any(np.diff(gs) <= 0) or np.any(np.diff(hs) < 0):
        return t.copy(), None
    seg = np.clip(np.searchsorted(gs, gpu, side="right") - 1, 0, len(gs) - 2)
    slope = (hs[1:] - hs[:-1]).astype(np.float64) / (gs[1:] - gs[:-1]).astype(np.float64)
    delta = np.rint((gpu - gs[seg]).astype(np.float64) * slope[seg])
    if not (
        np.all(np.abs(delta) <= _SYNC_LIMIT_NS)
        and np.all(np.abs(hs[seg] + delta) <= _SYNC_LIMIT_NS)
    ):
        return t.copy(), None
    total = (hs[-1] - hs[0]) / (gs[-1] - gs[0])
    return hs[seg] + delta.astype(np.int64), (float(total) - 1.0) * 1e6


def nest(
    starts: Sequence[int], ends: Sequence[int], depths: Sequence[int]
) -> tuple[list[int], int]:
    """Clamp span ends so that spans nest; returns (new ends, how many changed)."""
    out = list(ends)
    stack: list[int] = []
    changed = 0
    for i in range(len(out)):
        s, d = starts[i], depths[i]
        while stack:
            top = stack[-1]
            te = out[top]
            if depths[top] < d and (te > s or (te == s and out[i] <= s)):
                break
            if te > s:
                out[top] = s
                changed += 1
            stack.pop()
        if stack and out[i] > out[stack[-1]]:
            out[i] = out[stack[-1]]
            changed += 1
        stack.append(i)
    return out, changed


def build_timeline(
    events: np.ndarray, strings: list[str], clock_syncs: Sequence[Mapping[str, JsonValue]] = ()
) -> Timeline:
    ev = np.asarray(events)
    labels = scene_labels(ev, strings)
    start = ev["start_ns"].astype(np.int64)
    gpu_rows = ev["clock"] == Clock.GPU
    drift: float | None = None
    if gpu_rows.any():
        mapped, drift = gpu_to_host(start[gpu_rows], clock_syncs)
        gpu_end, _ = gpu_to_host(
            start[gpu_rows] + ev["dur_ns"][gpu_rows].astype(np.int64), clock_syncs
        )
        start[gpu_rows] = mapped
        end = start + ev["dur_ns"].astype(np.int64)
        end[gpu_rows] = np.maximum(gpu_end, mapped)
    else:
        end = start + ev["dur_ns"].astype(np.int64)
    kind = ev["kind"]
    value_clock = np.isin(ev["clock"], list(VALUE_CLOCKS))
    is_span = ((kind == Kind.FRAME) | (kind == Kind.ZONE)) & ~value_clock
    is_instant = kind == Kind.MARKER
    is_value = (kind == Kind.COUNTER) | (((kind == Kind.FRAME) | (kind == Kind.ZONE)) & value_clock)
    # a kind newer than this build is left out
    end[~is_span] = start[~is_span]

    slice_tracks: list[SliceTrack] = []
    counter_tracks: list[CounterTrack] = []
    clamped = 0
    order_rank = {c: i for i, c in enumerate(CLOCK_ORDER)}
    by_scene = np.argsort(ev["scene"], kind="stable")
    scene_ids, firsts = np.unique(ev["scene"][by_scene], return_index=True)
    rows_of = (
        dict(zip(scene_ids.tolist(), np.split(by_scene, firsts[1:]), strict=True))
        if ev.size
        else {}
    )
    for sid, label in labels.items():
        of_scene = rows_of[sid]
        clock_of = ev["clock"][of_scene]
        clocks = sorted(
            {int(c) for c in np.unique(clock_of)}, key=lambda c: (order_rank.get(c, 99), c)
        )
        for clock in clocks:
            on = of_scene[clock_of == clock]
            span_idx = on[is_span[on]]
            inst_idx = on[is_instant[on]]
            if span_idx.size or inst_idx.size:
                span_idx = span_idx[np.lexsort((span_idx, ev["depth"][span_idx], start[span_idx]))]
                inst_idx = inst_idx[np.lexsort((inst_idx, start[inst_idx]))]
                new_ends, changed = nest(
                    start[span_idx].tolist(), end[span_idx].tolist(), ev["depth"][span_idx].tolist()
                )
                end[span_idx] = new_ends
                clamped += changed
                slice_tracks.append(SliceTrack(sid, label, clock, span_idx, inst_idx))
            value_idx = on[is_value[on]]
            if value_idx.size:
                vals = ev[value_idx]
                group_key = np.where(
                    vals["kind"] == Kind.COUNTER, 2, np.where(vals["kind"] == Kind.FRAME, 0, 1)
                )
                names, first = np.unique(
                    vals["name"].astype(np.int64) * 4 + group_key, return_index=True
                )
                for key in names[np.lexsort((first, names % 4))]:
                    name_id, group = int(key) // 4, int(key) % 4
                    rows = value_idx[(vals["name"] == name_id) & (group_key == group)]
                    rows = rows[np.lexsort((rows, start[rows]))]
                    name = strings[name_id] if 0 <= name_id < len(strings) else f"?{name_id}"
                    counter_tracks.append(
                        CounterTrack(sid, label, clock, name_id, name, rows, group != 2)
                    )
    return Timeline(ev, strings, labels, start, end, slice_tracks, counter_tracks, clamped, drift)


__all__ = [
    "CLOCK_ORDER",
    "CounterTrack",
    "SliceTrack",
    "Timeline",
    "build_timeline",
    "flag_names",
    "gpu_to_host",
    "nest",
]
