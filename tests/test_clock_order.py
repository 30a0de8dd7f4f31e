"""The clock preference order and each timing mode's clock: one definition (katra_trace.metrics), which the
engine's timers and the header it records follow (pure: no GL)."""

from __future__ import annotations

from pathlib import Path

import pytest

from katra3d.harness.engine import timers
from katra3d.harness.engine.core import resolve_capture
from katra3d.harness.engine.spec import CaptureSpec
from katra_trace import metrics
from katra_trace.history import trends
from katra_trace.io.header import HostInfo
from katra_trace.schema import Clock

from tests.test_engine import HARDWARE_GL, SOFTWARE_GL


def test_the_preference_order_names_every_clock_once() -> None:
    assert sorted(metrics.CLOCK_PREFERENCE) == sorted(c.name.lower() for c in Clock)
    assert metrics.CLOCK_PREFERENCE[0] == "wall"
    # --metric auto: the deterministic counts first, then the same order; history uses this one, not a copy
    assert metrics.AUTO_ORDER == ("instructions", "cycles", "wall", "gpu", "process", "cpu")
    assert trends.AUTO_ORDER is metrics.AUTO_ORDER


def test_every_timing_mode_has_one_clock() -> None:
    assert set(metrics.MODE_CLOCKS) == {m for m in timers.MODES if m != "auto"} | set(metrics.COUNT_CLOCKS)
    assert [metrics.mode_clock(m) for m in ("sync", "gpu", "instructions", "cycles")] == [
        "wall", "gpu", "instructions", "cycles"]
    assert timers.SyncTimer.primary_clock == metrics.MODE_CLOCKS["sync"]
    assert timers.GpuTimer.primary_clock == metrics.MODE_CLOCKS["gpu"]


@pytest.mark.parametrize("host, timing", [(SOFTWARE_GL, "auto"), (HARDWARE_GL, "auto"), (HARDWARE_GL, "sync")])
def test_the_header_records_the_clock_of_the_mode_the_timer_uses(host: HostInfo, timing: str) -> None:
    resolved = resolve_capture(CaptureSpec(Path("t.katra"), "w", host=host, timing=timing))
    timer = timers.SyncTimer if resolved.mode == "sync" else timers.GpuTimer
    assert resolved.options.primary_clock == timer.primary_clock.name.lower() == metrics.mode_clock(resolved.mode)
