"""A user scene for the glmark2 parity bench (bench/glmark2.py): glmark2's ``build`` workload,
redone.

What glmark2's ``build`` scene draws (from its documentation and public
source; none of its text, code, shaders or models is in this repository):

* a model read from a file (``model=bunny``: glmark2-data's ``bunny.obj``,
  read here at run time from the path in the ``model`` param, never copied);
* per-vertex normals where the file has none: the sum of the unit normals
  of the faces around a vertex, normalized;
* the triangles expanded to a flat list (three vertices per face, no index
  buffer), positions and normals in two separate static buffers, one
  ``glDrawArrays(GL_TRIANGLES)`` a frame;
* per-vertex diffuse lighting: a directional light towards (20, 20, 10), a
  white material, ``max(dot(N, L), 0)`` computed in the vertex shader, the
  fragment shader writing the interpolated colour;
* the camera fitted to the model's bounding box: the box's centre moved
  ``2 + radius`` in front of the eye, a vertical field of view of
  ``2 atan(radius / (2 + radius))``, near plane 2, far plane ``2 + diameter``;
  the model turns about its own Y axis at 36 degrees a second;
* depth test (LEQUAL) and back-face culling on, colour and depth cleared to
  black and 1 each frame.

The one difference is time: glmark2 turns the model by its wall-clock time,
this scene by katra3d's deterministic scene time (``frame.time_s``), so the
same frame index always shows the same image here.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from pathlib import Path
from typing import Any, ClassVar

import numpy as np

from katra3d import Frame, Param, Scene, compile_program
from katra3d.scenes.builtin._common import mat_bytes, perspective, rotation, translation
from katra_trace.errors import SceneError

#: Where Debian's and Ubuntu's glmark2-data package installs the bunny model.
GLMARK2_BUNNY = "/usr/share/glmark2/models/bunny.obj"

#: Degrees the model turns per second of scene time (glmark2's build scene turns at the same rate).
ROTATION_DEG_PER_S = 36.0

VERTEX_SHADER = """
#version 330
const vec4 light_position = vec4(20.0, 20.0, 10.0, 1.0);
const vec4 material_diffuse = vec4(1.0, 1.0, 1.0, 1.0);
uniform mat4 mvp;
uniform mat4 normal_matrix;
in vec3 position;
in vec3 normal;
out vec4 color;
void main() {
    vec3 n_eye = normalize(vec3(normal_matrix * vec4(normal, 1.0)));
    vec3 to_light = normalize(light_position.xyz);
    color = vec4(max(dot(n_eye, to_light), 0.0) * material_diffuse.rgb, material_diffuse.a);
    gl_Position = mvp * vec4(position, 1.0);
}
"""

FRAGMENT_SHADER = """
#version 330
in vec4 color;
out vec4 frag_color;
void main() {
    frag_color = color;
}
"""


def read_obj(path: Path) -> tuple[np.ndarray, np.ndarray]:
    """Positions ((N, 3) float32) and triangles ((M, 3) int64, 0-based) of a Wavefront OBJ file.

    Reads ``v`` and ``f`` lines only (texture coordinates and normals in the
    file are ignored: normals are computed, as glmark2 does for files without
    them). A face index may be written ``v``, ``v/t``, ``v//n`` or ``v/t/n``;
    negative indices count back from the last vertex read. Polygons with
    more than three corners become a fan of triangles. SceneError when the
    file cannot be read or holds no triangle.
    """
    try:
        text = path.read_text(encoding="utf-8", errors="replace")
    except OSError as exc:
        raise SceneError(f"cannot read the model {path}: {exc.strerror or exc}") from None
    positions: list[tuple[float, float, float]] = []
    triangles: list[tuple[int, int, int]] = []
    for number, line in enumerate(text.splitlines(), 1):
        fields = line.split()
        if not fields:
            continue
        try:
            if fields[0] == "v":
                positions.append((float(fields[1]), float(fields[2]), float(fields[3])))
            elif fields[0] == "f":
                corners = [_obj_index(field, len(positions)) for field in fields[1:]]
                if len(corners) < 3:
                    raise ValueError("a face needs three corners")
                triangles += [
                    (corners[0], corners[k], corners[k + 1]) for k in range(1, len(corners) - 1)
                ]
        except (ValueError, IndexError) as exc:
            raise SceneError(
                f"{path}:{number}: not an OBJ vertex or face: {line.strip()[:60]!r} ({exc})"
            ) from None
    if not triangles:
        raise SceneError(f"{path}: no faces: not an OBJ model")
    tris = np.asarray(triangles, dtype=np.int64)
    if tris.min() < 0 or tris.max() >= len(positions):
        raise SceneError(f"{path}: a face refers to a vertex the file does not define")
    return np.asarray(positions, dtype=np.float32), tris


def _obj_index(field: str, count: int) -> int:
    """The 0-based vertex index of one face corner (``v``, ``v/t``, ``v//n``, ``v/t/n``; 1-based or
    negative).
    """
    value = int(field.split("/", 1)[0])
    if value == 0:
        raise ValueError("vertex index 0")
    return value - 1 if value > 0 else count + value


def vertex_normals(positions: np.ndarray, triangles: np.ndarray) -> np.ndarray:
    """Per-vertex normals ((N, 3) float32): the normalized sum of the unit normals of the faces
    around each vertex (faces of zero area add nothing; a vertex in none gets a zero normal)."""
    p = positions.astype(np.float64)
    a, b, c = (p[triangles[:, k]] for k in range(3))
    face = np.cross(b - a, c - a)
    length = np.linalg.norm(face, axis=1, keepdims=True)
    face = np.divide(face, length, out=np.zeros_like(face), where=length > 0)
    summed = np.zeros_like(p)
    for k in range(3):
        np.add.at(summed, triangles[:, k], face)
    length = np.linalg.norm(summed, axis=1, keepdims=True)
    normals: np.ndarray = np.divide(summed, length, out=np.zeros_like(summed), where=length > 0)
    return normals.astype(np.float32)


class Glmark2Build(Scene):
    """glmark2's ``build`` scene on a model file, per-vertex lit, as a katra3d user scene.

    ``model``: the OBJ file to draw (default: glmark2-data's installed bunny).
    ``self.vertices``: vertices drawn a frame (three per triangle).
    """

    name = "glmark2-build"
    description = "glmark2's build scene: a model file, flat vertex list, per-vertex diffuse light"
    stresses = ("vertex",)
    params: ClassVar[Mapping[str, Param]] = {
        "model": Param(GLMARK2_BUNNY, str, help="Wavefront OBJ file to draw (read at run time)"),
    }

    def setup(self, ctx: Any, size: tuple[int, int], params: Mapping[str, Any]) -> None:
        self.check_requirements(ctx)
        self.bind_target(ctx, size)
        self.ctx = ctx
        positions, triangles = read_obj(Path(str(params["model"])))
        normals = vertex_normals(positions, triangles)
        flat = triangles.reshape(-1)
        self.vertices = len(flat)
        self.program = self.own(
            compile_program(
                ctx, self.name, vertex_shader=VERTEX_SHADER, fragment_shader=FRAGMENT_SHADER
            )
        )
        pos_buffer = self.own(ctx.buffer(np.ascontiguousarray(positions[flat]).tobytes()))
        normal_buffer = self.own(ctx.buffer(np.ascontiguousarray(normals[flat]).tobytes()))
        self.vao = self.own(
            ctx.vertex_array(
                self.program, [(pos_buffer, "3f", "position"), (normal_buffer, "3f", "normal")]
            )
        )
        low, high = (
            positions.min(axis=0).astype(np.float64),
            positions.max(axis=0).astype(np.float64),
        )
        centre = (low + high) / 2.0
        diameter = float(np.linalg.norm(high - low))
        radius = diameter / 2.0
        fovy_deg = math.degrees(2.0 * math.atan(radius / (2.0 + radius)))
        self.projection = perspective(fovy_deg, size[0] / size[1], 2.0, 2.0 + diameter)
        self.placement = translation(
            -float(centre[0]), -float(centre[1]), -(float(centre[2]) + 2.0 + radius)
        )
        self.mvp = self.program["mvp"]
        self.normal_matrix = self.program["normal_matrix"]

    def render(self, frame: Frame) -> None:
        ctx = self.ctx
        with frame.zone("draw"):
            self.target.use()
            self.target.clear(0.0, 0.0, 0.0, 1.0, depth=1.0)
            ctx.enable(ctx.DEPTH_TEST | ctx.CULL_FACE)
            ctx.depth_func = "<="
            ctx.front_face = "ccw"
            ctx.cull_face = "back"
            model_view = self.placement @ rotation(
                (0.0, 1.0, 0.0), math.radians(ROTATION_DEG_PER_S * frame.time_s)
            )
            self.mvp.write(mat_bytes(self.projection @ model_view))
            self.normal_matrix.write(mat_bytes(np.linalg.inv(model_view).T))
            self.vao.render()
            ctx.disable(ctx.DEPTH_TEST | ctx.CULL_FACE)


__all__ = ["GLMARK2_BUNNY", "Glmark2Build", "read_obj", "vertex_normals"]
