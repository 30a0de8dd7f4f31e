"""``--jobs``: counted scenes in their own valgrind children, several at once.

Pure tests: the default and the refusal on a time run; a child's plan is the same whatever
``--jobs`` is; the joined trace renumbers strings, moves times and keeps the parts' order; a child's
progress lane names its scene. A real counted run (valgrind, 16x16): Ctrl-C stops every child and
keeps the scenes counted so far. That four scenes count every frame with ``--jobs 2`` exactly as
with ``--jobs 1`` is tests/test_measure.py's ``test_two_jobs_count_every_frame_as_one_job`` (on its
shared counted runs).
"""

from __future__ import annotations

import dataclasses
import io
import os
import shutil
import signal
import subprocess
import sys
import time
from pathlib import Path

import numpy as np
import pytest

from katra3d.harness.run import children, jobs, valgrind
from katra3d.harness.run.config import RunConfig, plan_run
from katra3d.harness.run.parts import RunStrings, join
from katra3d.harness.run.pipeline import capture_options
from katra3d.harness.run.progress import Progress, lane
from katra3d.harness.run.protocol import encode
from katra_trace import open_trace
from katra_trace.errors import ConfigError
from katra_trace.schema import EVENT_DTYPE, Clock, Flag, Kind
from tests.cli_helpers import katra
from tests.trace_helpers import write_trace

HAVE_VALGRIND = shutil.which("valgrind") is not None
SCENES = ("clear", "triangle", "fillrate", "shader")
TINY = ["--frames", "2", "--warmup", "1", "--size", "16x16", "--measure", "instructions"]


# --------------------------------------------------------------------------- pure pieces


def test_jobs_default_to_the_usable_cores_for_counts_and_one_for_time(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    assert 1 <= jobs.usable_cores() <= (os.cpu_count() or 1)
    assert jobs.available_memory_bytes() is None or jobs.available_memory_bytes() > 0  # type: ignore[operator]
    monkeypatch.setattr(jobs, "usable_cores", lambda: 8)
    monkeypatch.setattr(jobs, "available_memory_bytes", lambda: 64 * jobs.CHILD_MEMORY_BYTES)
    assert jobs.resolve_jobs(None, "instructions") == 8 and jobs.resolve_jobs(None, "time") == 1
    monkeypatch.setattr(jobs, "available_memory_bytes", lambda: 3 * jobs.CHILD_MEMORY_BYTES + 5)
    assert jobs.default_counted_jobs() == 3  # the memory holds three children
    monkeypatch.setattr(jobs, "available_memory_bytes", lambda: 10)
    assert jobs.default_counted_jobs() == 1  # never none
    monkeypatch.setattr(jobs, "available_memory_bytes", lambda: None)
    assert jobs.default_counted_jobs() == 8
    assert jobs.resolve_jobs(3, "cycles") == 3 and jobs.resolve_jobs(1, "time") == 1
    with pytest.raises(
        ConfigError, match="time measurements running in parallel disturb each other"
    ):
        jobs.resolve_jobs(2, "time")
    with pytest.raises(ConfigError, match=r"must be >= 1 \(how many scenes are measured at once\)"):
        jobs.resolve_jobs(0, "instructions")
    with pytest.raises(ConfigError, match="so a time bisection measures one commit at a time"):
        jobs.resolve_jobs(2, "time", unit="commit", work="bisection")
    with pytest.raises(
        ConfigError, match="bad --jobs 'x': expected a whole number, how many scenes"
    ):
        jobs.parse_jobs("x")
    assert jobs.parse_jobs(" 3 ") == 3 and jobs.parse_jobs(None) is None


def test_jobs_on_a_time_run_is_refused_in_one_line(tmp_path: Path) -> None:
    res = katra("run", "triangle", "--jobs", "2", "-o", str(tmp_path / "t.katra"))
    assert res.returncode == 2
    lines = res.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith(
        "katra3d: error: --jobs 2: time measurements running in parallel"
    )
    assert "so a time run measures one scene at a time" in lines[0]
    assert not (tmp_path / "t.katra").exists()


def test_a_childs_plan_is_the_same_whatever_jobs_is(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """What a child runs, and so what it counts, does not depend on --jobs: one scene, no --jobs in
    it.
    """
    monkeypatch.setattr(valgrind, "find_valgrind", lambda: ("/opt/vg", "9.9.9"))
    base = RunConfig(
        scenes=SCENES, measure="instructions", output=str(tmp_path / "c.katra"), notes="n"
    )
    plans = [plan_run(dataclasses.replace(base, jobs=n)) for n in (None, 1, 2, 7)]
    assert [p.jobs for p in plans][1:] == [1, 2, 7]
    for index, label in enumerate(SCENES):
        one = [encode(children.scene_plan(p, index)) for p in plans]
        assert all(d == one[0] for d in one), label
        assert [e["label"] for e in one[0]["entries"]] == [label] and one[0]["jobs"] == 1
        assert one[0]["config"]["jobs"] is None and one[0]["config"]["scenes"] == list(SCENES)
    # the header records what was captured, not how many children counted it
    options = [capture_options(p, "egl", None).as_dict() for p in plans]
    assert all(o == options[0] for o in options) and "jobs" not in options[0]


def test_children_start_costliest_first_with_several_jobs(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(valgrind, "find_valgrind", lambda: ("/opt/vg", "9.9.9"))
    config = RunConfig(
        scenes=("triangle", "instancing", "clear"),
        measure="instructions",
        output=str(tmp_path / "c"),
    )
    # the run's order
    assert children.start_order(plan_run(dataclasses.replace(config, jobs=1))) == [0, 1, 2]
    # instancing, the costliest
    assert children.start_order(plan_run(dataclasses.replace(config, jobs=2)))[0] == 1


def _part(path: Path, scene: str, frames: int, *, extra: str) -> None:
    """A one-scene trace like a counted child's: ``frames`` frames of ``scene``, each with a zone
    named ``extra``; its start is the writer's (now)."""
    strings = ["", scene, "frame", extra]
    rows = []
    for i in range(frames):
        rows.append((Kind.ZONE, Clock.INSTRUCTIONS, 0, 1, 1, 3, i, 100 * i, 7 + i, 0.0))
        rows.append((Kind.FRAME, Clock.INSTRUCTIONS, 0, 0, 1, 2, i, 100 * i, 1000 + i, 0.0))
    header = {
        "capture_options": {"resolved": {"scenes": [{"label": scene, "spec": scene, "params": {}}]}}
    }
    write_trace(
        path,
        np.array(rows, dtype=EVENT_DTYPE),
        strings,
        header=header,
        annotations=[{"type": "scene", "scene": scene}],
        summary={"timing_mode": "instructions", "scenes": [{"scene": scene, "frames": frames}]},
    )


def test_the_parts_join_in_order_with_one_string_table(tmp_path: Path) -> None:
    parts = []
    for n, (scene, extra) in enumerate(
        (("clear", "zone-a"), ("triangle", "zone-b"), ("shader", "zone-a"))
    ):
        parts.append(tmp_path / f"p{n}.katra")
        _part(parts[-1], scene, 2 + n, extra=extra)
    starts = [open_trace(p, events=False).header.as_dict()["start_host_ns"] for p in parts]
    with open(tmp_path / "joined.katra", "wb") as dst:
        strings = RunStrings("out/run.katra", "out/run.katra", "restored")
        joined = join(parts, dst, status="complete", strings=strings)
    assert joined.parts == parts and joined.events == 2 * (2 + 3 + 4)
    trace = open_trace(tmp_path / "joined.katra")
    header = trace.header.as_dict()
    assert trace.status == "complete" and header["notes"] == "restored"
    # the run's own strings where the children recorded their stand-ins
    options = header["capture_options"]
    assert options["resolved"]["output"] == "out/run.katra" == options["measure"]["output"]
    assert options["output"] == "out/run.katra" and options["notes"] == "restored"
    assert trace.header.as_dict()["start_host_ns"] == min(starts)
    assert [
        s["label"] for s in trace.header.as_dict()["capture_options"]["resolved"]["scenes"]
    ] == ["clear", "triangle", "shader"]
    ev = trace.events
    frames = ev[ev["kind"] == int(Kind.FRAME)]
    assert [trace.name(int(s)) for s in frames["scene"]] == ["clear"] * 2 + ["triangle"] * 3 + [
        "shader"
    ] * 4
    assert list(frames["dur_ns"]) == [1000, 1001, 1000, 1001, 1002, 1000, 1001, 1002, 1003]
    zones = ev[ev["kind"] == int(Kind.ZONE)]
    assert [trace.name(int(z)) for z in zones["name"]] == ["zone-a"] * 2 + ["zone-b"] * 3 + [
        "zone-a"
    ] * 4
    assert len(set(trace.strings)) == len(trace.strings)  # each string once
    # each part's times moved onto the earliest start
    for n, scene in enumerate(("clear", "triangle", "shader")):
        first = frames[[trace.name(int(s)) == scene for s in frames["scene"]]][0]
        assert int(first["start_ns"]) == starts[n] - min(starts)
    user = trace.summary.user
    assert [r["scene"] for r in user["scenes"]] == ["clear", "triangle", "shader"]
    assert user["timing_mode"] == "instructions"
    assert [a["scene"] for a in trace.annotations if a.get("type") == "scene"] == [
        "clear",
        "triangle",
        "shader",
    ]
    assert not np.any(frames["flags"] & int(Flag.WARMUP))


def test_each_child_reports_on_a_lane_named_after_its_scene() -> None:
    plain = io.StringIO()
    shown = Progress(3, stream=plain, phase_lines=True)
    with shown:
        second = lane(shown, 2, 3, "triangle")
        second.phase("opening GL", None)
        second.scene_started(1, "triangle", 3)
        second.phase("[1/1] triangle: counting", 2)
        second.line("[1/1] triangle: 2 frames, median 99,258 instructions per frame")
    lines = [ln.split(" (")[0] for ln in plain.getvalue().splitlines()]
    assert lines == [
        "katra3d: [2/3] triangle: opening GL",
        "katra3d: [2/3] triangle: counting, 2 frames",
        "katra3d: [2/3] triangle: 2 frames, median 99,258 instructions per frame",
    ]
    alone = Progress(1, stream=io.StringIO(), phase_lines=True)
    only = lane(alone, 1, 1, "clear")
    only.phase("opening GL", None)  # a one-scene run says what it always said
    assert alone.stream.getvalue().startswith("katra3d: opening GL (")  # type: ignore[attr-defined]


# --------------------------------------------------------------------------- real counted runs


SLOW_SCENE = """
import time

from katra3d.scenes.builtin.clear import ClearScene


class Slow(ClearScene):
    name = "slow"

    def render(self, frame):
        super().render(frame)
        if frame.index >= 2:
            time.sleep(0.5)  # wall time, few instructions: the child counts on while the test waits
"""


@pytest.mark.gl
@pytest.mark.slow
def test_ctrl_c_stops_every_child_and_keeps_the_scenes_counted(tmp_path: Path) -> None:
    """Two scenes, two children at once: ``clear`` (40 frames) ends while ``slow`` (half a second a
    frame) still counts; a Ctrl-C then stops slow's child, whose frames so far are kept beside
    clear's, in a trace finished as interrupted. No dump directory and no child is left."""
    if not HAVE_VALGRIND:
        pytest.skip("valgrind is not installed")
    tmp = tmp_path / "tmp"
    tmp.mkdir()
    (tmp_path / "slow.py").write_text(SLOW_SCENE)
    out = tmp_path / "c.katra"
    proc = subprocess.Popen(
        [
            sys.executable,
            "-m",
            "katra3d",
            "run",
            "clear",
            f"{tmp_path / 'slow.py'}:Slow",
            *TINY,
            "--frames",
            "40",
            "--jobs",
            "2",
            "-o",
            str(out),
        ],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        env={**os.environ, "TMPDIR": str(tmp)},
    )
    assert proc.stderr is not None
    seen: list[str] = []
    deadline = time.monotonic() + 300
    while time.monotonic() < deadline:
        line = proc.stderr.readline()
        if not line:
            break
        seen.append(line)
        if line.startswith("katra3d: [1/2] clear: valgrind ending"):
            break
    assert any(ln.startswith("katra3d: [2/2] slow: counting") for ln in seen), "".join(seen)
    time.sleep(1.5)  # slow counts a frame or two more
    proc.send_signal(signal.SIGINT)
    stdout, stderr = proc.communicate(timeout=120)
    assert proc.returncode == 128 + int(signal.SIGINT), "".join(seen) + stderr
    assert "Traceback" not in stderr
    trace = open_trace(out)
    assert trace.status == "interrupted"
    ev = trace.events
    frames = ev[
        (ev["kind"] == int(Kind.FRAME))
        & (ev["flags"] == 0)
        & (ev["clock"] == int(Clock.INSTRUCTIONS))
    ]
    per_scene = {
        trace.name(int(s)): int(np.sum(frames["scene"] == s)) for s in np.unique(frames["scene"])
    }
    assert per_scene.get("clear") == 40 and 0 < per_scene.get("slow", 0) < 40, per_scene
    assert [r["scene"] for r in trace.summary.user["scenes"]] == ["clear", "slow"]
    assert list(tmp.iterdir()) == [], "the dump directories must be removed"
    assert "clear" in stdout and "slow" in stdout
