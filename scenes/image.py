"""Reading a scene's final image back from GL (used by :mod:`katra_trace.io.images`)."""

from __future__ import annotations

from typing import Any

import numpy as np


def read_pixels(ctx: Any, scene: Any) -> np.ndarray:
    """(H, W, 4) uint8 RGBA, top row first, MSAA resolved; a sync point."""
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
