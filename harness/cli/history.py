"""``katra3d history``: per-run summaries across versions, trends and steps (docs/history.md)."""

from __future__ import annotations

import argparse
from pathlib import Path
from typing import Any

from katra3d.harness.cli._common import ALPHA_STEPS, add_decision_options, emit_table, print_json
from katra3d.harness.run.progress import Tally, warn
from katra3d.harness.versions.git import first_parent_order
from katra_trace.analysis.defaults import check_alpha, check_threshold_pct
from katra_trace.analysis.verdict import Verdict
from katra_trace.errors import ConfigError, ExitCode
from katra_trace.history.ingest import find_traces, prepare_runs
from katra_trace.history.rows import iso_utc, parse_time_ns
from katra_trace.history.series import STATS, Selection, load_series
from katra_trace.history.store import (
    DEFAULT_DB,
    DEFAULT_LOCK_TIMEOUT_S,
    Source,
    add_to_parquet,
    add_to_store,
    duckdb_module,
    export_parquet,
    store_path,
)
from katra_trace.history.trends import check_steps
from katra_trace.io.claim import check_output_dir
from katra_trace.metrics import ALL, AUTO, COUNT_CLOCKS, TIME_CLOCKS, is_count
from katra_trace.units import (
    format_change,
    format_change_pct,
    format_count,
    format_ms,
    format_number,
)

FORMATS = ("table", "json", "csv", "markdown")


def register(sub: argparse._SubParsersAction) -> None:  # type: ignore[type-arg]
    p = sub.add_parser(
        "history",
        help="keep per-run summaries across versions; trends and step detection",
        description="Keep per-run summaries of traces under a label (a version), show the trend "
        "of each scene over labels in order, and find the label where a step starts. "
        "Exit codes: 0 ok, 1 (check) a regression starts at the newest label, 2 bad "
        "input, 3 DuckDB missing. See docs/history.md.",
    )
    hsub = p.add_subparsers(dest="history_command", metavar="ACTION")
    hsub.required = True

    def store_options(q: argparse.ArgumentParser, source: bool, parquet: bool = False) -> None:
        where = q.add_mutually_exclusive_group()
        if parquet:
            where.add_argument(
                "--parquet",
                metavar="DIR",
                help="write Parquet files under DIR instead of the DuckDB store",
            )
        where.add_argument(
            "--db",
            metavar="PATH",
            default=str(DEFAULT_DB),
            help=f"the DuckDB history store (default: {DEFAULT_DB})",
        )
        if source:
            where.add_argument(
                "--source",
                metavar="GLOB",
                help="read Parquet files instead of the store, e.g. 'DIR/**/*.parquet' "
                "(any glob DuckDB's read_parquet takes)",
            )
        q.add_argument(
            "--lock-timeout",
            type=float,
            default=DEFAULT_LOCK_TIMEOUT_S,
            metavar="S",
            help=f"seconds to wait while another process holds the store (default: "
            f"{DEFAULT_LOCK_TIMEOUT_S:g})",
        )

    def filters(q: argparse.ArgumentParser) -> None:
        q.add_argument("--scene", metavar="S", help="only this scene")
        q.add_argument(
            "--metric",
            metavar="M",
            default=AUTO,
            help=f"{', '.join((*TIME_CLOCKS, *COUNT_CLOCKS))}, wall/reference, {ALL}, or {AUTO} "
            "(default: "
            "instructions when stored, else cycles, else wall, gpu, process, cpu)",
        )
        q.add_argument(
            "--host",
            metavar="H",
            help="only hosts whose id starts with H or whose 'renderer / driver / cpu' contains H",
        )
        q.add_argument(
            "--zone",
            metavar="Z",
            default="",
            help="a zone's trend instead of the frames' ('*': frames and every zone)",
        )
        q.add_argument(
            "--stat",
            choices=STATS,
            default="median",
            help="the per-run statistic (default: median)",
        )
        q.add_argument("--last", type=int, metavar="N", help="only the newest N labels")
        q.add_argument(
            "--allow-host-mismatch",
            action="store_true",
            help="one trend across hosts (renderers, drivers, CPUs, code generators) instead of "
            "one per host",
        )
        q.add_argument(
            "--format", choices=FORMATS, default="table", help="output format (default: table)"
        )
        q.add_argument(
            "--json",
            action="store_const",
            const="json",
            dest="format",
            help="same as --format json",
        )

    add = hsub.add_parser(
        "add",
        help="store the runs of traces under a label",
        description="Store one row per run x scene x zone x metric of each trace under LABEL. "
        "A trace already stored is skipped (and reported).",
    )
    add.add_argument(
        "traces",
        nargs="+",
        metavar="TRACE|DIR",
        help="trace files, or directories of *.katra files",
    )
    add.add_argument(
        "--label", required=True, help="the version these runs measured (e.g. a tag or short SHA)"
    )
    add.add_argument("--commit", default="", metavar="SHA", help="the commit, kept with the runs")
    add.add_argument(
        "--time",
        metavar="ISO",
        help="the label's time: when every label has one, it orders them "
        "(e.g. the commit date: git show -s --format=%%cI)",
    )
    add.add_argument("--json", action="store_true", help="print what was stored as JSON")
    store_options(add, source=False, parquet=True)
    add.set_defaults(func=run_add)

    show = hsub.add_parser(
        "show",
        help="trend of each scene over labels in order, with a sparkline",
        description="One trend per scene, metric and host over labels in order (by their "
        "--time, else their --commit's first-parent order, else as first added; "
        "docs/history.md). Its change is "
        "the fitted model's, the one 'history check' judges.",
    )
    add_decision_options(show, alpha_means=ALPHA_STEPS)
    filters(show)
    store_options(show, source=True)
    show.set_defaults(func=run_show)

    check = hsub.add_parser(
        "check",
        help="find the labels where a scene's level steps up or down",
        description="Step detection per scene, metric and host over labels in order, with "
        "the runs of a label as replicates. Exit 1 when a regression step starts "
        "at the newest label (a time metric's newest level on fewer than 3 runs is reported as "
        "a departure, with the runs that would settle it, not as a regression).",
    )
    add_decision_options(check, alpha_means=ALPHA_STEPS)
    filters(check)
    store_options(check, source=True)
    check.set_defaults(func=run_check)

    export = hsub.add_parser(
        "export",
        help="write the store as hive-partitioned Parquet (by host and label)",
        description="Write every run of the store as DIR/host_id=H/label=L/SHA.parquet; "
        "runs already there are left alone.",
    )
    export.add_argument("--parquet", metavar="DIR", required=True, help="the Parquet directory")
    store_options(export, source=False)
    export.set_defaults(func=run_export)


def _lock_timeout(args: argparse.Namespace) -> float:
    if not 0 <= args.lock_timeout <= 86400:
        raise ConfigError(
            f"--lock-timeout must be between 0 and 86400 seconds, got {args.lock_timeout:g}"
        )
    return float(args.lock_timeout)


def run_add(args: argparse.Namespace) -> int:
    duckdb_module()  # exit 3 before reading anything when DuckDB is missing
    if args.parquet is not None:
        check_output_dir(args.parquet, option="--parquet")  # before any trace is read
    else:
        store_path(args.db, read_only=False, create=False, inputs=args.traces)
    timeout = _lock_timeout(args)
    label_time = parse_time_ns(args.time) if args.time is not None else None
    paths = find_traces(args.traces)
    with Tally("history", quiet=args.json) as tally:
        runs, same = prepare_runs(
            paths,
            args.label,
            args.commit,
            label_time,
            warn=warn,
            progress=lambda done, total, path: tally.update(
                "reading traces", done, total, path.name
            ),
        )
    where = args.parquet if args.parquet is not None else args.db
    if args.parquet is not None:
        result = add_to_parquet(Path(args.parquet), runs)
    else:
        result = add_to_store(Path(args.db), runs, timeout)
    if args.json:
        print_json(
            {
                "store": where,
                "label": args.label,
                "added": [
                    {"trace": str(r.path), "sha256": r.sha256, "rows": len(r.rows)}
                    for r in result.added
                ],
                "already_stored": [
                    {"trace": str(r.path), "sha256": r.sha256, "label": lab}
                    for r, lab in result.duplicates
                ],
                "same_bytes": [{"trace": str(a), "same_as": str(b)} for a, b in same],
                "rows": result.rows,
            }
        )
        return ExitCode.OK
    print(
        f"history: added {len(result.added)} run(s) ({result.rows} rows) under label "
        f"{args.label!r} to {where}"
    )
    for run, lab in result.duplicates:
        print(f"history: already stored, skipped: {run.path} (label {lab!r})")
    for a, b in same:
        print(f"history: same bytes as {b}, skipped: {a}")
    return ExitCode.OK


def _selection(args: argparse.Namespace) -> Any:
    return Selection(
        scene=args.scene,
        metric=args.metric,
        host=args.host,
        zone=None if args.zone == "*" else args.zone,
        stat=args.stat,
        last=args.last,
        allow_host_mismatch=args.allow_host_mismatch,
        commit_order=first_parent_order(Path.cwd()),
    )


def _source(args: argparse.Namespace) -> Any:
    if args.source is not None:
        return Source(parquet_glob=args.source)
    return Source(db=Path(args.db))


def _name(series: Any) -> str:
    return f"{series.scene} / {series.zone}" if series.zone else series.scene


def _val(value: float, unit: str) -> str:
    if unit == "ms":
        return format_ms(value)
    return format_count(value) if is_count(unit) else format_number(value)


def _checked(args: argparse.Namespace) -> Any:
    check_alpha(args.alpha)  # before the store is opened: a bad option is reported first
    check_threshold_pct(args.threshold)
    series = load_series(_source(args), _selection(args), _lock_timeout(args))
    return check_steps(series, alpha=args.alpha, threshold_pct=args.threshold)


def _no_step_lines(result: Any) -> list[str]:
    out = []
    for m in result.models:
        if m.no_step_reason:
            s = m.series
            out.append(
                f"{_name(s)} {s.metric}: {format_change_pct(m.raw_change_pct)} from "
                f"{s.points[0].label} to "
                f"{s.points[-1].label} is no step: {m.no_step_reason}"
            )
    return out


def _departure_lines(result: Any) -> list[str]:
    return [f"{_name(d.series)} {d.series.metric}: {d.text()}" for d in result.departures]


def run_show(args: argparse.Namespace) -> int:
    result = _checked(args)
    series = result.series
    if args.format == "json":
        print_json(
            {
                "source": _source(args).name,
                "alpha": result.alpha,
                "series": [
                    dict(s.as_dict(), fit=m.as_dict())
                    for s, m in zip(series, result.models, strict=True)
                ],
            }
        )
        return ExitCode.OK
    if args.format == "csv":
        columns = [
            "scene",
            "zone",
            "metric",
            "stat",
            "unit",
            "host_id",
            "label",
            "time",
            "commit",
            "runs",
            "level",
            "min",
            "max",
            "fitted_level",
        ]
        rows = [
            [
                s.scene,
                s.zone,
                s.metric,
                s.stat,
                s.unit,
                s.host_id,
                p.label,
                iso_utc(p.time_ns),
                p.commit,
                str(len(p.values)),
                repr(p.level),
                repr(min(p.values)),
                repr(max(p.values)),
                repr(fitted),
            ]
            for s, m in zip(series, result.models, strict=True)
            for p, fitted in zip(s.points, m.fit.levels, strict=True)
        ]
        emit_table(columns, rows, "csv")
        return ExitCode.OK
    columns = [
        "scene",
        "metric",
        "host",
        "labels",
        "first",
        "last",
        "change",
        "steps",
        "labels' change",
        "trend",
    ]
    rows = []
    for s, m in zip(series, result.models, strict=True):
        first, last = s.points[0], s.points[-1]
        stat = "" if s.stat == "median" else f" {s.stat}"
        rows.append(
            [
                _name(s),
                f"{s.metric}{stat} ({s.unit})",
                s.host_id,
                str(len(s.points)),
                f"{first.label}: {_val(first.level, s.unit)}",
                f"{last.label}: {_val(last.level, s.unit)}",
                format_change_pct(m.change_pct),
                str(len(m.fit.steps)),
                format_change_pct(m.raw_change_pct),
                s.sparkline(),
            ]
        )
    emit_table(
        columns,
        rows,
        args.format,
        title="katra3d history: trend per scene over labels in order; change: "
        "the fitted levels' (the steps 'history check' finds), labels' "
        "change: the geometric means of each label's runs",
    )
    hosts = {s.host_id: s.host for s in series}
    if args.format == "table":
        for host_id, text in hosts.items():
            print(f"host {host_id}: {text}")
        for line in [*_no_step_lines(result), *_departure_lines(result)]:
            print(line)
    if len(series) == 1:
        s, m = series[0], result.models[0]
        detail = [
            [
                p.label,
                iso_utc(p.time_ns),
                p.commit,
                str(len(p.values)),
                _val(p.level, s.unit),
                _val(min(p.values), s.unit),
                _val(max(p.values), s.unit),
                _val(fitted, s.unit),
                p.settings,
            ]
            for p, fitted in zip(s.points, m.fit.levels, strict=True)
        ]
        emit_table(
            [
                "label",
                "time",
                "commit",
                "runs",
                "level",
                "min",
                "max",
                "fitted",
                "settings changed",
            ],
            detail,
            args.format,
            title=f"{_name(s)} {s.metric} {s.stat} ({s.unit}) per label",
        )
    return ExitCode.OK


def run_check(args: argparse.Namespace) -> int:
    result = _checked(args)
    series = result.series
    code = ExitCode.REGRESSION if result.regression_at_newest else ExitCode.OK
    if args.format == "json":
        print_json(
            {
                "source": _source(args).name,
                "newest_label": result.newest_label,
                "alpha": result.alpha,
                "threshold_pct": result.threshold_pct,
                "series_checked": len(series),
                "regression_at_newest_label": result.regression_at_newest,
                "steps": [s.as_dict() for s in result.steps],
                "departures": [d.as_dict() for d in result.departures],
                "by_label": {
                    lab: sorted({_name(s.series) for s in steps})
                    for lab, steps in result.by_label().items()
                },
                "noise": [
                    {
                        "scene": s.scene,
                        "zone": s.zone,
                        "metric": s.metric,
                        "host_id": s.host_id,
                        "run_sd": f.noise_sd,
                        "from": f.noise_source,
                        "labels": len(s.points),
                        "label_dispersion": f.dispersion,
                        "outlier_runs_left_out": f.dropped_runs,
                        "labels_left_out": [s.points[i].label for i in f.departed_labels],
                        "change_pct": m.change_pct,
                        "raw_change_pct": m.raw_change_pct,
                        "no_step_reason": m.no_step_reason,
                    }
                    for s, m, f in zip(series, result.models, result.fits, strict=True)
                ],
            }
        )
        return code
    columns = [
        "starts at",
        "may start",
        "scene",
        "metric",
        "host",
        "change",
        "interval",
        "verdict",
        "note",
    ]
    rows = []
    for st in result.steps:
        s = st.series
        span = st.label if st.start_low == st.start_high else f"{st.start_low} .. {st.start_high}"
        notes = []
        if st.at_newest:
            notes.append("newest label")
        if st.settings_changed:
            notes.append(f"settings changed: {st.settings_changed}")
        stat = "" if s.stat == "median" else f" {s.stat}"
        rows.append(
            [
                st.label,
                span,
                _name(s),
                f"{s.metric}{stat}",
                s.host_id,
                format_change(st.ratio),
                f"[{format_change(st.ratio_low)}, {format_change(st.ratio_high)}]",
                st.verdict,
                "; ".join(notes),
            ]
        )
    if args.format == "csv":
        emit_table(columns, rows, "csv")
        return code
    thresholds = sorted({m.threshold_pct for m in result.models})
    title = (
        f"katra3d history check: {len(series)} series, {len(result.steps)} step(s); alpha "
        f"{args.alpha:g}, "
        f"threshold {'/'.join(f'{t:g}' for t in thresholds)}%, intervals "
        f"{100 * (1 - args.alpha):g}%"
    )
    if rows:
        emit_table(columns, rows, args.format, title=title)
    else:
        print(title)
    dropped = sum(f.dropped_runs for f in result.fits)
    if dropped:
        print(
            f"{dropped} run(s) left out as outliers (far slower or faster than the other runs of "
            "their label)"
        )
    left_out = sum(len(f.departed_labels) for f in result.fits)
    if left_out:
        print(
            f"{left_out} label(s) left out as passing departures (one to three labels far from the "
            "labels around them: a busy runner, not two steps)"
        )
    for line in [*_no_step_lines(result), *_departure_lines(result)]:
        print(line)
    for lab, steps in result.by_label().items():
        parts = [f"{_name(s.series)} {format_change(s.ratio)} ({s.verdict})" for s in steps]
        print(f"steps starting at {lab}: " + ", ".join(parts))
    if code:
        scenes = sorted(
            {
                _name(s.series)
                for s in result.steps
                if s.verdict == Verdict.REGRESSION and s.at_newest
            }
        )
        print(
            f"regression starting at the newest label {result.newest_label!r}: {', '.join(scenes)}"
        )
    else:
        print(f"no regression starts at the newest label {result.newest_label!r}")
    return code


def run_export(args: argparse.Namespace) -> int:
    check_output_dir(args.parquet, option="--parquet")
    with Tally("history") as tally:
        written, skipped = export_parquet(
            Path(args.db),
            Path(args.parquet),
            _lock_timeout(args),
            lambda done, total: tally.update("exporting runs", done, total),
        )
    print(
        f"history: exported {written} run(s) from {args.db} to {args.parquet}"
        + (f"; {skipped} already there" if skipped else "")
    )
    return ExitCode.OK
