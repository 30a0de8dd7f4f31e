"""``python -m bench counts-aa``: counted A/A on small frames, and a 1 % change on a ``ci``-size
frame.

Not a default bench: it runs valgrind for many minutes (``make bench-measure`` runs it with
``measure``). Rows:

* **A/A**: for each of :data:`SCENES` at each of :data:`SIZES` with :data:`FRAMES` measured frames,
  :data:`PROCESSES` counted processes of identical code, their outputs named with different lengths
  (``o.katra``, ``oo.katra``, ...) as CI's are; every distinct pair is compared by
  ``katra_trace.analysis.compare.compare_traces`` (what ``katra3d compare`` runs), one run a side.
  The target is no regression and no improvement verdict at all;
* **jitter**: the largest difference between two processes' counts of the same frame (frame i
  against frame i), in instructions, against the floor the decision assumes
  (:data:`katra_trace.analysis.defaults.COUNT_JITTER_PER_FRAME`);
* **median frames**: how many of the same pairs the ratio of the two runs' median frames would
  put beyond the 0.5 % threshold: information, why compare matches counted frames by index;
* **+1 % of loop work**: ``shader`` at the ``ci`` suite's 320x180 with ``iterations`` 100 vs 101,
  one run a side, every distinct BASE x NEW process pair: all must say regression.
"""

from __future__ import annotations

import itertools
import math
import os
from pathlib import Path

import numpy as np

from bench._core import BenchContext, Row, at_least, at_most, bench
from bench._proc import Job, run_jobs
from bench.measure import STEP_PARAM, STEP_SCENE, STEP_VALUES

SCENES = ("triangle", "clear", "fillrate", "shader")
SIZES = ("32x32", "64x64")
FRAMES = 5
PROCESSES = 7
#: the 1 % step: the ci suite's frame size, frames measured, processes a side
STEP_SIZE = "320x180"
STEP_FRAMES = 3
STEP_PROCESSES = 2


def frame_counts(path: Path) -> np.ndarray:
    """The measured frames' instruction counts of a one-scene trace, in frame order."""
    from katra_trace import open_trace
    from katra_trace.analysis.stats import scene_durations

    trace = open_trace(path)
    (per,) = scene_durations(trace.events, list(trace.strings)).values()
    return np.asarray(per["instructions"], dtype=np.float64)


def _compare(base: Path, new: Path) -> tuple[str, float]:
    """The scene's verdict and change (percent) of ``katra3d compare BASE NEW`` (instructions)."""
    from katra_trace import open_trace
    from katra_trace.analysis.compare import compare_traces
    from katra_trace.analysis.defaults import CompareOptions

    result = compare_traces(
        [open_trace(base)],
        [open_trace(new)],
        CompareOptions(metric="instructions", allow_param_mismatch=True),
    )
    (scene,) = result.scenes
    return scene.verdict, scene.change_pct


@bench(
    "counts-aa",
    about="counted A/A: 7 processes a scene and size, 21 pairs each; +1 % on a ci frame",
    default=False,
    needs_gl=True,
)
def counts_aa(ctx: BenchContext) -> list[Row]:
    """Counted A/A verdicts on small frames, their jitter, and the +1 % step on a ci-size frame."""
    from katra3d.harness.run.valgrind import find_valgrind
    from katra_trace.analysis.defaults import COUNT_JITTER_PER_FRAME, DEFAULT_THRESHOLD_COUNT_PCT

    _, valgrind = find_valgrind()  # exit 3 with the install line when missing
    scenes = SCENES[:2] if ctx.quick else SCENES
    sizes = SIZES[:1] if ctx.quick else SIZES
    n_proc = ctx.scale(PROCESSES, 3)
    n_step = ctx.scale(STEP_PROCESSES, 1)
    step_size = "64x36" if ctx.quick else STEP_SIZE
    jobs: list[Job] = []
    for scene, size in itertools.product(scenes, sizes):
        for i in range(n_proc):
            # names of different lengths
            out = ctx.tmp / f"{scene}-{size}" / f"{'o' * (i + 1)}.katra"
            out.parent.mkdir(parents=True, exist_ok=True)
            jobs.append(
                Job(
                    f"{scene}-{size}-{i}",
                    (scene, "--size", size, "--frames", str(FRAMES), "--measure", "instructions"),
                    out,
                )
            )
    for side, value in (("base", STEP_VALUES[0]), ("new", STEP_VALUES[1])):
        jobs += [
            Job(
                f"step-{side}{i}",
                (
                    STEP_SCENE,
                    "--param",
                    f"{STEP_SCENE}.{STEP_PARAM}={value}",
                    "--size",
                    step_size,
                    "--frames",
                    str(STEP_FRAMES),
                    "--warmup",
                    "1",
                    "--measure",
                    "instructions",
                ),
                ctx.tmp / f"step-{side}{'x' * i}.katra",
            )
            for i in range(n_step)
        ]
    parallel = 2 if ctx.quick else 3  # counts do not depend on load
    ctx.log(
        f"{len(jobs)} counted processes, {parallel} at a time (valgrind {valgrind}; "
        f"load {os.getloadavg()[0]:.1f})"
    )
    done = run_jobs(jobs, parallel=parallel, log=ctx.log)

    threshold = DEFAULT_THRESHOLD_COUNT_PCT
    verdicts: dict[str, int] = {}
    wrong: list[str] = []
    median_wrong = 0
    worst_abs, worst_rel, worst_where = 0.0, 0.0, ""
    per_config: dict[str, dict[str, object]] = {}
    pairs = 0
    for scene, size in itertools.product(scenes, sizes):
        outs = [done[f"{scene}-{size}-{i}"].job.output for i in range(n_proc)]
        frames = [frame_counts(p) for p in outs]
        config = f"{scene} {size}"
        cfg_abs = 0.0
        for a, b in itertools.combinations(range(n_proc), 2):
            pairs += 1
            verdict, change = _compare(outs[a], outs[b])
            verdicts[verdict] = verdicts.get(verdict, 0) + 1
            if verdict in ("regression", "improvement"):
                wrong.append(f"{config} {a}/{b}: {verdict} {change:+.2f} %")
            median_change = 100.0 * (
                float(np.median(frames[b])) / float(np.median(frames[a])) - 1.0
            )
            median_wrong += abs(median_change) >= threshold
            diff = (
                np.abs(frames[a] - frames[b])
                if frames[a].size == frames[b].size
                else np.array([math.inf])
            )
            d = float(diff.max())
            cfg_abs = max(cfg_abs, d)
            if d > worst_abs:
                worst_abs, worst_where = d, f"{config}, processes {a} and {b}"
            worst_rel = max(worst_rel, float((diff / frames[a]).max()) * 100.0)
        per_config[config] = {
            "instructions_per_frame": float(np.median(frames[0])),
            "max_frame_diff": cfg_abs,
        }
        ctx.log(
            f"{config}: median {np.median(frames[0]):,.0f} instructions a frame, largest "
            "matched-frame "
            f"difference {cfg_abs:,.0f}"
        )

    step_results = [
        _compare(done[f"step-base{i}"].job.output, done[f"step-new{j}"].job.output)
        for i in range(n_step)
        for j in range(n_step)
    ]
    flagged = sum(1 for v, _ in step_results if v == "regression")
    step_change = [c for _, c in step_results]
    ctx.facts.update(
        {
            "verdicts": verdicts,
            "wrong": wrong,
            "per_config": per_config,
            "worst_abs": worst_abs,
            "worst_rel_pct": worst_rel,
            "median_wrong": median_wrong,
            "step_change_pct": step_change,
            "valgrind": valgrind,
        }
    )
    what = (
        f"{len(scenes)} scenes x {len(sizes)} sizes x {n_proc * (n_proc - 1) // 2} pairs, {FRAMES} "
        "frames"
    )
    return [
        Row(
            "A/A regression or improvement verdicts",
            f"one run a side: {what}",
            float(len(wrong)),
            f"of {pairs}",
            n=pairs,
            target=at_most(0),
            notes="; ".join(f"{k} {v}" for k, v in sorted(verdicts.items()))
            + (f"; {wrong[:3]}" if wrong else ""),
        ),
        Row(
            "A/A matched-frame jitter, worst",
            "largest |frame i of A - frame i of B|, instructions",
            worst_abs,
            "instructions",
            n=pairs,
            target=at_most(COUNT_JITTER_PER_FRAME),
            notes=f"{worst_where or 'every pair identical'}; worst relative {worst_rel:.4f} %; the "
            "decision's "
            f"floor is {COUNT_JITTER_PER_FRAME:,} a frame",
        ),
        Row(
            "A/A pairs over the threshold on median frames",
            f"|median(B) / median(A) - 1| >= {threshold:g} %",
            float(median_wrong),
            f"of {pairs}",
            n=pairs,
            notes="the ratio of two runs' median frames, frames not matched by index",
        ),
        Row(
            f"{STEP_SCENE} {STEP_PARAM} {STEP_VALUES[0]}->{STEP_VALUES[1]} at {step_size} flagged",
            "one run a side, regression verdicts",
            float(flagged),
            f"of {len(step_results)}",
            n=len(step_results),
            target=at_least(len(step_results)),
            notes=f"change {min(step_change):+.3f}..{max(step_change):+.3f} %",
        ),
    ]
