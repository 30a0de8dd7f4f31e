"""The report's profile section: where changed profiles' instructions went, and flame graphs."""

from __future__ import annotations

from collections.abc import Sequence
from html import escape as _e

from katra_trace.profile.diff import TOP_ROWS, ProfileDelta, short_object
from katra_trace.profile.flame import flame_svg
from katra_trace.profile.model import share_text


def profile_section(deltas: Sequence[ProfileDelta]) -> str:
    parts = []
    for d in deltas:
        if not d.changed:
            continue
        name = d.scene if d.zone is None else f"{d.scene} / {d.zone}"
        rows = "".join(
            f"<tr><td>{_e(r.group)}</td><td>{_e(short_object(r.object))}</td>"
            f"<td>{_e(r.function)}</td><td>{r.base:,.0f}</td><td>{r.new:,.0f}</td>"
            f"<td>{r.delta:+,.0f}</td><td>{share_text(d.share(r))}</td></tr>"
            for r in d.rows[:TOP_ROWS]
            if r.delta
        )
        parts.append(
            f"<h3>{_e(name)}: {d.base:,.0f} &rarr; {d.new:,.0f} instructions a frame "
            f"({d.delta:+,.0f})</h3><table><tr><th>group</th><th>object</th><th>function</th>"
            f"<th>base</th><th>new</th><th>delta</th><th>share</th></tr>{rows}</table>"
            f"<div>{flame_svg(d)}</div>"
        )
    if not parts:
        return ""
    return (
        '<section id="profile"><h2>Where the instructions went</h2>' + "".join(parts) + "</section>"
    )


__all__ = ["profile_section"]
