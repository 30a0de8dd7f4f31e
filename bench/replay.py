"""``python -m bench replay``: what katra3d adds to a trace replay (docs/replay.md).

A glmark2 trace (its ``build`` scene, 64x64, 0.5 s) is recorded once with ``apitrace trace`` under an Xvfb of
the bench's own. Each round replays it twice on that server, in rotating order: ``glretrace -b`` (apitrace's
own benchmark mode, its ``Rendered N frames in T secs``) and ``katra3d run app.trace --warmup 0 --frames N``
(every frame of the trace; katra3d's frames summed, its first frame from the replayer's start, as glretrace's
time counts from its own). The row is the median of the per-round ratios of the two frame rates, katra3d over
glretrace (target >= 0.95). Skipped with a notice where apitrace, glmark2 or Xvfb is missing.
"""

from __future__ import annotations

import os
import re
import shutil
import subprocess
import sys
import math

from bench._core import BenchContext, Row, at_least, bench, interleave, pair_ratios, ratio_row
from bench.glmark2 import xvfb_display

TOOLS = ("apitrace", "glretrace", "glmark2", "Xvfb")
_RENDERED = re.compile(r"Rendered (\d+) frames in ([0-9.]+) secs")


@bench("replay", about="a glmark2 trace: katra3d run app.trace's frame rate over glretrace -b's", needs_gl=True)
def replay(ctx: BenchContext) -> list[Row]:
    label = "replay fps"
    missing = [t for t in TOOLS if shutil.which(t) is None]
    if missing:
        return [Row(label, "frame rate: katra3d run app.trace / glretrace -b", math.nan,
                    notes=f"skipped: no {', '.join(missing)} (ci/system-deps.sh test)")]
    trace = ctx.tmp / "app.trace"
    with xvfb_display(str(shutil.which("Xvfb"))) as display:
        env = {**os.environ, "DISPLAY": display}
        subprocess.run(["apitrace", "trace", "-o", str(trace), "glmark2", "-s", "64x64", "-b",
                        f"build:duration={0.2 if ctx.quick else 0.5}"], env=env, check=True, capture_output=True)
        frames = _glretrace(env, trace)[0]
        ctx.log(f"{label}: {frames} frames a replay, Xvfb on {display}")

        def glretrace() -> float:
            n, secs = _glretrace(env, trace)
            return n / secs

        def katra() -> float:
            return _katra(ctx, env, trace, frames)

        samples = interleave({"katra": katra, "glretrace": glretrace}, rounds=ctx.scale(7, 3), progress=ctx.log)
    return [ratio_row(label, "frame rate: katra3d run app.trace / glretrace -b (same trace, same Xvfb)",
                      pair_ratios(samples, "katra", "glretrace"), target=at_least(0.95))]


def _glretrace(env: dict[str, str], trace: object) -> tuple[int, float]:
    out = subprocess.run(["glretrace", "-b", str(trace)], env=env, capture_output=True, text=True, check=True)
    found = _RENDERED.search(out.stdout)
    if found is None:
        raise RuntimeError(f"glretrace -b printed no frame count: {out.stdout[-200:]}")
    return int(found.group(1)), float(found.group(2))


def _katra(ctx: BenchContext, env: dict[str, str], trace: object, frames: int) -> float:
    # deferred: katra_trace is imported by the benches that use it, not by the runner
    from katra_trace import open_trace
    from katra_trace.schema import Clock, Kind

    out = ctx.tmp / "replay.katra"
    subprocess.run([sys.executable, "-m", "katra3d", "run", str(trace), "--warmup", "0", "--frames", str(frames),
                    "--no-keep-image", "--force", "-o", str(out)], env=env, check=True, stdout=subprocess.DEVNULL,
                   stderr=subprocess.DEVNULL)
    ev = open_trace(out).events
    durations = ev["dur_ns"][(ev["kind"] == Kind.FRAME) & (ev["clock"] == Clock.WALL)]
    return float(len(durations) / (durations.sum() / 1e9))
