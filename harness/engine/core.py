"""The capture engine: the one frame loop every capture drives (via ``run.pipeline.open_engine``).
Whatever fails, measured frames reach the trace and it is finished (``aborted``/``interrupted``); a
keeper thread flushes events during a long frame. See docs/architecture.md."""

from __future__ import annotations

import contextlib
import dataclasses
import sys
import time
from collections.abc import Callable, Mapping
from typing import Any

from katra3d.harness.engine import timers
from katra3d.harness.engine.draws import DrawZones
from katra3d.harness.engine.frame import HarnessFrame, frame_time_s
from katra3d.harness.engine.gcmarks import GcMarks
from katra3d.harness.engine.measurer import Measurer, TimeMeasurer, WriterArgs
from katra3d.harness.engine.reference import ReferenceDraw
from katra3d.harness.engine.results import ProgressSink
from katra3d.harness.engine.scene_traceback import describe
from katra3d.harness.engine.spec import CaptureSpec
from katra3d.harness.engine.stopping import Keeper, StopFlag
from katra3d.scenes.api import NOMINAL_RATE_HZ
from katra_trace.errors import SceneError
from katra_trace.io.header import CaptureOptions
from katra_trace.io.images import image_key
from katra_trace.jsontext import JsonObject, JsonValue
from katra_trace.metrics import mode_clock
from katra_trace.schema import Clock, Kind

# calls ``one_frame()`` ``count`` times (pytest-benchmark rounds)
MeasuredDriver = Callable[[Callable[[], None], int], None]

_pc = time.perf_counter_ns
_NO_ERROR = "GL_NO_ERROR"


@dataclasses.dataclass(frozen=True)
class ResolvedCapture:
    """A :class:`CaptureSpec` resolved before any GL work."""

    mode: str
    reason: str
    zones: str
    options: CaptureOptions
    writer_args: WriterArgs


def resolve_capture(spec: CaptureSpec, measurer: Measurer | None = None) -> ResolvedCapture:
    """Mode, zone mode and recorded options of ``spec`` (pure; ConfigError if impossible)."""
    measurer = measurer or TimeMeasurer()
    zones = timers.zone_mode(spec.zones)
    mode, reason, writer_args = measurer.mode(spec.timing, spec.host.gl, spec.codec)
    options = spec.options.replaced(
        timing_mode=mode,
        timing_reason=reason,
        primary_clock=mode_clock(mode),
        measure=measurer.measure,
        zones=zones,
    )
    if zones == "draws":
        options = options.replaced(max_draw_zones=spec.max_draw_zones)
    return ResolvedCapture(mode, reason, zones, options, writer_args)


class Engine:
    """One capture into one trace (``writer``: the TraceWriter the capture service opened, or a
    MemorySink). As a context manager an exception finishes the trace ``aborted``/``interrupted``,
    frames kept."""

    def __init__(
        self,
        ctx: Any,
        spec: CaptureSpec,
        writer: Any,
        *,
        measurer: Measurer,
        resolved: ResolvedCapture,
        stop: StopFlag | None = None,
    ) -> None:
        self.measurer = measurer
        self.ctx = ctx
        self.spec = spec
        self.mode, self.reason, self.zones = resolved.mode, resolved.reason, resolved.zones
        self.counting = measurer.counts
        self.options = resolved.options
        self.writer = writer
        self.path = spec.path
        self.stop = stop or StopFlag()
        self.gl_errors: list[JsonObject] = []
        self.gl_error_check = bool(spec.gl_error_check)
        self.scene_label = ""
        self.image_key = image_key(spec.host.as_dict())
        self._start_timer(spec)
        self.gc_marks = GcMarks(self.timer, self.buffer.add)
        measurer.settle(self.gc_marks)
        self.primary_clock = self.timer.primary_clock.name.lower()
        self._start_reference(spec.reference_every)
        self._keeper = Keeper(self)
        self._keeper.start()

    def _start_timer(self, spec: CaptureSpec) -> None:
        try:
            self.buffer, self.timer = self.measurer.start(
                self.mode, self.ctx, self.writer, zones=self.zones != "off"
            )
            self.draws: DrawZones | None = None
            if self.zones == "draws":
                self.draws = DrawZones(self.ctx, self.timer, max_draw_zones=spec.max_draw_zones)
        except BaseException as exc:
            self.finish_quietly(
                {"error": f"timer setup failed: {type(exc).__name__}: {exc}"}, "aborted"
            )
            raise

    def _start_reference(self, every: int) -> None:
        """The reference draw after every ``every``-th measured frame (sync mode only)."""
        self.reference: ReferenceDraw | None = None
        self.reference_every = 0
        self.reference_draws = 0
        if every <= 0 or self.mode != "sync":
            return
        try:
            self.reference = ReferenceDraw(self.ctx, self.timer)
        except BaseException as exc:
            self.finish_quietly(
                {"error": f"reference draw setup failed: {describe(exc)}"}, "aborted"
            )
            raise
        self.reference_every = int(every)
        self.writer.annotate({"type": "reference", **self.reference.options(self.reference_every)})

    def set_scene(self, label: str) -> int:
        self.scene_label = label
        if self.draws is not None:
            self.draws.new_scene()
        return self.timer.set_scene(label)

    def marker(self, name: str, flags: int, t0_ns: int, t1_ns: int) -> None:
        """A MARKER span (absolute perf_counter_ns) in the current scene."""
        t = self.timer
        self.buffer.add(
            (
                int(Kind.MARKER),
                int(Clock.WALL),
                int(flags),
                0,
                t.scene_id,
                t.name_id(name),
                0,
                t0_ns - t.origin_ns,
                t1_ns - t0_ns,
                0.0,
            )
        )

    @property
    def frame_zone(self) -> Callable[[str], Any]:
        return self.draws.pass_zone if self.draws is not None else self.timer.zone

    @property
    def frame_begin(self) -> Callable[[int, int], None]:
        return self.begin_frame if self.draws is not None else self.timer.begin_frame

    @property
    def frame_continue(self) -> Callable[[int, int], None]:
        """Opens a frame right after the last: one clock read per boundary where the timer can."""
        go_on = getattr(self.timer, "continue_frame", None)
        if go_on is None:
            return self.frame_begin
        return self._continue_frame if self.draws is not None else go_on

    def begin_frame(self, index: int, flags: int = 0) -> None:
        self.timer.begin_frame(index, flags)
        if self.draws is not None:
            self.draws.install()

    def _continue_frame(self, index: int, flags: int = 0) -> None:
        self.timer.continue_frame(index, flags)  # type: ignore[attr-defined]
        if self.draws is not None:
            self.draws.install()

    def end_frame(self) -> None:
        """Close the frame; SceneError if GL reported an error in it."""
        if self.draws is not None:
            self.draws.uninstall()
        self.timer.end_frame()
        if self.gl_error_check:
            error = self.ctx.error
            if error != _NO_ERROR:
                self.gl_error(error, self.timer.frame_index)

    def check_gl_errors(self, frame: int | None, where: str = "frame") -> None:
        error = self.ctx.error
        if error != _NO_ERROR:
            self.gl_error(error, frame, where)

    def gl_error(self, error: object, frame: int | None, where: str = "frame") -> None:
        label = self.scene_label
        record: JsonObject = {
            "type": "gl_error",
            "scene": label,
            "frame": frame,
            "where": where,
            "error": str(error),
        }
        self.gl_errors.append(record)
        with contextlib.suppress(Exception):
            self.writer.annotate(record)
        at = f"frame {frame}" if frame is not None else where
        raise SceneError(f"scene '{label}': OpenGL reported {error} in {at}; the trace records it")

    def loop(
        self,
        render: Callable[[Any], None],
        *,
        first: int,
        count: int | None,
        deadline_ns: int | None,
        flags: int,
        key: tuple[int, int],
        bind: Callable[[], None] | None = None,
        progress: ProgressSink | None = None,
    ) -> int:
        """``count`` frames from ``first`` (or until ``deadline_ns``), ending at a frame boundary
        once the stop flag is set; returns the number rendered."""
        timer = self.timer
        # in draws mode the engine's begin/end move the draw wrappers
        draws = self.draws is not None
        start = begin = self.frame_begin
        go_on = self.frame_continue
        end = self.end_frame if draws else timer.end_frame
        check = self.gl_error_check and not draws
        ctx = self.ctx
        zone = self.frame_zone
        stop = self.stop
        pc = _pc
        rate = NOMINAL_RATE_HZ
        reference = self.reference if not flags and bind is not None else None
        every = self.reference_every
        show = progress is not None and progress.tty
        # a relayed (counted) child reports every frame: every process does the same work
        every_frame = self.measurer.relayed
        next_update_ns = 0
        i = first
        done = 0
        while not stop.set:
            if count is not None:
                if done >= count:
                    break
            elif deadline_ns is None or pc() >= deadline_ns:
                break
            if bind is not None:
                bind()
            begin(i, flags)
            render(HarnessFrame(i, i / rate, key, zone))
            end()
            if check:
                error = ctx.error
                if error != _NO_ERROR:
                    self.gl_error(error, i)
            i += 1
            done += 1
            begin = go_on
            if reference is not None and done % every == 0:
                reference.run(i - 1)
                begin = start  # the reference draw is not the next frame's work
            if show:
                now = pc()
                if every_frame or now >= next_update_ns:
                    progress.advance(done)  # type: ignore[union-attr]
                    next_update_ns = now + 100_000_000
        if show:
            progress.advance(done)  # type: ignore[union-attr]
        return done

    def drive(
        self,
        render: Callable[[Any], None],
        first: int,
        count: int,
        key: tuple[int, int],
        bind: Callable[[], None] | None,
        driver: MeasuredDriver,
    ) -> int:
        """Let ``driver`` render ``count`` measured frames; returns how many."""
        state = {"i": first}

        def one_frame() -> None:
            i = state["i"]
            if bind is not None:
                bind()
            self.begin_frame(i, 0)
            render(HarnessFrame(i, frame_time_s(i), key, self.frame_zone))
            self.end_frame()
            state["i"] = i + 1

        driver(one_frame, count)
        return state["i"] - first

    def summary(self) -> JsonObject:
        out: JsonObject = {
            "timing_mode": self.mode,
            "timing_reason": self.reason,
            "primary_clock": self.primary_clock,
        }
        if isinstance(self.timer, timers.GpuTimer):
            out["gpu_max_lag_frames"] = self.timer.max_lag_frames
        if self.gl_errors:
            out["gl_errors"] = self.gl_errors[:100]
        if self.reference_every:
            out["reference_draws"] = (
                self.reference.count if self.reference is not None else self.reference_draws
            )
        return out

    def _release_reference(self) -> None:
        if self.reference is not None:
            reference, self.reference = self.reference, None
            self.reference_draws = reference.count
            with contextlib.suppress(Exception):
                reference.release()

    def finish(
        self, status: str = "complete", summary: Mapping[str, JsonValue] | None = None
    ) -> None:
        self.gc_marks.uninstall()
        self._keeper.stop()
        self._release_reference()
        try:
            self.timer.drain()
            self.timer.close()
        except BaseException:
            self.abort(sys.exc_info()[1])
            raise
        self.writer.finish(summary={**self.summary(), **dict(summary or {})}, status=status)

    def abort(self, exc: BaseException | None) -> None:
        """Keep the measured frames, finish as aborted/interrupted; never raises."""
        if self.draws is not None:
            self.draws.uninstall()
        self.gc_marks.uninstall()
        self._keeper.stop()
        self._release_reference()
        with contextlib.suppress(Exception):
            self.timer.drain()
        with contextlib.suppress(Exception):
            self.timer.close()
        with contextlib.suppress(Exception):
            self.buffer.flush()
        status = "interrupted" if isinstance(exc, KeyboardInterrupt) or self.stop.set else "aborted"
        error = {"error": describe(exc)} if exc is not None else {}
        self.finish_quietly({**self.summary(), **error}, status)

    def finish_quietly(self, summary: JsonObject, status: str) -> None:
        writer = self.writer
        if not getattr(writer, "finished", False):
            with contextlib.suppress(Exception):
                writer.finish(summary, status=status)

    def __enter__(self) -> Engine:
        return self

    def __exit__(
        self, exc_type: type[BaseException] | None, exc: BaseException | None, tb: Any
    ) -> None:
        if exc_type is not None:
            self.abort(exc)
        else:
            self.gc_marks.uninstall()
            self._keeper.stop()


__all__ = ["Engine", "MeasuredDriver", "ResolvedCapture", "resolve_capture"]
