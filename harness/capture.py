"""``katra3d.capture``: time your own moderngl renderer into a trace (docs/pytest.md), through the
same engine as ``katra3d run``. The context is untouched except that ``sync`` frames end with
``glFinish``."""

from __future__ import annotations

import types
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import numpy as np

from katra_trace.errors import ConfigError
from katra_trace.io.header import build_capture_options
from katra_trace.io.images import check_pixels, decode_png, frame_record
from katra_trace.jsontext import JsonValue
from katra_trace.schema import Flag

DEFAULT_SCENE = "capture"


class _FrameSpan:
    """:meth:`Capture.frame`'s context manager, one per flag value."""

    __slots__ = ("cap", "flags", "begin", "end")

    def __init__(self, cap: Capture, flags: int) -> None:
        self.cap = cap
        self.flags = flags
        engine = cap.engine
        # looked up once: two Python calls less per frame
        self.begin = engine.frame_begin
        self.end = engine.end_frame

    def __enter__(self) -> int:
        cap = self.cap
        if cap._in_frame or cap._closed:
            if cap._in_frame:
                raise ConfigError("capture.frame() cannot be nested: end the current frame first")
            raise ConfigError("capture is finished: no more frames can be recorded")
        cap._in_frame = True
        index = cap._next_index
        self.begin(index, self.flags)
        return index

    def __exit__(self, exc_type: object, exc: object, tb: object) -> None:
        cap = self.cap
        cap._in_frame = False
        cap._next_index += 1
        cap.frames += 1
        self.end()


class Capture:
    """A capture in progress (see :func:`capture`); ``timing_mode``/``timing_reason`` say which
    clock measured it."""

    def __init__(
        self,
        ctx: Any,
        path: str | Path,
        *,
        workload: str = "",
        scene: str = "",
        zones: bool | str = True,
        timing: str = "auto",
        notes: str = "",
        capture_options: Mapping[str, JsonValue] | None = None,
        overwrite: bool = False,
        max_draw_zones: int | None = None,
    ) -> None:
        # deferred: `import katra3d` stays light
        from katra3d.harness.engine.spec import CaptureSpec
        from katra3d.harness.gl import probe
        from katra3d.harness.run.pipeline import open_engine
        from katra3d.scenes.registry import TRACE_SUFFIX

        traced = next(
            (str(x) for x in (path, scene, workload) if str(x).endswith(TRACE_SUFFIX)), None
        )
        if traced is not None:
            raise ConfigError(
                f"katra3d.capture times frames this process draws on ctx into a .katra file; "
                f"'{traced}' is an apitrace trace: replay it with `katra3d run {traced}` or the "
                f"pytest fixture katra_scene('{traced}') (docs/replay.md)"
            )
        scene = scene or workload or DEFAULT_SCENE
        session = types.SimpleNamespace(ctx=ctx, backend="external", device=None)
        host = probe.host_info(session)
        options = build_capture_options(
            capture_options, api="katra3d.capture", fixed={"timing": timing, "scene": scene}
        )
        self.path = Path(path)
        spec = CaptureSpec(
            self.path,
            workload or scene,
            host=host,
            options=options,
            timing=timing,
            zones=zones,
            notes=notes,
            overwrite=overwrite,
            max_draw_zones=max_draw_zones,
        )
        self.engine = open_engine(ctx, spec)
        self.timing_mode = self.engine.mode
        self.timing_reason = self.engine.reason
        self.writer = self.engine.writer
        self.engine.set_scene(scene)
        self._zone = self.engine.frame_zone
        self._in_frame = False
        self._closed = False
        self._next_index = 0
        self.frames = 0
        self.zones = self.engine.zones
        self._spans = (_FrameSpan(self, 0), _FrameSpan(self, int(Flag.WARMUP)))

    def frame(self, warmup: bool = False) -> _FrameSpan:
        """Context manager around one frame; ``as`` gives its index."""
        return self._spans[1 if warmup else 0]

    def zone(self, name: str) -> Any:
        """Context manager around a pass inside a frame (no-op when zones are off)."""
        if not self._in_frame:
            raise ConfigError(f"capture.zone('{name}') must be used inside capture.frame()")
        return self._zone(name)

    def scene(self, name: str) -> None:
        """Attribute the following frames to scene ``name`` (frame indices restart at 0)."""
        if self._in_frame:
            raise ConfigError("capture.scene() cannot be called inside a frame")
        self.engine.timer.settle()
        self.engine.set_scene(name)
        self._next_index = 0

    def keep_image(
        self, image: np.ndarray | bytes, *, frame: int | None = None, time_s: float = 0.0
    ) -> str:
        """Keep a frame's image (H, W, 3|4 uint8, row 0 on top, or PNG bytes) in the trace, between
        frames; returns its SHA-256 hex. ``frame`` defaults to the last recorded."""
        if self._closed:
            raise ConfigError("capture is finished: no more images can be kept")
        if self._in_frame:
            raise ConfigError(
                "capture.keep_image() is called between frames, not inside capture.frame()"
            )
        index = self._next_index - 1 if frame is None else int(frame)
        if index < 0:
            raise ConfigError(
                "capture.keep_image(): no frame recorded yet in this scene (or give frame=N >= 0)"
            )
        try:
            pixels = (
                decode_png(image) if isinstance(image, (bytes, bytearray)) else check_pixels(image)
            )
        except ValueError as exc:
            raise ConfigError(f"capture.keep_image(): {exc}") from None
        meta, png = frame_record(
            self.engine.scene_label, index, float(time_s), pixels, self.engine.image_key
        )
        self.writer.image(meta, png)
        return str(meta["sha256"])

    def annotate(self, record: Mapping[str, JsonValue]) -> None:
        """Write a JSON annotation into the trace."""
        self.writer.annotate(dict(record))

    def close(self, status: str = "complete") -> None:
        if self._closed:
            return
        self._closed = True
        self.engine.finish(status, {"frames": self.frames, "api": "katra3d.capture"})

    def __enter__(self) -> Capture:
        return self

    def __exit__(
        self, exc_type: type[BaseException] | None, exc: BaseException | None, tb: Any
    ) -> None:
        if exc_type is None:
            self.close()
            return
        self._closed = True
        self.engine.abort(exc)


def capture(
    ctx: Any,
    path: str | Path,
    *,
    workload: str = "",
    scene: str = "",
    zones: bool | str = True,
    timing: str = "auto",
    notes: str = "",
    capture_options: Mapping[str, JsonValue] | None = None,
    overwrite: bool = False,
    max_draw_zones: int | None = None,
) -> Capture:
    """Record frames drawn on ``ctx`` into ``path`` (OutputExistsError unless ``overwrite``).
    ``zones``: True/"passes", "draws", False/"off"; ``timing``: auto|sync|gpu (docs/timing.md)."""
    return Capture(
        ctx,
        path,
        workload=workload,
        scene=scene,
        zones=zones,
        timing=timing,
        notes=notes,
        capture_options=capture_options,
        overwrite=overwrite,
        max_draw_zones=max_draw_zones,
    )


__all__ = ["Capture", "DEFAULT_SCENE", "capture"]
