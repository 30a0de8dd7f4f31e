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

from collections.abc import Callable

from bench._core import BenchContext, Row, at_most, bench, interleave, median_iqr, pair_ratios, ratio_row
from bench._gl import (
    WARMUP,
    PlainFrame,
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
    from harness.runner import RunConfig

    rows: list[Row] = []
    for name, size, frames in _scenes(ctx):
        label = f"run {name} {size[0]}x{size[1]}"
        ctx.log(label)
        configs = {zones: RunConfig(scenes=(name,), frames=frames, warmup=WARMUP, size=size, zones=zones,
                                    backend="egl", timing="sync", output=str(ctx.tmp / f"run-{zones}.katra"))
                   for zones in (False, True)}
        samples = interleave({
            "plain": lambda: plain_frame_period_s(name, size, frames),
            "off": lambda: run_frame_period_s(configs[False]),
            "on": lambda: run_frame_period_s(configs[True]),
        }, rounds=ctx.scale(ROUNDS, 3))
        rows += _rows(label, samples, "plain", "off", "on", "run", 1)
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
            caps = {z: harness.capture(gl, ctx.tmp / f"capture-{z}.katra", scene=name, zones=z, timing="sync")
                    for z in (False, True)}
            try:
                render, finish = scene.render, gl.finish

                def plain() -> None:
                    frame = PlainFrame(no_zone)
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

