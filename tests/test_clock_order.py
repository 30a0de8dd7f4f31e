"""The clock preference order and each timing mode's clock: one definition (katra_trace.metrics),
which the engine's timers and the header it records follow (pure: no GL)."""

from __future__ import annotations

import ast
from pathlib import Path

import numpy as np
import pytest

from katra3d.harness.engine import timers
from katra3d.harness.engine.core import resolve_capture
from katra3d.harness.engine.spec import CaptureSpec
from katra_trace import metrics
from katra_trace.history import series as history_series
from katra_trace.io.header import HostInfo
from katra_trace.io.reader import open_trace
from katra_trace.report import series
from katra_trace.schema import EVENT_DTYPE, Clock, Kind
from tests.test_engine import HARDWARE_GL, SOFTWARE_GL
from tests.trace_helpers import write_trace


def test_the_preference_order_names_every_clock_once() -> None:
    assert sorted(metrics.CLOCK_PREFERENCE) == sorted(c.name.lower() for c in Clock)
    assert metrics.CLOCK_PREFERENCE[0] == "wall"
    # --metric auto: the deterministic counts first, then the same order; history uses this one, not
    # a copy
    assert metrics.AUTO_ORDER == ("instructions", "cycles", "wall", "gpu", "process", "cpu")
    assert history_series.AUTO_ORDER is metrics.AUTO_ORDER


def test_every_timing_mode_has_one_clock() -> None:
    assert set(metrics.MODE_CLOCKS) == {m for m in timers.MODES if m != "auto"} | set(
        metrics.COUNT_CLOCKS
    )
    assert [metrics.mode_clock(m) for m in ("sync", "gpu", "instructions", "cycles")] == [
        "wall",
        "gpu",
        "instructions",
        "cycles",
    ]
    assert timers.SyncTimer.primary_clock == metrics.MODE_CLOCKS["sync"]
    assert timers.GpuTimer.primary_clock == metrics.MODE_CLOCKS["gpu"]


@pytest.mark.parametrize(
    "host, timing", [(SOFTWARE_GL, "auto"), (HARDWARE_GL, "auto"), (HARDWARE_GL, "sync")]
)
def test_the_header_records_the_clock_of_the_mode_the_timer_uses(
    host: HostInfo, timing: str
) -> None:
    resolved = resolve_capture(CaptureSpec(Path("t.katra"), "w", host=host, timing=timing))
    timer = timers.SyncTimer if resolved.mode == "sync" else timers.GpuTimer
    assert (
        resolved.options.primary_clock
        == timer.primary_clock.name.lower()
        == metrics.mode_clock(resolved.mode)
    )


def _spells_every_clock(node: ast.AST, names: frozenset[str]) -> bool:
    """Whether ``node`` is a tuple or list literal of clock names (``"wall"``) or members
    (``Clock.WALL``) naming every clock: an order of the clocks written out."""
    if not isinstance(node, (ast.Tuple, ast.List)):
        return False
    spelled = set()
    for item in node.elts:
        if isinstance(item, ast.Constant) and isinstance(item.value, str):
            spelled.add(item.value)
        elif (
            isinstance(item, ast.Attribute)
            and isinstance(item.value, ast.Name)
            and item.value.id == "Clock"
        ):
            spelled.add(item.attr.lower())
        else:
            return False
    return spelled == names


def test_no_module_writes_out_its_own_clock_order() -> None:
    """Who shows, picks or sorts clocks uses metrics.CLOCK_PREFERENCE (or AUTO_ORDER), never a copy
    of it.
    """
    root = Path(__file__).resolve().parent.parent
    names = frozenset(metrics.CLOCK_PREFERENCE)
    found = []
    for package in ("katra3d", "harness", "katra_trace", "scenes", "bench"):
        for path in sorted((root / package).rglob("*.py")):
            name = path.relative_to(root).as_posix()
            if name == "katra_trace/metrics.py":  # the one definition
                continue
            found += [
                f"{name}:{node.lineno}"
                for node in ast.walk(ast.parse(path.read_text(), name))
                if _spells_every_clock(node, names)
            ]
    assert not found, (
        f"a copy of the clock order (use katra_trace.metrics.CLOCK_PREFERENCE): {found}"
    )


def test_the_report_lists_a_scene_s_clocks_in_the_preference_order(tmp_path: Path) -> None:
    strings = ["", "frame", "s"]
    rows = np.zeros(len(Clock), dtype=EVENT_DTYPE)
    rows["kind"], rows["scene"], rows["name"], rows["dur_ns"] = Kind.FRAME, 2, 1, 1000
    rows["clock"] = [int(c) for c in sorted(Clock, reverse=True)]
    rows["start_ns"] = np.arange(len(rows)) * 10_000
    write_trace(tmp_path / "t.katra", rows, strings)
    trace = open_trace(tmp_path / "t.katra")
    assert series.scenes_of(trace)["s"][1] == list(metrics.CLOCK_PREFERENCE)
