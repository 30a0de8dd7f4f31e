"""katra3d report: the numbers behind the plots and the page they make (the browser test is in
tests/test_report_browser.py)."""

from __future__ import annotations

import dataclasses
import json
import re
from html import unescape
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from katra_trace import Clock, Flag, Kind, open_trace
from katra_trace.analysis.defaults import CompareOptions
from katra_trace.analysis.stats import FrameStats, count_stats, trace_stats
from katra_trace.io.header import TraceHeader
from katra_trace.report import build_report, write_report
from katra_trace.report.series import (
    MAX_POINTS,
    cdf_points,
    frame_series,
    minmax_downsample,
    zone_medians,
)
from katra_trace.schema import EVENT_DTYPE
from katra_trace.units import format_ms, stat_label
from tests.cli_helpers import katra_main
from tests.export_helpers import HEADER, STRINGS, rich_events, write_rich
from tests.test_opens_once import write_ab_dir
from tests.trace_helpers import write_trace

pytest.importorskip("plotly", reason="the 'export' extra (plotly) is part of the test extra")


def long_run(
    path: Path,
    n_frames: int,
    spike_at: int,
    scale: float = 1.0,
    seed: int = 0,
    params: dict[str, Any] | None = None,
) -> None:
    """A run of ``n_frames`` wall frames (5 warmup) of ~2 ms with one 40 ms spike, and a zone per
    frame; ``params``: the params its header records for its scene "long" (as ``run`` resolves
    them)."""
    rng = np.random.default_rng(seed)
    dur = (rng.normal(2_000_000, 50_000, n_frames) * scale).astype(np.int64)
    dur[spike_at] = 40_000_000
    start = np.concatenate([[0], np.cumsum(dur + 10_000)[:-1]])
    ev = np.zeros(2 * n_frames, dtype=EVENT_DTYPE)
    frames, zones = ev[0::2], ev[1::2]
    for rows, kind, depth, name, d in (
        (frames, Kind.FRAME, 0, 1, dur),
        (zones, Kind.ZONE, 1, 2, dur // 2),
    ):
        rows["kind"], rows["clock"], rows["depth"], rows["scene"], rows["name"] = (
            kind,
            Clock.WALL,
            depth,
            3,
            name,
        )
        rows["frame"], rows["start_ns"], rows["dur_ns"] = np.arange(n_frames), start, d
        rows["flags"][:5] = Flag.WARMUP
    options: dict[str, Any] = {
        "timing_mode": "sync",
        "primary_clock": "wall",
        "timing_reason": "software renderer",
    }
    if params is not None:
        options["resolved"] = {"scenes": [{"label": "long", "spec": "long", "params": params}]}
    write_trace(
        path,
        ev,
        ["", "frame", "draw", "long"],
        batch_events=8192,
        header={"workload": "long", "capture_options": options},
    )


def test_minmax_downsample_keeps_spikes() -> None:
    rng = np.random.default_rng(1)
    y = rng.normal(10.0, 0.1, 100_000)
    y[31_337], y[77_001] = 50.0, 1.0
    x = np.arange(y.size)
    dx, dy = minmax_downsample(x, y)
    assert len(dx) <= MAX_POINTS and np.all(np.diff(dx) > 0)
    assert 31_337 in dx and 77_001 in dx and dy.max() == 50.0 and dy.min() == 1.0
    sx, sy = minmax_downsample(x[:100], y[:100])
    assert sx.tolist() == x[:100].tolist()


def test_cdf_points() -> None:
    x, y = cdf_points(np.array([3.0, 1.0, 2.0, 2.0]))
    assert x.tolist() == [1.0, 2.0, 2.0, 3.0] and y.tolist() == [25.0, 50.0, 75.0, 100.0]
    x, y = cdf_points(np.arange(10_000.0), max_points=100)
    assert len(x) == 100 and x[0] == 0.0 and x[-1] == 9999.0 and y[-1] == 100.0


def test_series_warmup_and_zones(tmp_path: Path) -> None:
    write_rich(tmp_path / "r.katra")
    t = open_trace(tmp_path / "r.katra")
    s = frame_series(t, STRINGS.index("alpha"), "wall")
    assert s.warmup == (0, 1) and s.total_frames == 8 and s.measured.size == 6
    assert s.measured.tolist() == [4.0] * 6  # ms
    assert zone_medians(t, "alpha", "wall") == {"lit": 2.0, "draw": 1.0, "shadow": 2.0}
    counts = frame_series(t, STRINGS.index("gamma"), "instructions")
    assert counts.measured.tolist() == [1_000_000.0 + i for i in range(5)]


def _figures(page: str) -> list[dict[str, Any]]:
    found = re.search(
        r'<script type="application/json" id="katra-figures">(.*?)</script>', page, re.S
    )
    assert found is not None
    figures: list[dict[str, Any]] = json.loads(found.group(1))
    return figures


def test_page_is_self_contained(tmp_path: Path) -> None:
    write_rich(tmp_path / "r.katra")
    page = build_report([open_trace(tmp_path / "r.katra")])
    # no network: no external script, stylesheet, image or font
    assert not re.search(r"<(script|link|img|iframe)[^>]+(src|href)=", page)
    assert "@import" not in page and "url(" not in page
    figures = _figures(page)
    ids = [f["id"] for f in figures]
    for fid in ids:
        assert f'id="{fid}"' in page
    # alpha and beta (time) and gamma (counts): series + distribution each; zones where recorded
    assert sorted(ids) == sorted(
        [f"katra-plot-{i}-{k}" for i in range(3) for k in ("series", "cdf")]
        + ["katra-plot-0-zones", "katra-plot-1-zones", "katra-plot-2-zones"]
    )
    for f in figures:
        assert f["data"] and all(len(trace["x"]) > 0 for trace in f["data"]), f["id"]
    gamma = next(f for f in figures if f["id"] == "katra-plot-2-series")
    assert "instructions" in gamma["layout"]["title"]["text"]
    assert "test renderer" in page and "a test says so" in page and "<th>median</th>" in page
    # a count table names its unit
    assert "<caption>instructions per frame, warmup excluded</caption>" in page
    assert len(page) < 3_000_000


def test_baseline_comparison_and_overlay(tmp_path: Path) -> None:
    for i in range(3):
        long_run(tmp_path / f"base-{i}.katra", 300, 100, seed=i)
        long_run(tmp_path / f"new-{i}.katra", 300, 200, scale=1.3, seed=10 + i)
    base = [open_trace(tmp_path / f"base-{i}.katra") for i in range(3)]
    new = [open_trace(tmp_path / f"new-{i}.katra") for i in range(3)]
    page = build_report(new, base)
    assert "Comparison with the baseline" in page
    assert re.search(r'<span class="regression">regression</span></td><td>\+3\d\.\d\d%', page)
    series = next(f for f in _figures(page) if f["id"] == "katra-plot-0-series")
    names = [d["name"] for d in series["data"]]
    assert sum(bool(re.match(r"run \d: new-", n)) for n in names) == 3
    assert sum(bool(re.match(r"baseline \d: base-", n)) for n in names) == 3
    assert any(n.startswith("baseline p99") for n in names)
    # one level a side on the page: the line is the comparison table's level (median of the runs),
    # not a second median of the pooled frames
    level = next(
        d for d in series["data"] if d["name"].startswith("runs level (median of the runs)")
    )
    table_level = re.search(r"runs level \(median of the runs\) ([0-9.]+) ms", level["name"])
    assert table_level is not None and level["y"][0] == pytest.approx(
        float(table_level.group(1)), abs=1e-3
    )
    assert not any(n.startswith("runs median") for n in names)
    # the verdicts come before the runs table
    assert page.index('id="comparison"') < page.index('id="runs"')
    assert series["layout"]["shapes"][0]["x1"] == 4.5  # warmup frames 0-4 shaded


def test_comparison_refused_is_shown(tmp_path: Path) -> None:
    write_rich(tmp_path / "r.katra")
    long_run(tmp_path / "l.katra", 50, 10)
    # counts (gamma measured in instructions) cannot be compared with times: the page says so
    counts = open_trace(tmp_path / "r.katra")
    raw = counts.header.as_dict()
    raw["capture_options"]["measure"] = {"mode": "instructions"}
    counts.header = TraceHeader.from_dict(raw)
    page = build_report([open_trace(tmp_path / "l.katra")], [counts])
    assert "No comparison: cannot compare counts with times" in page


def test_hundred_thousand_frames(tmp_path: Path) -> None:
    long_run(tmp_path / "big.katra", 100_000, 54_321)
    page = build_report([open_trace(tmp_path / "big.katra")])
    series = next(f for f in _figures(page) if f["id"] == "katra-plot-0-series")
    run = series["data"][0]
    assert len(run["x"]) <= MAX_POINTS and 54_321 in run["x"] and max(run["y"]) == 40.0
    assert len(page) < 2_600_000  # the 100k frames do not bloat the page


def test_write_report_never_replaces(tmp_path: Path) -> None:
    out = tmp_path / "report.html"
    out.write_text("keep me")
    from katra_trace.errors import OutputExistsError

    with pytest.raises(OutputExistsError):
        write_report(out, "<html></html>")
    assert out.read_text() == "keep me"
    write_report(out, "<html></html>", overwrite=True)
    assert out.read_text() == "<html></html>"


def test_cli_report(tmp_path: Path, katra_cli: Any) -> None:
    runs = tmp_path / "runs"
    runs.mkdir()
    long_run(runs / "a.katra", 40, 20)
    long_run(runs / "b.katra", 40, 30, seed=3)
    (runs / "notes.txt").write_text("not a trace")
    long_run(tmp_path / "base.katra", 40, 10, seed=5)
    r = katra_cli(
        "report",
        str(runs),
        "--baseline",
        str(tmp_path / "base.katra"),
        "-o",
        str(tmp_path / "r.html"),
        "--json",
    )
    assert r.returncode == 0, r.stderr
    out = json.loads(r.stdout)
    assert (
        len(out["runs"]) == 2
        and len(out["baseline"]) == 1
        and out["bytes"] == (tmp_path / "r.html").stat().st_size
    )
    r = katra_cli("report", str(runs), "-o", str(tmp_path / "r.html"))
    assert r.returncode == 2 and "already exists" in r.stderr and len(r.stderr.splitlines()) == 1
    empty = tmp_path / "empty"
    empty.mkdir()
    r = katra_cli("report", str(empty), "-o", str(tmp_path / "e.html"))
    assert r.returncode == 2 and "no katra3d traces" in r.stderr


def test_report_history_draws_the_trends_of_a_store(tmp_path: Path) -> None:
    """`report --history DB`: a trend plot per series over the labels, steps marked."""
    import subprocess
    import sys

    pytest.importorskip("duckdb")
    katra3d = str(Path(sys.executable).with_name("katra3d"))
    for i, label in enumerate(("v1", "v2", "v3")):
        trace = tmp_path / f"{label}.katra"
        long_run(trace, 60, 30, scale=1.0 + 0.2 * (i == 2), seed=i)
        res = subprocess.run(
            [
                katra3d,
                "history",
                "add",
                str(trace),
                "--label",
                label,
                "--db",
                str(tmp_path / "h.db"),
                "--json",
            ],
            capture_output=True,
            text=True,
            check=False,
        )
        assert res.returncode == 0, res.stderr
    res = subprocess.run(
        [
            katra3d,
            "report",
            "--history",
            str(tmp_path / "h.db"),
            "-o",
            str(tmp_path / "r.html"),
            "--json",
        ],
        capture_output=True,
        text=True,
        check=False,
    )
    assert res.returncode == 0, res.stderr
    page = (tmp_path / "r.html").read_text()
    figures = json.loads(re.search(r'id="katra-figures">(.*?)</script>', page, re.S).group(1))  # type: ignore[union-attr]
    trends = [f for f in figures if f["id"].startswith("history-")]
    assert trends and trends[0]["data"][0]["x"] == ["v1", "v2", "v3"]
    assert '<section id="history">' in page
    none = subprocess.run(
        [katra3d, "report", "-o", str(tmp_path / "x.html")],
        capture_output=True,
        text=True,
        check=False,
    )
    assert none.returncode == 2 and "nothing to report" in none.stderr
    missing = subprocess.run(
        [katra3d, "report", "--history", str(tmp_path / "nope.db"), "-o", str(tmp_path / "y.html")],
        capture_output=True,
        text=True,
        check=False,
    )
    assert missing.returncode == 2 and "no history store" in missing.stderr


def _strings(obj: Any) -> list[str]:
    if isinstance(obj, str):
        return [obj]
    if isinstance(obj, dict):
        return [s for v in obj.values() for s in _strings(v)]
    if isinstance(obj, list):
        return [s for v in obj for s in _strings(v)]
    return []


def test_hostile_names_never_reach_plotly_as_markup(tmp_path: Path) -> None:
    """plotly renders <a href>, <b>, <span style> in titles, axes, legends,
    ticks and hover text; every scene, zone, label and file name in a figure is escaped
    (report.plottext)."""
    pytest.importorskip("duckdb")
    from katra_trace.history.ingest import prepare_runs
    from katra_trace.history.store import Source, add_to_store
    from katra_trace.history.trends import trend_data
    from tests.test_history_store import make_trace

    evil = {"<a href=https://evil.example>CLICK</a>": 5.0, "<span style=color:red>red</span>": 6.0}
    paths = [
        make_trace(tmp_path / f"<b>run{i}<b>.katra", evil, seed=i, zones=True) for i in range(2)
    ]
    runs, _ = prepare_runs(paths, "<b>v1</b>")
    add_to_store(tmp_path / "h.duckdb", runs)
    page = build_report(
        [open_trace(p) for p in paths], history=trend_data(Source(db=tmp_path / "h.duckdb"))
    )
    texts = _strings(_figures(page))
    assert any("&lt;a href=https://evil.example&gt;CLICK&lt;/a&gt;" in t for t in texts)
    assert any("&lt;b&gt;run0&lt;b&gt;" in t for t in texts) and "&lt;b&gt;v1&lt;/b&gt;" in texts
    assert [t for t in texts if "<" in t or ">" in t] == []


def test_the_plots_draw_the_metric_and_stat_the_verdict_judged(tmp_path: Path) -> None:
    """`--metric process --stat p10`: the table judged process p10 (14.2 -> 17.7 ms) while every
    plot showed the wall clock (23.5 -> 31.9 ms), and a legend gave a second median for one side."""
    for i in range(3):
        for side, scale, seed in (("base", 1.0, i), ("new", 1.3, 10 + i)):
            long_run(tmp_path / f"{side}-{i}.wall", 120, 60, scale=scale, seed=seed)
            t = open_trace(tmp_path / f"{side}-{i}.wall")
            ev = t.events.copy()
            process = ev.copy()
            process["clock"], process["dur_ns"] = Clock.PROCESS, ev["dur_ns"] * 0.6
            write_trace(
                tmp_path / f"{side}-{i}.katra",
                np.concatenate([ev, process]),
                list(t.strings),
                batch_events=8192,
                header={
                    "workload": "long",
                    "capture_options": {
                        "timing_mode": "sync",
                        "primary_clock": "wall",
                        "timing_reason": "software renderer",
                    },
                },
            )
    base = [open_trace(tmp_path / f"base-{i}.katra") for i in range(3)]
    new = [open_trace(tmp_path / f"new-{i}.katra") for i in range(3)]
    page = build_report(new, base, compare_options=CompareOptions(metric="process", run_stat="p10"))
    series = next(f for f in _figures(page) if f["id"] == "katra-plot-0-series")
    assert "frame time, process clock (ms)" in json.dumps(series["layout"]["title"])
    level = next(d for d in series["data"] if d["name"].startswith("runs level (p10 of the runs)"))
    judged = re.search(r"runs level \(p10 of the runs\) ([0-9.]+) ms", level["name"])
    assert judged is not None and level["y"][0] == pytest.approx(float(judged.group(1)), abs=1e-3)
    wall_median = (
        float(np.median(new[0].events["dur_ns"][new[0].events["clock"] == Clock.WALL])) / 1e6
    )
    assert level["y"][0] < 0.7 * wall_median  # the process clock's level, not the wall clock's
    assert "lines: level (p10 of the runs) and p99" in page


# -- the single-run page: params, zone statistics, readable headers

#: Every statistic key trace_stats gives (times, and counts in instructions): none may head a
#: column.
RAW_KEYS = {
    *(f.name for f in dataclasses.fields(FrameStats)),
    *count_stats(np.array([1.0]), "instructions").as_dict(),
    *count_stats(np.array([1.0]), "cycles").as_dict(),
}


def _headers(html_text: str) -> list[str]:
    return [unescape(h) for h in re.findall(r"<th(?:\s[^>]*)?>(.*?)</th>", html_text, re.S)]


def _section(page: str, index: int) -> str:
    found = re.search(rf'<section class="scene" id="scene-{index}">.*?</section>', page, re.S)
    assert found is not None
    return found.group(0)


def _rows(table_html: str) -> list[list[str]]:
    body = table_html.split("<tbody>", 1)[1]
    return [
        [unescape(c) for c in re.findall(r"<td[^>]*>(.*?)</td>", row, re.S)]
        for row in re.findall(r"<tr>(.*?)</tr>", body, re.S)
    ]


def test_the_labels_of_statistics_are_one_map() -> None:
    """`stats`' text tables and the report take their headers from katra_trace.units.stat_label."""
    from katra3d.harness.cli.stats import COMPACT_COUNT, COMPACT_TIME

    assert (
        stat_label("fps_low_1pct") == "1 % low (fps)"
        and stat_label("stutter_pct") == "stutter (% of time)"
    )
    assert (
        stat_label("p99_ms") == stat_label("p99_instructions") == stat_label("p99_{unit}") == "p99"
    )
    assert stat_label("n") == "frames" and stat_label("n", zone=True) == "spans"
    assert not RAW_KEYS & {stat_label(k) for k in RAW_KEYS}  # every key has a label
    assert all(head == stat_label(key) for head, key in (*COMPACT_TIME, *COMPACT_COUNT))


def test_single_run_page_shows_params_zone_statistics_and_readable_headers(tmp_path: Path) -> None:
    params = {"alpha": {"objects": 8, "<b>bold</b>": "<i>x</i>", "cull": True}, "gamma": {}}
    header = {
        **HEADER,
        "capture_options": {
            **HEADER["capture_options"],
            "resolved": {
                "scenes": [
                    {"label": scene, "spec": scene, "params": p} for scene, p in params.items()
                ]
            },
        },
    }
    write_trace(tmp_path / "r.katra", rich_events(), STRINGS, header=header)
    trace = open_trace(tmp_path / "r.katra")
    page = build_report([trace])
    stats = trace_stats(trace).as_dict()["scenes"]
    alpha, beta, gamma = (_section(page, i) for i in range(3))

    # params: each scene's, from the header's capture options, escaped; a scene that takes none says
    # so
    params_table = re.search(r'<table class="params">.*?</table>', alpha, re.S)
    assert params_table is not None
    assert _headers(params_table.group(0)) == ["objects", "<b>bold</b>", "cull"]
    assert _rows(params_table.group(0)) == [["8", "<i>x</i>", "True"]]
    assert "<b>bold</b>" not in page and "&lt;i&gt;x&lt;/i&gt;" in alpha
    assert "params: none (this scene takes none)" in gamma
    assert 'class="params"' not in beta  # not recorded: nothing shown

    # zone statistics: stats --zones's numbers, a row per zone, on the plotted clock
    zone_table = re.search(r'<table class="zone-stats">.*?</table>', alpha, re.S)
    assert (
        zone_table is not None
        and "<caption>wall clock, warmup excluded</caption>" in zone_table.group(0)
    )
    heads = _headers(zone_table.group(0))
    assert heads[:3] == ["zone", "spans", "median"] and "p95" in heads
    rows = {r[0]: r for r in _rows(zone_table.group(0))}
    assert set(rows) == set(stats["alpha"]["zones"]) == {"lit", "draw", "shadow"}
    for zone, row in rows.items():
        wall = stats["alpha"]["zones"][zone]["wall"]
        assert row[1] == str(wall["n"]) and row[2] == format_ms(wall["median_ms"])
        assert row[heads.index("p95")] == format_ms(wall["p95_ms"])
    assert "gpu clock, warmup excluded" in beta  # beta's zones are timed on the GPU
    counted = re.search(r'<table class="zone-stats">.*?</table>', gamma, re.S)
    assert counted is not None and "instructions per span" in counted.group(0)
    assert _rows(counted.group(0))[0][:3] == [
        "draw",
        "5",
        f"{stats['gamma']['zones']['draw']['instructions']['median_instructions']:,.0f}",
    ]

    # every header readable, with its unit where the cells do not carry one; no raw key heads a
    # column
    headers = set(_headers(page))
    assert {
        "1 % low (fps)",
        "stutter (% of time)",
        "avg (fps)",
        "frames",
        "median",
        "MAD",
        "CV",
    } <= headers
    assert not headers & RAW_KEYS, headers & RAW_KEYS


def test_params_that_differ_between_runs_get_a_row_each(tmp_path: Path) -> None:
    long_run(tmp_path / "a.katra", 30, 10, params={"layers": 4})
    long_run(tmp_path / "b.katra", 30, 10, params={"layers": 12})
    long_run(tmp_path / "c.katra", 30, 10, params={"layers": 4})
    same = build_report([open_trace(tmp_path / p) for p in ("a.katra", "c.katra")])
    assert "<caption>params (the same in every run)</caption>" in same
    assert re.search(r'<table class="params">.*?<tbody><tr><td>4</td></tr></tbody>', same, re.S)
    differ = build_report([open_trace(tmp_path / "a.katra")], [open_trace(tmp_path / "b.katra")])
    table = re.search(r'<table class="params">.*?</table>', differ, re.S)
    assert table is not None and "params (they differ between runs)" in table.group(0)
    assert _rows(table.group(0)) == [["run 1: a.katra", "4"], ["baseline 1: b.katra", "12"]]
    zones = re.search(r'<table class="zone-stats">.*?</table>', differ, re.S)
    # a row per run
    assert zones is not None and _headers(zones.group(0))[:3] == ["run", "zone", "spans"]


def test_report_of_an_ab_directory_is_the_comparison_of_its_two_sides(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """``report DIR`` of a ``katra3d ab`` output resolves its sides as ``compare DIR`` does (paired
    from ab.json): the page ``report --baseline DIR/base DIR/new`` writes, byte for byte."""
    root = write_ab_dir(tmp_path / "ab")
    code, out, err = katra_main(
        capsys, "report", str(root), "-o", str(tmp_path / "dir.html"), "--json"
    )
    assert code == 0, err
    written = json.loads(out)
    assert [Path(p).parent.name for p in written["runs"]] == ["new"] * 3
    assert [Path(p).parent.name for p in written["baseline"]] == ["base"] * 3
    code, _, err = katra_main(
        capsys,
        "report",
        "--baseline",
        str(root / "base"),
        str(root / "new"),
        "-o",
        str(tmp_path / "sides.html"),
    )
    assert code == 0, err
    page = (tmp_path / "dir.html").read_text()
    assert page == (tmp_path / "sides.html").read_text()
    assert f"paired: 3 round(s) from {root / 'ab.json'}" in page
