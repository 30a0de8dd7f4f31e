"""glretrace's output parsed: per SwapBuffers ``rendering_finished NS`` (CLOCK_MONOTONIC), per
call a line whose ``--pcpu`` columns hold start (replayer's base) and duration."""

from __future__ import annotations

import dataclasses
import re

from katra_trace.schema import FRAME_PASS, draw_zone_name

#: Calls that are draws (``--zones draws``).
DRAW_CALL = re.compile(
    r"^gl(Multi)?Draw[A-Za-z0-9]*$|^glDispatchCompute[A-Za-z]*$|^glClear$|^glBlitFramebuffer[A-Z]*$"
    r"|^glBegin$"
)


@dataclasses.dataclass(frozen=True)
class Draw:
    """Start (replayer's base) and CPU duration, in ns."""

    call_no: int
    function: str
    start_ns: int
    dur_ns: int


@dataclasses.dataclass(frozen=True)
class Frame:
    """``end_ns`` on the host clock, after its glFinish; ``last_call`` before its SwapBuffers."""

    end_ns: int
    last_call: int
    draws: tuple[Draw, ...] = ()
    first_start_ns: int | None = None


class FrameReader:
    """Feed it glretrace's stdout line by line; :meth:`feed` returns complete frames."""

    def __init__(self) -> None:
        self._draws: list[Draw] = []
        self._last_call = 0
        self._first: int | None = None
        self._ended = False
        #: "Rendered N frames" at the end, when printed
        self.rendered: int | None = None

    def feed(self, line: str) -> Frame | None:
        if line.startswith("call "):
            fields = line.split()
            if len(fields) >= 13 and fields[1].isdigit():
                call_no, name = int(fields[1]), fields[-1]
                self._last_call = call_no
                start, dur = _int(fields[4]), _int(fields[5])
                if self._first is None and start:
                    self._first = start
                if DRAW_CALL.match(name):
                    self._draws.append(Draw(call_no, name, start, dur))
            return None
        if line.startswith("frame_end"):
            self._ended = True
            return None
        if line.startswith("rendering_finished ") and self._ended:
            end = _int(line.split()[1])
            frame = Frame(end, self._last_call, tuple(self._draws), self._first)
            self._draws, self._first, self._ended = [], None, False
            return frame
        if line.startswith("Rendered "):
            words = line.split()
            if len(words) > 1 and words[1].isdigit():
                self.rendered = int(words[1])
        return None


def _int(text: str) -> int:
    try:
        return int(text)
    except ValueError:
        return 0


def draw_zones(draws: tuple[Draw, ...]) -> list[str]:
    """Zone names of a frame's draws (``frame/glDrawArrays#2``), stable across frames."""
    seen: dict[str, int] = {}
    names = []
    for draw in draws:
        seen[draw.function] = seen.get(draw.function, 0) + 1
        names.append(draw_zone_name(FRAME_PASS, draw.function, seen[draw.function]))
    return names


def replayer_base_ns(frames: list[Frame]) -> int | None:
    """Where ``--pcpu`` times start on the host clock (largest ``end[k] - first_start[k+1]``);
    None under two frames."""
    bounds = [
        a.end_ns - b.first_start_ns
        for a, b in zip(frames, frames[1:], strict=False)
        if b.first_start_ns is not None
    ]
    return max(bounds) if bounds else None


__all__ = ["DRAW_CALL", "Draw", "Frame", "FrameReader", "draw_zones", "replayer_base_ns"]
