"""katra3d report, read as a user reads it: per-draw zones grouped under their
pass with every label, many runs a side as a median line in a band with each run on demand, the
timing reason said once. Checked on the page's figure JSON and HTML; tests/test_report_browser.py
checks the drawing."""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from katra_trace import Clock, Flag, Kind, open_trace
from katra_trace.report import build_report
from katra_trace.report.series import BAND_MIN_RUNS, MAX_POINTS, frame_series, side_band
from katra_trace.report.tables import ZONE_ROWS_SHOWN
from katra_trace.report.zones import MAX_DRAW_BARS, bars_height, group_zones
from katra_trace.schema import EVENT_DTYPE, draw_pass
from tests.test_report import _figures, long_run
from tests.trace_helpers import write_trace

pytest.importorskip("plotly", reason="the 'export' extra (plotly) is part of the test extra")

REASON = (
    "software renderer 'llvmpipe': its timer queries do not time the draw, so frames end with "
    "glFinish"
)


def draws_run(
    path: Path,
    *,
    n_frames: int = 30,
    draws: int = 20,
    scale: float = 1.0,
    seed: int = 0,
    zones: str = "draws",
    reason: str = REASON,
    pass_overhead_ns: int = 4_000_000,
) -> None:
    """A ``--zones draws`` capture of scene "multi": per frame a pass "clear" with one clear, a pass
    "main/opaque" (a pass name with a slash) with ``draws`` draws of ~0.1 ms each plus
    ``pass_overhead_ns`` outside them, and one blit outside any pass (named ``frame/blit#1``)."""
    rng = np.random.default_rng(seed)
    names = [
        "",
        "multi",
        "clear",
        "clear/clear#1",
        "main/opaque",
        "frame/blit#1",
        *(f"main/opaque/draw(in_pos)#{k}" for k in range(1, draws + 1)),
    ]
    rows: list[tuple[int, int, int, int, int]] = []  # kind, depth, name, frame, dur_ns
    for f in range(n_frames):
        draw_ns = (rng.normal(100_000, 3_000, draws) * scale).astype(np.int64)
        opaque = int(draw_ns.sum()) + pass_overhead_ns
        spans = [
            (Kind.ZONE, 1, 2, 50_000),
            (Kind.ZONE, 2, 3, 40_000),
            (Kind.ZONE, 1, 4, opaque),
            *((Kind.ZONE, 2, 6 + k, int(d)) for k, d in enumerate(draw_ns)),
            (Kind.ZONE, 1, 5, 30_000),
        ]
        rows.append((Kind.FRAME, 0, 1, f, sum(s[3] for s in spans if s[1] == 1) + 10_000))
        rows.extend((k, depth, name, f, d) for k, depth, name, d in spans)
    ev = np.zeros(len(rows), dtype=EVENT_DTYPE)
    for col, values in zip(
        ("kind", "depth", "name", "frame", "dur_ns"), zip(*rows, strict=True), strict=True
    ):
        ev[col] = values
    ev["clock"], ev["scene"] = Clock.WALL, 1
    ev["start_ns"] = np.arange(len(rows)) * 1_000
    ev["flags"][ev["frame"] < 3] = Flag.WARMUP
    write_trace(
        path,
        ev,
        names,
        header={
            "workload": "multi",
            "capture_options": {
                "timing_mode": "sync",
                "primary_clock": "wall",
                "timing_reason": reason,
                "zones": zones,
            },
        },
    )


def _figure(page: str, suffix: str) -> dict[str, Any]:
    return next(f for f in _figures(page) if f["id"].endswith(suffix))


# -- draws grouped under their pass


def test_draw_pass_takes_the_longest_known_prefix() -> None:
    zones = {"main", "main/opaque", "clear"}
    assert draw_pass("main/opaque/draw(in_pos)#3", zones) == "main/opaque"
    assert draw_pass("main/a/b-label#1", zones) == "main"  # a label with a slash
    assert draw_pass("frame/blit#1", zones) == "frame"  # outside any pass
    # no #k: a pass
    assert draw_pass("main/opaque", zones) is None and draw_pass("clear/clear", zones) is None
    assert draw_pass("other/clear#1", zones) is None  # no such pass
    passes, draws = group_zones(
        ["clear", "clear/clear#1", "main/opaque", "main/opaque/d#1", "main/opaque/d#2"]
    )
    assert passes == ["clear", "main/opaque"] and draws == {
        "clear": ["clear/clear#1"],
        "main/opaque": ["main/opaque/d#1", "main/opaque/d#2"],
    }


def test_draws_are_plotted_apart_from_their_pass_total_with_every_label(tmp_path: Path) -> None:
    for i in range(2):
        draws_run(tmp_path / f"new{i}.katra", seed=i, scale=1.1)
        draws_run(tmp_path / f"base{i}.katra", seed=10 + i)
    page = build_report(
        [open_trace(tmp_path / f"new{i}.katra") for i in range(2)],
        [open_trace(tmp_path / f"base{i}.katra") for i in range(2)],
    )
    passes = _figure(page, "-zones")
    # no draw among the passes
    assert [d["y"] for d in passes["data"]] == [["clear", "main/opaque"]] * 2
    plots = [f for f in _figures(page) if "-draws-" in f["id"]]
    by_title = {f["layout"]["title"]["text"]: f for f in plots}
    assert len(plots) == 3, list(by_title)
    opaque = next(f for t, f in by_title.items() if t.startswith("draws in pass main/opaque,"))
    labels = [f"draw(in_pos)#{k}" for k in range(1, 21)]
    assert [d["y"] for d in opaque["data"]] == [labels, labels]  # the pass's prefix cut off
    y = opaque["layout"]["yaxis"]
    # every label named
    assert y["tickmode"] == "array" and y["tickvals"] == labels and y["ticktext"] == labels
    # room for 20 rows of two bars
    assert opaque["layout"]["height"] == bars_height(20, 2) >= 20 * 2 * 9
    assert re.search(
        rf'<div class="plot" id="{opaque["id"]}" style="height:{opaque["layout"]["height"]}px">',
        page,
    )
    # the pass total is not a bar among its draws: the tallest draw is a small part of it, said
    # above the plot
    assert max(max(d["x"]) for d in opaque["data"]) < 0.2
    # room for values
    assert opaque["layout"]["xaxis"]["range"][1] > 1.1 * max(max(d["x"]) for d in opaque["data"])
    # units.format_ms
    caption = re.search(
        r"20 draws in pass main/opaque; pass total per frame: runs ([0-9.]+) ms", page
    )
    assert caption is not None and float(caption.group(1)) > 5.0
    outside = next(f for t, f in by_title.items() if "outside any pass" in t)
    assert outside["data"][0]["y"] == ["blit#1"]
    assert "1 draw outside any pass; pass total per frame: runs " in page


def test_without_draw_capture_zones_stay_one_plot(tmp_path: Path) -> None:
    draws_run(tmp_path / "p.katra", zones="passes")
    page = build_report([open_trace(tmp_path / "p.katra")])
    assert not [f for f in _figures(page) if "-draws-" in f["id"]]
    assert len(_figure(page, "-zones")["data"][0]["y"]) == 24  # the zones' names as they are


def test_zone_statistics_of_many_draws_fold_under_one_line(tmp_path: Path) -> None:
    """`stats --zones`'s rows of every pass and draw: open for a few zones, folded for a --zones
    draws capture.
    """
    draws_run(tmp_path / "d.katra", n_frames=8)
    draws_run(tmp_path / "few.katra", n_frames=8, draws=2)
    page = build_report([open_trace(tmp_path / "d.katra")])
    folded = re.search(
        r'<details><summary>([^<]*)</summary><table class="zone-stats">(.*?)</table>', page, re.S
    )
    assert folded is not None and folded.group(1) == "24 zones, 24 rows: their statistics"
    zones = re.findall(r'<tr><td class="l">([^<]*)</td>', folded.group(2))
    assert (
        zones[:4] == ["clear", "clear/clear#1", "main/opaque", "frame/blit#1"] and len(zones) == 24
    )
    few = build_report([open_trace(tmp_path / "few.katra")])
    assert (
        ZONE_ROWS_SHOWN >= 6
        and '<h3>zone statistics (each span as it occurred)</h3><table class="zone-stats">' in few
    )


def test_a_pass_with_more_draws_than_fit_shows_its_slowest(tmp_path: Path) -> None:
    draws_run(tmp_path / "many.katra", draws=MAX_DRAW_BARS + 10, n_frames=8)
    page = build_report([open_trace(tmp_path / "many.katra")])
    opaque = next(
        f
        for f in _figures(page)
        if f["layout"]["title"]["text"].startswith("draws in pass main/opaque")
    )
    assert len(opaque["data"][0]["y"]) == MAX_DRAW_BARS
    assert (
        f"the {MAX_DRAW_BARS} slowest of {MAX_DRAW_BARS + 10} shown"
        in opaque["layout"]["title"]["text"]
    )


# -- many runs a side


def test_side_band_is_the_runs_median_and_range_at_each_frame(tmp_path: Path) -> None:
    for i in range(3):
        long_run(tmp_path / f"r{i}.katra", 50, 10 + i, seed=i)
    series = [frame_series(open_trace(tmp_path / f"r{i}.katra"), 3, "wall") for i in range(3)]
    band = side_band(series)
    stacked = np.vstack([s.all_value for s in series])
    assert band.runs == 3 and band.frame.tolist() == list(range(50))
    assert np.allclose(band.median, np.median(stacked, axis=0))
    assert np.allclose(band.low, stacked.min(axis=0)) and np.allclose(
        band.high, stacked.max(axis=0)
    )


def test_side_band_of_long_runs_keeps_every_slow_frame_in_its_band(tmp_path: Path) -> None:
    for i, spike in enumerate((12_345, 54_321, 77_777)):
        long_run(tmp_path / f"r{i}.katra", 100_000, spike, seed=i)
    band = side_band(
        [frame_series(open_trace(tmp_path / f"r{i}.katra"), 3, "wall") for i in range(3)]
    )
    assert len(band.frame) <= MAX_POINTS and len(band.band_frame) <= MAX_POINTS
    assert band.high.max() == 40.0 and np.all(band.low <= band.high)
    for spike in (12_345, 54_321, 77_777):  # each run's one spike stays inside its bucket's band
        at = np.searchsorted(band.band_frame, spike, side="right") - 1
        assert band.high[at] == 40.0, spike


def test_many_runs_are_a_median_line_in_a_band_each_run_on_demand(tmp_path: Path) -> None:
    runs = BAND_MIN_RUNS + 3
    for i in range(runs):
        long_run(tmp_path / f"new-{i}.katra", 80, 20 + i, scale=1.2, seed=i)
        long_run(tmp_path / f"base-{i}.katra", 80, 40 + i, seed=20 + i)
    page = build_report(
        [open_trace(tmp_path / f"new-{i}.katra") for i in range(runs)],
        [open_trace(tmp_path / f"base-{i}.katra") for i in range(runs)],
    )
    series = _figure(page, "-series")
    data = series["data"]
    for role, name, prefix in (("run", "runs", "run "), ("baseline", "baseline", "baseline ")):
        side = [d for d in data if d["legendgroup"] == role]
        each = [d for d in side if re.match(rf"{prefix}\d: ", d["name"])]
        assert len(each) == runs and all(d["visible"] == "legendonly" for d in each)  # on demand
        drawn = [d for d in side if d.get("visible", True) is True]
        assert [d["name"] for d in drawn[:3]] == [
            f"{name}: fastest run",
            f"{name}: fastest to slowest of {runs} runs",
            f"{name}: median of {runs} runs",
        ]
        # the table's level
        assert [d["name"].split()[:2] for d in drawn[3:]] == [[name, "level"], [name, "p99"]]
        assert drawn[1]["fill"] == "tonexty" and drawn[0]["showlegend"] is False
    legend = series["layout"]["legend"]
    # the legend stands right of the plot area, clear of the x axis title below it
    assert legend["x"] >= 1.0 and legend["xanchor"] == "left" and legend["orientation"] == "v"
    assert legend["groupclick"] == "toggleitem"  # a click shows one run, not its whole side
    # every legend stays off the axes
    assert all(f["layout"]["legend"]["x"] >= 1.0 for f in _figures(page))
    assert (
        "the median of the runs at each frame, in a band from the fastest to the slowest run"
        in page
    )


def test_few_runs_are_drawn_one_line_each(tmp_path: Path) -> None:
    for i in range(BAND_MIN_RUNS - 1):
        long_run(tmp_path / f"r{i}.katra", 40, 10, seed=i)
    page = build_report([open_trace(tmp_path / f"r{i}.katra") for i in range(BAND_MIN_RUNS - 1)])
    data = _figure(page, "-series")["data"]
    assert [d["name"] for d in data if "visible" in d or "fill" in d] == []
    assert sum(bool(re.match(r"run \d: ", d["name"])) for d in data) == BAND_MIN_RUNS - 1
    assert "in a band" not in page


# -- the timing reason, once


def _runs_section(page: str) -> str:
    found = re.search(r'<section id="runs">.*?</section>', page, re.S)
    assert found is not None
    return found.group(0)


def _outside_pre(page: str) -> str:
    return re.sub(r"<pre>.*?</pre>", "", page, flags=re.S)


def test_a_shared_timing_reason_is_said_once(tmp_path: Path) -> None:
    for i in range(6):
        draws_run(tmp_path / f"n{i}.katra", seed=i, n_frames=6)
        draws_run(tmp_path / f"b{i}.katra", seed=9 + i, n_frames=6)
    page = build_report(
        [open_trace(tmp_path / f"n{i}.katra") for i in range(6)],
        [open_trace(tmp_path / f"b{i}.katra") for i in range(6)],
    )
    visible = _outside_pre(page)
    assert visible.count(REASON.replace("'", "&#x27;")) == 1
    assert "timing <b>sync</b> on every run, because " in visible
    fold, *summaries = re.findall(r"<summary>(.*?)</summary>", _runs_section(page))
    assert fold == "12 runs: the table of their captures"  # more than 4 runs fold under one line
    assert len(summaries) == 12 and all(s.endswith("timing sync (why: above)") for s in summaries)
    runs_section = visible.index('id="runs"')
    # above it
    assert (
        runs_section < visible.index('class="timing-why"') < visible.index("<table>", runs_section)
    )


def test_different_timing_reasons_are_numbered_and_referred_to(tmp_path: Path) -> None:
    draws_run(tmp_path / "a.katra", n_frames=6)
    draws_run(tmp_path / "b.katra", n_frames=6)
    draws_run(tmp_path / "c.katra", n_frames=6, reason="asked for with --timing sync")
    page = build_report([open_trace(tmp_path / p) for p in ("a.katra", "b.katra", "c.katra")])
    visible = _outside_pre(page)
    items = re.findall(r"<li><span id=\"timing-why-(\d)\">(.*?)</span></li>", visible)
    assert [n for n, _ in items] == ["1", "2"]
    assert (
        "on runs 1, 2, because" in items[0][1]
        and "on runs 3, because asked for with --timing sync" in items[1][1]
    )
    summaries = re.findall(r"<summary>(.*?)</summary>", _runs_section(page))
    assert [s.rsplit("(", 1)[1] for s in summaries] == [
        "why: note 1 above)",
        "why: note 1 above)",
        "why: note 2 above)",
    ]
