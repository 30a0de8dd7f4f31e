"""How an engine measures frames: by clock (:class:`TimeMeasurer`) or by callgrind's counts
(:class:`~katra3d.harness.engine.counting.CountMeasurer`), behind one :class:`Measurer` protocol.

The engine and a scene's lifecycle ask their measurer at each point where timing and counting
differ (the timer, the writer's batching, what runs beside the frames, what a scene's record
keeps); the caller that knows how the capture measures picks the measurer.
"""

from __future__ import annotations

import contextlib
import dataclasses
from collections.abc import Iterator, Mapping
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


@dataclasses.dataclass(frozen=True)
class Mode:
    """A measurer's resolved mode: ``name`` (sync | gpu | instructions | cycles), ``reason`` (the
    header's ``timing_reason``), ``writer_args`` (extra TraceWriter keywords)."""

    name: str
    reason: str
    writer_args: Mapping[str, Any]


class Measurer(Protocol):
    """What the engine asks of the way it measures frames.

    ``measure``: what the header records under ``measure``; ``counts``: frames are measured in
    counts (scene statistics, progress wording); ``relayed``: progress is reported every frame
    and every scene's line shown (a counted child's relay), never on a clock.
    """

    measure: MeasureOptions
    counts: bool
    relayed: bool

    def mode(self, timing: str, gl: GLInfo, codec: str | None) -> Mode:
        """The mode, its reason and the writer's arguments (ConfigError if impossible)."""
        ...

    def start(
        self, mode: str, ctx: Any, writer: Any, *, zones: bool
    ) -> tuple[EventBuffer, timers.Timer]:
        """The event buffer and the timer of ``mode``."""
        ...

    def settle(self, gc_marks: GcMarks) -> None:
        """Prepare the process once the timer runs (heap thresholds, garbage-collection marks)."""
        ...

    def frames(self, buffer: EventBuffer, writer: Any) -> contextlib.AbstractContextManager[None]:
        """What holds while a scene's frames run."""
        ...

    def frames_done(self, timer: timers.Timer) -> None:
        """After a scene's last frame, before its image is read back."""
        ...

    def write_scene(self, writer: Any, annotation: dict[str, Any], result: SceneResult) -> None:
        """Write a scene's annotation (and whatever must follow it)."""
        ...


def _writer_args(codec: str | None) -> dict[str, Any]:
    return {} if codec is None else {"codec": codec}


class TimeMeasurer:
    """Frames timed by the clocks of ``--timing`` (:func:`timers.choose_mode`)."""

    measure = TIMED
    counts = False
    relayed = False

    def mode(self, timing: str, gl: GLInfo, codec: str | None) -> Mode:
        name, reason = timers.choose_mode(timing, gl)
        return Mode(name, reason, _writer_args(codec))

    def start(
        self, mode: str, ctx: Any, writer: Any, *, zones: bool
    ) -> tuple[EventBuffer, timers.Timer]:
        buffer = EventBuffer(writer)
        return buffer, timers.make_timer(mode, ctx, writer, buffer, zones=zones)

    def settle(self, gc_marks: GcMarks) -> None:
        # a frame must not pay page faults for memory the driver freed in the last one (heap.py)
        heap.keep_freed_memory()
        gc_marks.install()

    @contextlib.contextmanager
    def frames(self, buffer: EventBuffer, writer: Any) -> Iterator[None]:
        yield

    def frames_done(self, timer: timers.Timer) -> None:
        pass

    def write_scene(self, writer: Any, annotation: dict[str, Any], result: SceneResult) -> None:
        writer.annotate(annotation)


__all__ = ["TIMED", "Measurer", "Mode", "TimeMeasurer"]
