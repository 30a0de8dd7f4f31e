"""``katra3d bisect`` over histories a user makes: a project file that shadows the standard library,
an empty ``-o``, param defaults that change, two steps in one range, time decided against GOOD and
BAD, and image bisection. Small repositories made here; captures copy committed traces (``-c``) or
run a tiny scene for real."""

from __future__ import annotations

import json
import math
import random
import shlex
import subprocess
from pathlib import Path
from typing import Any

import pytest

from katra3d.harness.bisect.measure import in_tree
from katra3d.harness.versions.setup import default_command
from tests.cli_helpers import katra
from tests.test_bisect import CP, _git, _repo, _scene_repo
from tests.test_compare_counts import CODEGEN, count_trace, wall_trace


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


def test_two_steps_in_one_range_are_both_named(tmp_path: Path) -> None:
    """About 11x at c3 and 2x more at c5: the culprit c3 explains most of BAD's change, and the
    second step, which the captures of c3 and a later commit establish, is named too."""
    lighting = [1.0e7, 1.0e7, 1.0e7, 1.5e8, 1.5e8, 3.0e8, 3.0e8]
    repo, shas = _repo(tmp_path, lighting)
    out = tmp_path / "out"
    r = katra(
        "bisect",
        shas[0],
        shas[6],
        "-c",
        CP,
        "-m",
        "instructions",
        "--jobs",
        "1",
        "-o",
        str(out),
        cwd=repo,
    )
    assert r.returncode == 0, r.stdout + r.stderr
    result = json.loads((out / "bisect.json").read_text())
    assert result["first_bad"] == shas[3] and not result["partial"]
    (step,) = result["steps"]
    measured = {t["sha"] for t in result["tested"]}
    if shas[4] in measured:  # c4 and c5 measured: the second culprit itself
        assert step.startswith(f"another first bad commit: {shas[5][:10]} change 5"), step
    else:
        later = next(shas[i] for i in (5, 6) if shas[i] in measured)
        assert f"katra3d bisect {shas[3][:10]} {later[:10]}" in step, step
    assert "shader +" in step and step in r.stdout


def test_time_decides_a_commit_against_good_and_bad(tmp_path: Path) -> None:
    """A 10x step at c2, c1 a no-op; each round's run is 10 % off its commit's level, so "unchanged
    within 5 %" would take many rounds: c1 stops as soon as its interval lies below halfway to
    BAD."""
    repo = tmp_path / "timed"
    _git(tmp_path, "init", "-q", str(repo))
    shas = []
    rng = random.Random(7)
    for i, frame_ms in enumerate([10.0, 10.0, 100.0]):
        for k in range(1, 21):
            level = frame_ms * math.exp(rng.gauss(0, 0.1))
            wall_trace(repo / f"timed-{k:03d}.katra", frame_ms=level, ref_ms=None, seed=100 * i + k)
        _git(repo, "add", "-A")
        _git(repo, "commit", "-q", "-m", f"timed {i}")
        shas.append(_git(repo, "rev-parse", "HEAD"))
    cmd = "r=$(basename {out} .katra); cp timed-${r#*-}.katra {out}"
    out = tmp_path / "out"
    r = katra("bisect", shas[0], shas[2], "-c", cmd, "-m", "time", "-o", str(out), cwd=repo)
    assert r.returncode == 0, r.stdout + r.stderr
    result = json.loads((out / "bisect.json").read_text())
    assert result["first_bad"] == shas[2]
    noop = next(t for t in result["tested"] if t["sha"] == shas[1])
    # BAD's 10x is a regression by the rule at round 6 here; c1, unchanged by no means yet, is
    # decided at once when its interval lies below halfway to BAD (it ran all 20 rounds before)
    bad = next(t for t in result["tested"] if t["sha"] == shas[2])
    assert noop["state"] == "good" and noop["rounds"] <= bad["rounds"] + 1, (noop, bad)
    assert noop["stopped"].startswith(
        f"decided after {noop['rounds']} of at most 20 rounds: like GOOD"
    )
    good_row = next(line for line in r.stdout.splitlines() if "good (GOOD)" in line)
    assert f" {noop['rounds'] + bad['rounds']} " in good_row, good_row


def _params_repo(tmp_path: Path) -> tuple[Path, list[str]]:
    """c2 raises the scene's default ``passes`` from 1 to 2, and with it the lighting work."""
    repo = tmp_path / "params"
    _git(tmp_path, "init", "-q", str(repo))
    shas = []
    for i, passes in enumerate([1, 1, 2, 2]):
        params = {"shader": {"iterations": 48, "passes": passes}}
        count_trace(repo / "counted.katra", lighting=1.0e7 * passes, params=params)
        _git(repo, "add", "-A")
        _git(repo, "commit", "-q", "-m", f"change {i}")
        shas.append(_git(repo, "rev-parse", "HEAD"))
    return repo, shas


def test_a_changed_param_default_is_bisected_and_named(tmp_path: Path) -> None:
    repo, shas = _params_repo(tmp_path)
    out = tmp_path / "out"
    r = katra("bisect", shas[0], shas[3], "-c", CP, "-m", "instructions", "-o", str(out), cwd=repo)
    assert r.returncode == 0, r.stdout + r.stderr
    result = json.loads((out / "bisect.json").read_text())
    assert result["first_bad"] == shas[2]
    said = (
        "shader: params differ: passes 1 -> 2, from the scene's defaults: compared as a change of "
        f"the scene; changed by {shas[2][:10]} change 2"
    )
    assert said in r.stdout and (out / "bisect.txt").read_text() == r.stdout
    # ab --refs runs one command on both sides: compared, and said after its first round
    r = katra(
        "ab",
        "--refs",
        shas[1],
        shas[2],
        "-c",
        CP,
        "-m",
        "instructions",
        "-o",
        str(tmp_path / "ab"),
        cwd=repo,
    )
    assert r.returncode == 1, r.stdout + r.stderr
    assert "passes 1 -> 2, from the scene's defaults: compared as a change" in r.stderr
    assert "round 1/1: capture wall time BASE " in r.stderr


def test_nothing_to_bisect_still_writes_its_report_and_says_why(tmp_path: Path) -> None:
    repo, shas = _params_repo(tmp_path)
    out = tmp_path / "out"
    r = katra("bisect", shas[0], shas[1], "-c", CP, "-m", "instructions", "-o", str(out), cwd=repo)
    assert r.returncode == 2 and "nothing to bisect" in r.stderr
    assert "nothing to bisect" in (out / "bisect.txt").read_text()


def test_ab_stops_after_its_first_round_when_params_differ_otherwise(tmp_path: Path) -> None:
    """Two commands with other --param values: refused after round 1 (not after all 6), naming the
    difference and what to pass."""
    katra(
        "run", "clear", "--frames", "2", "--size", "16x16", "--quiet", "-o", "a.katra", cwd=tmp_path
    )
    base = f"cp {tmp_path / 'a.katra'} {{out}}"
    r = katra(
        "run",
        "clear",
        "--param",
        "clear.bands=8",
        "--frames",
        "2",
        "--size",
        "16x16",
        "--quiet",
        "-o",
        "b.katra",
        cwd=tmp_path,
    )
    assert r.returncode == 0, r.stderr
    new = f"cp {tmp_path / 'b.katra'} {{out}}"
    out = tmp_path / "ab"
    r = katra("ab", "--base", base, "--new", new, "-o", str(out))
    assert r.returncode == 2 and "Traceback" not in r.stderr, r.stderr
    assert "clear: params differ: bands 4 -> 8, given as --param" in r.stderr
    assert "--allow-param-mismatch to compare anyway" in r.stderr
    assert "stopped after round 1 of 6" in r.stderr and len(r.stderr.splitlines()) == 1
    assert sorted(p.name for p in (out / "new").iterdir()) == ["run-001.katra"]


def test_compare_of_an_interrupted_ab_directory_says_so(tmp_path: Path) -> None:
    from katra_trace.io.tracesets import AB_MANIFEST_VERSION, AbManifest, write_ab_manifest

    out = tmp_path / "ab"
    for side in ("base", "new"):
        (out / side).mkdir(parents=True)
    manifest = {
        "katra3d_ab": AB_MANIFEST_VERSION,
        "base_dir": "base",
        "new_dir": "new",
        "base_command": "cp a {out}",
        "new_command": "cp b {out}",
        "started": "",
        "rounds": [],
        "interrupted": {"round": 1, "signal": "SIGINT", "traces": {}},
    }
    write_ab_manifest(out, AbManifest.from_json(manifest, out / "ab.json"))
    r = katra("compare", str(out))
    assert r.returncode == 2 and "was interrupted in round 1 (SIGINT), before any round" in r.stderr
    # one complete round, the second interrupted: the complete one is compared, and that is said
    for side, work in (("base", 1.0e7), ("new", 1.2e7)):
        count_trace(out / side / "run-001.katra", lighting=work)
    manifest["rounds"] = [
        {
            "round": 1,
            "order": ["base", "new"],
            "base": "base/run-001.katra",
            "new": "new/run-001.katra",
            "commands": {},
            "seconds": {},
        },
    ]
    manifest["interrupted"] = {"round": 2, "signal": "SIGTERM", "traces": {}}
    write_ab_manifest(out, AbManifest.from_json(manifest, out / "ab.json"))
    r = katra("compare", str(out))
    assert r.returncode == 1, r.stdout + r.stderr
    assert (
        "the A/B run was interrupted in round 2 (SIGTERM): its complete rounds"
        in r.stdout + r.stderr
    )


@pytest.mark.gl
def test_images_bisects_the_first_commit_whose_kept_frame_changed(
    tmp_path: Path, gl_ctx: Any
) -> None:
    """The scene draws a grey square from c2 on; its frame time does not change."""
    repo, shas = _scene_repo(tmp_path, [0, 0, 0, 0], tinted=2)
    out = tmp_path / "out"
    args = ("scene.py:Slow", "-a", "--frames 2 --warmup 1 --size 16x16")
    r = katra("bisect", shas[0], shas[3], *args, "--images", "-o", str(out), cwd=repo)
    assert r.returncode == 0, r.stdout + r.stderr
    result = json.loads((out / "bisect.json").read_text())
    assert result["first_bad"] == shas[2] and result["setup"]["measure"] == "time"
    tested = {t["sha"]: t for t in result["tested"]}
    assert tested[shas[2]]["reason"].startswith("like BAD: slow image changed: FLIP mean")
    assert "kept frames against GOOD's (--images)" in r.stdout
    # an unchanged picture: nothing to bisect, said in one line, the report written
    r = katra("bisect", shas[0], shas[1], *args, "--images", "-o", str(tmp_path / "o2"), cwd=repo)
    assert r.returncode == 2 and "kept frames are not changed" in r.stderr, r.stderr
    assert (tmp_path / "o2" / "bisect.txt").is_file()


def test_a_bad_that_cannot_be_compared_says_why_and_is_not_recorded_good(tmp_path: Path) -> None:
    repo = tmp_path / "llvm"
    _git(tmp_path, "init", "-q", str(repo))
    shas = []
    for i, llvm in enumerate(["15.0.6", "17.0.1"]):
        count_trace(
            repo / "counted.katra", lighting=1.2e7 * (i + 1), codegen={**CODEGEN, "llvm": llvm}
        )
        _git(repo, "add", "-A")
        _git(repo, "commit", "-q", "-m", f"llvm {i}")
        shas.append(_git(repo, "rev-parse", "HEAD"))
    out = tmp_path / "out"
    r = katra("bisect", shas[0], shas[1], "-c", CP, "-m", "instructions", "-o", str(out), cwd=repo)
    assert r.returncode == 2 and "nothing to bisect" in r.stderr
    assert "incomparable (different codegen" in r.stderr and "--allow-codegen-mismatch" in r.stderr
    result = json.loads((out / "bisect.json").read_text())
    assert {t["sha"]: t["state"] for t in result["tested"]}[shas[1]] == "skip"


_PASSES = """from katra3d import Param
from katra3d.scenes.builtin.clear import ClearScene


class Passes(ClearScene):
    name = "passes"
    params = {{**ClearScene.params, "passes": Param({passes}, int, 1, 100, "render passes")}}

    def setup(self, ctx, size, params):
        super().setup(ctx, size, params)
        self.passes = params["passes"]

    def render(self, frame):
        super().render(frame)
        for _ in range(self.passes * 50):
            sum(range(1000))
"""


@pytest.mark.gl
@pytest.mark.slow
def test_a_real_scenes_default_raised_is_bisected_in_time(tmp_path: Path, gl_ctx: Any) -> None:
    """A user scene whose default ``passes`` goes from 1 to 16 at the last commit: real timed
    captures, compared on the process's CPU time (a busy machine stretches wall time)."""
    repo = tmp_path / "game"
    _git(tmp_path, "init", "-q", str(repo))
    shas = []
    for i, passes in enumerate([1, 1, 16]):
        (repo / "scene.py").write_text(_PASSES.format(passes=passes))
        (repo / "notes.txt").write_text(f"{i}\n")
        _git(repo, "add", "-A")
        _git(repo, "commit", "-q", "-m", f"passes {passes}")
        shas.append(_git(repo, "rev-parse", "HEAD"))
    out = tmp_path / "out"
    r = katra(
        "bisect",
        shas[0],
        shas[2],
        "scene.py:Passes",
        "-m",
        "time",
        "--metric",
        "process",
        "--max-rounds",
        "6",
        "-a",
        "--frames 20 --warmup 1 --size 16x16",
        "-o",
        str(out),
        cwd=repo,
    )
    assert r.returncode == 0, r.stdout + r.stderr
    assert json.loads((out / "bisect.json").read_text())["first_bad"] == shas[2]
    assert (
        "passes: params differ: passes 1 -> 16, from the scene's defaults: compared as a change "
        f"of the scene; changed by {shas[2][:10]} passes 16"
    ) in r.stdout
