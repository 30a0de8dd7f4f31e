"""Kept frames: each scene's last measured frame as a PNG in an IMAGE block, read back checked
and within the reading budget; frames compare only under one :func:`image_key`
(docs/kept-images.md)."""

from __future__ import annotations

import dataclasses
import hashlib
import io
import json
import os
import re
import struct
import warnings
import weakref
import zlib
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import numpy as np
from PIL import Image

from katra_trace.errors import TraceFormatError
from katra_trace.io.claim import open_output
from katra_trace.io.image_block import (
    IMAGE_ENCODING,
    MAX_IMAGE_BYTES,
    ImageMeta,
    KeptFrame,
    PixelBudget,
)
from katra_trace.io.reader import TraceRecoveryWarning, open_trace
from katra_trace.jsontext import JsonValue

KEY_FIELDS: tuple[str, ...] = ("renderer", "mesa", "llvm", "vector_bits")

#: zlib level 1: 3.2x as fast as Pillow's default for 13 % larger files.
PNG_LEVEL = 1


@dataclasses.dataclass(frozen=True)
class FrameImage:
    """One kept frame. ``frame_index`` counts warmup frames; ``time_s``: animation time (s);
    ``pixels``: (H, W, 4|3) uint8, row 0 = top."""

    scene: str
    frame_index: int
    time_s: float
    width: int
    height: int
    sha256: str
    key: dict[str, str]
    pixels: np.ndarray


def image_checksum(pixels: np.ndarray) -> str:
    """SHA-256 (hex) of the C-order pixel bytes."""
    return hashlib.sha256(np.ascontiguousarray(pixels, dtype=np.uint8).data).hexdigest()


def check_pixels(pixels: Any) -> np.ndarray:
    """``pixels`` as a C-ordered (H, W, 3|4) uint8 array, else ValueError."""
    arr = np.asarray(pixels)
    if (
        arr.dtype != np.uint8
        or arr.ndim != 3
        or arr.shape[2] not in (3, 4)
        or arr.shape[0] < 1
        or arr.shape[1] < 1
    ):
        raise ValueError(
            f"expected an (H, W, 3|4) uint8 array, got {arr.dtype} of shape {arr.shape}"
        )
    return np.ascontiguousarray(arr)


def encode_png(pixels: np.ndarray, level: int = PNG_LEVEL) -> bytes:
    arr = check_pixels(pixels)
    out = io.BytesIO()
    Image.fromarray(arr, "RGBA" if arr.shape[2] == 4 else "RGB").save(
        out, format="PNG", compress_level=level
    )
    return out.getvalue()


def decode_png(data: bytes, what: str = "PNG") -> np.ndarray:
    """A PNG's pixels as 8-bit RGB(A); ValueError naming ``what`` if unreadable or too large."""
    try:
        with warnings.catch_warnings():  # the size is checked below, against our own limit
            warnings.simplefilter("ignore", Image.DecompressionBombWarning)
            img_file = Image.open(io.BytesIO(data), formats=["PNG"])
        with img_file as img:
            width, height = img.size
            if width * height * 4 > MAX_IMAGE_BYTES:
                raise ValueError(
                    f"{what}: {width}x{height} pixels exceed the {MAX_IMAGE_BYTES >> 20} MiB limit"
                )
            if img.mode not in ("RGB", "RGBA"):
                img = img.convert(
                    "RGBA" if "A" in img.getbands() or "transparency" in img.info else "RGB"
                )
            arr = np.asarray(img, dtype=np.uint8)
    except _PNG_ERRORS as exc:
        raise ValueError(f"{what} is not a readable PNG ({type(exc).__name__}: {exc})") from None
    return check_pixels(arr)


_PNG_ERRORS = (
    OSError,
    SyntaxError,
    ValueError,
    EOFError,
    IndexError,
    struct.error,
    zlib.error,
    Image.DecompressionBombError,
)
#: Rows are copied out of Pillow in strips of about this size (bounds the memory used).
STRIP_BYTES = 4 << 20


class KeptFrameError(TraceFormatError):
    """A kept frame's PNG does not hold the pixels its record describes."""


def decode_cost(width: int, height: int, channels: int) -> tuple[int, int]:
    """(bytes :func:`png_pixels` holds while decoding, bytes of its result)."""
    held = width * height * channels
    return width * height * 4 + held + min(STRIP_BYTES, width * height * 4), held


def png_pixels(
    png: bytes,
    width: int,
    height: int,
    channels: int,
    where: str,
    budget: PixelBudget | None = None,
    offset: int | None = None,
) -> np.ndarray:
    """A PNG's pixels if :func:`decode_cost` fits ``budget`` (else TraceTooLargeError), counted
    while alive; ValueError unless ``width`` x ``height`` x ``channels``."""
    working, held = decode_cost(width, height, channels)
    if budget is not None:
        budget.take(working, f"{where}: its {width}x{height} pixels would decode to", offset)
    try:
        pixels = _decode_strips(png, width, height, channels, where)
    except BaseException:
        if budget is not None:
            budget.give(working)
        raise
    if budget is not None:
        budget.give(working - held)
        weakref.finalize(pixels, budget.give, held)
    return pixels


def _decode_strips(png: bytes, width: int, height: int, channels: int, where: str) -> np.ndarray:
    mode = "RGBA" if channels == 4 else "RGB"
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore", Image.DecompressionBombWarning)
            img_file = Image.open(io.BytesIO(png), formats=["PNG"])
        with img_file as img:
            found = f"{img.size[0]}x{img.size[1]} {img.mode}"
            if img.size != (width, height) or img.mode not in ("RGB", "RGBA"):
                out = None
            else:
                img.load()
                out = np.empty((height, width, channels), dtype=np.uint8)
                rows = max(1, STRIP_BYTES // (width * 4))
                for top in range(0, height, rows):
                    strip = img.crop((0, top, width, min(height, top + rows)))
                    if strip.mode != mode:
                        strip = strip.convert(mode)
                    out[top : top + rows] = np.frombuffer(strip.tobytes(), np.uint8).reshape(
                        -1, width, channels
                    )
    except _PNG_ERRORS as exc:
        raise ValueError(
            f"{where}: its PNG is not readable ({type(exc).__name__}: {exc})"
        ) from None
    if out is None:
        raise ValueError(
            f"{where}: its PNG holds {found} pixels, its record says {width}x{height} {mode}"
        )
    return out


def frame_pixels(frame: KeptFrame) -> np.ndarray:
    """A kept frame's pixels, checked against its record, counted in the reading budget while
    alive; TraceTooLargeError or :class:`KeptFrameError`."""
    if frame.damage:
        raise KeptFrameError(frame.damage_line, frame.offset)
    try:
        pixels = png_pixels(
            frame.png,
            frame.width,
            frame.height,
            frame.channels,
            frame.where,
            frame.budget,
            frame.offset,
        )
    except ValueError as exc:
        raise KeptFrameError(str(exc), frame.offset) from None
    if image_checksum(pixels) != frame.sha256:
        raise KeptFrameError(
            f"{frame.where}: its pixels do not match their recorded SHA-256", frame.offset
        )
    return pixels


def save_png(
    path: str | os.PathLike[str], image: FrameImage | np.ndarray, *, overwrite: bool = True
) -> None:
    """Write ``image`` to ``path`` as a PNG through the output rule."""
    pixels = image.pixels if isinstance(image, FrameImage) else image
    with open_output(path, force=overwrite, option="save_png", example="frame.png") as f:
        f.write(encode_png(pixels))


def load_png(path: str | os.PathLike[str]) -> np.ndarray:
    return decode_png(Path(path).read_bytes(), f"'{os.fspath(path)}'")


def renderer_facts(gl: Mapping[str, JsonValue]) -> dict[str, str]:
    """The image key's facts from ``host_info["gl"]`` ("" where unknown)."""
    renderer = str(gl.get("renderer", ""))
    version = str(gl.get("version", ""))
    llvm = re.search(r"LLVM\s+([\d.]+)", renderer)
    width = re.search(r"(\d+)\s*bits", renderer)
    mesa = re.search(r"Mesa\s+([\w.\-]+)", version)
    return {
        "renderer": renderer,
        "mesa": mesa.group(1) if mesa else "",
        "llvm": llvm.group(1) if llvm else "",
        "vector_bits": width.group(1) if width else "",
    }


def image_key(host_info: Mapping[str, JsonValue]) -> dict[str, str]:
    """The image key of frames drawn on the host ``host_info`` describes."""
    gl = host_info.get("gl")
    return renderer_facts(gl if isinstance(gl, Mapping) else {})


def key_id(key: Mapping[str, str]) -> str:
    """12 hex digits naming an image key."""
    text = json.dumps({k: str(v) for k, v in key.items()}, sort_keys=True, separators=(",", ":"))
    return hashlib.sha256(text.encode("utf-8")).hexdigest()[:12]


def frame_record(
    scene: str, frame_index: int, time_s: float, pixels: np.ndarray, key: Mapping[str, str]
) -> tuple[ImageMeta, bytes]:
    arr = check_pixels(pixels)
    meta: ImageMeta = {
        "scene": scene,
        "frame_index": int(frame_index),
        "time_s": float(time_s),
        "width": int(arr.shape[1]),
        "height": int(arr.shape[0]),
        "channels": int(arr.shape[2]),
        "sha256": image_checksum(arr),
        "key": {k: str(v) for k, v in key.items()},
        "encoding": IMAGE_ENCODING,
    }
    return meta, encode_png(arr)


def read_frame_images(path: str | os.PathLike[str]) -> dict[str, FrameImage]:
    """The kept frames at ``path`` by scene label (a damaged trace's intact prefix); raises
    :class:`KeptFrameError` or TraceTooLargeError. One at a time: :func:`frame_pixels`."""
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", TraceRecoveryWarning)
        trace = open_trace(path)
    return {scene: frame_image(frame) for scene, frame in trace.kept_frames.items()}


def frame_image(frame: KeptFrame) -> FrameImage:
    return FrameImage(
        frame.scene,
        frame.frame_index,
        frame.time_s,
        frame.width,
        frame.height,
        frame.sha256,
        dict(frame.key),
        frame_pixels(frame),
    )


__all__ = [
    "KEY_FIELDS",
    "PNG_LEVEL",
    "STRIP_BYTES",
    "FrameImage",
    "KeptFrameError",
    "check_pixels",
    "decode_cost",
    "decode_png",
    "encode_png",
    "frame_image",
    "frame_pixels",
    "frame_record",
    "image_checksum",
    "image_key",
    "key_id",
    "load_png",
    "png_pixels",
    "read_frame_images",
    "renderer_facts",
    "save_png",
]
