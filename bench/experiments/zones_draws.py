"""``python -m bench zones-draws``: what timing every draw costs (docs/timing.md quotes it).

``drawcalls`` at 320x180, count 1000 (its default) and 100: the frame rate with ``--zones draws``
and ``--zones passes`` over ``--zones off``, per timing mode, in interleaved rounds of runs without
the reference draw (frame periods as in bench/overhead.py). ``gpu`` mode needs a hardware renderer:
on a software one its rows are one skip row.
"""

from __future__ import annotations

import dataclasses
import functools

from bench._core import BenchContext, Row, bench, interleave, median_iqr, pair_ratios, ratio_row
from bench._gl import WARMUP, Collect, renderer, run_frame_period_s

#: drawcalls' draw counts for the draws-mode rows (1000 is its default) and measured frames at each.
DRAW_COUNTS: tuple[tuple[int, int], ...] = ((1000, 20), (100, 100))
DRAWS_ROUNDS = 9
DRAWS_SIZE = (320, 180)


@bench(
    "zones-draws",
    about="drawcalls frame rate with --zones draws / passes vs off, per timing mode",
    needs_gl=True,
)
def zones_draws(ctx: BenchContext) -> list[Row]:
    """The drawcalls frame-rate ratio, zones draws (and passes) vs off, per timing mode."""
    from katra3d.harness.gl.probe import is_software_renderer
    from katra3d.harness.run.config import RunConfig

    gl_renderer = renderer()
    ctx.facts["gl_renderer"] = gl_renderer

    software = is_software_renderer(gl_renderer)
    modes = ["sync"] if software else ["sync", "gpu"]
    counts = ((100, 20),) if ctx.quick else DRAW_COUNTS
    rows: list[Row] = []
    for timing in modes:
        for count, frames in counts:
            label = f"drawcalls count={count} {timing}"
            ctx.log(label)
            off = RunConfig(
                scenes=("drawcalls",),
                frames=frames,
                warmup=WARMUP,
                size=DRAWS_SIZE,
                backend="egl",
                timing=timing,
                reference_every=0,
                params=(("drawcalls", "count", count),),
                output=str(ctx.tmp / "draws.katra"),
            )
            configs = {z: dataclasses.replace(off, zones=z) for z in ("off", "passes", "draws")}
            collect = Collect()
            samples = interleave(
                {
                    z: collect(z, functools.partial(run_frame_period_s, c))
                    for z, c in configs.items()
                },
                rounds=ctx.scale(DRAWS_ROUNDS, 3),
            )
            fps = 1.0 / median_iqr(samples["off"])[0]
            per_draw_us = (
                1e6 * (median_iqr(samples["draws"])[0] - median_iqr(samples["off"])[0]) / count
            )
            for z in ("draws", "passes"):
                # frame-rate ratio = inverse frame-period ratio, round by round
                rates = pair_ratios(samples, "off", z)
                note = (
                    f"off ~{fps:.0f} fps; ~{per_draw_us:.1f} us more per draw"
                    if z == "draws"
                    else "drawcalls has one pass zone"
                )
                if timing == "sync" and z == "draws":
                    note += "; sync: 2 glFinish per draw"
                rows.append(
                    ratio_row(
                        f"{label} zones {z}",
                        f"frame rate: zones {z} / off",
                        rates,
                        notes=f"{note}; left out as preempted: off {collect.note('off')}, "
                        f"{z} {collect.note(z)}",
                    )
                )
    if software:
        rows.append(
            Row(
                f"drawcalls {DRAWS_SIZE[0]}x{DRAWS_SIZE[1]} gpu",
                "frame rate: zones draws / off",
                float("nan"),
                notes=f"skipped: gpu timing needs a hardware renderer ({gl_renderer})",
            )
        )
    return rows
