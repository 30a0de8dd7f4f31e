"""The steps of history series: what ``history check`` decides (:func:`check_steps`) and a report
draws (:func:`trend_data`)."""

from __future__ import annotations

import dataclasses
import math
from collections.abc import Sequence

from katra_trace.analysis.defaults import (
    COUNT_JITTER_PER_FRAME,
    DEFAULT_ALPHA,
    FEW_RUNS_RULE,
    MIN_RUNS,
    check_alpha,
    check_threshold_pct,
    runs_decide,
    threshold_for,
)
from katra_trace.analysis.verdict import Verdict
from katra_trace.history.series import (
    HIGHER_IS_BETTER,
    Selection,
    Series,
    all_labels,
    load_series,
)
from katra_trace.history.steps import (
    MIN_LABELS_FOR_LABEL_NOISE,
    Departure,
    Fit,
    Step,
    detect_steps,
    resolution,
)
from katra_trace.history.store import DEFAULT_LOCK_TIMEOUT_S, Source
from katra_trace.jsontext import JsonObject
from katra_trace.metrics import is_count
from katra_trace.units import format_change


@dataclasses.dataclass(frozen=True)
class StepReport:
    series: Series
    label: str  #: first label of the new level
    start_low: str
    start_high: str
    ratio: float
    ratio_low: float
    ratio_high: float
    verdict: str
    at_newest: bool
    settings_changed: str  #: "" unless they differ from the series' first

    def as_dict(self) -> JsonObject:
        s = self.series
        return {
            "scene": s.scene,
            "zone": s.zone,
            "metric": s.metric,
            "stat": s.stat,
            "host_id": s.host_id,
            "host": s.host,
            "label": self.label,
            "start_range": [self.start_low, self.start_high],
            "change_pct": 100 * (self.ratio - 1),
            "change_pct_interval": [100 * (self.ratio_low - 1), 100 * (self.ratio_high - 1)],
            "verdict": self.verdict,
            "at_newest_label": self.at_newest,
            "settings_changed": self.settings_changed,
        }


@dataclasses.dataclass(frozen=True)
class DepartureReport:
    """A time series' newest label(s) off the level before on too few runs for a verdict (one busy
    run looks like a step). Never a regression."""

    series: Series
    label: str
    labels: int
    runs: int
    ratio: float
    ratio_low: float
    ratio_high: float
    runs_needed: int | None  #: None: none would settle it

    def text(self) -> str:
        if self.labels == 1:
            who, verb, where = f"the newest label {self.label!r}", "departs", f"at {self.label!r}"
        else:
            who = f"the newest {self.labels} labels (from {self.label!r})"
            verb, where = "depart", "at that level"
        runs = f"{self.runs} run" + ("" if self.runs == 1 else "s")
        settle = (
            f"about {self.runs_needed} runs {where} ({self.runs} now) would settle it"
            if self.runs_needed is not None
            else f"no number of runs {where} settles a change this close to the threshold"
        )
        busy = "a busy run" if self.runs == 1 else "busy runs"
        interval = f"[{format_change(self.ratio_low)}, {format_change(self.ratio_high)}]"
        return (
            f"{who} {verb} by {format_change(self.ratio)} {interval} from the level before on "
            f"{runs}, a step or {busy}: {settle} ({FEW_RUNS_RULE})"
        )

    def as_dict(self) -> JsonObject:
        s = self.series
        return {
            "scene": s.scene,
            "zone": s.zone,
            "metric": s.metric,
            "stat": s.stat,
            "host_id": s.host_id,
            "label": self.label,
            "labels": self.labels,
            "runs": self.runs,
            "change_pct": 100 * (self.ratio - 1),
            "change_pct_interval": [100 * (self.ratio_low - 1), 100 * (self.ratio_high - 1)],
            "runs_needed": self.runs_needed,
            "text": self.text(),
        }


@dataclasses.dataclass(frozen=True)
class SeriesModel:
    series: Series
    fit: Fit
    threshold_pct: float
    change_pct: float  #: fitted newest / first - 1, %
    raw_change_pct: float  #: %
    no_step_reason: str  #: set when the raw change reaches the threshold
    departure: DepartureReport | None = None

    def as_dict(self) -> JsonObject:
        f = self.fit
        return {
            "levels": f.levels,
            "change_pct": self.change_pct,
            "raw_change_pct": self.raw_change_pct,
            "steps": len(f.steps),
            "threshold_pct": self.threshold_pct,
            "noise_sd": f.noise_sd,
            "noise_source": f.noise_source,
            "label_dispersion": f.dispersion,
            "run_sd": f.run_sd,
            "outlier_runs_left_out": f.dropped_runs,
            "labels_left_out": [self.series.points[i].label for i in f.departed_labels],
            "no_step_reason": self.no_step_reason,
            "departure": None if self.departure is None else self.departure.as_dict(),
        }


@dataclasses.dataclass(frozen=True)
class CheckResult:
    series: list[Series]
    models: list[SeriesModel]
    steps: list[StepReport]
    newest_label: str
    alpha: float
    threshold_pct: float | None  #: None: the per-metric defaults
    departures: list[DepartureReport] = dataclasses.field(default_factory=list)

    @property
    def fits(self) -> list[Fit]:
        return [m.fit for m in self.models]

    @property
    def regression_at_newest(self) -> bool:
        return any(s.verdict == Verdict.REGRESSION and s.at_newest for s in self.steps)

    def by_label(self) -> dict[str, list[StepReport]]:
        out: dict[str, list[StepReport]] = {}
        for step in self.steps:
            out.setdefault(step.label, []).append(step)
        return out


def _model(
    s: Series, fit: Fit, threshold_pct: float, alpha: float, departure: DepartureReport | None
) -> SeriesModel:
    raw = s.points[-1].level / s.points[0].level
    reason = ""
    if (
        not fit.steps
        and departure is None
        and abs(math.log(raw)) >= math.log1p(threshold_pct / 100)
    ):
        # sized for the change seen, not for a threshold-sized step
        reason = resolution(fit, 100 * abs(raw - 1), alpha).text()
    return SeriesModel(
        s, fit, threshold_pct, 100 * (fit.change - 1), 100 * (raw - 1), reason, departure
    )


def _departure_verdict(dep: Departure, threshold_pct: float, sign: float) -> str:
    from katra_trace.analysis.intervals import interval_verdict  # deferred: scipy

    ends = sorted((sign * math.log(dep.ratio_low), sign * math.log(dep.ratio_high)))
    return interval_verdict(sign * math.log(dep.ratio), ends[0], ends[1], threshold_pct / 100)


def _with_step(fit: Fit, dep: Departure) -> Fit:
    """``fit`` with the departure as a step (counts are exact: one run is evidence)."""
    step = Step(
        dep.index,
        dep.index,
        dep.index,
        dep.ratio,
        dep.ratio_low,
        dep.ratio_high,
        dep.z,
        dep.level_before,
        dep.level,
    )
    levels = [*fit.levels[: dep.index], *[dep.level] * (len(fit.levels) - dep.index)]
    return dataclasses.replace(fit, steps=[*fit.steps, step], levels=levels, departure=None)


def _departure_report(
    s: Series, dep: Departure, threshold_pct: float, alpha: float, sign: float
) -> DepartureReport:
    from katra_trace.analysis.intervals import runs_needed, settling_margin  # deferred: scipy

    margin = settling_margin(sign * math.log(dep.ratio), threshold_pct / 100)
    need = runs_needed(dep.run_sd, margin, alpha, 1, True, dep.level_sd)
    if need is not None:
        need = max(need, MIN_RUNS, dep.runs + 1)
    label = s.points[dep.index].label
    return DepartureReport(
        s, label, dep.labels, dep.runs, dep.ratio, dep.ratio_low, dep.ratio_high, need
    )


def check_steps(
    series: Sequence[Series],
    alpha: float = DEFAULT_ALPHA,
    threshold_pct: float | None = None,
    newest_label: str | None = None,
) -> CheckResult:
    """Fit each series and judge its steps; a departure of the newest labels is a count's step or
    a time metric's :class:`DepartureReport`."""
    # deferred: intervals loads scipy.stats (about a second)
    from katra_trace.analysis.intervals import interval_verdict

    alpha = check_alpha(alpha)
    threshold_pct = check_threshold_pct(threshold_pct)
    newest = newest_label if newest_label is not None else _newest(series)
    models: list[SeriesModel] = []
    steps: list[StepReport] = []
    departures: list[DepartureReport] = []
    for s in series:
        fit = detect_steps([p.values for p in s.points], alpha=alpha)
        thr = threshold_for(s.metric, threshold_pct)
        sign = -1.0 if s.stat in HIGHER_IS_BETTER else 1.0  # log ratios with + worse
        departure = None
        dep = fit.departure
        if dep is not None:
            # counts are exact; a time metric's departure gets no verdict
            verdict = _departure_verdict(dep, thr, sign)
            if runs_decide(s.metric, dep.runs):
                if verdict in (Verdict.REGRESSION, Verdict.IMPROVEMENT):
                    fit = _with_step(fit, dep)
            elif verdict != Verdict.UNCHANGED:
                departure = _departure_report(s, dep, thr, alpha, sign)
                departures.append(departure)
        if is_count(s.metric) and not fit.steps and len(s.points) < MIN_LABELS_FOR_LABEL_NOISE:
            counted = _count_steps(s, thr, newest, sign)
            # too few labels to learn noise, but a count's noise is known
            if counted:
                models.append(
                    SeriesModel(
                        s,
                        fit,
                        thr,
                        100 * (fit.change - 1),
                        100 * (s.points[-1].level / s.points[0].level - 1),
                        "",
                    )
                )
                steps.extend(counted)
                continue
        models.append(_model(s, fit, thr, alpha, departure))
        for st in fit.steps:
            ends = sorted((sign * math.log(st.ratio_low), sign * math.log(st.ratio_high)))
            verdict = interval_verdict(sign * math.log(st.ratio), ends[0], ends[1], thr / 100)
            p = s.points
            steps.append(
                StepReport(
                    s,
                    p[st.index].label,
                    p[st.start_low].label,
                    p[st.start_high].label,
                    st.ratio,
                    st.ratio_low,
                    st.ratio_high,
                    verdict,
                    p[st.index].label == newest and p[-1].label == newest,
                    p[st.index].settings,
                )
            )
    order = {lab: i for i, lab in enumerate(all_labels(series))}
    steps.sort(key=lambda r: (order[r.label], r.series.scene, r.series.zone, r.series.metric))
    return CheckResult(list(series), models, steps, newest, alpha, threshold_pct, departures)


def _count_steps(s: Series, threshold_pct: float, newest: str, sign: float) -> list[StepReport]:
    """A count series too short to fit: each label against the one before by compare's rule."""
    # deferred: intervals loads scipy.special; only a check needs it
    from katra_trace.analysis.counts import NOISE_FLOOR_FACTOR
    from katra_trace.analysis.intervals import interval_verdict

    out = []
    for before, after in zip(s.points, s.points[1:], strict=False):
        ratio = after.level / before.level
        band = NOISE_FLOOR_FACTOR * math.log1p(
            COUNT_JITTER_PER_FRAME / min(before.level, after.level)
        )
        estimate = sign * math.log(ratio)
        verdict = interval_verdict(estimate, estimate - band, estimate + band, threshold_pct / 100)
        if verdict in (Verdict.REGRESSION, Verdict.IMPROVEMENT):
            at_newest = after.label == newest and s.points[-1].label == newest
            out.append(
                StepReport(
                    s,
                    after.label,
                    after.label,
                    after.label,
                    ratio,
                    ratio * math.exp(-band),
                    ratio * math.exp(band),
                    verdict,
                    at_newest,
                    after.settings,
                )
            )
    return out


def _newest(series: Sequence[Series]) -> str:
    labels = all_labels(series)
    return labels[-1] if labels else ""


@dataclasses.dataclass(frozen=True)
class Trends:
    """The trends a report draws, with what ``history check`` finds in them."""

    source: str
    labels: list[str]
    runs: int
    check: CheckResult

    @property
    def scenes(self) -> list[str]:
        return sorted({s.scene for s in self.check.series})

    def as_dict(self) -> JsonObject:
        return {
            "source": self.source,
            "labels": self.labels,
            "runs": self.runs,
            "scenes": self.scenes,
            "alpha": self.check.alpha,
            "series": [
                {**s.as_dict(), "fit": m.as_dict()}
                for s, m in zip(self.check.series, self.check.models, strict=True)
            ],
            "steps": [st.as_dict() for st in self.check.steps],
            "departures": [d.as_dict() for d in self.check.departures],
        }


def trend_data(
    source: Source,
    sel: Selection | None = None,
    alpha: float = DEFAULT_ALPHA,
    threshold_pct: float | None = None,
    lock_timeout_s: float = DEFAULT_LOCK_TIMEOUT_S,
) -> Trends:
    """ConfigError on a missing, empty or unreadable source, or an unknown scene, metric or host."""
    series = load_series(source, sel or Selection(), lock_timeout_s)
    return Trends(
        source.name,
        all_labels(series),
        len(frozenset().union(*(s.traces for s in series))),
        check_steps(series, alpha=alpha, threshold_pct=threshold_pct),
    )


__all__ = [
    "CheckResult",
    "DepartureReport",
    "SeriesModel",
    "StepReport",
    "Trends",
    "check_steps",
    "trend_data",
]
