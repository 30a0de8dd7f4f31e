"""FLIP (``flip-evaluator``, LDR) for the image verdict, tile by tile. ``evaluate`` returns errors
or colours, never both, and exposes no colour map; a pixel's colour depends on its error alone,
so :func:`magma_colours` learns the table once and a picture needs no second pass."""

from __future__ import annotations

import functools
from types import ModuleType

import numpy as np

from katra_trace.optional import MissingDependencyError, require

FLIP_PURPOSE = "an image tolerance (identical / within tolerance / changed)"
#: Tile side (px): memory stays near 50 MB whatever the frame's size.
FLIP_TILE = 512
#: Context (px); FLIP's filters reach ~10, and from 16 tiles match the whole frame bit for bit.
FLIP_MARGIN = 32
LEVELS = 256


def flip_module() -> ModuleType:
    return require(
        "flip_evaluator", extra="images", purpose=FLIP_PURPOSE, what="FLIP (flip-evaluator)"
    )


def flip_missing() -> str | None:
    """The install message when FLIP is missing, else None."""
    try:
        flip_module()
    except MissingDependencyError as exc:
        return str(exc)
    return None


def _rgb01(pixels: np.ndarray) -> np.ndarray:
    arr = np.asarray(pixels)
    if arr.ndim != 3 or arr.shape[2] not in (3, 4) or arr.dtype != np.uint8:
        raise ValueError(f"expected an (H, W, 3|4) uint8 image, got {arr.dtype} {arr.shape}")
    out: np.ndarray = np.ascontiguousarray(arr[:, :, :3], dtype=np.float32) / np.float32(255.0)
    return out


def _evaluate(base: np.ndarray, new: np.ndarray, magma: bool) -> np.ndarray:
    result, _mean, _params = flip_module().evaluate(base, new, "LDR", applyMagma=magma)
    return np.asarray(result, dtype=np.float32).reshape(base.shape if magma else base.shape[:2])


def _flip_tiles(base: np.ndarray, new: np.ndarray, magma: bool) -> np.ndarray:
    """Equal to a whole-frame pass."""
    height, width = base.shape[:2]
    out = np.empty((height, width, 3) if magma else (height, width), dtype=np.float32)
    for top in range(0, height, FLIP_TILE):
        for left in range(0, width, FLIP_TILE):
            y0, x0 = max(0, top - FLIP_MARGIN), max(0, left - FLIP_MARGIN)
            y1, x1 = (
                min(height, top + FLIP_TILE + FLIP_MARGIN),
                min(width, left + FLIP_TILE + FLIP_MARGIN),
            )
            tile = _evaluate(_rgb01(base[y0:y1, x0:x1]), _rgb01(new[y0:y1, x0:x1]), magma)
            bottom, right = min(height, top + FLIP_TILE), min(width, left + FLIP_TILE)
            out[top:bottom, left:right] = tile[top - y0 : bottom - y0, left - x0 : right - x0]
    return out


def flip_errors(base: np.ndarray, new: np.ndarray) -> np.ndarray:
    """(H, W) float32 in [0, 1]; :class:`MissingDependencyError` without ``flip-evaluator``."""
    return _flip_tiles(base, new, magma=False)


def flip_levels(errors: np.ndarray) -> np.ndarray:
    """(H, W) uint8 colour-map levels, rounded in float32 as FLIP's ``colorMap`` does."""
    scaled = np.asarray(errors, dtype=np.float32) * np.float32(LEVELS - 1) + np.float32(0.5)
    return np.ascontiguousarray(scaled.astype(np.int32) % LEVELS, dtype=np.uint8)


def _calibration() -> tuple[np.ndarray, np.ndarray]:
    """A 4-row pair whose errors reach all 256 levels (blue share grows as the column's square)."""
    share = np.concatenate([np.zeros(32), np.linspace(0.0, 1.0, 2048) ** 2, np.ones(32)]).astype(
        np.float32
    )
    green, blue = np.array([0, 1, 0], np.float32), np.array([0, 0, 1], np.float32)
    row = (1 - share)[:, None] * green + share[:, None] * blue
    base = np.ascontiguousarray(np.broadcast_to(green, (4, share.size, 3)), dtype=np.float32)
    new = np.ascontiguousarray(np.broadcast_to(row, (4, share.size, 3)), dtype=np.float32)
    return base, new


@functools.cache
def magma_colours() -> np.ndarray | None:
    """(256, 3) uint8 learnt from FLIP; None when a level is missed or ambiguous."""
    base, new = _calibration()
    levels = flip_levels(_evaluate(base.copy(), new.copy(), magma=False)).ravel()
    colours = _evaluate(base, new, magma=True).reshape(-1, 3)
    order = np.argsort(levels, kind="stable")
    levels, colours = levels[order], colours[order]
    seen, first = np.unique(levels, return_index=True)
    if seen.size != LEVELS or not np.array_equal(colours, colours[first][levels]):
        return None
    table: np.ndarray = _picture_bytes(colours[first])
    return table


def _picture_bytes(colours: np.ndarray) -> np.ndarray:
    return np.ascontiguousarray(np.rint(np.clip(colours, 0.0, 1.0) * 255.0).astype(np.uint8))


def levels_picture(levels: np.ndarray) -> np.ndarray | None:
    """(H, W, 3) uint8 of kept levels; None when the colours are unknown."""
    table = magma_colours()
    return None if table is None else np.ascontiguousarray(table[levels])


def flip_error_map(base: np.ndarray, new: np.ndarray) -> np.ndarray:
    """(H, W, 3) uint8 magma error map, as ``--image-diff`` and the report show it."""
    picture = (
        levels_picture(flip_levels(flip_errors(base, new))) if magma_colours() is not None else None
    )
    return _picture_bytes(_flip_tiles(base, new, magma=True)) if picture is None else picture


__all__ = [
    "FLIP_MARGIN",
    "FLIP_PURPOSE",
    "FLIP_TILE",
    "LEVELS",
    "flip_error_map",
    "flip_errors",
    "flip_levels",
    "flip_missing",
    "flip_module",
    "levels_picture",
    "magma_colours",
]
