"""ci/bench.sh and ci/compare-versions.sh, end to end on llvmpipe (small sizes, few frames)."""

from __future__ import annotations

import json
import os
import shlex
import shutil
import subprocess
import sys
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from katra_trace import Clock, Flag, Kind
from katra_trace.schema import EVENT_DTYPE
from tests.env_helpers import path_without
from tests.trace_helpers import write_trace

REPO = Path(__file__).resolve().parent.parent
KATRA = f"{shlex.quote(sys.executable)} -m katra3d"
TINY = "--frames 8 --warmup 1 --size 32x32"
HAVE_VALGRIND = shutil.which("valgrind") is not None
#: one scene, counted: two frames of `clear` at 16x16 (about a minute under valgrind on 2 busy
#: cores)
COUNTED = "clear --frames 2 --warmup 1 --size 16x16 --param clear.bands={bands}"


def _sh(
    *args: str, cwd: Path, env: dict[str, str] | None = None, timeout: float = 300
) -> subprocess.CompletedProcess[str]:
    full = dict(os.environ, KATRA3D=KATRA, PYTHONPATH=str(REPO))
    full.pop("GITHUB_STEP_SUMMARY", None)
    full.update(env or {})
    return subprocess.run(
        ["bash", *args], cwd=cwd, env=full, capture_output=True, text=True, timeout=timeout
    )


def test_scripts_parse() -> None:
    for script in ("bench.sh", "compare-versions.sh"):
        r = subprocess.run(
            ["bash", "-n", str(REPO / "ci" / script)], capture_output=True, text=True
        )
        assert r.returncode == 0, r.stderr


def test_bench_usage_errors(tmp_path: Path) -> None:
    r = _sh(str(REPO / "ci/bench.sh"), "--frobnicate", cwd=tmp_path)
    assert r.returncode == 2 and "unknown option" in r.stderr
    r = _sh(str(REPO / "ci/bench.sh"), "-n", "x", cwd=tmp_path)
    assert r.returncode == 2 and "whole number" in r.stderr
    r = _sh(str(REPO / "ci/bench.sh"), cwd=tmp_path, env={"KATRA3D": "/nonexistent/katra3d"})
    assert r.returncode == 3 and "does not run" in r.stderr
    r = _sh(str(REPO / "ci/bench.sh"), "-m", "wall", cwd=tmp_path)
    assert r.returncode == 2 and "-m takes auto, instructions, cycles or time" in r.stderr
    r = _sh(str(REPO / "ci/bench.sh"), "-m", "time", "-s", "", cwd=tmp_path)
    assert r.returncode == 2 and "needs the scenes in -a" in r.stderr
    r = _sh(
        str(REPO / "ci/bench.sh"),
        "-m",
        "instructions",
        "-o",
        "out",
        cwd=tmp_path,
        env={"PATH": path_without(tmp_path, "valgrind")},
    )
    assert r.returncode == 3 and "apt-get install -y valgrind" in r.stderr
    assert not (tmp_path / "out").exists()


CODEGEN = {
    "cpu_model": "Other CPU 9000",
    "cpu_flags_sha": "0123456789abcdef",
    "machine": "x86_64",
    "renderer": "llvmpipe (LLVM 99.0.0, 256 bits)",
    "mesa": "99.0.0",
    "llvm": "99.0.0",
    "vector_bits": 256,
    "lp_native_vector_width": "256",
}


def _count_trace(
    path: Path,
    *,
    per_frame: int,
    scene: str = "clear",
    codegen: dict[str, Any] | None = None,
    frames: int = 3,
) -> Path:
    """An instructions-mode trace as the capture writes it: FRAME counts on Clock.INSTRUCTIONS (the
    first frame warmup), the measure mode in capture_options and the codegen facts in host_info."""
    rows = [
        (
            Kind.FRAME,
            Clock.INSTRUCTIONS,
            Flag.WARMUP if i == 0 else 0,
            0,
            1,
            2,
            i,
            i,
            per_frame * (2 if i == 0 else 1) + i % 2,
            0.0,
        )
        for i in range(frames)
    ]
    header = {
        "workload": scene,
        "capture_options": {
            "size": [16, 16],
            "samples": 0,
            "timing_mode": "instructions",
            "primary_clock": "instructions",
            "params": {},
            "measure": {"mode": "instructions", "valgrind": "3.19.0"},
        },
        "host_info": {
            "gl": {
                "renderer": "llvmpipe (LLVM 99.0.0, 256 bits)",
                "driver": {"name": "Mesa", "version": "99.0.0"},
            },
            "codegen": dict(CODEGEN if codegen is None else codegen),
        },
    }
    path.parent.mkdir(parents=True, exist_ok=True)
    write_trace(path, np.array(rows, dtype=EVENT_DTYPE), ["", scene, "frame"], header=header)
    return path


@pytest.mark.gl
@pytest.mark.slow
def test_bench_records_then_compares_with_baseline(tmp_path: Path, gl_ctx: object) -> None:
    summary = tmp_path / "step-summary.md"
    env = {"GITHUB_STEP_SUMMARY": str(summary)}
    bench = str(REPO / "ci/bench.sh")
    # -m auto on a runner without valgrind measures time
    r = _sh(
        bench,
        "-o",
        "base",
        "-n",
        "1",
        "-a",
        TINY,
        cwd=tmp_path,
        env={**env, "PATH": path_without(tmp_path, "valgrind")},
    )
    assert r.returncode == 0, r.stderr
    assert (tmp_path / "base/run-01.katra").is_file()
    # stats' compact table: the run's primary clock in the heading, a row per scene
    assert "no baseline" in summary.read_text() and "frame times, wall clock" in summary.read_text()
    assert "\n| fillrate | " in summary.read_text()
    # a huge threshold: this exercises the comparison path, not the machine's noise
    r = _sh(
        bench,
        "-m",
        "time",
        "-o",
        "new",
        "-b",
        "base",
        "-n",
        "1",
        "-a",
        TINY,
        "--",
        "--threshold",
        "500",
        cwd=tmp_path,
        env=env,
    )
    assert r.returncode == 0, r.stdout + r.stderr
    text = summary.read_text()
    assert (
        "vs baseline" in text
        and "| fillrate |" in text
        and "regression" not in text.split("vs baseline")[1]
    )
    # a baseline captured at another size is incomparable: exit 2, said in the summary
    r = _sh(
        bench,
        "-m",
        "time",
        "-o",
        "other",
        "-b",
        "base",
        "-n",
        "1",
        "-a",
        "--frames 8 --warmup 1 --size 48x32",
        cwd=tmp_path,
        env=env,
    )
    assert r.returncode == 2, r.stdout + r.stderr
    assert "different size: BASE 32x32 vs NEW 48x32" in summary.read_text()
    # a baseline of instruction counts does not gate a timed run: recorded, flagged, exit 0
    _count_trace(tmp_path / "counted/run-01.katra", per_frame=300_000)
    r = _sh(
        bench,
        "-m",
        "time",
        "-o",
        "timed",
        "-b",
        "counted",
        "-n",
        "1",
        "-a",
        TINY,
        cwd=tmp_path,
        env=env,
    )
    assert r.returncode == 0, r.stdout + r.stderr
    assert (
        "measured as 'instructions', this run as 'time'"
        in (tmp_path / "timed/measure-mismatch").read_text()
    )
    assert "measure-mismatch" in (tmp_path / "timed/summary.md").read_text().splitlines()
    assert not (tmp_path / "timed/compare.md").exists()
    # an output directory that already holds traces is refused
    r = _sh(bench, "-m", "time", "-o", "base", "-n", "1", "-a", TINY, cwd=tmp_path)
    assert r.returncode == 2 and "already holds traces" in r.stderr


@pytest.mark.gl
@pytest.mark.slow
def test_bench_gates_on_instructions_unless_the_codegen_differs(
    tmp_path: Path, gl_ctx: object
) -> None:
    """Two counted captures: one against a baseline from another code generator (not used: notice,
    marker, exit 0), then a param step against that capture (regression, exit 1)."""
    if not HAVE_VALGRIND:
        pytest.skip("valgrind is not installed (ci/system-deps.sh test installs it)")
    bench = str(REPO / "ci/bench.sh")
    summary = tmp_path / "step-summary.md"
    env = {"GITHUB_STEP_SUMMARY": str(summary)}
    _count_trace(tmp_path / "other-runner/run-01.katra", per_frame=300_000)
    r = _sh(
        bench,
        "-m",
        "instructions",
        "-s",
        "",
        "-a",
        COUNTED.format(bands=4),
        "-o",
        "here",
        "-b",
        "other-runner",
        cwd=tmp_path,
        env=env,
    )
    assert r.returncode == 0, r.stdout + r.stderr
    assert "NOTICE: the baseline's code generator differs" in r.stderr
    marker = (tmp_path / "here/codegen-mismatch").read_text()
    assert (
        "cpu_model: baseline 'Other CPU 9000' -> this runner" in marker
        and "llvm: baseline '99.0.0'" in marker
    )
    text = (tmp_path / "here/summary.md").read_text()
    assert (
        "codegen-mismatch" in text.splitlines()
        and "instructions" in text
        and "\n| clear | 2 | " in text
    )
    assert text in summary.read_text() and not (tmp_path / "here/compare.md").exists()
    assert len(list((tmp_path / "here").glob("*.katra"))) == 1  # counts: one run by default
    # the same runner, one more band cleared per frame: a regression in one run a side
    r = _sh(
        bench,
        "-m",
        "instructions",
        "-s",
        "",
        "-a",
        COUNTED.format(bands=5),
        "-o",
        "head",
        "-b",
        "here",
        "--",
        "--allow-param-mismatch",
        cwd=tmp_path,
        env=env,
    )
    assert r.returncode == 1, r.stdout + r.stderr
    assert "REGRESSION" in r.stderr and not (tmp_path / "head/codegen-mismatch").exists()
    text = (tmp_path / "head/summary.md").read_text()
    assert "vs baseline" in text and "(instructions count, threshold 0.5%" in text
    assert "| clear | regression |" in text and "| 1/1 |" in text


_SCENE = '''
from katra3d.scenes.builtin.fillrate import FillrateScene

REPEAT = {repeat}


class UserFill(FillrateScene):
    """The user's renderer: version 2 draws the layers {repeat} times."""

    name = "userfill"

    def render(self, frame):
        for _ in range(REPEAT):
            super().render(frame)
'''


def _git(repo: Path, *args: str) -> str:
    r = subprocess.run(
        [
            "git",
            "-C",
            str(repo),
            "-c",
            "user.name=t",
            "-c",
            "user.email=t@example.invalid",
            "-c",
            "commit.gpgsign=false",
            *args,
        ],
        capture_output=True,
        text=True,
        check=True,
    )
    return r.stdout.strip()


@pytest.mark.gl
@pytest.mark.slow
def test_compare_versions_finds_a_slower_revision(tmp_path: Path, gl_ctx: object) -> None:
    repo = tmp_path / "project"
    repo.mkdir()
    _git(repo, "init", "-q")
    (repo / "scene.py").write_text(_SCENE.format(repeat=1))
    _git(repo, "add", "scene.py")
    _git(repo, "commit", "-q", "-m", "v1")
    (repo / "scene.py").write_text(_SCENE.format(repeat=4))
    _git(repo, "commit", "-q", "-am", "v2: 4x the fill work")
    cmd = (
        f"{KATRA} run scene.py:UserFill --frames 15 --warmup 2 --size 64x64 --param "
        "userfill.layers=2 "
        f"--quiet -o {{out}}"
    )
    script = str(REPO / "ci/compare-versions.sh")
    # process CPU time: a 4x step of the scene's work, judged on what the process used, not on wall
    # time that a busy machine (the rest of the suite on two cores) stretched by 112 % round to
    # round in one failed run
    r = _sh(
        script,
        "-r",
        "6",
        "-o",
        str(tmp_path / "out"),
        "-c",
        cmd,
        "HEAD~1",
        "HEAD",
        "--",
        "--format",
        "json",
        "--metric",
        "process",
        cwd=repo,
    )
    assert r.returncode == 1, r.stdout + r.stderr
    scene = json.loads(r.stdout)["scenes"]["userfill"]
    assert scene["verdict"] == "regression" and scene["unit"] == "rounds" and scene["runs_new"] == 6
    assert scene["ratio"] > 1.3, scene
    assert len(list((tmp_path / "out/base").glob("*.katra"))) == 6
    assert len(_git(repo, "worktree", "list").splitlines()) == 1  # the temporary worktrees are gone
    r = _sh(script, "-c", cmd, "HEAD", "no-such-ref", cwd=repo)
    assert r.returncode == 2 and "unknown git revision 'no-such-ref'" in r.stderr


def test_compare_versions_counts_need_one_round(tmp_path: Path) -> None:
    """-m instructions: one round a side by default and --metric instructions for the comparison.
    Each revision's capture command copies the counted trace committed in it (no valgrind needed:
    what is tested is the script's plumbing; tests/test_measure.py counts for real)."""
    if not HAVE_VALGRIND:
        pytest.skip("valgrind is not installed (ci/system-deps.sh test installs it)")
    repo = tmp_path / "project"
    _git(tmp_path, "init", "-q", str(repo))
    codegen = dict(CODEGEN, cpu_model="Test CPU")
    _count_trace(repo / "counted.katra", per_frame=1_000_000, codegen=codegen)
    _git(repo, "add", "counted.katra")
    _git(repo, "commit", "-q", "-m", "v1")
    _count_trace(repo / "counted.katra", per_frame=1_012_000, codegen=codegen)  # +1.2 % work
    _git(repo, "commit", "-q", "-am", "v2")
    script = str(REPO / "ci/compare-versions.sh")
    r = _sh(
        script,
        "-m",
        "instructions",
        "-o",
        str(tmp_path / "out"),
        "-c",
        "cp counted.katra {out}",
        "HEAD~1",
        "HEAD",
        "--",
        "--format",
        "json",
        cwd=repo,
    )
    assert r.returncode == 1, r.stdout + r.stderr
    result = json.loads(r.stdout)
    row = result["scenes"]["clear"]
    assert result["metric"] == "instructions" and row["verdict"] == "regression", row
    assert row["runs_base"] == 1 and row["runs_new"] == 1 and 1.011 < row["ratio"] < 1.013
    assert len(list((tmp_path / "out/base").glob("*.katra"))) == 1
    assert "1 rounds, instructions" in r.stderr
    # counts are refused without valgrind (exit 3), and an unknown measure is bad input (exit 2)
    r = _sh(
        script,
        "-m",
        "instructions",
        "-c",
        "cp counted.katra {out}",
        "HEAD~1",
        "HEAD",
        cwd=repo,
        env={"PATH": path_without(tmp_path, "valgrind")},
    )
    assert r.returncode == 3 and "apt-get install -y valgrind" in r.stderr
    r = _sh(script, "--measure", "frames", "HEAD~1", "HEAD", cwd=repo)
    assert r.returncode == 2 and "-m takes instructions, cycles, time or auto" in r.stderr


def test_example_workflow_uses_what_the_scripts_provide() -> None:
    """The example workflow (documentation, not this repository's CI) branches on files bench.sh
    writes and passes options the scripts take; its YAML was checked with a YAML parser by hand."""
    workflow = (REPO / "ci/github-actions.yml").read_text()
    bench = (REPO / "ci/bench.sh").read_text()
    versions = (REPO / "ci/compare-versions.sh").read_text()
    assert "\t" not in workflow and workflow.startswith("# Example GitHub Actions workflow")
    for marker in ("codegen-mismatch", "measure-mismatch"):
        assert f"'bench-traces/{marker}'" in workflow
        assert f'"$out/{marker}"' in bench
    assert "bash ci/bench.sh -m auto " in workflow and "-m) measure=" in bench
    assert "valgrind" in workflow.split("apt-get install", 1)[1].splitlines()[0]
    assert (
        "bash ci/compare-versions.sh -m instructions " in workflow
        and "-m|--measure) measure=" in versions
    )
