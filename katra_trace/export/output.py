"""The exporters' progress callback type. Output files go through
:func:`katra_trace.io.claim.open_output`, the one output rule."""

from __future__ import annotations

from collections.abc import Callable

#: ``progress(done, total)`` in events, called now and then during a long export.
ProgressFn = Callable[[int, int], None]


__all__ = ["ProgressFn"]
