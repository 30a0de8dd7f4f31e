"""A user scene in a plain file, as ``katra3d run tests/data/user_scenes/my_scene.py:Checker``
would load it. Uses only moderngl, numpy and the katra3d Scene API."""

from __future__ import annotations

from typing import Any

import numpy as np

from katra3d import Param, Scene, compile_program

VERTEX = """
#version 330
in vec2 in_pos;
out vec2 v_uv;
void main() { v_uv = in_pos * 0.5 + 0.5; gl_Position = vec4(in_pos, 0.0, 1.0); }
"""

FRAGMENT = """
#version 330
uniform float u_cells;
uniform float u_time;
in vec2 v_uv;
out vec4 f_color;
void main() {
    vec2 c = floor(v_uv * u_cells + vec2(u_time, 0.0));
    float k = mod(c.x + c.y, 2.0);
    f_color = vec4(mix(vec3(0.9, 0.2, 0.1), vec3(0.1, 0.3, 0.9), k), 1.0);
}
"""


class Checker(Scene):
    """A scrolling checkerboard."""

    name = "user-checker"
    description = "scrolling checkerboard (test user scene from a file)"
    stresses = ("fill",)
    params = {"cells": Param(6, int, 1, 64, "checker cells across")}

    def setup(self, ctx: Any, size: tuple[int, int], params: Any) -> None:
        self.check_requirements(ctx)
        self.bind_target(ctx, size)
        self.ctx = ctx
        self.program = self.own(
            compile_program(ctx, self.name, vertex_shader=VERTEX, fragment_shader=FRAGMENT)
        )
        tri = np.array([-1, -1, 3, -1, -1, 3], dtype="f4")
        self.vbo = self.own(ctx.buffer(tri.tobytes()))
        self.vao = self.own(ctx.vertex_array(self.program, [(self.vbo, "2f", "in_pos")]))
        self.program["u_cells"].value = float(params["cells"])

    def render(self, frame: Any) -> None:
        with frame.zone("draw"):
            self.target.use()
            self.program["u_time"].value = frame.time_s
            self.vao.render()


class NotAScene:
    """Present so that asking for it gives 'not a katra3d scene'."""
