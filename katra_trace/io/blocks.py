"""A trace's blocks one by one: the decode budget, the scanner, the shape checks. Every length is
checked against the bytes left before allocating, so any byte string parses or raises KatraError.
"""

from __future__ import annotations

import dataclasses
import os
import threading
import zlib
from collections.abc import Iterator, Mapping
from typing import Any, BinaryIO

import numpy as np

from katra_trace.errors import ConfigError, TraceFormatError, TraceTooLargeError, TraceVersionError
from katra_trace.io import blosc2_events as b2ev
from katra_trace.io import format as fmt
from katra_trace.io.image_block import decode_image_payload
from katra_trace.schema import EVENT_DTYPE, SCHEMA_VERSION

DEFAULT_MAX_RATIO = 10.0
BUDGET_ALLOWANCE_BYTES = 64 << 20  # on top of max_ratio x size
MAX_RATIO_ENV = "KATRA3D_MAX_RATIO"


def resolve_max_ratio(max_ratio: float | None) -> float:
    if max_ratio is None:
        text = os.environ.get(MAX_RATIO_ENV, "").strip()
        if not text:
            return DEFAULT_MAX_RATIO
        try:
            max_ratio = float(text)
        except ValueError:
            raise ConfigError(
                f"{MAX_RATIO_ENV}={text!r} is not a number (0 lifts the limit)"
            ) from None
    if not max_ratio >= 0 or max_ratio == float("inf"):
        raise ConfigError(
            f"max_ratio must be a finite number >= 0 (0 lifts the limit), got {max_ratio}"
        )
    return float(max_ratio)


def decode_budget(size: int, max_ratio: float | None = None) -> int | None:
    """Decoded bytes a file of ``size`` may cost (None: no limit)."""
    ratio = resolve_max_ratio(max_ratio)
    if ratio == 0:
        return None
    return int(ratio * size) + BUDGET_ALLOWANCE_BYTES


class DecodeBudget:
    """The decoded bytes one file may still make a reader hold (blocks, then frames' pixels)."""

    def __init__(self, size: int, max_ratio: float | None = None) -> None:
        self.size = size
        self.ratio = resolve_max_ratio(max_ratio)
        self.left = decode_budget(size, self.ratio)
        self._lock = threading.Lock()

    def take(self, n: int, what: str, offset: int | None = None) -> None:
        """Count ``n`` more bytes; over budget: TraceTooLargeError led by ``what``."""
        with self._lock:
            if self.left is None:
                return
            if n > self.left:
                raise TraceTooLargeError(
                    f"{what} {n} more bytes, beyond {self.ratio:g} x the file's {self.size} bytes "
                    f"+ {BUDGET_ALLOWANCE_BYTES >> 20} MiB ({self.left} bytes left; a "
                    "decompression bomb?); if this trace is genuine, lift the limit with "
                    f"{MAX_RATIO_ENV}=0 (or a larger ratio)",
                    offset,
                )
            self.left -= n

    def give(self, n: int) -> None:
        with self._lock:
            if self.left is not None:
                self.left += n


@dataclasses.dataclass(frozen=True)
class Block:
    type: int
    offset: int
    seq: int
    # dict; (first_id, [str]) for STRINGS; EventBatch; (dict, PNG) for IMAGE
    payload: Any


@dataclasses.dataclass(frozen=True)
class EventBatch:
    """An EVENTS block's checked payload, decoded on demand."""

    n: int
    raw: bytes  # decoded, or still compressed for codec 2
    offset: int
    minor: int = fmt.FORMAT_MINOR
    codec: int = fmt.Codec.NONE

    def decode(self, out: np.ndarray | None = None, *, zeroed: bool = False) -> np.ndarray:
        """The events, checked (TraceFormatError, CodecUnavailableError)."""
        if self.codec == fmt.Codec.BLOSC2:
            raw_len = fmt.EVENTS_HEAD.size + self.n * EVENT_DTYPE.itemsize
            events = b2ev.decode_events_blosc2(self.raw, raw_len, self.offset, out)
            problem = fmt.check_events(events, self.minor)
        else:
            events, problem = fmt.decode_checked_events(
                self.raw, self.offset, self.minor, out, zeroed=zeroed
            )
        if problem is not None:
            raise TraceFormatError(
                f"corrupt EVENTS block at offset {self.offset}: {problem}", self.offset
            )
        return events


@dataclasses.dataclass
class ScanState:
    size: int = 0
    version: tuple[int, int] = (0, 0)
    truncated: bool = False
    stopped_at: int | None = None
    stop_reason: str = ""
    summary_offset: int | None = None  # None: no footer
    skipped_blocks: int = 0
    max_ratio: float | None = None
    budget: DecodeBudget | None = None
    notes: list[str] = dataclasses.field(default_factory=list)  # content repaired


def file_size(f: BinaryIO) -> int:
    return os.fstat(f.fileno()).st_size


def iter_blocks(f: BinaryIO, state: ScanState, strict: bool = False) -> Iterator[Block]:
    """Yield the blocks up to the footer or the first damage (in ``state``; ``strict``: raised);
    a bad preamble always raises."""
    size = state.size = file_size(f)
    budget = state.budget = DecodeBudget(size, state.max_ratio)
    f.seek(0)
    pre = f.read(fmt.PREAMBLE_SIZE)
    state.version = _check_preamble(pre, size)
    minor = state.version[1]
    pos = fmt.PREAMBLE_SIZE
    expected_seq = 0

    def stop(reason: str, at: int) -> None:
        mark_damaged(state, strict, reason, at)

    while True:
        left = size - pos
        if left == 0:
            stop(f"file ends at byte {pos} without a footer (torn write or killed writer)", pos)
            return
        if left == fmt.FOOTER_SIZE:
            summary_offset = fmt.decode_footer(f.read(fmt.FOOTER_SIZE))
            if summary_offset is not None:
                state.summary_offset = summary_offset
                return
        if left < fmt.BLOCK_HEADER_SIZE:
            stop(f"torn block header or footer at offset {pos}: {left} bytes left", pos)
            return
        head = f.read(fmt.BLOCK_HEADER_SIZE)
        if len(head) < fmt.BLOCK_HEADER_SIZE:  # the file shrank
            stop(f"torn block header at offset {pos}: the file ends early", pos)
            return
        sync, btype, codec, schema, seq, stored_len, raw_len, crc = fmt.BLOCK_HEADER.unpack(head)
        if sync != fmt.SYNC:
            stop(f"corrupt block at offset {pos}: bad sync word", pos)
            return
        if stored_len > left - fmt.BLOCK_HEADER_SIZE:
            stop(
                f"torn block at offset {pos}: needs {stored_len} payload bytes, "
                f"{left - fmt.BLOCK_HEADER_SIZE} left",
                pos,
            )
            return
        if raw_len > fmt.MAX_BLOCK_BYTES or stored_len > fmt.MAX_BLOCK_BYTES:
            stop(
                f"corrupt block at offset {pos}: length {max(raw_len, stored_len)} exceeds the "
                f"{fmt.MAX_BLOCK_BYTES}-byte limit",
                pos,
            )
            return
        stored = f.read(stored_len)
        if len(stored) < stored_len:
            stop(f"torn block at offset {pos}: the file ends early", pos)
            return
        if zlib.crc32(stored, zlib.crc32(head[:20])) != crc:
            stop(f"corrupt block at offset {pos}: CRC mismatch", pos)
            return
        if seq != expected_seq:
            stop(
                f"corrupt block at offset {pos}: sequence number {seq}, expected {expected_seq}",
                pos,
            )
            return
        if btype == fmt.BlockType.IMAGE and codec != fmt.Codec.NONE:
            stop(
                f"corrupt IMAGE block at offset {pos}: codec {codec}; kept frames are stored with "
                "codec 0 "
                "(their PNG is compressed already)",
                pos,
            )
            return
        if btype in _KNOWN_TYPES:
            budget.take(raw_len, f"the block at offset {pos} would decode to", pos)
        try:
            block = _decode(btype, codec, schema, seq, stored, raw_len, pos, minor, state.notes)
        except TraceFormatError as err:
            if strict:
                raise
            stop(str(err), pos)
            return
        if block is None:
            state.skipped_blocks += 1
        else:
            yield block
        expected_seq += 1
        pos += fmt.BLOCK_HEADER_SIZE + stored_len


_KNOWN_TYPES = frozenset(int(t) for t in fmt.BlockType)


def _check_preamble(pre: bytes, size: int) -> tuple[int, int]:
    if len(pre) < fmt.PREAMBLE_SIZE:
        if fmt.MAGIC.startswith(pre[:8]) and pre:
            raise TraceFormatError(
                f"truncated katra3d trace: only {size} bytes, no complete preamble", 0
            )
        raise TraceFormatError(f"not a katra3d trace: {size} bytes, too short for a preamble", 0)
    magic, major, minor, flags = fmt.PREAMBLE.unpack(pre)
    if magic != fmt.MAGIC:
        if magic[:4] == fmt.MAGIC[:4]:
            raise TraceFormatError(
                "not a readable katra3d trace: its first bytes were altered (line endings "
                "converted by a text-mode copy?); copy the file as binary",
                0,
            )
        raise TraceFormatError("not a katra3d trace: bad magic bytes", 0)
    if major > fmt.FORMAT_MAJOR:
        raise TraceVersionError(
            f"trace format {major}.{minor} is newer than this katra3d build reads "
            f"({fmt.FORMAT_MAJOR}.x); upgrade katra3d (pip install -U katra3d) to read it",
            0,
        )
    if flags & ~fmt.KNOWN_FLAGS:
        raise TraceVersionError(
            f"trace uses feature flags {flags:#x} unknown to this katra3d build (knows "
            f"{fmt.KNOWN_FLAGS:#x}); "
            "upgrade katra3d to read it, or the file is damaged",
            8,
        )
    if major < 1:
        raise TraceFormatError(f"trace format {major}.{minor} is not a released katra3d format", 0)
    return major, minor


def _decode(
    btype: int,
    codec: int,
    schema: int,
    seq: int,
    stored: bytes,
    raw_len: int,
    pos: int,
    minor: int = fmt.FORMAT_MINOR,
    notes: list[str] | None = None,
) -> Block | None:
    if btype not in _KNOWN_TYPES:
        return None  # unknown block types are skipped
    t = fmt.BlockType(btype)
    if t == fmt.BlockType.EVENTS and codec == fmt.Codec.BLOSC2:
        _check_schema(schema, pos)
        n, _ = b2ev.blosc2_events_head(stored, raw_len, pos)
        return Block(t, pos, seq, EventBatch(n, stored, pos, minor, codec))
    payload = fmt.decompress(stored, raw_len, codec, pos)
    if t in fmt.JSON_BLOCKS:
        obj = fmt.decode_json(payload, pos, notes)
        if t == fmt.BlockType.HEADER:
            check_header(obj, pos)
        elif t == fmt.BlockType.SUMMARY:
            check_summary(obj, pos)
        return Block(t, pos, seq, obj)
    if t == fmt.BlockType.STRINGS:
        return Block(t, pos, seq, fmt.decode_strings(payload, pos, notes))
    if t == fmt.BlockType.IMAGE:
        return Block(t, pos, seq, decode_image_payload(payload, pos, notes))
    _check_schema(schema, pos)
    n, _ = fmt.events_head(payload, pos)
    return Block(t, pos, seq, EventBatch(n, payload, pos, minor))


def _check_schema(schema: int, pos: int) -> None:
    if schema > SCHEMA_VERSION:
        raise TraceFormatError(
            f"EVENTS block at offset {pos} uses event schema {schema}, newer than this build's "
            f"{SCHEMA_VERSION}; upgrade katra3d to read it",
            pos,
        )


_INT64 = (-(2**63), 2**63 - 1)


def _shape_error(where: str, pos: int, key: str, what: str) -> TraceFormatError:
    return TraceFormatError(f"corrupt {where} block at offset {pos}: {key!r} is not {what}", pos)


def _check_int(
    obj: Mapping[str, object], key: str, where: str, pos: int, low: int = _INT64[0]
) -> None:
    if key in obj:
        v = obj[key]
        if not isinstance(v, int) or isinstance(v, bool) or not low <= v <= _INT64[1]:
            raise _shape_error(where, pos, key, f"an integer in {low}..2**63-1")


def _check_dict(obj: Mapping[str, object], key: str, where: str, pos: int) -> None:
    if key in obj and not isinstance(obj[key], dict):
        raise _shape_error(where, pos, key, "a JSON object")


#: HEADER keys readers rely on and their JSON type (null: not known).
_HEADER_SHAPES: dict[tuple[str, ...], dict[str, type]] = {
    ("capture_options",): {
        "timing_mode": str,
        "timing_reason": str,
        "primary_clock": str,
        "scene": str,
        "measure": dict,
        "resolved": dict,
    },
    ("capture_options", "measure"): {
        "mode": str,
        "valgrind": str,
        "command": list,
        "env": dict,
        "frame_boundary": str,
        "pinned": dict,
    },
    ("capture_options", "resolved"): {"scenes": list},
    ("host_info",): {
        "gl_renderer": str,
        "gl_vendor": str,
        "gl_version": str,
        "driver_version": str,
        "gl": dict,
        "codegen": dict,
    },
}
_TYPE_NAMES: dict[type, str] = {str: "a string", dict: "a JSON object", list: "a JSON array"}


def check_header(h: Mapping[str, object], pos: int) -> None:
    """Refuse a HEADER whose documented keys have the wrong shape."""
    if not h:
        raise TraceFormatError(f"corrupt HEADER block at offset {pos} is empty", pos)
    for key in ("capture_options", "host_info"):
        _check_dict(h, key, "HEADER", pos)
    for section, shapes in _HEADER_SHAPES.items():
        part: object = h
        for key in section:
            part = part.get(key) if isinstance(part, dict) else None
        if not isinstance(part, dict):
            continue
        for key, typ in shapes.items():
            if key in part and part[key] is not None and not isinstance(part[key], typ):
                raise _shape_error("HEADER", pos, ".".join((*section, key)), _TYPE_NAMES[typ])
    _check_int(h, "start_wall_ns", "HEADER", pos, low=0)
    _check_int(h, "start_host_ns", "HEADER", pos)
    _check_int(h, "pid", "HEADER", pos)
    _check_int(h, "schema_version", "HEADER", pos)
    for key in ("format_version", "schema_hash", "tool_version", "workload", "notes"):
        if key in h and not isinstance(h[key], str):
            raise _shape_error("HEADER", pos, key, "a string")


def check_summary(s: Mapping[str, object], pos: int) -> None:
    if "status" in s and not isinstance(s["status"], str):
        raise _shape_error("SUMMARY", pos, "status", "a string")
    if "user" in s and not isinstance(s["user"], dict):
        raise TraceFormatError(
            f"corrupt SUMMARY block at offset {pos}: summary 'user' is not a JSON object", pos
        )
    for key in ("events", "dropped_events", "dropped_batches", "strings", "blocks", "event_blocks"):
        if key in s:
            v = s[key]
            if not isinstance(v, int) or isinstance(v, bool) or not 0 <= v <= _INT64[1]:
                raise TraceFormatError(
                    f"corrupt SUMMARY block at offset {pos}: summary {key!r} is not a count", pos
                )
    _check_int(s, "end_host_ns", "SUMMARY", pos)


def mark_damaged(state: ScanState, strict: bool, reason: str, at: int) -> None:
    """Record where and why reading stopped (strict: raise)."""
    state.truncated = True
    state.stopped_at = at
    state.stop_reason = reason
    if strict:
        raise TraceFormatError(reason, at)
