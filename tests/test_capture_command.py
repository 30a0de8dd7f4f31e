"""The one capture service (harness/versions/command.py) of ab, bisect and ci/: ``{out}`` in any
quotes and a path with a space, its own process group stopped whole on Ctrl-C, SIGTERM and when the
command ends, and its failure tail."""

from __future__ import annotations

import json
import os
import shlex
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from katra3d.harness.versions.command import (
    FAILURE_TAIL_LINES,
    PLAIN_PATH,
    CaptureCommand,
    CaptureFailed,
    plain_out,
    run_capture,
    substitute_out,
)
from katra_trace.errors import ConfigError, Interrupted
from tests.test_compare_cli import write_run


def _gone(pid: int, within_s: float = 30.0) -> bool:
    """Whether process ``pid`` has ended (waits for it up to ``within_s``: a deadline, not a timing
    check).
    """
    deadline = time.monotonic() + within_s
    while time.monotonic() < deadline:
        try:
            os.kill(pid, 0)
        except ProcessLookupError:
            return True
        # a zombie is gone too (its parent reaps it)
        with open(f"/proc/{pid}/stat", encoding="ascii") as f:
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


def test_out_is_a_plain_path_that_needs_no_quotes(tmp_path: Path) -> None:
    plain = tmp_path / "runs" / "run-001.katra"
    with plain_out(plain) as told:
        assert (
            told == plain and substitute_out("sh -c 'cp a {out}'", told) == f"sh -c 'cp a {plain}'"
        )
    (tmp_path / "it's a $b").mkdir()
    odd = tmp_path / "it's a $b" / "run 1.katra"
    with plain_out(odd) as told:
        assert PLAIN_PATH.fullmatch(str(told)) and told.parent.resolve() == odd.parent.resolve()
        holder = told.parent.parent
        # written under a plain stand-in name, moved to the real one at the end
        told.write_bytes(b"trace")
    assert odd.read_bytes() == b"trace" and not holder.exists()
    assert sorted(p.name for p in odd.parent.iterdir()) == ["run 1.katra"]
    with pytest.raises(ConfigError, match="not a plain path"):
        substitute_out("cp a {out}", odd)
    with pytest.raises(ConfigError, match=r"must contain \{out\} or \$KATRA3D_OUT"):
        CaptureCommand("true").check("--base")
    CaptureCommand('cp a "$KATRA3D_OUT"').check("--base")


#: ``{out}`` bare, in the user's quotes of each kind, in a shell the command starts (in its single
#: and double quotes, and in quotes inside those), and ``$KATRA3D_OUT``: the audit's three forms
#: that went wrong are the nested double quotes (wrote outside DIR), ``'{out}'`` (a file named
#: "$KATRA3D_OUT") and ``sh -c 'cp G "{out}"'`` (split at the space).
OUT_FORMS = [
    "cp {src} {out}",
    'cp {src} "{out}"',
    "cp {src} '{out}'",
    "sh -c 'cp {src} {out}'",
    'sh -c "cp {src} {out}"',
    "sh -c 'cp {src} \"{out}\"'",
    "sh -c \"sh -c 'cp {src} {out}'\"",
    'cp {src} "$KATRA3D_OUT"',
    "sh -c 'cp {src} \"$KATRA3D_OUT\"'",
]


@pytest.mark.parametrize("template", OUT_FORMS)
def test_a_path_with_a_space_or_a_quote_is_written_whatever_the_quotes(
    tmp_path: Path, template: str
) -> None:
    src = tmp_path / "g.katra"
    src.write_bytes(b"trace")
    (tmp_path / "it's a").write_text("the user's file\n")  # what a split at the space would hit
    runs = tmp_path / "it's a b $HOME"
    runs.mkdir()
    out = runs / "run 1.katra"
    run_capture(CaptureCommand(template.replace("{src}", str(src)), cwd=tmp_path), out)
    assert out.read_bytes() == b"trace"
    assert sorted(p.name for p in runs.iterdir()) == ["run 1.katra"]
    # nothing beside
    assert sorted(p.name for p in tmp_path.iterdir()) == ["g.katra", "it's a", "it's a b $HOME"]
    assert (tmp_path / "it's a").read_text() == "the user's file\n"


def test_ab_writes_into_a_directory_with_a_space_with_out_in_the_users_quotes(
    tmp_path: Path, katra_cli
) -> None:
    """`{out}` inside the user's own single quotes, -o with a space: the trace goes into the
    directory with the space, never to `runs/a` (replacing a file there) with 'wrote no trace'."""
    g = write_run(tmp_path / "g.katra", 10.0, seed=1)
    (tmp_path / "runs").mkdir()
    (tmp_path / "runs" / "a").write_text("the user's file\n")
    r = katra_cli(
        "ab",
        "--base",
        f"sh -c 'cp {g} {{out}}'",
        "--new",
        f"sh -c 'cp {g} {{out}}'",
        "--rounds",
        "2",
        "-o",
        "runs/a b",
        "--quiet",
    )
    assert r.returncode in (0, 2), r.stderr  # two identical sides: no verdict of a change
    assert sorted(p.name for p in (tmp_path / "runs/a b/base").iterdir()) == [
        "run-001.katra",
        "run-002.katra",
    ]
    assert (tmp_path / "runs" / "a").read_text() == "the user's file\n"


def test_a_failure_carries_the_end_of_its_output_and_its_command_on_one_line(
    tmp_path: Path,
) -> None:
    out = tmp_path / "x.katra"
    lines = "; ".join(f"echo line {i}" for i in range(FAILURE_TAIL_LINES + 5))
    with pytest.raises(CaptureFailed) as failed:
        run_capture(
            CaptureCommand(f"{lines}\nexit 3 # {{out}}", cwd=tmp_path),
            out,
            log=tmp_path / "l.log",
            what="round 1/2 BASE",
        )
    err = failed.value
    assert err.reason == "failed with exit code 3" and "\n" not in str(err)
    assert str(err).startswith("round 1/2 BASE command failed with exit code 3: echo line 0; ")
    assert err.tail == tuple(f"line {i}" for i in range(5, FAILURE_TAIL_LINES + 5))
    log = (tmp_path / "l.log").read_text().splitlines()
    assert (
        log[0].startswith("$ echo line 0;")
        and log[-1] == "[exit 3]"
        and len(log) == FAILURE_TAIL_LINES + 7
    )


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
    """Ctrl-C (or SIGTERM) of `katra3d ab` while a capture runs: the capture's children go too, and
    nothing writes into DIR after ab has exited (a `make && katra3d run` command kept writing
    before)."""
    pid = tmp_path / "pid"
    hang = f"sh -c 'sleep 300 & echo $! > {pid}; wait' # {{out}}"
    env = {k: v for k, v in os.environ.items() if k != "KATRA3D_BACKEND"}
    proc = subprocess.Popen(
        [
            sys.executable,
            "-m",
            "katra3d",
            "ab",
            "--base",
            hang,
            "--new",
            hang,
            "-o",
            str(tmp_path / "ab"),
            "--quiet",
        ],
        cwd=tmp_path,
        env=env,
        text=True,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        # a background job's children start with SIGINT ignored: the user's Ctrl-C is not
        preexec_fn=lambda: signal.signal(signal.SIGINT, signal.SIG_DFL),
    )
    _wait_for(pid, proc)
    proc.send_signal(signum)
    _, err = proc.communicate(timeout=60)
    assert proc.returncode == 128 + signum and err.strip().endswith("katra3d: interrupted"), err
    assert "Traceback" not in err and _gone(int(pid.read_text()))


def _stopped_by_sigterm(cmd: CaptureCommand, out: Path) -> Interrupted:
    """Run ``cmd``, which sends this test process SIGTERM: run_capture raises Interrupted for it,
    and puts back the SIGTERM handler it replaced (put back here too, whatever happens)."""
    old = signal.getsignal(signal.SIGTERM)
    try:
        with pytest.raises(Interrupted) as stopped:
            run_capture(cmd, out)
    finally:
        signal.signal(signal.SIGTERM, old)
    assert stopped.value.signum == signal.SIGTERM and signal.getsignal(signal.SIGTERM) is old
    return stopped.value


def test_a_stop_signal_in_the_library_raises_interrupted_after_the_group_is_gone(
    tmp_path: Path,
) -> None:
    pid = tmp_path / "pid"
    # $PPID: this test
    cmd = CaptureCommand(f"sleep 300 & echo $! > {pid}; kill -TERM $PPID; wait # {{out}}")
    stopped = _stopped_by_sigterm(cmd, tmp_path / "o.katra")
    assert stopped.exit_code == 128 + signal.SIGTERM and _gone(int(pid.read_text()))


def test_a_failure_quotes_what_the_command_said_never_the_command(tmp_path: Path) -> None:
    """bisect's reason for a failed capture quoted its own command: its log starts with a `$
    command` line of several lines, and only the first was skipped. The tail is the command's own
    output only."""
    log = tmp_path / "logs" / "x.log"
    with pytest.raises(CaptureFailed) as failed:
        run_capture(
            CaptureCommand("echo it broke\nexit 2 # {out}", cwd=tmp_path, pythonpath=tmp_path),
            tmp_path / "o.katra",
            log=log,
        )
    assert failed.value.tail == ("it broke",)
    # appended to the same log
    run_capture(CaptureCommand("echo fine > {out}"), tmp_path / "p.katra", log=log)
    with pytest.raises(CaptureFailed) as again:
        run_capture(CaptureCommand("exit 1 # {out}"), tmp_path / "q.katra", log=log)
    assert again.value.tail == ()  # nothing of the earlier captures' lines in that log


def _captures_writing_into(root: Path) -> list[int]:
    """The processes whose ``$KATRA3D_OUT`` lies in ``root``: what is left of a capture that wrote
    there.
    """
    prefix = f"KATRA3D_OUT={root.resolve()}{os.sep}".encode()
    found = []
    for name in os.listdir("/proc"):
        if not name.isdigit():
            continue
        try:
            with open(f"/proc/{name}/environ", "rb") as f:
                env = f.read().split(b"\0")
        except OSError:
            continue
        if any(entry.startswith(prefix) for entry in env) and not _gone(int(name), within_s=0.1):
            found.append(int(name))
    return found


def _lines(path: Path) -> list[str]:
    return path.read_text().splitlines() if path.is_file() else []


def test_a_stopped_capture_is_waited_for_whole_then_asked_to_stop_now_then_killed(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Ctrl-C ended the capture's shell at once, and its group was SIGKILLed as soon as the shell
    had ended: a `katra3d run` under that shell never finished its trace. Now the whole group gets
    the grace (a process that notes each SIGTERM and goes on is asked twice: the first stop, then a
    run's stop-now), then SIGKILL."""
    from katra3d.harness import supervisor
    from katra3d.harness.versions import command as service

    # shortened only: the order of the steps is what is checked
    monkeypatch.setattr(service, "STOP_GRACE_S", 0.5)
    monkeypatch.setattr(supervisor, "HARD_STOP_WAIT_S", 0.5)
    got, inner = tmp_path / "got", tmp_path / "inner"
    cmd = CaptureCommand(
        f'sh -c \'trap "echo term >> {got}" TERM; echo $$ > {inner}; '
        f"while :; do sleep 0.1; done' & while [ ! -s {inner} ]; do sleep 0.05; done; "
        # $PPID: this test; the shell itself ends on the TERM
        "kill -TERM $PPID; wait # {out}"
    )
    _stopped_by_sigterm(cmd, tmp_path / "o.katra")
    assert _lines(got) == ["term", "term"] and _gone(int(inner.read_text()))


def test_a_second_stop_signal_kills_the_capture_at_once(tmp_path: Path) -> None:
    """The grace is for a run finishing its trace; a second Ctrl-C does not wait for it (the default
    grace is long: without the second signal this capture would be asked again, not killed)."""
    got, inner = tmp_path / "got", tmp_path / "inner"
    # the process that outlives its shell answers the first stop with a second signal to this test
    cmd = CaptureCommand(
        f'sh -c \'trap "echo term >> {got}; kill -INT {os.getpid()}" TERM; echo $$ > {inner}; '
        f"while :; do sleep 0.1; done' & while [ ! -s {inner} ]; do sleep 0.05; done; "
        "kill -TERM $PPID; wait # {out}"
    )
    old = {sig: signal.getsignal(sig) for sig in (signal.SIGTERM, signal.SIGINT)}
    try:
        with pytest.raises(Interrupted) as stopped:
            run_capture(cmd, tmp_path / "o.katra")
    finally:
        for sig, handler in old.items():
            signal.signal(sig, handler)
    assert stopped.value.signum == signal.SIGTERM  # the first signal says what stopped it
    assert _lines(got) == ["term"] and _gone(int(inner.read_text()))


@pytest.mark.slow
def test_ctrl_c_of_ab_lets_the_run_finish_its_trace_as_interrupted_and_force_replaces_it(
    tmp_path: Path,
) -> None:
    """The reviewer's case: Ctrl-C of `ab` whose capture is a shell running `katra3d run`. The run
    finishes its trace as interrupted (it was SIGKILLed with its `.part` left, and no ab.json, so
    `ab --force` refused), ab records the round, no process is left, and `ab --force` replaces the
    directory."""
    root = tmp_path / "ab"
    run = (
        f"{shlex.quote(sys.executable)} -m katra3d run triangle --size 16x16 --frames 1000000 "
        "--quiet -o {out}"
    )
    cmd = f"sh -c '{run}'"
    env = {k: v for k, v in os.environ.items() if k != "KATRA3D_BACKEND"}
    proc = subprocess.Popen(
        [
            sys.executable,
            "-m",
            "katra3d",
            "ab",
            "--base",
            cmd,
            "--new",
            cmd,
            "-o",
            str(root),
            "--quiet",
        ],
        cwd=tmp_path,
        env=env,
        text=True,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        start_new_session=True,
        preexec_fn=lambda: signal.signal(signal.SIGINT, signal.SIG_DFL),
    )
    part = root / "base" / "run-001.katra.part"
    deadline = time.monotonic() + 120
    while not (part.is_file() and part.stat().st_size > 8192):  # the run is recording frames
        if proc.poll() is not None or time.monotonic() > deadline:
            os.killpg(proc.pid, signal.SIGKILL)
            raise AssertionError(f"the round never started: {proc.communicate()}")
        time.sleep(0.05)
    # as a terminal's Ctrl-C: ab's group (its captures are in sessions of their own)
    os.killpg(proc.pid, signal.SIGINT)
    _, err = proc.communicate(timeout=120)
    assert proc.returncode == 130 and err.strip().endswith("katra3d: interrupted"), err
    assert "Traceback" not in err and "(kept as interrupted: base/run-001.katra)" in err
    with pytest.raises(ProcessLookupError):
        os.killpg(proc.pid, 0)  # nothing left in ab's group
    assert _captures_writing_into(root) == []  # nor of its capture's
    trace = root / "base" / "run-001.katra"
    assert sorted(p.name for p in root.rglob("*") if p.is_file()) == ["ab.json", "run-001.katra"]
    checked = subprocess.run(
        [sys.executable, "-m", "katra3d", "validate", str(trace)],
        env=env,
        text=True,
        capture_output=True,
    )
    assert checked.returncode == 0 and "status interrupted" in checked.stdout, checked
    manifest = json.loads((root / "ab.json").read_text())
    assert manifest["rounds"] == [] and manifest["interrupted"] == {
        "round": 1,
        "signal": "SIGINT",
        "traces": {"base": "base/run-001.katra"},
    }
    g = write_run(tmp_path / "g.katra", 10.0, seed=1)
    again = subprocess.run(
        [
            sys.executable,
            "-m",
            "katra3d",
            "ab",
            "--base",
            f"cp {g} {{out}}",
            "--new",
            f"cp {g} {{out}}",
            "--rounds",
            "2",
            "-o",
            str(root),
            "--force",
            "--quiet",
        ],
        env=env,
        text=True,
        capture_output=True,
        cwd=tmp_path,
    )
    # identical sides
    assert again.returncode in (0, 2) and "Traceback" not in again.stderr, again.stderr
    assert "removed the earlier A/B run" not in again.stderr  # --quiet
    assert (root / "base" / "run-001.katra").read_bytes() == g.read_bytes()
    assert len(json.loads((root / "ab.json").read_text())["rounds"]) == 2


def test_ctrl_c_of_ab_before_its_capture_wrote_a_trace_says_so(tmp_path: Path) -> None:
    """It said "its capture finished its trace as interrupted" whether a trace was written or
    not."""
    started = tmp_path / "started"
    cmd = f"touch {started}; sleep 60 # {{out}}"
    proc = subprocess.Popen(
        [
            sys.executable,
            "-m",
            "katra3d",
            "ab",
            "--base",
            cmd,
            "--new",
            cmd,
            "-o",
            str(tmp_path / "ab"),
            "--quiet",
        ],
        cwd=tmp_path,
        text=True,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        start_new_session=True,
        preexec_fn=lambda: signal.signal(signal.SIGINT, signal.SIG_DFL),
    )
    deadline = time.monotonic() + 60
    while not started.exists():
        if proc.poll() is not None or time.monotonic() > deadline:
            os.killpg(proc.pid, signal.SIGKILL)
            raise AssertionError(f"the capture never started: {proc.communicate()}")
        time.sleep(0.02)
    os.killpg(proc.pid, signal.SIGINT)
    _, err = proc.communicate(timeout=60)
    assert proc.returncode == 130 and "(it wrote no trace); ab --force replaces them all" in err, (
        err
    )
    assert json.loads((tmp_path / "ab" / "ab.json").read_text())["interrupted"]["traces"] == {}


@pytest.mark.gl
def test_a_katra3d_run_hands_its_result_back_through_the_child_protocol(tmp_path: Path) -> None:
    """``katra3d run`` under a capture command writes a ChildResult where $KATRA3D_RESULT says: its
    error line and exit code reach the failure even when the shell exits 0, a trace written
    elsewhere is named, and a run stopped by a signal is a failure; a command that is not katra3d
    is judged by exit code and file alone."""
    katra3d = f"{shlex.quote(sys.executable)} -m katra3d run"
    out = tmp_path / "x.katra"
    with pytest.raises(CaptureFailed) as failed:
        run_capture(CaptureCommand(f"{katra3d} no-such-scene -o {{out}}; true"), out)
    assert failed.value.reason.startswith("failed with exit code 2: unknown scene 'no-such-scene'")
    assert failed.value.error.startswith("unknown scene 'no-such-scene'") and not out.exists()
    elsewhere = tmp_path / "elsewhere.katra"
    with pytest.raises(CaptureFailed) as moved:
        run_capture(
            CaptureCommand(f"{katra3d} clear --frames 2 --size 8x8 -o {elsewhere} # {{out}}"), out
        )
    assert moved.value.reason == f"wrote its trace at '{elsewhere}', not at '{out}'"
    assert elsewhere.is_file() and not moved.value.error
    assert run_capture(CaptureCommand(f"{katra3d} clear --frames 2 --size 8x8 -o {{out}}"), out)
    assert out.is_file()
    with pytest.raises(CaptureFailed) as plain:
        run_capture(CaptureCommand("exit 0 # {out}"), tmp_path / "none.katra")
    assert plain.value.reason.startswith("exited 0 but wrote no trace at ")
    stopped = tmp_path / "stopped.katra"
    with pytest.raises(CaptureFailed) as interrupted:
        run_capture(
            CaptureCommand(
                f"{katra3d} triangle --size 8x8 --frames 10000000 -o {{out}} & pid=$!; "
                "while [ ! -e {out}.part ]; do sleep 0.1; done; sleep 1; kill -TERM $pid; "
                "wait $pid; exit 0"
            ),
            stopped,
        )
    assert interrupted.value.reason == "was stopped by SIGTERM: its trace is interrupted"
    assert stopped.is_file()
