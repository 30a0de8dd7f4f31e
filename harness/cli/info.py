"""``katra3d info TRACE [--json]``: what a trace holds and how it was captured."""

from __future__ import annotations

import argparse
import datetime as dt
from collections import Counter
from typing import Any

from harness.cli._common import load_trace_quietly, print_json
from katra_trace import Clock, Flag, Kind, Trace


def register(sub: argparse._SubParsersAction) -> None:  # type: ignore[type-arg]
    p = sub.add_parser("info", help="show a trace's header, host, capture options and counts",
                       description="Show a trace's header, host info, capture options, counts and damage.")
    p.add_argument("trace", metavar="TRACE", help="a .katra trace file")
    p.add_argument("--json", action="store_true", help="print one JSON object (header, summary, events, truncated)")
    p.set_defaults(func=run)


def event_counts(trace: Trace) -> dict[str, Any]:
    """Counts by kind and clock, warmup events, and scenes seen."""
    ev = trace.events
    by_kind = Counter(Kind(k).name.lower() for k in ev["kind"].tolist()) if len(ev) else Counter()
    by_clock = Counter(Clock(c).name.lower() for c in ev["clock"].tolist()) if len(ev) else Counter()
    scenes = sorted({trace.name(s) for s in set(ev["scene"].tolist()) if s})
    return {
        "by_kind": dict(by_kind),
        "by_clock": dict(by_clock),
        "warmup": int(((ev["flags"] & Flag.WARMUP) != 0).sum()),
        "scenes": scenes,
    }


def info_dict(trace: Trace) -> dict[str, Any]:
    return {
        "path": str(trace.path),
        "size_bytes": trace.size,
        "header": trace.header,
        "summary": trace.summary,
        "events": len(trace.events),
        "counts": event_counts(trace),
        "annotations": trace.annotations,
        "clock_syncs": trace.clock_syncs,
        "truncated": trace.truncated,
        "stopped_at": trace.stopped_at,
        "stop_reason": trace.stop_reason or None,
    }


def _fmt_value(v: Any) -> str:
    """One-line form of a scalar, a flat list or a small dict."""
    if isinstance(v, dict):
        return ", ".join(f"{k}={_fmt_value(x)}" for k, x in v.items()) or "-"
    if isinstance(v, (list, tuple)):
        return ", ".join(_fmt_value(x) for x in v) or "-"
    return "-" if v is None or v == "" else str(v)


def _is_nested(v: Any) -> bool:
    if isinstance(v, dict):
        return any(isinstance(x, (dict, list, tuple)) for x in v.values())
    return isinstance(v, (list, tuple)) and any(isinstance(x, (dict, list, tuple)) for x in v)


def _lines(items: dict[str, Any], indent: str) -> list[str]:
    """Aligned ``key  value`` lines; nested dicts and lists of dicts get their own indented lines."""
    out: list[str] = []
    width = max((len(str(k)) for k in items), default=0)
    for k, v in items.items():
        if _is_nested(v):
            out.append(f"{indent}{k}:")
            if isinstance(v, dict):
                out += _lines(v, indent + "  ")
            else:
                for x in v:
                    out.append(f"{indent}  - {_fmt_value(x)}")
        else:
            out.append(f"{indent}{str(k).ljust(width)}  {_fmt_value(v)}")
    return out


def _section(title: str, items: dict[str, Any]) -> list[str]:
    return [f"{title}:"] + (_lines(items, "  ") if items else ["  (none)"])


def render_text(trace: Trace) -> str:
    h, s = trace.header, trace.summary
    start = h.get("start_wall_ns")
    started = (dt.datetime.fromtimestamp(start / 1e9, dt.timezone.utc).isoformat(timespec="seconds")
               if isinstance(start, int) else "?")
    n = len(trace.events)
    counts = event_counts(trace)
    lines = [
        f"trace     {trace.path}",
        f"format    {h.get('format_version', '?')} (schema {h.get('schema_hash', '?')}), "
        f"written by {h.get('tool_version', '?')}",
        f"workload  {h.get('workload') or '-'}",
        f"started   {started}  pid {h.get('pid', '?')}",
        f"status    {s.get('status', '?')}" + ("  (summary rebuilt by scanning)" if trace.summary_rebuilt else ""),
        f"events    {n}  ({_fmt_value(counts['by_kind'])}; clocks: {_fmt_value(counts['by_clock'])}; "
        f"warmup {counts['warmup']})",
        f"scenes    {', '.join(counts['scenes']) or '-'}",
        f"size      {trace.size} bytes" + (f", {trace.size / n:.1f} bytes/event" if n else ""),
    ]
    if s.get("dropped_events"):
        lines.append(f"dropped   {s['dropped_events']} events in {s.get('dropped_batches', '?')} batches "
                     "(drop policy)")
    if h.get("notes"):
        lines.append(f"notes     {h['notes']}")
    if trace.truncated:
        lines.append(f"DAMAGED   {trace.stop_reason}; everything before offset {trace.stopped_at} was recovered")
    opts = dict(h.get("capture_options") or {})
    mode = opts.get("timing_mode")
    if mode:
        lines.append(f"timing    {mode}" + (f" ({opts['timing_reason']})" if opts.get("timing_reason") else ""))
    lines += _section("capture options", opts)
    lines += _section("host", dict(h.get("host_info") or {}))
    if s.get("user"):
        lines += _section("summary", dict(s["user"]))
    return "\n".join(lines)


def run(args: argparse.Namespace) -> int:
    trace = load_trace_quietly(args.trace)
    if args.json:
        print_json(info_dict(trace))
    else:
        print(render_text(trace))
    return 0
