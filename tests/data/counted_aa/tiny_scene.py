"""The smallest frame: a clear of a tiny target, no draw."""

from __future__ import annotations

from typing import Any

from katra3d import Scene


class Tiny(Scene):
    """Clears its target; nothing else."""

    name = "tiny"
    description = "clears a tiny target"
    stresses = ("fill",)

    def setup(self, ctx: Any, size: tuple[int, int], params: Any) -> None:
        self.check_requirements(ctx)
        self.bind_target(ctx, size)

    def render(self, frame: Any) -> None:
        self.target.use()
        self.target.clear(0.1, 0.2, 0.3, 1.0)
