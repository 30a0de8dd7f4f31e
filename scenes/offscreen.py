"""Run a scene by hand into an offscreen framebuffer, without the harness.

Used by tests and for quick measurements: it mirrors what the harness does for
a headless context (create a framebuffer of ``size``, bind it, ``setup``,
render frames with :class:`~scenes.api.SimpleFrame`, read the last image back).
Frame times here are host-clock times of ``render`` + ``glFinish``, in ms.
"""

from __future__ import annotations

import dataclasses
import time
from collections.abc import Mapping
from typing import Any

import numpy as np

from scenes.api import Scene, SimpleFrame
from scenes.image import image_checksum, read_pixels
from scenes.registry import resolve_params


@dataclasses.dataclass(frozen=True)
class OffscreenResult:
    """The last frame's pixels ((H, W, 4) uint8, top row first), its checksum and
    the measured frames' times (ms, render + glFinish on the host clock)."""

    pixels: np.ndarray
    checksum: str
    frame_ms: tuple[float, ...]

    @property
    def median_ms(self) -> float:
        return float(np.median(self.frame_ms)) if self.frame_ms else float("nan")


def run_offscreen(
    ctx: Any,
    scene_cls: type[Scene],
    size: tuple[int, int],
    params: Mapping[str, Any] | None = None,
    *,
    frames: int = 1,
    warmup: int = 0,
    seed: int = 0,
    samples: int = 0,
) -> OffscreenResult:
    """Set up ``scene_cls`` at ``size``, render ``warmup + frames`` frames, read the last one.

    Each frame is ``render`` followed by ``ctx.finish()``; measured frames are
    timed (ms). The framebuffer (RGBA8 + depth, ``samples`` MSAA samples) and
    the scene are released before returning.
    """
    resolved = resolve_params(scene_cls, params or {})
    fbo = ctx.simple_framebuffer(tuple(size), components=4, samples=samples)
    scene = scene_cls()
    frame_ms: list[float] = []
    try:
        fbo.use()
        scene.setup(ctx, tuple(size), resolved)
        try:
            for index in range(warmup + frames):
                t0 = time.perf_counter_ns()
                scene.render(SimpleFrame(index, seed))
                ctx.finish()
                if index >= warmup:
                    frame_ms.append((time.perf_counter_ns() - t0) / 1e6)
            pixels = read_pixels(ctx, scene)
        finally:
            scene.release()
    finally:
        fbo.release()
        # moderngl rebinds ctx.fbo after creating objects: never leave a deleted one bound
        ctx.detect_framebuffer(0).use()
    return OffscreenResult(pixels, image_checksum(pixels), tuple(frame_ms))


__all__ = ["OffscreenResult", "run_offscreen"]
