"""``katra3d stats``, ``compare`` and ``ab`` on synthetic traces (tests.trace_helpers.write_trace;
no GL).
"""

from __future__ import annotations

import csv
import io
import json
import math
import shlex
import sys
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from katra_trace import Clock, Flag, Kind
from katra_trace.schema import EVENT_DTYPE
from tests.trace_helpers import write_trace

SCENES = ("fill", "mesh")


def write_run(
    path: Path,
    mean_ms: float,
    *,
    seed: int,
    frames: int = 60,
    size: tuple[int, int] = (64, 64),
    renderer: str = "llvmpipe (LLVM 15.0.6, 256 bits)",
    warmup: int = 3,
    slow: dict[str, float] | None = None,
    run_sd: float = 0.01,
    process: bool = False,
) -> Path:
    """One synthetic capture: each scene's warmup + measured frames (wall and cpu, and with
    ``process`` a steady process CPU time) with a zone each; ``run_sd``: the run's luck (sd of its
    log level)."""
    rng = np.random.default_rng(seed)
    run_factor = math.exp(rng.normal(0, run_sd))
    opts = {
        "size": list(size),
        "samples": 0,
        "timing_mode": "sync",
        "params": {s: {"layers": 1} for s in SCENES},
    }
    host = {
        "gl": {
            "renderer": renderer,
            "driver": {"name": "Mesa", "version": "22.3.6"},
            "software_renderer": renderer.startswith("llvmpipe"),
        }
    }
    strings = ["", "frame", "draw", *SCENES]
    frame_id, zone_id = 1, 2
    t = 0
    rows = []
    for sid, scene in enumerate(SCENES, start=3):
        factor = (slow or {}).get(scene, 1.0)
        for i in range(warmup + frames):
            dur = int(mean_ms * factor * run_factor * 1e6 * math.exp(rng.normal(0, 0.05)))
            flags = int(Flag.WARMUP) if i < warmup else 0
            rows.append((Kind.ZONE, Clock.WALL, flags, 1, sid, zone_id, i, t, dur // 2, 0.0))
            rows.append((Kind.FRAME, Clock.WALL, flags, 0, sid, frame_id, i, t, dur, 0.0))
            rows.append((Kind.FRAME, Clock.CPU, flags, 0, sid, frame_id, i, t, dur // 10, 0.0))
            if process:
                cpu = int(mean_ms * factor * 1.9e6 * math.exp(rng.normal(0, 0.02)))
                rows.append((Kind.FRAME, Clock.PROCESS, flags, 0, sid, frame_id, i, t, cpu, 0.0))
            t += dur
    write_trace(
        path,
        np.array(rows, dtype=EVENT_DTYPE),
        strings,
        summary={},
        header={"workload": "test", "capture_options": opts, "host_info": host},
    )
    return path


def write_runs(d: Path, k: int, mean_ms: float, seed: int, **kw: object) -> Path:
    """``k`` runs in ``d``, one after the other: a batch (compare allows for drift between two such
    batches).
    """
    d.mkdir(parents=True, exist_ok=True)
    for i in range(k):
        write_run(d / f"run-{i:02d}.katra", mean_ms, seed=seed + i, **kw)  # type: ignore[arg-type]
    return d


def write_rounds(
    base: Path,
    new: Path,
    k: int,
    mean_ms: float,
    seeds: tuple[int, int],
    *,
    new_kw: dict[str, Any] | None = None,
    **kw: Any,
) -> tuple[Path, Path]:
    """``k`` runs a side written in turns, BASE then NEW (their capture start times interleave, as
    two sides captured together do); ``new_kw`` adds to ``kw`` for NEW's runs."""
    for d in (base, new):
        d.mkdir(parents=True, exist_ok=True)
    for i in range(k):
        write_run(base / f"run-{i:02d}.katra", mean_ms, seed=seeds[0] + i, **kw)
        write_run(
            new / f"run-{i:02d}.katra", mean_ms, seed=seeds[1] + i, **{**kw, **(new_kw or {})}
        )
    return base, new


def test_stats_json_shape_and_formats(tmp_path: Path, katra_cli) -> None:
    trace = write_run(tmp_path / "a.katra", 10.0, seed=1)
    r = katra_cli("stats", str(trace), "--zones", "--format", "json")
    assert r.returncode == 0, r.stderr
    out = json.loads(r.stdout)
    fill = out["scenes"]["fill"]
    assert set(fill["metrics"]) == {"wall", "cpu"}
    assert fill["metrics"]["wall"]["n"] == 60  # warmup excluded
    assert 8.0 < fill["metrics"]["wall"]["median_ms"] < 12.0
    assert fill["zones"]["draw"]["wall"]["n"] == 60
    r = katra_cli("stats", str(trace), "--format", "csv")
    rows = list(csv.DictReader(io.StringIO(r.stdout)))
    assert [(row["scene"], row["clock"]) for row in rows] == [
        ("fill", "cpu"),
        ("fill", "wall"),
        ("mesh", "cpu"),
        ("mesh", "wall"),
    ]
    assert float(rows[1]["fps_low_1pct_integral"]) > 0
    r = katra_cli("stats", str(trace), "--format", "markdown", "--all")
    assert r.returncode == 0 and "| fill | wall |" in r.stdout
    r = katra_cli("stats", str(trace), "--all")
    assert r.returncode == 0 and "fps_low_1pct" in r.stdout
    # compact: the primary clock, no clock column
    r = katra_cli("stats", str(trace), "--format", "markdown")
    assert r.returncode == 0 and "| fill | 60 |" in r.stdout and "wall clock" in r.stdout


def test_stats_missing_file_is_one_line_error(tmp_path: Path, katra_cli) -> None:
    r = katra_cli("stats", str(tmp_path / "nope.katra"))
    assert (
        r.returncode == 2 and r.stderr.startswith("katra3d: error:") and "Traceback" not in r.stderr
    )


def test_compare_same_runs_exit_0_and_json_shape(tmp_path: Path, katra_cli) -> None:
    a = write_run(tmp_path / "a.katra", 10.0, seed=1)
    b = write_run(tmp_path / "b.katra", 10.0, seed=2)
    r = katra_cli("compare", str(a), str(b), "--format", "json")
    assert r.returncode == 0, r.stdout + r.stderr
    out = json.loads(r.stdout)
    assert out["metric"] == "wall" and out["exit_code"] == 0
    assert set(out["scenes"]) == set(SCENES)
    for s in out["scenes"].values():
        # one run a side: a time metric gets no verdict, whatever the frames say
        assert s["verdict"] == "inconclusive" and s["runs_needed"] == 3
        assert s["unit"] == "frames" and s["runs_base"] == 1
        assert "run-to-run noise unknown" in s["reason"]
        assert s["frame_ratio"] is not None and s["frame_p_value"] is not None
    r = katra_cli("compare", str(a), str(b))
    assert r.returncode == 0 and "fill" in r.stdout and "note:" in r.stdout


def test_compare_directories_regression_exit_1(tmp_path: Path, katra_cli) -> None:
    base, new = write_rounds(
        tmp_path / "base", tmp_path / "new", 6, 10.0, (10, 20), new_kw={"slow": {"mesh": 1.2}}
    )
    r = katra_cli("compare", str(base), str(new), "--format", "json")
    assert r.returncode == 1, r.stdout + r.stderr
    scenes = json.loads(r.stdout)["scenes"]
    assert scenes["mesh"]["verdict"] == "regression" and scenes["mesh"]["unit"] == "runs"
    assert scenes["mesh"]["runs_new"] == 6
    assert scenes["fill"]["verdict"] != "regression"
    r = katra_cli("compare", str(base), str(new), "--format", "markdown")
    assert r.returncode == 1 and "| mesh | regression |" in r.stdout


@pytest.mark.slow
def test_compare_incomparable_sizes_exit_2(tmp_path: Path, katra_cli) -> None:
    a = write_run(tmp_path / "a.katra", 10.0, seed=1)
    b = write_run(tmp_path / "b.katra", 10.0, seed=2, size=(128, 128))
    r = katra_cli("compare", str(a), str(b), "--format", "json")
    assert r.returncode == 2
    out = json.loads(r.stdout)
    assert {s["verdict"] for s in out["scenes"].values()} == {"incomparable"}
    assert (
        "64x64" in out["scenes"]["fill"]["reason"] and "128x128" in out["scenes"]["fill"]["reason"]
    )
    assert "nothing comparable" in r.stderr
    # the table already shows each scene's reason: the error line does not repeat them
    r = katra_cli("compare", str(a), str(b))
    assert r.returncode == 2 and r.stdout.count("different size") == 2
    assert "nothing comparable" in r.stderr and "different size" not in r.stderr


def test_compare_host_mismatch_and_override(tmp_path: Path, katra_cli) -> None:
    a = write_run(tmp_path / "a.katra", 10.0, seed=1)
    b = write_run(tmp_path / "b.katra", 10.0, seed=2, renderer="softpipe")
    assert katra_cli("compare", str(a), str(b)).returncode == 2
    r = katra_cli("compare", str(a), str(b), "--allow-host-mismatch")
    assert r.returncode == 0, r.stdout + r.stderr
    assert "allowed by --allow-host-mismatch" in r.stdout


@pytest.mark.parametrize(
    "args",
    [
        ("--alpha", "0.9"),
        ("--threshold", "-1"),
        ("--stat", "p5"),
        ("--stat", "p10", "--normalize"),
        ("--stat", "p10", "--metric", "instructions"),
    ],
)
def test_compare_bad_options_exit_2(tmp_path: Path, katra_cli, args: tuple[str, ...]) -> None:
    a = write_run(tmp_path / "a.katra", 10.0, seed=1)
    r = katra_cli("compare", str(a), str(a), *args)
    assert r.returncode == 2 and r.stderr.startswith(("katra3d: error:", "usage:")), r.stderr
    assert "Traceback" not in r.stderr and len(r.stderr.strip().splitlines()) <= 3


@pytest.mark.slow
def test_compare_stat_p10_reduces_runs_to_their_10th_percentile(tmp_path: Path, katra_cli) -> None:
    base, new = write_rounds(
        tmp_path / "base", tmp_path / "new", 4, 10.0, (10, 20), new_kw={"slow": {"fill": 1.3}}
    )
    r = katra_cli("compare", str(base), str(new), "--stat", "p10", "--format", "json")
    assert r.returncode == 1, r.stdout + r.stderr
    out = json.loads(r.stdout)
    assert out["run_stat"] == "p10" and out["scenes"]["fill"]["verdict"] == "regression"
    assert any(n.startswith("p10:") for n in out["notes"])
    from katra_trace import open_trace
    from katra_trace.analysis.stats import scene_durations

    p10 = [
        np.percentile(
            scene_durations(open_trace(p).events, list(open_trace(p).strings))["fill"]["wall"], 10
        )
        for p in sorted(base.iterdir())
    ]
    assert out["scenes"]["fill"]["level_base"] == pytest.approx(
        float(np.exp(np.mean(np.log(p10)))) * 1e-6
    )
    # nothing called median holds the p10 levels (they were under median_base / median_new)
    assert out["scenes"]["fill"]["stat"] == "p10"

    def keys(obj: object) -> list[str]:
        if isinstance(obj, dict):
            return [k for key, value in obj.items() for k in (key, *keys(value))]
        return [k for value in obj for k in keys(value)] if isinstance(obj, list) else []

    assert not [k for k in keys(out) if k.startswith("median_")]
    r = katra_cli("compare", str(base), str(new), "--stat", "p10")
    assert (
        r.returncode == 1 and "p10 of each run" in r.stdout and " p10 " in r.stdout.splitlines()[1]
    )
    row = next(line for line in r.stdout.splitlines() if line.startswith("fill "))
    # levels in the unit that suits them (these frames: ms)
    assert " ms -> " in row and "0.0" not in row


@pytest.mark.slow
def test_compare_bad_inputs_exit_2(tmp_path: Path, katra_cli) -> None:
    a = write_run(tmp_path / "a.katra", 10.0, seed=1)
    empty = tmp_path / "empty"
    empty.mkdir()
    r = katra_cli("compare", str(a), str(empty))
    assert r.returncode == 2 and "no katra3d traces in directory" in r.stderr
    junk = tmp_path / "junk.katra"
    junk.write_bytes(b"not a trace at all")
    r = katra_cli("compare", str(a), str(junk))
    assert r.returncode == 2 and "Traceback" not in r.stderr
    r = katra_cli("compare", str(a), str(tmp_path / "missing"))
    assert r.returncode == 2 and "no such trace file or directory" in r.stderr


def _writer_cmd(tmp_path: Path, slow: float, chatter: int = 0) -> str:
    """A capture command that writes one synthetic trace to {out} (stands in for `katra3d run`).

    Its luck is seeded by the output's folder and name (``base/run-003.katra``), so a test's
    verdicts and stopping round are the same every time it runs.

    ``chatter``: lines it prints first, as a capture's progress output would.
    """
    script = tmp_path / "fake_capture.py"
    script.write_text(
        "import sys, zlib\n"
        f"sys.path.insert(0, {str(Path(__file__).parent.parent)!r})\n"
        "from pathlib import Path\n"
        "from tests.test_compare_cli import write_run\n"
        "for i in range(int(sys.argv[3])):\n"
        "    print(f'child progress line {i}')\n"
        "out = Path(sys.argv[1])\n"
        "seed = zlib.crc32(f'{out.parent.name}/{out.name}'.encode())\n"
        "write_run(out, 10.0, seed=seed, slow={'mesh': float(sys.argv[2])})\n"
    )
    return f"{shlex.quote(sys.executable)} {shlex.quote(str(script))} {{out}} {slow} {chatter}"


@pytest.mark.slow
def test_ab_interleaves_records_pairing_and_compares_paired(tmp_path: Path, katra_cli) -> None:
    out = tmp_path / "ab"
    r = katra_cli(
        "ab",
        "--base",
        _writer_cmd(tmp_path, 1.0, chatter=50),
        "--new",
        _writer_cmd(tmp_path, 1.3),
        "--rounds",
        "6",
        "-o",
        str(out),
        "--format",
        "json",
        timeout=120,
    )
    assert r.returncode == 1, r.stdout + r.stderr
    # children are quiet: one line per round, the order alternating (A B, B A, ...)
    assert "child progress line" not in r.stderr + r.stdout
    rounds = [line for line in r.stderr.splitlines() if line.startswith("katra3d ab: round")]
    assert len(rounds) == 6
    walls = [line.split(": ")[2].removeprefix("capture wall time ") for line in rounds[:2]]
    assert walls[0].startswith("BASE") and walls[1].startswith("NEW"), rounds
    assert (
        len(list((out / "base").glob("*.katra"))) == 6
        and len(list((out / "new").glob("*.katra"))) == 6
    )
    manifest = json.loads((out / "ab.json").read_text())
    assert [e["round"] for e in manifest["rounds"]] == [1, 2, 3, 4, 5, 6]
    assert manifest["rounds"][1]["order"] == ["new", "base"]
    assert (
        manifest["rounds"][2]["base"] == "base/run-003.katra"
        and manifest["rounds"][2]["new"] == "new/run-003.katra"
    )
    assert (
        "{out}" in manifest["base_command"]
        and "run-001.katra" in manifest["rounds"][0]["commands"]["base"]
    )
    result = json.loads(r.stdout)
    assert result["paired"] is True and any("paired: 6 round(s)" in n for n in result["notes"])
    mesh = result["scenes"]["mesh"]
    assert mesh["verdict"] == "regression" and mesh["unit"] == "rounds" and mesh["runs_base"] == 6
    # compare finds the pairing again, from the directory or from its two sides
    for args in ((str(out),), (str(out / "base"), str(out / "new"))):
        r2 = katra_cli("compare", *args, "--format", "json")
        again = json.loads(r2.stdout)
        assert r2.returncode == 1 and again["paired"] is True
        assert again["scenes"]["mesh"]["ratio"] == pytest.approx(mesh["ratio"])
    r3 = katra_cli("compare", str(out / "base"), str(out / "new"), "--unpaired", "--format", "json")
    unpaired = json.loads(r3.stdout)
    assert unpaired["paired"] is False and unpaired["scenes"]["mesh"]["unit"] == "runs"
    # --quiet: not even the round lines
    r = katra_cli(
        "ab",
        "--base",
        _writer_cmd(tmp_path, 1.0),
        "--new",
        _writer_cmd(tmp_path, 1.0),
        "--rounds",
        "3",
        "-o",
        str(tmp_path / "q"),
        "--quiet",
        timeout=120,
    )
    assert r.returncode == 0, r.stdout + r.stderr
    assert "katra3d ab: round" not in r.stderr
    # a reused output directory is refused rather than mixed with old runs
    r = katra_cli(
        "ab",
        "--base",
        _writer_cmd(tmp_path, 1.0),
        "--new",
        _writer_cmd(tmp_path, 1.0),
        "--rounds",
        "1",
        "-o",
        str(out),
    )
    assert r.returncode == 2 and "already holds" in r.stderr


def test_compare_dir_without_manifest_is_bad_input(tmp_path: Path, katra_cli) -> None:
    d = write_runs(tmp_path / "runs", 1, 10.0, seed=1)
    r = katra_cli("compare", str(d))
    assert r.returncode == 2 and "output directory of 'katra3d ab'" in r.stderr


def test_ab_help_shows_positional_scenes_not_a_scene_option(katra_cli) -> None:
    r = katra_cli("ab", "--help")
    assert r.returncode == 0 and "--scene" not in r.stdout and "katra3d run fillrate" in r.stdout


def test_ab_bad_commands(tmp_path: Path, katra_cli) -> None:
    r = katra_cli("ab", "--base", "true", "--new", "true {out}")
    assert r.returncode == 2 and "must contain {out}" in r.stderr
    r = katra_cli(
        "ab",
        "--base",
        "echo the child said why; exit 3 # {out}",
        "--new",
        "true {out}",
        "-o",
        str(tmp_path / "x"),
    )
    assert r.returncode == 2 and "failed with exit code 3" in r.stderr
    assert "the child said why" in r.stderr  # a failing child's output is shown
    r = katra_cli("ab", "--base", "true {out}", "--new", "true {out}", "-o", str(tmp_path / "y"))
    assert r.returncode == 2 and "wrote no trace" in r.stderr


@pytest.mark.slow
def test_software_default_is_process_p10_and_noisy_wall_time_points_to_it(
    tmp_path: Path, katra_cli
) -> None:
    """Runs whose wall time varies 20 % from run to run (a busy neighbour): by default compare
    judges a software renderer's traces that recorded process CPU time on process p10 (unchanged),
    and says so; --metric wall is inconclusive and says how to use process time; traces without
    process rows are judged on wall time."""
    base, new = write_rounds(
        tmp_path / "base", tmp_path / "new", 4, 10.0, (30, 40), run_sd=0.2, process=True
    )
    r = katra_cli("compare", str(base), str(new), "--format", "json")
    out = json.loads(r.stdout)
    assert r.returncode == 0 and {s["verdict"] for s in out["scenes"].values()} == {"unchanged"}, (
        r.stdout
    )
    assert (out["metric"], out["run_stat"], out["metric_choice"]) == (
        "process",
        "p10",
        "software default",
    )
    assert all(s["stat"] == "p10" for s in out["scenes"].values())
    assert any("the default on a software renderer" in n for n in out["notes"])
    text = katra_cli("compare", str(base), str(new)).stdout
    assert "process clock, paired" not in text and "p10 of each run" in text and "process" in text
    r = katra_cli("compare", str(base), str(new), "--metric", "wall", "--format", "json")
    out = json.loads(r.stdout)
    assert r.returncode == 0 and "inconclusive" in {s["verdict"] for s in out["scenes"].values()}, (
        r.stdout
    )
    assert out["metric_choice"] == "option" and out["run_stat"] == "median"
    assert any("--metric process --stat p10" in n for n in out["notes"])
    # --stat given with auto: the software default's metric with the statistic asked for
    out = json.loads(
        katra_cli("compare", str(base), str(new), "--stat", "median", "--format", "json").stdout
    )
    assert (out["metric"], out["run_stat"]) == ("process", "median")
    # without process rows: wall time, the capture's clock, and nothing to point to
    plain_b, plain_n = write_rounds(
        tmp_path / "plain_b", tmp_path / "plain_n", 4, 10.0, (30, 40), run_sd=0.2
    )
    out = json.loads(katra_cli("compare", str(plain_b), str(plain_n), "--format", "json").stdout)
    assert (out["metric"], out["metric_choice"]) == ("wall", "capture")
    assert not any("--metric process" in n for n in out["notes"])
