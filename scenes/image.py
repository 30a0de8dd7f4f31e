"""Read a scene's final image back, checksum it, save it as PNG.

The checksum is how correctness is checked beside speed: a scene is
deterministic, so two runs on one driver give the same last-frame pixels and
the same :func:`image_checksum`. The PNG encoder is our own (zlib + struct),
so screenshots need no imaging library.
"""

from __future__ import annotations

import hashlib
import os
import struct
import zlib
from typing import Any

import numpy as np


def read_pixels(ctx: Any, scene: Any) -> np.ndarray:
    """The scene's final image as an (H, W, 4) uint8 RGBA array, rows top to bottom.

    Reads ``scene.output_framebuffer()``, or ``ctx.fbo`` when that is None.
    A multisampled framebuffer is resolved into a temporary one first.
    Waits for rendering to finish (a read-back is a sync point).
    """
    fbo = scene.output_framebuffer() if scene is not None else None
    if fbo is None:
        fbo = ctx.fbo
    if fbo is None:
        raise ValueError("no framebuffer to read: the scene has none and ctx.fbo is None")
    width, height = fbo.size
    resolved = None
    source = fbo
    if getattr(fbo, "samples", 0):
        resolved = ctx.simple_framebuffer((width, height), components=4)
        ctx.copy_framebuffer(resolved, fbo)
        source = resolved
    try:
        data = source.read(components=4, alignment=1)
    finally:
        if resolved is not None:
            resolved.release()
    pixels = np.frombuffer(data, dtype=np.uint8).reshape(height, width, 4)
    return np.ascontiguousarray(pixels[::-1])


def image_checksum(pixels: np.ndarray) -> str:
    """SHA-256 (hex) of the pixel bytes, in C order (rows top to bottom, RGBA)."""
    arr = np.ascontiguousarray(pixels, dtype=np.uint8)
    digest = hashlib.sha256()
    digest.update(arr.tobytes())
    return digest.hexdigest()


def _png_chunk(kind: bytes, payload: bytes) -> bytes:
    crc = zlib.crc32(kind + payload) & 0xFFFFFFFF
    return struct.pack(">I", len(payload)) + kind + payload + struct.pack(">I", crc)


def encode_png(pixels: np.ndarray) -> bytes:
    """Encode an (H, W, 4) or (H, W, 3) uint8 array (rows top to bottom) as PNG bytes."""
    arr = np.ascontiguousarray(pixels, dtype=np.uint8)
    if arr.ndim != 3 or arr.shape[2] not in (3, 4):
        raise ValueError(f"expected an (H, W, 3|4) uint8 array, got shape {arr.shape}")
    height, width, channels = arr.shape
    colour_type = 6 if channels == 4 else 2
    # each scanline is prefixed by filter type 0 (None)
    raw = np.zeros((height, width * channels + 1), dtype=np.uint8)
    raw[:, 1:] = arr.reshape(height, width * channels)
    ihdr = struct.pack(">IIBBBBB", width, height, 8, colour_type, 0, 0, 0)
    return b"".join(
        (
            b"\x89PNG\r\n\x1a\n",
            _png_chunk(b"IHDR", ihdr),
            _png_chunk(b"IDAT", zlib.compress(raw.tobytes(), 6)),
            _png_chunk(b"IEND", b""),
        )
    )


def write_png(path: str | os.PathLike[str], pixels: np.ndarray) -> None:
    """Write ``pixels`` ((H, W, 4) uint8, rows top to bottom) to ``path`` as a PNG."""
    data = encode_png(pixels)
    with open(path, "wb") as fh:
        fh.write(data)


__all__ = ["encode_png", "image_checksum", "read_pixels", "write_png"]
