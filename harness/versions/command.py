"""One capture command, run the one way: ``ab``'s rounds, bisect's captures and
``ci/compare-versions.sh``.

A capture command is a shell command line that writes one trace. :func:`run_capture` owns everything
around it, so that no caller does any of it a second way:

* **where it writes**: ``{out}`` in the command, or ``$KATRA3D_OUT`` (:data:`OUT_ENV`), which holds
  the same path. That path is made of plain characters only (:func:`plain_out`): the trace's own
  path when it is plain, else a path through a symbolic link, in a plain temporary directory, to the
  trace's folder. So ``{out}`` is one word with the same text bare, in the user's quotes of any
  kind, or in a shell that the command starts, however deep: a ``-o`` with a space, a quote or a
  ``$`` can neither split a word nor end a quote;
* **where it runs**: a folder (a worktree) as the current directory, and first on ``PYTHONPATH``
  (:class:`CaptureCommand`);
* **its processes**: the command starts a session of its own, so it and everything it starts form
  one process group; that group is stopped whole on Ctrl-C, SIGTERM or SIGHUP to katra3d and on an
  error, the way a ``katra3d run`` in it keeps its frames
  (:func:`katra3d.harness.run.groups.stop_group`: SIGTERM, the whole group given
  :data:`STOP_GRACE_S` to end, not just the shell that leads it; then the run's stop-now, a second
  SIGTERM; then SIGKILL), and at once (SIGKILL) by a second stop signal to katra3d or when the
  command ends (a capture's leftover background process goes with it). If katra3d is killed
  outright, its direct child gets SIGKILL from the kernel (``PR_SET_PDEATHSIG``);
* **its output**: into a log file (the caller's, or a temporary one), and the last
  :data:`FAILURE_TAIL_LINES` lines of it in the error when it fails;
* **side by side**: captures that threads run at once (bisect's counted rounds) are stopped together
  by one stop signal to katra3d, or on an error, through :class:`SideBySide`, which the main thread
  opens around them.
"""

from __future__ import annotations

import contextlib
import dataclasses
import os
import re
import shlex
import shutil
import signal
import subprocess
import tempfile
import threading
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import IO, Any, ClassVar

from katra3d.harness.run.groups import STOP_FIRST, STOP_KILL, ProcessGroup
from katra3d.harness.run.lifetime import die_with_parent, make_dump_dir, remove_stale_dump_dirs
from katra_trace.errors import ConfigError, Interrupted, KatraError
from katra_trace.io.claim import move_into_place
from katra_trace.text import shown

#: The environment variable that holds the path a capture command writes its trace to.
OUT_ENV = "KATRA3D_OUT"
#: The environment variable that holds where the trace ends up (``$KATRA3D_OUT`` may lead there
#: through a link): :func:`stop_leftover_captures` finds a killed katra3d's captures by it.
INTO_ENV = "KATRA3D_CAPTURE_INTO"
#: What a path told to a capture command is made of: as one shell word it reads the same quoted or
#: not.
PLAIN_PATH = re.compile(r"[A-Za-z0-9_./+:-]+")
#: How the name of the temporary directory that holds the link to a trace's folder starts (the
#: owner's PID follows): one that a killed katra3d left is removed by the next capture.
LINK_DIR_PREFIX = "katra3d-out-"
#: The placeholder in a capture command for that path.
OUT_PLACEHOLDER = "{out}"
#: Lines of a failed capture's output that its error carries (all of it is in its log).
FAILURE_TAIL_LINES = 20
#: Seconds a stopped capture's whole process group has, after its SIGTERM, to end on its own: a
#: ``katra3d run`` in it stops at its next frame boundary and finishes its trace as interrupted. A
#: counted run (16x16, under callgrind) took 3.5 s from the signal to its exit on a busy 2-core
#: machine (its frame under callgrind, its trace written, callgrind's last dump); a time run 0.2 s.
#: 10 s leaves room for a bigger frame and for captures that finish side by side (bisect's counted
#: rounds).
STOP_GRACE_S = 10.0
#: The signals that stop a capture (and katra3d's command that runs it).
STOP_SIGNALS = (signal.SIGINT, signal.SIGTERM, signal.SIGHUP)


class CaptureFailed(KatraError):
    """A capture command failed (non-zero exit), did not run, or exited 0 without writing its trace.

    ``tail``: the last lines of its output; ``log``: the file with all of it (None when there was
    none)."""

    def __init__(
        self,
        what: str,
        reason: str,
        command: str,
        tail: tuple[str, ...] = (),
        log: Path | None = None,
    ) -> None:
        super().__init__(f"{what} command {reason}: {command}")
        #: "failed (exit 2)", "does not run: ...", "exited 0 but wrote no trace at ..."
        self.reason = reason
        self.tail = tail
        self.log = log


@dataclasses.dataclass(frozen=True)
class CaptureCommand:
    """A shell command line that writes one trace to ``{out}`` (or ``$KATRA3D_OUT``), run in ``cwd``
    (None: the current directory) with ``pythonpath`` (None: nothing) put first on ``PYTHONPATH``: a
    worktree's code."""

    template: str
    cwd: Path | None = None
    pythonpath: Path | None = None

    def check(self, option: str) -> None:
        """ConfigError (one line) when the command names no place to write: neither ``{out}`` nor
        ``$KATRA3D_OUT``.
        """
        if not self.template.strip():
            raise ConfigError(f"{option} command is empty")
        if OUT_PLACEHOLDER not in self.template and OUT_ENV not in self.template:
            raise ConfigError(
                f"{option} command must contain {OUT_PLACEHOLDER} or ${OUT_ENV} (where the trace "
                f"is written); got {one_line(self.template)!r}"
            )

    def shown(self, out: Path | None = None) -> str:
        """The command on one line as a person reads it: ``{out}`` as the path (quoted), in its
        folder.
        """
        text = one_line(self.template)
        if out is not None:
            text = text.replace(OUT_PLACEHOLDER, shlex.quote(str(out)))
        return f"{text}   (in {shown(str(self.cwd))})" if self.cwd is not None else text


def one_line(command: str) -> str:
    """A command of several lines on one line, its lines joined by ``; `` (for messages and
    records).
    """
    return "; ".join(line.strip() for line in command.splitlines() if line.strip())


def substitute_out(template: str, path: Path) -> str:
    """``template`` with each ``{out}`` replaced by ``path``, a plain path (:func:`plain_out`),
    which needs no quotes wherever it stands."""
    if not PLAIN_PATH.fullmatch(str(path)):
        raise ConfigError(
            f"{shown(str(path))} is not a plain path for a capture command (plain_out makes one)"
        )
    return template.replace(OUT_PLACEHOLDER, str(path))


@contextlib.contextmanager
def plain_out(out: Path) -> Iterator[Path]:
    """The path a capture command is told for ``out``: made of :data:`PLAIN_PATH` characters only.
    ``out`` itself when it is plain; else ``out``'s folder through a symbolic link in a new plain
    temporary directory, and ``out``'s name when it is plain, or a plain stand-in for it whose file
    is moved to ``out`` when the block ends (never over a file). The temporary directory goes when
    the block ends; what a killed katra3d left goes with the next capture's."""
    if PLAIN_PATH.fullmatch(str(out)):
        yield out
        return
    base = next(
        (
            d
            for d in (tempfile.gettempdir(), "/tmp")
            if PLAIN_PATH.fullmatch(d) and os.path.isdir(d)
        ),
        None,
    )
    if base is None:
        raise ConfigError(
            f"a capture writing {shown(str(out))} needs a temporary directory with a plain path "
            "(letters, digits and ._/+:-) for a link to its folder; set TMPDIR to one"
        )
    remove_stale_dump_dirs(Path(base), LINK_DIR_PREFIX)
    holder = make_dump_dir(LINK_DIR_PREFIX, base)
    stand_in = f"katra3d-capture-{holder.name[-8:]}"
    name = next(n for n in (out.name, stand_in + out.suffix, stand_in) if PLAIN_PATH.fullmatch(n))
    try:
        (holder / "d").symlink_to(out.parent.resolve(), target_is_directory=True)
        yield holder / "d" / name
    finally:
        staged = out.parent / name
        if staged != out and os.path.lexists(staged):
            # not moved: the capture then wrote no trace at out
            with contextlib.suppress(OSError, KatraError):
                move_into_place(staged, out, replace=False)
        shutil.rmtree(holder, ignore_errors=True)


def _environment(command: CaptureCommand, told: Path, out: Path) -> dict[str, str]:
    env = dict(os.environ)
    env[OUT_ENV] = str(told)
    env[INTO_ENV] = str(out.resolve())
    if command.pythonpath is not None:
        rest = env.get("PYTHONPATH", "")
        env["PYTHONPATH"] = str(command.pythonpath) + (os.pathsep + rest if rest else "")
    return env


def _level(signals: int) -> int:
    """How far a capture is stopped after ``signals`` stop signals to katra3d: the first asks it to
    stop (it finishes its trace as interrupted), a second stops everything at once."""
    return STOP_FIRST if signals <= 1 else STOP_KILL


@contextlib.contextmanager
def _stop_signals(received: list[int]) -> Iterator[Callable[[ProcessGroup], None]]:
    """While a capture starts and runs, a stop signal to katra3d (main thread only) is noted in
    ``received`` and stops the capture's group (the first asks it to stop, a second kills it:
    :func:`_level`); the caller then raises :class:`Interrupted`. Yields the function that registers
    the group once it has started, and stops it as far as the signals so far ask. The handlers come
    before the start: a signal while the command is being started is noted, never lost or left to
    Python's default (a KeyboardInterrupt between the start and the wait would leave the capture
    running)."""
    groups: list[ProcessGroup] = []
    if threading.current_thread() is not threading.main_thread():
        side = SideBySide.active
        if side is None:
            yield groups.append
            return

        def join(group: ProcessGroup) -> None:
            # the main thread's stop sees the group, or the group sees the stop: never neither
            with side.lock:
                groups.append(group)
                if received:
                    group.send(_level(len(side.received)))

        # joins the captures the main thread stops together; one stopped already stops at once
        with side.lock:
            side.members.append((groups, received))
            received.extend(side.received[:1])
        try:
            yield join
        finally:
            with side.lock:
                side.members.remove((groups, received))
        return

    def stop(signum: int, _frame: Any) -> None:
        received.append(signum)
        for group in groups:
            group.send(_level(len(received)))

    def register(group: ProcessGroup) -> None:
        groups.append(group)
        if received:  # a stop signal came while it was being started
            group.send(_level(len(received)))

    old = {sig: signal.signal(sig, stop) for sig in STOP_SIGNALS}
    try:
        yield register
    finally:
        for sig, handler in old.items():
            signal.signal(sig, handler if handler is not None else signal.SIG_DFL)


class SideBySide:
    """Captures that other threads run at the same time (:func:`run_capture` in a thread pool),
    stopped together: open it in the main thread around those threads' work. While it is open, a
    stop signal to katra3d (Ctrl-C, SIGTERM, SIGHUP) is noted in :attr:`received` instead of
    raising, and stops the group of every capture of those threads, as :meth:`stop` does (on an
    error): the first asks each to stop (each thread then gives its group the grace of
    :func:`~katra3d.harness.run.groups.stop_group`), a second kills them all at once. Each then
    raises :class:`Interrupted` in its thread, as does one started after. The caller waits for its
    threads, then raises Interrupted itself when :attr:`received` says so. Captures the main thread
    runs itself are not members: they handle signals as ever."""

    active: ClassVar[SideBySide | None] = None  #: the one open now

    def __init__(self) -> None:
        # re-entrant: the signal handler runs in the main thread, which may hold it
        self.lock = threading.RLock()
        self.members: list[tuple[list[ProcessGroup], list[int]]] = []
        self.received: list[int] = []
        self._old: dict[int, Any] = {}

    def stop(self, signum: int = signal.SIGTERM) -> None:
        """Stop every member's group (SIGTERM now, then its thread's grace; SIGKILL at once from the
        second stop on) and those started later; ``signum`` is what their Interrupted says."""
        with self.lock:
            self.received.append(signum)
            for groups, received in self.members:
                received.append(signum)
                for group in groups:
                    group.send(_level(len(self.received)))

    def __enter__(self) -> SideBySide:
        if (
            threading.current_thread() is not threading.main_thread()
            or SideBySide.active is not None
        ):
            raise RuntimeError("SideBySide is opened once, in the main thread")
        self._old = {
            sig: signal.signal(sig, lambda signum, _frame: self.stop(signum))
            for sig in STOP_SIGNALS
        }
        SideBySide.active = self
        return self

    def __exit__(self, *exc: object) -> None:
        SideBySide.active = None
        for sig, handler in self._old.items():
            signal.signal(sig, handler if handler is not None else signal.SIG_DFL)


def _tail(log: IO[bytes], start: int) -> tuple[str, ...]:
    """The last non-empty lines the command wrote to ``log`` (from offset ``start``)."""
    log.flush()
    end = log.seek(0, os.SEEK_END)
    # the end is enough for the last lines, whatever the output's size
    log.seek(max(start, end - 64 * 1024))
    text = log.read(end - log.tell()).decode(errors="replace")
    log.seek(end)
    return tuple(line.rstrip() for line in text.splitlines() if line.strip())[-FAILURE_TAIL_LINES:]


def run_capture(
    command: CaptureCommand, out: Path, *, log: Path | None = None, what: str = "capture"
) -> float:
    """Run ``command`` once so that it writes the trace ``out``; returns its seconds.

    Its output goes to ``log`` (appended, after a ``$ command`` line) or to a temporary file. Raises
    :class:`CaptureFailed` (with the output's last lines) when it exits non-zero, does not start, or
    writes no trace; :class:`Interrupted` when a stop signal came (its group stopped first).
    ``what`` names it in messages ("round 2/6 BASE")."""
    with contextlib.ExitStack() as stack:
        # first in, last out: a stand-in's trace is moved at the end
        told = stack.enter_context(plain_out(out))
        cmd = substitute_out(command.template, told)
        if log is not None:
            log.parent.mkdir(parents=True, exist_ok=True)
            sink: IO[bytes] = stack.enter_context(open(log, "a+b"))
            sink.write(f"$ {command.shown(out)}\n".encode(errors="backslashreplace"))
            sink.flush()
        else:
            sink = stack.enter_context(tempfile.TemporaryFile())
        start = sink.seek(0, os.SEEK_END)
        received: list[int] = []
        t0 = time.monotonic()
        with _stop_signals(received) as register:
            # a side-by-side capture whose round was stopped before it started: it does not start
            if received:
                raise Interrupted(received[0])
            try:
                proc = subprocess.Popen(
                    ["/bin/sh", "-c", cmd],
                    cwd=command.cwd,
                    env=_environment(command, told, out),
                    stdin=subprocess.DEVNULL,
                    stdout=sink,
                    stderr=subprocess.STDOUT,
                    start_new_session=True,
                    preexec_fn=die_with_parent(),
                )
            except OSError as exc:
                raise CaptureFailed(
                    what, f"does not run: {exc}", command.shown(out), (), log
                ) from None
            group = ProcessGroup(proc)
            try:
                register(group)
                code = proc.wait()
            # stopped: the run in it gets the time to finish its trace; ended: its leftovers go at
            # once
            finally:
                group.end(STOP_GRACE_S if received else 0.0)
        seconds = time.monotonic() - t0
        tail = _tail(sink, start)
        if log is not None:
            sink.write(f"[exit {code}]\n".encode())
        if received:
            raise Interrupted(received[0])
        if code != 0:
            raise CaptureFailed(
                what, f"failed with exit code {code}", command.shown(out), tail, log
            )
    if not out.is_file():
        raise CaptureFailed(
            what, f"exited 0 but wrote no trace at {shown(str(out))}", command.shown(out), tail, log
        )
    return seconds


def stop_leftover_captures(root: Path) -> int:
    """Kill (SIGKILL) what is left of captures that wrote into ``root``: processes whose trace was
    to end up in it (:data:`INTO_ENV`). A katra3d killed outright (SIGKILL, the OOM killer) takes
    only its direct capture process with it; the next command in the same output directory (``bisect
    --resume``) ends the rest. Processes are found by that variable, never by a recorded PID that
    may have been reused. Returns how many were killed (Linux; 0 elsewhere)."""
    prefix = str(root.resolve()) + os.sep
    killed = 0
    try:
        pids = [int(name) for name in os.listdir("/proc") if name.isdigit()]
    except OSError:
        return 0
    for pid in pids:
        if pid == os.getpid():
            continue
        try:
            with open(f"/proc/{pid}/environ", "rb") as f:
                env = f.read().split(b"\0")
        except OSError:
            continue  # gone, or another user's
        for entry in env:
            if entry.startswith(f"{INTO_ENV}=".encode()) and os.fsdecode(
                entry.split(b"=", 1)[1]
            ).startswith(prefix):
                with contextlib.suppress(ProcessLookupError, PermissionError):
                    os.kill(pid, signal.SIGKILL)
                    killed += 1
                break
    return killed


__all__ = [
    "FAILURE_TAIL_LINES",
    "INTO_ENV",
    "LINK_DIR_PREFIX",
    "OUT_ENV",
    "OUT_PLACEHOLDER",
    "PLAIN_PATH",
    "STOP_GRACE_S",
    "CaptureCommand",
    "CaptureFailed",
    "SideBySide",
    "one_line",
    "plain_out",
    "run_capture",
    "stop_leftover_captures",
    "substitute_out",
]
