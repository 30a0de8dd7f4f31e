"""``katra3d info TRACE``: what a trace holds and how it was captured."""

from __future__ import annotations

import argparse
import dataclasses
import datetime as dt
import textwrap
from collections.abc import Mapping
from typing import Any

import numpy as np

from katra3d.harness.cli._common import print_json, terminal_width
from katra_trace import Clock, Flag, Kind, Trace
from katra_trace.analysis.slow import restarts_text
from katra_trace.errors import ExitCode
from katra_trace.io.header import HostInfo
from katra_trace.io.image_block import KeptFrame
from katra_trace.io.tracesets import open_quietly
from katra_trace.jsontext import JsonObject, JsonValue, record_dict
from katra_trace.text import escape
from katra_trace.units import format_ms, significant


def register(sub: argparse._SubParsersAction) -> None:  # type: ignore[type-arg]
    p = sub.add_parser(
        "info",
        help="show a trace's header, host, capture options and counts",
        description="Show a trace's header, host info, capture options, counts and damage.",
    )
    p.add_argument("trace", metavar="TRACE", help="a .katra trace file")
    p.add_argument(
        "--all",
        action="store_true",
        help="every header field, host fact and capture option "
        "(default: a compact summary without empty fields)",
    )
    p.add_argument(
        "--json",
        action="store_true",
        help="print one JSON object (header, summary, events, truncated); always complete",
    )
    p.set_defaults(func=run)


def _enum_name(enum: type[Kind] | type[Clock], value: int, prefix: str) -> str:
    """``frame`` / ``wall``; an unknown value (a newer minor) as ``clock9``."""
    try:
        return enum(value).name.lower()
    except ValueError:
        return f"{prefix}{value}"


@dataclasses.dataclass(frozen=True)
class EventCounts:
    by_kind: dict[str, int]
    by_clock: dict[str, int]
    warmup_events: int
    warmup_frames: int
    scenes: list[str]


def event_counts(trace: Trace) -> EventCounts:
    ev = trace.events
    kinds, kind_n = np.unique(ev["kind"], return_counts=True)
    clocks, clock_n = np.unique(ev["clock"], return_counts=True)
    by_kind = {_enum_name(Kind, int(k), "kind"): int(n) for k, n in zip(kinds, kind_n, strict=True)}
    by_clock = {
        _enum_name(Clock, int(c), "clock"): int(n) for c, n in zip(clocks, clock_n, strict=True)
    }
    scenes = sorted({trace.name(s) for s in set(ev["scene"].tolist()) if s})
    return EventCounts(
        by_kind,
        by_clock,
        warmup_events=int(((ev["flags"] & Flag.WARMUP) != 0).sum()),
        # one warmup frame is an event per clock and zone
        warmup_frames=int(
            len(
                {
                    (int(e["scene"]), int(e["frame"]))
                    for e in ev[(ev["kind"] == Kind.FRAME) & ((ev["flags"] & Flag.WARMUP) != 0)]
                }
            )
        ),
        scenes=scenes,
    )


def info_dict(trace: Trace) -> JsonObject:
    return {
        "path": str(trace.path),
        "size_bytes": trace.size,
        "header": trace.header.as_dict(),
        "summary": trace.summary.as_dict(),
        "events": len(trace.events),
        "counts": record_dict(event_counts(trace)),
        "annotations": trace.annotations,
        "clock_syncs": trace.clock_syncs,
        "truncated": trace.truncated,
        "stopped_at": trace.stopped_at,
        "stop_reason": trace.stop_reason or None,
        "notes": trace.notes,
        "images": [
            {
                "scene": i.scene,
                "frame_index": i.frame_index,
                "time_s": i.time_s,
                "width": i.width,
                "height": i.height,
                "channels": i.channels,
                "sha256": i.sha256,
                "key": i.key,
                "offset": i.offset,
                "damage": i.damage or None,
            }
            for i in _kept_frames(trace)
        ],
    }


def _fmt_value(v: object) -> str:
    if isinstance(v, dict):
        return ", ".join(f"{k}={_fmt_value(x)}" for k, x in v.items()) or "-"
    if isinstance(v, (list, tuple)):
        return ", ".join(_fmt_value(x) for x in v) or "-"
    if isinstance(v, float):
        return significant(v)
    return "-" if v is None or v == "" else str(v)


def _is_nested(v: object) -> bool:
    if isinstance(v, dict):
        return any(isinstance(x, (dict, list, tuple)) for x in v.values())
    return isinstance(v, (list, tuple)) and any(isinstance(x, (dict, list, tuple)) for x in v)


def _lines(items: Mapping[str, JsonValue], indent: str) -> list[str]:
    out: list[str] = []
    width = max((len(str(k)) for k in items), default=0)
    for k, v in items.items():
        if _is_nested(v):
            out.append(f"{indent}{k}:")
            if isinstance(v, dict):
                out += _lines(v, indent + "  ")
            elif isinstance(v, (list, tuple)):
                for x in v:
                    out.append(f"{indent}  - {_fmt_value(x)}")
        else:
            out.append(f"{indent}{str(k).ljust(width)}  {_fmt_value(v)}")
    return out


def _section(title: str, items: Mapping[str, JsonValue]) -> list[str]:
    return [f"{title}:"] + (_lines(items, "  ") if items else ["  (none)"])


def _known(v: object) -> str:
    return "?" if v is None else str(v)


def render_text(trace: Trace) -> str:
    """``info --all``: every header, host, capture and summary field."""
    h, s = trace.header, trace.summary.as_dict()
    started = _started(h.start_wall_ns) or "?"
    n = len(trace.events)
    counts = event_counts(trace)
    lines = [
        f"trace     {trace.path}",
        f"format    {_known(h.format_version)} (schema {_known(h.schema_hash)}), "
        f"written by {_known(h.tool_version)}",
        f"workload  {h.workload or '-'}",
        f"started   {started}  pid {_known(h.pid)}",
        f"status    {s.get('status', '?')}"
        + ("  (summary rebuilt by scanning)" if trace.summary_rebuilt else ""),
        f"events    {n}  ({_fmt_value(counts.by_kind)}; clocks: "
        f"{_fmt_value(counts.by_clock)}; "
        f"warmup frames {counts.warmup_frames})",
        f"scenes    {', '.join(counts.scenes) or '-'}",
        f"size      {trace.size} bytes" + (f", {trace.size / n:.1f} bytes/event" if n else ""),
    ]
    if s.get("dropped_events"):
        lines.append(
            f"dropped   {s['dropped_events']} events in {s.get('dropped_batches', '?')} batches "
            "(drop policy)"
        )
    if h.notes:
        lines.append(f"notes     {h.notes}")
    if trace.truncated:
        lines.append(
            f"DAMAGED   {trace.stop_reason}; everything before offset {trace.stopped_at} was "
            "recovered"
        )
    for note in trace.notes:
        lines.append(f"repaired  {note}")
    lines += [f"image     {_image_line(frame)}" for frame in _kept_frames(trace)]
    lines += [f"shard     {line}" for line in _shard_lines(trace)]
    opts = h.capture_options
    if opts.timing_mode:
        lines.append(
            f"timing    {opts.timing_mode}"
            + (f" ({opts.timing_reason})" if opts.timing_reason else "")
        )
    lines += _section("capture options", opts.as_dict())
    lines += _section("host", h.host_info.as_dict())
    if isinstance(user := s.get("user"), dict) and user:
        lines += _section("summary", user)
    return "\n".join(lines)


def _joined(*parts: object, sep: str = ", ") -> str:
    return sep.join(str(p) for p in parts if p not in (None, "", "-") and p != [] and p != ())


def _started(start_wall_ns: int | None) -> str:
    if start_wall_ns is None:
        return ""
    try:
        return dt.datetime.fromtimestamp(start_wall_ns / 1e9, dt.timezone.utc).isoformat(
            timespec="seconds"
        )
    except (OverflowError, ValueError, OSError):
        return ""


def _capture_line(trace: Trace) -> str:
    o = trace.header.capture_options
    size = f"{o.run_size[0]}x{o.run_size[1]}" if o.run_size and len(o.run_size) == 2 else ""
    duration = o.resolved.duration_s
    frames = f"{o.run_frames} frames" if o.run_frames else f"{duration:g} s" if duration else ""
    if frames and o.run_warmup:
        frames += f" (+{o.run_warmup} warmup)"
    return _joined(
        size,
        frames + (" a scene" if frames and o.resolved.scenes else ""),
        f"{o.run_samples}x MSAA" if o.run_samples else "",
        f"zones {o.zones}" if o.zones not in (None, False, "off") else "",
        f"backend {trace.header.host_info.backend or o.resolved.backend or ''}".strip()
        if (trace.header.host_info.backend or o.resolved.backend)
        else "",
        f"measure {o.measure_mode}" if o.measure_mode != "time" else "",
        f"via {o.api}" if o.api and o.api != "run" else "",
    )


def _scene_lines(trace: Trace, counts: EventCounts) -> list[str]:
    # the summary may hold anything: only a list of objects is read
    user = trace.summary.user
    listed = user.get("scenes") if isinstance(user, dict) else None
    recorded = [s for s in listed if isinstance(s, dict)] if isinstance(listed, list) else []
    params = trace.header.capture_options.scene_params
    if not recorded:
        return [_joined(name, _params(params.get(name)), sep="  ") for name in counts.scenes]
    width = max(len(str(s.get("scene", "?"))) for s in recorded)
    out = []
    for s in recorded:
        name = str(s.get("scene", "?"))
        median = s.get("median_ms")
        level = (
            f"median {format_ms(median)} ({s.get('clock', '?')})"
            if isinstance(median, (int, float))
            else f"median {_fmt_value(s.get('median'))} {s.get('clock', '')}".rstrip()
            if s.get("median") is not None
            else ""
        )
        frames = f"{s['frames']} frames" if s.get("frames") is not None else ""
        out.append(
            _joined(
                name.ljust(width),
                s.get("status"),
                frames,
                level,
                _params(params.get(name)),
                s.get("reason"),
                sep="  ",
            )
        )
    return out


def _restart_lines(trace: Trace) -> list[str]:
    """A line per replayed scene restarted from its start: where, and that those frames are out."""
    out = []
    for a in trace.annotations:
        replay = a.get("replay") if a.get("type") == "scene" else None
        restarts = replay.get("restarts") if isinstance(replay, dict) else None
        if isinstance(restarts, list) and restarts:
            out.append(
                f"{a.get('scene', '?')}: the trace replayed again from its start at "
                f"{restarts_text(restarts)}: a new replayer's context and compiles, left out of "
                "statistics"
            )
    return out


def _params(params: Any) -> str:
    return " ".join(f"{k}={v}" for k, v in params.items()) if isinstance(params, dict) else ""


def _host_text(h: HostInfo) -> list[str]:
    system = h.system.as_dict()
    cores = system.get("cpu_cores")
    gl = _joined(h.renderer, f"OpenGL {h.gl.version}" if h.gl.version else "")
    machine = _joined(
        system.get("cpu_model"),
        f"{cores} cores" if cores else "",
        _joined(system.get("os"), system.get("kernel"), sep=" "),
        f"Python {system['python']}" if system.get("python") else "",
        system.get("hostname"),
    )
    return [line for line in (gl, machine) if line]


def _shard_lines(trace: Trace) -> list[str]:
    shard = trace.header.capture_options.shard
    if not trace.header.shards:
        return [f"{shard} of the run's scenes (katra3d merge joins the shards)"] if shard else []
    host = trace.header.host_info.as_dict()
    return [
        _joined(
            _joined(s.shard, s.file, sep=" "),
            ", ".join(s.scenes or ()) or "",
            _started(s.start_wall_ns),
            "the host above"
            if s.host_info.as_dict() == host
            else "; ".join(_host_text(s.host_info)),
            sep="; ",
        )
        for s in trace.header.shards
    ]


def _kept_frames(trace: Trace) -> list[KeptFrame]:
    """The kept frames as found; no pixel is decoded (``validate`` checks them)."""
    return list(trace.kept_frames.values())


def _image_line(frame: KeptFrame) -> str:
    line = (
        f"{frame.scene}: frame {frame.frame_index}, {frame.width}x{frame.height}, sha256 "
        f"{frame.sha256[:12]}"
    )
    return f"{line}; DAMAGED: {frame.damage}" if frame.damage else line


def render_compact(trace: Trace, width: int = 80) -> str:
    """``info``'s default: the facts worth reading, wrapped at ``width``."""
    h, s = trace.header, trace.summary.as_dict()
    counts = event_counts(trace)
    n = len(trace.events)
    o = h.capture_options
    rows: list[tuple[str, str | list[str]]] = [
        ("trace", f"{trace.path} ({trace.size} bytes, {n} events)"),
        ("workload", h.workload or ""),
        (
            "status",
            _joined(
                s.get("status", "?"), "summary rebuilt by scanning" if trace.summary_rebuilt else ""
            ),
        ),
        (
            "written",
            _joined(
                _started(h.start_wall_ns),
                f"by {h.tool_version}" if h.tool_version else "",
                f"format {h.format_version}" if h.format_version else "",
            ),
        ),
        (
            "timing",
            _joined(
                _joined(o.timing_mode, f"{o.primary_clock} clock" if o.primary_clock else ""),
                o.timing_reason,
                sep=": ",
            ),
        ),
        ("capture", _capture_line(trace)),
        (
            "events",
            f"{_fmt_value(counts.by_kind)}; clocks {_fmt_value(counts.by_clock)}" if n else "",
        ),
        ("scenes", _scene_lines(trace, counts)),
        ("images", [_image_line(i) for i in _kept_frames(trace)]),
        ("host", _host_text(trace.header.host_info)),
        ("shards" if trace.header.shards else "shard", _shard_lines(trace)),
        ("notes", h.notes or ""),
    ]
    if counts.warmup_frames:
        rows.insert(
            -3,
            ("warmup", f"{counts.warmup_frames} warmup frames recorded, left out of statistics"),
        )
    rows.insert(-3, ("restarts", _restart_lines(trace)))
    if s.get("dropped_events"):
        rows.append(
            (
                "dropped",
                f"{s['dropped_events']} events in {s.get('dropped_batches', '?')} batches "
                "(drop policy)",
            )
        )
    if trace.truncated:
        rows.append(
            (
                "DAMAGED",
                f"{trace.stop_reason}; everything before offset {trace.stopped_at} was recovered",
            )
        )
    rows += [("repaired", note) for note in trace.notes]
    label_w = max(len(k) for k, _ in rows) + 2
    out: list[str] = []
    for label, value in rows:
        for i, text in enumerate([value] if isinstance(value, str) else value):
            if not text:
                continue
            lead = (label if i == 0 else "").ljust(label_w)
            out += textwrap.wrap(
                escape(text),
                width=max(width, label_w + 20),
                initial_indent=lead,
                subsequent_indent=" " * label_w,
                break_on_hyphens=False,
                break_long_words=False,
            ) or [lead.rstrip()]
    out.append("(katra3d info --all: every field; --json for scripts)")
    return "\n".join(out)


def run(args: argparse.Namespace) -> int:
    trace = open_quietly(args.trace)
    if args.json:
        print_json(info_dict(trace))
    else:
        print(render_text(trace) if args.all else render_compact(trace, terminal_width()))
    return ExitCode.OK
