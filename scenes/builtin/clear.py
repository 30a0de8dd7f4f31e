"""``clear``: the framework floor — one colour clear per frame, nothing drawn."""

from __future__ import annotations

import colorsys
from collections.abc import Mapping
from typing import Any, ClassVar

from katra3d.scenes.api import Frame, Param, ParamValue, Scene


class ClearScene(Scene):
    """``bands`` > 1 adds scissored bands, so an image check can tell it from a blank frame."""

    name = "clear"
    description = "colour clear only: the per-frame floor of the harness"
    stresses = ("framework", "fill")
    params: ClassVar[Mapping[str, Param]] = {
        "bands": Param(4, int, 1, 64, "scissored clears per frame (vertical colour bands)"),
    }

    def setup(self, ctx: Any, size: tuple[int, int], params: Mapping[str, ParamValue]) -> None:
        self.check_requirements(ctx)
        self.ctx = ctx
        self.size = (int(size[0]), int(size[1]))
        self.bands = int(params["bands"])
        self.bind_target(ctx, size)

    def render(self, frame: Frame) -> None:
        width, height = self.size
        with frame.zone("clear"):
            self.target.use()
            for band in range(self.bands):
                x0 = band * width // self.bands
                x1 = (band + 1) * width // self.bands
                hue = (frame.time_s * 0.1 + band / self.bands) % 1.0
                r, g, b = colorsys.hsv_to_rgb(hue, 0.6, 0.9)
                self.target.clear(
                    r, g, b, 1.0, depth=1.0, viewport=(x0, 0, max(1, x1 - x0), height)
                )
