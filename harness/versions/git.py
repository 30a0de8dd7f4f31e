"""git for capturing versions: revisions, first-parent range, worktrees (git run as a child).

Missing git is ToolUnavailable (exit 3); a bad revision or range is ConfigError (exit 2)."""

from __future__ import annotations

import dataclasses
import shutil
import subprocess
from collections.abc import Iterator, Mapping
from pathlib import Path

from katra_trace.errors import ConfigError, ToolUnavailable
from katra_trace.text import shown

SHORT = 10


@dataclasses.dataclass(frozen=True)
class Commit:
    sha: str
    subject: str

    @property
    def short(self) -> str:
        return self.sha[:SHORT]


def _git(top: Path | None, *args: str, check: bool = True) -> subprocess.CompletedProcess[str]:
    git = shutil.which("git")
    if git is None:
        raise ToolUnavailable(
            "katra3d needs git here, which is not on PATH; install it: apt-get install -y git"
        )
    cmd = [git, *(("-C", str(top)) if top is not None else ()), *args]
    try:
        proc = subprocess.run(
            cmd, capture_output=True, text=True, stdin=subprocess.DEVNULL, check=False
        )
    except OSError as exc:
        raise ToolUnavailable(f"git at {git} does not run: {exc}") from None
    if check and proc.returncode != 0:
        last = (proc.stderr.strip().splitlines() or ["(no message)"])[-1]
        raise ConfigError(f"git {' '.join(args[:2])} failed in {shown(str(top))}: {last}")
    return proc


def toplevel(cwd: Path) -> Path:
    """ConfigError outside a work tree."""
    proc = _git(cwd, "rev-parse", "--show-toplevel", check=False)
    if proc.returncode != 0 or not proc.stdout.strip():
        raise ConfigError(
            f"not inside a git repository ({shown(str(cwd))}): run katra3d in the repository "
            "whose revisions it captures"
        )
    return Path(proc.stdout.strip())


def resolve(top: Path, rev: str) -> Commit:
    if not rev or rev.startswith("-"):
        raise ConfigError(f"unknown git revision {rev!r} in {shown(str(top))}")
    proc = _git(top, "rev-parse", "--verify", "--quiet", f"{rev}^{{commit}}", check=False)
    if proc.returncode != 0:
        raise ConfigError(f"unknown git revision {rev!r} in {shown(str(top))}")
    return commit(top, proc.stdout.strip())


def commit(top: Path, sha: str) -> Commit:
    subject = _git(top, "log", "-1", "--format=%s", sha).stdout.strip()
    return Commit(sha, subject)


def is_ancestor(top: Path, older: str, newer: str) -> bool:
    proc = _git(top, "merge-base", "--is-ancestor", older, newer, check=False)
    if proc.returncode not in (0, 1):
        raise ConfigError(f"git merge-base failed in {shown(str(top))}: {proc.stderr.strip()}")
    return proc.returncode == 0


def commit_range(top: Path, good: Commit, bad: Commit) -> list[Commit]:
    """The commits after GOOD up to BAD on BAD's first-parent line, oldest first; ConfigError
    unless GOOD is on that line."""
    if good.sha == bad.sha:
        raise ConfigError(f"GOOD and BAD are the same commit ({good.short}): nothing to bisect")
    if not is_ancestor(top, good.sha, bad.sha):
        raise ConfigError(
            f"GOOD {good.short} is not an ancestor of BAD {bad.short}: give an older GOOD "
            "(git merge-base GOOD BAD names a common one)"
        )
    shas = _git(
        top, "rev-list", "--reverse", "--first-parent", "--ancestry-path", f"{good.sha}..{bad.sha}"
    ).stdout.split()
    if (
        not shas
        or shas[-1] != bad.sha
        or _git(top, "rev-parse", f"{shas[0]}^").stdout.strip() != good.sha
    ):
        raise ConfigError(
            f"no first-parent line runs from GOOD {good.short} to BAD {bad.short} (GOOD is on a "
            "merged branch): give a GOOD on BAD's first-parent history"
        )
    subjects = _git(top, "log", "--no-walk=unsorted", "--format=%H %s", *shas).stdout.splitlines()
    named = {sha: subject for sha, _, subject in (line.partition(" ") for line in subjects)}
    return [Commit(sha, named.get(sha, "")) for sha in shas]


class FirstParentOrder(Mapping[str, int]):
    """Commit (sha, short sha or ref) -> its place on HEAD's first-parent line, oldest first;
    git runs once for the line and once per commit asked."""

    def __init__(self, top: Path) -> None:
        self.top = top
        self._line: dict[str, int] | None = None
        self._asked: dict[str, int | None] = {}

    def _positions(self) -> dict[str, int]:
        if self._line is None:
            shas = _git(
                self.top, "rev-list", "--first-parent", "--reverse", "HEAD", check=False
            ).stdout.split()
            self._line = {sha: i for i, sha in enumerate(shas)}
        return self._line

    def _place(self, commit: str) -> int | None:
        if commit not in self._asked:
            proc = (
                _git(
                    self.top,
                    "rev-parse",
                    "--verify",
                    "--quiet",
                    f"{commit}^{{commit}}",
                    check=False,
                )
                if commit and not commit.startswith("-")
                else None
            )
            sha = proc.stdout.strip() if proc is not None and proc.returncode == 0 else ""
            self._asked[commit] = self._positions().get(sha)
        return self._asked[commit]

    def __getitem__(self, commit: str) -> int:
        place = self._place(commit)
        if place is None:
            raise KeyError(commit)
        return place

    def __contains__(self, commit: object) -> bool:
        return isinstance(commit, str) and self._place(commit) is not None

    def __iter__(self) -> Iterator[str]:
        return iter(self._positions())

    def __len__(self) -> int:
        return len(self._positions())


def first_parent_order(cwd: Path) -> FirstParentOrder | None:
    """None outside a repository or without git."""
    try:
        return FirstParentOrder(toplevel(cwd))
    except (ConfigError, ToolUnavailable):
        return None


def add_worktree(top: Path, where: Path, sha: str) -> Path:
    where.parent.mkdir(parents=True, exist_ok=True)
    _git(top, "worktree", "add", "--quiet", "--detach", "--force", str(where), sha)
    return where


def remove_worktree(top: Path, where: Path) -> None:
    """Remove a worktree whatever its state; never raises for it."""
    _git(top, "worktree", "remove", "--force", "--force", str(where), check=False)
    if where.exists():
        shutil.rmtree(where, ignore_errors=True)
    _git(top, "worktree", "prune", check=False)


__all__ = [
    "SHORT",
    "Commit",
    "FirstParentOrder",
    "add_worktree",
    "commit",
    "commit_range",
    "first_parent_order",
    "is_ancestor",
    "remove_worktree",
    "resolve",
    "toplevel",
]
