"""The capture engine: one frame loop, one place that records options and cleans up failures.

Every way of capturing drives this engine (``katra3d run``, the Python API, the pytest plugin, the
offscreen helper), each with a :class:`~katra3d.harness.engine.spec.CaptureSpec`; all of them open
it through :func:`katra3d.harness.run.pipeline.open_engine`. An :class:`Engine` owns

* the trace writer (header = capture options + host info) and the event buffer;
* its measurer's timer (:mod:`katra3d.harness.engine.measurer`: the clocks, or callgrind's counts);
* the frame loop (:meth:`Engine.loop`); a scene's lifecycle around it (setup,
  warmup, measured frames, last image, release, its errors as
  :class:`SceneError`) is :func:`katra3d.harness.engine.lifecycle.run_scene`'s;
* the failure path: whatever happens, the frames measured so far are drained
  into the trace and the trace is finished (``aborted`` or ``interrupted``);
* a keeper thread that hands buffered events to the writer when a frame takes
  long, so a stuck frame never holds back the frames before it.

Stopping (:mod:`katra3d.harness.engine.stopping`): :class:`StopFlag` is polled at every frame
boundary; :func:`stop_on_signals` routes SIGINT, SIGTERM and SIGHUP to it. A
second signal interrupts the frame in progress (``KeyboardInterrupt``), and if
the process has not finished its trace a second later, the keeper finishes it
(``interrupted``) and ends the process.
"""

from __future__ import annotations

import contextlib
import dataclasses
import sys
import time
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import Any

from katra3d.harness.engine import timers
from katra3d.harness.engine.draws import DrawZones
from katra3d.harness.engine.frame import HarnessFrame, frame_time_s
from katra3d.harness.engine.gcmarks import GcMarks
from katra3d.harness.engine.measurer import Measurer, TimeMeasurer
from katra3d.harness.engine.reference import ReferenceDraw
from katra3d.harness.engine.results import ProgressSink
from katra3d.harness.engine.scene_traceback import describe
from katra3d.harness.engine.spec import CaptureSpec
from katra3d.harness.engine.stopping import Keeper, StopFlag
from katra3d.scenes.api import NOMINAL_RATE_HZ
from katra_trace.errors import ConfigError, SceneError
from katra_trace.io.header import CaptureOptions
from katra_trace.io.images import image_key
from katra_trace.io.writer import TraceWriter
from katra_trace.metrics import mode_clock
from katra_trace.schema import Clock, Kind

#: ``measured_driver(one_frame, count)`` renders the measured frames by calling ``one_frame()``
#: ``count`` times (pytest-benchmark rounds).
MeasuredDriver = Callable[[Callable[[], None], int], None]

_pc = time.perf_counter_ns
#: What ``ctx.error`` (glGetError) says when GL recorded no error.
_NO_ERROR = "GL_NO_ERROR"

# --------------------------------------------------------------------------- what a spec resolves
# to


@dataclasses.dataclass(frozen=True)
class ResolvedCapture:
    """What a :class:`CaptureSpec` resolves to before any GL work.

    ``mode``: sync | gpu | instructions | cycles; ``reason``: why (recorded as
    ``timing_reason``); ``zones``: off | passes | draws; ``options``: the
    capture options as the trace header records them; ``writer_args``: extra
    keyword arguments for the TraceWriter (codec, batching).
    """

    mode: str
    reason: str
    zones: str
    options: CaptureOptions
    writer_args: Mapping[str, Any]


def resolve_capture(spec: CaptureSpec, measurer: Measurer | None = None) -> ResolvedCapture:
    """The mode (``measurer``'s; default: timed), zone mode and recorded capture options of
    ``spec`` (pure; ConfigError if impossible).
    """
    measurer = measurer or TimeMeasurer()
    zones = timers.zone_mode(spec.zones)
    mode, reason, writer_args = measurer.mode(spec.timing, spec.host.gl, spec.codec)
    recorded: dict[str, Any] = {
        "timing_mode": mode,
        "timing_reason": reason,
        "primary_clock": mode_clock(mode),
        "measure": measurer.measure,
        "zones": zones,
    }
    if zones == "draws":
        recorded["max_draw_zones"] = spec.max_draw_zones
    options = spec.options.replaced(**recorded)
    return ResolvedCapture(mode, reason, zones, options, writer_args)


# --------------------------------------------------------------------------- the engine


class Engine:
    """One capture into one trace: writer, buffer, timer, frame loop and clean-up.

    ``spec`` says what to capture and how (:class:`CaptureSpec`); ``ctx`` is the moderngl
    context; ``measurer`` how frames are measured (default: timed). ``writer`` replaces the
    trace writer (any object with TraceWriter's methods, e.g.
    :class:`~katra3d.harness.run.offscreen.MemorySink`);
    ``stop`` is the flag the frame loop polls (a fresh one if None).
    Use as a context manager: an exception finishes the trace as ``aborted``
    (``interrupted`` for KeyboardInterrupt) with every measured frame kept.
    """

    def __init__(
        self,
        ctx: Any,
        spec: CaptureSpec,
        *,
        measurer: Measurer | None = None,
        writer: Any = None,
        stop: StopFlag | None = None,
    ) -> None:
        self.measurer = measurer = measurer or TimeMeasurer()
        resolved = resolve_capture(spec, measurer)
        self.ctx = ctx
        self.spec = spec
        self.mode, self.reason, self.zones = resolved.mode, resolved.reason, resolved.zones
        self.counting = measurer.counts
        self.options = resolved.options
        self.writer = writer if writer is not None else _open_writer(spec, resolved)
        self.path = spec.path
        self.stop = stop or StopFlag()
        self.gl_errors: list[dict[str, Any]] = []
        self.gl_error_check = bool(spec.gl_error_check)
        self.scene_label = ""
        #: which device draws the frames, recorded with every kept frame
        #: (katra_trace.io.images.image_key)
        # katra_trace.io.images reads the header's mapping
        self.image_key = image_key(spec.host.as_dict())
        self._start_timer(spec)
        # each garbage collection becomes a marker (gcmarks.py) where the measurer installs it
        self.gc_marks = GcMarks(self.timer, self.buffer.add)
        measurer.settle(self.gc_marks)
        self.primary_clock = self.timer.primary_clock.name.lower()
        self._start_reference(spec.reference_every)
        self._keeper = Keeper(self)
        self._keeper.start()

    def _start_timer(self, spec: CaptureSpec) -> None:
        """The event buffer, the timer (and the draw instrument); a failure finishes the trace as
        aborted.
        """
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
        """The reference draw after every ``every``-th measured frame (sync
        timing only; 0: none)."""
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

    # -- scenes and markers

    def set_scene(self, label: str) -> int:
        """Attribute the following frames to scene ``label``; returns its string id."""
        self.scene_label = label
        if self.draws is not None:
            self.draws.new_scene()
        return self.timer.set_scene(label)

    def marker(self, name: str, flags: int, t0_ns: int, t1_ns: int) -> None:
        """A MARKER span (host clock, absolute perf_counter_ns) in the current scene."""
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

    # -- frames

    @property
    def frame_zone(self) -> Callable[[str], Any]:
        """What ``frame.zone`` is: the timer's zone, or the draw instrument's pass zone in draws
        mode.
        """
        return self.draws.pass_zone if self.draws is not None else self.timer.zone

    @property
    def frame_begin(self) -> Callable[[int, int], None]:
        """What opens a frame, looked up once by a frame loop: the timer's ``begin_frame``, or in
        draws mode :meth:`begin_frame` (it installs the draw wrappers too)."""
        return self.begin_frame if self.draws is not None else self.timer.begin_frame

    @property
    def frame_continue(self) -> Callable[[int, int], None]:
        """What opens a frame that follows the last one with nothing but the harness between them
        (the frame loop's frames after its first): the timer's ``continue_frame`` where it has one
        (the sync timer starts the frame's process time where the last frame's ended: one clock read
        per frame boundary), else :attr:`frame_begin`."""
        go_on = getattr(self.timer, "continue_frame", None)
        if go_on is None:
            return self.frame_begin
        return self._continue_frame if self.draws is not None else go_on

    def begin_frame(self, index: int, flags: int = 0) -> None:
        """Open frame ``index`` (``flags``: e.g. Flag.WARMUP); in draws mode, start instrumenting
        draws.
        """
        self.timer.begin_frame(index, flags)
        if self.draws is not None:
            self.draws.install()

    def _continue_frame(self, index: int, flags: int = 0) -> None:
        """:meth:`begin_frame` for the frame loop's later frames in draws mode
        (:attr:`frame_continue`).
        """
        self.timer.continue_frame(index, flags)  # type: ignore[attr-defined]
        if self.draws is not None:
            self.draws.install()

    def end_frame(self) -> None:
        """Close the frame (its events go to the buffer); SceneError if GL
        reported an error in it."""
        if self.draws is not None:
            self.draws.uninstall()
        self.timer.end_frame()
        if self.gl_error_check:
            error = self.ctx.error
            if error != _NO_ERROR:
                self.gl_error(error, self.timer.frame_index)

    def check_gl_errors(self, frame: int | None, where: str = "frame") -> None:
        """Raise SceneError (recorded in the trace first) if GL reports an error."""
        error = self.ctx.error
        if error != _NO_ERROR:
            self.gl_error(error, frame, where)

    def gl_error(self, error: object, frame: int | None, where: str = "frame") -> None:
        """Record ``error`` (what ``ctx.error`` returned, not GL_NO_ERROR) in the trace; raise
        SceneError.
        """
        label = self.scene_label
        record = {
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
        """Render frames ``first``, ``first+1``, … (``count`` of them, or until ``deadline_ns``).

        The one frame loop of katra3d: stops early at a frame boundary when the
        stop flag is set. Returns the number of frames rendered.
        """
        timer = self.timer
        # in draws mode the engine's begin/end install and remove the draw wrappers around each
        # frame (an exception leaves them installed until abort() takes them out); otherwise the
        # timer's own begin/end are called, and the GL error check is made here: two Python calls
        # less a frame
        draws = self.draws is not None
        # the first frame (and one after a reference draw) reads the clocks at its start; every
        # other frame starts where the last one ended (SyncTimer.continue_frame: one process-clock
        # read per boundary)
        start = begin = self.frame_begin
        go_on = self.frame_continue
        end = self.end_frame if draws else timer.end_frame
        check = self.gl_error_check and not draws
        ctx = self.ctx
        zone = self.frame_zone
        stop = self.stop
        pc = _pc
        rate = NOMINAL_RATE_HZ  # frame_time_s(i), inlined: one call less a frame
        reference = self.reference if not flags and bind is not None else None
        every = self.reference_every
        show = progress is not None and progress.tty
        # a relayed (counted) child reports every frame: the same work between frames in every
        # process, not a clock-driven choice of frames (it shapes the heap)
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
        """Let ``driver`` render ``count`` measured frames from index ``first``; returns how many it
        rendered.
        """
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

    # -- the end

    def summary(self) -> dict[str, Any]:
        """The engine's part of the trace summary: timing mode and clock, GPU lag, GL errors,
        reference draws.
        """
        out: dict[str, Any] = {
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

    def finish(self, status: str = "complete", summary: Mapping[str, Any] | None = None) -> None:
        """Drain pending measurements, write the summary and close the trace."""
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
        """Keep every frame measured so far and finish the trace as aborted/interrupted (never
        raises).
        """
        draws = getattr(self, "draws", None)
        if draws is not None:
            draws.uninstall()
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

    def finish_quietly(self, summary: dict[str, Any], status: str) -> None:
        """Finish the trace with ``summary`` and ``status`` unless it is finished already (never
        raises).
        """
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


def _open_writer(spec: CaptureSpec, resolved: ResolvedCapture) -> TraceWriter:
    """The trace writer of ``spec`` (claims the output path; the header is written here)."""
    if spec.path is None:
        raise ConfigError("a capture needs an output path")
    return TraceWriter(
        Path(spec.path),
        workload=spec.workload,
        capture_options=resolved.options,
        host_info=spec.host,
        notes=spec.notes,
        overwrite=spec.overwrite,
        failed_aside=spec.failed_aside,
        **resolved.writer_args,
    )


__all__ = ["Engine", "MeasuredDriver", "ResolvedCapture", "resolve_capture"]
