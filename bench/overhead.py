"""Harness overhead: a scene rendered by katra3d vs by a plain moderngl loop, zones off and on.

The plain loop is what a hand-written benchmark does on llvmpipe: one
standalone EGL context, an offscreen framebuffer of the size, ``setup``, then
``render`` + ``glFinish`` per frame. Every figure is a frame-time ratio
(katra3d / plain; > 1 means katra3d is slower), paired round by round with
the plain loop, and the cost of zones is reported as zones-on / zones-off
(each zone adds two glFinish calls and a KHR_debug group by design).

* ``overhead``: the runner, through ``harness.runner.run(RunConfig)`` with
  ``timing="sync"``. Its frame period is read from the trace it wrote: the
  mean distance between the starts of consecutive measured frames, which
  includes all of the harness's per-frame work (frame object, timer, event
  buffer, flushes). The plain loop's period is measured the same way, on its
  own context, after the same warmup. Per-run costs (context, probe, setup,
  checksum) are not part of a frame and are left out of both.
* ``overhead-capture``: ``harness.capture(ctx, path)`` driving the same scene
  on the same context as the plain loop; each loop of frames is timed whole.

Target (zones off): frame time <= 1.02 x the plain loop (frame rate >= 0.98).
"""

from __future__ import annotations

import os
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np

from bench._core import BenchContext, Row, at_most, bench, interleave, median_iqr, pair_ratios, ratio_row

#: (scene, size, measured frames per loop): each loop lasts ~0.1-0.3 s on llvmpipe.
SCENES: tuple[tuple[str, tuple[int, int], int], ...] = (
    ("triangle", (320, 180), 1000),
    ("clear", (640, 360), 300),
)
WARMUP = 5
#: interleaved rounds (plain, zones off, zones on) per scene
ROUNDS = 31
ZONES_OFF_TARGET = at_most(1.02)
ZONES_NOTE = "each zone: 2 glFinish + a KHR_debug group"


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


def _no_zone(name: str) -> _NoZone:
    return _NO_ZONE


def _egl_context() -> Any:
    """A plain moderngl standalone EGL context (BackendUnavailable when there is none)."""
    # harness.capture's probe resolves raw GL calls through PyOpenGL: EGL, as the harness does headless.
    os.environ.setdefault("PYOPENGL_PLATFORM", "egl")
    import moderngl

    from katra_trace.errors import BackendUnavailable

    try:
        return moderngl.create_standalone_context(backend="egl", require=330)  # type: ignore[arg-type]
    except Exception as exc:  # noqa: BLE001 - glcontext raises plain Exception
        raise BackendUnavailable(f"no EGL context for the overhead bench: {exc}") from None


def _new_scene(ctx: Any, name: str, size: tuple[int, int]) -> Any:
    from scenes.registry import get_scene, resolve_params

    cls = get_scene(name)
    scene = cls()
    scene.setup(ctx, size, resolve_params(cls, {}))
    return scene


def _plain_period_s(name: str, size: tuple[int, int], frames: int) -> float:
    """Mean frame period (s) of a plain loop on its own fresh context, start of first to start of last frame."""
    import time

    ctx = _egl_context()
    try:
        fbo = ctx.simple_framebuffer(size, components=4)
        fbo.use()
        scene = _new_scene(ctx, name, size)
        try:
            render, finish, frame = scene.render, ctx.finish, PlainFrame(_no_zone)
            for i in range(WARMUP):
                frame.index, frame.time_s = i, i / 60.0
                render(frame)
                finish()
            pc = time.perf_counter_ns
            first = last = 0
            for i in range(WARMUP, WARMUP + frames):
                last = pc()
                if i == WARMUP:
                    first = last
                frame.index, frame.time_s, frame._rng = i, i / 60.0, None
                render(frame)
                finish()
        finally:
            scene.release()
            fbo.release()
    finally:
        ctx.release()
    return (last - first) / 1e9 / (frames - 1)


def _run_period_s(name: str, size: tuple[int, int], frames: int, zones: bool, out: Path) -> float:
    """Mean frame period (s) of ``katra3d run`` from its trace (measured frames, wall clock)."""
    from harness.runner import RunConfig, run
    from katra_trace import Clock, Flag, Kind, open_trace

    config = RunConfig(scenes=(name,), frames=frames, warmup=WARMUP, size=size, zones=zones, backend="egl",
                       timing="sync", output=str(out))
    result = run(config, quiet=True)
    try:
        ev = open_trace(result.path).events
    finally:
        Path(result.path).unlink(missing_ok=True)
    sel = ev[(ev["kind"] == int(Kind.FRAME)) & (ev["clock"] == int(Clock.WALL))
             & ((ev["flags"] & int(Flag.WARMUP)) == 0)]
    if len(sel) != frames:
        raise RuntimeError(f"run wrote {len(sel)} measured wall-clock frames of {frames}")
    starts = np.sort(sel["start_ns"])
    return float(starts[-1] - starts[0]) / 1e9 / (frames - 1)


def _rows(label: str, samples: dict[str, list[float]], base: str, off: str, on: str, who: str,
          frames_per_sample: int) -> list[Row]:
    plain_fps = frames_per_sample / median_iqr(samples[base])[0]
    return [
        ratio_row(f"{label} zones off", f"frame time: {who} / plain", pair_ratios(samples, off, base),
                  target=ZONES_OFF_TARGET, notes=f"plain loop ~{plain_fps:.0f} fps here"),
        ratio_row(f"{label} zones on", f"frame time: {who} zones on / plain", pair_ratios(samples, on, base)),
        ratio_row(f"{label} zones cost", f"frame time: {who} zones on / off", pair_ratios(samples, on, off),
                  notes=ZONES_NOTE),
    ]


def _scenes(ctx: BenchContext) -> tuple[tuple[str, tuple[int, int], int], ...]:
    if ctx.quick:
        return (("triangle", (160, 90), 50),)
    return SCENES


@bench("overhead", about="katra3d run's frame loop vs a plain moderngl loop (zones off / on)", needs_gl=True)
def overhead_run(ctx: BenchContext) -> list[Row]:
    rows: list[Row] = []
    for name, size, frames in _scenes(ctx):
        label = f"run {name} {size[0]}x{size[1]}"
        ctx.log(label)
        samples = interleave({
            "plain": lambda: _plain_period_s(name, size, frames),
            "off": lambda: _run_period_s(name, size, frames, False, ctx.tmp / "off.katra"),
            "on": lambda: _run_period_s(name, size, frames, True, ctx.tmp / "on.katra"),
        }, rounds=ctx.scale(ROUNDS, 3))
        rows += _rows(label, samples, "plain", "off", "on", "run", 1)
    ctx.facts["gl_renderer"] = _renderer()
    return rows


@bench("overhead-capture", about="harness.capture() around a scene vs the plain loop on one context",
       needs_gl=True)
def overhead_capture(ctx: BenchContext) -> list[Row]:
    import harness

    rows: list[Row] = []
    for name, size, frames in _scenes(ctx):
        label = f"capture {name} {size[0]}x{size[1]}"
        ctx.log(label)
        gl = _egl_context()
        try:
            fbo = gl.simple_framebuffer(size, components=4)
            fbo.use()
            scene = _new_scene(gl, name, size)
            caps = {z: harness.capture(gl, ctx.tmp / f"capture-{z}.katra", scene=name, zones=z, timing="sync")
                    for z in (False, True)}
            try:
                render, finish = scene.render, gl.finish

                def plain() -> None:
                    frame = PlainFrame(_no_zone)
                    for i in range(frames):
                        frame.index, frame.time_s = i, i / 60.0
                        render(frame)
                        finish()

                def captured(zones: bool) -> Callable[[], None]:
                    cap = caps[zones]
                    span = cap.frame
                    frame = PlainFrame(cap.zone)

                    def loop() -> None:
                        for i in range(frames):
                            with span():
                                frame.index, frame.time_s = i, i / 60.0
                                render(frame)

                    return loop

                samples = interleave({"plain": plain, "off": captured(False), "on": captured(True)},
                                     rounds=ctx.scale(ROUNDS, 3))
            finally:
                for cap in caps.values():
                    cap.close()
                scene.release()
                fbo.release()
            ctx.facts["gl_renderer"] = str(gl.info.get("GL_RENDERER", ""))
        finally:
            gl.release()
        rows += _rows(label, samples, "plain", "off", "on", "capture", frames)
    return rows


def _renderer() -> str:
    gl = _egl_context()
    try:
        return str(gl.info.get("GL_RENDERER", ""))
    finally:
        gl.release()
