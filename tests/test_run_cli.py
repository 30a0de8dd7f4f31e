"""``katra3d run`` and ``katra3d doctor`` end to end, on real llvmpipe, in subprocesses."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from katra_trace import open_trace
from katra_trace.schema import Clock, Flag, Kind
from tests.trace_helpers import wait_for_measured_frames

pytestmark = pytest.mark.gl


def _frames(ev: np.ndarray, clock: int, warmup: bool) -> np.ndarray:
    sel = (ev["kind"] == Kind.FRAME) & (ev["clock"] == clock)
    flagged = (ev["flags"] & Flag.WARMUP) != 0
    return ev[sel & (flagged if warmup else ~flagged)]


def test_run_triangle_30_frames(katra_cli: Any, tmp_path: Path) -> None:
    res = katra_cli(
        "run",
        "triangle",
        "--frames",
        "30",
        "--warmup",
        "3",
        "--size",
        "64x48",
        "-o",
        "t.katra",
        "--note",
        "ci smoke",
        "--seed",
        "7",
    )
    assert res.returncode == 0, res.stderr
    assert "Traceback" not in res.stderr
    trace = open_trace(tmp_path / "t.katra")
    ev = trace.events
    assert trace.summary.status == "complete"

    measured = _frames(ev, Clock.WALL, warmup=False)
    assert len(measured) == 30
    assert np.all(measured["dur_ns"] > 0) and np.all(measured["dur_ns"] < 10e9)
    assert measured["frame"].tolist() == list(range(3, 33))
    assert np.all(np.diff(measured["start_ns"]) >= measured["dur_ns"][:-1])  # frames do not overlap
    cpu = _frames(ev, Clock.CPU, warmup=False)
    assert len(cpu) == 30 and np.all(cpu["dur_ns"] <= measured["dur_ns"])
    warm = _frames(ev, Clock.WALL, warmup=True)
    assert warm["frame"].tolist() == [0, 1, 2]
    assert not (ev["clock"] == Clock.GPU).any(), "llvmpipe GPU times must never be presented"

    setup = ev[(ev["kind"] == Kind.MARKER) & ((ev["flags"] & Flag.SETUP) != 0)]
    assert (
        len(setup) == 1
        and setup[0]["dur_ns"] > 0
        and trace.strings[setup[0]["scene"]] == "triangle"
    )

    host = trace.header.host_info
    assert "llvmpipe" in (host.gl.renderer or "") and host.gl.software_renderer is True
    opts = trace.header.capture_options
    assert opts.timing_mode == "sync" and "software renderer" in (opts.timing_reason or "")
    assert opts.frames == 30 and opts.size == (64, 48) and opts.seed == 7
    assert trace.header.notes == "ci smoke"

    (scene_note,) = [a for a in trace.annotations if a.get("type") == "scene"]
    assert scene_note["scene"] == "triangle" and scene_note["status"] == "ok"
    assert len(scene_note["last_frame_sha256"]) == 64
    assert scene_note["measured_frames"] == 30 and scene_note["warmup_frames"] == 3

    assert "triangle" in res.stdout and "wall" in res.stdout and "t.katra" in res.stdout
    assert trace.summary.user["scenes"][0]["frames"] == 30


def test_zones_nest_inside_their_frame(katra_cli: Any, tmp_path: Path) -> None:
    res = katra_cli(
        "run",
        "triangle",
        "--frames",
        "8",
        "--warmup",
        "1",
        "--size",
        "64x64",
        "--zones",
        "-o",
        "z.katra",
    )
    assert res.returncode == 0, res.stderr
    trace = open_trace(tmp_path / "z.katra")
    ev = trace.events
    for clock in (Clock.WALL, Clock.CPU):
        frames = {
            int(f["frame"]): f for f in ev[(ev["kind"] == Kind.FRAME) & (ev["clock"] == clock)]
        }
        zones = ev[(ev["kind"] == Kind.ZONE) & (ev["clock"] == clock)]
        assert len(zones) == 9  # one "draw" zone per frame, warmup included
        assert {trace.strings[n] for n in zones["name"]} == {"draw"}
        for z in zones:
            f = frames[int(z["frame"])]
            assert z["depth"] >= 1 and z["flags"] == f["flags"]
            assert f["start_ns"] <= z["start_ns"]
            assert z["start_ns"] + z["dur_ns"] <= f["start_ns"] + f["dur_ns"]
    assert trace.header.capture_options.zones == "passes"  # `--zones` alone (older traces say true)


def test_suite_default_output_duration_and_screenshots(katra_cli: Any, tmp_path: Path) -> None:
    res = katra_cli(
        "run",
        "--suite",
        "ci",
        "--duration",
        "0.1",
        "--warmup",
        "0",
        "--size",
        "32x32",
        "--screenshot",
        "shots",
        "--samples",
        "4",
    )
    assert res.returncode == 0, res.stderr
    (path,) = (tmp_path / "traces").iterdir()
    assert path.name.endswith("-ci.katra")
    trace = open_trace(path)
    notes = {a["scene"]: a for a in trace.annotations if a.get("type") == "scene"}
    from katra3d.scenes.suites import get_suite

    assert list(notes) == list(get_suite("ci").scene_names())
    for name, note in notes.items():
        assert note["measured_frames"] >= 1
        png = tmp_path / "shots" / f"{name}.png"
        assert png.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
        assert note["screenshot"].endswith(f"{name}.png")
    assert trace.header.capture_options.resolved.samples == 4
    assert not _frames(trace.events, Clock.WALL, warmup=True).size


@pytest.mark.gl
def test_screenshots_follow_the_output_rule(katra_cli: Any, tmp_path: Path) -> None:
    """--screenshot follows the output rule: an existing screenshot needs --force, a symbolic link
    is refused, and both are said before any frame is rendered."""
    small = (
        "--frames",
        "2",
        "--warmup",
        "0",
        "--size",
        "16x16",
        "--quiet",
        "--screenshot",
        "shots",
    )
    assert katra_cli("run", "clear", *small, "-o", "a.katra").returncode == 0
    first = (tmp_path / "shots" / "clear.png").read_bytes()
    again = katra_cli("run", "clear", *small, "-o", "b.katra")
    assert again.returncode == 2 and "shots/clear.png' already exists; give --force" in again.stderr
    assert not (tmp_path / "b.katra").exists()  # refused before the run
    mine = tmp_path / "mine.txt"
    mine.write_text("the user's file\n")
    (tmp_path / "shots" / "triangle.png").symlink_to(mine)
    linked = katra_cli("run", "triangle", *small, "-o", "c.katra")
    assert (
        linked.returncode == 2
        and "is a symbolic link; katra3d never writes through one" in linked.stderr
    )
    assert mine.read_text() == "the user's file\n"
    assert katra_cli("run", "clear", *small, "-o", "d.katra", "--force").returncode == 0
    assert (tmp_path / "shots" / "clear.png").read_bytes() == first  # the same frame, written again


@pytest.mark.parametrize("signum", [signal.SIGINT, signal.SIGTERM])
def test_signal_stops_at_frame_end_and_marks_interrupted(tmp_path: Path, signum: int) -> None:
    env = dict(os.environ)
    env.pop("KATRA3D_BACKEND", None)
    proc = subprocess.Popen(
        [
            sys.executable,
            "-m",
            "katra3d",
            "run",
            "triangle",
            "--duration",
            "60",
            "--size",
            "32x32",
            "-o",
            "i.katra",
        ],
        cwd=tmp_path,
        env=env,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    try:
        # stopped once measured frames are on disk ("triangle: running" comes before the set-up and
        # warm-up)
        wait_for_measured_frames(proc, tmp_path / "i.katra.part")
        proc.send_signal(signum)
        out, err = proc.communicate(timeout=60)
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
    assert proc.returncode == 128 + signum, err
    assert "Traceback" not in err
    assert f"stopped by {signal.Signals(signum).name}" in err
    trace = open_trace(tmp_path / "i.katra")
    assert trace.summary.status == "interrupted"
    assert not trace.truncated
    frames = _frames(trace.events, Clock.WALL, warmup=False)
    assert len(frames) >= 1
    (note,) = [a for a in trace.annotations if a.get("type") == "scene"]
    assert note["status"] == "interrupted" and note["measured_frames"] == len(frames)
    assert "(interrupted)" in out


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (["cubez"], "unknown scene 'cubez'"),
        (["triangle", "--size", "0x5"], "bad size 0x5"),
        (["triangle", "--frames", "-3"], "bad --frames -3"),
        (["triangle", "--frames", "many"], "bad --frames 'many'"),
        (["triangle", "--frames", "5", "--duration", "1"], "--frames or --duration, not both"),
        (["triangle", "--param", "triangle.speed"], "bad --param 'triangle.speed'"),
        (["triangle", "--param", "triangle.speed=fast"], "speed"),
        (["triangle", "--param", "cube.n=3"], "not in this run"),
        (
            ["triangle", "-o", "missing/dir/x.katra"],
            "output directory 'missing/dir' does not exist",
        ),
        (["triangle", "--timing", "fast"], "unknown --timing 'fast'"),
        (["triangle", "--timing", "gpu"], "software renderer"),
        (["triangle", "--samples", "16"], "GL_MAX_SAMPLES"),
        ([], "nothing to run"),
    ],
)
def test_bad_input_is_one_line_exit_2_and_leaves_nothing(
    katra_cli: Any, tmp_path: Path, args: list[str], message: str
) -> None:
    extra = ["--screenshot", "shots"] + ([] if "--size" in args else ["--size", "8x8"])
    res = katra_cli("run", *args, *extra)
    assert res.returncode == 2, (res.stdout, res.stderr)
    assert "Traceback" not in res.stderr
    lines = res.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("katra3d: error: "), res.stderr
    assert message in lines[0]
    assert list(tmp_path.iterdir()) == [], "nothing may be left behind"


def test_unwritable_output_dir(katra_cli: Any, tmp_path: Path) -> None:
    (tmp_path / "afile").write_text("not a dir")
    res = katra_cli("run", "triangle", "-o", "afile/x.katra")
    assert res.returncode == 2
    assert res.stderr.startswith("katra3d: error: output directory 'afile' does not exist")
    assert sorted(p.name for p in tmp_path.iterdir()) == ["afile"]


def test_no_usable_gl_exits_3_with_install_line(katra_cli: Any, tmp_path: Path) -> None:
    res = katra_cli(
        "run",
        "triangle",
        "--backend",
        "auto",
        "--device",
        "99",
        "--frames",
        "2",
        env={"DISPLAY": "", "WAYLAND_DISPLAY": ""},
    )
    assert res.returncode == 3
    assert "Traceback" not in res.stderr
    assert "no usable OpenGL backend" in res.stderr
    assert "apt-get install libegl1 libegl-mesa0 libgl1-mesa-dri" in res.stderr
    assert list(tmp_path.iterdir()) == []


def test_doctor(katra_cli: Any) -> None:
    res = katra_cli("doctor", "--json", env={"DISPLAY": "", "WAYLAND_DISPLAY": ""})
    assert res.returncode == 0, res.stderr
    report = json.loads(res.stdout)
    status = {b["name"]: b for b in report["backends"]}
    assert status["egl"]["available"] is True
    assert status["glfw"]["available"] is False and "DISPLAY" in status["glfw"]["why_not"]
    assert "llvmpipe" in report["gl"]["renderer"]
    assert report["timer_query_check"]["verdict"] == "unreliable"
    assert report["recommended_timing"]["mode"] == "sync"
    assert report["egl_devices"] and report["egl_devices"][0]["index"] == 0
    for device in report["egl_devices"]:  # fields EGL cannot fill are left out, never shown empty
        assert all(value != "" for value in device.values()), device
    assert report["egl_devices"][0]["renderer"] == report["gl"]["renderer"]

    text = katra_cli("doctor", env={"DISPLAY": "", "WAYLAND_DISPLAY": ""})
    assert text.returncode == 0
    assert "recommended timing: sync" in text.stdout
    assert "glfw  unavailable: no display" in text.stdout


_USER_SCENES = """
from katra3d.scenes.api import Scene, SceneSkip


class NeedsMore(Scene):
    name = "needs_more"

    def setup(self, ctx, size, params):
        raise SceneSkip("needs GL_NV_imaginary")

    def render(self, frame):
        pass


class Broken(Scene):
    name = "broken"

    def setup(self, ctx, size, params):
        self.n = 0

    def render(self, frame):
        self.n += 1
        if self.n == 3:
            raise RuntimeError("boom in render")
"""


def test_skipped_scene_is_recorded_and_the_run_goes_on(katra_cli: Any, tmp_path: Path) -> None:
    (tmp_path / "mine.py").write_text(_USER_SCENES)
    res = katra_cli(
        "run",
        "mine.py:NeedsMore",
        "triangle",
        "--frames",
        "3",
        "--warmup",
        "0",
        "--size",
        "16x16",
        "-o",
        "s.katra",
    )
    assert res.returncode == 0, res.stderr
    assert "needs_more: skipped: needs GL_NV_imaginary" in res.stderr
    trace = open_trace(tmp_path / "s.katra")
    ev = trace.events
    skipped = ev[(ev["kind"] == Kind.MARKER) & ((ev["flags"] & Flag.SKIPPED) != 0)]
    assert [trace.strings[s] for s in skipped["scene"]] == ["needs_more"]
    notes = {a["scene"]: a for a in trace.annotations if a.get("type") == "scene"}
    assert notes["needs_more"]["status"] == "skipped"
    assert notes["needs_more"]["reason"] == "needs GL_NV_imaginary"
    assert notes["triangle"]["status"] == "ok"
    assert len(_frames(ev, Clock.WALL, warmup=False)) == 3
    assert "skipped" in res.stdout


def test_scene_failure_aborts_and_keeps_the_partial_trace(katra_cli: Any, tmp_path: Path) -> None:
    (tmp_path / "mine.py").write_text(_USER_SCENES)
    res = katra_cli(
        "run",
        "mine.py:Broken",
        "--frames",
        "5",
        "--warmup",
        "0",
        "--size",
        "16x16",
        "-o",
        "b.katra",
    )
    assert res.returncode == 2
    assert "Traceback" not in res.stderr
    line = next(
        n for n, text in enumerate(_USER_SCENES.splitlines(), 1) if "boom in render" in text
    )
    assert res.stderr.strip().splitlines()[-1] == (
        f"katra3d: error: scene 'broken' failed while rendering (mine.py:{line}): RuntimeError: "
        "boom in render; "
        "the frames it measured are in 'b.failed.katra' (the output was not written)"
    )
    assert not (tmp_path / "b.katra").exists()  # nothing in the way of the rerun
    trace = open_trace(tmp_path / "b.failed.katra")
    assert trace.summary.status == "aborted"
    assert len(_frames(trace.events, Clock.WALL, warmup=False)) == 2


def test_small_gaps_run_json_stats_dir_compare_csv_info_warmup(
    katra_cli: Any, tmp_path: Path
) -> None:
    """run --json, stats over a directory, compare --format csv, one number format, no FPS for
    zones, info counts warmup frames."""
    runs = tmp_path / "runs"
    runs.mkdir()
    for i in (1, 2):
        res = katra_cli(
            "run",
            "triangle",
            "fillrate",
            "--frames",
            "6",
            "--warmup",
            "2",
            "--size",
            "16x16",
            "--zones",
            "--quiet",
            "--json",
            "-o",
            f"runs/r{i}.katra",
        )
        assert res.returncode == 0, res.stderr
        report = json.loads(res.stdout)
        assert report["size"] == [16, 16] and report["status"] == "complete"
        assert [s["scene"] for s in report["scenes"]] == ["triangle", "fillrate"]
        assert report["scenes"][1]["params"]["layers"] == 8
    stats = katra_cli("stats", "runs", "--zones", "--format", "markdown", "--all")
    assert stats.returncode == 0, stats.stderr
    assert "r1.katra" in stats.stdout and "r2.katra" in stats.stdout
    assert "e+" not in stats.stdout  # no exponent notation anywhere
    for line in stats.stdout.splitlines():
        cells = [c.strip() for c in line.strip("|").split("|")]
        if len(cells) > 3 and cells[1] not in ("(frame)", "zone", "---"):
            # stutter and FPS columns empty for zones
            assert cells[-1] == "" and cells[-4] == "", line
    csv_out = katra_cli("compare", "runs/r1.katra", "runs/r2.katra", "--format", "csv")
    assert csv_out.returncode == 0, csv_out.stderr
    header = csv_out.stdout.splitlines()[0].split(",")
    assert header[:2] == ["scene", "verdict"] and header[-1] == "why"
    info = katra_cli("info", "runs/r1.katra", "--json")
    counts = json.loads(info.stdout)["counts"]
    assert counts["warmup_frames"] == 4 and counts["warmup_events"] > counts["warmup_frames"]
