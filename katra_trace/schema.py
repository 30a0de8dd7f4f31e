"""The event schema: one row per measured span per clock.

Events live in memory as a numpy structured array of :data:`EVENT_DTYPE`
(packed, little-endian) and in the file as one buffer per column
(see docs/trace-format.md). Times are integer nanoseconds on the host clock
(``time.perf_counter_ns``), relative to the capture start in the header.
"""

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
    #: (format 1.1) callgrind instruction count of the main thread; ``dur_ns`` holds a count of
    #: instructions, not ns (``--measure instructions``). Deterministic on software renderers.
    INSTRUCTIONS = 3
    #: (format 1.1) estimated cycles from callgrind's cache simulation (``--measure cycles``);
    #: ``dur_ns`` holds the estimate in cycles. The raw counts are COUNTER events on this clock.
    CYCLES = 4
    #: (format 1.1) CPU time the whole process spent on the frame, every thread counted (a software
    #: rasterizer's threads included), from its start to the end of its ``glFinish``
    #: (``CLOCK_PROCESS_CPUTIME_ID``; sync mode). ``dur_ns`` is CPU ns, which may exceed the
    #: frame's wall time when threads ran in parallel: a value, not a span on the host timeline.
    PROCESS = 5


class Flag(enum.IntFlag):
    """Bits of the ``flags`` column."""

    NONE = 0
    WARMUP = 1  #: recorded during warmup: excluded from statistics
    SETUP = 2  #: scene setup (shader compile, uploads; a replay's restart frame)
    SKIPPED = 4  #: a marker recording that a scene was skipped
    ESTIMATED = 8  #: value is derived rather than measured directly
    INTERRUPTED = 16  #: the span was cut short by an interrupt
    #: (format 1.1) a reference workload timed inside the run for drift normalization
    #: (MARKER events named ``reference``); never a frame, excluded from frame statistics
    REFERENCE = 32


#: (column name, numpy type string, unit/meaning); the file stores columns in this order.
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

#: In-memory record type (packed: 42 bytes per event).
EVENT_DTYPE = np.dtype([(name, typ) for name, typ, _ in COLUMNS])

#: Version number of the event schema, stored in each block header's ``schema`` field.
SCHEMA_VERSION = 1


def schema_hash() -> str:
    """A stable fingerprint of the event columns (names, types, order)."""
    text = ";".join(f"{name}:{np.dtype(typ).str}" for name, typ, _ in COLUMNS)
    return hashlib.sha256(text.encode()).hexdigest()[:16]


#: Clocks whose ``dur_ns`` is a count (instructions, cycles), not a time: deterministic metrics.
COUNT_CLOCKS: frozenset[int] = frozenset({int(Clock.INSTRUCTIONS), int(Clock.CYCLES)})

#: Clocks whose ``dur_ns`` is a value, not a span on the host timeline: the counts, and process
#: CPU time (threads running in parallel add up to more than the wall time they took).
VALUE_CLOCKS: frozenset[int] = COUNT_CLOCKS | {int(Clock.PROCESS)}

#: Name of the reference-workload markers (Flag.REFERENCE).
REFERENCE_NAME = "reference"

#: Name of the garbage-collection markers: one MARKER row per collection of Python's cyclic
#: collector, on the wall clock, from its start to its end; ``value`` holds the generation collected
#: (2: a full collection). MARKER rows never enter frame statistics, so this needs no new format
#: version (docs/trace-format.md).
GC_NAME = "gc"

#: The pass of draws made while no pass zone was open (``--zones draws``).
FRAME_PASS = "frame"

_DRAW_END = re.compile(r"#[0-9]+$")


def draw_zone_name(pass_name: str, label: str, k: int) -> str:
    """The name of the ``k``-th draw (1-based) labelled ``label`` in pass ``pass_name`` (``--zones
    draws``): ``<pass>/<label>#<k>``."""
    return f"{pass_name}/{label}#{k}"


def draw_pass(name: str, zones: Collection[str]) -> str | None:
    """The pass that draw zone ``name`` belongs to, or None when ``name`` is not a draw.

    A draw's name is :func:`draw_zone_name`'s; its pass is the longest prefix of it before a ``/``
    that is one of ``zones`` (or :data:`FRAME_PASS`), so pass and label names may contain ``/``
    themselves.
    """
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
