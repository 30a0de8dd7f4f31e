"""The HTML report: one self-contained offline page; plotly.js inlined gzip+base64 (about 2 MB,
not 4.8) and unpacked by ``DecompressionStream``; all but the plots read without scripts."""

from __future__ import annotations

import base64
import datetime
import functools
import gzip
import math
from collections.abc import Mapping, Sequence
from typing import TYPE_CHECKING

import numpy as np

from katra_trace import jsontext
from katra_trace.analysis.stats import NO_STATS, ClockStats, HeadedTrace, RunStats, trace_stats
from katra_trace.analysis.verdict import Comparison, SceneComparison, Verdict
from katra_trace.jsontext import JsonObject, JsonValue
from katra_trace.metrics import is_count
from katra_trace.optional import require
from katra_trace.report.figure import BASELINE_COLOR, LEGEND, Figure, fill, plot_div
from katra_trace.report.figure import color as _color
from katra_trace.report.figure import compact as _compact
from katra_trace.report.figure import layout as _layout
from katra_trace.report.history import history_section
from katra_trace.report.plottext import plot_text
from katra_trace.report.series import (
    BAND_MIN_RUNS,
    FrameSeries,
    cdf_points,
    frame_series,
    primary_clock,
    scenes_of,
    side_band,
    unit_of,
)
from katra_trace.report.slow import slow_part
from katra_trace.report.tables import e as _e
from katra_trace.report.tables import num as _num
from katra_trace.report.tables import params_table, stats_table, zone_stats_table
from katra_trace.report.tables import table as _table
from katra_trace.report.zones import PLOT_PX, zone_figures

if TYPE_CHECKING:
    from katra_trace.history.trends import Trends

#: Pixels per legend row, and the tallest the frame-time plot grows for its legend.
LEGEND_ROW_PX = 19
SERIES_MAX_PX = 640

_CSS = """
body{font:14px/1.45 system-ui,-apple-system,Segoe UI,Roboto,sans-serif;margin:0;color:#222;
background:#fafafa}
main{max-width:1200px;margin:0 auto;padding:16px 24px 48px}
h1{font-size:24px;margin:8px 0 4px}h2{font-size:19px;margin:28px 0 8px;border-bottom:1px solid #ddd}
h3{font-size:15px;margin:16px 0 6px}
table{border-collapse:collapse;margin:6px 0 12px;background:#fff;font-variant-numeric:tabular-nums}
th,td{border:1px solid #ddd;padding:3px 8px;text-align:right;vertical-align:top}
th{background:#f0f0f0}td.l,th.l{text-align:left}
caption{text-align:left;color:#666;padding:2px 0;caption-side:top}
.plot{height:320px;background:#fff;border:1px solid #e5e5e5;margin:6px 0}
.row{display:flex;gap:12px}.row>.plot{flex:1 1 0;min-width:0}
.regression{color:#b00020;font-weight:600}.improvement{color:#1b7f2a;font-weight:600}
.muted{color:#666}details{margin:4px 0}
pre{background:#fff;border:1px solid #e5e5e5;padding:8px;overflow:auto;
max-height:360px;font-size:12px}#katra-status{color:#b00020}
"""  # noqa: E501

_LOADER = """
(async function () {
  const status = document.getElementById("katra-status");
  try {
    if (!window.Plotly) {
      if (typeof DecompressionStream === "undefined") {
        throw new Error(
          "this browser lacks DecompressionStream (use a browser from 2023 or later)");
      }
      const packed = atob(document.getElementById("katra-plotly").textContent.trim());
      const bytes = new Uint8Array(packed.length);
      for (let i = 0; i < packed.length; i++) bytes[i] = packed.charCodeAt(i);
      const stream = new Blob([bytes]).stream().pipeThrough(new DecompressionStream("gzip"));
      const code = await new Response(stream).text();
      const script = document.createElement("script");
      script.textContent = code;
      document.head.appendChild(script);
    }
    const figures = JSON.parse(document.getElementById("katra-figures").textContent);
    for (const f of figures) {
      await Plotly.newPlot(f.id, f.data, f.layout, {responsive: true, displaylogo: false});
    }
    document.body.dataset.plots = "ready";
  } catch (err) {
    status.textContent = "The plots could not be drawn: " + err;
    document.body.dataset.plots = "failed";
    console.error(err);
  }
})();
"""  # noqa: E501


@functools.lru_cache(maxsize=1)
def plotly_js_packed() -> str:
    offline = require("plotly.offline", extra="export", purpose="katra3d report")
    js: str = offline.get_plotlyjs()
    return base64.b64encode(gzip.compress(js.encode("utf-8"), compresslevel=9, mtime=0)).decode(
        "ascii"
    )


def _json_for_script(obj: JsonValue) -> str:
    """JSON safe inside a <script> element (no ``</`` or ``<!--``)."""
    return jsontext.dumps(obj, separators=(",", ":"), default=str).replace("<", "\\u003c")


def _run_label(trace: HeadedTrace, index: int, role: str) -> str:
    path = getattr(trace, "path", None)
    name = path.name if path is not None else f"{index + 1}"
    return f"{'baseline' if role == 'baseline' else 'run'} {index + 1}: {name}"


def _timing_reasons(
    sides: Sequence[tuple[str, Sequence[HeadedTrace]]],
) -> dict[tuple[str, str], dict[str, list[int]]]:
    out: dict[tuple[str, str], dict[str, list[int]]] = {}
    for role, traces in sides:
        for i, t in enumerate(traces):
            opts = t.header.capture_options
            if opts.timing_reason:
                out.setdefault((opts.timing_mode or "-", opts.timing_reason), {}).setdefault(
                    role, []
                ).append(i + 1)
    return out


def _timing_note(reasons: Mapping[tuple[str, str], Mapping[str, list[int]]], total: int) -> str:
    items = []
    for n, ((timing, why), who) in enumerate(reasons.items(), 1):
        count = sum(len(v) for v in who.values())
        where = (
            "the run"
            if total == 1
            else "every run"
            if count == total
            else "; ".join(
                f"{'runs' if role == 'run' else 'baseline'} {', '.join(map(str, nums))}"
                for role, nums in who.items()
            )
        )
        items.append(
            f'<span id="timing-why-{n}">timing <b>{_e(timing)}</b> on {_e(where)}, because '
            f"{_e(why)}</span>"
        )
    if len(items) == 1:
        return f'<p class="timing-why">Why: {items[0]}.</p>'
    return (
        '<p class="timing-why">Why each timing mode:</p><ol class="timing-why">'
        + "".join(f"<li>{item}</li>" for item in items)
        + "</ol>"
    )


RUNS_SHOWN = 4


def _runs_section(runs: Sequence[HeadedTrace], baseline: Sequence[HeadedTrace]) -> str:
    rows = []
    details = []
    reasons = _timing_reasons((("run", runs), ("baseline", baseline)))
    numbers = {key: n for n, key in enumerate(reasons, 1)}
    for role, traces in (("run", runs), ("baseline", baseline)):
        for i, t in enumerate(traces):
            h = t.header
            opts = h.capture_options
            size = opts.run_size
            mode = opts.measure.mode
            timing = opts.timing_mode or "-"
            label = _run_label(t, i, role)
            frames = "-" if opts.run_frames is None else opts.run_frames
            warmup = "-" if opts.run_warmup is None else opts.run_warmup
            rows.append(
                [
                    _e(label),
                    _e(h.workload or ""),
                    _e(getattr(t, "status", "")),
                    _e(f"measure {mode}" if mode and mode != "time" else timing),
                    _e(h.host_info.gl.renderer or "-"),
                    _e(h.host_info.system.cpu_model or "-"),
                    _e("x".join(str(v) for v in size) if size else "-"),
                    _e(f"{frames} / {warmup}"),
                    _num(len(t.events), "int"),
                ]
            )
            why = opts.timing_reason
            start = h.start_wall_ns
            when = (
                datetime.datetime.fromtimestamp(start / 1e9, tz=datetime.timezone.utc).strftime(
                    "%Y-%m-%d %H:%M:%S UTC"
                )
                if start is not None
                else "-"
            )
            details.append(
                f"<details><summary>{_e(label)}: {_e(h.tool_version or '')}, captured {_e(when)}"
                + (
                    f"; timing {_e(timing)} (why: "
                    f"{'above' if len(numbers) == 1 else f'note {numbers[(timing, why)]} above'})"
                    if why
                    else ""
                )
                + "</summary><h3>capture options</h3><pre>"
                f"{_e(jsontext.dumps(opts.as_dict(), indent=2, default=str))}</pre>"
                "<h3>host</h3><pre>"
                f"{_e(jsontext.dumps(h.host_info.as_dict(), indent=2, default=str))}</pre>"
                + (f"<p>notes: {_e(h.notes)}</p>" if h.notes else "")
                + "</details>"
            )
    table = _table(
        [
            "run",
            "workload",
            "status",
            "timing",
            "renderer",
            "CPU",
            "size",
            "frames / warmup",
            "events",
        ],
        rows,
    )
    note = _timing_note(reasons, len(runs) + len(baseline)) if reasons else ""
    body = f"{table}{''.join(details)}"
    count = len(runs) + len(baseline)
    # so the verdicts and plots are not pushed down the page
    if count > RUNS_SHOWN:
        body = (
            f"<details><summary>{count} runs: the table of their captures</summary>{body}</details>"
        )
    return f'<section id="runs"><h2>Runs</h2>{note}{body}</section>'


def _comparison_section(comparison: Comparison | None, error: str | None) -> str:
    if error is not None:
        return (
            f'<section id="comparison"><h2>Comparison with the baseline</h2>'
            f'<p class="regression">No comparison: {_e(error)}</p></section>'
        )
    if comparison is None:
        return ""
    rows = []
    for s in {s.scene: s for s in comparison.scenes}.values():
        verdict = str(s.verdict)
        cls = verdict if s.verdict in (Verdict.REGRESSION, Verdict.IMPROVEMENT) else ""
        unit = s.value_unit or "ms"
        level_unit = "ms" if unit == "ms" else ("count" if is_count(unit) else "ratio")
        ci = (
            f"[{_num(_pct(s.ci_low), 'pct')}, {_num(_pct(s.ci_high), 'pct')}]"
            if math.isfinite(s.ci_low)
            else "-"
        )
        rows.append(
            [
                _e(s.scene),
                f'<span class="{cls}">{_e(verdict)}</span>',
                _num(s.change_pct, "pct"),
                ci,
                _num(s.p_holm, "p"),
                _e(f"{s.runs_base} / {s.runs_new}"),
                f"{_num(s.level_base, level_unit)} &rarr; {_num(s.level_new, level_unit)}"
                + ("" if level_unit == "ms" else f" {_e(unit)}"),
                f'<span class="muted">{_e(s.reason)}</span>',
            ]
        )
    table = _table(
        ["scene", "verdict", "change", "interval", "p (Holm)", "runs base / new", "level", "why"],
        rows,
    )
    notes = "".join(f"<li>{_e(n)}</li>" for n in comparison.notes)
    counts = ", ".join(f"{v} {k}" for k, v in comparison.verdict_counts.items() if v)
    return (
        f'<section id="comparison"><h2>Comparison with the baseline</h2>'
        f"<p>metric <b>{_e(comparison.metric)}</b>, threshold {_e(comparison.threshold_pct)} %, "
        f"alpha {_e(comparison.alpha)}{', paired rounds' if comparison.paired else ''}: "
        f"{_e(counts or 'no scenes')}. A change is NEW over BASE: + is slower.</p>{table}"
        + (f"<ul>{notes}</ul>" if notes else "")
        + "</section>"
    )


def _pct(ratio: float | None) -> float | None:
    return None if ratio is None else (float(ratio) - 1.0) * 100.0


def _side_series(
    role: str, name: str, runs: Sequence[tuple[int, str, FrameSeries]]
) -> list[JsonObject]:
    """A line per run or, from :data:`BAND_MIN_RUNS` runs, a median in a band (runs on demand)."""
    dash = "dot" if role == "baseline" else "solid"
    out: list[JsonObject] = []
    banded = len(runs) >= BAND_MIN_RUNS
    if banded:
        band = side_band([s for _, _, s in runs])
        tint = _color(role, 0)
        edge: JsonObject = {
            "type": "scatter",
            "mode": "lines",
            "x": band.band_frame.tolist(),
            "hoverinfo": "skip",
            "line": {"width": 0, "color": tint},
        }
        out.append(
            {**edge, "name": f"{name}: fastest run", "y": _compact(band.low), "showlegend": False}
        )
        out.append(
            {
                **edge,
                "name": f"{name}: fastest to slowest of {band.runs} runs",
                "y": _compact(band.high),
                "fill": "tonexty",
                "fillcolor": fill(tint, 0.22),
            }
        )
        out.append(
            {
                "type": "scatter",
                "mode": "lines",
                "name": f"{name}: median of {band.runs} runs",
                "x": band.frame.tolist(),
                "y": _compact(band.median),
                "line": {"width": 1.5, "color": tint, "dash": dash},
            }
        )
    for i, label, s in runs:
        out.append(
            {
                "type": "scatter",
                "mode": "lines",
                "name": plot_text(label),
                "x": s.frame.tolist(),
                "y": _compact(s.value),
                "line": {"width": 1, "color": _color(role, i), "dash": dash},
                **({"visible": "legendonly"} if banded else {}),
            }
        )
    return out


def scene_section(
    index: int,
    scene: str,
    sides: Sequence[tuple[str, Sequence[HeadedTrace]]],
    stats_of: Mapping[int, RunStats],
    judged: SceneComparison | None = None,
    metric: str | None = None,
) -> tuple[str, list[Figure]]:
    """One scene's HTML and figures; with a comparison each side's level line is the table's, so
    the page shows one level a side."""
    figures: list[Figure] = []
    clock: str | None = None
    for _role, traces in sides:
        for t in traces:
            found = scenes_of(t).get(scene)
            if found and metric is not None and metric in found[1]:
                clock = metric
            if found and clock is None:
                clock = primary_clock(t, found[1])
    if clock is None:
        return "", []
    unit = unit_of(clock)
    series_data: list[JsonObject] = []
    shapes: list[JsonObject] = []
    pooled: dict[str, list[np.ndarray]] = {"run": [], "baseline": []}
    stats_rows: list[tuple[str, str, ClockStats]] = []
    per_side: dict[str, list[tuple[int, str, FrameSeries]]] = {}
    labelled: list[tuple[str, HeadedTrace]] = []
    x_max = 0
    for role, traces in sides:
        for i, t in enumerate(traces):
            found = scenes_of(t).get(scene)
            label = _run_label(t, i, role)
            if found:
                labelled.append((label, t))
            if not found or clock not in found[1]:
                continue
            s = frame_series(t, found[0], clock)
            per_side.setdefault(role, []).append((i, label, s))
            if s.frame.size:
                x_max = max(x_max, int(s.frame.max()))
            if s.warmup is not None and not shapes:
                shapes.append(
                    {
                        "type": "rect",
                        "xref": "x",
                        "yref": "paper",
                        "x0": s.warmup[0] - 0.5,
                        "x1": s.warmup[1] + 0.5,
                        "y0": 0,
                        "y1": 1,
                        "fillcolor": "rgba(120,120,120,0.15)",
                        "line": {"width": 0},
                        "layer": "below",
                    }
                )
            pooled[role].append(s.measured)
            for c, of_clock in stats_of[id(t)].scenes.get(scene, NO_STATS).metrics.items():
                stats_rows.append((label, c, of_clock))
    annotations: list[JsonObject] = []
    if shapes:
        annotations.append(
            {
                "x": shapes[0]["x0"],
                "y": 1,
                "xref": "x",
                "yref": "paper",
                "text": "warmup",
                "showarrow": False,
                "xanchor": "left",
                "yanchor": "top",
                "font": {"size": 11},
            }
        )
    levels = _judged_levels(judged, unit)
    for role, name in (("run", "runs"), ("baseline", "baseline")):
        side_traces = _side_series(role, name, per_side.get(role, []))
        values = np.concatenate(pooled[role]) if pooled[role] else np.empty(0)
        if values.size:
            med, p99 = (float(v) for v in np.percentile(values, [50.0, 99.0]))
            level, level_name = levels.get(role, (med, "median"))
            fmt = ".3f" if unit == "ms" else ",.0f"
            for what, v, dash in ((level_name, level, "dash"), ("p99", p99, "dashdot")):
                side_traces.append(
                    {
                        "type": "scatter",
                        "mode": "lines",
                        "x": [0, x_max],
                        "y": [v, v],
                        "name": f"{name} {what} {format(v, fmt)} {unit}",
                        "hoverinfo": "name",
                        "line": {
                            "width": 1.5,
                            "dash": dash,
                            "color": BASELINE_COLOR if role == "baseline" else "#d62728",
                        },
                    }
                )
        for trace in side_traces:
            trace["legendgroup"] = role
        series_data.extend(side_traces)
    slow_marks, slow_html = slow_part(scene, sides, clock, _run_label)
    series_data.extend(slow_marks)
    top = max(
        (float(v.max()) for r in ("run", "baseline") for v in pooled[r] if v.size), default=0.0
    )
    y_axis: JsonObject = {"title": {"text": unit}, "rangemode": "tozero"}
    if top > 0:
        # measured frames set the scale; taller warmup frames are cut
        y_axis["range"] = [0, top * 1.08]
    what = f"frame time, {clock} clock (ms)" if unit == "ms" else f"{unit} per frame"
    lines = next(iter(levels.values()))[1] if levels else "median"
    base_id = f"katra-plot-{index}"
    # legend rows: one per entry and a gap per side
    entries = sum(1 for d in series_data if d.get("showlegend", True)) + len(per_side)
    figures.append(
        Figure(
            f"{base_id}-series",
            series_data,
            _layout(
                plot_text(f"{scene}: {what}"),
                "frame",
                unit,
                shapes=shapes,
                annotations=annotations,
                yaxis=y_axis,
                legend={**LEGEND, "traceorder": "grouped", "groupclick": "toggleitem"},
                height=min(SERIES_MAX_PX, max(PLOT_PX, 70 + LEGEND_ROW_PX * entries)),
            ),
        )
    )
    series_html = plot_div(figures[-1])
    cdf_data: list[JsonObject] = []
    spread = [v for r in ("run", "baseline") for v in pooled[r] if v.size]
    for role in ("run", "baseline"):
        if pooled[role]:
            x, y = cdf_points(np.concatenate(pooled[role]))
            cdf_data.append(
                {
                    "type": "scatter",
                    "mode": "lines",
                    "name": "runs" if role == "run" else "baseline",
                    "x": _compact(x),
                    "y": _compact(y, 4),
                    "line": {
                        "color": _color(role, 0),
                        "width": 2,
                        "dash": "dot" if role == "baseline" else "solid",
                    },
                }
            )
    lo = min((float(v.min()) for v in spread), default=1.0)
    hi = max((float(v.max()) for v in spread), default=1.0)
    log_x = lo > 0 and hi / lo > 20
    figures.append(
        Figure(
            f"{base_id}-cdf",
            cdf_data,
            _layout(
                f"distribution ({clock})",
                unit,
                "% of frames",
                xaxis={
                    "title": {"text": unit + (" (log)" if log_x else "") + ", warmup excluded"},
                    "type": "log" if log_x else "linear",
                },
                yaxis={"title": {"text": "% of frames at or below"}, "range": [0, 100.5]},
            ),
        )
    )
    frame_medians = {role: float(np.median(np.concatenate(v))) for role, v in pooled.items() if v}
    zone_html, draws_html, zone_figs = zone_figures(
        base_id, scene, clock, sides, frame_medians, unit
    )
    figures.extend(zone_figs)
    if not zone_figs:
        zone_html = '<p class="muted">No zones recorded for this scene (capture with --zones).</p>'
    banded = [
        name
        for role, name in (("run", "runs"), ("baseline", "baseline"))
        if len(per_side.get(role, ())) >= BAND_MIN_RUNS
    ]
    band_note = (
        f"; {' and '.join(banded)}: the median of the runs at each frame, in a band from the "
        "fastest to "
        "the slowest run (click a run in the legend to draw it)"
        if banded
        else ""
    )
    zone_table = zone_stats_table(scene, clock, labelled, stats_of)
    body = (
        '<section class="scene" '
        f'id="scene-{index}"><h2>{_e(scene)}</h2>{params_table(scene, labelled)}'
        f'<p class="muted">plotted: {_e(what)}; {"warmup shaded; " if shapes else ""}lines: '
        f"{_e(lines)} "
        f"and p99 of the measured frames{band_note}</p>{series_html}"
        '<div class="row"><div class="plot" '
        f'id="{base_id}-cdf"></div>{zone_html}</div>{draws_html}{slow_html}'
        f"<h3>statistics</h3>{stats_table(stats_rows)}"
        + (f"<h3>zone statistics (each span as it occurred)</h3>{zone_table}" if zone_table else "")
        + "</section>"
    )
    return body, figures


def _judged_levels(judged: SceneComparison | None, unit: str) -> dict[str, tuple[float, str]]:
    """``{role: (level, name)}`` from the comparison's table; {} without one."""
    if judged is None or (unit != "ms" and judged.value_unit != unit):
        return {}
    levels = (
        (judged.level_new_ms, judged.level_base_ms)
        if unit == "ms"
        else (judged.level_new, judged.level_base)
    )
    return {
        role: (value, f"level ({judged.stat or 'median'} of the runs)")
        for role, value in zip(("run", "baseline"), levels, strict=True)
        if math.isfinite(value)
    }


def _counts(
    runs: Sequence[HeadedTrace], baseline: Sequence[HeadedTrace], history: Trends | None
) -> str:
    if runs or baseline or history is None:
        return f"{len(runs)} run(s)" + (
            f" against {len(baseline)} baseline run(s)" if baseline else ""
        )
    scenes = ", ".join(history.scenes) or "none"
    return (
        f"history of {history.runs} run(s) over {len(history.labels)} "
        "label(s); "
        f"scenes: {_e(scenes)}"
    )


HISTORY_LINK = '<a href="#history">history</a>'


def render(
    runs: Sequence[HeadedTrace],
    baseline: Sequence[HeadedTrace] = (),
    *,
    comparison: Comparison | None = None,
    comparison_error: str | None = None,
    title: str = "katra3d report",
    tool_version: str = "",
    history: Trends | None = None,
    images_html: str = "",
) -> str:
    sides: list[tuple[str, Sequence[HeadedTrace]]] = [("run", runs)]
    if baseline:
        sides.append(("baseline", baseline))
    stats_of = {id(t): trace_stats(t, zones=True) for _, traces in sides for t in traces}
    scenes: list[str] = []
    for _, traces in sides:
        for t in traces:
            for label in scenes_of(t):
                if label not in scenes:
                    scenes.append(label)
    sections = []
    figures: list[Figure] = []
    judged = {} if comparison is None else {s.scene: s for s in comparison.scenes}
    metric = comparison.metric or None if comparison is not None else None
    for i, scene in enumerate(scenes):
        body, figs = scene_section(i, scene, sides, stats_of, judged.get(scene), metric)
        sections.append(body)
        figures.extend(figs)
    history_html = ""
    if history is not None:
        history_html, history_figures = history_section(history, len(figures))
        figures.extend(history_figures)
    toc = " &middot; ".join(f'<a href="#scene-{i}">{_e(s)}</a>' for i, s in enumerate(scenes))
    if history is not None:
        toc += (" &middot; " if toc else "") + HISTORY_LINK
    generated = datetime.datetime.now(datetime.timezone.utc).strftime("%Y-%m-%d %H:%M UTC")
    empty = (
        ""
        if scenes or history is not None
        else '<p class="regression">No frames in these traces: nothing to plot.</p>'
    )
    return (
        '<!doctype html><html lang="en"><head><meta charset="utf-8">'
        '<meta name="viewport" '
        f'content="width=device-width,initial-scale=1"><title>{_e(title)}</title>'
        f"<style>{_CSS}</style></head><body><main>"
        f'<h1>{_e(title)}</h1><p class="muted">{_counts(runs, baseline, history)}'
        + f"; generated {generated} by {_e(tool_version)}. {'Scenes' if scenes else 'Sections'}: "
        f"{toc}</p>"
        + '<p id="katra-status"></p>'
        + _comparison_section(comparison, comparison_error)
        + images_html
        + (_runs_section(runs, baseline) if runs or baseline else "")
        + empty
        + "".join(sections)
        + history_html
        + '</main><script type="application/json" '
        f'id="katra-figures">{_json_for_script([f.as_dict() for f in figures])}</script>'
        + f'<script type="application/octet-stream" id="katra-plotly">{plotly_js_packed()}</script>'
        + f"<script>{_LOADER}</script></body></html>\n"
    )


__all__ = ["plotly_js_packed", "render", "scene_section"]
