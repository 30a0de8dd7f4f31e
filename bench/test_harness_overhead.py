"""Harness overhead: one scene rendered by a bare moderngl loop vs by katra3d's frame loop.

Run: make bench   (or .venv/bin/pytest bench -o testpaths=bench --benchmark-only -k harness -s)

Both loops render the same scene object on the same EGL context and framebuffer,
interleaved (bare, katra3d, katra3d, bare, ...) in one run. The bare loop is what a
hand-written benchmark does on llvmpipe: ``render`` + ``glFinish`` per frame. The
katra3d loop is the runner's real hot path (``harness.runner._scene_loop``) with a
sync-mode timer streaming into a real trace file. Reported: frame-rate ratio
katra3d / bare (target >= 0.98 with zones off), and the same with zones on (each
zone adds two glFinish calls and a KHR_debug group by design: no target).
"""

from __future__ import annotations

import statistics
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

FRAMES = 200
ROUNDS = 31


def paired_ratios(base: Callable[[], object], new: Callable[[], object], rounds: int) -> list[float]:
    """``rounds`` ratios time(base) / time(new), each from one adjacent pair (order alternating).

    Pairing adjacent runs cancels the slow load drift of a shared machine better
    than a ratio of two medians taken over the whole run.
    """
    base()
    new()
    out: list[float] = []
    for i in range(rounds):
        times: dict[int, float] = {}
        for fn in ((base, new) if i % 2 == 0 else (new, base)):
            t0 = time.perf_counter()
            fn()
            times[id(fn)] = time.perf_counter() - t0
        out.append(times[id(base)] / times[id(new)])
    return out


class _BareFrame:
    """The cheapest Frame a bare loop could pass: fields updated in place, zones do nothing."""

    __slots__ = ("index", "time_s", "rng")

    def __init__(self) -> None:
        self.index = 0
        self.time_s = 0.0
        self.rng = None

    def zone(self, name: str) -> Any:
        from harness.timing import NULL_ZONE

        return NULL_ZONE


def _loops(session: Any, scene: Any, trace_path: Path, zones: bool) -> tuple[Callable[[], None],
                                                                             Callable[[], None], Any]:
    from harness import timing
    from harness.runner import Progress, StopFlag, _scene_loop
    from katra_trace.writer import TraceWriter

    ctx = session.ctx
    writer = TraceWriter(trace_path, workload="bench")
    buffer = timing.EventBuffer(writer)
    timer = timing.SyncTimer(ctx, writer, buffer, zones=zones)
    timer.set_scene("bench")
    stop = StopFlag()
    progress = Progress(1, quiet=True)
    key = timing.seed_key(0, "bench")
    frame = _BareFrame()
    render = scene.render
    finish = ctx.finish

    def bare() -> None:
        for i in range(FRAMES):
            frame.index = i
            frame.time_s = i / 60.0
            render(frame)
            finish()

    def katra() -> None:
        _scene_loop(timer, session, scene, key, 0, FRAMES, None, 0, stop, progress)

    def close() -> None:
        timer.drain()
        writer.finish()

    return bare, katra, close


@pytest.mark.gl
@pytest.mark.parametrize(("scene_name", "size"), [("triangle", (320, 180)), ("clear", (640, 360))])
@pytest.mark.parametrize("zones", [False, True], ids=["zones-off", "zones-on"])
def test_harness_overhead(benchmark: Any, tmp_path: Path, scene_name: str, size: tuple[int, int],
                          zones: bool) -> None:
    from harness.backends import open_session
    from scenes.registry import get_scene, resolve_params

    session = open_session("egl", size=size)
    cls = get_scene(scene_name)
    scene = cls()
    scene.setup(session.ctx, size, resolve_params(cls, {}))
    bare, katra, close = _loops(session, scene, tmp_path / "bench.katra", zones)
    try:
        ratios: list[float] = []

        def measure() -> None:
            ratios.extend(paired_ratios(bare, katra, ROUNDS))

        benchmark.pedantic(measure, rounds=1, iterations=1)
        t0 = time.perf_counter()
        bare()
        bare_fps = FRAMES / (time.perf_counter() - t0)
    finally:
        close()
        scene.release()
        session.close()
    ratio = statistics.median(ratios)  # frame rate katra3d / frame rate bare
    q1, _, q3 = statistics.quantiles(ratios, n=4)
    benchmark.extra_info.update({"fps_ratio": round(ratio, 4), "fps_ratio_iqr": [round(q1, 4), round(q3, 4)],
                                 "target": 0.98 if not zones else None, "bare_fps": round(bare_fps, 1),
                                 "scene": scene_name, "size": f"{size[0]}x{size[1]}", "zones": zones})
    print(f"\nharness overhead {scene_name} {size[0]}x{size[1]} zones={'on' if zones else 'off'}: "
          f"katra3d/bare frame-rate ratio {ratio:.3f} (IQR {q1:.3f}..{q3:.3f}; bare ~{bare_fps:.0f} fps)")
    if not zones:
        assert ratio > 0.5, "harness loop far slower than the bare loop"
