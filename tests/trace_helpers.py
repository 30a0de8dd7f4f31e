"""Small builders of traces for tests (no GL), and a reader of a capture still running."""

from __future__ import annotations

import math
import subprocess
import time
import warnings
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any, BinaryIO

import numpy as np
import pytest

from katra_trace import Clock, Flag, Kind, TraceRecoveryWarning, TraceWriter, open_trace
from katra_trace.errors import ConfigError, TraceFormatError
from katra_trace.io import format as fmt
from katra_trace.schema import EVENT_DTYPE


def frame_zone_stream(
    n_frames: int,
    zones: int = 3,
    seed: int = 0,
    scene: int = 1,
    names: tuple[int, ...] = (2, 3, 4, 5),
) -> np.ndarray:
    """A realistic stream: each frame's zones, then the frame, on the wall clock, jittered
    durations.
    """
    rng = np.random.default_rng(seed)
    rows = []
    t = 0
    for i in range(n_frames):
        frame_ns = int(rng.normal(16_600_000, 400_000))
        zt = t
        for z in range(zones):
            zd = frame_ns // (zones + 1) + int(rng.integers(-20_000, 20_000))
            rows.append(
                (
                    Kind.ZONE,
                    Clock.WALL,
                    0,
                    1,
                    scene,
                    names[1 + z % (len(names) - 1)],
                    i,
                    zt,
                    zd,
                    0.0,
                )
            )
            zt += zd
        flags = Flag.WARMUP if i < 3 else 0
        rows.append((Kind.FRAME, Clock.WALL, flags, 0, scene, names[0], i, t, frame_ns, 0.0))
        t += frame_ns + int(rng.integers(10_000, 50_000))
    return np.array(rows, dtype=EVENT_DTYPE)


def measured_frames_on_disk(part: Path) -> int:
    """Measured (not warm-up) wall-clock frames that a capture still running has put in its
    ``<path>.part`` so far: what a test waits for before it stops a run whose trace must hold
    measured frames. Its keeper hands buffered events to the writer within about 0.25 s. 0 while the
    file or its header is not there."""
    try:
        with warnings.catch_warnings():
            # an unfinished trace: read as far as it goes
            warnings.simplefilter("ignore", TraceRecoveryWarning)
            ev = open_trace(part).events
    # no such file (yet, or any more), or its header is being written
    except (ConfigError, TraceFormatError):
        return 0
    return int(
        (
            (ev["kind"] == Kind.FRAME)
            & (ev["clock"] == Clock.WALL)
            & ((ev["flags"] & Flag.WARMUP) == 0)
        ).sum()
    )


def wait_for_measured_frames(
    proc: subprocess.Popen[str], part: Path, limit_s: float = 60, at_least: int = 1
) -> None:
    """Wait until the capture ``proc`` is running has ``at_least`` measured frames in ``part`` (its
    ``<path>.part``). If the run ends first, or they do not come within ``limit_s``, the run is
    killed and the test fails with its output."""
    deadline = time.monotonic() + limit_s
    while measured_frames_on_disk(part) < at_least:
        if proc.poll() is not None or time.monotonic() > deadline:
            proc.kill()
            output = proc.communicate()
            pytest.fail(
                f"fewer than {at_least} measured frames reached {part.name} "
                f"(exit status {proc.returncode}): {output}"
            )
        time.sleep(0.05)


def wall_frames(
    scenes: Sequence[str], n: int, *, warmup: int = 2, seed: int = 0, mean_ns: float = 5e6
) -> tuple[np.ndarray, list[str]]:
    """FRAME events on the wall clock for each of ``scenes``: ``warmup`` flagged frames, then ``n``
    measured ones of about ``mean_ns`` (5 % noise), back to back; and the strings they use (``""``,
    ``frame``, the scenes)."""
    rng = np.random.default_rng(seed)
    strings = list(dict.fromkeys(["", "frame", *scenes]))
    fid = strings.index("frame")
    rows = []
    t = 0
    for scene in scenes:
        sid = strings.index(scene)
        for i in range(n + warmup):
            dur = int(mean_ns * math.exp(rng.normal(0, 0.05)))
            rows.append(
                (
                    Kind.FRAME,
                    Clock.WALL,
                    int(Flag.WARMUP) if i < warmup else 0,
                    0,
                    sid,
                    fid,
                    i,
                    t,
                    dur,
                    0.0,
                )
            )
            t += dur
    return np.array(rows, dtype=EVENT_DTYPE), strings


def write_trace(
    path: Path,
    events: np.ndarray,
    strings: list[str],
    *,
    batch_events: int = 64,
    codec: str = "zstd",
    annotations: list[dict[str, Any]] | None = None,
    header: dict[str, Any] | None = None,
    finish: bool = True,
    summary: dict[str, Any] | None = None,
    images: list[tuple[dict[str, Any], bytes]] | None = None,
) -> TraceWriter:
    """Write ``events`` (string ids index ``strings``; strings[0] must be "").

    ``header``: its ``workload``, ``capture_options``, ``host_info`` and ``notes``; ``summary``:
    what finish() records as the user's part of the SUMMARY block (``{"note": "test"}`` unless
    given); ``images``: kept frames, (record, PNG) pairs written as IMAGE blocks after the events
    and before the annotations (the writer checks the record, not the PNG)."""
    h = header or {}
    w = TraceWriter(
        path,
        workload=h.get("workload", "test"),
        capture_options=h.get("capture_options", {}),
        host_info=h.get("host_info", {}),
        notes=h.get("notes", ""),
        codec=codec,
        batch_events=batch_events,
        batch_ms=60_000,
        overwrite=True,
    )
    for s in strings[1:]:
        w.intern(s)
    w.append_array(events)
    for record, png in images or []:
        w.image(record, png)
    for a in annotations or []:
        w.annotate(a)
    if finish:
        w.finish({"note": "test"} if summary is None else summary)
    return w


def split_blocks(data: bytes) -> list[tuple[int, bytes, int]]:
    """The (type, decoded payload, schema) of every block of an intact trace, by framing alone
    (no content checks, so a test can start from a file the reader would refuse)."""
    from katra_trace.io import blosc2_events as b2ev
    from katra_trace.io import format as fmt

    out = []
    pos = fmt.PREAMBLE_SIZE
    while len(data) - pos > fmt.FOOTER_SIZE:
        _, btype, codec, schema, _, stored_len, raw_len, _ = fmt.BLOCK_HEADER.unpack_from(data, pos)
        stored = data[pos + fmt.BLOCK_HEADER_SIZE : pos + fmt.BLOCK_HEADER_SIZE + stored_len]
        # as the codec-0/1 columnar payload
        if codec == fmt.Codec.BLOSC2 and btype == fmt.BlockType.EVENTS:
            raw = fmt.encode_events(b2ev.decode_events_blosc2(stored, raw_len, pos))
        else:
            raw = fmt.decompress(stored, raw_len, codec, pos)
        out.append((btype, raw, schema))
        pos += fmt.BLOCK_HEADER_SIZE + stored_len
    return out


def seal_blocks(
    blocks: list[tuple[int, bytes, int]],
    *,
    minor: int | None = None,
    codec: int = 1,
    footer: bool = True,
    blosc2_edit: Callable[[bytearray], None] | None = None,
    image_codec: int | None = None,
) -> bytes:
    """Encode blocks (as :func:`split_blocks` gives them) into a trace with valid CRCs, sequence
    numbers and footer: the way to craft a file whose framing is intact and whose content is not.

    ``codec=2`` writes EVENTS blocks as blosc2 chunks (what the writer does; other blocks zstd),
    except a payload whose event count does not match its size, which stays codec 1; then
    ``blosc2_edit`` may change each codec-2 stored payload (``u32 n, i64 base`` + chunk) in place
    before it is sealed. ``image_codec``: the codec of IMAGE blocks (None: ``codec``'s, as other
    blocks; the format says 0, and a hostile file packs them with zstd)."""
    import struct

    from katra_trace.io import blosc2_events as b2ev
    from katra_trace.io import format as fmt

    out = bytearray(fmt.encode_preamble())
    if minor is not None:
        struct.pack_into("<H", out, 10, minor)
    summary_at = 0
    for seq, (btype, raw, schema) in enumerate(blocks):
        if btype == fmt.BlockType.SUMMARY:
            summary_at = len(out)
        if codec == fmt.Codec.BLOSC2 and btype == fmt.BlockType.EVENTS:
            try:
                events = fmt.decode_events(raw, 0)
            except fmt.TraceFormatError:
                events = None
            if events is not None:
                import blosc2

                stored = bytearray(b2ev.encode_events_blosc2(events, blosc2))
                if blosc2_edit is not None:
                    blosc2_edit(stored)
                out += b"".join(
                    fmt.frame_block(
                        btype,
                        bytes(stored),
                        len(raw),
                        seq=seq,
                        codec=fmt.Codec.BLOSC2,
                        schema=schema,
                    )
                )
                continue
        block_codec = fmt.Codec.ZSTD if codec == fmt.Codec.BLOSC2 else fmt.Codec(codec)
        if image_codec is not None and btype == fmt.BlockType.IMAGE:
            block_codec = fmt.Codec(image_codec)
        out += b"".join(fmt.encode_block(btype, raw, seq=seq, codec=block_codec, schema=schema))
    if footer:
        out += fmt.encode_footer(summary_at)
    return bytes(out)


def edit_json_block(
    blocks: list[tuple[int, bytes, int]], btype: int, edit: Any, which: int = 0
) -> None:
    """Apply ``edit(dict) -> dict`` to the ``which``-th JSON block of type ``btype``, in place."""
    import json

    found = [i for i, b in enumerate(blocks) if b[0] == btype]
    i = found[which]
    blocks[i] = (btype, json.dumps(edit(json.loads(blocks[i][1]))).encode(), blocks[i][2])


def copy_with_header(
    src: BinaryIO, dst: BinaryIO, update: Callable[[dict[str, Any]], dict[str, Any]]
) -> bool:
    """Copy the trace ``src`` to ``dst`` with its HEADER ``update``-d, other blocks byte for byte;
    False (nothing copied) when ``src`` has no readable preamble and HEADER."""
    src.seek(0)
    pre = src.read(fmt.PREAMBLE_SIZE)
    head = src.read(fmt.BLOCK_HEADER_SIZE)
    if len(pre) < fmt.PREAMBLE_SIZE or len(head) < fmt.BLOCK_HEADER_SIZE or pre[:8] != fmt.MAGIC:
        src.seek(0)
        return False
    sync, btype, codec, schema, seq, stored_len, raw_len, _crc = fmt.BLOCK_HEADER.unpack(head)
    stored = src.read(stored_len)
    if sync != fmt.SYNC or btype != fmt.BlockType.HEADER or len(stored) != stored_len:
        src.seek(0)
        return False
    header = fmt.decode_json(
        fmt.decompress(stored, raw_len, codec, fmt.PREAMBLE_SIZE), fmt.PREAMBLE_SIZE
    )
    new_head, new_stored = fmt.encode_block(
        fmt.BlockType.HEADER,
        fmt.encode_json(update(header)),
        seq=seq,
        codec=fmt.Codec(codec),
        schema=schema,
    )
    delta = len(new_stored) - stored_len
    dst.write(pre)
    dst.write(new_head)
    dst.write(new_stored)
    rest_start = src.tell()
    end = src.seek(0, 2)
    footer = b""
    if end - rest_start >= fmt.FOOTER_SIZE:
        src.seek(end - fmt.FOOTER_SIZE)
        tail = src.read(fmt.FOOTER_SIZE)
        offset = fmt.decode_footer(tail)
        if offset is not None and offset >= rest_start:
            footer = fmt.encode_footer(offset + delta)
            end -= fmt.FOOTER_SIZE
    src.seek(rest_start)
    remaining = end - rest_start
    while remaining > 0:
        chunk = src.read(min(remaining, 1 << 20))
        if not chunk:
            break
        dst.write(chunk)
        remaining -= len(chunk)
    dst.write(footer)
    return True
