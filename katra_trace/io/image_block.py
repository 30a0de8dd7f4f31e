"""The IMAGE block's payload (docs/trace-format.md): ``u32 n``, n bytes of JSON facts, the PNG
file; framed and checked here, pixels in :mod:`katra_trace.io.images`."""

from __future__ import annotations

import dataclasses
import math
import re
import struct
import zlib
from pathlib import Path
from typing import Protocol, TypedDict

from katra_trace.errors import TraceFormatError
from katra_trace.io import format as fmt
from katra_trace.text import shown

IMAGE_HEAD = struct.Struct("<I")  # JSON length
IMAGE_ENCODING = "png"
MAX_IMAGE_BYTES = 1 << 28  # pixel bytes of the largest kept frame

_SHA256 = re.compile(r"[0-9a-f]{64}")


class PngShape(TypedDict):
    """What a PNG's IHDR must match."""

    width: int  # px, >= 1
    height: int  # px, >= 1
    channels: int  # 4 (RGBA) or 3 (RGB), 8 bits each


class ImageMeta(PngShape):
    """An IMAGE block's facts."""

    scene: str  # the scene's label
    frame_index: int  # in the scene, warmup frames counted
    time_s: float  # the animation time the scene was given for that frame
    sha256: str  # hex, of the raw pixels, rows top to bottom, in C order
    key: dict[str, str]  # the image key: which device drew it
    encoding: str  # "png"


def encode_image_payload(meta: ImageMeta, png: bytes) -> bytes:
    problem = image_meta_problem(meta)
    if problem is not None:
        raise ValueError(f"image record: {problem}")
    head = fmt.encode_json(meta)
    return IMAGE_HEAD.pack(len(head)) + head + png


def decode_image_payload(
    payload: bytes, offset: int, notes: list[str] | None = None
) -> tuple[ImageMeta, bytes]:
    """(facts, PNG bytes) of an IMAGE block; TraceFormatError if malformed."""
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
    facts = ImageMeta(
        scene=meta["scene"],
        frame_index=meta["frame_index"],
        time_s=meta["time_s"],
        width=meta["width"],
        height=meta["height"],
        channels=meta["channels"],
        sha256=meta["sha256"],
        key=meta["key"],
        encoding=meta["encoding"],
    )
    return facts, bytes(payload[IMAGE_HEAD.size + n :])


def image_meta_problem(meta: object) -> str | None:
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


PNG_SIGNATURE = b"\x89PNG\r\n\x1a\n"
# PNG colour type by channels: RGBA, RGB
_COLOUR_TYPES = {4: 6, 3: 2}
_CHUNK_HEAD = struct.Struct(">I4s")
_IHDR = struct.Struct(">IIBBBBB")


def png_problem(png: bytes, meta: PngShape) -> str | None:
    """What is wrong with a kept frame's PNG from its chunks alone (None: nothing)."""
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


def _ihdr_problem(ihdr: bytes, meta: PngShape) -> str | None:
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
    """What decoded pixels count against (blocks.DecodeBudget; it imports this module)."""

    def take(self, n: int, what: str, offset: int | None = None) -> None: ...

    def give(self, n: int) -> None: ...


@dataclasses.dataclass(frozen=True)
class KeptFrame:
    """A kept frame as the scan keeps it (``damage``: what its chunks show wrong, or ""); pixels
    are decoded on demand."""

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
        cls, meta: ImageMeta, png: bytes, offset: int, path: Path, budget: PixelBudget | None
    ) -> KeptFrame:
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
        return self.width * self.height * self.channels

    @property
    def where(self) -> str:
        """How every message about it starts."""
        return f"{shown(self.path)}: kept frame of scene {self.scene!r} at offset {self.offset}"

    @property
    def damage_line(self) -> str:
        """The damage as one message line, else ""."""
        return f"{self.where}: {self.damage}" if self.damage else ""


__all__ = [
    "IMAGE_ENCODING",
    "IMAGE_HEAD",
    "ImageMeta",
    "MAX_IMAGE_BYTES",
    "PNG_SIGNATURE",
    "KeptFrame",
    "PixelBudget",
    "PngShape",
    "decode_image_payload",
    "encode_image_payload",
    "image_meta_problem",
    "png_problem",
]
