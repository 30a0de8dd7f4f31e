"""A counted run into a file system too full for its trace is refused before it counts, in one line
that names the file (a small tmpfs; skipped where mounting is not allowed)."""

from __future__ import annotations

import shutil
import subprocess
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.cli_helpers import katra


@pytest.fixture
def full_dir(tmp_path: Path) -> Iterator[Path]:
    where = tmp_path / "small"
    where.mkdir()
    mounted = subprocess.run(
        ["mount", "-t", "tmpfs", "-o", "size=64k", "tmpfs", str(where)], capture_output=True
    )
    if mounted.returncode != 0:
        pytest.skip(f"cannot mount a tmpfs here: {mounted.stderr.decode().strip()}")
    try:
        yield where
    finally:
        subprocess.run(["umount", str(where)], check=True)


@pytest.mark.skipif(shutil.which("valgrind") is None, reason="a counted run needs valgrind")
def test_a_counted_run_into_a_full_disk_is_refused_before_it_counts(full_dir: Path) -> None:
    out = full_dir / "t.katra"
    proc = katra("run", "triangle", "--measure", "instructions", "--frames", "2", "-o", str(out))
    assert proc.returncode == 2 and proc.stderr.count("\n") == 1, proc.stderr
    assert f"cannot write '{out}': " in proc.stderr and "(ENOSPC)" in proc.stderr
    assert "Traceback" not in proc.stderr and list(full_dir.iterdir()) == []
