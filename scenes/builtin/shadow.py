"""``shadow``: a shadow-map depth pass, then a lit pass sampling it with PCF."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any, ClassVar

import numpy as np

from katra3d.scenes.api import Frame, Param
from katra3d.scenes.builtin._common import (
    BuiltinScene,
    look_at,
    mat_bytes,
    orthographic,
    perspective,
    uv_sphere,
)
from katra3d.scenes.shaders import compile_program

_DEPTH_VERTEX = """
#version 330
uniform mat4 u_light_vp;
uniform float u_time;
in vec3 in_pos;
in vec4 in_inst;   // xyz centre, w radius (w <= 0: the ground plane, drawn as is)
vec3 place(vec3 p) {
    if (in_inst.w <= 0.0) return p;
    float bob = 0.4 * sin(u_time * 1.7 + in_inst.x);
    return p * in_inst.w + in_inst.xyz + vec3(0.0, bob, 0.0);
}
void main() { gl_Position = u_light_vp * vec4(place(in_pos), 1.0); }
"""

#: empty, as moderngl takes a program without one for transform feedback
_DEPTH_FRAGMENT = """
#version 330
void main() {}
"""

_LIT_VERTEX = """
#version 330
uniform mat4 u_view_proj;
uniform mat4 u_light_vp;
uniform float u_time;
in vec3 in_pos;
in vec3 in_normal;
in vec4 in_inst;
out vec3 v_normal;
out vec4 v_light_clip;
out vec3 v_albedo;
vec3 place(vec3 p) {
    if (in_inst.w <= 0.0) return p;
    float bob = 0.4 * sin(u_time * 1.7 + in_inst.x);
    return p * in_inst.w + in_inst.xyz + vec3(0.0, bob, 0.0);
}
void main() {
    vec3 w = place(in_pos);
    v_normal = in_normal;
    v_light_clip = u_light_vp * vec4(w, 1.0);
    v_albedo = in_inst.w <= 0.0 ? vec3(0.75, 0.72, 0.65)
                                : 0.5 + 0.5 * cos(in_inst.xyz * 1.3 + vec3(0.0, 2.0, 4.0));
    gl_Position = u_view_proj * vec4(w, 1.0);
}
"""

_LIT_FRAGMENT = """
#version 330
uniform sampler2DShadow u_shadow;
uniform vec3 u_light_dir;
uniform int u_pcf;
in vec3 v_normal;
in vec4 v_light_clip;
in vec3 v_albedo;
out vec4 f_color;
void main() {
    vec3 n = normalize(v_normal);
    vec3 l = normalize(-u_light_dir);
    float ndl = max(dot(n, l), 0.0);
    vec3 s = v_light_clip.xyz / v_light_clip.w * 0.5 + 0.5;
    float bias = max(0.004 * (1.0 - ndl), 0.0015);
    vec2 texel = 1.0 / vec2(textureSize(u_shadow, 0));
    float lit = 0.0;
    float taps = 0.0;
    for (int y = -u_pcf; y <= u_pcf; ++y) {
        for (int x = -u_pcf; x <= u_pcf; ++x) {
            lit += texture(u_shadow, vec3(s.xy + vec2(x, y) * texel, s.z - bias));
            taps += 1.0;
        }
    }
    lit /= taps;
    vec3 c = v_albedo * (0.2 + 0.8 * ndl * lit);
    f_color = vec4(c, 1.0);
}
"""


class ShadowScene(BuiltinScene):
    """A ``shadow-map`` pass (front faces culled against acne), then a ``lit`` pass of
    ``(2*pcf+1)²`` taps."""

    name = "shadow"
    description = "shadow-map depth pass + lit pass with PCF: multi-pass rendering"
    stresses = ("multi-pass", "depth", "texture", "vertex")
    params: ClassVar[Mapping[str, Param]] = {
        "objects": Param(24, int, 1, 1024, "spheres casting shadows"),
        "shadow_size": Param(2048, int, 128, 8192, "shadow map width = height (texels)"),
        "pcf": Param(1, int, 0, 4, "PCF kernel radius: (2*pcf+1)^2 taps per fragment"),
    }

    def build(self) -> None:
        ctx = self.ctx
        count = int(self.p["objects"])
        smap = int(self.p["shadow_size"])
        self.depth_prog = self.own(
            compile_program(
                ctx, self.name, vertex_shader=_DEPTH_VERTEX, fragment_shader=_DEPTH_FRAGMENT
            )
        )
        self.lit_prog = self.own(
            compile_program(
                ctx, self.name, vertex_shader=_LIT_VERTEX, fragment_shader=_LIT_FRAGMENT
            )
        )
        self.shadow_tex = self.own(ctx.depth_texture((smap, smap)))
        self.shadow_tex.compare_func = "<="
        self.shadow_tex.repeat_x = self.shadow_tex.repeat_y = False
        self.shadow_fbo = self.own(ctx.framebuffer(depth_attachment=self.shadow_tex))

        sphere_v, sphere_i = uv_sphere(24, 32)
        ground = np.array(
            [
                [-8, 0, -8, 0, 1, 0],
                [8, 0, 8, 0, 1, 0],
                [8, 0, -8, 0, 1, 0],
                [-8, 0, -8, 0, 1, 0],
                [-8, 0, 8, 0, 1, 0],
                [8, 0, 8, 0, 1, 0],
            ],
            dtype=np.float32,
        )
        ang = np.arange(count) * 2.39996  # golden angle spiral
        rad = 1.0 + 5.5 * np.sqrt((np.arange(count) + 0.5) / count)
        inst = np.stack(
            [
                rad * np.cos(ang),
                1.2 + 0.6 * np.sin(ang * 3.0),
                rad * np.sin(ang),
                np.full(count, 0.55),
            ],
            axis=1,
        ).astype(np.float32)
        self.count = count
        sphere_vbo = self.own(ctx.buffer(sphere_v.tobytes()))
        sphere_ibo = self.own(ctx.buffer(sphere_i.tobytes()))
        inst_vbo = self.own(ctx.buffer(inst.tobytes()))
        ground_vbo = self.own(ctx.buffer(ground.tobytes()))
        ground_inst = self.own(ctx.buffer(np.zeros(4, np.float32).tobytes()))

        def vaos(prog: Any, with_normal: bool) -> tuple[Any, Any]:
            fmt, names = (
                ("3f 3f", ("in_pos", "in_normal")) if with_normal else ("3f 12x", ("in_pos",))
            )
            sph = self.own(
                ctx.vertex_array(
                    prog,
                    [(sphere_vbo, fmt, *names), (inst_vbo, "4f/i", "in_inst")],
                    index_buffer=sphere_ibo,
                    index_element_size=4,
                )
            )
            gnd = self.own(
                ctx.vertex_array(
                    prog, [(ground_vbo, fmt, *names), (ground_inst, "4f/i", "in_inst")]
                )
            )
            return sph, gnd

        self.depth_sphere, self.depth_ground = vaos(self.depth_prog, False)
        self.lit_sphere, self.lit_ground = vaos(self.lit_prog, True)
        light_dir = np.array([-0.5, -1.0, -0.35])
        light_dir /= np.linalg.norm(light_dir)
        light_view = look_at(-light_dir * 12.0, (0, 0, 0), up=(0.0, 0.0, 1.0))
        self.light_vp = orthographic(10.0, 10.0, 1.0, 30.0) @ light_view
        eye = (0.0, 7.5, 13.0)
        self.view_proj = perspective(45.0, self.aspect, 0.5, 60.0) @ look_at(eye, (0.0, 0.5, 0.0))
        for prog in (self.depth_prog, self.lit_prog):
            prog["u_light_vp"].write(mat_bytes(self.light_vp))
        self.lit_prog["u_view_proj"].write(mat_bytes(self.view_proj))
        self.lit_prog["u_light_dir"].value = tuple(float(x) for x in light_dir)
        self.lit_prog["u_shadow"].value = 0
        self.lit_prog["u_pcf"].value = int(self.p["pcf"])

    def render(self, frame: Frame) -> None:
        ctx = self.ctx
        t = frame.time_s
        ctx.disable(ctx.BLEND)
        with frame.zone("shadow-map"):
            self.shadow_fbo.use()
            self.shadow_fbo.clear(depth=1.0)
            ctx.enable(ctx.DEPTH_TEST | ctx.CULL_FACE)
            ctx.cull_face = "front"
            self.depth_prog["u_time"].value = t
            self.depth_sphere.render(instances=self.count)
            ctx.disable(ctx.CULL_FACE)
            self.depth_ground.render(vertices=6, instances=1)
        with frame.zone("lit"):
            self.target.use()
            self.target.clear(0.5, 0.6, 0.75, 1.0, depth=1.0)
            ctx.enable(ctx.DEPTH_TEST | ctx.CULL_FACE)
            ctx.cull_face = "back"
            self.shadow_tex.use(location=0)
            self.lit_prog["u_time"].value = t
            self.lit_sphere.render(instances=self.count)
            ctx.disable(ctx.CULL_FACE)
            self.lit_ground.render(vertices=6, instances=1)
            ctx.disable(ctx.DEPTH_TEST)
