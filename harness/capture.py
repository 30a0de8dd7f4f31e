"""Time your own moderngl renderer into a katra3d trace.

::

    import harness
    with harness.capture(ctx, "my.katra", workload="my-renderer") as cap:
        for i in range(300):
            with cap.frame():
                with cap.zone("shadows"):
                    ...
                with cap.zone("lighting"):
                    ...

The trace has the same format, clocks and timing modes as ``katra3d run``:
``timing="auto"`` picks ``sync`` (glFinish at the end of each frame, host
clock) on software renderers and ``gpu`` (GL_TIMESTAMP queries) elsewhere.
The context is not changed, except that frames in ``sync`` mode end with
``glFinish``. Frames marked ``warmup=True`` are recorded and excluded from
statistics.
"""

from __future__ import annotations

import contextlib
import types
from pathlib import Path
from typing import Any

from katra_trace.errors import ConfigError
from katra_trace.schema import Flag


class _FrameSpan:
    """The context manager returned by :meth:`Capture.frame`."""

    __slots__ = ("cap", "flags")

    def __init__(self, cap: Capture, flags: int) -> None:
        self.cap = cap
        self.flags = flags

    def __enter__(self) -> int:
        cap = self.cap
        if cap._in_frame:
            raise ConfigError("capture.frame() cannot be nested: end the current frame first")
        if cap._closed:
            raise ConfigError("capture is finished: no more frames can be recorded")
        cap._in_frame = True
        index = cap._next_index
        cap._timer.begin_frame(index, self.flags)
        return index

    def __exit__(self, *exc: object) -> None:
        cap = self.cap
        cap._timer.end_frame()
        cap._in_frame = False
        cap._next_index += 1
        cap.frames += 1


class Capture:
    """A capture in progress: :meth:`frame` and :meth:`zone` record spans into the trace.

    Create it with :func:`capture`. ``frames`` counts recorded frames;
    ``timing_mode`` / ``timing_reason`` say which clock measured them.
    """

    def __init__(self, ctx: Any, path: str | Path, *, workload: str = "", scene: str = "capture",
                 zones: bool = True, timing: str = "auto", notes: str = "",
                 capture_options: dict[str, Any] | None = None) -> None:
        from harness import probe
        from harness import timing as timing_mod
        from katra_trace.writer import TraceWriter

        session = types.SimpleNamespace(ctx=ctx, backend="external", device=None)
        host = probe.host_info(session)
        self.timing_mode, self.timing_reason = timing_mod.choose_mode(timing, host["gl"])
        options = dict(capture_options or {})
        options.update({"api": "harness.capture", "timing": timing, "zones": bool(zones),
                        "timing_mode": self.timing_mode, "timing_reason": self.timing_reason,
                        "primary_clock": "wall" if self.timing_mode == "sync" else "gpu",
                        "scene": scene})
        self.path = Path(path)
        self.writer = TraceWriter(self.path, workload=workload or scene, capture_options=options,
                                  host_info=host, notes=notes)
        self._buffer = timing_mod.EventBuffer(self.writer)
        try:
            self._timer = timing_mod.make_timer(self.timing_mode, ctx, self.writer, self._buffer, zones=zones)
        except BaseException:
            self.writer.finish({"error": "timer setup failed"}, status="aborted")
            raise
        self._timer.set_scene(scene)
        self._zone = self._timer.zone
        self._in_frame = False
        self._closed = False
        self._next_index = 0
        self.frames = 0
        self.zones = bool(zones)

    def frame(self, warmup: bool = False) -> _FrameSpan:
        """Context manager around one frame; ``as`` gives the frame index (0, 1, ...)."""
        return _FrameSpan(self, int(Flag.WARMUP) if warmup else 0)

    def zone(self, name: str) -> Any:
        """Context manager around a pass or draw inside a frame (a no-op when zones are off)."""
        if not self._in_frame:
            raise ConfigError(f"capture.zone('{name}') must be used inside capture.frame()")
        return self._zone(name)

    def scene(self, name: str) -> None:
        """Attribute the following frames to scene ``name`` (frame indices restart at 0)."""
        if self._in_frame:
            raise ConfigError("capture.scene() cannot be called inside a frame")
        self._timer.settle()
        self._timer.set_scene(name)
        self._next_index = 0

    def annotate(self, record: dict[str, Any]) -> None:
        """Write a JSON annotation into the trace (e.g. a checksum of your output)."""
        self.writer.annotate(dict(record))

    def close(self, status: str = "complete") -> None:
        """Read back pending GPU queries, write the summary and close the trace."""
        if self._closed:
            return
        self._closed = True
        try:
            self._timer.drain()
            self._timer.close()
        finally:
            self.writer.finish({"frames": self.frames, "timing_mode": self.timing_mode,
                                "timing_reason": self.timing_reason, "api": "harness.capture"}, status=status)

    def __enter__(self) -> Capture:
        return self

    def __exit__(self, exc_type: type[BaseException] | None, exc: BaseException | None, tb: Any) -> None:
        if exc_type is None:
            self.close()
            return
        status = "interrupted" if issubclass(exc_type, KeyboardInterrupt) else "aborted"
        self._closed = True
        try:
            with contextlib.suppress(Exception):
                self._timer.drain()  # keep every frame measured before the failure
            with contextlib.suppress(Exception):
                self._timer.close()
        finally:
            self.writer.finish({"frames": self.frames, "error": f"{exc_type.__name__}: {exc}"}, status=status)


def capture(ctx: Any, path: str | Path, *, workload: str = "", scene: str = "capture", zones: bool = True,
            timing: str = "auto", notes: str = "", capture_options: dict[str, Any] | None = None) -> Capture:
    """Start recording frames of your own moderngl code on ``ctx`` into the trace at ``path``.

    ``timing``: auto | sync | gpu (see docs/timing.md). ``zones``: record
    ``zone()`` spans (each also a KHR_debug group). Returns a :class:`Capture`;
    use it as a context manager or call :meth:`Capture.close`.
    """
    return Capture(ctx, path, workload=workload, scene=scene, zones=zones, timing=timing, notes=notes,
                   capture_options=capture_options)


__all__ = ["Capture", "capture"]
