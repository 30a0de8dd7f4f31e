"""Harness overhead: a scene rendered by katra3d vs by a plain moderngl loop, zones off and on.

The plain loop is what a hand-written benchmark does on llvmpipe: one
standalone EGL context, an offscreen framebuffer of the size, ``setup``, then
``render`` + ``glFinish`` per frame. Every figure is a frame-time ratio
(katra3d / plain; > 1 means katra3d is slower), paired round by round with
the plain loop, and the cost of zones is reported as zones-on / zones-off
(each zone adds two glFinish calls and a KHR_debug group by design).

Frame time is :func:`bench._gl.frame_period`: the mean period between the
starts of consecutive measured frames, which includes all of katra3d's
per-frame work (frame object, timer, event buffer, flushes), with preempted
frames (> 5x the loop's median) left out on both sides; the notes give the
share left out per side.

* ``overhead``: the runner, through ``harness.runner.run(RunConfig)`` with
  ``timing="sync"``, frame starts read from the trace it wrote; the plain loop
  runs on its own fresh context too, after the same warmup. Per-run costs
  (context, probe, setup, checksum) are part of neither.
* ``overhead-capture``: ``harness.capture(ctx, path)`` driving the same scene
  on the same context as the plain loop, frame starts taken in both loops.

Target (zones off): frame time <= 1.02 x the plain loop (frame rate >= 0.98).
"""

from __future__ import annotations

import time
from collections.abc import Callable

from bench._core import BenchContext, Row, at_most, bench, interleave, median_iqr, pair_ratios, ratio_row
from bench._gl import (
    WARMUP,
    FramePeriod,
    PlainFrame,
    frame_period,
    egl_context,
    new_scene,
    no_zone,
    plain_frame_period_s,
    renderer,
    run_frame_period_s,
)

#: (scene, size, measured frames per loop): each loop lasts ~0.1-0.3 s on llvmpipe.
SCENES: tuple[tuple[str, tuple[int, int], int], ...] = (
    ("triangle", (320, 180), 1000),
    ("clear", (640, 360), 300),
)
#: interleaved rounds (plain, zones off, zones on) per scene
ROUNDS = 31
ZONES_OFF_TARGET = at_most(1.02)
ZONES_NOTE = "each zone: 2 glFinish + a KHR_debug group"


class _Collect:
    """Wraps frame-period variants for :func:`interleave` and keeps each one's excluded shares."""

    def __init__(self) -> None:
        self.excluded: dict[str, list[float]] = {}

    def __call__(self, key: str, fn: Callable[[], FramePeriod]) -> Callable[[], float]:
        shares = self.excluded.setdefault(key, [])

        def call() -> float:
            period = fn()
            shares.append(period.excluded)
            return period

        return call

    def note(self, key: str) -> str:
        return f"{100 * median_iqr(self.excluded[key])[0]:.1f}%"


def _rows(label: str, samples: dict[str, list[float]], collect: _Collect, who: str) -> list[Row]:
    plain_fps = 1.0 / median_iqr(samples["plain"])[0]
    left_out = "left out as preempted: plain {}, {} {}"
    return [
        ratio_row(f"{label} zones off", f"frame time: {who} / plain", pair_ratios(samples, "off", "plain"),
                  target=ZONES_OFF_TARGET, notes=f"plain ~{plain_fps:.0f} fps; "
                  + left_out.format(collect.note("plain"), who, collect.note("off"))),
        ratio_row(f"{label} zones on", f"frame time: {who} zones on / plain", pair_ratios(samples, "on", "plain"),
                  notes=left_out.format(collect.note("plain"), who, collect.note("on"))),
        ratio_row(f"{label} zones cost", f"frame time: {who} zones on / off", pair_ratios(samples, "on", "off"),
                  notes=ZONES_NOTE),
    ]


def _scenes(ctx: BenchContext) -> tuple[tuple[str, tuple[int, int], int], ...]:
    if ctx.quick:
        return (("triangle", (160, 90), 50),)
    return SCENES


@bench("overhead", about="katra3d run's frame loop vs a plain moderngl loop (zones off / on)", needs_gl=True)
def overhead_run(ctx: BenchContext) -> list[Row]:
    from harness.runner import RunConfig

    rows: list[Row] = []
    for name, size, frames in _scenes(ctx):
        label = f"run {name} {size[0]}x{size[1]}"
        ctx.log(label)
        configs = {zones: RunConfig(scenes=(name,), frames=frames, warmup=WARMUP, size=size, zones=zones,
                                    backend="egl", timing="sync", output=str(ctx.tmp / f"run-{zones}.katra"))
                   for zones in (False, True)}
        collect = _Collect()
        samples = interleave({
            "plain": collect("plain", lambda: plain_frame_period_s(name, size, frames)),
            "off": collect("off", lambda: run_frame_period_s(configs[False])),
            "on": collect("on", lambda: run_frame_period_s(configs[True])),
        }, rounds=ctx.scale(ROUNDS, 3))
        rows += _rows(label, samples, collect, "run")
    ctx.facts["gl_renderer"] = renderer()
    return rows


@bench("overhead-capture", about="harness.capture() around a scene vs the plain loop on one context",
       needs_gl=True)
def overhead_capture(ctx: BenchContext) -> list[Row]:
    import harness

    rows: list[Row] = []
    for name, size, frames in _scenes(ctx):
        label = f"capture {name} {size[0]}x{size[1]}"
        ctx.log(label)
        gl = egl_context()
        try:
            fbo = gl.simple_framebuffer(size, components=4)
            fbo.use()
            scene = new_scene(gl, name, size)
            caps = {z: harness.capture(gl, ctx.tmp / f"capture-{name}-{z}.katra", scene=name, zones=z, timing="sync")
                    for z in (False, True)}
            try:
                render, finish, pc = scene.render, gl.finish, time.perf_counter_ns

                def plain() -> FramePeriod:
                    frame = PlainFrame(no_zone)
                    starts: list[int] = []
                    mark = starts.append
                    for i in range(frames):
                        mark(pc())
                        frame.index, frame.time_s = i, i / 60.0
                        render(frame)
                        finish()
                    return frame_period(starts)

                def captured(zones: bool) -> Callable[[], FramePeriod]:
                    cap = caps[zones]
                    span = cap.frame
                    frame = PlainFrame(cap.zone)

                    def loop() -> FramePeriod:
                        starts: list[int] = []
                        mark = starts.append
                        for i in range(frames):
                            mark(pc())
                            with span():
                                frame.index, frame.time_s = i, i / 60.0
                                render(frame)
                        return frame_period(starts)

                    return loop

                collect = _Collect()
                samples = interleave({"plain": collect("plain", plain), "off": collect("off", captured(False)),
                                      "on": collect("on", captured(True))}, rounds=ctx.scale(ROUNDS, 3))
            finally:
                for cap in caps.values():
                    cap.close()
                scene.release()
                fbo.release()
            ctx.facts["gl_renderer"] = str(gl.info.get("GL_RENDERER", ""))
        finally:
            gl.release()
        rows += _rows(label, samples, collect, "capture")
    return rows

