"""The event schema: one row per measured span per clock, a packed numpy structured array in memory
and one buffer per column on disk (docs/trace-format.md). Times are ns on the host clock since the
capture start."""

from __future__ import annotations

import enum
import hashlib
import re
from collections.abc import Collection

import numpy as np


class Kind(enum.IntEnum):
    """What an event row describes."""

    FRAME = 0  #: one whole frame
    ZONE = 1  #: a named span inside a frame (a pass or a draw)
    MARKER = 2  #: a named span or instant outside frames (scene setup, skips)
    COUNTER = 3  #: a sampled value in ``value`` (start_ns = sample time, dur_ns = 0)


class Clock(enum.IntEnum):
    """Which clock measured the span."""

    CPU = 0  #: host clock around command submission, no GPU sync
    WALL = 1  #: host clock with glFinish at the end (sync mode): what the user waits for
    GPU = 2  #: GL_TIMESTAMP queries, mapped into the host timeline
    #: (format 1.1) callgrind instruction count of the main thread; ``dur_ns`` holds the count.
    INSTRUCTIONS = 3
    #: (format 1.1) cycles estimated by callgrind's cache simulation; raw counts are COUNTER events.
    CYCLES = 4
    #: (format 1.1) process CPU time of the frame, all threads, to the end of its ``glFinish``: may
    #: exceed the wall time, so a value, not a span.
    PROCESS = 5


class Flag(enum.IntFlag):
    """Bits of the ``flags`` column."""

    NONE = 0
    WARMUP = 1  #: recorded during warmup: excluded from statistics
    SETUP = 2  #: scene setup (shader compile, uploads; a replay's restart frame)
    SKIPPED = 4  #: a marker recording that a scene was skipped
    ESTIMATED = 8  #: value is derived rather than measured directly
    INTERRUPTED = 16  #: the span was cut short by an interrupt
    #: (format 1.1) a reference workload for drift normalization; never a frame.
    REFERENCE = 32


#: (column name, numpy type string, meaning), in file order.
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

#: Stored in each block header's ``schema`` field.
SCHEMA_VERSION = 1


def schema_hash() -> str:
    """A stable fingerprint of the event columns (names, types, order)."""
    text = ";".join(f"{name}:{np.dtype(typ).str}" for name, typ, _ in COLUMNS)
    return hashlib.sha256(text.encode()).hexdigest()[:16]


COUNT_CLOCKS: frozenset[int] = frozenset({int(Clock.INSTRUCTIONS), int(Clock.CYCLES)})

#: Counts and process CPU time: not spans on the host timeline.
VALUE_CLOCKS: frozenset[int] = COUNT_CLOCKS | {int(Clock.PROCESS)}

REFERENCE_NAME = "reference"

#: One MARKER per cyclic-GC collection on the wall clock, ``value`` = generation. Markers never
#: enter frame statistics, so no new format version is needed.
GC_NAME = "gc"

#: The pass of draws made while no pass zone was open.
FRAME_PASS = "frame"

_DRAW_END = re.compile(r"#[0-9]+$")


def draw_zone_name(pass_name: str, label: str, k: int) -> str:
    """``<pass>/<label>#<k>``: the ``k``-th draw (1-based) of ``label`` in ``pass_name``."""
    return f"{pass_name}/{label}#{k}"


def draw_pass(name: str, zones: Collection[str]) -> str | None:
    """The pass of draw zone ``name``, or None if not a draw: the longest prefix before a ``/`` that
    is one of ``zones`` or :data:`FRAME_PASS`, so names may contain ``/``."""
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
