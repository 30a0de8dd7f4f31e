"""What every report figure shares: run colours, layout (legend outside the plot, never over
data), compact values."""

from __future__ import annotations

import dataclasses
import html

import numpy as np

from katra_trace.jsontext import JsonObject, JsonValue

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
LEGEND: JsonObject = {
    "orientation": "v",
    "x": 1.02,
    "xanchor": "left",
    "y": 1.0,
    "yanchor": "top",
}


@dataclasses.dataclass(frozen=True)
class Figure:
    """A plotly figure; the page's loader draws it into the element with this ``id``."""

    id: str
    data: list[JsonObject]
    layout: JsonObject

    def as_dict(self) -> JsonObject:
        return {"id": self.id, "data": self.data, "layout": self.layout}


def layout(title: str, x_title: str, y_title: str, **extra: JsonValue) -> JsonObject:
    """A figure's layout; ``extra`` replaces whole keys (``xaxis``, ``legend``, ``height``, ...)."""
    out: JsonObject = {
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
    return BASELINE_COLOR if role == "baseline" else RUN_COLORS[i % len(RUN_COLORS)]


def fill(hex_color: str, alpha: float) -> str:
    r, g, b = (int(hex_color[i : i + 2], 16) for i in (1, 3, 5))
    return f"rgba({r},{g},{b},{alpha})"


def compact(values: np.ndarray, decimals: int = 6) -> list[float]:
    """Values rounded (ms to 1 ns by default) so the page stays small."""
    out: list[float] = np.round(np.asarray(values, dtype=np.float64), decimals).tolist()
    return out


def plot_div(figure: Figure, extra_class: str = "") -> str:
    height = figure.layout.get("height")
    style = (
        f' style="height:{int(height)}px"' if isinstance(height, (int, float)) and height else ""
    )
    cls = f"plot {extra_class}".strip()
    return f'<div class="{cls}" id="{html.escape(figure.id, quote=True)}"{style}></div>'


__all__ = [
    "BASELINE_COLOR",
    "Figure",
    "LEGEND",
    "RUN_COLORS",
    "color",
    "compact",
    "fill",
    "layout",
    "plot_div",
]
