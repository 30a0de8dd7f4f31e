"""EVENTS blocks with codec 2 (blosc2): ``u32 n, i64 base_ts``, one chunk of the packed records
(docs/trace-format.md)."""

from __future__ import annotations

from typing import Any

import numpy as np

from katra_trace.errors import TraceFormatError
from katra_trace.io.format import (
    BLOSC2_CHUNK_HEAD,
    BLOSC2_CLEVEL,
    BLOSC2_MIN_HEADER,
    EVENTS_HEAD,
    copy_events,
    load_blosc2,
)
from katra_trace.schema import EVENT_DTYPE


def encode_events_blosc2(events: np.ndarray, blosc2: Any, *, in_place: bool = False) -> bytes:
    """A codec-2 EVENTS payload, ``start_ns`` as deltas (``in_place``: written into ``events``,
    saving a copy)."""
    n = len(events)
    if n == 0:
        return EVENTS_HEAD.pack(0, 0)
    if (
        in_place
        and events.dtype == EVENT_DTYPE
        and events.flags.c_contiguous
        and events.flags.writeable
    ):
        records = events
    else:
        records = copy_events(events)
    start = records["start_ns"]
    base = int(start[0])
    delta = np.diff(start)  # int64 wrap-around, like codec 0/1
    start[0] = 0
    start[1:] = delta
    chunk: bytes = blosc2.compress2(
        records,
        typesize=EVENT_DTYPE.itemsize,
        clevel=BLOSC2_CLEVEL,
        codec=blosc2.Codec.LZ4,
        filters=[blosc2.Filter.SHUFFLE],
        nthreads=1,
    )
    return EVENTS_HEAD.pack(n, base) + chunk


def blosc2_events_head(stored: bytes, raw_len: int, offset: int) -> tuple[int, int]:
    """(n, base_ts) of a codec-2 payload, checked before allocating: blosc2 trusts its chunk
    header, so its sizes must agree with ``n`` and ``raw_len``."""
    bad = f"corrupt EVENTS block at offset {offset}"
    if len(stored) < EVENTS_HEAD.size:
        raise TraceFormatError(f"{bad}: too short", offset)
    n, base = EVENTS_HEAD.unpack_from(stored)
    nbytes_expected = n * EVENT_DTYPE.itemsize
    if raw_len != EVENTS_HEAD.size + nbytes_expected:
        raise TraceFormatError(f"{bad}: {n} events do not match raw length {raw_len}", offset)
    chunk_len = len(stored) - EVENTS_HEAD.size
    if n == 0:
        if chunk_len:
            raise TraceFormatError(f"{bad}: bytes after an empty batch", offset)
        return n, base
    if chunk_len < BLOSC2_MIN_HEADER:
        raise TraceFormatError(
            f"{bad}: blosc2 chunk of {chunk_len} bytes is shorter than its header", offset
        )
    _, _, _, typesize, nbytes, blocksize, cbytes = BLOSC2_CHUNK_HEAD.unpack_from(
        stored, EVENTS_HEAD.size
    )
    if nbytes != nbytes_expected:
        raise TraceFormatError(
            f"{bad}: blosc2 chunk declares {nbytes} bytes, {n} events are {nbytes_expected}", offset
        )
    if cbytes != chunk_len:
        raise TraceFormatError(
            f"{bad}: blosc2 chunk declares {cbytes} stored bytes, the block holds {chunk_len}",
            offset,
        )
    if typesize != EVENT_DTYPE.itemsize or not 0 < blocksize <= max(nbytes, BLOSC2_MIN_HEADER):
        raise TraceFormatError(
            f"{bad}: blosc2 chunk header is not one katra3d writes (typesize {typesize}, "
            f"block size {blocksize})",
            offset,
        )
    return n, base


def decode_events_blosc2(
    stored: bytes, raw_len: int, offset: int, out: np.ndarray | None = None
) -> np.ndarray:
    n, base = blosc2_events_head(stored, raw_len, offset)
    if out is None:
        out = np.empty(n, dtype=EVENT_DTYPE)
    if len(out) != n or out.dtype != EVENT_DTYPE or not out.flags.c_contiguous:
        raise ValueError(f"decode_events_blosc2 needs a contiguous EVENT_DTYPE array of {n} events")
    if n == 0:
        return out
    blosc2 = load_blosc2("reading this trace's events")
    try:
        got = blosc2.decompress2(memoryview(stored)[EVENTS_HEAD.size :], dst=out)
    except (RuntimeError, ValueError, TypeError) as exc:
        raise TraceFormatError(
            f"corrupt EVENTS block at offset {offset}: blosc2: {exc}", offset
        ) from None
    if isinstance(got, int) and got != n * EVENT_DTYPE.itemsize:
        raise TraceFormatError(
            f"corrupt EVENTS block at offset {offset}: blosc2 decoded {got} bytes, "
            f"expected {n * EVENT_DTYPE.itemsize}",
            offset,
        )
    start = out["start_ns"]
    np.cumsum(start, out=start)
    start += base
    return out


__all__ = ["blosc2_events_head", "decode_events_blosc2", "encode_events_blosc2"]
