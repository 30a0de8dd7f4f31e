"""No dump directory outlives its owner: its name carries the owner's PID and every counted run
first removes those whose owner is gone."""

from __future__ import annotations

import os
import re
import shutil
import tempfile
from pathlib import Path

#: Fixed-width PID: the child runs in the directory, and its path's length moves counts.
DUMP_PREFIX = "katra3d-callgrind-"
_PID_WIDTH = 10


def make_dump_dir(prefix: str = DUMP_PREFIX, where: str | None = None) -> Path:
    return Path(tempfile.mkdtemp(prefix=f"{prefix}{os.getpid():0{_PID_WIDTH}d}-", dir=where))


def owner_pid(path: Path, prefix: str = DUMP_PREFIX) -> int | None:
    match = re.fullmatch(re.escape(prefix) + rf"(\d{{{_PID_WIDTH}}})-[^/]+", path.name)
    return int(match.group(1)) if match else None


def alive(pid: int) -> bool:
    """Whether process ``pid`` exists (another user's counts as alive)."""
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True


def remove_stale_dump_dirs(where: Path | None = None, prefix: str = DUMP_PREFIX) -> list[Path]:
    """Remove and return the ``prefix`` directories in ``where`` whose owner is gone."""
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
