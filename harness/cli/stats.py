"""``katra3d stats TRACE [--zones] [--format table|json|csv|markdown]``: frame-time statistics."""

from __future__ import annotations

import argparse
import sys

from harness.cli._common import emit_table, fmt_value, load_trace_quietly, print_json

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
