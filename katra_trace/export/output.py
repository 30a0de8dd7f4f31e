"""The exporters' progress callback type."""

from __future__ import annotations

from collections.abc import Callable

#: ``progress(done, total)`` in events.
ProgressFn = Callable[[int, int], None]


__all__ = ["ProgressFn"]
