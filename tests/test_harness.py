"""Harness pieces: host probe, timing-mode choice, frames, timers on llvmpipe, run planning."""

from __future__ import annotations

import dataclasses
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import numpy as np
import pytest

from katra3d.harness.cli import doctor
from katra3d.harness.engine import events, timers
from katra3d.harness.engine.frame import HarnessFrame, seed_key
from katra3d.harness.engine.timer_check import TimerCheck, timer_query_reliability
from katra3d.harness.gl import probe
from katra3d.harness.run.config import RunConfig, parse_param, parse_size, plan_run
from katra3d.harness.run.pipeline import capture_options
from katra_trace import open_trace
from katra_trace.errors import ConfigError, SceneError
from katra_trace.io.header import CaptureOptions, GLInfo, TimerQueryInfo
from katra_trace.io.writer import TraceWriter
from katra_trace.schema import Clock, Flag, Kind

# --------------------------------------------------------------------------- probe


@pytest.mark.parametrize(
    ("version", "vendor", "expected"),
    [
        ("4.5 (Core Profile) Mesa 22.3.6", "Mesa/X.org", {"name": "Mesa", "version": "22.3.6"}),
        (
            "4.6 (Compatibility Profile) Mesa 24.0.0-devel",
            "Intel",
            {"name": "Mesa", "version": "24.0.0-devel"},
        ),
        (
            "4.6.0 NVIDIA 535.104.05",
            "NVIDIA Corporation",
            {"name": "NVIDIA", "version": "535.104.05"},
        ),
        (
            "4.6.14761 Core Profile Context 23.10.1",
            "ATI Technologies Inc.",
            {"name": "AMD", "version": "23.10.1"},
        ),
        ("4.6.0 - Build 31.0.101.4502", "Intel", {"name": "Intel", "version": "31.0.101.4502"}),
        ("3.3 something else", "Acme", {"name": "Acme", "version": ""}),
    ],
)
def test_parse_driver(version: str, vendor: str, expected: dict[str, str]) -> None:
    assert probe.parse_driver(version, vendor).as_dict() == expected


@pytest.mark.parametrize(
    ("renderer", "software"),
    [
        ("llvmpipe (LLVM 15.0.6, 256 bits)", True),
        ("softpipe", True),
        ("Mesa X11 swrast", True),
        ("Google SwiftShader", True),
        ("lavapipe", True),
        ("NVIDIA GeForce RTX 4090/PCIe/SSE2", False),
        ("AMD Radeon RX 7900 XTX (radeonsi, navi31, LLVM 16.0.6)", False),
    ],
)
def test_software_renderer_names(renderer: str, software: bool) -> None:
    assert probe.is_software_renderer(renderer) is software


def test_render_env_keeps_only_rendering_variables() -> None:
    env = {
        "LIBGL_ALWAYS_SOFTWARE": "1",
        "MESA_GL_VERSION_OVERRIDE": "4.5",
        "GALLIUM_DRIVER": "llvmpipe",
        "LP_NUM_THREADS": "2",
        "EGL_PLATFORM": "surfaceless",
        "__GL_SYNC_TO_VBLANK": "0",
        "HOME": "/root",
        "PATH": "/bin",
        "MESAX": "no",
    }
    assert probe.render_env(env) == {
        "EGL_PLATFORM": "surfaceless",
        "GALLIUM_DRIVER": "llvmpipe",
        "LIBGL_ALWAYS_SOFTWARE": "1",
        "LP_NUM_THREADS": "2",
        "MESA_GL_VERSION_OVERRIDE": "4.5",
        "__GL_SYNC_TO_VBLANK": "0",
    }


@pytest.mark.gl
def test_gl_info_on_llvmpipe(gl_ctx: Any) -> None:
    gl = probe.gl_info(gl_ctx)
    assert gl.renderer is not None and "llvmpipe" in gl.renderer
    assert gl.software_renderer is True
    assert gl.driver.name == "Mesa" and (gl.driver.version or "x")[0].isdigit()
    assert gl.profile == "core"
    assert (gl.glsl_version or "").startswith(("3.", "4."))
    assert gl.timer_query.as_dict() == {"supported": True, "counter_bits": 64}
    assert (gl.max_texture_size or 0) >= 1024 and (gl.max_samples or 0) >= 1
    # the record writes the probe's keys in the probe's order, every one of them set
    assert list(gl.as_dict()) == [
        "vendor",
        "renderer",
        "version",
        "version_code",
        "glsl_version",
        "profile",
        "driver",
        "software_renderer",
        "timer_query",
        "khr_debug",
        "max_texture_size",
        "max_samples",
        "extensions_count",
    ]
    assert GLInfo.from_dict(gl.as_dict()) == gl and not gl.extra


def test_host_info_writes_every_part_even_an_empty_one() -> None:
    session = SimpleNamespace(ctx=None, backend="external", device=None)
    gl = GLInfo(vendor="v", renderer="r", software_renderer=True)
    with pytest.MonkeyPatch.context() as mp:
        mp.setattr(probe, "gl_info", lambda ctx: gl)
        host = probe.host_info(session)
    assert list(host.as_dict()) == ["backend", "gl", "egl", "system", "env"]
    assert host.as_dict()["egl"] == {} and host.gl is gl and host.software
    with_codegen = host.replaced(codegen={"llvm": "15"})
    assert list(with_codegen.as_dict()) == ["backend", "gl", "egl", "system", "env", "codegen"]


def test_system_info_fields() -> None:
    info = probe.system_info()
    assert (info.cpu_cores or 0) >= 1 and (info.ram_bytes or 0) > 0
    assert (info.python or "").count(".") == 2
    assert info.packages is not None and info.packages["numpy"] == np.__version__
    assert set(info.packages) >= {"moderngl", "glcontext", "PyOpenGL", "numpy", "glfw"}


# --------------------------------------------------------------------------- timing modes

_SOFT = GLInfo(
    renderer="llvmpipe",
    software_renderer=True,
    timer_query=TimerQueryInfo(supported=True, counter_bits=64),
)
_HARD = GLInfo(
    renderer="RTX",
    software_renderer=False,
    timer_query=TimerQueryInfo(supported=True, counter_bits=64),
)
_NO_TQ = GLInfo(
    renderer="old",
    software_renderer=False,
    timer_query=TimerQueryInfo(supported=False, counter_bits=0),
)


def test_choose_mode() -> None:
    assert timers.choose_mode("auto", _SOFT)[0] == "sync"
    assert "software renderer" in timers.choose_mode("auto", _SOFT)[1]
    assert timers.choose_mode("auto", _HARD)[0] == "gpu"
    assert timers.choose_mode("auto", _NO_TQ)[0] == "sync"
    assert timers.choose_mode("sync", _HARD) == ("sync", "requested with --timing sync")
    assert timers.choose_mode("gpu", _HARD)[0] == "gpu"
    with pytest.raises(
        ConfigError, match="software renderer whose timer queries do not time the draw"
    ):
        timers.choose_mode("gpu", _SOFT)
    with pytest.raises(ConfigError, match="no GL_TIMESTAMP"):
        timers.choose_mode("gpu", _NO_TQ)
    with pytest.raises(ConfigError, match="choose one of: auto, gpu, sync"):
        timers.choose_mode("fast", _HARD)


@pytest.mark.parametrize(
    ("gl", "verdict"), [(_HARD, "unreliable"), (_HARD, "reliable"), (_SOFT, "unreliable")]
)
def test_doctor_recommends_what_run_picks(
    gl: GLInfo, verdict: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """doctor's recommendation is the engine's rule (choose_mode), not one of its own: on a hardware
    renderer whose timer queries look unreliable it says what run picks (gpu) and how to pick sync
    instead."""
    session = SimpleNamespace(ctx=object(), backend="glfw", device=None, close=lambda: None)
    monkeypatch.setattr(doctor.backends, "statuses", lambda probe_contexts: [])
    monkeypatch.setattr(doctor.backends, "list_egl_devices", lambda: [])
    monkeypatch.setattr(doctor.backends, "open_session", lambda backend, device, size: session)
    monkeypatch.setattr(doctor.probe, "gl_info", lambda ctx: gl)
    monkeypatch.setattr(doctor, "timer_query_reliability", lambda ctx: TimerCheck(verdict))
    report = doctor.diagnose("glfw").as_dict()
    picked = timers.choose_mode("auto", gl)
    assert report["recommended_timing"] == {
        "mode": picked[0],
        "reason": picked[1],
        "auto_picks": picked[0],
    }
    note = report["timer_query_check"].get("note", "")
    if verdict == "reliable":
        assert note == ""
    else:
        assert ("--timing sync" in note) == (picked[0] == "gpu") and ("glFinish" in note) == (
            picked[0] == "sync"
        )
    assert report["gl"] == gl.as_dict()


def test_zones_off_share_one_null_context_manager() -> None:
    frame = HarnessFrame(3, 0.05, seed_key(1, "s"), timers.no_zone)
    assert frame.zone("a") is frame.zone("b") is timers.NULL_ZONE
    with frame.zone("a") as value:
        assert value is None


def test_frame_rng_is_deterministic_per_seed_scene_and_index() -> None:
    def draw(seed: int, scene: str, index: int) -> np.ndarray:
        return HarnessFrame(index, 0.0, seed_key(seed, scene), timers.no_zone).rng.random(4)

    assert np.array_equal(draw(1, "a", 5), draw(1, "a", 5))
    assert not np.array_equal(draw(1, "a", 5), draw(1, "a", 6))
    assert not np.array_equal(draw(1, "a", 5), draw(1, "b", 5))
    assert not np.array_equal(draw(1, "a", 5), draw(2, "a", 5))


def _run_timer(ctx: Any, path: Path, mode: str, frames: int, zones: bool, **kw: Any) -> Any:
    fbo = ctx.simple_framebuffer((32, 32))
    fbo.use()
    with TraceWriter(path, workload="t") as writer:
        buf = events.EventBuffer(writer, max_rows=7)
        timer = (
            timers.GpuTimer(ctx, writer, buf, zones=zones, **kw)
            if mode == "gpu"
            else timers.SyncTimer(ctx, writer, buf, zones=zones)
        )
        timer.set_scene("s")
        for i in range(frames):
            timer.begin_frame(i, int(Flag.WARMUP) if i == 0 else 0)
            frame = HarnessFrame(i, i / 60, seed_key(0, "s"), timer.zone)
            with frame.zone("outer"):
                fbo.clear(0.1, 0.2, 0.3, 1.0)
                with frame.zone("inner"):
                    fbo.clear(0.3, 0.2, 0.1, 1.0)
            timer.end_frame()
        timer.drain()
        measured = list(timer.frame_ns)
        timer.close()
    fbo.release()
    ctx.detect_framebuffer(0).use()  # leave no released framebuffer bound
    return open_trace(path), measured


def _check_nesting(ev: np.ndarray, clock: int) -> None:
    frames = {int(e["frame"]): e for e in ev[(ev["kind"] == Kind.FRAME) & (ev["clock"] == clock)]}
    zones = ev[(ev["kind"] == Kind.ZONE) & (ev["clock"] == clock)]
    for z in zones:
        f = frames[int(z["frame"])]
        assert f["start_ns"] <= z["start_ns"]
        assert z["start_ns"] + z["dur_ns"] <= f["start_ns"] + f["dur_ns"]


@pytest.mark.gl
def test_sync_timer_events(gl_ctx: Any, tmp_path: Path) -> None:
    trace, measured = _run_timer(gl_ctx, tmp_path / "s.katra", "sync", 6, zones=True)
    ev = trace.events
    wall = ev[(ev["kind"] == Kind.FRAME) & (ev["clock"] == Clock.WALL)]
    cpu = ev[(ev["kind"] == Kind.FRAME) & (ev["clock"] == Clock.CPU)]
    assert len(wall) == len(cpu) == 6
    assert list(wall["flags"]) == [int(Flag.WARMUP)] + [0] * 5
    assert np.all(wall["dur_ns"] >= cpu["dur_ns"]) and np.all(cpu["dur_ns"] > 0)
    assert measured == list(wall["dur_ns"][1:])
    zones = ev[(ev["kind"] == Kind.ZONE) & (ev["clock"] == Clock.WALL)]
    assert sorted({trace.strings[n] for n in zones["name"]}) == ["inner", "outer"]
    assert {int(d) for d in zones["depth"]} == {1, 2}
    _check_nesting(ev, Clock.WALL)
    inner = zones[zones["depth"] == 2]
    outer = zones[zones["depth"] == 1]
    assert np.all(inner["start_ns"] >= outer["start_ns"])
    assert not (ev["clock"] == Clock.GPU).any()


@pytest.mark.gl
def test_gpu_timer_ring_readback_and_calibration(gl_ctx: Any, tmp_path: Path) -> None:
    """The GPU timer's mechanics (ring reuse and growth, late read-back, drain, clock sync).

    On llvmpipe the timestamps are real but do not time the draw, so only
    structure is checked here, never durations against the wall clock.
    """
    trace, measured = _run_timer(
        gl_ctx, tmp_path / "g.katra", "gpu", 12, zones=True, ring_queries=4
    )
    ev = trace.events
    gpu_frames = ev[(ev["kind"] == Kind.FRAME) & (ev["clock"] == Clock.GPU)]
    assert sorted(gpu_frames["frame"].tolist()) == list(range(12))
    assert np.all(gpu_frames["dur_ns"] >= 0)
    assert len(measured) == 11
    gpu_zones = ev[(ev["kind"] == Kind.ZONE) & (ev["clock"] == Clock.GPU)]
    assert len(gpu_zones) == 24
    assert len(ev[(ev["kind"] == Kind.FRAME) & (ev["clock"] == Clock.CPU)]) == 12
    intervals = ev[(ev["kind"] == Kind.COUNTER)]
    assert len(intervals) == 11 and np.all(intervals["value"] > 0)
    assert not (ev["clock"] == Clock.WALL).any()
    labels = [c["label"] for c in trace.clock_syncs]
    assert labels == ["start", "end"]
    assert all(c["gpu_ns"] > 0 and c["uncertainty_ns"] >= 0 for c in trace.clock_syncs)
    _check_nesting(ev, Clock.GPU)


@pytest.mark.gl
def test_timer_query_reliability_flags_llvmpipe(gl_ctx: Any) -> None:
    mine = gl_ctx.simple_framebuffer((8, 8))
    mine.use()
    # llvmpipe's timestamp is the latest stamp of any rasterizer thread, so when one thread is
    # descheduled inside a tile, "GPU time" spans the stall. A draw of a few ms on 16 tiles,
    # measured once, read >= 0.5 in 6 of 30 tries on a loaded 2-core machine; a draw of 256 tiles
    # that lasts longer than a scheduler stall (~0.2 s), reduced by the median of 5, read <= 0.07 in
    # 30 of 30.
    check = timer_query_reliability(gl_ctx, size=(1024, 1024), iters=16, repeats=5)
    assert gl_ctx.fbo is mine  # the caller's framebuffer is bound again
    mine.release()
    gl_ctx.detect_framebuffer(0).use()
    assert check.verdict == "unreliable"
    assert check.wall_ms is not None and check.wall_ms > 0
    assert check.ratio is not None and check.ratio < 0.5


# --------------------------------------------------------------------------- run planning


def test_parse_size_and_param() -> None:
    assert parse_size("640x360") == (640, 360)
    assert parse_size(" 8X4 ") == (8, 4)
    for bad in ("0x5", "5x0", "640", "axb", "-4x4", "99999x10"):
        with pytest.raises(ConfigError, match="size"):
            parse_size(bad)
    assert parse_param("triangle.speed=0.5") == ("triangle", "speed", "0.5")
    assert parse_param("my.pkg:Scene.count=3") == ("my.pkg:Scene", "count", "3")
    assert parse_param("speed=1") == ("", "speed", "1")  # the run's one scene
    for bad in ("triangle.speed", "triangle.=1", ".speed=1", "=1", "1speed=1"):
        with pytest.raises(ConfigError, match="expected SCENE.KEY=VALUE"):
            parse_param(bad)


def test_an_unprefixed_param_applies_to_the_one_scene_and_is_refused_with_several(
    tmp_path: Path,
) -> None:
    out = str(tmp_path / "o.katra")
    one = plan_run(RunConfig(scenes=("triangle",), params=(parse_param("speed=2"),), output=out))
    assert one.entries[0].params["speed"] == 2.0
    assert capture_options(one, "egl", None).as_dict()["params"] == {"speed": "2"}
    with pytest.raises(ConfigError, match=r"unknown param 'sped'|'sped'"):
        plan_run(RunConfig(scenes=("triangle",), params=(parse_param("sped=2"),), output=out))
    with pytest.raises(ConfigError) as info:
        plan_run(
            RunConfig(scenes=("triangle", "fillrate"), params=(parse_param("speed=2"),), output=out)
        )
    assert str(info.value) == (
        "--param speed=2 names no scene, and this run has 2 scenes (triangle, fillrate); "
        "write SCENE.speed=2"
    )
    with pytest.raises(ConfigError, match="names no scene, and this run has"):
        plan_run(RunConfig(suite="ci", params=(parse_param("speed=2"),), output=out))


def test_plan_resolves_suite_defaults_and_overrides(tmp_path: Path) -> None:
    plan = plan_run(
        RunConfig(
            suite="ci", params=(("triangle", "speed", "2"),), output=str(tmp_path / "o.katra")
        )
    )
    from katra3d.scenes.suites import get_suite

    ci = get_suite("ci")
    assert plan.size == ci.size and plan.frames == ci.frames and plan.warmup == ci.warmup
    assert [e.label for e in plan.entries] == list(ci.scene_names())
    tri = next(e for e in plan.entries if e.label == "triangle")
    assert tri.params["speed"] == 2.0
    assert plan.workload == "ci"
    twice = plan_run(RunConfig(scenes=("triangle", "triangle"), output=str(tmp_path / "o.katra")))
    assert [e.label for e in twice.entries] == ["triangle", "triangle#2"]


def test_plan_default_output_name(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.chdir(tmp_path)
    plan = plan_run(RunConfig(scenes=("triangle",)))
    assert plan.output.parent == Path("traces")
    assert plan.output.name.endswith("-triangle.katra")
    assert not (tmp_path / "traces").exists()  # planning writes nothing


def test_default_output_names_never_collide(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    import datetime as dt

    from katra3d.harness.run.config import default_output

    monkeypatch.chdir(tmp_path)
    now = dt.datetime(2026, 1, 2, 3, 4, 5, tzinfo=dt.timezone.utc)
    (tmp_path / "traces").mkdir()
    names = []
    for _ in range(3):
        path = default_output("ci", now)
        path.write_bytes(b"")  # a run in the same second took this name
        names.append(path.name)
    assert names == [
        "20260102T030405Z-ci.katra",
        "20260102T030405Z-ci-2.katra",
        "20260102T030405Z-ci-3.katra",
    ]


@pytest.mark.parametrize(
    ("config", "error", "match"),
    [
        (RunConfig(), ConfigError, "nothing to run"),
        (RunConfig(scenes=("cubez",)), SceneError, "unknown scene 'cubez'"),
        (RunConfig(scenes=("triangle",), frames=0), ConfigError, "bad --frames 0"),
        (RunConfig(scenes=("triangle",), frames=5, duration_s=1.0), ConfigError, "not both"),
        (RunConfig(scenes=("triangle",), duration_s=-1.0), ConfigError, "bad --duration"),
        (RunConfig(scenes=("triangle",), warmup=-1), ConfigError, "bad --warmup"),
        (RunConfig(scenes=("triangle",), size=(0, 5)), ConfigError, "bad size 0x5"),
        (RunConfig(scenes=("triangle",), timing="fast"), ConfigError, "unknown --timing 'fast'"),
        (
            RunConfig(scenes=("triangle",), backend="vulkan"),
            ConfigError,
            "unknown --backend 'vulkan'",
        ),
        (
            RunConfig(scenes=("triangle",), params=(("clear", "bands", "3"),)),
            ConfigError,
            "not in this run",
        ),
        (
            RunConfig(scenes=("triangle",), params=(("triangle", "sped", "3"),)),
            ConfigError,
            "no param 'sped'",
        ),
        (
            RunConfig(scenes=("triangle",), params=(("triangle", "speed", "fast"),)),
            ConfigError,
            "speed",
        ),
        (RunConfig(suite="nosuch"), ConfigError, "unknown suite 'nosuch'"),
    ],
)
def test_plan_rejects(
    config: RunConfig, error: type[Exception], match: str, tmp_path: Path
) -> None:
    config = RunConfig(**{**config.__dict__, "output": str(tmp_path / "x.katra")})
    with pytest.raises(error, match=match):
        plan_run(config)
    assert list(tmp_path.iterdir()) == []


def test_plan_rejects_unwritable_outputs(tmp_path: Path) -> None:
    afile = tmp_path / "afile"
    afile.write_text("x")
    for out, match in (
        (tmp_path / "missing" / "x.katra", "does not exist"),
        (afile / "x.katra", "does not exist"),
        (tmp_path, "names a directory"),
    ):
        with pytest.raises(ConfigError, match=match):
            plan_run(RunConfig(scenes=("triangle",), output=str(out)))
    with pytest.raises(ConfigError, match="not a directory"):
        plan_run(
            RunConfig(
                scenes=("triangle",), output=str(tmp_path / "o.katra"), screenshot_dir=str(afile)
            )
        )
    assert sorted(p.name for p in tmp_path.iterdir()) == ["afile"]


def test_the_requested_capture_options_are_json_ready(tmp_path: Path) -> None:
    import json

    cfg = RunConfig(
        scenes=("triangle",),
        size=(64, 32),
        params=(("triangle", "speed", "1"),),
        zones=True,
        output=str(tmp_path / "o.katra"),
    )
    d = json.loads(json.dumps(capture_options(plan_run(cfg), "egl", None).as_dict()))
    assert d["scenes"] == ["triangle"] and d["size"] == [64, 32]
    assert d["params"] == {"triangle.speed": "1"} and d["zones"] is True
    # the header's layout: every RunConfig field but jobs, in its order, then what it resolved to
    fields = [f.name for f in dataclasses.fields(RunConfig) if f.name != "jobs"]
    assert list(d) == [*fields, "resolved"]
    assert d["measure"] == {} and d["suite"] is None and d["force"] is False
    assert list(d["resolved"]) == [
        *("frames", "duration_s", "warmup", "size", "samples", "backend", "output", "device"),
        *("scenes", "images"),
    ]
    assert d["resolved"]["scenes"] == [
        {"label": "triangle", "spec": "triangle", "params": {"speed": 1.0}, "position": 0}
    ]
    options = capture_options(plan_run(cfg), "egl", None)
    assert CaptureOptions.from_dict(options.as_dict()).as_dict() == options.as_dict()
