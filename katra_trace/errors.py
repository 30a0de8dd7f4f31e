"""The katra3d exception hierarchy: every error a user can cause is a :class:`KatraError`, which the
CLI prints on one line and exits with its ``exit_code``. Pure stdlib, so every package can use it.
"""

from __future__ import annotations

import enum


class ExitCode(enum.IntEnum):
    """What every command's exit status means; a stop signal N exits 128 + N."""

    OK = 0
    #: a regression was found (an image that changed included)
    REGRESSION = 1
    #: bad input, a damaged file, or an I/O failure
    BAD_INPUT = 2
    #: the environment lacks something (GL, valgrind, git, glretrace)
    ENVIRONMENT = 3


class KatraError(Exception):
    """Base of every error katra3d reports to a user."""

    exit_code: int = ExitCode.BAD_INPUT
    #: A scene's own traceback, shown by ``katra3d --traceback``; "" if none.
    scene_traceback: str = ""


class ConfigError(KatraError):
    """A command-line option, run configuration or parameter is invalid."""


class OptionError(ConfigError, ValueError):
    """An option's value is outside its range: a ConfigError for the CLI and a ValueError for
    library callers."""


class TraceFormatError(KatraError):
    """A file is not a katra3d trace, or a block in it is torn or corrupt."""

    def __init__(self, message: str, offset: int | None = None) -> None:
        super().__init__(message)
        self.offset = offset


class TraceVersionError(TraceFormatError):
    """A trace was written by a newer, incompatible major format version."""


class TraceTooLargeError(TraceFormatError):
    """Decoding a trace would take more memory than its size can honestly explain; the message
    says how to lift the limit."""


class TraceIOError(KatraError):
    """Writing a trace failed at the operating-system level (disk full, no permission, ...)."""


class OutputExistsError(KatraError):
    """The output path already exists, or appeared during the capture; nothing was replaced.
    ``part_path``: the finished capture kept under its temporary name, if any."""

    def __init__(self, message: str, part_path: str | None = None) -> None:
        super().__init__(message)
        self.part_path = part_path


class OutputBusyError(KatraError):
    """The output's ``<path>.part`` is in the way: a live run's (``stale`` False) or a crashed
    run's, never deleted."""

    def __init__(self, message: str, part_path: str, stale: bool, pid: int | None = None) -> None:
        super().__init__(message)
        self.part_path = part_path
        self.stale = stale
        self.pid = pid


class WriterClosedError(KatraError):
    """A TraceWriter was used after :meth:`~katra_trace.io.writer.TraceWriter.finish`."""


class SceneError(KatraError):
    """A scene could not be found, loaded, configured or compiled."""


class BackendUnavailable(KatraError):
    """No usable OpenGL context could be created (exit code 3)."""

    exit_code = ExitCode.ENVIRONMENT


def write_failed(
    path: object,
    failure: BaseException,
    described: str,
    events: int,
    where: object,
    published: bool | None,
) -> KatraError:
    """The one error of a failed trace write, saying where the ``events`` written before it can
    be read (``published`` False: the existing file was kept)."""
    kept = (
        f"; the {events} events written before it are readable in {str(where)!r}"
        if published is not False
        else "; the existing file was kept"
    )
    if isinstance(failure, ConfigError):
        return ConfigError(f"writing trace {str(path)!r} stopped: {failure}{kept}")
    return TraceIOError(f"writing trace {str(path)!r} failed: {described}{kept}")


class ToolUnavailable(KatraError):
    """A program katra3d runs (valgrind, git, glretrace) is missing or does not run."""

    exit_code = ExitCode.ENVIRONMENT


def signal_exit_code(signum: int) -> int:
    """128 + the signal's number, as a shell reports it."""
    return 128 + int(signum)


def stopped_exit_code(signal_name: str | None) -> int:
    """The exit code of a run stopped by ``signal_name``; none or unknown counts as SIGINT."""
    import signal  # deferred: this module is pure and loads nothing it does not need

    return signal_exit_code(signal.Signals.__members__.get(signal_name or "", signal.SIGINT))


def child_ended(returncode: int) -> tuple[str, int]:
    """How a child that handed back nothing ended, and the exit code that reports it."""
    import signal  # deferred: this module is pure and loads nothing it does not need

    if -returncode in {int(s) for s in signal.Signals}:
        return f"was killed by {signal.Signals(-returncode).name}", signal_exit_code(-returncode)
    return f"ended with exit code {returncode}", ExitCode.BAD_INPUT


class Interrupted(KeyboardInterrupt):
    """A stop signal ended the work; a KeyboardInterrupt, so code that lets Ctrl-C through lets
    it through."""

    def __init__(self, signum: int) -> None:
        import signal  # deferred: this module is pure and loads nothing it does not need

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
