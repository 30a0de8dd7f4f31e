"""The command line of a scene author's first hour: a failed run does not block its rerun,
a scene error names the scene's file and line (and --traceback shows its frames), an unprefixed
--param, one scene in ``katra3d scenes``, ``ab --force``, shell completion, the README's snippets, a
quiet set-up."""

from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from katra_trace import Clock, Kind, TraceWriter, open_trace
from katra_trace.errors import ConfigError
from katra_trace.export import default_path
from katra_trace.io.tracesets import AB_MANIFEST, clear_ab_dir
from katra_trace.schema import Flag
from tests.cli_helpers import katra
from tests.docs_commands import REPO, blocks
from tests.trace_helpers import frame_zone_stream, write_trace

STRINGS = ["", "scene", "frame", "a", "b", "c"]

#: A scene that fails at frame ``FAIL_AT`` (warmup frames count) with an AttributeError, two calls
#: deep.
SPIN = """from katra3d import Param, Scene


class SpinQuad(Scene):
    name = "spinquad"
    description = "a scene of the user's, failing in render"
    params = {"iters": Param(4, int, 1, 100, "iterations")}

    def setup(self, ctx, size, params):
        self.iters = params["iters"]

    def render(self, frame):
        self.step(frame)

    def step(self, frame):
        if frame.index >= FAIL_AT:
            return self.offz
"""
#: The line of ``return self.offz`` in SPIN.
OFFZ_LINE = next(n for n, text in enumerate(SPIN.splitlines(), 1) if "self.offz" in text)
#: The line of ``self.step(frame)`` in SPIN.
RENDER_LINE = next(n for n, text in enumerate(SPIN.splitlines(), 1) if "self.step(frame)" in text)
RUN = ("run", "spin.py:SpinQuad", "--frames", "2", "--warmup", "1", "--size", "16x16", "--quiet")


def _spin(tmp_path: Path, fail_at: int) -> None:
    (tmp_path / "spin.py").write_text(SPIN.replace("FAIL_AT", str(fail_at)))


def _error_line(res: subprocess.CompletedProcess[str]) -> str:
    lines = [ln for ln in res.stderr.splitlines() if ln.startswith("katra3d: error:")]
    assert len(lines) == 1, res.stderr
    return lines[0]


def _measured(path: Path) -> int:
    ev = open_trace(path).events
    return int(
        (
            (ev["kind"] == Kind.FRAME)
            & (ev["clock"] == Clock.WALL)
            & ((ev["flags"] & Flag.WARMUP) == 0)
        ).sum()
    )


# --------------------------------------------------------------------------- 1. a failed run and
# its rerun


@pytest.mark.gl
def test_a_run_that_measured_no_frame_leaves_nothing_and_its_rerun_works(
    katra_cli: Any, tmp_path: Path
) -> None:
    _spin(tmp_path, fail_at=0)
    res = katra_cli(*RUN, "-o", "br2.katra")
    assert res.returncode == 2 and "Traceback" not in res.stderr
    assert _error_line(res) == (
        f"katra3d: error: scene 'spinquad' failed while rendering (spin.py:{OFFZ_LINE}): "
        "AttributeError: 'SpinQuad' "
        "object has no attribute 'offz'; no frame was measured, so no trace was written"
    )
    assert sorted(p.name for p in tmp_path.iterdir() if "br2" in p.name) == []
    _spin(tmp_path, fail_at=10**6)  # the bug fixed: the same command runs
    res = katra_cli(*RUN, "-o", "br2.katra")
    assert res.returncode == 0, res.stderr
    assert (
        open_trace(tmp_path / "br2.katra").status == "complete"
        and _measured(tmp_path / "br2.katra") == 2
    )


@pytest.mark.gl
def test_a_failed_run_never_touches_a_file_that_was_at_the_output(
    katra_cli: Any, tmp_path: Path
) -> None:
    _spin(tmp_path, fail_at=2)  # fails at the second measured frame, with one measured
    (tmp_path / "mine.katra").write_bytes(b"the user's data")
    res = katra_cli(*RUN, "-o", "mine.katra")  # still refused without --force
    assert res.returncode == 2 and "already exists; give --force" in _error_line(res)
    res = katra_cli(*RUN, "-o", "mine.katra", "--force")
    assert res.returncode == 2
    assert _error_line(res).endswith(
        "; the frames it measured are in 'mine.failed.katra' (the output was not written)"
    )
    assert (tmp_path / "mine.katra").read_bytes() == b"the user's data"
    failed = open_trace(tmp_path / "mine.failed.katra")
    assert failed.status == "aborted" and _measured(tmp_path / "mine.failed.katra") == 1


def _failed_capture(path: Path, measured: bool) -> TraceWriter:
    """A capture for ``path`` that fails (aborted), with a measured frame or only warmup ones."""
    w = TraceWriter(path, failed_aside=True)
    assert [w.intern(s) for s in STRINGS[1:]] == [1, 2, 3, 4, 5]
    w.append_array(frame_zone_stream(5 if measured else 3))  # its first 3 frames are warmup frames
    w.finish({"error": "the scene failed"}, status="aborted")
    return w


def test_a_failed_capture_is_set_aside_and_replaces_only_an_earlier_failure(tmp_path: Path) -> None:
    out = tmp_path / "t.katra"
    first = _failed_capture(out, measured=True)
    assert first.failed_path == tmp_path / "t.failed.katra" and not out.exists()
    stamp = open_trace(first.failed_path).header.start_wall_ns
    # the next failure replaces the earlier failure's frames
    second = _failed_capture(out, measured=True)
    assert second.failed_path == first.failed_path
    assert open_trace(second.failed_path).header.start_wall_ns != stamp
    (tmp_path / "t.failed.katra").write_bytes(b"not a trace: the user's")  # never replaced
    third = _failed_capture(out, measured=True)
    assert third.failed_path == tmp_path / "t.failed-2.katra"
    assert (tmp_path / "t.failed.katra").read_bytes() == b"not a trace: the user's"
    # warmup frames only: nothing is kept
    none = _failed_capture(tmp_path / "w.katra", measured=False)
    assert none.failed_path is None
    assert sorted(p.name for p in tmp_path.iterdir()) == ["t.failed-2.katra", "t.failed.katra"]


def test_without_failed_aside_an_aborted_capture_stays_at_its_path(tmp_path: Path) -> None:
    """The Python writer and katra3d.capture keep their rule: an aborted trace with events is at its
    path.
    """
    w = TraceWriter(tmp_path / "t.katra")
    w.append_array(frame_zone_stream(5))
    w.finish({"error": "x"}, status="aborted")
    assert open_trace(tmp_path / "t.katra").status == "aborted" and w.failed_path is None


# --------------------------------------------------------------------------- 2. the scene's file,
# line and traceback


def _traceback_block(stderr: str) -> str:
    start = stderr.index("Traceback of the scene")
    return stderr[start : stderr.index("katra3d: error:")]


@pytest.mark.gl
@pytest.mark.parametrize("how", ["before", "after", "env"])
def test_traceback_shows_the_scenes_own_frames_when_asked(
    katra_cli: Any, tmp_path: Path, how: str
) -> None:
    _spin(tmp_path, fail_at=0)
    plain = katra_cli(*RUN, "-o", "a.katra")
    assert "Traceback" not in plain.stderr and f"(spin.py:{OFFZ_LINE})" in _error_line(plain)
    args = {"before": ("--traceback", *RUN), "after": (*RUN, "--traceback"), "env": RUN}[how]
    res = katra_cli(*args, "-o", "a.katra", env={"KATRA3D_DEBUG": "1"} if how == "env" else None)
    assert res.returncode == 2
    block = _traceback_block(res.stderr)
    files = re.findall(r'File "([^"]+)", line (\d+)', block)
    spin = str(tmp_path / "spin.py")
    # render, then step: the user's frames only
    assert files == [(spin, str(RENDER_LINE)), (spin, str(OFFZ_LINE))]
    assert block.rstrip().endswith("AttributeError: 'SpinQuad' object has no attribute 'offz'")
    assert _error_line(res) == _error_line(plain)  # the error line itself is the same


BAD_SHADER = """from katra3d import Scene, compile_program


class BadShader(Scene):
    name = "badshader"

    def setup(self, ctx, size, params):
        self.prog = compile_program(ctx, self.name, vertex_shader=VS, fragment_shader=FS)

    def render(self, frame):
        pass


VS = "#version 330\\nvoid main() { gl_Position = vec4(undeclared); }"
FS = "#version 330\\nout vec4 c;\\nvoid main() { c = vec4(1.0); }"
"""


@pytest.mark.gl
def test_a_shader_error_raised_from_the_scenes_code_names_its_line(
    katra_cli: Any, tmp_path: Path
) -> None:
    (tmp_path / "bad.py").write_text(BAD_SHADER)
    line = next(
        n for n, text in enumerate(BAD_SHADER.splitlines(), 1) if "compile_program(ctx" in text
    )
    res = katra_cli(
        "run", "bad.py:BadShader", "--frames", "2", "--size", "16x16", "--quiet", "-o", "b.katra"
    )
    assert res.returncode == 2 and "Traceback" not in res.stderr
    error = _error_line(res)
    assert "vertex shader failed to compile" in error and "undeclared" in error
    assert error.endswith(f" (in bad.py:{line}); no frame was measured, so no trace was written")
    res = katra_cli(
        "--traceback",
        "run",
        "bad.py:BadShader",
        "--frames",
        "2",
        "--size",
        "16x16",
        "--quiet",
        "-o",
        "b.katra",
    )
    assert re.findall(r'File "[^"]*bad.py", line (\d+)', _traceback_block(res.stderr)) == [
        str(line)
    ]


@pytest.mark.gl
@pytest.mark.slow
def test_a_counted_runs_child_relays_the_scenes_traceback(katra_cli: Any, tmp_path: Path) -> None:
    if shutil.which("valgrind") is None:
        pytest.skip("valgrind is not installed")
    _spin(tmp_path, fail_at=0)
    res = katra_cli("--traceback", *RUN, "--measure", "instructions", "-o", "c.katra", timeout=600)
    assert res.returncode == 2, res.stderr
    line = _error_line(res)
    assert (
        f"spin.py:{OFFZ_LINE})" in line
        and "AttributeError" in line
        and "no trace was written" in line
    )
    assert re.findall(r'File "[^"]*spin.py", line (\d+)', _traceback_block(res.stderr)) == [
        str(RENDER_LINE),
        str(OFFZ_LINE),
    ]
    assert not list(tmp_path.glob("c*.katra*"))


# --------------------------------------------------------------------------- 3. --param KEY=VALUE
# and scenes NAME


@pytest.mark.gl
def test_an_unprefixed_param_sets_the_one_scenes_param(katra_cli: Any, tmp_path: Path) -> None:
    _spin(tmp_path, fail_at=10**6)
    res = katra_cli(*RUN, "--param", "iters=64", "-o", "p.katra")
    assert res.returncode == 0, res.stderr
    (scene,) = (
        open_trace(tmp_path / "p.katra", events=False).header.capture_options.resolved.scenes or ()
    )
    assert scene["params"] == {"iters": 64}
    res = katra_cli(RUN[0], RUN[1], "triangle", *RUN[2:], "--param", "iters=64", "-o", "q.katra")
    assert res.returncode == 2 and not (tmp_path / "q.katra").exists()
    assert _error_line(res) == (
        "katra3d: error: --param iters=64 names no scene, and this run has 2 scenes "
        "(spin.py:SpinQuad, triangle); write SCENE.iters=64"
    )


def test_scenes_shows_one_scene_by_name_or_file(katra_cli: Any, tmp_path: Path) -> None:
    res = katra_cli("scenes", "fillrate")
    assert res.returncode == 0, res.stderr
    assert (
        res.stdout.startswith("fillrate  -  ")
        and "suites:" in res.stdout
        and "--param fillrate.layers=" in res.stdout
    )
    assert "triangle" not in res.stdout
    _spin(tmp_path, fail_at=0)
    res = katra_cli("scenes", "spin.py:SpinQuad")
    assert res.returncode == 0, res.stderr
    assert res.stdout.splitlines()[0] == "spinquad  -  a scene of the user's, failing in render"
    assert "--param spin.py:SpinQuad.iters=4   [1..100]  iterations" in res.stdout
    res = katra_cli("scenes", "spin.py:SpinQuad", "--json")
    shown = json.loads(res.stdout)
    assert shown["name"] == "spinquad" and shown["params"]["iters"]["default"] == 4
    res = katra_cli("scenes", "fillrat")
    assert res.returncode == 2 and "did you mean 'fillrate'" in _error_line(res)


def test_a_scene_whose_params_are_plain_values_is_one_line(katra_cli: Any, tmp_path: Path) -> None:
    """``params = {"iters": 4}`` (a natural first guess) is named with the fix, not a traceback; a
    docstring serves as the description."""
    (tmp_path / "plain.py").write_text(
        "from katra3d import Scene\n\n"
        "class Plain(Scene):\n"
        '    """Says what it is in its docstring."""\n'
        "    name = 'plain'\n"
        "    params = {'iters': 4}\n"
        "    def setup(self, ctx, size, params): pass\n"
        "    def render(self, frame): pass\n",
        encoding="utf-8",
    )
    for args in (
        ("run", "plain.py:Plain", "--frames", "2", "--size", "8x8", "-o", "p.katra"),
        ("scenes", "plain.py:Plain"),
    ):
        res = katra_cli(*args)
        assert res.returncode == 2 and "Traceback" not in res.stderr, res.stderr
        assert (
            "param 'iters' must be a katra3d.Param, e.g. params = {'iters': Param(4, type=int)}"
            in _error_line(res)
        )
    (tmp_path / "plain.py").write_text(
        (tmp_path / "plain.py")
        .read_text(encoding="utf-8")
        .replace("from katra3d import Scene", "from katra3d import Param, Scene")
        .replace("{'iters': 4}", "{'iters': Param(4)}"),
        encoding="utf-8",
    )
    res = katra_cli("scenes", "plain.py:Plain")
    assert res.returncode == 0, res.stderr
    assert res.stdout.splitlines()[0] == "plain  -  Says what it is in its docstring."
    # nothing to say: no "-" line
    assert "stresses:" not in res.stdout and "suites:" not in res.stdout


# --------------------------------------------------------------------------- 6. ab --force


def _ab(katra_cli: Any, *extra: str) -> subprocess.CompletedProcess[str]:
    cmd = "cp one.katra {out}"
    return katra_cli(
        "ab", "--base", cmd, "--new", cmd, "--rounds", "2", "-o", "d", "--quiet", *extra
    )


def test_ab_force_replaces_only_an_earlier_ab_run(katra_cli: Any, tmp_path: Path) -> None:
    write_trace(tmp_path / "one.katra", frame_zone_stream(30), STRINGS)
    assert _ab(katra_cli).returncode in (0, 1)
    started = json.loads((tmp_path / "d" / AB_MANIFEST).read_text())["started"]
    (tmp_path / "d" / "notes.txt").write_text("mine")
    res = _ab(katra_cli)
    assert (
        res.returncode == 2
        and "already holds an A/B run (ab.json); give --force" in _error_line(res)
    )
    # an earlier round, now unreadable
    (tmp_path / "d" / "base" / "run-001.katra").write_bytes(b"x")
    res = _ab(katra_cli, "--force")
    assert res.returncode in (0, 1), res.stderr
    assert open_trace(tmp_path / "d" / "base" / "run-001.katra").status == "complete"
    assert (tmp_path / "d" / "notes.txt").read_text() == "mine"  # not ab's: left alone
    assert json.loads((tmp_path / "d" / AB_MANIFEST).read_text())["started"] >= started
    # a file ab did not write: nothing is removed
    (tmp_path / "d" / "new" / "keep.csv").write_text("mine")
    res = _ab(katra_cli, "--force")
    assert (
        res.returncode == 2
        and "holds 'keep.csv', which katra3d ab did not write" in _error_line(res)
    )
    assert sorted(p.name for p in (tmp_path / "d" / "new").iterdir()) == [
        "keep.csv",
        "run-001.katra",
        "run-002.katra",
    ]


def test_clear_ab_dir_removes_nothing_from_a_directory_without_a_manifest(tmp_path: Path) -> None:
    (tmp_path / "base").mkdir()
    (tmp_path / "base" / "run-001.katra").write_bytes(b"x")
    with pytest.raises(
        ConfigError, match="holds no ab.json: it is not a katra3d ab output directory"
    ):
        clear_ab_dir(tmp_path)
    assert (tmp_path / "base" / "run-001.katra").exists()


# --------------------------------------------------------------------------- 6. shell completion


def _complete(line: str, tmp_path: Path) -> list[str]:
    """What the shell gets for ``line`` through argcomplete's protocol (the cursor at its end)."""
    out = tmp_path / "completions.txt"
    env = {
        "_ARGCOMPLETE": "1",
        "COMP_LINE": line,
        "COMP_POINT": str(len(line)),
        "_ARGCOMPLETE_STDOUT_FILENAME": str(out),
    }
    res = katra(env=env, timeout=60, cwd=tmp_path)
    assert res.returncode == 0, res.stderr
    return [w.strip() for w in out.read_text().split("\v") if w.strip()]


def test_completion_offers_subcommands_options_scenes_and_suites(tmp_path: Path) -> None:
    assert _complete("katra3d r", tmp_path) == ["run", "report"]
    assert _complete("katra3d run tri", tmp_path) == ["triangle"]
    assert _complete("katra3d scenes fi", tmp_path) == ["fillrate"]
    assert _complete("katra3d run --suite ", tmp_path) == ["ci", "default", "stress"]
    assert "--traceback" in _complete("katra3d --tr", tmp_path)
    # where argcomplete looks for it
    head = (REPO / "harness" / "cli" / "__init__.py").read_bytes()[:1024]
    assert b"PYTHON_ARGCOMPLETE_OK" in head


# --------------------------------------------------------------------------- 6. the README and the
# set-up


@pytest.mark.gl
def test_the_readmes_python_snippet_runs_twice(tmp_path: Path) -> None:
    (program,) = [b for b in blocks(REPO / "README.md") if b.is_program]
    (tmp_path / "snippet.py").write_text(program.body + "\n")
    env = {k: v for k, v in os.environ.items() if k != "KATRA3D_BACKEND"}
    for _ in range(2):
        res = subprocess.run(
            [sys.executable, "snippet.py"],
            cwd=tmp_path,
            env=env,
            capture_output=True,
            text=True,
            timeout=300,
            check=False,
        )
        assert res.returncode == 0, res.stderr
    assert [p.name for p in tmp_path.glob("*.katra")] == ["my-renderer.katra"]


def test_the_readmes_export_example_names_the_file_written() -> None:
    text = (REPO / "README.md").read_text()
    match = re.search(r"katra3d export (\S+) --to (\w+)\s+# writes (\S+) beside the trace", text)
    assert match is not None
    assert default_path(match[1], match[2]).name == match[3]


def test_the_quiet_set_up_ignores_setuptools_editable_notice_and_nothing_else() -> None:
    makefile = (REPO / "Makefile").read_text()
    (value,) = re.findall(r'^QUIET_EDITABLE := PYTHONWARNINGS="([^"]+)"$', makefile, re.M)
    assert "$(QUIET_EDITABLE) $(PY) -m pip install --quiet -e" in makefile
    # setuptools' notice (setuptools/command/editable_wheel.py, InformationOnly.emit("Editable
    # installation.", ...))
    code = (
        "import warnings\n"
        "warnings.warn('Editable installation.\\n!!\\n  Please be careful with folders', "
        "UserWarning)\n"
        "warnings.warn('a real problem', UserWarning)\n"
    )
    res = subprocess.run(
        [sys.executable, "-c", code],
        env={**os.environ, "PYTHONWARNINGS": value},
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    assert "a real problem" in res.stderr and "Editable installation" not in res.stderr
