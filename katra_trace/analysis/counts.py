"""Count metrics' decision: one run a side is evidence; the change (frame i against frame i when
frames match, as scenes animate) against the threshold with a noise band. Rule in docs/stats.md,
"Instructions and cycles"."""

from __future__ import annotations

import dataclasses
import math
from collections.abc import Sequence

import numpy as np

from katra_trace.analysis.defaults import COUNT_JITTER_PER_FRAME
from katra_trace.analysis.intervals import (
    clean_runs,
    cv,
    frame_figures,
    geometric_mean,
    interval_verdict,
)
from katra_trace.analysis.verdict import SceneComparison, Verdict
from katra_trace.units import format_change_pct

MIN_FRAMES_COUNTS = 1
#: Band half-width, in noise floors.
NOISE_FLOOR_FACTOR = 3.0


def _robust_rel_spread(values: np.ndarray) -> float:
    """1.4826 x MAD of log values: a robust relative sd."""
    logs = np.log(values)
    return 1.4826 * float(np.median(np.abs(logs - np.median(logs))))


def _run_offsets(runs: Sequence[np.ndarray]) -> list[float]:
    profile = np.median(np.stack(runs), axis=0)
    return [float(np.median(np.log(r / profile))) for r in runs]


def _frames_match(b_runs: Sequence[np.ndarray], n_runs: Sequence[np.ndarray]) -> bool:
    return bool(b_runs) and bool(n_runs) and len({r.size for r in (*b_runs, *n_runs)}) == 1


def noise_floor(b_runs: Sequence[np.ndarray], n_runs: Sequence[np.ndarray]) -> tuple[float, str]:
    """(sd on the log scale, source): across runs, else matched frames, else each side's frames;
    MAD ignores the harness's periodic frames."""
    sides = [r for r in (b_runs, n_runs) if len(r) >= 2]
    if sides:
        matched = _frames_match(b_runs, n_runs)
        sds = [
            float(
                np.array(
                    _run_offsets(runs) if matched else np.log([np.median(x) for x in runs])
                ).std(ddof=1)
            )
            for runs in sides
        ]
        return max(sds), "across runs"
    if len(b_runs) == len(n_runs) == 1 and b_runs[0].size == n_runs[0].size:
        return _robust_rel_spread(n_runs[0] / b_runs[0]), "across matched steady frames"
    spreads = [_robust_rel_spread(np.concatenate(runs)) for runs in (b_runs, n_runs)]
    return max(spreads), "across steady frames"


def matched_profiles(
    b_runs: Sequence[np.ndarray], n_runs: Sequence[np.ndarray]
) -> tuple[np.ndarray, np.ndarray] | None:
    """Per-frame medians over runs when all runs match in length, else None."""
    if not _frames_match(b_runs, n_runs):
        return None
    return np.median(np.stack(b_runs), axis=0), np.median(np.stack(n_runs), axis=0)


def decide_counts(
    scene: str,
    base_runs: Sequence[np.ndarray],
    new_runs: Sequence[np.ndarray],
    *,
    threshold: float,
    metric: str,
    zone: str = "",
    frame_base: float | None = None,
) -> SceneComparison:
    """``frame_base``: a zone's scene BASE count a frame; the zone is judged on its change to the
    frame, so a small zone's jitter is no regression."""
    b_runs, n_runs = clean_runs(base_runs), clean_runs(new_runs)
    b_all = np.concatenate(b_runs) if b_runs else np.empty(0)
    n_all = np.concatenate(n_runs) if n_runs else np.empty(0)
    m = SceneComparison(
        scene=scene,
        verdict=Verdict.INCOMPARABLE,
        reason="",
        zone=zone,
        metric=metric,
        value_unit=metric,
        unit="counts",
        runs_base=len(b_runs),
        runs_new=len(n_runs),
        frames_base=int(b_all.size),
        frames_new=int(n_all.size),
    )
    if min(b_all.size, n_all.size) < MIN_FRAMES_COUNTS:
        side = "BASE" if b_all.size == 0 else "NEW"
        return dataclasses.replace(m, reason=f"missing in {side} (no measured frames)")
    med_b = np.array([np.median(r) for r in b_runs])
    med_n = np.array([np.median(r) for r in n_runs])
    floor, source = noise_floor(b_runs, n_runs)
    profiles = matched_profiles(b_runs, n_runs)
    if profiles is not None:
        own = float(np.median(np.log(profiles[1] / profiles[0])))
    else:
        own = float(np.log(med_n).mean()) - float(np.log(med_b).mean())
    level_b, level_n = geometric_mean(med_b), geometric_mean(med_n)
    m = dataclasses.replace(
        frame_figures(m, b_all, n_all, count=True),
        level_base=level_b,
        level_new=level_n,
        ratio=math.exp(own),
        noise_floor_pct=floor * 100,
        run_cv_base=cv(med_b),
        run_cv_new=cv(med_n),
    )
    est, scale = own, 1.0
    frame_level = level_b
    if frame_base is not None and frame_base > 0:
        scale = level_b / frame_base
        est = math.log1p(math.expm1(own) * scale)
        m = dataclasses.replace(m, frame_change_pct=math.expm1(est) * 100)
        frame_level = frame_base
    jitter = math.log1p(COUNT_JITTER_PER_FRAME / frame_level) if frame_level > 0 else math.inf
    m = dataclasses.replace(m, jitter_floor_pct=math.expm1(jitter) * 100)
    spread = max(NOISE_FLOOR_FACTOR * floor * scale, jitter)
    lo, hi = est - spread, est + spread
    m = dataclasses.replace(m, ci_low=math.exp(lo), ci_high=math.exp(hi))
    thr_pct = threshold * 100
    change = f"{format_change_pct(math.expm1(own) * 100, 2)} {metric}"
    if profiles is not None:
        change += " frame against frame"
    if frame_base is not None:
        change += f" in this zone, {format_change_pct(math.expm1(est) * 100, 2)} of the frame"
    floor_txt = f"noise floor {floor * 100:.3g}% {source}"
    if jitter > NOISE_FLOOR_FACTOR * floor * scale:
        floor_txt += (
            f"; cross-process jitter {COUNT_JITTER_PER_FRAME:,} {metric} a frame, "
            f"{math.expm1(jitter) * 100:.3g}% of this frame"
        )
    band = (
        f"[{format_change_pct(math.expm1(lo) * 100, 2)}, "
        f"{format_change_pct(math.expm1(hi) * 100, 2)}]"
    )
    verdict = interval_verdict(est, lo, hi, threshold)
    if verdict in (Verdict.REGRESSION, Verdict.IMPROVEMENT):
        return dataclasses.replace(
            m, verdict=verdict, reason=f"{change} (threshold {thr_pct:g}%, {floor_txt})"
        )
    if verdict is Verdict.UNCHANGED:
        return dataclasses.replace(
            m, verdict=verdict, reason=f"{change}, within +-{thr_pct:g}% ({floor_txt})"
        )
    why = (
        f"the {floor_txt} is too large for a {thr_pct:g}% threshold"
        if 2 * spread >= math.log1p(threshold)
        else f"the band {band} ({floor_txt}) reaches the +-{thr_pct:g}% threshold"
    )
    return dataclasses.replace(m, verdict=Verdict.INCONCLUSIVE, reason=f"{change}: {why}")


__all__ = [
    "MIN_FRAMES_COUNTS",
    "NOISE_FLOOR_FACTOR",
    "decide_counts",
    "matched_profiles",
    "noise_floor",
]
