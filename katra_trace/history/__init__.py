"""History across versions: per-run summaries of traces, kept in an embedded DuckDB file (or Parquet
files per CI runner), trends over labels, and step detection that names the first bad label.

No GL imports. DuckDB is imported only when a store is opened (optional dependency, exit 3 without
it).

* :mod:`~katra_trace.history.rows`: a trace -> rows (run x scene x zone x metric).
* :mod:`~katra_trace.history.ingest`: find and read the traces of ``history add``.
* :mod:`~katra_trace.history.store`: the DuckDB store (lock retry), the Parquet layout, reading
  either.
* :mod:`~katra_trace.history.steps`: the step detector (pure numpy/scipy).
* :mod:`~katra_trace.history.trends`: series over labels in order, :func:`trend_data` for reports,
  :func:`check_steps` for ``history check``.
* :mod:`~katra_trace.history.sim`: the seeded simulation behind docs/history.md's figures.
"""
