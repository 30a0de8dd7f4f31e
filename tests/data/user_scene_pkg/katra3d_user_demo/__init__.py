"""A third-party scene package, offered to katra3d through the entry point group
``katra3d.scenes``. The test suite writes a ``.dist-info`` for it at run time
(``entry_points.txt``: ``user-stripes = katra3d_user_demo:Stripes``)."""

from __future__ import annotations

from typing import Any

from katra3d import Param, Scene


class Stripes(Scene):
    """Vertical stripes drawn with scissored clears (no shaders needed)."""

    name = "user-stripes"
    description = "vertical stripes from scissored clears (test entry-point scene)"
    stresses = ("fill",)
    params = {"stripes": Param(5, int, 2, 32, "stripes across")}

    def setup(self, ctx: Any, size: tuple[int, int], params: Any) -> None:
        self.check_requirements(ctx)
        self.bind_target(ctx, size)
        self.size = size
        self.count = int(params["stripes"])

    def render(self, frame: Any) -> None:
        width, height = self.size
        with frame.zone("stripes"):
            self.target.use()
            for i in range(self.count):
                x0 = i * width // self.count
                x1 = (i + 1) * width // self.count
                shade = ((i + frame.index) % self.count) / self.count
                self.target.clear(shade, 1.0 - shade, 0.5, 1.0, viewport=(x0, 0, x1 - x0, height))

    def release(self) -> None:
        self.release_target()
