"""What the capture engine is asked to do, as plain records (no GL, no I/O); runtime collaborators
(context, stop flag, progress) travel beside a spec, not in it."""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping
from pathlib import Path

from katra3d.scenes.api import ParamValue
from katra_trace.io.header import CaptureOptions, HostInfo


@dataclasses.dataclass(frozen=True)
class CaptureSpec:
    """One capture into one trace (``path`` None only with a given writer). ``failed_aside``: an
    aborted capture goes to ``NAME.failed.katra``, where it does not block the rerun."""

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
    """One scene on an engine; ``size`` in pixels, ``frames`` None measures for ``duration_s``.
    ``keep_image`` only when all ``frames`` ran (a duration run's last frame depends on speed)."""

    scene_cls: type
    label: str
    params: Mapping[str, ParamValue]
    size: tuple[int, int]
    frames: int | None
    warmup: int
    duration_s: float | None = None
    seed: int = 0
    spec: str = ""
    read_image: bool = True
    keep_image: bool = False
    screenshot: Path | None = None
    overwrite: bool = False  # of the screenshot
    index: int = 1
    total: int = 1

    @property
    def total_frames(self) -> int | None:
        return self.frames + self.warmup if self.frames is not None else None


__all__ = ["CaptureSpec", "SceneSpec"]
