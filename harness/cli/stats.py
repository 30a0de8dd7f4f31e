"""``katra3d stats TRACE``: frame-time statistics; ``--all``, json and csv carry every clock."""

from __future__ import annotations

import argparse
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from katra3d.harness.cli._common import (
    emit_table,
    iter_runs,
    print_json,
    table_width,
    terminal_width,
)
from katra3d.harness.cli._slow import CSV_COLUMNS, print_slow, slow_csv_rows, slow_json
from katra3d.harness.run.progress import warn
from katra_trace import Trace
from katra_trace.analysis.slow import trace_slow_frames
from katra_trace.analysis.stats import ClockStats, RunStats, trace_stats
from katra_trace.errors import ExitCode
from katra_trace.jsontext import JsonObject
from katra_trace.metrics import COUNT_CLOCKS, primary_clock_of, unit_of
from katra_trace.text import escape
from katra_trace.units import format_count, format_ms, format_number, stat_label

TABLE_STATS: tuple[str, ...] = (
    "n",
    "median_ms",
    "mean_ms",
    "p99_ms",
    "mad_ms",
    "cv",
    "fps_avg",
    "fps_low_1pct",
    "fps_low_1pct_integral",
    "fps_low_0_1pct",
    "stutter_pct",
)
#: ``--all``'s columns for the count clocks; no rates.
COUNT_TABLE_STATS: tuple[str, ...] = (
    "n",
    "median_{unit}",
    "mean_{unit}",
    "p99_{unit}",
    "mad_{unit}",
    "min_{unit}",
    "max_{unit}",
    "cv",
)
#: (header, stat key) of the compact view.
COMPACT_TIME: tuple[tuple[str, str], ...] = tuple(
    (stat_label(k), k)
    for k in ("n", "median_ms", "p99_ms", "mad_ms", "fps_avg", "fps_low_1pct", "stutter_pct", "cv")
)
COMPACT_COUNT: tuple[tuple[str, str], ...] = tuple(
    (stat_label(k), k)
    for k in ("n", "median_{unit}", "p99_{unit}", "min_{unit}", "max_{unit}", "cv")
)
#: Compact columns in the order they are dropped to fit the terminal.
DROP_ORDER: tuple[str, ...] = tuple(
    stat_label(k)
    for k in ("cv", "stutter_pct", "mad_ms", "min_ms", "max_ms", "fps_low_1pct", "fps_avg")
)
#: Rate columns that mean nothing for a zone.
FRAME_ONLY_STATS = frozenset(
    {
        "fps_avg",
        "fps_low_1pct",
        "fps_low_1pct_integral",
        "fps_low_0_1pct",
        "fps_low_0_1pct_integral",
        "stutter_pct",
    }
)

#: (run label, scene, zone or "", clock, statistics)
Row = tuple[str, str, str, str, ClockStats]


def register(sub: argparse._SubParsersAction) -> None:  # type: ignore[type-arg]
    p = sub.add_parser(
        "stats",
        help="frame-time statistics of a trace (per scene, clock and zone)",
        description="Frame-time statistics per scene: by default on the run's primary clock "
        "(the clock `run` named), in a table that fits the terminal (COLUMNS); "
        "--all for every clock (cpu, wall, gpu, process; instructions and cycles "
        "in counts) and stat. Warmup and setup are excluded. See docs/stats.md.",
    )
    p.add_argument(
        "trace",
        metavar="TRACE",
        help="a .katra trace file, or a directory of traces (one per run: "
        "each run's statistics, with a run column)",
    )
    p.add_argument("--zones", action="store_true", help="also list per-zone statistics")
    p.add_argument(
        "--all",
        action="store_true",
        help="every clock and every stat (default: the primary clock, the columns that fit)",
    )
    p.add_argument(
        "--slow",
        action="store_true",
        help="the slow frames (stutters) and their causes: zone or draw, between zones, gc, "
        "machine, "
        "unknown; per scene a table of causes (--all: every slow frame); json adds slow_frames",
    )
    p.add_argument(
        "--format",
        choices=("table", "json", "csv", "markdown"),
        default="table",
        help="output format (default: table); json and csv always carry every clock and stat",
    )
    p.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    is_dir = Path(args.trace).is_dir()
    if args.format in ("table", "markdown") and not args.all and not args.slow:
        return _compact(args, is_dir)
    verb = "slow frames cover" if args.slow else "statistics cover"
    runs: list[JsonObject] = []
    rows: list[list[str]] = []
    stat_rows: list[tuple[list[str], dict[str, float | int | None]]] = []
    # a directory's traces are never all held
    for trace in iter_runs([args.trace], verb=verb):
        path = trace.path
        label = path.name if is_dir else ""
        lead = [label] if is_dir else []
        found = trace_slow_frames(trace) if args.slow else {}
        result = trace_stats(trace, zones=args.zones)
        if not result.scenes and not found:
            _warn_empty(path)
        if args.format == "json":
            doc = slow_json(result, found) if args.slow else result.as_dict()
            runs.append({"run": label, **doc} if is_dir else doc)
        elif args.format == "csv" and args.slow:
            rows += slow_csv_rows(found, str(path), lead)
        elif args.format == "csv":
            stat_rows += [
                ([*lead, scene, zone, clock], v.as_dict())
                for scene, zone, clock, v in result.rows(args.zones)
            ]
        elif args.slow:
            print_slow(args, label or trace.path.name, found)
        else:
            _tables(args, result, label or trace.path.name)
    head = ["run"] if is_dir else []
    if args.format == "json":
        print_json({"runs": runs} if is_dir else runs[0])
    elif args.format == "csv" and args.slow:
        emit_table([*head, *CSV_COLUMNS], rows, "csv")
    elif args.format == "csv":
        stat_names = list(dict.fromkeys(k for _, v in stat_rows for k in v)) or list(TABLE_STATS)
        emit_table(
            [*head, "scene", "zone", "clock", *stat_names],
            [
                [*cells, *("" if v.get(k) is None else repr(v.get(k)) for k in stat_names)]
                for cells, v in stat_rows
            ],
            "csv",
        )
    return ExitCode.OK


def _tables(args: argparse.Namespace, result: RunStats, name: str) -> None:
    groups: dict[str, list[tuple[str, str, str, ClockStats]]] = {}
    for row in result.rows(zones=args.zones):
        groups.setdefault(unit_of(row[2]), []).append(row)
    for unit, group in groups.items():
        stats = (
            TABLE_STATS if unit == "ms" else tuple(k.format(unit=unit) for k in COUNT_TABLE_STATS)
        )
        heads = [_head(k) for k in stats]
        lead = ["scene", "zone", "clock"] if args.zones else ["scene", "clock"]
        rows = []
        for scene, zone, clock, values in group:
            first = [scene, zone or "(frame)", clock] if args.zones else [scene, clock]
            v = values.as_dict()
            rows.append(
                [
                    *first,
                    *("" if zone and k in FRAME_ONLY_STATS else cell(k, v.get(k)) for k in stats),
                ]
            )
        what = "frame times" if unit == "ms" else f"{unit} per frame"
        emit_table(
            [*lead, *heads],
            rows,
            args.format,
            right=heads,
            title=f"{name}: {what} (warmup excluded)",
        )


def _head(key: str) -> str:
    return key[:-3] if key.endswith("_ms") else key


def cell(key: str, value: Any) -> str:
    """One stat as a cell: times in the unit that suits them, counts whole."""
    if key.endswith("_ms"):
        return format_ms(value)
    if key.rsplit("_", 1)[-1] in COUNT_CLOCKS:
        return format_count(value)
    return format_number(value)


def _warn_empty(path: Path) -> None:
    warn(f"{path} has no measured frames")


def primary_rows(trace: Trace, run_label: str, zones: bool) -> list[Row]:
    """Each scene's statistics on its primary clock, and with ``zones`` its zones'."""
    opts = trace.header.capture_options
    out: list[Row] = []
    for scene, entry in trace_stats(trace, zones=zones).scenes.items():
        zone_clocks = dict.fromkeys(c for per_clock in entry.zones.values() for c in per_clock)
        clock = primary_clock_of(
            list(entry.metrics) or list(zone_clocks), opts.measure.mode, opts.primary_clock
        )
        if clock is None:
            continue
        if clock in entry.metrics:
            out.append((run_label, scene, "", clock, entry.metrics[clock]))
        for zone, per_clock in entry.zones.items():
            on = clock if clock in per_clock else next(iter(per_clock))
            out.append((run_label, scene, zone, on, per_clock[on]))
    return out


def _compact(args: argparse.Namespace, is_dir: bool) -> int:
    rows: list[Row] = []
    for trace in iter_runs([args.trace], verb="statistics cover"):
        found = primary_rows(trace, trace.path.name if is_dir else "", args.zones)
        if not found:
            _warn_empty(trace.path)
        rows += found
    groups: dict[str, list[Row]] = {}
    for row in rows:
        groups.setdefault(unit_of(row[3]), []).append(row)
    name = Path(args.trace).name
    for unit, group in groups.items():
        clocks = list(dict.fromkeys(r[3] for r in group))
        spec = (
            COMPACT_TIME
            if unit == "ms"
            else tuple((h, k.format(unit=unit)) for h, k in COMPACT_COUNT)
        )
        lead = (
            (["run"] if is_dir else [])
            + ["scene"]
            + (["zone"] if args.zones else [])
            + (["clock"] if len(clocks) > 1 else [])
        )
        table = [
            [
                *([escape(run)] if is_dir else []),
                escape(scene),
                *([escape(zone or "(frame)")] if args.zones else []),
                *([clock] if len(clocks) > 1 else []),
                *(
                    "" if zone and key in FRAME_ONLY_STATS else cell(key, v.as_dict().get(key))
                    for _, key in spec
                ),
            ]
            for run, scene, zone, clock, v in group
        ]
        heads = [h for h, _ in spec]
        columns, table = fit(
            lead + heads, table, terminal_width() if args.format == "table" else None
        )
        what = "frame times" if unit == "ms" else f"{unit} per frame"
        on = f"{clocks[0]} clock" if len(clocks) == 1 else f"{', '.join(clocks)} clocks"
        emit_table(
            columns,
            table,
            args.format,
            right=[h for h in heads if h in columns],
            title=f"{name}: {what}, {on}, warmup excluded (--all: every clock)",
        )
    return ExitCode.OK


def fit(
    columns: Sequence[str], rows: Sequence[Sequence[str]], width: int | None
) -> tuple[list[str], list[list[str]]]:
    """Drop :data:`DROP_ORDER` columns until the table fits ``width`` (None: any)."""
    keep = list(columns)
    body = [list(r) for r in rows]
    for name in DROP_ORDER:
        if width is None or table_width(keep, body) <= width:
            break
        if name in keep:
            i = keep.index(name)
            del keep[i]
            for r in body:
                del r[i]
    return keep, body


__all__ = [
    "COMPACT_COUNT",
    "COMPACT_TIME",
    "DROP_ORDER",
    "cell",
    "fit",
    "primary_rows",
    "register",
    "run",
]
