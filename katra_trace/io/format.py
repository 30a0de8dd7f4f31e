"""Byte-level encoding and decoding of a katra3d trace (docs/trace-format.md); little-endian."""

from __future__ import annotations

import dataclasses
import enum
import json
import re
import struct
import threading
import zlib
from collections.abc import Mapping, Sequence
from typing import Any

import numpy as np
import zstandard

from katra_trace import jsontext
from katra_trace.errors import TraceFormatError
from katra_trace.optional import MissingDependencyError, require
from katra_trace.schema import COLUMNS, EVENT_DTYPE, Clock, Flag, Kind

#: A non-ASCII byte, CR LF and ^Z: text-mode or 7-bit damage shows.
MAGIC = b"\x89KTR\r\n\x1a\n"
FORMAT_MAJOR = 1
FORMAT_MINOR = 4
#: Must-understand preamble flags this build knows (a reader refuses others).
KNOWN_FLAGS = 0


@dataclasses.dataclass(frozen=True)
class MinorLimits:
    """What event columns may hold in one format minor."""

    max_kind: int
    max_clock: int
    event_flags: int  # every defined bit of ``flags``


#: Per format minor; a newer minor's rows are the consumers' to check.
MINOR_LIMITS: dict[int, MinorLimits] = {
    0: MinorLimits(max_kind=int(Kind.COUNTER), max_clock=int(Clock.GPU), event_flags=0x1F),
    1: MinorLimits(max_kind=int(Kind.COUNTER), max_clock=int(Clock.PROCESS), event_flags=0x3F),
    2: MinorLimits(max_kind=int(Kind.COUNTER), max_clock=int(Clock.PROCESS), event_flags=0x3F),
    3: MinorLimits(max_kind=int(Kind.COUNTER), max_clock=int(Clock.PROCESS), event_flags=0x3F),
    4: MinorLimits(max_kind=int(Kind.COUNTER), max_clock=int(Clock.PROCESS), event_flags=0x3F),
}
assert max(MINOR_LIMITS) == FORMAT_MINOR
assert MINOR_LIMITS[FORMAT_MINOR].event_flags == sum(int(f) for f in Flag)
assert all(lim.event_flags & (lim.event_flags + 1) == 0 for lim in MINOR_LIMITS.values())

PREAMBLE = struct.Struct("<8sHHI")  # magic, major, minor, flags
BLOCK_HEADER = struct.Struct("<IBBHIIII")
FOOTER = struct.Struct("<QII")  # summary offset, its crc32, end magic

SYNC = 0xB10C4B7A  # starts every block
END_MAGIC = 0x444E454B  # "KEND" on disk
PREAMBLE_SIZE = PREAMBLE.size
BLOCK_HEADER_SIZE = BLOCK_HEADER.size
FOOTER_SIZE = FOOTER.size

MAX_BLOCK_BYTES = 1 << 28  # stored or decoded
MAX_BLOCK_EVENTS = (MAX_BLOCK_BYTES - 12) // EVENT_DTYPE.itemsize

EVENTS_HEAD = struct.Struct("<Iq")  # n, base_ts
STRINGS_HEAD = struct.Struct("<II")  # first id, count


class BlockType(enum.IntEnum):
    HEADER = 1
    STRINGS = 2
    EVENTS = 3
    CLOCK_SYNC = 4
    SUMMARY = 5
    ANNOTATION = 6
    IMAGE = 7  # format 1.2
    PROFILE = 8  # format 1.4


class Codec(enum.IntEnum):
    NONE = 0
    ZSTD = 1
    BLOSC2 = 2  # EVENTS blocks only


CODEC_NAMES = {"none": Codec.NONE, "zstd": Codec.ZSTD, "blosc2": Codec.BLOSC2}


CodecUnavailableError = MissingDependencyError


#: Codec-2 chunks: one thread, as the render threads need the cores.
BLOSC2_CLEVEL = 9
BLOSC2_CHUNK_HEAD = struct.Struct("<BBBBiii")
BLOSC2_MIN_HEADER = 32


def load_blosc2(purpose: str) -> Any:
    return require(
        "blosc2", extra="blosc2", purpose=purpose, what="the blosc2 codec (python-blosc2)"
    )


JSON_BLOCKS = frozenset(
    {
        BlockType.HEADER,
        BlockType.CLOCK_SYNC,
        BlockType.SUMMARY,
        BlockType.ANNOTATION,
        BlockType.PROFILE,
    }
)


def encode_preamble(flags: int = 0) -> bytes:
    return PREAMBLE.pack(MAGIC, FORMAT_MAJOR, FORMAT_MINOR, flags)


def encode_block(
    btype: int,
    payload: bytes,
    *,
    seq: int,
    codec: Codec,
    schema: int = 0,
    compressor: zstandard.ZstdCompressor | None = None,
) -> tuple[bytes, bytes]:
    """Frame one block: (header, stored payload); codec 2 is blosc2_events'."""
    raw_len = len(payload)
    if raw_len > MAX_BLOCK_BYTES:
        raise ValueError(f"block payload of {raw_len} bytes exceeds {MAX_BLOCK_BYTES}")
    if codec == Codec.ZSTD:
        stored = (compressor or zstandard.ZstdCompressor()).compress(payload)
    elif codec == Codec.NONE:
        stored = bytes(payload)
    else:
        raise ValueError(f"encode_block cannot encode codec {int(codec)}")
    return frame_block(btype, stored, raw_len, seq=seq, codec=codec, schema=schema)


def frame_block(
    btype: int, stored: bytes, raw_len: int, *, seq: int, codec: Codec, schema: int = 0
) -> tuple[bytes, bytes]:
    """(header with its CRC, stored) for an already encoded payload."""
    if raw_len > MAX_BLOCK_BYTES or len(stored) > MAX_BLOCK_BYTES:
        raise ValueError(
            f"block payload of {max(raw_len, len(stored))} bytes exceeds {MAX_BLOCK_BYTES}"
        )
    head = BLOCK_HEADER.pack(SYNC, btype, codec, schema, seq, len(stored), raw_len, 0)
    crc = zlib.crc32(stored, zlib.crc32(head[:20]))
    return head[:20] + struct.pack("<I", crc), stored


def encode_footer(summary_offset: int) -> bytes:
    off = struct.pack("<Q", summary_offset)
    return FOOTER.pack(summary_offset, zlib.crc32(off), END_MAGIC)


def decode_footer(data: bytes) -> int | None:
    """The summary offset of a valid footer, else None."""
    if len(data) != FOOTER_SIZE:
        return None
    offset, crc, end = FOOTER.unpack(data)
    if end != END_MAGIC or crc != zlib.crc32(data[:8]):
        return None
    return int(offset)


def encode_json(obj: Mapping[str, object]) -> bytes:
    return jsontext.dumps(obj, separators=(",", ":"), default=_json_default).encode("utf-8")


def _json_default(obj: Any) -> Any:
    if isinstance(obj, np.generic):
        return obj.item()
    if isinstance(obj, np.ndarray):
        return obj.tolist()
    if isinstance(obj, (set, frozenset)):
        return sorted(obj)
    if hasattr(obj, "as_dict"):
        return obj.as_dict()
    return str(obj)


def decode_json(payload: bytes, offset: int, notes: list[str] | None = None) -> dict[str, Any]:
    """Decode a JSON object; lone surrogates become U+FFFD, noted in ``notes``."""
    try:
        obj = json.loads(payload.decode("utf-8"))
    except (UnicodeDecodeError, ValueError, RecursionError) as exc:
        raise TraceFormatError(
            f"corrupt block at offset {offset}: bad JSON ({exc})", offset
        ) from None
    if not isinstance(obj, dict):
        raise TraceFormatError(
            f"corrupt block at offset {offset}: JSON payload is not an object", offset
        )
    if b"\\ud" in payload or b"\\uD" in payload:
        repaired: list[int] = []
        try:
            fixed = _repair_json(obj, repaired)
        except RecursionError:
            raise TraceFormatError(
                f"corrupt block at offset {offset}: JSON nested too deep", offset
            ) from None
        if repaired:
            if notes is not None:
                notes.append(
                    f"block at offset {offset}: invalid UTF-16 (lone surrogates) in JSON strings "
                    "replaced by U+FFFD"
                )
            assert isinstance(fixed, dict)
            obj = fixed
    return obj


_SURROGATE = re.compile("[\ud800-\udfff]")


def _has_surrogate(text: str) -> bool:
    return _SURROGATE.search(text) is not None


def repair_text(text: str) -> str:
    """Surrogate pairs joined, lone surrogates replaced by U+FFFD."""
    if not _has_surrogate(text):
        return text
    return text.encode("utf-16-le", "surrogatepass").decode("utf-16-le", "replace")


def _repair_json(obj: Any, repaired: list[int]) -> Any:
    if isinstance(obj, str):
        if _has_surrogate(obj):
            repaired.append(1)
            return repair_text(obj)
        return obj
    if isinstance(obj, list):
        return [_repair_json(x, repaired) for x in obj]
    if isinstance(obj, dict):
        return {_repair_json(k, repaired): _repair_json(v, repaired) for k, v in obj.items()}
    return obj


def encode_strings(first_id: int, strings: Sequence[str]) -> bytes:
    """Lone surrogates go as U+FFFD: every file holds valid UTF-8."""
    blobs = [_utf8(s) for s in strings]
    lengths = np.fromiter((len(b) for b in blobs), dtype="<u4", count=len(blobs))
    return STRINGS_HEAD.pack(first_id, len(blobs)) + lengths.tobytes() + b"".join(blobs)


def _utf8(text: str) -> bytes:
    try:
        return text.encode("utf-8")
    except UnicodeEncodeError:
        return repair_text(text).encode("utf-8")


def decode_strings(
    payload: bytes, offset: int, notes: list[str] | None = None
) -> tuple[int, list[str]]:
    """Decode a STRINGS payload; encoded surrogates become U+FFFD, noted in ``notes``."""
    bad = f"corrupt STRINGS block at offset {offset}"
    if len(payload) < STRINGS_HEAD.size:
        raise TraceFormatError(f"{bad}: too short", offset)
    first_id, count = STRINGS_HEAD.unpack_from(payload)
    table_end = STRINGS_HEAD.size + 4 * count
    if table_end > len(payload):
        raise TraceFormatError(f"{bad}: {count} strings do not fit in {len(payload)} bytes", offset)
    lengths = np.frombuffer(payload, dtype="<u4", count=count, offset=STRINGS_HEAD.size)
    if int(lengths.sum(dtype=np.uint64)) != len(payload) - table_end:
        raise TraceFormatError(f"{bad}: string lengths do not add up", offset)
    out: list[str] = []
    pos = table_end
    try:
        for n in lengths.tolist():
            out.append(payload[pos : pos + n].decode("utf-8", "surrogatepass"))
            pos += n
    except UnicodeDecodeError:
        raise TraceFormatError(f"{bad}: invalid UTF-8", offset) from None
    if any(_has_surrogate(x) for x in out):
        out = [repair_text(x) for x in out]
        if notes is not None:
            notes.append(
                f"STRINGS block at offset {offset}: encoded surrogates (invalid UTF-8) read as "
                "U+FFFD"
            )
    return first_id, out


def encode_events(events: np.ndarray) -> bytes:
    """Columnar payload: n, base_ts, byte-planed columns (zstd sees high bytes as runs),
    start_ns as deltas."""
    n = len(events)
    if n == 0:
        return EVENTS_HEAD.pack(0, 0)
    start = events["start_ns"].astype("<i8")
    base = int(start[0])
    delta = np.empty(n, dtype="<i8")
    delta[0] = 0
    np.subtract(start[1:], start[:-1], out=delta[1:])
    parts = [EVENTS_HEAD.pack(n, base)]
    for name, typ, _ in COLUMNS:
        col = delta if name == "start_ns" else np.ascontiguousarray(events[name], dtype=typ)
        size = col.dtype.itemsize
        if size > 1:
            parts.append(col.view(np.uint8).reshape(n, size).T.tobytes())
        else:
            parts.append(col.tobytes())
    return b"".join(parts)


def events_head(payload: bytes, offset: int) -> tuple[int, int]:
    bad = f"corrupt EVENTS block at offset {offset}"
    if len(payload) < EVENTS_HEAD.size:
        raise TraceFormatError(f"{bad}: too short", offset)
    n, base = EVENTS_HEAD.unpack_from(payload)
    if len(payload) != EVENTS_HEAD.size + n * EVENT_DTYPE.itemsize:
        raise TraceFormatError(f"{bad}: {n} events do not match {len(payload)} bytes", offset)
    return n, base


def decode_events(
    payload: bytes, offset: int, out: np.ndarray | None = None, *, zeroed: bool = False
) -> np.ndarray:
    """Decode an EVENTS payload, unchecked (``zeroed``: ``out`` is zeros)."""
    return _decode(payload, offset, out, zeroed)[0]


def decode_checked_events(
    payload: bytes, offset: int, minor: int, out: np.ndarray | None = None, *, zeroed: bool = False
) -> tuple[np.ndarray, str | None]:
    """:func:`decode_events` and :func:`check_events`' verdict (plane maxima clear most)."""
    events, maxima, start_max = _decode(payload, offset, out, zeroed)
    if len(events) == 0 or not _may_break_rules(maxima, start_max, minor):
        return events, None
    return events, check_events(events, minor)


def _decode(
    payload: bytes, offset: int, out: np.ndarray | None, zeroed: bool
) -> tuple[np.ndarray, list[int], int]:
    n, base = events_head(payload, offset)
    width = EVENT_DTYPE.itemsize
    if out is None:
        out, zeroed = np.zeros(n, dtype=EVENT_DTYPE), True
    if n == 0:
        return out, [0] * width, 0
    planes = np.frombuffer(payload, dtype=np.uint8, offset=EVENTS_HEAD.size).reshape(width, n)
    maxima: list[int] = planes.max(axis=1).tolist()
    rows = out.view(np.uint8).reshape(n, width)
    if n < 256:  # one call beats `width` short ones
        rows[...] = planes.T
        np.cumsum(out["start_ns"], out=out["start_ns"])
        out["start_ns"] += base
        return out, maxima, int(out["start_ns"].max())
    first, size = _PLANES["start_ns"]
    start = np.zeros(n, dtype="<i8")  # contiguous: fast cumsum
    start_bytes = start.view(np.uint8).reshape(n, size)
    for byte in range(width):
        # plane by plane: ~5x faster than numpy's transpose
        if first <= byte < first + size:
            if maxima[byte]:
                start_bytes[:, byte - first] = planes[byte]
        elif maxima[byte] or not zeroed:
            rows[:, byte] = planes[byte]
    np.cumsum(start, out=start)
    start += base
    out["start_ns"] = start
    return out, maxima, int(start.max())


def _may_break_rules(maxima: Sequence[int], start_max: int, minor: int) -> bool:
    """False when events with these byte-plane ``maxima`` surely pass :func:`check_events`."""

    def top(column: str, byte: int) -> int:
        return maxima[_PLANES[column][0] + byte]

    limits = MINOR_LIMITS.get(minor)
    if limits is not None:
        flags_hi = top("flags", 1)
        flags_bound = (flags_hi << 8) | 0xFF if flags_hi else top("flags", 0)
        if (
            top("kind", 0) > limits.max_kind
            or top("clock", 0) > limits.max_clock
            or flags_bound > limits.event_flags
        ):
            return True
    # dur_ns < 2**62: non-negative, and no overflow from a start up to 2**62
    return top("dur_ns", 7) >= 0x40 or start_max > 1 << 62


_INT64_MAX = np.iinfo(np.int64).max


def check_events(events: np.ndarray, minor: int) -> str | None:
    """Why ``events`` cannot be in a file of format minor ``minor``, or None: undefined kinds,
    clocks or flags, negative durations, or a span end past int64."""
    if len(events) == 0:
        return None
    limits = MINOR_LIMITS.get(minor)
    if limits is not None:
        kind_max, clock_max = int(events["kind"].max()), int(events["clock"].max())
        if kind_max > limits.max_kind:
            return f"event kind {kind_max} is not defined in format 1.{minor}"
        if clock_max > limits.max_clock:
            return f"event clock {clock_max} is not defined in format 1.{minor}"
        if int(events["flags"].max()) & ~limits.event_flags:
            extra = int(np.bitwise_or.reduce(events["flags"])) & ~limits.event_flags
            return f"event flag bits {extra:#x} are not defined in format 1.{minor}"
    dur = events["dur_ns"]
    if int(dur.min()) < 0:
        return f"negative duration {int(dur.min())} (dur_ns is never negative)"
    start = events["start_ns"]
    if int(dur.max()) > 1 << 62 or int(start.max()) > 1 << 62:  # else start + dur cannot overflow
        if bool((start > _INT64_MAX - dur).any()):
            return "a span ends beyond the int64 nanosecond range"
    return None


def _plane_offsets() -> dict[str, tuple[int, int]]:
    out, at = {}, 0
    for name, typ, _ in COLUMNS:
        width = np.dtype(typ).itemsize
        out[name] = (at, width)
        at += width
    return out


_PLANES = _plane_offsets()
# the byte planes _may_break_rules reads
_SCREENED_PLANES = (
    _PLANES["kind"][0],
    _PLANES["clock"][0],
    _PLANES["flags"][0],
    _PLANES["flags"][0] + 1,
    _PLANES["dur_ns"][0] + 7,
)


def check_payload(payload: bytes, start_ns: np.ndarray, minor: int) -> str | None:
    """:func:`check_events`' verdict on an encoded EVENTS payload (plane maxima clear most)."""
    n = len(start_ns)
    if n == 0:
        return None
    maxima = [0] * EVENT_DTYPE.itemsize
    for index in _SCREENED_PLANES:
        maxima[index] = int(
            np.frombuffer(
                payload, dtype=np.uint8, count=n, offset=EVENTS_HEAD.size + index * n
            ).max()
        )
    if not _may_break_rules(maxima, int(start_ns.max()), minor):
        return None
    return check_events(decode_events(payload, 0), minor)


def copy_events(events: np.ndarray) -> np.ndarray:
    """``events`` as bytes (several times faster than a structured copy)."""
    src = np.ascontiguousarray(events.astype(EVENT_DTYPE, copy=False))
    out = np.empty(len(src), dtype=EVENT_DTYPE)
    out.view(np.uint8)[...] = src.view(np.uint8)
    return out


_DECOMPRESSORS = threading.local()


def _zstd_decompressor() -> zstandard.ZstdDecompressor:
    """This thread's zstd decompressor (one may not serve two threads)."""
    d: zstandard.ZstdDecompressor | None = getattr(_DECOMPRESSORS, "zstd", None)
    if d is None:
        d = _DECOMPRESSORS.zstd = zstandard.ZstdDecompressor()
    return d


def decompress(stored: bytes, raw_len: int, codec: int, offset: int) -> bytes:
    """Decode a codec 0 or 1 payload, never producing more than ``raw_len`` bytes."""
    if codec == Codec.BLOSC2:
        raise TraceFormatError(
            f"corrupt block at offset {offset}: codec 2 (blosc2) is defined for EVENTS blocks only",
            offset,
        )
    if codec == Codec.NONE:
        if len(stored) != raw_len:
            raise TraceFormatError(
                f"corrupt block at offset {offset}: stored and raw lengths differ", offset
            )
        return stored
    if codec == Codec.ZSTD:
        try:
            size = zstandard.frame_content_size(stored)
            if size not in (-1, raw_len):
                raise TraceFormatError(
                    f"corrupt block at offset {offset}: zstd frame holds {size} bytes, header says "
                    f"{raw_len}",
                    offset,
                )
            data: bytes = _zstd_decompressor().decompress(stored, max_output_size=raw_len)
        except zstandard.ZstdError as exc:
            raise TraceFormatError(
                f"corrupt block at offset {offset}: zstd: {exc}", offset
            ) from None
        if len(data) != raw_len:
            raise TraceFormatError(
                f"corrupt block at offset {offset}: decoded {len(data)} bytes, expected {raw_len}",
                offset,
            )
        return data
    raise TraceFormatError(
        f"block at offset {offset} uses codec {codec}, unknown to this katra3d build; upgrade "
        "katra3d to read it",
        offset,
    )
