"""``katra3d history``: the DuckDB store, concurrent writers, the Parquet layout, bad input (no GL).

Traces are synthetic (written by TraceWriter with chosen frame times); every command runs as a real
``katra3d`` process, and concurrency uses real processes racing for DuckDB's lock.
"""

from __future__ import annotations

import dataclasses
import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from katra_trace import Clock, Kind
from katra_trace.history.ingest import prepare_runs
from katra_trace.history.rows import (
    COLUMN_NAMES,
    HistoryRow,
    RunFacts,
    parse_time_ns,
    trace_rows,
)
from katra_trace.history.store import add_to_store
from katra_trace.io.reader import open_trace
from katra_trace.schema import EVENT_DTYPE
from tests.cli_helpers import katra
from tests.trace_helpers import write_trace

duckdb = pytest.importorskip("duckdb", reason="pip install 'katra3d[history]'")

REPO = Path(__file__).resolve().parent.parent
LLVMPIPE = {
    "gl": {
        "renderer": "llvmpipe (LLVM 15.0.6, 256 bits)",
        "driver": {"name": "Mesa", "version": "22.3.6"},
    },
    "system": {"cpu_model": "AMD EPYC", "hostname": "ci-1"},
}
OTHER_HOST = {
    "gl": {"renderer": "AMD Radeon RX 7600", "driver": {"name": "Mesa", "version": "24.0.1"}},
    "system": {"cpu_model": "AMD Ryzen 7", "hostname": "ws"},
}


def make_trace(
    path: Path,
    levels_ms: dict[str, float],
    seed: int = 0,
    frames: int = 40,
    host: dict[str, Any] | None = None,
    zones: bool = False,
    clock: Clock = Clock.WALL,
    params: dict[str, Any] | None = None,
) -> Path:
    """A trace whose scenes' frames are ``level x exp(N(0, 3 %))`` (ms, or
    counts on a count clock)."""
    rng = np.random.default_rng(seed)
    scenes = list(levels_ms)
    strings = ["", "frame", "draw", *scenes]
    rows = []
    t = 0
    unit = 1e6 if clock in (Clock.WALL, Clock.CPU, Clock.GPU) else 1.0
    for s_i, scene in enumerate(scenes):
        sid = 3 + s_i
        for f in range(frames):
            dur = int(levels_ms[scene] * unit * float(np.exp(rng.normal(0, 0.03))))
            if zones:
                rows.append((Kind.ZONE, clock, 0, 1, sid, 2, f, t, dur // 2, 0.0))
            rows.append((Kind.FRAME, clock, 0, 0, sid, 1, f, t, dur, 0.0))
            t += dur + 1000
    opts: dict[str, Any] = {
        "resolved": {
            "size": [64, 64],
            "scenes": [{"label": s, "params": (params or {}).get(s, {})} for s in scenes],
        },
        "timing_mode": "sync",
        "primary_clock": "wall",
    }
    if clock == Clock.INSTRUCTIONS:
        opts["measure"] = {"mode": "instructions"}
    host_info = dict(host or LLVMPIPE)
    if clock == Clock.INSTRUCTIONS:
        host_info["codegen"] = {"cpu_model": "AMD EPYC", "llvm": "15.0.6"}
    write_trace(
        path,
        np.array(rows, dtype=EVENT_DTYPE),
        strings,
        summary={},
        header={"workload": "test", "capture_options": opts, "host_info": host_info},
    )
    return path


def one_line_error(res: subprocess.CompletedProcess[str], code: int) -> str:
    assert res.returncode == code, (res.returncode, res.stdout, res.stderr)
    assert "Traceback" not in res.stderr + res.stdout
    lines = res.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("katra3d: error: "), res.stderr
    return lines[0]


def history_of(
    tmp: Path,
    labels: list[tuple[str, dict[str, float]]],
    runs: int = 3,
    db: str = "h.duckdb",
    host: dict[str, Any] | None = None,
    day0: int = 0,
) -> Path:
    """Store ``runs`` traces per label (labels in order, one day apart) in ``tmp/db``, in this
    process (the commands under test run as processes; setting up through the same functions keeps
    tests fast)."""
    for i, (label, levels) in enumerate(labels):
        paths = [
            make_trace(
                tmp / f"{label}-{r}-{db}-{day0}.katra", levels, seed=100 * (i + day0) + r, host=host
            )
            for r in range(runs)
        ]
        prepared, _ = prepare_runs(
            paths, label, "", parse_time_ns(f"2026-11-{i + day0 + 1:02d}T12:00:00Z")
        )
        add_to_store(tmp / db, prepared)
    return tmp / db


# --------------------------------------------------------------------------- rows


def test_rows_hold_the_run_stats_zones_and_host(tmp_path: Path) -> None:
    path = make_trace(tmp_path / "a.katra", {"fill": 10.0, "cubes": 4.0}, zones=True)
    rows = trace_rows(open_trace(path), "abc", RunFacts("v1", "deadbeef", 5))
    assert tuple(f.name for f in dataclasses.fields(HistoryRow)) == COLUMN_NAMES
    frames = {(r.scene, r.zone, r.metric): r for r in rows}
    assert set(frames) == {
        ("fill", "", "wall"),
        ("cubes", "", "wall"),
        ("fill", "draw", "wall"),
        ("cubes", "draw", "wall"),
    }
    fill = frames["fill", "", "wall"]
    assert fill.frames == 40 and fill.unit == "ms" and fill.median == pytest.approx(10.0, rel=0.03)
    assert 0.01 < fill.cv < 0.06 and fill.p99 > fill.median and 80 < fill.low_1pct_fps < 100
    assert frames["fill", "draw", "wall"].median == pytest.approx(5.0, rel=0.03)
    assert (
        fill.renderer.startswith("llvmpipe")
        and fill.driver == "Mesa 22.3.6"
        and fill.cpu == "AMD EPYC"
    )
    assert fill.label == "v1" and fill.commit == "deadbeef" and fill.label_time_ns == 5
    assert fill.size == "64x64" and fill.mode == "time" and len(fill.host_id) == 12
    counted = trace_rows(
        open_trace(make_trace(tmp_path / "i.katra", {"fill": 2e6}, clock=Clock.INSTRUCTIONS)),
        "def",
        RunFacts("v1"),
    )
    (row,) = counted
    assert row.metric == "instructions" and row.unit == "instructions" and row.low_1pct_fps is None
    assert (
        row.median == pytest.approx(2e6, rel=0.03) and row.codegen_id and row.mode == "instructions"
    )


# --------------------------------------------------------------------------- add


@pytest.mark.slow
def test_add_stores_each_trace_once_and_reports_the_repeat(tmp_path: Path) -> None:
    a = make_trace(tmp_path / "a.katra", {"fill": 10.0}, seed=1)
    b = (
        make_trace(tmp_path / "sub" / "b.katra", {"fill": 10.0}, seed=2)
        if (tmp_path / "sub").mkdir() is None
        else None
    )
    assert b is not None
    first = katra("history", "add", str(a), "--label", "v1", cwd=tmp_path)
    assert first.returncode == 0 and "added 1 run(s) (1 rows) under label 'v1'" in first.stdout, (
        first.stderr
    )
    assert (tmp_path / ".katra" / "history.duckdb").is_file()  # the default store
    # a directory: a.katra and sub/b.katra
    again = katra("history", "add", str(tmp_path), "--label", "v2", "--json", cwd=tmp_path)
    assert again.returncode == 0, again.stderr
    out = json.loads(again.stdout)
    assert [Path(r["trace"]).name for r in out["added"]] == ["b.katra"]
    assert [(Path(r["trace"]).name, r["label"]) for r in out["already_stored"]] == [
        ("a.katra", "v1")
    ]
    con = duckdb.connect(str(tmp_path / ".katra" / "history.duckdb"), read_only=True)
    assert con.execute("SELECT label, count(*) FROM history GROUP BY 1 ORDER BY 1").fetchall() == [
        ("v1", 1),
        ("v2", 1),
    ]
    con.close()
    same = katra("history", "add", str(a), "--label", "v3", cwd=tmp_path)
    assert (
        same.returncode == 0 and "added 0 run(s)" in same.stdout and "already stored" in same.stdout
    )


def test_add_is_all_or_nothing_on_a_bad_trace(tmp_path: Path) -> None:
    good = make_trace(tmp_path / "good.katra", {"fill": 10.0})
    bad = tmp_path / "bad.katra"
    bad.write_bytes(b"not a trace at all" * 10)
    msg = one_line_error(
        katra(
            "history", "add", str(good), str(bad), "--label", "v1", "--db", "h.duckdb", cwd=tmp_path
        ),
        2,
    )
    assert "not a katra3d trace" in msg
    assert not (tmp_path / "h.duckdb").exists()
    one_line_error(
        katra("history", "add", str(tmp_path / "missing.katra"), "--label", "v1", cwd=tmp_path), 2
    )
    msg = one_line_error(
        katra("history", "add", str(good), "--label", "v1", "--time", "yesterday", cwd=tmp_path), 2
    )
    assert "ISO 8601" in msg
    one_line_error(katra("history", "add", str(good), "--label", " ", cwd=tmp_path), 2)


ADDER = """
import sys
from katra3d.harness.cli import main
db, label, *paths = sys.argv[1:]
for p in paths:  # one add (one lock) per trace: 20 contended writes per process
    code = main(["history", "add", p, "--label", label, "--db", db, "--lock-timeout", "120"])
    if code:
        sys.exit(code)
"""


@pytest.mark.slow
def test_two_processes_adding_at_once_lose_nothing(tmp_path: Path) -> None:
    traces = {
        side: [
            make_trace(tmp_path / f"{side}{i}.katra", {"fill": 10.0}, seed=1000 * (side == "b") + i)
            for i in range(20)
        ]
        for side in ("a", "b")
    }
    procs = [
        subprocess.Popen(
            [sys.executable, "-c", ADDER, "h.duckdb", f"label-{side}", *map(str, paths)],
            cwd=tmp_path,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
        )
        for side, paths in traces.items()
    ]
    for proc in procs:
        out, err = proc.communicate(timeout=300)
        assert proc.returncode == 0, err
        assert out.count("added 1 run(s)") == 20
    con = duckdb.connect(str(tmp_path / "h.duckdb"), read_only=True)
    rows = con.execute(
        "SELECT label, count(*), count(DISTINCT trace_sha256) FROM history GROUP BY 1 ORDER BY 1"
    ).fetchall()
    con.close()
    assert rows == [("label-a", 20, 20), ("label-b", 20, 20)]


@pytest.mark.slow
def test_a_lock_held_too_long_is_a_one_line_error_and_nothing_is_lost(tmp_path: Path) -> None:
    trace = make_trace(tmp_path / "a.katra", {"fill": 10.0})
    history_of(tmp_path, [("v1", {"fill": 10.0})], runs=1)
    holder = duckdb.connect(str(tmp_path / "h.duckdb"))  # this process holds the write lock
    try:
        msg = one_line_error(
            katra(
                "history",
                "add",
                str(trace),
                "--label",
                "v2",
                "--db",
                "h.duckdb",
                "--lock-timeout",
                "0.5",
                cwd=tmp_path,
            ),
            2,
        )
        assert "locked by another process" in msg and "--lock-timeout" in msg
        one_line_error(
            katra("history", "show", "--db", "h.duckdb", "--lock-timeout", "0.2", cwd=tmp_path), 2
        )
    finally:
        holder.close()
    res = katra("history", "add", str(trace), "--label", "v2", "--db", "h.duckdb", cwd=tmp_path)
    assert res.returncode == 0 and "added 1 run(s)" in res.stdout


# --------------------------------------------------------------------------- show / check


@pytest.mark.slow
def test_show_orders_labels_by_time_and_draws_a_sparkline(tmp_path: Path) -> None:
    history_of(tmp_path, [("c", {"fill": 10.0}), ("a", {"fill": 10.0}), ("b", {"fill": 20.0})])
    res = katra("history", "show", "--db", "h.duckdb", "--format", "json", cwd=tmp_path)
    assert res.returncode == 0, res.stderr
    (series,) = json.loads(res.stdout)["series"]
    assert [p["label"] for p in series["points"]] == ["c", "a", "b"]  # by --time, not by name
    assert [p["runs"] for p in series["points"]] == [3, 3, 3]
    assert (
        series["points"][2]["level"] == pytest.approx(20.0, rel=0.05) and series["metric"] == "wall"
    )
    assert series["sparkline"] == "▁▁█"
    table = katra("history", "show", "--db", "h.duckdb", cwd=tmp_path)
    assert table.returncode == 0 and "▁▁█" in table.stdout and "fill" in table.stdout
    csv = katra(
        "history", "show", "--db", "h.duckdb", "--format", "csv", cwd=tmp_path
    ).stdout.splitlines()
    assert csv[0].startswith("scene,zone,metric,stat,unit,host_id,label") and len(csv) == 4
    md = katra("history", "show", "--db", "h.duckdb", "--format", "markdown", cwd=tmp_path)
    assert md.returncode == 0 and "| scene |" in md.stdout


@pytest.mark.slow
def test_check_names_the_first_bad_label_and_exits_1_only_at_the_newest(tmp_path: Path) -> None:
    labels = [(f"v{i}", {"fill": 10.0, "cubes": 5.0}) for i in range(1, 6)]
    labels += [(f"v{i}", {"fill": 12.0, "cubes": 5.0}) for i in range(6, 9)]
    history_of(tmp_path, labels)
    res = katra("history", "check", "--db", "h.duckdb", "--json", cwd=tmp_path)
    # the step starts at v6, not at the newest label
    assert res.returncode == 0, res.stdout + res.stderr
    out = json.loads(res.stdout)
    (step,) = out["steps"]
    assert step["scene"] == "fill" and step["label"] == "v6" and step["verdict"] == "regression"
    assert 15 < step["change_pct"] < 25 and step["change_pct_interval"][0] > 5
    assert out["by_label"] == {"v6": ["fill"]} and out["newest_label"] == "v8"
    text = katra("history", "check", "--db", "h.duckdb", cwd=tmp_path)
    assert text.returncode == 0 and "steps starting at v6: fill +" in text.stdout
    # a new label that is slower again: a regression at the newest label, exit 1
    # an add option: exit 2
    one_line_error(katra("history", "check", "--db", "h.duckdb", "--time", "x", cwd=tmp_path), 2)


@pytest.mark.slow
def test_check_exit_1_when_the_newest_label_regresses(tmp_path: Path) -> None:
    labels = [(f"v{i}", {"fill": 10.0, "cubes": 5.0}) for i in range(1, 7)] + [
        ("v7", {"fill": 10.0, "cubes": 6.0})
    ]
    history_of(tmp_path, labels)
    res = katra("history", "check", "--db", "h.duckdb", cwd=tmp_path)
    assert res.returncode == 1, res.stdout + res.stderr
    assert "regression starting at the newest label 'v7': cubes" in res.stdout
    # a threshold above the step: still a step, but within the threshold: compare's word for it
    res = katra("history", "check", "--db", "h.duckdb", "--threshold", "30", "--json", cwd=tmp_path)
    assert res.returncode == 0 and json.loads(res.stdout)["steps"][0]["verdict"] == "unchanged"
    # an improvement at the newest label is no failure
    history_of(tmp_path, labels[:6] + [("v7", {"fill": 10.0, "cubes": 4.0})], db="g.duckdb")
    res = katra("history", "check", "--db", "g.duckdb", "--json", cwd=tmp_path)
    assert res.returncode == 0 and json.loads(res.stdout)["steps"][0]["verdict"] == "improvement"


@pytest.mark.slow
def test_check_reports_a_newest_label_of_one_run_that_departs(tmp_path: Path) -> None:
    """One run a label: the newest label 30 % slower on its one run is a departure with the runs
    that would settle it, not a regression (exit 0); counted, it is one (exit 1: counts are
    exact)."""
    labels = [(f"v{i}", {"fill": 10.0}) for i in range(1, 10)] + [("v10", {"fill": 13.0})]
    history_of(tmp_path, labels, runs=1)
    res = katra("history", "check", "--db", "h.duckdb", cwd=tmp_path)
    assert res.returncode == 0, res.stdout + res.stderr
    assert "fill wall: the newest label 'v10' departs by +3" in res.stdout, res.stdout
    assert "runs at 'v10' (1 now) would settle it" in res.stdout
    out = json.loads(katra("history", "check", "--db", "h.duckdb", "--json", cwd=tmp_path).stdout)
    (dep,) = out["departures"]
    assert out["steps"] == [] and not out["regression_at_newest_label"]
    assert dep["label"] == "v10" and dep["runs"] == 1 and dep["runs_needed"] >= 3
    shown = katra("history", "show", "--db", "h.duckdb", cwd=tmp_path)
    assert shown.returncode == 0 and "the newest label 'v10' departs" in shown.stdout
    for i, (label, levels) in enumerate(labels):
        counted = {k: v * 1e6 for k, v in levels.items()}
        path = make_trace(tmp_path / f"{label}-i.katra", counted, seed=i, clock=Clock.INSTRUCTIONS)
        prepared, _ = prepare_runs([path], label, "", parse_time_ns(f"2026-11-{i + 1:02d}T12:00Z"))
        add_to_store(tmp_path / "c.duckdb", prepared)
    res = katra("history", "check", "--db", "c.duckdb", cwd=tmp_path)
    assert res.returncode == 1, res.stdout + res.stderr
    assert "regression starting at the newest label 'v10': fill" in res.stdout


@pytest.mark.slow
def test_hosts_are_never_mixed_unless_asked(tmp_path: Path) -> None:
    history_of(tmp_path, [("v1", {"fill": 10.0}), ("v2", {"fill": 10.0})], runs=2)
    history_of(
        tmp_path, [("v3", {"fill": 30.0}), ("v4", {"fill": 30.0})], runs=2, host=OTHER_HOST, day0=2
    )
    out = json.loads(katra("history", "show", "--db", "h.duckdb", "--json", cwd=tmp_path).stdout)
    assert sorted(len(s["points"]) for s in out["series"]) == [2, 2]  # one trend per host
    check = json.loads(katra("history", "check", "--db", "h.duckdb", "--json", cwd=tmp_path).stdout)
    assert check["steps"] == []  # the 3x "step" is a different GPU, not a regression
    mixed = json.loads(
        katra(
            "history", "check", "--db", "h.duckdb", "--json", "--allow-host-mismatch", cwd=tmp_path
        ).stdout
    )
    assert [s["label"] for s in mixed["steps"]] == ["v3"]
    radeon = json.loads(
        katra(
            "history", "show", "--db", "h.duckdb", "--json", "--host", "radeon", cwd=tmp_path
        ).stdout
    )
    assert [p["label"] for p in radeon["series"][0]["points"]] == ["v3", "v4"]


@pytest.mark.slow
def test_bad_input_is_one_line_exit_2(tmp_path: Path) -> None:
    history_of(tmp_path, [("v1", {"fill": 10.0}), ("v2", {"fill": 10.0})], runs=1)
    msg = one_line_error(
        katra("history", "show", "--db", "h.duckdb", "--scene", "nope", cwd=tmp_path), 2
    )
    assert "unknown scene 'nope'" in msg and "fill" in msg
    msg = one_line_error(
        katra("history", "check", "--db", "h.duckdb", "--metric", "gpu", cwd=tmp_path), 2
    )
    assert "unknown metric 'gpu'" in msg and "wall" in msg
    assert "no host matches" in one_line_error(
        katra("history", "show", "--db", "h.duckdb", "--host", "zzz", cwd=tmp_path), 2
    )
    assert "no history store" in one_line_error(
        katra("history", "show", "--db", "none.duckdb", cwd=tmp_path), 2
    )
    assert not (tmp_path / "none.duckdb").exists()
    (tmp_path / "corrupt.duckdb").write_bytes(b"\x00garbage" * 1000)
    assert "corrupt.duckdb" in one_line_error(
        katra("history", "check", "--db", "corrupt.duckdb", cwd=tmp_path), 2
    )
    assert (tmp_path / "corrupt.duckdb").read_bytes() == b"\x00garbage" * 1000  # never touched
    one_line_error(
        katra(
            "history",
            "add",
            str(tmp_path / "v1-0-h.duckdb.katra"),
            "--label",
            "x",
            "--db",
            "corrupt.duckdb",
            cwd=tmp_path,
        ),
        2,
    )
    con = duckdb.connect(str(tmp_path / "other.duckdb"))
    con.execute("CREATE TABLE t (x INTEGER)")
    con.close()
    assert "not a katra3d history" in one_line_error(
        katra("history", "show", "--db", "other.duckdb", cwd=tmp_path), 2
    )
    from katra_trace.history.store import open_store

    with open_store(tmp_path / "empty.duckdb", read_only=False):
        pass
    assert "is empty" in one_line_error(
        katra("history", "check", "--db", "empty.duckdb", cwd=tmp_path), 2
    )
    assert "nothing" in one_line_error(
        katra("history", "show", "--source", str(tmp_path / "nothing/**/*.parquet"), cwd=tmp_path),
        2,
    )
    one_line_error(katra("history", "check", "--db", "h.duckdb", "--alpha", "2", cwd=tmp_path), 2)
    one_line_error(
        katra("history", "check", "--db", "h.duckdb", "--threshold", "-1", cwd=tmp_path), 2
    )
    one_line_error(katra("history", "show", "--db", "h.duckdb", "--last", "0", cwd=tmp_path), 2)


def test_without_duckdb_history_exits_3(tmp_path: Path) -> None:
    trace = make_trace(tmp_path / "a.katra", {"fill": 10.0})
    blocker = tmp_path / "block"
    blocker.mkdir()
    (blocker / "sitecustomize.py").write_text(
        "import sys\nsys.modules['duckdb'] = None  # as if not installed\n"
    )
    env = {"PYTHONPATH": str(blocker) + os.pathsep + os.environ.get("PYTHONPATH", "")}
    for args in (["add", str(trace), "--label", "v1"], ["show"], ["check"]):
        msg = one_line_error(katra("history", *args, cwd=tmp_path, env=env), 3)
        assert "pip install 'katra3d[history]'" in msg
    assert not (tmp_path / ".katra").exists()


# --------------------------------------------------------------------------- Parquet


@pytest.mark.slow
def test_parquet_round_trip_gives_the_same_show_and_check(tmp_path: Path) -> None:
    labels = [(f"v{i}", {"fill": 10.0 if i < 4 else 12.0, "cubes": 5.0}) for i in range(1, 7)]
    history_of(tmp_path, labels, runs=2)
    history_of(
        tmp_path, [("v1", {"fill": 20.0}), ("v2", {"fill": 20.0})], runs=2, host=OTHER_HOST, day0=10
    )
    res = katra("history", "export", "--parquet", "pq", "--db", "h.duckdb", cwd=tmp_path)
    assert res.returncode == 0 and "exported 16 run(s)" in res.stdout, res.stderr
    files = sorted((tmp_path / "pq").glob("host_id=*/label=*/*.parquet"))
    assert len(files) == 16 and {f.parent.name for f in files} == {
        f"label=v{i}" for i in range(1, 7)
    }
    again = katra("history", "export", "--parquet", "pq", "--db", "h.duckdb", cwd=tmp_path)
    assert "exported 0 run(s)" in again.stdout and "16 already there" in again.stdout
    glob = str(tmp_path / "pq" / "**" / "*.parquet")
    for args in (
        ["show", "--format", "csv"],
        ["show"],
        ["check", "--format", "csv"],
        ["show", "--metric", "all"],
        ["show", "--host", "radeon", "--format", "csv"],
    ):
        db = katra("history", *args, "--db", "h.duckdb", cwd=tmp_path)
        pq = katra("history", *args, "--source", glob, cwd=tmp_path)
        assert db.returncode == pq.returncode and db.stdout == pq.stdout, (
            args,
            db.stdout,
            pq.stdout,
            pq.stderr,
        )
    check = json.loads(katra("history", "check", "--source", glob, "--json", cwd=tmp_path).stdout)
    assert [(s["scene"], s["label"]) for s in check["steps"]] == [("fill", "v4")]


@pytest.mark.slow
def test_runners_write_their_own_parquet_files(tmp_path: Path) -> None:
    """Two runners add at once into one directory (no database); a repeat is a no-op; the glob reads
    all.
    """
    traces = {
        side: [
            make_trace(
                tmp_path / f"{side}{i}.katra",
                {"fill": 10.0},
                seed=50 * (side == "b") + i,
                host=LLVMPIPE if side == "a" else OTHER_HOST,
            )
            for i in range(5)
        ]
        for side in ("a", "b")
    }
    procs = [
        subprocess.Popen(
            [
                sys.executable,
                "-m",
                "katra3d",
                "history",
                "add",
                *map(str, paths),
                "--label",
                "v1",
                "--parquet",
                "fleet",
            ],
            cwd=tmp_path,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
        )
        for paths in traces.values()
    ]
    for proc in procs:
        out, err = proc.communicate(timeout=120)
        assert proc.returncode == 0 and "added 5 run(s)" in out, err
    repeat = katra(
        "history", "add", str(traces["a"][0]), "--label", "v2", "--parquet", "fleet", cwd=tmp_path
    )
    assert "added 0 run(s)" in repeat.stdout and "already stored" in repeat.stdout
    hosts = {p.parent.parent.name for p in (tmp_path / "fleet").glob("*/*/*.parquet")}
    assert len(hosts) == 2
    assert not list((tmp_path / "fleet").rglob("*.tmp"))
    out = json.loads(
        katra("history", "show", "--source", "fleet/**/*.parquet", "--json", cwd=tmp_path).stdout
    )
    assert sorted(s["points"][0]["runs"] for s in out["series"]) == [5, 5]


def test_trend_data_gives_a_report_the_trends_fits_and_steps(tmp_path: Path) -> None:
    from katra_trace.history.series import Selection
    from katra_trace.history.store import Source
    from katra_trace.history.trends import trend_data

    labels = [(f"v{i}", {"fill": 10.0 if i < 4 else 13.0, "cubes": 5.0}) for i in range(1, 7)]
    db = history_of(tmp_path, labels)
    data = trend_data(Source(db=db)).as_dict()
    assert data["labels"] == [f"v{i}" for i in range(1, 7)]
    fill = next(s for s in data["series"] if s["scene"] == "fill")
    assert (
        len(fill["fit"]["levels"]) == len(fill["points"]) == 6
        and fill["fit"]["noise_source"] == "replicates"
    )
    assert fill["fit"]["levels"][2] == pytest.approx(10.0, rel=0.03) and fill["fit"]["levels"][
        3
    ] == pytest.approx(13.0, rel=0.03)
    assert [(s["scene"], s["label"], s["verdict"]) for s in data["steps"]] == [
        ("fill", "v4", "regression")
    ]
    json.dumps(data)  # plain data
    only = trend_data(Source(db=db), Selection(scene="cubes", last=3)).as_dict()
    assert [p["label"] for p in only["series"][0]["points"]] == ["v4", "v5", "v6"] and only[
        "steps"
    ] == []


# --------------------------------------------------------------------------- hostile inputs: a FIFO
# or a device to add, a damaged store, times a store cannot hold


def test_add_refuses_a_fifo_or_a_device_at_once_instead_of_hashing_it_forever(
    tmp_path: Path,
) -> None:
    fifo = tmp_path / "fifo.katra"
    os.mkfifo(fifo)
    good = make_trace(tmp_path / "good.katra", {"fill": 10.0})
    for bad in (str(fifo), "/dev/zero", "/dev/urandom"):
        # the subprocess timeout only guards the suite: a regression hangs here instead of answering
        msg = one_line_error(
            katra(
                "history",
                "add",
                str(good),
                bad,
                "--label",
                "v1",
                "--db",
                "h.duckdb",
                cwd=tmp_path,
                timeout=60,
            ),
            2,
        )
        assert "not a regular file" in msg and bad in msg, msg
    assert not (tmp_path / "h.duckdb").exists()


def test_a_damaged_store_named_like_a_lock_is_one_line_at_once(tmp_path: Path) -> None:
    from katra_trace.history.store import _is_lock_error

    history_of(tmp_path, [("v1", {"fill": 10.0})], runs=1)
    (tmp_path / "block.duckdb").write_bytes(b"\x00garbage" * 1000)
    # with the default 60 s lock timeout: a damaged file is no lock, so the answer comes at once
    msg = one_line_error(
        katra(
            "history",
            "add",
            str(tmp_path / "v1-0-h.duckdb-0.katra"),
            "--label",
            "x",
            "--db",
            "block.duckdb",
            cwd=tmp_path,
        ),
        2,
    )
    assert "block.duckdb" in msg and "locked" not in msg and "damaged" in msg, msg
    msg = one_line_error(katra("history", "show", "--db", "block.duckdb", cwd=tmp_path), 2)
    assert "locked" not in msg and "damaged" in msg, msg
    assert not _is_lock_error(
        duckdb, duckdb.IOException('IO Error: The file "/x/block.duckdb" is damaged')
    )
    assert _is_lock_error(
        duckdb,
        duckdb.IOException(
            'IO Error: Could not set lock on file "/x/h.duckdb": Conflicting lock is held in '
            "python "
            "(PID 7)"
        ),
    )


def test_a_label_time_a_store_cannot_hold_is_one_line(tmp_path: Path) -> None:
    trace = make_trace(tmp_path / "a.katra", {"fill": 10.0})
    for when in ("1000-01-01", "9999-12-31T00:00:00Z"):
        msg = one_line_error(
            katra(
                "history",
                "add",
                str(trace),
                "--label",
                "v1",
                "--time",
                when,
                "--db",
                "h.duckdb",
                cwd=tmp_path,
            ),
            2,
        )
        assert f"--time '{when}' is outside the times a history stores" in msg, msg
    assert parse_time_ns("1700-01-01") < 0 < parse_time_ns("2200-01-01")
    assert not (tmp_path / "h.duckdb").exists()


def test_show_levels_lie_within_their_runs_with_one_run_labels(tmp_path: Path) -> None:
    """A one-run label's level is its run's value (it read 43,344,167 against a min and max of
    43,344,168, the geometric mean's exp(log(x)) rounding down); with several runs it stays within
    their min and max."""
    for i, (label, level) in enumerate(
        (("a", 35_990_417.0), ("b", 35_990_533.0), ("c", 43_344_168.0))
    ):
        path = make_trace(
            tmp_path / f"{label}.katra", {"fill": level}, seed=i, clock=Clock.INSTRUCTIONS
        )
        prepared, _ = prepare_runs(
            [path], label, "", parse_time_ns(f"2026-11-{i + 1:02d}T12:00:00Z")
        )
        add_to_store(tmp_path / "h.duckdb", prepared)
    history_of(tmp_path, [("w1", {"fill": 10.0}), ("w2", {"fill": 12.3})], runs=2, db="w.duckdb")
    for db in ("h.duckdb", "w.duckdb"):
        res = katra("history", "show", "--db", db, "--format", "json", cwd=tmp_path)
        assert res.returncode == 0, res.stderr
        points = [p for s in json.loads(res.stdout)["series"] for p in s["points"]]
        assert len(points) >= 2 and all(p["min"] <= p["level"] <= p["max"] for p in points), points
        assert all(p["level"] == p["values"][0] for p in points if p["runs"] == 1)
