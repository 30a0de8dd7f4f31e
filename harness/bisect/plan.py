"""A bisection's setup from what the user gave (checked before any capture), and its run in an output
directory: a new one, or ``--resume`` of an earlier one.

The checks, in order: ``-m`` (``auto`` becomes instructions when valgrind is on PATH, else time;
instructions or cycles without valgrind: exit 3), the capture command (``{out}`` in it, or scenes for
the default one), the output directory, then git (a repository, GOOD and BAD known, GOOD an
ancestor of BAD on its first-parent line).
"""

from __future__ import annotations

import shutil
import tempfile
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path
from typing import Any

from katra3d.harness.versions.git import commit_range, resolve, toplevel
from katra3d.harness.bisect.measure import Workspace
from katra3d.harness.bisect.report import REPORT_FILE, report_lines
from katra3d.harness.bisect.search import Outcome, run_bisection
from katra3d.harness.bisect.state import BISECT_FILE, CommitResult, Setup, read_state
from katra3d.harness.versions.command import CaptureCommand
from katra3d.harness.versions.setup import default_command, resolve_measure
from katra_trace.analysis.defaults import DEFAULT_SEQUENTIAL_MIN_ROUNDS, MAX_SEQUENTIAL_ROUNDS, check_sequential_rounds
from katra_trace.errors import ConfigError, OptionError
from katra_trace.io.claim import check_output_dir, open_output
from katra_trace.metrics import is_count
from katra_trace.text import shown

def new_setup(cwd: Path, good: str, bad: str, *, scenes: Sequence[str], command: str | None, measure: str,
              run_args: str, compare: Mapping[str, Any], max_rounds: int) -> Setup:
    """The checked setup of a new bisection (ConfigError, exit 2; ToolUnavailable, exit 3)."""
    measure = resolve_measure(measure)
    if command is not None:
        CaptureCommand(command).check("-c")
        if scenes or run_args:
            raise ConfigError("give either -c CMD or SCENE ... (with -a ARGS), not both: -c captures by itself")
    elif not scenes:
        raise ConfigError("give the SCENE(s) to capture after GOOD and BAD, or a capture command with -c CMD")
    try:
        check_sequential_rounds(DEFAULT_SEQUENTIAL_MIN_ROUNDS, max_rounds)
    except OptionError:
        raise ConfigError(f"--max-rounds is the cap on rounds of the sequential rule and must be from "
                          f"{DEFAULT_SEQUENTIAL_MIN_ROUNDS} to {MAX_SEQUENTIAL_ROUNDS}, got {max_rounds!r}") from None
    compare = dict(compare)
    if is_count(measure) and compare.get("metric", "auto") == "auto":
        compare["metric"] = measure
    top = toplevel(cwd)
    g, b = resolve(top, good), resolve(top, bad)
    commits = commit_range(top, g, b)
    return Setup(repository=str(top), good=g, bad=b, measure=measure,
                 command=command if command is not None else default_command(scenes, measure, run_args),
                 scenes=tuple(scenes), compare=compare, max_rounds=max_rounds, commits=tuple(commits))


def check_new_output(text: str) -> Path:
    """The output directory of a new bisection, absolute: refused when it holds one already."""
    root = check_output_dir(text, option="-o").resolve()
    if (root / BISECT_FILE).exists():
        raise ConfigError(f"{shown(str(root))} already holds a bisection ({BISECT_FILE}): continue it with "
                          f"--resume {shown(str(root))}, or choose another -o directory")
    return root


def resume(text: str, good: str | None, bad: str | None) -> tuple[Path, Setup, dict[str, CommitResult]]:
    """The output directory, setup and measured commits of an earlier bisection (``--resume DIR``);
    GOOD and BAD, when given again, must name the same commits."""
    root = check_output_dir(text, option="--resume").resolve()
    setup, tested = read_state(root)
    top = toplevel(Path(setup.repository))
    for given, recorded, name in ((good, setup.good, "GOOD"), (bad, setup.bad, "BAD")):
        if given is not None and resolve(top, given).sha != recorded.sha:
            raise ConfigError(f"--resume: {name} {given!r} is not the {name} of the bisection in "
                              f"{shown(str(root))} ({recorded.short}); give no GOOD and BAD to continue it")
    return root, setup, tested


def bisect(root: Path, setup: Setup, tested: dict[str, CommitResult],
           progress: Callable[[str], None]) -> tuple[Outcome, list[str]]:
    """Run (or continue) the bisection into ``root``; returns its outcome and the report's lines, also
    written to ``root/bisect.txt``. Worktrees live in a temporary directory, removed whatever happens."""
    root.mkdir(parents=True, exist_ok=True)
    trees = Path(tempfile.mkdtemp(prefix="katra3d-bisect-"))
    try:
        ws = Workspace(top=Path(setup.repository), root=root, trees=trees, setup=setup, progress=progress)
        found = run_bisection(ws, tested)
    finally:
        shutil.rmtree(trees, ignore_errors=True)
    lines = report_lines(setup, tested, found)
    with open_output(root / REPORT_FILE, force=True, option="-o", example=REPORT_FILE) as f:
        f.write(("\n".join(lines) + "\n").encode("utf-8"))
    return found, lines


__all__ = ["bisect", "check_new_output", "new_setup", "resume"]
