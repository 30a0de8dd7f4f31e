"""``compute``: compute-shader particle simulation, drawn as points (GL 4.3)."""

from __future__ import annotations

import math
from collections.abc import Mapping
from typing import ClassVar

import numpy as np

from katra3d.scenes.api import NOMINAL_RATE_HZ, Frame, Param
from katra3d.scenes.builtin._common import BuiltinScene
from katra3d.scenes.shaders import compile_compute, compile_program

_LOCAL_SIZE = 256

_COMPUTE = (
    """
#version 430
layout(local_size_x = """
    + str(_LOCAL_SIZE)
    + """) in;
struct Particle { vec4 pos; vec4 vel; };   // pos.w: unused, vel.w: colour seed
layout(std430, binding = 0) buffer Particles { Particle p[]; };
uniform float u_time;
uniform float u_dt;
uniform uint u_count;
void main() {
    uint i = gl_GlobalInvocationID.x;
    if (i >= u_count) return;
    vec3 pos = p[i].pos.xyz;
    vec3 vel = p[i].vel.xyz;
    // three moving attractors (positions depend on scene time only)
    vec3 acc = vec3(0.0);
    for (int k = 0; k < 3; ++k) {
        float a = u_time * (0.4 + 0.15 * float(k)) + 2.094 * float(k);
        vec3 c = vec3(0.9 * cos(a), 0.6 * sin(a * 1.3), 0.5 * sin(a));
        vec3 d = c - pos;
        float r2 = dot(d, d) + 0.05;
        acc += d * (0.6 / (r2 * sqrt(r2)));
    }
    vel = (vel + acc * u_dt) * 0.995;
    pos += vel * u_dt;
    // keep everything inside the box: reflect at the walls
    vec3 over = step(vec3(1.6, 1.0, 1.0), abs(pos));
    vel = mix(vel, -vel * 0.5, over);
    pos = clamp(pos, vec3(-1.6, -1.0, -1.0), vec3(1.6, 1.0, 1.0));
    p[i].pos.xyz = pos;
    p[i].vel.xyz = vel;
}
"""
)

_VERTEX = """
#version 430
uniform float u_aspect;
in vec4 in_pos;
in vec4 in_vel;
out vec3 v_color;
void main() {
    float speed = length(in_vel.xyz);
    v_color = mix(vec3(0.2, 0.4, 1.0), vec3(1.0, 0.6, 0.2), clamp(speed * 0.5, 0.0, 1.0))
              * (0.6 + 0.4 * in_vel.w);
    float persp = 1.0 / (2.5 - in_pos.z);
    gl_Position = vec4(in_pos.x * persp * 1.6 / u_aspect, in_pos.y * persp * 1.6,
                       in_pos.z * 0.3, 1.0);
    gl_PointSize = 2.0;
}
"""  # noqa: E501

_FRAGMENT = """
#version 430
in vec3 v_color;
out vec4 f_color;
void main() { f_color = vec4(v_color * 0.35, 1.0); }
"""


class ComputeScene(BuiltinScene):
    """Particles in an SSBO advanced by a compute shader, drawn from the same buffer; state
    carries over, so the image depends on every frame since setup."""

    name = "compute"
    description = "compute-shader particle simulation drawn as additive points (GL 4.3)"
    stresses = ("compute", "bandwidth", "blend")
    min_gl_version = 430
    params: ClassVar[Mapping[str, Param]] = {
        "count": Param(65536, int, 256, 16_777_216, "particles"),
    }

    def build(self) -> None:
        ctx = self.ctx
        count = int(self.p["count"])
        self.count = count
        self.compute = self.own(compile_compute(ctx, self.name, _COMPUTE))
        self.program = self.own(
            compile_program(ctx, self.name, vertex_shader=_VERTEX, fragment_shader=_FRAGMENT)
        )
        rng = np.random.default_rng(2024)
        pos = rng.uniform(-1.0, 1.0, size=(count, 3)) * np.array([1.5, 0.9, 0.9])
        swirl = np.stack([-pos[:, 1], pos[:, 0], np.zeros(count)], axis=1) * 0.8
        data = np.zeros((count, 8), dtype=np.float32)
        data[:, 0:3] = pos
        data[:, 3] = 1.0
        data[:, 4:7] = swirl
        data[:, 7] = rng.uniform(size=count)
        self.ssbo = self.own(ctx.buffer(data.tobytes()))
        self.vao = self.own(
            ctx.vertex_array(self.program, [(self.ssbo, "4f 4f", "in_pos", "in_vel")])
        )
        self.compute["u_count"].value = count
        self.compute["u_dt"].value = 1.0 / NOMINAL_RATE_HZ
        self.program["u_aspect"].value = self.aspect
        self.groups = math.ceil(count / _LOCAL_SIZE)

    def render(self, frame: Frame) -> None:
        ctx = self.ctx
        with frame.zone("simulate"):
            self.ssbo.bind_to_storage_buffer(0)
            self.compute["u_time"].value = frame.time_s
            self.compute.run(group_x=self.groups)
            ctx.memory_barrier()
        with frame.zone("draw"):
            self.target.use()
            self.target.clear(0.0, 0.0, 0.0, 1.0, depth=1.0)
            ctx.disable(ctx.DEPTH_TEST | ctx.CULL_FACE)
            ctx.enable(ctx.BLEND | ctx.PROGRAM_POINT_SIZE)
            ctx.blend_func = ctx.ONE, ctx.ONE
            self.vao.render(mode=ctx.POINTS, vertices=self.count)
            ctx.disable(ctx.BLEND | ctx.PROGRAM_POINT_SIZE)
            ctx.blend_func = ctx.SRC_ALPHA, ctx.ONE_MINUS_SRC_ALPHA
