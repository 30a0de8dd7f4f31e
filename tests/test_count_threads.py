"""A counted capture's trace writer works only while the frame loop waits for it, so that counts are
exact.

Counts of identical code differ by a few to a few hundred instructions between two processes when
the writer's thread runs beside the frame loop: at a time that depends on the machine, it took the
GIL inside a counted frame, or its allocations and frees fell between the loop's, leaving Python's
and the C library's allocators in another state for the frames after. CI saw ``--jobs 2`` and
``--jobs 1`` differ by 37 to 214 instructions on every ``fillrate`` frame, and another run by 6 to
39 on two frames of ``triangle`` and ``shader``. So a counted capture writes through a ``sync``
writer: every item it hands over is written before the call that handed it returns.
"""

from __future__ import annotations

import os
from pathlib import Path

from katra_trace import TraceWriter


def _annotate_and_measure(tmp_path: Path, sync: bool) -> list[int]:
    """How much each of 20 annotations had grown the file when ``annotate`` returned."""
    w = TraceWriter(tmp_path / f"t-{sync}.katra", workload="test", batch_ms=1e9, sync=sync)
    try:
        assert w.part_path is not None
        grown = []
        for _ in range(20):
            before = w.part_path.stat().st_size
            w.annotate({"note": os.urandom(1500).hex()})  # 1,500 bytes or more once compressed
            grown.append(w.part_path.stat().st_size - before)
        return grown
    finally:
        w.finish()


def test_a_sync_writer_has_written_each_item_when_the_call_returns(tmp_path: Path) -> None:
    assert all(g >= 1500 for g in _annotate_and_measure(tmp_path, sync=True))


def test_a_sync_writer_keeps_the_batch_being_filled_until_it_is_handed_over(tmp_path: Path) -> None:
    w = TraceWriter(tmp_path / "t.katra", workload="test", batch_ms=1e9, sync=True)
    try:
        assert w.part_path is not None
        w.intern("frame")
        w.annotate({"note": "first"})  # hands over what is pending (the new string), then the block
        size = w.part_path.stat().st_size
        w.append(1, 0, 0, 1, 0, 0, 0, 1000)  # into the batch being filled: nothing is written
        assert w.part_path.stat().st_size == size
        w.flush()
        assert w.part_path.stat().st_size > size
    finally:
        w.finish()
