"""Holm, t intervals, runs needed and the interval rule, for every decision. scipy.special only:
scipy.stats takes about a second to import."""

from __future__ import annotations

import dataclasses
import math
from collections.abc import Sequence
from typing import Any

import numpy as np
from scipy.special import ndtri, stdtr, stdtrit

from katra_trace.analysis.defaults import MIN_RUNS
from katra_trace.analysis.ranks import mann_whitney_p
from katra_trace.analysis.stats import frame_stats
from katra_trace.analysis.verdict import SceneComparison, Verdict

TARGET_POWER = 0.8


def holm(p_values: Sequence[float]) -> list[float]:
    """Holm-Bonferroni adjusted, in the order given."""
    p = np.asarray(p_values, dtype=np.float64)
    m = p.size
    if m == 0:
        return []
    order = np.argsort(p, kind="stable")
    adjusted = np.empty(m)
    running = 0.0
    for rank, idx in enumerate(order):
        running = max(running, min(1.0, (m - rank) * float(p[idx])))
        adjusted[idx] = running
    return [float(v) for v in adjusted]


def t_ppf(p: Any, dof: Any) -> Any:
    """``scipy.stats.t.ppf``."""
    return stdtrit(dof, p)


def t_sf(x: Any, dof: Any) -> Any:
    """``scipy.stats.t.sf``."""
    return stdtr(dof, -np.asarray(x, dtype=np.float64))


def cv(values: np.ndarray) -> float:
    if values.size < 2:
        return math.nan
    mean = float(values.mean())
    return float(values.std(ddof=1)) / mean if mean > 0 else math.nan


def geometric_mean(values: np.ndarray) -> float:
    """Exact when all are equal, never outside their range."""
    values = np.asarray(values, dtype=np.float64)
    first = float(values[0])
    mean = first * math.exp(float(np.mean(np.log(values / first))))
    return min(max(mean, float(values.min())), float(values.max()))


def clean(run: np.ndarray) -> np.ndarray:
    d = np.asarray(run, dtype=np.float64)
    return d[np.isfinite(d) & (d > 0)]


def clean_runs(runs: Sequence[np.ndarray]) -> list[np.ndarray]:
    return [d for d in (clean(r) for r in runs) if d.size]


@dataclasses.dataclass(frozen=True)
class TInterval:
    estimate: float
    se: float
    dof: float

    def interval(self, confidence: float) -> tuple[float, float]:
        if self.se == 0:
            return self.estimate, self.estimate
        q = float(t_ppf(0.5 + confidence / 2.0, self.dof))
        return self.estimate - q * self.se, self.estimate + q * self.se

    def p_directional(self) -> float:
        """One-sided, in the estimate's direction."""
        if self.se == 0:
            return 0.0 if self.estimate != 0 else 1.0
        return float(t_sf(abs(self.estimate) / self.se, self.dof))


def welch(log_base: np.ndarray, log_new: np.ndarray, drift_sd: float = 0.0) -> TInterval:
    """Each side >= 2 values. ``drift_sd`` adds to the standard error as a known variance, so not
    to the Welch-Satterthwaite degrees of freedom."""
    nb, nn = log_base.size, log_new.size
    vb = float(log_base.var(ddof=1)) / nb
    vn = float(log_new.var(ddof=1)) / nn
    est = float(log_new.mean() - log_base.mean())
    se2 = vb + vn
    if se2 == 0:
        return TInterval(est, drift_sd, float(nb + nn - 2))
    denom = (vb * vb / (nb - 1) if vb else 0.0) + (vn * vn / (nn - 1) if vn else 0.0)
    total = se2 + drift_sd * drift_sd
    return TInterval(est, math.sqrt(total), total * total / denom)


def paired_t(log_ratios: np.ndarray) -> TInterval:
    k = log_ratios.size
    return TInterval(
        float(log_ratios.mean()), float(log_ratios.std(ddof=1)) / math.sqrt(k), float(k - 1)
    )


def settling_margin(estimate: float, threshold: float) -> float:
    """How far an interval around ``estimate`` (log ratio) may reach and still decide."""
    edge = math.log1p(threshold)
    size = abs(estimate)
    return size if size >= edge else edge - size


def runs_needed(
    sd_log: float, margin: float, alpha: float, m: int, paired: bool, drift_sd: float = 0.0
) -> int | None:
    """Runs a side to settle ``margin`` at alpha / m and :data:`TARGET_POWER`; None when none would
    (runs do not shrink ``drift_sd``) or over 100,000."""
    if not math.isfinite(sd_log) or sd_log <= 0 or not math.isfinite(margin) or margin <= 0:
        return None
    delta = margin
    a = alpha / max(m, 1)
    z = float(ndtri(1 - a)) + float(ndtri(TARGET_POWER))
    room = (delta / z) ** 2 - drift_sd * drift_sd
    if room <= 0:
        return None
    n_normal = sd_log * sd_log / room * (1 if paired else 2)
    if n_normal > 100_000:
        return None
    n = np.arange(
        max(MIN_RUNS, math.floor(n_normal)), math.ceil(2 * n_normal) + 12, dtype=np.float64
    )
    dof = n - 1 if paired else 2 * n - 2
    se = sd_log / np.sqrt(n) if paired else sd_log * np.sqrt(2.0 / n)
    se = np.sqrt(se * se + drift_sd * drift_sd)
    ok = (t_ppf(1 - a, dof) + t_ppf(TARGET_POWER, dof)) * se <= delta
    return int(n[np.argmax(ok)]) if ok.any() else None


def interval_verdict(estimate: float, low: float, high: float, threshold: float) -> Verdict:
    """Log ratios NEW / BASE against ``threshold`` (a fraction): the counts' and history's rule."""
    up = math.log1p(threshold)
    if estimate >= up and low > 0:
        return Verdict.REGRESSION
    if estimate <= -up and high < 0:
        return Verdict.IMPROVEMENT
    if -up < low and high < up:
        return Verdict.UNCHANGED
    return Verdict.INCONCLUSIVE


def frame_figures(
    row: SceneComparison, b_all: np.ndarray, n_all: np.ndarray, count: bool
) -> SceneComparison:
    """Adds the pooled-frame change and p, and frame pacing unless ``count``."""
    row = dataclasses.replace(
        row,
        frame_ratio=float(np.median(n_all) / np.median(b_all)),
        frame_p_value=mann_whitney_p(b_all, n_all),
    )
    if count:
        return row
    fb, fn = frame_stats(b_all), frame_stats(n_all)
    return dataclasses.replace(
        row,
        p99_base_ms=fb.p99_ms,
        p99_new_ms=fn.p99_ms,
        fps_low_1pct_base=fb.fps_low_1pct,
        fps_low_1pct_new=fn.fps_low_1pct,
        stutter_pct_base=fb.stutter_pct,
        stutter_pct_new=fn.stutter_pct,
    )


__all__ = [
    "MIN_RUNS",
    "TARGET_POWER",
    "TInterval",
    "clean",
    "clean_runs",
    "cv",
    "frame_figures",
    "geometric_mean",
    "holm",
    "interval_verdict",
    "paired_t",
    "runs_needed",
    "settling_margin",
    "t_ppf",
    "t_sf",
    "welch",
]
