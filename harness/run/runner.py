"""The runner: a validated RunConfig in, a trace and per-scene results out.

Order of work: validate the config and resolve every scene and param
(:func:`katra3d.harness.run.config.plan_run`: no GL yet, so a bad input costs nothing and leaves
nothing behind) -> open the backend -> probe the host -> create the capture engine (trace header =
capture options + host info; the timing mode is chosen there) -> per scene,
:meth:`katra3d.harness.engine.core.Engine.run_scene` -> summary.

SIGINT, SIGTERM and SIGHUP stop the run at the next frame boundary, and the
trace is finished with status ``interrupted``; a second signal stops the frame
in progress (see :mod:`katra3d.harness.engine.core`).
"""

from __future__ import annotations

import dataclasses
import os
import signal
import sys
import tempfile
import warnings
from pathlib import Path
from typing import Any, TextIO

from katra3d.harness.engine import timers
from katra3d.harness.engine.core import Engine
from katra3d.harness.engine.results import NoProgress, Progress, RunResult, SceneResult
from katra3d.harness.engine.spec import TIMED, CaptureSpec, SceneSpec
from katra3d.harness.engine.stopping import StopFlag, stop_on_signals
from katra3d.harness.gl import backends, probe
from katra3d.harness.run import children, measure
from katra3d.harness.run.config import (
    DEFAULT_REFERENCE_EVERY,
    RunConfig,
    RunPlan,
    SceneEntry,
    default_output,
    plan_run,
    screenshot_path,
)
from katra3d.harness.run.progress import Progress as RunProgress
from katra3d.harness.run.progress import entered, show_warning
from katra3d.harness.run.valgrind import check_renderer
from katra_trace.analysis.references import DURATION_NOTICE, images_policy
from katra_trace.errors import (
    ExitCode,
    Interrupted,
    KatraError,
    OutputBusyError,
    OutputExistsError,
    child_ended,
    signal_exit_code,
    stopped_exit_code,
)
from katra_trace.io import claim
from katra_trace.io.header import CaptureOptions, build_capture_options
from katra_trace.text import shown


def capture_options(plan: RunPlan, session: Any) -> CaptureOptions:
    """The capture options recorded in the trace header: the config as given, and as resolved."""
    cfg = plan.config
    return build_capture_options(
        cfg.as_dict(),
        resolved={
            "frames": plan.frames,
            "duration_s": plan.duration_s,
            "warmup": plan.warmup,
            "size": list(plan.size),
            "samples": cfg.samples,
            "backend": session.backend,
            "output": str(plan.output),
            "device": session.device,
            "scenes": [
                {"label": e.label, "spec": e.spec, "params": dict(e.params), "position": e.position}
                for e in plan.entries
            ],
            "images": images_policy(plan.keep_images, plan.duration_s is not None),
        },
    )


def run(
    config: RunConfig,
    *,
    progress: Progress | None = None,
    plan: RunPlan | None = None,
    progress_stream: TextIO | None = None,
    quiet: bool = False,
) -> RunResult:
    """Run ``config``: returns a :class:`RunResult`; the trace is at ``result.path``.

    Raises ConfigError/SceneError for bad input (before anything is written),
    BackendUnavailable when no GL context can be opened. ``progress`` receives
    progress reports (default: plain lines on ``progress_stream``, or nothing
    when ``quiet``).
    """
    plan = plan or plan_run(config)
    counted = plan.counting is not None
    quiet = quiet or isinstance(progress, NoProgress) or bool(getattr(progress, "quiet", False))
    if progress is None:
        progress = (
            NoProgress()
            if quiet
            else RunProgress(len(plan.entries), progress_stream, phase_lines=counted)
        )
    if plan.duration_s is not None and plan.config.keep_image:
        progress.line(f"notice: {DURATION_NOTICE}")
    if counted:
        return _run_counted(plan, progress, quiet=quiet)
    return _capture(plan, progress)


def _capture(
    plan: RunPlan, progress: Progress, child: measure.ChildOrder | None = None
) -> RunResult:
    """Open the backend, probe the host and capture every scene of ``plan`` into its trace.

    ``child``: the order of a counted child (:func:`katra3d.harness.run.measure.read_order`); the
    trace then goes into the dump directory (the parent moves it to ``plan.output``, which the
    header records).
    """
    cfg = plan.config
    session = backends.open_session(
        cfg.backend, device=cfg.device, size=plan.size, samples=cfg.samples
    )
    try:
        host = probe.host_info(session)
        if child is not None:  # the renderer was checked by the parent, before valgrind started
            host = host.replaced(
                codegen=measure.codegen_facts(
                    host.gl, host.system, os.environ, measure.check_child_instrumentation(child)
                )
            )
        else:
            # refuse an impossible mode before creating anything
            timers.choose_mode(cfg.timing, host.gl)
            plan.output.parent.mkdir(parents=True, exist_ok=True)
        if plan.screenshot_dir is not None:
            plan.screenshot_dir.mkdir(parents=True, exist_ok=True)
        stop = StopFlag()
        with stop_on_signals(stop):
            for attempt in range(20):
                try:
                    target = plan.output if child is None else child.trace
                    spec = CaptureSpec(
                        target,
                        plan.workload,
                        host=host,
                        options=capture_options(plan, session),
                        timing=cfg.timing,
                        zones=cfg.zones,
                        notes=cfg.notes,
                        measure=TIMED if child is None else child.measure_options(),
                        dump_base=None if child is None else child.dump_base,
                        reference_every=_reference_every(cfg),
                        overwrite=cfg.force,
                        max_draw_zones=cfg.max_draw_zones,
                        codec=cfg.codec,
                        failed_aside=child is None,
                    )
                    engine = Engine(session.ctx, spec, stop=stop)
                    break
                except (OutputBusyError, OutputExistsError):
                    if cfg.output is not None or child is not None or attempt == 19:
                        raise
                    # another run took this default name a moment ago: take the next one
                    plan = dataclasses.replace(plan, output=default_output(plan.output.stem))
            try:
                with engine, entered(progress):
                    results: list[SceneResult] = []
                    for n, entry in enumerate(plan.entries, 1):
                        if stop.set:
                            break
                        results.append(_run_entry(engine, plan, entry, session, progress, n))
                    # the last counted frame is behind: the rest runs uninstrumented
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
    """What a failed run's error line adds: where its measured frames are, or that nothing was
    written (a failed run never leaves a trace at ``-o``; :func:`katra_trace.io.claim.set_aside`).
    """
    if kept is None:
        return "; no frame was measured, so no trace was written"
    return f"; the frames it measured are in {shown(kept)} (the output was not written)"


def _reference_every(cfg: RunConfig) -> int:
    return DEFAULT_REFERENCE_EVERY if cfg.reference_every is None else cfg.reference_every


def _run_counted(plan: RunPlan, progress: Progress, *, quiet: bool) -> RunResult:
    """``--measure instructions|cycles``: check here, count in a child under callgrind, take back
    its results.

    A stop signal that ended the child before it handed back results raises
    :class:`katra_trace.errors.Interrupted` (the CLI's exit 128 + the signal); the frames it
    recorded, if any, are kept as ``<output>.part``."""
    cfg = plan.config
    # the one renderer check of a counted run, before valgrind starts (GPU drivers do not run under
    # it); valgrind was found when the run was planned (plan.counting)
    with backends.open_session(cfg.backend, device=cfg.device, size=(16, 16)) as session:
        check_renderer(cfg.measure, probe.gl_info(session.ctx))
    plan.output.parent.mkdir(parents=True, exist_ok=True)
    for where in (plan.output, Path(tempfile.gettempdir())):  # the trace, the children's parts
        claim.check_free_space(where)
    with entered(progress):
        code, handed, signum = children.run_counted(plan, progress=progress, quiet=quiet)
    if signum and (handed is None or "error" in handed):
        raise Interrupted(signum)
    if handed is not None and "error" in handed:
        kept = handed.get("kept", "")
        note = failed_note(None if kept is None else Path(kept)) if kept != "" else ""
        failed = _ChildFailed(
            int(handed.get("exit_code") or ExitCode.BAD_INPUT),
            f"the counted run under valgrind: {handed['error']}" + note,
        )
        failed.scene_traceback = str(handed.get("traceback") or "")
        raise failed
    if handed is None or not plan.output.is_file():
        how, exit_code = child_ended(code)
        kept = "" if plan.output.is_file() else f" and wrote no trace at {plan.output}"
        raise _ChildFailed(
            exit_code, f"the counted run under valgrind {how}{kept}; it handed back no results"
        )
    result = measure.result_from_dict(handed, plan.output)
    if code != ExitCode.OK and result.status == "complete":
        raise _ChildFailed(
            ExitCode.BAD_INPUT, f"the counted run under valgrind ended with exit code {code}"
        )
    return result


def run_child() -> int:
    """Entry point of the counted child: ``python -m katra3d`` under valgrind,
    ``$KATRA3D_MEASURE_CHILD`` set.

    Loads the checked plan the parent wrote into the dump directory (no argparse, no planning
    again), probes the host (the codegen facts must come from this process's GL), captures, and
    hands the results back as data (:func:`katra3d.harness.run.measure.hand_back`); an error travels
    the same way, for the parent to report. Returns the exit code: 0 complete, 128 + the signal when
    interrupted, the error's code otherwise.
    """
    sys.setswitchinterval(measure.COUNTED_SWITCH_INTERVAL_S)
    try:
        dump_dir = measure.child_dir()
    except KatraError as err:
        print(f"katra3d: error: {err}", file=sys.stderr)
        return err.exit_code
    progress = measure.child_progress(dump_dir)
    progress.phase("opening GL (EGL, Mesa, llvmpipe) and probing the host", None)
    try:
        order = measure.read_order(dump_dir)
        with warnings.catch_warnings():  # as the CLI shows them: one "katra3d: warning:" line each
            warnings.simplefilter("default")
            warnings.showwarning = show_warning
            result = _capture(order.plan, progress, child=order)
    except KatraError as err:
        measure.hand_back(
            dump_dir,
            {"error": str(err), "exit_code": err.exit_code, "traceback": err.scene_traceback},
        )
        return err.exit_code
    except KeyboardInterrupt as exc:
        signum = int(getattr(exc, "signum", signal.SIGINT))
        measure.hand_back(
            dump_dir,
            {
                "error": f"interrupted by {signal.Signals(signum).name}",
                "exit_code": signal_exit_code(signum),
            },
        )
        return signal_exit_code(signum)
    measure.hand_back(dump_dir, measure.result_as_dict(result))
    progress.phase("valgrind ending (callgrind's last dump)", None)
    if result.status != "interrupted":
        return ExitCode.OK
    return stopped_exit_code(result.signal_name)


class _ChildFailed(KatraError):
    def __init__(self, code: int, message: str) -> None:
        super().__init__(message)
        self.exit_code = code


def _run_entry(
    engine: Engine, plan: RunPlan, entry: SceneEntry, session: Any, progress: Progress, n: int
) -> SceneResult:
    shot = (
        screenshot_path(plan.screenshot_dir, entry.label)
        if plan.screenshot_dir is not None
        else None
    )
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
    return engine.run_scene(scene, bind=session.bind, progress=progress)


__all__ = ["capture_options", "run", "run_child"]
