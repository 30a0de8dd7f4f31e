"""Export a trace as a Perfetto ``.pftrace`` (docs/export.md), with the optional ``perfetto``
package's builder, not its trace processor (which downloads a binary)."""

from __future__ import annotations

from collections.abc import Mapping
from typing import TYPE_CHECKING, Any, BinaryIO

import numpy as np

from katra_trace import jsontext
from katra_trace.analysis.slow import SlowFrame, header_slow_frames
from katra_trace.errors import TraceFormatError
from katra_trace.export.output import ProgressFn
from katra_trace.export.timeline import Timeline, flag_names
from katra_trace.jsontext import JsonObject, JsonValue
from katra_trace.optional import require

if TYPE_CHECKING:
    from katra_trace.io.header import TraceHeader

#: Packets and name characters written at a time (bounds memory).
CHUNK_PACKETS = 200_000
CHUNK_CHARS = 4 << 20
#: Perfetto's trace processor holds timestamps as int64.
MAX_TIMESTAMP_NS = 2**63 - 1
CAPTURE_TRACK = "katra3d capture"

# perfetto_trace_pb2 enum values
_SLICE_BEGIN, _SLICE_END, _INSTANT, _COUNTER = 1, 2, 3, 4
_SEQ_CLEARED, _SEQ_NEEDS_STATE = 1, 2
_CLOCK_REALTIME, _CLOCK_BOOTTIME = 1, 6
_CHILD_ORDER_EXPLICIT = 3
_ARG_FRAME, _ARG_FLAGS, _ARG_DUR, _ARG_VALUE = 1, 2, 3, 4
_ARG_CAUSE, _ARG_CAUSE_NAME, _ARG_EXCESS, _ARG_RATIO = 5, 6, 7, 8
_ARG_NAMES = {
    _ARG_FRAME: "frame",
    _ARG_FLAGS: "flags",
    _ARG_DUR: "dur_ns",
    _ARG_VALUE: "value",
    _ARG_CAUSE: "slow_cause",
    _ARG_CAUSE_NAME: "slow_cause_name",
    _ARG_EXCESS: "slow_excess_ms",
    _ARG_RATIO: "slow_ratio",
}


def _slow_args(slow: SlowFrame) -> list[JsonObject]:
    out: list[JsonObject] = [{"name_iid": _ARG_CAUSE, "string_value": slow.cause.kind}]
    if slow.cause.name is not None:
        out.append({"name_iid": _ARG_CAUSE_NAME, "string_value": slow.cause.name})
    out.append({"name_iid": _ARG_EXCESS, "double_value": slow.cause.excess_ms})
    out.append({"name_iid": _ARG_RATIO, "double_value": slow.ratio})
    return out


def timestamp_base(start_host_ns: int | None, lowest: int, highest: int) -> tuple[int, bool]:
    """(ns added to every event time, whether it is not ``start_host_ns``): the first event goes
    to 0 if needed to keep all in ``[0, MAX_TIMESTAMP_NS]``; TraceFormatError if they span more."""
    if highest - lowest > MAX_TIMESTAMP_NS or -lowest > MAX_TIMESTAMP_NS:
        raise TraceFormatError(
            f"event times from {lowest} to {highest} ns do not fit a Perfetto timeline (at most "
            f"{MAX_TIMESTAMP_NS} ns from the first to the last); --to csv or --to parquet "
            "exports them as stored"
        )
    base = 0 if start_host_ns is None else start_host_ns
    if base < 0 or base + highest > MAX_TIMESTAMP_NS:
        return -lowest, True
    # hand-made traces start near 0: shifted silently
    return max(base, -lowest), False


def _pb() -> Any:
    require("perfetto", extra="export", purpose="--to perfetto")
    # deferred: optional package
    from perfetto.protos.perfetto.trace import perfetto_trace_pb2

    return perfetto_trace_pb2


def _builder() -> Any:
    require("perfetto", extra="export", purpose="--to perfetto")
    # deferred: optional package
    from perfetto.trace_builder.proto_builder import TraceProtoBuilder

    return TraceProtoBuilder()


def _annotation(name: str, value: object) -> JsonObject:
    ann: JsonObject = {"name": name} if name else {}
    if isinstance(value, bool):
        ann["bool_value"] = value
    elif isinstance(value, int) and -(2**63) <= value < 2**63:
        ann["int_value"] = value
    elif isinstance(value, float):
        ann["double_value"] = value
    elif isinstance(value, str):
        ann["string_value"] = value
    elif isinstance(value, Mapping):
        ann["dict_entries"] = [_annotation(str(k), v) for k, v in value.items()] or [
            _annotation("", "{}")
        ]
    elif isinstance(value, (list, tuple)):
        ann["array_values"] = [_annotation("", v) for v in value] or [_annotation("", "[]")]
    elif value is None:
        ann["string_value"] = "null"
    else:
        ann["string_value"] = jsontext.dumps(value, default=str)
    return ann


class _Writer:
    def __init__(self, out: BinaryIO) -> None:
        self.out = out
        self.builder = _builder()
        self.packets = 0
        self.pending_chars = 0

    def add(self, **fields: Any) -> None:
        self.packet_adder()(**fields)

    def packet_adder(self) -> Any:
        """The current chunk's ``packet.add`` (flushing a full chunk first)."""
        if len(self.builder.trace.packet) >= CHUNK_PACKETS or self.pending_chars >= CHUNK_CHARS:
            self.flush()
        return self.builder.trace.packet.add

    def flush(self) -> None:
        pending = len(self.builder.trace.packet)
        if pending:
            self.out.write(self.builder.serialize())  # concatenated Traces are one Trace
            self.packets += pending
            self.builder = _builder()
        self.pending_chars = 0


def write_perfetto(
    tl: Timeline,
    header: TraceHeader,
    summary: Mapping[str, JsonValue],
    out: BinaryIO,
    progress: ProgressFn | None = None,
) -> dict[str, int]:
    """Write ``tl`` to ``out``; returns counts."""
    _pb()  # fail before writing anything
    w = _Writer(out)
    ev = tl.events
    lowest = int(tl.start_ns.min()) if tl.start_ns.size else 0
    highest = int(tl.end_ns.max()) if tl.end_ns.size else 0
    base, rebased = timestamp_base(header.start_host_ns, lowest, highest)
    total = len(ev)
    done = 0
    uuid = iter(range(1, 1 << 62))
    seq_ids = iter(range(1, 1 << 31))

    meta_seq = next(seq_ids)
    first_ts = base + lowest if tl.start_ns.size else base
    snap_ts = base if base >= 0 else first_ts  # capture start, unless rebased before 0
    clocks = [{"clock_id": _CLOCK_BOOTTIME, "timestamp": snap_ts}]
    start_wall = header.start_wall_ns
    if start_wall is not None and 0 <= start_wall <= MAX_TIMESTAMP_NS and snap_ts == base:
        clocks.append({"clock_id": _CLOCK_REALTIME, "timestamp": start_wall})
    w.add(
        timestamp=snap_ts,
        trusted_packet_sequence_id=meta_seq,
        sequence_flags=_SEQ_CLEARED,
        clock_snapshot={"clocks": clocks, "primary_trace_clock": _CLOCK_BOOTTIME},
    )
    capture_uuid = next(uuid)
    w.add(
        timestamp=first_ts,
        trusted_packet_sequence_id=meta_seq,
        track_descriptor={"uuid": capture_uuid, "name": CAPTURE_TRACK},
    )
    scene_uuid: dict[int, int] = {}
    for rank, (sid, label) in enumerate(tl.scenes.items()):
        scene_uuid[sid] = next(uuid)
        w.add(
            timestamp=first_ts,
            trusted_packet_sequence_id=meta_seq,
            track_descriptor={
                "uuid": scene_uuid[sid],
                "name": label,
                "child_ordering": _CHILD_ORDER_EXPLICIT,
                "sibling_order_rank": rank + 1,
            },
        )
    last_ts = base + highest if tl.end_ns.size else first_ts
    options = header.capture_options
    args = [
        _annotation("workload", header.workload or ""),
        _annotation("tool_version", header.tool_version or ""),
        _annotation("format_version", header.format_version or ""),
        _annotation("timing_mode", options.timing_mode or ""),
        _annotation("timing_reason", options.timing_reason or ""),
        _annotation("renderer", header.host_info.gl.renderer or ""),
        _annotation("notes", header.notes or ""),
        _annotation("status", summary.get("status", "incomplete")),
        _annotation("capture_options", options.as_dict()),
        _annotation("host_info", header.host_info.as_dict()),
        _annotation("summary", dict(summary)),
    ]
    w.add(
        timestamp=first_ts,
        trusted_packet_sequence_id=meta_seq,
        track_event={
            "type": _SLICE_BEGIN,
            "track_uuid": capture_uuid,
            "name": f"capture: {header.workload or ''}",
            "debug_annotations": args,
        },
    )
    w.add(
        timestamp=max(last_ts, first_ts),
        trusted_packet_sequence_id=meta_seq,
        track_event={"type": _SLICE_END, "track_uuid": capture_uuid},
    )

    names = ev["name"]
    frames = ev["frame"]
    flags = ev["flags"]
    depth = ev["depth"]
    counts = {
        "slices": 0,
        "instants": 0,
        "counter_values": 0,
        "slice_tracks": 0,
        "counter_tracks": 0,
    }
    rank_in_scene: dict[int, int] = {}
    scene_ids = {label: sid for sid, label in tl.scenes.items()}
    slow_at = {
        (scene_ids[label], s.frame): s
        for label, found in header_slow_frames(ev, tl.strings, header).items()
        if label in scene_ids
        for s in found.slow
    }

    def open_sequence(
        sid: int, name: str, used: np.ndarray, counter_unit: str | None
    ) -> tuple[int, int, dict[int, int]]:
        seq = next(seq_ids)
        track = next(uuid)
        rank_in_scene[sid] = rank_in_scene.get(sid, 0) + 1
        descriptor: JsonObject = {
            "uuid": track,
            "parent_uuid": scene_uuid[sid],
            "name": name,
            "sibling_order_rank": rank_in_scene[sid],
        }
        if counter_unit is not None:
            descriptor["counter"] = {"unit_name": counter_unit} if counter_unit else {}
        iids = {int(n): i + 1 for i, n in enumerate(np.unique(used))}
        event_names = [{"iid": i, "name": tl.name(n)} for n, i in iids.items()]
        interned = {
            "event_names": event_names,
            "debug_annotation_names": [{"iid": i, "name": n} for i, n in _ARG_NAMES.items()],
        }
        w.add(
            timestamp=first_ts,
            trusted_packet_sequence_id=seq,
            sequence_flags=_SEQ_CLEARED,
            track_descriptor=descriptor,
            interned_data=interned,
            trace_packet_defaults={"track_event_defaults": {"track_uuid": track}},
        )
        w.pending_chars += len(name) + sum(len(str(e["name"])) for e in event_names)
        return seq, track, iids

    for track in tl.slice_tracks:
        spans, inst = track.spans, track.instants
        seq, _, iids = open_sequence(
            track.scene_id, track.name, names[np.concatenate([spans, inst])], None
        )
        counts["slice_tracks"] += 1
        s_list = (tl.start_ns[spans] + base).tolist()
        e_list = (tl.end_ns[spans] + base).tolist()
        d_list = depth[spans].tolist()
        n_list = [iids[n] for n in names[spans].tolist()]
        f_list = frames[spans].tolist()
        fl_list = flags[spans].tolist()
        i_list = (tl.start_ns[inst] + base).tolist()
        stack: list[int] = []
        j = 0
        n_inst = len(i_list)
        end_event = {"type": _SLICE_END}
        add = w.packet_adder()

        def instant(
            k: int,
            add: Any,
            *,
            inst: np.ndarray = inst,
            i_list: list[int] = i_list,
            e_list: list[int] = e_list,
            stack: list[int] = stack,
            seq: int = seq,
            iids: dict[int, int] = iids,
            end_event: dict[str, int] = end_event,
        ) -> None:
            row = int(inst[k])
            t = i_list[k]
            while stack and e_list[stack[-1]] <= t:
                add(
                    timestamp=e_list[stack.pop()],
                    trusted_packet_sequence_id=seq,
                    sequence_flags=_SEQ_NEEDS_STATE,
                    track_event=end_event,
                )
            annotations: list[JsonObject] = [
                {"name_iid": _ARG_DUR, "int_value": int(ev["dur_ns"][row])},
                {"name_iid": _ARG_FRAME, "uint_value": int(frames[row])},
            ]
            if flags[row]:
                annotations.append(
                    {"name_iid": _ARG_FLAGS, "string_value": flag_names(int(flags[row]))}
                )
            add(
                timestamp=t,
                trusted_packet_sequence_id=seq,
                sequence_flags=_SEQ_NEEDS_STATE,
                track_event={
                    "type": _INSTANT,
                    "name_iid": iids[int(names[row])],
                    "debug_annotations": annotations,
                },
            )

        for i in range(len(s_list)):
            s = s_list[i]
            while j < n_inst and i_list[j] < s:
                instant(j, add)
                j += 1
            d = d_list[i]
            while stack:
                top = stack[-1]
                te = e_list[top]
                if d_list[top] < d and (te > s or (te == s and e_list[i] == s)):
                    break  # the open span is this one's parent
                add(
                    timestamp=te,
                    trusted_packet_sequence_id=seq,
                    sequence_flags=_SEQ_NEEDS_STATE,
                    track_event=end_event,
                )
                stack.pop()
            fl = fl_list[i]
            if d == 0 or fl:
                ann: list[JsonObject] = [{"name_iid": _ARG_FRAME, "uint_value": f_list[i]}]
                if fl:
                    ann.append({"name_iid": _ARG_FLAGS, "string_value": flag_names(fl)})
                elif d == 0 and (slow := slow_at.get((track.scene_id, f_list[i]))) is not None:
                    ann += _slow_args(slow)
                add(
                    timestamp=s,
                    trusted_packet_sequence_id=seq,
                    sequence_flags=_SEQ_NEEDS_STATE,
                    track_event={
                        "type": _SLICE_BEGIN,
                        "name_iid": n_list[i],
                        "debug_annotations": ann,
                    },
                )
            else:
                add(
                    timestamp=s,
                    trusted_packet_sequence_id=seq,
                    sequence_flags=_SEQ_NEEDS_STATE,
                    track_event={"type": _SLICE_BEGIN, "name_iid": n_list[i]},
                )
            stack.append(i)
            if (i & 0x3FFF) == 0x3FFF:
                add = w.packet_adder()
                if progress is not None:
                    progress(done + i, total)
        while j < n_inst:
            instant(j, add)
            j += 1
        while stack:
            add(
                timestamp=e_list[stack.pop()],
                trusted_packet_sequence_id=seq,
                sequence_flags=_SEQ_NEEDS_STATE,
                track_event=end_event,
            )
        counts["slices"] += len(s_list)
        counts["instants"] += n_inst
        done += len(s_list) + n_inst
        if progress is not None:
            progress(done, total)

    for ctrack in tl.counter_tracks:
        rows = ctrack.rows
        seq, _, _ = open_sequence(
            ctrack.scene_id, ctrack.name, np.empty(0, dtype=np.uint32), ctrack.unit
        )
        counts["counter_tracks"] += 1
        t_list = (tl.start_ns[rows] + base).tolist()
        source = ev["dur_ns"][rows] if ctrack.from_durations else ev["value"][rows]
        v_list = source.astype(np.float64).tolist()
        add = w.packet_adder()
        for k, (t, v) in enumerate(zip(t_list, v_list, strict=True)):
            if (k & 0x3FFF) == 0x3FFF:
                add = w.packet_adder()
            add(
                timestamp=t,
                trusted_packet_sequence_id=seq,
                sequence_flags=_SEQ_NEEDS_STATE,
                track_event={"type": _COUNTER, "double_counter_value": v},
            )
        counts["counter_values"] += len(t_list)
        done += len(t_list)
        if progress is not None:
            progress(done, total)
    w.flush()
    counts["packets"] = w.packets
    counts["scene_tracks"] = len(scene_uuid)
    counts["timestamps_rebased"] = int(rebased)
    return counts


__all__ = ["CAPTURE_TRACK", "MAX_TIMESTAMP_NS", "timestamp_base", "write_perfetto"]
