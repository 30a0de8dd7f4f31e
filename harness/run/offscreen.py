"""Run a scene into an offscreen framebuffer with no trace file: the capture engine in ``sync``
mode with an in-memory sink (same frame loop as ``katra3d run``)."""

from __future__ import annotations

import dataclasses
import time
from collections.abc import Mapping
from typing import Any

import numpy as np

from katra3d.harness.engine.lifecycle import run_scene
from katra3d.harness.engine.spec import CaptureSpec, SceneSpec
from katra3d.harness.run.pipeline import open_engine
from katra3d.scenes.api import ParamValue, SceneSkip
from katra3d.scenes.registry import resolve_params
from katra_trace.errors import SceneError
from katra_trace.io.header import CaptureOptions
from katra_trace.jsontext import JsonObject, JsonValue


class MemorySink:
    """A TraceWriter stand-in keeping everything in memory."""

    def __init__(self) -> None:
        self.start_host_ns = time.perf_counter_ns()
        self.strings: list[str] = [""]
        self._ids: dict[str, int] = {"": 0}
        self.arrays: list[Any] = []
        self.annotations: list[JsonObject] = []
        self.images: list[tuple[JsonObject, bytes]] = []
        self.finished = False
        self.status = ""
        self.summary: JsonObject = {}

    def intern(self, name: str) -> int:
        sid = self._ids.get(name)
        if sid is None:
            sid = self._ids[name] = len(self.strings)
            self.strings.append(name)
        return sid

    def append_array(self, arr: Any) -> None:
        self.arrays.append(arr.copy())

    def annotate(self, record: Mapping[str, JsonValue]) -> None:
        self.annotations.append(dict(record))

    def image(self, meta: Mapping[str, JsonValue], png: bytes) -> None:
        self.images.append((dict(meta), bytes(png)))

    def clock_sync(self, record: Mapping[str, JsonValue]) -> None:
        self.annotations.append({"type": "clock_sync", **record})

    def flush(self) -> None:
        pass

    def finish(
        self, summary: Mapping[str, JsonValue] | None = None, status: str = "complete"
    ) -> None:
        self.finished = True
        self.status = status
        self.summary = dict(summary or {})


@dataclasses.dataclass(frozen=True)
class OffscreenResult:
    """Last frame's pixels ((H, W, 4) uint8, top row first), checksum, frame times (ms)."""

    pixels: np.ndarray
    checksum: str
    frame_ms: tuple[float, ...]

    @property
    def median_ms(self) -> float:
        return float(np.median(self.frame_ms)) if self.frame_ms else float("nan")


def run_offscreen(
    ctx: Any,
    scene_cls: type,
    size: tuple[int, int],
    params: Mapping[str, ParamValue] | None = None,
    *,
    frames: int = 1,
    warmup: int = 0,
    seed: int = 0,
    samples: int = 0,
) -> OffscreenResult:
    """Render ``warmup + frames`` frames of ``scene_cls`` and read the last; SceneSkip when it
    cannot run here, SceneError when it fails."""
    label = str(getattr(scene_cls, "name", "") or scene_cls.__name__)
    resolved = resolve_params(scene_cls, params or {})
    fbo = ctx.simple_framebuffer(tuple(size), components=4, samples=samples)
    try:
        engine = open_engine(
            ctx,
            CaptureSpec(None, label, timing="sync", options=CaptureOptions()),
            writer=MemorySink(),
        )
        with engine:
            scene = SceneSpec(
                scene_cls,
                label,
                resolved,
                size=(int(size[0]), int(size[1])),
                frames=frames,
                warmup=warmup,
                seed=seed,
            )
            result = run_scene(engine, scene, bind=fbo.use)
            engine.finish()
    finally:
        fbo.release()
        # moderngl rebinds ctx.fbo after creating objects: never leave a deleted one bound
        ctx.detect_framebuffer(0).use()
    if result.status == "skipped":
        raise SceneSkip(result.reason)
    if result.pixels is None:
        raise SceneError(f"scene '{label}' rendered no frame")
    frame_ms = tuple(float(ns) / 1e6 for ns in engine.timer.frame_ns)
    return OffscreenResult(result.pixels, result.checksum, frame_ms)


__all__ = ["MemorySink", "OffscreenResult", "run_offscreen"]
