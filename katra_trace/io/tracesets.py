"""Sets of traces on disk, opened under the one damaged-trace policy, and ``ab.json`` (which
BASE and NEW traces ``katra3d ab`` took together)."""

from __future__ import annotations

import contextlib
import dataclasses
import json
import os
import re
import stat
import warnings
from collections.abc import Iterator, Mapping, Sequence
from pathlib import Path
from typing import TYPE_CHECKING

from katra_trace.errors import ConfigError
from katra_trace.io.claim import PART_SUFFIX, describe, held_by_writer, open_output
from katra_trace.io.inputs import read_regular
from katra_trace.io.reader import Trace, TraceRecoveryWarning, open_if_trace, open_trace
from katra_trace.text import shown

if TYPE_CHECKING:
    from katra_trace.analysis.verdict import Comparison

AB_MANIFEST = "ab.json"
AB_MANIFEST_VERSION = 1


JsonObject = Mapping[str, object]


@dataclasses.dataclass(frozen=True)
class AbRound:
    """One complete ``katra3d ab`` round (paths relative to its directory)."""

    number: int
    base: str
    new: str
    order: tuple[str, ...] = ("base", "new")
    commands: Mapping[str, str] = dataclasses.field(default_factory=dict)
    seconds: Mapping[str, float] = dataclasses.field(default_factory=dict)

    def to_json(self) -> dict[str, object]:
        traces = {"base": self.base, "new": self.new}
        return {
            "round": self.number,
            "order": list(self.order),
            "commands": dict(self.commands),
            "seconds": dict(self.seconds),
            **{side: traces[side] for side in self.order},
        }


_MANIFEST_TEXT = ("base_dir", "new_dir", "base_command", "new_command", "started")
_MANIFEST_RECORDS = ("sequential", "stop", "interrupted", "decision")


@dataclasses.dataclass(frozen=True)
class AbManifest:
    """``ab.json``: the sides, complete rounds, and optionally the stopping rule, stop,
    interrupted round and ``decision``."""

    base_dir: str = "base"
    new_dir: str = "new"
    base_command: str = ""
    new_command: str = ""
    started: str = ""
    rounds: tuple[AbRound, ...] = ()
    sequential: JsonObject | None = None
    stop: JsonObject | None = None
    interrupted: JsonObject | None = None
    decision: JsonObject | None = None

    def to_json(self) -> dict[str, object]:
        return {
            "katra3d_ab": AB_MANIFEST_VERSION,
            **{k: getattr(self, k) for k in _MANIFEST_TEXT},
            "rounds": [r.to_json() for r in self.rounds],
            **{k: dict(v) for k in _MANIFEST_RECORDS if (v := getattr(self, k)) is not None},
        }

    @classmethod
    def from_json(cls, data: object, path: Path) -> AbManifest:
        """The one reader of :meth:`to_json`'s object; ConfigError otherwise."""
        if (
            not isinstance(data, dict)
            or data.get("katra3d_ab") != AB_MANIFEST_VERSION
            or not isinstance(data.get("rounds"), list)
        ):
            raise ConfigError(
                f"{str(path)!r} is not a katra3d ab manifest (version {AB_MANIFEST_VERSION})"
            )
        if not all(
            isinstance(r, dict) and isinstance(r.get("base"), str) and isinstance(r.get("new"), str)
            for r in data["rounds"]
        ):
            raise ConfigError(f"{str(path)!r}: a round lacks its base/new trace paths")

        def record(key: str) -> JsonObject | None:
            value = data.get(key)
            return value if isinstance(value, dict) else None

        return cls(
            str(data.get("base_dir", "base")),
            str(data.get("new_dir", "new")),
            str(data.get("base_command", "")),
            str(data.get("new_command", "")),
            str(data.get("started", "")),
            tuple(
                AbRound(
                    int(r.get("round", i)),
                    r["base"],
                    r["new"],
                    tuple(r.get("order", ("base", "new"))),
                    dict(r.get("commands", {})),
                    dict(r.get("seconds", {})),
                )
                for i, r in enumerate(data["rounds"], 1)
            ),
            *(record(k) for k in _MANIFEST_RECORDS),
        )

    def pairs(self, root: Path) -> list[tuple[Path, Path]]:
        """(BASE, NEW) of each round whose two traces exist."""
        out = []
        for r in self.rounds:
            b, n = (root / r.base).resolve(), (root / r.new).resolve()
            if b.is_file() and n.is_file():
                out.append((b, n))
        return out


def write_ab_manifest(root: Path, manifest: AbManifest) -> None:
    """Write ``root/ab.json`` atomically."""
    with open_output(root / AB_MANIFEST, force=True, option="-o", example=AB_MANIFEST) as f:
        f.write((json.dumps(manifest.to_json(), indent=2) + "\n").encode("utf-8"))


def is_ab_dir(path: str | os.PathLike[str]) -> bool:
    """Whether ``path`` holds an ``ab.json`` (not read)."""
    return (Path(path) / AB_MANIFEST).is_file()


MAX_MANIFEST_BYTES = 64 << 20


def read_ab_manifest(root: Path) -> AbManifest | None:
    """``root/ab.json``, or None; ConfigError if it is not a readable manifest."""
    path = root / AB_MANIFEST
    if not is_ab_dir(root):
        return None
    raw = read_regular(path, what="katra3d ab manifest", max_bytes=MAX_MANIFEST_BYTES)
    try:
        data = json.loads(raw)
    except ValueError as exc:
        raise ConfigError(f"cannot read the ab manifest {str(path)!r}: {exc}") from None
    return AbManifest.from_json(data, path)


def record_ab_decision(root: Path, comparison: Comparison) -> None:
    """Record in ``root/ab.json`` what ``comparison`` judged the rounds on."""
    manifest = read_ab_manifest(root)
    if manifest is None:
        return
    decision = {
        "metric": comparison.metric,
        "run_stat": comparison.run_stat,
        "metric_choice": comparison.metric_choice,
        "paired": comparison.paired,
        "alpha": comparison.alpha,
        "threshold_pct": comparison.threshold_pct,
    }
    write_ab_manifest(root, dataclasses.replace(manifest, decision=decision))


AB_TRACE = re.compile(r"run-\d+(\.failed)?\.katra(\.part)?")


def clear_ab_dir(root: Path) -> int:
    """Remove what ``katra3d ab`` wrote in ``root`` (``ab.json`` last, so it can be repeated);
    returns the traces removed. ConfigError, nothing removed, unless only ab's traces, none live."""
    if read_ab_manifest(root) is None:
        raise ConfigError(
            f"{shown(root)} holds no {AB_MANIFEST}: it is not a katra3d ab output directory, and "
            "--force never removes anything from it; choose another -o directory"
        )
    doomed: list[Path] = []
    for side in ("base", "new"):
        folder = root / side
        if not os.path.lexists(folder):
            continue
        if folder.is_symlink() or not folder.is_dir():
            raise ConfigError(
                f"{shown(folder)} is not a directory katra3d ab made; nothing was removed"
            )
        for path in sorted(folder.iterdir()):
            if not AB_TRACE.fullmatch(path.name) or path.is_symlink() or not path.is_file():
                raise ConfigError(
                    f"{shown(folder)} holds {shown(path.name)}, which katra3d ab did not write; "
                    "nothing was removed: move it away, or choose another -o directory"
                )
            if path.name.endswith(PART_SUFFIX) and _in_use(path):
                raise ConfigError(
                    f"a capture is still writing {shown(path)}; nothing was removed: wait for it "
                    "(or "
                    "stop it), or choose another -o directory"
                )
            doomed.append(path)
    for path in doomed:
        path.unlink(missing_ok=True)
    (root / AB_MANIFEST).unlink(missing_ok=True)
    return len(doomed)


def _in_use(part: Path) -> bool:
    with contextlib.suppress(OSError), open(part, "rb") as f:
        return held_by_writer(f.fileno())
    return False


def iter_traces(
    path: str | os.PathLike[str], verb: str = "using"
) -> Iterator[tuple[Trace, str | None]]:
    """(trace, :func:`damaged_note`) for ``path`` or each trace in a directory, opened as
    reached; ConfigError for an unreadable path or no trace."""
    p = Path(path)
    try:
        mode = os.stat(p).st_mode
    except FileNotFoundError:
        raise ConfigError(f"no such trace file or directory: {shown(path)}") from None
    except OSError as exc:
        raise ConfigError(f"cannot read {shown(path)}: {describe(exc)}") from None
    if not stat.S_ISDIR(mode):
        whole = open_quietly(p)
        yield whole, damaged_note(whole, verb)
        return
    try:
        children = sorted(p.iterdir())
    except OSError as exc:
        raise ConfigError(f"cannot list directory {shown(path)}: {describe(exc)}") from None
    found = False
    for child in children:
        with _no_recovery_warning():
            trace = open_if_trace(child)
        if trace is not None:
            found = True
            yield trace, damaged_note(trace, verb)
    if not found:
        raise ConfigError(f"no katra3d traces in directory {shown(path)}")


def open_trace_sets(
    paths: Sequence[str | os.PathLike[str]], verb: str = "using"
) -> tuple[list[Trace], list[str]]:
    opened = [pair for path in paths for pair in iter_traces(path, verb)]
    return [t for t, _ in opened], [note for _, note in opened if note is not None]


def open_quietly(path: str | os.PathLike[str], events: bool = True) -> Trace:
    """:func:`~katra_trace.io.reader.open_trace` without the recovery warning."""
    with _no_recovery_warning():
        return open_trace(path, events=events)


@contextlib.contextmanager
def _no_recovery_warning() -> Iterator[None]:
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", TraceRecoveryWarning)
        yield


def damaged_note(trace: Trace, verb: str = "using") -> str | None:
    """One line saying a trace is damaged and what of it is used (None: whole)."""
    if not trace.truncated:
        return None
    return (
        f"{shown(str(trace.path))} is damaged ({trace.stop_reason}); {verb} the "
        f"{len(trace.events)} events before offset {trace.stopped_at}"
    )


def open_traces(
    paths: Sequence[str | os.PathLike[str]], verb: str = "using"
) -> tuple[list[Trace], list[str]]:
    """The traces and a note per damaged one."""
    traces = [open_quietly(p) for p in paths]
    return traces, [note for t in traces if (note := damaged_note(t, verb)) is not None]


__all__ = [
    "AB_MANIFEST",
    "AB_MANIFEST_VERSION",
    "AB_TRACE",
    "AbManifest",
    "AbRound",
    "clear_ab_dir",
    "damaged_note",
    "is_ab_dir",
    "iter_traces",
    "open_quietly",
    "open_trace_sets",
    "open_traces",
    "read_ab_manifest",
    "record_ab_decision",
    "write_ab_manifest",
]
