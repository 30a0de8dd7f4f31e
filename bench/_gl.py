"""GL helpers for benches: a plain moderngl loop and katra3d runs, each measured as a frame period.

Both measure the same thing the same way, after the same warmup, on a fresh
EGL context: the periods between the starts of consecutive measured frames
(host clock). A period includes everything done per frame, and nothing done
once per run (context, probe, scene setup, checksum).

The statistic (:func:`frame_period`) is the mean period over the frames
that are not preempted: periods longer than ``OUTLIER_FACTOR`` x the loop's
median are left out, on both sides alike. On a loaded 2-core machine another
process takes the CPU for whole time slices (4-5 ms measured, 8-80 frames of
a small scene); how many of them land in a 0.2 s loop decided the mean more
than the harness did. Work that katra3d does every frame, or periodically
for less than that factor, stays in the mean; the left-out share of each
side is returned too (:class:`FramePeriod`), so a harness cost that made
long frames would show as a larger share on its side.

For a bench that varies a katra3d run (reference draws on/off, a new
option), interleave two :func:`run_frame_period_s` calls::

    base = RunConfig(scenes=("fillrate",), frames=300, size=(320, 180), backend="egl",
                     timing="sync", output=str(ctx.tmp / "a.katra"))
    samples = interleave(
        {"base": lambda: run_frame_period_s(base),
         "new": lambda: run_frame_period_s(dataclasses.replace(base, zones=True))},
        rounds=21,
    )
"""

from __future__ import annotations

import contextlib
import os
import time
from collections.abc import Callable, Iterator, Mapping
from pathlib import Path
from typing import Any, ClassVar

import numpy as np

from bench._core import median_iqr
from katra3d.scenes.api import Frame, Param, Scene

#: Warmup frames before the measured ones (plain loop and the runs built by the overhead bench).
WARMUP = 5
#: A frame period longer than this many times the loop's median counts as preempted (left out).
OUTLIER_FACTOR = 5.0


class FramePeriod(float):
    """A mean frame period in seconds, with ``excluded``: the share of periods left out as
    preempted, and ``whole``: the mean of every period, none left out (s)."""

    excluded: float
    whole: float

    def __new__(cls, seconds: float, excluded: float, whole: float) -> FramePeriod:
        self = super().__new__(cls, seconds)
        self.excluded = excluded
        self.whole = whole
        return self


def frame_period(starts_ns: Any) -> FramePeriod:
    """:class:`FramePeriod` from the start times (ns) of consecutive frames (at least 2)."""
    periods = np.diff(np.sort(np.asarray(starts_ns, dtype=np.int64))).astype(np.float64)
    if len(periods) < 1:
        raise RuntimeError("a frame period needs at least 2 frames")
    kept = periods[periods <= OUTLIER_FACTOR * float(np.median(periods))]
    return FramePeriod(
        float(kept.mean()) / 1e9, 1.0 - len(kept) / len(periods), float(periods.mean()) / 1e9
    )


class Collect:
    """Wraps frame-period variants for :func:`interleave` and keeps each one's excluded shares.

    ``whole``: the variants give the mean of every period (:attr:`FramePeriod.whole`), none left out
    as preempted; otherwise the mean of the kept ones.
    """

    def __init__(self, whole: bool = False) -> None:
        self.excluded: dict[str, list[float]] = {}
        self.whole = whole

    def __call__(self, key: str, fn: Callable[[], FramePeriod]) -> Callable[[], float]:
        shares = self.excluded.setdefault(key, [])

        def call() -> float:
            period = fn()
            shares.append(period.excluded)
            return period.whole if self.whole else period

        return call

    def note(self, key: str) -> str:
        return f"{100 * median_iqr(self.excluded[key])[0]:.1f}%"


class PlainFrame:
    """The cheapest :class:`katra3d.scenes.api.Frame` a hand-written loop would pass (rng made on
    use).
    """

    __slots__ = ("index", "time_s", "zone", "_rng")

    def __init__(self, zone: Callable[[str], Any]) -> None:
        self.index = 0
        self.time_s = 0.0
        self.zone = zone
        self._rng: np.random.Generator | None = None

    @property
    def rng(self) -> np.random.Generator:
        if self._rng is None:
            self._rng = np.random.default_rng([0, self.index])
        return self._rng


class _NoZone:
    def __enter__(self) -> None:
        return None

    def __exit__(self, *exc: object) -> None:
        return None


_NO_ZONE = _NoZone()


def no_zone(name: str) -> _NoZone:
    """A plain loop's ``frame.zone``: does nothing."""
    return _NO_ZONE


class IdleScene(Scene):
    """A frame that draws nothing: ``zones`` empty zones (0: none) and no GL call.

    What is left of such a frame's period is what the frame loop itself costs
    (its clocks, event, frame object, checks and ``glFinish``): the overhead
    benches time it against a plain loop rendering the same scene, and the
    cost per zone as the slope over ``zones``. Spec: :data:`IDLE_SCENE`.
    """

    name = "bench-idle"
    description = "draws nothing: the harness's own per-frame and per-zone cost"
    params: ClassVar[Mapping[str, Param]] = {
        "zones": Param(0, int, 0, 256, "empty zones per frame")
    }

    def setup(self, ctx: Any, size: tuple[int, int], params: Mapping[str, Any]) -> None:
        self.bind_target(ctx, size)
        self.zone_names = tuple(f"z{k}" for k in range(int(params["zones"])))

    def render(self, frame: Frame) -> None:
        zone = frame.zone
        for name in self.zone_names:
            with zone(name):
                pass


#: The scene spec of :class:`IdleScene` (``module:Class``), for RunConfig and :func:`new_scene`.
IDLE_SCENE = f"{__name__}:IdleScene"


def egl_context() -> Any:
    """A plain moderngl standalone EGL context; BackendUnavailable (exit 3) when there is none."""
    # katra3d.capture's probe resolves raw GL calls through PyOpenGL: EGL, as the harness does
    # headless.
    os.environ.setdefault("PYOPENGL_PLATFORM", "egl")
    from katra_trace.errors import BackendUnavailable

    try:
        import moderngl

        kwargs: dict[str, Any] = {"backend": "egl", "require": 330}
        return moderngl.create_standalone_context(**kwargs)
    except Exception as exc:  # noqa: BLE001 - glcontext raises plain Exception
        raise BackendUnavailable(f"no OpenGL context through EGL: {exc}") from None


def renderer() -> str:
    """GL_RENDERER of a plain EGL context (what the benches measured on)."""
    gl = egl_context()
    try:
        return str(gl.info.get("GL_RENDERER", ""))
    finally:
        gl.release()


def new_scene(
    ctx: Any, name: str, size: tuple[int, int], params: dict[str, Any] | None = None
) -> Any:
    """Built-in or user scene ``name``, set up on ``ctx`` at ``size`` (the
    framebuffer bound now)."""
    from katra3d.scenes.registry import get_scene, resolve_params

    cls = get_scene(name)
    scene = cls()
    scene.setup(ctx, size, resolve_params(cls, params or {}))
    return scene


@contextlib.contextmanager
def _scene_on_fresh_context(
    name: str, size: tuple[int, int], params: dict[str, Any] | None
) -> Iterator[tuple[Any, Any]]:
    """(context, scene): scene ``name`` set up on a fresh EGL context with an RGBA framebuffer of
    ``size`` bound; scene, framebuffer and context are released afterwards."""
    ctx = egl_context()
    try:
        fbo = ctx.simple_framebuffer(size, components=4)
        fbo.use()
        scene = new_scene(ctx, name, size, params)
        try:
            yield ctx, scene
        finally:
            scene.release()
            fbo.release()
    finally:
        ctx.release()


def capture_frame_period_s(
    name: str,
    size: tuple[int, int],
    frames: int,
    path: Path,
    warmup: int = WARMUP,
    params: dict[str, Any] | None = None,
) -> FramePeriod:
    """:func:`frame_period` of the plain loop's frames inside ``katra3d.capture`` frame spans
    (``sync`` timing, zones off) on a fresh context, the trace written to ``path`` (replaced)."""
    import katra3d

    with (
        _scene_on_fresh_context(name, size, params) as (ctx, scene),
        katra3d.capture(ctx, path, scene=name, zones=False, timing="sync", overwrite=True) as cap,
    ):
        render, frame, span = scene.render, PlainFrame(cap.zone), cap.frame
        for i in range(warmup):
            with span(warmup=True):
                frame.index, frame.time_s = i, i / 60.0
                render(frame)
        pc = time.perf_counter_ns
        starts: list[int] = []
        mark = starts.append
        for i in range(warmup, warmup + frames):
            mark(pc())
            with span():
                frame.index, frame.time_s, frame._rng = i, i / 60.0, None
                render(frame)
    return frame_period(starts)


def plain_frame_period_s(
    name: str,
    size: tuple[int, int],
    frames: int,
    warmup: int = WARMUP,
    params: dict[str, Any] | None = None,
) -> FramePeriod:
    """:func:`frame_period` of a plain moderngl loop (``render`` + ``glFinish``) on a fresh context
    (``params``: the scene's, by key; its defaults otherwise)."""
    with _scene_on_fresh_context(name, size, params) as (ctx, scene):
        render, finish, frame = scene.render, ctx.finish, PlainFrame(no_zone)
        for i in range(warmup):
            frame.index, frame.time_s = i, i / 60.0
            render(frame)
            finish()
        pc = time.perf_counter_ns
        starts: list[int] = []
        mark = starts.append
        for i in range(warmup, warmup + frames):
            mark(pc())
            frame.index, frame.time_s, frame._rng = i, i / 60.0, None
            render(frame)
            finish()
    return frame_period(starts)


def run_wall_frames(config: Any) -> np.ndarray:
    """The measured wall-clock FRAME events of ``katra3d.harness.run.runner.run(config)`` (one
    scene), read from the trace it wrote, which is deleted afterwards.

    ``config`` is a ``RunConfig`` with ``timing="sync"`` and an ``output`` path.
    """
    from katra3d.harness.run.runner import run
    from katra_trace import Clock, Flag, Kind, open_trace

    result = run(config, quiet=True)
    try:
        ev = open_trace(result.path).events
    finally:
        Path(result.path).unlink(missing_ok=True)
    sel: np.ndarray = ev[
        (ev["kind"] == int(Kind.FRAME))
        & (ev["clock"] == int(Clock.WALL))
        & ((ev["flags"] & int(Flag.WARMUP)) == 0)
    ]
    return sel


def run_frame_period_s(config: Any) -> FramePeriod:
    """:func:`frame_period` of ``katra3d.harness.run.runner.run(config)``, from the frame starts in
    the trace it wrote (:func:`run_wall_frames`)."""
    sel = run_wall_frames(config)
    if config.frames is not None and len(sel) != config.frames:
        raise RuntimeError(
            f"the run wrote {len(sel)} measured wall-clock frames, not {config.frames}"
        )
    if len(sel) < 2:
        raise RuntimeError("the run wrote fewer than 2 measured wall-clock frames")
    return frame_period(sel["start_ns"])


__all__ = [
    "IDLE_SCENE",
    "OUTLIER_FACTOR",
    "WARMUP",
    "FramePeriod",
    "IdleScene",
    "PlainFrame",
    "egl_context",
    "frame_period",
    "new_scene",
    "no_zone",
    "plain_frame_period_s",
    "renderer",
    "run_frame_period_s",
    "run_wall_frames",
]
