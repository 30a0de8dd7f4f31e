"""Which traces may be compared: capture settings, host facts, the clock. Host facts are per
scene: in a merged trace each scene ran on its own shard's host."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import TYPE_CHECKING, TypedDict

if TYPE_CHECKING:
    from katra_trace.io.header import TraceHeader
    from katra_trace.jsontext import JsonValue

from katra_trace.metrics import (
    AUTO_ORDER,
    COUNT_CLOCKS,
    METRICS,
    MODE_CLOCKS,
    SPAN_TIME_CLOCKS,
    clock_name,
    is_count,
)

#: Scene params are checked per scene.
CAPTURE_KEYS: tuple[str, ...] = ("size", "samples", "timing_mode")
HOST_KEYS: tuple[str, ...] = ("renderer", "driver")


class HostFacts(TypedDict):
    renderer: str | None
    driver: str | None


class CaptureFacts(TypedDict):
    size: tuple[int, ...] | None
    samples: int | None
    timing_mode: str | None
    params: object


def host_facts(header: TraceHeader, scene: str | None = None) -> HostFacts:
    """``scene`` None: the trace's host."""
    host = header.host_info if scene is None else header.host_of(scene)
    return {"renderer": host.renderer, "driver": host.driver}


def capture_facts(header: TraceHeader, scene: str) -> CaptureFacts:
    """Resolved values that must match between BASE and NEW."""
    opts = header.capture_options
    return {
        "size": opts.run_size,
        "samples": opts.run_samples,
        "timing_mode": opts.timing_mode,
        "params": opts.params_of(scene),
    }


def codegen_facts(header: TraceHeader, scene: str | None = None) -> Mapping[str, JsonValue] | None:
    """CPU, Mesa, LLVM, vector width."""
    return (header.host_info if scene is None else header.host_of(scene)).codegen


def resolve_metric(
    headers: Sequence[TraceHeader], clocks: set[str], metric: str, common: set[str] | None = None
) -> str:
    """``auto``: a count clock all share, else the recorded primary, else the timing mode's, else
    the first of ``AUTO_ORDER``."""
    if metric not in METRICS:
        raise ValueError(f"unknown metric {metric!r}; choose from {', '.join(METRICS)}")
    if metric != "auto":
        return metric
    for count in COUNT_CLOCKS:
        if count in (clocks if common is None else common):
            return count
    primary = {h.capture_options.primary_clock for h in headers}
    if len(primary) == 1 and next(iter(primary)) in SPAN_TIME_CLOCKS:
        return str(next(iter(primary)))
    modes = {h.capture_options.timing_mode for h in headers}
    if len(modes) == 1 and (mode := next(iter(modes))) in MODE_CLOCKS:
        return clock_name(MODE_CLOCKS[str(mode)])
    for clock in AUTO_ORDER:
        if clock in clocks and not is_count(clock):
            return clock
    return "wall"


def _fmt(value: object) -> str:
    if isinstance(value, Mapping):
        return ", ".join(
            f"{k}={_fmt(v)}" for k, v in sorted(value.items(), key=lambda kv: str(kv[0]))
        )
    if isinstance(value, tuple) and len(value) == 2 and all(isinstance(v, int) for v in value):
        return f"{value[0]}x{value[1]}"
    return repr(value) if not isinstance(value, str) else value


def _diff(a: object, b: object) -> tuple[object, object]:
    if isinstance(a, Mapping) and isinstance(b, Mapping):
        keys = [k for k in dict.fromkeys([*a, *b]) if a.get(k) != b.get(k)]
        return {k: a.get(k) for k in keys}, {k: b.get(k) for k in keys}
    return a, b


_OVERRIDE = {
    "renderer": "--allow-host-mismatch",
    "driver": "--allow-host-mismatch",
    "params": "--allow-param-mismatch",
    "codegen": "--allow-codegen-mismatch",
}


def mismatch(
    facts: Mapping[str, Sequence[Mapping[str, object]]], allowed: set[str], notes: set[str]
) -> str:
    """Why one scene's runs are incomparable ("" when not); an ``allowed`` key only adds a note."""
    keys = ["size", "samples", "timing_mode", "params", *HOST_KEYS, "codegen"]
    for key in keys:
        if not any(key in f for side in facts.values() for f in side):
            continue
        values = {side: [f.get(key) for f in facts[side]] for side in facts}
        for side, vals in values.items():
            distinct = list(dict.fromkeys(_fmt(v) for v in vals))
            if len(distinct) > 1:
                msg = f"{side.upper()} runs differ in {key}: {' / '.join(distinct)}"
                if key in allowed:
                    notes.add(f"{msg} (allowed by {_OVERRIDE[key]})")
                    continue
                return msg
        b = list(dict.fromkeys(_fmt(v) for v in values["base"]))
        n = list(dict.fromkeys(_fmt(v) for v in values["new"]))
        if b and n and b != n:
            if len(b) == 1 and len(n) == 1:  # codegen facts are long
                bd, nd = _diff(values["base"][0], values["new"][0])
                b, n = [_fmt(bd)], [_fmt(nd)]
            msg = f"different {key}: BASE {' / '.join(b)} vs NEW {' / '.join(n)}"
            if key in allowed:
                notes.add(f"{msg} (allowed by {_OVERRIDE[key]})")
                continue
            if key in _OVERRIDE:
                return f"{msg} ({_OVERRIDE[key]} to compare anyway)"
            return msg
    return ""


__all__ = [
    "CAPTURE_KEYS",
    "HOST_KEYS",
    "CaptureFacts",
    "HostFacts",
    "capture_facts",
    "codegen_facts",
    "host_facts",
    "mismatch",
    "resolve_metric",
]
