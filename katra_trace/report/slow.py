"""A scene's slow frames in the report: marks on the frame-time plot coloured by cause, and a
table per run (``stats --slow``'s rule)."""

from __future__ import annotations

import html
from collections.abc import Callable, Sequence

from katra_trace.analysis.slow import KINDS, SceneSlow, trace_slow_frames
from katra_trace.analysis.stats import STUTTER_FACTOR, STUTTER_WINDOW_FRAMES, HeadedTrace
from katra_trace.jsontext import JsonObject
from katra_trace.report.plottext import plot_text
from katra_trace.report.series import _remembered
from katra_trace.units import format_ms

CAUSE_COLORS: dict[str, str] = {
    "zone": "#d62728",
    "draw": "#ff7f0e",
    "between zones": "#9467bd",
    "gc": "#2ca02c",
    "machine": "#8c564b",
    "unknown": "#111111",
}
SYMBOLS = {"run": "circle", "baseline": "x"}


def _slow_of(trace: HeadedTrace, scene: str) -> SceneSlow | None:
    return _remembered(trace, ("slow_frames",), lambda: trace_slow_frames(trace)).get(scene)


def _e(text: object) -> str:
    return html.escape(str(text), quote=True)


def slow_part(
    scene: str,
    sides: Sequence[tuple[str, Sequence[HeadedTrace]]],
    clock: str,
    run_label: Callable[[HeadedTrace, int, str], str],
) -> tuple[list[JsonObject], str]:
    """Plot traces marking slow frames (per side and cause) and the "Slow frames" HTML."""
    # (side, cause kind): frame indices, ms and hover texts
    marks: dict[tuple[str, str], tuple[list[int], list[float], list[str]]] = {}
    rows: list[list[str]] = []
    notes: set[str] = set()
    runs = 0
    for role, traces in sides:
        for i, trace in enumerate(traces):
            found = _slow_of(trace, scene)
            if found is None or found.clock != clock:
                continue
            runs += 1
            label = run_label(trace, i, role)
            if found.note:
                notes.add(found.note)
            if not found.slow:
                rows.append([_e(label), f"none of {found.frames} frames", "", "", ""])
            for g in found.groups:
                rows.append(
                    [
                        _e(label),
                        _e(g.label),
                        str(g.count),
                        _e(g.period_text or "-"),
                        _e(format_ms(g.typical_excess_ms)),
                    ]
                )
            for s in found.slow:
                frames, ms, texts = marks.setdefault((role, s.cause.kind), ([], [], []))
                frames.append(s.frame)
                ms.append(round(s.ms, 6))
                texts.append(
                    plot_text(
                        f"{label}: frame {s.frame}, {format_ms(s.ms)} ({s.ratio:.1f}x the "
                        f"moving median): {s.cause.label}, +{format_ms(s.cause.excess_ms)}"
                    )
                )
    if not runs:
        return [], ""
    traces_out: list[JsonObject] = []
    for (role, kind), (frames, ms, texts) in sorted(
        marks.items(), key=lambda kv: (kv[0][0] != "run", KINDS.index(kv[0][1]))
    ):
        traces_out.append(
            {
                "type": "scatter",
                "mode": "markers",
                "name": f"slow: {kind}" + (" (baseline)" if role == "baseline" else ""),
                "x": frames,
                "y": ms,
                "text": texts,
                "hoverinfo": "text",
                "legendgroup": "slow",
                "marker": {
                    "color": CAUSE_COLORS[kind],
                    "size": 9,
                    "symbol": SYMBOLS.get(role, "circle"),
                    "line": {"width": 1, "color": "#fff"},
                },
            }
        )
    head = "".join(
        f'<th class="l">{c}</th>' if n < 2 else f"<th>{c}</th>"
        for n, c in enumerate(("run", "cause", "frames", "period", "typical excess"))
    )
    body = "".join(
        "<tr>"
        + "".join(
            f'<td class="l">{c}</td>' if n < 2 else f"<td>{c}</td>" for n, c in enumerate(row)
        )
        + "</tr>"
        for row in rows
    )
    note = "".join(f'<p class="muted">{_e(n)}</p>' for n in sorted(notes))
    html_out = (
        f'<h3>Slow frames</h3><p class="muted">frames over {STUTTER_FACTOR:g}x the moving median '
        "of "
        f"{STUTTER_WINDOW_FRAMES} frames ({_e(clock)} clock), each with its main cause (marked on "
        "the plot above, coloured by cause); causes that recur are grouped, with their period "
        f'(docs/stats.md, "Why a frame was slow")</p><table><thead><tr>{head}</tr></thead>'
        f"<tbody>{body}</tbody></table>{note}"
    )
    return traces_out, html_out


__all__ = ["CAUSE_COLORS", "slow_part"]
