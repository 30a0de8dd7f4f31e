"""Interleaved A/B timing for the benches: a ratio measured within one run.

These machines are shared and noisy, so absolute times are not comparable
between runs; a ratio of two things timed alternately in the same run is.
"""

from __future__ import annotations

import statistics
import time
from collections.abc import Callable


def interleaved_seconds(base: Callable[[], object], new: Callable[[], object], rounds: int = 7,
                        ) -> tuple[float, float]:
    """Median seconds of ``base`` and of ``new``, run alternately ``rounds`` times each (after one warmup)."""
    base()
    new()
    tb: list[float] = []
    tn: list[float] = []
    for i in range(rounds):
        order = (base, new) if i % 2 == 0 else (new, base)
        for fn in order:
            t0 = time.perf_counter()
            fn()
            (tb if fn is base else tn).append(time.perf_counter() - t0)
    return statistics.median(tb), statistics.median(tn)
