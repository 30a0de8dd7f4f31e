"""Shader compilation whose GLSL errors name the scene, the stage and the driver's log."""

from __future__ import annotations

import re
from typing import Any

import moderngl

from katra_trace.errors import SceneError

_STAGES = {
    "vertex_shader": "vertex",
    "fragment_shader": "fragment",
    "geometry_shader": "geometry",
    "tess_control_shader": "tess_control",
    "tess_evaluation_shader": "tess_evaluation",
    "compute_shader": "compute",
}


class ShaderCompileError(SceneError):
    """A shader failed to compile (``stage``) or link (``link``); ``log``: the driver's."""

    def __init__(self, scene_name: str, stage: str, log: str) -> None:
        self.scene_name = scene_name
        self.stage = stage
        self.log = log.strip()
        one_line = " | ".join(line.strip() for line in self.log.splitlines() if line.strip())
        what = "shaders failed to link" if stage == "link" else f"{stage} shader failed to compile"
        super().__init__(f"scene '{scene_name}': {what}: {one_line or '(empty GLSL log)'}")


def _parse_moderngl_error(text: str, default_stage: str) -> tuple[str, str]:
    """Split moderngl's "GLSL Compiler failed\\n\\n<stage>\\n====\\n<log>" into (stage, log)."""
    if text.startswith("GLSL Linker failed"):
        return "link", text[len("GLSL Linker failed") :]
    match = re.search(r"^(\w+_shader)\n=+\n", text, flags=re.MULTILINE)
    if match:
        return _STAGES.get(match.group(1), match.group(1)), text[match.end() :]
    return default_stage, text


def compile_program(
    ctx: Any,
    scene_name: str,
    *,
    vertex_shader: str,
    fragment_shader: str | None = None,
    geometry_shader: str | None = None,
    varyings: tuple[str, ...] = (),
) -> moderngl.Program:
    """Raises :class:`ShaderCompileError`."""
    try:
        return ctx.program(
            vertex_shader=vertex_shader,
            fragment_shader=fragment_shader,
            geometry_shader=geometry_shader,
            varyings=varyings,
        )
    except moderngl.Error as exc:
        stage, log = _parse_moderngl_error(str(exc), "vertex")
        raise ShaderCompileError(scene_name, stage, log) from None


def compile_compute(ctx: Any, scene_name: str, source: str) -> moderngl.ComputeShader:
    """Raises :class:`ShaderCompileError`."""
    try:
        return ctx.compute_shader(source)
    except moderngl.Error as exc:
        _, log = _parse_moderngl_error(str(exc), "compute")
        raise ShaderCompileError(scene_name, "compute", log) from None


__all__ = ["ShaderCompileError", "compile_compute", "compile_program"]
