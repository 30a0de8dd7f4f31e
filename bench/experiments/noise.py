"""``python -m bench noise``: the noise table of docs/stats.md (``make bench-noise``), a study of
how each way of comparing time behaves on this machine.

For ``fillrate`` and ``shader`` at 320x180, 300 measured frames a run, four
ways to compare BASE with NEW, each with ``katra_trace.analysis.compare.compare_traces``
(the code ``katra3d compare`` and ``katra3d ab`` run), defaults alpha 0.01 and
threshold 5 % (0.5 % for instructions):

* **raw wall**: 5 runs a side, unpaired;
* **normalized wall**: the same runs, ``--normalize`` (frame wall / reference wall);
* **paired**: the same runs as 5 rounds, each round's BASE and NEW paired, as
  ``katra3d ab`` pairs them;
* **process CPU**: the same runs, ``--metric process`` (the process CPU time per
  frame, every thread counted), unpaired;
* **process CPU, p10**: the same with ``--stat p10`` (each run's 10th-percentile
  frame instead of its median);
* **instructions**: ``--measure instructions``, one run a side.

Captures: ``rounds`` rounds per scene and condition; a round runs, in rotating
order, BASE (``A``), a second BASE (``A2``, for A/A) and one run of every
slowdown level (param steps). A comparison takes 5 of the rounds (a random
subset, seeded): A/A compares ``A2`` (BASE) with ``A`` (NEW); a level compares
``A`` with that level. Subsets overlap, so the ``comparisons`` of a level are
not independent: the detection rates are estimates from ``rounds`` rounds, as
good as the rounds are typical, and the row says how many were disjoint.

**Injected load**: the same again, with a bounded CPU-busy child process
(a Python loop with a hard CPU limit) running during ``A``'s capture in every
other round: half of BASE's runs in a level comparison (it hides slowdowns),
half of NEW's runs in an A/A comparison (it makes false regressions).

Levels are named by their measured change in instructions per frame (the
counted runs), the work actually added.

Run CV: CV of ``A``'s per-run medians (raw, process CPU) or 10th percentiles
(process CPU, p10), of its per-run normalized levels
(normalized), the sd of the per-round log ratios ``A``/``A2`` (paired), the
difference of the two BASE processes (instructions).

The Markdown table is in results.json (``facts.markdown``); ``python -m
bench.experiments.noise --write-doc RESULTS docs/stats.md`` puts it between
the ``noise-table`` markers of docs/stats.md (``make bench-noise`` does both).
"""

from __future__ import annotations

import argparse
import dataclasses
import datetime as dt
import json
import math
import os
import random
import sys
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import numpy as np

from bench._core import BenchContext, Row, at_most, bench
from bench._proc import Job, run_jobs
from bench._report import write_doc
from bench.defaults import hog

#: scene -> (param, BASE value, slowdown values): the steps add about 5, 10, 20 and 40 % of work.
SCENES: dict[str, tuple[str, int, tuple[int, ...]]] = {
    "fillrate": ("layers", 20, (21, 22, 24, 28)),
    "shader": ("iterations", 48, (50, 53, 58, 67)),
}
SIZE = (320, 180)
FRAMES = 300
WARMUP = 10
ROUNDS = 10
RUNS_A_SIDE = 5
COMPARISONS = 60
COUNT_FRAMES = 10
#: A run with fewer rounds or counted frames than these is labelled "reduced" in the table.
FULL_ROUNDS = 10
FULL_COUNT_FRAMES = 10
FULL_FRAMES = 300
FULL_LEVELS = 4
#: The busy child's hard CPU limit (s): it ends by itself even if the bench dies.
BUSY_CPU_LIMIT_S = 120
START_MARK = "<!-- noise-table:start -->"
END_MARK = "<!-- noise-table:end -->"
METHODS = (
    "raw wall",
    "normalized wall",
    "paired (ab)",
    "process CPU",
    "process CPU, p10",
    "instructions",
)
#: The methods compared on the wall-clock captures (all but instructions).
TIME_METHODS = METHODS[:5]


@dataclasses.dataclass
class _Plan:
    frames: int
    warmup: int
    size: tuple[int, int]
    rounds: int
    runs: int
    comparisons: int
    count_frames: int
    levels: dict[str, tuple[int, ...]]

    @property
    def reduced(self) -> bool:
        return (
            self.frames < FULL_FRAMES
            or self.rounds < FULL_ROUNDS
            or self.count_frames < FULL_COUNT_FRAMES
            or any(len(v) < FULL_LEVELS for v in self.levels.values())
        )


def _capture(plan: _Plan, scene: str, key: str, value: int, path: Path) -> Any:
    from katra3d.harness.run.config import RunConfig
    from katra3d.harness.run.runner import run
    from katra_trace import open_trace

    path.unlink(missing_ok=True)
    config = RunConfig(
        scenes=(scene,),
        frames=plan.frames,
        warmup=plan.warmup,
        size=plan.size,
        backend="egl",
        timing="sync",
        params=((scene, key, value),),
        output=str(path),
    )
    result = run(config, quiet=True)
    return open_trace(result.path)


def _rounds(ctx: BenchContext, plan: _Plan, scene: str, loaded: bool) -> dict[str, list[Any]]:
    """Traces per variant (``A``, ``A2``, ``L<value>``), one per round, rounds in rotating order."""
    key, base, _ = SCENES[scene]
    levels = plan.levels[scene]
    variants = {"A": base, "A2": base, **{f"L{v}": v for v in levels}}
    names = list(variants)
    out: dict[str, list[Any]] = {n: [] for n in names}
    for r in range(plan.rounds):
        shift = r % len(names)
        order = names[shift:] + names[:shift]
        if (r // len(names)) % 2:
            order.reverse()
        for name in order:
            busy = (
                hog(BUSY_CPU_LIMIT_S, pin=False) if loaded and name == "A" and r % 2 == 1 else None
            )
            try:
                trace = _capture(
                    plan,
                    scene,
                    key,
                    variants[name],
                    ctx.tmp / f"{scene}-{'load' if loaded else 'quiet'}-{name}-{r}.katra",
                )
            finally:
                if busy is not None:
                    busy.end(10.0)
            out[name].append(trace)
        ctx.log(f"{scene} {'loaded' if loaded else 'quiet'}: round {r + 1}/{plan.rounds}")
    return out


def _verdicts(
    traces: dict[str, list[Any]], base: str, new: str, plan: _Plan, rng: random.Random
) -> dict[str, tuple[int, int]]:
    """(regressions, comparisons) per time method over ``plan.comparisons``
    subsets of the rounds."""
    from katra_trace.analysis.compare import compare_traces
    from katra_trace.analysis.defaults import CompareOptions

    rounds = len(traces[base])
    k = min(plan.runs, rounds)
    subsets = [sorted(rng.sample(range(rounds), k)) for _ in range(plan.comparisons)]
    out = {m: [0, 0] for m in TIME_METHODS}
    for subset in subsets:
        b = [traces[base][i] for i in subset]
        n = [traces[new][i] for i in subset]
        results = {
            "raw wall": compare_traces(
                b, n, CompareOptions(metric="wall", allow_param_mismatch=True)
            ),
            "normalized wall": compare_traces(
                b, n, CompareOptions(normalize=True, allow_param_mismatch=True)
            ),
            "paired (ab)": compare_traces(
                b,
                n,
                CompareOptions(metric="wall", allow_param_mismatch=True),
                pairs=[(i, i) for i in range(k)],
            ),
            "process CPU": compare_traces(
                b, n, CompareOptions(metric="process", allow_param_mismatch=True)
            ),
            "process CPU, p10": compare_traces(
                b, n, CompareOptions(metric="process", allow_param_mismatch=True, run_stat="p10")
            ),
        }
        for method, result in results.items():
            out[method][0] += int(result.exit_code == 1)
            out[method][1] += 1
    return {m: (v[0], v[1]) for m, v in out.items()}


def _run_cv(traces: dict[str, list[Any]], scene: str) -> dict[str, float]:
    from katra_trace.analysis.decide import run_level
    from katra_trace.analysis.stats import reference_durations, scene_durations

    raw, norm, logr, process, process10 = [], [], [], [], []
    for a, a2 in zip(traces["A"], traces["A2"], strict=True):
        walls = []
        for t in (a, a2):
            frames = scene_durations(t.events, list(t.strings))[scene]
            ref = reference_durations(t.events, list(t.strings))[scene]["wall"]
            walls.append(float(np.median(frames["wall"])))
            if t is a:
                raw.append(walls[-1])
                norm.append(walls[-1] / float(np.median(ref)))
                process.append(run_level(frames["process"], "median"))
                process10.append(run_level(frames["process"], "p10"))
        logr.append(math.log(walls[0] / walls[1]))

    def cv(v: list[float]) -> float:
        return float(np.std(v, ddof=1) / np.mean(v)) if len(v) > 1 else math.nan

    return {
        "raw wall": cv(raw),
        "normalized wall": cv(norm),
        "paired (ab)": float(np.std(logr, ddof=1)) if len(logr) > 1 else math.nan,
        "process CPU": cv(process),
        "process CPU, p10": cv(process10),
    }


def _counted(ctx: BenchContext, plan: _Plan) -> dict[str, dict[str, Any]]:
    """Per scene: the instruction change of every level (%), A/A and level
    verdicts, one run a side."""
    from katra_trace import open_trace
    from katra_trace.analysis.compare import compare_traces
    from katra_trace.analysis.defaults import CompareOptions

    jobs = []
    for scene, (key, base, _) in SCENES.items():
        levels = plan.levels[scene]
        for name, value in (("A", base), ("A2", base), *((f"L{v}", v) for v in levels)):
            args = (
                scene,
                "--param",
                f"{scene}.{key}={value}",
                "--size",
                f"{plan.size[0]}x{plan.size[1]}",
                "--frames",
                str(plan.count_frames),
                "--warmup",
                "1",
                "--measure",
                "instructions",
            )
            jobs.append(Job(f"{scene}-{name}", args, ctx.tmp / f"count-{scene}-{name}.katra"))
    done = run_jobs(jobs, parallel=4, log=ctx.log)  # counts do not depend on load
    out: dict[str, dict[str, Any]] = {}
    for scene in SCENES:
        levels = plan.levels[scene]
        t = {
            name: open_trace(done[f"{scene}-{name}"].job.output)
            for name in ("A", "A2", *(f"L{v}" for v in levels))
        }
        aa = compare_traces([t["A2"]], [t["A"]], CompareOptions(metric="instructions"))
        per_level = {}
        for v in levels:
            r = compare_traces(
                [t["A"]],
                [t[f"L{v}"]],
                CompareOptions(metric="instructions", allow_param_mismatch=True),
            )
            per_level[f"L{v}"] = (100.0 * (r.scenes[0].ratio - 1.0), r.exit_code == 1)
        out[scene] = {
            "aa_regression": aa.exit_code == 1,
            "aa_change_pct": 100.0 * (aa.scenes[0].ratio - 1.0),
            "levels": per_level,
            "cpu_s": [done[f"{scene}-{n}"].cpu_s for n in ("A", "A2")],
        }
    return out


def _smallest(rates: list[tuple[float, float]]) -> str:
    """The smallest level caught in >= 90 % whose larger levels are caught too; '> largest'
    otherwise.
    """
    ok = None
    for change, rate in sorted(rates, reverse=True):
        if rate >= 0.9:
            ok = change
        else:
            break
    return f"+{ok:.1f} %" if ok is not None else f"> +{max(c for c, _ in rates):.1f} %"


@bench(
    "noise",
    about="noise table: run CV, A/A false alarms, smallest slowdown caught (fillrate, shader)",
    needs_gl=True,
)
def noise(ctx: BenchContext) -> list[Row]:
    """Noise table for docs/stats.md: run CV, A/A false regressions, smallest slowdown caught, quiet
    and loaded.
    """
    plan = _Plan(
        frames=ctx.scale(FRAMES, 20),
        warmup=ctx.scale(WARMUP, 2),
        size=SIZE if not ctx.quick else (64, 36),
        rounds=ctx.scale(ROUNDS, 3),
        runs=ctx.scale(RUNS_A_SIDE, 3),
        comparisons=ctx.scale(COMPARISONS, 3),
        count_frames=ctx.scale(COUNT_FRAMES, 2),
        levels={s: v[2][:1] if ctx.quick else v[2] for s, v in SCENES.items()},
    )
    started = dt.datetime.now(dt.timezone.utc)
    load0 = os.getloadavg()[0]
    ctx.log("instruction counts (counted runs, in parallel)")
    counted = _counted(ctx, plan)
    rng = random.Random(20261201)
    table: list[dict[str, Any]] = []
    rows: list[Row] = []
    for loaded in (False, True):
        for scene in SCENES:
            levels = plan.levels[scene]
            traces = _rounds(ctx, plan, scene, loaded)
            cvs = _run_cv(traces, scene)
            aa = _verdicts(traces, "A2", "A", plan, rng)
            level_changes = {f"L{v}": counted[scene]["levels"][f"L{v}"][0] for v in levels}
            det = {f"L{v}": _verdicts(traces, "A", f"L{v}", plan, rng) for v in levels}
            cond = "injected load" if loaded else "no injected load"
            for method in TIME_METHODS:
                rates = [(level_changes[lv], det[lv][method][0] / det[lv][method][1]) for lv in det]
                fa, n = aa[method]
                entry = {
                    "scene": f"{scene} ({SCENES[scene][0]} {SCENES[scene][1]})",
                    "condition": cond,
                    "method": method,
                    "runs": f"{plan.runs} a side"
                    if method != "paired (ab)"
                    else f"{plan.runs} rounds",
                    "run_cv_pct": 100.0 * cvs[method],
                    "aa_false": fa,
                    "aa_n": n,
                    "smallest": _smallest(rates),
                    "rates": {f"+{c:.1f} %": r for c, r in rates},
                }
                table.append(entry)
                rows.append(
                    Row(
                        f"{scene} {cond} {method}: A/A false regressions",
                        f"of {n} comparisons",
                        fa / n if n else math.nan,
                        "share",
                        n=n,
                        target=at_most(0.01),
                        notes=f"run CV {100 * cvs[method]:.1f} %; >= 90 % caught from "
                        f"{entry['smallest']}",
                    )
                )
            if not loaded:
                c = counted[scene]
                rates = [(ch, 1.0 if hit else 0.0) for ch, hit in c["levels"].values()]
                entry = {
                    "scene": f"{scene} ({SCENES[scene][0]} {SCENES[scene][1]})",
                    "condition": "any (deterministic)",
                    "method": "instructions",
                    "runs": "1 a side",
                    "run_cv_pct": abs(c["aa_change_pct"]),
                    "aa_false": int(c["aa_regression"]),
                    "aa_n": 1,
                    "smallest": _smallest(rates),
                    "rates": {f"+{ch:.1f} %": r for ch, r in rates},
                }
                table.append(entry)
                rows.append(
                    Row(
                        f"{scene} instructions: A/A false regressions",
                        "of 1 process pair",
                        float(c["aa_regression"]),
                        "share",
                        n=1,
                        target=at_most(0.01),
                        notes=f"A/A {c['aa_change_pct']:+.4f} %; caught from {entry['smallest']}",
                    )
                )
    markdown = _markdown(table, plan, started, load0)
    ctx.facts.update(
        {
            "markdown": markdown,
            "table": table,
            "plan": dataclasses.asdict(plan),
            "counted": counted,
            "date": started.isoformat(timespec="seconds"),
            "quick": ctx.quick,
            "load0": load0,
        }
    )
    for line in markdown.splitlines():
        ctx.log(line)
    return rows


def _markdown(table: list[dict[str, Any]], plan: _Plan, started: dt.datetime, load0: float) -> str:
    disjoint = plan.rounds // plan.runs
    how = (
        "a REDUCED `python -m bench noise` (bench/experiments/noise.py's sizes lowered to fit a "
        "time budget; `make bench-noise` runs the full one)"
        if plan.reduced
        else "`make bench-noise` (`python -m bench noise`)"
    )
    head = (
        f"Measured {started:%Y-%m-%d} with {how}: {plan.size[0]}x{plan.size[1]}, {plan.frames} "
        f"measured frames (+{plan.warmup} warmup) a run, {plan.rounds} rounds per scene and "
        "condition; "
        f"{plan.comparisons} comparisons per cell, each on {plan.runs} rounds drawn at random from "
        "the "
        f"{plan.rounds} (overlapping: only {disjoint} disjoint, so a rate is an estimate, not "
        f"{plan.comparisons} independent trials). Instructions: {plan.count_frames} measured "
        "frames, one "
        "process a side (deterministic: one comparison per process pair). Load average at the "
        "start "
        f"{load0:.1f} on {os.cpu_count()} cores. Injected load: one CPU-busy child process during "
        "the capture "
        f"of run `A` (BASE of a slowdown comparison, NEW of an A/A one) in every other round."
    )
    if load0 > (os.cpu_count() or 1):
        head += (
            " **The machine was overloaded** (load average above its core count, from other jobs) "
            "while this "
            "ran: the wall-clock rows show what a saturated shared machine does, not a quiet one."
        )
    if plan.reduced:
        head += (
            f" A full run has {FULL_ROUNDS} rounds, {FULL_FRAMES} frames a run, "
            f"{FULL_COUNT_FRAMES} counted frames and {FULL_LEVELS} slowdown levels a scene."
        )
    lines = [
        "### Noise table (`make bench-noise`)",
        "",
        head,
        "",
        "| scene | condition | method | runs | run CV | A/A false regressions | smallest slowdown "
        "caught "
        "in >= 90 % | caught per slowdown |",
        "|---|---|---|---|---:|---:|---|---|",
    ]
    for e in table:
        rates = ", ".join(f"{k}: {100 * v:.0f} %" for k, v in e["rates"].items())
        cond = "no injected load" if e["condition"] == "quiet" else e["condition"]
        lines.append(
            f"| {e['scene']} | {cond} | {e['method']} | {e['runs']} | {e['run_cv_pct']:.2f} % "
            f"| {e['aa_false']} of {e['aa_n']} | {e['smallest']} | {rates} |"
        )
    lines += ["", DEFINITIONS]
    return "\n".join(lines)


#: What the table's columns mean (under the table in docs/stats.md).
DEFINITIONS = (
    "Methods: *raw wall* is `katra3d compare` on the runs' wall times, unpaired; *normalized wall* "
    "the same traces with `--normalize`; *paired (ab)* the same traces as rounds, BASE and NEW of "
    "a round paired, as `katra3d ab` compares them (captured in-process here, not by `ab`'s "
    "subprocesses: the pairing and the decision are the same code); *process CPU* the same traces "
    "with `--metric process` (the CPU time the process spent on each frame, every thread counted), "
    "unpaired; *process CPU, p10* the same with `--stat p10` (each run reduced to its "
    "10th-percentile frame, not its median); *instructions* `--measure instructions`, one process "
    "a side. *Run CV*: the CV of BASE's per-run medians (raw; process CPU) or 10th percentiles "
    "(process CPU, p10), of its per-run normalized levels (normalized), the sd of the per-round "
    "log ratios of a round's two BASE runs (paired), the A/A difference of two processes "
    "(instructions). A slowdown (a param step) is named by its measured change in instructions per "
    "frame. Defaults: alpha 0.01, threshold 5 % (0.5 % for instructions). For instructions the "
    "smallest slowdown tried is what bounds that column: docs/measure.md shows +0.9 % caught in "
    "every comparison. *Injected load* lands on run `A` only: those runs really were slower, so "
    "raw and paired wall time see, in an A/A comparison, a slowdown that the code did not cause, "
    "and in a slowdown comparison a BASE that is partly slow too. Only a ratio to a workload that "
    "the neighbour slows alike can cancel it (that is what `--normalize` divides by), or a measure "
    "of the work that a neighbour does not stretch: process CPU time counts the CPU the process "
    "used, not the time it waited for a core."
)


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="python -m bench.experiments.noise",
        description="write the noise table of a results.json into docs/stats.md",
    )
    parser.add_argument("--write-doc", nargs=2, metavar=("RESULTS", "DOC"), required=True)
    args = parser.parse_args(argv)
    results, doc = (Path(p) for p in args.write_doc)
    try:
        record = json.loads(results.read_text(encoding="utf-8"))
        facts = next(b["facts"] for b in record["benches"] if b["name"] == "noise")
        if record.get("quick"):
            raise ValueError("a --quick run's table is a smoke test; run the full bench")
        write_doc(str(facts["markdown"]), doc, (START_MARK, END_MARK))
    except (OSError, ValueError, KeyError, TypeError, StopIteration) as exc:
        print(
            f"python -m bench.experiments.noise: error: {exc or type(exc).__name__}",
            file=sys.stderr,
        )
        return 2
    print(f"noise table written to {doc}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
