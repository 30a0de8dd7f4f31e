"""``katra3d ab --base CMD --new CMD [--rounds K] [-o DIR]``: interleaved A/B captures, then a paired compare.

Runs the two capture commands in K rounds on the same machine, each round one
BASE and one NEW capture (the order alternates: A B, B A, A B ...), so slow
drifts (thermal state, neighbours on a shared CI machine) hit both sides
alike and the round is a natural pair. Each command is a shell command line
that writes one trace to the path put in place of ``{out}``, e.g.
``--base "katra3d run fillrate -o {out}"``.

DIR gets ``base/run-NNN.katra``, ``new/run-NNN.katra`` and ``ab.json``, the
manifest that records the commands and which traces form each round; then
the two sides are compared with the paired test (``katra3d compare DIR``
repeats that comparison later). The children's output is kept quiet: one
line per round, and a failing child's output is shown.
"""

from __future__ import annotations

import argparse
import os
import shlex
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

from harness.cli._common import check_compare_options
from harness.cli.compare import add_compare_options, compare_paths
from katra_trace.errors import ConfigError, KatraError
from katra_trace.io.claim import check_output_dir
from katra_trace.io.tracesets import AB_MANIFEST, AB_MANIFEST_VERSION, clear_ab_dir, write_ab_manifest

#: Default rounds: 6 paired rounds give the paired t 5 degrees of freedom.
DEFAULT_ROUNDS = 6
#: Lines of a failing child's output shown.
FAILURE_TAIL_LINES = 40


def register(sub: argparse._SubParsersAction) -> None:  # type: ignore[type-arg]
    p = sub.add_parser("ab", help="run two capture commands interleaved (A B, B A, ...) and compare them paired",
                       description="Run BASE and NEW capture commands in K rounds (each a full capture writing a "
                                   "trace to {out}; the order alternates each round), record the rounds in "
                                   "DIR/ab.json, then compare round by round (paired). Exit codes as for compare. "
                                   "Example: katra3d ab --base 'katra3d run fillrate -o {out}' "
                                   "--new 'katra3d run fillrate --param fillrate.layers=9 -o {out}' "
                                   "--allow-param-mismatch")
    p.add_argument("--base", required=True, metavar="CMD",
                   help="shell command that captures one BASE trace to the path given by {out}")
    p.add_argument("--new", required=True, metavar="CMD",
                   help="shell command that captures one NEW trace to the path given by {out}")
    p.add_argument("--rounds", type=int, default=DEFAULT_ROUNDS, metavar="K",
                   help=f"rounds; each runs BASE and NEW once (default: {DEFAULT_ROUNDS})")
    p.add_argument("-o", "--output", metavar="DIR", default=None,
                   help="directory for the traces (DIR/base/, DIR/new/) and DIR/ab.json; "
                        "default: ./katra3d-ab-<time>")
    p.add_argument("--quiet", action="store_true",
                   help="no line per round (a failing capture's output is still shown)")
    p.add_argument("--force", action="store_true",
                   help="DIR holds an earlier A/B run: replace it (only ab's own files: DIR/ab.json and the "
                        "run-NNN.katra traces under base/ and new/)")
    add_compare_options(p)
    p.set_defaults(func=run)


def capture(template: str, out: Path, label: str) -> tuple[str, float]:
    """Run one capture command with ``{out}`` replaced, its output kept; returns (command, seconds).

    Raises KatraError (showing the end of the child's output) if it fails or writes nothing.
    """
    cmd = template.replace("{out}", shlex.quote(str(out)))
    t0 = time.monotonic()
    try:
        proc = subprocess.run(cmd, shell=True, stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                              stdin=subprocess.DEVNULL, check=False)
    except OSError as exc:
        raise ConfigError(f"cannot run {label} command {cmd!r}: {exc}") from None
    seconds = time.monotonic() - t0
    if proc.returncode != 0:
        _show_tail(label, cmd, proc.stdout)
        raise KatraError(f"{label} command failed with exit code {proc.returncode}: {cmd}")
    if not out.is_file():
        _show_tail(label, cmd, proc.stdout)
        raise ConfigError(f"{label} command exited 0 but wrote no trace at {str(out)!r}: {cmd}")
    return cmd, seconds


def _show_tail(label: str, cmd: str, output: bytes) -> None:
    lines = output.decode(errors="replace").splitlines()
    shown = lines[-FAILURE_TAIL_LINES:]
    more = f" (last {len(shown)} of {len(lines)} lines)" if len(lines) > len(shown) else ""
    print(f"katra3d ab: {label}: {cmd}\nkatra3d ab: its output{more}:", file=sys.stderr)
    for line in shown:
        print(f"  | {line}", file=sys.stderr)


def run(args: argparse.Namespace) -> int:
    check_compare_options(args)
    for name in ("base", "new"):
        if "{out}" not in getattr(args, name):
            raise ConfigError(f"--{name} command must contain {{out}} (where the trace is written); "
                              f"got {getattr(args, name)!r}")
    if args.rounds < 1:
        raise ConfigError(f"--rounds must be >= 1, got {args.rounds}")
    # absolute, so that commands which change directory still write where we look
    root = check_output_dir(args.output or f"katra3d-ab-{time.strftime('%Y%m%d-%H%M%S')}", option="-o").resolve()
    dirs = {"base": root / "base", "new": root / "new"}
    if os.path.lexists(root / AB_MANIFEST):
        if not args.force:
            raise ConfigError(f"{str(root)!r} already holds an A/B run ({AB_MANIFEST}); give --force to replace "
                              "it, or choose another -o directory")
        removed = clear_ab_dir(root)
        if not args.quiet:
            print(f"katra3d ab: --force: removed the earlier A/B run in {str(root)!r} ({removed} traces)",
                  file=sys.stderr)
    for d in dirs.values():
        d.mkdir(parents=True, exist_ok=True)
        stale = [p.name for p in d.iterdir() if p.suffix == ".katra"]
        if stale:
            raise ConfigError(f"{str(d)!r} already holds traces ({', '.join(stale[:3])}...); "
                              "choose an empty -o directory")
    manifest: dict[str, Any] = {
        "katra3d_ab": AB_MANIFEST_VERSION,
        "base_dir": "base", "new_dir": "new",
        "base_command": args.base, "new_command": args.new,
        "started": time.strftime("%Y-%m-%dT%H:%M:%S%z"),
        "rounds": [],
    }
    for i in range(1, args.rounds + 1):
        order = ("base", "new") if i % 2 else ("new", "base")
        entry: dict[str, Any] = {"round": i, "order": list(order), "commands": {}, "seconds": {}}
        for side in order:
            out = dirs[side] / f"run-{i:03d}.katra"
            cmd, seconds = capture(getattr(args, side), out, f"round {i}/{args.rounds} {side.upper()}")
            entry[side] = f"{side}/{out.name}"
            entry["commands"][side] = cmd
            entry["seconds"][side] = round(seconds, 3)
        manifest["rounds"].append(entry)
        write_ab_manifest(root, manifest)  # after every round: an interrupted A/B keeps its pairs
        if not args.quiet:
            took = ", ".join(f"{side.upper()} {entry['seconds'][side]:.1f} s" for side in order)
            print(f"katra3d ab: round {i}/{args.rounds}: {took}", file=sys.stderr, flush=True)
    return compare_paths(str(dirs["base"]), str(dirs["new"]), args)
