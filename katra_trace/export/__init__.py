"""Export a trace for other tools: Perfetto, Chrome's JSON trace format, CSV and Parquet.

:func:`export_trace` writes one opened :class:`~katra_trace.io.reader.Trace` in one format;
``katra3d export`` is its command line. docs/export.md describes each format's layout.
Pure Python + numpy (no GL); ``perfetto`` and ``pyarrow`` are optional extras imported only
by the formats that need them (:class:`MissingDependencyError`, exit code 3, names the pip line).
"""

from __future__ import annotations

import dataclasses
import io
import os
import time
from pathlib import Path
from typing import TYPE_CHECKING

from katra_trace.errors import ConfigError
from katra_trace.export import chrome
from katra_trace.export.output import ProgressFn
from katra_trace.export.perfetto import write_perfetto
from katra_trace.export.table import TABLE_COLUMNS, to_arrow, to_pandas, write_csv, write_parquet
from katra_trace.export.timeline import build_timeline
from katra_trace.io.claim import open_output
from katra_trace.optional import MissingDependencyError, require

if TYPE_CHECKING:
    from katra_trace.io.reader import Trace

#: format -> file suffix of its default output path.
FORMATS: dict[str, str] = {"perfetto": ".pftrace", "chrome": ".json", "csv": ".csv", "parquet": ".parquet"}


@dataclasses.dataclass(frozen=True)
class ExportResult:
    """What an export wrote."""

    path: Path
    format: str
    events: int  #: events of the trace that were exported (all of them: every row lands somewhere)
    bytes: int  #: size of the file written
    seconds: float
    counts: dict[str, int]  #: per-format details (packets, tracks, slices, ...)
    warnings: tuple[str, ...]  #: things the user should know (clamped spans, a huge Chrome trace)

    def as_dict(self) -> dict[str, object]:
        return {"path": str(self.path), "format": self.format, "events": self.events, "bytes": self.bytes,
                "seconds": round(self.seconds, 3), "counts": self.counts, "warnings": list(self.warnings)}


def default_path(trace_path: str | os.PathLike[str], fmt: str) -> Path:
    """The output beside the trace: ``run.katra`` -> ``run.pftrace`` / ``run.json`` / ``run.csv`` / ..."""
    if fmt not in FORMATS:
        raise ConfigError(f"unknown export format {fmt!r}; choose one of {', '.join(FORMATS)}")
    p = Path(trace_path)
    return p.with_suffix(FORMATS[fmt]) if p.suffix == ".katra" else p.with_name(p.name + FORMATS[fmt])


def export_trace(trace: Trace, fmt: str, path: str | os.PathLike[str] | None = None, *, overwrite: bool = False,
                 progress: ProgressFn | None = None) -> ExportResult:
    """Write ``trace`` as ``fmt`` (a key of :data:`FORMATS`) to ``path`` (default: beside the trace).

    The file appears only when the export succeeded, and an existing file is replaced only with
    ``overwrite``. Raises :class:`ConfigError` (bad format or path), ``OutputExistsError``,
    :class:`MissingDependencyError` (exit 3) or ``TraceIOError``.
    """
    out_path = Path(path) if path is not None else default_path(trace.path, fmt)
    if fmt not in FORMATS:
        raise ConfigError(f"unknown export format {fmt!r}; choose one of {', '.join(FORMATS)}")
    if fmt == "perfetto":
        require("perfetto.protos.perfetto.trace.perfetto_trace_pb2", extra="export", purpose="--to perfetto")
    elif fmt == "parquet":
        require("pyarrow.parquet", extra="export", purpose="--to parquet")
    t0 = time.perf_counter()
    warnings: list[str] = []
    counts: dict[str, int] = {}
    strings = list(trace.strings)
    with open_output(out_path, force=overwrite, inputs=[trace.path], example=default_path("out", fmt).name) as f:
        if fmt in ("perfetto", "chrome"):
            tl = build_timeline(trace.events, strings, trace.clock_syncs)
            if tl.clamped:
                warnings.append(f"{tl.clamped} spans overhung their parent frame or the next span and were "
                                "clamped to nest (their exact values are in the trace and the CSV export)")
            if fmt == "perfetto":
                counts = write_perfetto(tl, trace.header, trace.summary, f, progress)
                if counts.get("timestamps_rebased"):
                    warnings.append("the trace's host start time would put events outside the timestamps "
                                    "Perfetto holds; times are shifted so that the first event is at 0")
            else:
                text = io.TextIOWrapper(f, encoding="utf-8", newline="\n", write_through=False)
                counts = chrome.write_chrome(tl, trace.header, trace.summary, text, progress)
                text.flush()
                text.detach()
                if len(trace.events) > chrome.CHROME_EVENT_WARN:
                    warnings.append(f"{len(trace.events):,} events: chrome://tracing struggles beyond about "
                                    f"{chrome.CHROME_EVENT_WARN:,}; export with --to perfetto and open it in "
                                    "ui.perfetto.dev instead")
            if tl.gpu_drift_ppm is not None:
                counts["gpu_drift_ppb"] = int(round(tl.gpu_drift_ppm * 1000))
        elif fmt == "csv":
            text = io.TextIOWrapper(f, encoding="utf-8", newline="")
            counts = {"rows": write_csv(trace.events, strings, text, progress)}
            text.flush()
            text.detach()
        else:
            counts = {"rows": write_parquet(trace.events, strings, trace.header, trace.summary, f)}
        size = f.tell()
    return ExportResult(out_path, fmt, len(trace.events), size, time.perf_counter() - t0, counts, tuple(warnings))


__all__ = [
    "ExportResult",
    "FORMATS",
    "MissingDependencyError",
    "TABLE_COLUMNS",
    "default_path",
    "export_trace",
    "to_arrow",
    "to_pandas",
]
