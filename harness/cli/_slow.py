"""Printing of ``stats --slow``; the rule is :mod:`katra_trace.analysis.slow` (docs/stats.md)."""

from __future__ import annotations

import argparse

from katra3d.harness.cli._common import emit_table
from katra3d.harness.run.progress import warn
from katra_trace.analysis.slow import SceneSlow
from katra_trace.analysis.stats import NO_STATS, STUTTER_FACTOR, STUTTER_WINDOW_FRAMES, RunStats
from katra_trace.jsontext import JsonObject
from katra_trace.text import escape
from katra_trace.units import format_ms, format_number

CAUSE_COLUMNS = ("cause", "frames", "period", "typical excess")
FRAME_COLUMNS = ("frame", "time", "x median", "cause", "excess")
#: ``--format csv``: a row per slow frame.
CSV_COLUMNS = ("scene", "frame", "ms", "ratio", "kind", "name", "excess_ms")


def slow_json(stats: RunStats, found: dict[str, SceneSlow]) -> JsonObject:
    scenes: JsonObject = {s: v.as_dict() for s, v in stats.scenes.items()}
    for scene, slow in found.items():
        scenes[scene] = {**stats.scenes.get(scene, NO_STATS).as_dict(), **slow.as_dict()}
    return {"scenes": scenes}


def slow_csv_rows(found: dict[str, SceneSlow], where: str, lead: list[str]) -> list[list[str]]:
    """The slow frames' CSV rows after ``lead``; a scene without frame times gets a stderr note."""
    for scene, slow in found.items():
        if slow.clock is None:
            warn(f"{escape(where)}: {escape(scene)}: {slow.note}")
    return [
        [
            *lead,
            scene,
            str(s.frame),
            repr(s.ms),
            repr(s.ratio),
            s.cause.kind,
            s.cause.name or "",
            repr(s.cause.excess_ms),
        ]
        for scene, slow in found.items()
        for s in slow.slow
    ]


def print_slow(args: argparse.Namespace, run: str, found: dict[str, SceneSlow]) -> None:
    for scene, slow in found.items():
        if slow.clock is None:
            print(f"{run}: {escape(scene)}: {slow.note}")
        else:
            _scene_tables(args, run, scene, slow)


def summary_line(slow: SceneSlow) -> str:
    """``4 of 60 frames slow (over 2.5x the moving median of 31 frames), wall clock``."""
    return (
        f"{len(slow.slow)} of {slow.frames} frames slow (over {STUTTER_FACTOR:g}x the moving "
        f"median of {STUTTER_WINDOW_FRAMES} frames), {slow.clock} clock"
    )


def _scene_tables(args: argparse.Namespace, run: str, scene: str, slow: SceneSlow) -> None:
    title = f"{run}: {escape(scene)}: {summary_line(slow)}"
    if not slow.slow:
        print(title)
    else:
        rows = [
            [escape(g.label), str(g.count), g.period_text or "-", format_ms(g.typical_excess_ms)]
            for g in slow.groups
        ]
        emit_table(
            list(CAUSE_COLUMNS), rows, args.format, title=title, right=["frames", "typical excess"]
        )
        if args.all:
            frames = [
                [
                    str(s.frame),
                    format_ms(s.ms),
                    format_number(s.ratio),
                    escape(s.cause.label),
                    format_ms(s.cause.excess_ms),
                ]
                for s in slow.slow
            ]
            emit_table(
                list(FRAME_COLUMNS),
                frames,
                args.format,
                title=f"{run}: {escape(scene)}: every slow frame",
                right=["frame", "time", "x median", "excess"],
            )
    if slow.note:
        print(f"note: {slow.note}")


__all__ = [
    "CAUSE_COLUMNS",
    "CSV_COLUMNS",
    "FRAME_COLUMNS",
    "print_slow",
    "slow_csv_rows",
    "slow_json",
    "summary_line",
]
