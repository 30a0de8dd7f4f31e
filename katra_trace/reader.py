"""Reading katra3d traces, whole or block by block, intact or damaged.

:func:`open_trace` reads a file into a :class:`Trace`. By default it keeps
every intact block before the first torn or corrupt one, rebuilds the summary
by scanning when the file has none, and warns with
:class:`TraceRecoveryWarning`; ``strict=True`` raises
:class:`~katra_trace.errors.TraceFormatError` instead. :func:`iter_blocks`
and :meth:`Trace.iter_batches` stream a file larger than memory.

Every length read from the file is checked against the bytes that are left
before anything is allocated, so any byte string either parses or raises a
:class:`~katra_trace.errors.KatraError`.
"""

from __future__ import annotations

import dataclasses
import os
import struct
import warnings
import zlib
from collections.abc import Iterator
from pathlib import Path
from typing import Any, BinaryIO

import numpy as np

from katra_trace import format as fmt
from katra_trace.errors import ConfigError, TraceFormatError, TraceVersionError
from katra_trace.schema import EVENT_DTYPE, SCHEMA_VERSION


class TraceRecoveryWarning(UserWarning):
    """A damaged trace was read as far as it was intact."""


@dataclasses.dataclass(frozen=True)
class Block:
    """One decoded block: its type, where it starts, and its decoded content."""

    type: int
    offset: int
    seq: int
    payload: Any  # dict (JSON blocks), (first_id, [str]) (STRINGS), EventBatch (EVENTS)


@dataclasses.dataclass(frozen=True)
class EventBatch:
    """An EVENTS block's checked payload, decoded on demand (into a caller's array if given)."""

    n: int
    raw: bytes
    offset: int

    def decode(self, out: np.ndarray | None = None) -> np.ndarray:
        return fmt.decode_events(self.raw, self.offset, out)


@dataclasses.dataclass
class ScanState:
    """What a scan learned about the file beyond its blocks."""

    size: int = 0
    version: tuple[int, int] = (0, 0)
    truncated: bool = False
    stopped_at: int | None = None
    stop_reason: str = ""
    summary_offset: int | None = None  #: where the footer says the SUMMARY is; None: no footer
    skipped_blocks: int = 0


def _file_size(f: BinaryIO) -> int:
    here = f.tell()
    f.seek(0, os.SEEK_END)
    size = f.tell()
    f.seek(here)
    return size


def iter_blocks(f: BinaryIO, state: ScanState, strict: bool = False) -> Iterator[Block]:
    """Yield the blocks of an open trace file in order.

    Stops at the footer, or at the first torn or corrupt block: then it sets
    ``state.truncated``, ``stopped_at`` and ``stop_reason`` (default) or raises
    :class:`TraceFormatError` (``strict``). A file that is not a trace, or is
    cut inside its preamble, always raises.
    """
    size = state.size = _file_size(f)
    f.seek(0)
    pre = f.read(fmt.PREAMBLE_SIZE)
    state.version = _check_preamble(pre, size)
    pos = fmt.PREAMBLE_SIZE
    expected_seq = 0

    def stop(reason: str, at: int) -> None:
        _damaged(state, strict, reason, at)

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
        sync, btype, codec, schema, seq, stored_len, raw_len, crc = fmt.BLOCK_HEADER.unpack(head)
        if sync != fmt.SYNC:
            stop(f"corrupt block at offset {pos}: bad sync word", pos)
            return
        if stored_len > left - fmt.BLOCK_HEADER_SIZE:
            stop(f"torn block at offset {pos}: needs {stored_len} payload bytes, "
                 f"{left - fmt.BLOCK_HEADER_SIZE} left", pos)
            return
        if raw_len > fmt.MAX_BLOCK_BYTES or stored_len > fmt.MAX_BLOCK_BYTES:
            stop(f"corrupt block at offset {pos}: length {max(raw_len, stored_len)} exceeds the "
                 f"{fmt.MAX_BLOCK_BYTES}-byte limit", pos)
            return
        stored = f.read(stored_len)
        if zlib.crc32(stored, zlib.crc32(head[:20])) != crc:
            stop(f"corrupt block at offset {pos}: CRC mismatch", pos)
            return
        if seq != expected_seq:
            stop(f"corrupt block at offset {pos}: sequence number {seq}, expected {expected_seq}", pos)
            return
        try:
            block = _decode(btype, codec, schema, seq, stored, raw_len, pos)
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


def _check_preamble(pre: bytes, size: int) -> tuple[int, int]:
    """The (major, minor) version of a valid preamble; raises otherwise."""
    if len(pre) < fmt.PREAMBLE_SIZE:
        if fmt.MAGIC.startswith(pre[:8]) and pre:
            raise TraceFormatError(f"truncated katra3d trace: only {size} bytes, no complete preamble", 0)
        raise TraceFormatError(f"not a katra3d trace: {size} bytes, too short for a preamble", 0)
    magic, major, minor, flags = fmt.PREAMBLE.unpack(pre)
    if magic != fmt.MAGIC:
        if magic[:4] == fmt.MAGIC[:4]:
            raise TraceFormatError("not a readable katra3d trace: its first bytes were altered (line endings "
                                   "converted by a text-mode copy?); copy the file as binary", 0)
        raise TraceFormatError("not a katra3d trace: bad magic bytes", 0)
    if major > fmt.FORMAT_MAJOR:
        raise TraceVersionError(
            f"trace format {major}.{minor} is newer than this katra3d build reads "
            f"({fmt.FORMAT_MAJOR}.x); upgrade katra3d (pip install -U katra3d) to read it", 0)
    if flags & ~fmt.KNOWN_FLAGS:
        raise TraceVersionError(
            f"trace uses feature flags {flags:#x} unknown to this katra3d build (knows {fmt.KNOWN_FLAGS:#x}); "
            "upgrade katra3d to read it, or the file is damaged", 8)
    if major < 1:
        raise TraceFormatError(f"trace format {major}.{minor} is not a released katra3d format", 0)
    return major, minor


def _decode(btype: int, codec: int, schema: int, seq: int, stored: bytes, raw_len: int, pos: int) -> Block | None:
    known = btype in fmt.BlockType.__members__.values()
    if not known:
        return None  # unknown block types are skipped by length
    payload = fmt.decompress(stored, raw_len, codec, pos)
    t = fmt.BlockType(btype)
    if t in fmt.JSON_BLOCKS:
        return Block(t, pos, seq, fmt.decode_json(payload, pos))
    if t == fmt.BlockType.STRINGS:
        return Block(t, pos, seq, fmt.decode_strings(payload, pos))
    if schema > SCHEMA_VERSION:
        raise TraceFormatError(
            f"EVENTS block at offset {pos} uses event schema {schema}, newer than this build's "
            f"{SCHEMA_VERSION}; upgrade katra3d to read it", pos)
    n, _ = fmt.events_head(payload, pos)
    return Block(t, pos, seq, EventBatch(n, payload, pos))


class Trace:
    """A trace read from a file. See :func:`open_trace`."""

    def __init__(self, path: Path) -> None:
        self.path = path
        self.header: dict[str, Any] = {}
        self.summary: dict[str, Any] = {}
        self.strings: list[str] = []
        self.annotations: list[dict[str, Any]] = []
        self.clock_syncs: list[dict[str, Any]] = []
        self.events: np.ndarray = np.empty(0, dtype=EVENT_DTYPE)
        self.truncated = False
        self.stopped_at: int | None = None
        self.stop_reason = ""
        self.summary_rebuilt = False
        self.blocks = 0
        self.skipped_blocks = 0
        self.size = 0
        self.version = (0, 0)

    @property
    def status(self) -> str:
        """complete | aborted | interrupted (from the summary) or incomplete (no summary)."""
        return str(self.summary.get("status", "incomplete"))

    def name(self, sid: int) -> str:
        """The string with id ``sid`` (``"?<id>"`` if the table lacks it)."""
        return self.strings[sid] if 0 <= sid < len(self.strings) else f"?{sid}"

    def iter_batches(self, strict: bool = False) -> Iterator[np.ndarray]:
        """Stream the events block by block, re-reading the file (for traces larger than memory)."""
        state = ScanState()
        with _open(self.path) as f:
            for block in iter_blocks(f, state, strict):
                if block.type == fmt.BlockType.EVENTS:
                    yield block.payload.decode()

    def __repr__(self) -> str:
        return (f"Trace({str(self.path)!r}, events={len(self.events)}, status={self.status!r}, "
                f"truncated={self.truncated})")


def _open(path: Path) -> BinaryIO:
    try:
        return open(path, "rb")  # noqa: SIM115 - caller closes
    except FileNotFoundError:
        raise ConfigError(f"no such trace file: {str(path)!r}") from None
    except IsADirectoryError:
        raise ConfigError(f"{str(path)!r} is a directory, not a trace file") from None
    except OSError as exc:
        raise ConfigError(f"cannot read {str(path)!r}: {exc.strerror or exc}") from None


def _summary_event_count(f: BinaryIO) -> int | None:
    """The event count in the SUMMARY block the footer points to, if all of that is intact.

    Lets :func:`open_trace` decode every batch straight into one preallocated array. Anything
    unexpected returns None (the caller then collects batches); the scan checks everything anyway.
    """
    size = _file_size(f)
    if size < fmt.PREAMBLE_SIZE + fmt.BLOCK_HEADER_SIZE + fmt.FOOTER_SIZE:
        return None
    f.seek(size - fmt.FOOTER_SIZE)
    offset = fmt.decode_footer(f.read(fmt.FOOTER_SIZE))
    if offset is None or not fmt.PREAMBLE_SIZE <= offset <= size - fmt.FOOTER_SIZE - fmt.BLOCK_HEADER_SIZE:
        return None
    f.seek(offset)
    head = f.read(fmt.BLOCK_HEADER_SIZE)
    sync, btype, codec, _, _, stored_len, raw_len, crc = fmt.BLOCK_HEADER.unpack(head)
    if sync != fmt.SYNC or btype != fmt.BlockType.SUMMARY or stored_len > size - offset - fmt.BLOCK_HEADER_SIZE:
        return None
    stored = f.read(stored_len)
    if zlib.crc32(stored, zlib.crc32(head[:20])) != crc:
        return None
    try:
        count = fmt.decode_json(fmt.decompress(stored, raw_len, codec, offset), offset).get("events")
    except TraceFormatError:
        return None
    if not isinstance(count, int) or not 0 <= count * EVENT_DTYPE.itemsize <= 64 * size:
        return None  # bounds the allocation by the file's size (real traces compress 3-30x)
    return count


def open_trace(path: str | os.PathLike[str], strict: bool = False, events: bool = True) -> Trace:
    """Read a trace file.

    Args:
        path: the file.
        strict: raise :class:`TraceFormatError` on any damage instead of
            recovering the intact prefix (and warning).
        events: load the events (False: header, strings, summary and counts only).
    """
    trace = Trace(Path(path))
    state = ScanState()
    batches: list[np.ndarray] = []
    n_events = 0
    summary_at: int | None = None
    with _open(trace.path) as f:
        expected = _summary_event_count(f) if events else None
        out = np.empty(expected, dtype=EVENT_DTYPE) if expected is not None else None
        for block in iter_blocks(f, state, strict):
            trace.blocks += 1
            t = block.type
            if t == fmt.BlockType.HEADER:
                if trace.header:
                    _damaged(state, strict, f"second HEADER block at offset {block.offset}", block.offset)
                    break
                trace.header = block.payload
            elif not trace.header:
                _damaged(state, strict, f"block at offset {block.offset} comes before the HEADER block", block.offset)
                break
            elif t == fmt.BlockType.STRINGS:
                first_id, names = block.payload
                if first_id != len(trace.strings):
                    _damaged(state, strict, f"STRINGS block at offset {block.offset} starts at id {first_id}, "
                             f"expected {len(trace.strings)}", block.offset)
                    break
                trace.strings.extend(names)
            elif t == fmt.BlockType.EVENTS:
                batch: EventBatch = block.payload
                if events:
                    if out is not None and n_events + batch.n <= len(out):
                        batch.decode(out[n_events:n_events + batch.n])
                    else:  # the summary's count was wrong: fall back to collecting batches
                        if out is not None:
                            batches.append(out[:n_events])
                            out = None
                        batches.append(batch.decode())
                n_events += batch.n
            elif t == fmt.BlockType.ANNOTATION:
                trace.annotations.append(block.payload)
            elif t == fmt.BlockType.CLOCK_SYNC:
                trace.clock_syncs.append(block.payload)
            elif t == fmt.BlockType.SUMMARY:
                trace.summary = block.payload
                summary_at = block.offset
    if state.summary_offset is not None and state.summary_offset != summary_at:
        _damaged(state, strict, f"footer points to offset {state.summary_offset}, but the SUMMARY block is at "
                 f"{summary_at}", state.size - fmt.FOOTER_SIZE)
    if not trace.header:
        reason = state.stop_reason or "no HEADER block"
        raise TraceFormatError(f"unreadable katra3d trace {str(trace.path)!r}: {reason}; nothing to recover",
                               state.stopped_at)
    trace.truncated = state.truncated
    trace.stopped_at = state.stopped_at
    trace.stop_reason = state.stop_reason
    trace.skipped_blocks = state.skipped_blocks
    trace.size = state.size
    trace.version = state.version
    if out is not None:
        trace.events = out if n_events == len(out) else out[:n_events]
    elif batches:
        trace.events = batches[0] if len(batches) == 1 else np.concatenate(batches)
    if not trace.summary:
        trace.summary_rebuilt = True
        trace.summary = {
            "status": "incomplete",
            "events": n_events,
            "strings": len(trace.strings),
            "blocks": trace.blocks,
            "rebuilt": True,
        }
    if trace.truncated:
        warnings.warn(
            f"{trace.path}: {trace.stop_reason}; recovered {n_events} events in {trace.blocks} blocks "
            f"before offset {trace.stopped_at}", TraceRecoveryWarning, stacklevel=2)
    return trace


def _damaged(state: ScanState, strict: bool, reason: str, at: int) -> None:
    """Record where and why reading stopped; in strict mode, raise instead."""
    state.truncated = True
    state.stopped_at = at
    state.stop_reason = reason
    if strict:
        raise TraceFormatError(reason, at)
