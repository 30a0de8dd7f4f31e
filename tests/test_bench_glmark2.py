"""The glmark2 parity bench (bench/glmark2.py) and its user scene (bench/_glmark2_scene.py).

The scene is drawn from a tiny model in glmark2's model format (Wavefront OBJ)
that the tests write themselves: glmark2-data's bunny is GPL and never copied
here. Nothing asserts on a time or a ratio's value.
"""

from __future__ import annotations

import json
import math
import re
import subprocess
import sys
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from bench import at_least, at_most
from bench._core import BenchContext
from bench._glmark2_scene import Glmark2Build, read_obj, vertex_normals
from bench.glmark2 import (
    APT_LINE,
    APT_PACKAGES,
    Glmark2Tools,
    find_tools,
    glmark2_frames,
    glmark2_parity,
    katra_frames,
    xvfb_display,
)
from katra3d.harness.run.offscreen import run_offscreen
from katra_trace.errors import SceneError

REPO = Path(__file__).resolve().parent.parent


def octahedron_obj() -> str:
    """A closed octahedron (6 vertices, 8 faces wound counter-clockwise seen from outside) as OBJ
    text.
    """
    lines = ["# a test model", "v 1 0 0", "v -1 0 0", "v 0 1 0", "v 0 -1 0", "v 0 0 1", "v 0 0 -1"]
    for sx in (1, -1):
        for sy in (1, -1):
            for sz in (1, -1):
                x, y, z = (1 if sx > 0 else 2), (3 if sy > 0 else 4), (5 if sz > 0 else 6)
                lines.append(f"f {x} {y} {z}" if sx * sy * sz > 0 else f"f {x} {z} {y}")
    return "\n".join(lines) + "\n"


@pytest.fixture
def model(tmp_path: Path) -> Path:
    path = tmp_path / "models" / "bunny.obj"
    path.parent.mkdir()
    path.write_text(octahedron_obj(), encoding="utf-8")
    return path


# --------------------------------------------------------------------------- the model file


def test_read_obj_reads_every_index_form_and_fans_polygons(tmp_path: Path) -> None:
    path = tmp_path / "m.obj"
    path.write_text(
        "o thing\nv 0 0 0\nv 1 0 0\nv 1 1 0\nv 0 1 0\nvn 0 0 1\nvt 0 0\n"
        "f 1/1/1 2//1 3/1\nf -4 -2 -1\nf 1 2 3 4\n",
        encoding="utf-8",
    )
    positions, triangles = read_obj(path)
    assert positions.shape == (4, 3) and positions.dtype == np.float32
    # the quad becomes a fan: (1 2 3) and (1 3 4), 0-based
    assert triangles.tolist() == [[0, 1, 2], [0, 2, 3], [0, 1, 2], [0, 2, 3]]


@pytest.mark.parametrize(
    "text, says",
    [
        ("v 0 0 0\nv 1 0 0\nf 1 2\n", "three corners"),
        ("v 0 0 0\nv 1 0 0\nv 1 1 0\nf 1 2 9\n", "does not define"),
        ("v 0 0 zero\n", ":1:"),
        ("v 0 0 0\n", "no faces"),
    ],
)
def test_read_obj_refuses_what_is_not_a_model(tmp_path: Path, text: str, says: str) -> None:
    path = tmp_path / "bad.obj"
    path.write_text(text, encoding="utf-8")
    with pytest.raises(SceneError, match=re.escape(says)):
        read_obj(path)


def test_read_obj_names_a_missing_file(tmp_path: Path) -> None:
    with pytest.raises(SceneError, match="cannot read the model"):
        read_obj(tmp_path / "none.obj")


def test_vertex_normals_are_the_normalized_sum_of_the_face_normals(model: Path) -> None:
    positions, triangles = read_obj(model)
    normals = vertex_normals(positions, triangles)
    # every corner of the octahedron is surrounded symmetrically: its normal points straight out
    np.testing.assert_allclose(normals, positions, atol=1e-6)
    # faces are wound counter-clockwise seen from outside: each face's normal points away from the
    # centre
    a, b, c = (positions[triangles[:, k]] for k in range(3))
    assert (np.einsum("ij,ij->i", np.cross(b - a, c - a), a + b + c) > 0).all()


# --------------------------------------------------------------------------- the scene


@pytest.mark.gl
def test_scene_draws_the_model_flat_and_lit_from_the_upper_right(gl_ctx: Any, model: Path) -> None:
    size = (64, 48)
    fbo = gl_ctx.simple_framebuffer(size, components=4)
    fbo.use()
    scene = Glmark2Build()
    try:
        scene.setup(gl_ctx, size, {"model": str(model)})
        assert scene.vertices == 3 * 8  # a flat list: three vertices per face, no index buffer
    finally:
        scene.release()
        fbo.release()
        gl_ctx.detect_framebuffer(0).use()
    first = run_offscreen(gl_ctx, Glmark2Build, size, {"model": str(model)}, frames=1)
    again = run_offscreen(gl_ctx, Glmark2Build, size, {"model": str(model)}, frames=1)
    assert first.checksum == again.checksum
    px = first.pixels.astype(np.int64)
    # white material: grey
    assert (px[..., 0] == px[..., 1]).all() and (px[..., 1] == px[..., 2]).all()
    # cleared to black
    assert px[0, 0, :3].tolist() == [0, 0, 0] and px[-1, -1, :3].tolist() == [0, 0, 0]
    assert px[24, 32, 0] > 0  # the model covers the centre
    h, w = size[1], size[0]
    upper_right = px[: h // 2, w // 2 :, 0].mean()
    lower_left = px[h // 2 :, : w // 2, 0].mean()
    assert upper_right > lower_left  # the light comes from (20, 20, 10): up, right, towards the eye
    # turning: 36 degrees a second of scene time, so a later frame shows another image
    later = run_offscreen(gl_ctx, Glmark2Build, size, {"model": str(model)}, frames=1, warmup=30)
    assert later.checksum != first.checksum


@pytest.mark.gl
def test_katra_side_runs_the_user_scene_through_katra3d_run(tmp_path: Path, model: Path) -> None:
    tools = Glmark2Tools("glmark2", "Xvfb", model.parent.parent)
    assert tools.model == model
    out = tmp_path / "side.katra"
    got = katra_frames(tools, 3, out, reference_every=1)
    assert not out.exists()  # read, then removed
    assert got.frame_s > 0 and got.reported_s > 0 and got.cpu_s > 0 and got.submit_s > 0
    assert got.finish_s >= 0 and got.between_s >= 0
    assert got.submit_s < 3 * got.frame_s  # a part of one frame, not of the run


# --------------------------------------------------------------------------- skipped without
# glmark2


def test_without_glmark2_on_path_the_row_is_skipped_with_the_apt_line(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("PATH", str(tmp_path))
    reason = find_tools()
    assert isinstance(reason, str)
    assert reason.startswith("skipped:") and "glmark2" in reason and reason.endswith(APT_LINE)
    assert "\n" not in reason
    logged: list[str] = []
    rows = glmark2_parity(BenchContext("glmark2", tmp_path, quick=True, log=logged.append))
    assert len(rows) == 1 and math.isnan(rows[0].value) and rows[0].status == "info"
    assert rows[0].notes == reason and logged == [f"glmark2: {reason}"]


def test_bench_runner_prints_the_skip_notice(tmp_path: Path) -> None:
    done = subprocess.run(
        [sys.executable, "-m", "bench", "--quick", "glmark2", "--out", str(tmp_path / "r.json")],
        cwd=REPO,
        env={"PATH": str(tmp_path)},
        capture_output=True,
        text=True,
        timeout=300,
        check=False,
    )
    assert done.returncode == 0, done.stderr
    assert "Traceback" not in done.stderr
    notice = [line for line in done.stderr.splitlines() if "skipped" in line]
    assert len(notice) == 1 and "no glmark2" in notice[0] and notice[0].endswith(APT_LINE)
    assert "skipped: no glmark2" in done.stdout
    (row,) = json.loads((tmp_path / "r.json").read_text(encoding="utf-8"))["rows"]
    assert row["bench"] == "glmark2" and row["status"] == "info" and row["value"] is None
    assert row["notes"].endswith(APT_LINE)


def test_system_deps_bench_part_installs_the_same_packages() -> None:
    script = (REPO / "ci" / "system-deps.sh").read_text(encoding="utf-8")
    found = re.search(r'^bench_packages="([^"]*)"', script, flags=re.MULTILINE)
    assert found is not None, "ci/system-deps.sh has no bench_packages line"
    assert tuple(found.group(1).split()) == APT_PACKAGES
    makefile = (REPO / "Makefile").read_text(encoding="utf-8")
    assert re.search(r"^bench: sysdeps-bench ", makefile, flags=re.MULTILINE)


# --------------------------------------------------------------------------- glmark2 itself, where
# installed


@pytest.mark.gl
def test_glmark2_side_reads_glmark2s_own_frame_time() -> None:
    tools = find_tools()
    if isinstance(tools, str):
        pytest.skip(tools)
    with xvfb_display(tools.xvfb) as display:
        assert re.fullmatch(r":\d+", display)
        got = glmark2_frames(tools, display, 2)
    assert got.frame_s > 0 and got.cpu_s > 0


# --------------------------------------------------------------------------- the target's pass
# floor


def test_target_with_a_pass_floor() -> None:
    target = at_least(1.0, floor=0.98)
    assert (
        target.met(1.0) and target.met(0.98) and not target.met(0.979) and not target.met(math.nan)
    )
    assert str(target) == ">= 1 (pass >= 0.98)"
    assert target.as_dict() == {"op": ">=", "bound": 1.0, "pass_from": 0.98}
    ceiling = at_most(1.0, ceiling=1.02)
    assert ceiling.met(1.02) and not ceiling.met(1.021)
    assert at_least(0.5).as_dict() == {"op": ">=", "bound": 0.5} and str(at_least(0.5)) == ">= 0.5"
