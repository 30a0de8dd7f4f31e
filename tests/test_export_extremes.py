"""Exports and JSON outputs on traces that validate passes but whose values are extreme: ids at
2^32-1, times at the int64 limits, spreadsheet formulas in names, NaN and infinity in the header.
No GL."""

from __future__ import annotations

import csv
import json
import math
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from katra_trace import TraceWriter, jsontext, open_trace
from katra_trace.errors import TraceFormatError
from katra_trace.export import export_trace
from katra_trace.export.perfetto import MAX_TIMESTAMP_NS, timestamp_base
from katra_trace.export.table import csv_text, string_columns
from katra_trace.export.timeline import build_timeline, gpu_to_host
from katra_trace.io import format as fmt
from katra_trace.io.header import build_capture_options
from katra_trace.report import build_report, series
from katra_trace.schema import EVENT_DTYPE
from tests.cli_helpers import katra_main
from tests.export_helpers import parse_perfetto
from tests.extreme_traces import HOSTILE_NAMES, I64_MAX, U32_MAX, WRITERS
from tests.trace_helpers import frame_zone_stream, split_blocks, write_trace


def _strict_json(text: str) -> Any:
    """Parse as a strict parser (a browser, jq) would: NaN and Infinity are errors."""

    def refuse(constant: str) -> None:
        raise ValueError(f"not JSON: {constant}")

    return json.loads(text, parse_constant=refuse)


def _write(tmp_path: Path, name: str) -> Path:
    path = tmp_path / f"{name}.katra"
    WRITERS[name](path)
    return path


def test_scene_id_at_the_top_is_keyed_not_allocated(tmp_path: Path) -> None:
    """Defect 1: the scene column's dictionary holds the ids used, never range(max id)."""
    trace = open_trace(_write(tmp_path, "scene-id-max-some"))
    codes, words = string_columns(trace.events, list(trace.strings))["scene"]
    assert words == ["scene", f"?{U32_MAX}"]
    assert [words[c] for c in codes.tolist()] == [
        "scene" if s == 1 else f"?{U32_MAX}" for s in trace.events["scene"].tolist()
    ]
    result = export_trace(trace, "csv", tmp_path / "out.csv")
    with open(result.path, newline="", encoding="utf-8") as f:
        rows = list(csv.DictReader(f))
    assert len(rows) == len(trace.events) and rows[5]["scene"] == f"?{U32_MAX}"


def test_perfetto_rebases_times_past_int64_and_keeps_their_order(tmp_path: Path) -> None:
    """Defect 7: events near the int64 limit (a host start that would push them past it) export,
    shifted so that the first is at 0, with a warning; spacing between events is kept to the ns."""
    trace = open_trace(_write(tmp_path, "start-near-int64-max"))
    result = export_trace(trace, "perfetto", tmp_path / "out.pftrace")
    assert any("shifted so that the first event is at 0" in w for w in result.warnings)
    parsed = parse_perfetto(result.path.read_bytes())
    assert parsed.problems == []
    frames = sorted(s.ts for s in parsed.slices if s.name == "frame")
    wall = trace.events[trace.events["kind"] == 0]
    assert frames == sorted((wall["start_ns"] - int(trace.events["start_ns"].min())).tolist())
    assert all(0 <= s.ts <= MAX_TIMESTAMP_NS for s in parsed.slices)


def test_perfetto_header_start_past_int64_is_rebased(tmp_path: Path) -> None:
    result = export_trace(
        open_trace(_write(tmp_path, "header-start-max")), "perfetto", tmp_path / "o.pftrace"
    )
    assert result.counts["timestamps_rebased"] == 1
    assert parse_perfetto(result.path.read_bytes()).problems == []


def test_timestamp_base_rules() -> None:
    assert timestamp_base(1_000, 5, 10) == (1_000, False)  # the capture's own start
    # setup before a host start at 0: shifted, as always
    assert timestamp_base(0, -5, 10) == (5, False)
    assert timestamp_base(None, 0, 10) == (0, False)
    assert timestamp_base(I64_MAX, 0, 10) == (0, True)
    assert timestamp_base(-1, 3, 10) == (-3, True)
    with pytest.raises(TraceFormatError, match="do not fit a Perfetto timeline"):
        timestamp_base(0, -(2**62), 2**62)
    with pytest.raises(TraceFormatError):
        timestamp_base(0, -(2**63), -1)


def test_times_span_too_wide_for_perfetto_is_one_line_exit_2(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    path = _write(tmp_path, "start-spread-wide")
    assert katra_main(capsys, "validate", str(path))[0] == 0
    code, _, err = katra_main(
        capsys,
        "export",
        str(path),
        "--to",
        "perfetto",
        "-o",
        str(tmp_path / "o.pftrace"),
        "--quiet",
    )
    assert code == 2 and err.startswith("katra3d: error:") and len(err.splitlines()) == 1
    assert "do not fit a Perfetto timeline" in err and not (tmp_path / "o.pftrace").exists()
    assert (
        katra_main(
            capsys, "export", str(path), "--to", "chrome", "-o", str(tmp_path / "o.json"), "--quiet"
        )[0]
        == 0
    )


def test_gpu_mapping_ignores_sync_pairs_beyond_int64_arithmetic() -> None:
    t = np.array([10, 20, 30], dtype=np.int64)
    for pairs in (
        [{"host_ns": 2**70, "gpu_ns": 0}, {"host_ns": 2**71, "gpu_ns": 5}],
        [{"host_ns": 0, "gpu_ns": -(2**62)}, {"host_ns": 2**62, "gpu_ns": 2**62}],
        [{"host_ns": 0, "gpu_ns": 0}, {"host_ns": 2**61, "gpu_ns": 1}],
    ):
        out, drift = gpu_to_host(t, pairs)
        assert out.tolist() == [10, 20, 30] and drift is None


@pytest.mark.parametrize("text", [*HOSTILE_NAMES, "plain", "", "'quoted", " =spaced", "1e9"])
def test_csv_text_neutralises_formulas(text: str) -> None:
    out = csv_text(text)
    if text[:1] in ("=", "+", "-", "@", "\t", "\r"):
        assert out == "'" + text
    else:
        assert out == text


def test_csv_export_of_formula_names_is_text_and_numbers_stay_numbers(tmp_path: Path) -> None:
    """Defect 11: a name a spreadsheet would run gets a leading quote; numeric columns are
    unchanged.
    """
    trace = open_trace(_write(tmp_path, "hostile-strings"))
    out = export_trace(trace, "csv", tmp_path / "h.csv").path
    with open(out, newline="", encoding="utf-8") as f:
        rows = list(csv.DictReader(f))
    cells = {r["scene"] for r in rows} | {r["name"] for r in rows}
    assert '\'=HYPERLINK("https://evil.example","x")' in cells and "'@SUM(1)" in cells
    assert "'+1+1" in cells and "'-1+1" in cells and "'\t=1" in cells and "'\r=1" in cells
    assert not [c for c in cells if c[:1] in ("=", "+", "-", "@", "\t", "\r")]
    assert [int(r["start_ns"]) for r in rows] == trace.events["start_ns"].tolist()
    assert [int(r["dur_ns"]) for r in rows] == trace.events["dur_ns"].tolist()
    negative = out.read_text(encoding="utf-8")
    # no cell starts with '-' unquoted (all times are >= 0 here)
    assert ",-" not in negative.replace(",'-", "")


def test_jsontext_writes_non_finite_as_null() -> None:
    obj = {
        "a": float("nan"),
        "b": [float("inf"), -float("inf"), 1.5],
        "c": np.float64("nan"),
        "d": "NaN",
    }
    text = jsontext.dumps(obj, indent=1, default=str)
    assert _strict_json(text) == {"a": None, "b": [None, None, 1.5], "c": None, "d": "NaN"}
    assert jsontext.dumps({"x": 1}, separators=(",", ":")) == '{"x":1}'


def test_nonfinite_header_gives_valid_json_from_info_and_chrome(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """Defect 12: info --json and export --to chrome write null for NaN and infinity."""
    path = _write(tmp_path, "header-nonfinite")
    code, stdout, _ = katra_main(capsys, "info", "--json", str(path))
    assert code == 0
    info = _strict_json(stdout)
    options = info["header"]["capture_options"] if "header" in info else info["capture_options"]
    assert options["warmup_s"] is None and options["extra"] == {"ratio": None, "low": None}
    out = tmp_path / "c.json"
    assert (
        katra_main(capsys, "export", str(path), "--to", "chrome", "-o", str(out), "--quiet")[0] == 0
    )
    chrome = _strict_json(out.read_text(encoding="utf-8"))
    assert chrome["metadata"]["capture_options"]["extra"] == {"ratio": None, "low": None}
    code, stdout, _ = katra_main(capsys, "stats", "--format", "json", str(path))
    assert code == 0
    _strict_json(stdout)


def test_nan_in_capture_options_is_written_as_null(tmp_path: Path) -> None:
    """The capture side: options built by build_capture_options (katra3d.capture's path) with NaN
    and infinity reach the file as null, so every later reader sees valid JSON."""
    options = build_capture_options(
        {"ratio": float("nan"), "limits": [1.0, float("inf")]}, api="katra3d.capture"
    )
    path = tmp_path / "nan.katra"
    w = TraceWriter(
        path, workload="t", capture_options=options, host_info={"load": -math.inf}, overwrite=True
    )
    w.finish({"worst": float("nan")})
    payloads = [
        raw for btype, raw, _ in split_blocks(path.read_bytes()) if btype in fmt.JSON_BLOCKS
    ]
    assert len(payloads) >= 2
    for raw in payloads:
        _strict_json(raw.decode("utf-8"))
    trace = open_trace(path)
    assert trace.header.capture_options.as_dict()["ratio"] is None
    assert trace.header.capture_options.as_dict()["limits"] == [1.0, None]
    assert trace.summary.user == {"worst": None}


def test_report_scans_a_trace_once_for_all_its_scenes(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A trace of many scenes: the page asks per scene, and each ask scanned every event (a 7 KB
    trace of 1,000 scenes took 68 s); now the per-trace answers are computed once per trace."""
    ev = frame_zone_stream(40, zones=1)
    ev["scene"] = np.arange(len(ev)) // 2 + 1  # 40 scenes: a frame and its zone each
    ev["flags"] = 0
    path = tmp_path / "many.katra"
    write_trace(path, ev, ["", "scene", "frame", "pass-a", "pass-b", "pass-c"])
    calls = {"scene_labels": 0, "zone_frame_totals": 0}

    def counting(name: str, real: Any) -> Any:
        def wrapper(*args: Any, **kwargs: Any) -> Any:
            calls[name] += 1
            return real(*args, **kwargs)

        return wrapper

    for name in calls:
        monkeypatch.setattr(series, name, counting(name, getattr(series, name)))
    trace = open_trace(path)
    page = build_report([trace])
    assert page.startswith("<!doctype html>") and len(series.scenes_of(trace)) == 40
    assert calls["scene_labels"] <= 2 and calls["zone_frame_totals"] <= 6, calls


def test_timeline_of_no_events_is_empty() -> None:
    tl = build_timeline(np.empty(0, dtype=EVENT_DTYPE), [""])
    assert tl.slice_tracks == [] and tl.counter_tracks == [] and tl.scenes == {}
