"""Child processes, stop signals and parallel jobs: each child leads its own process group that
dies with katra3d. ``session=False`` keeps it in katra3d's session: autogroup shares CPU by session,
and a replayer in its own session ran at 0.75 of the frame rate (bench/replay.py)."""

from __future__ import annotations

import contextlib
import ctypes
import os
import signal
import subprocess
import threading
import time
from collections.abc import Callable, Generator, Iterator, Sequence
from concurrent.futures import FIRST_COMPLETED, Future, ThreadPoolExecutor, wait
from typing import Any, ClassVar, Literal, TypeVar

from katra_trace.errors import Interrupted

R = TypeVar("R")

STOP_SIGNALS: tuple[signal.Signals, ...] = (signal.SIGINT, signal.SIGTERM, signal.SIGHUP)
PR_SET_PDEATHSIG = 1
# stop at the next frame boundary, stop now, killed
STOP_FIRST, STOP_NOW, STOP_KILL = 1, 2, 3
# a counted 16x16 run took 3.5 s from SIGTERM to exit on a busy 2-core machine
STOP_GRACE_S = 10.0
# after the second SIGTERM: the keeper's HARD_STOP_GRACE_S, then callgrind's last dump
HARD_STOP_WAIT_S = 5.0
KILL_WAIT_S = 5.0
POLL_S = 0.05

Policy = Literal["levels", "signals", "none"]


def _preexec(session: bool) -> Callable[[], None]:
    """Between fork and exec: own group (without ``session``), SIGKILL when this process ends."""
    try:
        prctl = ctypes.CDLL(None, use_errno=True).prctl  # resolved here, before fork
        prctl.argtypes = [ctypes.c_int, *[ctypes.c_ulong] * 4]
    except (OSError, AttributeError):  # not Linux
        prctl = None
    parent = os.getpid()

    def preexec() -> None:
        if not session:
            os.setpgid(0, 0)
        if prctl is not None and (
            prctl(PR_SET_PDEATHSIG, int(signal.SIGKILL), 0, 0, 0) != 0 or os.getppid() != parent
        ):
            os._exit(127)

    return preexec


class Group:
    """The process group ``proc`` leads (``ready()``: whether the child handles signals yet)."""

    def __init__(
        self,
        proc: subprocess.Popen[Any],
        policy: Policy = "none",
        ready: Callable[[], bool] | None = None,
    ) -> None:
        self.proc = proc
        self.policy = policy
        self.ready = ready
        self.sent = 0
        self.task: int | None = None

    def send(self, level: int) -> None:
        if self.sent >= level:
            return
        self.sent = level  # first: a handler that runs meanwhile sends nothing twice
        with contextlib.suppress(ProcessLookupError, PermissionError):
            os.killpg(self.proc.pid, signal.SIGKILL if level >= STOP_KILL else signal.SIGTERM)

    def stopped_by(self, signum: int, count: int) -> None:
        """``levels`` asks first then kills; ``signals`` passes ``signum`` on (SIGKILL while not
        ready)."""
        if self.policy == "levels":
            self.send(STOP_FIRST if count <= 1 else STOP_KILL)
        elif self.policy == "signals" and self.proc.returncode is None:
            with contextlib.suppress(ProcessLookupError, PermissionError):
                os.killpg(
                    self.proc.pid, signum if not self.ready or self.ready() else signal.SIGKILL
                )

    def gone(self) -> bool:
        """Leader reaped and no live (non-zombie) member left, by ``/proc``."""
        if self.proc.poll() is None:
            return False
        try:
            os.killpg(self.proc.pid, 0)
            names = [name for name in os.listdir("/proc") if name.isdigit()]
        except ProcessLookupError:
            return True
        except OSError:  # not allowed, or no /proc: cannot tell
            return False
        for name in names:
            try:
                with open(f"/proc/{name}/stat", "rb") as f:
                    state, _ppid, pgrp = f.read().rsplit(b")", 1)[1].split()[:3]
            except (OSError, ValueError):
                continue  # gone meanwhile
            if int(pgrp) == self.proc.pid and state != b"Z":
                return False
        return True

    def wait_gone(self, timeout_s: float) -> bool:
        deadline = time.monotonic() + timeout_s
        while not self.gone():
            if time.monotonic() >= deadline:
                return False
            time.sleep(POLL_S)
        return True

    def end(self, grace_s: float) -> None:
        """SIGTERM, ``grace_s``, SIGTERM, :data:`HARD_STOP_WAIT_S` (none without ``grace_s``),
        then SIGKILL; never raises."""
        if self.gone():  # nothing to signal: its ID may be another group's by now
            return
        if grace_s > 0:
            self.send(STOP_FIRST)
            if self.wait_gone(grace_s):
                return
            self.send(STOP_NOW)
            if self.wait_gone(HARD_STOP_WAIT_S):
                return
        self.send(STOP_KILL)
        self.wait_gone(KILL_WAIT_S)


def spawn(
    args: Sequence[str],
    *,
    session: bool = True,
    policy: Policy = "none",
    ready: Callable[[], bool] | None = None,
    **popen: Any,
) -> Group:
    """Start ``args`` in its own process group that dies with katra3d; raises what Popen raises."""
    proc = subprocess.Popen(
        list(args), start_new_session=session, preexec_fn=_preexec(session), **popen
    )
    return Group(proc, policy, ready)


@contextlib.contextmanager
def handling(
    handler: Callable[[int, Any], Any],
    signals: Sequence[signal.Signals] = STOP_SIGNALS,
    *,
    unless_ignored: bool = False,
) -> Iterator[bool]:
    """Install ``handler`` (main thread only); yields whether installed. An old handler set from C
    (``None``, e.g. under apitrace) is restored as ``SIG_DFL``."""
    old: dict[signal.Signals, Any] = {}
    try:
        if threading.current_thread() is threading.main_thread():
            for sig in signals:
                if not (unless_ignored and signal.getsignal(sig) is signal.SIG_IGN):
                    old[sig] = signal.signal(sig, handler)
        yield bool(old)
    finally:
        for sig, was in old.items():
            signal.signal(sig, was if was is not None else signal.SIG_DFL)


class Supervisor:
    """One command's child groups: entered in the main thread it is :attr:`active` and passes each
    stop signal to every group, later ones included; what still runs at exit is killed."""

    active: ClassVar[Supervisor | None] = None

    def __init__(self, *, handle: bool = True) -> None:
        # re-entrant: the signal handler runs in the main thread, which may hold it
        self.lock = threading.RLock()
        self.groups: list[Group] = []
        self.received: list[int] = []
        self._handle = handle
        self._task = threading.local()
        self._ended: set[int] = set()  # pool tasks ended
        self._exit = contextlib.ExitStack()

    def __enter__(self) -> Supervisor:
        main = threading.current_thread() is threading.main_thread()
        if self._handle and main:
            if Supervisor.active is not None:
                raise RuntimeError("one Supervisor handles signals at a time")
            self._exit.enter_context(handling(lambda signum, _frame: self.stop(signum)))
            Supervisor.active = self
            self._exit.callback(setattr, Supervisor, "active", None)
        return self

    def __exit__(self, *exc: object) -> None:
        try:
            for group in list(self.groups):
                group.end(0.0)
        finally:
            self._exit.close()

    def stop(self, signum: int) -> None:
        with self.lock:
            self.received.append(signum)
            for group in self.groups:
                group.stopped_by(signum, len(self.received))

    def start(self, args: Sequence[str], **kwargs: Any) -> Group:
        """:func:`spawn`, kept until :meth:`release`; after a stop signal it gets it at once."""
        group = spawn(args, **kwargs)
        group.task = getattr(self._task, "index", None)
        with self.lock:
            self.groups.append(group)
            if group.task in self._ended:
                group.send(STOP_KILL)
            elif self.received:
                group.stopped_by(self.received[-1], len(self.received))
        return group

    def release(self, group: Group) -> None:
        with self.lock, contextlib.suppress(ValueError):
            self.groups.remove(group)

    def _run(self, index: int, task: Callable[[], R]) -> R:
        self._task.index = index
        return task()

    def _end_tasks(self, tasks: set[int], grace_s: float) -> None:
        with self.lock:
            self._ended |= tasks
            chosen = [g for g in self.groups if g.task in tasks]
        for group in chosen:
            group.end(grace_s)

    def pool(
        self,
        tasks: Sequence[Callable[[], R]],
        jobs: int,
        *,
        order: Sequence[int] | None = None,
        before: Callable[[int], object] | None = None,
        failed: Callable[[int, R], bool] | None = None,
        idle: Callable[[], object] | None = None,
    ) -> Generator[tuple[int, R], None, None]:
        """Run ``tasks`` in at most ``jobs`` threads; yields (index, result) as each ends. A
        ``failed`` result kills the later running tasks (a serial run would not have run them); a
        raising task or an early caller exit stops all. Nothing starts after a stop signal."""
        upcoming = list(range(len(tasks)) if order is None else order)
        running: dict[Future[R], int] = {}
        failed_at = len(tasks)
        with ThreadPoolExecutor(max_workers=max(1, jobs), thread_name_prefix="katra3d-job") as ex:
            try:
                while True:
                    while upcoming and len(running) < jobs and not self.received:
                        if failed_at < len(tasks):
                            break
                        index = upcoming.pop(0)
                        if before is not None:
                            before(index)
                        running[ex.submit(self._run, index, tasks[index])] = index
                    if not running:
                        break
                    done, _ = wait(running, timeout=POLL_S, return_when=FIRST_COMPLETED)
                    if idle is not None:
                        idle()
                    for future in sorted(done, key=running.__getitem__):
                        index = running.pop(future)
                        error = future.exception()
                        if isinstance(error, Interrupted) and self.received:
                            continue
                        if error is not None:
                            raise error
                        result = future.result()
                        if failed is not None and failed(index, result) and index < failed_at:
                            failed_at = index
                            self._end_tasks({i for i in running.values() if i > index}, 0.0)
                        yield index, result
            finally:
                if running:
                    self.stop(signal.SIGTERM)
                    self._end_tasks(set(running.values()), STOP_GRACE_S)


__all__ = [
    "HARD_STOP_WAIT_S",
    "KILL_WAIT_S",
    "POLL_S",
    "STOP_FIRST",
    "STOP_GRACE_S",
    "STOP_KILL",
    "STOP_NOW",
    "STOP_SIGNALS",
    "Group",
    "Supervisor",
    "handling",
    "spawn",
]
