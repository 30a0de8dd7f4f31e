"""``katra3d bisect``: which commit made frames slower (docs/bisect.md)."""

from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path

from katra3d.harness.bisect.plan import bisect, check_jobs, check_new_output, new_setup, resume
from katra3d.harness.bisect.state import Bisection, Setup
from katra3d.harness.cli._common import (
    add_comparability_options,
    add_decision_options,
    check_compare_options,
    compare_options,
)
from katra3d.harness.run.progress import Tally
from katra_trace.analysis.defaults import DEFAULT_SEQUENTIAL_MAX_ROUNDS
from katra_trace.errors import ConfigError
from katra_trace.metrics import is_count
from katra_trace.text import escape


def register(sub: argparse._SubParsersAction) -> None:  # type: ignore[type-arg]
    p = sub.add_parser(
        "bisect",
        help="find the commit that made a scene slower (git worktrees, one decision model)",
        description="Bisect the first-parent history GOOD..BAD of the git repository you are in: "
        "each commit measured is checked out as a temporary worktree, captured, and "
        "classified like GOOD, like BAD or skipped. Writes DIR/bisect.json, "
        "DIR/bisect.txt and the traces. Exit 0 found; 2 bad input, nothing to "
        "bisect, or every commit skipped; 3 git or valgrind missing.",
    )
    p.add_argument(
        "good", metavar="GOOD", nargs="?", help="a commit without the slowdown (an ancestor of BAD)"
    )
    p.add_argument("bad", metavar="BAD", nargs="?", help="a commit with it")
    p.add_argument(
        "scenes",
        metavar="SCENE",
        nargs="*",
        help="scenes the default capture runs (built-in names, FILE.py:Class, module:Class)",
    )
    p.add_argument(
        "-c",
        "--command",
        metavar="CMD",
        default=None,
        help="shell command that captures one trace to {out}, run in the commit's worktree "
        "(instead of 'katra3d run SCENE ...'); with -m instructions or cycles it must count",
    )
    p.add_argument(
        "-a",
        "--run-args",
        metavar="ARGS",
        default="",
        help="options added to the default capture, e.g. '--size 160x90 --frames 4'",
    )
    p.add_argument(
        "-m",
        "--measure",
        metavar="WHAT",
        default="auto",
        help="instructions, cycles, time or auto (default: instructions when valgrind is on PATH, "
        "else time); counts need one capture per commit",
    )
    p.add_argument(
        "--max-rounds",
        type=int,
        default=DEFAULT_SEQUENTIAL_MAX_ROUNDS,
        metavar="K",
        help="time: the cap on interleaved rounds against GOOD per commit, which the sequential "
        "rule "
        f"(as ab --until-decided) spends alpha over (default {DEFAULT_SEQUENTIAL_MAX_ROUNDS})",
    )
    p.add_argument(
        "-j",
        "--jobs",
        default=None,
        metavar="N",
        help="counts: measure up to N commits of the range at once, a round at a time (default: "
        "the usable cores); time measures one commit at a time (timed captures side by side "
        "disturb each other), so --jobs over 1 with time is refused",
    )
    p.add_argument(
        "-o",
        "--output",
        metavar="DIR",
        default=None,
        help="directory for bisect.json, bisect.txt, traces/ and logs/ (default: "
        "./katra3d-bisect-<time>)",
    )
    p.add_argument(
        "--resume",
        metavar="DIR",
        default=None,
        help="continue the bisection in DIR (after Ctrl-C or a failure) without measuring again",
    )
    p.add_argument(
        "--images",
        action="store_true",
        dest="by_images",  # not compare's --images policy
        help="find the first commit whose kept frame changed beyond the image tolerance "
        "(docs/images.md) instead of a slowdown: one capture a commit (-m auto: time)",
    )
    p.add_argument("--quiet", action="store_true", help="no progress lines on stderr")
    add_decision_options(p)
    add_comparability_options(p, images=False)
    p.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    check_compare_options(args)

    tally = Tally("katra3d bisect", quiet=args.quiet)

    def progress(line: str) -> None:
        tally.line(escape(line))

    if args.resume is not None:
        if args.output is not None or args.command is not None or args.scenes or args.run_args:
            raise ConfigError(
                "--resume DIR continues the recorded bisection as it was set up: give no -o, -c, "
                "-a or SCENE with it"
            )
        root, state = resume(args.resume, args.good, args.bad)
        jobs = check_jobs(args.jobs, state.setup.measure, state.setup.images)
        progress(
            f"resuming {root}: {len(state.tested)} commit(s) measured already; "
            f"{_at_once(state.setup, jobs)}"
        )
    else:
        if args.good is None or args.bad is None:
            raise ConfigError("give GOOD and BAD (commits, oldest first), or --resume DIR")
        setup = new_setup(
            Path.cwd(),
            args.good,
            args.bad,
            scenes=args.scenes,
            command=args.command,
            measure=args.measure,
            run_args=args.run_args,
            compare=compare_options(args),
            max_rounds=args.max_rounds,
            images=args.by_images,
        )
        jobs = check_jobs(args.jobs, setup.measure, setup.images)
        root = check_new_output(
            f"katra3d-bisect-{time.strftime('%Y%m%d-%H%M%S')}"
            if args.output is None
            else args.output
        )
        state = Bisection(setup)
        progress(
            f"{len(setup.commits)} commit(s) after GOOD {setup.good.short} up to BAD "
            f"{setup.bad.short}, "
            f"{setup.measure}, {_at_once(setup, jobs)}; output in {root}"
        )
    try:
        found, lines = bisect(root, state, progress, jobs)
    except KeyboardInterrupt:
        print(
            f"katra3d bisect: stopped; {len(state.tested)} commit(s) kept in {root}; continue with "
            f"'katra3d bisect --resume {root}'",
            file=sys.stderr,
        )
        raise
    sys.stdout.write("\n".join(lines) + "\n")
    if found.exit_code:
        print(f"katra3d: error: {escape(found.message)}", file=sys.stderr)
    return found.exit_code


def _at_once(setup: Setup, jobs: int) -> str:
    if is_count(setup.measure) or setup.images:
        return f"up to {jobs} commit(s) measured at once (--jobs)"
    return "one commit at a time (timed captures side by side disturb each other's times)"
