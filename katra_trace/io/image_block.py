"""The IMAGE block's payload (format 1.2): one kept frame, its facts as JSON, then its pixels as a PNG.

A capture keeps each scene's last measured frame in the trace itself, one IMAGE block a frame
(docs/trace-format.md, "IMAGE"). The payload is ``u32 n`` (little-endian), ``n`` bytes of UTF-8 JSON
(:data:`IMAGE_FIELDS`), then the PNG file, byte for byte. The block is written with codec 0 (the
PNG is compressed already), so it decodes to exactly its stored size and costs nothing of the
reader's decompression budget beyond that. This module only frames and checks; encoding and
decoding the PNG is :mod:`katra_trace.io.images`.
"""

from __future__ import annotations

import re
import struct
from typing import Any

from katra_trace.errors import TraceFormatError
from katra_trace.io import format as fmt

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
    "time_s": "the animation time the scene was given for that frame, in seconds (a number)",
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


def decode_image_payload(payload: bytes, offset: int,
                         notes: list[str] | None = None) -> tuple[dict[str, Any], bytes]:
    """The facts and the PNG bytes of an IMAGE block at ``offset``; TraceFormatError if malformed."""
    where = f"corrupt IMAGE block at offset {offset}"
    if len(payload) < IMAGE_HEAD.size:
        raise TraceFormatError(f"{where}: {len(payload)} bytes, too short", offset)
    (n,) = IMAGE_HEAD.unpack_from(payload)
    if n > len(payload) - IMAGE_HEAD.size:
        raise TraceFormatError(f"{where}: its JSON part claims {n} bytes, {len(payload) - IMAGE_HEAD.size} left",
                               offset)
    meta = fmt.decode_json(payload[IMAGE_HEAD.size:IMAGE_HEAD.size + n], offset, notes)
    problem = image_meta_problem(meta)
    if problem is not None:
        raise TraceFormatError(f"{where}: {problem}", offset)
    return meta, bytes(payload[IMAGE_HEAD.size + n:])


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
    if not isinstance(time_s, (int, float)) or isinstance(time_s, bool):
        return "'time_s' is not a number"
    if meta.get("channels") not in (3, 4):
        return "'channels' is not 3 or 4"
    if meta["width"] * meta["height"] * meta["channels"] > MAX_IMAGE_BYTES:
        return f"{meta['width']}x{meta['height']} pixels exceed the {MAX_IMAGE_BYTES >> 20} MiB limit"
    if not isinstance(meta.get("sha256"), str) or not _SHA256.fullmatch(meta["sha256"]):
        return "'sha256' is not 64 lower-case hex digits"
    kept_key = meta.get("key")
    if not isinstance(kept_key, dict) or not all(isinstance(k, str) and isinstance(v, str)
                                                 for k, v in kept_key.items()):
        return "'key' is not an object of strings"
    if meta.get("encoding") != IMAGE_ENCODING:
        return f"unknown encoding {meta.get('encoding')!r} (this build reads {IMAGE_ENCODING!r})"
    return None


__all__ = ["IMAGE_ENCODING", "IMAGE_FIELDS", "IMAGE_HEAD", "MAX_IMAGE_BYTES", "decode_image_payload",
           "encode_image_payload", "image_meta_problem"]
