"""``katra3d bisect`` over histories a user makes: a project file that shadows the standard library,
an empty ``-o``, param defaults that change, two steps in one range, time decided against GOOD and
BAD, and image bisection. Small repositories made here; captures copy committed traces (``-c``) or
run a tiny scene for real."""

from __future__ import annotations

import shlex
import subprocess
from pathlib import Path

from katra3d.harness.bisect.measure import in_tree
from katra3d.harness.versions.setup import default_command
from tests.cli_helpers import katra
from tests.test_bisect import CP, _repo


def test_an_empty_output_directory_is_refused_in_one_line(tmp_path: Path) -> None:
    repo, shas = _repo(tmp_path, [1.0e7, 1.2e7])
    r = katra("bisect", shas[0], shas[1], "-c", CP, "-m", "time", "-o", "", cwd=repo)
    assert r.returncode == 2 and "empty -o path" in r.stderr, r.stderr
    assert len(r.stderr.strip().splitlines()) == 1
    assert sorted(p.name for p in repo.iterdir()) == [".git", "counted.katra", "version.txt"]


def test_a_project_file_named_like_a_standard_module_hides_nothing(tmp_path: Path) -> None:
    """A worktree with its own ``random.py``: the capture is run there, and katra3d still imports
    the standard library's (the worktree is not first on the import path)."""
    tree = tmp_path / "tree"
    tree.mkdir()
    (tree / "random.py").write_text("raise ImportError('the project file, not the stdlib')\n")
    command = in_tree(default_command(("clear",), "time", "--frames 2 --size 16x16"), tree)
    assert command.cwd == tree and command.pythonpath is None
    out = tmp_path / "clear.katra"
    text = command.template.replace("{out}", shlex.quote(str(out)))
    r = subprocess.run(text, shell=True, cwd=tree, capture_output=True, text=True, check=False)
    assert r.returncode == 0 and out.is_file(), r.stderr
