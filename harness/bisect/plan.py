"""A bisection's setup, checked before any capture, and its run into a new or resumed directory."""

from __future__ import annotations

import dataclasses
import hashlib
import os
import shutil
import stat
import tempfile
from collections.abc import Callable, Sequence
from pathlib import Path

from katra3d.harness.bisect.measure import Workspace
from katra3d.harness.bisect.report import REPORT_FILE, report_lines
from katra3d.harness.bisect.search import run_bisection
from katra3d.harness.bisect.state import BISECT_FILE, Bisection, Outcome, Setup
from katra3d.harness.run.jobs import parse_jobs, resolve_jobs
from katra3d.harness.versions.command import CaptureCommand, stop_leftover_captures
from katra3d.harness.versions.git import commit_range, remove_worktree, resolve, toplevel
from katra3d.harness.versions.setup import default_command, resolve_measure
from katra_trace.analysis.defaults import (
    DEFAULT_SEQUENTIAL_MIN_ROUNDS,
    MAX_SEQUENTIAL_ROUNDS,
    CompareOptions,
    check_sequential_rounds,
)
from katra_trace.errors import ConfigError, OptionError
from katra_trace.io.claim import check_output_dir, open_output
from katra_trace.metrics import is_count
from katra_trace.profile.diff import top_line_of
from katra_trace.text import shown


def new_setup(
    cwd: Path,
    good: str,
    bad: str,
    *,
    scenes: Sequence[str],
    command: str | None,
    measure: str,
    run_args: str,
    compare: CompareOptions,
    max_rounds: int,
    images: bool = False,
) -> Setup:
    """The checked setup of a new bisection; with ``images``, ``-m auto`` is time."""
    measure = "time" if images and measure == "auto" else resolve_measure(measure)
    if command is not None:
        CaptureCommand(command).check("-c")
        if scenes or run_args:
            raise ConfigError(
                "give either -c CMD or SCENE ... (with -a ARGS), not both: -c captures by itself"
            )
    elif not scenes:
        raise ConfigError(
            "give the SCENE(s) to capture after GOOD and BAD, or a capture command with -c CMD"
        )
    try:
        check_sequential_rounds(DEFAULT_SEQUENTIAL_MIN_ROUNDS, max_rounds)
    except OptionError:
        raise ConfigError(
            f"--max-rounds is the cap on rounds of the sequential rule and must be from "
            f"{DEFAULT_SEQUENTIAL_MIN_ROUNDS} to {MAX_SEQUENTIAL_ROUNDS}, got {max_rounds!r}"
        ) from None
    if is_count(measure) and compare.metric == "auto":
        compare = dataclasses.replace(compare, metric=measure)
    top = toplevel(cwd)
    g, b = resolve(top, good), resolve(top, bad)
    commits = commit_range(top, g, b)
    return Setup(
        repository=str(top),
        good=g,
        bad=b,
        measure=measure,
        command=command if command is not None else default_command(scenes, measure, run_args),
        scenes=tuple(scenes),
        compare=compare,
        max_rounds=max_rounds,
        commits=tuple(commits),
        images=images,
    )


def check_new_output(text: str) -> Path:
    """ConfigError when not empty."""
    root = check_output_dir(text, option="-o").resolve()
    if (root / BISECT_FILE).exists():
        raise ConfigError(
            f"{shown(str(root))} already holds a bisection ({BISECT_FILE}): continue it with "
            f"--resume {shown(str(root))}, or choose another -o directory"
        )
    if root.is_dir() and any(root.iterdir()):
        raise ConfigError(
            f"{shown(str(root))} is not empty and holds no bisection ({BISECT_FILE}): bisect "
            "writes into a new or empty directory only; choose another -o directory"
        )
    return root


def resume(text: str, good: str | None, bad: str | None) -> tuple[Path, Bisection]:
    """``--resume DIR``'s directory and bisection; GOOD and BAD given again must match."""
    root = check_output_dir(text, option="--resume").resolve()
    state = Bisection.load(root)
    setup = state.setup
    top = toplevel(Path(setup.repository))
    for given, recorded, name in ((good, setup.good, "GOOD"), (bad, setup.bad, "BAD")):
        if given is not None and resolve(top, given).sha != recorded.sha:
            raise ConfigError(
                f"--resume: {name} {given!r} is not the {name} of the bisection in "
                f"{shown(str(root))} ({recorded.short}); give no GOOD and BAD to continue it"
            )
    return root, state


def check_jobs(text: str | None, measure: str, images: bool = False) -> int:
    """Commits measured at once, by ``run``'s jobs rule (an image bisection counts as counts)."""
    return resolve_jobs(
        parse_jobs(text, unit="commit"),
        "instructions" if images else measure,
        unit="commit",
        work="bisection",
    )


def bisect(
    root: Path, state: Bisection, progress: Callable[[str], None], jobs: int = 1
) -> tuple[Outcome, list[str]]:
    """Run or continue the bisection into ``root``; returns the outcome and the report's lines
    (also written to bisect.txt). Worktrees are always removed."""
    root.mkdir(parents=True, exist_ok=True)
    setup = state.setup
    top = Path(setup.repository)
    trees = trees_dir(root)
    left = remove_leftovers(top, root, trees)
    if any(left):
        progress(
            f"removed what a killed bisection left: {left[0]} worktree(s), {left[1]} .part "
            f"file(s), {left[2]} capture process(es)"
        )
    trees.mkdir(mode=0o700)
    try:
        ws = Workspace(top=top, root=root, trees=trees, setup=setup, progress=progress)
        found = run_bisection(ws, state, jobs)
    finally:
        remove_trees(top, trees)
    lines = report_lines(state)
    if found.first_bad is not None and is_count(setup.measure):
        good, bad = (state.tested[c.sha].traces for c in (setup.good, found.first_bad))
        line = top_line_of(*([root / t for t in ts] for ts in (good, bad)))
        lines += [line] if line else []
    with open_output(root / REPORT_FILE, force=True, option="-o", example=REPORT_FILE) as f:
        f.write(("\n".join(lines) + "\n").encode("utf-8"))
    return found, lines


def trees_dir(root: Path) -> Path:
    """The worktrees' temp dir, named after ``root`` so a killed run's leftovers are found."""
    digest = hashlib.sha256(str(root).encode()).hexdigest()[:16]
    return Path(tempfile.gettempdir()) / f"katra3d-bisect-{os.getuid()}-{digest}"


def remove_trees(top: Path, trees: Path) -> int:
    """Remove ``trees`` (this user's, not a link) and its worktrees; returns how many."""
    try:
        info = trees.lstat()
    except FileNotFoundError:
        return 0
    if not stat.S_ISDIR(info.st_mode) or info.st_uid != os.getuid():
        raise ConfigError(
            f"{shown(str(trees))} is not a directory of this user's; remove it, then run again"
        )
    made = [tree for tree in trees.iterdir() if tree.is_dir()]
    for tree in made:
        remove_worktree(top, tree)
    shutil.rmtree(trees, ignore_errors=True)
    return len(made)


def remove_leftovers(top: Path, root: Path, trees: Path) -> tuple[int, int, int]:
    """Remove a killed bisection's worktrees, ``.part`` files and captures; returns each count."""
    processes = stop_leftover_captures(root)
    worktrees = remove_trees(top, trees)
    parts = [
        p
        for p in (
            *root.glob("traces/*.katra.part"),
            *root.glob("traces/*/base/run-*.katra.part"),
            *root.glob("traces/*/new/run-*.katra.part"),
        )
        if p.is_file() and not p.is_symlink()
    ]
    for part in parts:
        part.unlink(missing_ok=True)
    return worktrees, len(parts), processes


__all__ = [
    "bisect",
    "check_jobs",
    "check_new_output",
    "new_setup",
    "remove_leftovers",
    "resume",
    "trees_dir",
]
