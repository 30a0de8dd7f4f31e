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

* ``overhead``: the runner, through ``katra3d.harness.run.runner.run(RunConfig)`` with
  ``timing="sync"`` and no reference draw (``reference_every=0``: it runs
  between frames and would count in the frame period; ``overhead-reference``
  measures it), frame starts read from the trace it wrote; the plain loop
  runs on its own fresh context too, after the same warmup. Per-run costs
  (context, probe, setup, checksum) are part of neither.
* ``overhead-capture``: ``katra3d.capture(ctx, path)`` driving the same scene
  on the same context as the plain loop, frame starts taken in both loops.

* ``overhead-cost``: the harness's own cost in microseconds, no target (docs/timing.md quotes it): a
  frame of :class:`bench._gl.IdleScene` (draws nothing) in a run minus the same frame in the plain
  loop, both ending with ``glFinish``; and a zone, as the slope between 16 empty zones a frame and
  none.

* ``overhead-reference``: the drift-normalization reference draw
  (``--reference-every 4`` vs ``0``): the median frame wall (the draw runs
  outside the frame span: target <= 1.02) and the frame loop's whole wall
  (what the draws add to a run).

Targets (zones off): frame time <= 1.03 x the plain loop on ``triangle``, <= 1.02 on ``clear``; the
harness's own cost (``overhead-cost``) <= 3.0 us a frame. Every row is the median of the rounds,
shown with its 95 % interval.
"""

from __future__ import annotations

import contextlib
import functools
import time
from collections.abc import Callable, Iterator
from typing import Any

from bench._core import (
    BenchContext,
    Row,
    Target,
    at_most,
    bench,
    interleave,
    median_iqr,
    pair_ratios,
    ratio_row,
)
from bench._gl import (
    IDLE_SCENE,
    WARMUP,
    Collect,
    FramePeriod,
    PlainFrame,
    capture_frame_period_s,
    egl_context,
    frame_period,
    new_scene,
    no_zone,
    plain_frame_period_s,
    renderer,
    run_frame_period_s,
    run_wall_frames,
)
from katra3d.harness.engine.reference import REFERENCE_SIZE

#: (scene, size, measured frames per loop): each loop lasts ~0.1-0.3 s on llvmpipe.
SCENES: tuple[tuple[str, tuple[int, int], int], ...] = (
    ("triangle", (320, 180), 1000),
    ("clear", (640, 360), 300),
)
#: interleaved rounds (plain, zones off, zones on) per scene
ROUNDS = 31
ZONES_OFF_TARGET = at_most(1.02)
#: zones off on ``triangle``: an 80-160 us frame, where the loop's few us show most
ZONES_OFF_TARGETS = {"triangle": at_most(1.03)}
#: the harness's own cost of a frame that draws nothing (one process-clock read per frame boundary
#: included)
PER_FRAME_TARGET = at_most(3.0)
ZONES_NOTE = "each zone: 2 glFinish + a KHR_debug group"


def _rows(
    label: str,
    samples: dict[str, list[float]],
    collect: Collect,
    who: str,
    target: Target = ZONES_OFF_TARGET,
) -> list[Row]:
    plain_fps = 1.0 / median_iqr(samples["plain"])[0]
    left_out = "left out as preempted: plain {}, {} {}"
    return [
        ratio_row(
            f"{label} zones off",
            f"frame time: {who} / plain",
            pair_ratios(samples, "off", "plain"),
            target=target,
            notes=f"plain ~{plain_fps:.0f} fps; "
            + left_out.format(collect.note("plain"), who, collect.note("off")),
        ),
        ratio_row(
            f"{label} zones on",
            f"frame time: {who} zones on / plain",
            pair_ratios(samples, "on", "plain"),
            notes=left_out.format(collect.note("plain"), who, collect.note("on")),
        ),
        ratio_row(
            f"{label} zones cost",
            f"frame time: {who} zones on / off",
            pair_ratios(samples, "on", "off"),
            notes=ZONES_NOTE,
        ),
    ]


def _scenes(ctx: BenchContext) -> tuple[tuple[str, tuple[int, int], int], ...]:
    if ctx.quick:
        return (("triangle", (160, 90), 50),)
    return SCENES


@bench(
    "overhead",
    about="katra3d run's frame loop vs a plain moderngl loop (zones off / on)",
    needs_gl=True,
)
def overhead_run(ctx: BenchContext) -> list[Row]:
    from katra3d.harness.run.config import RunConfig

    rows: list[Row] = []
    for name, size, frames in _scenes(ctx):
        label = f"run {name} {size[0]}x{size[1]}"
        ctx.log(label)
        # reference_every=0: the reference draw (default every 4th frame, outside the frame span)
        # would land in the frame period; its cost has its own bench, overhead-reference
        configs = {
            zones: RunConfig(
                scenes=(name,),
                frames=frames,
                warmup=WARMUP,
                size=size,
                zones=zones,
                backend="egl",
                timing="sync",
                reference_every=0,
                output=str(ctx.tmp / f"run-{zones}.katra"),
            )
            for zones in (False, True)
        }
        collect = Collect()
        samples = interleave(
            {
                "plain": collect(
                    "plain", functools.partial(plain_frame_period_s, name, size, frames)
                ),
                "off": collect("off", functools.partial(run_frame_period_s, configs[False])),
                "on": collect("on", functools.partial(run_frame_period_s, configs[True])),
            },
            rounds=ctx.scale(ROUNDS, 3),
        )
        rows += _rows(label, samples, collect, "run", ZONES_OFF_TARGETS.get(name, ZONES_OFF_TARGET))
    ctx.facts["gl_renderer"] = renderer()
    return rows


def _capture_loops(
    frames: int,
    caps: dict[bool, Any],
    render: Callable[[Any], None],
    finish: Callable[[], None],
    pc: Callable[[], int],
) -> tuple[Callable[[], FramePeriod], Callable[[bool], Callable[[], FramePeriod]]]:
    """The plain loop and the captured loops (zones off / on) of one scene (``overhead-capture``).

    Built outside the scene loop so that each closure holds this scene's objects.
    """

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

    return plain, captured


@bench(
    "overhead-capture",
    about="katra3d.capture() around a scene vs the plain loop on one context",
    needs_gl=True,
)
def overhead_capture(ctx: BenchContext) -> list[Row]:
    import katra3d

    rows: list[Row] = []
    for name, size, frames in _scenes(ctx):
        label = f"capture {name} {size[0]}x{size[1]}"
        ctx.log(label)
        gl = egl_context()
        try:
            fbo = gl.simple_framebuffer(size, components=4)
            fbo.use()
            scene = new_scene(gl, name, size)
            caps = {
                z: katra3d.capture(
                    gl, ctx.tmp / f"capture-{name}-{z}.katra", scene=name, zones=z, timing="sync"
                )
                for z in (False, True)
            }
            try:
                plain, captured = _capture_loops(
                    frames, caps, scene.render, gl.finish, time.perf_counter_ns
                )
                collect = Collect()
                samples = interleave(
                    {
                        "plain": collect("plain", plain),
                        "off": collect("off", captured(False)),
                        "on": collect("on", captured(True)),
                    },
                    rounds=ctx.scale(ROUNDS, 3),
                )
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


# --------------------------------------------------------------------------- the harness's own
# cost, in us

#: Measured frames per loop of the idle scene (a frame costs ~10-30 us: each loop lasts ~50 ms).
IDLE_FRAMES = 3000
#: Empty zones per frame in the zones-on run whose slope is the cost of one zone.
IDLE_ZONES = 16
IDLE_SIZE = (64, 64)
COST_ROUNDS = 21


def process_clock_read_us(reads: int = 20_000) -> float:
    """Mean cost of one ``clock_gettime(CLOCK_PROCESS_CPUTIME_ID)`` in this process, in microseconds
    (the sync timer reads it once a frame in run's loop, twice under ``katra3d.capture``)."""
    read, clock, pc = time.clock_gettime_ns, time.CLOCK_PROCESS_CPUTIME_ID, time.perf_counter_ns
    t0 = pc()
    for _ in range(reads):
        read(clock)
    return (pc() - t0) / reads / 1e3


@contextlib.contextmanager
def _without(process_clock: bool = False, gl_error_check: bool = False) -> Iterator[None]:
    """A throwaway variant of the frame loop for the cost breakdown: the sync timer's process-clock
    read replaced by a constant (``process_clock``), the per-frame GL error check off
    (``gl_error_check``)."""
    from katra3d.harness.engine import core, timers

    read, init = timers._process_ns, core.Engine.__init__

    def no_check(self: Any, *args: Any, **kwargs: Any) -> None:
        init(self, *args, **kwargs)
        self.gl_error_check = False

    try:
        if process_clock:
            timers._process_ns = lambda clock: 0
        if gl_error_check:
            core.Engine.__init__ = no_check  # type: ignore[method-assign]
        yield
    finally:
        timers._process_ns, core.Engine.__init__ = read, init  # type: ignore[method-assign]


def _variant(config: object, **without: bool) -> Callable[[], FramePeriod]:
    def call() -> FramePeriod:
        with _without(**without):
            return run_frame_period_s(config)

    return call


@bench(
    "overhead-cost",
    about="the frame loop's own cost per frame and per zone (us), a scene that draws nothing",
    needs_gl=True,
)
def overhead_cost(ctx: BenchContext) -> list[Row]:
    """Harness cost in microseconds: a run of :class:`bench._gl.IdleScene` against the plain loop
    (per frame), and zones on with ``IDLE_ZONES`` empty zones against none (per zone), round by
    round."""
    import dataclasses

    from katra3d.harness.run.config import RunConfig

    frames = ctx.scale(IDLE_FRAMES, 100)
    off = RunConfig(
        scenes=(IDLE_SCENE,),
        frames=frames,
        warmup=WARMUP,
        size=IDLE_SIZE,
        backend="egl",
        timing="sync",
        reference_every=0,
        output=str(ctx.tmp / "idle.katra"),
    )
    none_on = dataclasses.replace(off, zones=True)
    many_on = dataclasses.replace(none_on, params=((IDLE_SCENE, "zones", IDLE_ZONES),))
    ctx.log(f"idle scene {IDLE_SIZE[0]}x{IDLE_SIZE[1]}, {frames} frames")
    # every period counts: the idle frame is so short that the buffer's hand-over to the writer
    # (every 1,024 frames) is a > 5x period, which the preemption rule would leave out, and it is
    # the harness's own cost
    collect = Collect(whole=True)
    samples = interleave(
        {
            "plain": collect("plain", lambda: plain_frame_period_s(IDLE_SCENE, IDLE_SIZE, frames)),
            "off": collect("off", lambda: run_frame_period_s(off)),
            "capture": collect(
                "capture",
                lambda: capture_frame_period_s(
                    IDLE_SCENE, IDLE_SIZE, frames, ctx.tmp / "idle-capture.katra"
                ),
            ),
            "on0": collect("on0", lambda: run_frame_period_s(none_on)),
            "onN": collect("onN", lambda: run_frame_period_s(many_on)),
            "noproc": collect("noproc", _variant(off, process_clock=True)),
            "bare": collect("bare", _variant(off, process_clock=True, gl_error_check=True)),
        },
        rounds=ctx.scale(COST_ROUNDS, 3),
    )

    def us(a: str, b: str) -> list[float]:
        return [1e6 * (x - y) for x, y in zip(samples[a], samples[b], strict=True)]

    per_frame = us("off", "plain")
    # the same run with parts of the frame loop taken out, interleaved with the others: what each
    # part costs
    breakdown = [
        ratio_row(
            f"  of which {what}", f"us a frame: run - run without {what}", us(a, b), unit="us"
        )
        for what, a, b in (
            ("the process-clock read", "off", "noproc"),
            ("the GL error check", "noproc", "bare"),
        )
    ]
    breakdown.append(
        ratio_row(
            "  of which the rest",
            "us a frame: run without both - plain loop (frame object, "
            "timer calls, packed event, loop checks)",
            us("bare", "plain"),
            unit="us",
        )
    )
    per_zone = [
        1e6 * (a - b) / IDLE_ZONES for a, b in zip(samples["onN"], samples["on0"], strict=True)
    ]
    plain_us = 1e6 * median_iqr(samples["plain"])[0]
    reads = [process_clock_read_us() for _ in range(5)]
    return [
        ratio_row(
            "harness per frame",
            "us a frame: run - plain loop, a frame that draws nothing",
            per_frame,
            unit="us",
            target=PER_FRAME_TARGET,
            notes=f"plain loop (render + glFinish) ~{plain_us:.1f} us a frame; one process-clock "
            "read "
            f"(a frame boundary) of ~{median_iqr(reads)[0]:.2f} us included; every period counted "
            "(hand-overs to "
            f"the writer included; > 5x periods: plain {collect.note('plain')}, run "
            f"{collect.note('off')})",
        ),
        *breakdown,
        ratio_row(
            "katra3d.capture per frame",
            "us a frame: capture frame span - plain loop, a frame that draws nothing",
            us("capture", "plain"),
            unit="us",
            notes="the user's loop inside `with cap.frame():`, two process-clock reads (the user's "
            "code "
            f"runs between frames); > 5x periods: capture "
            f"{collect.note('capture')}",
        ),
        ratio_row(
            "harness per zone",
            f"us a zone: ({IDLE_ZONES} empty zones - none) / {IDLE_ZONES}, zones on",
            per_zone,
            unit="us",
            notes=ZONES_NOTE,
        ),
    ]


# --------------------------------------------------------------------------- the reference draw's
# cost

#: (scene, size, measured frames) for the reference-draw rows: a cheap frame and a fill-bound one.
REFERENCE_SCENES: tuple[tuple[str, tuple[int, int], int], ...] = (
    ("triangle", (320, 180), 600),
    ("fillrate", (320, 180), 200),
)
REFERENCE_ROUNDS = 15


def _loop_figures(config: object) -> tuple[float, float]:
    """(median measured frame wall, frame-loop wall) in seconds of
    ``katra3d.harness.run.runner.run(config)``.

    The frame loop runs from the first measured frame's start to the last one's
    end: it holds every reference draw (timed after frames, outside their spans),
    which the frames' own walls do not.
    """
    import numpy as np

    sel = run_wall_frames(config)
    if len(sel) < 2:
        raise RuntimeError("the run wrote fewer than 2 measured wall-clock frames")
    ends = sel["start_ns"] + sel["dur_ns"]
    return float(np.median(sel["dur_ns"])) / 1e9, float(ends.max() - sel["start_ns"].min()) / 1e9


@bench(
    "overhead-reference",
    about="the reference draw (--reference-every 4 vs 0): frame time and run time",
    needs_gl=True,
)
def overhead_reference(ctx: BenchContext) -> list[Row]:
    """Cost of the drift-normalization reference draw: per-frame wall and frame-loop wall, every 4
    vs off.
    """
    import dataclasses

    from katra3d.harness.run.config import RunConfig

    scenes = (("triangle", (160, 90), 40),) if ctx.quick else REFERENCE_SCENES
    rows: list[Row] = []
    for name, size, frames in scenes:
        label = f"reference {name} {size[0]}x{size[1]}"
        ctx.log(label)
        off = RunConfig(
            scenes=(name,),
            frames=frames,
            warmup=WARMUP,
            size=size,
            backend="egl",
            timing="sync",
            reference_every=0,
            output=str(ctx.tmp / "ref-off.katra"),
        )
        on = dataclasses.replace(off, reference_every=4, output=str(ctx.tmp / "ref-on.katra"))
        frame_s: dict[str, list[float]] = {"on": [], "off": []}

        def variant(medians: list[float], config: RunConfig) -> Callable[[], float]:
            def call() -> float:
                median_s, loop_s = _loop_figures(config)
                medians.append(median_s)
                return loop_s

            return call

        loops = interleave(
            {"off": variant(frame_s["off"], off), "on": variant(frame_s["on"], on)},
            rounds=ctx.scale(REFERENCE_ROUNDS, 3),
        )
        # interleave's warmup round also called the variants: keep the kept rounds' frame medians
        # only
        frames_kept = {k: v[-len(loops[k]) :] for k, v in frame_s.items()}
        frame_ms = 1e3 * median_iqr(frames_kept["off"])[0]
        rows += [
            ratio_row(
                f"{label} frame",
                "median frame wall: reference every 4 / off",
                pair_ratios(frames_kept, "on", "off"),
                target=at_most(1.02),
                notes=f"frame ~{frame_ms:.2f} ms; the draw runs outside the frame span",
            ),
            ratio_row(
                f"{label} run",
                "frame-loop wall: reference every 4 / off",
                pair_ratios(loops, "on", "off"),
                notes=f"one {REFERENCE_SIZE[0]}x{REFERENCE_SIZE[1]} reference draw + 2 glFinish "
                "after every "
                "4th frame",
            ),
        ]
    return rows
