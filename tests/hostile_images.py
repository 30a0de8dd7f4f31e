"""Traces whose kept frames (IMAGE blocks) are hostile or damaged, built without GL and without
holding the pixels they describe: the corpus of tests/test_kept_images_hostile.py, the fuzzers and
the memory test.

* :func:`zero_png`: a PNG of all-zero pixels of any size, streamed through zlib row by row, so an
  8192x8192 frame (256 MiB of pixels) is built in a few MB of memory, with the SHA-256 of its
  pixels;
* :func:`write_frames_trace`: a capture of its scenes (timed frames a compare can decide on) that
  keeps the given IMAGE payloads, each as written, damaged or not; ``codec=1`` re-seals every block
  with zstd, IMAGE blocks included (the format says codec 0);
* :data:`DAMAGES`: four damages of a kept frame (a truncated PNG, a size that is not the
  record's, a wrong SHA-256, bytes that are no PNG).
"""

from __future__ import annotations

import functools
import hashlib
import json
import random
import struct
import zlib
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import Any

import numpy as np

from katra_trace.io.image_block import IMAGE_HEAD
from katra_trace.io.images import frame_record
from tests.trace_helpers import seal_blocks, split_blocks, wall_frames, write_trace

RENDERER = "llvmpipe (LLVM 15.0.6, 256 bits)"
KEY = {"renderer": RENDERER, "mesa": "22.3.6", "llvm": "15.0.6", "vector_bits": "256"}
PNG_SIGNATURE = b"\x89PNG\r\n\x1a\n"

Frame = tuple[dict[str, Any], bytes]


def _chunk(kind: bytes, data: bytes) -> bytes:
    return struct.pack(">I", len(data)) + kind + data + struct.pack(">I", zlib.crc32(kind + data))


# an 8192x8192 one takes about 0.6 s to build; tests ask for the same few
@functools.lru_cache(maxsize=8)
def zero_png(
    width: int, height: int, channels: int = 4, level: int = 9, lit: bool = False
) -> tuple[bytes, str]:
    """An 8-bit PNG of ``width`` x ``height`` all-zero pixels (RGBA or RGB) and the SHA-256 of its
    raw pixels, built one row at a time (never the whole image in memory). ``lit``: its first
    pixel's red is 255 (a frame that differs from the all-zero one in one pixel)."""
    zero = b"\0" * (width * channels)
    sha = hashlib.sha256()
    z = zlib.compressobj(level)
    parts = []
    for y in range(height):
        row = b"\xff" + zero[1:] if lit and y == 0 else zero
        sha.update(row)
        parts.append(z.compress(b"\0" + row))  # filter byte 0 (None), then the row
    parts.append(z.flush())
    ihdr = struct.pack(">IIBBBBB", width, height, 8, 6 if channels == 4 else 2, 0, 0, 0)
    png = (
        PNG_SIGNATURE
        + _chunk(b"IHDR", ihdr)
        + _chunk(b"IDAT", b"".join(parts))
        + _chunk(b"IEND", b"")
    )
    return png, sha.hexdigest()


def meta(
    scene: str, width: int, height: int, sha256: str, channels: int = 4, index: int = 13
) -> dict[str, Any]:
    """An IMAGE block's facts (docs/trace-format.md, IMAGE)."""
    return {
        "scene": scene,
        "frame_index": index,
        "time_s": index / 60,
        "width": width,
        "height": height,
        "channels": channels,
        "sha256": sha256,
        "key": dict(KEY),
        "encoding": "png",
    }


def zero_frame(scene: str, side: int, lit: bool = False) -> Frame:
    """A kept frame of ``side`` x ``side`` zero RGBA pixels (``lit``: but one), its record true to
    them.
    """
    png, sha = zero_png(side, side, lit=lit)
    return meta(scene, side, side, sha), png


def picture_frame(scene: str, seed: int = 0, width: int = 24, height: int = 16) -> Frame:
    """A small genuine kept frame (random pixels): its record and its PNG."""
    pixels = np.random.default_rng(seed).integers(0, 256, size=(height, width, 4), dtype=np.uint8)
    return frame_record(scene, 13, 13 / 60, pixels, KEY)


def _truncated(frame: Frame) -> Frame:
    return frame[0], frame[1][: len(frame[1]) // 2]


def _other_size(frame: Frame) -> Frame:
    return {**frame[0], "width": frame[0]["width"] + 1}, frame[1]


def _wrong_sha(frame: Frame) -> Frame:
    return {**frame[0], "sha256": "0" * 64}, frame[1]


def _not_png(frame: Frame) -> Frame:
    return frame[0], b"GIF89a" + b"\0" * 40


#: name -> damage of a genuine kept frame.
DAMAGES: dict[str, Callable[[Frame], Frame]] = {
    "truncated-png": _truncated,
    "size-mismatch": _other_size,
    "wrong-sha256": _wrong_sha,
    "not-png": _not_png,
}


def write_frames_trace(
    path: Path,
    frames: Mapping[str, Frame],
    *,
    seed: int = 1,
    n: int = 12,
    codec: int = 0,
    scenes: tuple[str, ...] | None = None,
) -> Path:
    """A synthetic sync-mode capture of ``scenes`` (default: the frames' scenes), ``n`` measured
    frames each (wall clock, a little noise), keeping ``frames[scene]`` as an IMAGE block written as
    given (the writer checks the record, not the PNG). ``codec`` 1: every block re-sealed with zstd,
    IMAGE blocks included."""
    names = scenes if scenes is not None else tuple(frames)
    host = {
        "gl": {"renderer": RENDERER, "version": "4.5 (Core Profile) Mesa 22.3.6"},
        "software_renderer": True,
    }
    opts = {"size": [24, 16], "samples": 0, "timing_mode": "sync"}
    events, strings = wall_frames(names, n, seed=seed)
    write_trace(
        path,
        events,
        strings,
        batch_events=4096,
        summary={},
        header={"workload": "hostile images", "capture_options": opts, "host_info": host},
        images=list(frames.values()),
        annotations=[
            {"type": "scene", "scene": scene, "last_frame_sha256": record["sha256"]}
            for scene, (record, _) in frames.items()
        ],
    )
    if codec:
        path.write_bytes(seal_blocks(split_blocks(path.read_bytes()), codec=codec))
    return path


def one_8192_trace(path: Path) -> Path:
    """One kept 8192x8192 all-zero frame, its record true to it: a 262 KB trace whose pixels are 256
    MiB.
    """
    return write_frames_trace(path, {"triangle": zero_frame("triangle", 8192)})


def frames_24x4096_trace(path: Path) -> Path:
    """24 scenes each keeping a 4096x4096 all-zero frame: 1.6 MB of trace, 1.5 GiB of pixels."""
    record, png = zero_frame("s", 4096)
    return write_frames_trace(
        path, {f"s{i:02d}": ({**record, "scene": f"s{i:02d}"}, png) for i in range(24)}
    )


def zstd_packed_trace(path: Path) -> Path:
    """Six 8192x8192 all-zero frames in IMAGE blocks sealed with zstd (codec 1, which the format
    does not allow for them): a 5 KB trace."""
    record, png = zero_frame("z", 8192)
    return write_frames_trace(
        path, {f"z{i}": ({**record, "scene": f"z{i}"}, png) for i in range(6)}, codec=1
    )


def big_frame_traces(directory: Path) -> dict[str, Path]:
    """Traces of huge kept frames, true to their records, in ``directory``: ``one-8192`` (one
    8192x8192 zero frame), ``24x4096`` (24 scenes of 4096x4096) and ``zstd-6x8192`` (six 8192x8192
    frames packed with zstd).
    """
    directory.mkdir(parents=True, exist_ok=True)
    return {
        "one-8192": one_8192_trace(directory / "one-8192.katra"),
        "24x4096": frames_24x4096_trace(directory / "24x4096.katra"),
        "zstd-6x8192": zstd_packed_trace(directory / "zstd-6x8192.katra"),
    }


# --------------------------------------------------------------------------- for the fuzzers

Blocks = list[tuple[int, bytes, int]]


def seal_with_images(
    blocks: Blocks,
    *,
    minor: int | None = None,
    codec: int = 1,
    image_codec: int = 0,
    footer: bool = True,
) -> bytes:
    """:func:`tests.trace_helpers.seal_blocks` (codecs 0 and 1), with IMAGE blocks sealed with
    ``image_codec``: a valid file keeps them in codec 0, a hostile one packs them with zstd (1)."""
    return seal_blocks(blocks, minor=minor, codec=codec, footer=footer, image_codec=image_codec)


def split_image(raw: bytes) -> tuple[dict[str, Any], bytes] | None:
    """An IMAGE payload's facts and PNG, or None when it is not one (already mutated)."""
    if len(raw) < IMAGE_HEAD.size:
        return None
    (n,) = IMAGE_HEAD.unpack_from(raw)
    try:
        record = json.loads(raw[IMAGE_HEAD.size : IMAGE_HEAD.size + n])
    except ValueError:
        return None
    return (record, raw[IMAGE_HEAD.size + n :]) if isinstance(record, dict) else None


def join_image(record: Any, png: bytes) -> bytes:
    text = json.dumps(record).encode("utf-8", "surrogatepass")
    return IMAGE_HEAD.pack(len(text)) + text + png


def _rechunk(png: bytes, edit: Callable[[bytes, bytes], bytes]) -> bytes:
    """The PNG with ``edit(kind, data)`` applied to each chunk's data, lengths and CRCs made right
    again.
    """
    out, pos = bytearray(png[:8]), 8
    while pos + 12 <= len(png):
        (length,) = struct.unpack_from(">I", png, pos)
        kind, data = png[pos + 4 : pos + 8], png[pos + 8 : pos + 8 + length]
        data = edit(kind, data)
        out += (
            struct.pack(">I", len(data)) + kind + data + struct.pack(">I", zlib.crc32(kind + data))
        )
        pos += 12 + length
    return bytes(out + png[pos:])


#: Sides of the all-zero frames a fuzzed IMAGE block may claim, true to its record (a 4096x4096 or
#: 8192x8192 frame decodes beyond any small trace's budget).
BIG_SIDES = (1, 2048, 4096, 8192)


def mutate_image(rng: random.Random, raw: bytes) -> bytes:
    """A hostile variant of an IMAGE payload: its record or its PNG changed (the block CRC is sealed
    after).
    """
    parts = split_image(raw)
    if parts is None:
        return raw
    record, png = parts
    r = rng.random()
    if r < 0.15 and len(png) > 8:  # truncated anywhere, signature included
        png = png[: rng.randrange(len(png))]
    elif r < 0.3 and len(png) > 8:  # a byte changed, chunk CRCs left as they were
        i = rng.randrange(len(png))
        png = png[:i] + bytes([png[i] ^ (1 + rng.randrange(255))]) + png[i + 1 :]
    # a byte of the deflate stream changed, chunk CRCs made right: only decoding finds it
    elif r < 0.45:

        def flip(kind: bytes, data: bytes) -> bytes:
            if kind != b"IDAT" or not data:
                return data
            i = rng.randrange(len(data))
            return data[:i] + bytes([data[i] ^ (1 + rng.randrange(255))]) + data[i + 1 :]

        png = _rechunk(png, flip)
    elif r < 0.55:  # an IHDR that lies about the size (or depth, colour type), CRC made right
        field = rng.randrange(5)

        def lie(kind: bytes, data: bytes) -> bytes:
            if kind != b"IHDR" or len(data) != 13:
                return data
            values = list(struct.unpack(">IIBBBBB", data))
            values[field] = rng.choice([0, 1, 3, 16, 255, 65535, 2**31 - 1])
            values[field] &= 0xFF if field >= 2 else 0xFFFFFFFF
            return struct.pack(">IIBBBBB", *values)

        png = _rechunk(png, lie)
    elif r < 0.7:  # a large all-zero frame, true to its record
        side = rng.choice(BIG_SIDES)
        png, sha = zero_png(side, side)
        record = {**record, "width": side, "height": side, "channels": 4, "sha256": sha}
    elif r < 0.8:  # bytes that are no PNG, or none at all
        png = rng.choice(
            [b"", b"GIF89a" + bytes(40), bytes(rng.randrange(100)), b"\x89PNG\r\n\x1a\n"]
        )
    else:  # the record: a field set to something odd, or a size that is not the PNG's
        key = rng.choice(
            [
                "scene",
                "frame_index",
                "time_s",
                "width",
                "height",
                "channels",
                "sha256",
                "key",
                "encoding",
            ]
        )
        record = {
            **record,
            key: rng.choice(
                [
                    None,
                    True,
                    -1,
                    0,
                    1,
                    3,
                    2**31,
                    1.5,
                    float("inf"),
                    "",
                    "x",
                    "0" * 64,
                    [],
                    {},
                    {"a": 1},
                    8192,
                ]
            ),
        }
    return join_image(record, png)


__all__ = [
    "BIG_SIDES",
    "DAMAGES",
    "KEY",
    "RENDERER",
    "big_frame_traces",
    "frames_24x4096_trace",
    "join_image",
    "meta",
    "mutate_image",
    "one_8192_trace",
    "picture_frame",
    "seal_with_images",
    "split_image",
    "write_frames_trace",
    "zero_frame",
    "zero_png",
    "zstd_packed_trace",
]
