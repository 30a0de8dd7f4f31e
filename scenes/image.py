"""Read a scene's final image back from GL.

The pixels are how correctness is checked beside speed: a scene is
deterministic, so two runs on one driver give the same last-frame pixels. What
is done with them (checksum, PNG through Pillow, the frame kept in the trace)
is :mod:`katra_trace.io.images`, which needs no GL.
"""

from __future__ import annotations

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


__all__ = ["read_pixels"]
