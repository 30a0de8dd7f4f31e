"""``katra3d compare BASE NEW``: did NEW make frame times worse than BASE?

BASE and NEW are each a trace file or a directory of traces (one trace per
run). Exit 0: no regression; 1: a regression; 2: bad input or nothing
comparable. The decision rule is in katra_trace.compare and docs/stats.md.
"""

from __future__ import annotations

import argparse
import math
import sys
from pathlib import Path
from typing import Any

from harness.cli._common import emit_table, load_trace_quietly, print_json
from katra_trace.errors import ConfigError


def add_compare_options(p: argparse.ArgumentParser) -> None:
    """The options shared by ``compare`` and ``ab``."""
    p.add_argument("--threshold", type=float, default=5.0, metavar="PCT",
                   help="smallest change in percent that counts as a regression (default: 5)")
    p.add_argument("--alpha", type=float, default=0.01,
                   help="significance level after Holm correction across scenes (default: 0.01)")
    p.add_argument("--metric", choices=("auto", "wall", "cpu", "gpu"), default="auto",
                   help="clock compared: auto = the one the capture trusts (wall in sync mode, gpu in gpu mode)")
    p.add_argument("--allow-host-mismatch", action="store_true",
                   help="compare even when GL renderer or driver differ (noted in the output)")
    p.add_argument("--allow-param-mismatch", action="store_true",
                   help="compare even when scene params differ, e.g. to measure what a param change costs")
    p.add_argument("--seed", type=int, default=0, help="bootstrap seed (default: 0)")
    p.add_argument("--format", choices=("table", "markdown", "json"), default="table",
                   help="output format (default: table)")


def register(sub: argparse._SubParsersAction) -> None:  # type: ignore[type-arg]
    p = sub.add_parser("compare", help="compare frame times of two traces or two directories of runs",
                       description="Per scene: median ratio NEW/BASE with a bootstrap interval, a Mann-Whitney U "
                                   "p-value (Holm-corrected across scenes) and a verdict. With >= 3 runs a side "
                                   "the run is the unit of evidence. Exit 0 no regression, 1 regression, "
                                   "2 bad input or nothing comparable.")
    p.add_argument("base", metavar="BASE", help="a .katra trace, or a directory of traces (one per run)")
    p.add_argument("new", metavar="NEW", help="a .katra trace, or a directory of traces (one per run)")
    add_compare_options(p)
    p.set_defaults(func=run)


def trace_paths(path: str) -> list[Path]:
    """The trace files ``path`` names: itself, or the katra traces directly inside a directory."""
    from katra_trace.format import MAGIC

    p = Path(path)
    if p.is_dir():
        found = []
        for child in sorted(p.iterdir()):
            if child.is_file():
                try:
                    with open(child, "rb") as f:
                        if f.read(len(MAGIC)) == MAGIC:
                            found.append(child)
                except OSError:
                    continue
        if not found:
            raise ConfigError(f"no katra3d traces in directory {path!r}")
        return found
    if not p.exists():
        raise ConfigError(f"no such trace file or directory: {path!r}")
    return [p]


def load_side(path: str) -> list[Any]:
    traces = []
    for p in trace_paths(path):
        t = load_trace_quietly(str(p))
        if t.truncated:
            print(f"katra3d: warning: {p} is damaged ({t.stop_reason}); using the "
                  f"{len(t.events)} events before offset {t.stopped_at}", file=sys.stderr)
        traces.append(t)
    return traces


def _pct(x: float) -> str:
    return "-" if not math.isfinite(x) else f"{(x - 1) * 100:+.1f}%"


def _num(x: float | None, fmt: str = ".3g") -> str:
    return "-" if x is None or not math.isfinite(x) else format(x, fmt)


def print_comparison(result: Any, fmt: str, base: str, new: str) -> None:
    """Print a :class:`katra_trace.compare.Comparison` in ``fmt`` (table, markdown or json)."""
    if fmt == "json":
        print_json(dict(result.as_dict(), base=base, new=new))
        return
    columns = ["scene", "verdict", "change", "interval", "p (Holm)", "runs", "median ms",
               "p99 ms", "1% low fps", "frames: change, p", "why"]
    rows = []
    for s in result.scenes:
        if s.verdict == "incomparable":
            rows.append([s.scene, s.verdict, *(["-"] * 8), s.reason])
            continue
        rows.append([
            s.scene, s.verdict, _pct(s.ratio),
            f"[{_pct(s.ci_low)}, {_pct(s.ci_high)}]",
            _num(s.p_holm, ".2g"),
            f"{s.runs_base}/{s.runs_new} ({s.unit})",
            f"{_num(s.median_base_ms)} -> {_num(s.median_new_ms)}",
            f"{_num(s.p99_base_ms)} -> {_num(s.p99_new_ms)}",
            f"{_num(s.fps_low_1pct_base, '.4g')} -> {_num(s.fps_low_1pct_new, '.4g')}",
            f"{_pct(s.frame_ratio)}, {_num(s.frame_p_value, '.2g')}",
            s.reason,
        ])
    counts = result.as_dict()["verdicts"]
    summary = ", ".join(f"{n} {v}" for v, n in counts.items() if n)
    title = (f"katra3d compare ({result.metric or 'no'} clock, threshold {result.threshold_pct:g}%, "
             f"alpha {result.alpha:g}): {summary}")
    if fmt == "markdown":
        sys.stdout.write(f"**BASE** `{base}` vs **NEW** `{new}`\n\n")
        emit_table(columns, rows, fmt, title=title)
    else:  # terminal: the reasons go below the table, one line per scene
        emit_table(columns[:-1], [r[:-1] for r in rows], fmt, title=title)
        width = max(len(s.scene) for s in result.scenes) if result.scenes else 0
        for s in result.scenes:
            sys.stdout.write(f"{s.scene.ljust(width)}  {s.verdict}: {s.reason}\n")
    by_note: dict[str, list[str]] = {}
    for s in result.scenes:
        for n in s.notes:
            by_note.setdefault(n, []).append(s.scene)
    notes = list(result.notes)
    for note, scenes in by_note.items():
        every = len(scenes) == len(result.scenes)
        notes.append(note if every else f"{', '.join(scenes)}: {note}")
    for note in notes:
        sys.stdout.write(("- " if fmt == "markdown" else "note: ") + note + "\n")


def check_options(args: argparse.Namespace) -> None:
    if not 0 < args.alpha < 0.5:
        raise ConfigError(f"--alpha must be between 0 and 0.5, got {args.alpha:g}")
    if not 0 <= args.threshold < 1000:
        raise ConfigError(f"--threshold must be a percentage >= 0, got {args.threshold:g}")


def compare_paths(base: str, new: str, args: argparse.Namespace) -> int:
    """Load both sides, compare, print; returns the exit code."""
    from katra_trace.compare import compare_traces

    check_options(args)
    result = compare_traces(load_side(base), load_side(new), metric=args.metric,
                            threshold_pct=args.threshold, alpha=args.alpha,
                            allow_host_mismatch=args.allow_host_mismatch,
                            allow_param_mismatch=args.allow_param_mismatch, seed=args.seed)
    print_comparison(result, args.format, base, new)
    if result.exit_code == 2:
        reasons = "; ".join(f"{s.scene}: {s.reason}" for s in result.scenes) or "no scenes with frames"
        print(f"katra3d: error: nothing comparable between {base!r} and {new!r} ({reasons})", file=sys.stderr)
    return result.exit_code


def run(args: argparse.Namespace) -> int:
    return compare_paths(args.base, args.new, args)
