"""callgrind dumps read into per-function instruction counts (``Ir`` only), and a scene's profile
built from the dumps its counted child kept. Format and design: docs/profile.md."""

from __future__ import annotations

import json
import os
from collections.abc import Iterable
from pathlib import Path

from katra_trace.errors import TraceFormatError
from katra_trace.profile.groups import JIT_OBJECT
from katra_trace.profile.model import REST, ProfileRecord

Costs = dict[tuple[str, str], list[int]]

JIT_FUNCTIONS = "(compiled code)"

#: ``off``: counted runs keep no profiles (the bench's baseline).
PROFILE_ENV = "KATRA3D_PROFILE"


def profiles_on() -> bool:
    return os.environ.get(PROFILE_ENV, "") != "off"


KEPT_PREFIX = "seg."

PROFILE_INDEX = "profile.json"


def _name(value: str, table: dict[str, str]) -> str:
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
                    # fn'2, fn'3: recursive frames; the outermost holds the inclusive cost
                    base, _, depth = name.rpartition("'")
                    nested = bool(base) and depth.isdigit()
                    # compiled shaders' addresses move with any change: one row
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


#: Rows kept past 99 %, so a function crossing the cut seldom reads as a change.
MIN_ROWS = 100


def bounded_rows(costs: Costs, share: float = 0.99) -> tuple[tuple[str, str, int, int], ...]:
    """Rows largest self first, covering ``share``; each object's others as one :data:`REST` row
    (so every group's sum stays exact)."""
    ranked = sorted(costs.items(), key=lambda kv: (-kv[1][0], kv[0]))
    total = sum(v[0] for _, v in ranked)
    rows: list[tuple[str, str, int, int]] = []
    rest: dict[str, int] = {}
    running = 0
    for (obj, fn), (own, incl) in ranked:
        if own <= 0 and incl <= 0:
            continue
        if running < share * total or len(rows) < MIN_ROWS:
            rows.append((obj, fn, own, incl))
            running += own
        else:
            rest[obj] = rest.get(obj, 0) + own
    rows.extend((obj, REST, own, own) for obj, own in sorted(rest.items()))
    return tuple(rows)


#: The kept dumps' folder inside the dump directory, apart from the dumps the child scans between
#: frames (what it lists there moves its allocator, and so the next frames' counts).
KEPT_DIR = "kept"


def kept_dump(dump_dir: Path, part: int, zones: Iterable[int]) -> Path:
    """A kept dump's path, named with its zone ids (``seg.12.3_5``) so it reads without an index."""
    return dump_dir / KEPT_DIR / f"{KEPT_PREFIX}{part}.{'_'.join(str(z) for z in zones)}"


def write_index(dump_dir: Path, frames: int, names: dict[int, str]) -> None:
    index = json.dumps({"frames": frames, "zones": {str(i): n for i, n in names.items()}})
    (dump_dir / PROFILE_INDEX).write_text(index, encoding="utf-8")


class Folder:
    """A counted child's kept dumps, folded per set of zones and deleted once the child has ended
    (never while it runs: the child's counts must not depend on the parent's timing)."""

    def __init__(self, dump_dir: Path) -> None:
        self.dump_dir = dump_dir
        self.sets: dict[frozenset[int], Costs] = {}

    def fold(self) -> None:
        """Read and delete every kept dump (a renamed dump is complete)."""
        try:
            entries = [
                e for e in os.scandir(self.dump_dir / KEPT_DIR) if e.name.startswith(KEPT_PREFIX)
            ]
        except FileNotFoundError:
            return
        for entry in entries:
            ids = entry.name.split(".")[2]
            key = frozenset(int(i) for i in ids.split("_") if i)
            read_dump(Path(entry.path), self.sets.setdefault(key, {}))
            os.unlink(entry.path)

    def records(self, scene: str) -> list[ProfileRecord]:
        """PROFILE records: the scene's, then each zone's; none without an index (the child
        stopped early)."""
        self.fold()
        try:
            index = json.loads((self.dump_dir / PROFILE_INDEX).read_text(encoding="utf-8"))
        except (OSError, ValueError):
            return []
        frames = int(index["frames"])
        if frames < 1:
            return []
        records = [ProfileRecord(scene, None, frames, bounded_rows(self._sum(None)))]
        for zid, name in index["zones"].items():
            costs = self._sum(int(zid))
            if costs:
                records.append(ProfileRecord(scene, name, frames, bounded_rows(costs)))
        return records

    def _sum(self, zone: int | None) -> Costs:
        total: Costs = {}
        for key, costs in self.sets.items():
            if zone is None or zone in key:
                for fn, (own, incl) in costs.items():
                    row = total.setdefault(fn, [0, 0])
                    row[0] += own
                    row[1] += incl
        return total


__all__ = [
    "Costs",
    "Folder",
    "KEPT_DIR",
    "KEPT_PREFIX",
    "PROFILE_ENV",
    "PROFILE_INDEX",
    "bounded_rows",
    "kept_dump",
    "profiles_on",
    "read_dump",
    "write_index",
]
