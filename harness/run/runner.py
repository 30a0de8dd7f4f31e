"""The runner: a RunConfig in, a trace and per-scene results out (replay, counted children or the
scene loop)."""

from __future__ import annotations

import dataclasses
import signal
import sys
import tempfile
import warnings
from pathlib import Path
from typing import TextIO

from katra3d.harness.engine.results import NoProgress, ProgressSink, RunResult
from katra3d.harness.gl import backends, probe
from katra3d.harness.run import children, measure, pipeline, protocol, replay
from katra3d.harness.run.config import RunConfig, RunPlan, plan_run
from katra3d.harness.run.progress import Progress as RunProgress
from katra3d.harness.run.progress import entered, show_warning
from katra3d.harness.run.protocol import ChildResult
from katra3d.harness.run.valgrind import check_renderer
from katra_trace.analysis.references import DURATION_NOTICE
from katra_trace.errors import (
    ExitCode,
    Interrupted,
    KatraError,
    child_ended,
    signal_exit_code,
    stopped_exit_code,
)
from katra_trace.io import claim


def run(
    config: RunConfig,
    *,
    progress: ProgressSink | None = None,
    plan: RunPlan | None = None,
    progress_stream: TextIO | None = None,
    quiet: bool = False,
) -> RunResult:
    """Run ``config`` into ``result.path``; ConfigError/SceneError before any write,
    BackendUnavailable when no GL context opens."""
    plan = plan or plan_run(config)
    if replay.has_traces(plan):
        return replay.run(plan, progress if progress is not None and not quiet else NoProgress())
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
    return pipeline.capture(plan, progress)


def _run_counted(plan: RunPlan, progress: ProgressSink, *, quiet: bool) -> RunResult:
    """Count in children; Interrupted when a stop ended them before any handed back."""
    cfg = plan.config
    # the one renderer check, before valgrind starts (GPU drivers do not run under it)
    with backends.open_session(cfg.backend, device=cfg.device, size=(16, 16)) as session:
        check_renderer(cfg.measure, probe.gl_info(session.ctx))
    plan.output.parent.mkdir(parents=True, exist_ok=True)
    for where in (plan.output, Path(tempfile.gettempdir())):
        claim.check_free_space(where)
    plan, target = pipeline.claim_output(plan)
    with entered(progress):
        code, handed, signum = children.run_counted(plan, target, progress=progress, quiet=quiet)
    if signum and (handed is None or handed.failed):
        raise Interrupted(signum)
    if handed is not None and handed.failed:
        kept = handed.kept
        note = pipeline.failed_note(None if kept is None else Path(kept)) if kept != "" else ""
        failed = _ChildFailed(
            handed.exit_code or ExitCode.BAD_INPUT,
            f"the counted run under valgrind: {handed.error}" + note,
        )
        failed.scene_traceback = handed.traceback
        raise failed
    if handed is None or handed.run is None or not plan.output.is_file():
        how, exit_code = child_ended(code)
        kept = "" if plan.output.is_file() else f" and wrote no trace at {plan.output}"
        raise _ChildFailed(
            exit_code, f"the counted run under valgrind {how}{kept}; it handed back no results"
        )
    result = dataclasses.replace(handed.run, path=plan.output)
    if code != ExitCode.OK and result.status == "complete":
        raise _ChildFailed(
            ExitCode.BAD_INPUT, f"the counted run under valgrind ended with exit code {code}"
        )
    return result


def run_child() -> int:
    """The counted child: runs the parent's plan and hands back result or error. Returns 0,
    128 + signal when interrupted, else the error's code."""
    sys.setswitchinterval(measure.COUNTED_SWITCH_INTERVAL_S)
    try:
        dump_dir = measure.child_dir()
    except KatraError as err:
        print(f"katra3d: error: {err}", file=sys.stderr)
        return err.exit_code
    progress = measure.child_progress(dump_dir)
    progress.phase("opening GL (EGL, Mesa, llvmpipe) and probing the host", None)
    try:
        order = protocol.read_order(dump_dir)
        with warnings.catch_warnings():  # as the CLI shows them: one line each
            warnings.simplefilter("default")
            warnings.showwarning = show_warning
            result = pipeline.capture(order.plan, progress, child=order)
    except KatraError as err:
        protocol.hand_back(
            dump_dir,
            ChildResult(error=str(err), exit_code=err.exit_code, traceback=err.scene_traceback),
        )
        return err.exit_code
    except KeyboardInterrupt as exc:
        signum = int(getattr(exc, "signum", signal.SIGINT))
        protocol.hand_back(
            dump_dir,
            ChildResult(
                error=f"interrupted by {signal.Signals(signum).name}",
                exit_code=signal_exit_code(signum),
            ),
        )
        return signal_exit_code(signum)
    protocol.hand_back(dump_dir, ChildResult(result))
    progress.phase("valgrind ending (callgrind's last dump)", None)
    if result.status != "interrupted":
        return ExitCode.OK
    return stopped_exit_code(result.signal_name)


class _ChildFailed(KatraError):
    def __init__(self, code: int, message: str) -> None:
        super().__init__(message)
        self.exit_code = code


__all__ = ["run", "run_child"]
