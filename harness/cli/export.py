"""``katra3d export TRACE --to FORMAT``: the trace for other tools."""

from __future__ import annotations

import argparse

from katra3d.harness.cli._common import load_traces, print_json, stops_interrupt
from katra3d.harness.run.progress import Tally, warn
from katra_trace.errors import ExitCode
from katra_trace.export import FORMATS, default_path, export_trace
from katra_trace.io.claim import check_output


def register(sub: argparse._SubParsersAction) -> None:  # type: ignore[type-arg]
    p = sub.add_parser(
        "export",
        help="export a trace for Perfetto, chrome://tracing, CSV, Parquet or callgrind's tools",
        description="Write a trace in another format: perfetto (a .pftrace for ui.perfetto.dev), "
        "chrome (Trace Event Format JSON), csv or parquet (one row per event), callgrind "
        "(a counted run's instruction profiles, for callgrind_annotate and KCachegrind). "
        "The file goes beside the trace unless -o says otherwise; an existing file "
        "is replaced only with --force. See docs/export.md.",
    )
    p.add_argument("trace", metavar="TRACE", help="a .katra trace file")
    p.add_argument(
        "--to",
        required=True,
        choices=tuple(FORMATS),
        metavar="FORMAT",
        help=f"output format: {', '.join(FORMATS)}",
    )
    p.add_argument(
        "-o",
        "--output",
        metavar="PATH",
        default=None,
        help="output file (default: the trace's path with .pftrace, .json, .csv, .parquet or "
        ".callgrind)",
    )
    p.add_argument(
        "--scene",
        metavar="NAME",
        default=None,
        help="--to callgrind: only this scene's profile (default: every scene's)",
    )
    p.add_argument("--force", action="store_true", help="replace the output file if it exists")
    p.add_argument(
        "--json", action="store_true", help="print what was written as JSON (for scripts)"
    )
    p.add_argument("--quiet", action="store_true", help="no progress output")
    p.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    output = args.output if args.output is not None else default_path(args.trace, args.to)
    check_output(
        output,
        force=args.force,
        inputs=[args.trace],
        option="-o",
        example=default_path("out", args.to).name,
    )
    trace = load_traces([args.trace], verb="exporting")[0]
    with stops_interrupt(), Tally(quiet=args.quiet) as tally:
        result = export_trace(
            trace,
            args.to,
            args.output,
            overwrite=args.force,
            scene=args.scene,
            progress=lambda done, total: tally.update("exporting events", done, total),
        )
    for warning in result.warnings:
        warn(warning)
    if args.json:
        print_json(result.as_dict())
    elif not args.quiet:
        print(
            f"{result.path} ({args.to}, {result.events:,} events, {result.bytes:,} bytes, "
            f"{result.seconds:.2f} s)"
        )
    return ExitCode.OK
