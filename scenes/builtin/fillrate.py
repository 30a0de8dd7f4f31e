"""``fillrate``: K alpha-blended full-screen layers (fill rate and blending bandwidth)."""

from __future__ import annotations

from collections.abc import Mapping
from typing import ClassVar

from katra3d.scenes.api import Frame, Param
from katra3d.scenes.builtin._common import FULLSCREEN_TRIANGLE, FULLSCREEN_VERTEX, BuiltinScene
from katra3d.scenes.shaders import compile_program

_FRAGMENT = """
#version 330
uniform float u_time;
uniform int u_layers;
in vec2 v_uv;
flat in int v_layer;
out vec4 f_color;
void main() {
    float k = float(v_layer) / float(max(u_layers, 1));
    vec3 base = 0.5 + 0.5 * cos(6.2831 * (k + vec3(0.0, 0.33, 0.67)));
    float stripes = 0.5 + 0.5 * sin(40.0 * (v_uv.x * (1.0 + k) + v_uv.y * (1.0 - k))
                                    + u_time * 2.0);
    f_color = vec4(base * (0.4 + 0.6 * stripes), 0.3);
}
"""  # noqa: E501

_VERTEX = FULLSCREEN_VERTEX.replace(
    "out vec2 v_uv;", "out vec2 v_uv;\nflat out int v_layer;"
).replace("v_uv = in_pos * 0.5 + 0.5;", "v_uv = in_pos * 0.5 + 0.5;\n    v_layer = gl_InstanceID;")


class FillrateScene(BuiltinScene):
    """One instanced draw of ``layers x width x height`` blended fragments."""

    name = "fillrate"
    description = "K alpha-blended full-screen layers: fill rate and blending bandwidth"
    stresses = ("fill", "blend", "bandwidth")
    params: ClassVar[Mapping[str, Param]] = {
        "layers": Param(8, int, 1, 256, "blended full-screen layers per frame"),
    }

    def build(self) -> None:
        ctx = self.ctx
        self.layers = int(self.p["layers"])
        self.program = self.own(
            compile_program(ctx, self.name, vertex_shader=_VERTEX, fragment_shader=_FRAGMENT)
        )
        vbo = self.own(ctx.buffer(FULLSCREEN_TRIANGLE.tobytes()))
        self.vao = self.own(ctx.vertex_array(self.program, [(vbo, "2f", "in_pos")]))
        self.program["u_layers"].value = self.layers

    def render(self, frame: Frame) -> None:
        ctx = self.ctx
        with frame.zone("clear"):
            self.target.use()
            self.target.clear(0.0, 0.0, 0.0, 1.0, depth=1.0)
        with frame.zone("layers"):
            ctx.disable(ctx.DEPTH_TEST | ctx.CULL_FACE)
            ctx.enable(ctx.BLEND)
            ctx.blend_func = ctx.SRC_ALPHA, ctx.ONE_MINUS_SRC_ALPHA
            self.program["u_time"].value = frame.time_s
            self.vao.render(instances=self.layers)
            ctx.disable(ctx.BLEND)
