"""What the capture engine is asked to do, as data: one capture, and one scene in it.

:class:`CaptureSpec` is everything that shapes a trace (its path, header and how its frames are
measured); the :class:`~katra3d.harness.engine.core.Engine` takes one, whichever way of capturing
built it (``katra3d run``, ``katra3d.capture``, the pytest plugin, the offscreen helper).
:class:`SceneSpec` is one scene to run on that engine (:mod:`katra3d.harness.engine.lifecycle`).
Both are plain records: no GL, no I/O. What the header records is typed
(:mod:`katra_trace.io.header`'s records); only a scene's own params are a mapping. Runtime
collaborators (the GL context, a writer override, the stop flag, the framebuffer binder, the
progress display) are not part of a spec: they are passed beside it.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from katra_trace.io.header import CaptureOptions, HostInfo


@dataclasses.dataclass(frozen=True)
class CaptureSpec:
    """One capture into one trace: where it goes, what its header records, how frames are measured.

    ``path``: the trace file (None only when the engine is given a writer, e.g.
    an in-memory sink). ``workload`` and ``notes`` go to the trace header as
    they are. ``host``: the probe's host info (its ``gl`` part picks the
    timing mode). ``options``: the capture options to record
    (:func:`katra_trace.io.header.build_capture_options`); the engine adds
    the timing mode, its reason, the primary clock, ``measure`` and ``zones``.
    ``timing``: auto | sync | gpu. ``zones``: True/"passes", "draws",
    False/"off". ``max_draw_zones``: with draws zones, the most draws timed a frame (None: all).
    How frames are measured (timed or counted) is the engine's measurer, not the spec's
    (:mod:`katra3d.harness.engine.measurer`). ``reference_every``: time
    the reference draw after every K-th measured frame (sync timing only; 0: off). ``overwrite``:
    replace an existing trace. ``codec``: the writer's event codec (None: its default).
    ``gl_error_check``: check ``glGetError`` after setup and after every frame. ``failed_aside``: an
    aborted capture never goes to ``path`` (``katra3d run``: it would block the rerun): its measured
    frames go to ``NAME.failed.katra``, or nothing is kept (TraceWriter's option).
    """

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

    ``scene_cls``: the Scene class (instantiated once, by the lifecycle). ``label``: the scene's
    name in the trace. ``params``: its resolved parameters. ``size``: framebuffer (width, height) in
    pixels. ``frames``: measured frames, or None to measure for ``duration_s`` seconds (None with
    both: no measured frames). ``warmup``: frames rendered first, recorded and flagged WARMUP (a
    counted run renders them uncounted, with no events). ``seed``: the run seed of the frames' RNG.
    ``spec``: the scene as the user named it (recorded in the scene annotation). ``read_image``:
    read the last frame back and record its checksum; ``keep_image``: also keep it in the trace (an
    IMAGE block, :mod:`katra_trace.io.images`) when the scene rendered all of its ``frames`` (never
    for a ``duration_s`` run, whose last frame depends on speed); ``screenshot``: also save it as
    this PNG. ``index``/``total``: the scene's position in the run, for progress lines
    ("[index/total]").
    """

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
    overwrite: bool = False  #: the screenshot may replace an existing file (``run --force``)
    index: int = 1
    total: int = 1

    @property
    def total_frames(self) -> int | None:
        """Warmup + measured frames, or None when the scene is measured for a duration."""
        return self.frames + self.warmup if self.frames is not None else None


__all__ = ["CaptureSpec", "SceneSpec"]
