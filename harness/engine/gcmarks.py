"""Python's garbage collections as MARKER rows (``gc``, generation in ``value``), so a slow frame
can be put on one. Nothing runs per frame; the row is one atomic deque append (any thread)."""

from __future__ import annotations

import gc
import time
from typing import Any

from katra_trace.schema import GC_NAME, Clock, Flag, Kind

_pc = time.perf_counter_ns
_MARKER = int(Kind.MARKER)
_WALL = int(Clock.WALL)
_WARMUP = int(Flag.WARMUP)


class GcMarks:
    __slots__ = ("timer", "add", "name_id", "t0", "installed")

    def __init__(self, timer: Any, add: Any) -> None:
        self.timer = timer
        self.add = add
        self.name_id = int(timer.name_id(GC_NAME))
        self.t0 = 0
        self.installed = False

    def __call__(self, phase: str, info: dict[str, int]) -> None:
        if phase == "start":
            self.t0 = _pc()
            return
        t1 = _pc()
        try:
            t = self.timer
            if not t.scene_id:
                return
            self.add(
                (
                    _MARKER,
                    _WALL,
                    t.flags & _WARMUP,
                    0,
                    t.scene_id,
                    self.name_id,
                    t.frame_index,
                    self.t0 - t.origin_ns,
                    t1 - self.t0,
                    float(info.get("generation", -1)),
                )
            )
        # a raise would surface in whatever code allocated
        except Exception:
            pass

    def install(self) -> None:
        if not self.installed:
            gc.callbacks.append(self)
            self.installed = True

    def uninstall(self) -> None:
        if self.installed:
            self.installed = False
            try:
                gc.callbacks.remove(self)
            except ValueError:
                pass


__all__ = ["GcMarks"]
