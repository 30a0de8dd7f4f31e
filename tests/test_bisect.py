"""``katra3d bisect``: real bisections over small git repositories made here.

The quick ones commit a counted trace in each revision and capture with ``-c 'cp counted.katra
{out}'`` (what is tested is bisection: the range, worktrees, skips, resume, the rule, bisect.json).
The slow ones capture a user scene file whose render does extra work from a known commit: counted
(instructions, under valgrind) and timed (interleaved rounds against GOOD)."""

from __future__ import annotations

import json
import math
import os
import shutil
import signal
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import pytest

from katra_trace.analysis.bisection import Effect, classify, next_ranges, partial_scenes, shares
from tests.cli_helpers import katra
from tests.env_helpers import path_without
from tests.test_compare_counts import count_trace, wall_trace

HAVE_VALGRIND = shutil.which("valgrind") is not None
needs_valgrind = pytest.mark.skipif(
    not HAVE_VALGRIND, reason="valgrind is not installed (ci/system-deps.sh)"
)
CP = "cp counted.katra {out}"


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


def _repo(
    tmp_path: Path, lighting: list[float | None], name: str = "project"
) -> tuple[Path, list[str]]:
    """A repository with one commit per entry: counted.katra with that lighting work (None: no
    trace, a commit whose capture fails). Returns it and the shas, oldest first."""
    repo = tmp_path / name
    _git(tmp_path, "init", "-q", str(repo))
    shas = []
    for i, work in enumerate(lighting):
        trace = repo / "counted.katra"
        if work is None:
            trace.unlink(missing_ok=True)
        else:
            count_trace(trace, lighting=work)
        (repo / "version.txt").write_text(f"{i}\n")
        _git(repo, "add", "-A")
        _git(repo, "commit", "-q", "-m", f"change {i}")
        shas.append(_git(repo, "rev-parse", "HEAD"))
    return repo, shas


# --- the rule -------------------------------------------------------------------------------------


def _e(
    ratio: float, verdict: str, lo: float | None = None, hi: float | None = None, scene: str = "s"
) -> Effect:
    return Effect(
        scene=scene,
        verdict=verdict,
        ratio=ratio,
        ci_low=lo or ratio * 0.99,
        ci_high=hi or ratio * 1.01,
        reason="",
    )


def test_a_commit_is_like_bad_when_it_regressed_nearer_bad_than_no_change() -> None:
    bad = [_e(1.21, "regression"), _e(1.0, "unchanged", scene="other")]
    assert classify([_e(1.15, "regression")], bad).state == "bad"
    assert classify([_e(1.0, "unchanged")], bad).state == "good"
    # a regression of its own, nearer no change than BAD's: like GOOD (another step), said so
    small = classify([_e(1.05, "regression")], bad)
    assert small.state == "good" and "+5.00%" in small.reason
    # nearer BAD but not a regression by the model (an interval reaching back past the threshold):
    # undecided
    assert classify([_e(1.15, "inconclusive", 0.98, 1.3)], bad).state == "skip"
    # an interval that reaches past half of BAD's change: undecided, never guessed
    assert classify([_e(1.06, "inconclusive", 0.95, 1.2)], bad).state == "skip"
    assert classify([_e(1.0, "incomparable", math.nan, math.nan)], bad).state == "skip"
    assert classify([], bad).state == "skip"
    with pytest.raises(ValueError, match="nothing to classify"):
        classify([_e(1.0, "unchanged")], [_e(1.2, "unchanged")])


def test_a_culprit_that_explains_part_of_bad_points_at_the_rest() -> None:
    bad = [_e(1.21, "regression")]
    whole = shares([_e(1.21, "regression")], None, bad)
    assert whole["s"] == (0.0, pytest.approx(1.0)) and not partial_scenes(whole)
    # 59 % of BAD's log change, the rest after it
    half = shares([_e(1.12, "regression")], None, bad)
    assert set(partial_scenes(half)) == {"s"} and next_ranges(half) == (False, True)
    # 40 % came before its parent
    late = shares([_e(1.21, "regression")], [_e(1.08, "regression")], bad)
    assert set(partial_scenes(late)) == {"s"} and next_ranges(late) == (True, False)
    restored = Effect.from_dict(_e(1.1, "regression", math.nan, 1.2).as_dict())
    assert (
        restored.verdict == "regression" and math.isnan(restored.ci_low) and restored.ci_high == 1.2
    )


# --- quick bisections (committed counted traces) --------------------------------------------------


@needs_valgrind
def test_bisect_finds_the_first_bad_commit_and_steps_around_a_broken_one(tmp_path: Path) -> None:
    # c0 GOOD .. c7 BAD; c3 has no trace (its capture fails), +20 % lighting work from c5
    repo, shas = _repo(tmp_path, [1.0e7, 1.0e7, 1.0e7, None, 1.0e7, 1.2e7, 1.2e7, 1.2e7])
    out = tmp_path / "out"
    r = katra(
        "bisect",
        shas[0][:8],
        "HEAD",
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
    assert (
        result["status"] == "found"
        and result["first_bad"] == shas[5]
        and result["last_good"] == shas[4]
    )
    assert (
        result["first_bad_subject"] == "change 5"
        and not result["partial"]
        and result["next_ranges"] == []
    )
    rows = {(e["scene"], e["zone"]): e for e in result["effect"]}
    assert (
        rows[("shader", "")]["verdict"] == "regression"
        and rows[("shader", "lighting")]["ratio"] == 1.2
    )
    assert rows[("shader", "post")]["verdict"] == "unchanged"
    states = {t["sha"]: t["state"] for t in result["tested"]}
    assert states == {
        shas[0]: "good",
        shas[7]: "bad",
        shas[3]: "skip",
        shas[4]: "good",
        shas[5]: "bad",
    }
    skipped = next(t for t in result["tested"] if t["sha"] == shas[3])
    assert (
        "the capture failed with exit code 1: " in skipped["reason"]
        and "No such file" in skipped["reason"]
    )
    assert f"first bad commit: {shas[5]} change 5" in r.stdout
    assert f"  {shas[3][:10]}: skipped: the capture failed" in r.stdout
    assert (out / "bisect.txt").read_text() == r.stdout
    kept = sorted(p.name for p in (out / "traces").iterdir())
    assert kept == sorted(f"{shas[i][:10]}.katra" for i in (0, 4, 5, 7))
    assert "round 2 (6 commit(s) left" in r.stderr and f"{shas[3][:10]}: skipped" in r.stderr
    assert len(_git(repo, "worktree", "list").splitlines()) == 1  # the worktrees are gone
    # the same output directory again is refused: it holds a bisection (continue it with --resume)
    r = katra("bisect", shas[0], "HEAD", "-c", CP, "-m", "instructions", "-o", str(out), cwd=repo)
    assert r.returncode == 2 and "--resume" in r.stderr and "Traceback" not in r.stderr


@needs_valgrind
def test_a_culprit_explaining_part_of_the_change_names_the_next_range(tmp_path: Path) -> None:
    # two steps: +12 % at c2 (59 % of the log change), +8 % more at c4
    repo, shas = _repo(tmp_path, [1.0e7, 1.0e7, 1.12e7, 1.12e7, 1.21e7])
    out = tmp_path / "out"
    r = katra(
        "bisect",
        shas[0],
        shas[4],
        "-c",
        CP,
        "-m",
        "instructions",
        "-o",
        str(out),
        "--quiet",
        cwd=repo,
    )
    assert r.returncode == 0, r.stdout + r.stderr
    result = json.loads((out / "bisect.json").read_text())
    assert result["first_bad"] == shas[2] and result["partial"]
    assert result["next_ranges"] == [f"{shas[2][:10]}..{shas[4][:10]}"]
    assert 55 < result["explained"]["shader"]["step_pct"] < 65
    assert "explains only part of BAD's change" in r.stdout
    assert f"katra3d bisect {shas[2][:10]} {shas[4][:10]}" in r.stdout
    assert r.stderr == ""


@needs_valgrind
def test_ctrl_c_keeps_the_state_and_resume_measures_nothing_twice(tmp_path: Path) -> None:
    repo, shas = _repo(tmp_path, [1.0e7, 1.0e7, 1.0e7, 1.0e7, 1.3e7, 1.3e7, 1.3e7])
    calls, hold = tmp_path / "calls", tmp_path / "hold"
    hold.touch()
    # every capture is logged once its trace is written (so the trace is whole when the test sees
    # the line); the third one (the first bisection step) then hangs while `hold` exists
    cmd = (
        f"cp counted.katra {{out}}; echo $(git rev-parse HEAD) >> {calls}; "
        f"if [ $(wc -l < {calls}) -ge 3 ] && [ -e {hold} ]; then sleep 120; fi"
    )
    out = tmp_path / "out"
    env = dict(os.environ)
    env.pop("KATRA3D_BACKEND", None)
    proc = subprocess.Popen(
        [
            sys.executable,
            "-m",
            "katra3d",
            "bisect",
            shas[0],
            shas[-1],
            "-c",
            cmd,
            "-m",
            "instructions",
            "--jobs",
            "1",
            "-o",
            str(out),
        ],
        cwd=repo,
        env=env,
        text=True,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        start_new_session=True,
    )
    try:
        for _ in range(600):  # wait (up to a minute) for the hanging capture to start
            if calls.exists() and len(calls.read_text().splitlines()) >= 3:
                break
            time.sleep(0.1)
        os.killpg(proc.pid, signal.SIGINT)  # Ctrl-C in a terminal: the whole foreground group
        stdout, stderr = proc.communicate(timeout=60)
    finally:
        if proc.poll() is None:
            os.killpg(proc.pid, signal.SIGKILL)
            proc.wait()
    assert proc.returncode == 130, stderr
    assert f"continue with 'katra3d bisect --resume {out}'" in stderr and "Traceback" not in stderr
    kept = json.loads((out / "bisect.json").read_text())
    assert kept["status"] == "running" and {t["sha"] for t in kept["tested"]} == {shas[0], shas[-1]}
    assert len(_git(repo, "worktree", "list").splitlines()) == 1
    hold.unlink()
    r = katra("bisect", "--resume", str(out), cwd=repo)
    assert r.returncode == 0, r.stdout + r.stderr
    result = json.loads((out / "bisect.json").read_text())
    assert result["first_bad"] == shas[4] and "resuming" in r.stderr
    captured = calls.read_text().split()
    # the step interrupted had written its trace: used again, so no commit was captured twice
    assert len(captured) == len(set(captured)) == len(result["tested"])
    # GOOD and BAD given again must be the recorded ones
    r = katra("bisect", shas[1], shas[-1], "--resume", str(out), cwd=repo)
    assert r.returncode == 2 and "is not the GOOD of the bisection" in r.stderr


@pytest.mark.slow
@needs_valgrind
def test_bad_input_and_nothing_to_bisect_exit_2(tmp_path: Path) -> None:
    repo, shas = _repo(tmp_path, [1.0e7, 1.0e7, 1.0e7, 1.2e7])
    args = ("-c", CP, "-m", "instructions", "--quiet")
    cases = [
        ((shas[3], shas[0]), "is not an ancestor of BAD"),
        (("HEAD", "HEAD"), "the same commit"),
        (("no-such-rev", "HEAD"), "unknown git revision 'no-such-rev'"),
        ((shas[0], shas[2]), f"nothing to bisect: BAD {shas[2][:10]} is not slower than GOOD"),
    ]
    for i, (revs, message) in enumerate(cases):
        r = katra("bisect", *revs, *args, "-o", str(tmp_path / f"out{i}"), cwd=repo)
        assert r.returncode == 2 and message in r.stderr, (revs, r.stderr)
        assert len(r.stderr.strip().splitlines()) == 1 and "Traceback" not in r.stderr
    assert json.loads((tmp_path / "out3/bisect.json").read_text())["status"] == "nothing to bisect"
    r = katra("bisect", "HEAD~1", "HEAD", *args, cwd=tmp_path)
    assert r.returncode == 2 and "not inside a git repository" in r.stderr
    r = katra(
        "bisect",
        shas[0],
        "HEAD",
        "-c",
        "cp counted.katra out.katra",
        "-m",
        "instructions",
        cwd=repo,
    )
    assert r.returncode == 2 and "must contain {out}" in r.stderr
    r = katra("bisect", shas[0], "HEAD", "-m", "instructions", cwd=repo)
    assert r.returncode == 2 and "give the SCENE(s)" in r.stderr
    r = katra("bisect", "--resume", str(tmp_path), cwd=repo)
    assert r.returncode == 2 and "holds no bisect.json" in r.stderr
    # every commit between GOOD and BAD fails to capture
    broken = f"case $(git rev-parse HEAD) in {shas[0]}|{shas[3]}) {CP};; *) exit 1;; esac"
    r = katra(
        "bisect",
        shas[0],
        shas[3],
        "-c",
        broken,
        "-m",
        "instructions",
        "-o",
        str(tmp_path / "all"),
        cwd=repo,
    )
    assert (
        r.returncode == 2
        and "every commit between GOOD" in r.stderr
        and "was skipped (2)" in r.stderr
    )
    result = json.loads((tmp_path / "all/bisect.json").read_text())
    assert result["status"] == "all skipped" and result["first_bad"] is None
    assert result["candidates"] == shas[1:]
    # a skipped commit just before the first bad one: no single first bad commit, the two candidates
    # named
    gap, g = _repo(tmp_path, [1.0e7, 1.0e7, None, 1.2e7, 1.2e7], name="gap")
    r = katra("bisect", g[0], g[4], *args, "-o", str(tmp_path / "gap-out"), cwd=gap)
    assert (
        r.returncode == 2
        and f"the first bad commit is one of 2: {g[2][:10]}, {g[3][:10]}" in r.stderr
    )
    result = json.loads((tmp_path / "gap-out/bisect.json").read_text())
    assert (
        result["status"] == "ambiguous"
        and result["candidates"] == g[2:4]
        and result["last_good"] == g[1]
    )


def test_time_mode_takes_rounds_against_good_until_the_sequential_rule_decides(
    tmp_path: Path,
) -> None:
    """Each commit holds six timed runs (2 % frame noise, seeded by commit and round); the capture
    of round r copies run r. +20 % frame time from c2: every commit is decided before the cap of 6
    rounds."""
    repo = tmp_path / "timed"
    _git(tmp_path, "init", "-q", str(repo))
    shas = []
    for i, frame_ms in enumerate([10.0, 10.0, 12.0, 12.0]):
        for r in range(1, 7):
            wall_trace(
                repo / f"timed-{r:03d}.katra", frame_ms=frame_ms, ref_ms=None, seed=10 * i + r
            )
        _git(repo, "add", "-A")
        _git(repo, "commit", "-q", "-m", f"timed {i}")
        shas.append(_git(repo, "rev-parse", "HEAD"))
    cmd = "r=$(basename {out} .katra); cp timed-${r#*-}.katra {out}"
    out = tmp_path / "out"
    r = katra(
        "bisect",
        shas[0],
        shas[3],
        "-c",
        cmd,
        "-m",
        "time",
        "--max-rounds",
        "6",
        "-o",
        str(out),
        cwd=repo,
    )
    assert r.returncode == 0, r.stdout + r.stderr
    result = json.loads((out / "bisect.json").read_text())
    assert result["first_bad"] == shas[2] and result["last_good"] == shas[1]
    tested = {t["sha"]: t for t in result["tested"]}
    for sha in shas[1:]:
        assert 3 <= tested[sha]["rounds"] < 6 and tested[sha]["stopped"].startswith(
            "decided after"
        ), tested[sha]
        n = tested[sha]["rounds"]
        assert tested[sha]["traces"] == [f"traces/{sha[:10]}/ab.json"] + [
            f"traces/{sha[:10]}/{side}/run-{k:03d}.katra"
            for side in ("base", "new")
            for k in range(1, n + 1)
        ]
    # each commit's rounds are an ab directory: compare gives the verdict bisect used, by the
    # recorded rule
    c = katra("compare", str(out / "traces" / shas[2][:10]), "--format", "json")
    assert c.returncode == 1 and json.loads(c.stdout)["scenes"]["shader"]["reason"].startswith(
        "sequential:"
    )
    assert tested[shas[0]]["traces"] == [] and tested[shas[1]]["state"] == "good"
    culprit = {e["scene"]: e for e in result["effect"]}["shader"]
    assert culprit["verdict"] == "regression" and culprit["reason"].startswith("sequential:")
    assert 1.18 < culprit["ratio"] < 1.22 and culprit["metric"] == "wall"
    r = katra(
        "bisect",
        shas[0],
        shas[3],
        "-c",
        cmd,
        "-m",
        "time",
        "--max-rounds",
        "2",
        "-o",
        str(tmp_path / "o2"),
        cwd=repo,
    )
    assert r.returncode == 2 and "--max-rounds is the cap" in r.stderr


def test_missing_tools_exit_3(tmp_path: Path) -> None:
    repo, shas = _repo(tmp_path, [1.0e7, 1.2e7])
    r = katra(
        "bisect",
        shas[0],
        shas[1],
        "-c",
        CP,
        "-m",
        "instructions",
        env={"PATH": path_without(tmp_path, "valgrind")},
        cwd=repo,
    )
    assert r.returncode == 3 and "apt-get install -y valgrind" in r.stderr
    r = katra(
        "bisect",
        shas[0],
        shas[1],
        "-c",
        CP,
        "-m",
        "time",
        env={"PATH": path_without(tmp_path, "git")},
        cwd=repo,
    )
    assert r.returncode == 3 and "needs git" in r.stderr and "Traceback" not in r.stderr


# --- real captures of a scene that gets slower at a known commit
# ------------------------------------

_SCENE = '''
from katra3d.scenes.builtin.clear import ClearScene

EXTRA = {extra}
TINT = {tint}


class Slow(ClearScene):
    """The user's scene: from some commit on, its render does more Python work (and, where TINT,
    draws a grey square over its bands)."""

    name = "slow"

    def render(self, frame):
        super().render(frame)
        if TINT:
            self.target.clear(0.5, 0.5, 0.5, 1.0, viewport=(0, 0, 4, 4))
        with frame.zone("extra"):
            for _ in range(EXTRA):
                sum(range(1000))
'''


def _scene_repo(
    tmp_path: Path, versions: list[int], tinted: int | None = None
) -> tuple[Path, list[str]]:
    """One commit per entry of ``versions`` (the extra work a frame); from commit ``tinted`` on, the
    picture changes too."""
    repo = tmp_path / "game"
    _git(tmp_path, "init", "-q", str(repo))
    shas = []
    for i, v in enumerate(versions):
        (repo / "scene.py").write_text(
            _SCENE.format(extra=v, tint=tinted is not None and i >= tinted)
        )
        (repo / "notes.txt").write_text(f"version {i}\n")
        _git(repo, "add", "-A")
        _git(repo, "commit", "-q", "-m", f"scene v{i}")
        shas.append(_git(repo, "rev-parse", "HEAD"))
    return repo, shas


@pytest.mark.gl
@pytest.mark.slow
@needs_valgrind
def test_counted_bisection_of_a_scene(tmp_path: Path, gl_ctx: Any) -> None:
    """Two commits after GOOD; the first does 20x1000 more loop steps a frame: GOOD and BAD captured
    at once under valgrind (round 1), then the one step (round 2). The last (BAD) also changes the
    picture: its image verdict says so, the culprit's says identical."""
    repo, shas = _scene_repo(tmp_path, [0, 20, 20], tinted=2)
    out = tmp_path / "out"
    r = katra(
        "bisect",
        shas[0],
        shas[2],
        "scene.py:Slow",
        "-m",
        "instructions",
        "--jobs",
        "2",
        "-a",
        "--frames 2 --warmup 1 --size 16x16 --zones",
        "-o",
        str(out),
        cwd=repo,
    )
    assert r.returncode == 0, r.stdout + r.stderr
    result = json.loads((out / "bisect.json").read_text())
    assert result["first_bad"] == shas[1]
    assert {t["sha"]: t["round"] for t in result["tested"]} == {shas[0]: 1, shas[2]: 1, shas[1]: 2}
    rows = {(e["scene"], e["zone"]): e for e in result["effect"]}
    assert (
        rows[("slow", "")]["verdict"] == "regression"
        and rows[("slow", "")]["metric"] == "instructions"
    )
    assert rows[("slow", "extra")]["verdict"] == "regression" and rows[("slow", "")]["ratio"] > 2
    assert "slow / extra" in r.stdout
    tested = {t["sha"]: t for t in result["tested"]}
    assert tested[shas[1]]["images"]["slow"].startswith("image identical"), tested[shas[1]]
    assert tested[shas[2]]["images"]["slow"].startswith("image changed: FLIP mean"), tested[shas[2]]
    assert "slow: image identical" in r.stdout  # the culprit's own line in the report


@pytest.mark.gl
@pytest.mark.slow
def test_timed_bisection_of_a_scene(tmp_path: Path, gl_ctx: Any) -> None:
    """Time: interleaved rounds against GOOD; BAD's frames do 16x the Python work, compared on the
    process's CPU time per frame (a busy machine stretches wall time: 16x16 frames of GOOD varied 3x
    round to round, and even CPU time by half; three rounds at alpha 0.01 need a step well beyond
    that). The commit like GOOD must show its interval below halfway to BAD: with a cap of 3 rounds
    the last look's t interval (2 degrees of freedom) was wider than that in a full suite run, so
    the cap is 6 and the rule stops when it knows."""
    repo, shas = _scene_repo(tmp_path, [50, 50, 800])
    out = tmp_path / "out"
    r = katra(
        "bisect",
        shas[0],
        shas[2],
        "scene.py:Slow",
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
    result = json.loads((out / "bisect.json").read_text())
    assert result["first_bad"] == shas[2] and result["last_good"] == shas[1]
    tested = {t["sha"]: t for t in result["tested"]}
    rounds = tested[shas[1]]["rounds"]
    # the rule's first look is at round 3
    assert tested[shas[1]]["state"] == "good" and 3 <= rounds <= 6
    assert result["effect"][0]["metric"] == "process" and result["effect"][0]["ratio"] > 2
    assert len(list((out / "traces" / shas[1][:10] / "base").glob("run-*.katra"))) == rounds


# --- what bisect never does: write over the user's files, leave worktrees, .part files or processes
# -----------


def test_bisect_writes_into_a_new_or_empty_directory_only(tmp_path: Path) -> None:
    """An -o holding the user's bisect.txt and traces/<short>/mine.txt: bisect replaced the first
    and removed the second (rmtree), exit 0. Now it is refused before anything runs, and `-o .` in a
    repository too."""
    repo, shas = _repo(tmp_path, [1.0e7, 1.2e7])
    out = tmp_path / "mine"
    (out / "traces" / shas[1][:10]).mkdir(parents=True)
    (out / "bisect.txt").write_text("my notes\n")
    (out / "traces" / shas[1][:10] / "mine.txt").write_text("mine\n")
    r = katra("bisect", shas[0], shas[1], "-c", CP, "-m", "time", "-o", str(out), cwd=repo)
    assert r.returncode == 2 and "is not empty and holds no bisection (bisect.json)" in r.stderr, (
        r.stderr
    )
    assert (out / "bisect.txt").read_text() == "my notes\n"
    assert (out / "traces" / shas[1][:10] / "mine.txt").read_text() == "mine\n"
    r = katra("bisect", shas[0], shas[1], "-c", CP, "-m", "time", "-o", ".", cwd=repo)
    assert r.returncode == 2 and "is not empty" in r.stderr and not (repo / "bisect.txt").exists()


def test_an_unrecorded_time_measurement_is_cleared_of_bisects_files_only(tmp_path: Path) -> None:
    from katra3d.harness.bisect.measure import _clear_unrecorded
    from katra_trace.errors import ConfigError

    folder = tmp_path / "traces" / "abc"
    for side in ("base", "new"):
        (folder / side).mkdir(parents=True)
        (folder / side / "run-001.katra").write_bytes(b"x")
    _clear_unrecorded(folder)  # killed before ab.json was written: the rounds' traces go
    assert not list(folder.rglob("*.katra"))
    (folder / "base" / "run-001.katra").write_bytes(b"x")
    (folder / "base" / "mine.txt").write_text("mine\n")
    with pytest.raises(ConfigError, match="mine.txt.* is not bisect's: nothing was removed"):
        _clear_unrecorded(folder)
    assert (folder / "base" / "mine.txt").read_text() == "mine\n"


@needs_valgrind
def test_a_sigkilled_bisect_resumes_and_removes_what_it_left(tmp_path: Path) -> None:
    """SIGKILL of bisect while a capture hangs: its worktrees stayed registered, the capture's child
    ran on, and --resume then failed on the capture's own .part. Now the direct capture process dies
    with bisect (PDEATHSIG) and --resume removes the rest: worktrees, .part files, processes still
    writing into DIR."""
    repo, shas = _repo(tmp_path, [1.0e7, 1.0e7, 1.0e7, 1.0e7, 1.3e7, 1.3e7, 1.3e7])
    calls, hold, pid = tmp_path / "calls", tmp_path / "hold", tmp_path / "pid"
    hold.touch()
    # the third capture (the first step) leaves a .part and a child that would write on, then hangs
    cmd = (
        f"echo x >> {calls}; if [ $(wc -l < {calls}) -ge 3 ] && [ -e {hold} ]; then echo torn > "
        f"{{out}}.part; "
        f"sleep 300 & echo $! > {pid}; wait; fi; cp counted.katra {{out}}"
    )
    out = tmp_path / "out"
    env = {k: v for k, v in os.environ.items() if k != "KATRA3D_BACKEND"}
    proc = subprocess.Popen(
        [
            sys.executable,
            "-m",
            "katra3d",
            "bisect",
            shas[0],
            shas[-1],
            "-c",
            cmd,
            "-m",
            "instructions",
            "--jobs",
            "1",
            "-o",
            str(out),
        ],
        cwd=repo,
        env=env,
        text=True,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    try:
        for _ in range(600):  # wait (up to a minute) for the hanging capture to start
            if pid.exists() and pid.read_text().strip():
                break
            time.sleep(0.1)
        proc.kill()
        proc.wait()
        left = int(pid.read_text())
        # the capture's child outlived bisect (only the direct child gets PDEATHSIG)
        os.kill(left, 0)
        assert len(_git(repo, "worktree", "list").splitlines()) > 1 and list(
            out.glob("traces/*.katra.part")
        )
        hold.unlink()
        r = katra("bisect", "--resume", str(out), cwd=repo)
    finally:
        if proc.poll() is None:
            proc.kill()
    assert r.returncode == 0, r.stdout + r.stderr
    # GOOD's worktree (kept for the whole bisection) and the step's
    assert (
        "removed what a killed bisection left: 2 worktree(s), 1 .part file(s), 1 capture "
        "process(es)" in r.stderr
    ), r.stderr
    assert json.loads((out / "bisect.json").read_text())["first_bad"] == shas[4]
    assert len(_git(repo, "worktree", "list").splitlines()) == 1 and not list(out.rglob("*.part"))
    for _ in range(300):  # the leftover is killed: gone once its new parent has reaped it
        try:
            os.kill(left, 0)
        except ProcessLookupError:
            break
        with open(f"/proc/{left}/stat", encoding="ascii") as f:
            if f.read().rsplit(")", 1)[1].split()[0] == "Z":
                break
        time.sleep(0.1)
    else:
        raise AssertionError(f"the capture's leftover child {left} still runs")
