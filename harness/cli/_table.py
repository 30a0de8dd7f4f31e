"""The CLI's end-of-run table."""

from __future__ import annotations

import os

from katra3d.harness.engine.results import RunResult
from katra_trace.metrics import is_count
from katra_trace.units import format_ms


def _printable(text: str) -> str:
    """``text`` with what cannot be encoded (a lone surrogate) replaced."""
    return text.encode("utf-8", "replace").decode("utf-8")


def format_table(result: RunResult) -> str:
    """Per scene: frames, median / p99, FPS, clock, params."""
    # deferred: rich loads only when the table is printed
    from rich.console import Console
    from rich.table import Table

    counts = is_count(result.timing_mode)
    what = f"measure {result.timing_mode}" if counts else f"timing {result.timing_mode}"
    size = f"; {result.size[0]}x{result.size[1]}" if result.size else ""
    table = Table(title=f"katra3d run ({result.status}; {what}{size})", title_justify="left")
    columns = (
        (
            "scene",
            "frames",
            f"median {result.timing_mode}/frame",
            "min",
            "max",
            "spread %",
            "clock",
            "params",
        )
        if counts
        else ("scene", "frames", "median", "p99", "avg FPS", "1% low FPS", "clock", "params")
    )
    for col in columns:
        table.add_column(col, justify="left" if col in ("scene", "clock", "params") else "right")

    def f(value: float | None, digits: int) -> str:
        return "-" if value is None else f"{value:.{digits}f}"

    def n(value: float | None) -> str:
        return "-" if value is None else f"{value:,.0f}"

    for r in result.scenes:
        s = r.stats or {}
        if r.status == "skipped":
            table.add_row(
                _printable(r.label), "skipped", "-", "-", "-", "-", "", _printable(r.reason[:60])
            )
            continue
        label = _printable(r.label) + (" (interrupted)" if r.status == "interrupted" else "")
        params = _printable(" ".join(f"{k}={v}" for k, v in r.params.items()))
        if counts:
            table.add_row(
                label,
                str(r.frames),
                n(s.get("median")),
                n(s.get("min")),
                n(s.get("max")),
                f(s.get("spread_pct"), 3),
                r.clock,
                params,
            )
        else:
            table.add_row(
                label,
                str(r.frames),
                format_ms(s.get("median_ms")),
                format_ms(s.get("p99_ms")),
                f(s.get("fps_avg"), 1),
                f(s.get("fps_low_1pct"), 1),
                r.clock,
                params,
            )
    console = Console(width=160, record=True, file=open(os.devnull, "w"))  # noqa: SIM115
    console.print(table)
    text: str = console.export_text()
    console.file.close()
    return text.rstrip() + f"\ntrace: {_printable(str(result.path))}"


__all__ = ["format_table"]
