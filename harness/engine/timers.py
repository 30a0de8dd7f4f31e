"""Frame timers: ``sync`` (glFinish per frame, host clocks) and ``gpu`` (GL_TIMESTAMP query ring,
read back without blocking). ``auto`` picks ``sync`` on software renderers, whose timer queries do
not time the draw. See docs/timing.md."""

from __future__ import annotations

import collections
import ctypes
import time
from collections.abc import Callable
from typing import Any

from katra3d.harness.engine.events import FRAME_NAME, EventBuffer, pack_frame
from katra3d.harness.gl.shim import (
    GL_DEBUG_SOURCE_APPLICATION,
    GL_MAX_DEBUG_MESSAGE_LENGTH,
    GL_QUERY_RESULT,
    GL_QUERY_RESULT_AVAILABLE,
    GL_TIMESTAMP,
    RawGL,
)
from katra_trace.errors import ConfigError
from katra_trace.io.header import GLInfo
from katra_trace.metrics import MODE_CLOCKS
from katra_trace.schema import Clock, Kind

MODES: tuple[str, ...] = ("auto", "gpu", "sync")


RING_QUERIES = 2048

INTERVAL_NAME = "frame_interval_ns"

_FRAME = int(Kind.FRAME)
_ZONE = int(Kind.ZONE)
_COUNTER = int(Kind.COUNTER)
_CPU = int(Clock.CPU)
_WALL = int(Clock.WALL)
_GPU = int(Clock.GPU)

_pc = time.perf_counter_ns
# CPU time of every thread (a software rasterizer's too)
_process_ns = time.clock_gettime_ns
_PROCESS_CLOCK = time.CLOCK_PROCESS_CPUTIME_ID


def choose_mode(requested: str, gl: GLInfo) -> tuple[str, str]:
    """The timing mode to use and why; ConfigError for ``gpu`` on a software renderer or without
    timer queries."""
    if requested not in MODES:
        raise ConfigError(f"unknown timing mode '{requested}'; choose one of: {', '.join(MODES)}")
    renderer = gl.renderer if gl.renderer is not None else "?"
    software = bool(gl.software_renderer)
    timer = bool(gl.timer_query.supported)
    if requested == "sync":
        return "sync", "requested with --timing sync"
    if requested == "gpu":
        if software:
            raise ConfigError(
                f"--timing gpu: '{renderer}' is a software renderer whose timer queries do not "
                "time the draw (llvmpipe stamps one 64x64 tile); use --timing sync or auto"
            )
        if not timer:
            raise ConfigError(
                f"--timing gpu: '{renderer}' has no GL_TIMESTAMP queries; use --timing sync"
            )
        return "gpu", "requested with --timing gpu"
    if software:
        return "sync", (
            f"software renderer '{renderer}': its timer queries do not time the draw, "
            "so frames end with glFinish and are timed on the host clock"
        )
    if not timer:
        return "sync", f"'{renderer}' has no GL_TIMESTAMP queries"
    return "gpu", (
        f"hardware renderer '{renderer}' with {gl.timer_query.counter_bits or 0}-bit "
        "timestamp queries"
    )


class _NullZone:
    __slots__ = ()

    def __enter__(self) -> None:
        return None

    def __exit__(self, *exc: object) -> None:
        return None


NULL_ZONE = _NullZone()


def no_zone(name: str) -> _NullZone:
    """``zone()`` when zones are off: no timing, no allocation."""
    return NULL_ZONE


class Timer:
    """Base of the frame timers; measured frames' :attr:`primary_clock` durations collect in
    ``frame_ns`` (reset by ``set_scene``)."""

    mode: str = ""
    primary_clock: Clock = Clock.WALL

    def __init__(self, ctx: Any, writer: Any, buffer: EventBuffer, *, zones: bool = False) -> None:
        self.ctx = ctx
        self.writer = writer
        self.buffer = buffer
        self.add = buffer.add
        self._add_frame = buffer.add_frame
        self._maybe_flush = buffer.maybe_flush
        self.origin_ns = int(writer.start_host_ns)
        self.zones = zones
        self.finish = ctx.finish
        self.debug = bool(getattr(ctx, "supports_debug_scopes", False)) and zones
        mglo = ctx.mglo
        self._push = mglo.push_debug_scope if self.debug else None
        self._pop = mglo.pop_debug_scope if self.debug else None
        self._label_bytes = (
            max(0, RawGL().get_integer(GL_MAX_DEBUG_MESSAGE_LENGTH) - 1) if self.debug else 0
        )
        self._labels: dict[str, str] = {}
        self._names: dict[str, int] = {}
        self.frame_name = writer.intern(FRAME_NAME)
        self.scene_id = 0
        self.frame_index = 0
        self.flags = 0
        self.depth = 0
        self.frame_ns: list[int] = []
        self._frame_ns_add = self.frame_ns.append
        self.zone: Callable[[str], Any] = self._zone if zones else no_zone

    def name_id(self, name: str) -> int:
        sid = self._names.get(name)
        if sid is None:
            sid = self._names[name] = self.writer.intern(name)
        return sid

    def debug_label(self, name: str) -> str:
        """``name`` cut UTF-8-safely to the driver's debug message limit (beyond it GL raises
        GL_INVALID_VALUE)."""
        label = self._labels.get(name)
        if label is None:
            data = name.encode("utf-8", "backslashreplace")[: self._label_bytes]
            label = self._labels[name] = data.decode("utf-8", "ignore")
        return label

    def set_scene(self, name: str) -> int:
        self.scene_id = self.writer.intern(name)
        self.frame_ns = []
        self._frame_ns_add = self.frame_ns.append
        return self.scene_id

    def now_ns(self) -> int:
        return _pc() - self.origin_ns

    def _zone(self, name: str) -> Any:  # pragma: no cover - overridden
        raise NotImplementedError

    def begin_frame(self, index: int, flags: int = 0) -> None:  # pragma: no cover - overridden
        raise NotImplementedError

    def end_frame(self) -> None:  # pragma: no cover - overridden
        raise NotImplementedError

    def settle(self) -> None:
        """Read back every pending measurement of the current scene (blocks)."""

    def drain(self) -> None:
        self.settle()
        self.buffer.flush()

    def close(self) -> None:
        pass


class _SyncZone:
    __slots__ = ("timer", "name", "name_id", "depth", "t0")

    def __init__(self, timer: SyncTimer, name: str) -> None:
        self.timer = timer
        self.name = name
        self.name_id = timer.name_id(name)

    def __enter__(self) -> None:
        t = self.timer
        t.finish()  # earlier work of the frame is not this zone's
        t.depth += 1
        self.depth = t.depth
        if t._push is not None:
            t._push(GL_DEBUG_SOURCE_APPLICATION, 0, t.debug_label(self.name))
        self.t0 = _pc()

    def __exit__(self, *exc: object) -> None:
        t = self.timer
        t_sub = _pc()
        t.finish()
        t1 = _pc()
        if t._pop is not None:
            t._pop()
        t.depth -= 1
        start = self.t0 - t.origin_ns
        add = t.add
        add(
            (
                _ZONE,
                _CPU,
                t.flags,
                self.depth,
                t.scene_id,
                self.name_id,
                t.frame_index,
                start,
                t_sub - self.t0,
                0.0,
            )
        )
        add(
            (
                _ZONE,
                _WALL,
                t.flags,
                self.depth,
                t.scene_id,
                self.name_id,
                t.frame_index,
                start,
                t1 - self.t0,
                0.0,
            )
        )


class SyncTimer(Timer):
    """Mode ``sync``: glFinish at the end of each frame (and zone); host clock."""

    mode = "sync"
    primary_clock = MODE_CLOCKS[mode]

    def _zone(self, name: str) -> _SyncZone:
        return _SyncZone(self, name)

    c1 = 0

    def begin_frame(self, index: int, flags: int = 0) -> None:
        self.frame_index = index
        self.flags = flags
        self.c0 = _process_ns(_PROCESS_CLOCK)
        self.t0 = _pc()

    def continue_frame(self, index: int, flags: int = 0) -> None:
        """:meth:`begin_frame` reusing the last frame's end on the process clock (one read per
        boundary)."""
        self.frame_index = index
        self.flags = flags
        self.c0 = self.c1
        self.t0 = _pc()

    def end_frame(self) -> None:
        t_sub = _pc()
        self.finish()
        t1 = _pc()
        self.c1 = c1 = _process_ns(_PROCESS_CLOCK)
        flags = self.flags
        self._add_frame(
            pack_frame(self.t0, t_sub, t1, c1 - self.c0, self.frame_index, flags, self.scene_id)
        )
        if not flags:
            self._frame_ns_add(t1 - self.t0)
        self._maybe_flush(t1)


class _GpuZone:
    __slots__ = ("timer", "name", "name_id", "depth", "q0", "t0")

    def __init__(self, timer: GpuTimer, name: str) -> None:
        self.timer = timer
        self.name = name
        self.name_id = timer.name_id(name)

    def __enter__(self) -> None:
        t = self.timer
        t.depth += 1
        self.depth = t.depth
        if t._push is not None:
            t._push(GL_DEBUG_SOURCE_APPLICATION, 0, t.debug_label(self.name))
        self.q0 = t._stamp()
        self.t0 = _pc()

    def __exit__(self, *exc: object) -> None:
        t = self.timer
        q1 = t._stamp()
        t_sub = _pc()
        if t._pop is not None:
            t._pop()
        t.depth -= 1
        t._spans.append(
            (_ZONE, t.flags, self.depth, t.scene_id, self.name_id, t.frame_index, self.q0, q1)
        )
        t.add(
            (
                _ZONE,
                _CPU,
                t.flags,
                self.depth,
                t.scene_id,
                self.name_id,
                t.frame_index,
                self.t0 - t.origin_ns,
                t_sub - self.t0,
                0.0,
            )
        )


class GpuTimer(Timer):
    """Mode ``gpu``: GL_TIMESTAMP queries from a preallocated ring, read back without blocking."""

    mode = "gpu"
    primary_clock = MODE_CLOCKS[mode]

    def __init__(
        self,
        ctx: Any,
        writer: Any,
        buffer: EventBuffer,
        *,
        zones: bool = False,
        ring_queries: int = RING_QUERIES,
    ) -> None:
        super().__init__(ctx, writer, buffer, zones=zones)
        self.gl = RawGL()
        self._all_queries = self.gl.gen_queries(ring_queries)
        self._free: list[int] = list(reversed(self._all_queries))
        self._qc = self.gl.query_counter
        self._spans: list[tuple[int, ...]] = []
        self._pending: collections.deque[tuple[int, list[tuple[int, ...]]]] = collections.deque()
        self._avail = ctypes.c_int(0)
        self._avail_ref = ctypes.byref(self._avail)
        self._result = ctypes.c_uint64(0)
        self._result_ref = ctypes.byref(self._result)
        self.interval_name = writer.intern(INTERVAL_NAME)
        self._prev_t0: int | None = None
        self._host0, self._gpu0 = self.calibrate("start")
        self.max_lag_frames = 0

    def calibrate(self, label: str, samples: int = 5) -> tuple[int, int]:
        """The tightest of ``samples`` (host, GPU) ns clock pairs, written as CLOCK_SYNC."""
        out = ctypes.c_int64(0)
        ref = ctypes.byref(out)
        best: tuple[int, int, int] | None = None
        for _ in range(samples):
            h0 = _pc()
            self.gl.get_integer64v(GL_TIMESTAMP, ref)
            h1 = _pc()
            if best is None or h1 - h0 < best[2]:
                best = ((h0 + h1) // 2, int(out.value), h1 - h0)
        assert best is not None
        host_ns = best[0] - self.origin_ns
        self.writer.clock_sync(
            {
                "label": label,
                "host_ns": host_ns,
                "gpu_ns": best[1],
                "uncertainty_ns": best[2] // 2,
                "method": "glGetInteger64v(GL_TIMESTAMP) between two perf_counter_ns reads",
            }
        )
        return host_ns, best[1]

    def _stamp(self) -> int:
        free = self._free
        if not free:
            self._refill()
        q = free.pop()
        self._qc(q, GL_TIMESTAMP)
        return q

    def _refill(self) -> None:
        """Read back what has finished (no wait); grow the ring if that frees nothing."""
        self._poll(block=False)
        if not self._free:
            more = self.gl.gen_queries(max(256, len(self._all_queries) // 2))
            self._all_queries.extend(more)
            self._free.extend(more)

    def _read(self, q: int) -> int:
        self.gl.get_query_ui64v(q, GL_QUERY_RESULT, self._result_ref)
        return int(self._result.value)

    def _emit(self, spans: list[tuple[int, ...]]) -> None:
        add = self.add
        offset = self._host0 - self._gpu0
        free = self._free
        for kind, flags, depth, scene, name, frame, q0, q1 in spans:
            g0 = self._read(q0)
            g1 = self._read(q1)
            free.append(q0)
            free.append(q1)
            dur = g1 - g0
            add((kind, _GPU, flags, depth, scene, name, frame, g0 + offset, dur, 0.0))
            if kind == _FRAME and not flags and scene == self.scene_id:
                self.frame_ns.append(dur)

    def _poll(self, block: bool = False) -> None:
        pending = self._pending
        while pending:
            end_q, spans = pending[0]
            if not block:
                self.gl.get_query_iv(end_q, GL_QUERY_RESULT_AVAILABLE, self._avail_ref)
                if not self._avail.value:
                    break
            pending.popleft()
            self._emit(spans)
            if block:
                break
        if len(pending) > self.max_lag_frames:
            self.max_lag_frames = len(pending)

    def _zone(self, name: str) -> _GpuZone:
        return _GpuZone(self, name)

    def set_scene(self, name: str) -> int:
        self.settle()
        self._prev_t0 = None
        return super().set_scene(name)

    def begin_frame(self, index: int, flags: int = 0) -> None:
        self.frame_index = index
        self.flags = flags
        self._spans = []
        self._q0 = self._stamp()
        self.t0 = _pc()

    def end_frame(self) -> None:
        q1 = self._stamp()
        t_sub = _pc()
        t0 = self.t0
        start = t0 - self.origin_ns
        add = self.add
        add(
            (
                _FRAME,
                _CPU,
                self.flags,
                0,
                self.scene_id,
                self.frame_name,
                self.frame_index,
                start,
                t_sub - t0,
                0.0,
            )
        )
        if self._prev_t0 is not None:
            add(
                (
                    _COUNTER,
                    _CPU,
                    self.flags,
                    0,
                    self.scene_id,
                    self.interval_name,
                    self.frame_index,
                    start,
                    0,
                    float(t0 - self._prev_t0),
                )
            )
        self._prev_t0 = t0
        spans = self._spans
        spans.append(
            (_FRAME, self.flags, 0, self.scene_id, self.frame_name, self.frame_index, self._q0, q1)
        )
        self._pending.append((q1, spans))
        self._poll()
        self.buffer.maybe_flush(t_sub)

    def settle(self) -> None:
        if self._pending:
            self.finish()
            while self._pending:
                self._emit(self._pending.popleft()[1])

    def drain(self) -> None:
        super().drain()
        self.calibrate("end")

    def close(self) -> None:
        self.settle()
        self.gl.delete_queries(self._all_queries)
        self._all_queries = []
        self._free = []


ZONE_MODES: tuple[str, ...] = ("off", "passes", "draws")


def zone_mode(value: bool | str | None) -> str:
    """``--zones`` as one of :data:`ZONE_MODES` (True/False: passes/off)."""
    if value is None or value is False:
        return "off"
    if value is True:
        return "passes"
    mode = str(value).strip().lower()
    if mode not in ZONE_MODES:
        raise ConfigError(f"unknown --zones '{value}'; choose one of: {', '.join(ZONE_MODES)}")
    return mode


def make_timer(
    mode: str, ctx: Any, writer: Any, buffer: EventBuffer, *, zones: bool = False
) -> Timer:
    if mode == "sync":
        return SyncTimer(ctx, writer, buffer, zones=zones)
    if mode == "gpu":
        return GpuTimer(ctx, writer, buffer, zones=zones)
    raise ConfigError(f"timing mode must be resolved to 'sync' or 'gpu', got '{mode}'")


__all__ = [
    "GpuTimer",
    "INTERVAL_NAME",
    "MODES",
    "NULL_ZONE",
    "SyncTimer",
    "ZONE_MODES",
    "Timer",
    "choose_mode",
    "make_timer",
    "no_zone",
    "zone_mode",
]
