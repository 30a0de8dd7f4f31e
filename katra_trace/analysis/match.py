"""Which traces may be compared: capture settings, host facts and the clock to compare.

Pure: reads trace headers (mappings), no I/O.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from katra_trace.metrics import METRICS, RUN_STATS

#: capture_options keys that must match for a comparison (scene params are checked per scene).
CAPTURE_KEYS: tuple[str, ...] = ("size", "samples", "timing_mode")
#: host facts that must match unless ``allow_host_mismatch``.
HOST_KEYS: tuple[str, ...] = ("renderer", "driver")
#: ``--metric`` choices (:data:`katra_trace.metrics.METRICS`) and per-run statistics
#: (:data:`katra_trace.metrics.RUN_STATS`) are defined in katra_trace.metrics.


def _get(d: Any, *path: str) -> Any:
    for key in path:
        if not isinstance(d, Mapping) or key not in d:
            return None
        d = d[key]
    return d


def host_facts(header: Mapping[str, Any]) -> dict[str, Any]:
    """GL renderer and driver (name + version) from a trace header's host_info."""
    host = header.get("host_info") or {}
    renderer = _get(host, "gl_renderer") or _get(host, "gl", "renderer")
    driver = _get(host, "driver_version")
    if driver is None:
        drv = _get(host, "gl", "driver")
        if isinstance(drv, Mapping) and (drv.get("name") or drv.get("version")):
            driver = f"{drv.get('name', '')} {drv.get('version', '')}".strip()
        else:
            driver = _get(host, "gl", "version")
    return {"renderer": renderer, "driver": driver}


def scene_params(options: Mapping[str, Any], scene: str) -> Any:
    """The params a capture used for ``scene`` (None when not recorded).

    Reads ``resolved.scenes[*]`` (label, params) as written by ``katra3d run``,
    else a ``params`` mapping keyed by scene, else ``scenes`` entries with a name.
    """
    resolved = options.get("resolved")
    for source in (_get(resolved, "scenes"), options.get("scenes")):
        if isinstance(source, Sequence) and not isinstance(source, str):
            for entry in source:
                if isinstance(entry, Mapping) and scene in (entry.get("label"), entry.get("name")):
                    return entry.get("params")
    params = options.get("params")
    if isinstance(params, Mapping) and isinstance(params.get(scene), Mapping):
        return params[scene]
    return None


def capture_facts(header: Mapping[str, Any], scene: str) -> dict[str, Any]:
    """The capture settings of ``scene`` that must match between BASE and NEW.

    Prefers the ``resolved`` values ``katra3d run`` records (a suite's size
    when no --size was given) over the requested ones.
    """
    opts = header.get("capture_options") or {}
    raw = opts.get("resolved")
    resolved: Mapping[str, Any] = raw if isinstance(raw, Mapping) else {}
    facts: dict[str, Any] = {key: resolved.get(key, opts.get(key)) for key in CAPTURE_KEYS}
    for key in ("size", "samples"):
        value = facts[key]
        if isinstance(value, list):
            facts[key] = tuple(value)
    facts["params"] = scene_params(opts, scene)
    return facts


def measure_mode(header: Mapping[str, Any]) -> str:
    """``time``, ``instructions`` or ``cycles``: what the capture measured (traces without it: time)."""
    mode = _get(header, "capture_options", "measure", "mode")
    return str(mode) if isinstance(mode, str) and mode else "time"


def codegen_facts(header: Mapping[str, Any]) -> Any:
    """The code-generator facts (CPU model and flags, Mesa, LLVM, vector width) of the host, or None."""
    return _get(header, "host_info", "codegen")


def resolve_metric(headers: Sequence[Mapping[str, Any]], clocks: set[str], metric: str,
                   common: set[str] | None = None) -> str:
    """The clock to compare: ``metric`` itself, or for ``auto`` the one the capture trusts.

    ``auto``: ``instructions`` (then ``cycles``) when every trace has it
    (``common``: the clocks all traces share; default ``clocks``); else the
    ``primary_clock`` the captures record, else ``wall`` in sync timing mode
    and ``gpu`` in gpu mode; when neither is recorded, the first of wall, gpu,
    cpu the traces contain.
    """
    if metric not in METRICS:
        raise ValueError(f"unknown metric {metric!r}; choose from {', '.join(METRICS)}")
    if metric != "auto":
        return metric
    for count in ("instructions", "cycles"):
        if count in (clocks if common is None else common):
            return count
    primary = {_get(h, "capture_options", "primary_clock") for h in headers}
    if len(primary) == 1 and next(iter(primary)) in ("wall", "cpu", "gpu"):
        return str(next(iter(primary)))
    modes = {_get(h, "capture_options", "timing_mode") for h in headers}
    if modes == {"sync"}:
        return "wall"
    if modes == {"gpu"}:
        return "gpu"
    for clock in ("wall", "gpu", "cpu"):
        if clock in clocks:
            return clock
    return "wall"


def _fmt(value: Any) -> str:
    if isinstance(value, Mapping):
        return ", ".join(f"{k}={_fmt(v)}" for k, v in sorted(value.items(), key=lambda kv: str(kv[0])))
    if isinstance(value, tuple) and len(value) == 2 and all(isinstance(v, int) for v in value):
        return f"{value[0]}x{value[1]}"
    return repr(value) if not isinstance(value, str) else value


def _diff(a: Any, b: Any) -> tuple[Any, Any]:
    """The parts of two mappings that differ (the values themselves otherwise)."""
    if isinstance(a, Mapping) and isinstance(b, Mapping):
        keys = [k for k in dict.fromkeys([*a, *b]) if a.get(k) != b.get(k)]
        return {k: a.get(k) for k in keys}, {k: b.get(k) for k in keys}
    return a, b


_OVERRIDE = {"renderer": "--allow-host-mismatch", "driver": "--allow-host-mismatch",
             "params": "--allow-param-mismatch", "codegen": "--allow-codegen-mismatch"}


def mismatch(facts: Mapping[str, list[dict[str, Any]]], allowed: set[str], notes: set[str]) -> str:
    """Why BASE and NEW runs of one scene are incomparable ("" when they are comparable).

    ``facts[side]`` holds one dict per run (:func:`capture_facts`,
    :func:`host_facts`, and ``codegen`` for count metrics); a key in
    ``allowed`` only adds a note to ``notes``.
    """
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
            if len(b) == 1 and len(n) == 1:  # name only what differs (codegen facts are long)
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


__all__ = ["CAPTURE_KEYS", "HOST_KEYS", "METRICS", "RUN_STATS", "capture_facts", "codegen_facts",
           "host_facts", "measure_mode", "mismatch", "resolve_metric", "scene_params"]
