"""The report's history section: per series, each label's level and run range, the fitted levels
``history check`` judges, and each step marked where it starts."""

from __future__ import annotations

import html
from typing import TYPE_CHECKING

from katra_trace.jsontext import JsonObject
from katra_trace.report.figure import Figure
from katra_trace.report.plottext import plot_text
from katra_trace.units import format_change_pct

if TYPE_CHECKING:
    from katra_trace.history.series import Series
    from katra_trace.history.trends import SeriesModel, Trends

#: Head room above the highest run, a fraction of it.
_Y_HEADROOM = 0.12


def _series_name(s: Series) -> str:
    zone = f" / {s.zone}" if s.zone else ""
    return f"{s.scene}{zone}: {s.metric} {s.stat} ({s.unit})"


def _summary(model: SeriesModel, marks: int) -> str:
    text = (
        f"change {format_change_pct(model.change_pct)} (fitted levels), {marks} step(s); "
        f"labels' change {format_change_pct(model.raw_change_pct)}"
    )
    if model.no_step_reason:
        text += f"; no step: {model.no_step_reason}"
    if model.departure is not None:
        text += f"; {model.departure.text()}"
    return f'<p class="muted">{html.escape(text)}</p>'


def history_section(trends: Trends, first_figure: int = 0) -> tuple[str, list[Figure]]:
    check = trends.check
    figures: list[Figure] = []
    parts = [
        f'<section id="history"><h2>History</h2><p class="muted">{len(check.series)} series over '
        f"{len(trends.labels)} label(s) and {trends.runs} run(s) from "
        f"{html.escape(trends.source)}; {len(check.steps)} step(s) found (katra3d history "
        f"check, alpha {check.alpha:g}).</p>"
    ]
    for n, (s, model) in enumerate(zip(check.series, check.models, strict=True)):
        points = s.points
        labels = [plot_text(p.label) for p in points]
        levels = [p.level for p in points]
        lows = [(p.level or 0) - (min(p.values) or p.level or 0) for p in points]
        highs = [(max(p.values) or p.level or 0) - (p.level or 0) for p in points]
        name = _series_name(s)
        fitted = list(model.fit.levels)
        data: list[JsonObject] = [
            {
                "type": "scatter",
                "mode": "markers",
                "name": "label level (runs' range)",
                "x": labels,
                "y": levels,
                "marker": {"size": 8},
                "error_y": {"type": "data", "symmetric": False, "array": highs, "arrayminus": lows},
            },
            {
                "type": "scatter",
                "mode": "lines" if len(points) > 1 else "markers",
                "name": "fitted levels",
                "x": labels,
                "y": fitted,
                "line": {"shape": "hv"},
                "marker": {"symbol": "line-ew-open", "size": 16},
            },
        ]
        marks = [
            st
            for st in check.steps
            if (st.series.scene, st.series.metric, st.series.zone, st.series.host_id)
            == (s.scene, s.metric, s.zone, s.host_id)
        ]
        shapes: list[JsonObject] = [
            {
                "type": "line",
                "xref": "x",
                "yref": "paper",
                "x0": plot_text(st.label),
                "x1": plot_text(st.label),
                "y0": 0,
                "y1": 1,
                "line": {"dash": "dot", "color": "#c0392b"},
            }
            for st in marks
        ]
        top = max(
            [float(max(p.values) or p.level or 0) for p in points] + [float(v) for v in fitted],
            default=0.0,
        )
        yaxis: JsonObject = {
            "title": {"text": plot_text(s.unit)},
            "rangemode": "tozero",
        }
        if top > 0:
            # one label, or flat counts, still get a sane axis
            yaxis["range"] = [0, top * (1 + _Y_HEADROOM)]
        fid = f"history-{first_figure + n}"
        figures.append(
            Figure(
                fid,
                data,
                {
                    "title": {"text": plot_text(name), "x": 0},
                    "xaxis": {"title": {"text": "label"}, "type": "category"},
                    "yaxis": yaxis,
                    "shapes": shapes,
                    "height": 320,
                    "margin": {"t": 40, "l": 60, "r": 20, "b": 50},
                },
            )
        )
        parts.append(
            f'<h3>{html.escape(name)}</h3>{_summary(model, len(marks))}<div class="plot" '
            f'id="{fid}"></div>'
        )
    if not check.series:
        parts.append('<p class="muted">The history store holds no series.</p>')
    parts.append("</section>")
    return "".join(parts), figures


__all__ = ["history_section"]
