"""What recording garbage collections as markers costs (katra3d/harness/engine/gcmarks.py).

* ``gc-markers``: the engine's frame loop (:meth:`Engine.loop`, as ``katra3d run`` drives it)
  rendering :class:`bench._gl.IdleScene` (nothing drawn: the loop's own cost is all there is) on one
  capture, with the ``gc.callbacks`` recorder installed and removed, in interleaved rounds. The
  collector is paused in both, so no frame has a collection: the row is the difference of the frame
  period (each loop's median chunk of 100 frames, so that preempted chunks do not count), recorder
  on minus off, in µs per frame (target <= 0.2 µs). The recorder runs nothing per frame, so this is
  zero up to the noise of the two loops.
* What a collection pays for its marker: ``gc.collect(0)`` with the recorder installed minus
  without, µs per collection (information: the two calls and one row appended, inside the marker's
  own span).
"""

from __future__ import annotations

import gc
import statistics
import time
from pathlib import Path
from typing import Any

from bench._core import BenchContext, Row, at_most, bench, interleave, ratio_row
from bench._gl import IDLE_SCENE, WARMUP, egl_context, new_scene, renderer

#: Frames per loop, timed in chunks of CHUNK frames (the loop's value is the median chunk's), and
#: rounds.
FRAMES = 4000
CHUNK = 100
ROUNDS = 31
#: gen-0 collections timed per sample of the per-collection cost.
COLLECTIONS = 2000
TARGET_US = at_most(0.2)


def _loop_us(engine: Any, render: Any, first: list[int], frames: int, markers: bool) -> float:
    """µs per frame of ``frames`` frames of the engine's loop (the median chunk of :data:`CHUNK`
    frames), the recorder on or off, no collection."""
    if markers:
        engine.gc_marks.install()
    else:
        engine.gc_marks.uninstall()
    was = gc.isenabled()
    gc.disable()
    before = sum(s["collections"] for s in gc.get_stats())
    chunks: list[int] = []
    try:
        for _ in range(frames // CHUNK):
            t0 = time.perf_counter_ns()
            engine.loop(render, first=first[0], count=CHUNK, deadline_ns=None, flags=0, key=(0, 0))
            chunks.append(time.perf_counter_ns() - t0)
            first[0] += CHUNK
    finally:
        if was:
            gc.enable()
    if sum(s["collections"] for s in gc.get_stats()) != before:
        raise RuntimeError("a collection ran in a loop meant to have none")
    # the median chunk: a chunk in which the process was preempted (a shared machine) does not count
    return float(statistics.median(chunks)) / CHUNK / 1e3


def _collect_us(marks: Any, markers: bool) -> float:
    """Mean µs per ``gc.collect(0)``, the recorder on or off."""
    if markers:
        marks.install()
    else:
        marks.uninstall()
    t0 = time.perf_counter_ns()
    for _ in range(COLLECTIONS):
        gc.collect(0)
    return (time.perf_counter_ns() - t0) / COLLECTIONS / 1e3


@bench(
    "gc-markers",
    about="gc.callbacks markers: cost on a frame with no collection (us), and per collection",
    needs_gl=True,
)
def gc_markers(ctx: BenchContext) -> list[Row]:
    import katra3d

    frames = ctx.scale(FRAMES, 200)
    rounds = ctx.scale(ROUNDS, 3)
    gl = egl_context()
    try:
        fbo = gl.simple_framebuffer((64, 64), components=4)
        fbo.use()
        scene = new_scene(gl, IDLE_SCENE, (64, 64))
        path = Path(ctx.tmp) / "gc.katra"
        with katra3d.capture(
            gl, path, scene="idle", zones=False, timing="sync", overwrite=True
        ) as cap:
            engine = cap.engine
            first = [0]
            engine.loop(scene.render, first=0, count=WARMUP, deadline_ns=None, flags=0, key=(0, 0))
            first[0] = WARMUP
            samples = interleave(
                {
                    "on": lambda: _loop_us(engine, scene.render, first, frames, True),
                    "off": lambda: _loop_us(engine, scene.render, first, frames, False),
                },
                rounds=rounds,
                progress=ctx.log,
            )
            per_frame = [a - b for a, b in zip(samples["on"], samples["off"], strict=True)]
            collect = interleave(
                {
                    "on": lambda: _collect_us(engine.gc_marks, True),
                    "off": lambda: _collect_us(engine.gc_marks, False),
                },
                rounds=rounds,
            )
            per_collection = [a - b for a, b in zip(collect["on"], collect["off"], strict=True)]
            engine.gc_marks.install()
        scene.release()
        fbo.release()
    finally:
        gl.release()
    ctx.facts["gl_renderer"] = renderer()
    off_us = sorted(samples["off"])[len(samples["off"]) // 2]
    return [
        ratio_row(
            "gc markers, frame without a collection",
            "frame period: recorder on - off (us per frame)",
            per_frame,
            target=TARGET_US,
            unit="us",
            notes=f"idle frame ~{off_us:.1f} us; {frames} frames a loop, collector paused in both",
        ),
        ratio_row(
            "gc markers, per collection",
            "gc.collect(0): recorder on - off (us per collection)",
            per_collection,
            unit="us",
            notes="the two callback calls and one marker row",
        ),
    ]
