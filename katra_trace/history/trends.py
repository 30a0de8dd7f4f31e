"""History rows as series (scene x zone x metric x host) over labels, and their steps: what a
report draws (:func:`trend_data`) and ``history check`` decides (:func:`check_steps`)."""

from __future__ import annotations

import dataclasses
import math
from collections.abc import Iterable, Mapping, Sequence

import numpy as np

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
from katra_trace.errors import ConfigError
from katra_trace.history.rows import iso_utc
from katra_trace.history.steps import (
    MIN_LABELS_FOR_LABEL_NOISE,
    Departure,
    Fit,
    Step,
    detect_steps,
    resolution,
)
from katra_trace.history.store import DEFAULT_LOCK_TIMEOUT_S, Source, read_rows
from katra_trace.jsontext import JsonObject
from katra_trace.metrics import ALL, AUTO, AUTO_ORDER, is_count
from katra_trace.units import format_change

#: Stats a trend can follow; all are "higher is worse" but the frame rate.
STATS: tuple[str, ...] = ("median", "mean", "p99", "low_1pct_fps")
HIGHER_IS_BETTER: frozenset[str] = frozenset({"low_1pct_fps"})
_SPARK = "▁▂▃▄▅▆▇█"


@dataclasses.dataclass(frozen=True)
class TrendRow:
    """The history columns a trend reads; a column an older Parquet file lacks reads None."""

    label: str
    label_time_ns: int | None
    run_start_ns: int | None
    added_ns: int | None
    commit: str | None
    host_id: str
    renderer: str
    driver: str
    cpu: str
    codegen_id: str | None
    scene: str
    zone: str
    metric: str
    unit: str
    size: str
    params: str | None
    trace_sha256: str
    median: float | None
    mean: float | None
    p99: float | None
    low_1pct_fps: float | None

    def stat(self, name: str) -> float | None:
        """The value of one of :data:`STATS`."""
        value: float | None = getattr(self, name)
        return value


_READ_COLUMNS = tuple(f.name for f in dataclasses.fields(TrendRow))


@dataclasses.dataclass(frozen=True)
class Selection:
    """Which series to build; ``None``: no filter."""

    scene: str | None = None
    metric: str = "auto"
    host: str | None = None  #: host id prefix, or text in "renderer / driver / cpu"
    zone: str | None = ""  #: "" the frames; None: frames and every zone
    stat: str = "median"
    last: int | None = None  #: only the newest N labels
    allow_host_mismatch: bool = False  #: one series across hosts per scene
    commit_order: Mapping[str, int] | None = None


@dataclasses.dataclass(frozen=True)
class Point:
    label: str
    time_ns: int
    commit: str
    values: list[float]
    level: float
    settings: str  #: "" when as the series' first label
    rank: int = 0  #: position among all labels of the source

    def as_dict(self) -> JsonObject:
        return {
            "label": self.label,
            "time": iso_utc(self.time_ns),
            "commit": self.commit,
            "runs": len(self.values),
            "level": self.level,
            "min": min(self.values),
            "max": max(self.values),
            "values": self.values,
            "settings_changed": self.settings,
        }


@dataclasses.dataclass(frozen=True)
class Series:
    """One scene's (zone's) metric and stat on one host, over labels in order."""

    scene: str
    zone: str
    metric: str
    unit: str
    stat: str
    host_id: str
    host: str
    codegen_id: str
    points: list[Point]
    traces: frozenset[str] = frozenset()  #: SHA-256 of the series' traces

    @property
    def key(self) -> str:
        zone = f" / {self.zone}" if self.zone else ""
        return f"{self.scene}{zone} {self.metric} {self.stat} @{self.host_id}"

    def sparkline(self) -> str:
        return sparkline([p.level for p in self.points])

    def as_dict(self) -> JsonObject:
        return {
            "scene": self.scene,
            "zone": self.zone,
            "metric": self.metric,
            "unit": self.unit,
            "stat": self.stat,
            "host_id": self.host_id,
            "host": self.host,
            "codegen_id": self.codegen_id,
            "sparkline": self.sparkline(),
            "points": [p.as_dict() for p in self.points],
        }


def sparkline(values: Sequence[float]) -> str:
    if not values:
        return ""
    lo, hi = min(values), max(values)
    if not hi > lo:
        return _SPARK[0] * len(values)
    return "".join(
        _SPARK[min(len(_SPARK) - 1, int((v - lo) / (hi - lo) * len(_SPARK)))] for v in values
    )


def label_order(
    rows: Iterable[TrendRow], commit_order: Mapping[str, int] | None = None
) -> list[str]:
    """Labels by ``--time`` if all have one, else ``commit_order`` if it places all, else by first
    add; a later re-capture never moves a label."""
    added: dict[str, int] = {}
    timed: dict[str, int] = {}
    commits: dict[str, set[str]] = {}
    for r in rows:
        lab = str(r.label)
        when = int(r.added_ns or 0)
        added[lab] = min(added.get(lab, when), when)
        label_time = r.label_time_ns
        if label_time is not None and label_time not in (r.run_start_ns, r.added_ns):  # --time
            timed[lab] = min(timed.get(lab, int(label_time)), int(label_time))
        if r.commit:
            commits.setdefault(lab, set()).add(str(r.commit))
    if added and timed.keys() == added.keys():
        return sorted(added, key=lambda lab: (timed[lab], added[lab], lab))
    if commit_order and commits.keys() == added.keys():
        placed = {
            lab: [commit_order[c] for c in cs if c in commit_order] for lab, cs in commits.items()
        }
        if all(placed.values()):
            return sorted(added, key=lambda lab: (min(placed[lab]), added[lab], lab))
    return sorted(added, key=lambda lab: (added[lab], lab))


def _host_text(r: TrendRow) -> str:
    return f"{r.renderer} / {r.driver} / {r.cpu}"


def _match_host(r: TrendRow, host: str) -> bool:
    return str(r.host_id).startswith(host) or host.lower() in _host_text(r).lower()


def _choices(values: Iterable[str]) -> str:
    return ", ".join(sorted(set(values))) or "(none)"


def build_series(rows: Sequence[TrendRow], sel: Selection) -> list[Series]:
    """Group ``rows`` into series; ConfigError on an unknown scene, zone, metric, stat or host."""
    if sel.stat not in STATS:
        raise ConfigError(f"unknown stat {sel.stat!r}; choose from {', '.join(STATS)}")
    if sel.last is not None and sel.last < 1:
        raise ConfigError(f"--last must be at least 1, got {sel.last}")
    order = label_order(rows, sel.commit_order)
    if sel.last is not None:
        keep = set(order[-sel.last :])
        rows = [r for r in rows if r.label in keep]
        order = order[-sel.last :]
    if sel.scene is not None:
        scenes = {r.scene for r in rows}
        if sel.scene not in scenes:
            raise ConfigError(
                f"unknown scene {sel.scene!r} in the history; stored: {_choices(scenes)}"
            )
        rows = [r for r in rows if r.scene == sel.scene]
    if sel.zone is not None:
        if sel.zone and sel.zone not in {r.zone for r in rows}:
            raise ConfigError(
                f"unknown zone {sel.zone!r}; stored: {_choices(r.zone for r in rows if r.zone)}"
            )
        rows = [r for r in rows if r.zone == sel.zone]
    if sel.host is not None:
        hosts = {r.host_id: _host_text(r) for r in rows}
        rows = [r for r in rows if _match_host(r, sel.host)]
        if not rows:
            raise ConfigError(
                f"no host matches {sel.host!r}; stored: "
                + "; ".join(f"{h} ({t})" for h, t in sorted(hosts.items()))
            )
    metrics = {r.metric for r in rows}
    if sel.metric not in (AUTO, ALL) and sel.metric not in metrics:
        raise ConfigError(
            f"unknown metric {sel.metric!r} in the history; stored: {_choices(metrics)} "
            "(or auto, all)"
        )
    # deferred: loads scipy, not while the parser is built
    from katra_trace.analysis.intervals import geometric_mean

    groups: dict[tuple[str, ...], list[TrendRow]] = {}
    for r in rows:
        host = "*" if sel.allow_host_mismatch else str(r.host_id)
        codegen = (
            "" if sel.allow_host_mismatch or not is_count(r.metric) else str(r.codegen_id or "")
        )
        groups.setdefault((r.scene, r.zone, r.metric, host, codegen), []).append(r)
    if sel.metric == AUTO:
        # per scene, zone and host: the first metric of AUTO_ORDER it has
        chosen: dict[tuple[str, ...], str] = {}
        for scene, zone, metric, host, _c in groups:
            k = (scene, zone, host)
            if metric in AUTO_ORDER and (
                k not in chosen or AUTO_ORDER.index(metric) < AUTO_ORDER.index(chosen[k])
            ):
                chosen[k] = metric
        groups = {g: v for g, v in groups.items() if chosen.get((g[0], g[1], g[3])) == g[2]}
    elif sel.metric != ALL:
        groups = {g: v for g, v in groups.items() if g[2] == sel.metric}
    rank = {lab: i for i, lab in enumerate(order)}
    out = []
    for (scene, zone, metric, host, codegen), grows in groups.items():
        by_label: dict[str, list[tuple[TrendRow, float]]] = {}
        for r in grows:
            value = r.stat(sel.stat)
            if value is not None and math.isfinite(value) and value > 0:
                by_label.setdefault(r.label, []).append((r, float(value)))
        if not by_label:
            continue
        points = []
        first_settings: str | None = None
        for lab in sorted(by_label, key=rank.__getitem__):
            pairs = sorted(by_label[lab], key=lambda rv: rv[0].trace_sha256)
            lrows = [r for r, _ in pairs]
            values = [v for _, v in pairs]
            settings = "; ".join(
                sorted(
                    {f"size {r.size}" + (f", params {r.params}" if r.params else "") for r in lrows}
                )
            )
            if first_settings is None:
                first_settings = settings
            points.append(
                Point(
                    lab,
                    min(int(r.label_time_ns or 0) for r in lrows),
                    ", ".join(sorted({str(r.commit) for r in lrows if r.commit})),
                    values,
                    geometric_mean(np.array(values)),
                    "" if settings == first_settings else settings,
                    rank[lab],
                )
            )
        host_texts = sorted({_host_text(r) for r in grows})
        out.append(
            Series(
                scene,
                zone,
                metric,
                str(grows[0].unit),
                sel.stat,
                host,
                " | ".join(host_texts),
                codegen,
                points,
                frozenset(r.trace_sha256 for kept in by_label.values() for r, _ in kept),
            )
        )
    out.sort(
        key=lambda s: (
            s.scene,
            s.zone,
            AUTO_ORDER.index(s.metric) if s.metric in AUTO_ORDER else 9,
            s.metric,
            s.host_id,
        )
    )
    return out


def load_series(
    source: Source, sel: Selection, lock_timeout_s: float = DEFAULT_LOCK_TIMEOUT_S
) -> list[Series]:
    """The series of ``sel`` in ``source`` (ConfigError when none result)."""
    rows = [TrendRow(*r) for r in read_rows(source, _READ_COLUMNS, lock_timeout_s)]
    series = build_series(rows, sel)
    if not series:
        raise ConfigError(f"history {source.name!r} has no {sel.stat} values for that selection")
    return series


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
    order = {lab: i for i, lab in enumerate(_all_labels(series))}
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


def _all_labels(series: Sequence[Series]) -> list[str]:
    ranks: dict[str, int] = {}
    for s in series:
        for p in s.points:
            ranks.setdefault(p.label, p.rank)
    return sorted(ranks, key=ranks.__getitem__)


def _newest(series: Sequence[Series]) -> str:
    labels = _all_labels(series)
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
        _all_labels(series),
        len(frozenset().union(*(s.traces for s in series))),
        check_steps(series, alpha=alpha, threshold_pct=threshold_pct),
    )


__all__ = [
    "CheckResult",
    "DepartureReport",
    "HIGHER_IS_BETTER",
    "Point",
    "STATS",
    "Selection",
    "TrendRow",
    "Series",
    "SeriesModel",
    "StepReport",
    "Trends",
    "build_series",
    "check_steps",
    "load_series",
    "sparkline",
    "trend_data",
]
