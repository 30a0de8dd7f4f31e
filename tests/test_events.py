"""The event buffer between the timers and the writer (katra3d.harness.engine.events). No GL."""

from __future__ import annotations

import sys
import threading
from typing import Any

import numpy as np

from katra3d.harness.engine.events import FRAME_NAME, EventBuffer, pack_frame
from katra3d.harness.run.offscreen import MemorySink
from katra_trace.schema import Clock, Kind


def _events(sink: MemorySink) -> np.ndarray:
    return np.concatenate(sink.arrays) if sink.arrays else np.zeros(0)


def test_a_packed_frame_becomes_its_cpu_wall_and_process_events() -> None:
    sink = MemorySink()
    buf = EventBuffer(sink, max_age_ns=None)
    origin = buf.origin_ns
    buf.add_frame(pack_frame(origin + 1_000, origin + 1_400, origin + 2_500, 3_300, 7, 1, 5))
    buf.flush()
    ev = _events(sink)
    assert [(int(e["kind"]), int(e["clock"])) for e in ev] == [
        (int(Kind.FRAME), int(Clock.CPU)),
        (int(Kind.FRAME), int(Clock.WALL)),
        (int(Kind.FRAME), int(Clock.PROCESS)),
    ]
    assert ev["dur_ns"].tolist() == [400, 1_500, 3_300]
    assert set(ev["start_ns"].tolist()) == {1_000}
    assert (
        set(ev["frame"].tolist()) == {7}
        and set(ev["flags"].tolist()) == {1}
        and set(ev["scene"].tolist()) == {5}
    )
    assert set(ev["name"].tolist()) == {sink.intern(FRAME_NAME)}


class _AppendedDuringTake(list[bytes]):
    """Pending frames whose first slice lets "the frame loop" append one more frame, as another
    thread may between the flush's taking of the pending frames and its removing them."""

    def __init__(self, late: bytes) -> None:
        super().__init__()
        self.late: bytes | None = late

    def __getitem__(self, key: Any) -> Any:
        out = super().__getitem__(key)
        if isinstance(key, slice) and self.late is not None:
            self.append(self.late)
            self.late = None
        return out


def test_a_frame_appended_while_a_flush_takes_the_pending_ones_is_handed_over_next_time() -> None:
    sink = MemorySink()
    buf = EventBuffer(sink, max_age_ns=None)
    origin = buf.origin_ns
    pending = _AppendedDuringTake(pack_frame(origin, origin, origin, 0, 3, 0, 1))
    buf.frames = pending
    buf.add_frame = pending.append
    for i in range(3):
        buf.add_frame(pack_frame(origin, origin, origin, 0, i, 0, 1))
    buf.flush()
    assert buf.pending == 1  # the late frame stays for the next flush
    buf.flush()
    wall = _events(sink)
    wall = wall[wall["clock"] == int(Clock.WALL)]
    assert wall["frame"].tolist() == [0, 1, 2, 3]


def test_frames_appended_while_another_thread_flushes_are_handed_over_once_in_order() -> None:
    # the keeper thread flushes whenever it likes while the frame loop appends: nothing lost,
    # nothing twice
    sink = MemorySink()
    buf = EventBuffer(sink, max_rows=1 << 30, max_age_ns=None)
    frames = 30_000  # at least; more until the keeper has flushed between appends a few times
    done = threading.Event()

    def keeper() -> None:
        while not done.is_set():
            buf.flush()

    thread = threading.Thread(target=keeper)
    interval = sys.getswitchinterval()
    sys.setswitchinterval(1e-6)  # hand the GIL over as often as it can
    try:
        thread.start()
        origin = buf.origin_ns
        i = 0
        while i < frames or (len(sink.arrays) < 3 and i < 100 * frames):
            buf.add_frame(pack_frame(origin, origin, origin, 0, i, 0, 1))
            i += 1
        frames = i
        done.set()
        thread.join()
    finally:
        sys.setswitchinterval(interval)
    buf.flush()
    assert len(sink.arrays) > 2, (
        "the keeper never flushed between appends: the test did not test anything"
    )
    wall = _events(sink)
    wall = wall[wall["clock"] == int(Clock.WALL)]
    assert wall["frame"].tolist() == list(range(frames))
