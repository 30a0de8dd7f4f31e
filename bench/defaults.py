"""``python -m bench defaults``: which time metric ``ab``, ``compare`` and bisect's time mode use by
default on a software renderer, chosen by evidence (``make bench-defaults``; the table goes into
docs/stats.md).

Three scenes (``fillrate``: fill and blending bandwidth; ``shader``: per-pixel ALU work;
``drawcalls``: per-draw CPU work in Python and the driver) at 160x120, each captured on a quiet
machine and with a **CPU hog beside the runs** (one CPU-busy process pinned to the last core for the
whole condition), and compared four ways, each with ``katra_trace.analysis.compare.compare_traces``
(the code of ``compare`` and ``ab``), alpha 0.01, threshold 5 %:

* **wall median**: each run's median frame wall time;
* **process median**: each run's median frame process CPU time (every thread of the process
  counted);
* **process p10**: each run's 10th-percentile frame process CPU time;
* **normalized**: each run's median frame wall time over the median wall time of its reference
  workload.

Captures of one scene and condition: a batch ``S1`` of BASE runs, then ``rounds`` rounds in rotating
order of BASE (``A``), a second BASE (``A2``) and two slowdowns (about +25 % and +50 % of the
scene's work: a param step), then a batch ``S2`` of BASE runs. Three kinds of comparison, every one
on identical code except power:

* **interleaved A/A** (ab's case): ``A`` against ``A2`` paired round by round, on random subsets of
  the rounds;
* **separate batches A/A** (a CI baseline captured earlier, ``ci/bench.sh``): unpaired, every run of
  one side before every run of the other (``S1`` against ``S2``, against the rounds' last runs, the
  rounds' first runs against ``S2``, ...): drift of the machine between the batches is what they
  see;
* **power**: ``A`` against each slowdown, paired (ab).

The choice: of the methods whose false verdicts (A/A, both kinds, both conditions) are consistent
with alpha (a one-sided binomial test at 5 %), the one that caught the most slowdowns beside the
hog, then on the quiet machine. A row checks that the library's default
(:data:`katra_trace.analysis.defaults.SOFTWARE_TIME_DEFAULT`) caught at least 90 % of what that
method caught beside the hog (one run cannot tell methods within its noise apart); ``python -m
bench.defaults --write-doc RESULTS... DOC`` renders several runs and their joint choice.

Comparisons share rounds (subsets overlap), so a share is an estimate from ``rounds`` rounds, not
from independent trials; the table says how many comparisons each share is of.
"""

from __future__ import annotations

import dataclasses
import datetime as dt
import math
import os
import random
import subprocess
import sys
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

from bench._core import BenchContext, Row, at_least, at_most, bench
from bench._report import write_doc
from katra3d.harness.supervisor import Group, spawn

#: scene -> (param, BASE value, (about +25 %, about +50 % of the work))
SCENES: dict[str, tuple[str, int, tuple[int, int]]] = {
    "fillrate": ("layers", 8, (10, 12)),
    "shader": ("iterations", 32, (40, 48)),
    "drawcalls": ("count", 200, (250, 300)),
}
SIZE = (160, 120)
FRAMES = 60
WARMUP = 5
ROUNDS = 8
BATCH = 4
RUNS = 5
COMPARISONS = 30
#: method -> compare_traces options
METHODS: dict[str, dict[str, Any]] = {
    "wall median": {"metric": "wall"},
    "process median": {"metric": "process"},
    "process p10": {"metric": "process", "run_stat": "p10"},
    "normalized": {"normalize": True},
}
CONDITIONS = ("quiet", "CPU hog")
#: The hog's hard CPU limit (s): it ends by itself even if the bench dies.
HOG_CPU_LIMIT_S = 900
HOG_LOOP = (
    "import time\nend = time.monotonic() + {s}\nx = 0\nwhile time.monotonic() < end:\n    x += 1\n"
)
START_MARK = "<!-- defaults-table:start -->"
END_MARK = "<!-- defaults-table:end -->"


@dataclasses.dataclass(frozen=True)
class Plan:
    frames: int
    warmup: int
    size: tuple[int, int]
    rounds: int
    batch: int
    runs: int
    comparisons: int


def hog(cpu_limit_s: int = HOG_CPU_LIMIT_S, *, pin: bool = True) -> Group:
    """A CPU-busy process, bounded by its own clock and RLIMIT_CPU (``cpu_limit_s``); with ``pin``,
    on the last core (when there are two or more). Stop it with ``end``."""
    import resource

    cores = sorted(os.sched_getaffinity(0))
    group = spawn(
        [sys.executable, "-c", HOG_LOOP.format(s=cpu_limit_s)],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    resource.prlimit(group.proc.pid, resource.RLIMIT_CPU, (cpu_limit_s, cpu_limit_s))
    if pin and len(cores) > 1:
        os.sched_setaffinity(group.proc.pid, {cores[-1]})
    return group


def _capture(plan: Plan, scene: str, value: int, path: Path) -> Any:
    from katra3d.harness.run.config import RunConfig
    from katra3d.harness.run.runner import run
    from katra_trace import open_trace

    key = SCENES[scene][0]
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
    return open_trace(run(config, quiet=True).path)


def captures(ctx: BenchContext, plan: Plan, scene: str, condition: str) -> dict[str, list[Any]]:
    """Traces of one scene and condition: ``S1``, ``S2`` (batches) and ``A``, ``A2``, ``L1``, ``L2``
    (rounds).
    """
    _, base, (l1, l2) = SCENES[scene]
    tag = condition.replace(" ", "")
    out: dict[str, list[Any]] = {"S1": [], "S2": [], "A": [], "A2": [], "L1": [], "L2": []}
    variants = {"A": base, "A2": base, "L1": l1, "L2": l2}
    names = list(variants)
    busy = hog() if condition == "CPU hog" else None
    try:
        for i in range(plan.batch):
            out["S1"].append(_capture(plan, scene, base, ctx.tmp / f"{scene}-{tag}-S1-{i}.katra"))
        for r in range(plan.rounds):
            order = names[r % len(names) :] + names[: r % len(names)]
            for name in order:
                out[name].append(
                    _capture(
                        plan, scene, variants[name], ctx.tmp / f"{scene}-{tag}-{name}-{r}.katra"
                    )
                )
            ctx.log(f"{scene} {condition}: round {r + 1}/{plan.rounds}")
        for i in range(plan.batch):
            out["S2"].append(_capture(plan, scene, base, ctx.tmp / f"{scene}-{tag}-S2-{i}.katra"))
    finally:
        if busy is not None:
            busy.end(10.0)
    return out


def separate_pairs(t: dict[str, list[Any]], batch: int) -> list[tuple[list[Any], list[Any]]]:
    """A/A pairs of sides captured apart: every run of the first side before every run of the
    second.
    """
    first, last = (lambda name: t[name][:batch]), (lambda name: t[name][-batch:])
    return [
        (t["S1"], t["S2"]),
        (t["S1"], last("A")),
        (t["S1"], last("A2")),
        (first("A"), t["S2"]),
        (first("A2"), t["S2"]),
        (first("A"), last("A2")),
        (first("A2"), last("A")),
    ]


def _verdicts(
    compare: Callable[..., Any],
    pairs: Sequence[tuple[list[Any], list[Any]]],
    paired: bool,
    ratios: dict[str, list[float]] | None = None,
) -> dict[str, list[str]]:
    """Each method's verdict words over ``pairs`` of sides; unpaired sides are judged as compare
    judges sides captured in separate batches (with its drift allowance), and each change seen goes
    into ``ratios``."""
    out: dict[str, list[str]] = {m: [] for m in METHODS}
    for b, n in pairs:
        for method, options in METHODS.items():
            result = compare(
                b,
                n,
                allow_param_mismatch=True,
                separate_batches=not paired,
                pairs=[(i, i) for i in range(len(b))] if paired else None,
                **options,
            )
            out[method].append(str(result.scenes[0].verdict))
            if ratios is not None:
                ratios.setdefault(method, []).append(float(result.scenes[0].ratio))
    return out


def cell(plan: Plan, t: dict[str, list[Any]], rng: random.Random) -> dict[str, dict[str, Any]]:
    """Per method: interleaved and separate A/A verdicts, and the share of each slowdown caught."""
    from katra_trace.analysis.compare import compare_traces

    rounds = len(t["A"])
    k = min(plan.runs, rounds)
    subsets = [sorted(rng.sample(range(rounds), k)) for _ in range(plan.comparisons)]

    def side(name: str, subset: list[int]) -> list[Any]:
        return [t[name][i] for i in subset]

    aa = _verdicts(compare_traces, [(side("A2", s), side("A", s)) for s in subsets], paired=True)
    drift: dict[str, list[float]] = {}
    sep = _verdicts(compare_traces, separate_pairs(t, plan.batch), paired=False, ratios=drift)
    power = {
        lv: _verdicts(compare_traces, [(side("A", s), side(lv, s)) for s in subsets], paired=True)
        for lv in ("L1", "L2")
    }
    out: dict[str, dict[str, Any]] = {}
    for method in METHODS:
        out[method] = {
            "aa_false": sum(v != "unchanged" and v != "inconclusive" for v in aa[method]),
            "aa_n": len(aa[method]),
            "sep_false": sum(v != "unchanged" and v != "inconclusive" for v in sep[method]),
            "sep_n": len(sep[method]),
            "sep_log_ratios": [math.log(r) for r in drift[method]],
            "caught": {
                lv: sum(v == "regression" for v in power[lv][method]) / len(power[lv][method])
                for lv in power
            },
        }
    return out


def change_of(t: dict[str, list[Any]], level: str) -> float:
    """The measured change of a slowdown (%): the ratio of process p10
    levels, interleaved rounds."""
    from katra_trace.analysis.compare import compare_traces
    from katra_trace.analysis.defaults import CompareOptions

    result = compare_traces(
        t["A"],
        t[level],
        CompareOptions(metric="process", run_stat="p10", allow_param_mismatch=True),
        pairs=[(i, i) for i in range(len(t["A"]))],
    )
    return 100.0 * (result.scenes[0].ratio - 1.0)


def eligible(false: int, n: int, alpha: float = 0.01) -> bool:
    """True when ``false`` false verdicts in ``n`` A/A comparisons are no evidence of a rate above
    ``alpha`` (one-sided binomial test at 5 %): a method with fewer false verdicts is not better for
    it, only luckier."""
    from scipy.stats import binom

    return n == 0 or float(binom.sf(false - 1, n, alpha)) >= 0.05


def _hog_caught(table: list[dict[str, Any]], method: str) -> float:
    return float(
        sum(
            sum(e["caught"].values())
            for e in table
            if e["method"] == method and e["condition"] == "CPU hog"
        )
    )


def consistent(table: list[dict[str, Any]], method: str) -> bool:
    """Whether ``method``'s false verdicts (both kinds, both conditions) are
    consistent with alpha."""
    rows = [e for e in table if e["method"] == method]
    return eligible(
        sum(e["aa_false"] + e["sep_false"] for e in rows), sum(e["aa_n"] + e["sep_n"] for e in rows)
    )


def caught_share(table: list[dict[str, Any]], method: str, best: str) -> float:
    """What ``method`` caught beside the hog over what the best caught: one run of the bench cannot
    tell two methods within its noise apart, so the default is held to 0.9 of the best, not to being
    the best."""
    top = _hog_caught(table, best)
    return _hog_caught(table, method) / top if top else math.nan


def choose(table: list[dict[str, Any]]) -> str:
    """Of the methods whose A/A false verdicts (both kinds, both conditions) are consistent with
    alpha, the one that caught the most slowdowns beside the hog, then on the quiet machine; then
    the fewest false verdicts."""

    def score(method: str) -> tuple[bool, float, float, float]:
        rows = [e for e in table if e["method"] == method]
        false = sum(e["aa_false"] + e["sep_false"] for e in rows)
        n = sum(e["aa_n"] + e["sep_n"] for e in rows)
        hogged = sum(sum(e["caught"].values()) for e in rows if e["condition"] == "CPU hog")
        quiet = sum(sum(e["caught"].values()) for e in rows if e["condition"] == "quiet")
        return (not eligible(false, n), -hogged, -quiet, false / max(1, n))

    return min(METHODS, key=score)


@bench(
    "defaults",
    about="the default time metric on software renderers: A/A false alarms (interleaved, separate "
    "batches) and power of four metrics, quiet and beside a CPU hog",
    default=False,
    needs_gl=True,
)
def defaults(ctx: BenchContext) -> list[Row]:
    """The defaults table of docs/stats.md and the check that the library's default is the bench's
    best.
    """
    from katra_trace.analysis.defaults import SOFTWARE_TIME_DEFAULT

    plan = Plan(
        frames=ctx.scale(FRAMES, 20),
        warmup=ctx.scale(WARMUP, 2),
        size=SIZE if not ctx.quick else (64, 48),
        rounds=ctx.scale(ROUNDS, 3),
        batch=ctx.scale(BATCH, 3),
        runs=ctx.scale(RUNS, 3),
        comparisons=ctx.scale(COMPARISONS, 3),
    )
    started = dt.datetime.now(dt.timezone.utc)
    load0 = os.getloadavg()[0]
    rng = random.Random(20261203)
    table: list[dict[str, Any]] = []
    for condition in CONDITIONS:
        for scene in SCENES:
            t = captures(ctx, plan, scene, condition)
            changes = {lv: change_of(t, lv) for lv in ("L1", "L2")}
            for method, figures in cell(plan, t, rng).items():
                table.append(
                    {
                        "scene": scene,
                        "condition": condition,
                        "method": method,
                        **figures,
                        "changes": changes,
                    }
                )
    best = choose(table)
    default = (
        " ".join(SOFTWARE_TIME_DEFAULT)
        if SOFTWARE_TIME_DEFAULT[1] == "p10"
        else f"{SOFTWARE_TIME_DEFAULT[0]} median"
    )
    rows = []
    for method in METHODS:
        mine = [e for e in table if e["method"] == method]
        false = sum(e["aa_false"] + e["sep_false"] for e in mine)
        n = sum(e["aa_n"] + e["sep_n"] for e in mine)
        caught = [r for e in mine if e["condition"] == "CPU hog" for r in e["caught"].values()]
        rows.append(
            Row(
                f"{method}: A/A false verdicts",
                "share of A/A comparisons",
                false / n if n else math.nan,
                "share",
                n=n,
                target=at_most(0.01),
                notes=f"slowdowns caught beside the hog: "
                f"{100 * sum(caught) / max(1, len(caught)):.0f} %",
            )
        )
        logs = [x for e in mine for x in e["sep_log_ratios"]]
        rows.append(
            Row(
                f"{method}: drift between batches",
                "rms log ratio of separate-batch A/A sides",
                math.sqrt(sum(x * x for x in logs) / len(logs)) if logs else math.nan,
                "log ratio",
                n=len(logs),
                notes=f"largest {max((abs(x) for x in logs), default=math.nan):.3f}",
            )
        )
    share = caught_share(table, default, best)
    rows.append(
        Row(
            "default time metric on software renderers",
            "slowdowns it caught beside the hog / the best's",
            share,
            "ratio",
            target=at_least(0.9),
            notes=f"default {default}, best {best}; the default's "
            f"false verdicts {'are' if consistent(table, default) else 'are NOT'} consistent with "
            "alpha",
        )
    )
    markdown = render(table, plan, started, load0, best)
    ctx.facts.update(
        {
            "markdown": markdown,
            "table": table,
            "plan": dataclasses.asdict(plan),
            "best": best,
            "date": started.isoformat(timespec="seconds"),
            "quick": ctx.quick,
            "load0": load0,
        }
    )
    for line in markdown.splitlines():
        ctx.log(line)
    return rows


#: ``ab`` beside the hog: fillrate at 160x120, BASE 8 layers, NEW 12 (+50 % fill).
AB_CAPTURE = (
    "{py} -m katra3d run fillrate --param fillrate.layers={layers} --size 160x120 --frames 60 "
    "--quiet -o {{out}}"
)


def ab_run(ctx: BenchContext, name: str, layers: int, *extra: str) -> tuple[int, dict[str, Any]]:
    """``katra3d ab`` with its defaults, BASE fillrate at 8 layers and NEW at ``layers``: exit code
    and ab.json.
    """
    import json
    import shlex

    out = ctx.tmp / name
    py = shlex.quote(sys.executable)
    cmd = [
        sys.executable,
        "-m",
        "katra3d",
        "ab",
        "--base",
        AB_CAPTURE.format(py=py, layers=8),
        "--new",
        AB_CAPTURE.format(py=py, layers=layers),
        "--allow-param-mismatch",
        "--images",
        "off",
        "-o",
        str(out),
        "--quiet",
        "--format",
        "json",
        *extra,
    ]
    proc = subprocess.run(cmd, capture_output=True, text=True, timeout=1800)
    if proc.returncode not in (0, 1):
        raise RuntimeError(f"ab {name} exited {proc.returncode}: {proc.stderr.strip()[-400:]}")
    return proc.returncode, json.loads((out / "ab.json").read_text(encoding="utf-8"))


@bench(
    "defaults-ab",
    about="katra3d ab with its defaults beside a CPU hog on one core: A/A exits 0, +50 % fill "
    "exits 1 within --until-decided --rounds 12",
    default=False,
    needs_gl=True,
)
def defaults_ab(ctx: BenchContext) -> list[Row]:
    """ab's defaults on a busy machine, as rows: an A/A exits 0 and a +50 % fill exits 1 within
    12 rounds of ``--until-decided``; exit codes and rounds used."""
    busy = hog()
    try:
        aa_code, aa = ab_run(ctx, "aa", 8)
        ctx.log(f"A/A: exit {aa_code}, {len(aa['rounds'])} rounds, {aa.get('decision')}")
        slow_code, slow = ab_run(ctx, "fill50", 12, "--until-decided", "--rounds", "12")
        ctx.log(
            f"+50 % fill: exit {slow_code}, {len(slow['rounds'])} rounds, "
            f"{slow.get('stop', {}).get('reason')}"
        )
    finally:
        busy.end(10.0)
    ctx.facts.update(
        {
            "aa": {"exit": aa_code, "rounds": len(aa["rounds"]), "decision": aa.get("decision")},
            "fill50": {
                "exit": slow_code,
                "rounds": len(slow["rounds"]),
                "stop": slow.get("stop"),
                "decision": slow.get("decision"),
            },
        }
    )
    choice = aa.get("decision") or {}
    return [
        Row(
            "A/A ab beside a CPU hog: exit code",
            "katra3d ab, defaults, identical commands",
            float(aa_code),
            "exit code",
            target=at_most(0),
            notes=f"{len(aa['rounds'])} rounds on {choice.get('metric')} "
            f"{choice.get('run_stat')} ({choice.get('metric_choice')})",
        ),
        Row(
            "+50 % fill ab beside a CPU hog: exit code",
            "--until-decided --rounds 12",
            float(slow_code),
            "exit code",
            target=at_least(1),
            notes=f"decided after {len(slow['rounds'])} rounds",
        ),
        Row(
            "+50 % fill ab beside a CPU hog: rounds",
            "rounds until decided",
            float(len(slow["rounds"])),
            "rounds",
            target=at_most(12),
        ),
    ]


def render(
    table: list[dict[str, Any]], plan: Plan, started: dt.datetime, load0: float, best: str
) -> str:
    """The Markdown table of docs/stats.md's defaults section."""
    head = (
        f"Measured {started:%Y-%m-%d} with `python -m bench defaults`: "
        f"{plan.size[0]}x{plan.size[1]}, {plan.frames} measured frames (+{plan.warmup} warmup) a "
        f"run; per scene and condition a batch of {plan.batch} BASE runs, {plan.rounds} rounds "
        f"(BASE, BASE again, +25 % and +50 % work) and a second batch of {plan.batch}. Interleaved "
        f"A/A and power: {plan.comparisons} paired comparisons of {plan.runs} rounds drawn from "
        f"the {plan.rounds} (overlapping). Separate batches: unpaired, every run of one side "
        f"before the other's. Load average at the start {load0:.1f} on {os.cpu_count()} cores; "
        "*CPU hog*: one CPU-busy process on the last core for the whole condition. Best: "
        f"**{best}**."
    )
    lines = [
        head,
        "",
        "| scene | condition | method | A/A false (interleaved) | A/A false (separate batches) | "
        "drift between batches (rms) | caught: +25 % work | caught: +50 % work |",
        "|---|---|---|---:|---:|---:|---:|---:|",
    ]
    for e in table:
        l1, l2 = e["changes"]["L1"], e["changes"]["L2"]
        lines.append(
            f"| {e['scene']} | {e['condition']} | {e['method']} | {e['aa_false']} of {e['aa_n']} | "
            f"{e['sep_false']} of {e['sep_n']} | {rms_pct(e['sep_log_ratios']):.1f} % | "
            f"{100 * e['caught']['L1']:.0f} % ({l1:+.0f} %) | "
            f"{100 * e['caught']['L2']:.0f} % ({l2:+.0f} %) |"
        )
    lines += [
        "",
        "The change in brackets is the slowdown measured (process p10, all rounds paired).",
    ]
    return "\n".join(lines)


def rms_pct(logs: Sequence[float]) -> float:
    """The root mean square of log ratios, as a percentage change."""
    return 100.0 * math.expm1(math.sqrt(sum(x * x for x in logs) / len(logs))) if logs else math.nan


def main(argv: Sequence[str] | None = None) -> int:
    import argparse
    import json

    parser = argparse.ArgumentParser(
        prog="python -m bench.defaults",
        description="write the defaults table of a results.json into docs/stats.md",
    )
    parser.add_argument(
        "--write-doc",
        nargs="+",
        metavar="RESULTS... DOC",
        required=True,
        help="one or more results.json of `python -m bench defaults`, then the Markdown file",
    )
    args = parser.parse_args(argv)
    try:
        if len(args.write_doc) < 2:
            raise ValueError("--write-doc needs RESULTS... DOC")
        *results, doc = (Path(p) for p in args.write_doc)
        parts, every = [], []
        for i, path in enumerate(results, start=1):
            record = json.loads(path.read_text(encoding="utf-8"))
            if record.get("quick"):
                raise ValueError(
                    f"{path}: a --quick run's table is a smoke test; run the full bench"
                )
            facts = next(b["facts"] for b in record["benches"] if b["name"] == "defaults")
            table = facts["table"]  # re-rendered: today's layout and choice rule, the same numbers
            every += table
            plan = Plan(**{k: tuple(v) if k == "size" else v for k, v in facts["plan"].items()})
            parts.append(
                f"**Run {i}.** "
                + render(
                    table,
                    plan,
                    dt.datetime.fromisoformat(facts["date"]),
                    float(facts["load0"]),
                    choose(table),
                )
            )
        if len(results) > 1:
            drift = {
                m: rms_pct([x for e in every if e["method"] == m for x in e["sep_log_ratios"]])
                for m in METHODS
            }
            parts.append(
                f"**Over the {len(results)} runs** the choice is **{choose(every)}**; drift "
                "between batches (rms): "
                + ", ".join(f"{m} {v:.1f} %" for m, v in drift.items())
                + "."
            )
        write_doc("\n\n".join(parts), doc, (START_MARK, END_MARK))
    except (OSError, ValueError, KeyError, TypeError, StopIteration) as exc:
        print(f"python -m bench.defaults: error: {exc or type(exc).__name__}", file=sys.stderr)
        return 2
    print(f"defaults table written to {doc}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
