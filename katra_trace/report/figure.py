"""What every plotly figure of the report's scenes shares: the colours of the runs, the layout,
compact values.

The legend stands to the right of the plot area, top-aligned, outside it: plotly widens the right
margin to hold it, so however many entries it has it never covers the data, the x axis's title
(below the plot) or the tool bar (above it). A figure's ``height`` in pixels, when it has one, is
also the height of its element on the page (:func:`plot_div`).
"""

from __future__ import annotations

import html
from typing import Any

import numpy as np

#: Plot colours of the runs (NEW side) and of the baseline runs.
RUN_COLORS = (
    "#1f77b4",
    "#2ca02c",
    "#9467bd",
    "#17becf",
    "#bcbd22",
    "#e377c2",
    "#8c564b",
    "#ff7f0e",
)
BASELINE_COLOR = "#7f7f7f"
#: Where every figure's legend stands (paper coordinates): right of the plot area, top-aligned.
LEGEND: dict[str, Any] = {
    "orientation": "v",
    "x": 1.02,
    "xanchor": "left",
    "y": 1.0,
    "yanchor": "top",
}


def layout(title: str, x_title: str, y_title: str, **extra: Any) -> dict[str, Any]:
    """A figure's layout: ``title`` top left, the axes' titles, the legend at :data:`LEGEND`;
    ``extra`` replaces whole keys (``xaxis``, ``yaxis``, ``legend``, ``height``, ...)."""
    out: dict[str, Any] = {
        "title": {"text": title, "font": {"size": 14}, "x": 0.01, "xanchor": "left"},
        "margin": {"l": 64, "r": 16, "t": 36, "b": 44},
        "xaxis": {"title": {"text": x_title}},
        "yaxis": {"title": {"text": y_title}, "rangemode": "tozero"},
        "legend": dict(LEGEND),
        "hovermode": "closest",
        "paper_bgcolor": "#fff",
        "plot_bgcolor": "#fff",
    }
    out.update(extra)
    return out


def color(role: str, i: int) -> str:
    """The colour of run ``i`` of side ``role`` (``run`` or ``baseline``)."""
    return BASELINE_COLOR if role == "baseline" else RUN_COLORS[i % len(RUN_COLORS)]


def fill(hex_color: str, alpha: float) -> str:
    """``hex_color`` (``#rrggbb``) as a CSS ``rgba()`` with opacity ``alpha`` (0..1), for bands."""
    r, g, b = (int(hex_color[i : i + 2], 16) for i in (1, 3, 5))
    return f"rgba({r},{g},{b},{alpha})"


def compact(values: np.ndarray, decimals: int = 6) -> list[float]:
    """Values for the page's JSON, rounded to ``decimals`` (ms to 1 ns; counts are whole already):
    the page stays small."""
    out: list[float] = np.round(np.asarray(values, dtype=np.float64), decimals).tolist()
    return out


def plot_div(figure: dict[str, Any], extra_class: str = "") -> str:
    """The page element ``figure`` is drawn into: as tall as the figure's ``height`` when it sets
    one.
    """
    height = figure["layout"].get("height")
    style = f' style="height:{int(height)}px"' if height else ""
    cls = f"plot {extra_class}".strip()
    return f'<div class="{cls}" id="{html.escape(figure["id"], quote=True)}"{style}></div>'


__all__ = [
    "BASELINE_COLOR",
    "LEGEND",
    "RUN_COLORS",
    "color",
    "compact",
    "fill",
    "layout",
    "plot_div",
]
