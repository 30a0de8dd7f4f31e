"""The event schema: one row per span per clock; one buffer per column on disk
(docs/trace-format.md). Times are ns on the host clock since capture start."""

from __future__ import annotations

import enum
import hashlib
import re
from collections.abc import Collection

import numpy as np


class Kind(enum.IntEnum):
    FRAME = 0
    ZONE = 1  #: a span inside a frame (a pass or a draw)
    MARKER = 2  #: a span or instant outside frames
    COUNTER = 3  #: a sample in ``value`` at start_ns, dur_ns = 0


class Clock(enum.IntEnum):
    CPU = 0  #: host clock around submission, no GPU sync
    WALL = 1  #: host clock with glFinish at the end
    GPU = 2  #: GL_TIMESTAMP queries mapped to the host timeline
    INSTRUCTIONS = 3  #: callgrind count of the main thread, in ``dur_ns``
    CYCLES = 4  #: callgrind cache-sim estimate, in ``dur_ns``
    #: process CPU time, all threads: may exceed wall time, so a value, not a span
    PROCESS = 5


class Flag(enum.IntFlag):
    NONE = 0
    WARMUP = 1  #: excluded from statistics
    SETUP = 2  #: shader compile, uploads; a replay's restart frame
    SKIPPED = 4
    ESTIMATED = 8  #: derived, not measured
    INTERRUPTED = 16
    REFERENCE = 32  #: drift-normalization workload; never a frame


#: (name, numpy type, meaning), in file order.
COLUMNS: tuple[tuple[str, str, str], ...] = (
    ("kind", "u1", "Kind enum"),
    ("clock", "u1", "Clock enum"),
    ("flags", "<u2", "Flag bits"),
    ("depth", "<u2", "zone nesting depth; frames are 0, their zones 1+"),
    ("scene", "<u4", "string id of the scene name (0 = none)"),
    ("name", "<u4", "string id of the span name"),
    ("frame", "<u4", "frame index within the scene, warmup frames included"),
    ("start_ns", "<i8", "span start, ns since capture start (host clock)"),
    ("dur_ns", "<i8", "span duration, ns (instructions or cycles on those clocks)"),
    ("value", "<f8", "counter value (0 for spans)"),
)

EVENT_DTYPE = np.dtype([(name, typ) for name, typ, _ in COLUMNS])

SCHEMA_VERSION = 1


def schema_hash() -> str:
    """Stable fingerprint of the columns' names, types and order."""
    text = ";".join(f"{name}:{np.dtype(typ).str}" for name, typ, _ in COLUMNS)
    return hashlib.sha256(text.encode()).hexdigest()[:16]


COUNT_CLOCKS: frozenset[int] = frozenset({int(Clock.INSTRUCTIONS), int(Clock.CYCLES)})

#: Not spans on the host timeline.
VALUE_CLOCKS: frozenset[int] = COUNT_CLOCKS | {int(Clock.PROCESS)}

REFERENCE_NAME = "reference"

#: One wall-clock MARKER per GC collection, ``value`` = generation.
GC_NAME = "gc"

#: The pass of draws made while no pass zone was open.
FRAME_PASS = "frame"

_DRAW_END = re.compile(r"#[0-9]+$")


def draw_zone_name(pass_name: str, label: str, k: int) -> str:
    """``<pass>/<label>#<k>``: the ``k``-th draw (1-based) of ``label``."""
    return f"{pass_name}/{label}#{k}"


def draw_pass(name: str, zones: Collection[str]) -> str | None:
    """The pass of draw zone ``name`` (or None): its longest ``/``-prefix in ``zones`` or
    :data:`FRAME_PASS`."""

    if not _DRAW_END.search(name):
        return None
    cut = name.rfind("/")
    while cut > 0:
        prefix = name[:cut]
        if prefix in zones or prefix == FRAME_PASS:
            return prefix
        cut = name.rfind("/", 0, cut)
    return None


__all__ = [
    "COLUMNS",
    "Clock",
    "COUNT_CLOCKS",
    "VALUE_CLOCKS",
    "EVENT_DTYPE",
    "FRAME_PASS",
    "Flag",
    "GC_NAME",
    "Kind",
    "REFERENCE_NAME",
    "SCHEMA_VERSION",
    "draw_pass",
    "draw_zone_name",
    "schema_hash",
]
