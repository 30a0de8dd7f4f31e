"""``katra3d ab``: interleaved A/B captures (A B, B A, ... so drifts hit both sides alike), then a
paired compare."""

from __future__ import annotations

import argparse
import dataclasses
import os
import shlex
import time
from pathlib import Path
from typing import TYPE_CHECKING

from katra3d.harness.cli._common import check_compare_options, compare_options
from katra3d.harness.cli._compare import add_compare_options, compare_and_print
from katra3d.harness.run.progress import Tally
from katra3d.harness.versions.command import CaptureCommand
from katra3d.harness.versions.git import resolve, toplevel
from katra3d.harness.versions.setup import default_command, resolve_measure, worktrees
from katra_trace.analysis.defaults import DEFAULT_SEQUENTIAL_MAX_ROUNDS
from katra_trace.errors import ConfigError, Interrupted
from katra_trace.io.claim import check_output_dir
from katra_trace.io.tracesets import AB_MANIFEST, clear_ab_dir, read_ab_manifest
from katra_trace.metrics import is_count
from katra_trace.text import shown
from katra_trace.units import format_duration

if TYPE_CHECKING:
    from katra3d.harness.ab.rounds import Round

#: Default rounds: 6 paired rounds give the paired t 5 degrees of freedom.
DEFAULT_ROUNDS = 6
#: Default ``--refs`` rounds in time: enough for an exact rank test of the ``ci`` suite after Holm.
REFS_ROUNDS = 7


def register(sub: argparse._SubParsersAction) -> None:  # type: ignore[type-arg]
    p = sub.add_parser(
        "ab",
        help="run two capture commands interleaved (A B, B A, ...) and compare them paired",
        description="Run BASE and NEW capture commands in K rounds (each a full capture writing a "
        "trace to {out}; the order alternates each round), record the rounds in "
        "DIR/ab.json, then compare round by round (paired). Exit codes as for compare. "
        "Example: katra3d ab --base 'katra3d run fillrate -o {out}' "
        "--new 'katra3d run fillrate --param fillrate.layers=9 -o {out}' "
        "--allow-param-mismatch",
    )
    p.add_argument(
        "--base",
        metavar="CMD",
        help="shell command that captures one BASE trace to the path given by {out} (or "
        "$KATRA3D_OUT)",
    )
    p.add_argument(
        "--new",
        metavar="CMD",
        help="shell command that captures one NEW trace to the path given by {out} (or "
        "$KATRA3D_OUT)",
    )
    p.add_argument(
        "--refs",
        nargs=2,
        metavar=("BASE_REF", "NEW_REF"),
        help="instead of --base and --new: two git revisions of the repository you are in, each "
        "checked "
        "out as a temporary worktree (its current directory) and captured by "
        "-c CMD (default: katra3d run --suite ci --quiet -o {out}); ci/compare-versions.sh",
    )
    p.add_argument(
        "-c",
        "--command",
        metavar="CMD",
        help="with --refs: the capture command run in each worktree, writing {out}",
    )
    p.add_argument(
        "-m",
        "--measure",
        metavar="WHAT",
        default=None,
        help="with --refs: time (default), instructions, cycles, or auto (instructions when "
        "valgrind is "
        "on PATH); counts take 1 round and compare on the count (docs/measure.md)",
    )
    p.add_argument(
        "--rounds",
        type=int,
        default=None,
        metavar="K",
        help=f"rounds; each runs BASE and NEW once (default: {DEFAULT_ROUNDS}); with "
        "--until-decided the "
        f"cap (default: {DEFAULT_SEQUENTIAL_MAX_ROUNDS})",
    )
    p.add_argument(
        "--until-decided",
        action="store_true",
        help="look after every round and stop once every scene is decided (regression, "
        "improvement, or unchanged within the threshold), with a stopping rule that keeps the "
        "false-alarm rate at --alpha over all looks (docs/stats.md); ab.json records the rule",
    )
    p.add_argument(
        "-o",
        "--output",
        metavar="DIR",
        default=None,
        help="directory for the traces (DIR/base/, DIR/new/) and DIR/ab.json; "
        "default: ./katra3d-ab-<time>",
    )
    p.add_argument(
        "--quiet",
        action="store_true",
        help="no line per round (a failing capture's output is still shown)",
    )
    p.add_argument(
        "--force",
        action="store_true",
        help="DIR holds an earlier A/B run: replace it (only ab's own files: DIR/ab.json and the "
        "run-NNN.katra traces under base/ and new/)",
    )
    add_compare_options(p)
    p.set_defaults(func=run)


def _round_line(tally: Tally, done: Round, cap: int) -> None:
    took = ", ".join(
        f"{side.upper()} {format_duration(done.seconds[side] * 1e9)}" for side in done.order
    )
    open_ = done.settled.undecided if done.settled is not None and done.number < cap else ()
    look = f"; undecided: {', '.join(open_)}" if open_ else ""
    tally.line(f"round {done.number}/{cap}: capture wall time {took}{look}")
    for line in done.params:
        tally.line(f"{line}: compared as a change of the scene")


def run(args: argparse.Namespace) -> int:
    check_compare_options(args)
    if args.refs is not None:
        return _run_refs(args)
    if (
        args.base is None
        or args.new is None
        or args.command is not None
        or args.measure is not None
    ):
        raise ConfigError(
            "give --base CMD and --new CMD, or --refs BASE_REF NEW_REF (with -c CMD and -m WHAT)"
        )
    commands = {name: CaptureCommand(getattr(args, name)) for name in ("base", "new")}
    return _run(args, commands)


def _run_refs(args: argparse.Namespace) -> int:
    if args.base is not None or args.new is not None:
        raise ConfigError(
            "--refs captures both revisions with one -c CMD: give no --base or --new with it"
        )
    measure = resolve_measure(args.measure or "time")
    command = CaptureCommand(args.command or default_command(("--suite", "ci"), measure))
    command.check("-c")
    if is_count(measure):
        # a count is exact: one round is evidence
        args.rounds = 1 if args.rounds is None else args.rounds
        if args.metric == "auto":
            args.metric = measure
    elif args.rounds is None and not args.until_decided:
        args.rounds = REFS_ROUNDS
    top = toplevel(Path.cwd())
    base, new = resolve(top, args.refs[0]), resolve(top, args.refs[1])
    rounds = "until decided" if args.until_decided else f"{args.rounds} rounds"
    Tally("katra3d ab").line(
        f"BASE {args.refs[0]} ({base.short}) vs NEW {args.refs[1]} ({new.short}), {rounds}, "
        f"{measure}"
    )
    with worktrees(top, (base, new)) as (base_tree, new_tree):
        return _run(
            args,
            {
                "base": dataclasses.replace(command, cwd=base_tree),
                "new": dataclasses.replace(command, cwd=new_tree),
            },
        )


def _run(args: argparse.Namespace, commands: dict[str, CaptureCommand]) -> int:
    # deferred: the rounds loop and the stopping rule load scipy
    from katra3d.harness.ab.rounds import SIDES, run_rounds
    from katra_trace.analysis.sequential import SequentialRule

    for name, command in commands.items():
        command.check(f"--{name}")
    rule = None
    if args.until_decided:  # the rule checks its cap: one line, exit 2
        rule = SequentialRule(
            alpha=args.alpha,
            threshold_pct=args.threshold,
            max_rounds=DEFAULT_SEQUENTIAL_MAX_ROUNDS if args.rounds is None else args.rounds,
        )
        cap = rule.max_rounds
    else:
        cap = DEFAULT_ROUNDS if args.rounds is None else args.rounds
        if cap < 1:
            raise ConfigError(f"--rounds must be >= 1, got {cap}")
    # absolute: commands that change directory still write where we look
    root = check_output_dir(
        args.output or f"katra3d-ab-{time.strftime('%Y%m%d-%H%M%S')}", option="-o"
    ).resolve()
    dirs = {side: root / side for side in SIDES}
    if os.path.lexists(root / AB_MANIFEST):
        if not args.force:
            raise ConfigError(
                f"{str(root)!r} already holds an A/B run ({AB_MANIFEST}); give --force to replace "
                "it, or choose another -o directory"
            )
        removed = clear_ab_dir(root)
        if not args.quiet:
            Tally("katra3d ab").line(
                f"--force: removed the earlier A/B run in {str(root)!r} ({removed} traces)"
            )
    for d in dirs.values():
        d.mkdir(parents=True, exist_ok=True)
        stale = [p.name for p in d.iterdir() if p.suffix == ".katra"]
        if stale:
            raise ConfigError(
                f"{str(d)!r} already holds traces ({', '.join(stale[:3])}...); "
                "choose an empty -o directory"
            )
    tally = Tally("katra3d ab", quiet=args.quiet)
    try:
        result = run_rounds(
            commands["base"],
            commands["new"],
            root,
            cap,
            rule,
            on_round=lambda done: _round_line(tally, done, cap),
            options=compare_options(args),
            same_command=args.refs is not None,
        )
    except Interrupted:
        manifest = read_ab_manifest(root)
        stopped = manifest.interrupted if manifest is not None else None
        traces = stopped.get("traces") if stopped is not None else None
        kept = sorted(str(t) for t in traces.values()) if isinstance(traces, dict) else []
        what = f"kept as interrupted: {', '.join(kept)}" if kept else "it wrote no trace"
        Tally("katra3d ab").line(
            f"stopped: the complete rounds are recorded in {shown(str(root / AB_MANIFEST))} "
            f"(katra3d compare {shlex.quote(str(root))}), the round in progress as interrupted "
            f"({what}); ab --force replaces them all"
        )
        raise
    if result.settled is not None:
        Tally("katra3d ab").line(f"stopped: {result.settled.reason}")
    args.allow_param_mismatch = result.compare_options.allow_param_mismatch
    return compare_and_print(
        str(dirs["base"]), str(dirs["new"]), args, record=root, top_profile=True
    )
