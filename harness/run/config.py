"""What a run is: :class:`RunConfig` (validated input) and :class:`RunPlan` (resolved, no GL
yet), all checked before any GL or disk work so a bad input leaves nothing behind."""

from __future__ import annotations

import dataclasses
import datetime as dt
import math
import numbers
import re
import tempfile
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

from katra3d.harness.engine.timers import MODES, zone_mode
from katra3d.harness.gl.backends import CHOICES, resolve_name
from katra3d.harness.run.jobs import resolve_jobs
from katra3d.harness.run.valgrind import Counting, counting
from katra3d.scenes.api import ParamValue, Scene
from katra3d.scenes.registry import (
    TraceFile,
    names_scene,
    resolve_params,
    scene_or_trace,
    with_class,
)
from katra3d.scenes.suites import get_suite, scene_cost, shard_indices
from katra_trace import metrics
from katra_trace.analysis.images import file_stem
from katra_trace.analysis.references import DURATION_NOTICE
from katra_trace.errors import ConfigError
from katra_trace.io import claim
from katra_trace.io.merge import parse_shard

DEFAULT_FRAMES = 100
DEFAULT_WARMUP = 5
DEFAULT_SIZE = (640, 360)
DEFAULT_REFERENCE_EVERY = 4
MAX_SIZE = 16384
MAX_FRAMES = 10_000_000
MAX_SEED = 2**63 - 1
MAX_DURATION_S = 7 * 24 * 3600.0


def parse_size(text: str) -> tuple[int, int]:
    """``"640x360"`` -> (640, 360); ConfigError for anything else or non-positive sizes."""
    m = re.fullmatch(r"\s*(\d+)\s*[xX]\s*(\d+)\s*", text)
    if not m:
        raise ConfigError(f"bad size '{text}': expected WIDTHxHEIGHT, e.g. 640x360")
    size = (int(m.group(1)), int(m.group(2)))
    _check_size(size)
    return size


def _check_size(size: Any) -> tuple[int, int]:
    if isinstance(size, str | bytes) or not isinstance(size, Sequence) or len(size) != 2:
        raise ConfigError(f"bad size {size!r}: expected (WIDTH, HEIGHT), e.g. (640, 360)")
    if not all(_whole(v) and 1 <= v <= MAX_SIZE for v in size):
        shown = f"{size[0]}x{size[1]}" if all(map(_whole, size)) else repr(tuple(size))
        raise ConfigError(
            f"bad size {shown}: width and height must be whole numbers in 1..{MAX_SIZE}"
        )
    return int(size[0]), int(size[1])


def _whole(value: Any) -> bool:
    return isinstance(value, numbers.Integral) and not isinstance(value, bool)


def check_whole(value: Any, option: str, low: int, high: int) -> int:
    """``value`` as an int in ``low..high``, else ConfigError naming ``option``."""
    if not _whole(value):
        raise ConfigError(f"bad {option} {value!r}: expected a whole number in {low}..{high}")
    if not low <= value <= high:
        raise ConfigError(f"bad {option} {value}: must be in {low}..{high}")
    return int(value)


def check_numbers(
    frames: Any, warmup: Any, size: Any, seed: Any, prefix: str = "--"
) -> tuple[int | None, int | None, tuple[int, int] | None, int]:
    return (
        None if frames is None else check_whole(frames, f"{prefix}frames", 1, MAX_FRAMES),
        None if warmup is None else check_whole(warmup, f"{prefix}warmup", 0, MAX_FRAMES),
        None if size is None else _check_size(size),
        check_whole(seed, f"{prefix}seed", 0, MAX_SEED),
    )


def parse_int(value: str | None, option: str, minimum: int = 0) -> int | None:
    if value is None:
        return None
    try:
        out = int(value.strip())
    except ValueError:
        raise ConfigError(f"bad {option} '{value}': expected a whole number") from None
    if out < minimum:
        raise ConfigError(f"bad {option} {out}: must be >= {minimum}")
    return out


def parse_seconds(value: str | None, option: str) -> float | None:
    """A positive number of seconds (``10``, ``2.5``, ``3s``); None stays None."""
    if value is None:
        return None
    try:
        out = float(value.strip().rstrip("s"))
    except ValueError:
        raise ConfigError(f"bad {option} '{value}': expected seconds, e.g. 10 or 2.5") from None
    if not out > 0 or out == float("inf"):
        raise ConfigError(f"bad {option} {value}: must be a positive number of seconds")
    return out


def parse_param(text: str) -> tuple[str, str, str]:
    """``"SCENE.KEY=VALUE"`` -> (scene, key, value); ``"KEY=VALUE"`` -> ("", key, value). SCENE
    ends at the last dot before the first ``=``."""
    target, sep, value = text.strip().partition("=")
    scene, dot, key = target.rpartition(".")
    if sep and re.fullmatch(r"[A-Za-z_][\w-]*", key) and (scene.strip() or not dot):
        return scene.strip(), key, value
    raise ConfigError(
        f"bad --param '{text}': expected SCENE.KEY=VALUE, e.g. triangle.speed=0.5 (or KEY=VALUE "
        "when one scene runs)"
    )


@dataclasses.dataclass(frozen=True)
class RunConfig:
    """Everything that defines a run, stored in the trace's capture options (docs/cli.md); None:
    the suite's value, else the default. ``jobs`` is not recorded."""

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
    zones: bool | str = False
    seed: int = 0
    params: tuple[tuple[str, str, Any], ...] = ()
    output: str | None = None
    notes: str = ""
    screenshot_dir: str | None = None
    measure: str = "time"
    reference_every: int | None = None
    force: bool = False
    max_draw_zones: int | None = None
    codec: str | None = None
    keep_image: bool = True
    expect_images: str | None = None
    update_images: bool = False
    shard: str | None = None
    jobs: int | None = None


@dataclasses.dataclass(frozen=True)
class SceneEntry:
    """One scene of a plan (``cls``), or an apitrace trace a replay runs (``trace``, ``cls``
    None); ``position`` is its place in the whole run."""

    label: str
    spec: str
    cls: type[Scene] | None
    params: Mapping[str, ParamValue]
    position: int = 0
    trace: TraceFile | None = None

    @property
    def name(self) -> str:
        kind = self.trace or self.cls
        return (kind.name if kind is not None else "") or self.spec


@dataclasses.dataclass(frozen=True)
class RunPlan:
    """A RunConfig resolved (no GL yet); ``counting`` None for a time run."""

    config: RunConfig
    entries: tuple[SceneEntry, ...]
    frames: int | None
    duration_s: float | None
    warmup: int
    size: tuple[int, int]
    output: Path
    screenshot_dir: Path | None
    workload: str
    keep_images: bool = False
    expect_images: Path | None = None
    counting: Counting | None = None
    jobs: int = 1
    zones: str = "off"
    reference_every: int = 0


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
        raise ConfigError(
            f"{what} '{path}': directory '{probe}' is not writable ({exc.strerror or exc})"
        ) from None


def check_output(text: str, *, force: bool = False) -> Path:
    """The ``-o`` path, checked (its ``.part`` too)."""
    return claim.check_output(text, force=force, part=True)


def check_measure(
    measure: str, *, timing: str, duration_s: float | None, warmup: int | None
) -> None:
    """ConfigError for a measure unknown or at odds with the other options."""
    if measure not in metrics.MEASURES:
        raise ConfigError(
            f"unknown --measure '{measure}'; choose one of: {', '.join(metrics.MEASURES)}"
        )
    if not metrics.is_count(measure):
        return
    if timing not in ("auto", "sync"):
        raise ConfigError(
            f"--measure {measure} counts instructions, it does not time: drop --timing {timing}"
        )
    if duration_s is not None:
        raise ConfigError(
            f"--measure {measure} needs --frames, not --duration (under valgrind a second of "
            "wall time is 20-100x less work than outside it)"
        )
    if warmup is not None and warmup < 1:
        raise ConfigError(
            f"--measure {measure} needs --warmup >= 1: the first frame of a scene pays the "
            "shader JIT and must not reach the statistics"
        )


def default_output(workload_name: str, now: dt.datetime | None = None) -> Path:
    """``traces/<UTC stamp>-<suite or scene>.katra``; ``-2``, ``-3``... when that is taken."""
    now = now or dt.datetime.now(dt.timezone.utc)
    stamp = now.strftime("%Y%m%dT%H%M%SZ")
    safe = re.sub(r"[^A-Za-z0-9_.-]+", "_", workload_name)[:60] or "run"
    path = Path("traces") / f"{stamp}-{safe}.katra"
    n = 2
    while path.exists() or path.with_name(path.name + ".part").exists():
        path = Path("traces") / f"{stamp}-{safe}-{n}.katra"
        n += 1
    return path


def screenshot_path(directory: Path, label: str) -> Path:
    return directory / f"{file_stem(label)}.png"


def plan_run(config: RunConfig) -> RunPlan:
    """Validate and resolve ``config`` (ConfigError/SceneError, ToolUnavailable without valgrind
    for a count); no GL, no writes."""
    suite = None
    if config.suite is not None:
        suite = get_suite(config.suite)
    if not config.scenes and suite is None:
        raise ConfigError("nothing to run: name at least one scene, or --suite NAME")
    if config.frames is not None and config.duration_s is not None:
        raise ConfigError("give --frames or --duration, not both")
    check_numbers(config.frames, config.warmup, config.size, config.seed)
    if config.duration_s is not None and not (
        0 < config.duration_s <= MAX_DURATION_S and math.isfinite(config.duration_s)
    ):
        raise ConfigError(
            f"bad --duration {config.duration_s}: must be > 0 seconds (at most one week)"
        )
    if not 0 <= config.samples <= 64:
        raise ConfigError(f"bad --samples {config.samples}: must be in 0..64")
    if config.samples & (config.samples - 1):
        raise ConfigError(
            f"bad --samples {config.samples}: MSAA sample counts are 0 or a power of two "
            "(2, 4, 8, ...)"
        )
    if config.device is not None and config.device < 0:
        raise ConfigError(f"bad --device {config.device}: must be >= 0")
    if config.timing not in MODES:
        raise ConfigError(f"unknown --timing '{config.timing}'; choose one of: {', '.join(MODES)}")
    if config.backend is not None and config.backend not in CHOICES:
        raise ConfigError(
            f"unknown --backend '{config.backend}'; choose one of: {', '.join(CHOICES)}"
        )
    resolve_name(config.backend)  # validates $KATRA3D_BACKEND too
    zones = zone_mode(config.zones)
    if config.max_draw_zones is not None:
        if zones != "draws":
            raise ConfigError("--max-draw-zones applies to --zones draws")
        if not 1 <= config.max_draw_zones <= 1_000_000:
            raise ConfigError(
                f"bad --max-draw-zones {config.max_draw_zones}: must be in 1..1000000"
            )
    if config.reference_every is not None and not 0 <= config.reference_every <= MAX_FRAMES:
        raise ConfigError(
            f"bad --reference-every {config.reference_every}: must be in 0..{MAX_FRAMES} (0 = off)"
        )
    check_measure(
        config.measure, timing=config.timing, duration_s=config.duration_s, warmup=config.warmup
    )
    jobs = resolve_jobs(config.jobs, config.measure)

    raw: list[tuple[str, Mapping[str, ParamValue]]] = list(suite.entries) if suite else []
    raw += [(name, {}) for name in config.scenes]
    overrides: dict[str, dict[str, ParamValue]] = {}
    for scene_name, key, value in config.params:
        if not scene_name:  # KEY=VALUE: the run's one scene
            if len(raw) != 1:
                listed = ", ".join(spec for spec, _ in raw)
                raise ConfigError(
                    f"--param {key}={value} names no scene, and this run has {len(raw)} scenes "
                    f"({listed}); write SCENE.{key}={value}"
                )
            scene_name = raw[0][0]
        overrides.setdefault(scene_name, {})[key] = value
    entries: list[SceneEntry] = []
    seen: dict[str, int] = {}
    used: set[str] = set()
    for spec, suite_params in raw:
        kind = scene_or_trace(spec)
        trace, cls = (kind, None) if isinstance(kind, TraceFile) else (None, kind)
        name = kind.name or spec
        mine = [n for n in overrides if names_scene(n, spec, kind)]
        used.update(mine)
        merged = dict(suite_params)
        for n in sorted(mine, key=lambda n: n.strip() != name):
            merged.update(overrides[n])
        params = resolve_params(kind, merged)
        seen[name] = seen.get(name, 0) + 1
        label = name if seen[name] == 1 else f"{name}#{seen[name]}"
        entries.append(SceneEntry(label, with_class(spec, kind), cls, params, len(entries), trace))
    for scene_name in overrides:
        if scene_name not in used:
            raise ConfigError(
                f"--param names scene '{scene_name}', which is not in this run; "
                f"scenes in this run: {', '.join(e.label for e in entries)}"
            )

    frames = config.frames
    if frames is None and config.duration_s is None:
        frames = suite.frames if suite else DEFAULT_FRAMES
    warmup = (
        config.warmup if config.warmup is not None else (suite.warmup if suite else DEFAULT_WARMUP)
    )
    if metrics.is_count(config.measure):
        warmup = max(1, warmup)  # the first frame pays the shader JIT
    size = tuple(config.size) if config.size else (tuple(suite.size) if suite else DEFAULT_SIZE)
    if any(e.trace for e in entries) and not all(e.trace for e in entries):
        raise ConfigError(
            "a run replays traces or renders scenes, not both: run the .trace files and the scenes "
            "separately"
        )
    if config.shard is not None:
        entries = _shard(entries, config.shard, (int(size[0]), int(size[1])), frames, warmup)
    workload = suite.name if suite else "+".join(e.label for e in entries)
    if suite and config.scenes:
        workload = f"{suite.name}+{'+'.join(config.scenes)}"

    if config.output is not None:
        output = check_output(config.output, force=config.force)
    else:
        output = default_output(
            suite.name if suite else entries[0].label if len(entries) == 1 else workload
        )
        _writable_dir(output.parent, "output directory")
    shots = Path(config.screenshot_dir) if config.screenshot_dir else None
    if shots is not None:
        if shots.exists() and not shots.is_dir():
            raise ConfigError(f"--screenshot '{shots}' is not a directory")
        _writable_dir(shots, "--screenshot directory")
        # never over a file without --force, never through a link
        for entry in entries if shots.is_dir() else ():
            shot = screenshot_path(shots, entry.label)
            if shot.is_symlink():
                raise ConfigError(
                    f"--screenshot: {shot} is a symbolic link; katra3d never writes through one"
                )
            claim.check_output(shot, force=config.force, option="--screenshot", example="scene.png")
    expect = _check_images(config)
    return RunPlan(
        config,
        tuple(entries),
        frames,
        config.duration_s,
        warmup,
        (int(size[0]), int(size[1])),
        output,
        shots,
        workload,
        keep_images=config.keep_image and frames is not None,
        expect_images=expect,
        counting=counting(config.measure),
        jobs=jobs,
        zones=zones,
        reference_every=DEFAULT_REFERENCE_EVERY
        if config.reference_every is None
        else config.reference_every,
    )


def _shard(
    entries: list[SceneEntry], shard: str, size: tuple[int, int], frames: int | None, warmup: int
) -> list[SceneEntry]:
    """The entries of shard ``"I/N"``, split by estimated cost (equal for a --duration run)."""
    index, count = parse_shard(shard)
    costs = [
        scene_cost(e.name, e.params, size, frames + warmup) if frames is not None else 1.0
        for e in entries
    ]
    return [entries[i] for i in shard_indices(costs, index, count)]


def _check_images(config: RunConfig) -> Path | None:
    if config.expect_images is None:
        if config.update_images:
            raise ConfigError(
                "--update-images needs --expect-images DIR: the folder the references go to"
            )
        return None
    expect = Path(config.expect_images)
    if config.duration_s is not None:
        raise ConfigError(f"--expect-images needs --frames: {DURATION_NOTICE}")
    if not config.keep_image:
        raise ConfigError("--expect-images checks the frames a run keeps: drop --no-keep-image")
    if expect.exists() and not expect.is_dir():
        raise ConfigError(f"--expect-images '{expect}' is not a directory")
    if config.update_images:
        _writable_dir(expect, "--expect-images directory")
    elif not expect.is_dir():
        raise ConfigError(
            f"--expect-images '{expect}' does not exist (record references with --update-images)"
        )
    return expect


__all__ = [
    "DEFAULT_FRAMES",
    "DEFAULT_SIZE",
    "DEFAULT_WARMUP",
    "RunConfig",
    "RunPlan",
    "SceneEntry",
    "check_measure",
    "check_numbers",
    "check_output",
    "default_output",
    "parse_int",
    "parse_param",
    "parse_seconds",
    "parse_size",
    "plan_run",
]
