"""What a capture of versions runs, decided once for ``ab --refs``, ``bisect`` and
``ci/compare-versions.sh``: the measure (``-m``: ``auto`` is instructions when valgrind is on PATH,
else time) and the default capture command (this katra3d's ``run``, with ``--measure WHAT --frames
10`` for counts), and worktrees of two revisions for as long as their captures run."""

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

#: Measured frames of the default counted capture: counts are exact, so few frames are evidence.
COUNT_FRAMES = 10
#: ``python -P``: the working directory (a worktree) is not put first on the import path, so that a
#: project file such as ``random.py`` cannot hide the standard library from katra3d (Python 3.11+).
SAFE_PATH = ("-P",) if sys.version_info >= (3, 11) else ()


def resolve_measure(measure: str) -> str:
    """``-m``: instructions, cycles or time; ``auto`` is instructions when valgrind is on PATH, else
    time. Instructions or cycles without valgrind: ToolUnavailable (exit 3) with the install line.
    """
    if measure == "auto":
        return "instructions" if shutil.which("valgrind") else "time"
    if measure not in MEASURES:
        raise ConfigError(f"-m takes instructions, cycles, time or auto, got {measure!r}")
    if is_count(measure):
        find_valgrind()
    return measure


def default_command(what: Sequence[str], measure: str, run_args: str = "") -> str:
    """``katra3d run WHAT --quiet`` (this katra3d, as ``python -P -m katra3d``; WHAT: scenes, or
    ``--suite ci``) with the measure and ``run_args`` appended, writing ``{out}``; counted runs
    measure :data:`COUNT_FRAMES` frames unless ``run_args`` says otherwise (its options come last
    and win)."""
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
    """Each commit checked out, detached, as a worktree in a new temporary directory, for the
    duration; the worktrees and the directory are removed whatever happens (an error, Ctrl-C)."""
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
