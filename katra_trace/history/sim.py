"""Seeded simulated histories, to measure what ``history check`` finds; a run is
``level x exp(N(0, run_cv))``. ``python -m katra_trace.history.sim`` prints docs/history.md's
tables."""

from __future__ import annotations

import argparse
import dataclasses
import math
import sys
import time
from collections.abc import Sequence

import numpy as np

from katra_trace.analysis.defaults import DEFAULT_ALPHA
from katra_trace.errors import ExitCode
from katra_trace.history.steps import Fit, detect_steps


@dataclasses.dataclass(frozen=True)
class Scenario:
    labels: int = 12
    runs: int = 5
    run_cv: float = 0.08
    #: (1-based first label of the new level, relative size)
    steps: tuple[tuple[int, float], ...] = ()
    frames: int = 0
    frame_cv: float = 0.10
    outlier_rate: float = 0.0  #: share of runs slowed by a busy neighbour
    outlier_factor: float = 2.0


def simulate(sc: Scenario, seed: int) -> list[np.ndarray]:
    rng = np.random.default_rng(seed)
    level = np.ones(sc.labels)
    for start, size in sc.steps:
        level[start - 1 :] *= 1.0 + size
    out = []
    for lvl in level:
        run_levels = lvl * np.exp(rng.normal(0.0, sc.run_cv, sc.runs))
        if sc.frames > 0:
            frames = run_levels[:, None] * np.exp(
                rng.normal(0.0, sc.frame_cv, (sc.runs, sc.frames))
            )
            out.append(np.median(frames, axis=1))
        else:
            out.append(run_levels)
        if sc.outlier_rate > 0:
            hit = rng.random(sc.runs) < sc.outlier_rate
            out[-1] = np.where(hit, out[-1] * sc.outlier_factor, out[-1])
    return out


@dataclasses.dataclass(frozen=True)
class Outcome:
    n: int
    any_step: int  #: with a reported step
    exact: int  #: every true step reported at its label
    within_one: int  #: ... at its label +-1
    start_range_covers: int  #: ... and its start range holds the true label
    #: with a reported step more than 1 label from every true step
    extra_steps: int


def run(sc: Scenario, seeds: Sequence[int], alpha: float = DEFAULT_ALPHA) -> Outcome:
    any_step = exact = within = covers = extra = 0
    truth = [s for s, _ in sc.steps]
    for seed in seeds:
        fit: Fit = detect_steps(simulate(sc, seed), alpha=alpha)
        found = [st.index + 1 for st in fit.steps]
        any_step += bool(found)
        exact += all(t in found for t in truth)
        near = [
            min(fit.steps, key=lambda st: abs(st.index + 1 - t)) if fit.steps else None
            for t in truth
        ]
        ok = [
            st is not None and abs(st.index + 1 - t) <= 1 for st, t in zip(near, truth, strict=True)
        ]
        within += all(ok)
        covers += all(
            o and st is not None and st.start_low + 1 <= t <= st.start_high + 1
            for o, st, t in zip(ok, near, truth, strict=True)
        )
        extra += any(all(abs(f - t) > 1 for t in truth) for f in found)
    return Outcome(len(seeds), any_step, exact, within, covers, extra)


def oracle_exact_rate(sc: Scenario, seeds: Sequence[int]) -> float:
    """How often the true step's label is the most likely one: a bound no detector beats."""
    ((start, size),) = sc.steps
    hits = 0
    for seed in seeds:
        groups = simulate(sc, seed)
        m = np.array([np.log(g).mean() for g in groups])
        n = np.array([g.size for g in groups])
        lo, hi = 0.0, math.log1p(size)
        # log-likelihood of "the step starts at k" up to a constant, for k = 2..L
        ll = [
            -(
                np.sum(n[: k - 1] * (m[: k - 1] - lo) ** 2)
                + np.sum(n[k - 1 :] * (m[k - 1 :] - hi) ** 2)
            )
            for k in range(2, sc.labels + 1)
        ]
        hits += int(np.argmax(ll)) + 2 == start
    return hits / len(seeds)


def _pct(k: int, n: int) -> str:
    return f"{100.0 * k / n:.0f} %"


def main(argv: Sequence[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--seeds", type=int, default=1000, help="histories per row (default 1000)")
    ap.add_argument("--alpha", type=float, default=DEFAULT_ALPHA)
    args = ap.parse_args(argv)
    seeds = range(args.seeds)
    t0 = time.perf_counter()
    w = sys.stdout.write
    w(f"alpha {args.alpha}, {args.seeds} seeded histories per row\n\n")
    w("Flat histories (no step): histories that show any step\n\n")
    w("| labels x runs | run CV 2 % | 4 % | 8 % | 16 % |\n|---|---|---|---|---|\n")
    for labels, runs in ((12, 5), (12, 3), (12, 1), (50, 5), (100, 3)):
        cells = [
            _pct(run(Scenario(labels, runs, cv), seeds, args.alpha).any_step, args.seeds)
            for cv in (0.02, 0.04, 0.08, 0.16)
        ]
        w(f"| {labels} x {runs} | " + " | ".join(cells) + " |\n")
    w(
        "\nOne step at label 7 of 12: found at label 7 / at 7 +-1 / start range covers 7 "
        "(oracle: exact with known size and noise)\n\n"
    )
    w(
        "| step | runs | run CV | at 7 | at 7 +-1 | range covers 7 | other steps | oracle at 7 |\n"
        "|---|---|---|---|---|---|---|---|\n"
    )
    for size in (0.08, 0.10):
        for runs in (3, 5, 8):
            for cv in (0.02, 0.04, 0.08):
                sc = Scenario(12, runs, cv, ((7, size),))
                o = run(sc, seeds, args.alpha)
                w(
                    f"| +{size:.0%} | {runs} | {cv:.0%} | {_pct(o.exact, o.n)} | "
                    f"{_pct(o.within_one, o.n)} | "
                    f"{_pct(o.start_range_covers, o.n)} | {_pct(o.extra_steps, o.n)} | "
                    f"{100 * oracle_exact_rate(sc, seeds):.0f} % |\n"
                )
    w(
        "\nTwo steps (+10 % at label 5, -10 % ... +15 % at label 9 of 12), 5 runs a label: both "
        "found\n\n"
    )
    w("| steps | run CV | both at their labels | both +-1 | other steps |\n|---|---|---|---|---|\n")
    for steps in (((5, 0.10), (9, 0.15)), ((5, 0.10), (9, -0.10))):
        for cv in (0.04, 0.08):
            o = run(Scenario(12, 5, cv, steps), seeds, args.alpha)
            desc = ", ".join(f"{s:+.0%} at {k}" for k, s in steps)
            w(
                f"| {desc} | {cv:.0%} | {_pct(o.exact, o.n)} | {_pct(o.within_one, o.n)} | "
                f"{_pct(o.extra_steps, o.n)} |\n"
            )
    w(
        "\nRun medians of 60 frames (frame CV 8 %, run CV 2 %), 12 labels x 5 runs, +8 % at label "
        "7\n\n"
    )
    o = run(Scenario(12, 5, 0.02, ((7, 0.08),), frames=60, frame_cv=0.08), seeds, args.alpha)
    f = run(Scenario(12, 5, 0.02, (), frames=60, frame_cv=0.08), seeds, args.alpha)
    w(f"found at 7: {_pct(o.exact, o.n)}; flat: any step {_pct(f.any_step, f.n)}\n")
    w(
        "\nBusy neighbour: each run slowed 2x with probability 5 %, 12 labels x 5 runs, run CV 4 "
        "%\n\n"
    )
    o = run(Scenario(12, 5, 0.04, ((7, 0.08),), outlier_rate=0.05), seeds, args.alpha)
    f = run(Scenario(12, 5, 0.04, (), outlier_rate=0.05), seeds, args.alpha)
    w(
        f"+8 % at 7 found at 7: {_pct(o.exact, o.n)} (+-1: {_pct(o.within_one, o.n)}); "
        f"flat: any step {_pct(f.any_step, f.n)}\n"
    )
    w(f"\n({time.perf_counter() - t0:.0f} s)\n")
    return ExitCode.OK


if __name__ == "__main__":
    sys.exit(main())
