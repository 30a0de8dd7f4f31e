"""``katra3d compare`` / ``ab`` on real llvmpipe captures of the fillrate scene.

Robustness: the same-scene check runs 6 interleaved rounds a side, so the
verdict rests on a run-level exact rank test (a false regression needs all
6 NEW runs slower than all 6 BASE runs *and* by >= 5%); the slowdown check
uses a ~3x work difference (2 vs 16 blended layers), far beyond any
run-to-run noise, so it holds even with one run a side.
"""

from __future__ import annotations

import json
import shlex
import sys
from pathlib import Path

import pytest

pytestmark = pytest.mark.gl

SIZE = "96x96"


def _run_cmd(layers: int, out: str, size: str = SIZE, frames: int = 40) -> list[str]:
    return ["run", "fillrate", "--frames", str(frames), "--warmup", "3", "--size", size,
            "--param", f"fillrate.layers={layers}", "--quiet", "-o", out]


def test_same_scene_interleaved_is_not_a_regression(tmp_path: Path, katra_cli, gl_ctx) -> None:
    cmd = " ".join(shlex.quote(a) for a in [sys.executable, "-m", "harness", *_run_cmd(4, "{out}")])
    cmd = cmd.replace(shlex.quote("{out}"), "{out}")
    r = katra_cli("ab", "--base", cmd, "--new", cmd, "--rounds", "6", "-o", str(tmp_path / "ab"),
                  "--format", "json", timeout=300)
    assert r.returncode == 0, r.stdout + r.stderr
    scene = json.loads(r.stdout)["scenes"]["fillrate"]
    assert scene["unit"] == "runs" and scene["runs_base"] == 6 and scene["runs_new"] == 6
    assert scene["verdict"] in ("unchanged", "inconclusive")


def test_more_work_is_a_regression(tmp_path: Path, katra_cli, gl_ctx) -> None:
    base, new = str(tmp_path / "base.katra"), str(tmp_path / "new.katra")
    assert katra_cli(*_run_cmd(2, base)).returncode == 0
    assert katra_cli(*_run_cmd(16, new)).returncode == 0
    r = katra_cli("compare", base, new, "--format", "json")
    assert r.returncode == 2  # different params are incomparable unless asked for
    r = katra_cli("compare", base, new, "--allow-param-mismatch", "--format", "json")
    assert r.returncode == 1, r.stdout + r.stderr
    scene = json.loads(r.stdout)["scenes"]["fillrate"]
    assert scene["verdict"] == "regression" and scene["ratio"] > 1.3
    # and the reverse direction is an improvement, exit 0
    r = katra_cli("compare", new, base, "--allow-param-mismatch", "--format", "json")
    assert r.returncode == 0 and json.loads(r.stdout)["scenes"]["fillrate"]["verdict"] == "improvement"


def test_different_sizes_are_incomparable(tmp_path: Path, katra_cli, gl_ctx) -> None:
    a, b = str(tmp_path / "a.katra"), str(tmp_path / "b.katra")
    assert katra_cli(*_run_cmd(2, a, size="64x64", frames=20)).returncode == 0
    assert katra_cli(*_run_cmd(2, b, size="96x64", frames=20)).returncode == 0
    r = katra_cli("compare", a, b)
    assert r.returncode == 2
    assert "different size: BASE 64x64 vs NEW 96x64" in r.stdout
    r = katra_cli("stats", a, "--format", "json")
    assert json.loads(r.stdout)["scenes"]["fillrate"]["metrics"]["wall"]["n"] == 20
