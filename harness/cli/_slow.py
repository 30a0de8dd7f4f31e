"""``katra3d stats TRACE --slow``: each scene's slow frames and their causes (the printing; the rule is
:mod:`katra_trace.analysis.slow`'s).

As text: per scene a short table of causes (count, period, typical excess) and, with ``--all``, every
slow frame. ``--format json`` is the statistics of ``stats --format json`` with, per scene,
``slow_clock``, ``slow_frames``, ``slow_causes`` and ``slow_note``; ``csv`` one row per slow frame.
"""

from __future__ import annotations

import argparse
from collections.abc import Sequence
from pathlib import Path

from katra3d.harness.cli._common import emit_table, load_traces, print_json
from katra_trace.analysis.slow import SceneSlow, trace_slow_frames
from katra_trace.analysis.stats import STUTTER_FACTOR, STUTTER_WINDOW_FRAMES, trace_stats
from katra_trace.text import escape
from katra_trace.units import format_ms, format_number

#: Columns of the causes table and of ``--all``'s table of every slow frame.
CAUSE_COLUMNS = ("cause", "frames", "period", "typical excess")
FRAME_COLUMNS = ("frame", "time", "x median", "cause", "excess")


def run_slow(args: argparse.Namespace, paths: Sequence[Path], is_dir: bool) -> int:
    """Print the slow frames of every trace of ``paths`` in ``args.format``; returns the exit code (0)."""
    for path in paths:
        trace = load_traces([path], verb="slow frames cover")[0]
        found = trace_slow_frames(trace)
        run = path.name if is_dir else ""
        if args.format == "json":
            result = trace_stats(trace, zones=args.zones)
            for scene, slow in found.items():
                result["scenes"].setdefault(scene, {"metrics": {}, "zones": {}}).update(slow.as_dict())
            print_json(result)
        elif args.format == "csv":
            rows = [[*([run] if is_dir else []), scene, str(s.frame), repr(s.ms), repr(s.ratio), s.cause.kind,
                     s.cause.name or "", repr(s.cause.excess_ms)]
                    for scene, slow in found.items() for s in slow.slow]
            emit_table([*(["run"] if is_dir else []), "scene", "frame", "ms", "ratio", "kind", "name", "excess_ms"],
                       rows, "csv")
        else:
            for scene, slow in found.items():
                _scene_tables(args, run or trace.path.name, scene, slow)
    return 0


def summary_line(slow: SceneSlow) -> str:
    """``4 of 60 frames slow (over 2.5x the moving median of 31 frames), wall clock``."""
    return (f"{len(slow.slow)} of {slow.frames} frames slow (over {STUTTER_FACTOR:g}x the moving median of "
            f"{STUTTER_WINDOW_FRAMES} frames), {slow.clock} clock")


def _scene_tables(args: argparse.Namespace, run: str, scene: str, slow: SceneSlow) -> None:
    title = f"{run}: {escape(scene)}: {summary_line(slow)}"
    if not slow.slow:
        print(title)
    else:
        rows = [[escape(g.label), str(g.count), g.period_text or "-", format_ms(g.typical_excess_ms)]
                for g in slow.groups]
        emit_table(list(CAUSE_COLUMNS), rows, args.format, title=title, right=["frames", "typical excess"])
        if args.all:
            frames = [[str(s.frame), format_ms(s.ms), format_number(s.ratio), escape(s.cause.label),
                       format_ms(s.cause.excess_ms)] for s in slow.slow]
            emit_table(list(FRAME_COLUMNS), frames, args.format, title=f"{run}: {escape(scene)}: every slow frame",
                       right=["frame", "time", "x median", "excess"])
    if slow.note:
        print(f"note: {slow.note}")


__all__ = ["CAUSE_COLUMNS", "FRAME_COLUMNS", "run_slow", "summary_line"]
