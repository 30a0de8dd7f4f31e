"""``stats`` and ``info`` as text: compact by default, fitting COLUMNS, on the primary clock, with
times in the unit that suits them; ``--all`` for everything; JSON unchanged (no GL)."""

from __future__ import annotations

import json
import math
import re
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from katra_trace import Clock, Flag, Kind
from katra_trace.metrics import CLOCK_PREFERENCE, primary_clock_of
from katra_trace.schema import EVENT_DTYPE
from katra_trace.units import format_count, format_duration, format_ms, format_number, significant
from tests.trace_helpers import write_trace


def test_format_duration_scales_its_unit() -> None:
    assert format_duration(150_000) == "150.0 µs"  # not 0.0001500 ms
    assert format_duration(16_666_667) == "16.67 ms"
    assert format_duration(2.5e9) == "2.500 s"
    assert format_duration(850) == "850.0 ns"
    assert format_duration(1234e9) == "1234 s"  # seconds are the largest unit
    # rounding that reaches 1000 moves to the next unit up, never "1000 µs"
    assert format_duration(999_960) == "1.000 ms" and format_duration(999.96) == "1.000 µs"
    assert format_duration(-150_000) == "-150.0 µs"
    assert format_duration(0) == "0 s"
    assert (
        format_duration(None)
        == format_duration(float("nan"))
        == format_duration(float("inf"))
        == "-"
    )
    assert (
        format_ms(0.00015) == "150.0 ns"
        and format_ms(12.345) == "12.35 ms"
        and format_ms(None) == "-"
    )
    assert format_duration(123_456, digits=3) == "123 µs"
    # a file's word: too large for a float
    assert format_ms(10**400) == format_duration(10**400) == "-"


def test_significant_and_counts() -> None:
    assert [significant(v) for v in (17390.0, 12.345, 0.008483, 9.9996, -9.9996)] == [
        "17390",
        "12.35",
        "0.008483",
        "10.00",
        "-10.00",
    ]
    assert (
        format_count(14_150_000.0) == "14,150,000"
        and format_count(12) == "12"
        and format_count(2.5) == "2.500"
    )
    assert format_count(None) == "-"
    assert (
        format_number(3) == "3"
        and format_number(0.1234567) == "0.1235"
        and format_number(None) == "-"
    )
    assert (
        format_number(True) == "True"
        and format_number("x") == "x"
        and format_number(float("nan")) == "-"
    )


def test_primary_clock_rule() -> None:
    have = ["cpu", "wall", "process"]
    assert primary_clock_of(have, "time", "wall") == "wall"
    assert primary_clock_of(have, None, None) == CLOCK_PREFERENCE[0] == "wall"
    assert primary_clock_of(["cpu", "gpu", "wall"], "time", "gpu") == "gpu"  # what run said wins
    assert primary_clock_of(["instructions", "wall"], "instructions", "wall") == "instructions"
    assert primary_clock_of(["cpu"], "time", "wall") == "cpu"  # the scene lacks it: one it has
    assert primary_clock_of([], "time", "wall") is None


def _trace(
    path: Path,
    *,
    primary: str | None = "wall",
    frame_ns: int = 150_000,
    scenes: tuple[str, ...] = ("fill",),
    workload: str = "unit",
) -> Path:
    """Frames on cpu, wall and process (and a zone) of each scene: 2 warmup + 40 measured."""
    opts: dict[str, Any] = {"size": [64, 64], "frames": 40, "warmup": 2, "timing_mode": "sync"}
    if primary:
        opts["primary_clock"] = primary
    rng = np.random.default_rng(1)
    strings = ["", "frame", "draw", *scenes]
    frame_id, zone_id = 1, 2
    rows, t = [], 0
    for sid, _ in enumerate(scenes, start=3):
        for i in range(42):
            d = int(frame_ns * (1 + 0.05 * rng.standard_normal()))
            flags = int(Flag.WARMUP) if i < 2 else 0
            for clock, f in ((Clock.CPU, 0.1), (Clock.WALL, 1.0), (Clock.PROCESS, 1.9)):
                rows.append((Kind.FRAME, clock, flags, 0, sid, frame_id, i, t, int(d * f), 0.0))
            rows.append((Kind.ZONE, Clock.WALL, flags, 1, sid, zone_id, i, t, d // 2, 0.0))
            t += d
    write_trace(
        path,
        np.array(rows, dtype=EVENT_DTYPE),
        strings,
        summary={},
        header={
            "workload": workload,
            "capture_options": opts,
            "host_info": {"gl": {"renderer": "llvmpipe (test)"}},
        },
    )
    return path


def test_stats_compact_fits_columns_and_shows_the_primary_clock(
    tmp_path: Path, katra_cli: Any
) -> None:
    trace = str(_trace(tmp_path / "t.katra", scenes=("fill", "a-scene-with-a-long-name")))
    r = katra_cli("stats", trace, env={"COLUMNS": "80"})  # piped: COLUMNS still counts
    assert r.returncode == 0, r.stderr
    lines = r.stdout.splitlines()
    assert all(len(line) <= 80 for line in lines), lines
    assert "wall clock" in lines[0]
    header = lines[1].split()
    assert header[:4] == ["scene", "frames", "median", "p99"] and "clock" not in header
    # title, header, one row a scene: the primary clock only (no cpu, process rows)
    assert len(lines) == 4
    assert "150.0 µs" in r.stdout or "µs" in lines[2]  # 150 µs frames in µs, never 0.000150 ms
    assert " ms" not in r.stdout and "0.000" not in r.stdout
    narrow = katra_cli("stats", trace, env={"COLUMNS": "50"}).stdout.splitlines()
    # columns given up
    assert narrow[1].split()[:4] == header[:4] and len(narrow[1]) < len(lines[1])
    wide = katra_cli("stats", trace, env={"COLUMNS": "200"}).stdout.splitlines()
    assert len(wide[1]) > len(lines[1]) and "CV" in wide[1].split()  # units.stat_label
    # --all: every clock and stat, as before
    every = katra_cli("stats", trace, "--all", env={"COLUMNS": "80"}).stdout
    assert {"cpu", "wall", "process"} <= set(every.split()) and "fps_low_1pct_integral" in every


def test_stats_compact_follows_the_recorded_clock(tmp_path: Path, katra_cli: Any) -> None:
    trace = str(_trace(tmp_path / "t.katra", primary="process"))
    out = katra_cli("stats", trace, "--zones").stdout
    assert "process, wall clocks" in out and re.search(r"fill +\(frame\) +process ", out), out
    # the zone is timed on wall only: shown on that clock
    assert re.search(r"fill +draw +wall +40 ", out), out


def test_stats_json_and_csv_stay_complete(tmp_path: Path, katra_cli: Any) -> None:
    trace = str(_trace(tmp_path / "t.katra"))
    plain = json.loads(katra_cli("stats", trace, "--format", "json").stdout)
    every = json.loads(katra_cli("stats", trace, "--format", "json", "--all").stdout)
    assert plain == every and set(plain["scenes"]["fill"]["metrics"]) == {"cpu", "wall", "process"}
    assert plain["scenes"]["fill"]["metrics"]["wall"]["median_ms"] == pytest.approx(0.15, rel=0.1)
    csv_rows = katra_cli(
        "stats", trace, "--format", "csv", env={"COLUMNS": "40"}
    ).stdout.splitlines()
    assert len(csv_rows) == 4 and "fps_low_0_1pct_integral" in csv_rows[0]


def test_stats_directory_is_one_table_with_a_run_column(tmp_path: Path, katra_cli: Any) -> None:
    runs = tmp_path / "runs"
    runs.mkdir()
    for i in (1, 2):
        _trace(runs / f"run-{i}.katra")
    r = katra_cli("stats", str(runs), env={"COLUMNS": "100"})
    assert r.returncode == 0, r.stderr
    lines = r.stdout.splitlines()
    assert lines[1].split()[:2] == ["run", "scene"]
    assert [line.split()[0] for line in lines[2:]] == ["run-1.katra", "run-2.katra"]


@pytest.mark.parametrize("slow", [False, True])
def test_stats_directory_json_is_one_document_and_csv_one_table(
    tmp_path: Path, katra_cli: Any, slow: bool
) -> None:
    """A directory: JSON is one document naming each run, CSV one header with a run column (as the
    tables).
    """
    runs = tmp_path / "runs"
    runs.mkdir()
    for i in (1, 2):
        _trace(runs / f"run-{i}.katra")
    extra = ("--slow",) if slow else ()
    r = katra_cli("stats", str(runs), *extra, "--format", "json")
    assert r.returncode == 0, r.stderr
    doc = json.loads(r.stdout)
    assert [run["run"] for run in doc["runs"]] == ["run-1.katra", "run-2.katra"]
    one = json.loads(
        katra_cli("stats", str(runs / "run-1.katra"), *extra, "--format", "json").stdout
    )
    assert doc["runs"][0] == {"run": "run-1.katra", **one}
    assert ("slow_frames" in doc["runs"][1]["scenes"]["fill"]) == slow
    lines = katra_cli("stats", str(runs), *extra, "--format", "csv").stdout.splitlines()
    assert lines[0].startswith("run,scene,") and sum(line.startswith("run,") for line in lines) == 1
    if not slow:
        assert [line.split(",")[0] for line in lines[1:]] == ["run-1.katra"] * 3 + [
            "run-2.katra"
        ] * 3


def test_info_compact_drops_empty_fields(tmp_path: Path, katra_cli: Any) -> None:
    trace = str(_trace(tmp_path / "t.katra", workload="my-renderer"))
    r = katra_cli("info", trace, env={"COLUMNS": "80"})
    assert r.returncode == 0, r.stderr
    lines = r.stdout.splitlines()
    full = katra_cli("info", trace, "--all", env={"COLUMNS": "80"}).stdout.splitlines()
    assert len(lines) <= 15 < len(full)
    # no empty field shown
    assert not any(line.rstrip().endswith((" -", ":")) for line in lines), lines
    assert "\nworkload  my-renderer\n" in r.stdout
    assert "llvmpipe (test)" in r.stdout and "64x64, 40 frames (+2 warmup)" in r.stdout
    # a line may run over only where one word (the trace's path) is longer than the room left for it
    assert all(
        len(line) <= 80 or len(line.split()[-1]) > 80 - 10 for line in lines if " " in line.strip()
    ), lines
    info = json.loads(katra_cli("info", trace, "--json").stdout)  # scripts: unchanged, complete
    assert info["header"]["workload"] == "my-renderer" and info["events"] == 42 * 4


def test_info_survives_a_summary_of_the_wrong_shape(tmp_path: Path, katra_cli: Any) -> None:
    path = tmp_path / "odd.katra"
    write_trace(
        path,
        np.zeros(0, dtype=EVENT_DTYPE),
        [""],
        header={"workload": "odd\x1bname"},
        summary={"scenes": 3},
    )
    r = katra_cli("info", str(path))
    assert r.returncode == 0 and "Traceback" not in r.stderr, r.stderr
    assert "\x1b" not in r.stdout and "odd\\x1bname" in r.stdout


@pytest.mark.parametrize("columns", [None, "oops"])
def test_width_falls_back_to_80_when_piped(
    tmp_path: Path, katra_cli: Any, columns: str | None, monkeypatch: pytest.MonkeyPatch
) -> None:
    trace = str(_trace(tmp_path / "t.katra", scenes=("a" * 30,)))
    monkeypatch.delenv("COLUMNS", raising=False)
    env = {"COLUMNS": columns} if columns else None
    lines = katra_cli("stats", trace, env=env).stdout.splitlines()
    assert (
        max(len(line) for line in lines[1:])
        <= 80
        < len(katra_cli("stats", trace, "--all", env=env).stdout.splitlines()[1])
    )


def test_a_change_is_written_one_way_everywhere() -> None:
    from katra_trace.units import format_change, format_change_pct

    assert [format_change(r) for r in (1.052, 0.97, 1.0)] == ["+5.2%", "-3.0%", "+0.0%"]
    assert format_change(1.01234, 2) == "+1.23%" and format_change_pct(-0.5, 2) == "-0.50%"
    assert [format_change(x) for x in (None, math.nan, "x")] == ["-", "-", "-"]
    assert format_change(math.inf) == "+inf%"  # an early look's interval: no upper end yet
    import katra3d.harness.bisect.report as bisect_report

    # bisect's table and compare's use this one formatter
    assert bisect_report._pct(1.2) == format_change(1.2, 2) == "+20.00%"
