"""Every error a user can cause is a :class:`KatraError`: the CLI prints one line and exits with
its ``exit_code``. Pure stdlib."""

from __future__ import annotations

import enum


class ExitCode(enum.IntEnum):
    """Every command's exit status; a stop signal N exits 128 + N."""

    OK = 0
    REGRESSION = 1
    #: bad input, a damaged file, or an I/O failure
    BAD_INPUT = 2
    #: GL, valgrind, git or glretrace missing
    ENVIRONMENT = 3


class KatraError(Exception):
    exit_code: int = ExitCode.BAD_INPUT
    #: A scene's own traceback, for ``--traceback``.
    scene_traceback: str = ""


class ConfigError(KatraError):
    """An option, run configuration or parameter is invalid."""


class OptionError(ConfigError, ValueError):
    """An option's value is out of range (a ValueError too, for library callers)."""


class TraceFormatError(KatraError):
    """Not a katra3d trace, or a block in it is torn or corrupt."""

    def __init__(self, message: str, offset: int | None = None) -> None:
        super().__init__(message)
        self.offset = offset


class TraceVersionError(TraceFormatError):
    """A trace of a newer, incompatible major format version."""


class TraceTooLargeError(TraceFormatError):
    """Decoding would take more memory than the trace's size explains."""


class TraceIOError(KatraError):
    """Writing a trace failed in the OS (disk full, no permission, ...)."""


class OutputExistsError(KatraError):
    """The output exists (or appeared during capture); ``part_path`` keeps the capture, if any."""

    def __init__(self, message: str, part_path: str | None = None) -> None:
        super().__init__(message)
        self.part_path = part_path


class OutputBusyError(KatraError):
    """``<path>.part`` is in the way: a live run's or (``stale``) a crashed run's; never deleted."""

    def __init__(self, message: str, part_path: str, stale: bool, pid: int | None = None) -> None:
        super().__init__(message)
        self.part_path = part_path
        self.stale = stale
        self.pid = pid


class WriterClosedError(KatraError):
    """A TraceWriter was used after ``finish``."""


class SceneError(KatraError):
    """A scene could not be found, loaded, configured or compiled."""


class BackendUnavailable(KatraError):
    """No usable OpenGL context could be created."""

    exit_code = ExitCode.ENVIRONMENT


def write_failed(
    path: object,
    failure: BaseException,
    described: str,
    events: int,
    where: object,
    published: bool | None,
) -> KatraError:
    """The error of a failed trace write; says where the ``events`` written so far can be read."""
    kept = (
        f"; the {events} events written before it are readable in {str(where)!r}"
        if published is not False
        else "; the existing file was kept"
    )
    if isinstance(failure, ConfigError):
        return ConfigError(f"writing trace {str(path)!r} stopped: {failure}{kept}")
    return TraceIOError(f"writing trace {str(path)!r} failed: {described}{kept}")


class ToolUnavailable(KatraError):
    """valgrind, git or glretrace is missing or does not run."""

    exit_code = ExitCode.ENVIRONMENT


def signal_exit_code(signum: int) -> int:
    """128 + the signal's number, as a shell reports it."""
    return 128 + int(signum)


def stopped_exit_code(signal_name: str | None) -> int:
    """Exit code of a run stopped by ``signal_name`` (none or unknown: SIGINT)."""
    import signal  # deferred: keeps this module import-light

    return signal_exit_code(signal.Signals.__members__.get(signal_name or "", signal.SIGINT))


def child_ended(returncode: int) -> tuple[str, int]:
    """How a child that handed back nothing ended, and its exit code."""
    import signal  # deferred: keeps this module import-light

    if -returncode in {int(s) for s in signal.Signals}:
        return f"was killed by {signal.Signals(-returncode).name}", signal_exit_code(-returncode)
    return f"ended with exit code {returncode}", ExitCode.BAD_INPUT


class Interrupted(KeyboardInterrupt):
    """A stop signal ended the work; a KeyboardInterrupt so Ctrl-C handling applies."""

    def __init__(self, signum: int) -> None:
        import signal  # deferred: keeps this module import-light

        super().__init__(f"interrupted by {signal.Signals(signum).name}")
        self.signum = int(signum)

    @property
    def exit_code(self) -> int:
        return signal_exit_code(self.signum)


__all__ = [
    "BackendUnavailable",
    "Interrupted",
    "ConfigError",
    "ExitCode",
    "KatraError",
    "OptionError",
    "OutputBusyError",
    "OutputExistsError",
    "SceneError",
    "TraceFormatError",
    "TraceIOError",
    "TraceTooLargeError",
    "ToolUnavailable",
    "TraceVersionError",
    "WriterClosedError",
    "child_ended",
    "signal_exit_code",
    "stopped_exit_code",
    "write_failed",
]
