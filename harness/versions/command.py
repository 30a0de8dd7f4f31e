"""Running one capture command, for ``ab``, bisect and ``ci/compare-versions.sh``.

``{out}`` is always a plain path (one shell word however quoted); the command leads its own
process group, so a first stop signal lets a ``katra3d run`` keep its frames, a second kills."""

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
from katra3d.harness.run.protocol import RESULT_ENV, ChildResult, handed_result
from katra3d.harness.supervisor import STOP_GRACE_S, Supervisor
from katra_trace.errors import ConfigError, Interrupted, KatraError
from katra_trace.io.claim import move_into_place
from katra_trace.text import shown

OUT_ENV = "KATRA3D_OUT"
#: The trace's real place ($KATRA3D_OUT may be a link): finds a killed katra3d's captures.
INTO_ENV = "KATRA3D_CAPTURE_INTO"
PLAIN_PATH = re.compile(r"[A-Za-z0-9_./+:-]+")
LINK_DIR_PREFIX = "katra3d-out-"
OUT_PLACEHOLDER = "{out}"
FAILURE_TAIL_LINES = 20


class CaptureFailed(KatraError):
    """A capture command failed, did not run, or wrote no trace; ``tail``: its last lines;
    ``error``: katra3d's error line, when a ``katra3d run`` handed one back."""

    def __init__(
        self,
        what: str,
        reason: str,
        command: str,
        tail: tuple[str, ...] = (),
        log: Path | None = None,
        error: str = "",
    ) -> None:
        super().__init__(f"{what} command {reason}: {command}")
        self.reason = reason
        self.tail = tail
        self.log = log
        self.error = error


@dataclasses.dataclass(frozen=True)
class CaptureCommand:
    """A shell command writing one trace to ``{out}`` or ``$KATRA3D_OUT``; ``pythonpath`` first."""

    template: str
    cwd: Path | None = None
    pythonpath: Path | None = None

    def check(self, option: str) -> None:
        """ConfigError when the command names no place to write."""
        if not self.template.strip():
            raise ConfigError(f"{option} command is empty")
        if OUT_PLACEHOLDER not in self.template and OUT_ENV not in self.template:
            raise ConfigError(
                f"{option} command must contain {OUT_PLACEHOLDER} or ${OUT_ENV} (where the trace "
                f"is written); got {one_line(self.template)!r}"
            )

    def shown(self, out: Path | None = None) -> str:
        text = one_line(self.template)
        if out is not None:
            text = text.replace(OUT_PLACEHOLDER, shlex.quote(str(out)))
        return f"{text}   (in {shown(str(self.cwd))})" if self.cwd is not None else text


def one_line(command: str) -> str:
    return "; ".join(line.strip() for line in command.splitlines() if line.strip())


def substitute_out(template: str, path: Path) -> str:
    if not PLAIN_PATH.fullmatch(str(path)):
        raise ConfigError(
            f"{shown(str(path))} is not a plain path for a capture command (plain_out makes one)"
        )
    return template.replace(OUT_PLACEHOLDER, str(path))


@contextlib.contextmanager
def plain_out(out: Path) -> Iterator[Path]:
    """``out``, or when not plain, a path through a link in a plain temp dir, with a stand-in
    name moved to ``out`` at the end (never over a file)."""
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


def _environment(command: CaptureCommand, told: Path, out: Path, result: Path) -> dict[str, str]:
    env = dict(os.environ)
    env[OUT_ENV] = str(told)
    env[INTO_ENV] = str(out.resolve())
    env[RESULT_ENV] = str(result)
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
    """Run ``command`` once to write ``out``; returns its seconds. Output appends to ``log``.
    Raises CaptureFailed when it fails or writes no trace, Interrupted on a stop signal."""
    with contextlib.ExitStack() as stack:
        told = stack.enter_context(plain_out(out))
        result = Path(stack.enter_context(tempfile.TemporaryDirectory(prefix="katra3d-result-")))
        result /= "result.json"
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
        # a pool's supervisor (bisect's counted captures), else its own
        active = Supervisor.active
        with contextlib.nullcontext(active) if active else Supervisor() as sup:
            if sup.received:
                raise Interrupted(sup.received[0])
            try:
                group = sup.start(
                    ["/bin/sh", "-c", cmd],
                    policy="levels",
                    cwd=command.cwd,
                    env=_environment(command, told, out, result),
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
        handed = handed_result(result)
    error = handed.error.partition("\n")[0] if handed is not None else ""
    why = _failure(handed, error, code, out, command.cwd)
    if why is not None:
        raise CaptureFailed(what, why, command.shown(out), tail, log, error)
    return seconds


def _failure(
    handed: ChildResult | None, error: str, code: int, out: Path, cwd: Path | None
) -> str | None:
    """Why the capture failed (None: it did not): what a ``katra3d run`` handed back, else the
    command's exit code and whether ``out`` is there."""
    run = handed.run if handed is not None else None
    if handed is not None and handed.failed:
        return f"failed with exit code {handed.exit_code or code}: {error}"
    if run is not None and run.status != "complete":
        return f"was stopped by {run.signal_name or 'a signal'}: its trace is {run.status}"
    if code != 0:
        return f"failed with exit code {code}"
    if out.is_file():
        return None
    if run is not None and (cwd or Path()).joinpath(run.path).is_file():
        return f"wrote its trace at {shown(str(run.path))}, not at {shown(str(out))}"
    return f"exited 0 but wrote no trace at {shown(str(out))}"


def stop_leftover_captures(root: Path) -> int:
    """SIGKILL leftover captures of a killed katra3d writing into ``root``; returns how many.
    Found by :data:`INTO_ENV`, never by a reusable PID."""
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
