"""The HTML report in a real headless Chromium, driven over the DevTools protocol, network off.

Checks: no console errors or exceptions, no request leaves file://, every plot element is
drawn and holds data, and a full-page screenshot is not blank. Chromium comes from the system
(``ci/system-deps.sh test`` installs Debian's ``chromium``); without it the test is skipped.
"""

from __future__ import annotations

import base64
import io
import itertools
import json
import re
import shutil
import subprocess
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from katra_trace import open_trace
from katra_trace.report import build_report, write_report
from tests.export_helpers import write_rich
from tests.test_report import long_run

CHROMIUM = shutil.which("chromium") or shutil.which("chromium-browser")
#: Seconds the page may take to draw its plots.
PAGE_TIMEOUT_S = 40

# every test here starts real headless Chromium: seconds each, so make test runs them, not make
# test-quick
pytestmark = [
    pytest.mark.skipif(CHROMIUM is None, reason="no chromium (ci/system-deps.sh test installs it)"),
    pytest.mark.slow,
]


class DevTools:
    """A minimal Chrome DevTools protocol client over one page's websocket."""

    def __init__(self, ws_url: str) -> None:
        import websocket

        self.ws = websocket.create_connection(ws_url, timeout=PAGE_TIMEOUT_S, suppress_origin=True)
        self.ids = itertools.count(1)
        self.events: list[dict[str, Any]] = []

    def call(self, method: str, **params: Any) -> dict[str, Any]:
        call_id = next(self.ids)
        self.ws.send(json.dumps({"id": call_id, "method": method, "params": params}))
        while True:
            msg = json.loads(self.ws.recv())
            if msg.get("id") == call_id:
                if "error" in msg:
                    raise RuntimeError(f"{method}: {msg['error']}")
                result: dict[str, Any] = msg.get("result", {})
                return result
            self.events.append(msg)

    def evaluate(self, expression: str) -> Any:
        out = self.call(
            "Runtime.evaluate", expression=expression, returnByValue=True, awaitPromise=True
        )
        if "exceptionDetails" in out:
            raise RuntimeError(f"page script failed: {out['exceptionDetails']}")
        return out["result"].get("value")

    def close(self) -> None:
        self.ws.close()


@pytest.fixture
def browser(tmp_path: Path) -> Iterator[DevTools]:
    assert CHROMIUM is not None
    profile = tmp_path / "profile"
    proc = subprocess.Popen(
        [
            CHROMIUM,
            "--headless",
            "--no-sandbox",
            "--disable-gpu",
            "--disable-dev-shm-usage",
            "--no-first-run",
            "--disable-extensions",
            "--disable-background-networking",
            "--remote-debugging-port=0",
            "--remote-allow-origins=*",
            f"--user-data-dir={profile}",
            "--window-size=1280,900",
            "about:blank",
        ],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    try:
        port = None
        deadline = time.monotonic() + PAGE_TIMEOUT_S
        active = profile / "DevToolsActivePort"  # chromium writes its port here
        while port is None and time.monotonic() < deadline and proc.poll() is None:
            text = active.read_text() if active.exists() else ""
            if text.strip():
                port = int(text.split()[0])
            else:
                time.sleep(0.05)
        assert port is not None, "chromium did not start its DevTools endpoint"
        import urllib.request

        pages: list[dict[str, Any]] = []
        while not pages and time.monotonic() < deadline:
            with urllib.request.urlopen(f"http://127.0.0.1:{port}/json/list", timeout=10) as resp:
                pages = [p for p in json.load(resp) if p.get("type") == "page"]
        client = DevTools(pages[0]["webSocketDebuggerUrl"])
        try:
            yield client
        finally:
            client.close()
    finally:
        proc.terminate()
        try:
            proc.wait(timeout=10)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()


def _problems(events: list[dict[str, Any]]) -> list[str]:
    out = []
    for e in events:
        method, params = e.get("method"), e.get("params", {})
        if method == "Runtime.consoleAPICalled" and params.get("type") in ("error", "assert"):
            out.append(
                "console.error: "
                + " ".join(str(a.get("value", a.get("description"))) for a in params["args"])
            )
        elif method == "Runtime.exceptionThrown":
            out.append("exception: " + json.dumps(params.get("exceptionDetails", {}))[:500])
        elif method == "Log.entryAdded" and params.get("entry", {}).get("level") == "error":
            out.append("log error: " + params["entry"].get("text", ""))
    return out


def test_report_in_chromium(tmp_path: Path, browser: DevTools) -> None:
    from PIL import Image

    write_rich(tmp_path / "rich.katra")
    long_run(tmp_path / "long.katra", 5_000, 1_234)
    long_run(tmp_path / "base.katra", 5_000, 500, scale=0.9, seed=4)
    runs = [open_trace(tmp_path / "long.katra"), open_trace(tmp_path / "rich.katra")]
    page = tmp_path / "report.html"
    write_report(page, build_report(runs, [open_trace(tmp_path / "base.katra")]))
    expected_plots = re.findall(r'<div class="plot" id="([^"]+)"', page.read_text())
    assert len(expected_plots) >= 8

    d = browser
    _load(d, page)

    # every plot element is drawn by plotly and holds data
    plots = d.evaluate("""Array.from(document.querySelectorAll('div.plot')).map(function (el) {
        var traces = el.data || [];
        return {id: el.id, traces: traces.length,
                points: traces.reduce(function (n, t) { return n + ((t.x || []).length); }, 0),
                svg: el.querySelectorAll('svg.main-svg').length,
                marks: el.querySelectorAll('.scatterlayer path.js-line, .barlayer path').length,
                height: el.getBoundingClientRect().height};
    })""")
    assert [p["id"] for p in plots] == expected_plots
    for p in plots:
        assert (
            p["traces"] > 0
            and p["points"] > 0
            and p["svg"] > 0
            and p["marks"] > 0
            and p["height"] > 100
        ), p

    # nothing but the file itself was requested
    urls = [
        e["params"]["request"]["url"]
        for e in d.events
        if e.get("method") == "Network.requestWillBeSent"
    ]
    assert urls and all(u.startswith(("file:", "data:", "blob:")) for u in urls), urls
    assert _problems(d.events) == []

    # a full-page screenshot that is not blank
    metrics = d.call("Page.getLayoutMetrics")
    size = metrics.get("cssContentSize") or metrics["contentSize"]
    width, height = int(size["width"]), int(min(size["height"], 12_000))
    assert height > 2000  # several scenes' plots and tables
    shot = d.call(
        "Page.captureScreenshot",
        format="png",
        captureBeyondViewport=True,
        clip={"x": 0, "y": 0, "width": width, "height": height, "scale": 1},
    )
    image = Image.open(io.BytesIO(base64.b64decode(shot["data"]))).convert("RGB")
    pixels = np.asarray(image, dtype=np.float64)
    assert pixels.shape[0] >= height - 1 and pixels.shape[1] >= width - 1
    assert float(pixels.std()) > 20.0  # a blank page is ~0
    non_background = np.any(np.abs(pixels - pixels[5, 5]) > 40, axis=2).mean()
    assert non_background > 0.03
    # colored plot lines are there, not just black text on white
    r, g, b = pixels[..., 0], pixels[..., 1], pixels[..., 2]
    blue = (b > 150) & (r < 90) & (g > 90) & (g < 160)
    assert int(blue.sum()) > 500


def _load(d: DevTools, page: Path) -> None:
    """Open ``page`` offline in the browser and wait until its plots are drawn."""
    for domain in ("Runtime", "Log", "Page", "Network"):
        d.call(f"{domain}.enable")
    d.call(
        "Network.emulateNetworkConditions",
        offline=True,
        latency=0,
        downloadThroughput=-1,
        uploadThroughput=-1,
    )
    d.call("Page.navigate", url=page.as_uri())
    deadline = time.monotonic() + PAGE_TIMEOUT_S
    state = None
    while time.monotonic() < deadline:
        state = d.evaluate("document.body ? (document.body.dataset.plots || '') : ''")
        if state in ("ready", "failed"):
            break
        time.sleep(0.2)
    status = d.evaluate(
        "document.getElementById('katra-status') ? document.getElementById('katra-status')"
        ".textContent : 'no page'"
    )
    assert state == "ready", f"plots not drawn ({state!r}): {status}; {_problems(d.events)}"


#: Names plotly would render as live markup if the report did not escape them.
HOSTILE = (
    "<a href=https://evil.example>CLICK</a>",
    "<b>bold</b>",
    "<span style=color:red>red</span>",
)


def test_history_page_in_chromium(tmp_path: Path, browser: DevTools) -> None:
    """A history alone: the header counts its runs and names its scenes; a one-label series draws
    its point on a sane y axis; hostile scene, zone and label names stay text in every plot."""
    pytest.importorskip("duckdb", reason="pip install 'katra3d[history]'")
    from katra_trace.history.ingest import prepare_runs
    from katra_trace.history.store import Source, add_to_store
    from katra_trace.history.trends import trend_data
    from tests.test_history_store import make_trace

    levels = {"fillrate": 23.4, HOSTILE[0]: 5.0, HOSTILE[1]: 7.0}
    runs, _ = prepare_runs(
        [make_trace(tmp_path / f"r{i}.katra", levels, seed=i) for i in range(3)], HOSTILE[2]
    )
    db = tmp_path / "h.duckdb"
    add_to_store(db, runs)
    page = tmp_path / "history.html"
    write_report(page, build_report([], history=trend_data(Source(db=db))))
    d = browser
    _load(d, page)
    header = d.evaluate("document.querySelector('main > p.muted').textContent")
    assert (
        header.startswith("history of 3 run(s) over 1 label(s); scenes: ")
        and "Scenes: history" not in header
    )
    assert all(name in header for name in (*HOSTILE[:2], "fillrate")), header
    plots = d.evaluate("""Array.from(document.querySelectorAll('div.plot')).map(function (el) {
        var ya = el._fullLayout.yaxis;
        return {id: el.id, points: el.querySelectorAll('.scatterlayer .point').length,
                range: ya.range,
                ticks: Array.from(el.querySelectorAll('.ytick text')).map(function (t) {
                    return parseFloat(t.textContent.replace(/[^0-9.eE+-]/g, '')); }),
                level: el.data[0].y[0],
                texts: Array.from(el.querySelectorAll('svg text')).map(function (t) {
                    return t.textContent; })};
    })""")
    assert len(plots) == 3
    for p in plots:
        assert p["points"] >= 1, p  # the one label's point is drawn
        assert p["range"][0] == 0 and p["level"] < p["range"][1] < 2 * p["level"], p
        assert p["ticks"] and all(0 <= t <= p["range"][1] for t in p["ticks"]), p
        assert any(HOSTILE[2] in t for t in p["texts"]), p["texts"]  # the label, as text
    titles = [t for p in plots for t in p["texts"]]
    assert any(HOSTILE[0] in t for t in titles) and any(HOSTILE[1] in t for t in titles), titles
    live = d.evaluate("""({links: document.querySelectorAll('svg a').length,
        bold: document.querySelectorAll('svg tspan[style*="bold"]').length,
        styled: document.querySelectorAll('svg tspan[style*="red"]').length,
        anchors: Array.from(document.querySelectorAll('a')).map(function (a) {
            return a.getAttribute('href'); })})""")
    assert live["links"] == 0 and live["bold"] == 0 and live["styled"] == 0, live
    assert all(h.startswith("#") for h in live["anchors"]), live["anchors"]
    assert _problems(d.events) == []
