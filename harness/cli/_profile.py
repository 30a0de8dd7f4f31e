"""``compare --profile``: where each changed scene's and zone's instructions went."""

from __future__ import annotations

import sys
from collections.abc import Sequence

from katra3d.harness.cli._common import emit_table
from katra_trace.jsontext import JsonObject
from katra_trace.profile.diff import TOP_ROWS, ProfileDelta, short_object
from katra_trace.profile.model import share_text


def attach(out: JsonObject, deltas: Sequence[ProfileDelta]) -> None:
    """Give each scene and zone of compare's JSON its ``profile_delta`` list."""
    scenes = out.get("scenes")
    for d in deltas:
        entry = scenes.get(d.scene) if isinstance(scenes, dict) else None
        if isinstance(entry, dict) and d.zone is not None:
            zones = entry.get("zones")
            entry = zones.get(d.zone) if isinstance(zones, dict) else None
        if isinstance(entry, dict):
            entry["profile_delta"] = d.as_list()


def print_profiles(deltas: Sequence[ProfileDelta], fmt: str) -> None:
    """A table per changed scene and zone profile, largest change first."""
    if not deltas:
        print(
            "katra3d: note: --profile: no instruction profiles on both sides (a counted run, "
            "--measure instructions|cycles, keeps them)",
            file=sys.stderr,
        )
        return
    for d in deltas:
        name = d.scene if d.zone is None else f"{d.scene} / {d.zone}"
        if not d.changed:
            sys.stdout.write(f"profile {name}: no function changed\n")
            continue
        rows = [
            [
                r.group,
                short_object(r.object),
                r.function,
                f"{r.base:,.0f}",
                f"{r.new:,.0f}",
                f"{r.delta:+,.0f}",
                share_text(d.share(r)),
            ]
            for r in d.rows[:TOP_ROWS]
            if r.delta
        ]
        groups = ", ".join(f"{g} {v:+,.0f}" for g, v in d.groups().items() if v)
        title = (
            f"profile {name}: {d.base:,.0f} -> {d.new:,.0f} instructions a frame "
            f"({d.delta:+,.0f}; {groups})"
        )
        columns = ["group", "object", "function", "base", "new", "delta", "share"]
        emit_table(columns, rows, fmt, title=title, right=columns[3:])


__all__ = ["attach", "print_profiles"]
