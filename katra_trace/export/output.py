"""What every exporter shares: the progress callback's type.

An export's output file is written through the one output rule,
:func:`katra_trace.io.claim.open_output` (never an input, never a FIFO or device, links written
through, nothing replaced without ``overwrite``, and then atomically); optional packages come
through :mod:`katra_trace.optional`.
"""

from __future__ import annotations

from collections.abc import Callable

#: ``progress(done, total)``: called now and then during a long export (units: events).
ProgressFn = Callable[[int, int], None]


__all__ = ["ProgressFn"]
