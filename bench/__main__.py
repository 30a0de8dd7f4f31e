"""``python -m bench``: run katra3d's benches, print one table, write bench/results.json.

Usage::

    python -m bench                    # every default bench (a few minutes); what `make bench` runs
    python -m bench overhead trace-*   # only these (names or shell-style patterns)
    python -m bench --quick trace-read # smoke-test sizes: seconds, not measurements
    python -m bench --list             # what is registered
    python -m bench noise              # a study of bench/experiments/ (run only when named)

Every row is a ratio against a baseline measured in the same run, interleaved
with it (see bench/_core.py), or a machine-independent value such as bytes per
event. The table goes to stdout; progress lines go to stderr (``-q`` silences
them). results.json records the date, git commit, machine facts and every row.

Exit codes:

* 0: every selected bench ran. A missed target is shown as MISS in the table
  and does not change the exit code, unless ``--strict`` is given;
* 1: ``--strict`` and at least one row missed its target;
* 2: bad arguments (an unknown bench name), a bench failed with an error, or
  results.json could not be written;
* 3: a bench could not run because the environment lacks something (no
  usable OpenGL context). The other benches still ran and are in the table;
* 130: interrupted (Ctrl-C): the benches that finished are still printed and
  written, with ``"interrupted": true``.

Adding a bench: write a function ``fn(ctx: BenchContext) -> list[Row]`` in any
module ``bench/<name>.py`` whose name does not start with ``_`` (every such
module is imported), decorated with ``@bench("name")``; example in
bench/__init__.py. Benches that take minutes take ``default=False`` and run
only when named. A study that measures something once for a doc, rather than
guarding a target, goes in ``bench/experiments/<name>.py``: imported the same
way, run only when named.
"""

from __future__ import annotations

import argparse
import dataclasses
import datetime as dt
import fnmatch
import importlib
import os
import pkgutil
import shutil
import signal
import sys
import tempfile
import time
import traceback
from collections.abc import Callable
from pathlib import Path

from bench._core import Bench, BenchContext, Row, registered, stderr_log
from bench._report import (
    BenchRun,
    Failure,
    git_facts,
    machine_facts,
    print_table,
    results_record,
    write_results,
)

PACKAGE_DIR = Path(__file__).resolve().parent
DEFAULT_RESULTS = PACKAGE_DIR / "results.json"


def load_benches() -> dict[str, Bench]:
    """Import every bench module (bench/*.py and bench/experiments/*.py not starting with ``_``)
    and return the registry."""
    for package in ("bench", "bench.experiments"):
        folder = PACKAGE_DIR.joinpath(*package.split(".")[1:])
        for info in pkgutil.iter_modules([str(folder)]):
            if not info.name.startswith("_") and not info.ispkg:
                importlib.import_module(f"{package}.{info.name}")
    return registered()


def select(benches: dict[str, Bench], patterns: list[str]) -> list[Bench]:
    """The benches named by ``patterns`` in that order (a pattern's matches in registration order,
    each bench once), or every default one; ValueError naming the patterns that match nothing."""
    if not patterns:
        return [b for b in benches.values() if b.default]
    unknown = [p for p in patterns if not fnmatch.filter(benches, p)]
    if unknown:
        raise ValueError(
            f"unknown bench {', '.join(repr(p) for p in unknown)}; registered: {', '.join(benches)}"
        )
    chosen: dict[str, Bench] = {}
    for pattern in patterns:
        for name, b in benches.items():
            if fnmatch.fnmatchcase(name, pattern):
                chosen.setdefault(name, b)
    return list(chosen.values())


def run_one(entry: Bench, *, quick: bool, log: Callable[[str], None]) -> BenchRun:
    """Run one bench in its own scratch directory; an exception becomes a :class:`Failure`."""
    from katra_trace.errors import KatraError

    tmp = Path(tempfile.mkdtemp(prefix=f"katra-bench-{entry.name}-"))
    ctx = BenchContext(entry.name, tmp, quick=quick, log=log)
    t0 = time.perf_counter()
    failure = None
    rows: list[Row] = []
    try:
        rows = [r if r.bench else _with_bench(r, entry.name) for r in entry.fn(ctx)]
    except KatraError as exc:
        kind = "unavailable" if exc.exit_code == 3 else "error"
        failure = Failure(
            entry.name, kind, str(exc).splitlines()[0] if str(exc) else type(exc).__name__
        )
    except Exception as exc:  # noqa: BLE001 - one broken bench must not hide the others' rows
        tb = traceback.extract_tb(exc.__traceback__)
        where = f" ({Path(tb[-1].filename).name}:{tb[-1].lineno})" if tb else ""
        failure = Failure(entry.name, "error", f"{type(exc).__name__}: {exc}{where}")
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
    return BenchRun(entry.name, entry.about, rows, time.perf_counter() - t0, ctx.facts, failure)


class _Interrupts:
    """Ctrl-C during the benches: raises KeyboardInterrupt, and remembers that it came.

    The flag is what decides: a KeyboardInterrupt raised while Python runs a weakref callback or a
    ``__del__`` (the garbage collector's work) is printed as "Exception ignored" and lost, and the
    bench would run on to its end as if nothing had happened. A bench during which Ctrl-C came is
    left out of the table, whether or not it finished.
    """

    def __init__(self) -> None:
        self.seen = False

    def __call__(self, signum: int, frame: object) -> None:
        self.seen = True
        raise KeyboardInterrupt


def _with_bench(row: Row, name: str) -> Row:
    return dataclasses.replace(row, bench=name)


def parse_args(argv: list[str]) -> argparse.Namespace:
    parser = argparse.ArgumentParser(
        prog="python -m bench",
        formatter_class=argparse.RawDescriptionHelpFormatter,
        description="Run katra3d's benches (ratios against in-run baselines), print one table, "
        "write results.json.",
        epilog="exit codes: 0 ran (missed targets show as MISS), 1 --strict and a target missed, 2 "
        "bad arguments "
        "or a bench failed,\n3 a bench lacked something in the environment (no OpenGL), 130 "
        "interrupted.\n"
        "Adding a bench: see bench/__init__.py.",
    )
    parser.add_argument(
        "names",
        nargs="*",
        metavar="BENCH",
        help="benches to run: names or shell-style patterns (default: every default bench)",
    )
    parser.add_argument(
        "--quick", action="store_true", help="smoke-test sizes: seconds, not measurements"
    )
    parser.add_argument("--strict", action="store_true", help="exit 1 when a row misses its target")
    parser.add_argument(
        "--out",
        type=Path,
        default=DEFAULT_RESULTS,
        metavar="PATH",
        help="where to write the results (default: bench/results.json)",
    )
    parser.add_argument("--list", action="store_true", help="list the registered benches and exit")
    parser.add_argument("-q", "--quiet", action="store_true", help="no progress lines on stderr")
    return parser.parse_args(argv)


def main(argv: list[str] | None = None) -> int:
    args = parse_args(sys.argv[1:] if argv is None else argv)
    benches = load_benches()
    if args.list:
        for b in benches.values():
            kind = (
                " [experiment]" if b.experiment else "" if b.default else " [not default: name it]"
            )
            print(f"{b.name:<20} {b.about}{kind}{' [GL]' if b.needs_gl else ''}")
        return 0
    try:
        chosen = select(benches, args.names)
    except ValueError as exc:
        print(f"python -m bench: error: {exc}", file=sys.stderr)
        return 2
    log = (lambda _msg: None) if args.quiet else stderr_log
    started = dt.datetime.now(dt.timezone.utc)
    machine = machine_facts()
    t0 = time.perf_counter()
    runs: list[BenchRun] = []
    interrupted = False
    # deferred: katra3d's import is for running benches, not for --list or a bad name
    from katra3d.harness.supervisor import handling

    ctrl_c = _Interrupts()
    # SIGINT left ignored where it is (a background job of a non-interactive shell)
    with handling(ctrl_c, (signal.SIGINT,), unless_ignored=True):
        try:
            for i, entry in enumerate(chosen, 1):
                log(f"[{i}/{len(chosen)}] {entry.name}: {entry.about}")
                run = run_one(entry, quick=args.quick, log=log)
                # the KeyboardInterrupt was lost in a callback: the bench ran on to its end
                if ctrl_c.seen:
                    raise KeyboardInterrupt
                if run.failure is not None:
                    log(f"{entry.name}: {run.failure.kind}: {run.failure.message}")
                runs.append(run)
        except KeyboardInterrupt:
            interrupted = True
            print(
                "python -m bench: interrupted: the table shows the benches that finished",
                file=sys.stderr,
            )
    total_s = time.perf_counter() - t0
    print_table(runs, total_s=total_s, quick=args.quick)
    record = results_record(
        runs,
        started=started,
        total_s=total_s,
        quick=args.quick,
        strict=args.strict,
        argv=list(sys.argv[1:] if argv is None else argv),
        machine=machine,
        git=git_facts(PACKAGE_DIR.parent),
    )
    record["interrupted"] = interrupted
    try:
        write_results(args.out, record)
    except OSError as exc:
        print(
            f"python -m bench: error: cannot write {args.out}: {exc.strerror or exc}",
            file=sys.stderr,
        )
        return 2
    print(f"results: {args.out}")
    if interrupted:
        return 130
    codes = [r.failure.exit_code for r in runs if r.failure is not None]
    if codes:
        return 2 if 2 in codes else 3
    if args.strict and any(row.status == "miss" for r in runs for row in r.rows):
        return 1
    return 0


if __name__ == "__main__":
    try:
        sys.exit(main())
    except BrokenPipeError:  # the reader went away (python -m bench | head): stop quietly
        os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
        sys.exit(0)
