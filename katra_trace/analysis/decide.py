"""The decision of a comparison on per-run values (pure). A time metric's unit of evidence is the
run's level (Welch's or paired t on logs, Holm across scenes); counts go to
:mod:`~katra_trace.analysis.counts`. Rule in docs/stats.md."""

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

MIN_FRAMES = 20
MIN_RUNS_FOR_RUN_LEVEL = MIN_RUNS


def run_level(values: np.ndarray, stat: str = "median") -> float:
    """Its frames' median, or 10th percentile (``p10``)."""
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
    # frame pacing is in ms only
    out = frame_figures(out, b_all, n_all, count=value_unit != "ms")
    if not runs_decide(metric, min(len(b_runs), len(n_runs))):
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
    """The stopping rule's repeated interval in place of the fixed-sample one."""
    assert spread.log_ratios is not None
    seen = look(rule, spread.log_ratios, tests=n_tests)
    return dataclasses.replace(
        m,
        verdict=seen.verdict,
        reason=f"sequential: {seen.reason}",
        ci_low=seen.ci_low,
        ci_high=seen.ci_high,
        confidence=seen.confidence,
    )


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
    """``{scene: [run values (ns or counts)]}`` per side; ``paired``: run i is one round.
    ``sequential``'s alpha and threshold replace the given ones; ``seed`` is unused; ``drift_sd``:
    sd of a log ratio allowed between separate batches."""
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
