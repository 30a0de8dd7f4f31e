"""A user scene whose fragment shader does not compile (for the error-path test)."""

from __future__ import annotations

from typing import Any

from katra3d import Scene, compile_program


class BrokenShader(Scene):
    name = "broken-shader"
    description = "fragment shader with a type error"

    def setup(self, ctx: Any, size: tuple[int, int], params: Any) -> None:
        self.bind_target(ctx, size)
        compile_program(
            ctx,
            self.name,
            vertex_shader="#version 330\nin vec2 p;\n"
            "void main() { gl_Position = vec4(p, 0.0, 1.0); }\n",
            fragment_shader="#version 330\nout vec4 c;\nvoid main() { c = vec3(1.0); }\n",
        )

    def render(self, frame: Any) -> None:  # pragma: no cover - setup always fails
        raise AssertionError("unreachable")

    def release(self) -> None:
        self.release_target()
