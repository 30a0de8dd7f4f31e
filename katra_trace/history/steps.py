"""Step detection over a history: where did the level change, by how much, and is it more than
noise?

Pure numpy (and scipy.special for the t quantile). The input is one series (a scene, metric and
host): for each label, in order, the values of its runs (replicates). The method:

1. Work on logs (a step is a ratio; run-to-run noise is multiplicative).
   A run far from the other runs of its label (more than 5 robust sds from
   the label's median, the sd pooled over labels of 3+ runs) is left out:
   a busy neighbour can halve one run's frame rate.
2. **Noise from replicates.** The run-to-run variance ``s2`` is pooled from
   the spread of the runs *within* each label (``df = sum(n_l - 1)``), so a
   step between labels cannot inflate it. A label mean then has variance
   ``s2 / n_l``. When fewer than 3 degrees of freedom come from replicates
   (one run per label), the noise of a label mean is estimated from the
   differences between consecutive labels (median absolute difference,
   robust to the few differences that are steps).
3. **Penalized piecewise-constant fit.** The levels are fitted by exact
   optimal partitioning (dynamic programming) minimizing the chi-square
   misfit ``sum w_l (mean_l - level)^2`` plus a penalty ``c`` per step.
4. **The penalty is a test.** ``c`` is the ``1 - alpha`` quantile of the
   largest single-split chi-square of *this series' design* (its labels and
   replicate counts, with its noise estimator) under "no step", found by a
   seeded simulation and cached. So a flat history shows a step with
   probability ~alpha, whatever its length or replicate counts.
5. **Label-to-label noise.** When consecutive labels differ more than their
   replicates explain (the 35th percentile of the squared differences over
   their replicate variances, against its own simulated ``1 - alpha``
   quantile; a low percentile, so a few steps do not trigger it), a label's
   runs evidently share something (one machine state, one build): the noise
   of a label mean is then taken from the label-to-label differences, as
   with one run a label.
6. Each step reports the label where the new level starts, the range of
   labels where it may start (splits whose misfit is within the chi-square
   ``1 - alpha`` quantile of the best one), and its size as a ratio of the
   adjacent levels with a ``1 - alpha`` interval (t on the noise's degrees
   of freedom).
"""

from __future__ import annotations

import dataclasses
import functools
import math
from collections.abc import Sequence
from statistics import NormalDist

import numpy as np

from katra_trace.analysis.defaults import DEFAULT_ALPHA

#: Simulated null series per design when calibrating the penalty.
NULL_SIMULATIONS = 4000
#: Fewer replicate degrees of freedom than this: estimate the noise from label-to-label differences.
MIN_REPLICATE_DF = 3
#: Without replicates, the noise comes from label-to-label differences: at least this many labels.
MIN_LABELS_FOR_LABEL_NOISE = 4
#: A run further than this many robust sds from its label's median is left out as an outlier.
OUTLIER_SDS = 5.0
#: A label mean's standard deviation is never taken below this (log units, 0.01 %): keeps identical
#: counts finite.
MIN_SD = 1e-4
_NORMAL = NormalDist()
_MAD_TO_SD = 1.0 / _NORMAL.inv_cdf(0.75)
#: The quantile of the squared label differences that measures label-to-label noise: low enough that
#: a few steps among a dozen labels barely move it.
_DISPERSION_Q = 0.35
_CHI2_1_Q = _NORMAL.inv_cdf(0.5 + _DISPERSION_Q / 2) ** 2  # chi-square(1) quantile


@dataclasses.dataclass(frozen=True)
class Step:
    """A change of level that starts at label index ``index`` (0-based; the first label of the new
    level).
    """

    index: int
    start_low: int  #: earliest label index where the step may start (at the fit's confidence)
    start_high: int  #: latest such index
    ratio: float  #: new level / old level (geometric means)
    ratio_low: float  #: lower end of the interval of ``ratio``
    ratio_high: float
    z: float  #: log ratio over its standard error
    level_before: float  #: geometric-mean level of the segment before (the series' unit)
    level_after: float


@dataclasses.dataclass(frozen=True)
class Fit:
    """The fitted levels of one series and the steps between them."""

    steps: list[Step]
    levels: list[float]  #: fitted level per label (the series' unit)
    label_means: list[float]  #: geometric mean of each label's runs
    #: run-to-run sd (log units ~ relative) used, per run; per label mean when
    noise_sd: float
    #: ``noise_source`` is ``"labels"``
    noise_source: str  #: "replicates" | "labels"
    noise_df: int
    #: how much label means scatter relative to their replicates (about 1 when
    dispersion: float
    #: they differ by their runs' noise only; 0 without replicates)
    penalty: float  #: the chi-square penalty per step (the null quantile)
    confidence: float
    dropped_runs: int = 0  #: runs left out as outliers (see :data:`OUTLIER_SDS`)
    runs: tuple[int, ...] = ()  #: runs per label that the fit used (outliers left out)
    #: run-to-run sd within labels (log units), pooled; 0 without replicates
    run_sd: float = 0.0

    @property
    def change(self) -> float:
        """The fitted level of the newest label over the first's (1.0 when no step was found): the
        change of the series as the model sees it."""
        return self.levels[-1] / self.levels[0] if self.levels else 1.0


def _drop_outliers(logs: list[np.ndarray]) -> tuple[list[np.ndarray], int]:
    """Leave out runs more than :data:`OUTLIER_SDS` robust sds from their label's median (labels of
    3+ runs; the sd pooled from every such label's absolute deviations, one zero of an odd label
    left out). A busy neighbour can halve one run's frame rate; that run says nothing about the
    version."""
    devs = []
    for a in logs:
        if a.size >= 3:
            d = np.sort(np.abs(a - np.median(a)))
            devs.append(d[1:] if a.size % 2 else d)
    if not devs or sum(d.size for d in devs) < 4:
        return logs, 0
    sd = max(float(np.median(np.concatenate(devs))) * _MAD_TO_SD, MIN_SD)
    out, dropped = [], 0
    for a in logs:
        if a.size >= 3:
            keep = np.abs(a - np.median(a)) <= OUTLIER_SDS * sd
            dropped += int(a.size - keep.sum())
            a = a[keep]
        out.append(a)
    return out, dropped


def _label_noise_from_diffs(means: np.ndarray) -> np.ndarray:
    """Variance of a label mean from consecutive differences (rows of ``means`` are series)."""
    d = np.diff(means, axis=-1)
    mad = np.median(np.abs(d), axis=-1) * _MAD_TO_SD
    var: np.ndarray = np.maximum(mad**2 / 2.0, MIN_SD**2)
    return var


def _dispersion(means: np.ndarray, var: np.ndarray) -> float:
    """How much consecutive label means differ relative to their replicate variances ``var``: the
    :data:`_DISPERSION_Q` quantile of ``d^2 / (v_l + v_l+1)`` over the chi-square(1) one (about 1
    without label-level noise; a low quantile, so the few differences that are steps barely move
    it)."""
    d2 = np.diff(means, axis=-1) ** 2 / (var[..., :-1] + var[..., 1:])
    return float(np.quantile(d2, _DISPERSION_Q)) / _CHI2_1_Q


@functools.lru_cache(maxsize=256)
def null_dispersion(counts: tuple[int, ...], alpha: float, sims: int = NULL_SIMULATIONS) -> float:
    """The ``1 - alpha`` quantile of :func:`_dispersion` when the labels differ only by their
    replicates.
    """
    n = np.asarray(counts, dtype=np.float64)
    rng = np.random.default_rng(20261201 + n.size)
    df = int(np.sum(n - 1))
    means = rng.standard_normal((sims, n.size)) / np.sqrt(n)
    s2 = rng.chisquare(df, sims) / df
    d2 = np.diff(means, axis=-1) ** 2 / ((1 / n[:-1] + 1 / n[1:]) * s2[:, None])
    return float(np.quantile(np.quantile(d2, _DISPERSION_Q, axis=-1) / _CHI2_1_Q, 1.0 - alpha))


def _split_stats(means: np.ndarray, w: np.ndarray) -> np.ndarray:
    """Chi-square of each single split k = 1..L-1 (columns) of rows of ``means`` with weights ``w``
    (1-D).
    """
    cw = np.cumsum(w)
    cwm = np.cumsum(means * w, axis=-1)
    wa = cw[:-1]
    wb = cw[-1] - wa
    ma = cwm[..., :-1] / wa
    mb = (cwm[..., -1:] - cwm[..., :-1]) / wb
    out: np.ndarray = wa * wb / (wa + wb) * (ma - mb) ** 2
    return out


@functools.lru_cache(maxsize=256)
def null_penalty(
    counts: tuple[int, ...], alpha: float, source: str, sims: int = NULL_SIMULATIONS
) -> float:
    """The ``1 - alpha`` quantile of the largest single-split chi-square under "no step".

    ``counts``: runs per label. ``source``: how the noise is estimated ("replicates" or "labels"),
    simulated with the same estimator. Seeded: the same design always gets the same penalty.
    """
    n = np.asarray(counts, dtype=np.float64)
    if n.size < 2:
        return math.inf
    rng = np.random.default_rng(20261130 + n.size)
    means = rng.standard_normal((sims, n.size)) / np.sqrt(n)
    if source == "replicates":
        df = int(np.sum(n - 1))
        s2 = rng.chisquare(df, sims) / df
        stat = _split_stats(means, n).max(axis=-1) / s2
    else:
        var = _label_noise_from_diffs(means)
        stat = _split_stats(means, np.ones(n.size)).max(axis=-1) / var
    return float(np.quantile(stat, 1.0 - alpha))


def _segment_costs(means: np.ndarray, w: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    z = np.concatenate([[0.0], np.cumsum(w)])
    zm = np.concatenate([[0.0], np.cumsum(w * means)])
    zmm = np.concatenate([[0.0], np.cumsum(w * means * means)])
    return z, zm, zmm


def _optimal_partition(means: np.ndarray, w: np.ndarray, penalty: float) -> list[int]:
    """Start indices of the segments (0 first) minimizing misfit + penalty x steps."""
    n = means.size
    z, zm, zmm = _segment_costs(means, w)
    best = np.zeros(n + 1)
    prev = np.zeros(n + 1, dtype=np.int64)
    for j in range(1, n + 1):
        i = np.arange(j)
        sw = z[j] - z[i]
        cost = (zmm[j] - zmm[i]) - (zm[j] - zm[i]) ** 2 / sw
        total = best[i] + cost + np.where(i > 0, penalty, 0.0)
        k = int(np.argmin(total))
        best[j] = total[k]
        prev[j] = k
    starts = []
    j = n
    while j > 0:
        starts.append(int(prev[j]))
        j = int(prev[j])
    return sorted(starts)


def _misfit(means: np.ndarray, w: np.ndarray, starts: list[int]) -> tuple[float, np.ndarray]:
    bounds = [*starts, means.size]
    levels = np.empty(means.size)
    total = 0.0
    for a, b in zip(bounds[:-1], bounds[1:], strict=True):
        mu = float(np.sum(w[a:b] * means[a:b]) / np.sum(w[a:b]))
        levels[a:b] = mu
        total += float(np.sum(w[a:b] * (means[a:b] - mu) ** 2))
    return total, levels


def detect_steps(
    groups: Sequence[Sequence[float] | np.ndarray], alpha: float = DEFAULT_ALPHA
) -> Fit:
    """Fit levels to a series of labels (each a sequence of run values > 0) and find the steps.

    ``alpha``: the chance that a flat series shows a step (the penalty's null quantile), and
    ``1 - alpha`` is the confidence of each step's interval and start range. Labels without a
    positive finite value must be left out by the caller. Raises ValueError on bad input.
    """
    if not 0 < alpha < 0.5:
        raise ValueError(f"alpha must be in (0, 0.5), got {alpha}")
    logs = []
    for g in groups:
        arr = np.asarray(g, dtype=np.float64)
        if arr.size == 0 or not np.all(np.isfinite(arr)) or np.any(arr <= 0):
            raise ValueError("every label needs at least one positive, finite value")
        logs.append(np.log(arr))
    logs, dropped = _drop_outliers(logs)
    n = np.array([a.size for a in logs], dtype=np.float64)
    means = np.array([float(a.mean()) for a in logs])
    level_of = [float(math.exp(m)) for m in means]
    ss = float(sum(float(np.sum((a - a.mean()) ** 2)) for a in logs))
    df_w = int(np.sum(n - 1))
    runs = tuple(int(x) for x in n)
    run_sd = math.sqrt(ss / df_w) if df_w else 0.0
    if means.size < 2:
        return Fit(
            [],
            level_of,
            level_of,
            run_sd,
            "replicates",
            df_w,
            0.0,
            math.inf,
            1 - alpha,
            dropped,
            runs,
            run_sd,
        )
    s2 = 0.0
    source = "labels"
    dispersion = 0.0
    if df_w >= MIN_REPLICATE_DF:
        s2 = max(ss / df_w, MIN_SD**2)
        dispersion = _dispersion(means, s2 / n)
        if means.size < 3 or dispersion <= null_dispersion(tuple(int(x) for x in n), alpha):
            source = "replicates"
    if source == "replicates":
        var = s2 / n
        noise_df = df_w
        noise_sd = math.sqrt(s2)
    else:
        # one run a label, or labels that scatter more than their replicates explain (a label's runs
        # sharing one machine state): the noise of a label mean from label-to-label differences
        var = np.maximum(float(_label_noise_from_diffs(means)), s2 / n)
        noise_df = max(means.size - 2, 1)
        noise_sd = math.sqrt(float(np.max(var)))
    if source == "labels" and means.size < MIN_LABELS_FOR_LABEL_NOISE:
        # 1-2 differences cannot tell noise from a step: no step can be established, so the model is
        # one level (what a report draws is what check found)
        w = 1.0 / var
        flat = [float(math.exp(float(np.sum(w * means) / np.sum(w))))] * means.size
        return Fit(
            [],
            flat,
            level_of,
            noise_sd,
            source,
            noise_df,
            dispersion,
            math.inf,
            1 - alpha,
            dropped,
            runs,
            run_sd,
        )
    penalty = null_penalty(tuple(int(x) for x in n), alpha, source)
    starts = _optimal_partition(means, 1.0 / var, penalty)
    w = 1.0 / var
    _, levels = _misfit(means, w, starts)
    # deferred: scipy (scipy.special, through the t quantile every decision uses) loads only when a
    # step is tested
    from katra_trace.analysis.intervals import t_ppf

    q_t = float(t_ppf(1 - alpha / 2, noise_df))
    q_loc = _NORMAL.inv_cdf(1 - alpha / 2) ** 2  # chi-square(1) quantile 1 - alpha
    bounds = [*starts, means.size]
    out: list[Step] = []
    for s in range(1, len(starts)):
        a, k, b = bounds[s - 1], bounds[s], bounds[s + 1]
        wa, wb = float(np.sum(w[a:k])), float(np.sum(w[k:b]))
        mu_a = float(np.sum(w[a:k] * means[a:k]) / wa)
        mu_b = float(np.sum(w[k:b] * means[k:b]) / wb)
        delta = mu_b - mu_a
        se = math.sqrt(1 / wa + 1 / wb)
        split = _split_stats(means[a:b], w[a:b])  # split j+1 = start at a + j + 1
        near = np.flatnonzero(split >= split.max() - q_loc) + a + 1
        out.append(
            Step(
                index=k,
                start_low=int(near.min()),
                start_high=int(near.max()),
                ratio=math.exp(delta),
                ratio_low=math.exp(delta - q_t * se),
                ratio_high=math.exp(delta + q_t * se),
                z=delta / se,
                level_before=math.exp(mu_a),
                level_after=math.exp(mu_b),
            )
        )
    return Fit(
        out,
        [float(math.exp(v)) for v in levels],
        level_of,
        noise_sd,
        source,
        noise_df,
        dispersion,
        penalty,
        1 - alpha,
        dropped,
        runs,
        run_sd,
    )


#: Labels at most simulated when estimating the labels a step needs (the penalty grows very slowly
#: beyond).
_MAX_LABELS_SIMULATED = 400
#: Simulated null series per design for that estimate (an "about N", not a test).
_RESOLUTION_SIMULATIONS = 2000


@dataclasses.dataclass(frozen=True)
class Resolution:
    """Why a fit shows no step, and what would resolve a step of ``step_pct`` in a series like it.

    A step of ``step_pct`` between the two halves of the series is found (with chance
    :data:`katra_trace.analysis.intervals.TARGET_POWER`) when its size over its standard error
    reaches the square root of the penalty plus the power's normal quantile.
    """

    #: "labels" (label-to-label scatter), "replicates" (run-to-run) or "one label"
    source: str
    #: sd of a label's level between labels ("labels") or of one run ("replicates"), %
    noise_pct: float
    run_pct: float  #: sd of a run within its label, % (0 without replicates)
    #: label-to-label scatter over what the runs explain (0 without replicates)
    dispersion: float
    labels: int
    runs: int  #: runs a label (the median)
    step_pct: float  #: the step size asked about, %
    #: labels like these that would resolve it ("labels"; None: already enough)
    labels_needed: int | None
    #: runs a label that would resolve it ("replicates"; None: already enough)
    runs_needed: int | None

    def text(self) -> str:
        """One line: the noise source, its size, and how many labels or runs a step of ``step_pct``
        needs.
        """
        if self.source == "one label":
            return "a single label: a step needs at least 2 labels"
        if (
            self.source == "labels"
            and self.labels < MIN_LABELS_FOR_LABEL_NOISE
            and self.dispersion == 0
        ):
            return (
                f"{self.labels} labels of one run each: label-to-label noise needs at least "
                f"{MIN_LABELS_FOR_LABEL_NOISE} labels, so no step can be established yet (give "
                "each label several runs, or compare the two labels' traces with katra3d compare)"
            )
        step = f"the {self.step_pct:.3g} % change seen"
        if self.source == "labels":
            if self.dispersion > 0:
                times = (
                    f"{self.dispersion:,.0f}"
                    if self.dispersion >= 100
                    else f"{self.dispersion:.3g}"
                )
                noise = (
                    f"label-to-label dispersion {times}x the run noise (a label's level "
                    f"scatters {self.noise_pct:.2g} % between labels, its runs {self.run_pct:.2g} "
                    "%)"
                )
            else:
                noise = f"label-to-label spread {self.noise_pct:.2g} % (one run a label)"
            if self.labels_needed is None:
                need = f"{self.labels} labels resolve {step} most of the time; none was found here"
            else:
                more = (
                    "more runs a label do not help"
                    if self.dispersion > 0
                    else "or several runs a label, whose spread then is the noise"
                )
                need = (
                    f"about {self.labels_needed:,} labels at that scatter would resolve {step} "
                    f"({self.labels} now; {more})"
                )
            return f"{noise}: {need}"
        noise = f"run-to-run spread {self.noise_pct:.2g} %"
        if self.runs_needed is None:
            return (
                f"{noise}: {self.runs} runs a label resolve {step} most of the time; none was "
                "found here"
            )
        return (
            f"{noise}: about {self.runs_needed} runs a label would resolve {step} "
            f"({self.runs} now, {self.labels} labels)"
        )


def resolution(fit: Fit, step_pct: float, alpha: float) -> Resolution:
    """What keeps ``fit`` from showing a step of ``step_pct`` (percent), and the labels or runs a
    label that would resolve one (see :class:`Resolution`). ``alpha`` as given to
    :func:`detect_steps`."""
    # deferred: intervals loads scipy.stats; only an explanation needs the power it is planned at
    from katra_trace.analysis.intervals import TARGET_POWER

    labels = len(fit.label_means)
    runs = int(np.median(fit.runs)) if fit.runs else 1
    run_pct = 100 * fit.run_sd
    if labels < 2:
        return Resolution(
            "one label", 100 * fit.noise_sd, run_pct, 0.0, labels, runs, step_pct, 2, None
        )
    delta = math.log1p(step_pct / 100)
    z = _NORMAL.inv_cdf(TARGET_POWER)
    if fit.noise_source == "labels":
        sigma = fit.noise_sd  # of a label mean
        n_labels = max(labels, MIN_LABELS_FOR_LABEL_NOISE)
        need = n_labels
        for _ in range(8):
            c = null_penalty(
                (1,) * min(n_labels, _MAX_LABELS_SIMULATED),
                alpha,
                "labels",
                _RESOLUTION_SIMULATIONS,
            )
            need = max(
                MIN_LABELS_FOR_LABEL_NOISE, math.ceil((2 * sigma * (math.sqrt(c) + z) / delta) ** 2)
            )
            if need == n_labels or need > _MAX_LABELS_SIMULATED:
                break
            n_labels = need
        needed = None if need <= labels else need
        return Resolution(
            "labels", 100 * sigma, run_pct, fit.dispersion, labels, runs, step_pct, needed, None
        )
    # replicates: a label mean's variance is s2 / n; the step's split in the middle has L n / 2 runs
    # a side
    c = fit.penalty if math.isfinite(fit.penalty) else null_penalty(fit.runs, alpha, "replicates")
    per_label = math.ceil((2 * fit.noise_sd * (math.sqrt(c) + z) / delta) ** 2 / labels)
    return Resolution(
        "replicates",
        100 * fit.noise_sd,
        run_pct,
        fit.dispersion,
        labels,
        runs,
        step_pct,
        None,
        per_label if per_label > runs else None,
    )


__all__ = [
    "Fit",
    "MIN_REPLICATE_DF",
    "NULL_SIMULATIONS",
    "Resolution",
    "Step",
    "detect_steps",
    "null_penalty",
    "resolution",
]
