"""One trace from the shards of a run: what ``katra3d merge`` does (``katra3d run --shard I/N``,
docs/ci.md).

:func:`check_shards` decides whether files are the shards of one run: each a whole, complete capture
of a ``--shard I/N`` run, all of one suite (and scenes), capture options and katra3d version, every
shard 1..N given once and no scene in two of them (a run of apitrace traces: each shard's traces are
its own). Else ConfigError, one line naming the files (exit 2).

:func:`merge_shards` then writes them as one trace through the output rule
(:func:`~katra_trace.io.claim .open_output`: never over a file without ``force``, then atomically;
never over one of its inputs). The shards are read through the reading service one at a time
(:func:`~katra_trace.io.tracesets.open_quietly`, each within its file's budget) and written by
:class:`~katra_trace.io.concat.Concatenation` (as a counted run's parts are): their events with the
string ids of the merged table and their times moved by the shard's start after the earliest one
(wall clock), their annotations, their clock pairs (as CLOCK_SYNC blocks only when one shard alone
has any: shards ran on GPUs of their own), their kept frames (byte for byte). The header records
every shard (``shards``, format 1.3: which shard, its file, its scenes, its start and its host), so
that each scene is compared against scenes of a comparable host
(:meth:`~katra_trace.io.header.TraceHeader.host_of`).
"""

from __future__ import annotations

import copy
import dataclasses
import os
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path
from typing import Any

import numpy as np

from katra_trace.errors import ConfigError
from katra_trace.io import format as fmt
from katra_trace.io.claim import check_output, open_output
from katra_trace.io.concat import Concatenation
from katra_trace.io.header import ShardInfo, TraceHeader, readable_header
from katra_trace.io.reader import Trace
from katra_trace.io.tracesets import open_quietly
from katra_trace.schema import SCHEMA_VERSION, schema_hash
from katra_trace.text import shown

#: Capture options that may differ between the shards of one run: which shard, where its outputs
#: went, bookkeeping (its note, --force, --jobs, the codec), and facts of the machine it ran on.
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
#: The same for ``capture_options.resolved`` and ``capture_options.measure``.
SHARD_OWN_RESOLVED = frozenset({"scenes", "output", "backend", "device"})
SHARD_OWN_MEASURE = frozenset({"command", "output", "valgrind"})
#: The same for ``capture_options.replay`` (a run of apitrace traces): each shard's traces are its
#: own, and its replayers and their options are those of its traces' window systems (equal where two
#: shards share one).
SHARD_OWN_REPLAY = frozenset({"traces", "replayers", "options"})


@dataclasses.dataclass(frozen=True)
class Shard:
    """One input, checked: its file, its shard ``index`` of ``count``, its header and its scene
    labels.
    """

    path: Path
    index: int
    count: int
    header: TraceHeader
    scenes: tuple[str, ...]
    clock_syncs: bool = False  #: it recorded GPU clock pairs (CLOCK_SYNC blocks)


@dataclasses.dataclass(frozen=True)
class MergeResult:
    """What :func:`merge_shards` wrote: the trace, its scenes in order, the shards, its events and
    kept frames.
    """

    path: Path
    scenes: tuple[str, ...]
    shards: tuple[ShardInfo, ...]
    events: int
    images: int

    def as_dict(self) -> dict[str, Any]:
        return {
            "path": str(self.path),
            "scenes": list(self.scenes),
            "events": self.events,
            "images": self.images,
            "shards": [s.as_dict() for s in self.shards],
        }


def _shard_of(trace: Trace) -> tuple[int, int]:
    """(I, N) of a shard's ``capture_options.shard``; ConfigError for a trace
    that is not a shard."""
    text = trace.header.capture_options.shard
    parts = text.split("/") if isinstance(text, str) else []
    if len(parts) == 2 and all(p.strip().isdigit() for p in parts):
        index, count = int(parts[0]), int(parts[1])
        if 1 <= index <= count:
            return index, count
    why = "a merged trace" if trace.header.shards else "not a shard (run it with --shard I/N)"
    raise ConfigError(
        f"{shown(trace.path)} is {why}: merge takes the shards of one 'katra3d run --shard I/N'"
    )


def _scene_labels(trace: Trace) -> tuple[str, ...]:
    """The labels of the scenes a shard planned (``resolved.scenes``), else
    those its events name."""
    planned = trace.header.capture_options.resolved.scenes or ()
    labels = [e.get("label") for e in planned]
    if labels and all(isinstance(x, str) for x in labels):
        return tuple(str(x) for x in labels)
    ids = np.unique(trace.events["scene"]) if len(trace.events) else ()
    return tuple(trace.name(int(i)) for i in ids if int(i) != 0)


def comparable_options(header: TraceHeader) -> dict[str, Any]:
    """The capture options that must be equal in every shard of one run (all but
    :data:`SHARD_OWN_OPTIONS`).
    """
    options = header.capture_options.as_dict()
    out = {
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


def _differences(a: Mapping[str, Any], b: Mapping[str, Any], prefix: str = "") -> list[str]:
    """The option names (dotted) whose values differ between ``a`` and ``b``."""
    out = []
    for key in dict.fromkeys([*a, *b]):
        x, y = a.get(key), b.get(key)
        if isinstance(x, Mapping) and isinstance(y, Mapping):
            out += _differences(x, y, f"{prefix}{key}.")
        elif x != y:
            out.append(f"{prefix}{key}")
    return out


def check_shards(paths: Sequence[str | os.PathLike[str]]) -> list[Shard]:
    """The shards ``paths`` name, in shard order, checked to be the whole of one run (module
    docstring).

    Reads headers, strings and kept frames' facts only (no events). ConfigError, one line,
    otherwise."""
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
    missing = [f"{i}/{first.count}" for i in range(1, first.count + 1) if i not in by_index]
    if missing:
        raise ConfigError(
            f"shard{'s' if len(missing) > 1 else ''} {', '.join(missing)} of this run "
            f"{'are' if len(missing) > 1 else 'is'} missing: merge needs all {first.count}"
        )
    return [by_index[i] for i in sorted(by_index)]


def _replay(header: TraceHeader) -> Mapping[str, Any]:
    replay = header.capture_options.extra.get("replay")
    return replay if isinstance(replay, Mapping) else {}


def _replay_differences(a: TraceHeader, b: TraceHeader) -> list[tuple[str, str]]:
    """(part, window system) of the replayers and replay options two shards
    have both but not alike."""
    ra, rb = _replay(a), _replay(b)
    out = []
    for part in ("replayers", "options"):
        x, y = ra.get(part) or {}, rb.get(part) or {}
        out += [(part, api) for api in x if api in y and x[api] != y[api]]
    return out


def _merged_replay(shards: Sequence[Shard]) -> dict[str, Any]:
    """The merged ``capture_options.replay``: every shard's traces, replayers and options, in shard
    order.
    """
    merged: dict[str, Any] = {}
    for s in shards:
        for part, value in _replay(s.header).items():
            if isinstance(value, Mapping):
                merged.setdefault(part, {}).update(value)
            else:
                merged.setdefault(part, value)
    return merged


def _workload(shards: Sequence[Shard]) -> str:
    """The run's workload: the shards' when they agree (a suite's name), else their scenes' labels
    joined in the run's order, as an unsharded run records it."""
    names = list(dict.fromkeys(s.header.workload or "" for s in shards))
    if len(names) == 1:
        return names[0]
    order = _run_order(shards)
    return "+".join(order) if order else "+".join(n for n in names if n)


def _run_order(shards: Sequence[Shard]) -> list[str] | None:
    """Every shard's scene labels in the run's order, as an unsharded run lists them: by each
    scene's ``position`` in the run, else (older shards) by its spec's place in
    ``capture_options.scenes``; None when a shard does not say."""
    specs = [str(x) for x in shards[0].header.capture_options.extra.get("scenes") or ()]
    entries = [e for s in shards for e in (s.header.capture_options.resolved.scenes or ())]
    labels = [str(e.get("label")) for e in entries if isinstance(e.get("label"), str)]
    if len(labels) != len(entries) or not labels:
        return None
    positions = [p for e in entries if type(p := e.get("position")) is int]
    if len(set(positions)) == len(entries):
        return [labels[k] for k in sorted(range(len(labels)), key=positions.__getitem__)]

    def place(k: int) -> tuple[int, int, str]:
        # the spec as given, or with its class (x.py:Class)
        spec, label = str(entries[k].get("spec")), labels[k]
        at = next(
            (
                i
                for i, given in enumerate(specs)
                if spec in (given, given.strip()) or spec.startswith(given.strip() + ":")
            ),
            len(specs),
        )
        number = label.rpartition("#")[2]
        return at, int(number) if "#" in label and number.isdigit() else 1, label

    places = {k: place(k) for k in range(len(labels))}
    if any(at == len(specs) for at, _, _ in places.values()):
        return None
    return [labels[k] for k in sorted(places, key=places.__getitem__)]


def _pieces(shards: Sequence[Shard]) -> list[tuple[int, set[str] | None]]:
    """What is written, in the run's order: (the shard's position, the labels of scenes it ran one
    after another in the run); a whole shard (None) each when the order is not known."""
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


def _in_order(rows: list[Any], order: Sequence[str], key: str = "scene") -> list[Any]:
    """Rows (objects naming a scene by ``key``) in the order of ``order``; others last."""
    place = {label: i for i, label in enumerate(order)}
    return sorted(
        rows,
        key=lambda r: (
            place.get(str(r.get(key)), len(place)) if isinstance(r, Mapping) else len(place)
        ),
    )


def _part(trace: Trace, labels: set[str] | None, first: bool) -> Trace:
    """``trace`` with only the events, scene notes and kept frames of the scenes ``labels`` (None:
    all); its first part also takes what belongs to none of its scenes (clock pairs, notes of the
    run, its drop counts)."""
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
        part.summary = {k: v for k, v in trace.summary.items() if not k.startswith("dropped_")}
    return part


def _what(suite_and_scenes: tuple[Any, Any]) -> str:
    suite, scenes = suite_and_scenes
    named = f"scenes {', '.join(map(str, scenes))}" if scenes else ""
    return " + ".join(p for p in (f"suite {suite}" if suite else "", named) if p) or "no suite"


def _shard_infos(shards: Sequence[Shard]) -> tuple[list[ShardInfo], int]:
    """Each shard's record for the merged header, and the earliest start (wall ns) their offsets
    count from.
    """
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
) -> dict[str, Any]:
    """The merged trace's HEADER: the first shard's capture options (no ``shard``; every shard's
    scenes in ``resolved.scenes`` and traces in ``replay``; the output), its host (each scene's own
    is its shard's, in ``shards``), the earliest start, the run's workload and ``shards``."""
    first = shards[0].header
    options = first.capture_options.as_dict()
    options.pop("shard", None)
    options["output"] = str(output)
    resolved = dict(options.get("resolved") or {})
    resolved["output"] = str(output)
    resolved["scenes"] = _in_order(
        [e for s in shards for e in (s.header.capture_options.resolved.scenes or ())],
        _run_order(shards) or [],
        key="label",
    )
    options["resolved"] = resolved
    if any(_replay(s.header) for s in shards):
        options["replay"] = _merged_replay(shards)
    if isinstance(options.get("measure"), Mapping) and "output" in options["measure"]:
        options["measure"] = {**options["measure"], "output": str(output)}
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
    """Merge the shards ``paths`` of one run into the trace ``output`` (the module docstring says
    how).

    ConfigError (exit 2) for inputs that are not the shards of one run, or an output the rule
    refuses (OutputExistsError without ``force``); TraceIOError when writing fails (nothing is left
    at ``output``)."""
    out_path = check_output(output, force=force, inputs=paths, option="-o", example="run.katra")
    shards = check_shards(paths)
    infos, origin = _shard_infos(shards)
    header = merged_header(shards, infos, origin, out_path)
    # else each shard's pairs name their shard
    one_gpu_clock = sum(s.clock_syncs for s in shards) == 1
    rows: list[Any] = []
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
                trace = None  # one shard in memory at a time
                trace, at = open_quietly(shard.path), k
            assert trace is not None
            out.add(
                _part(trace, labels, first),
                int(info.offset_ns or 0),
                clock_note=None if one_gpu_clock else {"shard": info.shard},
            )
            user = trace.summary.get("user") if first else None
            scenes = user.get("scenes") if isinstance(user, Mapping) else None
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
