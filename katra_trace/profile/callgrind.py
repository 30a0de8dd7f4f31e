"""callgrind dumps read into per-function instruction counts, and a scene's profile built from the
dumps its counted child kept (docs/profile.md).

A dump holds, per function (``fn=``) of an object (``ob=``), cost lines (its self cost) and calls
(``calls=`` then one cost line: the callee's inclusive cost, added to the caller's inclusive cost).
Names are compressed (``(id) name`` once, then ``(id)``) per file; objects and functions have a
name space each. Only the ``Ir`` column (instructions) is read.
"""

from __future__ import annotations

import json
import os
from collections.abc import Iterable
from pathlib import Path
from typing import Any

from katra_trace.errors import TraceFormatError
from katra_trace.profile.groups import JIT_OBJECT
from katra_trace.profile.model import REST, profile_record

#: (object, function) -> [self, inclusive] instructions.
Costs = dict[tuple[str, str], list[int]]

#: The one function name of an object's JIT code.
JIT_FUNCTIONS = "(compiled code)"

#: ``KATRA3D_PROFILE=off`` in a counted run's environment: no profiles kept (the bench's baseline).
PROFILE_ENV = "KATRA3D_PROFILE"


def profiles_on() -> bool:
    """Whether counted runs keep profiles (:data:`PROFILE_ENV` is not ``off``)."""
    return os.environ.get(PROFILE_ENV, "") != "off"


#: The index a counted child writes beside the kept dumps (katra3d.harness.engine.counting).
PROFILE_INDEX = "profile.json"


def _name(value: str, table: dict[str, str]) -> str:
    """A compressed name: ``(id) name`` defines ``id``, ``(id)`` refers to it."""
    value = value.strip()
    if value.startswith("("):
        end = value.find(")")
        key, rest = value[1:end], value[end + 1 :].strip()
        if rest:
            table[key] = rest
            return rest
        return table.get(key, value)
    return value


def _object(name: str) -> str:
    return JIT_OBJECT if name in ("", "???") else name


def read_dump(path: Path, into: Costs | None = None) -> Costs:
    """The instructions of every function in the callgrind dump at ``path``, added into ``into``."""
    costs: Costs = {} if into is None else into
    objects: dict[str, str] = {}
    functions: dict[str, str] = {}
    column = 0
    obj = JIT_OBJECT
    row: list[int] | None = None
    nested = False
    in_call = False
    try:
        with open(path, encoding="utf-8", errors="replace") as fh:
            for line in fh:
                head = line[:1]
                if head.isdigit() or head in "+-*":
                    if row is None:
                        continue
                    fields = line.split()
                    value = int(fields[column + 1]) if len(fields) > column + 1 else 0
                    if in_call:
                        in_call = False
                        if not nested:
                            row[1] += value
                    else:
                        row[0] += value
                        if not nested:
                            row[1] += value
                elif line.startswith("fn="):
                    name = _name(line[3:], functions)
                    # callgrind names a recursive call's frames fn'2, fn'3: one function, whose
                    # inclusive cost its outermost frame already holds
                    base, _, depth = name.rpartition("'")
                    nested = bool(base) and depth.isdigit()
                    # compiled shaders' addresses move with any change: one row for all of them
                    key = (obj, JIT_FUNCTIONS if obj == JIT_OBJECT else base if nested else name)
                    row = costs.get(key)
                    if row is None:
                        row = costs[key] = [0, 0]
                elif line.startswith("ob="):
                    obj = _object(_name(line[3:], objects))
                elif line.startswith("cob="):
                    _name(line[4:], objects)
                elif line.startswith("cfn="):
                    _name(line[4:], functions)
                elif line.startswith("calls="):
                    in_call = True
                elif line.startswith("events:"):
                    events = line.split(":", 1)[1].split()
                    column = events.index("Ir") if "Ir" in events else 0
    except (OSError, ValueError) as exc:
        raise TraceFormatError(f"cannot read callgrind dump {path}: {exc}") from None
    return costs


def read_parts(paths: Iterable[Path]) -> Costs:
    """The functions' instructions summed over the dumps at ``paths``."""
    costs: Costs = {}
    for path in paths:
        read_dump(path, costs)
    return costs


#: Functions a profile keeps at least (past 99 %), so that one moving across the cut between two
#: versions seldom reads as a change.
MIN_ROWS = 100


def bounded_rows(costs: Costs, share: float = 0.99) -> list[list[Any]]:
    """``costs`` as rows ``[object, function, self, inclusive]``, largest self first: the functions
    that make ``share`` of the instructions (at least :data:`MIN_ROWS`), then each object's others
    as one row named :data:`REST` (so every group's sum stays exact)."""
    ranked = sorted(costs.items(), key=lambda kv: (-kv[1][0], kv[0]))
    total = sum(v[0] for _, v in ranked)
    rows: list[list[Any]] = []
    rest: dict[str, int] = {}
    running = 0
    for (obj, fn), (own, incl) in ranked:
        if own <= 0 and incl <= 0:
            continue
        if running < share * total or len(rows) < MIN_ROWS:
            rows.append([obj, fn, own, incl])
            running += own
        else:
            rest[obj] = rest.get(obj, 0) + own
    rows.extend([obj, REST, own, own] for obj, own in sorted(rest.items()))
    return rows


def kept_dump(dump_dir: Path, part: int) -> Path:
    """Where a counted child keeps a measured frame's main-thread dump of ``part``."""
    return dump_dir / f"profile.{part}"


def write_index(dump_dir: Path, kept: list[tuple[int, int, list[tuple[str, int, int]]]]) -> None:
    """Write which kept dumps make each measured frame (``first``, ``last`` part) and each zone
    (``name``, ``first``, ``last``) of the scene a counted child counted."""
    if kept:
        frames = [[first, last] for first, last, _ in kept]
        zones = [list(z) for _, _, zs in kept for z in zs]
        index = json.dumps({"frames": frames, "zones": zones})
        (dump_dir / PROFILE_INDEX).write_text(index, encoding="utf-8")


def read_scene_profile(dump_dir: Path, scene: str) -> list[dict[str, Any]]:
    """The PROFILE records of the one scene a counted child counted in ``dump_dir``: the scene's,
    then each zone's, summed over its measured frames; none when the child kept no index (it
    stopped before its scene's last frame)."""
    try:
        index = json.loads((dump_dir / PROFILE_INDEX).read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return []

    def dumps(first: int, last: int) -> list[Path]:
        return [kept_dump(dump_dir, p) for p in range(first, last + 1)]

    frames = index["frames"]
    scene_paths = [p for first, last in frames for p in dumps(first, last)]
    records = [profile_record(scene, None, len(frames), bounded_rows(read_parts(scene_paths)))]
    zones: dict[str, list[Path]] = {}
    for name, first, last in index["zones"]:
        zones.setdefault(name, []).extend(dumps(first, last))
    for name, paths in zones.items():
        rows = bounded_rows(read_parts(paths))
        records.append(profile_record(scene, name, len(frames), rows))
    return records


__all__ = [
    "Costs",
    "PROFILE_ENV",
    "PROFILE_INDEX",
    "bounded_rows",
    "kept_dump",
    "profiles_on",
    "write_index",
    "read_dump",
    "read_parts",
    "read_scene_profile",
]
