"""The runner: a validated RunConfig in, a trace and a per-scene table out.

Order of work (docs/timing.md, DESIGN.md "Data flow"): validate the config
and resolve every scene and param (no GL yet: a bad input costs nothing and
leaves nothing behind) -> open the backend -> probe the host -> choose the
timing mode -> create the trace (header = capture options + host info) ->
per scene: setup (timed, a SETUP marker), warmup frames (flagged WARMUP),
measured frames, last-frame checksum (+ PNG), release -> drain pending GPU
queries -> summary -> table.

Ctrl-C / SIGTERM set a flag that the frame loop checks after each frame: the
current frame completes, and the trace is finished with status
``interrupted``.
"""

from __future__ import annotations

import contextlib
import dataclasses
import datetime as dt
import math
import os
import re
import signal
import sys
import tempfile
import threading
import time
from collections.abc import Iterator, Mapping, Sequence
from pathlib import Path
from typing import Any, TextIO

from katra_trace.errors import ConfigError, KatraError, SceneError
from katra_trace.schema import Clock, Flag, Kind

#: Defaults when neither the command line nor a suite says.
DEFAULT_FRAMES = 100
DEFAULT_WARMUP = 5
DEFAULT_SIZE = (640, 360)
MAX_SIZE = 16384
MAX_FRAMES = 10_000_000
MAX_DURATION_S = 7 * 24 * 3600.0


def parse_size(text: str) -> tuple[int, int]:
    """``"640x360"`` -> (640, 360); ConfigError for anything else or non-positive sizes."""
    m = re.fullmatch(r"\s*(\d+)\s*[xX]\s*(\d+)\s*", text)
    if not m:
        raise ConfigError(f"bad size '{text}': expected WIDTHxHEIGHT, e.g. 640x360")
    size = (int(m.group(1)), int(m.group(2)))
    _check_size(size)
    return size


def _check_size(size: tuple[int, int]) -> None:
    w, h = size
    if not (1 <= w <= MAX_SIZE and 1 <= h <= MAX_SIZE):
        raise ConfigError(f"bad size {w}x{h}: width and height must be in 1..{MAX_SIZE}")


def parse_param(text: str) -> tuple[str, str, str]:
    """``"SCENE.KEY=VALUE"`` -> (scene, key, value); ConfigError when malformed."""
    m = re.fullmatch(r"([^.=\s]+(?:\.[^.=\s]+)*)\.([A-Za-z_][\w-]*)=(.*)", text.strip(), flags=re.S)
    if not m:
        raise ConfigError(f"bad --param '{text}': expected SCENE.KEY=VALUE, e.g. triangle.speed=0.5")
    return m.group(1), m.group(2), m.group(3)


@dataclasses.dataclass(frozen=True)
class RunConfig:
    """Everything that defines a run; stored whole in the trace's capture options.

    ``scenes`` and/or ``suite`` say what runs (the suite's entries first).
    ``frames`` (measured, per scene) or ``duration_s`` (measured seconds per
    scene, host clock); ``warmup`` frames per scene; ``size`` (w, h) px;
    ``samples`` MSAA samples (0 = none). None means "the suite's value, else
    the default". ``params``: (scene, key, value) overrides, values as typed.
    """

    scenes: tuple[str, ...] = ()
    suite: str | None = None
    frames: int | None = None
    duration_s: float | None = None
    warmup: int | None = None
    size: tuple[int, int] | None = None
    samples: int = 0
    backend: str | None = None
    device: int | None = None
    timing: str = "auto"
    zones: bool = False
    seed: int = 0
    params: tuple[tuple[str, str, Any], ...] = ()
    output: str | None = None
    notes: str = ""
    screenshot_dir: str | None = None

    def as_dict(self) -> dict[str, Any]:
        """JSON-ready dict of every field (params as SCENE.KEY -> value)."""
        out = dataclasses.asdict(self)
        out["scenes"] = list(self.scenes)
        out["size"] = list(self.size) if self.size else None
        out["params"] = {f"{s}.{k}": v for s, k, v in self.params}
        return out


@dataclasses.dataclass(frozen=True)
class SceneEntry:
    """One scene of a plan: display ``label`` (unique in the run), spec, class, resolved params."""

    label: str
    spec: str
    cls: type
    params: Mapping[str, Any]


@dataclasses.dataclass(frozen=True)
class RunPlan:
    """A validated RunConfig with everything resolved (still no GL)."""

    config: RunConfig
    entries: tuple[SceneEntry, ...]
    frames: int | None
    duration_s: float | None
    warmup: int
    size: tuple[int, int]
    output: Path
    screenshot_dir: Path | None
    workload: str


def _writable_dir(path: Path, what: str) -> None:
    """ConfigError unless ``path`` is (or could be created as) a writable directory."""
    probe = path
    while not probe.exists():
        if probe.parent == probe:
            break
        probe = probe.parent
    if not probe.is_dir():
        raise ConfigError(f"{what} '{path}': '{probe}' is not a directory")
    try:
        with tempfile.TemporaryFile(dir=probe, prefix=".katra3d-write-check-"):
            pass
    except OSError as exc:
        raise ConfigError(f"{what} '{path}': directory '{probe}' is not writable "
                          f"({exc.strerror or exc})") from None


def default_output(workload_name: str, now: dt.datetime | None = None) -> Path:
    """``traces/<UTC timestamp>-<suite or scene>.katra``; ``-2``, ``-3``… when that name is taken
    (two runs within one second must not write into the same file)."""
    now = now or dt.datetime.now(dt.timezone.utc)
    stamp = now.strftime("%Y%m%dT%H%M%SZ")
    safe = re.sub(r"[^A-Za-z0-9_.-]+", "_", workload_name)[:60] or "run"
    path = Path("traces") / f"{stamp}-{safe}.katra"
    n = 2
    while path.exists():
        path = Path("traces") / f"{stamp}-{safe}-{n}.katra"
        n += 1
    return path


def plan_run(config: RunConfig) -> RunPlan:
    """Validate ``config`` and resolve scenes, params and paths; raises ConfigError/SceneError.

    Touches no GL and writes nothing.
    """
    from harness.backends import CHOICES, resolve_name
    from harness.timing import MODES
    from scenes.registry import get_scene, resolve_params

    suite = None
    if config.suite is not None:
        from scenes.suites import get_suite

        suite = get_suite(config.suite)
    if not config.scenes and suite is None:
        raise ConfigError("nothing to run: name at least one scene, or --suite NAME")
    if config.frames is not None and config.duration_s is not None:
        raise ConfigError("give --frames or --duration, not both")
    if config.frames is not None and not 1 <= config.frames <= MAX_FRAMES:
        raise ConfigError(f"bad --frames {config.frames}: must be in 1..{MAX_FRAMES}")
    if config.duration_s is not None and not (0 < config.duration_s <= MAX_DURATION_S
                                              and math.isfinite(config.duration_s)):
        raise ConfigError(f"bad --duration {config.duration_s}: must be > 0 seconds (at most one week)")
    if config.warmup is not None and not 0 <= config.warmup <= MAX_FRAMES:
        raise ConfigError(f"bad --warmup {config.warmup}: must be in 0..{MAX_FRAMES}")
    if config.size is not None:
        _check_size(tuple(config.size))  # type: ignore[arg-type]
    if not 0 <= config.samples <= 64:
        raise ConfigError(f"bad --samples {config.samples}: must be in 0..64")
    if config.device is not None and config.device < 0:
        raise ConfigError(f"bad --device {config.device}: must be >= 0")
    if config.timing not in MODES:
        raise ConfigError(f"unknown --timing '{config.timing}'; choose one of: {', '.join(MODES)}")
    if config.backend is not None and config.backend not in CHOICES:
        raise ConfigError(f"unknown --backend '{config.backend}'; choose one of: {', '.join(CHOICES)}")
    resolve_name(config.backend)  # validates $KATRA3D_BACKEND too
    if not 0 <= config.seed < 2**63:
        raise ConfigError(f"bad --seed {config.seed}: must be in 0..2**63-1")

    raw: list[tuple[str, Mapping[str, Any]]] = list(suite.entries) if suite else []
    raw += [(name, {}) for name in config.scenes]
    overrides: dict[str, dict[str, Any]] = {}
    for scene_name, key, value in config.params:
        overrides.setdefault(scene_name, {})[key] = value
    entries: list[SceneEntry] = []
    seen: dict[str, int] = {}
    for spec, suite_params in raw:
        cls = get_scene(spec)
        name = str(getattr(cls, "name", "") or spec)
        merged = {**dict(suite_params), **overrides.get(name, {}), **overrides.get(spec, {})}
        params = resolve_params(cls, merged)
        seen[name] = seen.get(name, 0) + 1
        label = name if seen[name] == 1 else f"{name}#{seen[name]}"
        entries.append(SceneEntry(label, spec, cls, params))
    names = {str(getattr(e.cls, "name", "")) for e in entries} | {e.spec for e in entries}
    for scene_name in overrides:
        if scene_name not in names:
            raise ConfigError(f"--param names scene '{scene_name}', which is not in this run; "
                              f"scenes in this run: {', '.join(e.label for e in entries)}")

    frames = config.frames
    if frames is None and config.duration_s is None:
        frames = suite.frames if suite else DEFAULT_FRAMES
    warmup = config.warmup if config.warmup is not None else (suite.warmup if suite else DEFAULT_WARMUP)
    size = tuple(config.size) if config.size else (tuple(suite.size) if suite else DEFAULT_SIZE)
    workload = suite.name if suite else "+".join(e.label for e in entries)
    if suite and config.scenes:
        workload = f"{suite.name}+{'+'.join(config.scenes)}"

    if config.output:
        output = Path(config.output)
        if output.is_dir():
            raise ConfigError(f"output '{output}' is a directory; give a file path, e.g. {output / 'run.katra'}")
        if not output.parent.is_dir():
            raise ConfigError(f"output directory '{output.parent}' does not exist")
        _writable_dir(output.parent, "output")
    else:
        output = default_output(suite.name if suite else entries[0].label if len(entries) == 1
                                else workload)
        _writable_dir(output.parent, "output directory")
    shots = Path(config.screenshot_dir) if config.screenshot_dir else None
    if shots is not None:
        if shots.exists() and not shots.is_dir():
            raise ConfigError(f"--screenshot '{shots}' is not a directory")
        _writable_dir(shots, "--screenshot directory")
    return RunPlan(config, tuple(entries), frames, config.duration_s, warmup,
                   (int(size[0]), int(size[1])), output, shots, workload)


# --------------------------------------------------------------------------- results


@dataclasses.dataclass
class SceneResult:
    """What one scene produced: status (ok | skipped | interrupted), measured frames, stats."""

    label: str
    status: str
    frames: int = 0
    warmup: int = 0
    setup_ms: float = 0.0
    clock: str = ""
    stats: dict[str, Any] | None = None
    checksum: str = ""
    reason: str = ""

    def row(self) -> dict[str, Any]:
        s = self.stats or {}
        return {"scene": self.label, "status": self.status, "frames": self.frames,
                "median_ms": s.get("median_ms"), "p99_ms": s.get("p99_ms"),
                "fps_avg": s.get("fps_avg"), "fps_low_1pct": s.get("fps_low_1pct"),
                "clock": self.clock, "setup_ms": round(self.setup_ms, 3)}


@dataclasses.dataclass
class RunResult:
    """The outcome of :func:`run`: trace path, status (complete | interrupted), per-scene results."""

    path: Path
    status: str
    timing_mode: str
    timing_reason: str
    scenes: list[SceneResult]
    signal_name: str = ""


# --------------------------------------------------------------------------- stop flag


class StopFlag:
    """Set by SIGINT/SIGTERM while a run is in progress; the frame loop polls ``.set``."""

    def __init__(self) -> None:
        self.set = False
        self.signal_name = ""

    def trip(self, signum: int, _frame: Any = None) -> None:
        self.set = True
        self.signal_name = signal.Signals(signum).name


@contextlib.contextmanager
def stop_on_signals(flag: StopFlag) -> Iterator[StopFlag]:
    """Route SIGINT/SIGTERM to ``flag`` for the duration (main thread only)."""
    if threading.current_thread() is not threading.main_thread():
        yield flag
        return
    old = {sig: signal.signal(sig, flag.trip) for sig in (signal.SIGINT, signal.SIGTERM)}
    try:
        yield flag
    finally:
        for sig, handler in old.items():
            signal.signal(sig, handler)


# --------------------------------------------------------------------------- progress


class Progress:
    """A rich progress bar on a TTY, plain lines otherwise (both on ``stream``, stderr by default)."""

    def __init__(self, total_scenes: int, stream: TextIO | None = None, quiet: bool = False) -> None:
        self.stream = stream or sys.stderr
        self.total = total_scenes
        self.quiet = quiet
        self.tty = bool(getattr(self.stream, "isatty", lambda: False)()) and not quiet
        self._bar: Any = None
        self._task: Any = None

    def __enter__(self) -> Progress:
        if self.tty:
            from rich.console import Console
            from rich.progress import BarColumn, MofNCompleteColumn, Progress as RichProgress, TextColumn, \
                TimeElapsedColumn

            self._bar = RichProgress(TextColumn("{task.description}"), BarColumn(), MofNCompleteColumn(),
                                     TimeElapsedColumn(), console=Console(file=self.stream), transient=True)
            self._bar.__enter__()
        return self

    def __exit__(self, *exc: object) -> None:
        if self._bar is not None:
            self._bar.__exit__(None, None, None)
            self._bar = None

    def line(self, text: str) -> None:
        if self.quiet:
            return
        if self._bar is not None:
            self._bar.console.print(text, markup=False, highlight=False)
        else:
            print(f"katra3d: {text}", file=self.stream, flush=True)

    def scene_started(self, index: int, label: str, total_frames: int | None) -> None:
        if self._bar is not None:
            if self._task is not None:
                self._bar.remove_task(self._task)
            self._task = self._bar.add_task(f"[{index}/{self.total}] {label}", total=total_frames)
        else:
            self.line(f"[{index}/{self.total}] {label}: running")

    def advance(self, done: int) -> None:
        if self._bar is not None:
            self._bar.update(self._task, completed=done)


# --------------------------------------------------------------------------- the run


def _scene_loop(timer: Any, session: Any, scene: Any, key: tuple[int, int], first: int, count: int | None,
                deadline_ns: int | None, flags: int, stop: StopFlag, progress: Progress) -> int:
    """Render frames ``first``.. (``count`` of them, or until ``deadline_ns``); returns frames done."""
    from harness.timing import HarnessFrame
    from scenes.api import NOMINAL_RATE_HZ

    render = scene.render
    ctx = session.ctx
    fbo = session.fbo
    bind = fbo.use
    begin = timer.begin_frame
    end = timer.end_frame
    zone = timer.zone
    pc = time.perf_counter_ns
    rate = NOMINAL_RATE_HZ
    show = progress.tty
    next_update_ns = 0
    i = first
    done = 0
    while not stop.set:
        if count is not None:
            if done >= count:
                break
        elif pc() >= deadline_ns:  # type: ignore[operator]
            break
        if ctx.fbo is not fbo:
            bind()
        begin(i, flags)
        render(HarnessFrame(i, i / rate, key, zone))
        end()
        i += 1
        done += 1
        if show:
            now = pc()
            if now >= next_update_ns:
                progress.advance(done)
                next_update_ns = now + 100_000_000
    if show:
        progress.advance(done)
    return done


def run(config: RunConfig, *, progress_stream: TextIO | None = None, quiet: bool = False,
        plan: RunPlan | None = None) -> RunResult:
    """Run ``config``: returns a :class:`RunResult`; the trace is at ``result.path``.

    Raises ConfigError/SceneError for bad input (before anything is written),
    BackendUnavailable when no GL context can be opened.
    """
    from harness import backends, probe, timing
    from katra_trace.writer import TraceWriter
    from scenes.api import SceneSkip
    from scenes.image import image_checksum, read_pixels, write_png

    plan = plan or plan_run(config)
    cfg = plan.config
    session = backends.open_session(cfg.backend, device=cfg.device, size=plan.size, samples=cfg.samples)
    writer = None
    timer = None
    try:
        host = probe.host_info(session)
        mode, reason = timing.choose_mode(cfg.timing, host["gl"])
        options = cfg.as_dict()
        options.update({
            "timing_mode": mode,
            "timing_reason": reason,
            "primary_clock": "wall" if mode == "sync" else "gpu",
            "resolved": {
                "frames": plan.frames, "duration_s": plan.duration_s, "warmup": plan.warmup,
                "size": list(plan.size), "samples": cfg.samples, "backend": session.backend,
                "output": str(plan.output),
                "device": session.device,
                "scenes": [{"label": e.label, "spec": e.spec, "params": dict(e.params)} for e in plan.entries],
            },
        })
        if plan.output.parent != Path("") and not plan.output.parent.exists():
            plan.output.parent.mkdir(parents=True, exist_ok=True)
        if plan.screenshot_dir is not None:
            plan.screenshot_dir.mkdir(parents=True, exist_ok=True)
        writer = TraceWriter(plan.output, workload=plan.workload, capture_options=options,
                             host_info=host, notes=cfg.notes)
        buffer = timing.EventBuffer(writer)
        timer = timing.make_timer(mode, session.ctx, writer, buffer, zones=cfg.zones)
        results: list[SceneResult] = []
        stop = StopFlag()
        with stop_on_signals(stop), Progress(len(plan.entries), progress_stream, quiet) as prog:
            for n, entry in enumerate(plan.entries, 1):
                if stop.set:
                    break
                results.append(_run_scene(n, entry, plan, session, timer, writer, buffer, stop, prog,
                                          SceneSkip, read_pixels, image_checksum, write_png))
            timer.drain()
        status = "interrupted" if stop.set else "complete"
        if stop.set:
            prog.line(f"stopped by {stop.signal_name}: trace finished as interrupted")
        summary: dict[str, Any] = {"scenes": [r.row() for r in results], "timing_mode": mode, "timing_reason": reason,
                   "primary_clock": timer.primary_clock.name.lower()}
        if isinstance(timer, timing.GpuTimer):
            summary["gpu_max_lag_frames"] = timer.max_lag_frames
        timer.close()
        timer = None
        writer.finish(summary=summary, status=status)
        return RunResult(plan.output, status, mode, reason, results, stop.signal_name)
    except BaseException as exc:
        if timer is not None:
            with contextlib.suppress(Exception):
                timer.drain()  # keep every frame measured before the failure
            with contextlib.suppress(Exception):
                timer.close()
        if writer is not None and not writer.finished:
            with contextlib.suppress(Exception):
                writer.flush()
            with contextlib.suppress(Exception):
                status = "interrupted" if isinstance(exc, KeyboardInterrupt) else "aborted"
                writer.finish({"error": f"{type(exc).__name__}: {exc}"}, status=status)
        raise
    finally:
        session.close()


def _run_scene(n: int, entry: SceneEntry, plan: RunPlan, session: Any, timer: Any, writer: Any, buffer: Any,
               stop: StopFlag, prog: Progress, skip_exc: type[BaseException], read_pixels: Any,
               image_checksum: Any, write_png: Any) -> SceneResult:
    from harness.timing import seed_key

    cfg = plan.config
    scene_id = timer.set_scene(entry.label)
    setup_name = writer.intern("setup")
    total = plan.frames if plan.frames is not None else None
    prog.scene_started(n, entry.label, (total or 0) + plan.warmup if total is not None else None)
    scene = entry.cls()
    session.bind()
    t0 = time.perf_counter_ns()
    try:
        scene.setup(session.ctx, plan.size, dict(entry.params))
        session.ctx.finish()
    except skip_exc as exc:
        t1 = time.perf_counter_ns()
        buffer.add((int(Kind.MARKER), int(Clock.WALL), int(Flag.SKIPPED), 0, scene_id, writer.intern("skipped"),
                    0, t0 - timer.origin_ns, t1 - t0, 0.0))
        buffer.flush()
        writer.annotate({"type": "scene", "scene": entry.label, "spec": entry.spec, "status": "skipped",
                         "reason": str(exc), "params": dict(entry.params)})
        with contextlib.suppress(Exception):
            scene.release()
        prog.line(f"[{n}/{len(plan.entries)}] {entry.label}: skipped: {exc}")
        return SceneResult(entry.label, "skipped", reason=str(exc))
    except KatraError:
        with contextlib.suppress(Exception):
            scene.release()
        raise
    except Exception as exc:
        with contextlib.suppress(Exception):
            scene.release()
        raise SceneError(f"scene '{entry.label}' failed in setup: {type(exc).__name__}: {exc}") from exc
    t1 = time.perf_counter_ns()
    setup_ms = (t1 - t0) / 1e6
    buffer.add((int(Kind.MARKER), int(Clock.WALL), int(Flag.SETUP), 0, scene_id, setup_name, 0,
                t0 - timer.origin_ns, t1 - t0, 0.0))
    key = seed_key(cfg.seed, entry.label)
    result = SceneResult(entry.label, "ok", setup_ms=setup_ms, clock=timer.primary_clock.name.lower())
    try:
        try:
            warm = _scene_loop(timer, session, scene, key, 0, plan.warmup, None, int(Flag.WARMUP), stop, prog)
            deadline = None
            if plan.duration_s is not None:
                deadline = time.perf_counter_ns() + int(plan.duration_s * 1e9)
            measured = _scene_loop(timer, session, scene, key, warm, plan.frames, deadline, 0, stop, prog)
        except KatraError:
            raise
        except Exception as exc:
            raise SceneError(f"scene '{entry.label}' failed while rendering: {type(exc).__name__}: {exc}") from exc
        result.warmup = warm
        result.frames = measured
        if stop.set:
            result.status = "interrupted"
        timer.settle()  # reads back this scene's pending GPU queries (no-op in sync mode)
        frame_ns = timer.frame_ns
        if frame_ns:
            import numpy as np

            from katra_trace.stats import frame_stats

            result.stats = frame_stats(np.asarray(frame_ns, dtype=np.float64)).as_dict()
        annotation: dict[str, Any] = {"type": "scene", "scene": entry.label, "spec": entry.spec,
                                      "status": result.status, "params": dict(entry.params),
                                      "setup_ms": round(setup_ms, 3), "warmup_frames": warm,
                                      "measured_frames": measured}
        if warm + measured > 0:
            pixels = read_pixels(session.ctx, scene)
            result.checksum = image_checksum(pixels)
            annotation["last_frame_index"] = warm + measured - 1
            annotation["last_frame_sha256"] = result.checksum
            if plan.screenshot_dir is not None:
                shot = plan.screenshot_dir / f"{_safe(entry.label)}.png"
                write_png(shot, pixels)
                annotation["screenshot"] = str(shot)
        buffer.flush()
        writer.annotate(annotation)
    finally:
        with contextlib.suppress(Exception):
            scene.release()
        session.bind()
    if not prog.tty:
        prog.line(f"[{n}/{len(plan.entries)}] {entry.label}: {result.frames} frames"
                  + (f", median {result.stats['median_ms']:.3f} ms ({result.clock})" if result.stats else ""))
    return result


def _safe(label: str) -> str:
    return re.sub(r"[^A-Za-z0-9_.-]+", "_", label)


def format_table(result: RunResult) -> str:
    """The end-of-run table: per scene frames, median / p99 ms, average and 1%-low FPS, clock."""
    from rich.console import Console
    from rich.table import Table

    table = Table(title=f"katra3d run ({result.status}; timing {result.timing_mode})", title_justify="left")
    for col in ("scene", "frames", "median ms", "p99 ms", "avg FPS", "1% low FPS", "clock"):
        table.add_column(col, justify="left" if col in ("scene", "clock") else "right")

    def f(value: Any, digits: int) -> str:
        return "-" if value is None else f"{value:.{digits}f}"

    for r in result.scenes:
        s = r.stats or {}
        if r.status == "skipped":
            table.add_row(r.label, "skipped", "-", "-", "-", "-", r.reason[:60])
            continue
        table.add_row(r.label + (" (interrupted)" if r.status == "interrupted" else ""), str(r.frames),
                      f(s.get("median_ms"), 3), f(s.get("p99_ms"), 3), f(s.get("fps_avg"), 1),
                      f(s.get("fps_low_1pct"), 1), r.clock)
    console = Console(width=120, record=True, file=open(os.devnull, "w"))  # noqa: SIM115
    console.print(table)
    text = console.export_text()
    console.file.close()
    return text.rstrip() + f"\ntrace: {result.path}"


__all__ = [
    "DEFAULT_FRAMES",
    "DEFAULT_SIZE",
    "DEFAULT_WARMUP",
    "RunConfig",
    "RunPlan",
    "RunResult",
    "SceneEntry",
    "SceneResult",
    "default_output",
    "format_table",
    "parse_param",
    "parse_size",
    "plan_run",
    "run",
]
