"""Helpers shared by the CLI subcommands (no GL imports here).

Trace loading, JSON and table output (the table printer is rich when stdout
is a terminal, plain aligned text otherwise). Which files a path names, and the
``ab.json`` manifest, are the library's (:mod:`katra_trace.io.tracesets`).
"""

from __future__ import annotations

import csv
import math
import os
import sys
import warnings
from collections.abc import Sequence
from typing import Any

from katra_trace import Trace, TraceRecoveryWarning, jsontext, open_trace


def load_trace_quietly(path: str, events: bool = True) -> Trace:
    """open_trace, with the recovery warning left to the caller (it reads ``trace.truncated``)."""
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", TraceRecoveryWarning)
        return open_trace(path, events=events)


def load_traces(paths: Sequence[str | os.PathLike[str]], verb: str = "using") -> list[Trace]:
    """Open each trace (:func:`load_trace_quietly`); a damaged one is used up to where it stops, with a
    one-line warning on stderr ("<path> is damaged (why); <verb> the N events before offset O")."""
    traces = []
    for p in paths:
        t = load_trace_quietly(os.fspath(p))
        if t.truncated:
            print(f"katra3d: warning: {p} is damaged ({t.stop_reason}); {verb} the "
                  f"{len(t.events)} events before offset {t.stopped_at}", file=sys.stderr)
        traces.append(t)
    return traces


def print_json(obj: Any) -> None:
    jsontext.dump(obj, sys.stdout, indent=2, sort_keys=False, default=str)
    sys.stdout.write("\n")


def fmt_value(value: Any) -> str:
    """A stat value for a table cell: ints as is, floats to 4 significant digits (no exponent), None as '-'."""
    if value is None or (isinstance(value, float) and not math.isfinite(value)):
        return "-"
    if isinstance(value, bool) or isinstance(value, int):
        return str(value)
    if isinstance(value, float):
        return fmt_float(value)
    return str(value)


def fmt_float(value: float, digits: int = 4) -> str:
    """``digits`` significant digits in plain notation, never an exponent: 17390, 12.35, 0.008483."""
    if value == 0 or not math.isfinite(value):
        return "0" if value == 0 else str(value)
    decimals = max(0, digits - 1 - math.floor(math.log10(abs(value))))
    return f"{value:.{decimals}f}"


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
        # deferred: rich's console and tables load only when a table goes to a terminal
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
