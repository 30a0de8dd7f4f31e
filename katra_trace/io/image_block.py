"""The IMAGE block's payload (format 1.2): one kept frame, its facts as JSON, then its pixels as a
PNG.

A capture keeps each scene's last measured frame in the trace itself, one IMAGE block a frame
(docs/trace-format.md, "IMAGE"). The payload is ``u32 n`` (little-endian), ``n`` bytes of UTF-8 JSON
(:data:`IMAGE_FIELDS`), then the PNG file, byte for byte. The block is written with codec 0 (the PNG
is compressed already), so it decodes to exactly its stored size and costs nothing of the reader's
decompression budget beyond that. This module only frames and checks, and holds what the reader
keeps of each kept frame (:class:`KeptFrame`: its facts, where it is, its PNG bytes, and what is
wrong with that PNG, from its chunk structure alone); encoding and decoding the pixels is
:mod:`katra_trace.io.images`.
"""

from __future__ import annotations

import dataclasses
import math
import re
import struct
import zlib
from pathlib import Path
from typing import Any, Protocol

from katra_trace.errors import TraceFormatError
from katra_trace.io import format as fmt
from katra_trace.text import shown

#: ``u32``: the length of the JSON part.
IMAGE_HEAD = struct.Struct("<I")
#: The one pixel encoding this build writes and reads.
IMAGE_ENCODING = "png"
#: Largest frame kept, in pixel bytes (a kept PNG decodes to at most this much).
MAX_IMAGE_BYTES = 1 << 28  # 256 MiB

_SHA256 = re.compile(r"[0-9a-f]{64}")

#: The JSON part's keys and what each must be (checked by :func:`decode_image_payload`).
IMAGE_FIELDS: dict[str, str] = {
    "scene": "the scene's label (a string)",
    "frame_index": "the frame's index in the scene, warmup frames counted (an integer >= 0)",
    "time_s": "the animation time the scene was given for that frame, in seconds (a finite number)",
    "width": "pixels (an integer >= 1)",
    "height": "pixels (an integer >= 1)",
    "channels": "4 (RGBA) or 3 (RGB), 8 bits each",
    "sha256": "SHA-256 (hex) of the raw pixels, rows top to bottom, in C order",
    "key": "the image key: which device drew it (an object of strings)",
    "encoding": "png",
}


def encode_image_payload(meta: dict[str, Any], png: bytes) -> bytes:
    """An IMAGE block's payload: the JSON facts ``meta`` (checked) and the PNG bytes."""
    problem = image_meta_problem(meta)
    if problem is not None:
        raise ValueError(f"image record: {problem}")
    head = fmt.encode_json(meta)
    return IMAGE_HEAD.pack(len(head)) + head + png


def decode_image_payload(
    payload: bytes, offset: int, notes: list[str] | None = None
) -> tuple[dict[str, Any], bytes]:
    """The facts and the PNG bytes of an IMAGE block at ``offset``;
    TraceFormatError if malformed."""
    where = f"corrupt IMAGE block at offset {offset}"
    if len(payload) < IMAGE_HEAD.size:
        raise TraceFormatError(f"{where}: {len(payload)} bytes, too short", offset)
    (n,) = IMAGE_HEAD.unpack_from(payload)
    if n > len(payload) - IMAGE_HEAD.size:
        raise TraceFormatError(
            f"{where}: its JSON part claims {n} bytes, {len(payload) - IMAGE_HEAD.size} left",
            offset,
        )
    meta = fmt.decode_json(payload[IMAGE_HEAD.size : IMAGE_HEAD.size + n], offset, notes)
    problem = image_meta_problem(meta)
    if problem is not None:
        raise TraceFormatError(f"{where}: {problem}", offset)
    return meta, bytes(payload[IMAGE_HEAD.size + n :])


def image_meta_problem(meta: Any) -> str | None:
    """What is wrong with an IMAGE block's facts (None: nothing)."""
    if not isinstance(meta, dict):
        return "its JSON part is not an object"

    def whole(key: str, low: int) -> bool:
        value = meta.get(key)
        return isinstance(value, int) and not isinstance(value, bool) and low <= value < 1 << 31

    if not isinstance(meta.get("scene"), str):
        return "'scene' is not a string"
    for key, low in (("frame_index", 0), ("width", 1), ("height", 1)):
        if not whole(key, low):
            return f"'{key}' is not an integer >= {low}"
    time_s = meta.get("time_s")
    if (
        not isinstance(time_s, (int, float))
        or isinstance(time_s, bool)
        or not math.isfinite(time_s)
    ):
        return "'time_s' is not a finite number"
    if meta.get("channels") not in (3, 4):
        return "'channels' is not 3 or 4"
    if meta["width"] * meta["height"] * meta["channels"] > MAX_IMAGE_BYTES:
        return (
            f"{meta['width']}x{meta['height']} pixels exceed the {MAX_IMAGE_BYTES >> 20} MiB limit"
        )
    if not isinstance(meta.get("sha256"), str) or not _SHA256.fullmatch(meta["sha256"]):
        return "'sha256' is not 64 lower-case hex digits"
    kept_key = meta.get("key")
    if not isinstance(kept_key, dict) or not all(
        isinstance(k, str) and isinstance(v, str) for k, v in kept_key.items()
    ):
        return "'key' is not an object of strings"
    if meta.get("encoding") != IMAGE_ENCODING:
        return f"unknown encoding {meta.get('encoding')!r} (this build reads {IMAGE_ENCODING!r})"
    return None


#: The eight bytes every PNG starts with.
PNG_SIGNATURE = b"\x89PNG\r\n\x1a\n"
#: PNG colour types of the kept frames, by channels: 6 truecolour with alpha (RGBA), 2 truecolour
#: (RGB).
_COLOUR_TYPES = {4: 6, 3: 2}
_CHUNK_HEAD = struct.Struct(">I4s")
_IHDR = struct.Struct(">IIBBBBB")


def png_problem(png: bytes, meta: dict[str, Any]) -> str | None:
    """What is wrong with a kept frame's PNG, from its chunks alone (no pixel is decoded); None:
    nothing.

    It must be one PNG file: the signature, then chunks whose lengths fit and whose CRCs hold, IHDR
    first (8 bits a channel, RGBA or RGB as the record's ``channels`` says, the record's width and
    height), at least one IDAT, and IEND last, with nothing after it. What only decoding can tell (a
    deflate stream that ends early, pixels whose SHA-256 is not the record's) is checked by
    :func:`katra_trace.io.images.frame_pixels`."""
    if not png.startswith(PNG_SIGNATURE):
        return "its image is not a PNG (it does not start with the PNG signature)"
    pos = len(PNG_SIGNATURE)
    seen: list[bytes] = []
    while pos < len(png):
        if len(png) - pos < 12:
            return f"its PNG is truncated: {len(png) - pos} bytes where a chunk starts"
        length, kind = _CHUNK_HEAD.unpack_from(png, pos)
        end = pos + 8 + length
        if length > len(png) - pos - 12:
            return (
                f"its PNG is truncated: a {kind!r} chunk of {length} bytes, {len(png) - pos - 12} "
                "left"
            )
        (crc,) = struct.unpack_from(">I", png, end)
        if zlib.crc32(memoryview(png)[pos + 4 : end]) != crc:
            return f"its PNG's {kind!r} chunk at byte {pos} fails its CRC"
        if not seen:
            if kind != b"IHDR" or length != _IHDR.size:
                return "its PNG does not start with an IHDR chunk"
            problem = _ihdr_problem(png[pos + 8 : end], meta)
            if problem is not None:
                return problem
        seen.append(kind)
        pos = end + 4
        if kind == b"IEND":
            break
    if not seen or seen[-1] != b"IEND":
        return "its PNG is truncated: it has no IEND chunk"
    if pos != len(png):
        return f"its PNG has {len(png) - pos} bytes after its IEND chunk"
    if b"IDAT" not in seen:
        return "its PNG has no IDAT chunk (no pixels)"
    return None


def _ihdr_problem(ihdr: bytes, meta: dict[str, Any]) -> str | None:
    width, height, depth, colour, compression, filtering, interlace = _IHDR.unpack(ihdr)
    if (width, height) != (meta["width"], meta["height"]):
        return (
            f"its PNG holds {width}x{height} pixels, its record says "
            f"{meta['width']}x{meta['height']}"
        )
    if depth != 8 or colour != _COLOUR_TYPES[meta["channels"]]:
        return (
            f"its PNG is {depth}-bit colour type {colour}, its record says 8-bit "
            f"{'RGBA' if meta['channels'] == 4 else 'RGB'} (colour type "
            f"{_COLOUR_TYPES[meta['channels']]})"
        )
    if compression != 0 or filtering != 0 or interlace not in (0, 1):
        return (
            f"its PNG's IHDR names an unknown method (compression {compression}, filter "
            f"{filtering}, "
            f"interlace {interlace})"
        )
    return None


class PixelBudget(Protocol):
    """What decoded pixels are counted against: the reader's budget of their file
    (:class:`katra_trace.io.blocks.DecodeBudget`; blocks.py imports this module)."""

    def take(self, n: int, what: str, offset: int | None = None) -> None: ...

    def give(self, n: int) -> None: ...


@dataclasses.dataclass(frozen=True)
class KeptFrame:
    """One kept frame as :func:`~katra_trace.io.reader.open_trace` keeps it during its one scan: the
    facts of its IMAGE block, where the block is, its PNG bytes (covered by the block's CRC) and
    ``damage``: what is wrong with that PNG as its chunks show ("" when nothing). Its pixels are
    decoded only when asked for, inside the file's reading budget
    (:func:`katra_trace.io.images.frame_pixels`).

    ``path``: the trace file, for messages; ``budget``: the trace's decode budget (None: no
    limit)."""

    scene: str
    frame_index: int
    time_s: float
    width: int
    height: int
    channels: int
    sha256: str
    key: dict[str, str]
    offset: int
    path: Path
    png: bytes = dataclasses.field(repr=False, compare=False)
    damage: str = ""
    budget: PixelBudget | None = dataclasses.field(default=None, repr=False, compare=False)

    @classmethod
    def from_block(
        cls, meta: dict[str, Any], png: bytes, offset: int, path: Path, budget: PixelBudget | None
    ) -> KeptFrame:
        """The kept frame of an IMAGE block whose facts ``meta`` were checked
        (:func:`decode_image_payload`).
        """
        return cls(
            meta["scene"],
            meta["frame_index"],
            float(meta["time_s"]),
            meta["width"],
            meta["height"],
            meta["channels"],
            meta["sha256"],
            dict(meta["key"]),
            offset,
            path,
            png,
            png_problem(png, meta) or "",
            budget,
        )

    @property
    def pixel_bytes(self) -> int:
        """The bytes its decoded pixels take."""
        return self.width * self.height * self.channels

    @property
    def where(self) -> str:
        """What every message about it starts with: the trace file's name, the scene and the block's
        offset.
        """
        return f"{shown(self.path)}: kept frame of scene {self.scene!r} at offset {self.offset}"

    @property
    def damage_line(self) -> str:
        """ "FILE: kept frame of scene 's' at offset N: why" when it is damaged, else ""."""
        return f"{self.where}: {self.damage}" if self.damage else ""


__all__ = [
    "IMAGE_ENCODING",
    "IMAGE_FIELDS",
    "IMAGE_HEAD",
    "MAX_IMAGE_BYTES",
    "PNG_SIGNATURE",
    "KeptFrame",
    "PixelBudget",
    "decode_image_payload",
    "encode_image_payload",
    "image_meta_problem",
    "png_problem",
]
