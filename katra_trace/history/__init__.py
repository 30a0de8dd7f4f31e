"""History across versions: per-run summaries of traces in a DuckDB file (or Parquet per CI
runner), trends over labels, and step detection that names the first bad label. No GL; DuckDB is
imported only when a store is opened. See docs/history.md.
"""
