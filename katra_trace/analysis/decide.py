"""The decision of a comparison: statistics and verdicts on per-run frame durations.

Pure: numpy and scipy.stats only, no GL, no I/O. The rule is documented in
docs/stats.md; in short (``thr`` = threshold, ``up = 1 + thr``,
``down = 1 / (1 + thr)``, the interval at confidence ``1 - 2 alpha``):

* **Time metrics** (wall, cpu, gpu, process, wall/reference): the run is the unit of
  evidence. Each run is reduced to its median frame time (or, with ``run_stat``
  ``p10``, the 10th percentile of its frames); the effect is the ratio of the
  geometric means of the per-run levels, NEW / BASE.

  - unpaired runs: Welch's t on the log per-run medians (each side's real
    run count), Welch-Satterthwaite degrees of freedom;
  - paired rounds (``katra3d ab``): a paired t on the per-round log ratios.

  The p-value is one-sided in the direction of the observed change and is
  Holm-corrected across the scenes compared. Verdicts, in order:

  1. fewer than :data:`MIN_FRAMES` frames on a side -> inconclusive;
  2. fewer than :data:`MIN_RUNS` runs (or rounds) a side -> inconclusive
     "(run-to-run noise unknown)"; the frame-level change is information only;
  3. ``p_holm < alpha`` and ratio >= up -> regression;
     ``p_holm < alpha`` and ratio <= down -> improvement;
  4. the whole interval inside (down, up) -> unchanged;
  5. otherwise inconclusive, with an estimate of the runs a side needed.

* **Count metrics** (instructions, cycles) are deterministic: one run a side
  is evidence. No p-value: the change is set against the threshold and
  against a measured noise floor ``f`` (the relative spread of per-run
  medians when a side has several runs, else across steady frames); the
  band is ``log ratio +- NOISE_FLOOR_FACTOR * f``. Regression when the ratio
  is >= up and the whole band is above 1 (improvement mirrored); unchanged
  when the whole band lies inside (down, up); otherwise inconclusive.
  With one run a side and the same frames, the floor is the spread of the
  per-frame ratios (frame i of NEW against frame i of BASE).

  When every run of both sides has the same number of frames, the change is
  the median of the per-frame log ratios, frame i of NEW against frame i of
  BASE (each side's frame i is its median over runs): a scene animates, so
  its frames differ in work by design, and a ratio of two medians can set
  frame 3 of one side against frame 1 of the other. Beside the statistical
  floor, the band is never narrower than the measured cross-process jitter
  :data:`~katra_trace.analysis.defaults.COUNT_JITTER_PER_FRAME` over the
  frame's count: a few hundred instructions are nothing on a frame of
  millions and most of a 0.5 % threshold on a 32x32 frame.
"""

from __future__ import annotations

import dataclasses
import math
import warnings
from collections.abc import Mapping, Sequence
from typing import Any

import numpy as np
from scipy import stats as sps

from katra_trace.analysis.defaults import (
    COUNT_JITTER_PER_FRAME,
    DEFAULT_ALPHA,
    check_alpha,
    check_threshold_pct,
    default_threshold_pct,
)
from katra_trace.analysis.stats import frame_stats
from katra_trace.analysis.verdict import Comparison, SceneComparison
from katra_trace.metrics import check_run_stat, is_count

#: Fewer measured frames than this on a side: inconclusive (time metrics).
MIN_FRAMES = 20
#: Fewer measured frames than this on a side: inconclusive (count metrics).
MIN_FRAMES_COUNTS = 1
#: Runs (or paired rounds) a side below which run-to-run noise is unknown (time metrics).
MIN_RUNS = 3
#: Kept for callers of the earlier name.
MIN_RUNS_FOR_RUN_LEVEL = MIN_RUNS
#: Power assumed when estimating how many runs would be needed.
TARGET_POWER = 0.8
#: Half-width of the count metrics' band, in noise floors.
NOISE_FLOOR_FACTOR = 3.0

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
        running = max(running, min(1.0, (m - rank) * float(p[idx])))
        adjusted[idx] = running
    return [float(v) for v in adjusted]


def _mwu_p(x: np.ndarray, y: np.ndarray) -> float:
    """Two-sided Mann-Whitney U p-value: exact for small tie-free samples, else asymptotic."""
    ties = np.unique(np.concatenate([x, y])).size < x.size + y.size
    method = "exact" if (not ties and x.size <= 50 and y.size <= 50) else "asymptotic"
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        res = sps.mannwhitneyu(y, x, alternative="two-sided", method=method)
    p = float(res.pvalue)
    return p if math.isfinite(p) else 1.0


def _cv(values: np.ndarray) -> float:
    if values.size < 2:
        return math.nan
    mean = float(values.mean())
    return float(values.std(ddof=1)) / mean if mean > 0 else math.nan


def geometric_mean(values: np.ndarray) -> float:
    """Geometric mean of positive values, exact when they are all equal (one run's count stays whole)."""
    first = float(values[0])
    return first * math.exp(float(np.mean(np.log(values / first))))


def _clean(run: np.ndarray) -> np.ndarray:
    d = np.asarray(run, dtype=np.float64)
    return d[np.isfinite(d) & (d > 0)]


def _clean_runs(runs: Sequence[np.ndarray]) -> list[np.ndarray]:
    return [d for d in (_clean(r) for r in runs) if d.size]


@dataclasses.dataclass(frozen=True)
class TInterval:
    """A t-based estimate of a log ratio: estimate, standard error, degrees of freedom."""

    estimate: float
    se: float
    dof: float

    def interval(self, confidence: float) -> tuple[float, float]:
        """Two-sided interval of the log ratio at ``confidence``."""
        if self.se == 0:
            return self.estimate, self.estimate
        q = float(sps.t.ppf(0.5 + confidence / 2.0, self.dof))
        return self.estimate - q * self.se, self.estimate + q * self.se

    def p_directional(self) -> float:
        """One-sided p-value in the direction of the estimate (0 when se is 0 and estimate != 0)."""
        if self.se == 0:
            return 0.0 if self.estimate != 0 else 1.0
        return float(sps.t.sf(abs(self.estimate) / self.se, self.dof))


def welch(log_base: np.ndarray, log_new: np.ndarray) -> TInterval:
    """Welch's t for mean(log_new) - mean(log_base) (each side >= 2 values)."""
    nb, nn = log_base.size, log_new.size
    vb = float(log_base.var(ddof=1)) / nb
    vn = float(log_new.var(ddof=1)) / nn
    est = float(log_new.mean() - log_base.mean())
    se2 = vb + vn
    if se2 == 0:
        return TInterval(est, 0.0, float(nb + nn - 2))
    denom = (vb * vb / (nb - 1) if vb else 0.0) + (vn * vn / (nn - 1) if vn else 0.0)
    dof = se2 * se2 / denom
    return TInterval(est, math.sqrt(se2), dof)


def paired_t(log_ratios: np.ndarray) -> TInterval:
    """Paired t on per-round log ratios (>= 2 rounds)."""
    k = log_ratios.size
    return TInterval(float(log_ratios.mean()), float(log_ratios.std(ddof=1)) / math.sqrt(k), float(k - 1))


def runs_needed(sd_log: float, threshold: float, alpha: float, m: int, paired: bool) -> int | None:
    """Runs (rounds) a side for a one-sided t at alpha / m to detect a ``threshold`` change.

    ``sd_log``: the spread of one run's log median (unpaired) or of one
    round's log ratio (paired); power :data:`TARGET_POWER`.
    """
    if not math.isfinite(sd_log) or sd_log <= 0 or threshold <= 0:
        return None
    delta = math.log1p(threshold)
    a = alpha / max(m, 1)
    z = float(sps.norm.ppf(1 - a)) + float(sps.norm.ppf(TARGET_POWER))
    n_normal = (z * sd_log / delta) ** 2 * (1 if paired else 2)  # t quantiles only make it larger
    if n_normal > 100_000:
        return None
    n = np.arange(max(MIN_RUNS, math.floor(n_normal)), math.ceil(2 * n_normal) + 12, dtype=np.float64)
    dof = n - 1 if paired else 2 * n - 2
    se = sd_log / np.sqrt(n) if paired else sd_log * np.sqrt(2.0 / n)
    ok = (sps.t.ppf(1 - a, dof) + sps.t.ppf(TARGET_POWER, dof)) * se <= delta
    return int(n[np.argmax(ok)]) if ok.any() else None


def interval_verdict(estimate: float, low: float, high: float, threshold: float) -> str:
    """The verdict of an effect known with an interval (all three log ratios NEW / BASE, ``+`` worse)
    against ``threshold`` (a fraction): the count metrics' rule, also ``history check``'s for a step.

    **regression** when the estimate is at least ``log(1 + threshold)`` and the whole interval is above
    0; **improvement** mirrored; **unchanged** when the whole interval lies inside the +-threshold
    band; otherwise **inconclusive**.
    """
    up = math.log1p(threshold)
    if estimate >= up and low > 0:
        return "regression"
    if estimate <= -up and high < 0:
        return "improvement"
    if -up < low and high < up:
        return "unchanged"
    return "inconclusive"


# --------------------------------------------------------------------------- time metrics


def _frame_figures(b_all: np.ndarray, n_all: np.ndarray, count: bool) -> dict[str, Any]:
    """Pooled-frame change and p (information); frame-pacing figures unless ``count`` (not times in ns)."""
    out: dict[str, Any] = {"frame_ratio": float(np.median(n_all) / np.median(b_all)),
                           "frame_p_value": _mwu_p(b_all, n_all)}
    if not count:
        fb, fn = frame_stats(b_all), frame_stats(n_all)
        out.update(p99_base_ms=fb.p99_ms, p99_new_ms=fn.p99_ms,
                   fps_low_1pct_base=fb.fps_low_1pct, fps_low_1pct_new=fn.fps_low_1pct,
                   stutter_pct_base=fb.stutter_pct, stutter_pct_new=fn.stutter_pct)
    return out


def run_level(values: np.ndarray, stat: str = "median") -> float:
    """One run's level on a time metric: the median of its frames, or their 10th percentile (``p10``)."""
    if check_run_stat(stat) == "p10":
        return float(np.percentile(values, 10))
    return float(np.median(values))


def _measure_time(scene: str, b_runs: list[np.ndarray], n_runs: list[np.ndarray], paired: bool,
                  alpha: float, metric: str, value_unit: str, run_stat: str = "median") -> dict[str, Any]:
    """Effect, one-sided p, interval and side figures of one scene (no verdict yet)."""
    b_all, n_all = np.concatenate(b_runs), np.concatenate(n_runs)
    out: dict[str, Any] = {
        "scene": scene, "metric": metric, "value_unit": value_unit, "paired": paired,
        "unit": "rounds" if paired else "runs",
        "runs_base": len(b_runs), "runs_new": len(n_runs),
        "frames_base": int(b_all.size), "frames_new": int(n_all.size),
        "confidence": 1.0 - 2.0 * alpha,
    }
    # frame pacing (p99, 1 % low, stutter) is in ms: not for values in other units (x reference)
    out.update(_frame_figures(b_all, n_all, count=value_unit != "ms"))
    med_b = np.array([run_level(r, run_stat) for r in b_runs])
    med_n = np.array([run_level(r, run_stat) for r in n_runs])
    lb, ln = np.log(med_b), np.log(med_n)
    scale = 1e-6 if value_unit == "ms" else 1.0
    out.update(run_cv_base=_cv(med_b), run_cv_new=_cv(med_n),
               median_base=geometric_mean(med_b) * scale, median_new=geometric_mean(med_n) * scale)
    if value_unit == "ms":
        out.update(median_base_ms=out["median_base"], median_new_ms=out["median_new"])
    if min(len(b_runs), len(n_runs)) < MIN_RUNS:
        out["unit"] = "frames"
        out["ratio"] = out["frame_ratio"]
        return out
    t = paired_t(ln - lb) if paired else welch(lb, ln)
    lo, hi = t.interval(out["confidence"])
    out.update(ratio=math.exp(t.estimate), ci_low=math.exp(lo), ci_high=math.exp(hi),
               p_value=t.p_directional(), dof=t.dof)
    if paired:
        out["pair_cv"] = float((ln - lb).std(ddof=1))
        out["_sd_log"] = out["pair_cv"]
    else:
        resid = np.concatenate([lb - lb.mean(), ln - ln.mean()])
        out["_sd_log"] = float(np.sqrt(np.sum(resid**2) / (resid.size - 2)))
    return out


def _decide_time(m: dict[str, Any], p_holm: float, threshold: float, alpha: float,
                 n_tests: int) -> SceneComparison:
    """Turn measured figures and the Holm-adjusted p into a verdict (rule in the module doc)."""
    sd_log = m.pop("_sd_log", math.nan)
    up, down = 1.0 + threshold, 1.0 / (1.0 + threshold)
    thr_pct = threshold * 100.0
    unit = m["unit"]
    base = dict(m, p_holm=p_holm)
    word = "rounds" if m["paired"] else "runs"
    if min(m["frames_base"], m["frames_new"]) < MIN_FRAMES:
        return SceneComparison(**dict(base, verdict="inconclusive", frames_needed=MIN_FRAMES,
                                      reason=f"too few frames ({m['frames_base']} base, {m['frames_new']} new; "
                                             f"need >= {MIN_FRAMES} a side)"))
    if unit == "frames":
        frames = f"{(m['frame_ratio'] - 1) * 100:+.1f}% (p={m['frame_p_value']:.2g})"
        return SceneComparison(**dict(
            base, verdict="inconclusive", runs_needed=MIN_RUNS,
            reason=f"run-to-run noise unknown ({m['runs_base']} vs {m['runs_new']} {word}): need >= {MIN_RUNS} "
                   f"{word} a side (katra3d ab); frames, for information only: {frames}",
            notes=(f"with fewer than {MIN_RUNS} runs a side a time metric never gives a verdict: frames of "
                   "one run share that run's luck, and 11 of 40 single-run A/A comparisons measured on "
                   "llvmpipe said 'regression' (docs/stats.md)",)))
    ratio = m["ratio"]
    change = f"{(ratio - 1) * 100:+.1f}%"
    lo, hi = m["ci_low"], m["ci_high"]
    interval = f"[{(lo - 1) * 100:+.1f}%, {(hi - 1) * 100:+.1f}%]"
    sig = p_holm < alpha
    if sig and ratio >= up:
        return SceneComparison(**dict(base, verdict="regression",
                                      reason=f"{change} slower, interval {interval} (p={p_holm:.2g} on {word}, "
                                             f"threshold {thr_pct:g}%)"))
    if sig and ratio <= down:
        return SceneComparison(**dict(base, verdict="improvement",
                                      reason=f"{change}, interval {interval} (p={p_holm:.2g} on {word}, "
                                             f"threshold {thr_pct:g}%)"))
    if down < lo and hi < up:
        return SceneComparison(**dict(base, verdict="unchanged",
                                      reason=f"{change}; interval {interval} within +-{thr_pct:g}%"))
    needed = runs_needed(sd_log, threshold, alpha, n_tests, m["paired"])
    have = min(m["runs_base"], m["runs_new"])
    if needed is not None:
        needed = max(needed, have + 1)
    why = (f"significant but below the {thr_pct:g}% threshold, and the interval {interval} does not rule "
           f"out {thr_pct:g}%" if sig else f"interval {interval}, p={p_holm:.2g}")
    cv = sd_log * 100
    need = f"~{needed} {word} a side needed" if needed else "more runs needed"
    return SceneComparison(**dict(
        base, verdict="inconclusive", runs_needed=needed,
        reason=f"{change}: {why}; {'round-to-round' if m['paired'] else 'run-to-run'} spread {cv:.1f}%: "
               f"{need} to resolve a {thr_pct:g}% change"))


# --------------------------------------------------------------------------- count metrics


def _robust_rel_spread(values: np.ndarray) -> float:
    """1.4826 x MAD of log values: a robust relative sd (0 for identical values)."""
    logs = np.log(values)
    return 1.4826 * float(np.median(np.abs(logs - np.median(logs))))


def _run_offsets(runs: Sequence[np.ndarray]) -> list[float]:
    """Each run's median log ratio to its side's frame-by-frame profile (runs of equal length)."""
    profile = np.median(np.stack(runs), axis=0)
    return [float(np.median(np.log(r / profile))) for r in runs]


def noise_floor(b_runs: Sequence[np.ndarray], n_runs: Sequence[np.ndarray]) -> tuple[float, str]:
    """The relative noise floor of a count metric (an sd on the log scale) and where it came from.

    * a side has >= 2 runs: the sd of its runs' levels (the larger side's); a run's level is
      its median frame, or, when all frames match by index, its median log ratio to the
      side's frame-by-frame profile (so the animation's differences between frames do not count);
    * one run a side with the same frames: the robust spread (1.4826 x MAD) of
      the per-frame log ratios NEW/BASE, frame i against frame i. A scene's
      frames may differ in work (animation), but the same frame of two runs does
      the same work, so what the ratios spread by is noise;
    * otherwise the robust spread of each side's log frame counts (the larger).

    The median absolute deviation ignores the few frames that carry the
    harness's periodic work.
    """
    sides = [r for r in (b_runs, n_runs) if len(r) >= 2]
    if sides:
        matched = matched_profiles(b_runs, n_runs) is not None
        sds = [float(np.array(_run_offsets(runs) if matched else np.log([np.median(x) for x in runs])).std(ddof=1))
               for runs in sides]
        return max(sds), "across runs"
    if len(b_runs) == len(n_runs) == 1 and b_runs[0].size == n_runs[0].size:
        return _robust_rel_spread(n_runs[0] / b_runs[0]), "across matched steady frames"
    spreads = [_robust_rel_spread(np.concatenate(runs)) for runs in (b_runs, n_runs)]
    return max(spreads), "across steady frames"


def matched_profiles(b_runs: Sequence[np.ndarray],
                     n_runs: Sequence[np.ndarray]) -> tuple[np.ndarray, np.ndarray] | None:
    """Each side's frame-by-frame profile (frame i's median over the side's runs) when every run of
    both sides has the same number of frames, else None (the frames cannot be matched by index)."""
    sizes = {r.size for r in (*b_runs, *n_runs)}
    if len(sizes) != 1 or not b_runs or not n_runs:
        return None
    return np.median(np.stack(b_runs), axis=0), np.median(np.stack(n_runs), axis=0)


def decide_counts(scene: str, base_runs: Sequence[np.ndarray], new_runs: Sequence[np.ndarray], *,
                  threshold: float, metric: str, zone: str = "",
                  frame_base: float | None = None) -> SceneComparison:
    """Verdict of a deterministic count metric (instructions, cycles) for one scene or zone.

    ``frame_base``: for a zone, the scene's BASE count per frame. A zone is then
    judged by what its change does to the frame (its change in counts over the
    frame's count, ``frame_change_pct``), so that a small zone's jitter does not
    read as a regression of the frame; ``ratio`` stays the zone's own.
    """
    b_runs, n_runs = _clean_runs(base_runs), _clean_runs(new_runs)
    b_all = np.concatenate(b_runs) if b_runs else np.empty(0)
    n_all = np.concatenate(n_runs) if n_runs else np.empty(0)
    m: dict[str, Any] = {"scene": scene, "zone": zone, "metric": metric, "value_unit": metric,
                         "unit": "counts", "runs_base": len(b_runs), "runs_new": len(n_runs),
                         "frames_base": int(b_all.size), "frames_new": int(n_all.size)}
    if min(b_all.size, n_all.size) < MIN_FRAMES_COUNTS:
        side = "BASE" if b_all.size == 0 else "NEW"
        return SceneComparison(**dict(m, verdict="incomparable", reason=f"missing in {side} (no measured frames)"))
    med_b = np.array([np.median(r) for r in b_runs])
    med_n = np.array([np.median(r) for r in n_runs])
    floor, source = noise_floor(b_runs, n_runs)
    profiles = matched_profiles(b_runs, n_runs)
    if profiles is not None:  # frame i against frame i: the median of the per-frame log ratios
        own = float(np.median(np.log(profiles[1] / profiles[0])))
    else:
        own = float(np.log(med_n).mean()) - float(np.log(med_b).mean())
    level_b, level_n = geometric_mean(med_b), geometric_mean(med_n)
    m.update(_frame_figures(b_all, n_all, count=True))
    m.update(median_base=level_b, median_new=level_n, ratio=math.exp(own), noise_floor_pct=floor * 100,
             run_cv_base=_cv(med_b), run_cv_new=_cv(med_n))
    est, scale = own, 1.0
    frame_level = level_b
    if frame_base is not None and frame_base > 0:  # a zone: judged on its share of the frame
        scale = level_b / frame_base
        est = math.log1p(math.expm1(own) * scale)
        m["frame_change_pct"] = math.expm1(est) * 100
        frame_level = frame_base
    jitter = math.log1p(COUNT_JITTER_PER_FRAME / frame_level) if frame_level > 0 else math.inf
    m["jitter_floor_pct"] = math.expm1(jitter) * 100
    spread = max(NOISE_FLOOR_FACTOR * floor * scale, jitter)
    lo, hi = est - spread, est + spread
    m.update(ci_low=math.exp(lo), ci_high=math.exp(hi))
    thr_pct = threshold * 100
    change = f"{math.expm1(own) * 100:+.2f}% {metric}"
    if profiles is not None:
        change += " frame against frame"
    if frame_base is not None:
        change += f" in this zone, {math.expm1(est) * 100:+.2f}% of the frame"
    floor_txt = f"noise floor {floor * 100:.3g}% {source}"
    if jitter > NOISE_FLOOR_FACTOR * floor * scale:
        floor_txt += (f"; cross-process jitter {COUNT_JITTER_PER_FRAME:,} {metric} a frame, "
                      f"{math.expm1(jitter) * 100:.3g}% of this frame")
    band = f"[{math.expm1(lo) * 100:+.2f}%, {math.expm1(hi) * 100:+.2f}%]"
    verdict = interval_verdict(est, lo, hi, threshold)
    if verdict in ("regression", "improvement"):
        return SceneComparison(**dict(m, verdict=verdict, reason=f"{change} (threshold {thr_pct:g}%, {floor_txt})"))
    if verdict == "unchanged":
        return SceneComparison(**dict(m, verdict=verdict, reason=f"{change}, within +-{thr_pct:g}% ({floor_txt})"))
    why = (f"the {floor_txt} is too large for a {thr_pct:g}% threshold"
           if 2 * spread >= math.log1p(threshold)
           else f"the band {band} ({floor_txt}) reaches the +-{thr_pct:g}% threshold")
    return SceneComparison(**dict(m, verdict="inconclusive", reason=f"{change}: {why}"))


# --------------------------------------------------------------------------- entry point


def compare_runs(
    base: Mapping[str, Sequence[np.ndarray]],
    new: Mapping[str, Sequence[np.ndarray]],
    *,
    threshold_pct: float | None = None,
    alpha: float = DEFAULT_ALPHA,
    seed: int = 0,
    metric: str = "",
    incomparable: Mapping[str, str] | None = None,
    paired: bool = False,
    value_unit: str | None = None,
    run_stat: str = "median",
) -> Comparison:
    """Compare per-run durations (ns) or counts, scene by scene.

    Args:
        base, new: ``{scene: [values of run 1, run 2, ...]}`` (frame order).
        threshold_pct: minimum effect in percent; default per metric kind
            (:func:`katra_trace.analysis.defaults.default_threshold_pct`).
        alpha: one-sided false-regression rate per scene, after Holm correction.
        seed: kept for callers; the decision uses no random numbers.
        metric: the metric compared (``instructions``/``cycles`` select the count rule).
        incomparable: ``{scene: reason}`` for scenes that must not be compared.
        paired: ``base[scene][i]`` and ``new[scene][i]`` are one round (same length).
        value_unit: unit of the values' levels; default ms for time metrics, the
            metric's name for counts. Anything else (e.g. ``x reference``) is shown as is.
        run_stat: what reduces a run of a time metric to its level: ``median`` or ``p10``
            (the 10th percentile of its frames). Counts always use the median.
    """
    del seed
    count = is_count(metric)
    alpha = check_alpha(alpha)
    check_run_stat(run_stat)
    threshold_pct = check_threshold_pct(threshold_pct)
    if threshold_pct is None:
        threshold_pct = default_threshold_pct(metric)
    unit = value_unit or (metric if count else "ms")
    incomparable = dict(incomparable or {})
    threshold = threshold_pct / 100.0
    names = list(dict.fromkeys([*base, *new, *incomparable]))
    results: dict[str, SceneComparison] = {}
    measured: dict[str, dict[str, Any]] = {}
    for scene in names:
        if scene in incomparable:
            results[scene] = SceneComparison(scene=scene, verdict="incomparable",
                                             reason=incomparable[scene], metric=metric)
            continue
        b_src, n_src = base.get(scene, ()), new.get(scene, ())
        if paired:
            pairs = [(b, n) for b, n in zip(b_src, n_src, strict=True)
                     if _clean(b).size and _clean(n).size]
            b_runs, n_runs = [_clean(b) for b, _ in pairs], [_clean(n) for _, n in pairs]
        else:
            b_runs, n_runs = _clean_runs(b_src), _clean_runs(n_src)
        if not b_runs or not n_runs:
            side = "BASE" if not _clean_runs(b_src) else "NEW"
            if paired and _clean_runs(b_src) and _clean_runs(n_src):
                reason = "no round has measured frames on both sides"
            else:
                reason = f"missing in {side} (no measured frames)"
            results[scene] = SceneComparison(scene=scene, verdict="incomparable", reason=reason, metric=metric)
        elif count:
            results[scene] = decide_counts(scene, b_runs, n_runs, threshold=threshold, metric=metric)
        else:
            measured[scene] = _measure_time(scene, b_runs, n_runs, paired, alpha, metric, unit, run_stat)
    tested = [s for s in measured if measured[s]["unit"] != "frames"
              and min(measured[s]["frames_base"], measured[s]["frames_new"]) >= MIN_FRAMES]
    adjusted = dict(zip(tested, holm([measured[s]["p_value"] for s in tested]), strict=True))
    for scene, m in measured.items():
        results[scene] = _decide_time(m, adjusted.get(scene, math.nan), threshold, alpha, max(len(tested), 1))
    return Comparison(scenes=tuple(results[s] for s in names), threshold_pct=threshold_pct,
                      alpha=alpha, metric=metric, paired=paired, run_stat="median" if count else run_stat)


__all__ = [
    "MIN_FRAMES",
    "MIN_RUNS",
    "MIN_RUNS_FOR_RUN_LEVEL",
    "NOISE_FLOOR_FACTOR",
    "TInterval",
    "compare_runs",
    "decide_counts",
    "holm",
    "interval_verdict",
    "matched_profiles",
    "noise_floor",
    "paired_t",
    "run_level",
    "runs_needed",
    "welch",
]
