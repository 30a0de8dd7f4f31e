"""Stopping a run (katra3d.harness.engine.stopping): the stop flag, signal routing and the keeper
thread. No GL.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import textwrap
import threading
import time
from collections.abc import Iterator
from typing import Any

import pytest

from katra3d.harness.engine import stopping
from katra3d.harness.engine.events import EventBuffer
from katra3d.harness.engine.stopping import Keeper, StopFlag, StopSignal, stop_on_signals
from katra3d.harness.run.offscreen import MemorySink
from katra3d.harness.supervisor import STOP_SIGNALS


class Kept:
    """What the keeper looks after, without an engine: a buffer into a MemorySink, a stop flag."""

    def __init__(self, *, counting: bool = False, max_age_ns: int | None = 20_000_000) -> None:
        self.counting = counting
        self.sink = MemorySink()
        self.buffer = EventBuffer(self.sink, max_age_ns=max_age_ns)
        self.stop = StopFlag()
        self.finished: list[tuple[str, dict[str, Any]]] = []

    def summary(self) -> dict[str, Any]:
        return {"timing_mode": "sync"}

    def finish_quietly(self, summary: dict[str, Any], status: str) -> None:
        self.finished.append((status, summary))


@pytest.fixture
def kept() -> Iterator[Kept]:
    yield Kept()


# --------------------------------------------------------------------------- the flag


def test_the_first_trip_asks_for_a_stop_the_second_stops_now() -> None:
    flag = StopFlag()
    called: list[str] = []
    flag.on_hard_stop.append(lambda: called.append("hard"))
    flag.trip(signal.SIGTERM)
    assert (flag.set, flag.count, flag.signal_name, flag.signum) == (
        True,
        1,
        "SIGTERM",
        signal.SIGTERM,
    )
    assert not flag.hard_stop.is_set() and called == []
    with pytest.raises(StopSignal) as info:
        flag.trip(signal.SIGHUP)
    assert isinstance(info.value, KeyboardInterrupt) and info.value.signum == signal.SIGHUP
    assert str(info.value) == "second SIGHUP" and flag.signal_name == "SIGHUP"
    assert flag.hard_stop.is_set() and called == ["hard"] and flag.count == 2


def test_a_fresh_flag_is_clear() -> None:
    flag = StopFlag()
    assert (flag.set, flag.count, flag.signal_name) == (False, 0, "")


# --------------------------------------------------------------------------- signal routing


def _noted(signum: int, frame: Any) -> None:
    raise AssertionError("the previous handler ran while the flag was installed")


@pytest.fixture
def own_handlers() -> Iterator[dict[signal.Signals, Any]]:
    """Installs ``_noted`` for every stop signal, restores what was there after the test."""
    before = {sig: signal.getsignal(sig) for sig in STOP_SIGNALS}
    for sig in STOP_SIGNALS:
        signal.signal(sig, _noted)
    yield before
    for sig, handler in before.items():
        signal.signal(sig, handler if handler is not None else signal.SIG_DFL)


def _wait_for(condition: Any, timeout_s: float = 5.0) -> bool:
    end = time.monotonic() + timeout_s
    while not condition():
        if time.monotonic() > end:
            return False
        time.sleep(0.001)
    return True


def test_real_signals_set_the_flag_then_interrupt(own_handlers: dict[signal.Signals, Any]) -> None:
    flag = StopFlag()
    with stop_on_signals(flag) as routed:
        assert routed is flag
        assert all(signal.getsignal(sig) == flag.trip for sig in STOP_SIGNALS)
        os.kill(os.getpid(), signal.SIGTERM)
        assert _wait_for(lambda: flag.set) and flag.signal_name == "SIGTERM"
        with pytest.raises(StopSignal, match="second SIGINT"):
            os.kill(os.getpid(), signal.SIGINT)
            _wait_for(lambda: False, timeout_s=5.0)  # the handler raises here, in the main thread
    # the previous handlers are back
    assert all(signal.getsignal(sig) is _noted for sig in STOP_SIGNALS)


def test_handlers_are_restored_when_the_run_fails(own_handlers: dict[signal.Signals, Any]) -> None:
    with pytest.raises(RuntimeError), stop_on_signals(StopFlag()):
        raise RuntimeError("run failed")
    assert all(signal.getsignal(sig) is _noted for sig in STOP_SIGNALS)


def test_outside_the_main_thread_no_handler_is_installed(
    own_handlers: dict[signal.Signals, Any],
) -> None:
    seen: list[Any] = []
    flag = StopFlag()

    def in_thread() -> None:
        with stop_on_signals(flag) as routed:
            seen.append(routed)
            seen.extend(signal.getsignal(sig) for sig in STOP_SIGNALS)

    worker = threading.Thread(target=in_thread)
    worker.start()
    worker.join(10)
    assert seen == [flag, _noted, _noted, _noted]


# --------------------------------------------------------------------------- the keeper


def test_the_keeper_hands_old_buffered_events_to_the_writer(kept: Kept) -> None:
    keeper = Keeper(kept)
    assert keeper.period_s == pytest.approx(0.02)
    # one pending event; the frame loop is "stuck"
    kept.buffer.add((0, 0, 0, 0, 0, 0, 0, 0, 1, 0.0))
    keeper.start()
    try:
        assert _wait_for(lambda: kept.sink.arrays != [])
    finally:
        keeper.stop()
    assert not keeper.is_alive() and kept.buffer.pending == 0 and kept.finished == []
    assert len(kept.sink.arrays) == 1 and int(kept.sink.arrays[0]["dur_ns"][0]) == 1


def test_the_keeper_never_wakes_on_a_timer_while_counting() -> None:
    counted = Kept(counting=True, max_age_ns=None)
    keeper = Keeper(counted)
    assert keeper.period_s is None
    counted.buffer.add((0, 0, 0, 0, 0, 0, 0, 0, 1, 0.0))
    keeper.start()
    time.sleep(0.1)
    keeper.stop()
    assert not keeper.is_alive() and counted.buffer.pending == 1 and counted.sink.arrays == []


def test_a_run_that_finishes_after_a_second_signal_is_left_alone(
    kept: Kept, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(stopping, "HARD_STOP_GRACE_S", 60.0)
    keeper = Keeper(kept)
    keeper.start()
    kept.stop.trip(signal.SIGINT)
    with pytest.raises(StopSignal):
        kept.stop.trip(signal.SIGINT)  # wakes the keeper, which now waits for the run to finish
    keeper.stop()  # the run finished its trace in time
    assert not keeper.is_alive() and kept.finished == []


_STUCK = textwrap.dedent("""
    import signal, time
    from katra3d.harness.engine.events import EventBuffer
    from katra3d.harness.run.offscreen import MemorySink
    from katra3d.harness.engine.stopping import Keeper, StopFlag, StopSignal

    class Kept:
        counting = False
        def __init__(self):
            self.buffer = EventBuffer(MemorySink())
            self.stop = StopFlag()
        def summary(self):
            return {"timing_mode": "sync"}
        def finish_quietly(self, summary, status):
            print(status, sorted(summary), summary["error"], flush=True)

    kept = Kept()
    Keeper(kept).start()
    kept.stop.trip(signal.SIGTERM)
    try:
        kept.stop.trip(signal.SIGTERM)
    except StopSignal:
        pass
    # a frame that does not react: the keeper must finish the trace and end the process
    time.sleep(60)
    print("not stopped", flush=True)
""")


def test_the_keeper_ends_a_process_stuck_after_a_second_signal() -> None:
    # its frame sleeps 60 s and then prints "not stopped": the output below shows the keeper ended
    # it first
    proc = subprocess.run(
        [sys.executable, "-c", _STUCK], capture_output=True, text=True, timeout=120
    )
    assert proc.returncode == 128 + signal.SIGTERM, proc.stderr
    assert proc.stdout == (
        "interrupted ['error', 'timing_mode'] the frame in progress did not stop after a second "
        "SIGTERM; trace finished by the keeper\n"
    )
    assert proc.stderr == "katra3d: stopped by a second SIGTERM; trace finished as interrupted\n"
