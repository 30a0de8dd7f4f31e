"""A run of apitrace traces: glretrace replays, one frame per SwapBuffers, draws as zones;
docs/replay.md."""

from __future__ import annotations

import contextlib
import dataclasses
import os
import re
import shutil
from pathlib import Path

from katra3d.harness.engine.counting import estimated_cycles
from katra3d.harness.engine.events import FRAME_NAME
from katra3d.harness.engine.frame import frame_time_s
from katra3d.harness.engine.results import (
    ProgressSink,
    RunResult,
    SceneResult,
    median_text,
    scene_stats,
)
from katra3d.harness.engine.stopping import StopFlag, stop_on_signals
from katra3d.harness.gl import backends, probe
from katra3d.harness.replay import replayer as rp
from katra3d.harness.replay.display import x_display
from katra3d.harness.replay.output import draw_zones, replayer_base_ns
from katra3d.harness.replay.tool import Replayer, TraceFacts, find_replayer, trace_facts
from katra3d.harness.run import lifetime, measure
from katra3d.harness.run.config import RunPlan, SceneEntry
from katra3d.harness.run.pipeline import capture_options, failed_note, open_writer, run_output
from katra3d.harness.run.progress import entered
from katra3d.harness.run.valgrind import check_renderer
from katra_trace.errors import ConfigError, KatraError
from katra_trace.io.header import CaptureOptions, GLInfo, HostInfo, MeasureOptions
from katra_trace.io.images import decode_png, frame_record, image_checksum, image_key
from katra_trace.io.writer import TraceWriter
from katra_trace.jsontext import JsonObject
from katra_trace.metrics import mode_clock
from katra_trace.schema import Clock, Flag, Kind

TIMED_REASON = (
    "replayed by glretrace --pframe-times: a glFinish ends each frame, timed on the host clock "
    "(the replayer's frames, not katra3d's loop)"
)
SIZE_NOTICE = (
    "notice: --size does not apply to a trace: it replays at the size it was recorded at (each "
    "scene's annotation records it)"
)
FRAME_BOUNDARY = (
    "callgrind --dump-after={swap} in the replayer; the dumps of one SwapBuffers (GLX's dispatch "
    "and Mesa's) are summed; main thread (--separate-threads=yes); the replayer instrumented from "
    "its start; the trace's first W + N frames (apitrace trim --frames=0-K)"
)


def has_traces(plan: RunPlan) -> bool:
    return any(e.trace for e in plan.entries)


def check_plan(plan: RunPlan) -> None:
    """ConfigError for what a replay cannot do."""
    cfg = plan.config
    if plan.frames is None:
        raise ConfigError("a trace replays --frames N from its start, not --duration")
    zones = plan.zones
    if zones not in ("off", "draws"):
        raise ConfigError(
            "a trace has no passes: use --zones draws (each draw call a zone) or no --zones"
        )
    if zones == "draws" and plan.counting is not None:
        raise ConfigError(
            "--zones draws times the replayer's calls; a counted replay counts whole frames: "
            "drop --zones"
        )
    if cfg.samples or cfg.screenshot_dir:
        raise ConfigError(
            "a trace replays as it was recorded: --samples and --screenshot do not apply"
        )


def run(plan: RunPlan, progress: ProgressSink) -> RunResult:
    """Replay every trace of ``plan`` into its output."""
    check_plan(plan)
    cfg = plan.config
    counted = plan.counting is not None
    with backends.open_session(cfg.backend, device=cfg.device, size=(16, 16)) as session:
        host = probe.host_info(session)
        device = session.device
    if counted:
        check_renderer(cfg.measure, host.gl)
        env = {
            "PATH": os.environ.get("PATH", "/usr/bin:/bin"),
            "LANG": "C.UTF-8",
            "LC_ALL": "C.UTF-8",
            **probe.render_env(),
            **measure.pinned_env(),
        }
        host = host.replaced(
            codegen=measure.codegen_facts(host.gl, host.system, env, "the replayer's start")
        )
    else:
        env = dict(os.environ)
    traces = [
        (e, trace_facts(Path(e.trace.path), e.trace.sha256, e.trace.size_bytes))
        for e in plan.entries
        if e.trace is not None
    ]
    replayers = {facts.api: find_replayer(facts.api) for _, facts in traces}
    mode = cfg.measure if counted else "sync"
    first, api = traces[0][1], traces[0][1].api
    host = host.replaced(
        backend="+".join(sorted(replayers)), gl=_replayer_gl(host.gl, first, replayers[api], env)
    )
    if cfg.size is not None:
        progress.line(SIZE_NOTICE)
    plan.output.parent.mkdir(parents=True, exist_ok=True)
    plan, writer = run_output(
        plan,
        lambda plan: open_writer(
            plan.output,
            workload=plan.workload,
            options=_options(plan, device, traces, replayers, mode, env if counted else None),
            host=host,
            notes=cfg.notes,
            overwrite=cfg.force,
            failed_aside=True,
        ),
    )
    stop = StopFlag()
    results: list[SceneResult] = []
    # named after this process, so the next run removes it if this one is killed
    lifetime.remove_stale_dump_dirs()
    work = lifetime.make_dump_dir()
    try:
        with stop_on_signals(stop), entered(progress):
            for n, (entry, facts) in enumerate(traces, 1):
                if stop.set:
                    break
                one = _Replay(
                    writer,
                    plan,
                    entry,
                    facts,
                    replayers[facts.api],
                    env,
                    stop,
                    progress,
                    n,
                    host,
                    work,
                )
                results.append(one.run(counted))
            status = "interrupted" if stop.set else "complete"
            writer.finish(
                summary={
                    "timing_mode": mode,
                    "timing_reason": _reason(mode, counted),
                    "primary_clock": mode_clock(mode),
                    "scenes": [r.row() for r in results],
                },
                status=status,
            )
    except BaseException as exc:
        interrupted = isinstance(exc, KeyboardInterrupt) or stop.set
        if not writer.finished:
            with contextlib.suppress(Exception):
                writer.finish(
                    {"error": str(exc)[:400]}, status="interrupted" if interrupted else "aborted"
                )
        if isinstance(exc, KatraError) and len(exc.args) == 1 and not interrupted:
            exc.args = (str(exc) + failed_note(writer.failed_path),)
        raise
    finally:
        shutil.rmtree(work, ignore_errors=True)
    sizes = {
        (int(r.pixels.shape[1]), int(r.pixels.shape[0])) for r in results if r.pixels is not None
    }
    return RunResult(
        plan.output,
        status,
        mode,
        _reason(mode, counted),
        results,
        stop.signal_name,
        size=next(iter(sizes)) if len(sizes) == 1 else None,
    )


def _replayer_gl(gl: GLInfo, facts: TraceFacts, replayer: Replayer, env: dict[str, str]) -> GLInfo:
    """The probe's GL facts with the version and profile of the replayer's context."""
    got: dict[str, str] = {}
    if facts.current_call is not None:
        with x_display(env) if not replayer.headless else contextlib.nullcontext(env) as shown:
            got = rp.context_strings(replayer, facts.path, facts.current_call, shown)
    version = got.get("GL_VERSION")
    number = re.match(r"(?:OpenGL ES )?(\d+)\.(\d+)", version or "")
    return gl.replaced(
        version=version,
        version_code=int(number[1]) * 100 + int(number[2]) * 10 if number else None,
        glsl_version=got.get("GL_SHADING_LANGUAGE_VERSION"),
        profile={"1": "core", "2": "compatibility"}.get(got.get("GL_CONTEXT_PROFILE_MASK", "")),
    )


def _options(
    plan: RunPlan,
    device: int | None,
    traces: list[tuple[SceneEntry, TraceFacts]],
    replayers: dict[str, Replayer],
    mode: str,
    counted_env: dict[str, str] | None,
) -> CaptureOptions:
    """The capture options with the replay's facts; no size (:data:`SIZE_NOTICE`)."""
    zones = plan.zones
    replay: JsonObject = {
        "traces": {e.label: f.as_dict() for e, f in traces},
        "replayers": {api: r.as_dict() for api, r in replayers.items()},
        "options": {
            api: rp.replay_args(r, timed=counted_env is None, zones=zones == "draws")
            for api, r in replayers.items()
        },
    }
    if "glx" in replayers:
        given = (counted_env if counted_env is not None else os.environ).get("DISPLAY")
        replay["display"] = f"$DISPLAY {given}" if given else "an Xvfb of katra3d's own"
    base = capture_options(plan, "+".join(sorted(replayers)), device)
    base = dataclasses.replace(
        base, extra={**base.extra, "replay": replay}, layout=(*base.layout, "replay")
    )
    measured = MeasureOptions(mode="time")
    if counted_env is not None and plan.counting is not None:
        pins = measure.pinned_env()
        measured = MeasureOptions(
            mode=mode,
            valgrind=plan.counting.version,
            env=pins,
            frame_boundary=FRAME_BOUNDARY.format(
                swap="/".join(sorted(rp.SWAP_FUNCTION[a] for a in replayers))
            ),
            pinned={k: pins[k] for k in ("LP_NATIVE_VECTOR_WIDTH", "MESA_SHADER_CACHE_DISABLE")},
        )
    return base.replaced(
        size=None,
        resolved=base.resolved.replaced(size=None),
        timing_mode=mode,
        primary_clock=mode_clock(mode),
        zones=zones,
        timing_reason=_reason(mode, counted_env is not None),
        measure=measured,
    )


def _reason(mode: str, counted: bool) -> str:
    if counted:
        return f"--measure {mode}: the replayer counted under callgrind, single-threaded llvmpipe"
    return TIMED_REASON


class _Replay:
    def __init__(
        self,
        writer: TraceWriter,
        plan: RunPlan,
        entry: SceneEntry,
        facts: TraceFacts,
        replayer: Replayer,
        env: dict[str, str],
        stop: StopFlag,
        progress: ProgressSink,
        n: int,
        host: HostInfo,
        work: Path,
    ) -> None:
        self.writer, self.plan, self.entry, self.facts, self.replayer = (
            writer,
            plan,
            entry,
            facts,
            replayer,
        )
        self.env, self.stop, self.progress, self.n, self.host = env, stop, progress, n, host
        self.work = work
        self.scene_id = writer.intern(entry.label)
        self.frame_name = writer.intern(FRAME_NAME)
        self.origin = writer.start_host_ns
        self.where = f"[{n}/{len(plan.entries)}] {entry.label}"
        self.startup_ns: list[int] = []
        self.restart_said = False

    def run(self, counted: bool) -> SceneResult:
        plan, label = self.plan, self.entry.label
        total = plan.warmup + (plan.frames or 0)
        self.progress.scene_started(self.n, label, total)
        self.progress.phase(
            f"{self.where}: {'counting' if counted else 'replaying'} (glretrace)", total
        )
        env_cm = (
            x_display(self.env) if not self.replayer.headless else contextlib.nullcontext(self.env)
        )
        with env_cm as env:
            if counted:
                values, last_calls, restarts = self._counted(env, total)
            else:
                values, last_calls, restarts = self._timed(env, total)
            done = len(values)
            left_out = set(restarts)
            measured = [
                v for k, v in enumerate(values[plan.warmup :], plan.warmup) if k not in left_out
            ]
            result = SceneResult(
                label,
                "ok",
                frames=len(measured),
                warmup=min(done, plan.warmup),
                clock=mode_clock(plan.config.measure if counted else "sync"),
                params=dict(self.entry.params),
            )
            if self.stop.set or result.frames < (plan.frames or 0):
                result.status = "interrupted"
            if measured:
                result.stats = scene_stats(measured, counts=counted)
            replay: JsonObject = {
                "trace": self.facts.as_dict(),
                "restarts": restarts,
                "note": "a replay of the trace from its start begins at each frame in "
                "'restarts', flagged SETUP: left out of the statistics",
            }
            if not self.replayer.headless:
                replay["display"] = env.get("DISPLAY", "")
            if self.startup_ns:
                replay["startup_ms"] = [round(ns / 1e6, 3) for ns in self.startup_ns]
            annotation: JsonObject = {
                "type": "scene",
                "scene": label,
                "spec": self.entry.spec,
                "status": result.status,
                "params": dict(self.entry.params),
                "warmup_frames": result.warmup,
                "measured_frames": result.frames,
                "replay": replay,
            }
            if done and last_calls and not self.stop.set:  # stopped: no more replays
                annotation.update(self._last_image(result, env, last_calls[done - 1], done - 1))
        self.writer.annotate(annotation)
        self.progress.line(
            f"{self.where}: {result.frames} frame{'s' if result.frames != 1 else ''}"
            + median_text(result)
            + (
                f"; {len(restarts)} restart frame{'s' if len(restarts) > 1 else ''} left out"
                if restarts
                else ""
            )
        )
        return result

    def _flags(self, k: int, restarts: set[int]) -> int:
        """SETUP on a restart's frame: left out of the statistics."""
        return (int(Flag.WARMUP) if k < self.plan.warmup else 0) | (
            int(Flag.SETUP) if k in restarts else 0
        )

    def _restarted(self, k: int) -> None:
        if self.restart_said:
            return
        self.restart_said = True
        self.progress.line(
            f"{self.where}: the trace ended after {k} frames: it is replayed again from its start "
            "by a new replayer, and each restart's frame (its context and compiles) is left out of "
            "the statistics"
        )

    def _timed(self, env: dict[str, str], total: int) -> tuple[list[int], list[int], list[int]]:
        zones = self.plan.zones == "draws"
        show = self.progress.advance if self.progress.tty else None
        got = rp.timed_frames(
            self.replayer,
            self.facts.path,
            total,
            env,
            zones=zones,
            stopped=lambda: self.stop.set,
            warmup=self.plan.warmup,
            on_frame=show,
            on_restart=self._restarted,
            where=self.work,
        )
        self.startup_ns = got.startup_ns
        bases = (
            {
                p: replayer_base_ns(
                    [f for f, q in zip(got.frames, got.process_of, strict=True) if q == p]
                )
                for p in set(got.process_of)
            }
            if zones
            else {}
        )
        durations: list[int] = []
        restart_set = set(got.restarts)
        add, wall, cpu = self.writer.append, int(Clock.WALL), int(Clock.CPU)
        for k, frame in enumerate(got.frames):
            proc = got.process_of[k]
            start = (
                got.starts_ns[proc]
                if k == 0 or got.process_of[k - 1] != proc
                else got.frames[k - 1].end_ns
            )
            flags = self._flags(k, restart_set)
            dur = max(0, frame.end_ns - start)
            add(
                int(Kind.FRAME),
                wall,
                self.scene_id,
                self.frame_name,
                k,
                0,
                start - self.origin,
                dur,
                0.0,
                flags,
            )
            durations.append(dur)
            base = bases.get(proc)
            if base is None:
                continue
            for draw, zone in zip(frame.draws, draw_zones(frame.draws), strict=True):
                add(
                    int(Kind.ZONE),
                    cpu,
                    self.scene_id,
                    self.writer.intern(zone),
                    k,
                    1,
                    base + draw.start_ns - self.origin,
                    draw.dur_ns,
                    0.0,
                    flags,
                )
        return durations, [f.last_call for f in got.frames], got.restarts

    def _counted(self, env: dict[str, str], total: int) -> tuple[list[int], list[int], list[int]]:
        assert self.plan.counting is not None
        cycles = self.plan.config.measure == "cycles"
        command = rp.counted_command(
            self.plan.counting.valgrind,
            self.replayer,
            self.facts.path,
            self.plan.output.with_name("cg.out"),
            cycles=cycles,
        )
        frames, last_calls, restarts = rp.counted_frames(
            command,
            env,
            total,
            stopped=lambda: self.stop.set,
            warmup=self.plan.warmup,
            on_restart=self._restarted,
            where=self.work,
        )
        values: list[int] = []
        add = self.writer.append
        restart_set = set(restarts)
        clock = int(Clock.CYCLES if cycles else Clock.INSTRUCTIONS)
        at = 0
        for k, counts in enumerate(frames):
            value = estimated_cycles(counts) if cycles else int(counts.get("Ir", 0))
            flags = self._flags(k, restart_set)
            add(int(Kind.FRAME), clock, self.scene_id, self.frame_name, k, 0, at, value, 0.0, flags)
            if cycles:
                add(
                    int(Kind.FRAME),
                    int(Clock.INSTRUCTIONS),
                    self.scene_id,
                    self.frame_name,
                    k,
                    0,
                    at,
                    int(counts.get("Ir", 0)),
                    0.0,
                    flags,
                )
            at += 1
            values.append(value)
        return values, last_calls, restarts

    def _last_image(
        self, result: SceneResult, env: dict[str, str], call_no: int, index: int
    ) -> JsonObject:
        self.progress.phase(f"{self.where}: the last frame's image (an untimed replay)", None)
        png = rp.snapshot(
            self.replayer,
            self.facts.path,
            call_no,
            env,
            stopped=lambda: self.stop.set,
            where=self.work,
        )
        if png is None:  # stopped: the frames are kept, without an image
            return {}
        try:
            pixels = decode_png(png, f"glretrace's snapshot of call {call_no}")
        except ValueError as exc:
            raise rp.ReplayFailed(str(exc)) from None
        if pixels.shape[2] == 3:
            import numpy as np  # deferred: only a kept frame needs it

            pixels = np.concatenate(
                [pixels, np.full(pixels.shape[:2] + (1,), 255, np.uint8)], axis=2
            )
        result.pixels = pixels
        result.checksum = image_checksum(pixels)
        keys: JsonObject = {
            "last_frame_index": index,
            "last_frame_sha256": result.checksum,
            "last_frame_call": call_no,
            "size": [int(pixels.shape[1]), int(pixels.shape[0])],
        }
        if self.plan.keep_images and result.frames == self.plan.frames and result.status == "ok":
            self.writer.image(
                *frame_record(
                    self.entry.label,
                    index,
                    frame_time_s(index),
                    pixels,
                    image_key(self.host.as_dict()),
                )
            )
            keys["image_kept"] = True
        return keys


__all__ = ["check_plan", "has_traces", "run"]
