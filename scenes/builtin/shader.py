"""``shader``: an ALU-heavy procedural fragment shader over the whole screen."""

from __future__ import annotations

from collections.abc import Mapping
from typing import ClassVar

from katra3d.scenes.api import Frame, Param
from katra3d.scenes.builtin._common import FULLSCREEN_TRIANGLE, FULLSCREEN_VERTEX, BuiltinScene
from katra3d.scenes.shaders import compile_program

_FRAGMENT = """
#version 330
uniform float u_time;
uniform float u_aspect;
uniform int u_iterations;
in vec2 v_uv;
out vec4 f_color;
void main() {
    // a Julia set with a fixed iteration count (no early exit: every pixel
    // does the same ALU work), orbit-trap colouring
    vec2 z = (v_uv - 0.5) * vec2(u_aspect, 1.0) * 2.6;
    vec2 c = vec2(-0.79 + 0.06 * cos(u_time * 0.7), 0.16 + 0.05 * sin(u_time * 0.5));
    float trap = 1e3;
    float escaped = 0.0;
    for (int i = 0; i < u_iterations; ++i) {
        z = vec2(z.x * z.x - z.y * z.y, 2.0 * z.x * z.y) + c;
        float r2 = dot(z, z);
        trap = min(trap, abs(z.x * z.y));
        escaped += step(4.0, r2);
        z = r2 > 16.0 ? z * (4.0 / sqrt(r2)) : z;   // keep values finite
    }
    float k = escaped / float(max(u_iterations, 1));
    vec3 col = 0.5 + 0.5 * cos(6.2831 * (k * 1.5 + vec3(0.0, 0.15, 0.3)) + sqrt(trap) * 4.0);
    f_color = vec4(col * (0.3 + 0.7 * (1.0 - k)), 1.0);
}
"""


class ShaderScene(BuiltinScene):
    """``iterations`` Julia steps per pixel, no early exit."""

    name = "shader"
    description = "ALU-heavy procedural fragment shader (Julia set, fixed iterations)"
    stresses = ("fragment", "alu")
    params: ClassVar[Mapping[str, Param]] = {
        "iterations": Param(48, int, 1, 4096, "loop iterations per pixel"),
    }

    def build(self) -> None:
        ctx = self.ctx
        self.program = self.own(
            compile_program(
                ctx, self.name, vertex_shader=FULLSCREEN_VERTEX, fragment_shader=_FRAGMENT
            )
        )
        vbo = self.own(ctx.buffer(FULLSCREEN_TRIANGLE.tobytes()))
        self.vao = self.own(ctx.vertex_array(self.program, [(vbo, "2f", "in_pos")]))
        self.program["u_iterations"].value = int(self.p["iterations"])
        self.program["u_aspect"].value = self.aspect

    def render(self, frame: Frame) -> None:
        ctx = self.ctx
        with frame.zone("shade"):
            self.target.use()
            ctx.disable(ctx.DEPTH_TEST | ctx.CULL_FACE | ctx.BLEND)
            self.program["u_time"].value = frame.time_s
            self.vao.render()
