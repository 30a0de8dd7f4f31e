"""The one capture service (harness/versions/command.py) of ab, bisect and ci/: ``{out}`` in any quotes and a
path with a space, its own process group stopped whole on Ctrl-C, SIGTERM and when the command ends, and its
failure tail."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from katra3d.harness.versions.command import (
    FAILURE_TAIL_LINES,
    CaptureCommand,
    CaptureFailed,
    run_capture,
    substitute_out,
)
from katra_trace.errors import ConfigError, Interrupted
from tests.test_compare_cli import write_run


def _gone(pid: int, within_s: float = 30.0) -> bool:
    """Whether process ``pid`` has ended (waits for it up to ``within_s``: a deadline, not a timing check)."""
    deadline = time.monotonic() + within_s
    while time.monotonic() < deadline:
        try:
            os.kill(pid, 0)
        except ProcessLookupError:
            return True
        with open(f"/proc/{pid}/stat", encoding="ascii") as f:  # a zombie is gone too (its parent reaps it)
            if f.read().rsplit(")", 1)[1].split()[0] == "Z":
                return True
        time.sleep(0.05)
    return False


def _wait_for(path: Path, proc: subprocess.Popen[str], within_s: float = 60.0) -> None:
    deadline = time.monotonic() + within_s
    while not (path.is_file() and path.read_text().strip()):
        if proc.poll() is not None or time.monotonic() > deadline:
            proc.kill()
            raise AssertionError(f"{path} never appeared; the command said: {proc.communicate()}")
        time.sleep(0.05)


def test_out_is_an_environment_reference_quoted_for_where_it_stands() -> None:
    assert substitute_out("cp a {out}") == 'cp a "$KATRA3D_OUT"'
    assert substitute_out('cp a "{out}"') == 'cp a "${KATRA3D_OUT}"'
    assert substitute_out("sh -c 'cp a {out}'") == "sh -c 'cp a \"$KATRA3D_OUT\"'"
    assert substitute_out("""echo "it's" {out} 'say "{out}"'""") == \
        """echo "it's" "$KATRA3D_OUT" 'say ""$KATRA3D_OUT""'"""
    assert substitute_out(r"echo \' {out}") == r'echo \' "$KATRA3D_OUT"'
    with pytest.raises(ConfigError, match=r"must contain \{out\} or \$KATRA3D_OUT"):
        CaptureCommand("true").check("--base")
    CaptureCommand('cp a "$KATRA3D_OUT"').check("--base")


@pytest.mark.parametrize("template", ["cp {src} {out}", "cp {src} \"{out}\"", "sh -c 'cp {src} {out}'",
                                      "cp {src} \"$KATRA3D_OUT\"", "sh -c 'cp {src} \"$KATRA3D_OUT\"'"])
def test_a_path_with_a_space_or_a_quote_is_written_whatever_the_quotes(tmp_path: Path, template: str) -> None:
    src = tmp_path / "g.katra"
    src.write_bytes(b"trace")
    runs = tmp_path / "it's a b"
    runs.mkdir()
    out = runs / "run 1.katra"
    run_capture(CaptureCommand(template.replace("{src}", str(src))), out)
    assert out.read_bytes() == b"trace"
    assert sorted(p.name for p in tmp_path.iterdir()) == ["g.katra", "it's a b"]  # nothing written beside it


def test_ab_writes_into_a_directory_with_a_space_with_out_in_the_users_quotes(tmp_path: Path, katra_cli) -> None:
    """The issue's case: `{out}` inside the user's own single quotes, -o with a space. It wrote to `runs/a`,
    replacing any file there, then said 'wrote no trace'."""
    g = write_run(tmp_path / "g.katra", 10.0, seed=1)
    (tmp_path / "runs").mkdir()
    (tmp_path / "runs" / "a").write_text("the user's file\n")
    r = katra_cli("ab", "--base", f"sh -c 'cp {g} {{out}}'", "--new", f"sh -c 'cp {g} {{out}}'", "--rounds", "2",
                  "-o", "runs/a b", "--quiet")
    assert r.returncode in (0, 2), r.stderr  # two identical sides: no verdict of a change
    assert sorted(p.name for p in (tmp_path / "runs/a b/base").iterdir()) == ["run-001.katra", "run-002.katra"]
    assert (tmp_path / "runs" / "a").read_text() == "the user's file\n"


def test_a_failure_carries_the_end_of_its_output_and_its_command_on_one_line(tmp_path: Path) -> None:
    out = tmp_path / "x.katra"
    lines = "; ".join(f"echo line {i}" for i in range(FAILURE_TAIL_LINES + 5))
    with pytest.raises(CaptureFailed) as failed:
        run_capture(CaptureCommand(f"{lines}\nexit 3 # {{out}}", cwd=tmp_path), out, log=tmp_path / "l.log",
                    what="round 1/2 BASE")
    err = failed.value
    assert err.reason == "failed with exit code 3" and "\n" not in str(err)
    assert str(err).startswith("round 1/2 BASE command failed with exit code 3: echo line 0; ")
    assert err.tail == tuple(f"line {i}" for i in range(5, FAILURE_TAIL_LINES + 5))
    log = (tmp_path / "l.log").read_text().splitlines()
    assert log[0].startswith("$ echo line 0;") and log[-1] == "[exit 3]" and len(log) == FAILURE_TAIL_LINES + 7


def test_a_worktree_is_the_current_directory_and_first_on_the_import_path(tmp_path: Path) -> None:
    tree = tmp_path / "tree"
    tree.mkdir()
    out = tmp_path / "o.txt"
    run_capture(CaptureCommand("(pwd; echo $PYTHONPATH) > {out}", cwd=tree, pythonpath=tree), out)
    where, path = out.read_text().splitlines()
    assert where == str(tree) and path.split(os.pathsep)[0] == str(tree)


def test_a_capture_leaves_no_process_behind_when_it_ends(tmp_path: Path) -> None:
    out, pid = tmp_path / "o.katra", tmp_path / "pid"
    run_capture(CaptureCommand(f"sleep 300 & echo $! > {pid}; echo done > {{out}}"), out)
    assert out.read_text() == "done\n" and _gone(int(pid.read_text()))


@pytest.mark.parametrize("signum", [signal.SIGINT, signal.SIGTERM])
def test_a_stop_signal_stops_the_whole_group_of_an_ab_capture(tmp_path: Path, signum: int) -> None:
    """Ctrl-C (or SIGTERM) of `katra3d ab` while a capture runs: the capture's children go too, and nothing
    writes into DIR after ab has exited (a `make && katra3d run` command kept writing before)."""
    pid = tmp_path / "pid"
    hang = f"sh -c 'sleep 300 & echo $! > {pid}; wait' # {{out}}"
    env = {k: v for k, v in os.environ.items() if k != "KATRA3D_BACKEND"}
    proc = subprocess.Popen([sys.executable, "-m", "katra3d", "ab", "--base", hang, "--new", hang, "-o",
                             str(tmp_path / "ab"), "--quiet"], cwd=tmp_path, env=env, text=True,
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                            # a background job's children start with SIGINT ignored: the user's Ctrl-C is not
                            preexec_fn=lambda: signal.signal(signal.SIGINT, signal.SIG_DFL))
    _wait_for(pid, proc)
    proc.send_signal(signum)
    _, err = proc.communicate(timeout=60)
    assert proc.returncode == 128 + signum and err.strip().endswith("katra3d: interrupted"), err
    assert "Traceback" not in err and _gone(int(pid.read_text()))


def test_a_stop_signal_in_the_library_raises_interrupted_after_the_group_is_gone(tmp_path: Path) -> None:
    pid = tmp_path / "pid"
    cmd = CaptureCommand(f"sleep 300 & echo $! > {pid}; kill -TERM $PPID; wait # {{out}}")  # $PPID: this test
    old = signal.getsignal(signal.SIGTERM)
    try:
        with pytest.raises(Interrupted) as stopped:
            run_capture(cmd, tmp_path / "o.katra")
    finally:
        signal.signal(signal.SIGTERM, old)
    assert stopped.value.signum == signal.SIGTERM and stopped.value.exit_code == 128 + signal.SIGTERM
    assert _gone(int(pid.read_text())) and signal.getsignal(signal.SIGTERM) is old


def test_a_failure_quotes_what_the_command_said_never_the_command(tmp_path: Path) -> None:
    """bisect's reason for a failed capture quoted its own command: its log starts with a `$ command` line of
    several lines, and only the first was skipped. The tail is the command's own output only."""
    log = tmp_path / "logs" / "x.log"
    with pytest.raises(CaptureFailed) as failed:
        run_capture(CaptureCommand("echo it broke\nexit 2 # {out}", cwd=tmp_path, pythonpath=tmp_path),
                    tmp_path / "o.katra", log=log)
    assert failed.value.tail == ("it broke",)
    run_capture(CaptureCommand("echo fine > {out}"), tmp_path / "p.katra", log=log)  # appended to the same log
    with pytest.raises(CaptureFailed) as again:
        run_capture(CaptureCommand("exit 1 # {out}"), tmp_path / "q.katra", log=log)
    assert again.value.tail == ()  # nothing of the earlier captures' lines in that log
