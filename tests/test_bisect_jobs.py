"""``katra3d bisect --jobs N``: counted bisection measures up to N commits a round at once (a k-ary
search), names the same commit as one at a time in fewer rounds, records each commit's round, stops
every capture on Ctrl-C and resumes; time stays one commit at a time.

The repositories are test_bisect's: a counted trace committed in each revision, captured with ``cp``
(what is tested is the search and its parallel captures, not valgrind)."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from katra_trace.analysis.bisection import open_range, probes, rounds_left
from tests.cli_helpers import katra
from tests.test_bisect import CP, _git, _repo, needs_valgrind


def _search(n_commits: int, culprit: int, jobs: int) -> tuple[int, int, int]:
    """Bisect ``n_commits`` after GOOD whose first bad one is ``culprit`` with ``jobs`` probes a
    round, as bisect does (round 1: GOOD and BAD): (the first bad commit found, rounds, commits
    measured after GOOD and BAD)."""
    states = [""] * n_commits
    states[-1] = "bad"
    rounds, measured = 1, 0
    while batch := probes(states, jobs):
        rounds += 1
        measured += len(batch)
        for i in batch:
            states[i] = "bad" if i >= culprit else "good"
    return open_range(states)[1], rounds, measured


def test_k_probes_a_round_split_the_range_into_k_plus_1_parts() -> None:
    # 16 commits after GOOD, the culprit anywhere: one at a time is halving (5 rounds, 4 steps), two
    # at a time needs 4 rounds, GOOD and BAD included
    for jobs, most_rounds in ((1, 5), (2, 4), (3, 3), (4, 3)):
        found = [_search(16, c, jobs) for c in range(16)]
        assert [f[0] for f in found] == list(range(16)), jobs
        assert max(f[1] for f in found) == most_rounds, jobs
    assert max(_search(16, c, 1)[2] for c in range(16)) == 4
    assert probes(["", "", "", "", "", "bad"], 2) == [1, 3] and probes(
        ["", "", "", "", "", "bad"], 1
    ) == [2]
    # skipped and measured commits are stepped around; fewer left than probes: all of them
    assert probes(["good", "skip", "", "", "bad", "bad"], 2) == [2, 3]
    assert probes(["good", "", "skip", "", "", "", "", "bad"], 2) == [3, 5]
    assert probes(["good", "bad"], 3) == [] and probes(["", "", "bad"], 5) == [0, 1]
    assert [rounds_left(15, 1), rounds_left(15, 2), rounds_left(1, 2), rounds_left(0, 2)] == [
        4,
        3,
        1,
        0,
    ]
    with pytest.raises(ValueError, match="at least 1"):
        probes(["", "bad"], 0)


def _bisect(repo: Path, shas: list[str], out: Path, *jobs: str) -> tuple[dict[str, object], str]:
    r = katra(
        "bisect", shas[0], shas[-1], "-c", CP, "-m", "instructions", *jobs, "-o", str(out), cwd=repo
    )
    assert r.returncode == 0, r.stdout + r.stderr
    return json.loads((out / "bisect.json").read_text()), r.stderr


@pytest.mark.slow
@needs_valgrind
def test_two_commits_a_round_find_the_same_commit_in_at_most_4_rounds(tmp_path: Path) -> None:
    """16 commits after GOOD, +20 % lighting work from c6 (a culprit the 2-at-a-time search needs
    all 4 rounds for): the same first bad commit as one at a time, which takes 5 rounds."""
    repo, shas = _repo(tmp_path, [1.0e7] * 6 + [1.2e7] * 11)
    serial, _ = _bisect(repo, shas, tmp_path / "serial", "--jobs", "1")
    parallel, progress = _bisect(repo, shas, tmp_path / "parallel", "--jobs", "2")
    assert (
        serial["first_bad"] == parallel["first_bad"] == shas[6] and parallel["last_good"] == shas[5]
    )
    rounds: dict[int, list[str]] = {}
    for t in parallel["tested"]:  # type: ignore[attr-defined]
        rounds.setdefault(t["round"], []).append(t["sha"])
    assert sorted(rounds[1]) == sorted([shas[0], shas[-1]])  # GOOD and BAD together
    assert sorted(rounds) == [1, 2, 3, 4] and all(len(v) <= 2 for v in rounds.values())
    assert [t["round"] for t in serial["tested"]] == [1, 1, 2, 3, 4, 5]  # type: ignore[index]
    # progress names each commit as its capture starts, and each round's commits
    assert "round 2 (15 commit(s) left, about 3 round(s)): 2 commits at once: " in progress
    assert all(
        f"  {sha[:10]} change {shas.index(sha)}: capturing (instructions)" in progress
        for shas_round in rounds.values()
        for sha in shas_round
    )
    assert ", instructions, up to 2 commit(s) measured at once (--jobs); output in " in progress
    table = (tmp_path / "parallel" / "bisect.txt").read_text()
    assert "round  captures" in table and f"  {shas[6][:10]}  bad " in table
    # with three at once, round 1 measures a commit of the range beside GOOD and BAD (classified
    # once BAD is)
    three, _ = _bisect(repo, shas, tmp_path / "three", "--jobs", "3")
    assert three["first_bad"] == shas[6]
    assert len([t for t in three["tested"] if t["round"] == 1]) == 3  # type: ignore[attr-defined]
    assert max(t["round"] for t in three["tested"]) <= 3  # type: ignore[attr-defined]


def _gone(pid: int) -> bool:
    for _ in range(300):  # a deadline (30 s) to be reaped, not a timing check
        try:
            os.kill(pid, 0)
        except ProcessLookupError:
            return True
        with open(f"/proc/{pid}/stat", encoding="ascii") as f:
            if f.read().rsplit(")", 1)[1].split()[0] == "Z":
                return True
        time.sleep(0.1)
    return False


@needs_valgrind
def test_ctrl_c_stops_every_capture_of_a_round_and_resume_finishes(tmp_path: Path) -> None:
    """Both captures of round 2 hang at once (which only captures side by side can do); Ctrl-C stops
    both groups, keeps GOOD and BAD, and --resume finishes without capturing a commit twice."""
    repo, shas = _repo(tmp_path, [1.0e7] * 4 + [1.3e7] * 5)
    calls, hold, pids = tmp_path / "calls", tmp_path / "hold", tmp_path / "pids"
    hold.touch()
    cmd = (
        f"cp counted.katra {{out}}; echo $(git rev-parse HEAD) >> {calls}; "
        f"if [ $(wc -l < {calls}) -ge 3 ] && [ -e {hold} ]; then sleep 120 & echo $! >> {pids}; "
        "wait; fi"
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
            "2",
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
        for _ in range(600):  # wait (up to a minute) for both captures of round 2 to hang
            if pids.exists() and len(pids.read_text().split()) == 2:
                break
            time.sleep(0.1)
        held = [int(p) for p in pids.read_text().split()]
        assert len(held) == 2
        for pid in held:
            os.kill(pid, 0)  # both hang at once
        # Ctrl-C in a terminal: the foreground group (the captures have theirs)
        os.killpg(proc.pid, signal.SIGINT)
        stdout, stderr = proc.communicate(timeout=60)
    finally:
        if proc.poll() is None:
            os.killpg(proc.pid, signal.SIGKILL)
            proc.wait()
    assert proc.returncode == 130, stderr
    assert f"continue with 'katra3d bisect --resume {out}'" in stderr and "Traceback" not in stderr
    assert all(_gone(p) for p in held)  # each capture's whole group was stopped
    kept = json.loads((out / "bisect.json").read_text())
    assert kept["status"] == "running" and {t["sha"] for t in kept["tested"]} == {shas[0], shas[-1]}
    assert len(_git(repo, "worktree", "list").splitlines()) == 1
    hold.unlink()
    r = katra("bisect", "--resume", str(out), "--jobs", "2", cwd=repo)
    assert r.returncode == 0, r.stdout + r.stderr
    result = json.loads((out / "bisect.json").read_text())
    assert result["first_bad"] == shas[4] and min(t["round"] for t in result["tested"][2:]) == 2
    captured = calls.read_text().split()
    # the two stopped had written their traces before they hung: used again, so no commit was
    # captured twice
    assert len(captured) == len(set(captured)) == len(result["tested"])


@needs_valgrind
def test_time_stays_one_commit_at_a_time(tmp_path: Path) -> None:
    repo, shas = _repo(tmp_path, [1.0e7, 1.2e7])
    r = katra(
        "bisect",
        shas[0],
        shas[1],
        "-c",
        CP,
        "-m",
        "time",
        "--jobs",
        "2",
        "-o",
        str(tmp_path / "t"),
        cwd=repo,
    )
    assert r.returncode == 2 and "a time bisection measures one commit at a time" in r.stderr
    assert len(r.stderr.strip().splitlines()) == 1 and not (tmp_path / "t").exists()
    # the one check of --jobs (harness/run/jobs.py), worded for commits: run's says scenes
    for given, said in (
        ("0", "bad --jobs 0: must be >= 1 (how many commits are measured at once)"),
        ("x", "bad --jobs 'x': expected a whole number, how many commits are measured at once"),
    ):
        r = katra(
            "bisect", shas[0], shas[1], "-c", CP, "-m", "instructions", "--jobs", given, cwd=repo
        )
        assert r.returncode == 2 and r.stderr.strip() == f"katra3d: error: {said}", r.stderr


def test_captures_side_by_side_are_stopped_together_and_a_later_one_at_once(tmp_path: Path) -> None:
    """The capture service under bisect's pool: two captures run as jobs of one supervisor,
    stopped while both hang: each ends in Interrupted once its whole group is gone (the pool leaves
    it out); one started after the stop raises Interrupted too, and the supervisor leaves the signal
    handlers as it found them."""
    from katra3d.harness.supervisor import Supervisor
    from katra3d.harness.versions.command import CaptureCommand, run_capture
    from katra_trace.errors import Interrupted

    def capture(i: int) -> float:
        command = CaptureCommand(f"sleep 60 & echo $! > {tmp_path}/sleep-{i}; wait; touch {{out}}")
        return run_capture(command, tmp_path / f"out-{i}.katra")

    marks = [tmp_path / f"sleep-{i}" for i in range(2)]
    deadline = time.monotonic() + 60  # a deadline for both to hang, not a timing check
    sleeps: list[int] = []

    def stop_once_both_hang() -> None:
        if sup.received:
            return
        if all(m.is_file() and m.read_text().strip() for m in marks):
            sleeps.extend(int(m.read_text()) for m in marks)
            sup.stop(signal.SIGTERM)
        elif time.monotonic() > deadline:
            sup.stop(signal.SIGTERM)

    before = signal.getsignal(signal.SIGINT)
    with Supervisor() as sup:
        tasks = [lambda i=i: capture(i) for i in range(2)]
        assert list(sup.pool(tasks, 2, idle=stop_once_both_hang)) == []
        assert len(sleeps) == 2 and all(_gone(pid) for pid in sleeps)
        with pytest.raises(Interrupted):
            capture(2)
        assert not (tmp_path / "out-2.katra").exists()
    assert signal.getsignal(signal.SIGINT) is before and Supervisor.active is None


def test_a_trace_a_ctrl_c_finished_as_interrupted_is_captured_again_a_complete_one_is_not(
    tmp_path: Path,
) -> None:
    """A Ctrl-C lets a counted capture finish its trace as interrupted (the capture service's
    grace); --resume must not take those frames for the commit's measurement, as it takes a complete
    trace of a capture that had ended before the stop."""
    from types import SimpleNamespace

    from katra3d.harness.bisect.measure import Workspace, _capture
    from katra_trace.io.reader import open_trace
    from katra_trace.io.writer import TraceWriter
    from tests.test_compare_counts import count_trace

    src, calls = count_trace(tmp_path / "src.katra"), tmp_path / "calls"
    ws = Workspace(
        top=tmp_path,
        root=tmp_path,
        trees=tmp_path,
        progress=print,
        setup=SimpleNamespace(command=f"echo run >> {calls}; cp {src} {{out}}"),
    )  # type: ignore[arg-type]
    out, log = tmp_path / "traces" / "abc.katra", tmp_path / "logs" / "abc.log"
    out.parent.mkdir()
    assert open_trace(count_trace(out, frames=2)).status == "complete"
    assert _capture(ws, tmp_path, out, log) == "" and not calls.exists()  # complete: used again
    out.unlink()
    w = TraceWriter(out, workload="w", capture_options={}, host_info={}, notes="")
    w.finish({"note": "test"}, status="interrupted")
    assert open_trace(out).status == "interrupted"
    # interrupted: captured again
    assert _capture(ws, tmp_path, out, log) == "" and calls.read_text() == "run\n"
    assert out.read_bytes() == src.read_bytes()
