"""History across versions: per-run summaries of traces, kept in an embedded DuckDB file (or Parquet
files per CI runner), trends over labels, and step detection that names the first bad label.

No GL imports. DuckDB is imported only when a store is opened (optional dependency, exit 3 without it).

* :mod:`~katra_trace.history.rows`: a trace -> rows (run x scene x zone x metric).
* :mod:`~katra_trace.history.ingest`: find and read the traces of ``history add``.
* :mod:`~katra_trace.history.store`: the DuckDB store (lock retry), the Parquet layout, reading either.
* :mod:`~katra_trace.history.steps`: the step detector (pure numpy/scipy).
* :mod:`~katra_trace.history.trends`: series over labels in order, :func:`trend_data` for reports,
  :func:`check_steps` for ``history check``.
* :mod:`~katra_trace.history.sim`: the seeded simulation behind docs/history.md's figures.
"""

from __future__ import annotations

from katra_trace.history.rows import COLUMNS, REFERENCE_METRIC, RunFacts, trace_rows
from katra_trace.history.steps import Fit, Step, detect_steps
from katra_trace.history.store import (
    DEFAULT_DB,
    HistoryLockedError,
    HistoryUnavailable,
    Source,
    add_to_parquet,
    add_to_store,
    export_parquet,
    read_rows,
)
from katra_trace.history.trends import (
    CheckResult,
    Selection,
    Series,
    StepReport,
    build_series,
    check_steps,
    load_series,
    trend_data,
)

__all__ = [
    "COLUMNS", "CheckResult", "DEFAULT_DB", "Fit", "HistoryLockedError", "HistoryUnavailable", "REFERENCE_METRIC",
    "RunFacts", "Selection", "Series", "Source", "Step", "StepReport", "add_to_parquet", "add_to_store",
    "build_series", "check_steps", "detect_steps", "export_parquet", "load_series", "read_rows", "trace_rows",
    "trend_data",
]
