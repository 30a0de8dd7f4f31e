"""The decision of a comparison: statistics and verdicts on per-run frame durations.

Pure: numpy and scipy only, no GL, no I/O. The rule is documented in
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
from collections.abc import Mapping, Sequence

import numpy as np

from katra_trace.analysis.counts import NOISE_FLOOR_FACTOR, decide_counts
from katra_trace.analysis.defaults import (
    DEFAULT_ALPHA,
    FEW_RUNS_RULE,
    check_alpha,
    check_threshold_pct,
    default_threshold_pct,
    runs_decide,
)
from katra_trace.analysis.intervals import (
    MIN_RUNS,
    TInterval,
    clean,
    clean_runs,
    cv,
    frame_figures,
    geometric_mean,
    holm,
    paired_t,
    runs_needed,
    settling_margin,
    welch,
)
from katra_trace.analysis.sequential import SequentialRule, look
from katra_trace.analysis.verdict import Comparison, SceneComparison, Verdict
from katra_trace.metrics import check_run_stat, is_count
from katra_trace.units import format_change

#: Fewer measured frames than this on a side: inconclusive (time metrics).
MIN_FRAMES = 20
#: Kept for callers of the earlier name.
MIN_RUNS_FOR_RUN_LEVEL = MIN_RUNS

# --------------------------------------------------------------------------- time metrics


def run_level(values: np.ndarray, stat: str = "median") -> float:
    """One run's level on a time metric: the median of its frames, or their 10th percentile
    (``p10``).
    """
    if check_run_stat(stat) == "p10":
        return float(np.percentile(values, 10))
    return float(np.median(values))


def _measure_time(
    scene: str,
    b_runs: list[np.ndarray],
    n_runs: list[np.ndarray],
    paired: bool,
    alpha: float,
    metric: str,
    value_unit: str,
    run_stat: str = "median",
    drift_sd: float = 0.0,
) -> tuple[SceneComparison, _Spread]:
    """Effect, one-sided p, interval and side figures of one scene (its verdict not decided yet),
    and the spread the verdict needs."""
    b_all, n_all = np.concatenate(b_runs), np.concatenate(n_runs)
    med_b = np.array([run_level(r, run_stat) for r in b_runs])
    med_n = np.array([run_level(r, run_stat) for r in n_runs])
    lb, ln = np.log(med_b), np.log(med_n)
    scale = 1e-6 if value_unit == "ms" else 1.0
    level_base, level_new = geometric_mean(med_b) * scale, geometric_mean(med_n) * scale
    out = SceneComparison(
        scene=scene,
        verdict=Verdict.INCONCLUSIVE,
        reason="",
        metric=metric,
        value_unit=value_unit,
        paired=paired,
        unit="rounds" if paired else "runs",
        runs_base=len(b_runs),
        runs_new=len(n_runs),
        frames_base=int(b_all.size),
        frames_new=int(n_all.size),
        confidence=1.0 - 2.0 * alpha,
        run_cv_base=cv(med_b),
        run_cv_new=cv(med_n),
        stat=run_stat,
        level_base=level_base,
        level_new=level_new,
        level_base_ms=level_base if value_unit == "ms" else math.nan,
        level_new_ms=level_new if value_unit == "ms" else math.nan,
    )
    # frame pacing (p99, 1 % low, stutter) is in ms: not for values in other units (x reference)
    out = frame_figures(out, b_all, n_all, count=value_unit != "ms")
    if not runs_decide(metric, min(len(b_runs), len(n_runs))):
        # the ratio of the levels shown beside it (each side's run statistic), as with runs
        ratio = out.level_new / out.level_base if out.level_base > 0 else math.nan
        return dataclasses.replace(out, unit="frames", ratio=ratio), _Spread()
    drift_sd = 0.0 if paired else drift_sd
    t = paired_t(ln - lb) if paired else welch(lb, ln, drift_sd)
    lo, hi = t.interval(out.confidence)
    out = dataclasses.replace(
        out,
        ratio=math.exp(t.estimate),
        ci_low=math.exp(lo),
        ci_high=math.exp(hi),
        p_value=t.p_directional(),
        dof=t.dof,
        drift_allowance_pct=100.0 * math.expm1(drift_sd) if drift_sd else math.nan,
    )
    if paired:
        pair_cv = float((ln - lb).std(ddof=1))
        return dataclasses.replace(out, pair_cv=pair_cv), _Spread(pair_cv, drift_sd, ln - lb)
    resid = np.concatenate([lb - lb.mean(), ln - ln.mean()])
    return out, _Spread(float(np.sqrt(np.sum(resid**2) / (resid.size - 2))), drift_sd)


@dataclasses.dataclass(frozen=True)
class _Spread:
    """What a time verdict needs beside the figures: the sd of the log run levels (or of the
    rounds' log ratios), the drift allowed between separate batches, and the rounds' log ratios."""

    sd_log: float = math.nan
    drift_sd: float = 0.0
    log_ratios: np.ndarray | None = None


def _decide_time(
    m: SceneComparison,
    spread: _Spread,
    p_holm: float,
    threshold: float,
    alpha: float,
    n_tests: int,
) -> SceneComparison:
    """Turn measured figures and the Holm-adjusted p into a verdict (rule in the module doc)."""
    sd_log, drift_sd = spread.sd_log, spread.drift_sd
    up, down = 1.0 + threshold, 1.0 / (1.0 + threshold)
    thr_pct = threshold * 100.0
    base = dataclasses.replace(m, p_holm=p_holm)
    word = "rounds" if m.paired else "runs"
    if min(m.frames_base, m.frames_new) < MIN_FRAMES:
        return dataclasses.replace(
            base,
            verdict=Verdict.INCONCLUSIVE,
            frames_needed=MIN_FRAMES,
            reason=f"too few frames ({m.frames_base} base, {m.frames_new} new; "
            f"need >= {MIN_FRAMES} a side)",
        )
    if m.unit == "frames":
        frames = f"{format_change(m.frame_ratio)} (p={m.frame_p_value:.2g})"
        return dataclasses.replace(
            base,
            verdict=Verdict.INCONCLUSIVE,
            runs_needed=MIN_RUNS,
            reason=f"run-to-run noise unknown ({m.runs_base} vs {m.runs_new} {word}): "
            f"need >= {MIN_RUNS} "
            f"{word} a side (katra3d ab); frame medians, for information only: {frames}",
            notes=(
                f"{FEW_RUNS_RULE}: frames of one run share that run's luck, and 11 of 40 "
                "single-run A/A comparisons measured on llvmpipe said 'regression' "
                "(docs/stats.md)",
            ),
        )
    ratio = m.ratio
    change = format_change(ratio)
    lo, hi = m.ci_low, m.ci_high
    interval = f"[{format_change(lo)}, {format_change(hi)}]"
    if drift_sd:
        interval += f" (allowing +-{m.drift_allowance_pct:.1f}% drift between separate batches)"
    sig = p_holm < alpha
    if sig and ratio >= up:
        return dataclasses.replace(
            base,
            verdict=Verdict.REGRESSION,
            reason=f"{change} slower, interval {interval} (p={p_holm:.2g} on {word}, "
            f"threshold {thr_pct:g}%)",
        )
    if sig and ratio <= down:
        return dataclasses.replace(
            base,
            verdict=Verdict.IMPROVEMENT,
            reason=f"{change}, interval {interval} (p={p_holm:.2g} on {word}, "
            f"threshold {thr_pct:g}%)",
        )
    if down < lo and hi < up:
        return dataclasses.replace(
            base,
            verdict=Verdict.UNCHANGED,
            reason=f"{change}; interval {interval} within +-{thr_pct:g}%",
        )
    margin = settling_margin(math.log(ratio), threshold)
    needed = runs_needed(sd_log, margin, alpha, n_tests, m.paired, drift_sd)
    have = min(m.runs_base, m.runs_new)
    if needed is not None:
        needed = max(needed, have + 1)
    why = (
        f"significant but below the {thr_pct:g}% threshold, and the interval {interval} does not "
        "rule "
        f"out {thr_pct:g}%"
        if sig
        else f"interval {interval}, p={p_holm:.2g}"
    )
    cv = sd_log * 100
    if needed:
        need = f"~{needed} {word} a side would decide about the {change} seen"
    elif drift_sd and runs_needed(sd_log, margin, alpha, n_tests, m.paired) is not None:
        need = (
            f"no number of runs outweighs the +-{m.drift_allowance_pct:.1f}% drift allowed "
            "between sides "
            f"captured in separate batches: katra3d ab interleaves the runs"
        )
    else:
        need = f"no number of {word} decides a change this close to the {thr_pct:g}% threshold"
    return dataclasses.replace(
        base,
        verdict=Verdict.INCONCLUSIVE,
        runs_needed=needed,
        reason=f"{change}: {why}; {'round-to-round' if m.paired else 'run-to-run'} spread "
        f"{cv:.1f}%: "
        f"{need}",
    )


def _decide_sequential(
    m: SceneComparison, spread: _Spread, rule: SequentialRule, n_tests: int
) -> SceneComparison:
    """The verdict of paired rounds under a stopping rule for repeated looks (``ab
    --until-decided``): the rule's repeated interval in place of the fixed-sample one
    (docs/stats.md, "Stopping when decided")."""
    assert spread.log_ratios is not None  # paired rounds record them
    seen = look(rule, spread.log_ratios, tests=n_tests)
    return dataclasses.replace(
        m,
        verdict=seen.verdict,
        reason=f"sequential: {seen.reason}",
        ci_low=seen.ci_low,
        ci_high=seen.ci_high,
        confidence=seen.confidence,
    )


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
    sequential: SequentialRule | None = None,
    drift_sd: float = 0.0,
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
        sequential: paired rounds of a time metric are judged by this stopping rule for repeated
        looks
            (:func:`katra_trace.analysis.sequential.look`, alpha split over the scenes); its alpha
            and threshold replace ``alpha`` and ``threshold_pct`` (counts too). Unpaired runs ignore
            it.
        drift_sd: unpaired runs of a time metric whose sides were captured in separate batches: the
        drift
            between batches to allow for (sd of a log ratio;
            :func:`katra_trace.analysis.intervals.welch`).
    """
    del seed
    if sequential is not None:
        alpha, threshold_pct = sequential.alpha, sequential.threshold_pct
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
    measured: dict[str, tuple[SceneComparison, _Spread]] = {}
    for scene in names:
        if scene in incomparable:
            results[scene] = SceneComparison(
                scene=scene, verdict=Verdict.INCOMPARABLE, reason=incomparable[scene], metric=metric
            )
            continue
        b_src, n_src = base.get(scene, ()), new.get(scene, ())
        if paired:
            pairs = [
                (b, n) for b, n in zip(b_src, n_src, strict=True) if clean(b).size and clean(n).size
            ]
            b_runs, n_runs = [clean(b) for b, _ in pairs], [clean(n) for _, n in pairs]
        else:
            b_runs, n_runs = clean_runs(b_src), clean_runs(n_src)
        if not b_runs or not n_runs:
            side = "BASE" if not clean_runs(b_src) else "NEW"
            if paired and clean_runs(b_src) and clean_runs(n_src):
                reason = "no round has measured frames on both sides"
            else:
                reason = f"missing in {side} (no measured frames)"
            results[scene] = SceneComparison(
                scene=scene, verdict=Verdict.INCOMPARABLE, reason=reason, metric=metric
            )
        elif count:
            results[scene] = decide_counts(
                scene, b_runs, n_runs, threshold=threshold, metric=metric
            )
        else:
            measured[scene] = _measure_time(
                scene, b_runs, n_runs, paired, alpha, metric, unit, run_stat, drift_sd
            )
    tested = [
        s
        for s, (m, _) in measured.items()
        if m.unit != "frames" and min(m.frames_base, m.frames_new) >= MIN_FRAMES
    ]
    adjusted = dict(zip(tested, holm([measured[s][0].p_value for s in tested]), strict=True))
    for scene, (m, spread) in measured.items():
        if sequential is not None and paired and scene in adjusted:
            results[scene] = _decide_sequential(m, spread, sequential, len(tested))
            continue
        results[scene] = _decide_time(
            m, spread, adjusted.get(scene, math.nan), threshold, alpha, max(len(tested), 1)
        )
    return Comparison(
        scenes=tuple(results[s] for s in names),
        threshold_pct=threshold_pct,
        alpha=alpha,
        metric=metric,
        paired=paired,
        run_stat="median" if count else run_stat,
    )


__all__ = [
    "MIN_FRAMES",
    "MIN_RUNS",
    "MIN_RUNS_FOR_RUN_LEVEL",
    "NOISE_FLOOR_FACTOR",
    "TInterval",
    "compare_runs",
    "decide_counts",
    "holm",
    "paired_t",
    "run_level",
    "runs_needed",
    "welch",
]
