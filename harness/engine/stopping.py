"""Stopping a run: a first stop signal stops at the next frame boundary; a second raises
:class:`StopSignal`, and if the trace is not finished within :data:`HARD_STOP_GRACE_S` the
:class:`Keeper` thread finishes it and ends the process."""

from __future__ import annotations

import contextlib
import os
import signal
import sys
import threading
import time
from collections.abc import Callable, Iterator
from typing import TYPE_CHECKING, Any, Protocol

from katra3d.harness.supervisor import STOP_SIGNALS, handling
from katra_trace.errors import signal_exit_code

if TYPE_CHECKING:
    from katra3d.harness.engine.events import EventBuffer
    from katra_trace.jsontext import JsonObject

HARD_STOP_GRACE_S = 1.0

_pc = time.perf_counter_ns


class StopSignal(KeyboardInterrupt):
    """Raised in the main thread by a second stop signal."""

    def __init__(self, signum: int) -> None:
        super().__init__(f"second {signal.Signals(signum).name}")
        self.signum = signum


class StopFlag:
    def __init__(self) -> None:
        self.set = False
        self.signal_name = ""
        self.count = 0
        self.signum = 0
        self.hard_stop = threading.Event()
        self.on_hard_stop: list[Callable[[], None]] = []

    def trip(self, signum: int, _frame: Any = None) -> None:
        self.count += 1
        self.set = True
        self.signum = signum
        self.signal_name = signal.Signals(signum).name
        if self.count >= 2:
            self.hard_stop.set()
            for callback in self.on_hard_stop:
                callback()
            raise StopSignal(signum)


@contextlib.contextmanager
def stop_on_signals(flag: StopFlag) -> Iterator[StopFlag]:
    """Route the stop signals to ``flag`` (main thread only)."""
    with handling(flag.trip, STOP_SIGNALS):
        yield flag


class Kept(Protocol):
    counting: bool
    buffer: EventBuffer
    stop: StopFlag

    def summary(self) -> JsonObject: ...

    def finish_quietly(self, summary: JsonObject, status: str) -> None: ...


class Keeper(threading.Thread):
    """Flushes events the frame loop has not for a while; ends a process that ignores a second stop
    signal. When counting it never wakes on a timer (a GIL hand-off inside a frame)."""

    def __init__(self, engine: Kept) -> None:
        super().__init__(name="katra3d-keeper", daemon=True)
        self.engine = engine
        self._wake = threading.Event()
        self._finished = threading.Event()
        self.period_s: float | None = (
            None if engine.counting else min(0.25, engine.buffer.max_age_ns / 1e9)
        )
        engine.stop.on_hard_stop.append(self._wake.set)

    def run(self) -> None:
        engine = self.engine
        buffer = engine.buffer
        while True:
            self._wake.wait(self.period_s)
            if self._finished.is_set():
                return
            if engine.stop.hard_stop.is_set():
                if not self._finished.wait(HARD_STOP_GRACE_S):
                    self._hard_exit()
                return
            if buffer.pending and _pc() - buffer.last_flush_ns >= buffer.max_age_ns:
                with contextlib.suppress(Exception):
                    buffer.flush()

    def _hard_exit(self) -> None:
        engine = self.engine
        with contextlib.suppress(Exception):
            engine.buffer.flush()
        engine.finish_quietly(
            {
                **engine.summary(),
                "error": "the frame in progress did not stop after a second "
                f"{engine.stop.signal_name}; trace finished by the keeper",
            },
            "interrupted",
        )
        with contextlib.suppress(Exception):
            print(
                f"katra3d: stopped by a second {engine.stop.signal_name}; trace finished as "
                "interrupted",
                file=sys.stderr,
                flush=True,
            )
        os._exit(signal_exit_code(engine.stop.signum or signal.SIGINT))

    def stop(self) -> None:
        self._finished.set()
        self._wake.set()
        if self.is_alive() and threading.current_thread() is not self:
            self.join(timeout=2.0)


__all__ = [
    "HARD_STOP_GRACE_S",
    "Keeper",
    "Kept",
    "StopFlag",
    "StopSignal",
    "stop_on_signals",
]
