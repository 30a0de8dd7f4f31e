"""The runner: a validated RunConfig in, a trace and per-scene results out.

Order of work: validate the config and resolve every scene and param
(:func:`harness.config.plan_run`: no GL yet, so a bad input costs nothing and
leaves nothing behind) -> open the backend -> probe the host -> create the capture engine (trace header =
capture options + host info; the timing mode is chosen there) -> per scene,
:meth:`harness.engine.Engine.run_scene` -> summary.

SIGINT, SIGTERM and SIGHUP stop the run at the next frame boundary, and the
trace is finished with status ``interrupted``; a second signal stops the frame
in progress (see :mod:`harness.engine`).
"""

from __future__ import annotations

import dataclasses
import os
import re
from typing import Any, TextIO

from harness.config import (
    DEFAULT_FRAMES,
    DEFAULT_SIZE,
    DEFAULT_WARMUP,
    RunConfig,
    RunPlan,
    SceneEntry,
    default_output,
    parse_param,
    parse_size,
    plan_run,
)
from harness.engine import Engine, NoProgress, Progress, RunResult, SceneResult, StopFlag, stop_on_signals
from katra_trace.errors import KatraError, OutputBusyError, OutputExistsError
from katra_trace.header import CaptureOptions, build_capture_options


def capture_options(plan: RunPlan, session: Any) -> CaptureOptions:
    """The capture options recorded in the trace header: the config as given, and as resolved."""
    cfg = plan.config
    return build_capture_options(cfg.as_dict(), resolved={
        "frames": plan.frames, "duration_s": plan.duration_s, "warmup": plan.warmup,
        "size": list(plan.size), "samples": cfg.samples, "backend": session.backend,
        "output": str(plan.output), "device": session.device,
        "scenes": [{"label": e.label, "spec": e.spec, "params": dict(e.params)} for e in plan.entries],
    })


def run(config: RunConfig, *, progress: Progress | None = None, plan: RunPlan | None = None,
        progress_stream: TextIO | None = None, quiet: bool = False) -> RunResult:
    """Run ``config``: returns a :class:`RunResult`; the trace is at ``result.path``.

    Raises ConfigError/SceneError for bad input (before anything is written),
    BackendUnavailable when no GL context can be opened. ``progress`` receives
    progress reports (default: plain lines on ``progress_stream``, or nothing
    when ``quiet``).
    """
    from harness import backends, measure, probe, timers

    plan = plan or plan_run(config)
    cfg = plan.config
    child = measure.child_info() if cfg.measure in measure.COUNT_MEASURES else None
    if cfg.measure in measure.COUNT_MEASURES and child is None:
        return _run_counted(plan, quiet=quiet or isinstance(progress, NoProgress))
    if progress is None:
        if quiet:
            progress = NoProgress()
        else:
            from harness.cli.progress import Progress as CliProgress

            progress = CliProgress(len(plan.entries), progress_stream)
    session = backends.open_session(cfg.backend, device=cfg.device, size=plan.size,
                                    samples=cfg.samples)
    try:
        host = probe.host_info(session)
        if child is not None:
            measure.check_renderer(cfg.measure, host["gl"])
            host["codegen"] = measure.codegen_facts(host["gl"], host["system"], os.environ)
        else:
            timers.choose_mode(cfg.timing, host["gl"])  # refuse an impossible mode before creating anything
        plan.output.parent.mkdir(parents=True, exist_ok=True)
        if plan.screenshot_dir is not None:
            plan.screenshot_dir.mkdir(parents=True, exist_ok=True)
        stop = StopFlag()
        with stop_on_signals(stop):
            for attempt in range(20):
                try:
                    engine = Engine(session.ctx, plan.output, host=host, options=capture_options(plan, session),
                                    workload=plan.workload, timing=cfg.timing, zones=cfg.zones, notes=cfg.notes,
                                    stop=stop, measure=child, reference_every=_reference_every(cfg),
                                    overwrite=cfg.force, max_draw_zones=cfg.max_draw_zones, codec=cfg.codec)
                    break
                except (OutputBusyError, OutputExistsError):
                    if cfg.output is not None or attempt == 19:
                        raise
                    # another run took this default name a moment ago: take the next one
                    plan = dataclasses.replace(plan, output=default_output(plan.output.stem))
            with engine, _entered(progress):
                results: list[SceneResult] = []
                for n, entry in enumerate(plan.entries, 1):
                    if stop.set:
                        break
                    results.append(_run_entry(engine, plan, entry, session, progress, n))
                status = "interrupted" if stop.set else "complete"
                if stop.set:
                    progress.line(f"stopped by {stop.signal_name}: trace finished as interrupted")
                engine.finish(status, {"scenes": [r.row() for r in results]})
        return RunResult(plan.output, status, engine.mode, engine.reason, results, stop.signal_name, size=plan.size)
    finally:
        session.close()


def _reference_every(cfg: RunConfig) -> int:
    from harness.config import DEFAULT_REFERENCE_EVERY

    return DEFAULT_REFERENCE_EVERY if cfg.reference_every is None else cfg.reference_every


def _run_counted(plan: RunPlan, *, quiet: bool) -> RunResult:
    """``--measure instructions|cycles``: check here, count in a child under callgrind, read its trace."""
    from harness import backends, measure, probe
    from harness.config import plan_argv
    from katra_trace.reader import open_trace

    cfg = plan.config
    measure.find_valgrind()
    with backends.open_session(cfg.backend, device=cfg.device, size=(16, 16)) as session:
        measure.check_renderer(cfg.measure, probe.gl_info(session.ctx))
    plan.output.parent.mkdir(parents=True, exist_ok=True)
    code = measure.run_counted(plan_argv(plan, with_output=False), cfg.measure, plan.output, force=cfg.force,
                               quiet=quiet)
    if code in (2, 3):
        raise _ChildFailed(code, "the counted run under valgrind failed (its error is above)")
    if not plan.output.is_file():
        raise _ChildFailed(2, f"the counted run under valgrind ended with exit code {code} and wrote no trace "
                              f"at {plan.output}")
    trace = open_trace(plan.output, events=False)
    summary = trace.summary or {}
    status = str(summary.get("status") or ("interrupted" if code else "complete"))
    results = [SceneResult(str(r.get("scene", "?")), str(r.get("status", "")), frames=int(r.get("frames") or 0),
                           clock=str(r.get("clock", "")),
                           stats={k: r[k] for k in ("median", "min", "max", "spread_pct") if k in r} or None)
               for r in (summary.get("user", {}) or {}).get("scenes", [])]
    if code != 0 and status == "complete":
        raise _ChildFailed(2, f"the counted run under valgrind ended with exit code {code}")
    signal_name = "SIGINT" if status == "interrupted" else ""
    params = {e.label: dict(e.params) for e in plan.entries}
    for r in results:
        r.params = params.get(r.label, {})
    return RunResult(plan.output, status, cfg.measure, trace.header.capture_options.timing_reason or "", results,
                     signal_name, size=plan.size)


class _ChildFailed(KatraError):
    def __init__(self, code: int, message: str) -> None:
        super().__init__(message)
        self.exit_code = code


class _entered:
    """Enter/exit a progress display if it is a context manager."""

    def __init__(self, progress: Any) -> None:
        self.progress = progress

    def __enter__(self) -> Any:
        enter = getattr(self.progress, "__enter__", None)
        return enter() if enter is not None else self.progress

    def __exit__(self, *exc: object) -> None:
        leave = getattr(self.progress, "__exit__", None)
        if leave is not None:
            leave(*exc)


def _run_entry(engine: Engine, plan: RunPlan, entry: SceneEntry, session: Any, progress: Progress,
               n: int) -> SceneResult:
    shot = plan.screenshot_dir / f"{_safe(entry.label)}.png" if plan.screenshot_dir is not None else None
    return engine.run_scene(entry.cls, entry.label, entry.params, size=plan.size, frames=plan.frames,
                            warmup=plan.warmup, duration_s=plan.duration_s, seed=plan.config.seed, spec=entry.spec,
                            bind=session.bind, screenshot=shot, progress=progress, index=n,
                            total=len(plan.entries))


def _safe(label: str) -> str:
    return re.sub(r"[^A-Za-z0-9_.-]+", "_", label)


def format_table(result: RunResult) -> str:
    """The end-of-run table (see :func:`harness.cli.progress.format_table`)."""
    from harness.cli.progress import format_table as table

    return table(result)


__all__ = [
    "DEFAULT_FRAMES",
    "DEFAULT_SIZE",
    "DEFAULT_WARMUP",
    "RunConfig",
    "RunPlan",
    "RunResult",
    "SceneEntry",
    "SceneResult",
    "capture_options",
    "default_output",
    "format_table",
    "parse_param",
    "parse_size",
    "plan_run",
    "run",
]
