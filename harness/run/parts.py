"""One trace from the part traces of a counted run's children (:mod:`katra3d.harness.run.children`).

Every scene of a counted run is counted in its own valgrind child, which writes a trace of its one scene (a
part). The parent joins the parts, in the run's order of scenes, into the run's one trace: the header is the
first part's, with the run's whole list of scenes and the earliest start; the string tables are merged (each
part numbers its strings from 1) and every event's scene and name ids renumbered; event times move onto the
earliest part's start (``perf_counter_ns`` is one clock for every process of the machine, so the shifted
times are the times the events happened); the kept frames, annotations and clock pairs are copied; the
summary adds up the parts' (their scenes' rows in order). A part that ends early (a child killed while it
wrote) gives what it holds up to the damage, as the reader reads it.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any, BinaryIO

import numpy as np

from katra_trace.io import format as fmt
from katra_trace.io.blockfile import BlockFile
from katra_trace.io.blocks import ScanState, iter_blocks
from katra_trace.io.image_block import encode_image_payload
from katra_trace.io.reader import open_regular

#: The summary's own keys (the rest of a SUMMARY block is the producer's ``user`` part).
_COUNTS = ("dropped_events", "dropped_batches")


@dataclasses.dataclass
class Joined:
    """What :func:`join` wrote: ``parts``, the parts that had a readable header (the others gave nothing);
    ``events``, the events written."""

    parts: list[Path]
    events: int


def part_header(path: Path) -> dict[str, Any] | None:
    """The HEADER block of the trace at ``path``, or None when it has none that can be read."""
    try:
        with open_regular(path) as f:
            for block in iter_blocks(f, ScanState()):
                return dict(block.payload) if block.type == fmt.BlockType.HEADER else None
    except OSError:
        return None
    return None


def join(parts: Sequence[Path], dst: BinaryIO, *, status: str, codec: str | None = None,
         update: Callable[[dict[str, Any]], dict[str, Any]] = lambda header: header) -> Joined:
    """Write the trace made of ``parts`` (in that order) to ``dst``, finished with ``status``.

    ``update(header)``: the joined header as it is written (the parent's own strings put back). ``codec``:
    the joined trace's codec (None: zstd).
    """
    headers = [(path, part_header(path)) for path in parts]
    readable = [(path, header) for path, header in headers if header is not None]
    if not readable:
        return Joined([], 0)
    earliest = min((header for _, header in readable), key=lambda h: int(h.get("start_host_ns", 0)))
    base_ns = int(earliest.get("start_host_ns", 0))
    header = dict(readable[0][1])
    header.update(start_host_ns=base_ns, start_wall_ns=earliest.get("start_wall_ns"), pid=earliest.get("pid"))
    options = dict(header.get("capture_options") or {})
    resolved = dict(options.get("resolved") or {})
    if "scenes" in resolved:
        resolved["scenes"] = [scene for _, part in readable
                              for scene in ((part.get("capture_options") or {}).get("resolved") or {}).get("scenes", [])]
        options["resolved"] = resolved
        header["capture_options"] = options
    name = codec or "zstd"
    blosc2 = fmt.load_blosc2("writing a trace with codec 'blosc2'") if name == "blosc2" else None
    out = BlockFile(dst, fmt.CODEC_NAMES[name], 2, blosc2)
    out.start(fmt.encode_json(update(header)))
    table = _Strings()
    user: dict[str, Any] = {}
    counts = dict.fromkeys(_COUNTS, 0)
    end_ns = 0
    for path, part in readable:
        shift = int(part.get("start_host_ns", 0)) - base_ns
        summary = _copy_part(path, out, table, shift)
        if summary is None:
            continue
        for key in _COUNTS:
            counts[key] += int(summary.get(key) or 0)
        end_ns = max(end_ns, int(summary.get("end_host_ns") or 0) + shift)
        _add_user(user, dict(summary.get("user") or {}))
    out.write_events(table.flushed, table.take_new(), None)
    out.write_summary(status, dropped_events=counts["dropped_events"], dropped_batches=counts["dropped_batches"],
                      strings=len(table.names), end_host_ns=end_ns, user=user)
    return Joined([path for path, _ in readable], out.written_events)


class _Strings:
    """The joined trace's string table: one id per string, the strings not yet written kept for the next block."""

    def __init__(self) -> None:
        self.ids: dict[str, int] = {"": 0}
        self.names: list[str] = [""]
        self.flushed = 1  # id 0 ("") is written with the header

    def id(self, name: str) -> int:
        sid = self.ids.get(name)
        if sid is None:
            sid = self.ids[name] = len(self.names)
            self.names.append(name)
        return sid

    def take_new(self) -> list[str]:
        new = self.names[self.flushed:]
        self.flushed = len(self.names)
        return new


def _copy_part(path: Path, out: BlockFile, table: _Strings, shift_ns: int) -> dict[str, Any] | None:
    """Copy the blocks of the part at ``path`` after its header into ``out``; its summary (None: it has none)."""
    ids = [0]  # the part's string id -> the joined one
    summary: dict[str, Any] | None = None
    with open_regular(path) as f:
        for block in iter_blocks(f, ScanState()):
            kind, payload = block.type, block.payload
            if kind == fmt.BlockType.STRINGS:
                first_id, names = payload
                if len(ids) < first_id + len(names):
                    ids.extend([0] * (first_id + len(names) - len(ids)))
                for k, name in enumerate(names):
                    ids[first_id + k] = table.id(name)
            elif kind == fmt.BlockType.EVENTS:
                events = payload.decode()
                if not len(events):
                    continue
                top = max(int(events["scene"].max()), int(events["name"].max()))
                lookup = np.zeros(max(top + 1, len(ids)), dtype=np.uint32)
                lookup[:len(ids)] = ids
                events["scene"] = lookup[events["scene"]]
                events["name"] = lookup[events["name"]]
                events["start_ns"] += shift_ns
                out.write_events(table.flushed, table.take_new(), events)
            elif kind == fmt.BlockType.IMAGE:
                meta, png = payload
                out.write_block(fmt.BlockType.IMAGE, encode_image_payload(meta, png), codec=fmt.Codec.NONE)
            elif kind == fmt.BlockType.CLOCK_SYNC:
                record = dict(payload)
                if isinstance(record.get("host_ns"), int):
                    record["host_ns"] += shift_ns
                out.write_block(kind, fmt.encode_json(record))
            elif kind == fmt.BlockType.ANNOTATION:
                out.write_block(kind, fmt.encode_json(dict(payload)))
            elif kind == fmt.BlockType.SUMMARY:
                summary = dict(payload)
    return summary


#: Counts of the producer's summary that add up over the parts.
_SUMS = frozenset({"reference_draws"})


def _add_user(user: dict[str, Any], part: dict[str, Any]) -> None:
    """Add a part's ``user`` summary to the joined one: lists (the scenes' rows, GL errors) in order, the counts
    of :data:`_SUMS` added up, anything else as the first part that has it says."""
    for key, value in part.items():
        if key not in user:
            user[key] = list(value) if isinstance(value, list) else value
        elif isinstance(value, list) and isinstance(user[key], list):
            user[key].extend(value)
        elif key in _SUMS and isinstance(value, int) and isinstance(user[key], int):
            user[key] += value


__all__ = ["Joined", "join", "part_header"]
