"""What a run produced: per-scene and per-run results, the progress protocol, per-scene stats."""

from __future__ import annotations

import dataclasses
from pathlib import Path
from typing import Any, Protocol, TypeAlias

import numpy as np

from katra3d.scenes.api import ParamValue
from katra_trace.analysis.stats import frame_stats
from katra_trace.jsontext import JsonObject
from katra_trace.units import format_ms

#: A scene's frame-time or count stats, by name (``median_ms``, ``median``, ...).
StatsDict: TypeAlias = dict[str, float | int | None]


@dataclasses.dataclass
class SceneResult:
    """``status``: ok | skipped | interrupted."""

    label: str
    status: str
    frames: int = 0
    warmup: int = 0
    setup_ms: float = 0.0
    clock: str = ""
    stats: StatsDict | None = None
    checksum: str = ""
    reason: str = ""
    pixels: Any = None
    params: dict[str, ParamValue] = dataclasses.field(default_factory=dict)

    def row(self) -> JsonObject:
        s = self.stats or {}
        row: JsonObject = {
            "scene": self.label,
            "status": self.status,
            "frames": self.frames,
            "median_ms": s.get("median_ms"),
            "p99_ms": s.get("p99_ms"),
            "fps_avg": s.get("fps_avg"),
            "fps_low_1pct": s.get("fps_low_1pct"),
            "clock": self.clock,
            "setup_ms": round(self.setup_ms, 3),
        }
        if "median" in s:  # a count (instructions, cycles), not a time
            row.update(
                {
                    "median": s["median"],
                    "min": s["min"],
                    "max": s["max"],
                    "spread_pct": s["spread_pct"],
                }
            )
        return row


@dataclasses.dataclass
class RunResult:
    """``status``: complete | interrupted."""

    path: Path
    status: str
    timing_mode: str
    timing_reason: str
    scenes: list[SceneResult]
    signal_name: str = ""
    size: tuple[int, int] | None = None

    def as_dict(self) -> JsonObject:
        """``katra3d run --json``'s output."""
        return {
            "trace": str(self.path),
            "status": self.status,
            "timing_mode": self.timing_mode,
            "timing_reason": self.timing_reason,
            "size": list(self.size) if self.size else None,
            "signal": self.signal_name or None,
            "scenes": [
                {**r.row(), "params": dict(r.params), "reason": r.reason or None}
                for r in self.scenes
            ],
        }


class ProgressSink(Protocol):
    """What the engine reports progress to; ``advance(done)`` is called only when ``tty``."""

    tty: bool

    def line(self, text: str) -> None: ...

    def scene_started(self, index: int, label: str, total_frames: int | None) -> None: ...

    def phase(self, name: str, frames: int | None) -> None: ...

    def advance(self, done: int) -> None: ...


class NoProgress:
    tty = False

    def line(self, text: str) -> None:
        pass

    def scene_started(self, index: int, label: str, total_frames: int | None) -> None:
        pass

    def phase(self, name: str, frames: int | None) -> None:
        pass

    def advance(self, done: int) -> None:
        pass


def scene_stats(values: list[int], counts: bool) -> StatsDict:
    """Frame-time stats, or count stats when ``counts``."""
    arr = np.asarray(values, dtype=np.float64)
    if not counts:
        return frame_stats(arr).as_dict()
    median = float(np.median(arr))
    return {
        "n": int(arr.size),
        "median": median,
        "min": float(arr.min()),
        "max": float(arr.max()),
        "spread_pct": float((arr.max() - arr.min()) / median * 100.0) if median else 0.0,
    }


def median_text(result: SceneResult) -> str:
    s = result.stats
    if not s:
        return ""
    if "median_ms" in s:
        return f", median {format_ms(s['median_ms'])} ({result.clock})"
    return f", median {s['median']:,.0f} {result.clock} per frame"


__all__ = [
    "NoProgress",
    "ProgressSink",
    "RunResult",
    "SceneResult",
    "StatsDict",
    "median_text",
    "scene_stats",
]
