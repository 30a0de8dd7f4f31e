"""A scene's zones in the report: passes in one plot and, with ``--zones draws``, each pass's draws
in their own (a pass's total dwarfs its draws). A plot is as tall as its labelled bars need."""

from __future__ import annotations

import html
from collections.abc import Mapping, Sequence

import numpy as np

from katra_trace.analysis.stats import HeadedTrace
from katra_trace.jsontext import JsonObject
from katra_trace.report.figure import Figure, color, layout, plot_div
from katra_trace.report.plottext import plot_text
from katra_trace.report.series import zone_medians
from katra_trace.schema import FRAME_PASS, draw_pass
from katra_trace.units import format_count, format_ms

#: The slowest draws one pass's plot shows (it says how many it left out).
MAX_DRAW_BARS = 40
#: Bars plot height, px: margins, a category's gap, each side's bar.
BARS_FRAME_PX = 110
ROW_GAP_PX = 8
BAR_PX = 9
#: The page's ``.plot`` height (the passes plot's least).
PLOT_PX = 320
DRAWS_MIN_PX = 180

#: x axis / longest bar: room for its value.
TEXT_ROOM = 1.15


def group_zones(names: Sequence[str]) -> tuple[list[str], dict[str, list[str]]]:
    """``(passes, {pass: its draws})`` in first-seen order."""
    known = set(names)
    passes: list[str] = []
    draws: dict[str, list[str]] = {}
    for name in names:
        owner = draw_pass(name, known)
        if owner is None:
            passes.append(name)
        else:
            draws.setdefault(owner, []).append(name)
    return passes, draws


def captured_draws(traces: Sequence[HeadedTrace]) -> bool:
    return any(t.header.capture_options.zones == "draws" for t in traces)


def bars_height(categories: int, sides: int, least: int = PLOT_PX) -> int:
    return max(least, BARS_FRAME_PX + categories * (ROW_GAP_PX + BAR_PX * max(1, sides)))


def _bars(role: str, labels: Sequence[str], values: Sequence[float], unit: str) -> JsonObject:
    return {
        "type": "bar",
        "orientation": "h",
        "name": "runs" if role == "run" else "baseline",
        "y": [plot_text(z) for z in labels],
        "x": list(values),
        "marker": {"color": color(role, 0)},
        "text": [format(v, ".3f" if unit == "ms" else ",.0f") for v in values],
        "textposition": "outside",
        "cliponaxis": False,
        "textfont": {"size": 11},
    }


def _bars_layout(
    title: str,
    unit: str,
    labels: Sequence[str],
    sides: int,
    top: float,
    least: int = PLOT_PX,
) -> JsonObject:
    """``top``: the longest bar."""
    ticks = [plot_text(z) for z in labels]
    xaxis: JsonObject = {"title": {"text": unit}, "rangemode": "tozero"}
    if top > 0:
        xaxis["range"] = [0, top * TEXT_ROOM]
    return layout(
        title,
        unit,
        "",
        barmode="group",
        height=bars_height(len(labels), sides, least),
        yaxis={
            "automargin": True,
            "autorange": "reversed",
            "type": "category",
            "tickmode": "array",
            "tickvals": ticks,
            "ticktext": ticks,
        },
        xaxis=xaxis,
    )


def _fmt(v: float | None, unit: str) -> str:
    return "-" if v is None else format_ms(v) if unit == "ms" else f"{format_count(v)} {unit}"


def zone_figures(
    base_id: str,
    scene: str,
    clock: str,
    sides: Sequence[tuple[str, Sequence[HeadedTrace]]],
    frame_medians: Mapping[str, float],
    unit: str,
) -> tuple[str, str, list[Figure]]:
    """``(passes element, draws elements, figures)``; a side's bar is the median of its runs'
    medians, ``frame_medians`` the total for draws outside any pass."""
    medians: dict[str, dict[str, float]] = {}
    for role, traces in sides:
        per_zone: dict[str, list[float]] = {}
        for t in traces:
            for zone, med in zone_medians(t, scene, clock).items():
                per_zone.setdefault(zone, []).append(med)
        if per_zone:
            medians[role] = {z: float(np.median(v)) for z, v in per_zone.items()}
    names = list(dict.fromkeys(z for m in medians.values() for z in m))
    draws_mode = captured_draws([t for _, traces in sides for t in traces])
    passes, draws = group_zones(names) if draws_mode else (names, {})
    figures: list[Figure] = []
    passes_html = ""
    if passes:
        bars = [
            (role, [z for z in passes if z in m], [m[z] for z in passes if z in m])
            for role, m in medians.items()
        ]
        bars = [b for b in bars if b[1]]
        title = f"{'passes' if draws else 'zones'}, median per frame ({clock})"
        top = max((v for _, _, values in bars for v in values), default=0.0)
        figures.append(
            Figure(
                f"{base_id}-zones",
                [_bars(role, labels, values, unit) for role, labels, values in bars],
                _bars_layout(title, unit, passes, len(bars), top),
            )
        )
        passes_html = plot_div(figures[-1])
    draws_html = []
    for k, (owner, members) in enumerate(draws.items()):
        shown = members
        if len(members) > MAX_DRAW_BARS:
            slowest = set(
                sorted(members, key=lambda z: -max(m.get(z, 0.0) for m in medians.values()))[
                    :MAX_DRAW_BARS
                ]
            )
            shown = [z for z in members if z in slowest]
        labels = [z[len(owner) + 1 :] for z in shown]
        data: list[JsonObject] = []
        totals = []
        top = 0.0
        for role, m in medians.items():
            have = [(label, m[z]) for label, z in zip(labels, shown, strict=True) if z in m]
            if have:
                data.append(_bars(role, [h[0] for h in have], [h[1] for h in have], unit))
                top = max([top, *(h[1] for h in have)])
            total = m.get(owner, frame_medians.get(role) if owner == FRAME_PASS else None)
            summed = sum(m[z] for z in members if z in m)
            totals.append(
                f"{'runs' if role == 'run' else 'baseline'} {_fmt(total, unit)} "
                f"(its draws add up to {_fmt(summed, unit)})"
            )
        where = (
            "outside any pass" if owner == FRAME_PASS and owner not in names else f"in pass {owner}"
        )
        left_out = (
            f"; the {len(shown)} slowest of {len(members)} shown"
            if len(shown) < len(members)
            else ""
        )
        fig = Figure(
            f"{base_id}-draws-{k}",
            data,
            _bars_layout(
                plot_text(f"draws {where}, median per frame ({clock}){left_out}"),
                unit,
                labels,
                len(data),
                top,
                DRAWS_MIN_PX,
            ),
        )
        figures.append(fig)
        caption = (
            f"{len(members)} draw{'' if len(members) == 1 else 's'} {where}; pass total per frame: "
            f"{'; '.join(totals)}"
        )
        draws_html.append(f'<p class="muted pass-total">{html.escape(caption)}</p>{plot_div(fig)}')
    return passes_html, "".join(draws_html), figures


__all__ = [
    "MAX_DRAW_BARS",
    "bars_height",
    "captured_draws",
    "group_zones",
    "zone_figures",
]
