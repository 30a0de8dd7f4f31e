"""A scene's plain-HTML tables: params, frame and zone statistics, numbers as ``katra3d stats``
computes them, headers from :func:`katra_trace.units.stat_label`."""

from __future__ import annotations

import html
import math
from collections.abc import Mapping, Sequence

from katra_trace import jsontext
from katra_trace.analysis.stats import NO_STATS, ClockStats, HeadedTrace, RunStats
from katra_trace.metrics import CLOCK_PREFERENCE, unit_of
from katra_trace.units import format_change_pct, format_ms, stat_label

TIME_STATS: tuple[str, ...] = (
    "n",
    "median_ms",
    "mean_ms",
    "p99_ms",
    "mad_ms",
    "cv",
    "fps_avg",
    "fps_low_1pct",
    "stutter_pct",
)
#: ``{u}``: the count clock's unit.
COUNT_STATS: tuple[str, ...] = (
    "n",
    "median_{u}",
    "mean_{u}",
    "p99_{u}",
    "min_{u}",
    "max_{u}",
    "cv",
)
#: No rates: a zone is not a frame.
ZONE_TIME_STATS: tuple[str, ...] = (
    "n",
    "median_ms",
    "mean_ms",
    "p95_ms",
    "p99_ms",
    "max_ms",
    "mad_ms",
    "cv",
)
ZONE_COUNT_STATS: tuple[str, ...] = (
    "n",
    "median_{u}",
    "mean_{u}",
    "p95_{u}",
    "p99_{u}",
    "max_{u}",
    "cv",
)
ZONE_ROWS_SHOWN = 12

#: (its label on the page, the opened trace)
Labelled = tuple[str, HeadedTrace]


def e(text: object) -> str:
    """HTML-escaped, quotes too."""
    return html.escape(str(text), quote=True)


def num(v: float | None, unit: str) -> str:
    """Durations (ms) with their unit, counts whole, rates to 1 decimal."""
    if v is None or (isinstance(v, float) and not math.isfinite(v)):
        return "-"
    if isinstance(v, bool):
        return str(v)
    if unit == "int":
        return f"{int(v):,}"
    if unit == "ms":
        return format_ms(float(v))
    if unit in ("fps", "share"):
        return f"{float(v):,.1f}"
    if unit == "ratio":
        return f"{float(v):.3f}"
    if unit == "pct":
        return format_change_pct(float(v), 2)
    if unit == "p":
        return f"{float(v):.2g}"
    return f"{float(v):,.0f}"


def table(
    columns: Sequence[str],
    rows: Sequence[Sequence[str]],
    left: int = 1,
    caption: str = "",
    cls: str = "",
) -> str:
    """``columns`` (escaped here) over ``rows`` (HTML); the first ``left`` left-aligned."""
    head = "".join(
        f'<th class="l">{e(c)}</th>' if i < left else f"<th>{e(c)}</th>"
        for i, c in enumerate(columns)
    )
    body = "".join(
        "<tr>"
        + "".join(
            f'<td class="l">{c}</td>' if i < left else f"<td>{c}</td>" for i, c in enumerate(row)
        )
        + "</tr>"
        for row in rows
    )
    attrs = f' class="{e(cls)}"' if cls else ""
    cap = f"<caption>{e(caption)}</caption>" if caption else ""
    return f"<table{attrs}>{cap}<thead><tr>{head}</tr></thead><tbody>{body}</tbody></table>"


def _format_of(key: str) -> str:
    if key == "n":
        return "int"
    if key.endswith("_ms"):
        return "ms"
    if key.startswith("fps_"):
        return "fps"
    if key == "stutter_pct":
        return "share"
    if key == "cv":
        return "ratio"
    return "count"


def _what(unit: str) -> str:
    return "frame times" if unit == "ms" else f"{unit} per frame"


def stats_table(entries: Sequence[tuple[str, str, ClockStats]]) -> str:
    groups: dict[str, list[tuple[str, str, ClockStats]]] = {}
    for entry in entries:
        groups.setdefault(unit_of(entry[1]), []).append(entry)
    out = []
    for unit, rows in groups.items():
        keys = TIME_STATS if unit == "ms" else tuple(k.format(u=unit) for k in COUNT_STATS)
        body = [
            [e(label), e(clock), *(num(stats.get(k), _format_of(k)) for k in keys)]
            for label, clock, stats in ((r[0], r[1], r[2].as_dict()) for r in rows)
        ]
        out.append(
            table(
                ["run", "clock", *(stat_label(k) for k in keys)],
                body,
                left=2,
                cls="stats",
                caption=f"{_what(unit)}, warmup excluded",
            )
        )
    return "".join(out)


def _param_text(value: object) -> str:
    return (
        jsontext.dumps(value, default=str)
        if isinstance(value, (Mapping, list, tuple))
        else str(value)
    )


def params_table(scene: str, runs: Sequence[Labelled]) -> str:
    """One row when every run used the same params, else a row per run; empty when none recorded."""
    recorded = [
        (label, p)
        for label, t in runs
        if isinstance(p := t.header.capture_options.params_of(scene), Mapping)
    ]
    if not recorded:
        return ""
    names = list(dict.fromkeys(str(k) for _, p in recorded for k in p))
    if not names:
        return '<p class="muted params">params: none (this scene takes none)</p>'
    texts = [(label, {str(k): _param_text(v) for k, v in p.items()}) for label, p in recorded]
    same = len(texts) == len(runs) and all(t == texts[0][1] for _, t in texts)
    if same:
        return table(
            names,
            [[e(texts[0][1].get(n, "-")) for n in names]],
            left=0,
            cls="params",
            caption="params" + ("" if len(runs) == 1 else " (the same in every run)"),
        )
    rows = [[e(label), *(e(t.get(n, "-")) for n in names)] for label, t in texts]
    return table(["run", *names], rows, cls="params", caption="params (they differ between runs)")


def _zone_clock(zones: Sequence[Mapping[str, Mapping[str, ClockStats]]], clock: str) -> str | None:
    have = {c for per_zone in zones for per_clock in per_zone.values() for c in per_clock}
    if clock in have:
        return clock
    return next((c for c in CLOCK_PREFERENCE if c in have), min(have) if have else None)


def zone_stats_table(
    scene: str, clock: str, runs: Sequence[Labelled], stats_of: Mapping[int, RunStats]
) -> str:
    per_run = [(label, stats_of[id(t)].scenes.get(scene, NO_STATS).zones) for label, t in runs]
    zclock = _zone_clock([z for _, z in per_run], clock)
    if zclock is None:
        return ""
    unit = unit_of(zclock)
    keys = ZONE_TIME_STATS if unit == "ms" else tuple(k.format(u=unit) for k in ZONE_COUNT_STATS)
    many = len(runs) > 1
    rows = [
        [
            *([e(label)] if many else []),
            e(zone),
            *(num(per_clock[zclock].as_dict().get(k), _format_of(k)) for k in keys),
        ]
        for label, zones in per_run
        for zone, per_clock in zones.items()
        if zclock in per_clock
    ]
    caption = (
        f"{zclock} clock, warmup excluded" if unit == "ms" else f"{unit} per span, warmup excluded"
    )
    body = table(
        [*(["run"] if many else []), "zone", *(stat_label(k, zone=True) for k in keys)],
        rows,
        left=2 if many else 1,
        cls="zone-stats",
        caption=caption,
    )
    if len(rows) > ZONE_ROWS_SHOWN:
        zones = len({r[1 if many else 0] for r in rows})
        body = (
            f"<details><summary>{zones} zones, {len(rows)} rows: their "
            f"statistics</summary>{body}</details>"
        )
    return body


__all__ = [
    "COUNT_STATS",
    "TIME_STATS",
    "ZONE_COUNT_STATS",
    "ZONE_ROWS_SHOWN",
    "ZONE_TIME_STATS",
    "e",
    "num",
    "params_table",
    "stats_table",
    "table",
    "zone_stats_table",
]
