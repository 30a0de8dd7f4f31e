"""GL backends: the table, the env override, explicit failures, EGL sessions; glfw under Xvfb."""

from __future__ import annotations

import json
import os
import shutil
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from bench.glmark2 import xvfb_display as bench_xvfb_display
from katra3d.harness.gl import backends
from katra_trace.errors import BackendUnavailable, ConfigError


def test_resolve_name_default_env_and_explicit(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv(backends.BACKEND_ENV, raising=False)
    assert backends.resolve_name(None) == "egl"
    monkeypatch.setenv(backends.BACKEND_ENV, "auto")
    assert backends.resolve_name(None) == "auto"
    assert backends.resolve_name("glfw") == "glfw"  # the command line beats the env var
    monkeypatch.setenv(backends.BACKEND_ENV, "vulkan")
    with pytest.raises(
        ConfigError, match=r"unknown backend 'vulkan' \(from KATRA3D_BACKEND\).*egl, glfw, auto"
    ):
        backends.resolve_name(None)


def test_glfw_without_display_says_why(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("DISPLAY", raising=False)
    monkeypatch.delenv("WAYLAND_DISPLAY", raising=False)
    status = backends.check("glfw")
    assert not status.available
    assert "DISPLAY" in status.why_not
    with pytest.raises(BackendUnavailable, match="backend 'glfw' unavailable: no display") as info:
        backends.open_session("glfw", size=(8, 8))
    assert info.value.exit_code == 3


@pytest.mark.gl
def test_egl_session_framebuffer(harness_session: Any) -> None:
    session = harness_session("egl", device=0, size=(48, 32), samples=4)
    assert session.backend == "egl" and session.device == 0
    from katra3d.harness.gl.probe import host_info

    egl = host_info(session).egl
    assert egl.device_index == 0 and egl.vendor and egl.version
    assert (egl.device_count or 0) >= 1 and set(egl.device.as_dict()) == {
        "drm_device",
        "renderer",
        "software",
    }
    assert session.ctx.fbo is session.fbo
    assert tuple(session.fbo.size) == (48, 32)
    assert session.fbo.samples == 4
    session.fbo.clear(0.0, 1.0, 0.0, 1.0)
    from katra3d.scenes.image import read_pixels

    pixels = read_pixels(session.ctx, None)
    assert pixels.shape == (32, 48, 4)
    assert np.all(pixels[..., 1] == 255) and np.all(pixels[..., 0] == 0)
    assert session.ctx.error == "GL_NO_ERROR"


@pytest.mark.gl
def test_auto_falls_back_and_lists_every_reason(
    harness_session: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.delenv("DISPLAY", raising=False)
    monkeypatch.delenv("WAYLAND_DISPLAY", raising=False)
    assert harness_session("auto", size=(8, 8)).backend == "egl"
    with pytest.raises(BackendUnavailable) as info:
        harness_session("auto", device=99, size=(8, 8))
    msg = str(info.value)
    assert "no usable OpenGL backend" in msg
    assert "EGL device 99" in msg and "glfw" in msg
    assert backends.MESA_INSTALL_LINE in msg


@pytest.mark.gl
def test_bad_egl_device_names_the_device(harness_session: Any) -> None:
    with pytest.raises(BackendUnavailable, match="cannot use EGL device 99"):
        harness_session("egl", device=99, size=(8, 8))


@pytest.mark.gl
def test_samples_above_the_limit_is_a_config_error(harness_session: Any) -> None:
    with pytest.raises(ConfigError, match="GL_MAX_SAMPLES"):
        harness_session("egl", size=(8, 8), samples=64)


@pytest.mark.gl
def test_egl_devices_listed() -> None:
    devices = backends.list_egl_devices()
    assert devices, "the EGL context the tests use comes from one of these devices"
    assert [d["index"] for d in devices] == list(range(len(devices)))
    assert all(
        isinstance(d["software"], bool) and isinstance(d["extensions"], list) for d in devices
    )


# --------------------------------------------------------------------------- glfw under Xvfb


@pytest.fixture
def xvfb_display() -> Iterator[str]:
    """An Xvfb of this test's own; yields ':N'; stops it afterwards.

    Xvfb picks the display number itself (``-displayfd``, bench.glmark2's helper): a number chosen
    here by looking for a free one could be taken by another Xvfb (another xdist worker, another
    suite on the machine) before this one locks it, and this test would then draw on, and lose, that
    server.
    """
    exe = shutil.which("Xvfb")
    if exe is None:
        pytest.skip("Xvfb is not installed (apt-get install xvfb)")
    with bench_xvfb_display(exe) as display:
        yield display


@pytest.mark.gl
def test_glfw_backend_under_xvfb(xvfb_display: str, katra_cli: Any, tmp_path: Path) -> None:
    from katra_trace import open_trace
    from katra_trace.schema import Clock, Flag, Kind

    env = {"DISPLAY": xvfb_display}
    res = katra_cli(
        "run",
        "triangle",
        "--backend",
        "glfw",
        "--frames",
        "5",
        "--warmup",
        "1",
        "--size",
        "64x48",
        "-o",
        "g.katra",
        env=env,
    )
    assert res.returncode == 0, res.stderr
    trace = open_trace(tmp_path / "g.katra")
    assert trace.header.host_info.backend == "glfw"
    assert trace.header.capture_options.resolved.backend == "glfw"
    ev = trace.events
    frames = ev[
        (ev["kind"] == Kind.FRAME)
        & (ev["clock"] == Clock.WALL)
        & ((ev["flags"] & Flag.WARMUP) == 0)
    ]
    assert len(frames) == 5

    doctor = katra_cli("doctor", "--json", env=env)
    assert doctor.returncode == 0, doctor.stderr
    report = json.loads(doctor.stdout)
    assert {b["name"]: b["available"] for b in report["backends"]} == {"egl": True, "glfw": True}


def test_env_var_selects_backend(katra_cli: Any, tmp_path: Path) -> None:
    """KATRA3D_BACKEND=glfw with no display: the env choice is honoured and fails with exit 3."""
    res = katra_cli(
        "run",
        "triangle",
        "--frames",
        "2",
        "-o",
        "x.katra",
        env={"KATRA3D_BACKEND": "glfw", "DISPLAY": "", "WAYLAND_DISPLAY": ""},
    )
    assert res.returncode == 3, res.stderr
    assert res.stderr.startswith("katra3d: error: backend 'glfw' unavailable: no display")
    assert "Traceback" not in res.stderr
    assert not (tmp_path / "x.katra").exists()
    assert os.listdir(tmp_path) == []
