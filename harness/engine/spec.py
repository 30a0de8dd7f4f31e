"""What the capture engine is asked to do, as plain records (no GL, no I/O): one capture
(:class:`CaptureSpec`) and one scene in it (:class:`SceneSpec`).

Runtime collaborators (GL context, writer override, stop flag, binder, progress) travel beside a
spec, not in it."""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from katra_trace.io.header import CaptureOptions, HostInfo


@dataclasses.dataclass(frozen=True)
class CaptureSpec:
    """One capture into one trace: where it goes, what its header records, how frames are timed.

    ``path`` is None only when the engine is given a writer. ``options`` are completed by the engine
    (timing mode and reason, primary clock, ``measure``, ``zones``). ``zones``: True/"passes",
    "draws", False/"off"; ``max_draw_zones``: most draws timed a frame (None: all).
    ``reference_every``: the reference draw after every K-th measured frame (sync only; 0: off).
    ``failed_aside``: an aborted capture goes to ``NAME.failed.katra``, never to ``path`` (it would
    block the rerun)."""

    path: Path | None
    workload: str
    host: HostInfo = dataclasses.field(default_factory=HostInfo)
    options: CaptureOptions = dataclasses.field(default_factory=CaptureOptions)
    timing: str = "auto"
    zones: bool | str = False
    max_draw_zones: int | None = None
    notes: str = ""
    reference_every: int = 0
    overwrite: bool = False
    codec: str | None = None
    gl_error_check: bool = True
    failed_aside: bool = False


@dataclasses.dataclass(frozen=True)
class SceneSpec:
    """One scene to run on an engine: which, with what, for how long, and what to keep.

    ``size`` in pixels; ``frames`` None measures for ``duration_s`` seconds. ``warmup`` frames are
    flagged WARMUP (uncounted in a counted run). ``keep_image`` keeps the last frame in the trace
    only when all ``frames`` were rendered (never for a duration run, whose last frame depends on
    speed). ``index``/``total``: position in the run for progress."""

    scene_cls: type
    label: str
    params: Mapping[str, Any]
    size: tuple[int, int]
    frames: int | None
    warmup: int
    duration_s: float | None = None
    seed: int = 0
    spec: str = ""
    read_image: bool = True
    keep_image: bool = False
    screenshot: Path | None = None
    overwrite: bool = False  # screenshot may replace a file (``run --force``)
    index: int = 1
    total: int = 1

    @property
    def total_frames(self) -> int | None:
        """Warmup + measured frames, or None for a duration run."""
        return self.frames + self.warmup if self.frames is not None else None


__all__ = ["CaptureSpec", "SceneSpec"]
