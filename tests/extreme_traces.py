"""Traces whose values are extreme (no GL): the corpus the consumer fuzzer
(tests/test_fuzz_consumers.py) starts from and the memory-bound test runs every consumer on.

Each is a small, well-formed trace (real writer, valid CRCs) with one kind of extreme value: ids at
the top of their column (scene, name, frame: 2^32-1), start times and durations near the int64
limits, long or hostile strings (spreadsheet formulas, markup, control characters), non-finite
counter values and header numbers (NaN, inf), nesting depth and flags at their maximum, thousands
of collections overlapping thousands of frames, gc markers whose generation is NaN, inf or 1e300,
thousands of zones each with its own name, and a shard that merge takes; ``validate`` passes
those. And kept frames (:data:`IMAGE_WRITERS`, tests/hostile_images.py): frames whose pixels are far
beyond the file's reading budget (one 8192x8192, 24 at 4096x4096), IMAGE blocks packed with
zstd (refused), 300 of them, and four damaged frames; ``validate`` refuses those.
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np

from katra_trace import Clock, Flag, Kind
from katra_trace.io import format as fmt
from katra_trace.schema import EVENT_DTYPE
from tests.hostile_images import (
    DAMAGES,
    frames_24x4096_trace,
    one_8192_trace,
    picture_frame,
    write_frames_trace,
    zstd_packed_trace,
)
from tests.trace_helpers import (
    edit_json_block,
    frame_zone_stream,
    seal_blocks,
    split_blocks,
    write_trace,
)

U32_MAX = 2**32 - 1
I64_MAX = 2**63 - 1
I64_MIN = -(2**63)
#: Names a spreadsheet would run as formulas, and markup a viewer might render.
HOSTILE_NAMES = [
    '=HYPERLINK("https://evil.example","x")',
    "@SUM(1)",
    "+1+1",
    "-1+1",
    "\t=1",
    "\r=1",
    "<a href=https://evil.example>CLICK</a>",
    "a\nb",
    "\u202egnp.exe",
]
STRINGS = ["", "scene", "frame", "pass-a", "pass-b", "pass-c"]


def _base(n_frames: int = 12) -> np.ndarray:
    return frame_zone_stream(n_frames, zones=2)


def _set(
    col: str, value: int | float, rows: slice | list[int] = slice(None)
) -> Callable[[np.ndarray], None]:
    def edit(ev: np.ndarray) -> None:
        ev[col][rows] = value

    return edit


def _shift(ev: np.ndarray, by: int) -> None:
    ev["start_ns"] += by


def _counter_rows(value: float) -> Callable[[np.ndarray], np.ndarray]:
    def add(ev: np.ndarray) -> np.ndarray:
        extra = np.zeros(4, dtype=EVENT_DTYPE)
        extra["kind"], extra["clock"], extra["scene"], extra["name"] = Kind.COUNTER, Clock.CPU, 1, 3
        extra["frame"] = np.arange(4)
        extra["start_ns"] = ev["start_ns"][:4]
        extra["value"] = value
        return np.concatenate([ev, extra])

    return add


#: name -> edit of the base event array (in place, or returning a new array).
EVENT_EDITS: dict[str, Callable[[np.ndarray], Any]] = {
    "scene-id-max": _set("scene", U32_MAX),
    "scene-id-max-some": _set("scene", U32_MAX, [0, 5, 9]),
    "name-id-max": _set("name", U32_MAX),
    "frame-max": _set("frame", U32_MAX, [2, 8]),
    "start-near-int64-max": lambda ev: _shift(
        ev, I64_MAX - int((ev["start_ns"] + ev["dur_ns"]).max()) - 1
    ),
    "start-near-int64-min": lambda ev: _shift(ev, I64_MIN - int(ev["start_ns"].min()) + 1),
    "start-spread-wide": _set("start_ns", I64_MIN + 1, [0]),
    "dur-huge": lambda ev: ev["dur_ns"].__setitem__([2, 5], I64_MAX - ev["start_ns"][[2, 5]]),
    "dur-huge-all": lambda ev: ev["dur_ns"].__setitem__(slice(None), I64_MAX - ev["start_ns"]),
    "depth-max": _set("depth", 65535, [0, 1]),
    "flags-all": _set("flags", int(sum(Flag)), [3, 4]),
    "counter-nan": _counter_rows(float("nan")),
    "counter-inf": _counter_rows(float("inf")),
    "counter-huge": _counter_rows(1e308),
}


def _write_events(path: Path, edit: Callable[[np.ndarray], Any]) -> None:
    """The base trace with its events edited: written by the writer, then its one EVENTS block
    replaced and the file re-sealed (the writer itself refuses some of these values)."""
    ev = _base()
    write_trace(path, ev, STRINGS, batch_events=len(ev) + 1)
    out = edit(ev)
    if isinstance(out, np.ndarray) and out.dtype == EVENT_DTYPE:
        ev = out
    blocks = split_blocks(path.read_bytes())
    blocks = [
        (t, fmt.encode_events(ev) if t == fmt.BlockType.EVENTS else raw, schema)
        for t, raw, schema in blocks
    ]
    path.write_bytes(seal_blocks(blocks))


def _write_hostile_strings(path: Path) -> None:
    # the scene is the first, the frame the second, the zones the rest
    strings = ["", *HOSTILE_NAMES]
    names = tuple(range(2, len(strings)))
    ev = frame_zone_stream(12, zones=len(names) - 1, scene=1, names=names)
    write_trace(path, ev, strings, batch_events=8)


def _write_long_strings(path: Path) -> None:
    long = "x" * 1_000_000
    strings = ["", "s" * 100_000, long, long + "a", long + "b", long + "c"]
    write_trace(path, _base(), strings, batch_events=8)


def _write_header_edit(path: Path, edit: Callable[[dict[str, Any]], dict[str, Any]]) -> None:
    plain = path.with_suffix(".plain")
    _write_events(plain, lambda ev: None)
    blocks = split_blocks(plain.read_bytes())
    plain.unlink()
    edit_json_block(blocks, fmt.BlockType.HEADER, edit)
    path.write_bytes(seal_blocks(blocks))


def _nonfinite_header(h: dict[str, Any]) -> dict[str, Any]:
    h.setdefault("capture_options", {})["warmup_s"] = float("nan")
    h["capture_options"]["extra"] = {"ratio": float("inf"), "low": float("-inf")}
    h.setdefault("host_info", {})["load"] = float("nan")
    return h


def _host_start_max(h: dict[str, Any]) -> dict[str, Any]:
    h["start_host_ns"] = I64_MAX
    h["start_wall_ns"] = I64_MAX
    return h


def _write_gc_markers(path: Path, frames: int, value: float) -> None:
    """``frames`` frames (every 7th four times as long) and as many collections, each from a
    frame's start to the end of the capture: markers x frames overlaps."""
    ev = frame_zone_stream(frames, zones=0)
    ev["dur_ns"][::7] *= 4
    marks = np.zeros(frames, dtype=EVENT_DTYPE)
    marks["kind"], marks["clock"], marks["scene"], marks["name"] = Kind.MARKER, Clock.WALL, 1, 2
    marks["start_ns"] = ev["start_ns"]
    marks["dur_ns"] = int(ev["start_ns"][-1] + ev["dur_ns"][-1]) - ev["start_ns"]
    marks["value"] = value
    write_trace(path, np.concatenate([ev, marks]), ["", "scene", "gc"], batch_events=4096)


def _write_zones_each_named(path: Path, zones: int = 5000) -> None:
    """Frames of two zones, every zone with a name of its own (``--zones draws`` of a long
    replay), every 9th frame slow."""
    ev = frame_zone_stream(zones // 2, zones=2)
    at = np.flatnonzero(ev["kind"] == Kind.ZONE)
    ev["name"][at] = 3 + np.arange(at.size)
    ev["dur_ns"][np.flatnonzero(ev["kind"] == Kind.FRAME)[::9]] *= 4
    strings = ["", "scene", "frame", *(f"draw {i}" for i in range(at.size))]
    write_trace(path, ev, strings, batch_events=4096)


def _write_shard(path: Path) -> None:
    """A whole run's one shard (``--shard 1/1``), which merge takes alone."""
    from tests.test_shards import _shard

    _shard(path, "1/1", ["a", "b"])


#: name -> writer of one extreme trace at a path.
WRITERS: dict[str, Callable[[Path], None]] = {
    **{name: (lambda path, e=edit: _write_events(path, e)) for name, edit in EVENT_EDITS.items()},
    "hostile-strings": _write_hostile_strings,
    "long-strings": _write_long_strings,
    "header-nonfinite": lambda path: _write_header_edit(path, _nonfinite_header),
    "header-start-max": lambda path: _write_header_edit(path, _host_start_max),
    "gc-markers-many": lambda path: _write_gc_markers(path, 2000, 2.0),
    "gc-marker-nan": lambda path: _write_gc_markers(path, 100, float("nan")),
    "gc-marker-inf": lambda path: _write_gc_markers(path, 100, float("-inf")),
    "gc-marker-huge": lambda path: _write_gc_markers(path, 100, 1e300),
    "zones-each-named": _write_zones_each_named,
    "shard": _write_shard,
}


#: name -> writer of one trace whose kept frames are hostile or damaged.
IMAGE_WRITERS: dict[str, Callable[[Path], None]] = {
    "kept-frame-8192": one_8192_trace,
    "kept-frames-24x4096": frames_24x4096_trace,
    "kept-frames-zstd": zstd_packed_trace,
    "kept-frames-300": lambda path: write_frames_trace(
        path, {f"s{i}": picture_frame(f"s{i}", i, 4, 3) for i in range(300)}
    ),
    **{
        f"kept-frame-{name}": (
            lambda path, d=damage: write_frames_trace(path, {"s": d(picture_frame("s"))})
        )
        for name, damage in DAMAGES.items()
    },
}


def write_base(path: Path) -> None:
    """The small valid trace every extreme one is made from (a consumer's baseline)."""
    write_trace(path, _base(), STRINGS, batch_events=8)


def write_all(directory: Path) -> dict[str, Path]:
    """Every extreme trace of :data:`WRITERS` and :data:`IMAGE_WRITERS` in ``directory``; returns
    name -> path.
    """
    directory.mkdir(parents=True, exist_ok=True)
    out = {}
    for name, writer in {**WRITERS, **IMAGE_WRITERS}.items():
        path = directory / f"{name}.katra"
        writer(path)
        out[name] = path
    return out


__all__ = [
    "EVENT_EDITS",
    "HOSTILE_NAMES",
    "I64_MAX",
    "I64_MIN",
    "IMAGE_WRITERS",
    "STRINGS",
    "U32_MAX",
    "WRITERS",
    "write_all",
    "write_base",
]
