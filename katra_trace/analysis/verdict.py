"""What a comparison says, as data: the verdicts, one scene's (or zone's) comparison, and the whole
comparison.

:mod:`katra_trace.analysis.decide` fills them; compare, ab, the report, history and CI print them
(``as_dict`` is the JSON every surface writes).
"""

from __future__ import annotations

import dataclasses
import enum
import math
from typing import Any

from katra_trace.errors import ExitCode
from katra_trace.jsontext import record_dict


class Verdict(str, enum.Enum):
    """What a comparison says about one scene (or zone). A str, so that JSON, tables and the words a
    user reads are its value (``regression``), and a recorded string compares equal to it."""

    REGRESSION = "regression"  #: NEW is slower by more than the threshold, and the evidence says so
    IMPROVEMENT = "improvement"  #: NEW is faster by more than the threshold
    UNCHANGED = "unchanged"  #: the change lies within the threshold
    INCONCLUSIVE = "inconclusive"  #: too few frames or runs, or too noisy, to say
    #: the sides differ in what was measured (params, renderer, metric ...)
    INCOMPARABLE = "incomparable"

    def __str__(self) -> str:
        return self.value

    def __format__(self, spec: str) -> str:
        return format(self.value, spec)


#: The verdicts' words, in the order every summary lists them.
VERDICTS: tuple[str, ...] = tuple(v.value for v in Verdict)


@dataclasses.dataclass(frozen=True)
class SceneComparison:
    """The comparison of one scene (or one zone of a scene). Ratios NEW/BASE (> 1 = slower)."""

    scene: str
    verdict: Verdict  #: a recorded string (``"regression"``) is taken as its Verdict
    reason: str
    metric: str = ""
    zone: str = ""  #: "" for the scene's frames, else the zone this row describes
    #: what the decision rests on: "runs" (unpaired), "rounds" (paired), "frames" (information
    #: only: too few runs), "counts" (deterministic metric)
    unit: str = ""
    value_unit: str = "ms"  #: unit of level_base / level_new: ms, instructions, cycles, x reference
    paired: bool = False
    runs_base: int = 0
    runs_new: int = 0
    frames_base: int = 0
    frames_new: int = 0
    #: what reduces each run to its level: ``median`` (counts always) or ``p10`` (``--stat``); the
    #: levels, the interval and the verdict are all on it, and every name says which
    stat: str = "median"
    level_base: float = math.nan  #: BASE level in value_unit: geometric mean of the runs' ``stat``
    level_new: float = math.nan
    level_base_ms: float = math.nan  #: the same in ms (time metrics only)
    level_new_ms: float = math.nan
    ratio: float = math.nan
    ci_low: float = math.nan
    ci_high: float = math.nan
    confidence: float = math.nan
    p_value: float = math.nan  #: one-sided, in the direction of the change, on runs or rounds
    p_holm: float = math.nan  #: Holm-adjusted across scenes
    dof: float = math.nan  #: degrees of freedom of the t interval
    frame_ratio: float = math.nan  #: pooled-frame median ratio (information)
    frame_p_value: float = math.nan  #: two-sided Mann-Whitney U on pooled frames (information)
    run_cv_base: float = math.nan  #: CV of per-run medians, or p10s (needs >= 2 runs)
    run_cv_new: float = math.nan
    pair_cv: float = math.nan  #: sd of per-round log ratios (paired)
    #: sides captured in separate batches: the drift between batches allowed for in the interval
    #: (percent)
    drift_allowance_pct: float = math.nan
    noise_floor_pct: float = math.nan  #: count metrics: the measured noise floor
    #: count metrics: the cross-process jitter per frame (defaults.COUNT_JITTER_PER_FRAME) over the
    #: frame's count, in percent; the band is never narrower than this
    jitter_floor_pct: float = math.nan
    #: zones of count metrics: the zone's change over the frame's count
    frame_change_pct: float = math.nan
    runs_needed: int | None = None  #: runs a side that would settle an inconclusive result
    frames_needed: int | None = None
    p99_base_ms: float = math.nan
    p99_new_ms: float = math.nan
    fps_low_1pct_base: float = math.nan
    fps_low_1pct_new: float = math.nan
    stutter_pct_base: float = math.nan
    stutter_pct_new: float = math.nan
    notes: tuple[str, ...] = ()

    def __post_init__(self) -> None:
        object.__setattr__(self, "verdict", Verdict(self.verdict))

    @property
    def change_pct(self) -> float:
        """(ratio - 1) in percent: + means NEW is slower."""
        return (self.ratio - 1.0) * 100.0

    def as_dict(self) -> dict[str, Any]:
        """JSON-ready dict; non-finite floats become None."""
        out = record_dict(self)
        change = self.change_pct
        out["change_pct"] = change if math.isfinite(change) else None
        return out


@dataclasses.dataclass(frozen=True)
class Comparison:
    """All scenes of one comparison and the settings used.

    ``zones`` holds per-zone rows (count metrics): information on which pass
    changed; the exit code rests on the scenes' own rows.
    """

    scenes: tuple[SceneComparison, ...]
    threshold_pct: float
    alpha: float
    metric: str
    notes: tuple[str, ...] = ()
    zones: tuple[SceneComparison, ...] = ()
    paired: bool = False
    run_stat: str = "median"  #: the per-run statistic of a time metric (:data:`RUN_STATS`)
    #: how the metric was chosen (:data:`katra_trace.analysis.defaults.METRIC_CHOICES`)
    metric_choice: str = "option"

    @property
    def regressions(self) -> tuple[SceneComparison, ...]:
        return tuple(s for s in self.scenes if s.verdict is Verdict.REGRESSION)

    @property
    def exit_code(self) -> int:
        """1 if any regression, 2 if nothing was comparable, else 0."""
        if self.regressions:
            return ExitCode.REGRESSION
        if not any(s.verdict is not Verdict.INCOMPARABLE for s in self.scenes):
            return ExitCode.BAD_INPUT
        return ExitCode.OK

    @property
    def verdict_counts(self) -> dict[str, int]:
        """How many scenes got each verdict, in :data:`VERDICTS` order."""
        return {v: sum(1 for s in self.scenes if s.verdict == v) for v in VERDICTS}

    def as_dict(self) -> dict[str, Any]:
        scenes: dict[str, Any] = {s.scene: s.as_dict() for s in self.scenes}
        for z in self.zones:
            if z.scene in scenes:
                scenes[z.scene].setdefault("zones", {})[z.zone] = z.as_dict()
        return {
            "threshold_pct": self.threshold_pct,
            "alpha": self.alpha,
            "metric": self.metric,
            "paired": self.paired,
            "run_stat": self.run_stat,
            "metric_choice": self.metric_choice,
            "verdicts": self.verdict_counts,
            "exit_code": self.exit_code,
            "notes": list(self.notes),
            "scenes": scenes,
        }


__all__ = ["Comparison", "SceneComparison", "VERDICTS", "Verdict"]
