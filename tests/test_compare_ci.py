"""ci/bench.sh and ci/compare-versions.sh, end to end on llvmpipe (small sizes, few frames)."""

from __future__ import annotations

import json
import os
import shlex
import subprocess
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parent.parent
KATRA = f"{shlex.quote(sys.executable)} -m harness"
TINY = "--frames 8 --warmup 1 --size 32x32"


def _sh(*args: str, cwd: Path, env: dict[str, str] | None = None, timeout: float = 300) -> subprocess.CompletedProcess[str]:
    full = dict(os.environ, KATRA3D=KATRA, PYTHONPATH=str(REPO))
    full.pop("GITHUB_STEP_SUMMARY", None)
    full.update(env or {})
    return subprocess.run(["bash", *args], cwd=cwd, env=full, capture_output=True, text=True, timeout=timeout)


def test_scripts_parse() -> None:
    for script in ("bench.sh", "compare-versions.sh"):
        r = subprocess.run(["bash", "-n", str(REPO / "ci" / script)], capture_output=True, text=True)
        assert r.returncode == 0, r.stderr


def test_bench_usage_errors(tmp_path: Path) -> None:
    r = _sh(str(REPO / "ci/bench.sh"), "--frobnicate", cwd=tmp_path)
    assert r.returncode == 2 and "unknown option" in r.stderr
    r = _sh(str(REPO / "ci/bench.sh"), "-n", "x", cwd=tmp_path)
    assert r.returncode == 2 and "whole number" in r.stderr
    r = _sh(str(REPO / "ci/bench.sh"), cwd=tmp_path, env={"KATRA3D": "/nonexistent/katra3d"})
    assert r.returncode == 3 and "does not run" in r.stderr


@pytest.mark.gl
def test_bench_records_then_compares_with_baseline(tmp_path: Path, gl_ctx: object) -> None:
    summary = tmp_path / "step-summary.md"
    env = {"GITHUB_STEP_SUMMARY": str(summary)}
    bench = str(REPO / "ci/bench.sh")
    r = _sh(bench, "-o", "base", "-n", "1", "-a", TINY, cwd=tmp_path, env=env)
    assert r.returncode == 0, r.stderr
    assert (tmp_path / "base/run-01.katra").is_file()
    assert "no baseline" in summary.read_text() and "| fillrate | wall |" in summary.read_text()
    # a huge threshold: this exercises the comparison path, not the machine's noise
    r = _sh(bench, "-o", "new", "-b", "base", "-n", "1", "-a", TINY, "--", "--threshold", "500",
            cwd=tmp_path, env=env)
    assert r.returncode == 0, r.stdout + r.stderr
    text = summary.read_text()
    assert "vs baseline" in text and "| fillrate |" in text and "regression" not in text.split("vs baseline")[1]
    # a baseline captured at another size is incomparable: exit 2, said in the summary
    r = _sh(bench, "-o", "other", "-b", "base", "-n", "1", "-a", "--frames 8 --warmup 1 --size 48x32",
            cwd=tmp_path, env=env)
    assert r.returncode == 2, r.stdout + r.stderr
    assert "different size: BASE 32x32 vs NEW 48x32" in summary.read_text()
    # an output directory that already holds traces is refused
    r = _sh(bench, "-o", "base", "-n", "1", "-a", TINY, cwd=tmp_path)
    assert r.returncode == 2 and "already holds traces" in r.stderr


_SCENE = '''
from scenes.builtin.fillrate import FillrateScene

REPEAT = {repeat}


class UserFill(FillrateScene):
    """The user's renderer: version 2 draws the layers {repeat} times."""

    name = "userfill"

    def render(self, frame):
        for _ in range(REPEAT):
            super().render(frame)
'''


def _git(repo: Path, *args: str) -> str:
    r = subprocess.run(["git", "-C", str(repo), "-c", "user.name=t", "-c", "user.email=t@example.invalid",
                        "-c", "commit.gpgsign=false", *args], capture_output=True, text=True, check=True)
    return r.stdout.strip()


@pytest.mark.gl
def test_compare_versions_finds_a_slower_revision(tmp_path: Path, gl_ctx: object) -> None:
    repo = tmp_path / "project"
    repo.mkdir()
    _git(repo, "init", "-q")
    (repo / "scene.py").write_text(_SCENE.format(repeat=1))
    _git(repo, "add", "scene.py")
    _git(repo, "commit", "-q", "-m", "v1")
    (repo / "scene.py").write_text(_SCENE.format(repeat=4))
    _git(repo, "commit", "-q", "-am", "v2: 4x the fill work")
    cmd = f"{KATRA} run scene.py:UserFill --frames 15 --warmup 2 --size 64x64 --param userfill.layers=2 --quiet -o {{out}}"
    script = str(REPO / "ci/compare-versions.sh")
    r = _sh(script, "-r", "6", "-o", str(tmp_path / "out"), "-c", cmd, "HEAD~1", "HEAD", "--", "--format", "json",
            cwd=repo)
    assert r.returncode == 1, r.stdout + r.stderr
    scene = json.loads(r.stdout)["scenes"]["userfill"]
    assert scene["verdict"] == "regression" and scene["unit"] == "rounds" and scene["runs_new"] == 6
    assert scene["ratio"] > 1.3, scene
    assert len(list((tmp_path / "out/base").glob("*.katra"))) == 6
    assert len(_git(repo, "worktree", "list").splitlines()) == 1  # the temporary worktrees are gone
    r = _sh(script, "-c", cmd, "HEAD", "no-such-ref", cwd=repo)
    assert r.returncode == 2 and "unknown git revision 'no-such-ref'" in r.stderr
