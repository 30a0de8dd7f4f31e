"""The image verdict on real llvmpipe renders of every built-in scene (the ci suite's scenes, at
64x64): another vector width (LP_NATIVE_VECTOR_WIDTH 128 vs 256, a stand-in for another device) is
never *changed*; the frame moved by one pixel, or its colours moved by 0.02 (5 of 255 levels),
always is."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import numpy as np
import pytest

from katra3d.scenes.suites import get_suite
from katra_trace.analysis.images import image_verdict
from katra_trace.io.images import load_png
from tests.cli_helpers import katra

pytestmark = [pytest.mark.gl, pytest.mark.slow]


def shifted(pixels: np.ndarray) -> np.ndarray:
    """The frame moved one pixel to the right (the left column wraps round)."""
    return np.ascontiguousarray(np.roll(pixels, 1, axis=1))


def recoloured(pixels: np.ndarray) -> np.ndarray:
    """Every colour channel raised by 5 of 255 levels (0.02), clipped at white; alpha kept."""
    out = pixels.astype(np.int16)
    out[..., :3] += 5
    return np.clip(out, 0, 255).astype(np.uint8)


@pytest.fixture(scope="module")
def renders(tmp_path_factory: pytest.TempPathFactory) -> dict[int, Path]:
    """The ci suite's last frames at 64x64, rendered with each vector width: {width: screenshot
    dir}.
    """
    root = tmp_path_factory.mktemp("renders")
    out = {}
    for width in (128, 256):
        shots = root / f"vw{width}"
        shots.mkdir()
        r = katra(
            "run",
            "--suite",
            "ci",
            "--frames",
            "1",
            "--warmup",
            "1",
            "--size",
            "64x64",
            "--quiet",
            "--screenshot",
            str(shots),
            "-o",
            str(root / f"{width}.katra"),
            env={"LP_NATIVE_VECTOR_WIDTH": str(width)},
            timeout=600,
        )
        assert r.returncode == 0, r.stdout + r.stderr
        out[width] = shots
    return out


def _frames(renders: dict[int, Path]) -> list[tuple[str, np.ndarray, np.ndarray]]:
    names = get_suite("ci").scene_names()
    frames = [
        (name, load_png(renders[128] / f"{name}.png"), load_png(renders[256] / f"{name}.png"))
        for name in names
        if (renders[128] / f"{name}.png").exists()
    ]
    # compute may skip
    assert len(frames) >= len(names) - 1, sorted(p.name for p in renders[128].iterdir())
    return frames


def test_another_vector_width_is_never_changed(renders: dict[int, Path]) -> None:
    verdicts: dict[str, Any] = {name: image_verdict(a, b) for name, a, b in _frames(renders)}
    assert all(v.verdict in ("identical", "within_tolerance") for v in verdicts.values()), {
        k: v.line for k, v in verdicts.items()
    }


def test_a_one_pixel_shift_and_a_colour_step_are_changed(renders: dict[int, Path]) -> None:
    for name, frame, _ in _frames(renders):
        for what, new in (("1-px shift", shifted(frame)), ("colour +0.02", recoloured(frame))):
            v = image_verdict(frame, new)
            assert v.verdict == "changed", f"{name}, {what}: {v.line}"
            assert v.flip_mean > 0 and not v.checksum_only


_MOVABLE = '''
import numpy as np
from katra3d import Param, Scene


class Movable(Scene):
    """A shaded triangle whose geometry moves by ``dx`` pixels, its colour constant by ``tint``."""

    name = "movable"
    params = {"dx": Param(0, type=int), "tint": Param(0.0, type=float)}

    def setup(self, ctx, size, params):
        self.target = self.bind_target(ctx, size)
        self.prog = ctx.program(
            vertex_shader="#version 330\\nin vec2 p; out vec2 v; uniform float off;"
            "void main(){ v = p; gl_Position = vec4(p.x + off, p.y, 0, 1); }",
            fragment_shader="#version 330\\nin vec2 v; out vec4 c; uniform float tint;"
            "void main(){ c = vec4(vec3(0.55, 0.35, 0.2) + tint + 0.3 * v.xyx, 1); }",
        )
        self.prog["off"].value = 2.0 * params["dx"] / size[0]
        self.prog["tint"].value = params["tint"]
        vbo = ctx.buffer(np.array([-0.7, -0.6, 0.65, -0.5, -0.1, 0.7], dtype="f4"))
        self.vao = ctx.vertex_array(self.prog, [(vbo, "2f", "p")])

    def render(self, frame):
        self.target.use()
        self.target.clear(0.1, 0.1, 0.12, 1.0)
        self.vao.render()
'''


def test_moved_geometry_and_a_moved_colour_constant_rendered_for_real_are_changed(
    tmp_path: Path,
) -> None:
    """The same checks on real renders: the scene's geometry moved by one pixel, and its colour
    constant moved by 0.02 (about 5 of 255 levels), each rendered by llvmpipe, are *changed*; the
    same params render *identical*."""
    (tmp_path / "movable.py").write_text(_MOVABLE, encoding="utf-8")
    frames = {}
    for label, params in (
        ("base", ()),
        ("again", ()),
        ("moved", ("--param", "dx=1")),
        ("tinted", ("--param", "tint=0.02")),
    ):
        r = katra(
            "run",
            "movable.py:Movable",
            *params,
            "--frames",
            "1",
            "--warmup",
            "1",
            "--size",
            "96x64",
            "--quiet",
            "--screenshot",
            label,
            "-o",
            f"{label}.katra",
            cwd=tmp_path,
            timeout=300,
        )
        assert r.returncode == 0, r.stdout + r.stderr
        frames[label] = load_png(tmp_path / label / "movable.png")
    assert image_verdict(frames["base"], frames["again"]).verdict == "identical"
    for what in ("moved", "tinted"):
        v = image_verdict(frames["base"], frames[what])
        print(f"{what}: {v.line}")  # shown with -s: docs/images.md quotes these figures
        assert v.verdict == "changed", f"{what}: {v.line}"
