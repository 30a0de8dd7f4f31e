"""One scene on the capture engine: setup, warmup, measured frames, last image, release. A scene's
failures become a one-line SceneError naming the phase; the scene is always released."""

from __future__ import annotations

import contextlib
import time
from collections.abc import Callable, Iterator
from typing import TYPE_CHECKING, Any

from katra3d.harness.engine.frame import frame_time_s, seed_key
from katra3d.harness.engine.results import NoProgress, SceneResult, median_text, scene_stats
from katra3d.harness.engine.scene_traceback import describe, location, scene_traceback
from katra3d.scenes.api import SceneSkip
from katra3d.scenes.image import read_pixels
from katra_trace.errors import KatraError, SceneError
from katra_trace.io.claim import open_output
from katra_trace.io.images import encode_png, frame_record, image_checksum
from katra_trace.jsontext import JsonObject
from katra_trace.schema import Flag

if TYPE_CHECKING:
    from katra3d.harness.engine.core import Engine, MeasuredDriver
    from katra3d.harness.engine.results import ProgressSink
    from katra3d.harness.engine.spec import SceneSpec

_pc = time.perf_counter_ns


def run_scene(
    engine: Engine,
    scene: SceneSpec,
    *,
    bind: Callable[[], None] | None = None,
    progress: ProgressSink | None = None,
    measured_driver: MeasuredDriver | None = None,
) -> SceneResult:
    """SceneError for the scene's own failure; a ``skipped`` result on SceneSkip."""
    return SceneLifecycle(
        engine, scene, bind=bind, progress=progress, measured_driver=measured_driver
    ).run()


class SceneLifecycle:
    """One scene, a method per phase (``bind`` makes the harness's framebuffer current)."""

    def __init__(
        self,
        engine: Engine,
        spec: SceneSpec,
        *,
        bind: Callable[[], None] | None = None,
        progress: ProgressSink | None = None,
        measured_driver: MeasuredDriver | None = None,
    ) -> None:
        self.engine = engine
        self.spec = spec
        self.bind = bind
        self.progress: ProgressSink = progress or NoProgress()
        self.measured_driver = measured_driver
        self.scene: Any = None

    def run(self) -> SceneResult:
        spec = self.spec
        self.engine.set_scene(spec.label)
        self.progress.scene_started(spec.index, spec.label, spec.total_frames)
        self.progress.phase(f"{self.where}: setting up", None)
        self.scene = spec.scene_cls()
        result = self.setup()
        if result.status == "skipped":
            return result
        try:
            self.measure(result)
            self.record(result)
        except BaseException:
            self.clean_up()
            raise
        self.release()
        if not self.progress.tty or self.engine.measurer.relayed:
            self.progress.line(
                f"[{spec.index}/{spec.total}] {spec.label}: {result.frames} frames"
                + median_text(result)
            )
        return result

    @property
    def where(self) -> str:
        return f"[{self.spec.index}/{self.spec.total}] {self.spec.label}"

    def setup(self) -> SceneResult:
        engine, spec = self.engine, self.spec
        if self.bind is not None:
            self.bind()
        t0 = _pc()
        try:
            with scene_errors(spec.label, "in setup", passes=(KatraError, SceneSkip)):
                self.scene.setup(engine.ctx, spec.size, dict(spec.params))
                engine.ctx.finish()
                if engine.gl_error_check:
                    engine.check_gl_errors(None, "setup")
        except SceneSkip as exc:
            return self.skipped(exc, t0)
        except (Exception, SystemExit):
            release_quietly(self.scene)
            raise
        t1 = _pc()
        engine.marker("setup", int(Flag.SETUP), t0, t1)
        return SceneResult(
            spec.label,
            "ok",
            setup_ms=(t1 - t0) / 1e6,
            clock=engine.primary_clock,
            params=dict(spec.params),
        )

    def skipped(self, exc: SceneSkip, t0_ns: int) -> SceneResult:
        engine, spec = self.engine, self.spec
        engine.marker("skipped", int(Flag.SKIPPED), t0_ns, _pc())
        engine.buffer.flush()
        engine.writer.annotate(
            {
                "type": "scene",
                "scene": spec.label,
                "spec": spec.spec,
                "status": "skipped",
                "reason": str(exc),
                "params": dict(spec.params),
            }
        )
        release_quietly(self.scene)
        self.progress.line(f"[{spec.index}/{spec.total}] {spec.label}: skipped: {exc}")
        return SceneResult(spec.label, "skipped", reason=str(exc), params=dict(spec.params))

    def measure(self, result: SceneResult) -> None:
        engine, spec = self.engine, self.spec
        render = self.scene.render
        key = seed_key(spec.seed, spec.label)
        rebind = self.rebinder()
        with (
            scene_errors(spec.label, "while rendering"),
            engine.measurer.frames(engine.buffer, engine.writer),
        ):
            self.progress.phase(f"{self.where}: warm-up", spec.warmup)
            warm = engine.loop(
                render,
                first=0,
                count=spec.warmup,
                deadline_ns=None,
                flags=int(Flag.WARMUP),
                key=key,
                bind=rebind,
                progress=self.progress,
            )
            self.progress.phase(
                f"{self.where}: {'counting' if engine.measurer.counts else 'measuring'}",
                spec.frames,
            )
            if self.measured_driver is not None:
                measured = engine.drive(
                    render, warm, spec.frames or 0, key, rebind, self.measured_driver
                )
            else:
                deadline = (
                    _pc() + int(spec.duration_s * 1e9) if spec.duration_s is not None else None
                )
                measured = engine.loop(
                    render,
                    first=warm,
                    count=spec.frames,
                    deadline_ns=deadline,
                    flags=0,
                    key=key,
                    bind=rebind,
                    progress=self.progress,
                )
        result.warmup = warm
        result.frames = measured
        if engine.stop.set:
            result.status = "interrupted"

    def record(self, result: SceneResult) -> None:
        engine, spec = self.engine, self.spec
        engine.timer.settle()
        if engine.timer.frame_ns:
            result.stats = scene_stats(engine.timer.frame_ns, counts=engine.measurer.counts)
        annotation: JsonObject = {
            "type": "scene",
            "scene": spec.label,
            "spec": spec.spec,
            "status": result.status,
            "params": dict(spec.params),
            "setup_ms": round(result.setup_ms, 3),
            "warmup_frames": result.warmup,
            "measured_frames": result.frames,
        }
        if spec.read_image and result.warmup + result.frames > 0:
            annotation.update(self.last_image(result))
        engine.buffer.flush()
        engine.measurer.write_scene(engine.writer, annotation, result)

    def last_image(self, result: SceneResult) -> JsonObject:
        """Read the last frame (counting stopped first); returns the annotation's keys."""
        spec, engine = self.spec, self.engine
        engine.measurer.frames_done(engine.timer)
        pixels = read_pixels(engine.ctx, self.scene)
        result.pixels = pixels
        result.checksum = image_checksum(pixels)
        index = result.warmup + result.frames - 1
        keys: JsonObject = {"last_frame_index": index, "last_frame_sha256": result.checksum}
        # only then is the frame the same one in every run
        if (
            spec.keep_image
            and spec.frames is not None
            and result.frames == spec.frames
            and result.status == "ok"
        ):
            engine.writer.image(
                *frame_record(spec.label, index, frame_time_s(index), pixels, engine.image_key)
            )
            keys["image_kept"] = True
        if spec.screenshot is not None:
            with open_output(
                spec.screenshot, force=spec.overwrite, option="--screenshot", example="scene.png"
            ) as f:
                f.write(encode_png(pixels))
            keys["screenshot"] = str(spec.screenshot)
        return keys

    def release(self) -> None:
        label = self.spec.label
        with scene_errors(label, "in release", passes=()):
            self.scene.release()
        if self.bind is not None:
            try:
                self.bind()
            except Exception as exc:
                raise SceneError(
                    f"scene '{label}' released the harness's framebuffer (self.target belongs to "
                    f"the harness unless bind_target created it): {describe(exc)}"
                ) from exc

    def clean_up(self) -> None:
        """Release the scene and rebind, never raising."""
        release_quietly(self.scene)
        if self.bind is not None:
            with contextlib.suppress(Exception):
                self.bind()

    def rebinder(self) -> Callable[[], None] | None:
        """Before each frame: rebind the harness's framebuffer if the scene left another bound."""
        bind = self.bind
        if bind is None:
            return None
        ctx = self.engine.ctx
        harness_fbo = getattr(ctx, "fbo", None)

        def rebind() -> None:
            if ctx.fbo is not harness_fbo:
                bind()

        return rebind


@contextlib.contextmanager
def scene_errors(
    label: str, phase: str, passes: tuple[type[BaseException], ...] = (KatraError,)
) -> Iterator[None]:
    """Turn a scene's exception into SceneError naming its file and line (``passes`` go through)."""
    try:
        yield
    except passes as exc:
        if (
            isinstance(exc, KatraError)
            and not exc.scene_traceback
            and len(exc.args) == 1
            and (at := location(exc))
        ):
            # katra3d's own error from the scene's code (a bad shader): name its line
            exc.args = (f"{exc} (in {at})",)
            exc.scene_traceback = scene_traceback(exc)
        raise
    except (Exception, SystemExit) as exc:
        at = location(exc)
        err = SceneError(
            f"scene '{label}' failed {phase}{f' ({at})' if at else ''}: {describe(exc)}"
        )
        err.scene_traceback = scene_traceback(exc)
        raise err from exc


def release_quietly(scene: Any) -> None:
    with contextlib.suppress(Exception, SystemExit):
        scene.release()


__all__ = ["SceneLifecycle", "release_quietly", "run_scene", "scene_errors"]
