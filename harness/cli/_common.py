"""Helpers shared by the CLI subcommands (no GL imports here): trace loading, JSON and table output.

The table printer is rich when stdout is a terminal, plain aligned text otherwise.
"""

from __future__ import annotations

import csv
import json
import math
import sys
import warnings
from collections.abc import Sequence
from typing import Any

from katra_trace import Trace, TraceRecoveryWarning, open_trace


def load_trace_quietly(path: str, events: bool = True) -> Trace:
    """open_trace, with the recovery warning left to the caller (it reads ``trace.truncated``)."""
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", TraceRecoveryWarning)
        return open_trace(path, events=events)


def print_json(obj: Any) -> None:
    json.dump(obj, sys.stdout, indent=2, sort_keys=False, default=str)
    sys.stdout.write("\n")


def fmt_value(value: Any) -> str:
    """A stat value for a table cell: ints as is, floats to 4 significant digits, None as '-'."""
    if value is None or (isinstance(value, float) and not math.isfinite(value)):
        return "-"
    if isinstance(value, bool) or isinstance(value, int):
        return str(value)
    if isinstance(value, float):
        return f"{value:.4g}" if abs(value) < 1e5 else f"{value:.0f}"
    return str(value)


def emit_table(columns: Sequence[str], rows: Sequence[Sequence[str]], fmt: str, title: str = "") -> None:
    """Print ``rows`` (already formatted cells) as table (rich on a TTY), markdown or csv."""
    out = sys.stdout
    if fmt == "csv":
        writer = csv.writer(out, lineterminator="\n")
        writer.writerow(columns)
        writer.writerows(rows)
        return
    if fmt == "markdown":
        if title:
            out.write(f"### {title}\n\n")
        out.write("| " + " | ".join(columns) + " |\n")
        out.write("|" + "|".join("---" for _ in columns) + "|\n")
        for row in rows:
            out.write("| " + " | ".join(c.replace("|", "\\|") for c in row) + " |\n")
        out.write("\n")
        return
    if out.isatty():
        from rich.console import Console
        from rich.table import Table

        table = Table(title=title or None)
        for col in columns:
            table.add_column(col, no_wrap=True)
        for row in rows:
            table.add_row(*row)
        # never squeeze numbers into ellipses: widen past a narrow terminal instead
        needed = sum(max([len(c)] + [len(r[i]) for r in rows]) + 3 for i, c in enumerate(columns)) + 1
        console = Console()
        console.width = max(console.width, needed)
        console.print(table)
        return
    widths = [max([len(c)] + [len(r[i]) for r in rows]) for i, c in enumerate(columns)]
    if title:
        out.write(title + "\n")
    out.write("  ".join(c.ljust(w) for c, w in zip(columns, widths, strict=True)).rstrip() + "\n")
    for row in rows:
        out.write("  ".join(c.ljust(w) for c, w in zip(row, widths, strict=True)).rstrip() + "\n")
