"""Instruction profiles of real counted runs, on a scene no other test runs: where added shader
iterations and added Python loop steps land, identical runs' zero deltas, and the callgrind export
read by callgrind_annotate."""

from __future__ import annotations

import json
import shutil
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

from katra_trace.io.reader import open_trace
from katra_trace.profile.diff import profile_deltas
from katra_trace.profile.groups import JIT, PYTHON
from katra_trace.schema import Clock, Kind
from tests.cli_helpers import katra

# valgrind under llvmpipe: each counted run takes seconds
pytestmark = [pytest.mark.gl, pytest.mark.slow]

SCENE = '''
import moderngl
import numpy as np
from katra3d import Param, Scene, compile_program

VS = """#version 330
in vec2 pos;
void main() { gl_Position = vec4(pos, 0.0, 1.0); }
"""
FS = """#version 330
uniform int loops;
out vec4 colour;
void main() {
    vec2 p = gl_FragCoord.xy * 0.01;
    float a = 0.0;
    for (int i = 0; i < loops; ++i) {
        p = vec2(p.x * p.x - p.y * p.y, 2.0 * p.x * p.y) * 0.5 + 0.1;
        a += p.x;
    }
    colour = vec4(fract(a), p, 1.0);
}
"""


class Ripple(Scene):
    name = "ripple"
    description = "a shader loop and a Python loop, each its own zone"
    stresses = ("fragment",)
    params = {
        "loops": Param(40, int, 1, 1000, "shader loop iterations a pixel"),
        "steps": Param(1000, int, 0, 1000000, "Python loop steps a frame"),
    }

    def setup(self, ctx, size, params):
        self.bind_target(ctx, size)
        self.prog = compile_program(ctx, self.name, vertex_shader=VS, fragment_shader=FS)
        self.prog["loops"].value = params["loops"]
        self.steps = params["steps"]
        self.vbo = ctx.buffer(np.array([-1, -1, 3, -1, -1, 3], dtype="f4").tobytes())
        self.vao = ctx.vertex_array(self.prog, [(self.vbo, "2f", "pos")])

    def render(self, frame):
        with frame.zone("python"):
            s = 0
            for i in range(self.steps):
                s += i
        with frame.zone("shade"):
            self.target.use()
            self.vao.render(moderngl.TRIANGLES)

    def release(self):
        self.vao.release()
        self.vbo.release()
        self.prog.release()
        self.release_target()
'''

#: Each run's params; the output names have one length, so no run's process image is longer.
RUNS = {
    "A1": ("loops=40", "steps=1000"),
    "A2": ("loops=40", "steps=1000"),
    "SH": ("loops=60", "steps=1000"),
    "PY": ("loops=40", "steps=21000"),
}


@pytest.fixture(scope="module")
def runs(tmp_path_factory: pytest.TempPathFactory) -> Iterator[dict[str, Path]]:
    if shutil.which("valgrind") is None:
        pytest.skip("valgrind is not installed (ci/system-deps.sh test installs it)")
    base = tmp_path_factory.mktemp("profile")
    scene = base / "ripple.py"
    scene.write_text(SCENE)
    procs = {}
    for name, params in RUNS.items():
        args = ["run", f"{scene}:Ripple", "--measure", "instructions", "--frames", "3"]
        args += ["--warmup", "1", "--size", "16x16", "--zones", "--quiet"]
        args += ["-o", str(base / f"{name}.katra")]
        for p in params:
            args += ["--param", p]
        procs[name] = subprocess.Popen(
            [sys.executable, "-m", "katra3d", *args],
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
        )
    for name, proc in procs.items():
        _, err = proc.communicate(timeout=900)
        assert proc.returncode == 0, f"{name}: {err}"
    yield {name: base / f"{name}.katra" for name in RUNS}


def _deltas(runs: dict[str, Path], base: str, new: str) -> dict[tuple[str, str | None], object]:
    deltas = profile_deltas([open_trace(runs[base])], [open_trace(runs[new])])
    return {(d.scene, d.zone): d for d in deltas}


def _group_share(d: object, group: str) -> float:
    rows = d.rows  # type: ignore[attr-defined]
    total = sum(r.delta for r in rows)
    return sum(r.delta for r in rows if r.group == group) / total


def test_half_again_the_shader_loop_lands_in_shader_code(runs: dict[str, Path]) -> None:
    d = _deltas(runs, "A1", "SH")[("ripple", None)]
    assert d.delta > 0 and _group_share(d, JIT) >= 0.8


def test_twenty_thousand_python_steps_land_in_python(runs: dict[str, Path]) -> None:
    deltas = _deltas(runs, "A1", "PY")
    d = deltas[("ripple", None)]
    assert d.delta > 20_000 * 10 and _group_share(d, PYTHON) >= 0.8
    # the zone that ran them holds them
    assert _group_share(deltas[("ripple", "python")], PYTHON) >= 0.8


def test_identical_runs_give_every_delta_zero(runs: dict[str, Path]) -> None:
    res = katra("compare", runs["A1"], runs["A2"], "--profile", "--format", "json")
    assert res.returncode == 0, res.stderr
    scene = json.loads(res.stdout)["scenes"]["ripple"]
    rows = [
        *scene["profile_delta"],
        *(r for z in scene["zones"].values() for r in z["profile_delta"]),
    ]
    assert rows and all(r["delta"] == 0 for r in rows)
    assert set(rows[0]) == {"group", "object", "function", "base", "new", "delta"}
    # the profile's functions add up to the frames' counts
    trace = open_trace(runs["A1"])
    ev = trace.events
    frames = ev["dur_ns"][(ev["kind"] == Kind.FRAME) & (ev["clock"] == Clock.INSTRUCTIONS)]
    assert sum(r["base"] for r in scene["profile_delta"]) == pytest.approx(frames.mean())


def test_compare_profile_table_and_flame_graph(runs: dict[str, Path], tmp_path: Path) -> None:
    fg = tmp_path / "fg"
    res = katra(
        "compare",
        runs["A1"],
        runs["SH"],
        "--allow-param-mismatch",
        "--images",
        "off",
        "--profile",
        "--profile-out",
        fg,
    )
    assert res.returncode in (0, 1), res.stderr
    assert "profile ripple:" in res.stdout and JIT in res.stdout
    svg = (fg / "ripple.profile.svg").read_text()
    assert svg.startswith("<svg") and JIT in svg


def test_the_callgrind_export_reads_in_callgrind_annotate(
    runs: dict[str, Path], tmp_path: Path
) -> None:
    out = tmp_path / "ripple.callgrind"
    res = katra("export", runs["A1"], "--to", "callgrind", "--scene", "ripple", "-o", out)
    assert res.returncode == 0, res.stderr
    ann = subprocess.run(
        ["callgrind_annotate", str(out)], capture_output=True, text=True, check=True
    )
    assert "PROGRAM TOTALS" in ann.stdout and "ripple:" in ann.stdout
    assert "WARNING" not in ann.stderr and "uninitialized" not in ann.stderr
    again = katra("export", runs["A1"], "--to", "callgrind", "-o", out)
    assert again.returncode == 2  # an existing file is kept
