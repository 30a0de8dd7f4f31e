"""FLIP (NVIDIA's perceptual image difference, the ``flip-evaluator`` package, LDR mode) as the
image verdict and its pictures use it: one pass a pair of frames, tile by tile.

* :func:`flip_errors`: the per-pixel error, (H, W) float32 in [0, 1], computed on tiles of
  :data:`FLIP_TILE` pixels with :data:`FLIP_MARGIN` pixels of context (a fixed memory, the whole
  frame's errors bit for bit);
* :func:`flip_levels`: those errors as the 256 levels of FLIP's colour map (uint8, a quarter of
  their size), what a verdict keeps so that its picture needs no second pass;
* :func:`levels_picture` and :func:`flip_error_map`: the picture, the magma colours of the levels
  (:func:`magma_colours`).

Why the colours are learnt: flip-evaluator (1.7) exposes ``evaluate``, ``load`` and
``nbflip.execute`` (its command line, which reads and writes files) and no colour map, neither a
function that colours an error array nor its table; and ``evaluate`` returns either the errors or
their colours (``applyMagma``), never both, so one pass of each costs FLIP twice. FLIP colours a
pixel by its error alone: the entry ``int(error * 255 + 0.5)`` of a 256-colour table (its
``colorMap``). :func:`magma_colours` reads that table off FLIP itself, once a process: one small
pair (:data:`_CALIBRATION`, 4 x 2112 pixels, about 10 ms) evaluated both ways, whose errors reach
every one of the 256 levels; each level must have one colour, else the table is not trusted and the
picture is FLIP's own second pass. No colour table is written here.
"""

from __future__ import annotations

import functools
from types import ModuleType

import numpy as np

from katra_trace.optional import MissingDependencyError, require

#: What needs FLIP, as the install line names it.
FLIP_PURPOSE = "an image tolerance (identical / within tolerance / changed)"
#: FLIP runs on tiles of this many pixels a side, each read with :data:`FLIP_MARGIN` pixels of its
#: neighbours around it, so that what it holds (about 150 bytes a pixel) stays near 50 MB whatever
#: the frame's size.
FLIP_TILE = 512
#: FLIP's filters reach about 10 pixels at its default 67 pixels a degree (3 sigma of its widest
#: Gaussian); with 16 pixels or more of context the tiled error map equals the whole frame's bit for
#: bit (8 did not).
FLIP_MARGIN = 32
#: The levels of FLIP's colour map.
LEVELS = 256


def flip_module() -> ModuleType:
    """``flip_evaluator``, or :class:`MissingDependencyError` with the install line of
    ``katra3d[images]``.
    """
    return require(
        "flip_evaluator", extra="images", purpose=FLIP_PURPOSE, what="FLIP (flip-evaluator)"
    )


def flip_missing() -> str | None:
    """The one-line install message when FLIP is not installed (say it once per
    command), else None."""
    try:
        flip_module()
    except MissingDependencyError as exc:
        return str(exc)
    return None


def _rgb01(pixels: np.ndarray) -> np.ndarray:
    """(H, W, 3) float32 in [0, 1] of an (H, W, 3|4) uint8 image: what FLIP's LDR mode reads (alpha
    dropped).
    """
    arr = np.asarray(pixels)
    if arr.ndim != 3 or arr.shape[2] not in (3, 4) or arr.dtype != np.uint8:
        raise ValueError(f"expected an (H, W, 3|4) uint8 image, got {arr.dtype} {arr.shape}")
    out: np.ndarray = np.ascontiguousarray(arr[:, :, :3], dtype=np.float32) / np.float32(255.0)
    return out


def _evaluate(base: np.ndarray, new: np.ndarray, magma: bool) -> np.ndarray:
    """One FLIP evaluation of two (H, W, 3) float32 images: errors (H, W), or with ``magma`` colours
    (H, W, 3).
    """
    result, _mean, _params = flip_module().evaluate(base, new, "LDR", applyMagma=magma)
    return np.asarray(result, dtype=np.float32).reshape(base.shape if magma else base.shape[:2])


def _flip_tiles(base: np.ndarray, new: np.ndarray, magma: bool) -> np.ndarray:
    """FLIP over ``base`` and ``new`` (uint8 images of one size) tile by tile: (H, W) float32
    errors, or with ``magma`` (H, W, 3) float32 colours; each tile's pixels are those of a FLIP over
    the whole frame."""
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
    """FLIP's per-pixel error (H, W) float32 in [0, 1] of NEW against BASE (uint8 images of one
    size), computed in tiles (:data:`FLIP_TILE`): within a fixed memory, and equal to FLIP over the
    whole frame.

    Raises :class:`MissingDependencyError` without ``flip-evaluator``."""
    return _flip_tiles(base, new, magma=False)


def flip_levels(errors: np.ndarray) -> np.ndarray:
    """FLIP's errors as the levels of its colour map, (H, W) uint8: ``int(error * 255 + 0.5)`` in
    float32, as FLIP's own ``colorMap`` takes them (errors lie in [0, 1], so the level is 0 to 255).
    """
    scaled = np.asarray(errors, dtype=np.float32) * np.float32(LEVELS - 1) + np.float32(0.5)
    return np.ascontiguousarray(scaled.astype(np.int32) % LEVELS, dtype=np.uint8)


def _calibration() -> tuple[np.ndarray, np.ndarray]:
    """A pair whose FLIP errors reach all 256 levels: green against green turning blue (FLIP's
    largest error, 1) column by column, the share of blue growing as the square of the column (the
    error climbs steeply at first), 32 identical columns before (error 0) and 32 wholly blue after
    (error 1); 4 rows."""
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
    """FLIP's magma colour map as the picture's bytes, (256, 3) uint8 (level -> RGB), read off FLIP
    itself (this module's docstring); None when the learnt table cannot be trusted (a level missed,
    or one level seen with two colours: a FLIP whose colour map is another rule), and then pictures
    take FLIP's own pass."""
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
    """FLIP's float colours (0-1) as uint8 picture bytes."""
    return np.ascontiguousarray(np.rint(np.clip(colours, 0.0, 1.0) * 255.0).astype(np.uint8))


def levels_picture(levels: np.ndarray) -> np.ndarray | None:
    """The magma picture, (H, W, 3) uint8, of :func:`flip_levels` kept from a FLIP pass (no FLIP
    runs); None when :func:`magma_colours` could not learn the colours."""
    table = magma_colours()
    return None if table is None else np.ascontiguousarray(table[levels])


def flip_error_map(base: np.ndarray, new: np.ndarray) -> np.ndarray:
    """FLIP's error map of NEW against BASE as an (H, W, 3) uint8 image in the magma colour map
    (black: no visible difference, yellow: the largest): the picture ``compare --image-diff`` and
    the report show.

    FLIP runs once: its errors, coloured (:func:`levels_picture`); its own magma pass instead only
    when :func:`magma_colours` could not learn the colours. A verdict that measured the pair keeps
    its levels, and its picture is :func:`levels_picture` of them, without FLIP."""
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
