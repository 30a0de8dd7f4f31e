"""``instancing``: tens of thousands of instances in one draw call."""

from __future__ import annotations

import math
from collections.abc import Mapping
from typing import ClassVar

import numpy as np

from katra3d.scenes.api import Frame, Param
from katra3d.scenes.builtin._common import (
    LIT_FRAGMENT,
    BuiltinScene,
    cube,
    look_at,
    mat_bytes,
    perspective,
)
from katra3d.scenes.shaders import compile_program

_VERTEX = """
#version 330
uniform mat4 u_view_proj;
uniform float u_time;
in vec3 in_pos;
in vec3 in_normal;
in vec4 in_offset;   // xyz position, w phase
in vec3 in_tint;
out vec3 v_normal;
out vec3 v_world;
out vec3 v_tint;
void main() {
    float a = u_time * 1.3 + in_offset.w;
    float c = cos(a), s = sin(a);
    mat3 r = mat3(c, 0.0, -s,  0.0, 1.0, 0.0,  s, 0.0, c);
    float bob = 0.3 * sin(u_time * 2.0 + in_offset.w * 3.0);
    vec3 p = r * (in_pos * 0.35) + in_offset.xyz + vec3(0.0, bob, 0.0);
    v_world = p;
    v_normal = r * in_normal;
    v_tint = in_tint;
    gl_Position = u_view_proj * vec4(p, 1.0);
}
"""

_FRAGMENT = LIT_FRAGMENT.replace("uniform vec3 u_color;", "in vec3 v_tint;").replace(
    "u_color", "v_tint"
)


class InstancingScene(BuiltinScene):
    """``drawcalls``' work in one instanced draw, animated in the vertex shader."""

    name = "instancing"
    description = "tens of thousands of instanced cubes in a single draw call"
    stresses = ("vertex", "instancing")
    params: ClassVar[Mapping[str, Param]] = {
        "count": Param(20000, int, 1, 1_000_000, "instances (cubes) in the one draw call"),
    }

    def build(self) -> None:
        ctx = self.ctx
        count = int(self.p["count"])
        self.count = count
        self.program = self.own(
            compile_program(ctx, self.name, vertex_shader=_VERTEX, fragment_shader=_FRAGMENT)
        )
        verts, indices = cube()
        # a jittered 3D grid, fixed seed
        rng = np.random.default_rng(12345)
        side = max(1, round(count ** (1 / 3)))
        ids = np.arange(count)
        grid = np.stack([ids % side, (ids // side) % side, ids // (side * side)], axis=1).astype(
            np.float32
        )
        layers = max(1, math.ceil(count / (side * side)))
        center = np.array([(side - 1) / 2, (side - 1) / 2, (layers - 1) / 2], dtype=np.float32)
        pos = (grid - center) * 1.2 + rng.uniform(-0.3, 0.3, size=(count, 3)).astype(np.float32)
        phase = rng.uniform(0, 2 * math.pi, size=(count, 1)).astype(np.float32)
        tint = (0.35 + 0.65 * rng.uniform(size=(count, 3))).astype(np.float32)
        inst = np.concatenate([pos, phase, tint], axis=1).astype(np.float32)
        self.vao = self.mesh_vao(
            self.program, verts, indices, inst, "4f 3f/i", "in_offset", "in_tint"
        )
        self.extent = float(np.abs(pos).max()) + 1.0
        self.program["u_light_dir"].value = (-0.4, -0.6, -0.7)

    def render(self, frame: Frame) -> None:
        ctx = self.ctx
        with frame.zone("clear"):
            self.target.use()
            self.target.clear(0.06, 0.07, 0.1, 1.0, depth=1.0)
        with frame.zone("instances"):
            ctx.enable(ctx.DEPTH_TEST | ctx.CULL_FACE)
            ctx.disable(ctx.BLEND)
            t = frame.time_s
            dist = self.extent * 2.4
            eye = (dist * math.sin(0.2 * t), dist * 0.35, dist * math.cos(0.2 * t))
            vp = perspective(50.0, self.aspect, 0.1, dist * 3) @ look_at(eye, (0, 0, 0))
            self.program["u_view_proj"].write(mat_bytes(vp))
            self.program["u_eye"].value = eye
            self.program["u_time"].value = t
            self.vao.render(instances=self.count)
            ctx.disable(ctx.DEPTH_TEST | ctx.CULL_FACE)
