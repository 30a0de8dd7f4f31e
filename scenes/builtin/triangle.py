"""``triangle``: the smoke test — one rotating colour triangle."""

from __future__ import annotations

import math
from collections.abc import Mapping
from typing import Any, ClassVar

import numpy as np

from katra3d.scenes.api import Frame, Param, ParamValue, Scene
from katra3d.scenes.shaders import compile_program

_VERTEX = """
#version 330
uniform float u_angle;
uniform float u_aspect;
in vec2 in_pos;
in vec3 in_color;
out vec3 v_color;
void main() {
    float c = cos(u_angle), s = sin(u_angle);
    vec2 p = mat2(c, s, -s, c) * in_pos;
    gl_Position = vec4(p.x / u_aspect, p.y, 0.0, 1.0);
    v_color = in_color;
}
"""

_FRAGMENT = """
#version 330
in vec3 v_color;
out vec4 f_color;
void main() { f_color = vec4(v_color, 1.0); }
"""


class TriangleScene(Scene):
    """Rotating at ``speed`` turns/s."""

    name = "triangle"
    description = "one rotating colour triangle: smoke test of the whole path"
    stresses = ("framework",)
    params: ClassVar[Mapping[str, Param]] = {
        "speed": Param(0.25, float, 0.0, 10.0, "rotation speed (turns per second of scene time)"),
    }

    def setup(self, ctx: Any, size: tuple[int, int], params: Mapping[str, ParamValue]) -> None:
        self.check_requirements(ctx)
        self.ctx = ctx
        self.aspect = size[0] / max(1, size[1])
        self.speed = float(params["speed"])
        self.bind_target(ctx, size)
        self.program = self.own(
            compile_program(ctx, self.name, vertex_shader=_VERTEX, fragment_shader=_FRAGMENT)
        )
        r = 0.8
        verts: list[float] = []
        colors = ((1.0, 0.2, 0.2), (0.2, 1.0, 0.2), (0.2, 0.3, 1.0))
        for i, col in enumerate(colors):
            a = math.pi / 2 + i * 2 * math.pi / 3
            verts.extend((r * math.cos(a), r * math.sin(a), *col))
        self.vbo = self.own(ctx.buffer(np.array(verts, dtype="f4").tobytes()))
        self.vao = self.own(
            ctx.vertex_array(self.program, [(self.vbo, "2f 3f", "in_pos", "in_color")])
        )
        self.program["u_aspect"].value = self.aspect

    def render(self, frame: Frame) -> None:
        with frame.zone("draw"):
            self.target.use()
            self.target.clear(0.05, 0.05, 0.08, 1.0, depth=1.0)
            self.ctx.disable(self.ctx.DEPTH_TEST | self.ctx.CULL_FACE | self.ctx.BLEND)
            self.program["u_angle"].value = 2 * math.pi * self.speed * frame.time_s
            self.vao.render()
