"""Helpers shared by the CLI subcommands (no GL imports): option builders, trace loading, output."""

from __future__ import annotations

import argparse
import contextlib
import csv
import os
import shutil
import signal
import sys
from collections.abc import Iterator, Sequence
from typing import Any

from katra3d.harness.run.progress import warn
from katra3d.harness.supervisor import handling
from katra_trace import Trace, jsontext
from katra_trace.analysis.defaults import (
    DEFAULT_ALPHA,
    DEFAULT_IMAGE_MAX_MEAN,
    DEFAULT_IMAGE_MAX_OUTLIER_PCT,
    DEFAULT_IMAGE_OUTLIER_LEVEL,
    DEFAULT_THRESHOLD_COUNT_PCT,
    DEFAULT_THRESHOLD_TIME_PCT,
    IMAGE_POLICIES,
    SOFTWARE_TIME_DEFAULT,
    CompareOptions,
    check_alpha,
    check_threshold_pct,
    image_policy,
)
from katra_trace.analysis.images import ImageThresholds
from katra_trace.errors import Interrupted
from katra_trace.io.tracesets import iter_traces, open_traces
from katra_trace.metrics import METRICS, RUN_STATS, check_run_stat, is_count

#: What ``--alpha`` means to a comparison of two sides, and to step detection.
ALPHA_COMPARE = "false-regression rate per scene (one-sided, after Holm correction across scenes)"
ALPHA_STEPS = "chance that a flat trend shows a step; 1 - alpha is the intervals' confidence"


@contextlib.contextmanager
def stops_interrupt() -> Iterator[None]:
    """SIGTERM and SIGHUP raise Interrupted meanwhile, so a command removes its temporary file."""

    def stop(signum: int, _frame: object) -> None:
        raise Interrupted(signum)

    with handling(stop, (signal.SIGTERM, signal.SIGHUP), unless_ignored=True):
        yield


def add_decision_options(p: argparse.ArgumentParser, alpha_means: str = ALPHA_COMPARE) -> None:
    """``--threshold`` and ``--alpha``, for every command that gives a verdict."""
    p.add_argument(
        "--threshold",
        type=float,
        default=None,
        metavar="PCT",
        help=f"smallest change in percent that counts as a regression or improvement (default: "
        f"{DEFAULT_THRESHOLD_TIME_PCT:g} for times, {DEFAULT_THRESHOLD_COUNT_PCT:g} for "
        "instructions and cycles)",
    )
    p.add_argument(
        "--alpha",
        type=float,
        default=DEFAULT_ALPHA,
        help=f"{alpha_means} (default: {DEFAULT_ALPHA:g})",
    )


def add_comparability_options(p: argparse.ArgumentParser, images: bool = True) -> None:
    """What is compared and what may be (compare, ab, report --baseline, bisect); ``images`` adds
    the image verdict's options."""
    p.add_argument(
        "--metric",
        choices=METRICS,
        default="auto",
        help="what is compared: auto = instructions (then cycles) when every trace has them; on a "
        "software renderer whose traces record process CPU time, "
        f"{' '.join(SOFTWARE_TIME_DEFAULT)} (the frame's work, whatever a busy neighbour does to "
        "its wall time; docs/stats.md); else the clock the capture trusts (wall in sync mode, gpu "
        "in gpu mode); process = the process CPU time per frame",
    )
    p.add_argument(
        "--stat",
        choices=RUN_STATS,
        default=None,
        help="what reduces each run of a time metric to one level: median or p10, the 10th "
        "percentile of its frames (the frames nothing got in the way of: steadier on a busy "
        f"machine, blind to a change that slows only some frames); default: "
        f"{SOFTWARE_TIME_DEFAULT[1]} where --metric auto chose {SOFTWARE_TIME_DEFAULT[0]}, else "
        "median",
    )
    p.add_argument(
        "--normalize",
        action="store_true",
        help="compare each run's median frame wall divided by the median wall of its reference "
        "workload (cancels machine drift; needs traces with reference markers)",
    )
    p.add_argument(
        "--allow-host-mismatch",
        action="store_true",
        help="compare even when GL renderer or driver differ (noted in the output)",
    )
    p.add_argument(
        "--allow-param-mismatch",
        action="store_true",
        help="compare even when scene params differ, e.g. to measure what a param change costs",
    )
    p.add_argument(
        "--allow-codegen-mismatch",
        action="store_true",
        help="compare instruction or cycle counts even when the code generator differs (CPU model "
        "or flags, Mesa, LLVM, vector width; noted in the output)",
    )
    # kept for old scripts: no effect
    p.add_argument("--seed", type=int, default=0, help=argparse.SUPPRESS)
    if images:
        add_image_options(p)


def add_image_options(p: argparse.ArgumentParser) -> None:
    p.add_argument(
        "--images",
        choices=IMAGE_POLICIES,
        default=None,
        help="what a changed last frame does: gate = a regression, exit 1 (default); warn = a line "
        "only (the default with --allow-param-mismatch); off = no image verdict",
    )
    p.add_argument(
        "--image-max-mean",
        type=float,
        default=DEFAULT_IMAGE_MAX_MEAN,
        metavar="FLIP",
        help="largest FLIP mean error (0-1) of an image within tolerance "
        f"(default: {DEFAULT_IMAGE_MAX_MEAN:g})",
    )
    p.add_argument(
        "--image-max-outliers",
        type=float,
        default=DEFAULT_IMAGE_MAX_OUTLIER_PCT,
        metavar="PCT",
        help=f"largest share of pixels, in percent, whose FLIP error is over "
        f"{DEFAULT_IMAGE_OUTLIER_LEVEL:g} in an image within tolerance "
        f"(default: {DEFAULT_IMAGE_MAX_OUTLIER_PCT:g})",
    )


def image_options(args: argparse.Namespace) -> tuple[str, ImageThresholds]:
    """The ``--images`` policy and the image thresholds, checked."""
    return (
        image_policy(args.images, args.allow_param_mismatch),
        ImageThresholds(max_mean=args.image_max_mean, max_outlier_pct=args.image_max_outliers),
    )


def check_compare_options(args: argparse.Namespace) -> None:
    """Check the decision's options before any trace is read."""
    check_alpha(args.alpha)
    check_threshold_pct(args.threshold)
    if args.stat is not None:
        check_run_stat(args.stat, count=is_count(args.metric), normalize=args.normalize)
    if hasattr(args, "images"):  # not bisect
        image_options(args)


def compare_options(args: argparse.Namespace) -> CompareOptions:
    """The decision and comparability options as one CompareOptions: the one place mapped."""
    return CompareOptions(
        metric=args.metric,
        threshold_pct=args.threshold,
        alpha=args.alpha,
        allow_host_mismatch=args.allow_host_mismatch,
        allow_param_mismatch=args.allow_param_mismatch,
        allow_codegen_mismatch=args.allow_codegen_mismatch,
        normalize=args.normalize,
        run_stat=args.stat,
    )


def load_traces(paths: Sequence[str | os.PathLike[str]], verb: str = "using") -> list[Trace]:
    """Open each trace; a damaged one is used up to where it stops, with a one-line warning."""
    traces, damaged = open_traces(paths, verb)
    for line in damaged:
        warn_damaged(line)
    return traces


def iter_runs(paths: Sequence[str], verb: str = "using") -> Iterator[Trace]:
    """The traces TRACE|DIR arguments name, each opened as it is reached."""
    for path in paths:
        for trace, note in iter_traces(path, verb):
            if note is not None:
                warn_damaged(note)
            yield trace


def warn_damaged(line: str) -> None:
    warn(line)


def print_json(obj: Any) -> None:
    jsontext.dump(obj, sys.stdout, indent=2, sort_keys=False, default=str)
    sys.stdout.write("\n")


#: Columns when neither ``COLUMNS`` nor a terminal says.
DEFAULT_WIDTH = 80


def terminal_width() -> int:
    return shutil.get_terminal_size((DEFAULT_WIDTH, 24)).columns


def table_width(columns: Sequence[str], rows: Sequence[Sequence[str]]) -> int:
    widths = [max([len(c)] + [len(r[i]) for r in rows]) for i, c in enumerate(columns)]
    if sys.stdout.isatty():
        return sum(w + 3 for w in widths) + 1
    return sum(widths) + 2 * max(0, len(widths) - 1)


def emit_table(
    columns: Sequence[str],
    rows: Sequence[Sequence[str]],
    fmt: str,
    title: str = "",
    right: Sequence[str] = (),
) -> None:
    """Print cells as a table (rich on a TTY), markdown or csv; ``right`` columns right-aligned."""
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
        # deferred: rich loads only for a terminal
        from rich.console import Console
        from rich.table import Table

        table = Table(title=title or None)
        for col in columns:
            table.add_column(col, no_wrap=True, justify="right" if col in right else "left")
        for row in rows:
            table.add_row(*row)
        # never squeeze numbers into ellipses: widen past a narrow terminal instead
        needed = (
            sum(max([len(c)] + [len(r[i]) for r in rows]) + 3 for i, c in enumerate(columns)) + 1
        )
        console = Console()
        console.width = max(console.width, needed)
        console.print(table)
        return
    widths = [max([len(c)] + [len(r[i]) for r in rows]) for i, c in enumerate(columns)]
    if title:
        out.write(title + "\n")

    def line(cells: Sequence[str]) -> str:
        return (
            "  ".join(
                c.rjust(w) if name in right else c.ljust(w)
                for c, w, name in zip(cells, widths, columns, strict=True)
            ).rstrip()
            + "\n"
        )

    out.write(line(columns))
    for row in rows:
        out.write(line(row))
