"""Profiles as data: PROFILE records, profiles read from a trace, and their difference."""

from __future__ import annotations

import dataclasses
from collections.abc import Iterable, Mapping, Sequence

from katra_trace.jsontext import JsonObject, JsonValue
from katra_trace.profile.groups import group_of

#: The row holding an object's functions outside a profile's top 99 %.
REST = "(other functions)"


@dataclasses.dataclass(frozen=True)
class ProfileRecord:
    """A PROFILE block: ``(object, function, self, inclusive)`` instructions summed over
    ``frames``."""

    scene: str
    zone: str | None
    frames: int
    rows: tuple[tuple[str, str, int, int], ...]

    def as_json(self) -> JsonObject:
        rows: list[JsonValue] = [[o, f, own, incl] for o, f, own, incl in self.rows]
        return {"scene": self.scene, "zone": self.zone, "frames": self.frames, "rows": rows}


@dataclasses.dataclass(frozen=True)
class Row:
    """One function's instructions a measured frame."""

    group: str
    object: str
    function: str
    self_: float
    inclusive: float


@dataclasses.dataclass(frozen=True)
class Profile:
    """One scene's (``zone`` None) or zone's profile, per measured frame."""

    scene: str
    zone: str | None
    frames: int
    rows: tuple[Row, ...]

    @property
    def instructions(self) -> float:
        return sum(r.self_ for r in self.rows)


def _row(raw: object, frames: int) -> Row | None:
    if not (isinstance(raw, Sequence) and len(raw) == 4):
        return None
    obj, fn, own, incl = raw
    if not (isinstance(obj, str) and isinstance(fn, str)):
        return None
    if not all(isinstance(v, int) and not isinstance(v, bool) and v >= 0 for v in (own, incl)):
        return None
    return Row(group_of(obj), obj, fn, own / frames, incl / frames)


def parse_profile(record: object) -> Profile | None:
    """None for a damaged or foreign block: its rows are left out, never guessed."""
    if not isinstance(record, Mapping):
        return None
    scene, zone, frames = record.get("scene"), record.get("zone"), record.get("frames")
    rows = record.get("rows")
    if not isinstance(scene, str) or not (zone is None or isinstance(zone, str)):
        return None
    if not (isinstance(frames, int) and frames > 0 and isinstance(rows, list)):
        return None
    parsed = [_row(r, frames) for r in rows]
    if any(r is None for r in parsed):
        return None
    return Profile(scene, zone, frames, tuple(r for r in parsed if r is not None))


def trace_profiles(records: Iterable[object]) -> dict[tuple[str, str | None], Profile]:
    """By (scene, zone); the last block of a key wins."""
    out: dict[tuple[str, str | None], Profile] = {}
    for record in records:
        profile = parse_profile(record)
        if profile is not None:
            out[(profile.scene, profile.zone)] = profile
    return out


@dataclasses.dataclass(frozen=True)
class DeltaRow:
    """One function's self instructions a frame on each side."""

    group: str
    object: str
    function: str
    base: float
    new: float

    @property
    def delta(self) -> float:
        return self.new - self.base

    def as_dict(self) -> JsonObject:
        return {
            "group": self.group,
            "object": self.object,
            "function": self.function,
            "base": self.base,
            "new": self.new,
            "delta": self.delta,
        }


def profile_delta(base: Profile, new: Profile) -> list[DeltaRow]:
    """Every function of either profile, largest change first (ties by name: a stable order)."""
    b = {(r.object, r.function): r.self_ for r in base.rows}
    n = {(r.object, r.function): r.self_ for r in new.rows}
    rows = [
        DeltaRow(group_of(obj), obj, fn, b.get((obj, fn), 0.0), n.get((obj, fn), 0.0))
        for obj, fn in b.keys() | n.keys()
    ]
    rows.sort(key=lambda r: (-abs(r.delta), -max(r.base, r.new), r.object, r.function))
    return rows


def group_deltas(rows: Iterable[DeltaRow]) -> dict[str, float]:
    sums: dict[str, float] = {}
    for r in rows:
        sums[r.group] = sums.get(r.group, 0.0) + r.delta
    return dict(sorted(sums.items(), key=lambda kv: -abs(kv[1])))


def share(delta: float, total: float) -> float | None:
    return delta / total if total else None


def share_text(x: float | None) -> str:
    return "-" if x is None else f"{x:.0%}"


def top_change(rows: Sequence[DeltaRow]) -> str | None:
    """The group and function where most of a change went, or None."""
    total = sum(r.delta for r in rows)
    if not total:
        return None
    group, gdelta = next(iter(group_deltas(rows).items()))
    top = rows[0]
    gshare = share(gdelta, total) or 0.0
    return (
        f"most of the change in {group} ({share_text(gshare)} of it); "
        f"top function {top.function} ({top.object}, {top.delta:+,.0f} instructions a frame)"
    )


__all__ = [
    "REST",
    "DeltaRow",
    "Profile",
    "Row",
    "group_deltas",
    "parse_profile",
    "profile_delta",
    "ProfileRecord",
    "share",
    "share_text",
    "top_change",
    "trace_profiles",
]
