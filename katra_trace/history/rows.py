"""One trace -> history rows (no database): one per run x scene x zone x metric, repeating the
run's facts so a row stands alone in Parquet. Columns: docs/history.md."""

from __future__ import annotations

import dataclasses
import hashlib
import json
import math
import os
import time
from datetime import datetime, timezone
from pathlib import Path
from typing import TYPE_CHECKING, NamedTuple

import numpy as np

from katra_trace import jsontext
from katra_trace.analysis.match import codegen_facts, host_facts
from katra_trace.analysis.stats import reference_durations, scene_durations, zone_frame_totals
from katra_trace.errors import ConfigError
from katra_trace.io.inputs import open_regular
from katra_trace.metrics import is_count
from katra_trace.schema import Clock

if TYPE_CHECKING:
    from katra_trace.io.header import TraceHeader
    from katra_trace.io.reader import Trace


#: Per-run median wall / median reference wall (`compare --normalize`).
REFERENCE_METRIC = "wall/reference"
_NS_PER_MS = 1e6


def file_sha256(path: Path) -> str:
    """SHA-256 (hex) of a trace file up to its size when opened; a FIFO or device is a
    ConfigError, never a hang."""
    h = hashlib.sha256()
    with open_regular(path) as f:
        left = os.fstat(f.fileno()).st_size
        while left > 0:
            chunk = f.read(min(1 << 20, left))
            if not chunk:
                break
            h.update(chunk)
            left -= len(chunk)
    return h.hexdigest()


def short_id(obj: object) -> str:
    """12 hex digits of canonical JSON's SHA-256 ("" for None)."""
    if obj is None:
        return ""
    text = json.dumps(obj, sort_keys=True, separators=(",", ":"), default=str)
    return hashlib.sha256(text.encode()).hexdigest()[:12]


#: Label times a signed 64-bit ns column holds, in whole seconds.
_TIME_MIN_NS = -(2**63) // 10**9 * 10**9 + 10**9
_TIME_MAX_NS = (2**63 - 1) // 10**9 * 10**9


def parse_time_ns(text: str) -> int:
    """An ISO 8601 date or time -> UTC ns (no offset: UTC). Raises ConfigError."""
    try:
        when = datetime.fromisoformat(text.strip().replace("Z", "+00:00").replace("z", "+00:00"))
    except ValueError:
        raise ConfigError(
            f"--time {text!r} is not an ISO 8601 time (e.g. 2026-11-30T12:00:00Z; "
            "git show -s --format=%cI SHA prints one)"
        ) from None
    if when.tzinfo is None:
        when = when.replace(tzinfo=timezone.utc)
    ns = int(round(when.timestamp() * 1e9 / 1000)) * 1000
    if not _TIME_MIN_NS <= ns <= _TIME_MAX_NS:
        raise ConfigError(
            f"--time {text!r} is outside the times a history stores ({iso_utc(_TIME_MIN_NS)} to "
            f"{iso_utc(_TIME_MAX_NS)}: nanoseconds since 1970 in 64 bits)"
        )
    return ns


def iso_utc(ns: int | None) -> str:
    if ns is None:
        return ""
    return datetime.fromtimestamp(ns / 1e9, tz=timezone.utc).strftime("%Y-%m-%dT%H:%M:%SZ")


@dataclasses.dataclass(frozen=True)
class HostFingerprint:
    """What must match for two runs' numbers to sit on one trend."""

    host_id: str
    renderer: str
    driver: str
    cpu: str
    codegen_id: str
    codegen: str
    machine_name: str

    @property
    def description(self) -> str:
        return f"{self.renderer} / {self.driver} / {self.cpu}"


def host_fingerprint(header: TraceHeader, scene: str | None = None) -> HostFingerprint:
    """A header's host (``scene``'s in a merged trace): renderer, driver, CPU, codegen."""
    facts = host_facts(header, scene)
    system = (header.host_info if scene is None else header.host_of(scene)).system
    renderer = str(facts.get("renderer") or "?")
    driver = str(facts.get("driver") or "?")
    cpu = system.cpu_model or "?"
    codegen = codegen_facts(header, scene)
    return HostFingerprint(
        host_id=short_id([renderer, driver, cpu]),
        renderer=renderer,
        driver=driver,
        cpu=cpu,
        codegen_id=short_id(codegen) if codegen else "",
        codegen=jsontext.dumps(codegen, sort_keys=True, default=str) if codegen else "",
        machine_name=system.hostname or "",
    )


def _size(header: TraceHeader) -> str:
    size = header.capture_options.run_size
    if size is not None and len(size) == 2:
        return f"{size[0]}x{size[1]}"
    return "" if size is None else str(list(size))


def _finite(x: float) -> float | None:
    return x if math.isfinite(x) else None


class _Figures(NamedTuple):
    """Times in ms, counts as counted."""

    frames: int
    median: float
    mean: float
    p99: float
    low_1pct_fps: float | None
    cv: float | None


def _stats(values: np.ndarray, count: bool) -> _Figures:
    d = np.asarray(values, dtype=np.float64)
    scale = 1.0 if count else _NS_PER_MS
    mean = float(d.mean())
    stdev = float(np.std(d, ddof=1)) if d.size > 1 else 0.0
    low = None
    if not count:
        k = max(1, math.ceil(0.01 * d.size - 1e-9))
        slow_ns = float(np.sort(d)[-k:].sum())
        low = k * 1e9 / slow_ns if slow_ns > 0 else None
    return _Figures(
        int(d.size),
        float(np.median(d)) / scale,
        mean / scale,
        float(np.percentile(d, 99.0)) / scale,
        low,
        _finite(stdev / mean) if mean > 0 else None,
    )


@dataclasses.dataclass(frozen=True)
class RunFacts:
    label: str
    commit: str = ""
    label_time_ns: int | None = None  #: None: the capture's start
    added_ns: int = 0


@dataclasses.dataclass(frozen=True)
class HistoryRow:
    trace_sha256: str
    label: str
    label_time_ns: int | None  #: UTC ns
    commit: str
    run_start_ns: int | None  #: UTC ns
    added_ns: int  #: UTC ns
    host_id: str
    renderer: str
    driver: str
    cpu: str
    codegen_id: str
    codegen: str  #: JSON ("" when absent)
    machine_name: str
    mode: str
    size: str
    params: str  #: JSON ("" when not recorded)
    scene: str
    zone: str  #: "" for the scene's frames
    metric: str
    unit: str
    frames: int
    median: float  #: in `unit`
    mean: float
    p99: float
    low_1pct_fps: float | None
    cv: float | None
    trace_path: str
    trace_status: str
    tool_version: str


_SQL_TYPES = {"str": "VARCHAR", "int": "BIGINT", "float": "DOUBLE"}
COLUMNS: tuple[tuple[str, str], ...] = tuple(
    (f.name, _SQL_TYPES[str(f.type).split(" ")[0]]) for f in dataclasses.fields(HistoryRow)
)
COLUMN_NAMES: tuple[str, ...] = tuple(name for name, _ in COLUMNS)


def trace_rows(trace: Trace, sha256: str, facts: RunFacts) -> list[HistoryRow]:
    header = trace.header
    host = host_fingerprint(header)
    start_ns = header.start_wall_ns
    opts = header.capture_options
    strings = list(trace.strings)
    frames = scene_durations(trace.events, strings)
    refs = reference_durations(trace.events, strings)
    out: list[HistoryRow] = []

    def add(scene: str, zone: str, metric: str, figures: _Figures, unit: str | None = None) -> None:
        params = opts.params_of(scene)
        out.append(
            HistoryRow(
                trace_sha256=sha256,
                label=facts.label,
                label_time_ns=facts.label_time_ns
                if facts.label_time_ns is not None
                else (start_ns or facts.added_ns),
                commit=facts.commit,
                run_start_ns=start_ns,
                added_ns=facts.added_ns or time.time_ns(),
                # a merged trace: each scene's own host
                **dataclasses.asdict(host_fingerprint(header, scene) if header.shards else host),
                mode=opts.measure_mode,
                size=_size(header),
                params=jsontext.dumps(params, sort_keys=True, default=str)
                if params is not None
                else "",
                scene=scene,
                zone=zone,
                metric=metric,
                unit=unit or (metric if is_count(metric) else "ms"),
                **figures._asdict(),
                trace_path=os.path.abspath(str(trace.path)),
                trace_status=trace.status,
                tool_version=header.tool_version or "",
            )
        )

    def add_values(scene: str, zone: str, metric: str, values: np.ndarray) -> None:
        if values.size:
            add(scene, zone, metric, _stats(values, is_count(metric)))

    for scene, per_clock in frames.items():
        for clock, values in per_clock.items():
            add_values(scene, "", clock, values)
        ref = refs.get(scene, {}).get("wall")
        wall = per_clock.get("wall")
        if wall is not None and wall.size and ref is not None and ref.size and np.median(ref) > 0:
            # unitless: undo _stats' ns -> ms scaling
            f = _stats(wall / float(np.median(ref)), False)
            ratio = f._replace(
                median=f.median * _NS_PER_MS,
                mean=f.mean * _NS_PER_MS,
                p99=f.p99 * _NS_PER_MS,
                low_1pct_fps=None,
            )
            add(scene, "", REFERENCE_METRIC, ratio, unit="x reference")
    for zclock in Clock:
        zones = zone_frame_totals(trace.events, strings, int(zclock))
        for scene, per_zone in zones.items():
            for zone, totals in per_zone.items():
                add_values(scene, zone, zclock.name.lower(), totals)
    return out


__all__ = [
    "COLUMNS",
    "COLUMN_NAMES",
    "HistoryRow",
    "HostFingerprint",
    "REFERENCE_METRIC",
    "RunFacts",
    "file_sha256",
    "host_fingerprint",
    "iso_utc",
    "parse_time_ns",
    "short_id",
    "trace_rows",
]
