"""The event buffer between timers and trace writer: an append or two per frame, numpy batches to
the writer."""

from __future__ import annotations

import collections
import struct
import threading
import time
from typing import Any

import numpy as np

from katra_trace.schema import EVENT_DTYPE, Clock, Kind

FRAME_NAME = "frame"

_FRAME = int(Kind.FRAME)
_CPU = int(Clock.CPU)
_WALL = int(Clock.WALL)
_PROCESS = int(Clock.PROCESS)
_pc = time.perf_counter_ns

# (t0, t_submit, t_end, process CPU ns, frame, flags, scene); absolute perf_counter_ns
FRAME_RECORD = struct.Struct("<7q")
pack_frame = FRAME_RECORD.pack


class EventBuffer:
    """:attr:`add` takes an EVENT_DTYPE tuple; :attr:`add_frame` a packed sync frame, expanded into
    events at flush (cheaper per frame). Any thread may :meth:`flush`: flushes lock and the frame
    loop only appends."""

    def __init__(
        self, writer: Any, max_rows: int = 1024, max_age_ns: int | None = 250_000_000
    ) -> None:
        self.writer = writer
        self.rows: collections.deque[tuple[int | float, ...]] = collections.deque()
        self.add = self.rows.append
        self.frames: list[bytes] = []
        self.add_frame = self.frames.append
        self._flush_lock = threading.Lock()
        self.origin_ns = int(writer.start_host_ns)
        self.frame_name = writer.intern(FRAME_NAME)
        self.max_rows = max_rows
        self.max_age_ns = max_age_ns if max_age_ns is not None else 1 << 62
        self.last_flush_ns = _pc()

    @property
    def pending(self) -> int:
        return len(self.frames) + len(self.rows)

    def maybe_flush(self, now_ns: int) -> None:
        if (
            len(self.frames) + len(self.rows) >= self.max_rows
            or now_ns - self.last_flush_ns >= self.max_age_ns
        ):
            self.flush()

    @staticmethod
    def _take(queue: collections.deque[Any]) -> list[Any]:
        pop = queue.popleft
        out = []
        for _ in range(len(queue)):
            try:
                out.append(pop())
            except IndexError:  # another thread took the rest
                break
        return out

    def _frame_events(self, frames: list[bytes]) -> np.ndarray:
        a = np.frombuffer(b"".join(frames), dtype="<i8").reshape(-1, 7)
        out = np.zeros(3 * len(a), dtype=EVENT_DTYPE)
        out["kind"] = _FRAME
        out["clock"][0::3] = _CPU
        out["clock"][1::3] = _WALL
        out["clock"][2::3] = _PROCESS
        out["flags"] = np.repeat(a[:, 5], 3)
        out["scene"] = np.repeat(a[:, 6], 3)
        out["name"] = self.frame_name
        out["frame"] = np.repeat(a[:, 4], 3)
        out["start_ns"] = np.repeat(a[:, 0] - self.origin_ns, 3)
        out["dur_ns"][0::3] = a[:, 1] - a[:, 0]
        out["dur_ns"][1::3] = a[:, 2] - a[:, 0]
        out["dur_ns"][2::3] = a[:, 3]
        return out

    def flush(self) -> None:
        with self._flush_lock:
            self.last_flush_ns = _pc()
            pending = self.frames
            if pending:
                # the frame loop may append meanwhile: take the first n only
                n = len(pending)
                frames = pending[:n]
                del pending[:n]
                self.writer.append_array(self._frame_events(frames))
            if self.rows:
                rows = self._take(self.rows)
                if rows:
                    self.writer.append_array(np.array(rows, dtype=EVENT_DTYPE))


__all__ = ["FRAME_NAME", "FRAME_RECORD", "EventBuffer", "pack_frame"]
