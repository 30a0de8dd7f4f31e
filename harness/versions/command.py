"""One capture command, run the one way: ``ab``'s rounds, bisect's captures and
``ci/compare-versions.sh``.

The command is told a path of plain characters only (:func:`plain_out`), so ``{out}`` stays
one word however it is quoted. It leads its own process group (policy ``levels``): a stop
signal asks it to stop, so a ``katra3d run`` in it keeps its frames; a second one kills what
is left."""

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

#: The path a capture command writes its trace to.
OUT_ENV = "KATRA3D_OUT"
#: Where the trace ends up ($KATRA3D_OUT may lead there through a link):
#: :func:`stop_leftover_captures` finds a killed katra3d's captures by it.
INTO_ENV = "KATRA3D_CAPTURE_INTO"
#: A path told to a capture command: one shell word that reads the same quoted or not.
PLAIN_PATH = re.compile(r"[A-Za-z0-9_./+:-]+")
#: Prefix of the temporary directory holding the link to a trace's folder (owner's PID follows).
LINK_DIR_PREFIX = "katra3d-out-"
OUT_PLACEHOLDER = "{out}"
#: Lines of a failed capture's output its error carries (all of it is in its log).
FAILURE_TAIL_LINES = 20


class CaptureFailed(KatraError):
    """A capture command failed, did not run, or exited 0 without writing its trace.

    ``tail``: the last lines of its output; ``log``: the file with all of it (None when there
    was none)."""

    def __init__(
        self,
        what: str,
        reason: str,
        command: str,
        tail: tuple[str, ...] = (),
        log: Path | None = None,
    ) -> None:
        super().__init__(f"{what} command {reason}: {command}")
        self.reason = reason
        self.tail = tail
        self.log = log


@dataclasses.dataclass(frozen=True)
class CaptureCommand:
    """A shell command line that writes one trace to ``{out}`` (or ``$KATRA3D_OUT``), run in
    ``cwd`` with ``pythonpath`` (a worktree's code) first on ``PYTHONPATH``."""

    template: str
    cwd: Path | None = None
    pythonpath: Path | None = None

    def check(self, option: str) -> None:
        """ConfigError when the command names no place to write (neither ``{out}`` nor
        ``$KATRA3D_OUT``)."""
        if not self.template.strip():
            raise ConfigError(f"{option} command is empty")
        if OUT_PLACEHOLDER not in self.template and OUT_ENV not in self.template:
            raise ConfigError(
                f"{option} command must contain {OUT_PLACEHOLDER} or ${OUT_ENV} (where the trace "
                f"is written); got {one_line(self.template)!r}"
            )

    def shown(self, out: Path | None = None) -> str:
        """The command on one line as a person reads it: ``{out}`` as the path (quoted), in its
        folder."""
        text = one_line(self.template)
        if out is not None:
            text = text.replace(OUT_PLACEHOLDER, shlex.quote(str(out)))
        return f"{text}   (in {shown(str(self.cwd))})" if self.cwd is not None else text


def one_line(command: str) -> str:
    """A command of several lines on one line, joined by ``; `` (for messages and records)."""
    return "; ".join(line.strip() for line in command.splitlines() if line.strip())


def substitute_out(template: str, path: Path) -> str:
    """``template`` with each ``{out}`` replaced by the plain ``path`` (:func:`plain_out`)."""
    if not PLAIN_PATH.fullmatch(str(path)):
        raise ConfigError(
            f"{shown(str(path))} is not a plain path for a capture command (plain_out makes one)"
        )
    return template.replace(OUT_PLACEHOLDER, str(path))


@contextlib.contextmanager
def plain_out(out: Path) -> Iterator[Path]:
    """The path a capture command is told for ``out``, made of :data:`PLAIN_PATH` characters
    only.

    Else a symbolic link to ``out``'s folder in a plain temporary directory, with a plain
    stand-in name moved to ``out`` at the end (never over a file)."""
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
    log.flush()
    end = log.seek(0, os.SEEK_END)
    log.seek(max(start, end - 64 * 1024))
    text = log.read(end - log.tell()).decode(errors="replace")
    log.seek(end)
    return tuple(line.rstrip() for line in text.splitlines() if line.strip())[-FAILURE_TAIL_LINES:]


def run_capture(
    command: CaptureCommand, out: Path, *, log: Path | None = None, what: str = "capture"
) -> float:
    """Run ``command`` once so that it writes the trace ``out``; returns its seconds.

    Output goes to ``log`` (appended) or a temporary file. :class:`CaptureFailed` (with the
    output's last lines) when it fails or writes no trace; :class:`Interrupted` on a stop
    signal."""
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
        # the pool's supervisor for its jobs (bisect's counted captures), else its own
        active = Supervisor.active
        with contextlib.nullcontext(active) if active else Supervisor() as sup:
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
            # stopped: the run in it gets time to finish its trace
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
    """SIGKILL what is left of captures whose trace was to end up in ``root``; returns how many.

    A katra3d killed outright takes only its direct child along; the next command in that
    directory ends the rest, found by :data:`INTO_ENV`, never by a reusable PID."""
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
            continue
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
