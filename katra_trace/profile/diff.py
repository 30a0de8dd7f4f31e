"""Where a change went: two sides' profiles paired per scene and zone."""

from __future__ import annotations

import dataclasses
import os
from collections.abc import Iterable, Sequence
from pathlib import Path

from katra_trace.errors import KatraError
from katra_trace.io.reader import Trace
from katra_trace.io.tracesets import open_quietly
from katra_trace.jsontext import JsonObject
from katra_trace.profile.groups import group_of
from katra_trace.profile.model import (
    DeltaRow,
    Profile,
    Row,
    group_deltas,
    profile_delta,
    share,
    top_change,
    trace_profiles,
)

Key = tuple[str, str | None]

#: Rows a table lists (JSON and flame graphs hold every one).
TOP_ROWS = 12


def side_profiles(traces: Iterable[Trace]) -> dict[Key, Profile]:
    """One side's profiles by (scene, zone), runs averaged over all their frames."""
    sums: dict[Key, tuple[int, dict[tuple[str, str], list[float]]]] = {}
    for trace in traces:
        for key, p in trace_profiles(trace.profiles).items():
            frames, rows = sums.get(key, (0, {}))
            for r in p.rows:
                acc = rows.setdefault((r.object, r.function), [0.0, 0.0])
                acc[0] += r.self_ * p.frames
                acc[1] += r.inclusive * p.frames
            sums[key] = (frames + p.frames, rows)
    return {
        key: Profile(
            key[0],
            key[1],
            frames,
            tuple(
                Row(group_of(obj), obj, fn, own / frames, incl / frames)
                for (obj, fn), (own, incl) in rows.items()
            ),
        )
        for key, (frames, rows) in sums.items()
    }


@dataclasses.dataclass(frozen=True)
class ProfileDelta:
    """One scene's (or zone's) profile difference a frame, largest change first."""

    scene: str
    zone: str | None
    base: float
    new: float
    rows: tuple[DeltaRow, ...]

    @property
    def delta(self) -> float:
        return self.new - self.base

    @property
    def changed(self) -> bool:
        return any(r.delta for r in self.rows)

    def share(self, row: DeltaRow) -> float | None:
        return share(row.delta, self.delta)

    def groups(self) -> dict[str, float]:
        return group_deltas(self.rows)

    def summary(self) -> str | None:
        return top_change(self.rows)

    def as_list(self) -> list[JsonObject]:
        return [r.as_dict() for r in self.rows]


def profile_deltas(base_traces: Iterable[Trace], new_traces: Iterable[Trace]) -> list[ProfileDelta]:
    """Every scene and zone profiled on both sides, in BASE's order."""
    base, new = side_profiles(base_traces), side_profiles(new_traces)
    return [
        ProfileDelta(
            key[0],
            key[1],
            base[key].instructions,
            new[key].instructions,
            tuple(profile_delta(base[key], new[key])),
        )
        for key in base
        if key in new
    ]


def short_object(obj: str) -> str:
    return os.path.basename(obj) or obj


def top_line(deltas: Sequence[ProfileDelta]) -> str | None:
    """ab's and bisect's counted-mode line: the largest change and where it went, or None."""
    scenes = [d for d in deltas if d.zone is None and d.changed]
    if not scenes:
        return None
    d = max(scenes, key=lambda x: abs(x.delta))
    return f"profile: {d.scene}: {d.summary()}"


def top_line_of(base: Iterable[Path], new: Iterable[Path]) -> str | None:
    """:func:`top_line` of two trace files; None when one cannot be read (the verdict says why)."""
    try:
        sides = [[open_quietly(p) for p in side] for side in (base, new)]
    except KatraError:
        return None
    return top_line(profile_deltas(*sides))


__all__ = [
    "TOP_ROWS",
    "ProfileDelta",
    "profile_deltas",
    "short_object",
    "side_profiles",
    "top_line",
    "top_line_of",
]
