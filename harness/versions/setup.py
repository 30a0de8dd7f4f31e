"""The measure, default capture command and worktrees of a capture of versions, shared by
``ab --refs``, ``bisect`` and ``ci/compare-versions.sh``."""

from __future__ import annotations

import contextlib
import shlex
import shutil
import sys
import tempfile
from collections.abc import Iterator, Sequence
from pathlib import Path

from katra3d.harness.run.valgrind import find_valgrind
from katra3d.harness.versions.command import OUT_PLACEHOLDER
from katra3d.harness.versions.git import Commit, add_worktree, remove_worktree
from katra_trace.errors import ConfigError
from katra_trace.metrics import MEASURES, is_count

# counts are exact, so few frames are evidence
COUNT_FRAMES = 10
#: ``python -P``: a worktree's ``random.py`` cannot hide the standard library.
SAFE_PATH = ("-P",) if sys.version_info >= (3, 11) else ()


def resolve_measure(measure: str) -> str:
    """``auto``: instructions with valgrind on PATH, else time; a count without it raises
    ToolUnavailable."""
    if measure == "auto":
        return "instructions" if shutil.which("valgrind") else "time"
    if measure not in MEASURES:
        raise ConfigError(f"-m takes instructions, cycles, time or auto, got {measure!r}")
    if is_count(measure):
        find_valgrind()
    return measure


def default_command(what: Sequence[str], measure: str, run_args: str = "") -> str:
    """``katra3d run WHAT --quiet ... -o {out}`` of this katra3d; ``run_args`` come last, so win."""
    parts = [
        shlex.quote(sys.executable),
        *SAFE_PATH,
        "-m",
        "katra3d",
        "run",
        *(shlex.quote(s) for s in what),
        "--quiet",
    ]
    if is_count(measure):
        parts += ["--measure", measure, "--frames", str(COUNT_FRAMES)]
    if run_args.strip():
        parts.append(run_args.strip())
    return " ".join([*parts, "-o", OUT_PLACEHOLDER])


@contextlib.contextmanager
def worktrees(
    top: Path, commits: Sequence[Commit], prefix: str = "katra3d-versions-"
) -> Iterator[list[Path]]:
    """Each commit as a detached worktree in a new temp dir, removed whatever happens."""
    base = Path(tempfile.mkdtemp(prefix=prefix))
    made: list[Path] = []
    try:
        for i, c in enumerate(commits):
            made.append(add_worktree(top, base / f"{i}-{c.short}", c.sha))
        yield made
    finally:
        for tree in made:
            remove_worktree(top, tree)
        shutil.rmtree(base, ignore_errors=True)


__all__ = ["COUNT_FRAMES", "default_command", "resolve_measure", "worktrees"]
