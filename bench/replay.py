"""``python -m bench replay``: what katra3d adds to a trace replay (docs/replay.md).

A glmark2 trace (its ``build`` scene, 256x256 (frames of a few ms: rendering, not round trips to the
X server), 2 s; 0.5 s with ``--quick``) is recorded once with ``apitrace trace`` under an Xvfb of
the bench's own. Each round replays it on that server, in rotating order, by:

* ``glretrace -b``: apitrace's own benchmark mode; its figure is its ``Rendered N frames in T
  secs``, timed from just before its first call (so its context creation and first compiles are in
  it) to its last call;
* ``katra3d run app.trace --warmup 0 --frames N``: every frame of the trace, its figure N over the
  sum of its frames' ``wall`` times read from the trace it wrote: from the replayer's first call
  (the first frame starts there, as glretrace's clock does) to the last frame's end;
* ``glretrace --pframe-times``: the replayer in the mode katra3d drives it in (a glFinish ends each
  frame, and a line per call and frame is printed), its own ``Rendered ...`` figure.

Rows, each the median of per-round ratios with its 95 % interval:

* ``replay fps``: katra3d's frame rate over ``glretrace -b``'s (target >= 0.95): what the harness
  costs, the frame-time mode included;
* ``replay fps, glretrace --pframe-times``: the same replayer in katra3d's mode over ``-b``, for
  information: the part of the first row that is the timing mode (a glFinish a frame) and not
  katra3d's reading.

Skipped with a notice where apitrace, glmark2 or Xvfb is missing.
"""

from __future__ import annotations

import math
import os
import re
import shutil
import subprocess
import sys
from pathlib import Path

from bench._core import BenchContext, Row, at_least, bench, interleave, pair_ratios, ratio_row
from bench.glmark2 import xvfb_display

TOOLS = ("apitrace", "glretrace", "glmark2", "Xvfb")
_RENDERED = re.compile(r"Rendered (\d+) frames in ([0-9.e+-]+) secs")


@bench(
    "replay",
    about="a glmark2 trace: katra3d run app.trace's frame rate over glretrace -b's",
    needs_gl=True,
)
def replay(ctx: BenchContext) -> list[Row]:
    label = "replay fps"
    missing = [t for t in TOOLS if shutil.which(t) is None]
    if missing:
        return [
            Row(
                label,
                "frame rate: katra3d run app.trace / glretrace -b",
                math.nan,
                notes=f"skipped: no {', '.join(missing)} (ci/system-deps.sh test)",
            )
        ]
    trace = ctx.tmp / "app.trace"
    with xvfb_display(str(shutil.which("Xvfb"))) as display:
        env = {**os.environ, "DISPLAY": display}
        subprocess.run(
            [
                "apitrace",
                "trace",
                "-o",
                str(trace),
                "glmark2",
                "-s",
                "256x256",
                "-b",
                f"build:duration={0.5 if ctx.quick else 2.0}",
            ],
            env=env,
            check=True,
            capture_output=True,
        )
        frames = _glretrace(env, trace, "-b")[0]
        ctx.log(f"{label}: {frames} frames a replay, Xvfb on {display}")

        def bare() -> float:
            n, secs = _glretrace(env, trace, "-b")
            return n / secs

        def frame_times() -> float:
            n, secs = _glretrace(env, trace, "--pframe-times")
            return n / secs

        def katra() -> float:
            return _katra(ctx, env, trace, frames)

        samples = interleave(
            {"katra": katra, "glretrace": bare, "pframe": frame_times},
            rounds=ctx.scale(9, 6),
            progress=ctx.log,
        )
    return [
        ratio_row(
            label,
            "frame rate: katra3d run app.trace / glretrace -b (same trace, same Xvfb, every "
            "frame from the first call)",
            pair_ratios(samples, "katra", "glretrace"),
            target=at_least(0.95),
        ),
        ratio_row(
            f"{label}, glretrace --pframe-times",
            "frame rate: glretrace --pframe-times / glretrace -b "
            "(the timing mode katra3d drives, without katra3d)",
            pair_ratios(samples, "pframe", "glretrace"),
        ),
    ]


def _glretrace(env: dict[str, str], trace: Path, mode: str) -> tuple[int, float]:
    out = subprocess.run(
        ["glretrace", mode, str(trace)], env=env, capture_output=True, text=True, check=False
    )
    found = _RENDERED.search(out.stdout)
    if out.returncode != 0 or found is None:
        raise RuntimeError(
            f"glretrace {mode} failed (exit status {out.returncode}): {out.stderr.strip()[-300:]}"
        )
    return int(found.group(1)), float(found.group(2))


def _katra(ctx: BenchContext, env: dict[str, str], trace: Path, frames: int) -> float:
    # deferred: katra_trace is imported by the benches that use it, not by the runner
    from katra_trace import open_trace
    from katra_trace.schema import Clock, Kind

    out = ctx.tmp / "replay.katra"
    subprocess.run(
        [
            sys.executable,
            "-m",
            "katra3d",
            "run",
            str(trace),
            "--warmup",
            "0",
            "--frames",
            str(frames),
            "--no-keep-image",
            "--force",
            "-o",
            str(out),
        ],
        env=env,
        check=True,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    ev = open_trace(out).events
    durations = ev["dur_ns"][(ev["kind"] == Kind.FRAME) & (ev["clock"] == Clock.WALL)]
    if len(durations) != frames:
        raise RuntimeError(f"katra3d run replayed {len(durations)} frames, not {frames}")
    return float(len(durations) / (durations.sum() / 1e9))
