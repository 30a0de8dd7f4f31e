"""What installing katra3d puts on the import path: one name, ``katra3d`` (harness/ and scenes/
mapped under it), and ``katra_trace``; never a generic top-level ``harness`` or ``scenes`` that a
user's repository may have too."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import zipfile
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
#: The folders of the repository and the import names they are installed as.
MAPPED = {
    "katra3d": "katra3d",
    "harness": "katra3d.harness",
    "scenes": "katra3d.scenes",
    "katra_trace": "katra_trace",
}


def test_harness_and_scenes_resolve_under_katra3d_on_disk() -> None:
    """katra3d/harness and katra3d/scenes are links to the folders at the top, so a tool that
    follows ``katra3d.harness.x`` to a path finds the file, and no package list is kept by hand."""
    for folder in ("harness", "scenes"):
        link = REPO / "katra3d" / folder
        assert link.is_symlink() and link.resolve() == REPO / folder
    assert "package-dir" not in (REPO / "pyproject.toml").read_text(encoding="utf-8")


def test_the_wheel_holds_katra3d_and_katra_trace_only(tmp_path: Path) -> None:
    src = tmp_path / "src"
    files = subprocess.run(
        ["git", "ls-files", "-z"], cwd=REPO, capture_output=True, check=True
    ).stdout
    for name in files.decode().split("\0"):
        if name and (REPO / name).is_symlink():
            (src / name).parent.mkdir(parents=True, exist_ok=True)
            (src / name).symlink_to(os.readlink(REPO / name))
        elif name and (REPO / name).is_file():
            (src / name).parent.mkdir(parents=True, exist_ok=True)
            shutil.copy2(REPO / name, src / name)
    r = subprocess.run(
        [
            sys.executable,
            "-m",
            "pip",
            "wheel",
            "--no-deps",
            "--no-build-isolation",
            "-q",
            "-w",
            str(tmp_path / "dist"),
            str(src),
        ],
        capture_output=True,
        text=True,
    )
    assert r.returncode == 0, r.stdout + r.stderr
    (wheel,) = (tmp_path / "dist").glob("katra3d-*.whl")
    names = zipfile.ZipFile(wheel).namelist()
    assert {n.split("/")[0] for n in names} == {
        "katra3d",
        "katra_trace",
        wheel.name.split("-py")[0] + ".dist-info",
    }
    sources = {
        "/".join([*MAPPED[p.parts[0]].split("."), *p.parts[1:]])
        for p in (Path(n) for n in files.decode().split("\0") if n.endswith((".py", "py.typed")))
        if p.parts[0] in MAPPED
    }
    assert sources <= set(names), sorted(sources - set(names))
    entry_points = (
        zipfile.ZipFile(wheel)
        .read(f"{wheel.name.split('-py')[0]}.dist-info/entry_points.txt")
        .decode()
    )
    assert "katra3d = katra3d.harness.cli:main" in entry_points
    assert "katra3d = katra3d.harness.pytest_plugin" in entry_points


def test_the_installed_package_has_no_generic_top_level_module(tmp_path: Path) -> None:
    """From a directory of the user's, katra3d's code is found under katra3d only (the editable
    install maps it the same way as the wheel)."""
    code = (
        "import importlib.util as u, katra3d.harness, katra3d.scenes.api; "
        "print([n for n in ('harness', 'scenes') if u.find_spec(n)], katra3d.harness.__file__, "
        "katra3d.scenes.api.__file__)"
    )
    out = subprocess.run(
        [sys.executable, "-c", code], cwd=tmp_path, capture_output=True, text=True, check=True
    )
    found, harness, api = out.stdout.split()
    assert found == "[]"
    assert Path(harness).resolve() == REPO / "harness" / "__init__.py"
    assert Path(api).resolve() == REPO / "scenes" / "api.py"
