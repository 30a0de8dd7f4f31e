"""GL helpers for benches: a plain moderngl loop and katra3d runs, each measured as a frame period.

Both measure the same thing the same way: the mean distance between the
starts of consecutive measured frames (seconds), after the same warmup, on a
fresh EGL context. That period includes everything done per frame, and
nothing done once per run (context, probe, scene setup, checksum).

For a bench that varies a katra3d run (reference draws on/off, a new
option), interleave two :func:`run_frame_period_s` calls::

    base = RunConfig(scenes=("fillrate",), frames=300, size=(320, 180), backend="egl", timing="sync",
                     output=str(ctx.tmp / "a.katra"))
    samples = interleave({"base": lambda: run_frame_period_s(base),
                          "new": lambda: run_frame_period_s(dataclasses.replace(base, zones=True))}, rounds=21)
"""

from __future__ import annotations

import os
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np

#: Warmup frames before the measured ones (plain loop and the runs built by the overhead bench).
WARMUP = 5


class PlainFrame:
    """The cheapest :class:`scenes.api.Frame` a hand-written loop would pass (rng made on use)."""

    __slots__ = ("index", "time_s", "zone", "_rng")

    def __init__(self, zone: Callable[[str], Any]) -> None:
        self.index = 0
        self.time_s = 0.0
        self.zone = zone
        self._rng: np.random.Generator | None = None

    @property
    def rng(self) -> np.random.Generator:
        if self._rng is None:
            self._rng = np.random.default_rng([0, self.index])
        return self._rng


class _NoZone:
    def __enter__(self) -> None:
        return None

    def __exit__(self, *exc: object) -> None:
        return None


_NO_ZONE = _NoZone()


def no_zone(name: str) -> _NoZone:
    """A plain loop's ``frame.zone``: does nothing."""
    return _NO_ZONE


def egl_context() -> Any:
    """A plain moderngl standalone EGL context; BackendUnavailable (exit 3) when there is none."""
    # harness.capture's probe resolves raw GL calls through PyOpenGL: EGL, as the harness does headless.
    os.environ.setdefault("PYOPENGL_PLATFORM", "egl")
    from katra_trace.errors import BackendUnavailable

    try:
        import moderngl

        return moderngl.create_standalone_context(backend="egl", require=330)  # type: ignore[arg-type]
    except Exception as exc:  # noqa: BLE001 - glcontext raises plain Exception
        raise BackendUnavailable(f"no OpenGL context through EGL: {exc}") from None


def renderer() -> str:
    """GL_RENDERER of a plain EGL context (what the benches measured on)."""
    gl = egl_context()
    try:
        return str(gl.info.get("GL_RENDERER", ""))
    finally:
        gl.release()


def new_scene(ctx: Any, name: str, size: tuple[int, int], params: dict[str, Any] | None = None) -> Any:
    """Built-in or user scene ``name``, set up on ``ctx`` at ``size`` (the framebuffer bound now)."""
    from scenes.registry import get_scene, resolve_params

    cls = get_scene(name)
    scene = cls()
    scene.setup(ctx, size, resolve_params(cls, params or {}))
    return scene


def plain_frame_period_s(name: str, size: tuple[int, int], frames: int, warmup: int = WARMUP) -> float:
    """Mean frame period (s) of a plain moderngl loop (``render`` + ``glFinish``) on a fresh context."""
    ctx = egl_context()
    try:
        fbo = ctx.simple_framebuffer(size, components=4)
        fbo.use()
        scene = new_scene(ctx, name, size)
        try:
            render, finish, frame = scene.render, ctx.finish, PlainFrame(no_zone)
            for i in range(warmup):
                frame.index, frame.time_s = i, i / 60.0
                render(frame)
                finish()
            pc = time.perf_counter_ns
            first = last = 0
            for i in range(warmup, warmup + frames):
                last = pc()
                if i == warmup:
                    first = last
                frame.index, frame.time_s, frame._rng = i, i / 60.0, None
                render(frame)
                finish()
        finally:
            scene.release()
            fbo.release()
    finally:
        ctx.release()
    return (last - first) / 1e9 / max(frames - 1, 1)


def run_frame_period_s(config: Any) -> float:
    """Mean frame period (s) of ``harness.runner.run(config)``, read from the trace it wrote
    (measured frames, wall clock, one scene); the trace is deleted afterwards.

    ``config`` is a ``RunConfig`` with ``timing="sync"`` and an ``output`` path.
    """
    from harness.runner import run
    from katra_trace import Clock, Flag, Kind, open_trace

    result = run(config, quiet=True)
    try:
        ev = open_trace(result.path).events
    finally:
        Path(result.path).unlink(missing_ok=True)
    sel = ev[(ev["kind"] == int(Kind.FRAME)) & (ev["clock"] == int(Clock.WALL))
             & ((ev["flags"] & int(Flag.WARMUP)) == 0)]
    if config.frames is not None and len(sel) != config.frames:
        raise RuntimeError(f"the run wrote {len(sel)} measured wall-clock frames, not {config.frames}")
    if len(sel) < 2:
        raise RuntimeError("the run wrote fewer than 2 measured wall-clock frames")
    starts = np.sort(sel["start_ns"])
    return float(starts[-1] - starts[0]) / 1e9 / (len(starts) - 1)


__all__ = ["WARMUP", "PlainFrame", "egl_context", "new_scene", "no_zone", "plain_frame_period_s", "renderer",
           "run_frame_period_s"]
