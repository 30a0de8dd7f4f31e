"""``katra3d validate TRACE``: is the trace intact?"""

from __future__ import annotations

import argparse
import sys

from katra_trace import Trace
from katra_trace.errors import ExitCode, KatraError
from katra_trace.io.images import frame_pixels
from katra_trace.io.tracesets import open_quietly


def register(sub: argparse._SubParsersAction) -> None:  # type: ignore[type-arg]
    p = sub.add_parser(
        "validate",
        help="check a trace's framing, checksums and content",
        description="Check every block's framing and CRC, and the decoded content (event kinds, "
        "clocks, flags and durations, JSON shapes, string encodings, each kept frame's "
        "pixels against its record). Exit 0 if intact (content the reader had to repair "
        "is reported on stderr), 2 if damaged (with what could be recovered).",
    )
    p.add_argument("trace", metavar="TRACE", help="a .katra trace file")
    p.set_defaults(func=run)


def _frame_problems(trace: Trace) -> list[str]:
    problems = []
    for frame in trace.kept_frames.values():
        try:
            frame_pixels(frame)  # dropped at once: the next frame gets the whole budget
        except KatraError as exc:
            problems.append(str(exc))
    return problems


def run(args: argparse.Namespace) -> int:
    trace = open_quietly(args.trace)
    n = len(trace.events)
    for note in trace.notes:
        print(f"{trace.path}: warning: {note}", file=sys.stderr)
    problems = _frame_problems(trace)
    if trace.truncated:
        print(
            f"{trace.path}: damaged: {trace.stop_reason}; recoverable: {n} events, "
            f"{len(trace.strings)} strings "
            f"in {trace.blocks} intact blocks before offset {trace.stopped_at}",
            file=sys.stderr,
        )
    for problem in problems:
        print(f"katra3d: error: {problem}", file=sys.stderr)
    if trace.truncated or problems:
        return ExitCode.BAD_INPUT
    kept = len(trace.kept_frames)
    frames = f", {kept} kept frame{'s' if kept != 1 else ''} (pixels checked)" if kept else ""
    print(f"{trace.path}: ok: {n} events in {trace.blocks} blocks, status {trace.status}{frames}")
    return ExitCode.OK
