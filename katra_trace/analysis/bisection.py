"""Bisection's rule, pure: is a commit like GOOD or BAD, and how much of BAD's change does the
culprit explain. ``katra3d bisect`` measures and hands rows here as :class:`Effect` records; the
rule is in docs/bisect.md ("How a commit is classified")."""

from __future__ import annotations

import dataclasses
import math
from collections.abc import Mapping, Sequence

from katra_trace.analysis.defaults import threshold_for
from katra_trace.analysis.images import ImageOutcome
from katra_trace.analysis.verdict import SceneComparison, Verdict
from katra_trace.jsontext import JsonObject, JsonValue, record_dict
from katra_trace.units import format_change_pct

#: Where "like BAD" starts, as a share of BAD's log change against GOOD.
MIDPOINT = 0.5
PARTIAL_SHARE = 2.0 / 3.0
STATES = ("good", "bad", "skip")


@dataclasses.dataclass(frozen=True)
class Effect:
    """A scene's (or zone's) ratios commit / GOOD (> 1 slower) with interval or band;
    ``frame_change_pct``: a zone's change over its frame's."""

    scene: str
    verdict: str
    ratio: float
    ci_low: float
    ci_high: float
    reason: str
    metric: str = ""
    zone: str = ""
    frame_change_pct: float = math.nan

    @classmethod
    def from_row(cls, row: SceneComparison) -> Effect:
        return cls(
            scene=row.scene,
            zone=row.zone,
            verdict=row.verdict,
            ratio=row.ratio,
            ci_low=row.ci_low,
            ci_high=row.ci_high,
            reason=row.reason,
            metric=row.metric,
            frame_change_pct=row.frame_change_pct,
        )

    @property
    def change_pct(self) -> float:
        return (self.ratio - 1.0) * 100.0

    def as_dict(self) -> JsonObject:
        return record_dict(self)

    @classmethod
    def from_dict(cls, data: Mapping[str, JsonValue]) -> Effect:
        """None (a non-finite number in :meth:`as_dict`) back to NaN."""

        def text(key: str) -> str:
            value = data.get(key)
            return "" if value is None else str(value)

        def number(key: str) -> float:
            value = data.get(key)
            if value is None:
                return math.nan
            if not isinstance(value, (int, float, str)):
                raise ValueError(f"{key} is not a number: {value!r}")
            return float(value)

        return cls(
            scene=text("scene"),
            verdict=text("verdict"),
            ratio=number("ratio"),
            ci_low=number("ci_low"),
            ci_high=number("ci_high"),
            reason=text("reason"),
            metric=text("metric"),
            zone=text("zone"),
            frame_change_pct=number("frame_change_pct"),
        )


@dataclasses.dataclass(frozen=True)
class Classification:
    state: str
    reason: str


def _log(x: float) -> float:
    return math.log(x) if x > 0 and math.isfinite(x) else math.nan


def target_scenes(bad: Sequence[Effect]) -> dict[str, Effect]:
    """BAD's scene rows (not zones) that regressed against GOOD, by scene."""
    return {e.scene: e for e in bad if not e.zone and e.verdict == Verdict.REGRESSION}


def classify(commit: Sequence[Effect], bad: Sequence[Effect]) -> Classification:
    targets = target_scenes(bad)
    if not targets:
        raise ValueError(
            "BAD regressed no scene against GOOD: there is nothing to classify against"
        )
    rows = {e.scene: e for e in commit if not e.zone}
    undecided: list[str] = []
    below: list[str] = []
    for scene, b in targets.items():
        row = rows.get(scene)
        if row is None or row.verdict == Verdict.INCOMPARABLE:
            undecided.append(f"{scene}: " + ("not measured" if row is None else row.reason))
            continue
        mid = MIDPOINT * _log(b.ratio)
        change = (
            f"{scene} {format_change_pct(row.change_pct, 2)} (BAD "
            f"{format_change_pct(b.change_pct, 2)})"
        )
        if row.verdict == Verdict.REGRESSION and _log(row.ratio) >= mid:
            return Classification(
                "bad", f"like BAD: {change}, a regression nearer BAD than no change"
            )
        if _log(row.ci_high) < mid:
            below.append(change)
        else:
            undecided.append(
                f"{change}: {row.verdict}, its interval reaches past half of BAD's change"
            )
    if undecided:
        return Classification("skip", "undecided: " + "; ".join(undecided))
    return Classification("good", "like GOOD: " + "; ".join(below))


def image_outcome(line: str) -> str:
    """``image changed: ...`` -> ``changed``."""
    return line.split(":", 1)[0].removeprefix("image ").replace(" ", "_")


def image_targets(bad: Mapping[str, str]) -> list[str]:
    """Scenes whose kept frame BAD changed (``bad``: scene -> image line)."""
    return [s for s, line in bad.items() if image_outcome(line) == ImageOutcome.CHANGED]


def classify_images(commit: Mapping[str, str], bad: Mapping[str, str]) -> Classification:
    """Like BAD when a target's frame changed beyond tolerance, GOOD when all are within it."""
    undecided: list[str] = []
    for scene in image_targets(bad):
        line = commit.get(scene, "not measured")
        outcome = image_outcome(line)
        if outcome == ImageOutcome.CHANGED:
            return Classification("bad", f"like BAD: {scene} {line}")
        if outcome not in (ImageOutcome.IDENTICAL, ImageOutcome.WITHIN_TOLERANCE):
            undecided.append(f"{scene}: {line}")
    if undecided:
        return Classification("skip", "undecided: " + "; ".join(undecided))
    return Classification(
        "good", "like GOOD: " + "; ".join(f"{s} {commit[s]}" for s in image_targets(bad))
    )


def shares(
    culprit: Sequence[Effect], parent: Sequence[Effect] | None, bad: Sequence[Effect]
) -> dict[str, tuple[float, float]]:
    """Per target: (parent's, culprit's) share of BAD's log change; ``parent`` None is GOOD."""
    out: dict[str, tuple[float, float]] = {}
    c_rows = {e.scene: e for e in culprit if not e.zone}
    p_rows = {e.scene: e for e in parent or () if not e.zone}
    for scene, b in target_scenes(bad).items():
        total = _log(b.ratio)
        c = c_rows.get(scene)
        p = p_rows.get(scene)
        c_share = _log(c.ratio) / total if c is not None else math.nan
        p_share = 0.0 if parent is None else (_log(p.ratio) / total if p is not None else math.nan)
        out[scene] = (p_share, c_share)
    return out


def partial_scenes(scene_shares: Mapping[str, tuple[float, float]]) -> dict[str, float]:
    return {
        scene: c - p
        for scene, (p, c) in scene_shares.items()
        if math.isfinite(c - p) and c - p < PARTIAL_SHARE
    }


def next_ranges(scene_shares: Mapping[str, tuple[float, float]]) -> tuple[bool, bool]:
    """Where the rest of BAD's change lies: (before the culprit, after it)."""
    rest = 1.0 - PARTIAL_SHARE
    before = any(math.isfinite(p) and p > rest for p, _ in scene_shares.values())
    after = any(math.isfinite(c) and 1.0 - c > rest for _, c in scene_shares.values())
    return before, after


@dataclasses.dataclass(frozen=True)
class Step:
    """A slowdown between consecutive measured commits; ``ratio`` is after / before."""

    before: int
    after: int
    scene: str
    ratio: float


def steps(
    measured: Sequence[Sequence[Effect]], bad: Sequence[Effect], threshold_pct: float | None
) -> list[Step]:
    """Consecutive measured commits where the later interval starts above the earlier one's end
    by more than the threshold (steps within noise are not named)."""
    out: list[Step] = []
    for scene in target_scenes(bad):
        rows = [next((e for e in m if e.scene == scene and not e.zone), None) for m in measured]
        prev = (0, 1.0, 1.0)
        for i, row in enumerate(rows[1:], start=1):
            if row is None or row.verdict == Verdict.INCOMPARABLE or not math.isfinite(row.ratio):
                continue
            limit = 1.0 + threshold_for(row.metric, threshold_pct) / 100.0
            if math.isfinite(row.ci_low) and row.ci_low > prev[2] * limit:
                out.append(Step(prev[0], i, scene, row.ratio / prev[1]))
            hi = row.ci_high if math.isfinite(row.ci_high) else row.ratio
            prev = (i, row.ratio, hi)
    return out


def open_range(states: Sequence[str]) -> tuple[int, int]:
    """(last like GOOD, -1 for GOOD; first like BAD) from states after GOOD (``""``: unmeasured)."""
    hi = states.index("bad") if "bad" in states else len(states) - 1
    lo = max((i for i in range(hi) if states[i] == "good"), default=-1)
    return lo, hi


def probes(states: Sequence[str], n: int) -> list[int]:
    """Up to ``n`` untested commits splitting the open range into ``n + 1`` parts."""
    if n < 1:
        raise ValueError(f"n must be at least 1, got {n}")
    lo, hi = open_range(states)
    left = [i for i in range(lo + 1, hi) if not states[i]]
    if len(left) <= n:
        return left
    picked: list[int] = []
    for j in range(1, n + 1):
        target = lo + j * (hi - lo) / (n + 1)
        picked.append(min((i for i in left if i not in picked), key=lambda i: (abs(i - target), i)))
    return sorted(picked)


def rounds_left(untested: int, n: int) -> int:
    """Rounds of ``n`` probes that settle ``untested`` commits, about."""
    if untested <= 0:
        return 0
    return max(1, math.ceil(math.log(untested + 1) / math.log(n + 1) - 1e-9))


__all__ = [
    "MIDPOINT",
    "PARTIAL_SHARE",
    "STATES",
    "Classification",
    "Effect",
    "Step",
    "classify",
    "classify_images",
    "image_outcome",
    "image_targets",
    "next_ranges",
    "open_range",
    "partial_scenes",
    "probes",
    "rounds_left",
    "shares",
    "steps",
    "target_scenes",
]
