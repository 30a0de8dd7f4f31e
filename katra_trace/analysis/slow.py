"""Why a frame was slow: every slow frame of a scene with its one main cause, from the trace alone.

A **slow frame** is a stutter (:func:`katra_trace.analysis.stats.stutter_frames`, the one rule:
longer than 2.5 x the moving median of 31 frames), on the scene's primary time clock (``wall`` in
sync mode, ``gpu`` in gpu mode). Its **excess** is what it took over that moving median. Each part
of the frame has an excess of its own, over its own moving median: a zone's (or draw's) per-frame
total, the time not covered by zones (``between zones``), the time collections ran in it (``gc``,
from the markers the harness records), and the wall time not matched by process CPU time (the
process was not running). The main cause is the first of these that explains at least
:data:`EXPLAINS` of the frame's excess, in this order:

1. ``gc``: collections ran in the frame for that long (the name says the generation: 2 is a full
   one);
2. with zones, the zone or draw (``draw``: a ``--zones draws`` zone) over its own moving median by
   the most, the deepest one when a pass and a draw inside it both explain it; but ``machine``
   instead when that time was not CPU time either (a pass's GL work runs on the CPU under
   llvmpipe: a pass that grew with no CPU to show for it waited for the machine);
3. with zones, ``between zones``: the scene's own code between its zones (Python work, a blocking
   call: a sleep there is the scene's, so idle time between zones is charged to it);
4. ``machine``: wall time exceeded what the frame's process CPU time accounts for by more than the
   frame's typical time (its moving median), and that gap explains the excess. CPU time accounts for
   wall time at the scene's usual pace (moving median of wall over moving median of process CPU
   time: 1 for one busy thread on an idle machine, less with rasterizer threads in parallel, more on
   a loaded machine); and the frame's extra work alone (its excess less that gap) would not have
   made it slow. So a frame that did much more work, and was preempted for it on a busy machine, is
   put on its work; one that lost its time while not running, on the machine. Sync-mode captures
   record the process clock; gpu-mode ones cannot say ``machine``;
5. without zones, ``between zones`` for the whole frame; with zones, ``unknown``.

The zones that split a frame are those on its clock, or for a wall frame those on the cpu clock when
it has none on wall (:data:`ZONE_CLOCKS`: a replay's draw zones). Without zones a blocking call in
the scene's code and a stopped process look alike (both are ``machine``); :attr:`SceneSlow.note`
says that ``--zones`` would tell more, or on which clock the zones are. A scene whose frames are
counts (no time clock) has no slow frames, and its note says so. Causes that recur are grouped
(:class:`CauseGroup`), with a period when they come regularly ("every 9th frame"). Pure numpy, no
GL, no I/O: ``stats --slow``, the report and the Perfetto export call it.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable, Sequence
from typing import Any, Protocol

import numpy as np

from katra_trace.analysis.stats import (
    STUTTER_FACTOR,
    measured,
    moving_median,
    scene_labels,
    stutter_frames,
)
from katra_trace.jsontext import record_dict
from katra_trace.metrics import CLOCK_NAMES, VALUE_CLOCKS, is_time, primary_clock_of
from katra_trace.schema import GC_NAME, Flag, Kind, draw_pass

#: The kinds of cause, in the order of the rule (docs/stats.md, "Why a frame was slow").
ZONE, DRAW, BETWEEN, GC, MACHINE, UNKNOWN = (
    "zone",
    "draw",
    "between zones",
    "gc",
    "machine",
    "unknown",
)
KINDS: tuple[str, ...] = (ZONE, DRAW, BETWEEN, GC, MACHINE, UNKNOWN)
#: A replay's restart frame is flagged SETUP alone (a warmup frame is left out anyway).
RESTART_FLAGS = int(Flag.SETUP | Flag.WARMUP)
#: A part of the frame is its main cause when its own excess is at least this share of the frame's.
EXPLAINS = 0.5
#: Fewest frames of one cause for a period to be named.
PERIOD_MIN_FRAMES = 3
#: Share of the frames of its period (from its first frame to its last) that a cause must have taken
#: for the period to be named: the others may have been slower for another reason, or not slow
#: enough.
PERIOD_SHARE = 0.5
#: What a scene without zones is told.
NO_ZONES_NOTE = (
    "no zones recorded: a slow frame is put on the whole frame (between zones), a collection "
    "or the machine; capture with --zones to name the pass or draw"
)
#: The clocks whose zones split a frame of each time clock, first choice first: the frame's own; for
#: a wall frame also the cpu clock's (host-clock spans inside the frame: a replay records its draw
#: zones there alone, the replayer's time inside each call). GPU time is not split by host time, nor
#: host time by GPU time.
ZONE_CLOCKS: dict[str, tuple[str, ...]] = {
    "wall": ("wall", "cpu"),
    "cpu": ("cpu",),
    "gpu": ("gpu",),
}


def untimed_note(clocks: Sequence[str]) -> str:
    """What a scene with no frame on a time clock is told: its frames are counts (a ``--measure``
    capture), or it has no measured frames at all."""
    if not clocks:
        return "no measured frames: no slow frames to find"
    return (
        f"no frame times (frames on the {', '.join(clocks)} clock, a count): slow frames are a "
        f"time notion (over {STUTTER_FACTOR:g}x the moving median of frame time); capture without "
        "--measure to find them"
    )


def zone_note(clock: str, zone_clock: str | None, other: Sequence[str]) -> str | None:
    """What a scene on frame clock ``clock`` is told about its zones: none when they are on that
    clock; which clock they are on when another (``zone_clock``, used; ``other``, zones not used);
    else :data:`NO_ZONES_NOTE`."""
    if zone_clock == clock:
        return None
    if zone_clock is not None:
        return (
            f"the zones are on the {zone_clock} clock (host time inside the frame; none on the "
            f"{clock} clock): "
            f"between zones is the {clock} time outside them"
        )
    if other:
        return (
            f"zones recorded on the {', '.join(other)} clock only, not on the {clock} clock of the "
            "slow "
            "frames, which they do not split: a slow frame is put on the whole frame (between "
            "zones), a "
            "collection or the machine"
        )
    return NO_ZONES_NOTE


_NS_PER_MS = 1e6


@dataclasses.dataclass(frozen=True)
class Cause:
    """The main cause of one slow frame: ``kind`` (one of :data:`KINDS`), ``name`` (the zone's or
    draw's name, ``generation N`` for gc, else None) and ``excess_ms``, how much longer that part
    took than usual."""

    kind: str
    name: str | None
    excess_ms: float

    def as_dict(self) -> dict[str, Any]:
        return record_dict(self)

    @property
    def label(self) -> str:
        """``zone 'shade'``, ``gc (generation 2)``, ``between zones``: the cause as text."""
        if self.name is None:
            return self.kind
        return (
            f"{self.kind} '{self.name}'"
            if self.kind in (ZONE, DRAW)
            else f"{self.kind} ({self.name})"
        )


@dataclasses.dataclass(frozen=True)
class SlowFrame:
    """One slow frame: its index as the scene saw it (``frame.index``, warmup counted), its time
    (ms), ``ratio`` to the moving median, its main cause, and where it starts (ns since the capture
    start)."""

    frame: int
    ms: float
    ratio: float
    cause: Cause
    start_ns: int

    def as_dict(self) -> dict[str, Any]:
        """``{frame, ms, ratio, cause: {kind, name, excess_ms}}`` (the JSON of ``stats --slow``)."""
        return {
            "frame": self.frame,
            "ms": self.ms,
            "ratio": self.ratio,
            "cause": self.cause.as_dict(),
        }


@dataclasses.dataclass(frozen=True)
class CauseGroup:
    """The slow frames of one cause (kind and name): how many, their period when regular (every
    ``period``-th frame, from ``first``), their typical (median) excess, and which frames."""

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
        """``every 9th frame`` (``every frame``, ``every 2nd frame``), or ``""`` when irregular."""
        if self.period is None:
            return ""
        return "every frame" if self.period == 1 else f"every {ordinal(self.period)} frame"

    def as_dict(self) -> dict[str, Any]:
        out = record_dict(self)
        out["period_text"] = self.period_text or None
        return out


@dataclasses.dataclass(frozen=True)
class SceneSlow:
    """A scene's slow frames on ``clock`` of its ``frames`` measured ones, their causes grouped;
    ``zones``: whether zones split its frames, those of ``zone_clock`` (:data:`ZONE_CLOCKS`);
    ``other_zone_clocks``: clocks with zones that do not split them; ``machine_known``: whether it
    recorded process CPU time (so that ``machine`` could be said). ``clock`` is None for a scene
    with no frame on a time clock (its frames are on ``frame_clocks``, counts): it has no slow
    frames, and :attr:`note` says why."""

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
    #: frames where a replay restarted its trace (flagged SETUP: no slow frames, no statistics)
    restarts: tuple[int, ...] = ()

    @property
    def note(self) -> str | None:
        """What the output says beside the causes: why there are none (no frame times), or where the
        zones were (none: ``--zones`` would tell more; on another clock), and the restarts."""
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

    def as_dict(self) -> dict[str, Any]:
        """``slow_frames`` (every slow frame), ``slow_causes`` (the groups), ``slow_clock``,
        ``slow_zone_clock`` and ``slow_note``."""
        return {
            "slow_clock": self.clock,
            "slow_zone_clock": self.zone_clock,
            "slow_frames": [s.as_dict() for s in self.slow],
            "slow_causes": [g.as_dict() for g in self.groups],
            "slow_note": self.note,
        }


def restarts_text(frames: Sequence[int]) -> str:
    """``frame 6`` or ``frames 6, 12, 18`` (the first ten, then ``...``)."""
    more = " ..." if len(frames) > 10 else ""
    return f"frame{'s' if len(frames) > 1 else ''} {', '.join(map(str, frames[:10]))}{more}"


def ordinal(n: int) -> str:
    """``1st``, ``2nd``, ``3rd``, ``4th``, ``11th``, ``22nd``."""
    suffix = "th" if 10 <= n % 100 <= 20 else {1: "st", 2: "nd", 3: "rd"}.get(n % 10, "th")
    return f"{n}{suffix}"


class TraceLike(Protocol):
    events: np.ndarray
    strings: list[str]
    header: Any


def trace_slow_frames(trace: TraceLike) -> dict[str, SceneSlow]:
    """The slow frames of every scene of an opened trace, on its primary time clock (the clock
    :func:`katra_trace.metrics.primary_clock_of` picks among ``wall``, ``gpu`` and ``cpu``)."""
    return header_slow_frames(trace.events, list(trace.strings), trace.header)


def header_slow_frames(events: np.ndarray, strings: list[str], header: Any) -> dict[str, SceneSlow]:
    """:func:`trace_slow_frames` of events and strings, the clock chosen by ``header``'s capture
    options.
    """
    opts = header.capture_options

    def pick(available: Sequence[str]) -> str | None:
        return primary_clock_of(list(available), opts.measure.mode, opts.primary_clock)

    return slow_frames(events, strings, pick)


def slow_frames(
    events: np.ndarray,
    strings: list[str],
    pick: Callable[[Sequence[str]], str | None] | None = None,
) -> dict[str, SceneSlow]:
    """``{scene label: SceneSlow}`` of an event array; ``pick`` chooses the clock among the time
    clocks a scene has (default: the first of wall, gpu, cpu). A scene with measured frames or zones
    but no frame on a time clock has ``clock`` None and no slow frames; scenes with neither are
    absent."""
    ev = np.asarray(events)
    labels = scene_labels(ev, strings)
    kept = measured(ev)
    gc_ids = [i for i, s in enumerate(strings) if s == GC_NAME]
    marks = ev[(ev["kind"] == Kind.MARKER) & np.isin(ev["name"], gc_ids)] if gc_ids else ev[:0]
    marks = marks[np.argsort(marks["start_ns"], kind="stable")]
    out: dict[str, SceneSlow] = {}
    for sid, label in labels.items():
        of_scene = kept[kept["scene"] == sid]
        frames = of_scene[of_scene["kind"] == Kind.FRAME]
        clocks = [CLOCK_NAMES.get(int(c), "") for c in np.unique(frames["clock"])]
        spans = [c for c in clocks if is_time(c) and c not in VALUE_CLOCKS]
        clock = (pick or (lambda a: primary_clock_of(a)))(spans) if spans else None
        if clock is None or clock not in spans:
            if (
                of_scene.size
                and ((of_scene["kind"] == Kind.FRAME) | (of_scene["kind"] == Kind.ZONE)).any()
            ):
                out[label] = SceneSlow(
                    label,
                    None,
                    int(frames.size),
                    False,
                    False,
                    (),
                    (),
                    frame_clocks=tuple(c for c in clocks if c),
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
    sel = ev[(ev["kind"] == kind) & (ev["clock"] == cid)]
    ordered: np.ndarray = sel[np.lexsort((sel["start_ns"], sel["frame"]))]
    return ordered


def _aligned(idx: np.ndarray, at: np.ndarray, values: np.ndarray) -> np.ndarray:
    """``values`` (one per frame index of ``at``) at each of ``idx`` (sorted); NaN where absent."""
    out = np.full(idx.size, np.nan)
    if at.size:
        pos = np.clip(np.searchsorted(idx, at), 0, max(idx.size - 1, 0))
        hit = idx[pos] == at
        out[pos[hit]] = values[hit]
    return out


def _excess(values: np.ndarray) -> np.ndarray:
    """Each value over the moving median of its series (the stutter window)."""
    over: np.ndarray = values - moving_median(values)
    return over


def _gc_time(
    start: np.ndarray, end: np.ndarray, marks: np.ndarray
) -> tuple[np.ndarray, np.ndarray]:
    """Per frame (spans ``start``..``end``, in order): ns of collections inside it, and the highest
    generation collected (-1: none)."""
    ns = np.zeros(start.size)
    gen = np.full(start.size, -1, dtype=np.int64)
    m0 = marks["start_ns"].astype(np.int64)
    m1 = m0 + marks["dur_ns"].astype(np.int64)
    for a, b, g in zip(m0.tolist(), m1.tolist(), marks["value"].tolist(), strict=True):
        k = max(int(np.searchsorted(start, a, side="right")) - 1, 0)
        while k < start.size and start[k] < b:
            overlap = min(int(end[k]), b) - max(int(start[k]), a)
            if overlap > 0:
                ns[k] += overlap
                gen[k] = max(int(gen[k]), int(g))
            k += 1
    return ns, gen


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
    # the frame's host span (gpu frames: their cpu span, where the collections ran)
    host = _on(ev, Kind.FRAME, "cpu") if clock == "gpu" else frames
    start = _aligned(idx, host["frame"].astype(np.int64), host["start_ns"].astype(np.float64))
    length = _aligned(idx, host["frame"].astype(np.int64), host["dur_ns"].astype(np.float64))
    start = np.where(np.isnan(start), frames["start_ns"], start)
    end = start + np.where(np.isnan(length), d, length)
    gc_ns, gc_gen = _gc_time(start, end, marks)
    gc_excess = _excess(gc_ns)
    machine = np.full(d.size, False)
    gap_excess = np.zeros(d.size)
    if process.size:
        cpu = _aligned(idx, process["frame"].astype(np.int64), process["dur_ns"].astype(np.float64))
        typical_cpu = moving_median(cpu)
        with np.errstate(divide="ignore", invalid="ignore"):
            pace = np.where(typical_cpu > 0, med / typical_cpu, np.nan)
        # the wall time its CPU time does not account for, at the scene's usual pace of wall per
        # CPU ns
        gap_excess = d - cpu * pace
        # ... and the frame's extra work alone (its excess less that gap) would not have made it
        # slow
        machine = (
            (gap_excess > med)
            & (gap_excess >= EXPLAINS * excess)
            & (excess - gap_excess <= (STUTTER_FACTOR - 1.0) * med)
        )
    zone_parts = _zone_parts(zones, idx[where], strings) if has_zones else []
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
            cause = Cause(GC, f"generation {int(gc_gen[k])}", float(gc_excess[k]) / _NS_PER_MS)
        elif has_zones:
            cause = _zoned_cause(
                j,
                float(excess[k]),
                zone_parts,
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


#: One zone's part in the slow frames: (depth, kind, name, excess ns at each slow frame, NaN where
#: absent).
_ZonePart = tuple[int, str, str, np.ndarray]


def _zone_parts(zones: np.ndarray, slow_idx: np.ndarray, strings: Sequence[str]) -> list[_ZonePart]:
    """Each zone's per-frame total over its own moving median, at the slow frames; a zone named as a
    draw of one of the others (``--zones draws``) is a draw."""
    parts: list[_ZonePart] = []
    ids = np.unique(zones["name"]).tolist()
    names = {nid: strings[nid] if 0 <= nid < len(strings) else f"?{nid}" for nid in ids}
    passes = set(names.values())
    for nid in ids:
        z = zones[zones["name"] == nid]
        at, inverse = np.unique(z["frame"].astype(np.int64), return_inverse=True)
        totals = np.zeros(at.size)
        np.add.at(totals, inverse, z["dur_ns"].astype(np.float64))
        over = _excess(totals)
        pos = np.clip(np.searchsorted(at, slow_idx), 0, at.size - 1)
        ex = np.where(at[pos] == slow_idx, over[pos], np.nan)
        name = names[nid]
        parts.append(
            (int(z["depth"].min()), DRAW if draw_pass(name, passes) is not None else ZONE, name, ex)
        )
    return parts


def _zoned_cause(
    j: int, excess: float, parts: Sequence[_ZonePart], between: float, machine: bool, gap: float
) -> Cause:
    half = EXPLAINS * excess
    best: tuple[int, float, str, str] | None = None
    for depth, kind, name, ex in parts:
        value = float(ex[j])
        if value >= half and (best is None or (depth, value) > best[:2]):
            best = (depth, value, kind, name)
    if best is not None and best[1] >= between:
        if machine:
            return Cause(MACHINE, None, gap / _NS_PER_MS)
        return Cause(best[2], best[3], best[1] / _NS_PER_MS)
    if between >= half:
        return Cause(BETWEEN, None, between / _NS_PER_MS)
    if machine:
        return Cause(MACHINE, None, gap / _NS_PER_MS)
    return Cause(UNKNOWN, None, excess / _NS_PER_MS)


def period_of(frames: Sequence[int]) -> tuple[int | None, int]:
    """The period of a cause's frames (sorted indices) and its first frame: the greatest common
    divisor ``g`` of the gaps between them, when there are at least :data:`PERIOD_MIN_FRAMES` frames
    and they are at least :data:`PERIOD_SHARE` of the frames ``first, first + g, ...`` up to the
    last; else None."""
    first = int(frames[0]) if frames else 0
    if len(frames) < PERIOD_MIN_FRAMES:
        return None, first
    gaps = np.diff(np.asarray(frames, dtype=np.int64))
    g = int(np.gcd.reduce(gaps))
    if g <= 0 or len(frames) < PERIOD_SHARE * ((int(frames[-1]) - first) // g + 1):
        return None, first
    return g, first


def group_causes(found: Sequence[SlowFrame]) -> tuple[CauseGroup, ...]:
    """The slow frames grouped by cause (kind and name), most frequent first, then by typical
    excess.
    """
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
