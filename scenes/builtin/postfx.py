"""``postfx``: render to an HDR texture, separable Gaussian blur (bloom), tone map."""

from __future__ import annotations

import math
from collections.abc import Mapping
from typing import ClassVar

import numpy as np

from katra3d.scenes.api import Frame, Param
from katra3d.scenes.builtin._common import (
    FULLSCREEN_TRIANGLE,
    FULLSCREEN_VERTEX,
    BuiltinScene,
    cube,
    look_at,
    mat_bytes,
    perspective,
)
from katra3d.scenes.shaders import compile_program

_SCENE_VERTEX = """
#version 330
uniform mat4 u_view_proj;
uniform float u_time;
in vec3 in_pos;
in vec3 in_normal;
in vec4 in_inst;   // xyz position, w phase
out vec3 v_normal;
out float v_glow;
out vec3 v_tint;
void main() {
    float a = u_time + in_inst.w;
    float c = cos(a), s = sin(a);
    mat3 r = mat3(c, s, 0.0, -s, c, 0.0, 0.0, 0.0, 1.0)
           * mat3(1.0, 0.0, 0.0, 0.0, c, -s, 0.0, s, c);
    v_normal = r * in_normal;
    v_glow = 0.5 + 0.5 * sin(u_time * 2.0 + in_inst.w * 5.0);
    v_tint = 0.5 + 0.5 * cos(in_inst.w * 2.0 + vec3(0.0, 2.1, 4.2));
    gl_Position = u_view_proj * vec4(r * in_pos * 0.45 + in_inst.xyz, 1.0);
}
"""  # noqa: E501

_SCENE_FRAGMENT = """
#version 330
in vec3 v_normal;
in float v_glow;
in vec3 v_tint;
out vec4 f_color;
void main() {
    float diff = max(dot(normalize(v_normal), normalize(vec3(0.3, 0.8, 0.6))), 0.0);
    // HDR: glowing objects go well above 1.0, the blur turns that into bloom
    vec3 c = v_tint * (0.1 + 0.9 * diff) + v_tint * v_glow * 4.0;
    f_color = vec4(c, 1.0);
}
"""

_BLUR_FRAGMENT = """
#version 330
uniform sampler2D u_src;
uniform vec2 u_dir;        // (1/width, 0) or (0, 1/height) of the source, in uv
uniform int u_radius;      // taps on each side
uniform float u_sigma;
uniform float u_threshold; // > 0: keep only what is brighter (first pass)
in vec2 v_uv;
out vec4 f_color;
vec3 fetch(vec2 uv) {
    vec3 c = texture(u_src, uv).rgb;
    return u_threshold > 0.0 ? max(c - vec3(u_threshold), vec3(0.0)) : c;
}
void main() {
    vec3 acc = fetch(v_uv);
    float wsum = 1.0;
    for (int i = 1; i <= u_radius; ++i) {
        float w = exp(-float(i * i) / (2.0 * u_sigma * u_sigma));
        acc += w * (fetch(v_uv + u_dir * float(i)) + fetch(v_uv - u_dir * float(i)));
        wsum += 2.0 * w;
    }
    f_color = vec4(acc / wsum, 1.0);
}
"""

_TONEMAP_FRAGMENT = """
#version 330
uniform sampler2D u_scene;
uniform sampler2D u_bloom;
uniform float u_exposure;
in vec2 v_uv;
out vec4 f_color;
void main() {
    vec3 hdr = texture(u_scene, v_uv).rgb + 0.8 * texture(u_bloom, v_uv).rgb;
    vec3 x = hdr * u_exposure;
    vec3 mapped = (x * (2.51 * x + 0.03)) / (x * (2.43 * x + 0.59) + 0.14);  // filmic curve
    f_color = vec4(pow(clamp(mapped, 0.0, 1.0), vec3(1.0 / 2.2)), 1.0);
}
"""


class PostFxScene(BuiltinScene):
    """Four zoned passes: ``scene`` (RGBA16F), ``blur-h`` (bright-pass, ``downsample`` times
    smaller), ``blur-v``, ``tonemap``."""

    name = "postfx"
    description = (
        "render to HDR texture, separable Gaussian blur (bloom), tone map: multi-pass "
        "post-processing"
    )
    stresses = ("fragment", "bandwidth", "render-to-texture", "multi-pass")
    params: ClassVar[Mapping[str, Param]] = {
        "radius": Param(8, int, 1, 64, "blur taps on each side of the centre"),
        "downsample": Param(2, int, 1, 8, "blur resolution divisor"),
        "objects": Param(64, int, 1, 4096, "glowing cubes in the scene pass"),
    }

    def build(self) -> None:
        ctx = self.ctx
        w, h = self.size
        div = int(self.p["downsample"])
        bw, bh = max(1, w // div), max(1, h // div)
        self.radius = int(self.p["radius"])
        self.count = int(self.p["objects"])
        self.scene_prog = self.own(
            compile_program(
                ctx, self.name, vertex_shader=_SCENE_VERTEX, fragment_shader=_SCENE_FRAGMENT
            )
        )
        self.blur_prog = self.own(
            compile_program(
                ctx, self.name, vertex_shader=FULLSCREEN_VERTEX, fragment_shader=_BLUR_FRAGMENT
            )
        )
        self.tone_prog = self.own(
            compile_program(
                ctx, self.name, vertex_shader=FULLSCREEN_VERTEX, fragment_shader=_TONEMAP_FRAGMENT
            )
        )
        self.hdr_tex = self.own(ctx.texture((w, h), 4, dtype="f2"))
        self.hdr_depth = self.own(ctx.depth_renderbuffer((w, h)))
        self.hdr_fbo = self.own(ctx.framebuffer([self.hdr_tex], self.hdr_depth))
        self.blur_a = self.own(ctx.texture((bw, bh), 4, dtype="f2"))
        self.blur_b = self.own(ctx.texture((bw, bh), 4, dtype="f2"))
        for tex in (self.hdr_tex, self.blur_a, self.blur_b):
            tex.filter = (ctx.LINEAR, ctx.LINEAR)
            tex.repeat_x = tex.repeat_y = False
        self.fbo_a = self.own(ctx.framebuffer([self.blur_a]))
        self.fbo_b = self.own(ctx.framebuffer([self.blur_b]))

        verts, indices = cube()
        side = math.ceil(math.sqrt(self.count))
        ids = np.arange(self.count)
        inst = np.stack(
            [
                (ids % side - (side - 1) / 2) * 1.3,
                (ids // side - (side - 1) / 2) * 1.3,
                -(ids % 3) * 0.8,
                ids * 0.713,
            ],
            axis=1,
        ).astype(np.float32)
        self.scene_vao = self.mesh_vao(self.scene_prog, verts, indices, inst, "4f/i", "in_inst")
        tri = self.own(ctx.buffer(FULLSCREEN_TRIANGLE.tobytes()))
        self.blur_vao = self.own(ctx.vertex_array(self.blur_prog, [(tri, "2f", "in_pos")]))
        self.tone_vao = self.own(ctx.vertex_array(self.tone_prog, [(tri, "2f", "in_pos")]))
        dist = side * 1.3 / 2 / math.tan(math.radians(22.5)) + 2.0
        vp = perspective(45.0, self.aspect, 0.5, dist + 10) @ look_at((0, 0, dist), (0, 0, 0))
        self.scene_prog["u_view_proj"].write(mat_bytes(vp))
        self.blur_prog["u_src"].value = 0
        self.blur_prog["u_radius"].value = self.radius
        self.blur_prog["u_sigma"].value = max(1.0, self.radius / 2.0)
        self.tone_prog["u_scene"].value = 0
        self.tone_prog["u_bloom"].value = 1
        self.tone_prog["u_exposure"].value = 0.8
        self.blur_size = (bw, bh)

    def render(self, frame: Frame) -> None:
        ctx = self.ctx
        bw, bh = self.blur_size
        with frame.zone("scene"):
            self.hdr_fbo.use()
            self.hdr_fbo.clear(0.02, 0.02, 0.04, 1.0, depth=1.0)
            ctx.enable(ctx.DEPTH_TEST | ctx.CULL_FACE)
            ctx.disable(ctx.BLEND)
            self.scene_prog["u_time"].value = frame.time_s
            self.scene_vao.render(instances=self.count)
            ctx.disable(ctx.DEPTH_TEST | ctx.CULL_FACE)
        with frame.zone("blur-h"):
            self.fbo_a.use()
            self.hdr_tex.use(location=0)
            self.blur_prog["u_dir"].value = (1.0 / bw, 0.0)
            self.blur_prog["u_threshold"].value = 1.0
            self.blur_vao.render()
        with frame.zone("blur-v"):
            self.fbo_b.use()
            self.blur_a.use(location=0)
            self.blur_prog["u_dir"].value = (0.0, 1.0 / bh)
            self.blur_prog["u_threshold"].value = 0.0
            self.blur_vao.render()
        with frame.zone("tonemap"):
            self.target.use()
            self.hdr_tex.use(location=0)
            self.blur_b.use(location=1)
            self.tone_vao.render()
