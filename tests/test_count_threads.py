"""A counted frame runs with every other Python thread of the child waiting for work (issue 36's exact counts).

A thread that waits for the GIL makes the main thread hand it over at its next bytecode, wherever that is: inside a
counted frame, the hand-over's instructions land in the frame, at a point that depends on time. CI saw it once as
``--jobs 2`` against ``--jobs 1`` differing on fillrate's frames (the scene's annotation was still being written
while its first counted frames ran), and a loaded machine showed it again as +28 instructions in one zone of one of
five identical runs. So the count timer waits for the trace writer's thread before each counted frame.
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

import numpy as np

from katra3d.harness.engine.counting import CountTimer
from katra3d.harness.engine.events import EventBuffer
from katra_trace import TraceWriter
from katra_trace.schema import Flag


def test_wait_written_returns_once_the_thread_has_written_what_it_was_handed(tmp_path: Path) -> None:
    w = TraceWriter(tmp_path / "t.katra", workload="test", batch_ms=1e9)
    try:
        assert w.part_path is not None
        w.intern("frame")
        w.wait_written()
        before = w.part_path.stat().st_size
        for _ in range(20):  # each block is handed to the thread at once; the thread writes it when it runs
            w.annotate({"note": os.urandom(1500).hex()})  # 1,500 bytes or more once compressed
        w.append(1, 0, 0, 1, 0, 0, 0, 1000)  # stays in the batch being filled: nothing is handed over
        w.wait_written()
        after = w.part_path.stat().st_size
        assert after - before >= 20 * 1500  # every annotation is in the file
        w.flush()  # the event was left where it was
        assert w.part_path.stat().st_size > after
    finally:
        w.finish()


class _Ctx:
    supports_debug_scopes = False
    mglo = None

    def finish(self) -> None:
        pass


class _Writer:
    """The writer's side a count timer uses, recording when it is asked to wait."""

    start_host_ns = 0

    def __init__(self, log: list[str]) -> None:
        self.log = log
        self.names: dict[str, int] = {}

    def intern(self, name: str) -> int:
        return self.names.setdefault(name, len(self.names) + 1)

    def append_array(self, events: np.ndarray) -> None:
        pass

    def wait_written(self) -> None:
        self.log.append("written")


def test_a_counted_frame_starts_after_the_writer_thread_is_done(tmp_path: Path) -> None:
    log: list[str] = []
    writer = _Writer(log)
    timer = CountTimer(_Ctx(), writer, EventBuffer(writer), zones=False, dump_base=tmp_path / "cg.out")
    timer.mark = lambda: log.append("mark")  # the boundary call (os.getppid under callgrind)
    timer.set_scene("s")
    timer.begin_frame(0, int(Flag.WARMUP))  # a warmup frame is neither counted nor waited for
    assert log == []
    timer.begin_frame(4, 0)
    assert log == ["written", "mark"]  # the wait comes before the frame's first boundary


def test_a_sink_without_a_thread_needs_no_wait(tmp_path: Path) -> None:
    log: list[str] = []

    class Sink(_Writer):
        wait_written: Any = None

    timer = CountTimer(_Ctx(), Sink(log), EventBuffer(Sink(log)), zones=False, dump_base=tmp_path / "cg.out")
    timer.mark = lambda: log.append("mark")
    timer.begin_frame(4, 0)
    assert log == ["mark"]
