"""A trace as a table, one row per event in file order, times as stored: CSV, and with the
optional extras Parquet, Arrow and pandas."""

from __future__ import annotations

import csv
from collections.abc import Mapping
from typing import IO, TYPE_CHECKING, Any

import numpy as np

from katra_trace import jsontext
from katra_trace.analysis.stats import scene_labels
from katra_trace.export.output import ProgressFn
from katra_trace.export.timeline import flag_names
from katra_trace.jsontext import JsonValue
from katra_trace.metrics import clock_name
from katra_trace.optional import require
from katra_trace.schema import Kind

if TYPE_CHECKING:
    from katra_trace.io.header import TraceHeader
    from katra_trace.io.reader import Trace

TABLE_COLUMNS: tuple[tuple[str, str], ...] = (
    ("scene", "scene label (string)"),
    ("name", "span or counter name (string)"),
    ("kind", "frame | zone | marker | counter"),
    ("clock", "cpu | wall | gpu | instructions | cycles"),
    ("flags", "set flag names joined by '|' (empty: none)"),
    ("depth", "nesting depth: frames 0, zones 1+"),
    ("frame", "frame index within the scene, warmup included"),
    ("start_ns", "start, ns since the capture start (host clock)"),
    ("dur_ns", "duration in ns (a count on the instructions and cycles clocks)"),
    ("value", "counter value (0 for spans)"),
)
_ROWS_PER_CHUNK = 131_072
#: First characters that make a spreadsheet read a CSV cell as a formula (OWASP).
FORMULA_STARTS = ("=", "+", "-", "@", "\t", "\r")


def csv_text(text: str) -> str:
    """``text`` as a CSV cell no spreadsheet runs as a formula."""
    return "'" + text if text.startswith(FORMULA_STARTS) else text


def _lookup(ids: np.ndarray, table: list[str]) -> tuple[np.ndarray, list[str]]:
    uniq, codes = np.unique(ids, return_inverse=True)
    words = [table[i] if 0 <= i < len(table) else f"?{i}" for i in uniq.tolist()]
    return codes.astype(np.int32), words


def string_columns(
    events: np.ndarray, strings: list[str]
) -> dict[str, tuple[np.ndarray, list[str]]]:
    ev = np.asarray(events)
    labels = scene_labels(ev, strings)
    kind_names = {int(k): k.name.lower() for k in Kind}
    uniq, codes = np.unique(ev["scene"], return_inverse=True)
    out = {
        "scene": (codes.astype(np.int32), [labels[int(i)] for i in uniq.tolist()]),
        "name": _lookup(ev["name"], strings),
    }
    for col, namer in (
        ("kind", lambda v: kind_names.get(v, f"kind{v}")),
        ("clock", clock_name),
        ("flags", flag_names),
    ):
        uniq, codes = np.unique(ev[col], return_inverse=True)
        out[col] = (codes.astype(np.int32), [namer(int(v)) for v in uniq.tolist()])
    return out


def write_csv(
    events: np.ndarray, strings: list[str], out: IO[str], progress: ProgressFn | None = None
) -> int:
    """CSV of the table; returns the rows written. Cells are quoted and formula-safe."""
    ev = np.asarray(events)
    writer = csv.writer(out, lineterminator="\n", quoting=csv.QUOTE_NONNUMERIC)
    writer.writerow([c for c, _ in TABLE_COLUMNS])
    cols = string_columns(ev, strings)
    words = {k: np.array([csv_text(w) for w in d], dtype=object) for k, (_, d) in cols.items()}
    for lo in range(0, len(ev), _ROWS_PER_CHUNK):
        part = slice(lo, lo + _ROWS_PER_CHUNK)
        text = [
            words[k][cols[k][0][part]].tolist() for k in ("scene", "name", "kind", "clock", "flags")
        ]
        nums = [ev[c][part].tolist() for c in ("depth", "frame", "start_ns", "dur_ns", "value")]
        writer.writerows(zip(*text, *nums, strict=True))
        if progress is not None:
            progress(min(lo + _ROWS_PER_CHUNK, len(ev)), len(ev))
    return len(ev)


def to_arrow(trace: Trace) -> Any:
    """The events as a ``pyarrow.Table``; header and summary are JSON in its schema metadata."""
    return events_to_arrow(trace.events, list(trace.strings), trace.header, trace.summary.as_dict())


def events_to_arrow(
    events: np.ndarray,
    strings: list[str],
    header: TraceHeader | None = None,
    summary: Mapping[str, JsonValue] | None = None,
) -> Any:
    pa = require("pyarrow", extra="export", purpose="Arrow and Parquet export")
    ev = np.asarray(events)
    arrays = {}
    for name, (codes, words) in string_columns(ev, strings).items():
        arrays[name] = pa.DictionaryArray.from_arrays(
            pa.array(codes, pa.int32()), pa.array(words, pa.string())
        )
    for name in ("depth", "frame", "start_ns", "dur_ns", "value"):
        arrays[name] = pa.array(np.ascontiguousarray(ev[name]))
    meta = {
        "katra3d.header": jsontext.dumps(
            header.as_dict() if header is not None else {}, default=str
        ),
        "katra3d.summary": jsontext.dumps(dict(summary or {}), default=str),
        "katra3d.columns": jsontext.dumps(dict(TABLE_COLUMNS)),
    }
    return pa.table({c: arrays[c] for c, _ in TABLE_COLUMNS}, metadata=meta)


def to_pandas(trace: Trace) -> Any:
    """The events as a ``pandas.DataFrame`` (string columns categorical)."""
    require("pandas", extra="pandas", purpose="to_pandas()")
    return to_arrow(trace).to_pandas()


def write_parquet(
    events: np.ndarray,
    strings: list[str],
    header: TraceHeader,
    summary: Mapping[str, JsonValue],
    out: IO[bytes],
) -> int:
    """Write the table as Parquet (zstd); returns the rows written."""
    require("pyarrow", extra="export", purpose="--to parquet")
    pq = require("pyarrow.parquet", extra="export", purpose="--to parquet")
    table = events_to_arrow(events, strings, header, summary)
    pq.write_table(table, out, compression="zstd")
    return int(table.num_rows)


__all__ = [
    "FORMULA_STARTS",
    "TABLE_COLUMNS",
    "csv_text",
    "events_to_arrow",
    "string_columns",
    "to_arrow",
    "to_pandas",
    "write_csv",
    "write_parquet",
]
