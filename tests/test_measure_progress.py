"""A counted run's progress: the child's phases reach the parent's display as they happen, in order,
and the bar never goes back; without a terminal one line per phase; a counted scene failure is one
error line.

The pure tests drive the relay and the renderer with calls written by hand; one real counted run
(valgrind, 16x16, 1 warm-up and 3 counted frames) drives both renderings at once: a bar on a fake
terminal and the plain lines.
"""

from __future__ import annotations

import io
import shutil
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from katra3d.harness.run import runner
from katra3d.harness.run.config import RunConfig
from katra3d.harness.run.progress import ChildProgress, Progress, Relay
from katra_trace import open_trace
from katra_trace.schema import Kind
from tests.cli_helpers import katra

KATRA3D = str(Path(sys.executable).with_name("katra3d"))
HAVE_VALGRIND = shutil.which("valgrind") is not None


class FakeTTY(io.StringIO):
    """A text stream that says it is a terminal (rich then draws its live bar into it)."""

    def isatty(self) -> bool:
        return True


class Tee:
    """A progress that hands every call to two displays and records, after
    each, what the bar shows."""

    tty = True  # as a terminal display: the engine reports every frame

    def __init__(self, bar: Progress, plain: Progress) -> None:
        self.bar = bar
        self.plain = plain
        # (call, the bar's description, the bar's counter)
        self.seen: list[tuple[str, str, int]] = []

    def __enter__(self) -> Tee:
        self.bar.__enter__()
        self.plain.__enter__()
        return self

    def __exit__(self, *exc: object) -> None:
        self.bar.__exit__(*exc)
        self.plain.__exit__(*exc)

    def _both(self, name: str, *args: Any) -> None:
        getattr(self.bar, name)(*args)
        getattr(self.plain, name)(*args)
        task = self.bar._task
        description = "" if task is None else str(self.bar._bar.tasks[-1].description)
        self.seen.append((name, description, self.bar.completed))

    def line(self, text: str) -> None:
        self._both("line", text)

    def scene_started(self, index: int, label: str, total_frames: int | None) -> None:
        self._both("scene_started", index, label, total_frames)

    def phase(self, name: str, frames: int | None) -> None:
        self._both("phase", name, frames)

    def advance(self, done: int) -> None:
        self._both("advance", done)


# --------------------------------------------------------------------------- pure pieces


def test_the_relay_passes_on_complete_known_calls_in_order(tmp_path: Path) -> None:
    path = tmp_path / "progress.jsonl"
    child = ChildProgress(path)
    plain = io.StringIO()
    shown = Progress(1, stream=plain, phase_lines=True)
    relay = Relay(path, shown)
    assert relay.poll() == 0  # nothing written yet
    child.phase("opening GL", None)
    child.scene_started(1, "clear", 4)
    with open(path, "ab") as fh:  # a half-written line, garbage, and an unknown call
        fh.write(b'not json\n["explode", 1]\n["advance", "x"]\n["phase", "[1/1] clear: warm-up", ')
    assert relay.poll() == 2
    with open(path, "ab") as fh:
        fh.write(b"1]\n")
    child.advance(1)
    child.line("[1/1] clear: 1 frames")
    assert relay.poll() == 3 and relay.calls == 5
    child.close()
    child.advance(2)  # after close: ignored, not an error
    lines = plain.getvalue().splitlines()
    assert [ln.split(" (")[0] for ln in lines] == [
        "katra3d: opening GL",
        "katra3d: [1/1] clear: warm-up, 1 frame",
        "katra3d: [1/1] clear: 1 frames",
    ]


def test_the_bar_counts_on_across_phases_and_never_goes_back() -> None:
    shown = Progress(1, stream=FakeTTY())
    with shown:
        shown.scene_started(1, "clear", 5)
        shown.phase("[1/1] clear: warm-up", 2)
        shown.advance(1)
        shown.advance(2)
        shown.phase("[1/1] clear: counting", 3)
        assert shown.completed == 2 and shown.description() == "[1/1] clear: counting frame 1 of 3"
        shown.advance(1)
        shown.advance(1)  # a repeated report moves nothing
        assert shown.completed == 3 and shown.description(1) == "[1/1] clear: counting frame 2 of 3"
        shown.advance(3)
        assert shown.completed == 5 and shown.description(3) == "[1/1] clear: counting frame 3 of 3"
        shown.phase("writing the trace", None)
        assert shown.completed == 5 and shown.description() == "writing the trace"


def test_quiet_shows_nothing() -> None:
    stream = FakeTTY()
    shown = Progress(1, stream=stream, quiet=True, phase_lines=True)
    with shown:
        shown.scene_started(1, "clear", 2)
        shown.phase("[1/1] clear: counting", 2)
        shown.advance(1)
        shown.line("x")
    assert stream.getvalue() == ""


# --------------------------------------------------------------------------- a real counted run


@pytest.mark.gl
@pytest.mark.slow
def test_a_counted_run_shows_its_phases_in_order_on_both_displays(tmp_path: Path) -> None:
    if not HAVE_VALGRIND:
        pytest.skip("valgrind is not installed")
    terminal, plain = FakeTTY(), io.StringIO()
    tee = Tee(Progress(1, stream=terminal), Progress(1, stream=plain, phase_lines=True))
    config = RunConfig(
        scenes=("clear",),
        frames=3,
        warmup=1,
        size=(16, 16),
        measure="instructions",
        output=str(tmp_path / "c.katra"),
    )
    result = runner.run(config, progress=tee)
    assert result.status == "complete" and result.scenes[0].frames == 3

    phases = [desc for call, desc, _ in tee.seen if call == "phase"]
    expected = [
        "starting valgrind",
        "opening GL",
        "[1/1] clear: setting up",
        "[1/1] clear: warm-up",
        "[1/1] clear: counting",
        "writing the trace",
        "valgrind ending",
    ]
    assert [next((e for e in expected if p.startswith(e)), p) for p in phases] == expected, phases
    counters = [done for _, _, done in tee.seen]
    assert counters == sorted(counters), "the bar's counter went back"
    assert counters[-1] == 4  # 1 warm-up + 3 counted frames
    described = [desc for call, desc, _ in tee.seen if call == "advance" and "counting" in desc]
    assert described[-1] == "[1/1] clear: counting frame 3 of 3"
    assert any(d == "[1/1] clear: counting frame 2 of 3" for d in described)
    assert "counting frame 3 of 3" in terminal.getvalue()  # what the fake terminal received
    # the child's scene line, printed above the bar
    assert "instructions per frame" in terminal.getvalue()

    lines = plain.getvalue().splitlines()
    phase_lines = [ln for ln in lines if ln.endswith(" s)")]
    assert len(phase_lines) == len(expected)  # one line a phase, none a frame
    assert [
        next(e for e in expected if ln.removeprefix("katra3d: ").startswith(e))
        for ln in phase_lines
    ] == expected
    seconds = [float(ln.rsplit("(", 1)[1].removesuffix(" s)")) for ln in phase_lines]
    assert seconds == sorted(seconds)
    assert "katra3d: [1/1] clear: counting, 3 frames (" in plain.getvalue()
    assert any("3 frames, median" in ln for ln in lines)


@pytest.mark.gl
@pytest.mark.slow
def test_a_counted_scene_failure_is_one_error_line(tmp_path: Path) -> None:
    if not HAVE_VALGRIND:
        pytest.skip("valgrind is not installed")
    scene = tmp_path / "broken.py"
    scene.write_text(
        "from katra3d.scenes.builtin.clear import ClearScene\n\n\n"
        "class Broken(ClearScene):\n    name = 'broken'\n\n"
        "    def render(self, frame):\n        super().render(frame)\n"
        "        if frame.index == 2:\n            raise ValueError('boom in render')\n"
    )
    out = katra(
        "run",
        f"{scene}:Broken",
        "--frames",
        "2",
        "--warmup",
        "1",
        "--size",
        "16x16",
        "--measure",
        "instructions",
        "-o",
        str(tmp_path / "b.katra"),
        timeout=600,
    )
    assert out.returncode == 2, out.stderr
    errors = [ln for ln in out.stderr.splitlines() if "error" in ln.lower()]
    assert (
        errors == [ln for ln in errors if ln.startswith("katra3d: error: ")] and len(errors) == 1
    ), out.stderr
    assert "boom in render" in errors[0] and "Traceback" not in out.stderr
    assert f"({scene}:10)" in errors[0]  # the scene's file and line, from the child
    # a failed run leaves nothing at -o: the child's frames (one measured) are set aside beside it
    assert errors[0].endswith(
        "; the frames it measured are in "
        + repr(str(tmp_path / "b.failed.katra"))
        + " (the output was not written)"
    )
    assert not (tmp_path / "b.katra").exists()
    summary = open_trace(tmp_path / "b.failed.katra", events=False).summary.as_dict()
    assert summary.get("status") == "aborted", summary


@pytest.mark.gl
@pytest.mark.slow
def test_quiet_and_piped_runs_count_the_same(tmp_path: Path) -> None:
    """The child's stdin, stdout and stderr are the same kind of file whatever the parent's are:
    before, a 16x16 clear frame counted 275,716 instructions with --quiet, 275,904 piped and 275,898
    on a terminal (`script`); now all three count 275,947. A terminal is left out here: a pipe and
    /dev/null differ too."""
    if not HAVE_VALGRIND:
        pytest.skip("valgrind is not installed")
    common = [
        "run",
        "clear",
        "--frames",
        "2",
        "--warmup",
        "1",
        "--size",
        "16x16",
        "--measure",
        "instructions",
    ]
    quiet = subprocess.Popen(
        [KATRA3D, *common, "--quiet", "-o", str(tmp_path / "q.katra")],
        stdin=subprocess.DEVNULL,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    piped = subprocess.Popen(
        [KATRA3D, *common, "-o", str(tmp_path / "p.katra")],
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    _, stderr = piped.communicate(timeout=600)
    assert quiet.wait(timeout=600) == 0 and piped.returncode == 0, stderr

    def frames(name: str) -> list[int]:
        ev = open_trace(tmp_path / name).events
        return [int(e["dur_ns"]) for e in ev if e["kind"] == int(Kind.FRAME) and e["flags"] == 0]

    assert len(frames("q.katra")) == 2 and frames("q.katra") == frames("p.katra")
