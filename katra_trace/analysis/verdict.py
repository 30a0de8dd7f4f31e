"""What a comparison says, as data; ``as_dict`` is the JSON every surface writes."""

from __future__ import annotations

import dataclasses
import enum
import math

from katra_trace.errors import ExitCode
from katra_trace.jsontext import JsonObject, record_dict


class ValueEnum(str, enum.Enum):
    """A str, so recorded strings compare equal; prints as its value (``words``: with spaces)."""

    _value_: str

    @property
    def words(self) -> str:
        return self.value.replace("_", " ")

    def __str__(self) -> str:
        return self.value

    def __format__(self, spec: str) -> str:
        return format(self.value, spec)


class Verdict(ValueEnum):
    REGRESSION = "regression"
    IMPROVEMENT = "improvement"
    UNCHANGED = "unchanged"
    INCONCLUSIVE = "inconclusive"
    INCOMPARABLE = "incomparable"


#: In the order every summary lists them.
VERDICTS: tuple[str, ...] = tuple(v.value for v in Verdict)


@dataclasses.dataclass(frozen=True)
class SceneComparison:
    """One scene (or zone). Ratios NEW/BASE (> 1 = slower)."""

    scene: str
    verdict: Verdict
    reason: str
    metric: str = ""
    zone: str = ""  #: "" for the scene's frames
    #: "runs", "rounds" (paired), "frames" (too few runs), "counts"
    unit: str = ""
    value_unit: str = "ms"  #: ms, instructions, cycles, x reference
    paired: bool = False
    runs_base: int = 0
    runs_new: int = 0
    frames_base: int = 0
    frames_new: int = 0
    stat: str = "median"
    level_base: float = math.nan  #: geometric mean of runs
    level_new: float = math.nan
    level_base_ms: float = math.nan  #: time metrics only
    level_new_ms: float = math.nan
    ratio: float = math.nan
    ci_low: float = math.nan
    ci_high: float = math.nan
    confidence: float = math.nan
    p_value: float = math.nan  #: one-sided
    p_holm: float = math.nan
    dof: float = math.nan
    frame_ratio: float = math.nan  #: pooled frames (information)
    frame_p_value: float = math.nan  #: Mann-Whitney U (information)
    run_cv_base: float = math.nan
    run_cv_new: float = math.nan
    pair_cv: float = math.nan  #: sd of log ratios
    #: for sides captured in separate batches
    drift_allowance_pct: float = math.nan
    noise_floor_pct: float = math.nan  #: count metrics
    jitter_floor_pct: float = math.nan  #: the band's least half-width
    frame_change_pct: float = math.nan
    runs_needed: int | None = None  #: to settle an inconclusive result
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
        return (self.ratio - 1.0) * 100.0

    def as_dict(self) -> JsonObject:
        out = record_dict(self)
        change = self.change_pct
        out["change_pct"] = change if math.isfinite(change) else None
        return out


@dataclasses.dataclass(frozen=True)
class Comparison:
    """``zones`` rows (count metrics) are information, not in the exit code."""

    scenes: tuple[SceneComparison, ...]
    threshold_pct: float
    alpha: float
    metric: str
    notes: tuple[str, ...] = ()
    zones: tuple[SceneComparison, ...] = ()
    paired: bool = False
    run_stat: str = "median"
    metric_choice: str = "option"

    @property
    def regressions(self) -> tuple[SceneComparison, ...]:
        return tuple(s for s in self.scenes if s.verdict is Verdict.REGRESSION)

    @property
    def exit_code(self) -> int:
        if self.regressions:
            return ExitCode.REGRESSION
        if not any(s.verdict is not Verdict.INCOMPARABLE for s in self.scenes):
            return ExitCode.BAD_INPUT
        return ExitCode.OK

    @property
    def verdict_counts(self) -> dict[str, int]:
        return {v: sum(1 for s in self.scenes if s.verdict == v) for v in VERDICTS}

    def as_dict(self) -> JsonObject:
        scenes = {s.scene: s.as_dict() for s in self.scenes}
        zones: dict[str, JsonObject] = {}
        for z in self.zones:
            if z.scene in scenes:
                zones.setdefault(z.scene, {})[z.zone] = z.as_dict()
        for scene, per_zone in zones.items():
            scenes[scene]["zones"] = per_zone
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
