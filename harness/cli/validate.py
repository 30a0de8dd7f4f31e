"""``katra3d validate TRACE``: exit 0 if the trace is intact, 2 if damaged."""

from __future__ import annotations

import argparse
import sys

from katra3d.harness.cli._common import load_trace_quietly
from katra_trace.io.images import read_frame_images


def register(sub: argparse._SubParsersAction) -> None:  # type: ignore[type-arg]
    p = sub.add_parser("validate", help="check a trace's framing, checksums and content",
                       description="Check every block's framing and CRC, and the decoded content (event kinds, "
                                   "clocks, flags and durations, JSON shapes, string encodings). Exit 0 if intact "
                                   "(content the reader had to repair is reported on stderr), 2 if damaged (with "
                                   "what could be recovered).")
    p.add_argument("trace", metavar="TRACE", help="a .katra trace file")
    p.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    trace = load_trace_quietly(args.trace)
    n = len(trace.events)
    for note in trace.notes:
        print(f"{trace.path}: warning: {note}", file=sys.stderr)
    if trace.truncated:
        print(f"{trace.path}: damaged: {trace.stop_reason}; recoverable: {n} events, {len(trace.strings)} strings "
              f"in {trace.blocks} intact blocks before offset {trace.stopped_at}", file=sys.stderr)
        return 2
    kept = len(read_frame_images(trace.path))  # each kept frame's PNG decoded and its SHA-256 checked
    frames = f", {kept} kept frame{'s' if kept != 1 else ''} (pixels checked)" if kept else ""
    print(f"{trace.path}: ok: {n} events in {trace.blocks} blocks, status {trace.status}{frames}")
    return 0
