"""Kept frames: what a capture keeps of each scene's last measured frame, and how to read it back.

A ``katra3d run --frames N`` capture (and :meth:`katra3d.harness.capture.Capture.keep_image`) keeps
one frame a scene, losslessly, in the trace itself: an IMAGE block (format 1.2,
:mod:`katra_trace.io.image_block`) holding the frame's facts and its pixels as a PNG. The reader
keeps each one's facts and PNG bytes (``open_trace(path).kept_frames``); :func:`frame_pixels`
decodes one, checked against its record, inside the trace's reading budget, and
:func:`read_frame_images` gives them all with their pixels; a trace without IMAGE blocks (an older
trace, a ``--duration`` run, ``--no-keep-image``) gives ``{}``.

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
from katra_trace.io.image_block import IMAGE_ENCODING, MAX_IMAGE_BYTES, KeptFrame, PixelBudget
from katra_trace.io.reader import TraceRecoveryWarning, open_trace

#: The image key's fields, in order: which device and code generator drew a frame.
KEY_FIELDS: tuple[str, ...] = ("renderer", "mesa", "llvm", "vector_bits")

#: How hard a kept PNG is compressed (zlib level, 0-9): on the ci suite's frames, level 1 encoded
#: 3.2 times as fast as Pillow's default 6 for files 13 % larger (docs/kept-images.md has the
#: figures).
PNG_LEVEL = 1


@dataclasses.dataclass(frozen=True)
class FrameImage:
    """One kept frame of one scene.

    ``scene``: the scene's label; ``frame_index``: the frame's index in the scene (warmup frames
    counted, so the last measured frame of ``--warmup W --frames N`` is W + N - 1); ``time_s``: the
    animation time the scene was given for it (seconds, a function of the index alone);
    ``width``/``height``: pixels; ``sha256``: SHA-256 (hex) of the raw pixels
    (:func:`image_checksum`); ``key``: the image key (:func:`image_key`); ``pixels``: (H, W, C)
    uint8, C = 4 (RGBA) or 3 (RGB), row 0 = top.
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
    # no copy of the bytes
    return hashlib.sha256(np.ascontiguousarray(pixels, dtype=np.uint8).data).hexdigest()


def check_pixels(pixels: Any) -> np.ndarray:
    """``pixels`` as a C-ordered (H, W, 3|4) uint8 array; ValueError for anything else."""
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
    """``pixels`` ((H, W, 3|4) uint8, row 0 = top) as PNG bytes (zlib ``level``)."""
    arr = check_pixels(pixels)
    out = io.BytesIO()
    Image.fromarray(arr, "RGBA" if arr.shape[2] == 4 else "RGB").save(
        out, format="PNG", compress_level=level
    )
    return out.getvalue()


def decode_png(data: bytes, what: str = "PNG") -> np.ndarray:
    """The pixels of a PNG ((H, W, 3|4) uint8, row 0 = top); ValueError naming ``what`` if
    unreadable.

    Grey, palette and 16-bit PNGs are converted to 8-bit RGB or RGBA; nothing larger than
    :data:`~katra_trace.io.image_block.MAX_IMAGE_BYTES` of pixels is decoded."""
    try:
        with warnings.catch_warnings():  # the size is checked below, against katra3d's own limit
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


#: What Pillow raises on bytes that are not a readable PNG (a truncated deflate stream, a bad chunk,
#: ...).
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
#: Decoded rows are copied out of Pillow in strips of about this many bytes (a strip is the only
#: copy made beside Pillow's own buffer and the result).
STRIP_BYTES = 4 << 20


class KeptFrameError(TraceFormatError):
    """A kept frame's PNG does not hold the pixels its record describes (truncated, another size,
    another SHA-256, not a PNG); the message names the trace file, the scene and the block's offset.
    """


def decode_cost(width: int, height: int, channels: int) -> tuple[int, int]:
    """The bytes :func:`png_pixels` holds while it decodes (Pillow's own 4-byte pixels, the result
    and one strip) and the bytes of its result, which stay held until the caller drops it."""
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
    """The pixels of a PNG that must hold ``width`` x ``height`` x ``channels`` (8-bit RGBA or RGB),
    decoded only once its size is known and :func:`decode_cost` fits in ``budget``
    (TraceTooLargeError otherwise). While the result is alive, its bytes stay counted against
    ``budget``. ValueError, starting with ``where``, for bytes that are not such a PNG."""
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
        # the size was checked by the caller, against its own budget
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
    """The pixels of a trace's kept frame ((H, W, C) uint8, row 0 = top), decoded from the PNG bytes
    the reader kept (the file is not read again) and checked against the frame's record (size,
    SHA-256).

    While the array is alive its bytes count against the trace's reading budget, so a command
    decodes one frame at a time; raises TraceTooLargeError when a frame does not fit in what is left
    of it, and :class:`KeptFrameError` (naming the file) for a damaged frame."""
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
    """Write ``image`` (a :class:`FrameImage` or its pixels) to ``path`` as a PNG, through the
    output rule (:func:`katra_trace.io.claim.open_output`: atomically, never over a FIFO or device;
    over an existing file only with ``overwrite``, the default of this helper for scripts)."""
    pixels = image.pixels if isinstance(image, FrameImage) else image
    with open_output(path, force=overwrite, option="save_png", example="frame.png") as f:
        f.write(encode_png(pixels))


def load_png(path: str | os.PathLike[str]) -> np.ndarray:
    """The pixels of the PNG at ``path`` ((H, W, 3|4) uint8, row 0 = top);
    ValueError if unreadable."""
    return decode_png(Path(path).read_bytes(), f"'{os.fspath(path)}'")


def renderer_facts(gl: Mapping[str, Any]) -> dict[str, str]:
    """The image key's facts from the header's ``host_info["gl"]``: renderer string, Mesa and LLVM
    versions and vector width (llvmpipe's ``"llvmpipe (LLVM 15.0.6, 256 bits)"``); "" where unknown.
    """
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


def image_key(host_info: Mapping[str, Any]) -> dict[str, str]:
    """The image key of frames drawn on the host ``host_info`` describes (a trace header's
    ``host_info``).
    """
    gl = host_info.get("gl")
    return renderer_facts(gl if isinstance(gl, Mapping) else {})


def key_id(key: Mapping[str, str]) -> str:
    """12 hex digits naming an image key: SHA-256 of its fields as sorted JSON."""
    text = json.dumps({k: str(v) for k, v in key.items()}, sort_keys=True, separators=(",", ":"))
    return hashlib.sha256(text.encode("utf-8")).hexdigest()[:12]


def frame_record(
    scene: str, frame_index: int, time_s: float, pixels: np.ndarray, key: Mapping[str, str]
) -> tuple[dict[str, Any], bytes]:
    """What a writer's ``image()`` takes for one kept frame: its facts and its PNG."""
    arr = check_pixels(pixels)
    meta = {
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
    """The kept frames of the trace at ``path``, by scene label, with their pixels ({} when it keeps
    none).

    Reads the intact prefix of a damaged trace, like :func:`~katra_trace.io.reader.open_trace`
    (which it calls: the file is read once). Raises :class:`KeptFrameError` for a kept frame whose
    PNG is unreadable or whose pixels do not match their recorded size or checksum, and
    TraceTooLargeError when the frames held together do not fit in the trace's reading budget; a
    scene kept twice gives its last frame. A command that needs one frame at a time reads
    ``open_trace(path).kept_frames`` and :func:`frame_pixels` instead."""
    with warnings.catch_warnings():
        # read as far as it is intact, as documented
        warnings.simplefilter("ignore", TraceRecoveryWarning)
        trace = open_trace(path)
    return {scene: frame_image(frame) for scene, frame in trace.kept_frames.items()}


def frame_image(frame: KeptFrame) -> FrameImage:
    """A kept frame with its pixels (:func:`frame_pixels`)."""
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
