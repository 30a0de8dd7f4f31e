"""Printing shared by compare and ab; the comparison is :mod:`katra_trace.analysis.comparison`."""

from __future__ import annotations

import argparse
import math
import sys
from pathlib import Path
from typing import TYPE_CHECKING, Any

from katra3d.harness.cli._common import (
    add_comparability_options,
    add_decision_options,
    check_compare_options,
    compare_options,
    emit_table,
    image_options,
    print_json,
    warn_damaged,
)
from katra3d.harness.cli._profile import attach, print_profiles
from katra_trace.analysis.images import ImageOutcome, ImageVerdict, flip_missing, write_image_diff
from katra_trace.analysis.verdict import Comparison, Verdict
from katra_trace.errors import ExitCode
from katra_trace.io.claim import check_output_dir
from katra_trace.metrics import is_count
from katra_trace.units import format_change, format_ms

if TYPE_CHECKING:
    from collections.abc import Sequence

    from katra_trace.analysis.comparison import ComparisonResult
    from katra_trace.profile.diff import ProfileDelta


def add_compare_options(p: argparse.ArgumentParser) -> None:
    add_decision_options(p)
    add_comparability_options(p)
    p.add_argument(
        "--format",
        choices=("table", "markdown", "csv", "json"),
        default="table",
        help="output format (default: table)",
    )


def _pct(x: float) -> str:
    return format_change(x)


def _pct_fine(x: float) -> str:
    return format_change(x, 2)


def _num(x: float | None, fmt: str = ".3g") -> str:
    return "-" if x is None or not math.isfinite(x) else format(x, fmt)


def _count(x: float | None) -> str:
    return "-" if x is None or not math.isfinite(x) else f"{x:,.0f}"


def _time_row(s: Any) -> list[str]:
    level = (
        f"{format_ms(s.level_base_ms)} -> {format_ms(s.level_new_ms)}"
        if s.value_unit == "ms"
        else f"{_num(s.level_base, '.4g')} -> {_num(s.level_new, '.4g')}"
    )
    return [
        s.scene,
        s.verdict,
        _pct(s.ratio),
        "-" if s.unit == "frames" else f"[{_pct(s.ci_low)}, {_pct(s.ci_high)}]",
        _num(s.p_holm, ".2g"),
        f"{s.runs_base}/{s.runs_new} ({s.unit})",
        level,
        f"{format_ms(s.p99_base_ms)} -> {format_ms(s.p99_new_ms)}",
        f"{_num(s.fps_low_1pct_base, '.4g')} -> {_num(s.fps_low_1pct_new, '.4g')}",
        f"{_pct(s.frame_ratio)}, {_num(s.frame_p_value, '.2g')}",
        s.reason,
    ]


def _count_row(s: Any) -> list[str]:
    name = f"{s.scene} / {s.zone}" if s.zone else s.scene
    frame = "" if not s.zone else f" ({_pct_fine(1 + s.frame_change_pct / 100)} of frame)"
    return [
        name,
        s.verdict,
        _pct_fine(s.ratio) + frame,
        f"[{_pct_fine(s.ci_low)}, {_pct_fine(s.ci_high)}]",
        _num(s.noise_floor_pct, ".2g") + "%",
        f"{s.runs_base}/{s.runs_new}",
        f"{_count(s.level_base)} -> {_count(s.level_new)}",
        s.reason,
    ]


def print_comparison(result: Comparison, fmt: str, base: str, new: str) -> None:
    count = is_count(result.metric)
    rows: list[list[str]] = []
    if count:
        columns = [
            "scene / zone",
            "verdict",
            "change",
            "band",
            "noise floor",
            "runs",
            f"median {result.metric}/frame",
            "why",
        ]
        zones_of: dict[str, list[Any]] = {}
        for z in result.zones:
            zones_of.setdefault(z.scene, []).append(z)
        lines = []
        for s in result.scenes:
            for row in [s, *zones_of.get(s.scene, [])]:
                if row.verdict is Verdict.INCOMPARABLE:
                    rows.append([row.scene, row.verdict, *(["-"] * 5), row.reason])
                else:
                    rows.append(_count_row(row))
                lines.append(row)
    else:
        unit = (
            "ms"
            if result.scenes and all(s.value_unit == "ms" for s in result.scenes if s.unit)
            else "x ref"
        )
        # times carry their unit per cell; a ratio says so in the header
        columns = [
            "scene",
            "verdict",
            f"change ({result.run_stat})",
            "interval",
            "p (Holm)",
            "runs",
            result.run_stat if unit == "ms" else f"{result.run_stat} {unit}",
            "p99",
            "1% low fps",
            "frame medians: change, p",
            "why",
        ]
        lines = list(result.scenes)
        for s in result.scenes:
            rows.append(
                [s.scene, s.verdict, *(["-"] * 8), s.reason]
                if s.verdict is Verdict.INCOMPARABLE
                else _time_row(s)
            )
    counts = result.verdict_counts
    summary = ", ".join(f"{n} {v}" for v, n in counts.items() if n)
    how = ("paired rounds, " if result.paired else "") + (
        "p10 of each run, " if result.run_stat == "p10" else ""
    )
    title = (
        f"katra3d compare ({result.metric or 'no'} {'count' if count else 'clock'}, {how}threshold "
        f"{result.threshold_pct:g}%, alpha {result.alpha:g}): {summary}"
    )
    if fmt == "csv":  # the reason as a column; notes go to stderr
        emit_table(columns, rows, fmt)
        for note in result.notes:
            print(f"katra3d: note: {note}", file=sys.stderr)
        return
    if fmt == "markdown":
        sys.stdout.write(f"**BASE** `{base}` vs **NEW** `{new}`\n\n")
        emit_table(columns, rows, fmt, title=title)
    else:  # terminal: the reasons go below the table
        emit_table(columns[:-1], [r[:-1] for r in rows], fmt, title=title)
        width = max(len(r[0]) for r in rows) if rows else 0
        for r, s in zip(rows, lines, strict=True):
            sys.stdout.write(f"{r[0].ljust(width)}  {s.verdict}: {s.reason}\n")
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


def print_images(verdicts: dict[str, ImageVerdict], policy: str, fmt: str) -> None:
    """A line per changed image, a summary, and FLIP's install line when a verdict fell back to
    checksums (csv: on stderr)."""
    out = sys.stderr if fmt == "csv" else sys.stdout
    prefix = "katra3d: note: " if fmt == "csv" else ("- " if fmt == "markdown" else "")
    if not verdicts:
        out.write(f"{prefix}images: no last frames kept on either side, no image verdict\n")
        return
    width = max(len(s) for s in verdicts)
    for scene, v in verdicts.items():
        if v.verdict is not ImageOutcome.IDENTICAL:
            tail = (
                " (--images warn: not a regression)" if v.is_regression and policy == "warn" else ""
            )
            out.write(f"{prefix}{scene.ljust(width)}  {v.line}{tail}\n")
    counts = {
        k: sum(1 for v in verdicts.values() if v.verdict == k)
        for k in dict.fromkeys(v.verdict for v in verdicts.values())
    }
    out.write(
        f"{prefix}images ({policy}): "
        + ", ".join(f"{n} {k.replace('_', ' ')}" for k, n in counts.items())
        + "\n"
    )
    missing = flip_missing() if any(v.checksum_only for v in verdicts.values()) else None
    if missing:
        print(f"katra3d: note: {missing}", file=sys.stderr)


def print_result(
    result: ComparisonResult, fmt: str, profiles: Sequence[ProfileDelta] | None = None
) -> None:
    """A comparison as JSON, or as the timing table and image lines, with ``profiles``."""
    if fmt == "json":
        out = result.as_dict()
        if profiles is not None:
            attach(out, profiles)
        print_json(out)
        return
    print_comparison(result.timing, fmt, result.base, result.new)
    if result.image_policy != "off":
        print_images(dict(result.images), result.image_policy, fmt)
    if profiles is not None:
        print_profiles(profiles, fmt)


def compare_and_print(
    base: str,
    new: str | None,
    args: argparse.Namespace,
    record: Path | None = None,
    top_profile: bool = False,
) -> int:
    """Open, compare and print both sides; returns the exit code. ``record``: an ab directory."""
    # deferred: the comparison loads scipy (about a second)
    from katra_trace.analysis.comparison import compare_sides, open_sides
    from katra_trace.io.tracesets import record_ab_decision
    from katra_trace.profile.diff import profile_deltas, top_line
    from katra_trace.profile.flame import write_flame_graphs

    check_compare_options(args)
    if getattr(args, "image_diff", None):
        check_output_dir(args.image_diff, option="--image-diff")
    profile_out = getattr(args, "profile_out", None)
    if profile_out:
        check_output_dir(profile_out, option="--profile-out")
    sides = open_sides(base, new, unpaired=getattr(args, "unpaired", False))
    for line in sides.damaged:
        warn_damaged(line)
    policy, limits = image_options(args)
    result = compare_sides(sides, compare_options(args), image_policy=policy, image_limits=limits)
    if getattr(args, "image_diff", None) and policy != "off":
        write_image_diff(args.image_diff, result.images, result.base_images, result.new_images)
    if record is not None:
        record_ab_decision(record, result.timing)
    profiles = None
    if getattr(args, "profile", False) or profile_out:
        profiles = profile_deltas(sides.base_traces, sides.new_traces)
        if profile_out:
            write_flame_graphs(profile_out, profiles)
    print_result(result, args.format, profiles if getattr(args, "profile", False) else None)
    if top_profile and args.format != "json" and is_count(result.timing.metric):
        top = top_line(profiles or profile_deltas(sides.base_traces, sides.new_traces))
        if top:
            print(top, file=sys.stderr if args.format == "csv" else sys.stdout)
    if result.exit_code == ExitCode.BAD_INPUT:
        where = "in the JSON output" if args.format == "json" else "above"
        print(
            f"katra3d: error: nothing comparable between {sides.base!r} and {sides.new!r} (reasons "
            f"{where})"
            if result.timing.scenes
            else f"katra3d: error: nothing comparable between {sides.base!r} and {sides.new!r}: no "
            "scenes with "
            "measured frames",
            file=sys.stderr,
        )
    return result.exit_code


__all__ = [
    "add_compare_options",
    "compare_and_print",
    "print_comparison",
    "print_images",
    "print_result",
]
