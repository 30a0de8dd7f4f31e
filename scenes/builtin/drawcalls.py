"""``drawcalls``: many small objects, each its own draw call with its own uniforms."""

from __future__ import annotations

import math
from collections.abc import Mapping
from typing import ClassVar

import numpy as np

from katra3d.scenes.api import Frame, Param
from katra3d.scenes.builtin._common import LIT_FRAGMENT, BuiltinScene, cube, look_at, perspective
from katra3d.scenes.builtin.geometry import LIT_VERTEX
from katra3d.scenes.shaders import compile_program


class DrawCallsScene(BuiltinScene):
    """``count`` tiny cubes, each its own draw and uniforms."""

    name = "drawcalls"
    description = "N small objects drawn one call each, with per-object uniforms: per-draw overhead"
    stresses = ("draw-calls", "state-changes", "cpu")
    params: ClassVar[Mapping[str, Param]] = {
        "count": Param(1000, int, 1, 20000, "objects (= draw calls per frame)"),
    }

    def build(self) -> None:
        ctx = self.ctx
        count = int(self.p["count"])
        self.program = self.own(
            compile_program(ctx, self.name, vertex_shader=LIT_VERTEX, fragment_shader=LIT_FRAGMENT)
        )
        self.vao = self.mesh_vao(self.program, *cube())
        side = math.ceil(math.sqrt(count * self.aspect))
        rows = math.ceil(count / side)
        ids = np.arange(count)
        spacing = 2.6
        self.positions = np.stack(
            [
                (ids % side - (side - 1) / 2) * spacing,
                (ids // side - (rows - 1) / 2) * spacing,
                np.zeros(count),
            ],
            axis=1,
        ).astype(np.float32)
        extent = max(side * spacing / self.aspect, rows * spacing) / 2
        dist = extent / math.tan(math.radians(22.5)) + 2.0
        eye = (0.0, 0.0, dist)
        self.view_proj = perspective(45.0, self.aspect, 0.5, dist + 10.0) @ look_at(eye, (0, 0, 0))
        golden = (ids * 0.618034) % 1.0
        self.colors = np.stack(
            [0.5 + 0.5 * np.cos(6.283 * (golden + k / 3)) for k in range(3)], axis=1
        ).astype(np.float32)
        self.phases = (ids * 0.37) % (2 * math.pi)
        self.program["u_eye"].value = eye
        self.program["u_light_dir"].value = (-0.3, -0.5, -1.0)
        self.u_model = self.program["u_model"]
        self.u_mvp = self.program["u_mvp"]
        self.u_color = self.program["u_color"]

    def _models(self, t: float) -> np.ndarray:
        """(count, 4, 4): each cube spins about its own tilted axis."""
        angle = t * 1.5 + self.phases
        c, s = np.cos(angle), np.sin(angle)
        n = len(angle)
        m = np.zeros((n, 4, 4), dtype=np.float32)
        ct, st = math.cos(0.5), math.sin(0.5)
        m[:, 0, 0], m[:, 0, 2] = c, s
        m[:, 1, 0], m[:, 1, 1], m[:, 1, 2] = st * s, ct, -st * c
        m[:, 2, 0], m[:, 2, 1], m[:, 2, 2] = -ct * s, st, ct * c
        m[:, :3, 3] = self.positions
        m[:, 3, 3] = 1.0
        return m

    def render(self, frame: Frame) -> None:
        ctx = self.ctx
        with frame.zone("clear"):
            self.target.use()
            self.target.clear(0.1, 0.1, 0.12, 1.0, depth=1.0)
        with frame.zone("draws"):
            ctx.enable(ctx.DEPTH_TEST | ctx.CULL_FACE)
            ctx.disable(ctx.BLEND)
            models = self._models(frame.time_s)
            mvps = np.matmul(self.view_proj[None], models)
            # column-major for GLSL, transposed in bulk
            models_gl = np.ascontiguousarray(models.transpose(0, 2, 1))
            mvps_gl = np.ascontiguousarray(mvps.transpose(0, 2, 1))
            for i in range(len(models)):
                self.u_model.write(models_gl[i])
                self.u_mvp.write(mvps_gl[i])
                self.u_color.write(self.colors[i])
                self.vao.render()
            ctx.disable(ctx.DEPTH_TEST | ctx.CULL_FACE)
