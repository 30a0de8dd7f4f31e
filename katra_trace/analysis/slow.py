"""Why a frame was slow: each stutter frame's one main cause (``stats --slow``, report, Perfetto).

Rule in docs/stats.md ("Why a frame was slow"): the first part, in :data:`KINDS` order, whose excess
over its own moving median explains :data:`EXPLAINS` of the frame's."""

from __future__ import annotations

import dataclasses
import heapq
from collections.abc import Callable, Sequence
from typing import TYPE_CHECKING

import numpy as np

from katra_trace.analysis.stats import (
    STUTTER_FACTOR,
    HeadedTrace,
    groups,
    measured,
    moving_median,
    scene_labels,
    stutter_frames,
)
from katra_trace.jsontext import JsonObject, record_dict
from katra_trace.metrics import CLOCK_NAMES, VALUE_CLOCKS, is_time, primary_clock_of
from katra_trace.schema import GC_NAME, Flag, Kind, draw_pass

if TYPE_CHECKING:
    from katra_trace.io.header import TraceHeader

ZONE, DRAW, BETWEEN, GC, MACHINE, UNKNOWN = (
    "zone",
    "draw",
    "between zones",
    "gc",
    "machine",
    "unknown",
)
KINDS: tuple[str, ...] = (ZONE, DRAW, BETWEEN, GC, MACHINE, UNKNOWN)
#: A replay's restart frame is flagged SETUP alone.
RESTART_FLAGS = int(Flag.SETUP | Flag.WARMUP)
EXPLAINS = 0.5
PERIOD_MIN_FRAMES = 3
PERIOD_SHARE = 0.5
NO_ZONES_NOTE = (
    "no zones recorded: a slow frame is put on the whole frame (between zones), a collection "
    "or the machine; capture with --zones to name the pass or draw"
)
#: Zone clocks per frame clock; wall takes cpu zones (a replay draws there); GPU and host never mix.
ZONE_CLOCKS: dict[str, tuple[str, ...]] = {
    "wall": ("wall", "cpu"),
    "cpu": ("cpu",),
    "gpu": ("gpu",),
}


def untimed_note(clocks: Sequence[str]) -> str:
    if not clocks:
        return "no measured frames: no slow frames to find"
    return (
        f"no frame times (frames on the {', '.join(clocks)} clock, a count): slow frames are a "
        f"time notion (over {STUTTER_FACTOR:g}x the moving median of frame time); capture without "
        "--measure to find them"
    )


def zone_note(clock: str, zone_clock: str | None, other: Sequence[str]) -> str | None:
    if zone_clock == clock:
        return None
    if zone_clock is not None:
        return (
            f"the zones are on the {zone_clock} clock (host time inside the frame; none on the "
            f"{clock} clock): between zones is the {clock} time outside them"
        )
    if other:
        return (
            f"zones recorded on the {', '.join(other)} clock only, not on the {clock} clock of the "
            "slow frames, which they do not split: a slow frame is put on the whole frame "
            "(between zones), a collection or the machine"
        )
    return NO_ZONES_NOTE


_NS_PER_MS = 1e6


@dataclasses.dataclass(frozen=True)
class Cause:
    """A :data:`KINDS` kind, a name (zone, draw, ``generation N``) and that part's excess."""

    kind: str
    name: str | None
    excess_ms: float

    def as_dict(self) -> JsonObject:
        return record_dict(self)

    @property
    def label(self) -> str:
        if self.name is None:
            return self.kind
        return (
            f"{self.kind} '{self.name}'"
            if self.kind in (ZONE, DRAW)
            else f"{self.kind} ({self.name})"
        )


@dataclasses.dataclass(frozen=True)
class SlowFrame:
    """Index (warmup counted), ms, ratio to the moving median, cause, start ns."""

    frame: int
    ms: float
    ratio: float
    cause: Cause
    start_ns: int

    def as_dict(self) -> JsonObject:
        return {
            "frame": self.frame,
            "ms": self.ms,
            "ratio": self.ratio,
            "cause": self.cause.as_dict(),
        }


@dataclasses.dataclass(frozen=True)
class CauseGroup:
    kind: str
    name: str | None
    count: int
    period: int | None
    first: int
    typical_excess_ms: float
    frames: tuple[int, ...]

    @property
    def label(self) -> str:
        return Cause(self.kind, self.name, 0.0).label

    @property
    def period_text(self) -> str:
        if self.period is None:
            return ""
        return "every frame" if self.period == 1 else f"every {ordinal(self.period)} frame"

    def as_dict(self) -> JsonObject:
        out = record_dict(self)
        out["period_text"] = self.period_text or None
        return out


@dataclasses.dataclass(frozen=True)
class SceneSlow:
    """``clock`` is None when no frame is on a time clock (:attr:`note` says why)."""

    scene: str
    clock: str | None
    frames: int
    zones: bool
    machine_known: bool
    slow: tuple[SlowFrame, ...]
    groups: tuple[CauseGroup, ...]
    zone_clock: str | None = None
    other_zone_clocks: tuple[str, ...] = ()
    frame_clocks: tuple[str, ...] = ()
    #: frames where a replay restarted (no slow frames, no statistics)
    restarts: tuple[int, ...] = ()

    @property
    def note(self) -> str | None:
        said = (
            untimed_note(self.frame_clocks)
            if self.clock is None
            else zone_note(self.clock, self.zone_clock, self.other_zone_clocks)
        )
        if not self.restarts:
            return said
        restart = (
            f"restarts: {restarts_text(self.restarts)} began a new replay of the trace (its "
            "context and compiles): left out of the statistics and the slow frames"
        )
        return f"{said}; {restart}" if said else restart

    def as_dict(self) -> JsonObject:
        return {
            "slow_clock": self.clock,
            "slow_zone_clock": self.zone_clock,
            "slow_frames": [s.as_dict() for s in self.slow],
            "slow_causes": [g.as_dict() for g in self.groups],
            "slow_note": self.note,
        }


def restarts_text(frames: Sequence[int]) -> str:
    more = " ..." if len(frames) > 10 else ""
    return f"frame{'s' if len(frames) > 1 else ''} {', '.join(map(str, frames[:10]))}{more}"


def ordinal(n: int) -> str:
    suffix = "th" if 10 <= n % 100 <= 20 else {1: "st", 2: "nd", 3: "rd"}.get(n % 10, "th")
    return f"{n}{suffix}"


def trace_slow_frames(trace: HeadedTrace) -> dict[str, SceneSlow]:
    """Every scene's slow frames, on the trace's primary time clock."""
    return header_slow_frames(trace.events, list(trace.strings), trace.header)


def header_slow_frames(
    events: np.ndarray, strings: list[str], header: TraceHeader
) -> dict[str, SceneSlow]:
    opts = header.capture_options

    def pick(available: Sequence[str]) -> str | None:
        return primary_clock_of(list(available), opts.measure.mode, opts.primary_clock)

    return slow_frames(events, strings, pick)


def slow_frames(
    events: np.ndarray,
    strings: list[str],
    pick: Callable[[Sequence[str]], str | None] | None = None,
) -> dict[str, SceneSlow]:
    """``{scene: SceneSlow}``; ``pick`` chooses among time clocks (default wall, gpu, cpu)."""
    ev = np.asarray(events)
    labels = scene_labels(ev, strings)
    kept = measured(ev)
    gc_ids = [i for i, s in enumerate(strings) if s == GC_NAME]
    marks = ev[(ev["kind"] == Kind.MARKER) & np.isin(ev["name"], gc_ids)] if gc_ids else ev[:0]
    out: dict[str, SceneSlow] = {}
    by_scene = groups(kept, "scene")
    for sid, label in labels.items():
        of_scene = by_scene.get(sid, kept[:0])
        is_frame = of_scene["kind"] == Kind.FRAME
        clocks = [CLOCK_NAMES.get(int(c), "") for c in np.unique(of_scene["clock"][is_frame])]
        spans = [c for c in clocks if is_time(c) and c not in VALUE_CLOCKS]
        clock = (pick or (lambda a: primary_clock_of(a)))(spans) if spans else None
        if clock is None or clock not in spans:
            if of_scene.size:
                untimed = tuple(c for c in clocks if c)
                out[label] = SceneSlow(
                    label, None, int(is_frame.sum()), False, False, (), (), None, (), untimed
                )
            continue
        out[label] = _scene(label, of_scene, clock, marks, strings)
    setup = ev[(ev["kind"] == Kind.FRAME) & ((ev["flags"] & RESTART_FLAGS) == int(Flag.SETUP))]
    for sid, label in labels.items():
        restarts = np.unique(setup["frame"][setup["scene"] == sid])
        if label in out and restarts.size:
            out[label] = dataclasses.replace(out[label], restarts=tuple(restarts.tolist()))
    return out


def _on(ev: np.ndarray, kind: Kind, clock: str) -> np.ndarray:
    cid = next(c for c, n in CLOCK_NAMES.items() if n == clock)
    pick = np.flatnonzero((ev["kind"] == kind) & (ev["clock"] == cid))
    ordered: np.ndarray = ev[pick[np.lexsort((ev["start_ns"][pick], ev["frame"][pick]))]]
    return ordered


def _aligned(idx: np.ndarray, at: np.ndarray, values: np.ndarray) -> np.ndarray:
    out = np.full(idx.size, np.nan)
    if at.size:
        pos = np.clip(np.searchsorted(idx, at), 0, max(idx.size - 1, 0))
        hit = idx[pos] == at
        out[pos[hit]] = values[hit]
    return out


def _excess(values: np.ndarray) -> np.ndarray:
    over: np.ndarray = values - moving_median(values)
    return over


def _covered(t: np.ndarray, a: np.ndarray, b: np.ndarray) -> np.ndarray:
    """Per time of ``t``: ns the spans ``a``..``b`` ran before it (prefix sums, not per pair)."""
    a, b = np.sort(a), np.sort(b)
    began, ended = np.searchsorted(a, t, side="left"), np.searchsorted(b, t, side="right")
    sum_a, sum_b = np.concatenate([[0.0], np.cumsum(a)]), np.concatenate([[0.0], np.cumsum(b)])
    out: np.ndarray = sum_b[ended] - sum_a[began] + (began - ended) * t
    return out


def _gc_time(start: np.ndarray, end: np.ndarray, marks: np.ndarray) -> np.ndarray:
    if not marks.size:
        return np.zeros(start.size)
    a = marks["start_ns"].astype(np.float64)
    b = a + marks["dur_ns"].astype(np.float64)
    origin = a.min()  # small numbers keep the prefix sums exact
    a, b = a - origin, b - origin
    ns: np.ndarray = np.maximum(_covered(end - origin, a, b) - _covered(start - origin, a, b), 0.0)
    return ns


def _generations(start: np.ndarray, end: np.ndarray, marks: np.ndarray) -> list[int]:
    """Per frame, the highest generation collected in it (-1: none)."""
    values = marks["value"]
    ok = np.isfinite(values) & (values >= 0) & (values <= 2**31)
    gen = np.where(ok, values, -1).astype(np.int64).tolist()
    a = marks["start_ns"].astype(np.float64)
    b = (a + marks["dur_ns"].astype(np.float64)).tolist()
    order = np.argsort(a, kind="stable").tolist()
    a = a.tolist()
    heap: list[tuple[int, float]] = []
    out, j = [], 0
    for s, e in zip(start.tolist(), end.tolist(), strict=True):
        while j < len(order) and a[order[j]] < e:
            heapq.heappush(heap, (-gen[order[j]], b[order[j]]))
            j += 1
        while heap and heap[0][1] <= s:  # frames come in start order
            heapq.heappop(heap)
        out.append(-heap[0][0] if heap else -1)
    return out


def _scene(
    label: str, ev: np.ndarray, clock: str, marks: np.ndarray, strings: Sequence[str]
) -> SceneSlow:
    frames = _on(ev, Kind.FRAME, clock)
    idx = frames["frame"].astype(np.int64)
    d = frames["dur_ns"].astype(np.float64)
    zone_clocks = [
        CLOCK_NAMES.get(int(c), "") for c in np.unique(ev["clock"][ev["kind"] == Kind.ZONE])
    ]
    zone_clock = next((c for c in ZONE_CLOCKS.get(clock, (clock,)) if c in zone_clocks), None)
    other = tuple(c for c in zone_clocks if c != zone_clock)
    zones = _on(ev, Kind.ZONE, zone_clock) if zone_clock is not None else ev[:0]
    process = _on(ev, Kind.FRAME, "process") if clock == "wall" else ev[:0]
    slow, med = stutter_frames(d)
    has_zones = bool(zones.size)
    if not slow.any():
        return SceneSlow(
            label, clock, int(d.size), has_zones, bool(process.size), (), (), zone_clock, other
        )
    excess = d - med
    where = np.flatnonzero(slow)
    start = frames["start_ns"].astype(np.float64)
    end = start + d
    if clock == "gpu":  # collections run on the cpu spans
        host = _on(ev, Kind.FRAME, "cpu")
        at = host["frame"].astype(np.int64)
        cpu_start = _aligned(idx, at, host["start_ns"].astype(np.float64))
        length = _aligned(idx, at, host["dur_ns"].astype(np.float64))
        start = np.where(np.isnan(cpu_start), start, cpu_start)
        end = start + np.where(np.isnan(length), d, length)
    gc_excess = _excess(_gc_time(start, end, marks))
    gc_slow = [k for k in where.tolist() if gc_excess[k] >= EXPLAINS * excess[k]]
    gc_gen = dict(zip(gc_slow, _generations(start[gc_slow], end[gc_slow], marks), strict=True))
    machine = np.full(d.size, False)
    gap_excess = np.zeros(d.size)
    if process.size:
        cpu = _aligned(idx, process["frame"].astype(np.int64), process["dur_ns"].astype(np.float64))
        typical_cpu = moving_median(cpu)
        with np.errstate(divide="ignore", invalid="ignore"):
            pace = np.where(typical_cpu > 0, med / typical_cpu, np.nan)
        # wall time not accounted for by CPU time at the usual pace; machine when the frame's
        # own extra work would not have made it slow
        gap_excess = d - cpu * pace
        machine = (
            (gap_excess > med)
            & (gap_excess >= EXPLAINS * excess)
            & (excess - gap_excess <= (STUTTER_FACTOR - 1.0) * med)
        )
    top_zone = _top_zones(zones, idx[where], EXPLAINS * excess[where], strings) if has_zones else {}
    between = d.copy()
    if has_zones:
        top = zones[zones["depth"] == 1]
        covered = np.zeros(d.size)
        pos = np.clip(np.searchsorted(idx, top["frame"]), 0, d.size - 1)
        hit = idx[pos] == top["frame"]
        np.add.at(covered, pos[hit], top["dur_ns"][hit].astype(np.float64))
        between = d - covered
    between_excess = _excess(between)
    found: list[SlowFrame] = []
    for j, k in enumerate(where.tolist()):
        half = EXPLAINS * excess[k]
        if gc_excess[k] >= half:
            cause = Cause(GC, f"generation {gc_gen[k]}", float(gc_excess[k]) / _NS_PER_MS)
        elif has_zones:
            cause = _zoned_cause(
                float(excess[k]),
                top_zone.get(j),
                float(between_excess[k]),
                bool(machine[k]),
                float(gap_excess[k]),
            )
        elif machine[k]:
            cause = Cause(MACHINE, None, float(gap_excess[k]) / _NS_PER_MS)
        else:
            cause = Cause(BETWEEN, None, float(excess[k]) / _NS_PER_MS)
        found.append(
            SlowFrame(
                int(idx[k]),
                float(d[k]) / _NS_PER_MS,
                float(d[k] / med[k]) if med[k] > 0 else float("inf"),
                cause,
                int(frames["start_ns"][k]),
            )
        )
    return SceneSlow(
        label,
        clock,
        int(d.size),
        has_zones,
        bool(process.size),
        tuple(found),
        group_causes(found),
        zone_clock,
        other,
    )


def _top_zones(
    zones: np.ndarray, slow_idx: np.ndarray, half: np.ndarray, strings: Sequence[str]
) -> dict[int, tuple[float, str, str]]:
    """Per slow frame: the deepest, then largest, zone over its median by ``half``, as
    (excess ns, kind, name)."""
    by_name = groups(zones, "name")
    names = {nid: strings[nid] if 0 <= nid < len(strings) else f"?{nid}" for nid in by_name}
    passes = set(names.values())
    at_j, depth, value, part = [], [], [], []
    for p, z in enumerate(by_name.values()):
        at, inverse = np.unique(z["frame"].astype(np.int64), return_inverse=True)
        totals = np.zeros(at.size)
        np.add.at(totals, inverse, z["dur_ns"].astype(np.float64))
        pos = np.minimum(np.searchsorted(slow_idx, at), slow_idx.size - 1)
        hit = slow_idx[pos] == at
        if hit.any():
            at_j.append(pos[hit])
            value.append(_excess(totals)[hit])
            depth.append(np.full(int(hit.sum()), int(z["depth"].min())))
            part.append(np.full(int(hit.sum()), p))
    if not at_j:
        return {}
    j, d, v, q = (np.concatenate(x) for x in (at_j, depth, value, part))
    keep = v >= half[j]
    j, d, v, q = j[keep], d[keep], v[keep], q[keep]
    order = np.lexsort((-q, v, d, j))
    last = order[np.r_[j[order][1:] != j[order][:-1], True]] if order.size else order
    ids = list(by_name)
    out = {}
    for k in last.tolist():
        name = names[ids[int(q[k])]]
        kind = DRAW if draw_pass(name, passes) is not None else ZONE
        out[int(j[k])] = (float(v[k]), kind, name)
    return out


def _zoned_cause(
    excess: float,
    best: tuple[float, str, str] | None,
    between: float,
    machine: bool,
    gap: float,
) -> Cause:
    half = EXPLAINS * excess
    if best is not None and best[0] >= between:
        if machine:
            return Cause(MACHINE, None, gap / _NS_PER_MS)
        return Cause(best[1], best[2], best[0] / _NS_PER_MS)
    if between >= half:
        return Cause(BETWEEN, None, between / _NS_PER_MS)
    if machine:
        return Cause(MACHINE, None, gap / _NS_PER_MS)
    return Cause(UNKNOWN, None, excess / _NS_PER_MS)


def period_of(frames: Sequence[int]) -> tuple[int | None, int]:
    """(period, first frame): the gcd of the gaps when enough frames fill it, else None."""
    first = int(frames[0]) if frames else 0
    if len(frames) < PERIOD_MIN_FRAMES:
        return None, first
    gaps = np.diff(np.asarray(frames, dtype=np.int64))
    g = int(np.gcd.reduce(gaps))
    if g <= 0 or len(frames) < PERIOD_SHARE * ((int(frames[-1]) - first) // g + 1):
        return None, first
    return g, first


def group_causes(found: Sequence[SlowFrame]) -> tuple[CauseGroup, ...]:
    """Most frequent cause first, then by typical excess."""
    by: dict[tuple[str, str | None], list[SlowFrame]] = {}
    for s in found:
        by.setdefault((s.cause.kind, s.cause.name), []).append(s)
    groups = []
    for (kind, name), members in by.items():
        frames = sorted(s.frame for s in members)
        period, first = period_of(frames)
        typical = float(np.median([s.cause.excess_ms for s in members]))
        groups.append(CauseGroup(kind, name, len(members), period, first, typical, tuple(frames)))
    groups.sort(key=lambda g: (-g.count, -g.typical_excess_ms))
    return tuple(groups)


__all__ = [
    "BETWEEN",
    "Cause",
    "CauseGroup",
    "DRAW",
    "EXPLAINS",
    "GC",
    "KINDS",
    "MACHINE",
    "NO_ZONES_NOTE",
    "SceneSlow",
    "SlowFrame",
    "UNKNOWN",
    "ZONE",
    "ZONE_CLOCKS",
    "group_causes",
    "header_slow_frames",
    "ordinal",
    "period_of",
    "slow_frames",
    "trace_slow_frames",
    "untimed_note",
    "zone_note",
]
