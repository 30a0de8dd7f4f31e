"""Kept frames: what a capture keeps of each scene's last measured frame, and how to read it back.

A ``katra3d run --frames N`` capture (and :meth:`katra3d.harness.capture.Capture.keep_image`) keeps one
frame a scene, losslessly, in the trace itself: an IMAGE block (format 1.2,
:mod:`katra_trace.io.image_block`) holding the frame's facts and its pixels as a PNG. Read them
with :func:`read_frame_images`; a trace without IMAGE blocks (an older trace, a ``--duration``
run, ``--no-keep-image``) gives ``{}``.

The **image key** says which device drew a frame (:func:`image_key`): the GL renderer string,
the Mesa and LLVM versions and llvmpipe's vector width. Two frames of one scene are expected to
be identical only under the same key; reference images are kept per key
(:mod:`katra_trace.analysis.references`). PNG encoding and decoding go through Pillow.
"""

from __future__ import annotations

import dataclasses
import hashlib
import io
import json
import os
import re
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import numpy as np
from PIL import Image

from katra_trace.errors import TraceFormatError
from katra_trace.io import format as fmt
from katra_trace.io.blocks import ScanState, iter_blocks
from katra_trace.io.image_block import IMAGE_ENCODING, MAX_IMAGE_BYTES
from katra_trace.io.reader import open_regular

#: The image key's fields, in order: which device and code generator drew a frame.
KEY_FIELDS: tuple[str, ...] = ("renderer", "mesa", "llvm", "vector_bits")

#: How hard a kept PNG is compressed (zlib level, 0-9): on the ci suite's frames, level 1 encoded 3.2 times
#: as fast as Pillow's default 6 for files 13 % larger (docs/kept-images.md has the figures).
PNG_LEVEL = 1


@dataclasses.dataclass(frozen=True)
class FrameImage:
    """One kept frame of one scene.

    ``scene``: the scene's label; ``frame_index``: the frame's index in the scene (warmup frames
    counted, so the last measured frame of ``--warmup W --frames N`` is W + N - 1); ``time_s``: the
    animation time the scene was given for it (seconds, a function of the index alone);
    ``width``/``height``: pixels; ``sha256``: SHA-256 (hex) of the raw pixels (:func:`image_checksum`);
    ``key``: the image key (:func:`image_key`); ``pixels``: (H, W, C) uint8, C = 4 (RGBA) or 3 (RGB),
    row 0 = top.
    """

    scene: str
    frame_index: int
    time_s: float
    width: int
    height: int
    sha256: str
    key: dict[str, str]
    pixels: np.ndarray  # HxWxC uint8, row 0 = top


def image_checksum(pixels: np.ndarray) -> str:
    """SHA-256 (hex) of the pixel bytes, in C order (rows top to bottom, then RGBA or RGB)."""
    return hashlib.sha256(np.ascontiguousarray(pixels, dtype=np.uint8).tobytes()).hexdigest()


def check_pixels(pixels: Any) -> np.ndarray:
    """``pixels`` as a C-ordered (H, W, 3|4) uint8 array; ValueError for anything else."""
    arr = np.asarray(pixels)
    if arr.dtype != np.uint8 or arr.ndim != 3 or arr.shape[2] not in (3, 4) or arr.shape[0] < 1 or arr.shape[1] < 1:
        raise ValueError(f"expected an (H, W, 3|4) uint8 array, got {arr.dtype} of shape {arr.shape}")
    return np.ascontiguousarray(arr)


def encode_png(pixels: np.ndarray, level: int = PNG_LEVEL) -> bytes:
    """``pixels`` ((H, W, 3|4) uint8, row 0 = top) as PNG bytes (zlib ``level``)."""
    arr = check_pixels(pixels)
    out = io.BytesIO()
    Image.fromarray(arr, "RGBA" if arr.shape[2] == 4 else "RGB").save(out, format="PNG", compress_level=level)
    return out.getvalue()


def decode_png(data: bytes, what: str = "PNG") -> np.ndarray:
    """The pixels of a PNG ((H, W, 3|4) uint8, row 0 = top); ValueError naming ``what`` if unreadable.

    Grey, palette and 16-bit PNGs are converted to 8-bit RGB or RGBA; nothing larger than
    :data:`~katra_trace.io.image_block.MAX_IMAGE_BYTES` of pixels is decoded."""
    try:
        with Image.open(io.BytesIO(data), formats=["PNG"]) as img:
            width, height = img.size
            if width * height * 4 > MAX_IMAGE_BYTES:
                raise ValueError(f"{what}: {width}x{height} pixels exceed the {MAX_IMAGE_BYTES >> 20} MiB limit")
            if img.mode not in ("RGB", "RGBA"):
                img = img.convert("RGBA" if "A" in img.getbands() or "transparency" in img.info else "RGB")
            arr = np.asarray(img, dtype=np.uint8)
    except (OSError, SyntaxError, Image.DecompressionBombError) as exc:
        raise ValueError(f"{what} is not a readable PNG ({type(exc).__name__}: {exc})") from None
    return check_pixels(arr)


def save_png(path: str | os.PathLike[str], image: FrameImage | np.ndarray) -> None:
    """Write ``image`` (a :class:`FrameImage` or its pixels) to ``path`` as a PNG (replacing a file there)."""
    pixels = image.pixels if isinstance(image, FrameImage) else image
    Path(path).write_bytes(encode_png(pixels))


def load_png(path: str | os.PathLike[str]) -> np.ndarray:
    """The pixels of the PNG at ``path`` ((H, W, 3|4) uint8, row 0 = top); ValueError if unreadable."""
    return decode_png(Path(path).read_bytes(), f"'{os.fspath(path)}'")


def renderer_facts(gl: Mapping[str, Any]) -> dict[str, str]:
    """The image key's facts from the header's ``host_info["gl"]``: renderer string, Mesa and LLVM
    versions and vector width (llvmpipe's ``"llvmpipe (LLVM 15.0.6, 256 bits)"``); "" where unknown."""
    renderer = str(gl.get("renderer", ""))
    version = str(gl.get("version", ""))
    llvm = re.search(r"LLVM\s+([\d.]+)", renderer)
    width = re.search(r"(\d+)\s*bits", renderer)
    mesa = re.search(r"Mesa\s+([\w.\-]+)", version)
    return {"renderer": renderer, "mesa": mesa.group(1) if mesa else "", "llvm": llvm.group(1) if llvm else "",
            "vector_bits": width.group(1) if width else ""}


def image_key(host_info: Mapping[str, Any]) -> dict[str, str]:
    """The image key of frames drawn on the host ``host_info`` describes (a trace header's ``host_info``)."""
    gl = host_info.get("gl")
    return renderer_facts(gl if isinstance(gl, Mapping) else {})


def key_id(key: Mapping[str, str]) -> str:
    """12 hex digits naming an image key: SHA-256 of its fields as sorted JSON."""
    text = json.dumps({k: str(v) for k, v in key.items()}, sort_keys=True, separators=(",", ":"))
    return hashlib.sha256(text.encode("utf-8")).hexdigest()[:12]


def frame_record(scene: str, frame_index: int, time_s: float, pixels: np.ndarray,
                 key: Mapping[str, str]) -> tuple[dict[str, Any], bytes]:
    """What a writer's ``image()`` takes for one kept frame: its facts and its PNG."""
    arr = check_pixels(pixels)
    meta = {"scene": scene, "frame_index": int(frame_index), "time_s": float(time_s), "width": int(arr.shape[1]),
            "height": int(arr.shape[0]), "channels": int(arr.shape[2]), "sha256": image_checksum(arr),
            "key": {k: str(v) for k, v in key.items()}, "encoding": IMAGE_ENCODING}
    return meta, encode_png(arr)


def read_frame_images(path: Path) -> dict[str, FrameImage]:
    """The kept frames of the trace at ``path``, by scene label ({} when it keeps none).

    Reads the intact prefix of a damaged trace, like :func:`~katra_trace.io.reader.open_trace`.
    Raises TraceFormatError for a kept frame whose PNG is unreadable or whose pixels do not match
    their recorded size or checksum; a scene kept twice gives its last frame.
    """
    images: dict[str, FrameImage] = {}
    state = ScanState()
    with open_regular(path) as f:
        for block in iter_blocks(f, state):
            if block.type != fmt.BlockType.IMAGE:
                continue
            meta, png = block.payload
            images[meta["scene"]] = _frame_image(meta, png, block.offset)
    return images


def _frame_image(meta: dict[str, Any], png: bytes, offset: int) -> FrameImage:
    where = f"kept frame of scene {meta['scene']!r} at offset {offset}"
    try:
        pixels = decode_png(png, where)
    except ValueError as exc:
        raise TraceFormatError(str(exc), offset) from None
    if pixels.shape != (meta["height"], meta["width"], meta["channels"]):
        raise TraceFormatError(f"{where}: its PNG holds {pixels.shape[1]}x{pixels.shape[0]}x{pixels.shape[2]}, "
                               f"its record says {meta['width']}x{meta['height']}x{meta['channels']}", offset)
    if image_checksum(pixels) != meta["sha256"]:
        raise TraceFormatError(f"{where}: its pixels do not match their recorded SHA-256", offset)
    return FrameImage(meta["scene"], meta["frame_index"], float(meta["time_s"]), meta["width"], meta["height"],
                      meta["sha256"], dict(meta["key"]), pixels)


__all__ = ["KEY_FIELDS", "PNG_LEVEL", "FrameImage", "check_pixels", "decode_png", "encode_png", "frame_record",
           "image_checksum", "image_key", "key_id", "load_png", "read_frame_images", "renderer_facts", "save_png"]
