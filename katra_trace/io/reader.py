"""Reading katra3d traces, whole or block by block, intact or damaged.

:func:`open_trace` reads a file into a :class:`Trace`. By default it keeps
every intact block before the first torn or corrupt one, rebuilds the summary
by scanning when the file has none, and warns with
:class:`TraceRecoveryWarning`; ``strict=True`` raises
:class:`~katra_trace.errors.TraceFormatError` instead. :func:`iter_blocks`
and :meth:`Trace.iter_batches` stream a file larger than memory.

The one scan keeps everything a command reads, kept frames included: each IMAGE block's facts,
offset and PNG bytes (:attr:`Trace.kept_frames`), whose pixels are decoded only when asked for
(:func:`katra_trace.io.images.frame_pixels`), inside what is left of the file's reading budget
(:attr:`Trace.budget`). No consumer opens the file a second time.

Every length read from the file is checked against the bytes that are left
before anything is allocated, so any byte string either parses or raises a
:class:`~katra_trace.errors.KatraError`.
"""

from __future__ import annotations

import os
import stat
import warnings
import zlib
from collections.abc import Iterator
from pathlib import Path
from typing import Any, BinaryIO

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
from katra_trace.schema import EVENT_DTYPE
from katra_trace.text import shown


class TraceRecoveryWarning(UserWarning):
    """A damaged trace was read as far as it was intact."""


class Trace:
    """A trace read from a file. See :func:`open_trace`."""

    def __init__(self, path: Path) -> None:
        self.path = path
        #: the HEADER block, typed (``header.as_dict()``: the JSON object as read)
        self.header = TraceHeader()
        self.summary: dict[str, Any] = {}
        self.strings: list[str] = []
        self.annotations: list[dict[str, Any]] = []
        self.clock_syncs: list[dict[str, Any]] = []
        #: PROFILE blocks (katra_trace.profile.model reads them)
        self.profiles: list[dict[str, Any]] = []
        self.events: np.ndarray = np.empty(0, dtype=EVENT_DTYPE)
        self.truncated = False
        self.stopped_at: int | None = None
        self.stop_reason = ""
        self.summary_rebuilt = False
        self.blocks = 0
        self.skipped_blocks = 0
        self.size = 0
        self.version = (0, 0)
        #: content the reader repaired (e.g. lone surrogates read as U+FFFD); the trace is usable
        self.notes: list[str] = []
        self.max_ratio: float | None = None
        #: each scene's kept frame (its last IMAGE block), facts and PNG bytes; pixels decoded on
        #: demand
        self.kept_frames: dict[str, KeptFrame] = {}
        #: what the file may still decode once scanned: kept frames' pixels are counted against it
        #: while held
        self.budget: DecodeBudget | None = None

    @property
    def status(self) -> str:
        """complete | aborted | interrupted (from the summary) or incomplete (no summary)."""
        return str(self.summary.get("status", "incomplete"))

    def name(self, sid: int) -> str:
        """The string with id ``sid`` (``"?<id>"`` if the table lacks it)."""
        return self.strings[sid] if 0 <= sid < len(self.strings) else f"?{sid}"

    def iter_batches(self, strict: bool = False) -> Iterator[np.ndarray]:
        """Stream the events block by block, re-reading the file (for traces larger than memory).

        Stops quietly at the first damaged block (``strict``: raises), like :func:`iter_blocks`."""
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
    """A blocking read descriptor of ``path`` when it is a regular file that starts with the trace
    magic, else None (never blocks: the open is O_NONBLOCK, so a FIFO with no writer cannot hang it;
    never raises)."""
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
    """Whether ``path`` is a regular file that starts with the trace magic (never blocks, never
    raises).
    """
    fd = _trace_fd(path)
    if fd is not None:
        os.close(fd)
    return fd is not None


def _summary_event_count(f: BinaryIO, budget: int | None) -> int | None:
    """The event count in the SUMMARY block the footer points to, if all of that is intact.

    Lets :func:`open_trace` decode every batch straight into one preallocated array. Anything
    unexpected returns None (the caller then collects batches); the scan checks everything anyway.
    """
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
    # no budget: still bounded by the file's size
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
    """Read a trace file.

    Args:
        path: the file (a regular file: pipes, FIFOs and devices are refused).
        strict: raise :class:`TraceFormatError` on any damage instead of
            recovering the intact prefix (and warning).
        events: load the events (False: header, strings, summary and counts only).
        max_ratio: decoded bytes allowed per byte of file, on top of a 64 MiB allowance
            (:func:`decode_budget`); None: ``$KATRA3D_MAX_RATIO`` or 10; 0: no limit. Beyond it,
            :class:`~katra_trace.errors.TraceTooLargeError` (a decompression bomb, or a genuine
            trace that compresses unusually well).

    A :class:`TraceFormatError` names the file (a trace found in a directory is otherwise
    anonymous).
    """
    with open_regular(path) as f:
        return _read_named(path, f, strict, events, max_ratio)


def open_if_trace(
    path: str | os.PathLike[str], events: bool = True, max_ratio: float | None = None
) -> Trace | None:
    """:func:`open_trace` of a file that is a trace, or None for one that is not (not a regular
    file, not readable, or not starting with the trace magic: :func:`is_trace_file`'s test), decided
    inside the one open that reads it (a directory's traces are picked out and read with one open
    each)."""
    fd = _trace_fd(path)
    if fd is None:
        return None
    with os.fdopen(fd, "rb") as f:
        return _read_named(path, f, False, events, max_ratio)


def _read_named(
    path: str | os.PathLike[str], f: BinaryIO, strict: bool, events: bool, max_ratio: float | None
) -> Trace:
    """:func:`_read_trace`, with the file's name in a TraceFormatError's message."""
    try:
        return _read_trace(path, f, strict, events, max_ratio)
    except TraceFormatError as exc:
        raise type(exc)(f"{shown(path)}: {exc}", exc.offset) from None


def _read_trace(
    path: str | os.PathLike[str], f: BinaryIO, strict: bool, events: bool, max_ratio: float | None
) -> Trace:
    """:func:`open_trace`'s work, on ``f``: ``path`` opened for reading."""
    trace = Trace(Path(path))
    trace.max_ratio = max_ratio
    state = ScanState(max_ratio=max_ratio)
    batches: list[np.ndarray] = []
    n_events = 0
    summary_at: int | None = None
    header_seen = False
    expected = _summary_event_count(f, decode_budget(file_size(f), max_ratio)) if events else None
    # zeroed (pages the OS hands over zero-filled): the decoder skips the all-zero byte planes
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
                else:  # the summary's count was wrong: fall back to collecting batches
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
            trace.summary = block.payload
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
        trace.summary = {
            "status": "incomplete",
            "events": n_events,
            "strings": len(trace.strings),
            "blocks": trace.blocks,
            "rebuilt": True,
        }
    if trace.truncated:
        warnings.warn(
            f"{trace.path}: {trace.stop_reason}; recovered {n_events} events in {trace.blocks} "
            "blocks "
            f"before offset {trace.stopped_at}",
            TraceRecoveryWarning,
            stacklevel=2,
        )
    return trace
