"""Per-frame and per-zone callgrind counts (``--measure``, in the valgrind child). Callgrind dumps
at each ``os.getppid()`` call (``--dump-before=getppid``), made at every frame and zone boundary;
the timer reads each dump's ``summary:`` line. See docs/measure.md."""

from __future__ import annotations

import contextlib
import gc
import os
import time
from collections.abc import Iterator
from pathlib import Path
from typing import TYPE_CHECKING, Any, cast

from katra3d.harness.engine import valgrind_request
from katra3d.harness.engine.events import EventBuffer
from katra3d.harness.engine.measurer import Mode, WriterArgs
from katra3d.harness.engine.timers import NULL_ZONE, Timer
from katra_trace.errors import KatraError
from katra_trace.io.header import MeasureOptions
from katra_trace.jsontext import JsonObject
from katra_trace.metrics import MODE_CLOCKS
from katra_trace.profile.callgrind import KEPT_DIR, kept_dump, profiles_on, write_index
from katra_trace.schema import Clock, Flag, Kind

if TYPE_CHECKING:
    from katra3d.harness.engine.gcmarks import GcMarks
    from katra3d.harness.engine.results import SceneResult
    from katra_trace.io.header import GLInfo

CACHE_EVENTS: tuple[str, ...] = ("Ir", "Dr", "Dw", "I1mr", "D1mr", "D1mw", "ILmr", "DLmr", "DLmw")

CYCLE_WEIGHTS: tuple[int, int, int] = (1, 5, 35)

_HEADER_LINES = 64

_FRAME = int(Kind.FRAME)
_ZONE = int(Kind.ZONE)
_COUNTER = int(Kind.COUNTER)
_INSTR = int(Clock.INSTRUCTIONS)
_CYCLES = int(Clock.CYCLES)
_WARMUP = int(Flag.WARMUP)
_pc = time.perf_counter_ns


class CountError(KatraError):
    """A callgrind dump is missing or unreadable: the counts cannot be trusted."""


def estimated_cycles(counts: dict[str, int]) -> int:
    """Cycles from callgrind's cache simulation, weighted by :data:`CYCLE_WEIGHTS`."""
    accesses = counts.get("Ir", 0) + counts.get("Dr", 0) + counts.get("Dw", 0)
    ram = counts.get("ILmr", 0) + counts.get("DLmr", 0) + counts.get("DLmw", 0)
    l1_misses = counts.get("I1mr", 0) + counts.get("D1mr", 0) + counts.get("D1mw", 0)
    ll_hits = max(0, l1_misses - ram)
    l1_hits = max(0, accesses - l1_misses)
    w1, wll, wram = CYCLE_WEIGHTS
    return w1 * l1_hits + wll * ll_hits + wram * ram


def read_summary(path: Path) -> dict[str, int]:
    """The ``summary:`` counts of one callgrind dump by event name; raises CountError."""
    events: list[str] = []
    try:
        with open(path, encoding="utf-8", errors="replace") as fh:
            for _, line in zip(range(_HEADER_LINES), fh, strict=False):
                if line.startswith("events:"):
                    events = line.split(":", 1)[1].split()
                elif line.startswith("summary:"):
                    values = [int(v) for v in line.split(":", 1)[1].split()]
                    values += [0] * (len(events) - len(values))
                    return dict(zip(events, values, strict=False))
    except (OSError, ValueError) as exc:
        raise CountError(f"cannot read callgrind dump {path}: {exc}") from None
    raise CountError(f"callgrind dump {path} has no summary line")


class _CountZone:
    __slots__ = ("timer", "name_id", "depth", "enter_part", "t0")

    def __init__(self, timer: CountTimer, name: str) -> None:
        self.timer = timer
        self.name_id = timer.name_id(name)

    def __enter__(self) -> None:
        t = self.timer
        t.depth += 1
        self.depth = t.depth
        self.t0 = _pc()
        t.finish()  # llvmpipe rasterizes at a flush: earlier work is not this zone's
        t.part += 1
        t.mark()
        self.enter_part = t.part

    def __exit__(self, *exc: object) -> None:
        t = self.timer
        t.finish()
        t.part += 1
        t.mark()
        t.zones_done.append((self.depth, self.name_id, self.enter_part, t.part, self.t0))
        t.depth -= 1


class CountTimer(Timer):
    """Main-thread counts per frame and zone. Dump part numbers count every ``os.getppid()`` call,
    so the first one with instrumentation on must be this timer's."""

    def __init__(
        self,
        ctx: Any,
        writer: Any,
        buffer: EventBuffer,
        *,
        zones: bool,
        dump_base: Path,
        cycles: bool = False,
    ) -> None:
        super().__init__(ctx, writer, buffer, zones=zones)
        self.mode = "cycles" if cycles else "instructions"
        self.primary_clock = MODE_CLOCKS[self.mode]
        self.cycles = cycles
        self.dump_base = Path(dump_base)
        self.mark = os.getppid
        self.part = 0
        self.instrumenting = False
        self.counted = False
        # makes the request's code page outside frames, in every process alike
        valgrind_request.available()
        self.zones_done: list[tuple[int, int, int, int, int]] = []
        self.kept = 0
        self.profile = profiles_on()
        if self.profile:
            (self.dump_base.parent / KEPT_DIR).mkdir(exist_ok=True)
        self.counter_ids = {name: writer.intern(name) for name in CACHE_EVENTS} if cycles else {}
        self._push = None
        self._pop = None

    def _zone(self, name: str) -> Any:
        return _CountZone(self, name) if self.counted else NULL_ZONE

    def _instrument(self, on: bool) -> None:
        if on != self.instrumenting:
            if on:
                valgrind_request.start_instrumentation()
            else:
                valgrind_request.stop_instrumentation()
            self.instrumenting = on

    def set_scene(self, name: str) -> int:
        self._instrument(False)
        return super().set_scene(name)

    def stop_counting(self) -> None:
        """After a scene's last measured frame: reading back its image counts nothing."""
        self._instrument(False)
        if self.kept and self.profile:
            write_index(self.dump_base.parent, self.kept, {i: n for n, i in self._names.items()})
            self.kept = 0

    def begin_frame(self, index: int, flags: int = 0) -> None:
        self.frame_index = index
        self.flags = flags
        self.zones_done = []
        self.counted = not flags & _WARMUP
        if not self.counted:
            return
        self._instrument(True)
        self.part += 1
        self.mark()  # dumps the harness work since the last boundary
        self.first_part = self.part + 1
        self.t0 = _pc()

    def end_frame(self) -> None:
        # llvmpipe rasterizes at the next flush: else between frames, uncounted
        self.finish()
        if not self.counted:
            return
        self.part += 1
        self.mark()
        last = self.part
        first = self.first_part
        segments = {p: self._take(p, self.zones_done) for p in range(first, last + 1)}
        self._remove(first - 1)
        start = self.t0 - self.origin_ns
        frame = self.frame_index
        flags = self.flags
        scene = self.scene_id
        add = self.add
        total = _sum(segments, first, last)
        self.kept += 1
        primary = self._emit(_FRAME, 0, self.frame_name, start, total, flags, scene, frame)
        for depth, name_id, enter, leave, t0 in self.zones_done:
            self._emit(
                _ZONE,
                depth,
                name_id,
                t0 - self.origin_ns,
                _sum(segments, enter + 1, leave),
                flags,
                scene,
                frame,
            )
        if self.cycles:
            for event, sid in self.counter_ids.items():
                add(
                    (
                        _COUNTER,
                        _CYCLES,
                        flags,
                        0,
                        scene,
                        sid,
                        frame,
                        start,
                        0,
                        float(total.get(event, 0)),
                    )
                )
        if not flags:
            self._frame_ns_add(primary)
        self._maybe_flush(_pc())

    def _emit(
        self,
        kind: int,
        depth: int,
        name_id: int,
        start: int,
        counts: dict[str, int],
        flags: int,
        scene: int,
        frame: int,
    ) -> int:
        instructions = int(counts.get("Ir", 0))
        self.add((kind, _INSTR, flags, depth, scene, name_id, frame, start, instructions, 0.0))
        if not self.cycles:
            return instructions
        cycles = estimated_cycles(counts)
        self.add((kind, _CYCLES, flags, depth, scene, name_id, frame, start, cycles, 0.0))
        return cycles

    def _path(self, part: int, thread: int = 1) -> Path:
        return self.dump_base.with_name(f"{self.dump_base.name}.{part}-{thread:02d}")

    def _take(self, part: int, zones: list[tuple[int, int, int, int, int]]) -> dict[str, int]:
        path = self._path(part)
        counts = read_summary(path)
        if self.profile:  # named with the zones it lay in
            inside = [z[1] for z in zones if z[2] < part <= z[3]]
            os.replace(path, kept_dump(path.parent, part, inside))
        self._remove(part)
        return counts

    def _remove(self, part: int) -> None:
        if part < 1:
            return
        prefix = f"{self.dump_base.name}.{part}-"
        for entry in os.scandir(self.dump_base.parent):
            if entry.name.startswith(prefix):
                try:
                    os.unlink(entry.path)
                except FileNotFoundError:
                    pass


class CountMeasurer:
    """Frames counted under callgrind: while counted nothing else runs in the process (writer idle,
    collector paused)."""

    counts = True
    relayed = True

    def __init__(self, measure: MeasureOptions, dump_base: Path) -> None:
        self.measure = measure
        self.dump_base = Path(dump_base)

    def mode(self, timing: str, gl: GLInfo, codec: str | None) -> Mode:
        name = str(self.measure.mode)
        reason = (
            f"--measure {name}: counted under callgrind (valgrind {self.measure.valgrind or '?'}), "
            "main thread only, single-threaded llvmpipe"
        )
        # no time-based flushes: periodic work would land in whichever frame it happened in
        args: WriterArgs = {"batch_ms": 1e9, "sync": True}
        if codec is not None:
            args["codec"] = codec
        return name, reason, args

    def start(self, mode: str, ctx: Any, writer: Any, *, zones: bool) -> tuple[EventBuffer, Timer]:
        buffer = EventBuffer(writer, max_rows=1 << 16, max_age_ns=None)
        timer = CountTimer(
            ctx, writer, buffer, zones=zones, dump_base=self.dump_base, cycles=mode == "cycles"
        )
        return buffer, timer

    def settle(self, gc_marks: GcMarks) -> None:
        pass  # the collector is paused while frames are counted: no marks

    @contextlib.contextmanager
    def frames(self, buffer: EventBuffer, writer: Any) -> Iterator[None]:
        """Write what is pending, pause the collector (it would run in different frames in
        different processes)."""
        buffer.flush()
        writer.flush()
        gc.collect()
        was_enabled = gc.isenabled()
        gc.disable()
        try:
            yield
        finally:
            if was_enabled:
                gc.enable()

    def frames_done(self, timer: Timer) -> None:
        cast(CountTimer, timer).stop_counting()

    def write_scene(self, writer: Any, annotation: JsonObject, result: SceneResult) -> None:
        # setup time under valgrind (20-100x slower) means nothing
        annotation.pop("setup_ms", None)
        result.setup_ms = 0.0
        writer.annotate(annotation)
        writer.flush()


def _sum(segments: dict[int, dict[str, int]], first: int, last: int) -> dict[str, int]:
    total: dict[str, int] = {}
    for part in range(first, last + 1):
        for event, value in segments[part].items():
            total[event] = total.get(event, 0) + value
    return total


__all__ = [
    "CACHE_EVENTS",
    "CYCLE_WEIGHTS",
    "CountError",
    "CountMeasurer",
    "CountTimer",
    "estimated_cycles",
    "read_summary",
]
