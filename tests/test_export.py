"""katra3d export: Perfetto protobuf, Chrome JSON, CSV and Parquet, checked by parsing the output
back.
"""

from __future__ import annotations

import csv
import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from katra_trace import Clock, Kind, open_trace
from katra_trace.errors import OutputExistsError
from katra_trace.export import FORMATS, default_path, export_trace
from katra_trace.export.timeline import build_timeline, gpu_to_host, nest
from katra_trace.optional import MissingDependencyError
from tests.cli_helpers import katra_main
from tests.export_helpers import (
    HEADER,
    HOST0,
    STRINGS,
    SYNCS,
    gpu_expected,
    parse_perfetto,
    write_rich,
)

pytest.importorskip("perfetto", reason="the 'export' extra (perfetto) is part of the test extra")


@pytest.fixture
def rich(tmp_path: Path) -> tuple[Path, np.ndarray]:
    path = tmp_path / "rich.katra"
    return path, write_rich(path)


def _spans(ev: np.ndarray) -> np.ndarray:
    mask: np.ndarray = ((ev["kind"] == Kind.FRAME) | (ev["kind"] == Kind.ZONE)) & (
        ev["clock"] <= Clock.GPU
    )
    return mask


# --------------------------------------------------------------------------- perfetto


def test_perfetto_round_trip(rich: tuple[Path, np.ndarray], tmp_path: Path) -> None:
    path, ev = rich
    result = export_trace(open_trace(path), "perfetto")
    assert result.path == tmp_path / "rich.pftrace"
    parsed = parse_perfetto(result.path.read_bytes())
    assert parsed.problems == []
    assert parsed.packets == result.counts["packets"]
    by_name = {t["name"]: t for t in parsed.tracks.values()}
    # one group per scene, one slice track per scene x time clock, counter tracks for the rest
    assert {"alpha", "beta", "gamma", "katra3d capture"} <= set(by_name)
    slice_tracks = sorted(n for n, t in by_name.items() if t["parent"] and not t["counter"])
    assert slice_tracks == ["alpha: cpu", "alpha: wall", "beta: gpu"]
    counter_tracks = sorted(n for n, t in by_name.items() if t["counter"])
    assert counter_tracks == [
        "alpha: frame_interval_ns (cpu)",
        "gamma: D1mr (cycles)",
        "gamma: Ir (cycles)",
        "gamma: draw (instructions)",
        "gamma: frame (cycles)",
        "gamma: frame (instructions)",
    ]
    scene_of = {uuid: t["name"] for uuid, t in parsed.tracks.items() if not t["parent"]}
    for name in slice_tracks + counter_tracks:
        assert scene_of[by_name[name]["parent"]] == name.split(":")[0]

    # every frame and zone on a time clock is one slice, with its name and exact times
    base = HOST0 * 0 + int(open_trace(path).header.start_host_ns or 0)
    spans = ev[_spans(ev) & (ev["clock"] != Clock.GPU)]
    got = [s for s in parsed.slices if s.track.startswith("alpha")]
    assert len(got) == len(spans)
    want = sorted(
        (
            f"alpha: {'wall' if r['clock'] == Clock.WALL else 'cpu'}",
            STRINGS[r["name"]],
            int(r["start_ns"]) + base,
            int(r["dur_ns"]),
            int(r["depth"]),
        )
        for r in spans
    )
    assert sorted((s.track, s.name, s.ts, s.dur, s.depth) for s in got) == want
    # zones nest inside the frame slice of the same frame index
    frames = [s for s in got if s.depth == 0]
    assert all(s.name == "frame" and "frame" in s.args for s in frames)
    for z in (s for s in got if s.depth > 0):
        parent = [
            f
            for f in frames
            if f.track == z.track and f.ts <= z.ts and z.ts + z.dur <= f.ts + f.dur
        ]
        assert len(parent) == 1, z
    assert {s.args.get("flags") for s in frames} == {"warmup", None}

    # markers: instants, reference ones included
    inst = sorted(
        (s.name, s.ts - base, s.args.get("flags"), s.args.get("dur_ns")) for s in parsed.instants
    )
    assert inst == [
        ("reference", 1_000_000 + 3 * 4_100_000 + 4_050_000, "reference", 30_000),
        ("reference", 1_000_000 + 7 * 4_100_000 + 4_050_000, "reference", 30_000),
        ("setup", 0, "setup", 500_000),
    ]

    # counters and count clocks: one value each, at the row's host time
    assert [v for _, v in parsed.counters["alpha: frame_interval_ns (cpu)"]] == [
        4_100_000.0 + i for i in range(8)
    ]
    assert [v for _, v in parsed.counters["gamma: frame (instructions)"]] == [
        1_000_000.0 + i for i in range(5)
    ]
    assert [v for _, v in parsed.counters["gamma: D1mr (cycles)"]] == [100.0 + i for i in range(5)]
    total = (
        len(parsed.slices) + len(parsed.instants) + sum(len(v) for v in parsed.counters.values())
    )
    assert total == len(ev) + 1  # every event once, plus the capture slice
    assert result.counts["slices"] == len(parsed.slices) - 1


def test_perfetto_gpu_placed_through_clock_syncs(rich: tuple[Path, np.ndarray]) -> None:
    path, ev = rich
    trace = open_trace(path)
    result = export_trace(trace, "perfetto")
    parsed = parse_perfetto(result.path.read_bytes())
    base = int(trace.header.start_host_ns or 0)
    gpu = ev[ev["clock"] == Clock.GPU]
    got = sorted((s.ts - base, s.dur) for s in parsed.slices if s.track == "beta: gpu")
    want = sorted(
        (
            gpu_expected(int(r["start_ns"])),
            gpu_expected(int(r["start_ns"]) + int(r["dur_ns"])) - gpu_expected(int(r["start_ns"])),
        )
        for r in gpu
    )
    assert got == want
    # the drift is real: late frames moved by tens of microseconds from the stored times
    assert (
        max(abs(g[0] - int(r)) for g, r in zip(got, sorted(gpu["start_ns"]), strict=True)) > 50_000
    )
    assert result.counts["gpu_drift_ppb"] == round(
        ((HOST0 * 0 + 900_000_000) / 899_910_000 - 1) * 1e9
    )


def test_gpu_mapping_one_pair_keeps_stored_times() -> None:
    t = np.array([10, 20, 30], dtype=np.int64)
    same, drift = gpu_to_host(t, SYNCS[:1])
    assert same.tolist() == [10, 20, 30] and drift is None
    mapped, drift = gpu_to_host(t, SYNCS)
    assert drift is not None and drift > 0


def test_perfetto_metadata_findable(rich: tuple[Path, np.ndarray]) -> None:
    path, _ = rich
    parsed = parse_perfetto(export_trace(open_trace(path), "perfetto").path.read_bytes())
    capture = [s for s in parsed.slices if s.track == "katra3d capture"]
    assert len(capture) == 1 and capture[0].name == "capture: export-test"
    args = capture[0].args
    assert args["timing_mode"] == "sync" and args["timing_reason"] == "a test says so"
    assert args["renderer"] == "test renderer"
    options = {e.name: e for e in args["capture_options"].dict_entries}
    assert options["timing_mode"].string_value == "sync"
    assert [v.int_value for v in options["size"].array_values] == [64, 64]


def test_nest_clamps_overhanging_spans() -> None:
    # frame [0, 100); a zone overhangs it to 120; the next frame starts at 100 with a zone
    ends, changed = nest([0, 10, 100, 100], [100, 120, 200, 150], [0, 1, 0, 1])
    assert ends == [100, 100, 200, 150] and changed == 1
    # overlapping siblings: the first is closed where the second starts
    ends, changed = nest([0, 5, 40], [100, 50, 60], [0, 1, 1])
    assert ends == [100, 40, 60] and changed == 1
    # zero-length spans nest inside a span that starts at the same time
    ends, changed = nest([0, 0, 0], [10, 0, 0], [0, 1, 2])
    assert ends == [10, 0, 0] and changed == 0


def test_perfetto_exports_clamped_spans_nested(tmp_path: Path) -> None:
    from tests.trace_helpers import write_trace

    rows = [
        (Kind.FRAME, Clock.WALL, 0, 0, 1, 2, 0, 0, 100, 0.0),
        (Kind.ZONE, Clock.WALL, 0, 1, 1, 3, 0, 50, 70, 0.0),
        (Kind.FRAME, Clock.WALL, 0, 0, 1, 2, 1, 100, 100, 0.0),
    ]
    from katra_trace.schema import EVENT_DTYPE

    write_trace(tmp_path / "o.katra", np.array(rows, dtype=EVENT_DTYPE), ["", "s", "frame", "z"])
    result = export_trace(open_trace(tmp_path / "o.katra"), "perfetto")
    assert any("1 spans overhung" in w for w in result.warnings)
    parsed = parse_perfetto(result.path.read_bytes())
    assert parsed.problems == []
    assert sorted(
        (s.name, s.ts - parsed.slices[1].ts * 0, s.dur, s.depth)
        for s in parsed.slices
        if s.track != "katra3d capture"
    )[-1][2:] == (50, 1)


# --------------------------------------------------------------------------- chrome


def test_chrome_json(rich: tuple[Path, np.ndarray]) -> None:
    path, ev = rich
    result = export_trace(open_trace(path), "chrome")
    assert result.path.suffix == ".json" and result.warnings == ()
    doc = json.loads(result.path.read_text())
    events = doc["traceEvents"]
    assert doc["metadata"]["timing_mode"] == "sync"
    assert doc["metadata"]["host_info"] == HEADER["host_info"]
    procs = {
        e["pid"]: e["args"]["name"]
        for e in events
        if e["ph"] == "M" and e["name"] == "process_name"
    }
    assert set(procs.values()) == {"katra3d capture", "alpha", "beta", "gamma"}
    threads = {
        (procs[e["pid"]], e["args"]["name"])
        for e in events
        if e["ph"] == "M" and e["name"] == "thread_name"
    }
    assert threads == {("alpha", "wall"), ("alpha", "cpu"), ("beta", "gpu")}
    xs = [e for e in events if e["ph"] == "X" and e["pid"] != 0]
    assert len(xs) == int(_spans(ev).sum())
    # times in µs, exact to the ns
    alpha_wall = sorted(
        (round(e["ts"] * 1000), round(e["dur"] * 1000))
        for e in xs
        if procs[e["pid"]] == "alpha" and e["tid"] == 1
    )
    rows = ev[_spans(ev) & (ev["clock"] == Clock.WALL)]
    assert alpha_wall == sorted((int(r["start_ns"]), int(r["dur_ns"])) for r in rows)
    # zones nest in their frame (same pid/tid, same frame index)
    for z in (e for e in xs if e["cat"] == "zone"):
        frame = [
            f
            for f in xs
            if f["cat"] == "frame"
            and (f["pid"], f["tid"]) == (z["pid"], z["tid"])
            and f["args"]["frame"] == z["args"]["frame"]
        ]
        assert len(frame) == 1
        assert (
            frame[0]["ts"] <= z["ts"]
            and z["ts"] + z["dur"] <= frame[0]["ts"] + frame[0]["dur"] + 1e-9
        )
    assert sum(e["ph"] == "i" for e in events) == int((ev["kind"] == Kind.MARKER).sum())
    counters = [e for e in events if e["ph"] == "C"]
    value_rows = (ev["kind"] == Kind.COUNTER) | (
        ((ev["kind"] == Kind.FRAME) | (ev["kind"] == Kind.ZONE)) & (ev["clock"] > Clock.GPU)
    )
    assert len(counters) == int(value_rows.sum())
    assert {c["name"] for c in counters} >= {
        "Ir (cycles)",
        "frame (instructions)",
        "frame_interval_ns (cpu)",
    }


def test_chrome_warns_when_huge(
    rich: tuple[Path, np.ndarray], monkeypatch: pytest.MonkeyPatch
) -> None:
    import katra_trace.export.chrome as chrome

    path, ev = rich
    monkeypatch.setattr(chrome, "CHROME_EVENT_WARN", len(ev) - 1)
    result = export_trace(open_trace(path), "chrome")
    assert len(result.warnings) == 1 and "--to perfetto" in result.warnings[0]


# --------------------------------------------------------------------------- csv / parquet


def test_csv_one_row_per_event(rich: tuple[Path, np.ndarray]) -> None:
    path, ev = rich
    result = export_trace(open_trace(path), "csv")
    with open(result.path, newline="") as f:
        rows = list(csv.DictReader(f))
    assert len(rows) == len(ev)
    assert list(rows[0]) == [
        "scene",
        "name",
        "kind",
        "clock",
        "flags",
        "depth",
        "frame",
        "start_ns",
        "dur_ns",
        "value",
    ]
    assert rows[0] == {
        "scene": "alpha",
        "name": "setup",
        "kind": "marker",
        "clock": "wall",
        "flags": "setup",
        "depth": "0",
        "frame": "0",
        "start_ns": "0",
        "dur_ns": "500000",
        "value": "0.0",
    }
    for row, e in zip(rows, ev, strict=True):
        assert row["name"] == STRINGS[e["name"]] and row["scene"] == STRINGS[e["scene"]]
        assert int(row["start_ns"]) == e["start_ns"] and int(row["dur_ns"]) == e["dur_ns"]
        assert float(row["value"]) == e["value"]
    assert {r["clock"] for r in rows} == {"wall", "cpu", "gpu", "instructions", "cycles"}
    assert {r["flags"] for r in rows} == {"", "setup", "warmup", "reference", "estimated"}


def test_parquet_and_arrow(rich: tuple[Path, np.ndarray]) -> None:
    pq = pytest.importorskip("pyarrow.parquet")
    from katra_trace.export import to_arrow

    path, ev = rich
    trace = open_trace(path)
    result = export_trace(trace, "parquet")
    table = pq.read_table(result.path)
    assert table.num_rows == len(ev)
    assert table.column("start_ns").to_pylist() == ev["start_ns"].tolist()
    assert table.column("dur_ns").to_pylist() == ev["dur_ns"].tolist()
    assert table.column("name").to_pylist() == [STRINGS[i] for i in ev["name"]]
    assert set(table.column("kind").to_pylist()) == {"frame", "zone", "marker", "counter"}
    meta = table.schema.metadata
    assert json.loads(meta[b"katra3d.header"])["workload"] == "export-test"
    assert to_arrow(trace).equals(table.cast(to_arrow(trace).schema))


def test_missing_pyarrow_is_exit_3(
    rich: tuple[Path, np.ndarray], monkeypatch: pytest.MonkeyPatch
) -> None:
    path, _ = rich
    for name in [m for m in sys.modules if m == "pyarrow" or m.startswith("pyarrow.")]:
        monkeypatch.delitem(sys.modules, name)
    monkeypatch.setitem(sys.modules, "pyarrow", None)  # what an absent package looks like to import
    with pytest.raises(MissingDependencyError, match=r"pip install 'katra3d\[export\]'") as info:
        export_trace(open_trace(path), "parquet")
    assert info.value.exit_code == 3
    assert not path.with_suffix(".parquet").exists()


# --------------------------------------------------------------------------- CLI


def test_cli_default_path_refuses_to_replace(
    rich: tuple[Path, np.ndarray], katra_cli: Any, capsys: pytest.CaptureFixture[str]
) -> None:
    path, _ = rich
    r = katra_cli("export", str(path), "--to", "csv", "--json")
    assert r.returncode == 0, r.stderr
    out = json.loads(r.stdout)
    assert (
        out["path"] == str(path.with_suffix(".csv"))
        and out["events"] > 0
        and out["format"] == "csv"
    )
    before = path.with_suffix(".csv").read_bytes()
    code, _, err = katra_main(capsys, "export", str(path), "--to", "csv")
    assert code == 2 and "already exists" in err and len(err.strip().splitlines()) == 1
    assert path.with_suffix(".csv").read_bytes() == before
    with pytest.raises(OutputExistsError):
        export_trace(open_trace(path), "csv")
    code, _, err = katra_main(
        capsys, "export", str(path), "--to", "csv", "--force", "-o", str(path.with_suffix(".csv"))
    )
    assert code == 0, err
    # no temporary left
    assert [p.name for p in path.parent.iterdir() if p.name.startswith(".")] == []


def test_cli_damaged_trace_exports_prefix(
    rich: tuple[Path, np.ndarray], tmp_path: Path, katra_cli: Any
) -> None:
    path, ev = rich
    data = path.read_bytes()
    cut = tmp_path / "cut.katra"
    cut.write_bytes(data[: len(data) * 2 // 3])
    r = katra_cli("export", str(cut), "--to", "chrome")
    assert r.returncode == 0, r.stderr
    assert "is damaged" in r.stderr and "exporting the" in r.stderr
    doc = json.loads(cut.with_suffix(".json").read_text())
    assert 0 < sum(e["ph"] == "X" for e in doc["traceEvents"]) < len(ev)


def test_cli_errors_are_one_line(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    code, _, err = katra_main(capsys, "export", str(tmp_path / "none.katra"), "--to", "perfetto")
    assert code == 2 and err.startswith("katra3d: error:") and len(err.splitlines()) == 1
    bad = tmp_path / "bad.katra"
    bad.write_bytes(b"not a trace at all")
    code, _, err = katra_main(capsys, "export", str(bad), "--to", "csv")
    assert code == 2 and "not a katra3d trace" in err and len(err.splitlines()) == 1
    code, _, err = katra_main(capsys, "export", str(bad), "--to", "svg")
    assert code == 2 and len(err.splitlines()) == 1 and "invalid choice" in err
    write_rich(tmp_path / "ok.katra")
    code, _, err = katra_main(
        capsys,
        "export",
        str(tmp_path / "ok.katra"),
        "--to",
        "csv",
        "-o",
        str(tmp_path / "no" / "dir.csv"),
    )
    assert code == 2 and "directory does not exist" in err and len(err.splitlines()) == 1
    code, _, err = katra_main(
        capsys, "export", str(tmp_path / "ok.katra"), "--to", "csv", "-o", str(tmp_path)
    )
    assert code == 2 and "is a directory" in err


def test_cli_missing_perfetto_exit_3(rich: tuple[Path, np.ndarray]) -> None:
    path, _ = rich
    code = (
        "import sys; sys.modules['perfetto'] = None; from katra3d.harness.cli import main; "
        f"sys.exit(main(['export', {str(path)!r}, '--to', 'perfetto']))"
    )
    r = subprocess.run(
        [sys.executable, "-c", code],
        capture_output=True,
        text=True,
        timeout=60,
        env={**os.environ, "PYTHONWARNINGS": "error"},
    )
    assert r.returncode == 3, r.stderr
    assert r.stderr.count("\n") == 1 and "katra3d[export]" in r.stderr
    assert not path.with_suffix(".pftrace").exists()


def test_default_paths() -> None:
    assert default_path("a/run.katra", "perfetto") == Path("a/run.pftrace")
    assert default_path("a/run.bin", "csv") == Path("a/run.bin.csv")
    assert set(FORMATS) == {"perfetto", "chrome", "csv", "parquet", "callgrind"}


def test_timeline_counts(rich: tuple[Path, np.ndarray]) -> None:
    path, ev = rich
    trace = open_trace(path)
    tl = build_timeline(trace.events, list(trace.strings), trace.clock_syncs)
    assert tl.span_count == int(_spans(ev).sum())
    assert sum(len(t.instants) for t in tl.slice_tracks) == int((ev["kind"] == Kind.MARKER).sum())
    assert tl.clamped == 0


def test_to_pandas_or_a_clear_error(
    rich: tuple[Path, np.ndarray], monkeypatch: pytest.MonkeyPatch
) -> None:
    from katra_trace.export import to_pandas

    path, ev = rich
    frame = to_pandas(open_trace(path))  # pandas comes with the test extra, as with katra3d[pandas]
    assert len(frame) == len(ev) and list(frame.columns)[:4] == ["scene", "name", "kind", "clock"]
    monkeypatch.setitem(sys.modules, "pandas", None)  # as if it were not installed
    with pytest.raises(MissingDependencyError, match="'pandas'") as info:
        to_pandas(open_trace(path))
    assert info.value.exit_code == 3 and "pip install 'katra3d[pandas]'" in str(info.value)


@pytest.mark.gl
def test_real_capture_exports_nested(tmp_path: Path, katra_cli: Any, gl_ctx: Any) -> None:
    """A capture made by katra3d itself: every frame and zone a slice, nested, nothing clamped."""
    trace_path = tmp_path / "real.katra"
    r = katra_cli(
        "run",
        "triangle",
        "postfx",
        "--frames",
        "12",
        "--warmup",
        "2",
        "--zones",
        "--size",
        "48x48",
        "--quiet",
        "-o",
        str(trace_path),
    )
    assert r.returncode == 0, r.stderr
    trace = open_trace(trace_path)
    result = export_trace(trace, "perfetto")
    assert result.warnings == ()
    parsed = parse_perfetto(result.path.read_bytes())
    assert parsed.problems == []
    ev = trace.events
    assert len(parsed.slices) - 1 == int(_spans(ev).sum())
    zones = [s for s in parsed.slices if s.depth > 0]
    assert zones and all(s.track.startswith(("triangle", "postfx")) for s in zones)
    assert len(parsed.instants) == int((ev["kind"] == Kind.MARKER).sum()) > 0
    # process CPU time is a value per frame (threads add up past the wall span): a counter track
    for scene in ("triangle", "postfx"):
        sid = trace.strings.index(scene)
        rows = ev[
            (ev["kind"] == Kind.FRAME) & (ev["clock"] == Clock.PROCESS) & (ev["scene"] == sid)
        ]
        assert len(rows) == 14
        assert [v for _, v in parsed.counters[f"{scene}: frame (process)"]] == rows[
            "dur_ns"
        ].astype(float).tolist()


def test_odd_header_values_export_and_report(tmp_path: Path) -> None:
    """Header values the reader lets through (None for documented keys, anything for the others)."""
    from katra_trace.report import build_report
    from tests.export_helpers import rich_events
    from tests.trace_helpers import write_trace

    header = {
        "workload": "odd",
        "capture_options": {
            "timing_mode": None,
            "primary_clock": None,
            "measure": {"mode": None},
            "resolved": None,
            "size": 5,
            "frames": {"n": 2},
        },
        "host_info": {"gl": {"renderer": 5}, "system": [1, 2]},
    }
    write_trace(tmp_path / "odd.katra", rich_events(), STRINGS, header=header)
    trace = open_trace(tmp_path / "odd.katra")
    for fmt in FORMATS:  # callgrind: a counted run's profiles, which this trace has not
        if fmt != "callgrind":
            assert export_trace(trace, fmt).bytes > 0
    assert parse_perfetto((tmp_path / "odd.pftrace").read_bytes()).problems == []
    assert "alpha" in build_report([trace], [trace])
