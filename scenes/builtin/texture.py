"""``texture``: large mipmapped textures, several samplers, a filtering mode."""

from __future__ import annotations

from collections.abc import Mapping
from typing import ClassVar

import numpy as np

from katra3d.scenes.api import Frame, Param
from katra3d.scenes.builtin._common import BuiltinScene, look_at, mat_bytes, perspective
from katra3d.scenes.shaders import compile_program

_VERTEX = """
#version 330
uniform mat4 u_view_proj;
uniform vec2 u_scroll;
in vec3 in_pos;
in vec2 in_uv;
out vec2 v_uv;
out float v_fog;
void main() {
    v_uv = in_uv + u_scroll;
    vec4 clip = u_view_proj * vec4(in_pos, 1.0);
    v_fog = clamp(clip.w / 110.0, 0.0, 1.0);
    gl_Position = clip;
}
"""

_FRAGMENT = """
#version 330
uniform sampler2D u_tex0;
uniform sampler2D u_tex1;
uniform sampler2D u_tex2;
uniform sampler2D u_tex3;
uniform int u_samplers;
in vec2 v_uv;
in float v_fog;
out vec4 f_color;
void main() {
    vec4 c = texture(u_tex0, v_uv);
    if (u_samplers > 1) c = mix(c, texture(u_tex1, v_uv * 2.7 + 0.3), 0.35);
    if (u_samplers > 2) c *= 0.6 + 0.8 * texture(u_tex2, v_uv * 0.37 + 0.1);
    if (u_samplers > 3) c = mix(c, texture(u_tex3, v_uv.yx * 5.3), 0.2);
    f_color = vec4(mix(c.rgb, vec3(0.55, 0.6, 0.7), v_fog), 1.0);
}
"""

#: filter param -> (min filter, mag filter, anisotropy)
_FILTERS = ("nearest", "linear", "trilinear", "anisotropic")


def make_texture_rgba8(kind: int, size: int) -> np.ndarray:
    """A (size, size, 4) uint8 pattern, one of four ``kind``s."""
    coords = (np.arange(size, dtype=np.float32) + 0.5) / size
    u, v = np.meshgrid(coords, coords)
    if kind == 0:  # checkerboard with a fine grid
        check = ((np.floor(u * 16) + np.floor(v * 16)) % 2).astype(np.float32)
        grid = ((u * 128 % 1.0) < 0.06) | ((v * 128 % 1.0) < 0.06)
        rgb = np.stack([0.3 + 0.6 * check, 0.35 + 0.3 * u, 0.6 - 0.4 * check * v], axis=-1)
        rgb[grid] *= 0.4
    elif kind == 1:  # concentric rings
        r = np.hypot(u - 0.5, v - 0.5)
        ring = 0.5 + 0.5 * np.sin(r * 180.0)
        rgb = np.stack([ring, 0.5 * ring + 0.3 * u, 1.0 - ring * 0.7], axis=-1)
    elif kind == 2:  # value noise, 4 octaves, seeded
        rng = np.random.default_rng(7)
        acc = np.zeros((size, size), dtype=np.float32)
        amp = 0.5
        for octave in range(4):
            cells = 4 << octave
            lattice = rng.uniform(size=(cells + 1, cells + 1)).astype(np.float32)
            x = u * cells
            y = v * cells
            x0 = np.floor(x).astype(int)
            y0 = np.floor(y).astype(int)
            fx = x - x0
            fy = y - y0
            fx = fx * fx * (3 - 2 * fx)
            fy = fy * fy * (3 - 2 * fy)
            top = lattice[y0, x0] * (1 - fx) + lattice[y0, x0 + 1] * fx
            bottom = lattice[y0 + 1, x0] * (1 - fx) + lattice[y0 + 1, x0 + 1] * fx
            acc += amp * (top * (1 - fy) + bottom * fy)
            amp *= 0.5
        rgb = np.stack([acc, acc * 0.9, acc * 0.7 + 0.2], axis=-1)
    else:  # diagonal stripes
        s = (np.floor((u + v) * 40) % 3) / 2.0
        rgb = np.stack([s, 1.0 - s, 0.5 + 0.5 * s * u], axis=-1)
    rgba = np.concatenate([np.clip(rgb, 0, 1), np.ones((size, size, 1), np.float32)], axis=-1)
    return (rgba * 255.0 + 0.5).astype(np.uint8)


class TextureScene(BuiltinScene):
    """A floor to the horizon (many mip levels) and a wall; ``anisotropic`` falls back to
    trilinear where unsupported."""

    name = "texture"
    description = "large mipmapped procedural textures, several samplers, selectable filtering"
    stresses = ("texture", "bandwidth", "fragment")
    params: ClassVar[Mapping[str, Param]] = {
        "tex_size": Param(1024, int, 64, 8192, "texture width = height (texels)"),
        "samplers": Param(4, int, 1, 4, "textures sampled per fragment"),
        "filter": Param("trilinear", str, help="texture filtering", choices=_FILTERS),
    }

    def build(self) -> None:
        ctx = self.ctx
        size = int(self.p["tex_size"])
        self.n_samplers = int(self.p["samplers"])
        filt = self.p["filter"]
        self.program = self.own(
            compile_program(ctx, self.name, vertex_shader=_VERTEX, fragment_shader=_FRAGMENT)
        )
        self.textures = []
        for i in range(self.n_samplers):
            tex = self.own(ctx.texture((size, size), 4, make_texture_rgba8(i, size).tobytes()))
            tex.repeat_x = tex.repeat_y = True
            if filt == "nearest":
                tex.filter = (ctx.NEAREST, ctx.NEAREST)
            elif filt == "linear":
                tex.filter = (ctx.LINEAR, ctx.LINEAR)
            else:
                tex.build_mipmaps()
                tex.filter = (ctx.LINEAR_MIPMAP_LINEAR, ctx.LINEAR)
                if filt == "anisotropic" and float(ctx.max_anisotropy) > 1.0:
                    tex.anisotropy = min(16.0, float(ctx.max_anisotropy))
            self.textures.append(tex)
        for i in range(4):
            name = f"u_tex{i}"
            if name in self.program:
                self.program[name].value = min(i, self.n_samplers - 1)
        self.program["u_samplers"].value = self.n_samplers
        # floor (y = 0, 80 x 80, uv tiled 20x) + wall (z = -40)
        floor = [(-40, 0, 40, 0, 0), (40, 0, 40, 20, 0), (40, 0, -40, 20, 20), (-40, 0, -40, 0, 20)]
        wall = [
            (-40, 0, -40, 0, 0),
            (40, 0, -40, 20, 0),
            (40, 20, -40, 20, 5),
            (-40, 20, -40, 0, 5),
        ]
        quads = []
        for q in (floor, wall):
            quads.extend([q[0], q[1], q[2], q[0], q[2], q[3]])
        vbo = self.own(ctx.buffer(np.array(quads, dtype=np.float32).tobytes()))
        self.vao = self.own(ctx.vertex_array(self.program, [(vbo, "3f 2f", "in_pos", "in_uv")]))
        eye = (0.0, 2.5, 12.0)
        vp = perspective(60.0, self.aspect, 0.1, 100.0) @ look_at(eye, (0.0, 1.5, -10.0))
        self.program["u_view_proj"].write(mat_bytes(vp))

    def render(self, frame: Frame) -> None:
        ctx = self.ctx
        with frame.zone("clear"):
            self.target.use()
            self.target.clear(0.55, 0.6, 0.7, 1.0, depth=1.0)
        with frame.zone("draw"):
            ctx.disable(ctx.BLEND | ctx.CULL_FACE)
            ctx.enable(ctx.DEPTH_TEST)
            for i, tex in enumerate(self.textures):
                tex.use(location=i)
            t = frame.time_s
            self.program["u_scroll"].value = (0.05 * t, -0.2 * t)
            self.vao.render()
            ctx.disable(ctx.DEPTH_TEST)
