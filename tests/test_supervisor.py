"""The supervisor: a child's whole group stopped in levels, signals passed on, handlers put back,
the bounded pool, and a child that dies with its parent. Real processes throughout."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path
from typing import Any

import pytest

from katra3d.harness import supervisor
from katra3d.harness.supervisor import Group, Supervisor, handling, spawn
from katra_trace.errors import Interrupted

#: A shell that notes each SIGTERM and goes on, with a background grandchild in its group.
STUBBORN = (
    'trap "echo term >> {got}" TERM; (trap "" TERM; exec sleep 120) & echo $! > {pid}; '
    "while :; do sleep 0.05; done"
)


def _alive(pid: int) -> bool:
    try:
        with open(f"/proc/{pid}/stat", encoding="ascii") as f:
            return f.read().rsplit(")", 1)[1].split()[0] != "Z"
    except OSError:
        return False


def _until(what: Any, timeout_s: float = 30.0) -> bool:
    """Wait for ``what()`` (a deadline against a stuck process, not a timing check)."""
    deadline = time.monotonic() + timeout_s
    while not what():
        if time.monotonic() > deadline:
            return False
        time.sleep(0.02)
    return True


def _stubborn(sup: Supervisor, tmp_path: Path) -> tuple[Group, Path, int]:
    got, pid = tmp_path / "got", tmp_path / "pid"
    group = sup.start(
        ["/bin/sh", "-c", STUBBORN.format(got=got, pid=pid)],
        policy="levels",
        stdout=subprocess.DEVNULL,
    )
    assert _until(lambda: pid.is_file() and pid.read_text().strip())
    return group, got, int(pid.read_text())


def test_first_stop_asks_the_whole_group_second_kills_it_and_nothing_is_left(
    tmp_path: Path,
) -> None:
    with Supervisor() as sup:
        group, got, grandchild = _stubborn(sup, tmp_path)
        assert os.getpgid(group.proc.pid) == group.proc.pid != os.getpgid(0)
        signal.raise_signal(signal.SIGINT)  # Ctrl-C: the handler is the supervisor's
        assert _until(lambda: got.is_file() and got.read_text() == "term\n")
        assert group.proc.poll() is None and _alive(grandchild)  # asked, not forced
        sup.stop(signal.SIGINT)
        assert _until(group.gone) and not _alive(grandchild)
    assert sup.received == [signal.SIGINT, signal.SIGINT]
    assert group.proc.returncode == -signal.SIGKILL


def test_end_gives_the_group_its_grace_then_stop_now_then_sigkill(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # shortened only (room for the shell to note each SIGTERM): the order of the steps is checked
    monkeypatch.setattr(supervisor, "HARD_STOP_WAIT_S", 1.5)
    with Supervisor(handle=False) as sup:
        group, got, grandchild = _stubborn(sup, tmp_path)
        group.end(1.5)
        assert group.gone() and not _alive(grandchild)
        assert got.read_text() == "term\nterm\n" and group.sent == supervisor.STOP_KILL


def test_a_group_left_running_is_killed_when_the_supervisor_exits(tmp_path: Path) -> None:
    with Supervisor(handle=False) as sup:
        group, _got, grandchild = _stubborn(sup, tmp_path)
    assert group.gone() and not _alive(grandchild)


def test_signals_policy_passes_the_signal_once_the_child_is_ready_and_kills_it_before(
    tmp_path: Path,
) -> None:
    noted = tmp_path / "noted"
    script = (
        "import signal, sys, time\n"
        "def note(s, f):\n"
        f"    open({str(noted)!r}, 'a').write(str(s) + '\\n')\n"
        "    sys.exit(0)\n"
        "signal.signal(signal.SIGINT, note)\n"
        "print('ready', flush=True)\n"
        "time.sleep(120)\n"
    )
    ready = threading.Event()
    with Supervisor(handle=False) as sup:
        early = sup.start(["sleep", "120"], policy="signals", ready=lambda: False)
        child = sup.start(
            [sys.executable, "-c", script],
            policy="signals",
            ready=ready.is_set,
            stdout=subprocess.PIPE,
            text=True,
        )
        assert child.proc.stdout is not None and child.proc.stdout.readline() == "ready\n"
        ready.set()
        sup.stop(signal.SIGINT)
        child.proc.stdout.close()
        assert child.proc.wait(timeout=30) == 0 and noted.read_text() == f"{int(signal.SIGINT)}\n"
        assert early.proc.wait(timeout=30) == -signal.SIGKILL
        # a group started after a stop gets it at once (not ready: killed)
        late = sup.start(["sleep", "120"], policy="signals", ready=lambda: False)
        assert late.proc.wait(timeout=30) == -signal.SIGKILL


def test_handling_puts_back_the_old_handlers_and_leaves_an_ignored_signal_ignored() -> None:
    def mine(_signum: int, _frame: Any) -> None:
        pass

    before = {sig: signal.getsignal(sig) for sig in supervisor.STOP_SIGNALS}
    old_int = signal.signal(signal.SIGINT, signal.SIG_IGN)
    try:
        with handling(mine, unless_ignored=True) as installed:
            assert installed and signal.getsignal(signal.SIGINT) is signal.SIG_IGN
            assert signal.getsignal(signal.SIGTERM) is mine
        with pytest.raises(RuntimeError), handling(mine):
            raise RuntimeError
        done: list[bool] = []
        thread = threading.Thread(target=lambda: done.append(handling(mine).__enter__()))
        thread.start()
        thread.join()
        assert done == [False]  # off the main thread nothing is installed
    finally:
        signal.signal(signal.SIGINT, old_int)
    assert {sig: signal.getsignal(sig) for sig in supervisor.STOP_SIGNALS} == before


def test_pool_runs_at_most_jobs_at_once_in_the_order_given_and_yields_every_result() -> None:
    lock = threading.Lock()
    now, most, started = [0], [0], []

    def task(i: int) -> int:
        with lock:
            now[0] += 1
            most[0] = max(most[0], now[0])
        _until(lambda: most[0] >= 2, 10.0)  # held until two ran at once (never, run one by one)
        with lock:
            now[0] -= 1
        return i * i

    with Supervisor(handle=False) as sup:
        order = [5, 4, 3, 2, 1, 0]
        tasks = [lambda i=i: task(i) for i in range(6)]
        got = list(sup.pool(tasks, 2, order=order, before=started.append))
    assert most[0] == 2 and started == order
    assert sorted(got) == [(i, i * i) for i in range(6)]


def test_pool_failure_kills_the_later_running_jobs_and_starts_none(tmp_path: Path) -> None:
    started: list[int] = []

    def task(i: int) -> int:
        started.append(i)
        if i == 0:
            time.sleep(0.3)  # task 1 has started its child meanwhile
            return 1
        return sup.start(["sleep", "120"]).proc.wait()

    with Supervisor(handle=False) as sup:
        tasks = [lambda i=i: task(i) for i in range(4)]
        got = dict(sup.pool(tasks, 2, failed=lambda i, code: code != 0))
    assert sorted(started) == [0, 1] and got == {0: 1, 1: -signal.SIGKILL}


def test_pool_error_stops_the_running_jobs_and_is_raised(tmp_path: Path) -> None:
    groups: list[Group] = []

    def hangs() -> int:
        groups.append(sup.start(["sleep", "120"]))
        return groups[-1].proc.wait()

    def fails() -> int:
        assert _until(lambda: bool(groups))
        raise ValueError("boom")

    with Supervisor(handle=False) as sup, pytest.raises(ValueError, match="boom"):
        list(sup.pool([hangs, fails, hangs], 2))
    assert len(groups) == 1 and groups[0].gone()
    assert groups[0].proc.returncode == -signal.SIGTERM


def test_pool_starts_nothing_after_a_stop_signal_and_leaves_interrupted_jobs_out() -> None:
    def task(i: int) -> int:
        if i == 0:
            sup.stop(signal.SIGINT)
            raise Interrupted(signal.SIGINT)
        return i

    with Supervisor(handle=False) as sup:
        assert list(sup.pool([lambda i=i: task(i) for i in range(3)], 1)) == []


def test_a_child_dies_with_its_parent() -> None:
    # a middle process starts a grandchild through spawn, prints its PID and is killed
    script = (
        "import subprocess, time\nfrom katra3d.harness.supervisor import spawn\n"
        "g = spawn(['sleep', '120'], stdout=subprocess.DEVNULL)\n"
        "print(g.proc.pid, flush=True)\ntime.sleep(120)\n"
    )
    middle = subprocess.Popen([sys.executable, "-c", script], stdout=subprocess.PIPE, text=True)
    assert middle.stdout is not None
    grandchild = int(middle.stdout.readline())
    assert _alive(grandchild)
    middle.kill()
    middle.communicate()
    survived = _until(lambda: not _alive(grandchild)) is False
    if survived:
        os.kill(grandchild, signal.SIGKILL)
    assert not survived


def test_spawn_in_katra3ds_session_leads_a_group_of_its_own() -> None:
    group = spawn(["sleep", "120"], session=False)
    try:
        assert os.getpgid(group.proc.pid) == group.proc.pid
        assert os.getsid(group.proc.pid) == os.getsid(0)
    finally:
        group.end(0.0)
    assert group.gone()
