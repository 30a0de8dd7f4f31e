"""``katra3d stats TRACE [--zones] [--format table|json|csv|markdown]``: frame-time statistics."""

from __future__ import annotations

import argparse
import sys
from pathlib import Path
from typing import Any

from harness.cli._common import emit_table, fmt_value, load_traces, print_json
from katra_trace.analysis.stats import flatten, trace_stats
from katra_trace.io.tracesets import trace_paths
from katra_trace.metrics import unit_of

#: Columns of the table/markdown forms (csv carries every stat).
TABLE_STATS: tuple[str, ...] = (
    "n", "median_ms", "mean_ms", "p99_ms", "mad_ms", "cv", "fps_avg",
    "fps_low_1pct", "fps_low_1pct_integral", "fps_low_0_1pct", "stutter_pct",
)
#: Columns for the count clocks (``{unit}``: instructions or cycles): counts per frame, no rates.
COUNT_TABLE_STATS: tuple[str, ...] = (
    "n", "median_{unit}", "mean_{unit}", "p99_{unit}", "mad_{unit}", "min_{unit}", "max_{unit}", "cv",
)


def register(sub: argparse._SubParsersAction) -> None:  # type: ignore[type-arg]
    p = sub.add_parser("stats", help="frame-time statistics of a trace (per scene, clock and zone)",
                       description="Frame-time statistics per scene and clock (cpu, wall, gpu; instructions and "
                                   "cycles in counts, not ms), and per zone with --zones. Warmup and setup are "
                                   "excluded. See docs/stats.md.")
    p.add_argument("trace", metavar="TRACE", help="a .katra trace file, or a directory of traces (one per run: "
                   "each run's statistics, with a run column)")
    p.add_argument("--zones", action="store_true", help="also list per-zone statistics")
    p.add_argument("--format", choices=("table", "json", "csv", "markdown"), default="table",
                   help="output format (default: table)")
    p.set_defaults(func=run)


#: Rate columns that mean nothing for a zone (a zone is not a frame: "zone FPS" is not a thing).
FRAME_ONLY_STATS = frozenset({"fps_avg", "fps_low_1pct", "fps_low_1pct_integral", "fps_low_0_1pct",
                              "fps_low_0_1pct_integral", "stutter_pct"})


def run(args: argparse.Namespace) -> int:
    if Path(args.trace).is_dir():
        paths = trace_paths(args.trace)
        code = 0
        for path in paths:
            code = max(code, _one(argparse.Namespace(**{**vars(args), "trace": str(path)}), run_label=path.name))
        return code
    return _one(args)


def _one(args: argparse.Namespace, run_label: str = "") -> int:
    trace = load_traces([args.trace], verb="statistics cover")[0]
    result = trace_stats(trace, zones=args.zones)
    if args.format == "json":
        print_json(result)
        return 0
    rows_src = list(flatten(result, zones=args.zones))
    if not rows_src:
        print(f"katra3d: warning: {args.trace} has no measured frames", file=sys.stderr)
    if args.format == "csv":
        stat_names = list(dict.fromkeys(k for *_, v in rows_src for k in v)) or list(TABLE_STATS)
        columns = ["scene", "zone", "clock", *stat_names]
        rows = [[scene, zone, clock, *("" if v.get(k) is None else repr(v.get(k)) for k in stat_names)]
                for scene, zone, clock, v in rows_src]
        emit_table(columns, rows, "csv")
        return 0
    # one table per unit: frame times in ms, then each count clock (instructions, cycles) in its unit
    groups: dict[str, list[tuple[str, str, str, dict[str, Any]]]] = {}
    for row in rows_src:
        groups.setdefault(unit_of(row[2]), []).append(row)
    for unit, group in groups.items():
        stats = TABLE_STATS if unit == "ms" else tuple(k.format(unit=unit) for k in COUNT_TABLE_STATS)
        columns = ["scene", "zone", "clock", *stats] if args.zones else ["scene", "clock", *stats]
        rows = []
        for scene, zone, clock, v in group:
            lead = [scene, zone or "(frame)", clock] if args.zones else [scene, clock]
            rows.append([*lead, *("" if zone and k in FRAME_ONLY_STATS else _cell(v.get(k), unit) for k in stats)])
        what = "frame times" if unit == "ms" else f"{unit} per frame"
        emit_table(columns, rows, args.format, title=f"{run_label or trace.path.name}: {what} (warmup excluded)")
    return 0


def _cell(value: Any, unit: str) -> str:
    """A table cell: counts as whole numbers with thousands separators, times as fmt_value does."""
    if unit != "ms" and isinstance(value, float) and abs(value) >= 1000:
        return f"{value:,.0f}"
    return fmt_value(value)
