"""``katra3d.capture`` on a plain moderngl program (no katra3d scene)."""

from __future__ import annotations

import gc
from pathlib import Path
from typing import Any

import numpy as np
import pytest

import katra3d
from katra3d.harness.capture import DEFAULT_SCENE
from katra_trace import open_trace
from katra_trace.analysis.stats import trace_stats
from katra_trace.errors import ConfigError, SceneError
from katra_trace.schema import Clock, Flag, Kind

pytestmark = pytest.mark.gl

_VS = """
#version 330
in vec2 in_pos;
void main() { gl_Position = vec4(in_pos, 0.0, 1.0); }
"""
_FS = """
#version 330
out vec4 f_color;
void main() { f_color = vec4(1.0, 0.5, 0.0, 1.0); }
"""


def _debug_group_depth() -> int:
    import ctypes

    from OpenGL import GL

    out = ctypes.c_int(0)
    GL.glGetIntegerv(0x826D, ctypes.byref(out))  # GL_DEBUG_GROUP_STACK_DEPTH
    return int(out.value)


@pytest.fixture
def program(gl_ctx: Any) -> Any:
    """A user's own moderngl objects: a framebuffer and a triangle."""
    fbo = gl_ctx.simple_framebuffer((40, 30))
    prog = gl_ctx.program(vertex_shader=_VS, fragment_shader=_FS)
    vbo = gl_ctx.buffer(np.array([-1, -1, 3, -1, -1, 3], dtype="f4").tobytes())
    vao = gl_ctx.vertex_array(prog, [(vbo, "2f", "in_pos")])
    fbo.use()
    yield fbo, vao
    for obj in (vao, vbo, prog, fbo):
        obj.release()
    gl_ctx.detect_framebuffer(0).use()


def test_capture_frames_and_nested_zones(gl_ctx: Any, program: Any, tmp_path: Path) -> None:
    fbo, vao = program
    path = tmp_path / "mine.katra"
    depths: list[int] = []
    base_depth = _debug_group_depth()
    with katra3d.capture(gl_ctx, path, workload="my-renderer", notes="hello") as cap:
        assert cap.timing_mode == "sync"  # llvmpipe
        for i in range(6):
            with cap.frame(warmup=i < 2) as index:
                assert index == i
                with cap.zone("clear"):
                    fbo.clear(0.0, 0.0, 0.0, 1.0)
                with cap.zone("geometry"), cap.zone("triangle"):
                    vao.render()
                    depths.append(_debug_group_depth())
        cap.annotate({"type": "check", "pixel": list(fbo.read(components=4)[:4])})
    assert cap.frames == 6
    assert depths == [base_depth + 2] * 6  # each zone pushed a KHR_debug group
    assert _debug_group_depth() == base_depth

    trace = open_trace(path)
    assert trace.summary.status == "complete"
    assert trace.header.workload == "my-renderer" and trace.header.notes == "hello"
    # the frames are the workload's, named as the user named it (not "capture"): stats, compare, the
    # report
    assert trace.header.capture_options.scene == "my-renderer"
    assert list(trace_stats(trace).scenes) == ["my-renderer"]
    assert trace.header.capture_options.api == "katra3d.capture"
    assert trace.header.capture_options.timing_mode == "sync"
    assert trace.header.host_info.gl.software_renderer is True
    assert trace.annotations[-1] == {"type": "check", "pixel": [255, 128, 0, 255]}

    ev = trace.events
    frames = ev[(ev["kind"] == Kind.FRAME) & (ev["clock"] == Clock.WALL)]
    assert frames["frame"].tolist() == list(range(6))
    assert [bool(f & Flag.WARMUP) for f in frames["flags"]] == [
        True,
        True,
        False,
        False,
        False,
        False,
    ]
    zones = ev[(ev["kind"] == Kind.ZONE) & (ev["clock"] == Clock.WALL)]
    names = [trace.strings[n] for n in zones["name"]]
    assert names.count("clear") == names.count("geometry") == names.count("triangle") == 6
    depth = {trace.strings[n]: int(d) for n, d in zip(zones["name"], zones["depth"], strict=True)}
    assert depth == {"clear": 1, "geometry": 1, "triangle": 2}
    by_frame = {int(f["frame"]): f for f in frames}
    for z in zones:
        f = by_frame[int(z["frame"])]
        assert (
            f["start_ns"] <= z["start_ns"]
            and z["start_ns"] + z["dur_ns"] <= f["start_ns"] + f["dur_ns"]
        )
    geo = zones[[n == "geometry" for n in names]]
    tri = zones[[n == "triangle" for n in names]]
    assert np.all(tri["start_ns"] >= geo["start_ns"])
    assert np.all(tri["start_ns"] + tri["dur_ns"] <= geo["start_ns"] + geo["dur_ns"])
    assert gl_ctx.error == "GL_NO_ERROR"


def test_capture_zones_off_and_misuse(gl_ctx: Any, program: Any, tmp_path: Path) -> None:
    fbo, vao = program
    path = tmp_path / "plain.katra"
    cap = katra3d.capture(gl_ctx, path, zones=False, scene="mine")
    with pytest.raises(ConfigError, match="inside capture.frame"):
        cap.zone("early")
    with cap.frame():
        with cap.zone("ignored"):
            vao.render()
        with pytest.raises(ConfigError, match="cannot be nested"):
            with cap.frame():
                pass
    cap.close()
    with pytest.raises(ConfigError, match="finished"):
        with cap.frame():
            pass
    trace = open_trace(path)
    ev = trace.events
    assert not (ev["kind"] == Kind.ZONE).any()
    assert len(ev[ev["kind"] == Kind.FRAME]) == 3  # cpu + wall + process
    assert {trace.strings[s] for s in ev["scene"]} == {"mine"}


def test_capture_aborted_by_exception_keeps_a_valid_trace(
    gl_ctx: Any, program: Any, tmp_path: Path
) -> None:
    fbo, vao = program
    path = tmp_path / "boom.katra"
    with pytest.raises(RuntimeError, match="boom"):
        with katra3d.capture(gl_ctx, path) as cap:
            gc.collect()  # a collection whether or not the collector ran: the scene's marker
            with cap.frame():
                vao.render()
            raise RuntimeError("boom")
    trace = open_trace(path)
    assert trace.summary.status == "aborted"
    assert "boom" in trace.summary.user["error"]
    assert len(trace.events[trace.events["kind"] == Kind.FRAME]) == 3  # cpu + wall + process
    # neither workload nor scene given
    assert {trace.strings[s] for s in trace.events["scene"]} == {DEFAULT_SCENE}


def test_a_collection_outside_any_scene_records_no_marker() -> None:
    from types import SimpleNamespace

    from katra3d.harness.engine.gcmarks import GcMarks

    rows: list[tuple[Any, ...]] = []
    timer = SimpleNamespace(scene_id=0, flags=0, frame_index=0, origin_ns=0, name_id=lambda name: 7)
    marks = GcMarks(timer, rows.append)
    marks("start", {})
    marks("stop", {"generation": 2})
    assert rows == []  # before the first scene, between scenes
    timer.scene_id = 3
    marks("start", {})
    marks("stop", {"generation": 2})
    assert [(r[4], r[5], r[9]) for r in rows] == [(3, 7, 2.0)]


@pytest.mark.parametrize("zones", ["off", "draws"])
def test_a_gl_error_in_a_frame_ends_the_capture_naming_the_frame(
    gl_ctx: Any, program: Any, tmp_path: Path, zones: str
) -> None:
    fbo, vao = program
    path = tmp_path / f"glerr-{zones}.katra"
    with pytest.raises(SceneError, match="OpenGL reported GL_INVALID_ENUM in frame 1"):
        with katra3d.capture(gl_ctx, path, scene="mine", zones=zones) as cap:
            for i in range(3):
                with cap.frame():
                    vao.render()
                    if i == 1:
                        gl_ctx.enable_direct(0xFFFF)  # glEnable of no capability: GL_INVALID_ENUM
    assert gl_ctx.error == "GL_NO_ERROR"  # glGetError read it, as the capture did
    trace = open_trace(path)
    assert trace.summary.status == "aborted"
    assert trace.summary.user["gl_errors"][0]["frame"] == 1
    wall = trace.events[
        (trace.events["kind"] == Kind.FRAME) & (trace.events["clock"] == Clock.WALL)
    ]
    assert wall["frame"].tolist() == [0, 1]  # the frame with the error is kept


def test_capture_refuses_gpu_timing_on_software_renderer(gl_ctx: Any, tmp_path: Path) -> None:
    with pytest.raises(ConfigError, match="software renderer"):
        katra3d.capture(gl_ctx, tmp_path / "g.katra", timing="gpu")
    assert not (tmp_path / "g.katra").exists()


def test_process_clock_counts_cpu_work_not_waiting(
    gl_ctx: Any, program: Any, tmp_path: Path
) -> None:
    """The PROCESS frame row is the process's CPU time across the frame: it holds the CPU work done
    inside the frame (read here around that work) and leaves out time spent asleep."""
    import time

    _, vao = program
    path = tmp_path / "process.katra"
    inner: list[int] = []
    with katra3d.capture(gl_ctx, path, scene="mine") as cap:
        for i in range(4):
            with cap.frame():
                vao.render()
                if i % 2:
                    time.sleep(0.05)  # waiting: wall time, no CPU time
                else:
                    c0 = time.process_time_ns()
                    x = 0
                    while time.process_time_ns() - c0 < 20_000_000:  # 20 ms of CPU work
                        x += 1
                    inner.append(time.process_time_ns() - c0)
    ev = open_trace(path).events
    frames = ev[ev["kind"] == Kind.FRAME]
    wall = frames[frames["clock"] == Clock.WALL]
    process = frames[frames["clock"] == Clock.PROCESS]
    assert process["frame"].tolist() == wall["frame"].tolist() == [0, 1, 2, 3]
    assert process["start_ns"].tolist() == wall["start_ns"].tolist()
    assert (process["dur_ns"][0::2] >= np.array(inner)).all()  # the CPU work done inside the frame
    assert (wall["dur_ns"][1::2] >= 50_000_000).all()
    assert (process["dur_ns"][1::2] < 25_000_000).all()  # asleep for 50 ms of it: not CPU time
