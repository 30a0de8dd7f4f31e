"""Test helpers for a machine that lacks something: a PATH without some commands."""

from __future__ import annotations

import os
import shutil
from pathlib import Path


def path_without(tmp_path: Path, *names: str) -> str:
    """A PATH of links to every command on PATH except ``names`` (a machine without them)."""
    bindir = tmp_path / ("bin-without-" + "-".join(names))
    bindir.mkdir(exist_ok=True)
    for d in os.environ.get("PATH", "").split(os.pathsep):
        if not d or not os.path.isdir(d):
            continue
        for entry in os.scandir(d):
            link = bindir / entry.name
            if entry.name not in names and not link.exists() and os.access(entry.path, os.X_OK):
                link.symlink_to(entry.path)
    for name in names:
        assert shutil.which(name, path=str(bindir)) is None, name
    return str(bindir)


__all__ = ["path_without"]
