"""The capture engine and a scene's lifecycle on it, tested directly.

Most tests are pure: the engine runs in ``sync`` mode on a stand-in context
(what the sync timer and the lifecycle touch: ``finish``, ``error``, ``fbo``)
into a :class:`MemorySink`, with scenes that fail exactly where a test says.
The ``gl`` tests run the same paths on a real llvmpipe context into a real
trace file and read it back.
"""

from __future__ import annotations

import os
import signal
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from katra3d.harness.engine import stopping
from katra3d.harness.engine.core import Engine, resolve_capture
from katra3d.harness.engine.counting import CountMeasurer
from katra3d.harness.engine.lifecycle import run_scene, scene_errors
from katra3d.harness.engine.results import SceneResult
from katra3d.harness.engine.scene_traceback import describe
from katra3d.harness.engine.spec import CaptureSpec, SceneSpec
from katra3d.harness.engine.stopping import StopFlag, StopSignal
from katra3d.harness.gl import probe
from katra3d.harness.run.offscreen import MemorySink
from katra3d.harness.run.pipeline import open_engine
from katra3d.scenes.api import NOMINAL_RATE_HZ, Scene, SceneSkip
from katra_trace import open_trace
from katra_trace.errors import ConfigError, SceneError
from katra_trace.io.header import (
    GLInfo,
    HostInfo,
    MeasureOptions,
    TimerQueryInfo,
    build_capture_options,
)
from katra_trace.schema import EVENT_DTYPE, GC_NAME, Clock, Flag, Kind

SOFTWARE_GL = HostInfo(
    gl=GLInfo(
        renderer="llvmpipe (LLVM 15.0.6, 256 bits)",
        software_renderer=True,
        timer_query=TimerQueryInfo(supported=True, counter_bits=64),
    )
)
HARDWARE_GL = HostInfo(
    gl=GLInfo(
        renderer="Radeon",
        software_renderer=False,
        timer_query=TimerQueryInfo(supported=True, counter_bits=64),
    )
)


# --------------------------------------------------------------------------- test doubles


class FakeContext:
    """What the engine touches on a moderngl context in sync mode, without GL.

    ``error`` is what ``glGetError`` would report; ``fbo`` the bound framebuffer.
    """

    supports_debug_scopes = False

    def __init__(self) -> None:
        self.error = "GL_NO_ERROR"
        self.harness_fbo = object()
        self.fbo: object = self.harness_fbo
        self.mglo = object()
        self.finishes = 0

    def finish(self) -> None:
        self.finishes += 1

    def bind(self) -> None:
        """The harness's framebuffer binder."""
        self.fbo = self.harness_fbo


def probe_scene(
    log: list[str],
    *,
    fail_in: str = "",
    at: int = 0,
    exc: BaseException | None = None,
    on_render: Callable[[Any, int], None] | None = None,
) -> type:
    """A scene class without GL that logs its calls into ``log`` and raises ``exc`` in ``fail_in``
    ("setup", "render" at frame ``at``, "release"); ``on_render(frame_obj, index)`` runs every
    frame."""
    error = exc if exc is not None else ValueError("boom\n  ===\n  second line")

    class Probe:
        name = "probe"

        def setup(self, ctx: Any, size: tuple[int, int], params: dict[str, Any]) -> None:
            log.append(f"setup {size[0]}x{size[1]} {sorted(params.items())}")
            if fail_in == "setup":
                raise error

        def render(self, frame: Any) -> None:
            log.append(f"render {frame.index} {frame.time_s:.4f}")
            if on_render is not None:
                on_render(frame, frame.index)
            if fail_in == "render" and frame.index == at:
                raise error

        def release(self) -> None:
            log.append("release")
            if fail_in == "release":
                raise error

        def output_framebuffer(self) -> None:
            return None

    return Probe


Rig = tuple[Engine, MemorySink, FakeContext]


def sink_engine(*, stop: StopFlag | None = None, ctx: FakeContext | None = None) -> Rig:
    """An engine in sync mode on a stand-in context, writing into a MemorySink."""
    ctx = ctx or FakeContext()
    sink = MemorySink()
    engine = open_engine(
        ctx, CaptureSpec(None, "unit", host=SOFTWARE_GL, timing="sync"), writer=sink, stop=stop
    )
    return engine, sink, ctx


def scene_spec(cls: type, *, frames: int | None = 3, warmup: int = 2, **kw: Any) -> SceneSpec:
    return SceneSpec(
        cls, "probe", {"k": 1}, size=(8, 4), frames=frames, warmup=warmup, read_image=False, **kw
    )


def events(sink: MemorySink) -> np.ndarray:
    return np.concatenate(sink.arrays) if sink.arrays else np.empty(0, dtype=EVENT_DTYPE)


def wall_frames(sink: MemorySink) -> list[tuple[int, int]]:
    """(frame index, flags) of the WALL frame events handed to the sink."""
    ev = events(sink)
    sel = ev[(ev["kind"] == int(Kind.FRAME)) & (ev["clock"] == int(Clock.WALL))]
    return [(int(e["frame"]), int(e["flags"])) for e in sel]


def markers(sink: MemorySink) -> list[tuple[str, int]]:
    """(name, flags) of the MARKER events but the garbage collections' (whenever Python collects:
    gcmarks.py).
    """
    ev = events(sink)
    return [
        (sink.strings[int(e["name"])], int(e["flags"]))
        for e in ev[ev["kind"] == int(Kind.MARKER)]
        if sink.strings[int(e["name"])] != GC_NAME
    ]


def scene_annotation(sink: MemorySink) -> dict[str, Any]:
    (record,) = [a for a in sink.annotations if a.get("type") == "scene"]
    return record


# --------------------------------------------------------------------------- the spec, resolved
# (pure)


def test_resolve_capture_records_the_mode_after_the_callers_options() -> None:
    options = build_capture_options({"api": "x", "measure": "time", "zones": True})
    resolved = resolve_capture(
        CaptureSpec(Path("t.katra"), "w", host=SOFTWARE_GL, options=options, zones=True)
    )
    assert (resolved.mode, resolved.zones) == ("sync", "passes")
    assert "software renderer" in resolved.reason
    recorded = resolved.options.as_dict()
    # the request's keys keep their places (its measure and zones replaced by what was done), the
    # engine's follow
    assert list(recorded) == [
        "api",
        "measure",
        "zones",
        "timing_mode",
        "timing_reason",
        "primary_clock",
    ]
    assert recorded["primary_clock"] == "wall" and recorded["measure"] == {"mode": "time"}
    assert recorded["zones"] == "passes" and resolved.options.measure_mode == "time"
    assert dict(resolved.writer_args) == {}
    assert list(resolve_capture(CaptureSpec(None, "w", host=SOFTWARE_GL)).options.as_dict()) == [
        "timing_mode",
        "timing_reason",
        "primary_clock",
        "measure",
        "zones",
    ]


def test_resolve_capture_gpu_draws_codec_and_counting() -> None:
    gpu = resolve_capture(
        CaptureSpec(None, "w", host=HARDWARE_GL, zones="draws", max_draw_zones=7, codec="none")
    )
    assert (gpu.mode, gpu.options.primary_clock, gpu.zones) == ("gpu", "gpu", "draws")
    assert gpu.options.max_draw_zones == 7 and dict(gpu.writer_args) == {"codec": "none"}
    all_draws = resolve_capture(
        CaptureSpec(None, "w", host=HARDWARE_GL, zones="draws")
    ).options.as_dict()
    assert all_draws["max_draw_zones"] is None  # recorded as null: every draw timed
    measure = MeasureOptions(mode="instructions", valgrind="3.22", pinned={"LP_NUM_THREADS": "0"})
    counted = resolve_capture(
        CaptureSpec(None, "w", zones=True), CountMeasurer(measure, Path("/x/cg.out"))
    )
    assert counted.mode == "instructions" and "valgrind 3.22" in counted.reason
    assert counted.options.as_dict()["measure"] == {
        "mode": "instructions",
        "valgrind": "3.22",
        "pinned": {"LP_NUM_THREADS": "0"},
    }
    assert counted.options.primary_clock == "instructions" and counted.options.zones == "passes"
    assert counted.writer_args["batch_ms"] >= 1e6  # no time-based flushes while counting
    # and the writer's thread never runs beside the frames
    assert counted.writer_args["sync"] is True


def test_the_writer_is_the_one_place_the_header_becomes_a_dict(tmp_path: Path) -> None:
    """The engine hands its typed records to the writer, which writes exactly their JSON object."""
    path = tmp_path / "t.katra"
    options = build_capture_options({"frames": 3, "zones": "off"}, api="test")
    engine = open_engine(
        FakeContext(), CaptureSpec(path, "w", host=SOFTWARE_GL, options=options, timing="sync")
    )
    assert isinstance(engine.options, type(options)) and isinstance(
        engine.writer.header["capture_options"], dict
    )
    with engine:
        engine.finish()
    header = open_trace(path).header
    assert (
        header.capture_options.as_dict()
        == engine.options.as_dict()
        == engine.writer.header["capture_options"]
    )
    assert header.host_info == SOFTWARE_GL and header.host_info.as_dict() == SOFTWARE_GL.as_dict()


@pytest.mark.parametrize(
    ("spec", "match"),
    [
        (CaptureSpec(None, "w", host=SOFTWARE_GL, timing="gpu"), "software renderer"),
        (CaptureSpec(None, "w", timing="fast"), "unknown timing mode 'fast'"),
        (CaptureSpec(None, "w", zones="everything"), "unknown --zones 'everything'"),
    ],
)
def test_resolve_capture_refuses_impossible_specs(spec: CaptureSpec, match: str) -> None:
    with pytest.raises(ConfigError, match=match):
        resolve_capture(spec)


def test_an_engine_without_writer_or_path_is_refused() -> None:
    with pytest.raises(ConfigError, match="needs an output path"):
        open_engine(FakeContext(), CaptureSpec(None, "w", host=SOFTWARE_GL))


# --------------------------------------------------------------------------- a good run (pure)


def test_frames_are_counted_and_warmup_is_flagged() -> None:
    log: list[str] = []
    engine, sink, ctx = sink_engine()
    with engine:
        result = run_scene(engine, scene_spec(probe_scene(log)), bind=ctx.bind)
        engine.finish("complete", {"frames": 3})
    assert (result.status, result.warmup, result.frames, result.clock) == ("ok", 2, 3, "wall")
    assert result.stats is not None and result.stats["n"] == 3  # warmup excluded from the stats
    assert log == ["setup 8x4 [('k', 1)]"] + [
        f"render {i} {i / NOMINAL_RATE_HZ:.4f}" for i in range(5)
    ] + ["release"]
    w = int(Flag.WARMUP)
    assert wall_frames(sink) == [(0, w), (1, w), (2, 0), (3, 0), (4, 0)]
    assert markers(sink) == [("setup", int(Flag.SETUP))]
    note = scene_annotation(sink)
    assert {
        k: note[k] for k in ("scene", "status", "params", "warmup_frames", "measured_frames")
    } == {
        "scene": "probe",
        "status": "ok",
        "params": {"k": 1},
        "warmup_frames": 2,
        "measured_frames": 3,
    }
    assert "last_frame_sha256" not in note  # read_image=False
    assert (
        sink.status == "complete"
        and sink.summary["timing_mode"] == "sync"
        and sink.summary["frames"] == 3
    )


def _counted_process_reads(monkeypatch: pytest.MonkeyPatch) -> list[int]:
    """Make the sync timer's process clock a counter that goes up by 1,000 ns a read; returns the
    values read.
    """
    from katra3d.harness.engine import timers

    reads: list[int] = []

    def read(clock: int) -> int:
        reads.append(1_000 * (len(reads) + 1))
        return reads[-1]

    monkeypatch.setattr(timers, "_process_ns", read)
    return reads


def process_frames(sink: MemorySink) -> list[int]:
    """dur_ns of the PROCESS frame events handed to the sink, in order."""
    ev = events(sink)
    return [
        int(e["dur_ns"])
        for e in ev[(ev["kind"] == int(Kind.FRAME)) & (ev["clock"] == int(Clock.PROCESS))]
    ]


def test_the_frame_loop_reads_the_process_clock_once_per_frame_boundary(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """In run's loop the end of one frame is the start of the next: 2 warm-up and
    3 measured frames (two loops) read the process clock 2 + 1 and 3 + 1 times, and every frame
    after a loop's first spans one read interval (1,000 ns here), where two reads a frame would have
    made every frame 1,000 ns and 10 reads."""
    reads = _counted_process_reads(monkeypatch)
    engine, sink, ctx = sink_engine()
    with engine:
        run_scene(engine, scene_spec(probe_scene([])), bind=ctx.bind)
        engine.finish("complete")
    assert len(reads) == (2 + 1) + (3 + 1)
    assert process_frames(sink) == [1_000] * 5
    # the values chain: the frames' process spans tile the reads without a gap
    assert sum(process_frames(sink)) == (reads[2] - reads[0]) + (reads[6] - reads[3])


def test_a_capture_reads_the_process_clock_at_both_ends_of_a_frame(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """harness.capture runs the user's code between frames (its frame span begins with the engine's
    ``frame_begin``): that code must not be billed to the next frame, so each frame reads twice."""
    reads = _counted_process_reads(monkeypatch)
    engine, sink, _ = sink_engine()
    with engine:
        engine.set_scene("user")
        begin, end = engine.frame_begin, engine.end_frame
        for i in range(3):
            begin(i, 0)
            end()
        engine.finish("complete")
    assert len(reads) == 6 and process_frames(sink) == [1_000] * 3


def test_a_scene_measured_for_a_duration_renders_until_the_deadline() -> None:
    log: list[str] = []
    engine, sink, _ = sink_engine()
    spec = scene_spec(probe_scene(log), frames=None, warmup=1, duration_s=0.2)
    assert spec.total_frames is None  # no frame count for the progress bar
    t0 = time.perf_counter()
    with engine:
        result = run_scene(engine, spec)
        engine.finish()
    assert time.perf_counter() - t0 >= 0.2 and result.frames >= 1 and result.warmup == 1
    assert wall_frames(sink) == [(0, int(Flag.WARMUP))] + [
        (i, 0) for i in range(1, result.frames + 1)
    ]


class Lines:
    """A non-tty Progress that keeps what it was told."""

    tty = False

    def __init__(self) -> None:
        self.seen: list[str] = []

    def line(self, text: str) -> None:
        self.seen.append(text)

    def scene_started(self, index: int, label: str, total_frames: int | None) -> None:
        self.seen.append(f"started {index} {label} {total_frames}")

    def phase(self, name: str, frames: int | None) -> None:
        self.seen.append(f"phase {name} {frames}")

    def advance(self, done: int) -> None:
        self.seen.append(f"advance {done}")


def test_progress_hears_of_each_scene_once_it_ends() -> None:
    progress = Lines()
    engine, _, _ = sink_engine()
    with engine:
        run_scene(engine, scene_spec(probe_scene([]), index=2, total=3), progress=progress)
        run_scene(
            engine,
            scene_spec(probe_scene([], fail_in="setup", exc=SceneSkip("no")), index=3, total=3),
            progress=progress,
        )
        engine.finish()
    assert progress.seen[:4] == [
        "started 2 probe 5",
        "phase [2/3] probe: setting up None",
        "phase [2/3] probe: warm-up 2",
        "phase [2/3] probe: measuring 3",
    ]
    assert progress.seen[4].startswith("[2/3] probe: 3 frames, median ")
    # the unit that suits it
    assert progress.seen[4].endswith((" ns (wall)", " µs (wall)", " ms (wall)", " s (wall)"))
    assert progress.seen[5:] == [
        "started 3 probe 5",
        "phase [3/3] probe: setting up None",
        "[3/3] probe: skipped: no",
    ]


def test_a_measured_driver_renders_the_measured_frames() -> None:
    log: list[str] = []
    engine, sink, _ = sink_engine()
    calls: list[int] = []

    def driver(one_frame: Callable[[], None], count: int) -> None:
        calls.append(count)
        # a driver may render fewer than asked: the engine counts what it did
        for _ in range(count - 1):
            one_frame()

    with engine:
        result = run_scene(
            engine, scene_spec(probe_scene(log), frames=4, warmup=1), measured_driver=driver
        )
        engine.finish()
    assert calls == [4] and (result.warmup, result.frames) == (1, 3)
    assert wall_frames(sink) == [(0, int(Flag.WARMUP)), (1, 0), (2, 0), (3, 0)]


def test_a_scene_that_binds_its_own_framebuffer_gets_the_harness_one_back() -> None:
    binds: list[int] = []
    ctx = FakeContext()

    def bind() -> None:
        binds.append(len(log))
        ctx.bind()

    def leave_bound(frame: Any, index: int) -> None:
        if index == 1:
            ctx.fbo = object()

    log: list[str] = []
    engine, _, _ = sink_engine(ctx=ctx)
    with engine:
        run_scene(
            engine,
            scene_spec(probe_scene(log, on_render=leave_bound), frames=2, warmup=1),
            bind=bind,
        )
        engine.finish()
    # before setup, before frame 2 (frame 1 left another framebuffer bound), after release
    assert binds == [0, 3, 5] and log[3].startswith("render 2")


def test_a_skipped_scene_is_recorded_and_released() -> None:
    log: list[str] = []
    engine, sink, _ = sink_engine()
    with engine:
        result = run_scene(
            engine, scene_spec(probe_scene(log, fail_in="setup", exc=SceneSkip("needs GL 4.6")))
        )
        engine.finish()
    assert (result.status, result.reason, result.frames) == ("skipped", "needs GL 4.6", 0)
    assert log[-1] == "release" and not any(line.startswith("render") for line in log)
    assert markers(sink) == [("skipped", int(Flag.SKIPPED))]
    assert scene_annotation(sink)["status"] == "skipped" and sink.status == "complete"


# --------------------------------------------------------------------------- failures (pure)


@pytest.mark.parametrize(
    ("fail_in", "phase", "kept"),
    [
        ("setup", "in setup", []),
        ("render", "while rendering", [0, 1, 2]),
        ("release", "in release", [0, 1, 2, 3, 4]),
    ],
)
def test_a_failing_scene_gives_scene_error_and_an_aborted_trace_with_its_frames(
    fail_in: str, phase: str, kept: list[int]
) -> None:
    log: list[str] = []
    engine, sink, _ = sink_engine()
    with pytest.raises(SceneError) as info, engine:
        run_scene(engine, scene_spec(probe_scene(log, fail_in=fail_in, at=3)))
    raises = [
        n
        for n, text in enumerate(Path(__file__).read_text().splitlines(), 1)
        if text.strip() == "raise error"
    ]
    # probe_scene's raise, in this file
    line = raises[["setup", "render", "release"].index(fail_in)]
    message = (
        f"scene 'probe' failed {phase} ({os.path.relpath(__file__)}:{line}): ValueError: boom | "
        "second line"
    )
    assert str(info.value) == message and isinstance(info.value.__cause__, ValueError)
    assert info.value.scene_traceback.endswith(
        "    raise error\nValueError: boom\n  ===\n  second line\n"
    )
    assert "harness" + os.sep not in info.value.scene_traceback  # katra3d's own frames are left out
    assert log.count("release") == 1  # released once, whatever failed
    assert [i for i, _ in wall_frames(sink)] == kept
    assert sink.status == "aborted" and sink.summary["error"] == f"SceneError: {message}"


def test_sys_exit_in_a_scene_is_a_scene_error() -> None:
    engine, sink, _ = sink_engine()
    with (
        pytest.raises(
            SceneError,
            match=r"failed while rendering \(.*test_engine.py:\d+\): SystemExit\(4\): "
            r"scene code called sys.exit",
        ),
        engine,
    ):
        run_scene(engine, scene_spec(probe_scene([], fail_in="render", at=0, exc=SystemExit(4))))
    assert sink.status == "aborted"


def test_katra_errors_from_a_scene_pass_as_they_are() -> None:
    own = ConfigError("bad value for the scene's own parameter")
    engine, sink, _ = sink_engine()
    with pytest.raises(ConfigError) as info, engine:
        run_scene(engine, scene_spec(probe_scene([], fail_in="render", at=1, exc=own)))
    assert info.value is own and sink.status == "aborted"


def test_a_gl_error_in_a_frame_is_recorded_and_fails_the_scene() -> None:
    ctx = FakeContext()

    def break_gl(frame: Any, index: int) -> None:
        if index == 2:
            ctx.error = "GL_INVALID_OPERATION"

    engine, sink, _ = sink_engine(ctx=ctx)
    with pytest.raises(SceneError, match="OpenGL reported GL_INVALID_OPERATION in frame 2"), engine:
        run_scene(engine, scene_spec(probe_scene([], on_render=break_gl)))
    record = {
        "type": "gl_error",
        "scene": "probe",
        "frame": 2,
        "where": "frame",
        "error": "GL_INVALID_OPERATION",
    }
    assert record in sink.annotations and sink.summary["gl_errors"] == [record]
    assert [i for i, _ in wall_frames(sink)] == [0, 1, 2]  # the frame with the error is kept


def test_release_after_a_good_run_that_unbinds_the_harness_framebuffer_is_its_own_error() -> None:
    calls: list[str] = []

    def bind() -> None:  # works before setup; after release the harness's framebuffer is gone
        calls.append("bind")
        if len(calls) > 1:
            raise RuntimeError("framebuffer deleted")

    log: list[str] = []
    engine, sink, _ = sink_engine()
    with (
        pytest.raises(
            SceneError,
            match="released the harness's framebuffer .*RuntimeError: framebuffer deleted",
        ),
        engine,
    ):
        run_scene(engine, scene_spec(probe_scene(log), frames=1, warmup=0), bind=bind)
    assert log[-1] == "release" and calls == ["bind", "bind"]
    assert sink.status == "aborted" and [i for i, _ in wall_frames(sink)] == [0]


@pytest.mark.parametrize(
    ("passes", "raised", "expected"),
    [
        ((ConfigError,), ConfigError("x"), ConfigError),
        ((), ConfigError("x"), SceneError),
        ((ConfigError,), KeyError("k"), SceneError),
        ((), KeyboardInterrupt(), KeyboardInterrupt),
    ],
)
def test_scene_errors_translates_all_but_what_passes(
    passes: tuple[type[BaseException], ...], raised: BaseException, expected: type[BaseException]
) -> None:
    with pytest.raises(expected), scene_errors("s", "in setup", passes=passes):
        raise raised


def test_describe_makes_one_short_line() -> None:
    assert describe(None) == ""
    assert describe(RuntimeError("")) == "RuntimeError"
    assert (
        describe(ValueError("0:1 error\n-----\n0:2 error")) == "ValueError: 0:1 error | 0:2 error"
    )
    long = describe(ValueError("x" * 1000))
    assert len(long) == len("ValueError: ") + 400 and long.endswith("...")


# --------------------------------------------------------------------------- stopping (pure)


@pytest.mark.parametrize(
    ("warmup", "at", "frames", "measured"), [(0, 2, [0, 1, 2], 3), (3, 1, [0, 1], 0)]
)
def test_a_stop_flag_set_mid_run_stops_at_the_frame_boundary(
    warmup: int, at: int, frames: list[int], measured: int
) -> None:
    stop = StopFlag()

    def first_signal(frame: Any, index: int) -> None:
        if index == at:
            stop.trip(signal.SIGTERM)  # what the handler does on a first signal: no exception

    log: list[str] = []
    engine, sink, _ = sink_engine(stop=stop)
    with engine:
        result = run_scene(
            engine, scene_spec(probe_scene(log, on_render=first_signal), frames=10, warmup=warmup)
        )
        engine.finish("interrupted")
    assert (
        result.status == "interrupted"
        and result.frames == measured
        and result.warmup == len(frames) - measured
    )
    # the frame in progress finished and was kept
    assert [i for i, _ in wall_frames(sink)] == frames
    assert log[-1] == "release" and scene_annotation(sink)["status"] == "interrupted"
    assert stop.signal_name == "SIGTERM" and not stop.hard_stop.is_set()


def test_a_second_signal_interrupts_the_frame_in_progress(monkeypatch: pytest.MonkeyPatch) -> None:
    # the keeper ends a process that has not finished its trace HARD_STOP_GRACE_S after a second
    # signal: give this one, on a busy test machine, all the time it needs
    monkeypatch.setattr(stopping, "HARD_STOP_GRACE_S", 60.0)
    stop = StopFlag()

    def two_signals(frame: Any, index: int) -> None:
        if index == 2:
            stop.trip(signal.SIGINT)
            stop.trip(signal.SIGINT)  # raises StopSignal, as the handler does

    log: list[str] = []
    engine, sink, _ = sink_engine(stop=stop)
    with pytest.raises(StopSignal), engine:
        run_scene(engine, scene_spec(probe_scene(log, on_render=two_signals), frames=10, warmup=0))
    assert log[-1] == "release" and stop.hard_stop.is_set()
    assert [i for i, _ in wall_frames(sink)] == [0, 1]  # the interrupted frame is not a frame
    assert sink.status == "interrupted" and sink.summary["error"] == "StopSignal: second SIGINT"


def test_an_interrupt_during_a_good_run_finishes_the_trace_as_interrupted() -> None:
    engine, sink, _ = sink_engine()
    with pytest.raises(KeyboardInterrupt), engine:
        run_scene(engine, scene_spec(probe_scene([]), frames=2, warmup=0))
        raise KeyboardInterrupt
    assert sink.status == "interrupted" and [i for i, _ in wall_frames(sink)] == [0, 1]


# --------------------------------------------------------------------------- on llvmpipe


class _Stripes(Scene):
    """A tiny real scene: clears its target to a colour that changes per frame; fails where told."""

    name = "stripes"
    stresses = ("test",)
    fail_at = -1

    def setup(self, ctx: Any, size: tuple[int, int], params: Any) -> None:
        self.bind_target(ctx, size)

    def render(self, frame: Any) -> None:
        if frame.index == self.fail_at:
            raise RuntimeError("render failed on purpose")
        self.target.use()
        self.target.clear(frame.index / 8.0, 0.5, 0.25, 1.0)


class _Fails(_Stripes):
    name = "fails"
    fail_at = 2


@pytest.fixture
def gl_fbo(gl_ctx: Any) -> Iterator[Any]:
    fbo = gl_ctx.simple_framebuffer((16, 8))
    fbo.use()
    yield fbo
    fbo.release()
    gl_ctx.detect_framebuffer(0).use()


@pytest.mark.gl
def test_engine_on_llvmpipe_writes_frames_and_the_last_image(
    gl_ctx: Any, gl_fbo: Any, tmp_path: Path
) -> None:
    path = tmp_path / "e.katra"
    shot = tmp_path / "last.png"
    host = HostInfo(gl=probe.gl_info(gl_ctx))
    engine = open_engine(
        gl_ctx, CaptureSpec(path, "unit", host=host, options=build_capture_options(api="test"))
    )
    with engine:
        result = run_scene(
            engine,
            SceneSpec(_Stripes, "stripes", {}, size=(16, 8), frames=2, warmup=1, screenshot=shot),
            bind=gl_fbo.use,
        )
        engine.finish("complete", {"scenes": [result.row()]})
    assert isinstance(result, SceneResult) and (result.warmup, result.frames) == (1, 2)
    assert result.pixels.shape == (8, 16, 4) and int(result.pixels[0, 0, 0]) == round(2 / 8 * 255)
    trace = open_trace(path)
    assert trace.status == "complete" and trace.header.capture_options.timing_mode == "sync"
    assert trace.header.capture_options.api == "test"
    note = [a for a in trace.annotations if a.get("type") == "scene"][0]
    assert note["last_frame_index"] == 2 and note["last_frame_sha256"] == result.checksum
    assert note["screenshot"] == str(shot) and shot.read_bytes().startswith(b"\x89PNG")
    wall = trace.events[
        (trace.events["kind"] == int(Kind.FRAME)) & (trace.events["clock"] == int(Clock.WALL))
    ]
    assert wall["frame"].tolist() == [0, 1, 2] and wall["flags"].tolist() == [
        int(Flag.WARMUP),
        0,
        0,
    ]


@pytest.mark.gl
def test_engine_on_llvmpipe_keeps_the_frames_of_a_failing_scene(
    gl_ctx: Any, gl_fbo: Any, tmp_path: Path
) -> None:
    path = tmp_path / "f.katra"
    engine = open_engine(gl_ctx, CaptureSpec(path, "unit", host=SOFTWARE_GL))
    with (
        pytest.raises(
            SceneError,
            match=r"failed while rendering \(.*test_engine.py:\d+\): RuntimeError: "
            r"render failed on purpose",
        ),
        engine,
    ):
        run_scene(
            engine,
            SceneSpec(_Fails, "fails", {}, size=(16, 8), frames=5, warmup=0),
            bind=gl_fbo.use,
        )
    assert gl_ctx.fbo is gl_fbo  # bound again after the failure
    trace = open_trace(path)
    assert trace.status == "aborted" and "render failed on purpose" in trace.summary.user["error"]
    wall = trace.events[
        (trace.events["kind"] == int(Kind.FRAME)) & (trace.events["clock"] == int(Clock.WALL))
    ]
    assert wall["frame"].tolist() == [0, 1]
