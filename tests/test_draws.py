"""``--zones draws`` on real llvmpipe: every draw a zone, named stably, nested, capped, and moderngl
left untouched outside frames."""

from __future__ import annotations

from collections import Counter
from pathlib import Path
from typing import Any

import moderngl
import numpy as np
import pytest

import katra3d
from katra3d.harness.engine import events, timers
from katra3d.harness.engine.draws import TARGETS, UNTIMED_NAME, DrawZones
from katra3d.harness.engine.frame import HarnessFrame, seed_key
from katra_trace import open_trace
from katra_trace.io.writer import TraceWriter
from katra_trace.schema import Clock, Kind
from tests.cli_helpers import katra

pytestmark = pytest.mark.gl


def _originals() -> dict[tuple[str, str], Any]:
    return {(cls, meth): getattr(moderngl, cls).__dict__[meth] for cls, meth, _ in TARGETS}


def _run(tmp_path: Path, *extra: str) -> Any:
    out = tmp_path / "d.katra"
    res = katra(
        "run",
        "drawcalls",
        "--param",
        "drawcalls.count=50",
        "--zones",
        "draws",
        "--frames",
        "4",
        "--warmup",
        "1",
        "--size",
        "32x32",
        "--quiet",
        "-o",
        str(out),
        *extra,
    )
    assert res.returncode == 0, res.stderr
    return open_trace(out)


def test_every_draw_is_a_zone_nested_in_its_pass_with_stable_names(tmp_path: Path) -> None:
    trace = _run(tmp_path)
    ev = trace.events
    wall = ev[(ev["clock"] == int(Clock.WALL)) & (ev["flags"] == 0)]
    names_per_frame = []
    for frame in wall[wall["kind"] == Kind.FRAME]:
        zones = wall[(wall["kind"] == Kind.ZONE) & (wall["frame"] == frame["frame"])]
        passes = zones[zones["depth"] == 1]
        draws = zones[zones["depth"] == 2]
        draw_names = [trace.name(int(n)) for n in draws["name"]]
        in_pass = [n for n in draw_names if n.startswith("draws/")]
        assert len(in_pass) == 50, Counter(n.split("#")[0] for n in draw_names)
        names_per_frame.append(sorted(draw_names))
        # sync timing: a draw's wall time lies inside its pass, the pass inside its frame
        assert draws["dur_ns"].sum() <= passes["dur_ns"].sum() <= frame["dur_ns"]
        for d in draws:
            parent = passes[
                (passes["start_ns"] <= d["start_ns"])
                & (passes["start_ns"] + passes["dur_ns"] >= d["start_ns"] + d["dur_ns"])
            ]
            assert len(parent) == 1, trace.name(int(d["name"]))
    assert len(names_per_frame) == 4
    assert all(names == names_per_frame[0] for names in names_per_frame)
    assert "draws/draw(in_normal,in_pos)#50" in names_per_frame[0]
    assert trace.header.capture_options.zones == "draws"
    assert moderngl.VertexArray.__dict__["render"] is _originals()[("VertexArray", "render")]


def test_the_cap_times_the_first_n_draws_and_counts_the_rest(tmp_path: Path) -> None:
    trace = _run(tmp_path, "--max-draw-zones", "10")
    ev = trace.events
    measured = ev[ev["flags"] == 0]
    draws = measured[
        (measured["kind"] == Kind.ZONE)
        & (measured["depth"] == 2)
        & (measured["clock"] == Clock.WALL)
    ]
    assert len(draws) == 4 * 10
    untimed = measured[
        (measured["kind"] == Kind.COUNTER) & (measured["name"] == trace.strings.index(UNTIMED_NAME))
    ]
    assert len(untimed) == 4 and set(untimed["value"]) == {41.0}  # 50 draws + 1 clear, 10 timed


def test_capture_in_draws_mode_leaves_moderngl_unpatched(gl_ctx: Any, tmp_path: Path) -> None:
    before = _originals()
    fbo = gl_ctx.simple_framebuffer((16, 16))
    prog = gl_ctx.program(
        vertex_shader=(
            "#version 330\nin vec2 in_pos; void main() { gl_Position = vec4(in_pos, 0, 1); }"
        ),
        fragment_shader="#version 330\nout vec4 c; void main() { c = vec4(1); }",
    )
    vbo = gl_ctx.buffer(np.array([-1, -1, 3, -1, -1, 3], dtype="f4").tobytes())
    vao = gl_ctx.vertex_array(prog, [(vbo, "2f", "in_pos")])
    try:
        with katra3d.capture(gl_ctx, tmp_path / "c.katra", zones="draws") as cap:
            for _ in range(3):
                with cap.frame():
                    assert (
                        moderngl.VertexArray.__dict__["render"]
                        is not before[("VertexArray", "render")]
                    )
                    fbo.use()
                    with cap.zone("main"):
                        fbo.clear()
                        vao.render()
                assert _originals() == before  # restored between frames
        assert _originals() == before  # and after the capture
        trace = open_trace(tmp_path / "c.katra")
        names = {trace.name(int(n)) for n in trace.events["name"]}
        assert {"main/clear#1", "main/draw(in_pos)#1"} <= names
    finally:
        for obj in (vao, vbo, prog, fbo):
            obj.release()
        gl_ctx.detect_framebuffer(0).use()


def test_gpu_ring_grows_without_blocking_for_many_draws(gl_ctx: Any, tmp_path: Path) -> None:
    """GpuTimer logic on llvmpipe (its timestamps are not draw times, but the ring is real)."""
    fbo = gl_ctx.simple_framebuffer((16, 16))
    fbo.use()
    with TraceWriter(tmp_path / "g.katra", workload="t") as writer:
        buf = events.EventBuffer(writer)
        timer = timers.GpuTimer(gl_ctx, writer, buf, zones=True, ring_queries=16)
        draws = DrawZones(gl_ctx, timer)
        timer.set_scene("s")
        for i in range(3):
            timer.begin_frame(i, 0)
            draws.install()
            frame = HarnessFrame(i, 0.0, seed_key(0, "s"), draws.pass_zone)
            with frame.zone("p"):
                for _ in range(40):
                    fbo.clear(0.1, 0.2, 0.3, 1.0)
            draws.uninstall()
            timer.end_frame()
        timer.drain()
        ring = len(timer._all_queries)
        timer.close()
    fbo.release()
    gl_ctx.detect_framebuffer(0).use()
    assert ring > 16  # grew past its preallocation: 2 queries per draw, 41 spans a frame
    ev = open_trace(tmp_path / "g.katra").events
    gpu_draws = ev[(ev["clock"] == Clock.GPU) & (ev["kind"] == Kind.ZONE) & (ev["depth"] == 2)]
    assert len(gpu_draws) == 3 * 40


def test_a_scene_failing_mid_frame_leaves_moderngl_unpatched(tmp_path: Path) -> None:
    from katra3d.harness.run.config import RunConfig
    from katra3d.harness.run.runner import run
    from katra_trace.errors import SceneError

    scene = tmp_path / "boom.py"
    scene.write_text(
        "from katra3d import Scene\n"
        "class Boom(Scene):\n"
        "    name = 'boom'\n"
        "    def setup(self, ctx, size, params):\n"
        "        self.bind_target(ctx, size)\n"
        "    def render(self, frame):\n"
        "        with frame.zone('p'):\n"
        "            self.target.clear()\n"
        "            raise RuntimeError('boom')\n"
    )
    before = _originals()
    with pytest.raises(SceneError, match="boom"):
        run(
            RunConfig(
                scenes=(f"{scene}:Boom",),
                frames=3,
                size=(16, 16),
                zones="draws",
                output=str(tmp_path / "b.katra"),
            ),
            quiet=True,
        )
    assert _originals() == before
    # it failed in its first warmup frame: no trace is left
    assert list(tmp_path.glob("b*.katra*")) == []


@pytest.mark.slow
def test_compare_says_when_the_draws_differ(tmp_path: Path) -> None:
    for name, count in (("a", 20), ("b", 22)):
        res = katra(
            "run",
            "drawcalls",
            "--param",
            f"drawcalls.count={count}",
            "--zones",
            "draws",
            "--frames",
            "5",
            "--size",
            "16x16",
            "--quiet",
            "-o",
            str(tmp_path / f"{name}.katra"),
        )
        assert res.returncode == 0, res.stderr
    res = katra(
        "compare", str(tmp_path / "a.katra"), str(tmp_path / "b.katra"), "--allow-param-mismatch"
    )
    assert res.returncode in (0, 1), res.stderr
    assert (
        "the draw calls differ (21 draws in BASE, 23 in NEW; only in NEW: "
        "draws/draw(in_normal,in_pos)#21" in res.stdout
    )
