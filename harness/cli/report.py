"""``katra3d report``: runs, a comparison or trends as one HTML page (docs/report.md)."""

from __future__ import annotations

import argparse
from pathlib import Path
from typing import TYPE_CHECKING

from katra3d.harness.cli._common import (
    ALPHA_COMPARE,
    ALPHA_STEPS,
    add_comparability_options,
    add_decision_options,
    check_compare_options,
    compare_options,
    image_options,
    iter_runs,
    print_json,
    warn_damaged,
)
from katra_trace.errors import ConfigError, ExitCode, KatraError
from katra_trace.history.store import Source
from katra_trace.history.trends import trend_data
from katra_trace.io.claim import check_output
from katra_trace.io.tracesets import is_ab_dir
from katra_trace.report import build_report, write_report
from katra_trace.report.page import plotly_js_packed

if TYPE_CHECKING:
    from katra_trace.analysis.comparison import ComparisonResult


def register(sub: argparse._SubParsersAction) -> None:  # type: ignore[type-arg]
    p = sub.add_parser(
        "report",
        help="an HTML report with frame-time plots (offline, one file)",
        description="Write one self-contained HTML page (no network needed to view it): the runs' "
        "capture options and host, then per scene the frame-time series (warmup shaded, "
        "median and p99 lines), the distribution, the zones and the statistics; with "
        "--baseline both sides overlaid and the 'compare' verdicts. See docs/report.md.",
    )
    p.add_argument(
        "traces",
        metavar="TRACE|DIR",
        nargs="*",
        help="trace files, or directories whose traces are the runs (optional with --history); or "
        "one "
        "output directory of 'katra3d ab', whose two sides are compared as by --baseline DIR/base "
        "DIR/new",
    )
    p.add_argument(
        "--baseline",
        metavar="TRACE|DIR",
        action="append",
        default=[],
        help="baseline trace(s) or directory to compare against (repeatable)",
    )
    p.add_argument(
        "-o",
        "--output",
        metavar="PATH",
        default="report.html",
        help="the HTML file to write (default: report.html)",
    )
    p.add_argument("--title", default="katra3d report", help="the page's title")
    p.add_argument(
        "--history",
        metavar="DB",
        help="add the trends of a history store (katra3d history add ...): a plot per scene and "
        "metric "
        "over the labels, with the steps 'history check' finds",
    )
    add_decision_options(
        p, alpha_means=f"{ALPHA_COMPARE} with --baseline; with --history, {ALPHA_STEPS}"
    )
    add_comparability_options(p)
    p.add_argument("--force", action="store_true", help="replace the output file if it exists")
    p.add_argument(
        "--json", action="store_true", help="print what was written as JSON (for scripts)"
    )
    p.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    plotly_js_packed()  # exit 3 before reading anything when plotly is missing
    check_compare_options(args)
    inputs = [*args.traces, *args.baseline, *([args.history] if args.history else [])]
    out = check_output(
        args.output, force=args.force, inputs=inputs, option="-o", example="report.html"
    )
    if not args.traces and not args.history:
        raise ConfigError("nothing to report: give trace files or directories, or --history DB")
    policy, limits = image_options(args)
    comparison: ComparisonResult | None = None
    error: str | None = None
    ab_dir = not args.baseline and len(args.traces) == 1 and is_ab_dir(args.traces[0])
    if args.baseline or ab_dir:
        # deferred: the comparison loads scipy
        from katra_trace.analysis.comparison import compare_sides, open_sides

        # an ab directory is both sides, paired as `compare DIR` pairs them
        sides = (
            open_sides(args.traces[0], verb="reporting")
            if ab_dir
            else open_sides(args.baseline, args.traces, verb="reporting")
        )
        for line in sides.damaged:
            warn_damaged(line)
        runs, baseline = list(sides.new_traces), list(sides.base_traces)
        try:  # traces that cannot be compared: the page says why
            comparison = compare_sides(
                sides, compare_options(args), image_policy=policy, image_limits=limits
            )
        except KatraError as exc:
            error = str(exc)
    else:
        runs, baseline = list(iter_runs(args.traces, verb="reporting")), []
    trends = None
    if args.history:
        if not Path(args.history).is_file():
            raise ConfigError(
                f"no history store at {args.history!r} (katra3d history add ... --db PATH makes "
                "one)"
            )
        trends = trend_data(
            Source(db=Path(args.history)), alpha=args.alpha, threshold_pct=args.threshold
        )
    page = build_report(
        runs,
        baseline,
        title=args.title,
        history=trends,
        comparison=comparison,
        comparison_error=error,
    )
    size = write_report(out, page, overwrite=args.force, inputs=inputs)
    if args.json:
        print_json(
            {
                "path": str(out),
                "bytes": size,
                "runs": [str(t.path) for t in runs],
                "baseline": [str(t.path) for t in baseline],
            }
        )
    else:
        what = (
            f"{len(runs)} run(s)" + (f" vs {len(baseline)} baseline run(s)" if baseline else "")
            if runs or baseline or trends is None
            else f"history of {trends.runs} run(s)"
        )
        print(f"{out} ({what}, {size / 1e6:.1f} MB)")
    return ExitCode.OK
