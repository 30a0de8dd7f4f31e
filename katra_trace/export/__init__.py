"""Export a trace for other tools (docs/export.md); optional extras load only for their format."""

from __future__ import annotations

import dataclasses
import functools
import io
import os
import time
from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING, BinaryIO

from katra_trace.errors import ConfigError
from katra_trace.export import chrome
from katra_trace.export.callgrind import write_callgrind
from katra_trace.export.output import ProgressFn
from katra_trace.export.perfetto import write_perfetto
from katra_trace.export.table import TABLE_COLUMNS, to_arrow, to_pandas, write_csv, write_parquet
from katra_trace.export.timeline import Timeline, build_timeline
from katra_trace.io.claim import open_output
from katra_trace.optional import MissingDependencyError, require

if TYPE_CHECKING:
    from katra_trace.io.reader import Trace


@dataclasses.dataclass(frozen=True)
class ExportResult:
    path: Path
    format: str
    events: int
    bytes: int
    seconds: float
    counts: dict[str, int]  #: per format: packets, tracks, slices, ...
    warnings: tuple[str, ...]

    def as_dict(self) -> dict[str, object]:
        return {
            "path": str(self.path),
            "format": self.format,
            "events": self.events,
            "bytes": self.bytes,
            "seconds": round(self.seconds, 3),
            "counts": self.counts,
            "warnings": list(self.warnings),
        }


#: (trace, output, progress, warnings to append to) -> per-format counts.
Writer = Callable[["Trace", BinaryIO, "ProgressFn | None", list[str]], dict[str, int]]


@dataclasses.dataclass(frozen=True)
class Exporter:
    """One format; ``needs``: ``(module, extra)`` pairs checked before any file is made."""

    name: str
    suffix: str
    write: Writer
    needs: tuple[tuple[str, str], ...] = ()


def _timeline(trace: Trace, warnings: list[str]) -> Timeline:
    tl = build_timeline(trace.events, list(trace.strings), trace.clock_syncs)
    if tl.clamped:
        warnings.append(
            f"{tl.clamped} spans overhung their parent frame or the next span and were "
            "clamped to nest (their exact values are in the trace and the CSV export)"
        )
    return tl


def _drift(tl: Timeline, counts: dict[str, int]) -> dict[str, int]:
    if tl.gpu_drift_ppm is not None:
        counts["gpu_drift_ppb"] = int(round(tl.gpu_drift_ppm * 1000))
    return counts


def _perfetto(
    trace: Trace, f: BinaryIO, progress: ProgressFn | None, warnings: list[str]
) -> dict[str, int]:
    tl = _timeline(trace, warnings)
    counts = write_perfetto(tl, trace.header, trace.summary.as_dict(), f, progress)
    if counts.get("timestamps_rebased"):
        warnings.append(
            "the trace's host start time would put events outside the timestamps "
            "Perfetto holds; times are shifted so that the first event is at 0"
        )
    return _drift(tl, counts)


def _chrome(
    trace: Trace, f: BinaryIO, progress: ProgressFn | None, warnings: list[str]
) -> dict[str, int]:
    tl = _timeline(trace, warnings)
    text = io.TextIOWrapper(f, encoding="utf-8", newline="\n", write_through=False)
    counts = chrome.write_chrome(tl, trace.header, trace.summary.as_dict(), text, progress)
    text.flush()
    text.detach()
    if len(trace.events) > chrome.CHROME_EVENT_WARN:
        warnings.append(
            f"{len(trace.events):,} events: chrome://tracing struggles beyond about "
            f"{chrome.CHROME_EVENT_WARN:,}; export with --to perfetto and open it in "
            "ui.perfetto.dev instead"
        )
    return _drift(tl, counts)


def _csv(
    trace: Trace, f: BinaryIO, progress: ProgressFn | None, warnings: list[str]
) -> dict[str, int]:
    text = io.TextIOWrapper(f, encoding="utf-8", newline="")
    rows = write_csv(trace.events, list(trace.strings), text, progress)
    text.flush()
    text.detach()
    return {"rows": rows}


def _parquet(
    trace: Trace, f: BinaryIO, progress: ProgressFn | None, warnings: list[str]
) -> dict[str, int]:
    return {
        "rows": write_parquet(
            trace.events, list(trace.strings), trace.header, trace.summary.as_dict(), f
        )
    }


def _callgrind(
    trace: Trace,
    f: BinaryIO,
    progress: ProgressFn | None,
    warnings: list[str],
    scene: str | None = None,
) -> dict[str, int]:
    return write_callgrind(trace, f, scene)


#: In ``--to`` order; a new format is one entry here.
EXPORTERS: dict[str, Exporter] = {
    e.name: e
    for e in (
        Exporter(
            "perfetto",
            ".pftrace",
            _perfetto,
            (("perfetto.protos.perfetto.trace.perfetto_trace_pb2", "export"),),
        ),
        Exporter("chrome", ".json", _chrome),
        Exporter("csv", ".csv", _csv),
        Exporter("parquet", ".parquet", _parquet, (("pyarrow.parquet", "export"),)),
        Exporter("callgrind", ".callgrind", _callgrind),
    )
}
FORMATS: dict[str, str] = {name: e.suffix for name, e in EXPORTERS.items()}


def _exporter(fmt: str) -> Exporter:
    if fmt not in EXPORTERS:
        raise ConfigError(f"unknown export format {fmt!r}; choose one of {', '.join(EXPORTERS)}")
    return EXPORTERS[fmt]


def default_path(trace_path: str | os.PathLike[str], fmt: str) -> Path:
    """The output beside the trace: ``run.katra`` -> ``run.pftrace``."""
    exporter = _exporter(fmt)
    p = Path(trace_path)
    return (
        p.with_suffix(exporter.suffix)
        if p.suffix == ".katra"
        else p.with_name(p.name + exporter.suffix)
    )


def export_trace(
    trace: Trace,
    fmt: str,
    path: str | os.PathLike[str] | None = None,
    *,
    overwrite: bool = False,
    progress: ProgressFn | None = None,
    scene: str | None = None,
) -> ExportResult:
    """Write ``trace`` as ``fmt`` to ``path`` (default beside it) only on success. Raises
    ConfigError, OutputExistsError, MissingDependencyError or TraceIOError."""
    exporter = _exporter(fmt)
    if scene is not None:
        if fmt != "callgrind":
            raise ConfigError(f"--scene applies to --to callgrind, not --to {fmt}")
        exporter = dataclasses.replace(exporter, write=functools.partial(_callgrind, scene=scene))
    out_path = Path(path) if path is not None else default_path(trace.path, fmt)
    for module, extra in exporter.needs:
        require(module, extra=extra, purpose=f"--to {fmt}")
    t0 = time.perf_counter()
    warnings: list[str] = []
    with open_output(
        out_path, force=overwrite, inputs=[trace.path], example=default_path("out", fmt).name
    ) as f:
        counts = exporter.write(trace, f, progress, warnings)
        size = f.tell()
    return ExportResult(
        out_path, fmt, len(trace.events), size, time.perf_counter() - t0, counts, tuple(warnings)
    )


__all__ = [
    "EXPORTERS",
    "ExportResult",
    "Exporter",
    "FORMATS",
    "MissingDependencyError",
    "TABLE_COLUMNS",
    "default_path",
    "export_trace",
    "to_arrow",
    "to_pandas",
]
