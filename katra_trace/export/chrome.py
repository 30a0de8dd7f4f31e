"""Export a trace as Chrome Trace Event JSON: the Perfetto export's tracks, times in µs with ns
precision (docs/export.md)."""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from typing import IO, TYPE_CHECKING

import numpy as np

from katra_trace import jsontext
from katra_trace.export.output import ProgressFn
from katra_trace.export.timeline import Timeline, flag_names
from katra_trace.jsontext import JsonValue
from katra_trace.metrics import clock_name

if TYPE_CHECKING:
    from katra_trace.io.header import TraceHeader

#: Events beyond which chrome://tracing struggles (the export warns).
CHROME_EVENT_WARN = 1_000_000
_CHUNK = 65_536
#: Characters written at a time, so a long name in every event does not multiply memory.
_CHUNK_CHARS = 4 << 20


def _tid(clock: int) -> int:
    return {1: 1, 0: 2, 2: 3}.get(int(clock), int(clock) + 1)


def write_chrome(
    tl: Timeline,
    header: TraceHeader,
    summary: Mapping[str, JsonValue],
    out: IO[str],
    progress: ProgressFn | None = None,
) -> dict[str, int]:
    """Write ``tl`` as JSON to ``out``; returns event counts."""
    ev = tl.events
    total = len(ev)
    done = 0
    dumps = jsontext.dumps
    options = header.capture_options
    metadata = {
        "katra3d": {
            "workload": header.workload,
            "tool_version": header.tool_version,
            "format_version": header.format_version,
            "notes": header.notes,
            "start_wall_ns": header.start_wall_ns,
            "pid": header.pid,
        },
        "timing_mode": options.timing_mode,
        "timing_reason": options.timing_reason,
        "capture_options": options.as_dict(),
        "host_info": header.host_info.as_dict(),
        "summary": dict(summary),
    }
    out.write('{"displayTimeUnit":"ms","metadata":')
    out.write(dumps(metadata, default=str))
    out.write(',"traceEvents":[\n')
    first = True

    def emit(lines: Iterable[str]) -> int:
        nonlocal first
        n = 0
        piece: list[str] = []
        size = 0
        for line in lines:
            piece.append(line)
            size += len(line)
            if size >= _CHUNK_CHARS:
                out.write((",\n" if not first else "") + ",\n".join(piece))
                first, n, piece, size = False, n + len(piece), [], 0
        if piece:
            out.write((",\n" if not first else "") + ",\n".join(piece))
            first, n = False, n + len(piece)
        return n

    counts = {"complete": 0, "instant": 0, "counter": 0, "metadata": 0}
    meta = ['{"ph":"M","pid":0,"tid":0,"name":"process_name","args":{"name":"katra3d capture"}}']
    end_us = float(tl.end_ns.max()) / 1e3 if tl.end_ns.size else 0.0
    start_us = min(float(tl.start_ns.min()) / 1e3, 0.0) if tl.start_ns.size else 0.0
    meta.append(
        dumps(
            {
                "ph": "X",
                "pid": 0,
                "tid": 0,
                "name": f"capture: {header.workload or ''}",
                "ts": start_us,
                "dur": end_us - start_us,
                "args": metadata,
            },
            default=str,
        )
    )
    pid_of: dict[int, int] = {}
    for rank, (sid, label) in enumerate(tl.scenes.items()):
        pid_of[sid] = rank + 1
        meta.append(
            f'{{"ph":"M","pid":{rank + 1},"tid":0,"name":"process_name",'
            f'"args":{{"name":{dumps(label)}}}}}'
        )
        meta.append(
            f'{{"ph":"M","pid":{rank + 1},"tid":0,"name":"process_sort_index",'
            f'"args":{{"sort_index":{rank + 1}}}}}'
        )
    for track in tl.slice_tracks:
        meta.append(
            f'{{"ph":"M","pid":{pid_of[track.scene_id]},"tid":{_tid(track.clock)},'
            '"name":"thread_name",'
            f'"args":{{"name":{dumps(clock_name(track.clock))}}}}}'
        )
    counts["metadata"] = len(meta) - 1
    counts["complete"] += 1
    emit(meta)

    quoted = [dumps(s) for s in tl.strings]

    def q(sid: int) -> str:
        return quoted[sid] if 0 <= sid < len(quoted) else dumps(f"?{sid}")

    kinds = ev["kind"]
    for track in tl.slice_tracks:
        pid, tid = pid_of[track.scene_id], _tid(track.clock)
        idx = track.spans
        for lo in range(0, len(idx), _CHUNK):
            part = idx[lo : lo + _CHUNK]
            ts = (tl.start_ns[part] / 1e3).tolist()
            dur = ((tl.end_ns[part] - tl.start_ns[part]) / 1e3).tolist()
            cat = ['"frame"' if k == 0 else '"zone"' for k in kinds[part].tolist()]
            written = emit(
                f'{{"ph":"X","pid":{pid},"tid":{tid},"name":{q(n)},"cat":{c},'
                f'"ts":{t:.3f},"dur":{d:.3f},'
                f'"args":{{"frame":{f}{_flags_arg(fl)}}}}}'
                for n, c, t, d, f, fl in zip(
                    ev["name"][part].tolist(),
                    cat,
                    ts,
                    dur,
                    ev["frame"][part].tolist(),
                    ev["flags"][part].tolist(),
                    strict=True,
                )
            )
            counts["complete"] += written
            done += written
            if progress is not None:
                progress(done, total)
        written = emit(
            f'{{"ph":"i","s":"t","pid":{pid},"tid":{tid},"name":{q(int(ev["name"][row]))},'
            f'"cat":"marker","ts":{float(tl.start_ns[row]) / 1e3:.3f},'
            f'"args":{{"dur_ns":{int(ev["dur_ns"][row])},"frame":{int(ev["frame"][row])}'
            f"{_flags_arg(int(ev['flags'][row]))}}}}}"
            for row in track.instants.tolist()
        )
        counts["instant"] += written
        done += written
    for ctrack in tl.counter_tracks:
        pid = pid_of[ctrack.scene_id]
        name = dumps(f"{ctrack.label} ({clock_name(ctrack.clock)})")
        rows = ctrack.rows
        values = (ev["dur_ns"][rows] if ctrack.from_durations else ev["value"][rows]).astype(
            np.float64
        )
        written = emit(
            f'{{"ph":"C","pid":{pid},"name":{name},"ts":{t:.3f},"args":{{"value":{_num(v)}}}}}'
            for t, v in zip((tl.start_ns[rows] / 1e3).tolist(), values.tolist(), strict=True)
        )
        counts["counter"] += written
        done += written
        if progress is not None:
            progress(done, total)
    out.write("\n]}\n")
    return counts


def _flags_arg(flags: int) -> str:
    return f',"flags":"{flag_names(flags)}"' if flags else ""


def _num(v: float) -> str:
    return repr(v) if v == v and v not in (float("inf"), float("-inf")) else "null"


__all__ = ["CHROME_EVENT_WARN", "write_chrome"]
