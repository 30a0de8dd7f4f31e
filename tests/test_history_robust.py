"""The step detector on histories it was not built around: one run a label, busy runners, changes
of spread, banding, and a newest label of one run (katra_trace.history.steps, trends)."""

from __future__ import annotations

import math

import numpy as np
import pytest

from katra_trace.history.series import Point, Series
from katra_trace.history.steps import detect_steps
from katra_trace.history.trends import check_steps


def one_run(values: np.ndarray) -> list[list[float]]:
    return [[float(v)] for v in values]


def noisy(rng: np.random.Generator, labels: int, sd: float) -> np.ndarray:
    return np.exp(rng.normal(0.0, sd, labels))


def busy(
    rng: np.random.Generator, values: np.ndarray, share: float
) -> tuple[np.ndarray, list[int]]:
    """Single labels (never two side by side, never the newest) doubled or halved: busy runners."""
    hit = rng.random(values.size) < share
    hit[1:] &= ~hit[:-1]
    hit[-1] = False
    factor = np.where(rng.random(values.size) < 0.5, 2.0, 0.5)
    return np.where(hit, values * factor, values), [int(i) for i in np.flatnonzero(hit)]


def series(levels: list[float], metric: str = "wall") -> Series:
    points = [Point(f"v{i}", i, "", [v], v, "", i) for i, v in enumerate(levels)]
    return Series(
        "cubes", "", metric, "ms" if metric == "wall" else metric, "median", "h", "host", "", points
    )


def test_single_outliers_are_never_steps() -> None:
    """One run a label, 4 % noise, single labels doubled or halved (8 % of them, never two side by
    side): no step at an outlier, the outliers left out, and steps elsewhere no more often than in
    a flat history. A detector fitting every label as a level shows two steps per outlier."""
    outliers = left_out = flagged = 0
    for seed in range(20):
        rng = np.random.default_rng(seed)
        values, hit = busy(rng, noisy(rng, 60, 0.04), 0.08)
        fit = detect_steps(one_run(values))
        at_outliers = {s.index for s in fit.steps} & {k for h in hit for k in (h, h + 1)}
        assert not at_outliers, (seed, hit, [s.index for s in fit.steps])
        flagged += bool(fit.steps)
        outliers += len(hit)
        left_out += len(set(hit) & set(fit.departed_labels))
    assert left_out >= 0.9 * outliers, (left_out, outliers)
    assert flagged <= 1, flagged  # a flat history's chance of a step (alpha 0.01), no more
    spike = [100.0] * 25 + [150.0] + [100.0] * 24  # a constant series with one outlier
    fit = detect_steps(one_run(np.array(spike)))
    assert fit.steps == [] and fit.departed_labels == (25,) and fit.departure is None
    assert fit.levels == pytest.approx([100.0] * 50)


def test_two_busy_runs_side_by_side_are_not_a_level() -> None:
    values = noisy(np.random.default_rng(3), 40, 0.03)
    values[[17, 18]] *= 2.0
    fit = detect_steps(one_run(values))
    assert fit.steps == [] and {17, 18} <= set(fit.departed_labels)


def test_a_change_of_spread_alone_is_not_a_step() -> None:
    """Noise 2 % for 50 labels, then 10 % (one run a label), and 2 % then 8 % run-to-run with 3
    runs a label: the level never moves."""
    alarms = 0
    for seed in range(20):
        rng = np.random.default_rng(100 + seed)
        values = np.exp(np.concatenate([rng.normal(0, 0.02, 50), rng.normal(0, 0.10, 50)]))
        alarms += bool(detect_steps(one_run(values)).steps)
        runs = [np.exp(rng.normal(0, 0.02 if i < 25 else 0.08, 3)) for i in range(50)]
        alarms += bool(detect_steps(runs).steps)
    assert alarms <= 2, alarms


def test_banding_is_noise() -> None:
    """Values alternating at random between two levels 5 % apart, with and without noise."""
    alarms = 0
    for seed in range(20):
        rng = np.random.default_rng(200 + seed)
        for labels, sd in ((50, 0.0), (200, 0.0), (200, 0.01)):
            band = 1.0 + 0.05 * (rng.random(labels) < 0.5)
            alarms += bool(detect_steps(one_run(band * np.exp(rng.normal(0, sd, labels)))).steps)
    assert alarms <= 2, alarms


def test_a_real_step_is_found_with_its_start_range_among_busy_runs() -> None:
    """+15 % at label 30 of 60, 3 % noise, busy runs elsewhere and one right before the step."""
    found = 0
    for seed in range(20):
        rng = np.random.default_rng(300 + seed)
        values, _ = busy(rng, noisy(rng, 60, 0.03), 0.05)
        values[29] = values[28] * 2.0
        values[30:] *= 1.15
        fit = detect_steps(one_run(values))
        near = [s for s in fit.steps if abs(s.index - 30) <= 1]
        if len(fit.steps) == 1 and near and near[0].start_low <= 30 <= near[0].start_high:
            found += 1
            assert near[0].ratio_low < 1.15 < near[0].ratio_high
    assert found >= 19, found


def test_a_new_level_at_the_end_needs_three_runs() -> None:
    rng = np.random.default_rng(5)
    base = noisy(rng, 30, 0.03)
    newest = detect_steps(one_run(np.append(base[:-1], base[-1] * 1.3)))
    assert newest.steps == [] and newest.departure is not None
    assert newest.departure.index == 29 and newest.departure.runs == 1
    assert newest.departure.ratio == pytest.approx(1.3, rel=0.1)
    assert newest.departure.ratio_low < newest.departure.ratio < newest.departure.ratio_high
    two = detect_steps(one_run(np.append(base[:-2], base[-2:] * 1.3)))
    assert two.steps == [] and two.departure is not None and two.departure.index == 28
    three = detect_steps(one_run(np.append(base[:-3], base[-3:] * 1.3)))
    assert [s.index for s in three.steps] == [27] and three.departure is None
    runs = [np.exp(rng.normal(0, 0.03, 3)) for _ in range(12)]
    assert [s.index for s in detect_steps([*runs[:-1], runs[-1] * 1.3]).steps] == [11]
    assert detect_steps([*runs[:-1], runs[-1][:1] * 1.3]).departure is not None
    assert detect_steps(one_run(base)).departure is None


def test_the_newest_single_run_label_is_reported_not_gated() -> None:
    """A time metric's newest label 30 % slower on one run: a departure, with the runs that would
    settle it, and no regression; a count's (exact) is a regression at the newest label."""
    rng = np.random.default_rng(8)
    levels = list(10.0 * noisy(rng, 20, 0.02))
    levels[-1] *= 1.3
    result = check_steps([series(levels)])
    assert not result.regression_at_newest and result.steps == []
    (dep,) = result.departures
    assert (
        dep.label == "v19"
        and dep.runs == 1
        and dep.runs_needed is not None
        and dep.runs_needed >= 3
    )
    assert "+3" in dep.text() and f"{dep.runs_needed} runs" in dep.text()
    assert "never gives a verdict" in dep.text()
    assert (
        result.models[0].no_step_reason == ""
        and result.models[0].as_dict()["departure"]["label"] == "v19"
    )
    counts = [1e6 + 300.0 * math.sin(i) for i in range(20)]
    counts[-1] *= 1.3
    counted = check_steps([series(counts, metric="instructions")])
    assert counted.regression_at_newest and counted.departures == []
    assert [(s.label, s.verdict) for s in counted.steps] == [("v19", "regression")]


def test_a_short_counted_history_keeps_its_step() -> None:
    """Four counted labels, one run each, +19 % from the third (the real llvmpipe case of
    tests/test_history_gl.py): in so short a series the step moves every label's neighbours, so
    the noise must not be taken from them alone."""
    counted = check_steps([series([36.00e6, 36.0001e6, 43.0e6, 43.0002e6], metric="instructions")])
    assert [(s.label, s.verdict) for s in counted.steps] == [("v2", "regression")]
    assert not counted.regression_at_newest and counted.departures == []


def test_the_bench_scores_one_detection_to_one_change() -> None:
    """`python -m bench changepoints`' rule: the nearest detection within the tolerance matches a
    change, once; a second detection near it is false."""
    from bench.changepoints import matches

    assert matches([10, 11], [10], 3) == 1
    assert matches([9, 13], [12, 10], 3) == 2
    assert matches([20], [10], 3) == 0


def test_ci_like_histories_of_an_unseen_seed() -> None:
    """The bench's CI-like histories (one run a label, 2-8 % noise, 4 % of runs doubled, 0-2 steps
    of 4-30 %) at a seed of their own, katra3d alone (no Otava needed): F1 at least 0.70, and no
    step in a history whose only departures are busy runs."""
    from bench.changepoints import ci_cases, katra3d_detector, score

    cases = ci_cases(7, 60)
    detect = katra3d_detector()
    result = score(cases, [detect(c.values) for c in cases])
    assert result.f1 >= 0.70, result
    assert result.outliers_only >= 5 and result.flagged_outliers_only == 0, result
