"""What every exporter shares: optional imports (:mod:`katra_trace.optional`) and progress callbacks.

An export's output file is written through the one output rule,
:func:`katra_trace.io.claim.open_output` (never an input, never a FIFO or device, links written
through, nothing replaced without ``overwrite``, and then atomically).
"""

from __future__ import annotations

from collections.abc import Callable

from katra_trace.optional import MissingDependencyError, require

#: ``progress(done, total)``: called now and then during a long export (units: events).
ProgressFn = Callable[[int, int], None]


__all__ = ["MissingDependencyError", "ProgressFn", "require"]
