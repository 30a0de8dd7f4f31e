"""History across versions: per-run summaries in DuckDB (or Parquet), trends, and step detection
naming the first bad label. DuckDB loads only when a store opens. See docs/history.md."""
