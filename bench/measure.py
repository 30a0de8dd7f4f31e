"""``python -m bench measure``: what ``--measure instructions`` delivers (docs/measure.md), on the
``ci`` suite.

Not a default bench: it runs valgrind for minutes (``make bench-measure``).
Everything counted runs as ``katra3d run ... --measure instructions``
processes, several at once (counts do not depend on load); their CPU time
is what each would take alone on an idle core.

Rows:

* **spread**: per scene, (max - min) / median of the median instructions per
  frame of 3 processes of the ``ci`` suite at 20 measured frames; the worst
  scene against <= 0.1 %;
* **1 % work change**: ``shader`` at 160x90 with ``iterations`` 100 vs 101
  (about +1 % of the frame's instructions), compared by
  ``katra_trace.analysis.compare.compare_traces`` (what ``katra3d compare`` runs) with
  one run a side, for every distinct pair of BASE and NEW processes; A/A
  over every distinct pair of BASE processes and of the ``ci`` processes,
  scene by scene. Counts are deterministic: comparing the same two
  processes again gives the same answer, so only distinct process pairs
  count as separate comparisons;
* **suite time**: the ``ci`` suite under ``--measure instructions --frames
  20``, CPU seconds of one process (its wall time on an idle core; the
  counted child is single-threaded) and the wall seen here;
* **harness floor**: the instructions per frame of an empty scene (its
  ``render`` does nothing) beside the cheapest built-in scene;
* **proxy**: the slowdown of a counted run against a plain (time) run of the
  same suite (the counted suite's wall on an idle core, its CPU seconds, over
  the plain run's wall, the plain run alone; beside it the CPU ratio), and the
  Spearman rank correlation between per-scene instructions and wall-clock
  medians.

The per-scene table is logged as Markdown (stderr) and kept in results.json
(``facts.markdown``): docs/measure.md shows it.
"""

from __future__ import annotations

import itertools
import os
import textwrap
import time
from pathlib import Path
from typing import Any

import numpy as np

from bench._core import BenchContext, Row, at_least, at_most, bench
from bench._proc import Job, run_jobs
from katra_trace.analysis.ranks import average_ranks
from katra_trace.analysis.verdict import Verdict

#: Processes of the counted ci suite (the spread is taken across them).
CI_PROCESSES = 3
CI_FRAMES = 20
#: The 1 % work change: shader iterations BASE -> NEW at this size, measured/warmup frames,
#: processes a side.
STEP_SCENE = "shader"
STEP_PARAM = "iterations"
STEP_VALUES = (100, 101)
STEP_SIZE = "160x90"
STEP_FRAMES = 3
STEP_PROCESSES = (3, 2)
SPREAD_TARGET_PCT = 0.1
SUITE_TARGET_S = 600.0
#: The counted ci suite's wall at most this many times its time run's wall (the counted child is
#: single-threaded, so its CPU seconds are its wall on an idle core; the time run runs alone, after
#: them).
SLOWDOWN_TARGET = 40.0

_EMPTY_SCENE = '''
"""A scene that does nothing: what the harness itself counts per frame."""
from typing import Any

from katra3d.scenes.api import Scene


class Empty(Scene):
    name = "empty"
    description = "renders nothing"

    def setup(self, ctx: Any, size: tuple[int, int], params: Any) -> None:
        self.bind_target(ctx, size)

    def render(self, frame: Any) -> None:
        pass
'''


def per_scene_medians(path: Path, clock: str) -> dict[str, float]:
    """Median measured-frame value per scene on ``clock`` (instructions, or wall in ns)."""
    from katra_trace import open_trace
    from katra_trace.analysis.stats import scene_durations

    trace = open_trace(path)
    durations = scene_durations(trace.events, list(trace.strings))
    return {
        scene: float(np.median(per[clock]))
        for scene, per in durations.items()
        if clock in per and per[clock].size
    }


def frame_periods_s(path: Path) -> dict[str, float]:
    """Median period between consecutive measured frame starts per scene (host clock, any frame
    clock).
    """
    from katra_trace import Kind, open_trace
    from katra_trace.analysis.stats import measured, scene_labels

    trace = open_trace(path)
    labels = scene_labels(trace.events, list(trace.strings))
    ev = measured(trace.events)
    frames = ev[ev["kind"] == int(Kind.FRAME)]
    out: dict[str, float] = {}
    for sid, label in labels.items():
        of = frames[frames["scene"] == sid]
        starts = np.unique(of["start_ns"])  # one start per frame whatever the number of clocks
        if starts.size >= 2:
            out[label] = float(np.median(np.diff(starts))) / 1e9
    return out


def spearman(x: list[float], y: list[float]) -> float:
    """Spearman's rank correlation (average ranks for ties)."""
    rx, ry = (
        average_ranks(np.asarray(x, dtype=float))[0],
        average_ranks(np.asarray(y, dtype=float))[0],
    )
    return float(np.corrcoef(rx, ry)[0, 1])


def _compare(base: Path, new: Path) -> Any:
    from katra_trace import open_trace
    from katra_trace.analysis.compare import compare_traces
    from katra_trace.analysis.defaults import CompareOptions

    return compare_traces(
        [open_trace(base)],
        [open_trace(new)],
        CompareOptions(metric="instructions", allow_param_mismatch=True),
    )


def _fmt_count(x: float) -> str:
    return f"{x:,.0f}"


@bench(
    "measure",
    about="--measure instructions on the ci suite: spread, 1 % step, time, floor, proxy",
    default=False,
    needs_gl=True,
)
def measure(ctx: BenchContext) -> list[Row]:
    """--measure instructions on the ci suite: spread, 1 % step, suite time, harness floor, proxy
    quality.
    """
    from katra3d.harness.run.valgrind import find_valgrind

    _, valgrind = find_valgrind()  # exit 3 with the install line when missing
    quick = ctx.quick
    suite = ("clear", "triangle", "fillrate") if quick else None
    frames = ctx.scale(CI_FRAMES, 3)
    size = ("--size", "32x32") if quick else ()
    ci_args = (
        *(("--suite", "ci") if suite is None else suite),
        "--frames",
        str(frames),
        *size,
        *(("--warmup", "1") if quick else ()),
    )
    n_ci = ctx.scale(CI_PROCESSES, 2)
    (ctx.tmp / "empty_scene.py").write_text(textwrap.dedent(_EMPTY_SCENE), encoding="utf-8")
    empty_args = (
        f"{ctx.tmp / 'empty_scene.py'}:Empty",
        "--frames",
        str(frames),
        "--size",
        "32x32" if quick else "320x180",
        "--warmup",
        "1" if quick else "5",
    )
    n_base, n_new = (2, 1) if quick else STEP_PROCESSES
    step_size = "32x18" if quick else STEP_SIZE
    step_frames = 2 if quick else STEP_FRAMES

    def step_args(value: int) -> tuple[str, ...]:
        return (
            STEP_SCENE,
            "--param",
            f"{STEP_SCENE}.{STEP_PARAM}={value}",
            "--size",
            step_size,
            "--frames",
            str(step_frames),
            "--warmup",
            "1",
        )

    # the bench runs several counted processes at once itself: each counts one scene at a time
    # (--jobs 1)
    counted = ("--measure", "instructions", "--jobs", "1")
    jobs: list[Job] = [
        Job(f"ci{i}", (*ci_args, *counted), ctx.tmp / f"ci{i}.katra") for i in range(n_ci)
    ]
    jobs.append(Job("empty", (*empty_args, *counted), ctx.tmp / "empty.katra"))
    jobs += [
        Job(f"base{i}", (*step_args(STEP_VALUES[0]), *counted), ctx.tmp / f"base{i}.katra")
        for i in range(n_base)
    ]
    jobs += [
        Job(f"new{i}", (*step_args(STEP_VALUES[1]), *counted), ctx.tmp / f"new{i}.katra")
        for i in range(n_new)
    ]
    # counts do not depend on load; more at once gets more of a busy machine
    parallel = 2 if quick else 4
    load = os.getloadavg()
    ctx.log(
        f"{len(jobs)} counted processes, {parallel} at a time (valgrind {valgrind}; load "
        f"{load[0]:.1f})"
    )
    t0 = time.perf_counter()
    done = run_jobs(jobs, parallel=parallel, log=ctx.log)
    counted_wall_s = time.perf_counter() - t0
    ctx.log("plain (time) run of the same suite, alone")
    plain = run_jobs([Job("plain", ci_args, ctx.tmp / "plain.katra")], parallel=1, log=ctx.log)[
        "plain"
    ]
    load_end = os.getloadavg()

    # --- spread across processes, per scene
    counts = [per_scene_medians(done[f"ci{i}"].job.output, "instructions") for i in range(n_ci)]
    scenes = list(counts[0])
    spread_pct = {
        s: 100.0
        * (max(c[s] for c in counts) - min(c[s] for c in counts))
        / float(np.median([c[s] for c in counts]))
        for s in scenes
    }
    worst = max(scenes, key=lambda s: spread_pct[s])

    # --- the 1 % step and A/A, one run a side, distinct process pairs only
    step_pairs = [(done[f"base{i}"], done[f"new{j}"]) for i in range(n_base) for j in range(n_new)]
    step_results = [_compare(b.job.output, n.job.output) for b, n in step_pairs]
    flagged = sum(1 for r in step_results if r.exit_code == 1)
    step_change = [100.0 * (r.scenes[0].ratio - 1.0) for r in step_results]
    aa_pairs = [
        (done[f"base{i}"], done[f"base{j}"]) for i, j in itertools.combinations(range(n_base), 2)
    ]
    aa_pairs += [
        (done[f"ci{i}"], done[f"ci{j}"]) for i, j in itertools.combinations(range(n_ci), 2)
    ]
    aa_scene_cmp = 0
    aa_false = 0
    for a, b in aa_pairs:
        result = _compare(a.job.output, b.job.output)
        aa_scene_cmp += sum(1 for s in result.scenes if s.verdict is not Verdict.INCOMPARABLE)
        aa_false += len(result.regressions)
    n_aa_step = len(aa_pairs) - n_ci * (n_ci - 1) // 2

    # --- suite time, harness floor, proxy
    ci_cpu = [done[f"ci{i}"].cpu_s for i in range(n_ci)]
    ci_wall = [done[f"ci{i}"].wall_s for i in range(n_ci)]
    empty = per_scene_medians(done["empty"].job.output, "instructions")
    empty_count = next(iter(empty.values()))
    cheapest = min(scenes, key=lambda s: counts[0][s])
    wall_med = per_scene_medians(plain.job.output, "wall")
    plain_period = frame_periods_s(plain.job.output)
    counted_period = frame_periods_s(done["ci0"].job.output)
    slow = {
        s: counted_period[s] / plain_period[s]
        for s in scenes
        if s in plain_period and s in counted_period
    }
    rho = spearman([counts[0][s] for s in scenes], [wall_med[s] for s in scenes])

    lines = [
        "| scene | instructions / frame | spread, 3 processes | slowdown vs plain run | wall "
        "median, plain run |",
        "|---|---:|---:|---:|---:|",
    ]
    for s in scenes:
        lines.append(
            f"| {s} | {_fmt_count(counts[0][s])} | {spread_pct[s]:.4f} % | "
            f"{slow.get(s, float('nan')):.0f}x "
            f"| {wall_med[s] / 1e6:.3f} ms |"
        )
    lines.append(f"| (empty scene: harness only) | {_fmt_count(empty_count)} | - | - | - |")
    markdown = "\n".join(lines)
    ctx.facts.update(
        {
            "markdown": markdown,
            "valgrind": valgrind,
            "loadavg_start": list(load),
            "loadavg_end": list(load_end),
            "ci_cpu_s": ci_cpu,
            "ci_wall_s": ci_wall,
            "plain_wall_s": plain.wall_s,
            "plain_cpu_s": plain.cpu_s,
            "counted_phase_wall_s": counted_wall_s,
            "parallel": parallel,
            "spread_pct": spread_pct,
            "instructions_per_frame": counts[0],
            "wall_median_ms": {s: v / 1e6 for s, v in wall_med.items()},
            "slowdown": slow,
            "spearman": rho,
            "step_change_pct": step_change,
            "empty_per_frame": empty_count,
        }
    )
    for line in lines:
        ctx.log(line)

    note_pairs = (
        f"{len(step_pairs)} distinct process pairs ({n_base} BASE x {n_new} NEW processes); a "
        "repeat "
        "of the same pair gives the same counts, so 10 comparisons of one pair would be one"
    )
    suite_what = (
        "ci suite (--measure instructions --frames 20)"
        if not quick
        else "3 scenes at 32x32 (--quick)"
    )
    rows = [
        Row(
            "spread across processes, worst scene",
            f"(max - min) / median of per-frame instructions, {n_ci} processes",
            spread_pct[worst],
            "%",
            n=n_ci,
            target=at_most(SPREAD_TARGET_PCT),
            notes=f"worst: {worst}; median over scenes "
            f"{float(np.median(list(spread_pct.values()))):.4f} %",
        ),
        Row(
            f"{STEP_SCENE} {STEP_PARAM} {STEP_VALUES[0]}->{STEP_VALUES[1]} flagged",
            "single-run compares saying regression (exit 1)",
            float(flagged),
            f"of {len(step_pairs)}",
            n=len(step_pairs),
            target=at_least(len(step_pairs)),
            notes=f"change {min(step_change):+.3f}..{max(step_change):+.3f} % at {step_size}; "
            f"{note_pairs}",
        ),
        Row(
            "A/A false regressions",
            "scene comparisons saying regression, one run a side",
            float(aa_false),
            f"of {aa_scene_cmp}",
            n=aa_scene_cmp,
            target=at_most(0),
            notes=f"{n_aa_step} {STEP_SCENE} process pair(s) + {n_ci * (n_ci - 1) // 2} ci process "
            "pairs x "
            f"{len(scenes)} scenes",
        ),
        Row(
            "suite time, one counted process",
            f"CPU s of the {suite_what}: its wall on an idle core",
            float(np.median(ci_cpu)),
            "s",
            n=n_ci,
            target=at_most(SUITE_TARGET_S),
            notes=f"wall here {min(ci_wall):.0f}..{max(ci_wall):.0f} s with {parallel} at once, "
            "load "
            f"{load[0]:.1f}->{load_end[0]:.1f} on {os.cpu_count()} cores",
        ),
        Row(
            "harness floor: empty scene",
            "instructions per frame",
            empty_count,
            "instructions",
            notes=f"cheapest built-in: {cheapest} {_fmt_count(counts[0][cheapest])}",
        ),
        Row(
            "harness floor / cheapest scene",
            f"empty-scene instructions / {cheapest}'s",
            empty_count / counts[0][cheapest],
            notes="per frame, same size",
        ),
        Row(
            "slowdown vs plain run",
            "suite: counted wall on an idle core (its CPU s) / plain run's wall, alone",
            float(np.median(ci_cpu)) / plain.wall_s,
            target=at_most(SLOWDOWN_TARGET),
            notes=f"plain run: {plain.wall_s:.1f} s wall, load {load_end[0]:.1f} at the end",
        ),
        Row(
            "slowdown vs plain run, CPU",
            "suite CPU s: counted / plain",
            float(np.median(ci_cpu)) / plain.cpu_s,
            notes=f"per-scene frame periods {min(slow.values()):.0f}x..{max(slow.values()):.0f}x; "
            "plain run: "
            f"{plain.wall_s:.1f} s wall, {plain.cpu_s:.1f} s CPU (llvmpipe's threads included)",
        ),
        Row(
            "rank correlation",
            "Spearman: per-scene instructions vs plain wall medians",
            rho,
            "rho",
            n=len(scenes),
            notes=f"{len(scenes)} scenes; plain run of {frames} frames",
        ),
    ]
    return rows
