"""``history add``'s first half: read traces into rows before the store opens, so a writer holds
DuckDB's lock only to insert."""

from __future__ import annotations

import os
import stat
import time
from collections.abc import Callable, Sequence
from pathlib import Path

from katra_trace.errors import ConfigError
from katra_trace.history.rows import RunFacts, file_sha256, host_fingerprint, trace_rows
from katra_trace.history.store import PreparedRun
from katra_trace.io.claim import describe
from katra_trace.io.tracesets import damaged_note, open_quietly
from katra_trace.text import check_text, shown

TRACE_GLOB = "*.katra"
MAX_LABEL_CHARS = 200


def find_traces(args: Sequence[str]) -> list[Path]:
    """Trace files and the ``*.katra`` under directories (name order), each once; ConfigError for a
    missing path, an empty directory, or one the system refuses."""
    out: list[Path] = []
    for arg in args:
        p = Path(arg)
        try:
            mode = os.stat(p).st_mode
            found = (
                sorted(f for f in p.rglob(TRACE_GLOB) if f.is_file()) if stat.S_ISDIR(mode) else [p]
            )
        except FileNotFoundError:
            raise ConfigError(f"no such trace or directory: {shown(arg)}") from None
        except OSError as exc:
            raise ConfigError(f"cannot read {shown(arg)}: {describe(exc)}") from None
        if not found:
            raise ConfigError(f"no {TRACE_GLOB} traces under {shown(arg)}")
        out.extend(found)
    seen: set[Path] = set()
    unique = []
    for p in out:
        key = p.resolve()
        if key not in seen:
            seen.add(key)
            unique.append(p)
    return unique


def prepare_runs(
    paths: Sequence[Path],
    label: str,
    commit: str = "",
    label_time_ns: int | None = None,
    progress: Callable[[int, int, Path], None] | None = None,
    warn: Callable[[str], None] | None = None,
) -> tuple[list[PreparedRun], list[tuple[Path, Path]]]:
    """Returns (runs, [(trace, earlier path of the same bytes)]); an unreadable trace raises before
    anything is stored, a partly readable one is taken with a warning."""
    if not label.strip():
        raise ConfigError("--label must not be empty")
    check_text(label, "--label", max_chars=MAX_LABEL_CHARS)
    check_text(commit, "--commit", max_chars=MAX_LABEL_CHARS)
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
            raise ConfigError(f"cannot read {shown(path)}: {describe(exc)}") from None
        if sha in by_sha:
            same.append((path, by_sha[sha]))
            continue
        by_sha[sha] = path
        trace = open_quietly(path)
        note = damaged_note(trace, "storing the runs of")
        if note is not None and warn is not None:
            warn(note)
        rows = trace_rows(trace, sha, RunFacts(label, commit, label_time_ns, added_ns))
        if not rows:
            raise ConfigError(f"{shown(path)} has no measured frames: nothing to store")
        runs.append(PreparedRun(path, sha, label, host_fingerprint(trace.header).host_id, rows))
    if progress is not None:
        progress(len(paths), len(paths), paths[-1] if paths else Path())
    return runs, same


__all__ = ["TRACE_GLOB", "find_traces", "prepare_runs"]
