"""katra3d's benches: ratios against baselines measured in the same run, one table, results.json.

Run ``make bench`` (or ``python -m bench --help``). The framework is in
:mod:`bench._core` (rows, targets, registry, the interleaved ratio method) and
:mod:`bench._report` (table, results.json); every other module in this
package holds benches and is imported by the runner.
"""

from __future__ import annotations

from bench._core import (
    BenchContext,
    Row,
    Target,
    at_least,
    at_most,
    bench,
    interleave,
    median_iqr,
    pair_ratios,
    ratio_row,
)

__all__ = [
    "BenchContext",
    "Row",
    "Target",
    "at_least",
    "at_most",
    "bench",
    "interleave",
    "median_iqr",
    "pair_ratios",
    "ratio_row",
]
