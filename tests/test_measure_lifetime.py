"""A counted child's lifetime: it dies with its parent, no dump directory outlives them, and a
Ctrl-C at any point of a counted run exits 130, keeping the frames already counted.

The real runs start ``katra3d run --measure instructions`` with TMPDIR pointing at a directory of
the test's own, and follow the child through its progress file there. SIGINT is set back to its
default in each started command: a shell's background job starts with SIGINT ignored, and ignored it
would stay.
"""

from __future__ import annotations

import json
import os
import shutil
import signal
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import pytest

from katra3d.harness.run import lifetime, measure
from katra_trace import open_trace

KATRA3D = str(Path(sys.executable).with_name("katra3d"))
HAVE_VALGRIND = shutil.which("valgrind") is not None
COUNTED = ["--measure", "instructions", "--size", "16x16", "--warmup", "1"]


def _default_sigint() -> None:
    signal.signal(signal.SIGINT, signal.SIG_DFL)


def _start(tmp_path: Path, *args: str) -> tuple[subprocess.Popen[str], Path]:
    tmp = tmp_path / "tmp"
    tmp.mkdir()
    proc = subprocess.Popen(
        [KATRA3D, "run", *args, *COUNTED, "-o", str(tmp_path / "t.katra")],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        env={**os.environ, "TMPDIR": str(tmp)},
        preexec_fn=_default_sigint,
    )
    return proc, tmp


def _wait_for(what: str, check: Any, proc: subprocess.Popen[str], limit_s: float = 300) -> Any:
    """Poll ``check()`` until it returns something true (the run must still be going)."""
    deadline = time.monotonic() + limit_s
    while time.monotonic() < deadline:
        found = check()
        if found:
            return found
        assert proc.poll() is None, f"the run ended before {what}: {proc.communicate()}"
        time.sleep(0.1)
    proc.kill()
    pytest.fail(f"no {what} within {limit_s} s")


def _calls(tmp: Path) -> list[list[Any]]:
    """The progress calls the child has written so far (its dump directory's progress file)."""
    out: list[list[Any]] = []
    for path in tmp.glob(f"{lifetime.DUMP_PREFIX}*/{measure.PROGRESS_FILE}"):
        for raw in path.read_bytes().split(b"\n")[:-1]:
            out.append(json.loads(raw))
    return out


def _counting(tmp: Path, frames: int) -> bool:
    """Whether the child has counted ``frames`` measured frames."""
    calls = _calls(tmp)
    starts = [
        i for i, c in enumerate(calls) if c[0] == "phase" and str(c[1]).endswith(": counting")
    ]
    return bool(starts) and any(c[0] == "advance" and c[1] >= frames for c in calls[starts[-1] :])


def _children(parent: int) -> list[int]:
    """The PIDs whose parent is ``parent``."""
    found = []
    for entry in Path("/proc").iterdir():
        if entry.name.isdigit():
            try:
                stat = (entry / "stat").read_text()
            except OSError:
                continue
            if int(stat.rsplit(")", 1)[1].split()[1]) == parent:
                found.append(int(entry.name))
    return found


def _running(pid: int) -> bool:
    """Whether ``pid`` exists and is not a zombie."""
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return False
    return stat.rsplit(")", 1)[1].split()[0] != "Z"


# --------------------------------------------------------------------------- pure pieces


def test_stale_dump_directories_of_dead_owners_are_removed(tmp_path: Path) -> None:
    live = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(60)"])
    dead = subprocess.Popen([sys.executable, "-c", "pass"])
    dead.wait()
    try:
        made = {}
        for name, pid in (("live", live.pid), ("dead", dead.pid), ("mine", os.getpid())):
            made[name] = tmp_path / f"{lifetime.DUMP_PREFIX}{pid:010d}-abcdefgh"
            (made[name] / "sub").mkdir(parents=True)
        other = tmp_path / f"{lifetime.DUMP_PREFIX}older-name"  # not one with an owner: left alone
        other.mkdir()
        assert lifetime.remove_stale_dump_dirs(tmp_path) == [made["dead"]]
        assert sorted(tmp_path.iterdir()) == sorted([made["live"], made["mine"], other])
    finally:
        live.kill()
        live.wait()


def test_dump_directory_names_have_one_length_and_name_their_owner(
    tmp_path: Path, monkeypatch: Any
) -> None:
    monkeypatch.setenv("TMPDIR", str(tmp_path))
    monkeypatch.setattr("tempfile.tempdir", None)
    a, b = lifetime.make_dump_dir(), lifetime.make_dump_dir()
    assert a.parent == tmp_path and len(a.name) == len(b.name) and a != b
    assert lifetime.owner_pid(a) == os.getpid()


def test_sigkill_of_the_parent_ends_the_child_and_the_next_run_removes_its_dumps(
    tmp_path: Path,
) -> None:
    if not HAVE_VALGRIND:
        pytest.skip("valgrind is not installed")
    proc, tmp = _start(tmp_path, "triangle", "--frames", "2000")
    _wait_for("a counted frame", lambda: _counting(tmp, 1), proc)
    children = _children(proc.pid)
    assert len(children) == 1, children
    dumps = list(tmp.glob(f"{lifetime.DUMP_PREFIX}*"))
    assert len(dumps) == 1
    proc.kill()
    proc.communicate()
    deadline = time.monotonic() + 60
    while _running(children[0]) and time.monotonic() < deadline:
        time.sleep(0.1)
    assert not _running(children[0]), "the counted child outlived its parent"
    # the next counted run removes it first; here, the function it calls
    assert lifetime.remove_stale_dump_dirs(tmp) == dumps
    assert list(tmp.iterdir()) == []


@pytest.mark.gl
@pytest.mark.slow
def test_ctrl_c_before_the_child_is_ready_exits_130_quietly(tmp_path: Path) -> None:
    if not HAVE_VALGRIND:
        pytest.skip("valgrind is not installed")
    proc, tmp = _start(tmp_path, "clear", "--frames", "2")
    # the dump directory exists: the child is starting (valgrind, Python), and has not reported yet
    _wait_for("the dump directory", lambda: any(tmp.iterdir()), proc)
    assert _calls(tmp) == []
    proc.send_signal(signal.SIGINT)
    _, stderr = proc.communicate(timeout=120)
    assert proc.returncode == 130, stderr
    assert stderr.strip().splitlines()[-1] == "katra3d: interrupted"
    assert "Traceback" not in stderr and "error" not in stderr
    assert list(tmp.iterdir()) == [], "the dump directory must be removed"
    assert not any(p.name.startswith("t.katra") for p in tmp_path.iterdir())


@pytest.mark.gl
@pytest.mark.slow
def test_ctrl_c_while_counting_exits_130_and_keeps_the_counted_frames(tmp_path: Path) -> None:
    if not HAVE_VALGRIND:
        pytest.skip("valgrind is not installed")
    proc, tmp = _start(tmp_path, "clear", "--frames", "2000")
    _wait_for("two counted frames", lambda: _counting(tmp, 2), proc)
    proc.send_signal(signal.SIGINT)
    stdout, stderr = proc.communicate(timeout=300)
    assert proc.returncode == 130, stderr
    assert "Traceback" not in stderr and "error" not in stderr
    assert "(interrupted)" in stdout
    trace = open_trace(tmp_path / "t.katra")
    assert trace.summary.status == "interrupted"
    assert trace.summary.user["scenes"][0]["frames"] >= 2
    assert list(tmp.iterdir()) == []
