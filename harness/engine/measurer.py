"""How an engine measures frames, one :class:`Measurer` protocol: by clock (:class:`TimeMeasurer`)
or by callgrind's counts (:class:`~katra3d.harness.engine.counting.CountMeasurer`), picked by the
caller. The engine and a scene's lifecycle ask it wherever timing and counting differ."""

from __future__ import annotations

import contextlib
from collections.abc import Mapping
from typing import TYPE_CHECKING, Any, Protocol

from katra3d.harness.engine import heap, timers
from katra3d.harness.engine.events import EventBuffer
from katra_trace.io.header import MeasureOptions

if TYPE_CHECKING:
    from katra3d.harness.engine.gcmarks import GcMarks
    from katra3d.harness.engine.results import SceneResult
    from katra_trace.io.header import GLInfo

#: What a capture that times its frames records under ``measure``.
TIMED = MeasureOptions(mode="time")


#: A measurer's resolved mode: its name (sync | gpu | instructions | cycles), the reason the header
#: records (``timing_reason``) and extra TraceWriter keywords.
Mode = tuple[str, str, Mapping[str, Any]]


class Measurer(Protocol):
    """What the engine asks of the way it measures frames. ``measure``: what the header records;
    ``counts``: frames are measured in counts (statistics, progress wording); ``relayed``: progress
    is reported every frame and every scene's line shown (a counted child's relay)."""

    measure: MeasureOptions
    counts: bool
    relayed: bool

    def mode(self, timing: str, gl: GLInfo, codec: str | None) -> Mode: ...

    def start(
        self, mode: str, ctx: Any, writer: Any, *, zones: bool
    ) -> tuple[EventBuffer, timers.Timer]: ...

    #: the process prepared once the timer runs (heap thresholds, garbage-collection marks)
    def settle(self, gc_marks: GcMarks) -> None: ...

    #: what holds while a scene's frames run
    def frames(
        self, buffer: EventBuffer, writer: Any
    ) -> contextlib.AbstractContextManager[None]: ...

    #: after a scene's last frame, before its image is read back
    def frames_done(self, timer: timers.Timer) -> None: ...

    #: a scene's annotation written (and whatever must follow it)
    def write_scene(self, writer: Any, annotation: dict[str, Any], result: SceneResult) -> None: ...


class TimeMeasurer:
    """Frames timed by the clocks of ``--timing`` (:func:`timers.choose_mode`)."""

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
        # a frame must not pay page faults for memory the driver freed in the last one (heap.py)
        heap.keep_freed_memory()
        gc_marks.install()

    def frames(self, buffer: EventBuffer, writer: Any) -> contextlib.AbstractContextManager[None]:
        return contextlib.nullcontext()

    def frames_done(self, timer: timers.Timer) -> None:
        pass

    def write_scene(self, writer: Any, annotation: dict[str, Any], result: SceneResult) -> None:
        writer.annotate(annotation)


__all__ = ["TIMED", "Measurer", "Mode", "TimeMeasurer"]
