"""Shared pieces of the built-in scenes: float32 matrices (``M @ v``), procedural meshes
(position+normal vertices, uint32 indices), a base class."""

from __future__ import annotations

import math
from collections.abc import Mapping
from typing import Any

import numpy as np

from katra3d.scenes.api import ParamValue, Scene


def perspective(fovy_deg: float, aspect: float, near: float, far: float) -> np.ndarray:
    """Clip z in -1..1."""
    f = 1.0 / math.tan(math.radians(fovy_deg) / 2.0)
    m = np.zeros((4, 4), dtype=np.float32)
    m[0, 0] = f / aspect
    m[1, 1] = f
    m[2, 2] = (far + near) / (near - far)
    m[2, 3] = 2.0 * far * near / (near - far)
    m[3, 2] = -1.0
    return m


def orthographic(half_w: float, half_h: float, near: float, far: float) -> np.ndarray:
    m = np.eye(4, dtype=np.float32)
    m[0, 0] = 1.0 / half_w
    m[1, 1] = 1.0 / half_h
    m[2, 2] = -2.0 / (far - near)
    m[2, 3] = -(far + near) / (far - near)
    return m


def look_at(eye: Any, target: Any, up: Any = (0.0, 1.0, 0.0)) -> np.ndarray:
    eye_v = np.asarray(eye, dtype=np.float64)
    fwd = np.asarray(target, dtype=np.float64) - eye_v
    fwd /= np.linalg.norm(fwd)
    side = np.cross(fwd, np.asarray(up, dtype=np.float64))
    side /= np.linalg.norm(side)
    upv = np.cross(side, fwd)
    m = np.eye(4)
    m[0, :3], m[1, :3], m[2, :3] = side, upv, -fwd
    m[:3, 3] = -m[:3, :3] @ eye_v
    return m.astype(np.float32)


def rotation(axis: Any, angle_rad: float) -> np.ndarray:
    a = np.asarray(axis, dtype=np.float64)
    x, y, z = a / np.linalg.norm(a)
    c, s, t = math.cos(angle_rad), math.sin(angle_rad), 1.0 - math.cos(angle_rad)
    m = np.eye(4)
    m[:3, :3] = [
        [t * x * x + c, t * x * y - s * z, t * x * z + s * y],
        [t * x * y + s * z, t * y * y + c, t * y * z - s * x],
        [t * x * z - s * y, t * y * z + s * x, t * z * z + c],
    ]
    return m.astype(np.float32)


def translation(x: float, y: float, z: float) -> np.ndarray:
    m = np.eye(4, dtype=np.float32)
    m[:3, 3] = (x, y, z)
    return m


def mat_bytes(m: np.ndarray) -> bytes:
    """GLSL mat4 bytes (column-major)."""
    return np.ascontiguousarray(np.asarray(m, dtype=np.float32).T).tobytes()


def _outward(verts: np.ndarray, tris: np.ndarray) -> np.ndarray:
    """Flat indices, flipped when face normals disagree with vertex normals."""
    p0, p1, p2 = (verts[tris[:, k], :3] for k in range(3))
    if float(np.sum(np.cross(p1 - p0, p2 - p0) * verts[tris[:, 0], 3:])) < 0:
        tris = tris[:, ::-1]
    return np.ascontiguousarray(tris.reshape(-1), dtype=np.uint32)


def torus_knot(
    tube_segments: int,
    radial_segments: int,
    p: int = 2,
    q: int = 3,
    radius: float = 1.0,
    tube: float = 0.3,
) -> tuple[np.ndarray, np.ndarray]:
    u = np.linspace(0.0, 2 * math.pi * p, tube_segments, endpoint=False)

    def curve(t: np.ndarray) -> np.ndarray:
        r = radius * (2.0 + np.cos(q / p * t)) * 0.5
        return np.stack([r * np.cos(t), r * np.sin(t), radius * np.sin(q / p * t) * 0.5], axis=-1)

    c0 = curve(u)
    c1 = curve(u + 0.01)
    tangent = c1 - c0
    tangent /= np.linalg.norm(tangent, axis=1, keepdims=True)
    normal = c1 + c0
    binormal = np.cross(tangent, normal)
    binormal /= np.linalg.norm(binormal, axis=1, keepdims=True)
    normal = np.cross(binormal, tangent)
    v = np.linspace(0.0, 2 * math.pi, radial_segments, endpoint=False)
    cx = -np.cos(v)[None, :, None]
    cy = np.sin(v)[None, :, None]
    dirs = cx * normal[:, None, :] + cy * binormal[:, None, :]
    pos = c0[:, None, :] + tube * dirs
    verts = np.concatenate([pos, dirs], axis=-1).reshape(-1, 6).astype(np.float32)
    i = np.arange(tube_segments)[:, None]
    j = np.arange(radial_segments)[None, :]
    i1 = (i + 1) % tube_segments
    j1 = (j + 1) % radial_segments
    a = i * radial_segments + j
    b = i1 * radial_segments + j
    c = i1 * radial_segments + j1
    d = i * radial_segments + j1
    tris = np.stack([a, b, d, b, c, d], axis=-1).reshape(-1, 3)
    return verts, _outward(verts, tris)


def uv_sphere(stacks: int, slices: int, radius: float = 1.0) -> tuple[np.ndarray, np.ndarray]:
    phi = np.linspace(0.0, math.pi, stacks + 1)
    theta = np.linspace(0.0, 2 * math.pi, slices + 1)
    ph, th = np.meshgrid(phi, theta, indexing="ij")
    n = np.stack([np.sin(ph) * np.cos(th), np.cos(ph), -np.sin(ph) * np.sin(th)], axis=-1)
    verts = np.concatenate([n * radius, n], axis=-1).reshape(-1, 6).astype(np.float32)
    i = np.arange(stacks)[:, None]
    j = np.arange(slices)[None, :]
    a = i * (slices + 1) + j
    b = (i + 1) * (slices + 1) + j
    tris = np.stack([a, b, a + 1, b, b + 1, a + 1], axis=-1).reshape(-1, 3)
    return verts, _outward(verts, tris)


def cube() -> tuple[np.ndarray, np.ndarray]:
    """A -1..1 cube with flat face normals."""
    verts: list[Any] = []
    idx: list[Any] = []
    for axis in range(3):
        for sign in (-1.0, 1.0):
            n = np.zeros(3)
            n[axis] = sign
            u = np.zeros(3)
            u[(axis + 1) % 3] = 1.0
            w = np.cross(n, u)
            base = len(verts)
            for du, dw in ((-1, -1), (1, -1), (1, 1), (-1, 1)):
                verts.append(np.concatenate([n + du * u + dw * w, n]))
            idx.extend([base, base + 1, base + 2, base, base + 2, base + 3])
    v = np.array(verts, dtype=np.float32)
    return v, _outward(v, np.array(idx, dtype=np.uint32).reshape(-1, 3))


def unindex(verts: np.ndarray, indices: np.ndarray) -> np.ndarray:
    return np.ascontiguousarray(verts[indices])


FULLSCREEN_VERTEX = """
#version 330
in vec2 in_pos;
out vec2 v_uv;
void main() {
    v_uv = in_pos * 0.5 + 0.5;
    gl_Position = vec4(in_pos, 0.0, 1.0);
}
"""

#: one triangle covering the viewport (in_pos)
FULLSCREEN_TRIANGLE = np.array([-1.0, -1.0, 3.0, -1.0, -1.0, 3.0], dtype=np.float32)

#: Blinn-Phong (varyings v_normal, v_world)
LIT_FRAGMENT = """
#version 330
uniform vec3 u_color;
uniform vec3 u_light_dir;
uniform vec3 u_eye;
in vec3 v_normal;
in vec3 v_world;
out vec4 f_color;
void main() {
    vec3 n = normalize(v_normal);
    vec3 l = normalize(-u_light_dir);
    vec3 v = normalize(u_eye - v_world);
    vec3 h = normalize(l + v);
    float diff = max(dot(n, l), 0.0);
    float spec = pow(max(dot(n, h), 0.0), 32.0);
    vec3 c = u_color * (0.15 + 0.85 * diff) + vec3(0.4) * spec;
    f_color = vec4(c, 1.0);
}
"""


class BuiltinScene(Scene):
    """``setup`` checks requirements, binds the target, calls :meth:`build`."""

    def setup(self, ctx: Any, size: tuple[int, int], params: Mapping[str, ParamValue]) -> None:
        """On any error, release what was created and re-raise."""
        self.check_requirements(ctx)
        self.begin_setup(ctx, size, params)
        try:
            self.build()
        except BaseException:
            self.release()
            raise

    def build(self) -> None:
        """Create GL objects (``self.ctx``, ``self.size``, ``self.p`` are set)."""
        raise NotImplementedError

    def mesh_vao(self, program: Any, verts: np.ndarray, indices: np.ndarray, *inst: Any) -> Any:
        """An owned indexed VAO of a position+normal mesh; ``inst``: (array, format, names...)."""
        vbo = self.own(self.ctx.buffer(verts.tobytes()))
        ibo = self.own(self.ctx.buffer(indices.tobytes()))
        layout: list[tuple[Any, ...]] = [(vbo, "3f 3f", "in_pos", "in_normal")]
        if inst:
            layout.append((self.own(self.ctx.buffer(inst[0].tobytes())), *inst[1:]))
        return self.own(
            self.ctx.vertex_array(program, layout, index_buffer=ibo, index_element_size=4)
        )

    def begin_setup(
        self, ctx: Any, size: tuple[int, int], params: Mapping[str, ParamValue]
    ) -> None:
        self.ctx = ctx
        self.size = (int(size[0]), int(size[1]))
        self.aspect = self.size[0] / max(1, self.size[1])
        self.p = dict(params)
        self.bind_target(ctx, self.size)


__all__ = [
    "FULLSCREEN_TRIANGLE",
    "FULLSCREEN_VERTEX",
    "LIT_FRAGMENT",
    "BuiltinScene",
    "cube",
    "look_at",
    "mat_bytes",
    "orthographic",
    "perspective",
    "rotation",
    "torus_knot",
    "translation",
    "unindex",
    "uv_sphere",
]
