"""The counted child's lifetime: it dies with its parent, and no dump directory outlives them.

A counted run's child (valgrind, running ``python -m katra3d``) is started in a session of its own,
so a Ctrl-C on the terminal reaches only the parent, which forwards it
(:mod:`katra3d.harness.run.measure`). If the parent is killed outright (SIGKILL, the OOM killer)
nothing is forwarded; so the child is started with Linux's parent-death signal set to SIGKILL
(:func:`die_with_parent`, ``prctl(PR_SET_PDEATHSIG)`` between fork and exec; it survives the exec of
setarch and valgrind). A killed child cannot remove its dump directory, and neither can a killed
parent, so the directory's name carries its owner's PID (:func:`make_dump_dir`) and every counted
run first removes the dump directories whose owner is gone (:func:`remove_stale_dump_dirs`).
"""

from __future__ import annotations

import contextlib
import ctypes
import os
import re
import shutil
import signal
import subprocess
import sys
import tempfile
import threading
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

#: ``PR_SET_PDEATHSIG`` of ``<linux/prctl.h>``.
PR_SET_PDEATHSIG = 1

#: How a dump directory's name starts; the owner's PID follows in a fixed width (the child runs in
#: the directory, and the length of its path must not vary: it shifts the process's memory, see
#: docs/measure.md).
DUMP_PREFIX = "katra3d-callgrind-"
_PID_WIDTH = 10


def make_dump_dir(prefix: str = DUMP_PREFIX, where: str | None = None) -> Path:
    """A new directory in ``where`` (the temporary directory), named ``prefix`` + this process's PID
    (its owner) + a unique part: a counted child's dump directory, or another that
    :func:`remove_stale_dump_dirs` removes once its owner has ended."""
    return Path(tempfile.mkdtemp(prefix=f"{prefix}{os.getpid():0{_PID_WIDTH}d}-", dir=where))


def owner_pid(path: Path, prefix: str = DUMP_PREFIX) -> int | None:
    """The PID of the process that made the directory ``path`` (:func:`make_dump_dir`), or None if
    it is not one.
    """
    match = re.fullmatch(re.escape(prefix) + rf"(\d{{{_PID_WIDTH}}})-[^/]+", path.name)
    return int(match.group(1)) if match else None


def alive(pid: int) -> bool:
    """Whether a process ``pid`` exists (one of another user's counts as alive)."""
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True


def remove_stale_dump_dirs(where: Path | None = None, prefix: str = DUMP_PREFIX) -> list[Path]:
    """Remove the directories ``prefix``... in ``where`` (the temporary directory) whose owner is no
    longer running.

    Returns the ones removed. A directory of a live process, or of a PID now reused by another
    process, stays (it is removed after that one ends); one this user may not remove stays too."""
    base = Path(where or tempfile.gettempdir())
    removed: list[Path] = []
    try:
        entries = list(os.scandir(base))
    except OSError:
        return removed
    for entry in entries:
        pid = owner_pid(Path(entry.name), prefix)
        if (
            pid is None
            or pid == os.getpid()
            or alive(pid)
            or not entry.is_dir(follow_symlinks=False)
        ):
            continue
        shutil.rmtree(entry.path, ignore_errors=True)
        if not os.path.lexists(entry.path):
            removed.append(Path(entry.path))
    return removed


def die_with_parent() -> Callable[[], None] | None:
    """A ``preexec_fn`` that makes the child get SIGKILL when this process ends, or None off Linux.

    It also ends the child at once if this process ended before the request was made (the child then
    has another parent already)."""
    if not sys.platform.startswith("linux"):
        return None
    try:
        prctl = ctypes.CDLL(None, use_errno=True).prctl  # resolved here, before fork
    except (OSError, AttributeError):
        return None
    prctl.argtypes = [ctypes.c_int, ctypes.c_ulong, ctypes.c_ulong, ctypes.c_ulong, ctypes.c_ulong]
    prctl.restype = ctypes.c_int
    parent = os.getpid()

    def preexec() -> None:
        if prctl(PR_SET_PDEATHSIG, int(signal.SIGKILL), 0, 0, 0) != 0:
            os._exit(127)
        if os.getppid() != parent:
            os._exit(127)

    return preexec


def signal_group(proc: subprocess.Popen[bytes], signum: int) -> None:
    """Send ``signum`` to the process group of ``proc`` (a child started in a session of its own:
    valgrind and whatever it started), unless it has been waited for already."""
    if proc.returncode is not None:
        return
    with contextlib.suppress(ProcessLookupError, PermissionError):
        os.killpg(proc.pid, signum)


@contextlib.contextmanager
def forward_signals(
    children: list[subprocess.Popen[bytes]],
    ready: Callable[[subprocess.Popen[bytes]], bool],
    received: list[int],
) -> Iterator[None]:
    """While the children run, send each one's process group every SIGINT/SIGTERM/SIGHUP this
    process gets, and note it in ``received``.

    Until a child is ``ready(child)`` (its katra3d code runs and has reported), it has counted
    nothing and has no handler that would end it cleanly (a Ctrl-C during its imports would end in a
    traceback): it is killed instead. ``children`` holds the children started so far (empty before):
    the handlers are set before any dump directory is made, so a signal that comes while a child is
    being started is noted, not lost in whatever Python code it interrupted (the caller kills a
    child started after a signal). Outside the main thread no handler can be set, and nothing is
    forwarded."""
    if threading.current_thread() is not threading.main_thread():
        yield
        return

    def forward(signum: int, _frame: Any) -> None:
        received.append(signum)
        for proc in list(children):
            signal_group(proc, signum if ready(proc) else signal.SIGKILL)

    old: dict[signal.Signals, Any] = {}
    try:
        for sig in (signal.SIGINT, signal.SIGTERM, signal.SIGHUP):
            old[sig] = signal.signal(sig, forward)
        yield
    finally:
        for stopped, handler in old.items():
            signal.signal(stopped, handler if handler is not None else signal.SIG_DFL)


def wait(proc: subprocess.Popen[bytes], poll: Callable[[], object], every_s: float) -> int:
    """Wait for ``proc`` to end, calling ``poll()`` every ``every_s`` seconds meanwhile; its exit
    code.
    """
    while True:
        try:
            return proc.wait(timeout=every_s)
        except subprocess.TimeoutExpired:
            poll()


__all__ = [
    "DUMP_PREFIX",
    "alive",
    "die_with_parent",
    "forward_signals",
    "make_dump_dir",
    "owner_pid",
    "remove_stale_dump_dirs",
    "signal_group",
    "wait",
]
