"""``buffer``: per-frame dynamic vertex updates (map vs sub-data, update fraction)."""

from __future__ import annotations

import math
from collections.abc import Mapping
from typing import ClassVar

import numpy as np

from katra3d.scenes.api import Frame, Param
from katra3d.scenes.builtin._common import BuiltinScene, look_at, mat_bytes, perspective
from katra3d.scenes.shaders import compile_program

_VERTEX = """
#version 330
uniform mat4 u_view_proj;
in vec3 in_pos;
out vec3 v_world;
void main() {
    v_world = in_pos;
    gl_Position = u_view_proj * vec4(in_pos, 1.0);
}
"""

_FRAGMENT = """
#version 330
in vec3 v_world;
out vec4 f_color;
void main() {
    // flat-shaded from screen-space derivatives: no normals to upload
    vec3 n = normalize(cross(dFdx(v_world), dFdy(v_world)));
    float diff = abs(dot(n, normalize(vec3(0.4, 1.0, 0.3))));
    vec3 base = mix(vec3(0.1, 0.3, 0.6), vec3(0.9, 0.95, 1.0),
                    clamp(v_world.y * 1.5 + 0.5, 0.0, 1.0));
    f_color = vec4(base * (0.25 + 0.75 * diff), 1.0);
}
"""  # noqa: E501


class BufferScene(BuiltinScene):
    """A CPU height-field; each frame a walking window of ``update_fraction`` of it is uploaded
    by ``method``. No culling: the surface is open."""

    name = "buffer"
    description = "per-frame dynamic vertex buffer updates: map vs sub-data, update fraction"
    stresses = ("upload", "bandwidth", "cpu")
    params: ClassVar[Mapping[str, Param]] = {
        "grid": Param(256, int, 8, 2048, "vertices per side of the height-field"),
        "update_fraction": Param(0.5, float, 0.0, 1.0, "fraction of vertices rewritten per frame"),
        "method": Param("subdata", str, help="upload path", choices=("subdata", "map")),
    }

    def build(self) -> None:
        ctx = self.ctx
        n = int(self.p["grid"])
        self.n = n
        self.program = self.own(
            compile_program(ctx, self.name, vertex_shader=_VERTEX, fragment_shader=_FRAGMENT)
        )
        lin = np.linspace(-1.0, 1.0, n, dtype=np.float32)
        gx, gz = np.meshgrid(lin, lin)
        self.xz = np.stack([gx.ravel(), gz.ravel()], axis=1)
        self.vertices = np.zeros((n * n, 3), dtype=np.float32)
        self.vertices[:, 0] = self.xz[:, 0]
        self.vertices[:, 2] = self.xz[:, 1]
        self.vbo = self.own(ctx.buffer(self.vertices.tobytes(), dynamic=True))
        i = np.arange(n - 1)[:, None]
        j = np.arange(n - 1)[None, :]
        a = i * n + j
        tris = np.stack([a, a + n, a + 1, a + 1, a + n, a + n + 1], axis=-1).reshape(-1)
        ibo = self.own(ctx.buffer(tris.astype(np.uint32).tobytes()))
        self.vao = self.own(
            ctx.vertex_array(
                self.program, [(self.vbo, "3f", "in_pos")], index_buffer=ibo, index_element_size=4
            )
        )
        self.update_count = int(round(float(self.p["update_fraction"]) * n * n))
        self.cursor = 0
        vp = perspective(45.0, self.aspect, 0.1, 10.0) @ look_at((0.0, 1.4, 2.2), (0.0, -0.1, 0.0))
        self.program["u_view_proj"].write(mat_bytes(vp))

    def _heights(self, xz: np.ndarray, t: float) -> np.ndarray:
        x, z = xz[:, 0], xz[:, 1]
        r = np.hypot(x - 0.3 * math.sin(t * 0.7), z)
        heights: np.ndarray = (
            0.12 * np.sin(r * 14.0 - t * 3.0) * np.exp(-r * 1.2)
            + 0.05 * np.sin(x * 9.0 + t * 1.7) * np.cos(z * 7.0 - t)
        ).astype(np.float32)
        return heights

    def render(self, frame: Frame) -> None:
        ctx = self.ctx
        total = self.n * self.n
        with frame.zone("update"):
            count = self.update_count
            if count > 0:
                start = self.cursor
                stop = start + count
                # a second window when wrapping around
                windows = [(start, min(stop, total))]
                if stop > total:
                    windows.append((0, stop - total))
                for lo, hi in windows:
                    self.vertices[lo:hi, 1] = self._heights(self.xz[lo:hi], frame.time_s)
                    chunk = self.vertices[lo:hi]
                    if self.p["method"] == "map":
                        self.vbo.write_chunks(chunk, lo * 12, chunk.nbytes, 1)
                    else:
                        self.vbo.write(chunk, offset=lo * 12)
                self.cursor = stop % total
        with frame.zone("draw"):
            self.target.use()
            self.target.clear(0.05, 0.05, 0.07, 1.0, depth=1.0)
            ctx.disable(ctx.BLEND | ctx.CULL_FACE)
            ctx.enable(ctx.DEPTH_TEST)
            self.vao.render()
            ctx.disable(ctx.DEPTH_TEST)
