"""The image verdict on real llvmpipe renders of every built-in scene (the ci suite's scenes, at 64x64):
another vector width (LP_NATIVE_VECTOR_WIDTH 128 vs 256, a stand-in for another device) is never
*changed*; the frame moved by one pixel, or its colours moved by 0.02 (5 of 255 levels), always is."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from katra_trace.analysis.images import image_verdict
from katra_trace.io.images import load_png
from scenes.suites import get_suite

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
    """The ci suite's last frames at 64x64, rendered with each vector width: {width: screenshot dir}."""
    root = tmp_path_factory.mktemp("renders")
    out = {}
    for width in (128, 256):
        shots = root / f"vw{width}"
        shots.mkdir()
        env = dict(os.environ, LP_NATIVE_VECTOR_WIDTH=str(width))
        env.pop("KATRA3D_BACKEND", None)
        r = subprocess.run([sys.executable, "-m", "harness", "run", "--suite", "ci", "--frames", "1", "--warmup", "1",
                            "--size", "64x64", "--quiet", "--screenshot", str(shots), "-o", str(root / f"{width}.katra")],
                           env=env, capture_output=True, text=True, timeout=600)
        assert r.returncode == 0, r.stdout + r.stderr
        out[width] = shots
    return out


def _frames(renders: dict[int, Path]) -> list[tuple[str, np.ndarray, np.ndarray]]:
    names = get_suite("ci").scene_names()
    frames = [(name, load_png(renders[128] / f"{name}.png"), load_png(renders[256] / f"{name}.png"))
              for name in names if (renders[128] / f"{name}.png").exists()]
    assert len(frames) >= len(names) - 1, sorted(p.name for p in renders[128].iterdir())  # compute may skip
    return frames


def test_another_vector_width_is_never_changed(renders: dict[int, Path]) -> None:
    verdicts: dict[str, Any] = {name: image_verdict(a, b) for name, a, b in _frames(renders)}
    assert all(v.verdict in ("identical", "within_tolerance") for v in verdicts.values()), \
        {k: v.line for k, v in verdicts.items()}


def test_a_one_pixel_shift_and_a_colour_step_are_changed(renders: dict[int, Path]) -> None:
    for name, frame, _ in _frames(renders):
        for what, new in (("1-px shift", shifted(frame)), ("colour +0.02", recoloured(frame))):
            v = image_verdict(frame, new)
            assert v.verdict == "changed", f"{name}, {what}: {v.line}"
            assert v.flip_mean > 0 and not v.checksum_only
