"""History rows as series (scene x zone x metric x host) over labels in order: what ``history
show`` lists and ``history check`` and the report judge."""

from __future__ import annotations

import dataclasses
import math
from collections.abc import Iterable, Mapping, Sequence

import numpy as np

from katra_trace.errors import ConfigError
from katra_trace.history.rows import iso_utc
from katra_trace.history.store import DEFAULT_LOCK_TIMEOUT_S, Source, read_rows
from katra_trace.jsontext import JsonObject
from katra_trace.metrics import ALL, AUTO, AUTO_ORDER, is_count

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


def all_labels(series: Sequence[Series]) -> list[str]:
    """Every label of ``series``, oldest first."""
    ranks: dict[str, int] = {}
    for s in series:
        for p in s.points:
            ranks.setdefault(p.label, p.rank)
    return sorted(ranks, key=ranks.__getitem__)


__all__ = [
    "HIGHER_IS_BETTER",
    "Point",
    "STATS",
    "Selection",
    "Series",
    "TrendRow",
    "all_labels",
    "build_series",
    "label_order",
    "load_series",
    "sparkline",
]
