"""The capture engine: one frame loop, one place that records options and cleans up failures.

Every way of capturing drives this engine: ``katra3d run`` (:mod:`harness.runner`),
the Python API (:mod:`harness.capture`), the pytest plugin and the offscreen
helper (:mod:`harness.offscreen`). An :class:`Engine` owns

* the trace writer (header = capture options + host info) and the event buffer;
* the timer of the resolved timing mode (:mod:`harness.timers`);
* the frame loop (:meth:`Engine.loop`) and the per-scene lifecycle
  (:meth:`Engine.run_scene`: setup, warmup, measured frames, checks, last image,
  release), with the scene's errors turned into :class:`SceneError`;
* the failure path: whatever happens, the frames measured so far are drained
  into the trace and the trace is finished (``aborted`` or ``interrupted``);
* a keeper thread that hands buffered events to the writer when a frame takes
  long, so a stuck frame never holds back the frames before it.

Stopping: :class:`StopFlag` is polled at every frame boundary;
:func:`stop_on_signals` routes SIGINT, SIGTERM and SIGHUP to it. A second
signal interrupts the frame in progress (``KeyboardInterrupt``), and if the
process has not finished its trace a second later, the keeper finishes it
(``interrupted``) and ends the process.
"""

from __future__ import annotations

import contextlib
import sys
import time
from collections.abc import Callable, Iterator, Mapping
from pathlib import Path
from typing import Any

from harness import timers
from harness.events import EventBuffer
from harness.frame import HarnessFrame, seed_key
from harness.results import NoProgress, Progress, RunResult, SceneResult, median_text, scene_stats
from harness.stopping import Keeper, StopFlag, StopSignal, stop_on_signals
from katra_trace.errors import ConfigError, KatraError, SceneError
from katra_trace.header import CaptureOptions
from katra_trace.schema import Clock, Flag, Kind

_pc = time.perf_counter_ns


# --------------------------------------------------------------------------- the engine


class Engine:
    """One capture into one trace: writer, buffer, timer, frame loop and clean-up.

    ``host`` is the probe's host info (its ``gl`` part picks the timing mode);
    ``options`` the capture options to record (the engine adds the timing
    mode, its reason and the primary clock). ``writer`` replaces the trace
    writer (any object with TraceWriter's methods, e.g. :class:`MemorySink`).
    Use as a context manager: an exception finishes the trace as ``aborted``
    (``interrupted`` for KeyboardInterrupt) with every measured frame kept.
    """

    def __init__(self, ctx: Any, path: str | Path | None, *, host: Mapping[str, Any],
                 options: Mapping[str, Any] | CaptureOptions, workload: str, timing: str = "auto",
                 zones: bool | str = False, notes: str = "", writer: Any = None, stop: StopFlag | None = None,
                 gl_error_check: bool = True, measure: Mapping[str, Any] | None = None,
                 reference_every: int = 0, overwrite: bool = False, max_draw_zones: int | None = None,
                 codec: str | None = None) -> None:
        from katra_trace.writer import TraceWriter

        self.ctx = ctx
        self.zones = timers.zone_mode(zones)
        timed_zones = self.zones != "off"
        self.counting = measure is not None
        recorded = options.as_dict() if isinstance(options, CaptureOptions) else dict(options)
        writer_args: dict[str, Any] = {} if codec is None else {"codec": codec}
        if measure is not None:
            self.mode = str(measure["measure"])
            self.reason = (f"--measure {self.mode}: counted under callgrind (valgrind {measure.get('valgrind', '?')}), "
                           "main thread only, single-threaded llvmpipe")
            recorded["measure"] = {"mode": self.mode, **{k: measure[k] for k in (
                "valgrind", "command", "env", "frame_boundary", "pinned", "output") if k in measure}}
            recorded.update({"timing_mode": self.mode, "timing_reason": self.reason, "primary_clock": self.mode})
            # no time-based flushes: periodic work would land in whichever frame it happened in
            writer_args["batch_ms"] = 1e9
        else:
            self.mode, self.reason = timers.choose_mode(timing, dict(host.get("gl", {})))
            recorded.update({"timing_mode": self.mode, "timing_reason": self.reason,
                             "primary_clock": "wall" if self.mode == "sync" else "gpu",
                             "measure": {"mode": "time"}})
        recorded["zones"] = self.zones
        if self.zones == "draws":
            recorded["max_draw_zones"] = max_draw_zones
        self.options = recorded
        if writer is None:
            if path is None:
                raise ConfigError("a capture needs an output path")
            writer = TraceWriter(Path(path), workload=workload, capture_options=recorded,
                                 host_info=dict(host), notes=notes, overwrite=overwrite, **writer_args)
        self.writer = writer
        self.path = Path(path) if path is not None else None
        self.stop = stop or StopFlag()
        self.gl_errors: list[dict[str, Any]] = []
        self._check_gl = bool(gl_error_check)
        self._frames_done = 0
        self.scene_label = ""
        try:
            if measure is not None:
                from harness.counting import CountTimer

                self.buffer = EventBuffer(writer, max_rows=1 << 16, max_age_ns=None)
                self.timer: timers.Timer = CountTimer(ctx, writer, self.buffer, zones=timed_zones,
                                                      dump_base=Path(measure["dump_base"]),
                                                      cycles=self.mode == "cycles")
            else:
                self.buffer = EventBuffer(writer)
                self.timer = timers.make_timer(self.mode, ctx, writer, self.buffer, zones=timed_zones)
            self.draws: Any = None
            if self.zones == "draws":
                from harness.draws import DrawZones

                self.draws = DrawZones(ctx, self.timer, max_draw_zones=max_draw_zones)
        except BaseException as exc:
            self._finish_quietly({"error": f"timer setup failed: {type(exc).__name__}: {exc}"}, "aborted")
            raise
        self.primary_clock = self.timer.primary_clock.name.lower()
        self.reference: Any = None
        self.reference_every = 0
        self.reference_draws = 0
        if reference_every > 0 and self.mode == "sync":
            from harness.reference import ReferenceDraw

            try:
                self.reference = ReferenceDraw(ctx, self.timer)
            except BaseException as exc:
                self._finish_quietly({"error": f"reference draw setup failed: {_describe(exc)}"}, "aborted")
                raise
            self.reference_every = int(reference_every)
            writer.annotate({"type": "reference", **self.reference.options(self.reference_every)})
        self._keeper = Keeper(self)
        self._keeper.start()

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
        self.buffer.add((int(Kind.MARKER), int(Clock.WALL), int(flags), 0, t.scene_id, t.name_id(name), 0,
                         t0_ns - t.origin_ns, t1_ns - t0_ns, 0.0))

    # -- frames

    @property
    def frame_zone(self) -> Callable[[str], Any]:
        """What ``frame.zone`` is: the timer's zone, or the draw instrument's pass zone in draws mode."""
        return self.draws.pass_zone if self.draws is not None else self.timer.zone

    def begin_frame(self, index: int, flags: int = 0) -> None:
        self.timer.begin_frame(index, flags)
        if self.draws is not None:
            self.draws.install()

    def end_frame(self) -> None:
        if self.draws is not None:
            self.draws.uninstall()
        self.timer.end_frame()
        self._frames_done += 1
        if self._check_gl:
            self.check_gl_errors(self.timer.frame_index)

    def check_gl_errors(self, frame: int | None, where: str = "frame") -> None:
        """Raise SceneError (recorded in the trace first) if GL reports an error."""
        error = self.ctx.error
        if error == "GL_NO_ERROR":
            return
        label = self.scene_label
        record = {"type": "gl_error", "scene": label, "frame": frame, "where": where, "error": str(error)}
        self.gl_errors.append(record)
        with contextlib.suppress(Exception):
            self.writer.annotate(record)
        at = f"frame {frame}" if frame is not None else where
        raise SceneError(f"scene '{label}': OpenGL reported {error} in {at}; the trace records it")

    def loop(self, render: Callable[[Any], None], *, first: int, count: int | None, deadline_ns: int | None,
             flags: int, key: tuple[int, int], bind: Callable[[], None] | None = None,
             progress: Progress | None = None) -> int:
        """Render frames ``first``, ``first+1``, … (``count`` of them, or until ``deadline_ns``).

        The one frame loop of katra3d: stops early at a frame boundary when the
        stop flag is set. Returns the number of frames rendered.
        """
        from scenes.api import NOMINAL_RATE_HZ

        timer = self.timer
        # in draws mode the engine's begin/end install and remove the draw wrappers around each frame
        # (an exception leaves them installed until abort() takes them out)
        begin = timer.begin_frame if self.draws is None else self.begin_frame
        end = self.end_frame
        zone = self.frame_zone
        stop = self.stop
        pc = _pc
        rate = NOMINAL_RATE_HZ
        reference = self.reference if not flags and bind is not None else None
        every = self.reference_every
        show = progress is not None and progress.tty
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
            i += 1
            done += 1
            if reference is not None and done % every == 0:
                reference.run(i - 1)
            if show:
                now = pc()
                if now >= next_update_ns:
                    progress.advance(done)  # type: ignore[union-attr]
                    next_update_ns = now + 100_000_000
        if show:
            progress.advance(done)  # type: ignore[union-attr]
        return done

    # -- one scene, start to end

    def run_scene(self, scene_cls: type, label: str, params: Mapping[str, Any], *, size: tuple[int, int],
                  frames: int | None, warmup: int, duration_s: float | None = None, seed: int = 0,
                  spec: str = "", bind: Callable[[], None] | None = None, read_image: bool = True,
                  screenshot: Path | None = None, progress: Progress | None = None, index: int = 1,
                  total: int = 1, measured_driver: Callable[[Callable[[], None], int], None] | None = None,
                  ) -> SceneResult:
        """Set up, warm up, measure and release one scene; its events and annotation go to the trace.

        ``bind`` makes the harness's framebuffer current (before setup and
        whenever the scene left another one bound). ``measured_driver(one_frame,
        count)``, when given, renders the measured frames itself by calling
        ``one_frame()`` ``count`` times (pytest-benchmark rounds).
        Raises SceneError for a scene's own failure; returns a ``skipped``
        result when the scene raises SceneSkip.
        """
        from scenes.api import SceneSkip
        from scenes.image import image_checksum, read_pixels, write_png

        progress = progress or NoProgress()
        self.set_scene(label)
        total_frames = (frames or 0) + warmup if frames is not None else None
        progress.scene_started(index, label, total_frames)
        ctx = self.ctx
        scene = scene_cls()
        if bind is not None:
            bind()
        t0 = _pc()
        try:
            scene.setup(ctx, size, dict(params))
            ctx.finish()
            if self._check_gl:
                self.check_gl_errors(None, "setup")
        except SceneSkip as exc:
            t1 = _pc()
            self.marker("skipped", int(Flag.SKIPPED), t0, t1)
            self.buffer.flush()
            self.writer.annotate({"type": "scene", "scene": label, "spec": spec, "status": "skipped",
                                  "reason": str(exc), "params": dict(params)})
            _release_quietly(scene)
            progress.line(f"[{index}/{total}] {label}: skipped: {exc}")
            return SceneResult(label, "skipped", reason=str(exc), params=dict(params))
        except KatraError:
            _release_quietly(scene)
            raise
        except (Exception, SystemExit) as exc:
            _release_quietly(scene)
            raise SceneError(f"scene '{label}' failed in setup: {_describe(exc)}") from exc
        t1 = _pc()
        setup_ms = (t1 - t0) / 1e6
        self.marker("setup", int(Flag.SETUP), t0, t1)
        key = seed_key(seed, label)
        result = SceneResult(label, "ok", setup_ms=setup_ms, clock=self.primary_clock, params=dict(params))
        render = scene.render
        harness_fbo = getattr(ctx, "fbo", None) if bind is not None else None

        def rebind() -> None:
            if ctx.fbo is not harness_fbo:
                bind()  # type: ignore[misc]

        try:
            try:
                with self._quiet_process():
                    warm = self.loop(render, first=0, count=warmup, deadline_ns=None, flags=int(Flag.WARMUP),
                                     key=key, bind=rebind if bind is not None else None, progress=progress)
                    if measured_driver is not None:
                        measured = self._driven(render, warm, frames or 0, key, rebind if bind else None,
                                                measured_driver)
                    else:
                        deadline = _pc() + int(duration_s * 1e9) if duration_s is not None else None
                        measured = self.loop(render, first=warm, count=frames, deadline_ns=deadline, flags=0,
                                             key=key, bind=rebind if bind is not None else None, progress=progress)
            except KatraError:
                raise
            except (Exception, SystemExit) as exc:
                raise SceneError(f"scene '{label}' failed while rendering: {_describe(exc)}") from exc
            result.warmup = warm
            result.frames = measured
            if self.stop.set:
                result.status = "interrupted"
            self.timer.settle()  # reads back this scene's pending GPU queries (no-op in sync mode)
            if self.timer.frame_ns:
                result.stats = scene_stats(self.timer.frame_ns, counts=self.counting)
            annotation: dict[str, Any] = {"type": "scene", "scene": label, "spec": spec, "status": result.status,
                                          "params": dict(params), "setup_ms": round(setup_ms, 3),
                                          "warmup_frames": warm, "measured_frames": measured}
            if self.counting:
                # host time under valgrind is 20-100x slower than outside: not a setup time anyone can use
                del annotation["setup_ms"]
                result.setup_ms = 0.0
            if read_image and warm + measured > 0:
                pixels = read_pixels(ctx, scene)
                result.pixels = pixels
                result.checksum = image_checksum(pixels)
                annotation["last_frame_index"] = warm + measured - 1
                annotation["last_frame_sha256"] = result.checksum
                if screenshot is not None:
                    write_png(screenshot, pixels)
                    annotation["screenshot"] = str(screenshot)
            self.buffer.flush()
            self.writer.annotate(annotation)
            if self.counting:
                # encode and write everything now, between scenes: the writer thread must be idle while
                # the next scene's frames are counted (taking the GIL back from it costs the main thread)
                self.writer.flush()
        except BaseException:
            _release_quietly(scene)
            if bind is not None:
                with contextlib.suppress(Exception):
                    bind()
            raise
        try:
            scene.release()
        except (Exception, SystemExit) as exc:
            raise SceneError(f"scene '{label}' failed in release: {_describe(exc)}") from exc
        if bind is not None:
            try:
                bind()
            except Exception as exc:
                raise SceneError(f"scene '{label}' released the harness's framebuffer (self.target belongs to "
                                 f"the harness unless bind_target created it): {_describe(exc)}") from exc
        if not progress.tty:
            progress.line(f"[{index}/{total}] {label}: {result.frames} frames" + median_text(result))
        return result

    @contextlib.contextmanager
    def _quiet_process(self) -> Iterator[None]:
        """While counting: nothing but the frames may run in this process during a scene's frames.

        The writer thread is made idle first (a thread taking the GIL costs the main thread
        instructions in whichever frame it happens), and the cyclic garbage collector is paused
        (it is triggered by allocations of all threads, so it would run in different frames in
        different processes); it collects between scenes instead. A no-op when timing.
        """
        if not self.counting:
            yield
            return
        import gc

        self.buffer.flush()
        self.writer.flush()
        gc.collect()
        was_enabled = gc.isenabled()
        gc.disable()
        try:
            yield
        finally:
            if was_enabled:
                gc.enable()

    def _driven(self, render: Callable[[Any], None], first: int, count: int, key: tuple[int, int],
                bind: Callable[[], None] | None, driver: Callable[[Callable[[], None], int], None]) -> int:
        from scenes.api import NOMINAL_RATE_HZ

        state = {"i": first}

        def one_frame() -> None:
            i = state["i"]
            if bind is not None:
                bind()
            self.begin_frame(i, 0)
            render(HarnessFrame(i, i / NOMINAL_RATE_HZ, key, self.frame_zone))
            self.end_frame()
            state["i"] = i + 1

        driver(one_frame, count)
        return state["i"] - first

    # -- the end

    def summary(self) -> dict[str, Any]:
        out: dict[str, Any] = {"timing_mode": self.mode, "timing_reason": self.reason,
                               "primary_clock": self.primary_clock}
        if isinstance(self.timer, timers.GpuTimer):
            out["gpu_max_lag_frames"] = self.timer.max_lag_frames
        if self.gl_errors:
            out["gl_errors"] = self.gl_errors[:100]
        if self.reference_every:
            out["reference_draws"] = self.reference.count if self.reference is not None else self.reference_draws
        return out

    def _release_reference(self) -> None:
        if self.reference is not None:
            reference, self.reference = self.reference, None
            self.reference_draws = reference.count
            with contextlib.suppress(Exception):
                reference.release()

    def finish(self, status: str = "complete", summary: Mapping[str, Any] | None = None) -> None:
        """Drain pending measurements, write the summary and close the trace."""
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
        """Keep every frame measured so far and finish the trace as aborted/interrupted (never raises)."""
        if getattr(self, "draws", None) is not None:
            self.draws.uninstall()
        self._keeper.stop()
        self._release_reference()
        with contextlib.suppress(Exception):
            self.timer.drain()
        with contextlib.suppress(Exception):
            self.timer.close()
        with contextlib.suppress(Exception):
            self.buffer.flush()
        status = "interrupted" if isinstance(exc, KeyboardInterrupt) or self.stop.set else "aborted"
        error = {"error": _describe(exc)} if exc is not None else {}
        self._finish_quietly({**self.summary(), **error}, status)

    def _finish_quietly(self, summary: dict[str, Any], status: str) -> None:
        writer = self.writer
        if not getattr(writer, "finished", False):
            with contextlib.suppress(Exception):
                writer.finish(summary, status=status)

    def __enter__(self) -> Engine:
        return self

    def __exit__(self, exc_type: type[BaseException] | None, exc: BaseException | None, tb: Any) -> None:
        if exc_type is not None:
            self.abort(exc)
        else:
            self._keeper.stop()


def _describe(exc: BaseException | None) -> str:
    if exc is None:
        return ""
    if isinstance(exc, SystemExit):
        return f"SystemExit({exc.code!r}): scene code called sys.exit()"
    # one line, whatever the exception's text (a GLSL compiler log has many)
    lines = [" ".join(line.split()) for line in str(exc).splitlines()]
    text = " | ".join(line for line in lines if line and set(line) - set("=-~"))
    if len(text) > 400:
        text = text[:397] + "..."
    return f"{type(exc).__name__}: {text}".rstrip(": ")


def _release_quietly(scene: Any) -> None:
    with contextlib.suppress(Exception, SystemExit):
        scene.release()


__all__ = [
    "Engine",
    "NoProgress",
    "Progress",
    "RunResult",
    "SceneResult",
    "StopFlag",
    "StopSignal",
    "stop_on_signals",
]  # results and stopping names are re-exported: the engine's drivers import them from here
