"""One trace from a counted run's part traces (as ``katra3d merge`` writes them); a damaged part
gives what it holds."""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import BinaryIO

from katra_trace.errors import KatraError
from katra_trace.io.concat import Concatenation
from katra_trace.io.reader import Trace
from katra_trace.io.tracesets import open_quietly
from katra_trace.jsontext import JsonObject, JsonValue
from katra_trace.profile.model import ProfileRecord


@dataclasses.dataclass(frozen=True)
class RunStrings:
    """``output`` (resolved), ``requested`` (``-o`` as given) and ``notes``."""

    output: str
    requested: str | None
    notes: str


@dataclasses.dataclass
class Joined:
    """The parts read and the events written."""

    parts: list[Path]
    events: int


def _open_part(path: Path, events: bool = True) -> Trace | None:
    """The part at ``path`` as far as intact, or None."""
    try:
        return open_quietly(path, events=events)
    except KatraError:
        return None


def join(
    parts: Sequence[Path],
    dst: BinaryIO,
    *,
    status: str,
    codec: str | None = None,
    strings: RunStrings | None = None,
    profiles: Mapping[Path, Sequence[ProfileRecord]] | None = None,
) -> Joined:
    """Write ``parts`` (one at a time) to ``dst``, ``strings`` replacing the stand-ins."""
    readable = []
    for path in parts:
        head = _open_part(path, events=False)
        if head is not None:
            readable.append((path, head.header))
            del head
    if not readable:
        return Joined([], 0)
    earliest = min((header for _, header in readable), key=lambda h: h.start_host_ns or 0)
    base_ns = earliest.start_host_ns or 0
    first = readable[0][1]
    header = first.as_dict()
    header.update(start_host_ns=base_ns, start_wall_ns=earliest.start_wall_ns, pid=earliest.pid)
    options = first.capture_options.as_dict()
    resolved = first.capture_options.resolved.as_dict()
    if "scenes" in resolved:
        resolved["scenes"] = [
            scene for _, part in readable for scene in part.capture_options.resolved.scenes or ()
        ]
    if strings is not None:
        header["notes"] = options["notes"] = strings.notes
        options["output"] = strings.requested
        resolved["output"] = strings.output
        options["measure"] = {**first.capture_options.measure.as_dict(), "output": strings.output}
    if resolved:
        options["resolved"] = resolved
    if options:
        header["capture_options"] = options
    out = Concatenation(dst, header, codec=codec)
    user: JsonObject = {}
    joined = []
    for path, part in readable:
        trace = _open_part(path)
        if trace is None:
            continue
        shift = (part.start_host_ns or 0) - base_ns
        out.add(trace, shift, profiles=(profiles or {}).get(path, ()))
        part_user = trace.summary.user
        # a part that ended early has no summary of its own
        if not trace.summary_rebuilt and part_user is not None:
            _add_user(user, part_user)
        joined.append(path)
        del trace
    out.finish(status, user)
    return Joined(joined, out.events)


#: Counts of the producer's summary that add up over the parts.
_SUMS = frozenset({"reference_draws"})


def _add_user(user: JsonObject, part: Mapping[str, JsonValue]) -> None:
    """Lists in order, :data:`_SUMS` added up, else the first value."""
    for key, value in part.items():
        have = user.get(key)
        if key not in user:
            user[key] = list(value) if isinstance(value, list) else value
        elif isinstance(value, list) and isinstance(have, list):
            have.extend(value)
        elif key in _SUMS and isinstance(value, int) and isinstance(have, int):
            user[key] = have + value


__all__ = ["Joined", "RunStrings", "join"]
