"""No dump directory outlives its owner.

A counted child dies with its parent (:func:`katra3d.harness.supervisor.spawn`); a killed child
cannot remove its dump directory, and neither can a killed parent, so the directory's name carries
its owner's PID (:func:`make_dump_dir`) and every counted run first removes the dump directories
whose owner is gone (:func:`remove_stale_dump_dirs`).
"""

from __future__ import annotations

import os
import re
import shutil
import tempfile
from pathlib import Path

#: How a dump directory's name starts; the owner's PID follows in a fixed width (the child runs in
#: the directory, and the length of its path must not vary: it shifts the process's memory, see
#: docs/measure.md).
DUMP_PREFIX = "katra3d-callgrind-"
_PID_WIDTH = 10


def make_dump_dir(prefix: str = DUMP_PREFIX, where: str | None = None) -> Path:
    """A new directory in ``where`` (the temporary directory), named ``prefix`` + this process's PID
    (its owner) + a unique part: a counted child's dump directory, or another that
    :func:`remove_stale_dump_dirs` removes once its owner has ended."""
    return Path(tempfile.mkdtemp(prefix=f"{prefix}{os.getpid():0{_PID_WIDTH}d}-", dir=where))


def owner_pid(path: Path, prefix: str = DUMP_PREFIX) -> int | None:
    """The PID of the process that made the directory ``path`` (:func:`make_dump_dir`), or None if
    it is not one.
    """
    match = re.fullmatch(re.escape(prefix) + rf"(\d{{{_PID_WIDTH}}})-[^/]+", path.name)
    return int(match.group(1)) if match else None


def alive(pid: int) -> bool:
    """Whether a process ``pid`` exists (one of another user's counts as alive)."""
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True


def remove_stale_dump_dirs(where: Path | None = None, prefix: str = DUMP_PREFIX) -> list[Path]:
    """Remove the directories ``prefix``... in ``where`` (the temporary directory) whose owner is no
    longer running.

    Returns the ones removed. A directory of a live process, or of a PID now reused by another
    process, stays (it is removed after that one ends); one this user may not remove stays too."""
    base = Path(where or tempfile.gettempdir())
    removed: list[Path] = []
    try:
        entries = list(os.scandir(base))
    except OSError:
        return removed
    for entry in entries:
        pid = owner_pid(Path(entry.name), prefix)
        if (
            pid is None
            or pid == os.getpid()
            or alive(pid)
            or not entry.is_dir(follow_symlinks=False)
        ):
            continue
        shutil.rmtree(entry.path, ignore_errors=True)
        if not os.path.lexists(entry.path):
            removed.append(Path(entry.path))
    return removed


__all__ = [
    "DUMP_PREFIX",
    "alive",
    "make_dump_dir",
    "owner_pid",
    "remove_stale_dump_dirs",
]
