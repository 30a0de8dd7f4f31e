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
* **its processes**: the command leads a process group (a session) of its own, started and
  stopped by :mod:`katra3d.harness.supervisor` (policy ``levels``): Ctrl-C, SIGTERM or SIGHUP to
  katra3d asks the group to stop, so a ``katra3d run`` in it keeps its frames, and gives it
  :data:`~katra3d.harness.supervisor.STOP_GRACE_S`; a second stop signal, or the command's end,
  kills what is left. A katra3d killed outright takes its direct child along (``PR_SET_PDEATHSIG``);
* **its output**: into a log file (the caller's, or a temporary one), and the last
  :data:`FAILURE_TAIL_LINES` lines of it in the error when it fails;
* **side by side**: captures that a :meth:`Supervisor.pool` runs in threads (bisect's counted
  rounds) join its supervisor, and are stopped together.
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
import time
from collections.abc import Iterator
from pathlib import Path
from typing import IO

from katra3d.harness.run.lifetime import make_dump_dir, remove_stale_dump_dirs
from katra3d.harness.supervisor import STOP_GRACE_S, Supervisor
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
        t0 = time.monotonic()
        # the pool's supervisor for its jobs (bisect's counted captures), else one of its own
        active = Supervisor.active
        with contextlib.nullcontext(active) if active else Supervisor() as sup:
            # a capture of a pool whose jobs were stopped before it started: it does not start
            if sup.received:
                raise Interrupted(sup.received[0])
            try:
                group = sup.start(
                    ["/bin/sh", "-c", cmd],
                    policy="levels",
                    cwd=command.cwd,
                    env=_environment(command, told, out),
                    stdin=subprocess.DEVNULL,
                    stdout=sink,
                    stderr=subprocess.STDOUT,
                )
            except OSError as exc:
                raise CaptureFailed(
                    what, f"does not run: {exc}", command.shown(out), (), log
                ) from None
            try:
                code = group.proc.wait()
            # stopped: the run in it gets the time to finish its trace; ended: its leftovers go at
            # once
            finally:
                group.end(STOP_GRACE_S if group.sent else 0.0)
                sup.release(group)
            received = list(sup.received)
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
    "CaptureCommand",
    "CaptureFailed",
    "one_line",
    "plain_out",
    "run_capture",
    "stop_leftover_captures",
    "substitute_out",
]
