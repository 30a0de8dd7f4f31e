"""``ab --force`` (:func:`katra_trace.io.tracesets.clear_ab_dir`) after a Ctrl-C: it removes what
ab's captures left, a killed capture's ``.part`` too, but never the ``.part`` a live capture is
still writing."""

from __future__ import annotations

import fcntl
import json
import os
from pathlib import Path

import pytest

from katra_trace.errors import ConfigError
from katra_trace.io.tracesets import AB_MANIFEST, AB_MANIFEST_VERSION, clear_ab_dir


def _ab_dir(root: Path) -> Path:
    for side in ("base", "new"):
        (root / side).mkdir(parents=True)
    (root / AB_MANIFEST).write_text(json.dumps({"katra3d_ab": AB_MANIFEST_VERSION, "rounds": []}))
    (root / "base" / "run-001.katra").write_bytes(b"a finished round's trace")
    (root / "new" / "run-001.katra.part").write_bytes(b"a killed capture's prefix")
    return root


def test_force_removes_a_killed_captures_part(tmp_path: Path) -> None:
    root = _ab_dir(tmp_path / "ab")
    (root / "notes.txt").write_text("the user's\n")
    assert clear_ab_dir(root) == 2
    assert sorted(str(p.relative_to(root)) for p in root.rglob("*")) == ["base", "new", "notes.txt"]


def test_force_leaves_everything_while_a_capture_still_writes_its_part(tmp_path: Path) -> None:
    root = _ab_dir(tmp_path / "ab")
    part = root / "new" / "run-001.katra.part"
    fd = os.open(part, os.O_RDWR)
    try:
        # as a live writer holds it (katra_trace/io/claim.py)
        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        with pytest.raises(ConfigError, match="a capture is still writing"):
            clear_ab_dir(root)
    finally:
        os.close(fd)
    assert (
        part.is_file()
        and (root / "base" / "run-001.katra").is_file()
        and (root / AB_MANIFEST).is_file()
    )
    assert clear_ab_dir(root) == 2  # once its writer is gone


def test_force_leaves_a_part_of_another_name(tmp_path: Path) -> None:
    root = _ab_dir(tmp_path / "ab")
    (root / "base" / "mine.katra.part").write_bytes(b"not ab's")
    with pytest.raises(ConfigError, match="which katra3d ab did not write"):
        clear_ab_dir(root)
    assert (root / "new" / "run-001.katra.part").is_file()
