"""``history add``'s first half: find the traces, read them, and turn them into rows (no database yet).

Reading happens before the store is opened, so a writer holds DuckDB's lock only while it inserts.
"""

from __future__ import annotations

import time
import warnings
from collections.abc import Callable, Sequence
from pathlib import Path

from katra_trace.errors import ConfigError
from katra_trace.history.rows import RunFacts, file_sha256, host_fingerprint, trace_rows
from katra_trace.history.store import PreparedRun
from katra_trace.io.reader import TraceRecoveryWarning, open_trace

#: File name pattern of the traces a directory argument stands for (searched recursively).
TRACE_GLOB = "*.katra"


def find_traces(args: Sequence[str]) -> list[Path]:
    """Each argument: a trace file, or a directory whose ``*.katra`` files (recursively) are taken, in
    name order. A path named twice counts once. Raises ConfigError for a missing path or an empty directory."""
    out: list[Path] = []
    for arg in args:
        p = Path(arg)
        if p.is_dir():
            found = sorted(f for f in p.rglob(TRACE_GLOB) if f.is_file())
            if not found:
                raise ConfigError(f"no {TRACE_GLOB} traces under {arg!r}")
            out.extend(found)
        elif p.exists():
            out.append(p)
        else:
            raise ConfigError(f"no such trace or directory: {arg!r}")
    seen: set[Path] = set()
    unique = []
    for p in out:
        key = p.resolve()
        if key not in seen:
            seen.add(key)
            unique.append(p)
    return unique


def prepare_runs(paths: Sequence[Path], label: str, commit: str = "", label_time_ns: int | None = None,
                 progress: Callable[[int, int, Path], None] | None = None,
                 warn: Callable[[str], None] | None = None) -> tuple[list[PreparedRun], list[tuple[Path, Path]]]:
    """Read every trace into rows. Returns (runs, [(trace, earlier path of the same bytes)]).

    All or nothing: an unreadable trace raises its KatraError (exit 2) before anything is stored.
    A damaged trace that reads in part is taken with a warning (``warn``); one with no measured frame
    is refused.
    """
    if not label.strip():
        raise ConfigError("--label must not be empty")
    if len(label) > 200 or any(ord(c) < 32 for c in label):
        raise ConfigError(f"--label {label!r} is too long or holds control characters")
    added_ns = time.time_ns()
    runs: list[PreparedRun] = []
    same: list[tuple[Path, Path]] = []
    by_sha: dict[str, Path] = {}
    for i, path in enumerate(paths):
        if progress is not None:
            progress(i, len(paths), path)
        try:
            sha = file_sha256(path)
        except OSError as exc:
            raise ConfigError(f"cannot read {str(path)!r}: {exc.strerror or exc}") from None
        if sha in by_sha:
            same.append((path, by_sha[sha]))
            continue
        by_sha[sha] = path
        with warnings.catch_warnings():
            warnings.simplefilter("ignore", TraceRecoveryWarning)
            trace = open_trace(path)
        if trace.truncated and warn is not None:
            warn(f"{path} is damaged ({trace.stop_reason}); its runs are stored from the "
                 f"{len(trace.events)} events before offset {trace.stopped_at}")
        rows = trace_rows(trace, sha, RunFacts(label, commit, label_time_ns, added_ns))
        if not rows:
            raise ConfigError(f"{str(path)!r} has no measured frames: nothing to store")
        runs.append(PreparedRun(path, sha, label, host_fingerprint(trace.header).host_id, rows))
    if progress is not None:
        progress(len(paths), len(paths), paths[-1] if paths else Path())
    return runs, same


__all__ = ["TRACE_GLOB", "find_traces", "prepare_runs"]
