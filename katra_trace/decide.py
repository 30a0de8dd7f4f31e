"""The decision of a comparison: statistics and verdicts on per-run frame durations.

Pure: numpy and scipy.stats only, no GL, no I/O. The decision rule is
documented in docs/stats.md; in short:

* **The run is the unit of evidence.** Frames of one run share that run's
  luck (clock state, neighbours on a shared machine), so with >= 3 runs a
  side the test and the interval are computed on the per-run medians:
  effect = geometric mean of NEW per-run medians / geometric mean of BASE
  per-run medians; a two-sided Mann-Whitney U test on the per-run medians;
  a seeded BCa bootstrap interval of the effect. Frame-level figures (pooled
  median ratio and its Mann-Whitney p-value) are shown beside.
* With 1-2 runs on a side, run-to-run noise is unknown: the frames are the
  unit, the effect is the ratio of pooled medians, and the p-value and
  interval describe only within-run noise. The threshold is then the only
  guard against run-to-run noise; results carry a note saying so.
* p-values are Holm-corrected across the scenes compared.
* Verdict per scene (``thr`` = threshold, e.g. 0.05; ``up = 1 + thr``,
  ``down = 1 / (1 + thr)``; ``p`` = Holm-adjusted p; CI at 1 - 2 alpha):

  1. too few frames (< :data:`MIN_FRAMES` a side) -> inconclusive;
  2. ``p < alpha`` and ratio >= up -> regression;
     ``p < alpha`` and ratio <= down -> improvement;
  3. runs are the unit but too few for the test to ever reach ``alpha``
     (the exact Mann-Whitney minimum p) -> inconclusive, naming the runs needed;
  4. CI inside (down, up), or ``p < alpha`` with ratio inside (down, up) -> unchanged;
  5. otherwise (not significant, a threshold-sized change not ruled out)
     -> inconclusive, with an estimate of the runs (or frames) needed.
"""

from __future__ import annotations

import dataclasses
import math
import warnings
from collections.abc import Mapping, Sequence
from typing import Any

import numpy as np
from scipy import stats as sps

from katra_trace.stats import frame_stats

#: Fewer measured frames than this on a side: inconclusive.
MIN_FRAMES = 20
#: Runs a side from which the run (not the frame) is the unit of evidence.
MIN_RUNS_FOR_RUN_LEVEL = 3
#: Power assumed when estimating how many runs would be needed.
TARGET_POWER = 0.8
#: Bootstrap resamples (seeded).
N_RESAMPLES = 2000

VERDICTS = ("regression", "improvement", "unchanged", "inconclusive", "incomparable")


@dataclasses.dataclass(frozen=True)
class SceneComparison:
    """The comparison of one scene. Times in ms; ratios NEW/BASE (> 1 = slower)."""

    scene: str
    verdict: str
    reason: str
    metric: str = ""
    unit: str = ""  #: "runs" or "frames": what the test and interval were computed on
    runs_base: int = 0
    runs_new: int = 0
    frames_base: int = 0
    frames_new: int = 0
    median_base_ms: float = math.nan  #: the effect's BASE level (see module doc)
    median_new_ms: float = math.nan
    ratio: float = math.nan
    ci_low: float = math.nan
    ci_high: float = math.nan
    confidence: float = math.nan
    p_value: float = math.nan  #: raw two-sided Mann-Whitney U p on the unit
    p_holm: float = math.nan  #: Holm-adjusted across scenes
    frame_ratio: float = math.nan  #: pooled-frame median ratio (shown beside)
    frame_p_value: float = math.nan  #: Mann-Whitney U on pooled frames (shown beside)
    run_cv_base: float = math.nan  #: CV of per-run medians (needs >= 2 runs)
    run_cv_new: float = math.nan
    runs_needed: int | None = None  #: runs a side that would settle an inconclusive result
    frames_needed: int | None = None
    p99_base_ms: float = math.nan
    p99_new_ms: float = math.nan
    fps_low_1pct_base: float = math.nan
    fps_low_1pct_new: float = math.nan
    stutter_pct_base: float = math.nan
    stutter_pct_new: float = math.nan
    notes: tuple[str, ...] = ()

    @property
    def change_pct(self) -> float:
        """(ratio - 1) in percent: + means NEW is slower."""
        return (self.ratio - 1.0) * 100.0

    def as_dict(self) -> dict[str, Any]:
        """JSON-ready dict; non-finite floats become None."""
        out: dict[str, Any] = {}
        for field in dataclasses.fields(self):
            value = getattr(self, field.name)
            if isinstance(value, float) and not math.isfinite(value):
                value = None
            elif isinstance(value, tuple):
                value = list(value)
            out[field.name] = value
        change = self.change_pct
        out["change_pct"] = change if math.isfinite(change) else None
        return out


@dataclasses.dataclass(frozen=True)
class Comparison:
    """All scenes of one comparison and the settings used."""

    scenes: tuple[SceneComparison, ...]
    threshold_pct: float
    alpha: float
    metric: str
    notes: tuple[str, ...] = ()

    @property
    def regressions(self) -> tuple[SceneComparison, ...]:
        return tuple(s for s in self.scenes if s.verdict == "regression")

    @property
    def exit_code(self) -> int:
        """1 if any regression, 2 if nothing was comparable, else 0."""
        if self.regressions:
            return 1
        if not any(s.verdict != "incomparable" for s in self.scenes):
            return 2
        return 0

    def as_dict(self) -> dict[str, Any]:
        counts = {v: sum(1 for s in self.scenes if s.verdict == v) for v in VERDICTS}
        return {
            "threshold_pct": self.threshold_pct,
            "alpha": self.alpha,
            "metric": self.metric,
            "verdicts": counts,
            "exit_code": self.exit_code,
            "notes": list(self.notes),
            "scenes": {s.scene: s.as_dict() for s in self.scenes},
        }


# --------------------------------------------------------------------------- helpers


def holm(p_values: Sequence[float]) -> list[float]:
    """Holm-Bonferroni adjusted p-values (step-down), same order as given."""
    p = np.asarray(p_values, dtype=np.float64)
    m = p.size
    if m == 0:
        return []
    order = np.argsort(p, kind="stable")
    adjusted = np.empty(m)
    running = 0.0
    for rank, idx in enumerate(order):
        running = max(running, min(1.0, (m - rank) * p[idx]))
        adjusted[idx] = running
    return [float(v) for v in adjusted]


def min_runs_for_alpha(alpha: float) -> int:
    """Smallest k such that an exact two-sided Mann-Whitney test of k vs k runs can give p < alpha.

    The smallest attainable p is ``2 / C(2k, k)`` (complete separation).
    """
    k = 1
    while 2.0 / math.comb(2 * k, k) >= alpha:
        k += 1
    return k


def _mwu_p(x: np.ndarray, y: np.ndarray) -> float:
    """Two-sided Mann-Whitney U p-value: exact for small tie-free samples, else asymptotic."""
    ties = np.unique(np.concatenate([x, y])).size < x.size + y.size
    method = "exact" if (not ties and x.size <= 50 and y.size <= 50) else "asymptotic"
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        res = sps.mannwhitneyu(y, x, alternative="two-sided", method=method)
    p = float(res.pvalue)
    return p if math.isfinite(p) else 1.0


def _bootstrap_ci(x: np.ndarray, y: np.ndarray, statistic: Any, confidence: float, seed: int,
                  method: str) -> tuple[float, float]:
    """Seeded two-sample bootstrap CI of ``statistic(y, x)``; (nan, nan) if impossible."""
    if x.size < 2 or y.size < 2:
        return math.nan, math.nan
    if np.ptp(x) == 0 and np.ptp(y) == 0:
        value = float(statistic(y, x, axis=-1))
        return value, value
    kwargs: dict[str, Any] = {
        "confidence_level": confidence,
        "n_resamples": N_RESAMPLES,
        "method": method,
        "vectorized": True,
    }
    for key, rng in (("rng", np.random.default_rng(seed)), ("random_state", np.random.default_rng(seed))):
        try:
            with warnings.catch_warnings():
                warnings.simplefilter("ignore")
                res = sps.bootstrap((y, x), statistic, **{key: rng}, **kwargs)
            break
        except TypeError:  # scipy < 1.15 has random_state, not rng
            continue
    else:  # pragma: no cover
        return math.nan, math.nan
    low, high = float(res.confidence_interval.low), float(res.confidence_interval.high)
    if not (math.isfinite(low) and math.isfinite(high)) and method != "percentile":
        return _bootstrap_ci(x, y, statistic, confidence, seed, "percentile")
    return low, high


def _log_mean_diff(a: np.ndarray, b: np.ndarray, axis: int = -1) -> np.ndarray:
    return np.mean(a, axis=axis) - np.mean(b, axis=axis)


def _log_median_ratio(a: np.ndarray, b: np.ndarray, axis: int = -1) -> np.ndarray:
    return np.log(np.median(a, axis=axis)) - np.log(np.median(b, axis=axis))


def _needed(sd_log: float, threshold: float, alpha: float, m: int) -> int | None:
    """Samples a side for a two-sample test to detect a ``threshold`` change (log scale).

    Normal approximation at :data:`TARGET_POWER`, Bonferroni-worst-case alpha
    (alpha / m), inflated by pi/3 for the Mann-Whitney test's efficiency.
    """
    if not math.isfinite(sd_log) or sd_log <= 0:
        return None
    z_a = float(sps.norm.ppf(1 - alpha / (2 * max(m, 1))))
    z_b = float(sps.norm.ppf(TARGET_POWER))
    delta = math.log1p(threshold)
    return max(2, math.ceil(2 * ((z_a + z_b) * sd_log / delta) ** 2 * math.pi / 3))


def _cv(values: np.ndarray) -> float:
    if values.size < 2:
        return math.nan
    mean = float(values.mean())
    return float(values.std(ddof=1)) / mean if mean > 0 else math.nan


# --------------------------------------------------------------------------- core


def _clean_runs(runs: Sequence[np.ndarray]) -> list[np.ndarray]:
    out = []
    for run in runs:
        d = np.asarray(run, dtype=np.float64)
        d = d[np.isfinite(d) & (d > 0)]
        if d.size:
            out.append(d)
    return out


def _measure_scene(scene: str, base_runs: Sequence[np.ndarray], new_runs: Sequence[np.ndarray],
                   alpha: float, seed: int, metric: str) -> dict[str, Any]:
    """Effect, raw p-value, CI and side figures of one scene (no verdict yet)."""
    b_runs, n_runs = _clean_runs(base_runs), _clean_runs(new_runs)
    b_all = np.concatenate(b_runs) if b_runs else np.empty(0)
    n_all = np.concatenate(n_runs) if n_runs else np.empty(0)
    out: dict[str, Any] = {
        "scene": scene, "metric": metric,
        "runs_base": len(b_runs), "runs_new": len(n_runs),
        "frames_base": int(b_all.size), "frames_new": int(n_all.size),
    }
    if b_all.size == 0 or n_all.size == 0:
        return out
    fb, fn = frame_stats(b_all), frame_stats(n_all)
    out.update(
        p99_base_ms=fb.p99_ms, p99_new_ms=fn.p99_ms,
        fps_low_1pct_base=fb.fps_low_1pct, fps_low_1pct_new=fn.fps_low_1pct,
        stutter_pct_base=fb.stutter_pct, stutter_pct_new=fn.stutter_pct,
        frame_ratio=fn.median_ms / fb.median_ms,
        frame_p_value=_mwu_p(b_all, n_all),
    )
    med_b = np.array([np.median(r) for r in b_runs])
    med_n = np.array([np.median(r) for r in n_runs])
    out["run_cv_base"], out["run_cv_new"] = _cv(med_b), _cv(med_n)
    confidence = 1.0 - 2.0 * alpha
    out["confidence"] = confidence
    if min(len(b_runs), len(n_runs)) >= MIN_RUNS_FOR_RUN_LEVEL:
        lb, ln = np.log(med_b), np.log(med_n)
        lo, hi = _bootstrap_ci(lb, ln, _log_mean_diff, confidence, seed, "BCa")
        out.update(
            unit="runs",
            median_base_ms=math.exp(float(lb.mean())) / 1e6,
            median_new_ms=math.exp(float(ln.mean())) / 1e6,
            ratio=math.exp(float(ln.mean() - lb.mean())),
            ci_low=math.exp(lo), ci_high=math.exp(hi),
            p_value=_mwu_p(med_b, med_n),
        )
        resid = np.concatenate([lb - lb.mean(), ln - ln.mean()])
        dof = lb.size + ln.size - 2
        out["_sd_log"] = float(np.sqrt(np.sum(resid**2) / dof)) if dof > 0 else math.nan
    else:
        lo, hi = _bootstrap_ci(b_all, n_all, _log_median_ratio, confidence, seed, "percentile")
        out.update(
            unit="frames",
            median_base_ms=fb.median_ms, median_new_ms=fn.median_ms,
            ratio=fn.median_ms / fb.median_ms,
            ci_low=math.exp(lo), ci_high=math.exp(hi),
            p_value=out["frame_p_value"],
        )
        logs = np.concatenate([np.log(b_all) - np.median(np.log(b_all)),
                               np.log(n_all) - np.median(np.log(n_all))])
        # robust sd of log frame times, x1.25 for the median's lower efficiency
        out["_sd_log"] = 1.4826 * float(np.median(np.abs(logs))) * 1.2533
    return out


def _decide(m: dict[str, Any], p_holm: float, threshold: float, alpha: float,
            n_tests: int) -> SceneComparison:
    """Turn measured figures and the Holm-adjusted p into a verdict (rule in the module doc)."""
    sd_log = m.pop("_sd_log", math.nan)
    notes: list[str] = []
    up, down = 1.0 + threshold, 1.0 / (1.0 + threshold)
    thr_pct = threshold * 100.0
    unit = m.get("unit", "")
    if unit == "frames":
        notes.append(
            f"with {m['runs_base']} run(s) vs {m['runs_new']}, run-to-run noise is unknown: the p-value "
            f"and interval cover only frame-to-frame noise, so only the {thr_pct:g}% threshold guards "
            f"against run-to-run differences; for a test, use >= {min_runs_for_alpha(alpha / max(n_tests, 1))} "
            "runs a side (katra3d ab)")
    base = dict(m, p_holm=p_holm, notes=())
    if min(m["frames_base"], m["frames_new"]) < MIN_FRAMES:
        return SceneComparison(**dict(base, verdict="inconclusive", frames_needed=MIN_FRAMES, notes=tuple(notes),
                                      reason=f"too few frames ({m['frames_base']} base, {m['frames_new']} new; "
                                             f"need >= {MIN_FRAMES} a side)"))
    ratio = m["ratio"]
    sig = p_holm < alpha
    change = f"{(ratio - 1) * 100:+.1f}%"
    if sig and ratio >= up:
        return SceneComparison(**dict(base, verdict="regression", notes=tuple(notes),
                                      reason=f"{change} slower (p={p_holm:.2g} on {unit}, threshold {thr_pct:g}%)"))
    if sig and ratio <= down:
        return SceneComparison(**dict(base, verdict="improvement", notes=tuple(notes),
                                      reason=f"{change} (p={p_holm:.2g} on {unit}, threshold {thr_pct:g}%)"))
    if unit == "runs":
        k_min = min_runs_for_alpha(alpha / max(n_tests, 1))
        if min(m["runs_base"], m["runs_new"]) < k_min:
            return SceneComparison(**dict(
                base, verdict="inconclusive", runs_needed=k_min, notes=tuple(notes),
                reason=f"{change}; {min(m['runs_base'], m['runs_new'])} runs a side cannot reach "
                       f"alpha={alpha:g} over {n_tests} scene(s): need >= {k_min} runs a side"))
    lo, hi = m.get("ci_low", math.nan), m.get("ci_high", math.nan)
    if math.isfinite(lo) and math.isfinite(hi) and down < lo and hi < up:
        return SceneComparison(**dict(base, verdict="unchanged", notes=tuple(notes),
                                      reason=f"{change}; interval within +-{thr_pct:g}%"))
    if sig:
        return SceneComparison(**dict(base, verdict="unchanged", notes=tuple(notes),
                                      reason=f"significant {change} change, below the {thr_pct:g}% threshold"))
    needed = _needed(sd_log, threshold, alpha, n_tests)
    if unit == "runs":
        k_min = min_runs_for_alpha(alpha / max(n_tests, 1))
        needed = max(needed or k_min, k_min)
        cv = np.nanmean([m.get("run_cv_base", math.nan), m.get("run_cv_new", math.nan)]) * 100
        return SceneComparison(**dict(
            base, verdict="inconclusive", runs_needed=needed, notes=tuple(notes),
            reason=f"{change}, not significant (p={p_holm:.2g}); run-to-run CV {cv:.1f}%: "
                   f"~{needed} runs a side needed to resolve a {thr_pct:g}% change"))
    return SceneComparison(**dict(
        base, verdict="inconclusive", frames_needed=needed, notes=tuple(notes),
        reason=f"{change}, not significant (p={p_holm:.2g}): too noisy; "
               f"~{needed} frames a side needed to resolve a {thr_pct:g}% change"))


def compare_runs(
    base: Mapping[str, Sequence[np.ndarray]],
    new: Mapping[str, Sequence[np.ndarray]],
    *,
    threshold_pct: float = 5.0,
    alpha: float = 0.01,
    seed: int = 0,
    metric: str = "",
    incomparable: Mapping[str, str] | None = None,
) -> Comparison:
    """Compare per-run frame durations (ns), scene by scene.

    Args:
        base, new: ``{scene: [dur_ns array of run 1, run 2, ...]}``.
        threshold_pct: minimum effect in percent (5 = 5%).
        alpha: significance level after Holm correction across scenes.
        seed: bootstrap seed (results are deterministic for a seed).
        metric: the clock compared, recorded in the result.
        incomparable: ``{scene: reason}`` for scenes that must not be compared.
    """
    if not 0 < alpha < 0.5:
        raise ValueError(f"alpha must be in (0, 0.5), got {alpha}")
    if not threshold_pct >= 0:
        raise ValueError(f"threshold must be >= 0 percent, got {threshold_pct}")
    incomparable = dict(incomparable or {})
    threshold = threshold_pct / 100.0
    names = list(dict.fromkeys([*base, *new, *incomparable]))
    results: dict[str, SceneComparison] = {}
    measured: dict[str, dict[str, Any]] = {}
    for i, scene in enumerate(names):
        if scene in incomparable:
            results[scene] = SceneComparison(scene=scene, verdict="incomparable",
                                             reason=incomparable[scene], metric=metric)
        elif scene not in base or not _clean_runs(base[scene]):
            results[scene] = SceneComparison(scene=scene, verdict="incomparable",
                                             reason="missing in BASE (no measured frames)", metric=metric)
        elif scene not in new or not _clean_runs(new[scene]):
            results[scene] = SceneComparison(scene=scene, verdict="incomparable",
                                             reason="missing in NEW (no measured frames)", metric=metric)
        else:
            measured[scene] = _measure_scene(scene, base[scene], new[scene], alpha, seed + i, metric)
    tested = [s for s in measured if min(measured[s]["frames_base"], measured[s]["frames_new"]) >= MIN_FRAMES]
    adjusted = dict(zip(tested, holm([measured[s]["p_value"] for s in tested]), strict=True))
    for scene, m in measured.items():
        results[scene] = _decide(m, adjusted.get(scene, m.get("p_value", math.nan)), threshold, alpha,
                                 max(len(tested), 1))
    return Comparison(scenes=tuple(results[s] for s in names), threshold_pct=threshold_pct,
                      alpha=alpha, metric=metric)


__all__ = [
    "Comparison",
    "MIN_FRAMES",
    "MIN_RUNS_FOR_RUN_LEVEL",
    "SceneComparison",
    "VERDICTS",
    "compare_runs",
    "holm",
    "min_runs_for_alpha",
]


