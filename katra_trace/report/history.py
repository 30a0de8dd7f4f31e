"""The history section of the report: one trend plot per series of a history store.

Built from :func:`katra_trace.history.trends.trend_data` (labels in order, each label's runs
and level, the fitted model, the steps found): per series a plot of the level per label with
the runs' range as error bars, the fitted levels as a line (the model ``history check`` judges:
flat where it found no step), and each step marked at the label where it starts.
"""

from __future__ import annotations

import html
from collections.abc import Mapping
from typing import Any

from katra_trace.report.plottext import plot_text
from katra_trace.units import format_change_pct

#: Head room above the highest run in a history plot (a fraction of it).
_Y_HEADROOM = 0.12


def _series_name(s: Mapping[str, Any]) -> str:
    zone = f" / {s['zone']}" if s.get("zone") else ""
    return (
        f"{s.get('scene', '?')}{zone}: {s.get('metric', '')} {s.get('stat', '')} "
        f"({s.get('unit', '')})"
    )


def _summary(s: Mapping[str, Any], marks: int) -> str:
    """One line under a series' title: the model's change, the labels' change, the steps, why
    none, and the newest labels' departure.
    """
    fit = s.get("fit", {})
    text = (
        f"change {format_change_pct(float(fit.get('change_pct', 0.0)))} (fitted levels), {marks} "
        "step(s); "
        f"labels' change {format_change_pct(float(fit.get('raw_change_pct', 0.0)))}"
    )
    if fit.get("no_step_reason"):
        text += f"; no step: {fit['no_step_reason']}"
    if fit.get("departure"):
        text += f"; {fit['departure']['text']}"
    return f'<p class="muted">{html.escape(text)}</p>'


def history_section(
    trends: Mapping[str, Any], first_figure: int = 0
) -> tuple[str, list[dict[str, Any]]]:
    """(HTML, plotly figures) of the history section for ``trend_data``'s result."""
    series = list(trends.get("series", []))
    steps = list(trends.get("steps", []))
    figures: list[dict[str, Any]] = []
    parts = [
        f'<section id="history"><h2>History</h2><p class="muted">{len(series)} series over '
        f"{len(trends.get('labels', []))} label(s) and {int(trends.get('runs', 0))} run(s) from "
        f"{html.escape(str(trends.get('source', '')))}; {len(steps)} step(s) found (katra3d "
        "history "
        f"check{', alpha ' + format(trends['alpha'], 'g') if 'alpha' in trends else ''}).</p>"
    ]
    for n, s in enumerate(series):
        points = list(s.get("points", []))
        labels = [plot_text(p.get("label", "")) for p in points]
        levels = [p.get("level") for p in points]
        lows = [(p.get("level") or 0) - (p.get("min") or p.get("level") or 0) for p in points]
        highs = [(p.get("max") or p.get("level") or 0) - (p.get("level") or 0) for p in points]
        name = _series_name(s)
        fitted = list(s.get("fit", {}).get("levels", []))
        data: list[dict[str, Any]] = [
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
            for st in steps
            if st.get("scene") == s.get("scene")
            and st.get("metric") == s.get("metric")
            and st.get("zone") == s.get("zone")
            and st.get("host_id", s.get("host_id")) == s.get("host_id")
        ]
        shapes = [
            {
                "type": "line",
                "xref": "x",
                "yref": "paper",
                "x0": plot_text(st.get("label")),
                "x1": plot_text(st.get("label")),
                "y0": 0,
                "y1": 1,
                "line": {"dash": "dot", "color": "#c0392b"},
            }
            for st in marks
        ]
        top = max(
            [float(p.get("max") or p.get("level") or 0) for p in points]
            + [float(v) for v in fitted],
            default=0.0,
        )
        yaxis: dict[str, Any] = {
            "title": {"text": plot_text(s.get("unit", ""))},
            "rangemode": "tozero",
        }
        if top > 0:
            # one label, or flat counts, still get a sane axis
            yaxis["range"] = [0, top * (1 + _Y_HEADROOM)]
        fid = f"history-{first_figure + n}"
        figures.append(
            {
                "id": fid,
                "data": data,
                "layout": {
                    "title": {"text": plot_text(name), "x": 0},
                    "xaxis": {"title": {"text": "label"}, "type": "category"},
                    "yaxis": yaxis,
                    "shapes": shapes,
                    "height": 320,
                    "margin": {"t": 40, "l": 60, "r": 20, "b": 50},
                },
            }
        )
        parts.append(
            f'<h3>{html.escape(name)}</h3>{_summary(s, len(marks))}<div class="plot" '
            f'id="{fid}"></div>'
        )
    if not series:
        parts.append('<p class="muted">The history store holds no series.</p>')
    parts.append("</section>")
    return "".join(parts), figures


__all__ = ["history_section"]
