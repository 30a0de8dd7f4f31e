"""``katra3d report TRACE|DIR... [--baseline TRACE|DIR] -o report.html``: one self-contained HTML page."""

from __future__ import annotations

import argparse
from pathlib import Path
from typing import Any

from harness.cli._common import load_traces, print_json
from katra_trace.errors import ConfigError
from katra_trace.history.trends import trend_data
from katra_trace.history.store import Source
from katra_trace.io.claim import check_output
from katra_trace.io.tracesets import trace_paths
from katra_trace.report import build_report, write_report
from katra_trace.report.page import plotly_js_packed


def register(sub: argparse._SubParsersAction) -> None:  # type: ignore[type-arg]
    p = sub.add_parser("report", help="an HTML report with frame-time plots (offline, one file)",
                       description="Write one self-contained HTML page (no network needed to view it): the runs' "
                                   "capture options and host, then per scene the frame-time series (warmup shaded, "
                                   "median and p99 lines), the distribution, the zones and the statistics; with "
                                   "--baseline both sides overlaid and the 'compare' verdicts. See docs/report.md.")
    p.add_argument("traces", metavar="TRACE|DIR", nargs="*",
                   help="trace files, or directories whose traces are the runs (optional with --history)")
    p.add_argument("--baseline", metavar="TRACE|DIR", action="append", default=[],
                   help="baseline trace(s) or directory to compare against (repeatable)")
    p.add_argument("-o", "--output", metavar="PATH", default="report.html",
                   help="the HTML file to write (default: report.html)")
    p.add_argument("--title", default="katra3d report", help="the page's title")
    p.add_argument("--history", metavar="DB",
                   help="add the trends of a history store (katra3d history add ...): a plot per scene and metric "
                        "over the labels, with the steps 'history check' finds")
    p.add_argument("--force", action="store_true", help="replace the output file if it exists")
    p.add_argument("--json", action="store_true", help="print what was written as JSON (for scripts)")
    p.set_defaults(func=run)


def _load(args: list[str]) -> list[Any]:
    return load_traces([path for arg in args for path in trace_paths(arg)], verb="reporting")


def run(args: argparse.Namespace) -> int:
    plotly_js_packed()  # exit 3 before reading anything when plotly is missing
    inputs = [*args.traces, *args.baseline, *([args.history] if args.history else [])]
    out = check_output(args.output, force=args.force, inputs=inputs, option="-o", example="report.html")
    if not args.traces and not args.history:
        raise ConfigError("nothing to report: give trace files or directories, or --history DB")
    runs = _load(args.traces)
    baseline = _load(args.baseline)
    trends = None
    if args.history:
        if not Path(args.history).is_file():
            raise ConfigError(f"no history store at {args.history!r} (katra3d history add ... --db PATH makes one)")
        trends = trend_data(Source(db=Path(args.history)))
    page = build_report(runs, baseline, title=args.title, history=trends)
    size = write_report(out, page, overwrite=args.force, inputs=inputs)
    if args.json:
        print_json({"path": str(out), "bytes": size, "runs": [str(t.path) for t in runs],
                    "baseline": [str(t.path) for t in baseline]})
    else:
        print(f"{out} ({len(runs)} run(s)" + (f" vs {len(baseline)} baseline run(s)" if baseline else "")
              + f", {size / 1e6:.1f} MB)")
    return 0
