"""``katra3d ab --until-decided``: bad options, the stop and its record in ab.json, ``compare DIR``
agreeing; with synthetic captures (tests/test_compare_cli.py's writer) and with real llvmpipe ones.
"""

from __future__ import annotations

import json
import shlex
import sys
from pathlib import Path

import pytest

from tests.test_compare_cli import _writer_cmd


def test_bad_options_are_one_line_errors(tmp_path: Path, katra_cli) -> None:
    for rounds, message in (
        ("2", "--rounds with --until-decided is the cap and must be from 3 to 200, got 2"),
        ("201", "must be from 3 to 200, got 201"),
    ):
        r = katra_cli(
            "ab",
            "--base",
            "true {out}",
            "--new",
            "true {out}",
            "--until-decided",
            "--rounds",
            rounds,
            "-o",
            str(tmp_path / "x"),
        )
        assert r.returncode == 2 and message in r.stderr and "Traceback" not in r.stderr
        assert len(r.stderr.strip().splitlines()) == 1 and not (tmp_path / "x").exists()
    r = katra_cli(
        "ab", "--base", "true {out}", "--new", "true {out}", "--until-decided", "--alpha", "0.7"
    )
    assert r.returncode == 2 and "--alpha must be between 0 and 0.5" in r.stderr


@pytest.mark.slow
def test_stops_when_decided_records_the_rule_and_compare_agrees(tmp_path: Path, katra_cli) -> None:
    """NEW's mesh is 30 % slower, fill the same; run-to-run spread ~1.4 %, threshold 20 %: planned
    for 6 rounds, the rule has spent too little alpha at round 3 (the interval is wider than +-40 %)
    and decides both scenes at round 4 or 5."""
    out = tmp_path / "ab"
    r = katra_cli(
        "ab",
        "--base",
        _writer_cmd(tmp_path, 1.0),
        "--new",
        _writer_cmd(tmp_path, 1.3),
        "--until-decided",
        "--rounds",
        "6",
        "--threshold",
        "20",
        "-o",
        str(out),
        "--format",
        "json",
        timeout=300,
    )
    assert r.returncode == 1, r.stdout + r.stderr
    result = json.loads(r.stdout)
    stop = result["sequential"]["stop"]
    assert stop["decided"] is True and 4 <= stop["rounds"] < 6 and stop["undecided"] == []
    assert {k: v["verdict"] for k, v in result["scenes"].items()} == {
        "fill": "unchanged",
        "mesh": "regression",
    }
    assert all(
        v["reason"].startswith("sequential: ") and v["runs_base"] == stop["rounds"]
        for v in result["scenes"].values()
    )
    # one line says how many rounds and why; the round lines name what is still undecided
    stopped = [line for line in r.stderr.splitlines() if line.startswith("katra3d ab: stopped: ")]
    assert stopped == [f"katra3d ab: stopped: {stop['reason']}"]
    assert (
        f"decided after {stop['rounds']} of at most 6 rounds: fill unchanged, mesh regression"
        in stopped[0]
    )
    assert "round 3/6" in r.stderr and "undecided: " in r.stderr
    assert len(list((out / "new").glob("*.katra"))) == stop["rounds"]
    manifest = json.loads((out / "ab.json").read_text())
    assert (
        manifest["sequential"]
        == result["sequential"]["rule"]
        == {
            "alpha": 0.01,
            "max_rounds": 6,
            "min_rounds": 3,
            "threshold_pct": 20.0,
            "name": "group-sequential-t",
            "spending": "lan-demets-obrien-fleming",
        }
    )
    assert manifest["stop"] == stop and len(manifest["rounds"]) == stop["rounds"]
    # these synthetic captures record no process CPU time: wall time, the clock they trust, and
    # ab.json says so
    assert manifest["decision"] == {
        "metric": "wall",
        "run_stat": "median",
        "metric_choice": "capture",
        "paired": True,
        "alpha": 0.01,
        "threshold_pct": 20.0,
    }
    # compare DIR judges the same rounds by the recorded rule: the same verdicts, intervals and stop
    again = katra_cli("compare", str(out), "--format", "json")
    assert again.returncode == 1, again.stdout + again.stderr
    second = json.loads(again.stdout)
    assert second["sequential"] == result["sequential"]
    for name, scene in result["scenes"].items():
        assert {
            k: second["scenes"][name][k]
            for k in ("verdict", "ci_low", "ci_high", "confidence", "reason")
        } == {k: scene[k] for k in ("verdict", "ci_low", "ci_high", "confidence", "reason")}
    # ... whatever --alpha or --threshold compare is given (said in a note)
    other = json.loads(
        katra_cli("compare", str(out), "--threshold", "1", "--format", "json").stdout
    )
    assert {k: v["verdict"] for k, v in other["scenes"].items()} == {
        "fill": "unchanged",
        "mesh": "regression",
    }
    assert any("--alpha and --threshold given here are not used" in n for n in other["notes"])
    # report --baseline judges the same rounds by the same rule
    page = tmp_path / "r.html"
    r = katra_cli(
        "report", str(out / "new"), "--baseline", str(out / "base"), "-o", str(page), timeout=300
    )
    assert r.returncode == 0, r.stdout + r.stderr
    html = page.read_text(encoding="utf-8")
    assert result["scenes"]["mesh"]["reason"] in html and result["scenes"]["fill"]["reason"] in html
    # the fixed-sample test on the same rounds is what --unpaired (no pairing, no rule) falls back
    # to
    unpaired = json.loads(katra_cli("compare", str(out), "--unpaired", "--format", "json").stdout)
    assert "sequential" not in unpaired and unpaired["scenes"]["mesh"]["unit"] == "runs"


@pytest.mark.gl
@pytest.mark.slow
def test_real_captures_stop_at_the_cap_and_compare_agrees(
    tmp_path: Path, katra_cli, gl_ctx
) -> None:
    """Tiny real captures: 3 frames are too few for a time verdict, so no look decides and ab stops
    at its cap of 3 rounds, saying so; ab.json records rule and stop, and compare DIR repeats ab's
    comparison."""
    cmd = " ".join(
        shlex.quote(a)
        for a in [
            sys.executable,
            "-m",
            "katra3d",
            "run",
            "clear",
            "--frames",
            "3",
            "--warmup",
            "1",
            "--size",
            "16x16",
            "--quiet",
            "-o",
            "{out}",
        ]
    )
    cmd = cmd.replace(shlex.quote("{out}"), "{out}")
    out = tmp_path / "ab"
    r = katra_cli(
        "ab",
        "--base",
        cmd,
        "--new",
        cmd,
        "--until-decided",
        "--rounds",
        "3",
        "-o",
        str(out),
        "--format",
        "json",
        timeout=300,
    )
    assert r.returncode == 0, r.stdout + r.stderr
    result = json.loads(r.stdout)
    stop = result["sequential"]["stop"]
    assert stop == {
        "decided": False,
        "rounds": 3,
        "max_rounds": 3,
        "undecided": ["clear"],
        "reason": "undecided at the cap of 3 rounds: clear inconclusive",
    }
    assert "katra3d ab: stopped: undecided at the cap of 3 rounds: clear inconclusive" in r.stderr
    assert "too few frames" in result["scenes"]["clear"]["reason"]
    manifest = json.loads((out / "ab.json").read_text())
    assert (
        manifest["stop"] == stop
        and manifest["sequential"]["max_rounds"] == 3
        and len(manifest["rounds"]) == 3
    )
    # real llvmpipe captures record process CPU time: by default the rounds are judged on process
    # p10, and ab.json and the JSON say so
    assert manifest["decision"] == {
        "metric": "process",
        "run_stat": "p10",
        "metric_choice": "software default",
        "paired": True,
        "alpha": 0.01,
        "threshold_pct": 5.0,
    }
    assert (result["metric"], result["run_stat"], result["metric_choice"]) == (
        "process",
        "p10",
        "software default",
    )
    again = json.loads(katra_cli("compare", str(out), "--format", "json").stdout)
    assert again["sequential"] == result["sequential"]
    assert again["scenes"]["clear"]["verdict"] == "inconclusive"
    assert again["scenes"]["clear"]["ratio"] == result["scenes"]["clear"]["ratio"]
