"""The report's image section in a real headless Chromium (network off): BASE, NEW and the FLIP
error map of every scene whose last frame is not identical are drawn, and nothing else is asked of
the network."""

from __future__ import annotations

from pathlib import Path

import pytest

from katra_trace import open_trace
from katra_trace.report import build_report, write_report
from tests.test_images import nudged, picture, recoloured, write_capture
from tests.test_report_browser import CHROMIUM, DevTools, _load, _problems, browser

__all__ = ["browser"]  # the fixture, used here by name

pytestmark = [
    pytest.mark.skipif(CHROMIUM is None, reason="no chromium (ci/system-deps.sh test installs it)"),
    pytest.mark.slow,
]


def test_image_section_in_chromium(tmp_path: Path, browser: DevTools) -> None:
    frames = {"fill": picture(), "mesh": picture()[::-1].copy()}
    base = write_capture(tmp_path / "base.katra", frames, seed=1)
    new = write_capture(
        tmp_path / "new.katra",
        {"fill": nudged(frames["fill"]), "mesh": recoloured(frames["mesh"])},
        seed=2,
    )
    page = tmp_path / "report.html"
    write_report(page, build_report([open_trace(new)], [open_trace(base)]))
    _load(browser, page)
    shown = browser.evaluate(
        """Array.from(document.querySelectorAll('#images img')).map(function (img) {
        var c = document.createElement('canvas');
        c.width = img.naturalWidth; c.height = img.naturalHeight;
        var g = c.getContext('2d'); g.drawImage(img, 0, 0);
        var d = g.getImageData(0, 0, c.width, c.height).data, lit = 0;
        for (var i = 0; i < d.length; i += 4) { if (d[i] + d[i + 1] + d[i + 2] > 60) { lit++; } }
        return {alt: img.alt, kind: img.dataset.kind, complete: img.complete, w: img.naturalWidth,
                h: img.naturalHeight, shownW: img.getBoundingClientRect().width,
                lit: lit / (c.width * c.height)};
    })"""
    )
    assert [(s["alt"].split(":")[0], s["kind"]) for s in shown] == [
        ("fill", "base"),
        ("fill", "new"),
        ("fill", "flip"),
        ("mesh", "base"),
        ("mesh", "new"),
        ("mesh", "flip"),
    ]
    for s in shown:
        assert s["complete"] and (s["w"], s["h"]) == (96, 64) and s["shownW"] >= 96, s
    flips = {s["alt"].split(":")[0]: s["lit"] for s in shown if s["kind"] == "flip"}
    # a colour moved everywhere vs three pixels a level off
    assert flips["mesh"] > 0.5 > 0.05 > flips["fill"]
    verdicts = browser.evaluate(
        "Array.from(document.querySelectorAll('#images tbody tr')).map(function (r) {"
        " return r.cells[0].textContent + ': ' + r.cells[1].textContent; })"
    )
    assert verdicts == ["fill: within tolerance", "mesh: changed"]
    urls = [
        e["params"]["request"]["url"]
        for e in browser.events
        if e.get("method") == "Network.requestWillBeSent"
    ]
    assert urls and all(u.startswith(("file:", "data:", "blob:")) for u in urls), urls
    assert _problems(browser.events) == []
