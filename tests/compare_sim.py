"""Seeded simulations of katra_trace.analysis.decide: interval coverage, false alarms, power,
memory.

Used by tests/test_compare_sim.py at small sizes, and run as a script for the
figures in docs/stats.md::

    .venv/bin/python tests/compare_sim.py

Model of a run (what llvmpipe runs on a shared machine look like): a run's
level is ``mean * exp(N(0, run_cv))`` (the run's luck), each frame
``level * exp(N(0, frame_cv))``; with ``drift_cv`` a round's drift
``exp(N(0, drift_cv))`` multiplies both captures of that round (paired A/B).
"""

from __future__ import annotations

import math
import sys
import time
import tracemalloc
from pathlib import Path

import numpy as np
from scipy import stats as sps

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from katra_trace.analysis.decide import compare_runs, paired_t, welch  # noqa: E402

FRAME_CV = 0.10


def simulate_side(
    rng: np.random.Generator,
    k: int,
    mean_ms: float,
    run_cv: float,
    frames: int,
    drift: np.ndarray | None = None,
) -> list[np.ndarray]:
    """``k`` runs of frame durations (ns)."""
    levels = mean_ms * 1e6 * np.exp(rng.normal(0.0, run_cv, k))
    if drift is not None:
        levels = levels * drift
    return [lv * np.exp(rng.normal(0.0, FRAME_CV, frames)) for lv in levels]


def coverage(
    k: int,
    reps: int,
    seed: int,
    *,
    paired: bool = False,
    confidence: float = 0.98,
    run_cv: float = 0.08,
    sd_ratio: float = 1.0,
    frames: int = 50,
    effect: float = 1.1,
) -> float:
    """Share of intervals (from the per-run medians, as compare computes them) covering the true
    ratio.

    The true ratio of geometric-mean run levels is ``effect``; the per-run
    median of ``frames`` log-normal frames adds its own small error.
    """
    rng = np.random.default_rng(seed)
    truth = math.log(effect)
    hit = 0
    for _ in range(reps):
        shared = rng.normal(0.0, 0.05, k) if paired else np.zeros(k)
        lb = shared + rng.normal(0.0, run_cv, k)
        ln = shared + truth + rng.normal(0.0, run_cv * sd_ratio, k)
        lb = lb + np.median(rng.normal(0.0, FRAME_CV, (k, frames)), axis=1)
        ln = ln + np.median(rng.normal(0.0, FRAME_CV, (k, frames)), axis=1)
        t = paired_t(ln - lb) if paired else welch(lb, ln)
        lo, hi = t.interval(confidence)
        hit += lo <= truth <= hi
    return hit / reps


def verdict_rate(
    k: int,
    effect: float,
    reps: int,
    seed: int,
    *,
    run_cv: float = 0.08,
    frames: int = 30,
    paired: bool = False,
    drift_cv: float = 0.0,
    verdict: str = "regression",
) -> float:
    """Share of single-scene comparisons (compare_runs defaults) whose verdict is ``verdict``."""
    rng = np.random.default_rng(seed)
    hits = 0
    for _ in range(reps):
        drift = np.exp(rng.normal(0.0, drift_cv, k)) if drift_cv else None
        base = simulate_side(rng, k, 10.0, run_cv, frames, drift)
        new = simulate_side(rng, k, 10.0 * effect, run_cv, frames, drift)
        hits += (
            compare_runs({"s": base}, {"s": new}, paired=paired, metric="wall").scenes[0].verdict
            == verdict
        )
    return hits / reps


def student_power(
    k: int,
    effect: float,
    reps: int,
    seed: int,
    *,
    run_cv: float = 0.08,
    alpha: float = 0.01,
    threshold: float = 0.05,
    frames: int = 30,
) -> float:
    """For reference: how often a one-sided pooled-variance (Student) t on log run medians, exact
    under equal spreads, would call ``effect`` a regression (alpha, threshold as compare's)."""
    rng = np.random.default_rng(seed)
    crit = float(sps.t.ppf(1 - alpha, 2 * k - 2))
    hits = 0
    for _ in range(reps):
        lb = np.log([np.median(r) for r in simulate_side(rng, k, 10.0, run_cv, frames)])
        ln = np.log([np.median(r) for r in simulate_side(rng, k, 10.0 * effect, run_cv, frames)])
        sp = math.sqrt((lb.var(ddof=1) + ln.var(ddof=1)) / 2)
        d = float(ln.mean() - lb.mean())
        hits += d / (sp * math.sqrt(2 / k)) > crit and d >= math.log1p(threshold)
    return hits / reps


def memory_and_time_50k(frames: int = 50_000, runs: int = 1) -> tuple[float, float]:
    """(peak MiB traced, seconds) of compare_runs on ``runs`` run(s) of ``frames`` frames a side."""
    rng = np.random.default_rng(0)
    base = simulate_side(rng, runs, 10.0, 0.05, frames)
    new = simulate_side(rng, runs, 10.5, 0.05, frames)
    tracemalloc.start()
    t0 = time.perf_counter()
    compare_runs({"s": base}, {"s": new}, metric="wall")
    seconds = time.perf_counter() - t0
    _, peak = tracemalloc.get_traced_memory()
    tracemalloc.stop()
    return peak / 2**20, seconds


def main() -> None:
    print("interval coverage (nominal 98 %), 4000 comparisons each")
    for k in (3, 5, 8):
        print(
            f"  {k} runs a side: unpaired {coverage(k, 4000, 1) * 100:.1f} %, "
            f"unpaired sd ratio 3 {coverage(k, 4000, 2, sd_ratio=3.0) * 100:.1f} %, "
            f"paired {coverage(k, 4000, 3, paired=True) * 100:.1f} %"
        )
    print("verdicts, 8 % run CV, 1000 comparisons each (alpha 0.01, threshold 5 %)")
    for k in (3, 5, 8):
        aa = verdict_rate(k, 1.0, 1000, 10 + k)
        caught = {e: verdict_rate(k, e, 1000, 20 + k) for e in (1.1, 1.2, 1.3, 1.5)}
        print(
            f"  {k} runs a side: A/A regressions {aa * 100:.1f} %; caught "
            + ", ".join(f"+{(e - 1) * 100:.0f} % {r * 100:.0f} %" for e, r in caught.items())
        )
    for cv in (0.01, 0.03, 0.05):
        print(
            f"  3 runs a side at {cv * 100:.0f} % run CV: +30 % caught "
            f"{verdict_rate(3, 1.3, 1000, 41, run_cv=cv) * 100:.0f} %"
        )
    print(
        f"  for reference, a pooled-variance t at 3 runs a side, 8 % run CV: +30 % caught "
        f"{student_power(3, 1.3, 1000, 42) * 100:.0f} %, A/A "
        f"{student_power(3, 1.0, 1000, 43) * 100:.1f} %"
    )
    print("paired rounds, round drift 10 % shared by both captures, run noise 2 %, 1000 each")
    for k in (3, 5, 8):
        aa = verdict_rate(k, 1.0, 1000, 50 + k, run_cv=0.02, paired=True, drift_cv=0.10)
        p10 = verdict_rate(k, 1.1, 1000, 60 + k, run_cv=0.02, paired=True, drift_cv=0.10)
        u10 = verdict_rate(k, 1.1, 1000, 60 + k, run_cv=0.02, paired=False, drift_cv=0.10)
        print(
            f"  {k} rounds: A/A regressions {aa * 100:.1f} %; +10 % caught paired {p10 * 100:.0f} "
            "%, "
            f"unpaired {u10 * 100:.0f} %"
        )
    mib, sec = memory_and_time_50k()
    print(f"50k frames a side, 1 run: peak {mib:.0f} MiB, {sec:.2f} s")
    mib, sec = memory_and_time_50k(frames=50_000, runs=3)
    print(f"50k frames a run, 3 runs a side: peak {mib:.0f} MiB, {sec:.2f} s")


if __name__ == "__main__":
    main()
