"""The stopping rule of ``ab --until-decided`` (katra_trace/analysis/sequential.py): its A/A
false-alarm rate over all looks, the rounds it uses, its record in ab.json, and its place in the one
decision (compare_runs).

The simulations are seeded numpy (well under 10 s together). The per-round spread is the measured
one: docs/stats.md's noise table, ``paired (ab)`` row of ``fillrate`` on a quiet machine, 5.58 %.
"""

from __future__ import annotations

import math

import numpy as np
import pytest
from scipy import stats as sps

from katra_trace.analysis.decide import compare_runs
from katra_trace.analysis.defaults import DEFAULT_ALPHA
from katra_trace.analysis.sequential import SequentialRule, look, nominal_levels, simulate
from katra_trace.errors import ConfigError, OptionError

#: sd of one round's log ratio NEW / BASE, measured (docs/stats.md, noise table, fillrate, paired
#: (ab), quiet).
SD_LOG = 0.0558
TRIALS = 20_000


def _mc_upper(rate: float, trials: int) -> float:
    """``rate`` plus 3 Monte-Carlo standard errors of a rate near it."""
    return rate + 3.0 * math.sqrt(rate * (1.0 - rate) / trials)


def _naive_rate(alpha: float, cap: int, first: int, trials: int, seed: int) -> float:
    """A/A: how often a fixed-sample paired t at ``alpha``, tried after every round, says "slower"
    at some look.
    """
    x = np.random.default_rng(seed).normal(0.0, SD_LOG, size=(trials, cap))
    k = np.arange(1, cap + 1)
    mean = np.cumsum(x, axis=1) / k
    with np.errstate(invalid="ignore", divide="ignore"):
        se = np.sqrt(np.maximum(np.cumsum(x * x, axis=1) - k * mean * mean, 0.0) / (k - 1) / k)
        hit = mean > sps.t.isf(alpha, k - 1) * se
    return float(hit[:, first - 1 :].any(axis=1).mean())


def test_aa_false_alarm_rate_over_all_looks_stays_at_alpha() -> None:
    """Threshold 0 leaves the rule nothing but its significance test: the strictest case. Naive
    looks at the same data are far above alpha, so this check would catch a rule that spends alpha
    at every look."""
    rule = SequentialRule(threshold_pct=0.0)
    sim = simulate(rule, 0.0, SD_LOG, TRIALS, seed=11)
    assert sim.rates["regression"] <= _mc_upper(DEFAULT_ALPHA, TRIALS), sim
    assert sim.rates["improvement"] <= _mc_upper(DEFAULT_ALPHA, TRIALS), sim
    naive = _naive_rate(DEFAULT_ALPHA, rule.max_rounds, rule.min_rounds, TRIALS, seed=11)
    assert naive > _mc_upper(DEFAULT_ALPHA, TRIALS), naive
    # at the default threshold a false regression must also clear 5 %: rarer still
    default = simulate(SequentialRule(), 0.0, SD_LOG, TRIALS, seed=12)
    assert default.rates["regression"] <= _mc_upper(DEFAULT_ALPHA, TRIALS)
    # and A/A often stops early as "no change of practical size"
    assert default.rates["unchanged"] > 0.3


def test_rounds_used_at_5_10_30_percent() -> None:
    """Mean rounds used against the cap (20) at the measured spread; +30 % decides long before the
    cap.
    """
    rule = SequentialRule()
    sims = {effect: simulate(rule, effect, SD_LOG, 4000, seed=20) for effect in (0.05, 0.10, 0.30)}
    assert sims[0.30].rates["regression"] == 1.0 and sims[0.30].mean_rounds < 0.5 * rule.max_rounds
    assert sims[0.10].rates["regression"] > 0.99 and sims[0.10].mean_rounds < rule.max_rounds
    assert sims[0.05].mean_rounds > sims[0.10].mean_rounds > sims[0.30].mean_rounds
    # a change of exactly the threshold is called a regression about half the time, never
    # "unchanged" often
    assert (
        0.3 < sims[0.05].rates["regression"] < 0.8
        and sims[0.05].rates["unchanged"] < DEFAULT_ALPHA * 2
    )


def test_nominal_levels_spend_alpha_late() -> None:
    levels = nominal_levels(0.01, 3, 20)
    assert len(levels) == 18 and sum(levels) == pytest.approx(0.01)
    assert all(a < b for a, b in zip(levels, levels[1:], strict=False))
    assert levels[0] < 1e-9  # O'Brien-Fleming: almost nothing at the first look


def test_look_decides_by_the_repeated_interval() -> None:
    rule = SequentialRule(max_rounds=12)
    early = look(rule, [0.3, 0.31])
    assert (
        not early.decided
        and early.verdict == "inconclusive"
        and "first look is at round 3" in early.reason
    )
    # a +35 % change with 1 % spread: far from decided at round 3 of 12 (almost no alpha spent),
    # decided later
    rng = np.random.default_rng(3)
    series = list(math.log(1.35) + rng.normal(0, 0.01, 12))
    assert not look(rule, series[:3]).decided
    later = look(rule, series[:6])
    assert (
        later.decided
        and later.verdict == "regression"
        and later.ci_low > 1.0
        and "round 6 of at most 12" in later.reason
    )
    flat = look(rule, [0.001, -0.002, 0.0, 0.001, 0.0, -0.001, 0.001])
    assert flat.verdict == "unchanged" and "no change of practical size" in flat.reason
    capped = look(SequentialRule(max_rounds=4), [0.2, -0.2, 0.1, -0.1])
    assert (
        capped.final and not capped.decided and "undecided at the cap of 4 rounds" in capped.reason
    )
    with pytest.raises(ConfigError, match="more than the sequential rule's cap of 4"):
        look(SequentialRule(max_rounds=4), [0.0] * 5)
    # two scenes judged together: each at alpha / 2, a wider interval
    assert look(rule, series[:6], tests=2).ci_low < later.ci_low


def test_rule_json_round_trip_and_checks() -> None:
    rule = SequentialRule(alpha=0.05, max_rounds=30, min_rounds=4, threshold_pct=2.0)
    assert SequentialRule.from_json(rule.to_json()) == rule
    assert rule.threshold == pytest.approx(0.02) and SequentialRule().threshold == pytest.approx(
        0.05
    )
    for bad in (
        {"alpha": 0.7},
        {"max_rounds": 2},
        {"name": "mSPRT"},
        {"colour": 1},
        "rule",
        {"max_rounds": "9"},
    ):
        with pytest.raises(ConfigError):
            SequentialRule.from_json(bad)
    with pytest.raises(
        OptionError, match="--rounds with --until-decided is the cap and must be from 3 to 200"
    ):
        SequentialRule(max_rounds=201)
    with pytest.raises(OptionError, match="first look"):
        SequentialRule(min_rounds=2)


def test_compare_runs_judges_paired_rounds_by_the_rule() -> None:
    """The same rounds: the fixed-sample paired t calls 8 rounds of +12 % a regression; the rule,
    planned for up to 200 rounds, has spent almost nothing by round 8 and goes on; unpaired runs
    ignore it."""
    rng = np.random.default_rng(5)
    base = {"s": [rng.normal(10.0, 0.2, 40) * 1e6 for _ in range(8)]}
    new = {"s": [r * 1.12 * math.exp(rng.normal(0, 0.03)) for r in base["s"]]}
    fixed = compare_runs(base, new, paired=True, metric="wall").scenes[0]
    assert fixed.verdict == "regression"
    rule = SequentialRule(max_rounds=200)
    seq = compare_runs(base, new, paired=True, metric="wall", sequential=rule).scenes[0]
    assert seq.verdict == "inconclusive" and seq.reason.startswith("sequential: ")
    logs = np.log([np.median(n) / np.median(b) for b, n in zip(base["s"], new["s"], strict=True)])
    assert seq.ci_low == pytest.approx(look(rule, logs).ci_low)
    assert (
        compare_runs(base, new, paired=True, metric="wall", sequential=SequentialRule(max_rounds=8))
        .scenes[0]
        .verdict
        == "regression"
    )
    assert (
        compare_runs(base, new, paired=False, metric="wall", sequential=rule).scenes[0].verdict
        == "regression"
    )


def _figures_table() -> str:
    """docs/stats.md's table of the rule's simulated figures, recomputed (same seeds as the tests
    above).
    """
    rule, plain = SequentialRule(), SequentialRule(threshold_pct=0.0)
    rows = [
        ("A/A, threshold 0 (significance only)", simulate(plain, 0.0, SD_LOG, TRIALS, seed=11)),
        ("A/A, threshold 5 %", simulate(rule, 0.0, SD_LOG, TRIALS, seed=12)),
    ]
    rows += [
        (f"+{effect * 100:g} %", simulate(rule, effect, SD_LOG, 4000, seed=20))
        for effect in (0.05, 0.10, 0.30)
    ]
    lines = [
        "| true change | trials | regression | improvement | unchanged | undecided at the cap | "
        "mean rounds |",
        "|---|---:|---:|---:|---:|---:|---:|",
    ]
    for name, sim in rows:
        r = sim.rates
        lines.append(
            f"| {name} | {sim.trials} | {r['regression']:.2%} | {r['improvement']:.2%} | "
            f"{r['unchanged']:.2%} | {r['inconclusive']:.2%} | {sim.mean_rounds:.1f} |"
        )
    naive = _naive_rate(DEFAULT_ALPHA, rule.max_rounds, rule.min_rounds, TRIALS, seed=11)
    lines.append(
        "\nNaive looks (a fixed-sample paired t at alpha 0.01 after every round from round 3, the "
        "same "
        f"A/A series as the first row): {naive:.2%} false regressions."
    )
    return "\n".join(lines)


def test_docs_show_the_simulated_figures() -> None:
    from pathlib import Path

    doc = (Path(__file__).resolve().parent.parent / "docs" / "stats.md").read_text(encoding="utf-8")
    table = _figures_table()
    assert table in doc, (
        "docs/stats.md's sequential table is out of date; it should read:\n" + table
    )
