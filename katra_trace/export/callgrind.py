"""A counted trace's instruction profiles as a callgrind file for KCachegrind: self instructions
a frame, a file per scene; no call graph, so inclusive costs are self costs."""

from __future__ import annotations

from typing import BinaryIO

from katra_trace.errors import ConfigError
from katra_trace.io.reader import Trace
from katra_trace.profile.groups import JIT_OBJECT
from katra_trace.profile.model import trace_profiles
from katra_trace.text import shown


def _clean(name: str) -> str:
    return " ".join(name.split()) or "?"


def write_callgrind(trace: Trace, f: BinaryIO, scene: str | None = None) -> dict[str, int]:
    """Write ``scene``'s profile (None: all) to ``f``; returns the functions written.
    ConfigError when there is none."""
    profiles = [p for (s, zone), p in trace_profiles(trace.profiles).items() if zone is None]
    if scene is not None:
        profiles = [p for p in profiles if p.scene == scene]
    if not profiles:
        what = "no instruction profiles" if scene is None else f"no profile of scene {shown(scene)}"
        raise ConfigError(
            f"{shown(str(trace.path))} has {what} (a counted run, --measure instructions|cycles, "
            "keeps them)"
        )
    total = sum(round(r.self_) for p in profiles for r in p.rows)
    lines = [
        "# callgrind format",
        "version: 1",
        "creator: katra3d",
        f"cmd: {_clean(str(trace.path))}",
        "desc: Trigger: instructions a measured frame; each function's file is its scene",
        "positions: line",
        "events: Ir",
        f"summary: {total}",
        "",
    ]
    ids: dict[str, dict[str, int]] = {"fl": {}, "ob": {}, "fn": {}}
    functions = 0
    for p in profiles:
        for r in p.rows:
            obj = "???" if r.object == JIT_OBJECT else _clean(r.object)
            for kind, name in (("ob", obj), ("fl", _clean(p.scene)), ("fn", _clean(r.function))):
                known = ids[kind]  # each name written once, then by its number
                if name in known:
                    lines.append(f"{kind}=({known[name]})")
                else:
                    known[name] = len(known) + 1
                    lines.append(f"{kind}=({known[name]}) {name}")
            lines.append(f"0 {round(r.self_)}")
            functions += 1
    lines.append(f"totals: {total}")
    f.write(("\n".join(lines) + "\n").encode("utf-8"))
    return {"functions": functions, "scenes": len(profiles)}


__all__ = ["write_callgrind"]
