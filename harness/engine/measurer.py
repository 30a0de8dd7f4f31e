"""How an engine measures frames: by clock (:class:`TimeMeasurer`) or by callgrind counts
(``counting.CountMeasurer``); the engine asks it wherever the two differ."""

from __future__ import annotations

import contextlib
from typing import TYPE_CHECKING, Any, Protocol, TypedDict

from katra3d.harness.engine import heap, timers
from katra3d.harness.engine.events import EventBuffer
from katra_trace.io.header import MeasureOptions
from katra_trace.jsontext import JsonObject

if TYPE_CHECKING:
    from katra3d.harness.engine.gcmarks import GcMarks
    from katra3d.harness.engine.results import SceneResult
    from katra_trace.io.header import GLInfo

TIMED = MeasureOptions(mode="time")


class WriterArgs(TypedDict, total=False):
    """The TraceWriter keywords a measurer sets."""

    codec: str
    batch_ms: float
    sync: bool


# (name: sync | gpu | instructions | cycles, ``timing_reason``, extra TraceWriter keywords)
Mode = tuple[str, str, WriterArgs]


class Measurer(Protocol):
    """``relayed``: progress every frame (a counted child's relay)."""

    measure: MeasureOptions
    counts: bool
    relayed: bool

    def mode(self, timing: str, gl: GLInfo, codec: str | None) -> Mode: ...

    def start(
        self, mode: str, ctx: Any, writer: Any, *, zones: bool
    ) -> tuple[EventBuffer, timers.Timer]: ...

    def settle(self, gc_marks: GcMarks) -> None: ...

    def frames(
        self, buffer: EventBuffer, writer: Any
    ) -> contextlib.AbstractContextManager[None]: ...

    # after a scene's last frame, before its image is read back
    def frames_done(self, timer: timers.Timer) -> None: ...

    def write_scene(self, writer: Any, annotation: JsonObject, result: SceneResult) -> None: ...


class TimeMeasurer:
    measure = TIMED
    counts = False
    relayed = False

    def mode(self, timing: str, gl: GLInfo, codec: str | None) -> Mode:
        name, reason = timers.choose_mode(timing, gl)
        return name, reason, {} if codec is None else {"codec": codec}

    def start(
        self, mode: str, ctx: Any, writer: Any, *, zones: bool
    ) -> tuple[EventBuffer, timers.Timer]:
        buffer = EventBuffer(writer)
        return buffer, timers.make_timer(mode, ctx, writer, buffer, zones=zones)

    def settle(self, gc_marks: GcMarks) -> None:
        heap.keep_freed_memory()
        gc_marks.install()

    def frames(self, buffer: EventBuffer, writer: Any) -> contextlib.AbstractContextManager[None]:
        return contextlib.nullcontext()

    def frames_done(self, timer: timers.Timer) -> None:
        pass

    def write_scene(self, writer: Any, annotation: JsonObject, result: SceneResult) -> None:
        writer.annotate(annotation)


__all__ = ["TIMED", "Measurer", "Mode", "TimeMeasurer", "WriterArgs"]
