"""The katra3d trace format: writer, reader, stats, comparison. Imports no GL module, so traces
can be read on any machine."""

from __future__ import annotations

from katra_trace.errors import (
    BackendUnavailable,
    ConfigError,
    KatraError,
    OutputBusyError,
    OutputExistsError,
    SceneError,
    TraceFormatError,
    TraceIOError,
    TraceTooLargeError,
    TraceVersionError,
    WriterClosedError,
)
from katra_trace.schema import COLUMNS, EVENT_DTYPE, Clock, Flag, Kind, schema_hash
from katra_trace.version import __version__

__all__ = [
    "BackendUnavailable",
    "COLUMNS",
    "Clock",
    "ConfigError",
    "EVENT_DTYPE",
    "Flag",
    "KatraError",
    "Kind",
    "OutputBusyError",
    "OutputExistsError",
    "SceneError",
    "TraceFormatError",
    "TraceIOError",
    "TraceTooLargeError",
    "TraceVersionError",
    "WriterClosedError",
    "__version__",
    "schema_hash",
]

from katra_trace.io.blocks import iter_blocks  # noqa: E402
from katra_trace.io.format import CodecUnavailableError  # noqa: E402
from katra_trace.io.reader import Trace, TraceRecoveryWarning, open_trace  # noqa: E402
from katra_trace.io.writer import TraceWriter  # noqa: E402

__all__ += [
    "CodecUnavailableError",
    "Trace",
    "TraceRecoveryWarning",
    "TraceWriter",
    "iter_blocks",
    "open_trace",
]
