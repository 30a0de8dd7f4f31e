"""The capture service: a checked RunPlan in, a trace out. :func:`open_engine` is the one place an
Engine is made, :func:`open_writer` the one place a capture's trace is opened, :func:`run_output`
the one rule of a run's output name (the scene loop, the replay and the counted parent's join)."""

from __future__ import annotations

import dataclasses
import os
from collections.abc import Callable
from pathlib import Path
from typing import Any, TypeVar

from katra3d.harness.engine import timers
from katra3d.harness.engine.core import Engine, resolve_capture
from katra3d.harness.engine.counting import CountMeasurer
from katra3d.harness.engine.lifecycle import run_scene
from katra3d.harness.engine.measurer import Measurer, TimeMeasurer, WriterArgs
from katra3d.harness.engine.results import ProgressSink, RunResult, SceneResult
from katra3d.harness.engine.spec import CaptureSpec, SceneSpec
from katra3d.harness.engine.stopping import StopFlag, stop_on_signals
from katra3d.harness.gl import backends, probe
from katra3d.harness.run import measure
from katra3d.harness.run.config import (
    RunConfig,
    RunPlan,
    SceneEntry,
    default_output,
    screenshot_path,
)
from katra3d.harness.run.progress import entered
from katra3d.harness.run.protocol import ChildOrder
from katra_trace.analysis.references import images_policy
from katra_trace.errors import ConfigError, KatraError, OutputBusyError, OutputExistsError
from katra_trace.io import claim
from katra_trace.io.header import CaptureOptions, HostInfo, ResolvedOptions
from katra_trace.io.writer import TraceWriter
from katra_trace.jsontext import JsonObject
from katra_trace.text import shown

T = TypeVar("T")


def open_engine(
    ctx: Any,
    spec: CaptureSpec,
    *,
    measurer: Measurer | None = None,
    writer: Any = None,
    stop: StopFlag | None = None,
) -> Engine:
    """The capture engine of ``spec`` on ``ctx``, into ``writer`` (a MemorySink) or else the trace
    :func:`open_writer` opens at ``spec.path``."""
    measurer = measurer or TimeMeasurer()
    resolved = resolve_capture(spec, measurer)
    if writer is None:
        if spec.path is None:
            raise ConfigError("a capture needs an output path")
        writer = open_writer(
            spec.path,
            workload=spec.workload,
            options=resolved.options,
            host=spec.host,
            notes=spec.notes,
            overwrite=spec.overwrite,
            failed_aside=spec.failed_aside,
            writer_args=resolved.writer_args,
        )
    return Engine(ctx, spec, writer, measurer=measurer, stop=stop, resolved=resolved)


def open_writer(
    path: Path,
    *,
    workload: str,
    options: CaptureOptions,
    host: HostInfo,
    notes: str,
    overwrite: bool,
    failed_aside: bool,
    writer_args: WriterArgs | None = None,
) -> TraceWriter:
    """The one place a capture's trace is opened: ``path`` claimed, an existing file replaced
    only with ``overwrite`` (--force); ``failed_aside``: a failed capture's frames go to
    ``NAME.failed.katra``."""
    return TraceWriter(
        path,
        workload=workload,
        capture_options=options,
        host_info=host,
        notes=notes,
        overwrite=overwrite,
        failed_aside=failed_aside,
        **(writer_args or {}),
    )


def run_output(plan: RunPlan, opened: Callable[[RunPlan], T]) -> tuple[RunPlan, T]:
    """``opened(plan)``, which claims ``plan.output``: -o as given, else the default name, or the
    next default name when another run took it a moment ago."""
    for _ in range(19):
        try:
            return plan, opened(plan)
        except (OutputBusyError, OutputExistsError):
            if plan.config.output is not None:
                raise
            plan = dataclasses.replace(plan, output=default_output(plan.output.stem))
    return plan, opened(plan)


def claim_output(plan: RunPlan) -> tuple[RunPlan, claim.Claim]:
    """The counted parent's output, claimed for the join of its children's traces."""
    return run_output(plan, lambda plan: claim.claim(plan.output, plan.config.force))


def capture_options(plan: RunPlan, backend: str | None, device: int | None) -> CaptureOptions:
    """The header's capture options: the run as requested (every RunConfig field but ``jobs``,
    in its order; ``measure`` is the measurer's record), then ``resolved``."""
    cfg = plan.config
    resolved = ResolvedOptions(
        frames=plan.frames,
        duration_s=plan.duration_s,
        warmup=plan.warmup,
        size=plan.size,
        samples=cfg.samples,
        backend=backend,
        output=str(plan.output),
        device=device,
        scenes=tuple(
            {"label": e.label, "spec": e.spec, "params": dict(e.params), "position": e.position}
            for e in plan.entries
        ),
        extra={"images": images_policy(plan.keep_images, plan.duration_s is not None)},
        layout=_RESOLVED_KEYS,
    )
    requested: JsonObject = {
        "scenes": list(cfg.scenes),
        "suite": cfg.suite,
        "duration_s": cfg.duration_s,
        "backend": cfg.backend,
        "device": cfg.device,
        "params": {f"{s}.{k}" if s else k: v for s, k, v in cfg.params},
        "output": cfg.output,
        "notes": cfg.notes,
        "screenshot_dir": cfg.screenshot_dir,
        "reference_every": cfg.reference_every,
        "force": cfg.force,
        "keep_image": cfg.keep_image,
        "expect_images": cfg.expect_images,
        "update_images": cfg.update_images,
    }
    return CaptureOptions(
        frames=cfg.frames,
        warmup=cfg.warmup,
        size=cfg.size,
        samples=cfg.samples,
        seed=cfg.seed,
        timing=cfg.timing,
        zones=cfg.zones,
        max_draw_zones=cfg.max_draw_zones,
        codec=cfg.codec,
        shard=cfg.shard,
        resolved=resolved,
        extra=requested,
        layout=_REQUESTED_KEYS,
    )


_RESOLVED_KEYS = tuple(
    "frames duration_s warmup size samples backend output device scenes images".split()
)
#: RunConfig's fields in order (``jobs`` says how a run was counted, not what), then ``resolved``.
_REQUESTED_KEYS = (*(f.name for f in dataclasses.fields(RunConfig) if f.name != "jobs"), "resolved")


def capture(plan: RunPlan, progress: ProgressSink, child: ChildOrder | None = None) -> RunResult:
    """Capture every scene of ``plan``; ``child``: a counted child's order."""
    cfg = plan.config
    session = backends.open_session(
        cfg.backend, device=cfg.device, size=plan.size, samples=cfg.samples
    )
    try:
        host = probe.host_info(session)
        if child is not None:  # the parent checked the renderer
            host = host.replaced(
                codegen=measure.codegen_facts(
                    host.gl,
                    host.system,
                    os.environ,
                    measure.check_child_instrumentation(child.deferred),
                )
            )
        else:
            timers.choose_mode(cfg.timing, host.gl)
            plan.output.parent.mkdir(parents=True, exist_ok=True)
        if plan.screenshot_dir is not None:
            plan.screenshot_dir.mkdir(parents=True, exist_ok=True)
        stop = StopFlag()

        def opened(plan: RunPlan) -> Engine:
            spec = CaptureSpec(
                plan.output if child is None else child.trace,
                plan.workload,
                host=host,
                options=capture_options(plan, session.backend, session.device),
                timing=cfg.timing,
                zones=plan.zones,
                notes=cfg.notes,
                reference_every=plan.reference_every,
                overwrite=cfg.force,
                max_draw_zones=cfg.max_draw_zones,
                codec=cfg.codec,
                failed_aside=child is None,
            )
            measurer = (
                TimeMeasurer()
                if child is None
                else CountMeasurer(child.measure_options(), child.dump_base)
            )
            return open_engine(session.ctx, spec, measurer=measurer, stop=stop)

        with stop_on_signals(stop):
            plan, engine = run_output(plan, opened) if child is None else (plan, opened(plan))
            try:
                with engine, entered(progress):
                    results: list[SceneResult] = []
                    for n, entry in enumerate(plan.entries, 1):
                        if stop.set:
                            break
                        results.append(_run_entry(engine, plan, entry, session, progress, n))
                    if child is not None:
                        measure.stop_counting()
                    status = "interrupted" if stop.set else "complete"
                    if stop.set:
                        progress.line(
                            f"stopped by {stop.signal_name}: trace finished as interrupted"
                        )
                    progress.phase("writing the trace", None)
                    engine.finish(status, {"scenes": [r.row() for r in results]})
            except KatraError as err:
                writer = engine.writer
                if writer.failed_aside and writer.finished and not stop.set and len(err.args) == 1:
                    err.args = (str(err) + failed_note(writer.failed_path),)
                raise
        return RunResult(
            plan.output,
            status,
            engine.mode,
            engine.reason,
            results,
            stop.signal_name,
            size=plan.size,
        )
    finally:
        session.close()


def failed_note(kept: Path | None) -> str:
    """Where a failed run's frames are, or that nothing was written."""
    if kept is None:
        return "; no frame was measured, so no trace was written"
    return f"; the frames it measured are in {shown(kept)} (the output was not written)"


def _run_entry(
    engine: Engine, plan: RunPlan, entry: SceneEntry, session: Any, progress: ProgressSink, n: int
) -> SceneResult:
    shot = (
        screenshot_path(plan.screenshot_dir, entry.label)
        if plan.screenshot_dir is not None
        else None
    )
    assert entry.cls is not None  # plan_run: a run with traces is a replay
    scene = SceneSpec(
        entry.cls,
        entry.label,
        entry.params,
        size=plan.size,
        frames=plan.frames,
        warmup=plan.warmup,
        duration_s=plan.duration_s,
        seed=plan.config.seed,
        spec=entry.spec,
        screenshot=shot,
        index=n,
        total=len(plan.entries),
        keep_image=plan.keep_images,
        overwrite=plan.config.force,
    )
    return run_scene(engine, scene, bind=session.bind, progress=progress)


__all__ = [
    "capture",
    "capture_options",
    "claim_output",
    "failed_note",
    "open_engine",
    "open_writer",
    "run_output",
]
