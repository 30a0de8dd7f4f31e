"""``katra3d merge``: one trace from the shards of a ``katra3d run --shard I/N`` (docs/ci.md),
one shard in memory at a time; ``shards`` in the header keeps each shard's host for comparisons."""

from __future__ import annotations

import copy
import dataclasses
import os
import re
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path

import numpy as np

from katra_trace.errors import ConfigError
from katra_trace.io import format as fmt
from katra_trace.io.claim import check_output, open_output
from katra_trace.io.concat import Concatenation
from katra_trace.io.header import ShardInfo, TraceHeader, readable_header
from katra_trace.io.reader import Trace
from katra_trace.io.tracesets import open_quietly
from katra_trace.jsontext import JsonObject, JsonValue
from katra_trace.schema import SCHEMA_VERSION, schema_hash
from katra_trace.text import shown

#: Capture options that may differ between the shards of one run.
SHARD_OWN_OPTIONS = frozenset(
    {
        "shard",
        "output",
        "force",
        "notes",
        "screenshot_dir",
        "expect_images",
        "update_images",
        "jobs",
        "codec",
        "timing_reason",
    }
)
SHARD_OWN_RESOLVED = frozenset({"scenes", "output", "backend", "device"})
SHARD_OWN_MEASURE = frozenset({"command", "output", "valgrind"})
# per window system: equal where two shards share one
SHARD_OWN_REPLAY = frozenset({"traces", "replayers", "options"})


@dataclasses.dataclass(frozen=True)
class Shard:
    path: Path
    index: int
    count: int
    header: TraceHeader
    scenes: tuple[str, ...]
    clock_syncs: bool = False


@dataclasses.dataclass(frozen=True)
class MergeResult:
    path: Path
    scenes: tuple[str, ...]
    shards: tuple[ShardInfo, ...]
    events: int
    images: int

    def as_dict(self) -> JsonObject:
        return {
            "path": str(self.path),
            "scenes": list(self.scenes),
            "events": self.events,
            "images": self.images,
            "shards": [s.as_dict() for s in self.shards],
        }


MAX_SHARDS = 1000
_SHARD = re.compile(r" *([0-9]{1,4}) */ *([0-9]{1,4}) *")


def parse_shard(text: str, what: str = "--shard") -> tuple[int, int]:
    """``"2/4"`` -> (2, 4); ConfigError naming ``what`` otherwise."""
    m = _SHARD.fullmatch(text)
    if not m:
        raise ConfigError(f"bad {what} {shown(text[:40])}: expected I/N, e.g. 1/2 (shard I of N)")
    index, count = int(m.group(1)), int(m.group(2))
    if not 1 <= count <= MAX_SHARDS:
        raise ConfigError(f"bad {what} {text.strip()}: N must be in 1..{MAX_SHARDS}")
    if not 1 <= index <= count:
        raise ConfigError(f"bad {what} {text.strip()}: I must be in 1..{count}")
    return index, count


def _shard_of(trace: Trace) -> tuple[int, int]:
    text = trace.header.capture_options.shard
    if isinstance(text, str):
        return parse_shard(text, f"shard in {shown(trace.path)}:")
    why = "a merged trace" if trace.header.shards else "not a shard (run it with --shard I/N)"
    raise ConfigError(
        f"{shown(trace.path)} is {why}: merge takes the shards of one 'katra3d run --shard I/N'"
    )


def _scene_labels(trace: Trace) -> tuple[str, ...]:
    planned = trace.header.capture_options.resolved.scenes or ()
    labels = [e.get("label") for e in planned]
    if labels and all(isinstance(x, str) for x in labels):
        return tuple(str(x) for x in labels)
    ids = np.unique(trace.events["scene"]) if len(trace.events) else ()
    return tuple(trace.name(int(i)) for i in ids if int(i) != 0)


def comparable_options(header: TraceHeader) -> JsonObject:
    """The capture options every shard of one run must share."""
    options = header.capture_options.as_dict()
    out: JsonObject = {
        k: v
        for k, v in options.items()
        if k not in SHARD_OWN_OPTIONS and k not in ("resolved", "measure", "replay")
    }
    for part, own in (
        ("resolved", SHARD_OWN_RESOLVED),
        ("measure", SHARD_OWN_MEASURE),
        ("replay", SHARD_OWN_REPLAY),
    ):
        value = options.get(part)
        if isinstance(value, Mapping):
            out[part] = {k: v for k, v in value.items() if k not in own}
    return out


def _differences(
    a: Mapping[str, JsonValue], b: Mapping[str, JsonValue], prefix: str = ""
) -> list[str]:
    out = []
    for key in dict.fromkeys([*a, *b]):
        x, y = a.get(key), b.get(key)
        if isinstance(x, Mapping) and isinstance(y, Mapping):
            out += _differences(x, y, f"{prefix}{key}.")
        elif x != y:
            out.append(f"{prefix}{key}")
    return out


def check_shards(paths: Sequence[str | os.PathLike[str]]) -> list[Shard]:
    """The shards in order, checked to be the whole of one run (no events are read)."""
    if not paths:
        raise ConfigError(
            "merge needs the shard traces of one run: katra3d merge SHARD... -o RUN.katra"
        )
    shards: list[Shard] = []
    seen_files: dict[tuple[int, int], str] = {}
    for raw in paths:
        trace = open_quietly(raw, events=False)
        if trace.truncated:
            raise ConfigError(
                f"{shown(raw)} is damaged ({trace.stop_reason}): a damaged shard is not merged; "
                "run that shard again"
            )
        if trace.status != "complete":
            raise ConfigError(
                f"{shown(raw)} ended {trace.status}, not complete: a shard is merged only whole; "
                "run "
                "that shard again"
            )
        st = os.stat(raw)
        if (st.st_dev, st.st_ino) in seen_files:
            raise ConfigError(
                f"{shown(raw)} is given twice (also as {shown(seen_files[st.st_dev, st.st_ino])})"
            )
        seen_files[st.st_dev, st.st_ino] = str(raw)
        index, count = _shard_of(trace)
        odd = _odd_shape(trace.header)
        if odd:
            raise ConfigError(f"the header of {shown(raw)} is not one katra3d writes: {odd}")
        shards.append(
            Shard(
                Path(raw), index, count, trace.header, _scene_labels(trace), bool(trace.clock_syncs)
            )
        )
    first = shards[0]
    suite_of = {
        s.path: (
            s.header.capture_options.extra.get("suite"),
            s.header.capture_options.extra.get("scenes"),
        )
        for s in shards
    }
    for s in shards[1:]:
        if s.header.tool_version != first.header.tool_version:
            raise ConfigError(
                f"shards of different katra3d versions: {shown(first.path)} was captured by "
                f"{first.header.tool_version}, {shown(s.path)} by {s.header.tool_version}"
            )
        if suite_of[s.path] != suite_of[first.path]:
            raise ConfigError(
                f"shards of different runs: {shown(first.path)} ran {_what(suite_of[first.path])}, "
                f"{shown(s.path)} {_what(suite_of[s.path])}"
            )
        if s.count != first.count:
            raise ConfigError(
                f"shards of different splits: {shown(first.path)} is shard "
                f"{first.index}/{first.count}, "
                f"{shown(s.path)} {s.index}/{s.count}"
            )
        differ = _differences(comparable_options(first.header), comparable_options(s.header))
        differ += [
            f"replay.{part}.{api}" for part, api in _replay_differences(first.header, s.header)
        ]
        if differ:
            raise ConfigError(
                f"shards with different capture options: {shown(first.path)} and {shown(s.path)} "
                f"differ in {', '.join(differ[:6])}{' ...' if len(differ) > 6 else ''}"
            )
    by_index: dict[int, Shard] = {}
    owner: dict[str, Shard] = {}
    for s in shards:
        if s.index in by_index:
            raise ConfigError(
                f"overlapping shards: {shown(by_index[s.index].path)} and {shown(s.path)} are both "
                f"shard {s.index}/{s.count}"
            )
        by_index[s.index] = s
        for scene in s.scenes:
            if scene in owner:
                raise ConfigError(
                    f"overlapping shards: scene {shown(scene)} is in {shown(owner[scene].path)} "
                    f"and in {shown(s.path)}"
                )
            owner[scene] = s
    lacking = first.count - len(by_index)
    if lacking:
        missing = (f"{i}/{first.count}" for i in range(1, first.count + 1) if i not in by_index)
        few = [next(missing) for _ in range(min(3, lacking))]
        more = f" and {lacking - len(few)} more" if lacking > len(few) else ""
        raise ConfigError(
            f"shard{'s' if lacking > 1 else ''} {', '.join(few)}{more} of this run "
            f"{'are' if lacking > 1 else 'is'} missing: merge needs all {first.count}"
        )
    return [by_index[i] for i in sorted(by_index)]


def _odd_shape(header: TraceHeader) -> str | None:
    options = header.capture_options.extra
    if not isinstance(options.get("scenes"), list | None):
        return "capture_options.scenes is not a list"
    replay = options.get("replay")
    if not isinstance(replay, Mapping | None):
        return "capture_options.replay is not an object"
    for part in SHARD_OWN_REPLAY:
        if not isinstance((replay or {}).get(part), Mapping | None):
            return f"capture_options.replay.{part} is not an object"
    return None


def _check_labels(trace: Trace, shard: Shard) -> None:
    ids = np.unique(trace.events["scene"])
    stray = next(
        (trace.name(int(i)) for i in ids if i and trace.name(int(i)) not in shard.scenes), None
    )
    if stray is not None:
        raise ConfigError(
            f"{shown(shard.path)} holds scene {shown(stray)}, which its header does not name "
            f"(it names {', '.join(map(shown, shard.scenes[:6])) or 'none'}): not a shard as "
            "'katra3d run --shard' writes it"
        )


def _replay(header: TraceHeader) -> Mapping[str, JsonValue]:
    replay = header.capture_options.extra.get("replay")
    return replay if isinstance(replay, Mapping) else {}


def _replay_differences(a: TraceHeader, b: TraceHeader) -> list[tuple[str, str]]:
    ra, rb = _replay(a), _replay(b)
    out = []
    for part in ("replayers", "options"):
        x, y = ra.get(part), rb.get(part)
        if isinstance(x, Mapping) and isinstance(y, Mapping):
            out += [(part, api) for api in x if api in y and x[api] != y[api]]
    return out


def _merged_replay(shards: Sequence[Shard]) -> JsonObject:
    merged: JsonObject = {}
    for s in shards:
        for part, value in _replay(s.header).items():
            if isinstance(value, Mapping):
                earlier = merged.get(part)
                merged[part] = {**(earlier if isinstance(earlier, Mapping) else {}), **value}
            else:
                merged.setdefault(part, value)
    return merged


def _workload(shards: Sequence[Shard]) -> str:
    names = list(dict.fromkeys(s.header.workload or "" for s in shards))
    if len(names) == 1:
        return names[0]
    order = _run_order(shards)
    return "+".join(order) if order else "+".join(n for n in names if n)


def _run_order(shards: Sequence[Shard]) -> list[str] | None:
    """All scene labels in run order (by ``position``, else by spec); None if a shard lacks it."""
    given = shards[0].header.capture_options.extra.get("scenes")
    specs = [str(x) for x in given] if isinstance(given, list) else []
    entries = [e for s in shards for e in (s.header.capture_options.resolved.scenes or ())]
    labels = [str(e.get("label")) for e in entries if isinstance(e.get("label"), str)]
    if len(labels) != len(entries) or not labels:
        return None
    positions = [p for e in entries if type(p := e.get("position")) is int]
    if len(set(positions)) == len(entries):
        return [labels[k] for k in sorted(range(len(labels)), key=positions.__getitem__)]

    def place(k: int) -> tuple[int, int, str]:
        spec, label = str(entries[k].get("spec")), labels[k]
        at = next(
            (
                i
                for i, given in enumerate(specs)
                if spec in (given, given.strip()) or spec.startswith(given.strip() + ":")
            ),
            len(specs),
        )
        number = re.fullmatch(r".*#([0-9]{1,9})", label)
        return at, int(number.group(1)) if number else 1, label

    places = {k: place(k) for k in range(len(labels))}
    if any(at == len(specs) for at, _, _ in places.values()):
        return None
    return [labels[k] for k in sorted(places, key=places.__getitem__)]


def _pieces(shards: Sequence[Shard]) -> list[tuple[int, set[str] | None]]:
    order = _run_order(shards)
    owner = {label: k for k, s in enumerate(shards) for label in s.scenes}
    if order is None or sorted(order) != sorted(owner):
        return [(k, None) for k in range(len(shards))]
    pieces: list[tuple[int, set[str] | None]] = []
    for label in order:
        last = pieces[-1][1] if pieces and pieces[-1][0] == owner[label] else None
        if last is None:
            pieces.append((owner[label], {label}))
        else:
            last.add(label)
    return pieces


def _in_order(
    rows: Sequence[JsonValue], order: Sequence[str], key: str = "scene"
) -> list[JsonValue]:
    place = {label: i for i, label in enumerate(order)}
    return sorted(
        rows,
        key=lambda r: (
            place.get(str(r.get(key)), len(place)) if isinstance(r, Mapping) else len(place)
        ),
    )


def _part(trace: Trace, labels: set[str] | None, first: bool) -> Trace:
    """``trace`` limited to ``labels`` (None: all; the first part also takes what has no scene)."""
    if labels is None:
        return trace
    own = set(_scene_labels(trace))
    ids = trace.events["scene"].astype(np.int64)
    n = len(trace.strings)

    def of(names: set[str]) -> np.ndarray:
        table = np.array([x in names for x in trace.strings] + [False], dtype=bool)
        return table[np.where((ids >= 0) & (ids < n), ids, n)]

    def kept(scene: object) -> bool:
        return scene in labels or (first and scene not in own)

    part = copy.copy(trace)
    part.events = trace.events[of(labels) | (first & ~of(own))]
    part.annotations = [a for a in trace.annotations if kept(a.get("scene"))]
    part.kept_frames = {k: f for k, f in trace.kept_frames.items() if kept(f.scene)}
    if not first:
        part.clock_syncs = []
        part.summary = trace.summary.replaced(dropped_events=None, dropped_batches=None)
    return part


def _what(suite_and_scenes: tuple[JsonValue, JsonValue]) -> str:
    suite, scenes = suite_and_scenes
    named = f"scenes {', '.join(map(str, scenes))}" if isinstance(scenes, list) and scenes else ""
    return " + ".join(p for p in (f"suite {suite}" if suite else "", named) if p) or "no suite"


def _shard_infos(shards: Sequence[Shard]) -> tuple[list[ShardInfo], int]:
    """Each shard's record, and the earliest start (wall ns)."""
    starts = [s.header.start_wall_ns for s in shards]
    origin = min((t for t in starts if t is not None), default=0)
    infos = [
        ShardInfo(
            shard=f"{s.index}/{s.count}",
            file=str(s.path),
            scenes=s.scenes,
            tool_version=s.header.tool_version,
            start_wall_ns=s.header.start_wall_ns,
            offset_ns=(s.header.start_wall_ns or origin) - origin,
            pid=s.header.pid,
            host_info=s.header.host_info,
        )
        for s in shards
    ]
    return infos, origin


def merged_header(
    shards: Sequence[Shard], infos: Sequence[ShardInfo], origin: int, output: Path
) -> JsonObject:
    """The merged HEADER: the first shard's options and host, plus every shard's (``shards``)."""
    first = shards[0].header
    options = first.capture_options.as_dict()
    options.pop("shard", None)
    options["output"] = str(output)
    resolved = first.capture_options.resolved.as_dict()
    resolved["output"] = str(output)
    resolved["scenes"] = _in_order(
        [e for s in shards for e in (s.header.capture_options.resolved.scenes or ())],
        _run_order(shards) or [],
        key="label",
    )
    options["resolved"] = resolved
    if any(_replay(s.header) for s in shards):
        options["replay"] = _merged_replay(shards)
    measure = options.get("measure")
    if isinstance(measure, Mapping) and "output" in measure:
        options["measure"] = {**measure, "output": str(output)}
    earliest = next(s.header for s, i in zip(shards, infos, strict=True) if i.offset_ns == 0)
    notes = list(dict.fromkeys(s.header.notes for s in shards if s.header.notes))
    return readable_header(
        {
            "format_version": f"{fmt.FORMAT_MAJOR}.{fmt.FORMAT_MINOR}",
            "schema_version": SCHEMA_VERSION,
            "schema_hash": schema_hash(),
            "tool_version": first.tool_version,
            "capture_options": options,
            "host_info": first.host_info.as_dict(),
            "start_wall_ns": origin,
            "start_host_ns": earliest.start_host_ns if earliest.start_host_ns is not None else 0,
            "pid": os.getpid(),
            "workload": _workload(shards),
            "notes": "; ".join(n for n in notes if n),
            "shards": [i.as_dict() for i in infos],
        },
        output,
    )


def merge_shards(
    paths: Sequence[str | os.PathLike[str]],
    output: str | os.PathLike[str],
    *,
    force: bool = False,
    progress: Callable[[str], None] | None = None,
) -> MergeResult:
    """Merge the shards of one run into ``output``; raises ConfigError, OutputExistsError or
    TraceIOError (nothing left at ``output``)."""
    out_path = check_output(output, force=force, inputs=paths, option="-o", example="run.katra")
    shards = check_shards(paths)
    infos, origin = _shard_infos(shards)
    header = merged_header(shards, infos, origin, out_path)
    # else each shard's clock pairs name their shard
    one_gpu_clock = sum(s.clock_syncs for s in shards) == 1
    rows: list[JsonValue] = []
    order = _run_order(shards) or [sc for s in shards for sc in s.scenes]
    seen: set[int] = set()
    trace, at = None, -1
    with open_output(output, force=force, inputs=paths, option="-o", example="run.katra") as f:
        out = Concatenation(f, header)
        for k, labels in _pieces(shards):
            shard, info, first = shards[k], infos[k], k not in seen
            seen.add(k)
            if first and progress is not None:
                progress(
                    f"shard {info.shard}: {shown(shard.path)} ({len(shard.scenes)} "
                    f"scene{'s' if len(shard.scenes) != 1 else ''})"
                )
            if at != k:
                trace = None  # one shard in memory
                trace, at = open_quietly(shard.path), k
                _check_labels(trace, shard)
            assert trace is not None
            out.add(
                _part(trace, labels, first),
                int(info.offset_ns or 0),
                clock_note=None if one_gpu_clock else {"shard": info.shard},
            )
            user = trace.summary.user if first else None
            scenes = user.get("scenes") if user is not None else None
            rows += list(scenes) if isinstance(scenes, list) else []
        trace = None
        out.finish("complete", {"scenes": _in_order(rows, order)})
    return MergeResult(out_path, tuple(order), tuple(infos), out.events, out.images)


__all__ = [
    "SHARD_OWN_MEASURE",
    "SHARD_OWN_OPTIONS",
    "SHARD_OWN_REPLAY",
    "SHARD_OWN_RESOLVED",
    "MergeResult",
    "Shard",
    "check_shards",
    "comparable_options",
    "merge_shards",
    "merged_header",
]
