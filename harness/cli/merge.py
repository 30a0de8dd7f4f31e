"""``katra3d merge``: a run's shards as one trace (:func:`katra_trace.io.merge.merge_shards`)."""

from __future__ import annotations

import argparse
import sys

from katra3d.harness.cli._common import print_json, stops_interrupt
from katra_trace.errors import ExitCode
from katra_trace.io.merge import merge_shards


def register(sub: argparse._SubParsersAction) -> None:  # type: ignore[type-arg]
    p = sub.add_parser(
        "merge",
        help="join the shards of a run (run --shard I/N) into one trace",
        description="Join the traces of 'katra3d run --shard I/N' (every shard 1..N of one run, "
        "in any order) into one trace that compare, report and history take like any "
        "other. Its header records each shard and the host it ran on; each scene is "
        "compared only against scenes from a comparable host. Shards of different "
        "suites, capture options or katra3d versions, and shards that overlap, are "
        "refused (exit 2). docs/ci.md shows a CI matrix that uses it.",
    )
    p.add_argument(
        "shards", nargs="+", metavar="SHARD", help="the shard traces (.katra), one per shard"
    )
    p.add_argument(
        "-o", "--output", metavar="PATH", required=True, help="the merged trace to write"
    )
    p.add_argument(
        "--force", action="store_true", help="replace an existing output file (atomically)"
    )
    p.add_argument("--quiet", action="store_true", help="no progress lines")
    p.add_argument("--json", action="store_true", help="print what was merged as one JSON object")
    p.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    def progress(line: str) -> None:
        if not args.quiet:
            print(f"merging {line}", file=sys.stderr, flush=True)

    with stops_interrupt():
        result = merge_shards(args.shards, args.output, force=bool(args.force), progress=progress)
    if args.json:
        print_json(result.as_dict())
        return ExitCode.OK
    hosts = len(
        {
            (s.host_info.renderer, s.host_info.driver, s.host_info.system.cpu_model)
            for s in result.shards
        }
    )

    def n(count: int, noun: str) -> str:
        return f"{count} {noun}{'s' if count != 1 else ''}"

    print(
        f"{result.path}: {n(len(result.shards), 'shard')}, {n(len(result.scenes), 'scene')}, "
        f"{n(result.events, 'event')}, {n(result.images, 'kept frame')}, {n(hosts, 'host')}"
    )
    return ExitCode.OK
