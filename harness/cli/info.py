"""``katra3d info TRACE [--json]``: what a trace holds and how it was captured."""

from __future__ import annotations

import argparse
import datetime as dt
from typing import Any

import numpy as np

from harness.cli._common import fmt_float, load_trace_quietly, print_json
from katra_trace import Clock, Flag, Kind, Trace


def register(sub: argparse._SubParsersAction) -> None:  # type: ignore[type-arg]
    p = sub.add_parser("info", help="show a trace's header, host, capture options and counts",
                       description="Show a trace's header, host info, capture options, counts and damage.")
    p.add_argument("trace", metavar="TRACE", help="a .katra trace file")
    p.add_argument("--json", action="store_true", help="print one JSON object (header, summary, events, truncated)")
    p.set_defaults(func=run)


def _enum_name(enum: type[Kind] | type[Clock], value: int, prefix: str) -> str:
    """``frame`` / ``wall``; a value this build does not know (a newer format minor) as ``clock9``."""
    try:
        return enum(value).name.lower()
    except ValueError:
        return f"{prefix}{value}"


def event_counts(trace: Trace) -> dict[str, Any]:
    """Counts by kind and clock, warmup events and frames, and scenes seen."""
    ev = trace.events
    kinds, kind_n = np.unique(ev["kind"], return_counts=True)
    clocks, clock_n = np.unique(ev["clock"], return_counts=True)
    by_kind = {_enum_name(Kind, int(k), "kind"): int(n) for k, n in zip(kinds, kind_n)}
    by_clock = {_enum_name(Clock, int(c), "clock"): int(n) for c, n in zip(clocks, clock_n)}
    scenes = sorted({trace.name(s) for s in set(ev["scene"].tolist()) if s})
    return {
        "by_kind": by_kind,
        "by_clock": by_clock,
        "warmup_events": int(((ev["flags"] & Flag.WARMUP) != 0).sum()),
        # frames, not events: one warmup frame is an event per clock (and zone)
        "warmup_frames": int(len({(int(e["scene"]), int(e["frame"])) for e in
                                  ev[(ev["kind"] == Kind.FRAME) & ((ev["flags"] & Flag.WARMUP) != 0)]})),
        "scenes": scenes,
    }


def info_dict(trace: Trace) -> dict[str, Any]:
    return {
        "path": str(trace.path),
        "size_bytes": trace.size,
        "header": trace.header.as_dict(),
        "summary": trace.summary,
        "events": len(trace.events),
        "counts": event_counts(trace),
        "annotations": trace.annotations,
        "clock_syncs": trace.clock_syncs,
        "truncated": trace.truncated,
        "stopped_at": trace.stopped_at,
        "stop_reason": trace.stop_reason or None,
        "notes": trace.notes,
    }


def _fmt_value(v: Any) -> str:
    """One-line form of a scalar, a flat list or a small dict."""
    if isinstance(v, dict):
        return ", ".join(f"{k}={_fmt_value(x)}" for k, x in v.items()) or "-"
    if isinstance(v, (list, tuple)):
        return ", ".join(_fmt_value(x) for x in v) or "-"
    if isinstance(v, float):
        return fmt_float(v)
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


def _known(v: object) -> str:
    """A header value as text, ``?`` when not recorded."""
    return "?" if v is None else str(v)


def render_text(trace: Trace) -> str:
    h, s = trace.header, trace.summary
    start = h.start_wall_ns
    started = (dt.datetime.fromtimestamp(start / 1e9, dt.timezone.utc).isoformat(timespec="seconds")
               if start is not None else "?")
    n = len(trace.events)
    counts = event_counts(trace)
    lines = [
        f"trace     {trace.path}",
        f"format    {_known(h.format_version)} (schema {_known(h.schema_hash)}), "
        f"written by {_known(h.tool_version)}",
        f"workload  {h.workload or '-'}",
        f"started   {started}  pid {_known(h.pid)}",
        f"status    {s.get('status', '?')}" + ("  (summary rebuilt by scanning)" if trace.summary_rebuilt else ""),
        f"events    {n}  ({_fmt_value(counts['by_kind'])}; clocks: {_fmt_value(counts['by_clock'])}; "
        f"warmup frames {counts['warmup_frames']})",
        f"scenes    {', '.join(counts['scenes']) or '-'}",
        f"size      {trace.size} bytes" + (f", {trace.size / n:.1f} bytes/event" if n else ""),
    ]
    if s.get("dropped_events"):
        lines.append(f"dropped   {s['dropped_events']} events in {s.get('dropped_batches', '?')} batches "
                     "(drop policy)")
    if h.notes:
        lines.append(f"notes     {h.notes}")
    if trace.truncated:
        lines.append(f"DAMAGED   {trace.stop_reason}; everything before offset {trace.stopped_at} was recovered")
    for note in trace.notes:
        lines.append(f"repaired  {note}")
    opts = h.capture_options
    if opts.timing_mode:
        lines.append(f"timing    {opts.timing_mode}" + (f" ({opts.timing_reason})" if opts.timing_reason else ""))
    lines += _section("capture options", opts.as_dict())
    lines += _section("host", h.host_info.as_dict())
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
