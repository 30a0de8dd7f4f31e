"""A small trace with every kind of row the exporters handle, and a reader of Perfetto output (no
GL).
"""

from __future__ import annotations

from collections import defaultdict
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

from katra_trace import Clock, Flag, Kind
from katra_trace.schema import EVENT_DTYPE
from tests.trace_helpers import write_trace

STRINGS = [
    "",
    "frame",
    "lit",
    "draw",
    "shadow",
    "setup",
    "reference",
    "frame_interval_ns",
    "Ir",
    "D1mr",
    "alpha",
    "beta",
    "gamma",
]
S = {s: i for i, s in enumerate(STRINGS)}
HOST0, GPU0 = 1_000_000, 5_000_000_000
HOST1, GPU1 = 901_000_000, 5_899_910_000  # the GPU clock runs 100 ppm slow


def rich_events() -> np.ndarray:
    """Scene alpha: wall+cpu frames with nested zones, warmup, setup and reference markers, a
    counter. Scene beta: gpu frames and zones (times as the capture stores them: mapped with the
    first sync pair). Scene gamma: instructions and cycles frames and zones, and cache counters."""
    rows: list[tuple[Any, ...]] = []
    rows.append(
        (Kind.MARKER, Clock.WALL, Flag.SETUP, 0, S["alpha"], S["setup"], 0, 0, 500_000, 0.0)
    )
    t = 1_000_000
    for i in range(8):
        flags = Flag.WARMUP if i < 2 else 0
        for clock in (Clock.WALL, Clock.CPU):
            dur = 4_000_000 if clock == Clock.WALL else 1_000_000
            rows.append((Kind.FRAME, clock, flags, 0, S["alpha"], S["frame"], i, t, dur, 0.0))
            rows.append((Kind.ZONE, clock, flags, 1, S["alpha"], S["lit"], i, t, dur // 2, 0.0))
            rows.append(
                (Kind.ZONE, clock, flags, 2, S["alpha"], S["draw"], i, t + 10, dur // 4, 0.0)
            )
            rows.append(
                (
                    Kind.ZONE,
                    clock,
                    flags,
                    1,
                    S["alpha"],
                    S["shadow"],
                    i,
                    t + dur // 2,
                    dur // 2,
                    0.0,
                )
            )
        rows.append(
            (
                Kind.COUNTER,
                Clock.CPU,
                0,
                0,
                S["alpha"],
                S["frame_interval_ns"],
                i,
                t,
                0,
                4_100_000.0 + i,
            )
        )
        if i % 4 == 3:
            rows.append(
                (
                    Kind.MARKER,
                    Clock.WALL,
                    Flag.REFERENCE,
                    0,
                    S["alpha"],
                    S["reference"],
                    i,
                    t + 4_050_000,
                    30_000,
                    0.0,
                )
            )
        t += 4_100_000
    off = HOST0 - GPU0
    for i in range(6):
        g = GPU0 + 50_000_000 + i * 150_000_000
        rows.append(
            (Kind.FRAME, Clock.GPU, 0, 0, S["beta"], S["frame"], i, g + off, 2_000_000, 0.0)
        )
        rows.append(
            (Kind.ZONE, Clock.GPU, 0, 1, S["beta"], S["draw"], i, g + 100 + off, 1_000_000, 0.0)
        )
    for i in range(5):
        tt = 950_000_000 + i * 1_000_000
        rows.append(
            (
                Kind.FRAME,
                Clock.INSTRUCTIONS,
                0,
                0,
                S["gamma"],
                S["frame"],
                i,
                tt,
                1_000_000 + i,
                0.0,
            )
        )
        rows.append(
            (Kind.ZONE, Clock.INSTRUCTIONS, 0, 1, S["gamma"], S["draw"], i, tt, 600_000 + i, 0.0)
        )
        rows.append(
            (
                Kind.FRAME,
                Clock.CYCLES,
                Flag.ESTIMATED,
                0,
                S["gamma"],
                S["frame"],
                i,
                tt,
                2_000_000 + i,
                0.0,
            )
        )
        rows.append(
            (Kind.COUNTER, Clock.CYCLES, 0, 0, S["gamma"], S["Ir"], i, tt, 0, 1_000_000.0 + i)
        )
        rows.append((Kind.COUNTER, Clock.CYCLES, 0, 0, S["gamma"], S["D1mr"], i, tt, 0, 100.0 + i))
    return np.array(rows, dtype=EVENT_DTYPE)


HEADER = {
    "workload": "export-test",
    "capture_options": {"timing_mode": "sync", "timing_reason": "a test says so", "size": [64, 64]},
    "host_info": {"gl": {"renderer": "test renderer"}, "system": {"cpu_model": "test cpu"}},
}
SYNCS = [
    {"label": "start", "host_ns": HOST0, "gpu_ns": GPU0},
    {"label": "end", "host_ns": HOST1, "gpu_ns": GPU1},
]


def write_rich(path: Path) -> np.ndarray:
    """Write the rich trace (with both clock-sync pairs) to ``path``; returns its events."""
    events = rich_events()
    w = write_trace(path, events, STRINGS, header=HEADER, finish=False)
    for rec in SYNCS:
        w.clock_sync(rec)
    w.finish({"note": "test"})
    return events


def gpu_expected(stored_ns: int) -> int:
    """Where a GPU row's stored time belongs on the host clock, given both pairs (independent
    formula).
    """
    g = stored_ns - (HOST0 - GPU0)
    return HOST0 + round((g - GPU0) * (HOST1 - HOST0) / (GPU1 - GPU0))


@dataclass
class Slice:
    track: str
    name: str
    ts: int
    dur: int
    depth: int
    args: dict[str, Any] = field(default_factory=dict)


@dataclass
class ParsedPerfetto:
    """What a Perfetto trace holds, rebuilt from its packets the way a viewer would."""

    tracks: dict[int, dict[str, Any]]  #: uuid -> {name, parent, counter}
    slices: list[Slice]
    instants: list[Slice]
    counters: dict[str, list[tuple[int, float]]]  #: counter track name -> (ts, value)
    problems: list[str]
    packets: int


def _args(te: Any, names: dict[int, str]) -> dict[str, Any]:
    out: dict[str, Any] = {}
    for a in te.debug_annotations:
        key = a.name or names.get(a.name_iid, f"?{a.name_iid}")
        which = a.WhichOneof("value")
        out[key] = getattr(a, which) if which else (a if a.dict_entries else None)
    return out


def parse_perfetto(data: bytes) -> ParsedPerfetto:
    """Parse with the package's protos and replay B/E per track; interning and defaults per
    sequence.
    """
    from perfetto.protos.perfetto.trace import perfetto_trace_pb2 as pb

    trace = pb.Trace()
    trace.ParseFromString(data)
    tracks: dict[int, dict[str, Any]] = {}
    seq_names: dict[int, dict[int, str]] = defaultdict(dict)
    seq_args: dict[int, dict[int, str]] = defaultdict(dict)
    seq_track: dict[int, int] = {}
    stacks: dict[int, list[Slice]] = defaultdict(list)
    slices: list[Slice] = []
    instants: list[Slice] = []
    counters: dict[str, list[tuple[int, float]]] = defaultdict(list)
    problems: list[str] = []
    last_ts: dict[int, int] = {}
    for p in trace.packet:
        seq = p.trusted_packet_sequence_id
        if p.sequence_flags & 1:
            seq_names[seq].clear()
            seq_args[seq].clear()
        for n in p.interned_data.event_names:
            seq_names[seq][n.iid] = n.name
        for n in p.interned_data.debug_annotation_names:
            seq_args[seq][n.iid] = n.name
        if p.HasField("trace_packet_defaults"):
            seq_track[seq] = p.trace_packet_defaults.track_event_defaults.track_uuid
        if p.HasField("track_descriptor"):
            d = p.track_descriptor
            tracks[d.uuid] = {
                "name": d.name,
                "parent": d.parent_uuid,
                "counter": d.HasField("counter"),
            }
        if not p.HasField("track_event"):
            continue
        te = p.track_event
        uuid = te.track_uuid if te.HasField("track_uuid") else seq_track.get(seq, 0)
        if uuid not in tracks:
            problems.append(f"event on undeclared track {uuid}")
            continue
        if p.timestamp < last_ts.get(uuid, 0):
            problems.append(f"track {tracks[uuid]['name']}: timestamps go back at {p.timestamp}")
        last_ts[uuid] = p.timestamp
        name = te.name if te.HasField("name") else seq_names[seq].get(te.name_iid, "")
        tname = tracks[uuid]["name"]
        if te.type == te.TYPE_SLICE_BEGIN:
            if not name:
                problems.append(f"unnamed slice on {tname}")
            s = Slice(tname, name, p.timestamp, -1, len(stacks[uuid]), _args(te, seq_args[seq]))
            stacks[uuid].append(s)
            slices.append(s)
        elif te.type == te.TYPE_SLICE_END:
            if not stacks[uuid]:
                problems.append(f"END without BEGIN on {tname} at {p.timestamp}")
                continue
            s = stacks[uuid].pop()
            s.dur = p.timestamp - s.ts
        elif te.type == te.TYPE_INSTANT:
            instants.append(
                Slice(tname, name, p.timestamp, 0, len(stacks[uuid]), _args(te, seq_args[seq]))
            )
        elif te.type == te.TYPE_COUNTER:
            if not tracks[uuid]["counter"]:
                problems.append(f"counter value on slice track {tname}")
            counters[tname].append((p.timestamp, te.double_counter_value))
    for uuid, stack in stacks.items():
        if stack:
            problems.append(f"{len(stack)} slices left open on {tracks[uuid]['name']}")
    return ParsedPerfetto(tracks, slices, instants, dict(counters), problems, len(trace.packet))
