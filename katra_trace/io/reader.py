"""Reading katra3d traces, intact or damaged: :func:`open_trace` keeps the intact prefix and warns
(``strict``: raises); its one scan keeps all a command reads, so no consumer opens the file twice.
"""

from __future__ import annotations

import dataclasses
import os
import stat
import warnings
import zlib
from collections.abc import Iterator, Mapping
from pathlib import Path
from typing import BinaryIO, ClassVar

import numpy as np

from katra_trace.errors import TraceFormatError
from katra_trace.io import format as fmt
from katra_trace.io.blocks import (
    DecodeBudget,
    EventBatch,
    ScanState,
    decode_budget,
    file_size,
    iter_blocks,
    mark_damaged,
)
from katra_trace.io.header import TraceHeader
from katra_trace.io.image_block import KeptFrame
from katra_trace.io.inputs import open_regular
from katra_trace.io.records import _bool, _Convert, _int, _mapping, _Record, _str
from katra_trace.jsontext import JsonObject, JsonValue
from katra_trace.schema import EVENT_DTYPE
from katra_trace.text import shown


class TraceRecoveryWarning(UserWarning):
    """A damaged trace was read as far as it was intact."""


@dataclasses.dataclass(frozen=True, kw_only=True)
class TraceSummary(_Record):
    """A trace's SUMMARY block (docs/trace-format.md); ``rebuilt``: none was written, the reader
    counted by scanning."""

    status: str | None = None
    events: int | None = None
    dropped_events: int | None = None
    dropped_batches: int | None = None
    strings: int | None = None
    blocks: int | None = None
    event_blocks: int | None = None
    end_host_ns: int | None = None
    user: Mapping[str, JsonValue] | None = None  # the producer's part
    rebuilt: bool | None = None

    _CONVERT: ClassVar[dict[str, _Convert]] = {
        "status": _str,
        "events": _int,
        "dropped_events": _int,
        "dropped_batches": _int,
        "strings": _int,
        "blocks": _int,
        "event_blocks": _int,
        "end_host_ns": _int,
        "user": _mapping,
        "rebuilt": _bool,
    }


class Trace:
    """A trace read from a file (:func:`open_trace`)."""

    def __init__(self, path: Path) -> None:
        self.path = path
        self.header = TraceHeader()
        self.summary = TraceSummary()
        self.strings: list[str] = []
        self.annotations: list[JsonObject] = []
        self.clock_syncs: list[JsonObject] = []
        self.profiles: list[JsonObject] = []
        self.events: np.ndarray = np.empty(0, dtype=EVENT_DTYPE)
        self.truncated = False
        self.stopped_at: int | None = None
        self.stop_reason = ""
        self.summary_rebuilt = False
        self.blocks = 0
        self.skipped_blocks = 0
        self.size = 0
        self.version = (0, 0)
        # what the reader repaired (e.g. lone surrogates)
        self.notes: list[str] = []
        self.max_ratio: float | None = None
        self.kept_frames: dict[str, KeptFrame] = {}
        self.budget: DecodeBudget | None = None

    @property
    def status(self) -> str:
        """complete | aborted | interrupted (from the summary) or incomplete (no summary)."""
        return "incomplete" if self.summary.status is None else self.summary.status

    def name(self, sid: int) -> str:
        """The string with id ``sid`` (``"?<id>"`` if the table lacks it)."""
        return self.strings[sid] if 0 <= sid < len(self.strings) else f"?{sid}"

    def iter_batches(self, strict: bool = False) -> Iterator[np.ndarray]:
        """Stream the events block by block; stops at the first damage."""
        state = ScanState(max_ratio=self.max_ratio)
        with open_regular(self.path) as f:
            for block in iter_blocks(f, state, strict):
                if block.type == fmt.BlockType.EVENTS:
                    try:
                        batch = block.payload.decode()
                    except TraceFormatError:
                        if strict:
                            raise
                        return
                    yield batch

    def __repr__(self) -> str:
        return (
            f"Trace({str(self.path)!r}, events={len(self.events)}, status={self.status!r}, "
            f"truncated={self.truncated})"
        )


def _trace_fd(path: str | os.PathLike[str]) -> int | None:
    """A read fd of a regular trace file, else None; never raises or blocks."""
    try:
        fd = os.open(path, os.O_RDONLY | os.O_NONBLOCK | os.O_CLOEXEC)
    except (OSError, ValueError):
        return None
    try:
        if stat.S_ISREG(os.fstat(fd).st_mode) and os.pread(fd, len(fmt.MAGIC), 0) == fmt.MAGIC:
            os.set_blocking(fd, True)
            return fd
    except OSError:
        pass
    os.close(fd)
    return None


def is_trace_file(path: str | os.PathLike[str]) -> bool:
    """Whether ``path`` is a regular trace file (never blocks or raises)."""
    fd = _trace_fd(path)
    if fd is not None:
        os.close(fd)
    return fd is not None


def _summary_event_count(f: BinaryIO, budget: int | None) -> int | None:
    """The SUMMARY's event count if intact, else None: lets :func:`open_trace` preallocate."""
    size = file_size(f)
    if size < fmt.PREAMBLE_SIZE + fmt.BLOCK_HEADER_SIZE + fmt.FOOTER_SIZE:
        return None
    f.seek(size - fmt.FOOTER_SIZE)
    offset = fmt.decode_footer(f.read(fmt.FOOTER_SIZE))
    if (
        offset is None
        or not fmt.PREAMBLE_SIZE <= offset <= size - fmt.FOOTER_SIZE - fmt.BLOCK_HEADER_SIZE
    ):
        return None
    f.seek(offset)
    head = f.read(fmt.BLOCK_HEADER_SIZE)
    if len(head) < fmt.BLOCK_HEADER_SIZE:
        return None
    sync, btype, codec, _, _, stored_len, raw_len, crc = fmt.BLOCK_HEADER.unpack(head)
    if (
        sync != fmt.SYNC
        or btype != fmt.BlockType.SUMMARY
        or stored_len > size - offset - fmt.BLOCK_HEADER_SIZE
        or raw_len > min(fmt.MAX_BLOCK_BYTES, budget if budget is not None else fmt.MAX_BLOCK_BYTES)
    ):
        return None
    stored = f.read(stored_len)
    if len(stored) < stored_len or zlib.crc32(stored, zlib.crc32(head[:20])) != crc:
        return None
    try:
        count = fmt.decode_json(fmt.decompress(stored, raw_len, codec, offset), offset).get(
            "events"
        )
    except TraceFormatError:
        return None
    # no budget: bounded by the file's size
    limit = budget if budget is not None else 64 * size
    if (
        not isinstance(count, int)
        or isinstance(count, bool)
        or not 0 <= count * EVENT_DTYPE.itemsize <= limit
    ):
        return None
    return count


def open_trace(
    path: str | os.PathLike[str],
    strict: bool = False,
    events: bool = True,
    max_ratio: float | None = None,
) -> Trace:
    """Read a regular trace file. ``strict``: raise TraceFormatError on damage; ``max_ratio``:
    decoded bytes per file byte beyond 64 MiB (None: ``$KATRA3D_MAX_RATIO`` or 10; 0: no limit),
    else TraceTooLargeError."""
    with open_regular(path) as f:
        return _read_named(path, f, strict, events, max_ratio)


def open_if_trace(
    path: str | os.PathLike[str], events: bool = True, max_ratio: float | None = None
) -> Trace | None:
    """:func:`open_trace`, or None for a file that is not a trace (one open)."""
    fd = _trace_fd(path)
    if fd is None:
        return None
    with os.fdopen(fd, "rb") as f:
        return _read_named(path, f, False, events, max_ratio)


def _read_named(
    path: str | os.PathLike[str], f: BinaryIO, strict: bool, events: bool, max_ratio: float | None
) -> Trace:
    try:
        return _read_trace(path, f, strict, events, max_ratio)
    except TraceFormatError as exc:
        raise type(exc)(f"{shown(path)}: {exc}", exc.offset) from None


def _read_trace(
    path: str | os.PathLike[str], f: BinaryIO, strict: bool, events: bool, max_ratio: float | None
) -> Trace:
    trace = Trace(Path(path))
    trace.max_ratio = max_ratio
    state = ScanState(max_ratio=max_ratio)
    batches: list[np.ndarray] = []
    n_events = 0
    summary_at: int | None = None
    header_seen = False
    expected = _summary_event_count(f, decode_budget(file_size(f), max_ratio)) if events else None
    # zeroed pages: the decoder skips all-zero byte planes
    out = np.zeros(expected, dtype=EVENT_DTYPE) if expected is not None else None
    for block in iter_blocks(f, state, strict):
        t = block.type
        if t == fmt.BlockType.HEADER:
            if header_seen:
                mark_damaged(
                    state, strict, f"second HEADER block at offset {block.offset}", block.offset
                )
                break
            header_seen = True
            trace.header = TraceHeader.from_dict(block.payload)
        elif not header_seen:
            mark_damaged(
                state,
                strict,
                f"block at offset {block.offset} comes before the HEADER block",
                block.offset,
            )
            break
        elif summary_at is not None:
            what = (
                "second SUMMARY block"
                if t == fmt.BlockType.SUMMARY
                else "block after the SUMMARY block"
            )
            mark_damaged(state, strict, f"{what} at offset {block.offset}", block.offset)
            break
        elif t == fmt.BlockType.STRINGS:
            first_id, names = block.payload
            if first_id != len(trace.strings):
                mark_damaged(
                    state,
                    strict,
                    f"STRINGS block at offset {block.offset} starts at id {first_id}, "
                    f"expected {len(trace.strings)}",
                    block.offset,
                )
                break
            trace.strings.extend(names)
        elif t == fmt.BlockType.EVENTS:
            batch: EventBatch = block.payload
            try:
                if not events:
                    pass
                elif out is not None and n_events + batch.n <= len(out):
                    batch.decode(out[n_events : n_events + batch.n], zeroed=True)
                else:  # the summary's count was wrong
                    if out is not None:
                        batches.append(out[:n_events])
                        out = None
                    batches.append(batch.decode())
            except TraceFormatError as err:
                mark_damaged(state, strict, str(err), block.offset)
                break
            n_events += batch.n
        elif t == fmt.BlockType.ANNOTATION:
            trace.annotations.append(block.payload)
        elif t == fmt.BlockType.CLOCK_SYNC:
            trace.clock_syncs.append(block.payload)
        elif t == fmt.BlockType.PROFILE:
            trace.profiles.append(block.payload)
        elif t == fmt.BlockType.IMAGE:
            meta, png = block.payload
            trace.kept_frames[meta["scene"]] = KeptFrame.from_block(
                meta, png, block.offset, trace.path, state.budget
            )
        elif t == fmt.BlockType.SUMMARY:
            trace.summary = TraceSummary.from_dict(block.payload)
            summary_at = block.offset
        trace.blocks += 1
    if (
        state.summary_offset is not None
        and state.summary_offset != summary_at
        and not state.truncated
    ):
        mark_damaged(
            state,
            strict,
            f"footer points to offset {state.summary_offset}, but the SUMMARY block is at "
            f"{summary_at}",
            state.size - fmt.FOOTER_SIZE,
        )
    if not header_seen:
        reason = state.stop_reason or "no HEADER block"
        raise TraceFormatError(
            f"unreadable katra3d trace {str(trace.path)!r}: {reason}; nothing to recover",
            state.stopped_at,
        )
    trace.truncated = state.truncated
    trace.stopped_at = state.stopped_at
    trace.stop_reason = state.stop_reason
    trace.skipped_blocks = state.skipped_blocks
    trace.size = state.size
    trace.version = state.version
    trace.notes = list(state.notes)
    trace.budget = state.budget
    if out is not None:
        trace.events = out if n_events == len(out) else out[:n_events]
    elif batches:
        trace.events = batches[0] if len(batches) == 1 else np.concatenate(batches)
    if summary_at is None:
        trace.summary_rebuilt = True
        trace.summary = TraceSummary(
            status="incomplete",
            events=n_events,
            strings=len(trace.strings),
            blocks=trace.blocks,
            rebuilt=True,
        )
    if trace.truncated:
        warnings.warn(
            f"{trace.path}: {trace.stop_reason}; recovered {n_events} events in {trace.blocks} "
            "blocks "
            f"before offset {trace.stopped_at}",
            TraceRecoveryWarning,
            stacklevel=2,
        )
    return trace
