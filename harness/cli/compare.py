"""``katra3d compare BASE NEW`` (or ``compare DIR`` of ``katra3d ab``): did NEW make frames worse?

BASE and NEW are each a trace file or a directory of traces (one trace per
run). When both are the ``base``/``new`` directories of one ``katra3d ab``
output directory, its ``ab.json`` pairs the runs round by round and the
paired test is used (``--unpaired`` to ignore it). Exit 0: no regression;
1: a regression; 2: bad input or nothing comparable. The decision rule is in
katra_trace.analysis.decide and docs/stats.md.
"""

from __future__ import annotations

import argparse
import dataclasses
import math
import sys
from collections.abc import Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any

from katra3d.harness.cli._common import (
    add_comparability_options,
    add_decision_options,
    check_compare_options,
    compare_kwargs,
    emit_table,
    image_options,
    load_traces,
    print_json,
)
from katra_trace.analysis.images import (
    ImageVerdict,
    exit_code_with_images,
    flip_missing,
    image_verdicts,
    side_images,
    write_image_diff,
)
from katra_trace.errors import ConfigError
from katra_trace.io.claim import check_output_dir
from katra_trace.io.tracesets import AB_MANIFEST, ab_pairs, read_ab_manifest, trace_paths
from katra_trace.metrics import is_count
from katra_trace.units import format_ms

if TYPE_CHECKING:
    from katra_trace.analysis.sequential import SequentialRule, Settled


def add_compare_options(p: argparse.ArgumentParser) -> None:
    """The options shared by ``compare`` and ``ab``: the decision's, the comparability ones and ``--format``."""
    add_decision_options(p)
    add_comparability_options(p)
    p.add_argument("--format", choices=("table", "markdown", "csv", "json"), default="table",
                   help="output format (default: table)")


def register(sub: argparse._SubParsersAction) -> None:  # type: ignore[type-arg]
    p = sub.add_parser("compare", help="compare frame times (or counts) of two traces or two directories of runs",
                       description="Per scene: ratio NEW/BASE of the runs' medians with a t interval, a one-sided "
                                   "p-value (Holm-corrected across scenes) and a verdict; >= 3 runs a side are "
                                   "needed for a verdict on a time metric. Instructions and cycles: one run a "
                                   "side, per scene and per zone. Exit 0 no regression, 1 regression, "
                                   "2 bad input or nothing comparable.")
    p.add_argument("base", metavar="BASE", help="a .katra trace, a directory of traces (one per run), or the "
                                                "output directory of 'katra3d ab' (then without NEW)")
    p.add_argument("new", metavar="NEW", nargs="?", default=None,
                   help="a .katra trace, or a directory of traces (one per run)")
    p.add_argument("--unpaired", action="store_true",
                   help="ignore the round pairing recorded by 'katra3d ab' (ab.json)")
    add_compare_options(p)
    p.add_argument("--image-diff", metavar="DIR",
                   help="write DIR/<scene>.base.png, .new.png and .flip.png (the FLIP error map) for every scene "
                        "whose last frame is not identical (docs/images.md)")
    p.set_defaults(func=run)


def _pct(x: float) -> str:
    return "-" if not math.isfinite(x) else f"{(x - 1) * 100:+.1f}%"


def _pct_fine(x: float) -> str:
    return "-" if not math.isfinite(x) else f"{(x - 1) * 100:+.2f}%"


def _num(x: float | None, fmt: str = ".3g") -> str:
    return "-" if x is None or not math.isfinite(x) else format(x, fmt)


def _count(x: float | None) -> str:
    return "-" if x is None or not math.isfinite(x) else f"{x:,.0f}"


def _time_row(s: Any) -> list[str]:
    level = (f"{format_ms(s.median_base_ms)} -> {format_ms(s.median_new_ms)}" if s.value_unit == "ms"
             else f"{_num(s.median_base, '.4g')} -> {_num(s.median_new, '.4g')}")
    return [
        s.scene, s.verdict, _pct(s.ratio),
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
    return [name, s.verdict, _pct_fine(s.ratio) + frame, f"[{_pct_fine(s.ci_low)}, {_pct_fine(s.ci_high)}]",
            _num(s.noise_floor_pct, ".2g") + "%", f"{s.runs_base}/{s.runs_new}",
            f"{_count(s.median_base)} -> {_count(s.median_new)}", s.reason]


def print_comparison(result: Any, fmt: str, base: str, new: str, extra: dict[str, Any] | None = None) -> None:
    """Print a :class:`katra_trace.analysis.verdict.Comparison` in ``fmt`` (table, markdown, csv or json);
    ``extra`` keys are added to (or replace) the JSON object's."""
    if fmt == "json":
        print_json(dict(result.as_dict(), base=base, new=new, **(extra or {})))
        return
    count = is_count(result.metric)
    rows: list[list[str]] = []
    if count:
        columns = ["scene / zone", "verdict", "change", "band", "noise floor", "runs",
                   f"median {result.metric}/frame", "why"]
        zones_of: dict[str, list[Any]] = {}
        for z in result.zones:
            zones_of.setdefault(z.scene, []).append(z)
        lines = []
        for s in result.scenes:
            for row in [s, *zones_of.get(s.scene, [])]:
                if row.verdict == "incomparable":
                    rows.append([row.scene, row.verdict, *(["-"] * 5), row.reason])
                else:
                    rows.append(_count_row(row))
                lines.append(row)
    else:
        unit = "ms" if result.scenes and all(s.value_unit == "ms" for s in result.scenes if s.unit) else "x ref"
        # times carry their unit in each cell (µs, ms, s); a ratio to the reference says so in the header
        columns = ["scene", "verdict", "change", "interval", "p (Holm)", "runs",
                   result.run_stat if unit == "ms" else f"{result.run_stat} {unit}",
                   "p99", "1% low fps", "frames: change, p", "why"]
        lines = list(result.scenes)
        for s in result.scenes:
            rows.append([s.scene, s.verdict, *(["-"] * 8), s.reason] if s.verdict == "incomparable"
                        else _time_row(s))
    counts = result.as_dict()["verdicts"]
    summary = ", ".join(f"{n} {v}" for v, n in counts.items() if n)
    how = ("paired rounds, " if result.paired else "") + ("p10 of each run, " if result.run_stat == "p10" else "")
    title = (f"katra3d compare ({result.metric or 'no'} {'count' if count else 'clock'}, {how}threshold "
             f"{result.threshold_pct:g}%, alpha {result.alpha:g}): {summary}")
    if fmt == "csv":  # one row per scene (and zone), the reason as a column; notes go to stderr
        emit_table(columns, rows, fmt)
        for note in result.notes:
            print(f"katra3d: note: {note}", file=sys.stderr)
        return
    if fmt == "markdown":
        sys.stdout.write(f"**BASE** `{base}` vs **NEW** `{new}`\n\n")
        emit_table(columns, rows, fmt, title=title)
    else:  # terminal: the reasons go below the table, one line per row
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
    """The image verdicts' lines (one per scene whose image is not identical, then a summary), and FLIP's
    install line once when a verdict rested on checksums for want of it. csv: on stderr, as notes."""
    out = sys.stderr if fmt == "csv" else sys.stdout
    prefix = "katra3d: note: " if fmt == "csv" else ("- " if fmt == "markdown" else "")
    if not verdicts:
        out.write(f"{prefix}images: no last frames kept on either side, no image verdict\n")
        return
    width = max(len(s) for s in verdicts)
    for scene, v in verdicts.items():
        if v.verdict != "identical":
            tail = " (--images warn: not a regression)" if v.is_regression and policy == "warn" else ""
            out.write(f"{prefix}{scene.ljust(width)}  {v.line}{tail}\n")
    counts = {k: sum(1 for v in verdicts.values() if v.verdict == k) for k in dict.fromkeys(
        v.verdict for v in verdicts.values())}
    out.write(f"{prefix}images ({policy}): " + ", ".join(f"{n} {k.replace('_', ' ')}" for k, n in counts.items())
              + "\n")
    missing = flip_missing() if any(v.checksum_only for v in verdicts.values()) else None
    if missing:
        print(f"katra3d: note: {missing}", file=sys.stderr)


def find_pairing(base: str, new: str) -> tuple[Path, list[tuple[Path, Path]]] | None:
    """The ab manifest and its complete rounds when BASE and NEW are one ``katra3d ab`` output's sides."""
    b, n = Path(base).resolve(), Path(new).resolve()
    if not (b.is_dir() and n.is_dir()) or b.parent != n.parent:
        return None
    manifest = read_ab_manifest(b.parent)
    if manifest is None or (manifest.get("base_dir"), manifest.get("new_dir")) != (b.name, n.name):
        return None
    return b.parent / AB_MANIFEST, ab_pairs(b.parent, manifest)


def resolve_sides(base: str, new: str | None) -> tuple[str, str]:
    """BASE and NEW paths; ``compare DIR`` of an ab output directory names its two sides."""
    if new is not None:
        return base, new
    root = Path(base)
    manifest = read_ab_manifest(root) if root.is_dir() else None
    if manifest is None:
        raise ConfigError(f"compare needs BASE and NEW, or the output directory of 'katra3d ab' "
                          f"(with {AB_MANIFEST}); {base!r} is neither")
    return str(root / str(manifest.get("base_dir", "base"))), str(root / str(manifest.get("new_dir", "new")))


def round_pairs(base: str, new: str, base_paths: Sequence[Path], new_paths: Sequence[Path],
                unpaired: bool = False) -> tuple[list[tuple[int, int]] | None, list[str]]:
    """The rounds of ``katra3d ab`` as (BASE index, NEW index) pairs of ``base_paths`` and ``new_paths``
    when BASE and NEW are one ab output's sides (None: unpaired), and the note that says so: compare
    and report --baseline pair the same traces the same way."""
    pairing = None if unpaired else find_pairing(base, new)
    if pairing is None:
        return None, []
    manifest_path, rounds = pairing
    index_b = {p.resolve(): i for i, p in enumerate(base_paths)}
    index_n = {p.resolve(): i for i, p in enumerate(new_paths)}
    pairs = [(index_b[b], index_n[n]) for b, n in rounds if b in index_b and n in index_n]
    left = len(base_paths) + len(new_paths) - 2 * len(pairs)
    if not pairs:
        return None, [f"{manifest_path} pairs none of these traces: compared unpaired"]
    return pairs, [f"paired: {len(pairs)} round(s) from {manifest_path}"
                   + (f"; {left} trace(s) outside a complete round left out" if left else "")]


def recorded_sequential(base: str, pairs: Sequence[tuple[int, int]] | None
                        ) -> tuple[SequentialRule | None, Settled | None]:
    """The stopping rule ``ab --until-decided`` recorded for the paired sides whose BASE is ``base`` (None when
    ``pairs`` is None or the rounds were fixed), and why its rounds stopped: compare DIR and report --baseline
    judge those rounds by the same rule."""
    if pairs is None:
        return None, None
    # deferred: the stopping rule loads scipy (about a second); building the parser must not
    from katra3d.harness.ab.rounds import recorded_rule

    return recorded_rule(Path(base).resolve().parent)


def compare_paths(base: str, new: str | None, args: argparse.Namespace) -> int:
    """Load both sides, compare, print; returns the exit code."""
    # deferred: the comparison loads scipy (about a second); building the parser must not
    from katra_trace.analysis.compare import compare_traces

    check_compare_options(args)
    if getattr(args, "image_diff", None):
        check_output_dir(args.image_diff, option="--image-diff")
    base, new = resolve_sides(base, new)
    base_paths, new_paths = trace_paths(base), trace_paths(new)
    pairs, notes = round_pairs(base, new, base_paths, new_paths, unpaired=getattr(args, "unpaired", False))
    policy, limits = image_options(args)
    rule, stop = recorded_sequential(base, pairs)
    extra: dict[str, Any] = {}
    if rule is not None:
        extra["sequential"] = {"rule": rule.to_json(), "stop": None if stop is None else stop.as_dict()}
        if stop is not None:
            notes.append(f"ab --until-decided: {stop.reason}")
        if args.alpha != rule.alpha or args.threshold not in (None, rule.threshold_pct):
            thr = "the default" if rule.threshold_pct is None else f"{rule.threshold_pct:g}%"
            notes.append(f"the stopping rule recorded in {AB_MANIFEST} decides, with its alpha {rule.alpha:g} and "
                         f"threshold {thr}; --alpha and --threshold given here are not used")
    base_traces, new_traces = load_traces(base_paths), load_traces(new_paths)
    result = compare_traces(base_traces, new_traces, pairs=pairs, sequential=rule, **compare_kwargs(args))
    if notes:
        result = dataclasses.replace(result, notes=(*notes, *result.notes))
    images: dict[str, ImageVerdict] = {}
    if policy != "off":
        base_images, new_images = side_images(base_traces), side_images(new_traces)
        order = [s.scene for s in result.scenes]
        images = image_verdicts(base_images, new_images, limits,
                                scenes=dict.fromkeys([*(s for s in order if s in base_images or s in new_images),
                                                      *base_images, *new_images]),
                                not_comparable={s.scene: s.reason for s in result.scenes
                                                if s.verdict == "incomparable"})
        if getattr(args, "image_diff", None):
            write_image_diff(args.image_diff, images, base_images, new_images)
    code = exit_code_with_images(result.exit_code, images, policy)
    extra.update({"image_policy": policy, "images": {s: v.as_dict() for s, v in images.items()}, "exit_code": code})
    print_comparison(result, args.format, base, new, extra=extra)
    if args.format != "json" and policy != "off":
        print_images(images, policy, args.format)
    if code == 2:
        where = "in the JSON output" if args.format == "json" else "above"
        print(f"katra3d: error: nothing comparable between {base!r} and {new!r} (reasons {where})"
              if result.scenes else
              f"katra3d: error: nothing comparable between {base!r} and {new!r}: no scenes with measured frames",
              file=sys.stderr)
    return code


def run(args: argparse.Namespace) -> int:
    return compare_paths(args.base, args.new, args)
