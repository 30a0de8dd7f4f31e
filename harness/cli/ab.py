"""``katra3d ab --base CMD --new CMD [--rounds K] [-o DIR]``: interleaved A/B captures, then compare.

Runs the two capture commands alternately, A B A B ... for K rounds, on the
same machine, so slow drifts (thermal state, neighbours on a shared CI
machine) hit both sides alike; then compares the pooled traces with the
run as the unit of evidence (see ``katra3d compare``). Each command is a
shell command line that writes one trace to the path put in place of
``{out}``, e.g. ``--base "katra3d run --scene fillrate -o {out}"``.
"""

from __future__ import annotations

import argparse
import shlex
import subprocess
import sys
import time
from pathlib import Path

from harness.cli.compare import add_compare_options, check_options, compare_paths
from katra_trace.errors import ConfigError, KatraError

#: Default rounds: 6 runs a side let an exact rank test reach alpha=0.01 across up to 3 scenes.
DEFAULT_ROUNDS = 6


def register(sub: argparse._SubParsersAction) -> None:  # type: ignore[type-arg]
    p = sub.add_parser("ab", help="run two capture commands interleaved (A B A B ...) and compare them",
                       description="Run BASE and NEW capture commands alternately for K rounds (each a full "
                                   "capture writing a trace to {out}), then compare the pooled runs. "
                                   "Exit codes as for compare.")
    p.add_argument("--base", required=True, metavar="CMD",
                   help="shell command that captures one BASE trace to the path given by {out}")
    p.add_argument("--new", required=True, metavar="CMD",
                   help="shell command that captures one NEW trace to the path given by {out}")
    p.add_argument("--rounds", type=int, default=DEFAULT_ROUNDS, metavar="K",
                   help=f"rounds; each runs BASE then NEW once (default: {DEFAULT_ROUNDS})")
    p.add_argument("-o", "--output", metavar="DIR", default=None,
                   help="directory for the traces (DIR/base/, DIR/new/); default: ./katra3d-ab-<time>")
    add_compare_options(p)
    p.set_defaults(func=run)


def capture(template: str, out: Path, label: str) -> None:
    """Run one capture command with ``{out}`` replaced; raise KatraError if it fails or writes nothing."""
    cmd = template.replace("{out}", shlex.quote(str(out)))
    print(f"katra3d ab: {label}: {cmd}", file=sys.stderr, flush=True)
    try:
        proc = subprocess.run(cmd, shell=True, stdout=sys.stderr, stderr=sys.stderr, check=False)
    except OSError as exc:
        raise ConfigError(f"cannot run {label} command {cmd!r}: {exc}") from None
    if proc.returncode != 0:
        raise KatraError(f"{label} command failed with exit code {proc.returncode}: {cmd}")
    if not out.is_file():
        raise ConfigError(f"{label} command exited 0 but wrote no trace at {str(out)!r}: {cmd}")


def run(args: argparse.Namespace) -> int:
    check_options(args)
    for name in ("base", "new"):
        if "{out}" not in getattr(args, name):
            raise ConfigError(f"--{name} command must contain {{out}} (where the trace is written); "
                              f"got {getattr(args, name)!r}")
    if args.rounds < 1:
        raise ConfigError(f"--rounds must be >= 1, got {args.rounds}")
    # absolute, so that commands which change directory still write where we look
    root = Path(args.output or f"katra3d-ab-{time.strftime('%Y%m%d-%H%M%S')}").resolve()
    dirs = {"base": root / "base", "new": root / "new"}
    for d in dirs.values():
        d.mkdir(parents=True, exist_ok=True)
        stale = [p.name for p in d.iterdir() if p.suffix == ".katra"]
        if stale:
            raise ConfigError(f"{str(d)!r} already holds traces ({', '.join(stale[:3])}...); "
                              "choose an empty -o directory")
    for i in range(1, args.rounds + 1):
        for side in ("base", "new"):
            out = dirs[side] / f"run-{i:03d}.katra"
            capture(getattr(args, side), out, f"round {i}/{args.rounds} {side.upper()}")
    return compare_paths(str(dirs["base"]), str(dirs["new"]), args)
