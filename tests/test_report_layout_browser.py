"""The report's per-draw layout as drawn by a real headless Chromium: the frame-time legend clear
of the x axis title, each run drawn only when its legend entry is clicked, every draw's label on its
own line."""

from __future__ import annotations

import re
import time
from pathlib import Path
from typing import Any

import pytest

from katra_trace import open_trace
from katra_trace.report import build_report, write_report
from tests.test_report import RAW_KEYS, long_run
from tests.test_report_browser import CHROMIUM, DevTools, _load, _problems, browser  # noqa: F401 (the fixture)
from tests.test_report_layout import draws_run

# every test here starts real headless Chromium: seconds each, so make test runs them, not make
# test-quick
pytestmark = [
    pytest.mark.skipif(CHROMIUM is None, reason="no chromium (ci/system-deps.sh test installs it)"),
    pytest.mark.slow,
]

#: The legend name of one run of a side.
EACH_RUN = re.compile(r"(run|baseline) [0-9]+: ")
#: Seconds a legend click may take to take effect (plotly waits out a double click first).
CLICK_TIMEOUT_S = 10

_BOXES = """(function (id) {
    var el = document.getElementById(id), box = function (n) {
        if (!n) return null; var r = n.getBoundingClientRect();
        return {left: r.left, right: r.right, top: r.top, bottom: r.bottom}; };
    return {legend: box(el.querySelector('g.legend')),
            xtitle: box(el.querySelector('.g-xtitle text')),
            plot: box(el.querySelector('.nsewdrag')), div: box(el),
            visible: el._fullData.map(function (t) { return [t.name, t.visible]; }),
            lines: el.querySelectorAll('.scatterlayer .trace').length,
            yticks: Array.from(el.querySelectorAll('.ytick text')).map(function (t) {
                return Object.assign(box(t), {text: t.textContent}); })};
})"""


def _overlap(a: dict[str, float], b: dict[str, float]) -> bool:
    return (
        a["left"] < b["right"]
        and b["left"] < a["right"]
        and a["top"] < b["bottom"]
        and b["top"] < a["bottom"]
    )


def test_many_runs_and_draws_in_chromium(tmp_path: Path, browser: DevTools) -> None:  # noqa: F811
    for i in range(6):
        draws_run(tmp_path / f"new-{i}.katra", seed=i, scale=1.1)
        draws_run(tmp_path / f"base-{i}.katra", seed=10 + i)
    # a second scene, one run: plain lines
    long_run(tmp_path / "spiky.katra", 60, 30, params={"layers": 12})
    page = tmp_path / "report.html"
    write_report(
        page,
        build_report(
            [
                *(open_trace(tmp_path / f"new-{i}.katra") for i in range(6)),
                open_trace(tmp_path / "spiky.katra"),
            ],
            [open_trace(tmp_path / f"base-{i}.katra") for i in range(6)],
        ),
    )
    d = browser
    _load(d, page)

    series: Any = d.evaluate(f"{_BOXES}('katra-plot-0-series')")
    assert series["legend"] and series["xtitle"], series
    # the legend does not hit the axis title
    assert not _overlap(series["legend"], series["xtitle"])
    assert series["legend"]["left"] >= series["plot"]["right"]  # nor the data
    assert series["legend"]["bottom"] <= series["div"]["bottom"] + 1  # and fits its element
    hidden = [name for name, vis in series["visible"] if vis == "legendonly"]
    assert len(hidden) == 12 and all(EACH_RUN.match(n) for n in hidden), hidden
    # only the medians, bands and levels are drawn
    assert series["lines"] == len(series["visible"]) - 12

    # a click on a run's legend entry draws that run, and only it
    target = "run 2: new-1.katra"
    at = d.evaluate(f"""(function () {{
        var items = document.getElementById('katra-plot-0-series')
            .querySelectorAll('g.legend g.traces');
        for (var i = 0; i < items.length; i++) {{
            if (items[i].textContent === {target!r}) {{
                items[i].scrollIntoView({{block: 'center'}});
                var r = items[i].querySelector('text').getBoundingClientRect();
                return {{x: r.left + r.width / 2, y: r.top + r.height / 2}};
            }}
        }}
        return null; }})()""")
    assert at is not None
    for kind in ("mousePressed", "mouseReleased"):
        d.call(
            "Input.dispatchMouseEvent", type=kind, x=at["x"], y=at["y"], button="left", clickCount=1
        )
    deadline = time.monotonic() + CLICK_TIMEOUT_S
    shown: list[str] = []
    while time.monotonic() < deadline and not shown:
        now = d.evaluate(f"{_BOXES}('katra-plot-0-series')")["visible"]
        shown = [name for name, vis in now if vis is True and EACH_RUN.match(name)]
        time.sleep(0.1)
    assert shown == [target]

    # the draws of the 20-draw pass: each label drawn, none over another
    draws_id = d.evaluate(
        """Array.from(document.querySelectorAll('div.plot')).filter(function (el) {
        return el.layout &&
            el.layout.title.text.indexOf('draws in pass main/opaque') === 0; })[0].id"""
    )
    plot = d.evaluate(f"{_BOXES}({draws_id!r})")
    texts = [t["text"] for t in plot["yticks"]]
    assert texts == [f"draw(in_pos)#{k}" for k in range(1, 21)], texts
    ticks = sorted(plot["yticks"], key=lambda t: t["top"])
    assert all(a["bottom"] <= b["top"] for a, b in zip(ticks, ticks[1:], strict=False)), ticks
    assert all(
        t["left"] >= plot["div"]["left"] and t["bottom"] <= plot["div"]["bottom"] for t in ticks
    )

    # the tables as drawn: readable headers (no raw key), the params shown, none wider than the page
    tables: Any = d.evaluate("""(function () {
        var main = document.querySelector('main').getBoundingClientRect(), shown = function (el) {
            var r = el.getBoundingClientRect(); return r.width > 0 && r.height > 0; };
        var all = Array.from(document.querySelectorAll('main table')).filter(shown);
        return {heads: Array.from(document.querySelectorAll('th')).filter(shown).map(function (t) {
                    return t.textContent; }),
                params: Array.from(document.querySelectorAll('table.params')).filter(shown)
                    .map(function (t) { return t.innerText; }),
                zones: document.querySelectorAll('table.zone-stats').length,
                wider: all.filter(function (t) {
                    return t.getBoundingClientRect().right > main.right + 1; }).length};
    })()""")
    assert {"1 % low (fps)", "stutter (% of time)", "spans"} <= set(tables["heads"])
    assert not set(tables["heads"]) & RAW_KEYS, set(tables["heads"]) & RAW_KEYS
    assert [p.split() for p in tables["params"]] == [["params", "layers", "12"]]
    assert tables["zones"] == 2 and tables["wider"] == 0
    assert _problems(d.events) == []
