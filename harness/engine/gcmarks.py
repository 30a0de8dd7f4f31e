"""Python's garbage collections as trace markers, so that a slow frame can be put on one.

:class:`GcMarks` is a ``gc.callbacks`` entry: the collector calls it when a collection starts and
when it stops. At the stop it appends one MARKER row (:data:`katra_trace.schema.GC_NAME`, wall
clock) from the collection's start to its end to the event buffer, in the scene and frame the timer
is in, with the generation collected in ``value`` (2: a full collection). The row goes straight onto
the buffer's queue (one deque append, atomic, so a collection started by the writer's thread is
recorded too) and leaves with the buffer's next flush.

Nothing runs per frame: a frame without a collection pays nothing (``python -m bench gc-markers``
measures it), and a collection pays the two calls (a few µs, inside the marker's span).
The engine installs it when it starts timing and removes it when the trace is finished; counted
captures (``--measure``) have none (the collector is paused while frames are counted).
"""

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
    """The ``gc.callbacks`` entry that records each collection as a MARKER row (see the module doc).

    ``timer``: the engine's timer (its scene id, frame index, flags and origin are read at each
    collection); ``add``: where rows go (the event buffer's ``add``).
    """

    __slots__ = ("timer", "add", "name_id", "t0", "installed")

    def __init__(self, timer: Any, add: Any) -> None:
        self.timer = timer
        self.add = add
        self.name_id = int(timer.name_id(GC_NAME))
        self.t0 = 0
        self.installed = False

    def __call__(self, phase: str, info: dict[str, Any]) -> None:
        if phase == "start":
            self.t0 = _pc()
            return
        t1 = _pc()
        try:
            t = self.timer
            if not t.scene_id:  # no scene is being captured: a marker belongs to one
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
        # a collection must never raise (it would surface in whatever code allocated)
        except Exception:
            pass

    def install(self) -> None:
        """Start recording collections (once)."""
        if not self.installed:
            gc.callbacks.append(self)
            self.installed = True

    def uninstall(self) -> None:
        """Stop recording collections; safe to call more than once."""
        if self.installed:
            self.installed = False
            try:
                gc.callbacks.remove(self)
            except ValueError:
                pass


__all__ = ["GcMarks"]
