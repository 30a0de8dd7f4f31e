"""The katra3d exception hierarchy.

Every error a user can cause (bad input, a damaged file, a missing GL stack)
is a :class:`KatraError`. The CLI prints ``str(err)`` on one line, without a
traceback, and exits with ``err.exit_code``:

* 0 ok, 1 regression found (compare), 2 bad input or bad file,
  3 environment (no usable GL).

This module is pure stdlib so every package (scenes included) can use it.
"""

from __future__ import annotations


class KatraError(Exception):
    """Base of every error katra3d reports to a user."""

    exit_code: int = 2


class ConfigError(KatraError):
    """A command-line option, run configuration or parameter is invalid."""


class TraceFormatError(KatraError):
    """A file is not a katra3d trace, or a block in it is torn or corrupt."""

    def __init__(self, message: str, offset: int | None = None) -> None:
        super().__init__(message)
        self.offset = offset


class TraceVersionError(TraceFormatError):
    """A trace was written by a newer, incompatible major format version."""


class SceneError(KatraError):
    """A scene could not be found, loaded, configured or compiled."""


class BackendUnavailable(KatraError):
    """No usable OpenGL context could be created (exit code 3)."""

    exit_code = 3


__all__ = [
    "BackendUnavailable",
    "ConfigError",
    "KatraError",
    "SceneError",
    "TraceFormatError",
    "TraceVersionError",
]
