"""The history section of the report: one trend plot per series of a history store.

Built from :func:`katra_trace.history.trends.trend_data` (labels in order, each label's runs
and level, the fitted levels, the steps found): per series a plot of the level per label
with the runs' range as error bars, the fitted piecewise-constant levels as a line, and
each step marked at the label where it starts.
"""

from __future__ import annotations

import html
from collections.abc import Mapping
from typing import Any


def history_section(trends: Mapping[str, Any], first_figure: int = 0) -> tuple[str, list[dict[str, Any]]]:
    """(HTML, plotly figures) of the history section for ``trend_data``'s result."""
    series = list(trends.get("series", []))
    steps = list(trends.get("steps", []))
    figures: list[dict[str, Any]] = []
    parts = [f'<section id="history"><h2>History</h2><p class="muted">{len(series)} series over '
             f'{len(trends.get("labels", []))} label(s) from {html.escape(str(trends.get("source", "")))}; '
             f'{len(steps)} step(s) found (katra3d history check).</p>']
    for n, s in enumerate(series):
        points = list(s.get("points", []))
        labels = [str(p.get("label", "")) for p in points]
        levels = [p.get("level") for p in points]
        lows = [(p.get("level") or 0) - (p.get("min") or p.get("level") or 0) for p in points]
        highs = [(p.get("max") or p.get("level") or 0) - (p.get("level") or 0) for p in points]
        name = f"{s.get('scene', '?')}{' / ' + str(s['zone']) if s.get('zone') else ''}: {s.get('metric', '')} " \
               f"{s.get('stat', '')} ({s.get('unit', '')})"
        data: list[dict[str, Any]] = [
            {"type": "scatter", "mode": "markers", "name": "label level (runs' range)", "x": labels, "y": levels,
             "error_y": {"type": "data", "symmetric": False, "array": highs, "arrayminus": lows}},
            {"type": "scatter", "mode": "lines", "name": "fitted levels", "x": labels,
             "y": list(s.get("fit", {}).get("levels", [])), "line": {"shape": "hv"}},
        ]
        marks = [st for st in steps if st.get("scene") == s.get("scene") and st.get("metric") == s.get("metric")
                 and st.get("zone") == s.get("zone") and st.get("host_id", s.get("host_id")) == s.get("host_id")]
        shapes = [{"type": "line", "xref": "x", "yref": "paper", "x0": st.get("label"), "x1": st.get("label"),
                   "y0": 0, "y1": 1, "line": {"dash": "dot", "color": "#c0392b"}} for st in marks]
        fid = f"history-{first_figure + n}"
        figures.append({"id": fid, "data": data,
                        "layout": {"title": {"text": name, "x": 0}, "xaxis": {"title": {"text": "label"}},
                                   "yaxis": {"title": {"text": str(s.get("unit", ""))}}, "shapes": shapes,
                                   "height": 320, "margin": {"t": 40, "l": 60, "r": 20, "b": 50}}})
        parts.append(f'<h3>{html.escape(name)}</h3><div class="plot" id="{fid}"></div>')
    if not series:
        parts.append('<p class="muted">The history store holds no series.</p>')
    parts.append("</section>")
    return "".join(parts), figures


__all__ = ["history_section"]
