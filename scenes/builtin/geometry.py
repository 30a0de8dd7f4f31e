"""``geometry``: a procedural high-poly lit mesh (vertex/primitive throughput)."""

from __future__ import annotations

import math
from collections.abc import Mapping
from typing import ClassVar

from katra3d.scenes.api import Frame, Param
from katra3d.scenes.builtin._common import (
    LIT_FRAGMENT,
    BuiltinScene,
    look_at,
    mat_bytes,
    perspective,
    rotation,
    torus_knot,
    unindex,
)
from katra3d.scenes.shaders import compile_program

LIT_VERTEX = """
#version 330
uniform mat4 u_mvp;
uniform mat4 u_model;
in vec3 in_pos;
in vec3 in_normal;
out vec3 v_normal;
out vec3 v_world;
void main() {
    vec4 w = u_model * vec4(in_pos, 1.0);
    v_world = w.xyz;
    v_normal = mat3(u_model) * in_normal;
    gl_Position = u_mvp * vec4(in_pos, 1.0);
}
"""


class GeometryScene(BuiltinScene):
    """A torus knot of ``16 * detail**2`` triangles. On llvmpipe indexed draws can be slower than
    non-indexed, on GPUs usually faster (docs/scenes.md)."""

    name = "geometry"
    description = "procedural high-poly lit mesh (torus knot): vertex and primitive throughput"
    stresses = ("vertex", "primitive-assembly")
    params: ClassVar[Mapping[str, Param]] = {
        "detail": Param(
            64, int, 4, 512, "mesh detail: 8*detail x detail segments = 16*detail^2 triangles"
        ),
        "indexed": Param(
            True, bool, help="draw with a 32-bit index buffer (false: flat triangle list)"
        ),
        "cull": Param(True, bool, help="cull back faces (the mesh is closed)"),
    }

    def build(self) -> None:
        ctx = self.ctx
        detail = int(self.p["detail"])
        verts, indices = torus_knot(8 * detail, detail, radius=1.0, tube=0.22)
        self.triangles = len(indices) // 3
        self.program = self.own(
            compile_program(ctx, self.name, vertex_shader=LIT_VERTEX, fragment_shader=LIT_FRAGMENT)
        )
        if self.p["indexed"]:
            self.vao = self.mesh_vao(self.program, verts, indices)
        else:
            vbo = self.own(ctx.buffer(unindex(verts, indices).tobytes()))
            self.vao = self.own(
                ctx.vertex_array(self.program, [(vbo, "3f 3f", "in_pos", "in_normal")])
            )
        eye = (0.0, 0.4, 4.0)
        self.view_proj = perspective(45.0, self.aspect, 0.1, 20.0) @ look_at(eye, (0, 0, 0))
        self.program["u_eye"].value = eye
        self.program["u_light_dir"].value = (-0.4, -0.7, -0.6)
        self.program["u_color"].value = (0.85, 0.55, 0.25)

    def render(self, frame: Frame) -> None:
        ctx = self.ctx
        with frame.zone("clear"):
            self.target.use()
            self.target.clear(0.08, 0.09, 0.12, 1.0, depth=1.0)
        with frame.zone("mesh"):
            ctx.enable(ctx.DEPTH_TEST)
            ctx.disable(ctx.BLEND)
            if self.p["cull"]:
                ctx.enable(ctx.CULL_FACE)
                ctx.front_face = "ccw"
                ctx.cull_face = "back"
            else:
                ctx.disable(ctx.CULL_FACE)
            t = frame.time_s
            model = rotation((0.3, 1.0, 0.1), 0.6 * t) @ rotation(
                (1.0, 0.0, 0.0), 0.25 * math.sin(t)
            )
            self.program["u_model"].write(mat_bytes(model))
            self.program["u_mvp"].write(mat_bytes(self.view_proj @ model))
            self.vao.render()
            ctx.disable(ctx.DEPTH_TEST | ctx.CULL_FACE)
