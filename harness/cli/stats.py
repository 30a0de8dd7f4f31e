"""``katra3d stats TRACE [--zones] [--format table|json|csv|markdown]``: frame-time statistics.

Also holds the small table printer shared by ``compare`` and ``ab``: rich
when stdout is a terminal, plain aligned text otherwise.
"""

from __future__ import annotations

import argparse
import csv
import math
import sys
from collections.abc import Sequence
from typing import Any

from harness.cli._common import load_trace_quietly, print_json

#: Columns of the table/markdown forms (csv carries every stat).
TABLE_STATS: tuple[str, ...] = (
    "n", "median_ms", "mean_ms", "p99_ms", "mad_ms", "cv", "fps_avg",
    "fps_low_1pct", "fps_low_1pct_integral", "fps_low_0_1pct", "stutter_pct",
)


def register(sub: argparse._SubParsersAction) -> None:  # type: ignore[type-arg]
    p = sub.add_parser("stats", help="frame-time statistics of a trace (per scene, clock and zone)",
                       description="Frame-time statistics per scene and clock (cpu, wall, gpu), and per zone "
                                   "with --zones. Warmup and setup are excluded. See docs/stats.md.")
    p.add_argument("trace", metavar="TRACE", help="a .katra trace file")
    p.add_argument("--zones", action="store_true", help="also list per-zone statistics")
    p.add_argument("--format", choices=("table", "json", "csv", "markdown"), default="table",
                   help="output format (default: table)")
    p.set_defaults(func=run)


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


def run(args: argparse.Namespace) -> int:
    from katra_trace.stats import flatten, trace_stats

    trace = load_trace_quietly(args.trace)
    if trace.truncated:
        print(f"katra3d: warning: {args.trace} is damaged ({trace.stop_reason}); "
              f"statistics cover the {len(trace.events)} events before offset {trace.stopped_at}",
              file=sys.stderr)
    result = trace_stats(trace, zones=args.zones)
    if args.format == "json":
        print_json(result)
        return 0
    rows_src = list(flatten(result, zones=args.zones))
    if not rows_src:
        print(f"katra3d: warning: {args.trace} has no measured frames", file=sys.stderr)
    if args.format == "csv":
        stat_names = list(rows_src[0][3]) if rows_src else list(TABLE_STATS)
        columns = ["scene", "zone", "clock", *stat_names]
        rows = [[scene, zone, clock, *("" if v.get(k) is None else repr(v.get(k)) for k in stat_names)]
                for scene, zone, clock, v in rows_src]
        emit_table(columns, rows, "csv")
        return 0
    columns = ["scene", "zone", "clock", *TABLE_STATS] if args.zones else ["scene", "clock", *TABLE_STATS]
    rows = []
    for scene, zone, clock, v in rows_src:
        lead = [scene, zone or "(frame)", clock] if args.zones else [scene, clock]
        rows.append([*lead, *(fmt_value(v.get(k)) for k in TABLE_STATS)])
    emit_table(columns, rows, args.format, title=f"{trace.path.name}: frame times (warmup excluded)")
    return 0
