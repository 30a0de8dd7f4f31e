"""pytest plugin: the ``katra_scene`` fixture, the ``gl`` marker and ``--katra3d-keep``
(docs/pytest.md). It loads into every pytest run of a project that installs katra3d, so importing
it imports only pytest and the standard library."""

from __future__ import annotations

import dataclasses
import hashlib
import re
from collections.abc import Callable, Iterator, Mapping
from pathlib import Path
from typing import TYPE_CHECKING, Any

import pytest

if TYPE_CHECKING:
    from katra3d.harness.engine.results import StatsDict
    from katra3d.scenes.api import ParamValue
    from katra_trace.jsontext import JsonObject

GL_MARKER = "gl: renders through a real OpenGL context (Mesa llvmpipe via EGL in CI)"
KEEP_OPTION = "--katra3d-keep"
KEEP_INI = "katra3d_keep"
KEEP_HELP = (
    "keep katra_scene's traces in DIR (one per test and call, named after the test; a rerun "
    "replaces "
    "them) instead of pytest's temporary directory"
)
MAX_NAME_CHARS = 120
_KEPT = pytest.StashKey[list[Path]]()


def pytest_addoption(parser: pytest.Parser) -> None:
    parser.getgroup("katra3d").addoption(
        KEEP_OPTION, metavar="DIR", default=None, dest="katra3d_keep", help=KEEP_HELP
    )
    parser.addini(KEEP_INI, help=KEEP_HELP + "; relative to the ini file's directory", default="")


def pytest_configure(config: pytest.Config) -> None:
    config.addinivalue_line("markers", GL_MARKER)
    config.stash[_KEPT] = []
    keep = keep_dir(config)
    if keep is not None and keep.exists() and not keep.is_dir():
        raise pytest.UsageError(f"{KEEP_OPTION} {str(keep)!r} is not a directory")


def keep_dir(config: pytest.Config) -> Path | None:
    """``--katra3d-keep`` (relative to the invocation dir), else ini ``katra3d_keep`` (relative to
    the ini file), else None (a temporary directory)."""
    given = config.getoption("katra3d_keep", default=None)
    if given:
        return Path(config.invocation_params.dir, str(given))
    ini = str(config.getini(KEEP_INI) or "")
    if ini:
        return (config.inipath.parent if config.inipath else config.rootpath) / ini
    return None


def kept_trace_name(nodeid: str, index: int, scene: str) -> str:
    """E.g. ``tests.test_fill.py.test_fast[4]-01-fillrate.katra``; names over
    :data:`MAX_NAME_CHARS` are cut and end with a hash, so two tests never share a file."""
    stem = re.sub(r"[^\w.\-\[\]=,+]", "_", nodeid.replace("::", ".").replace("/", "."))
    scene_part = re.sub(r"[^\w.-]", "_", scene)
    tail = f"-{index:02d}-{scene_part}.katra"
    if len(stem) + len(tail) > MAX_NAME_CHARS:
        digest = hashlib.sha1(nodeid.encode("utf-8", "surrogatepass")).hexdigest()[:10]
        stem = stem[: max(8, MAX_NAME_CHARS - len(tail) - 11)] + "-" + digest
    return stem + tail


def pytest_terminal_summary(terminalreporter: Any, config: pytest.Config) -> None:
    kept = config.stash.get(_KEPT, [])
    if kept:
        terminalreporter.write_line(f"katra3d: {len(kept)} trace(s) kept in {keep_dir(config)}")


@dataclasses.dataclass(frozen=True)
class SceneRun:
    """``stats`` ``{clock: {stat: value}}`` (warmup excluded), ``zones`` ``{zone: stats}``, the
    trusted ``clock``, and ``info`` for the benchmark's extra_info."""

    scene: str
    stats: dict[str, StatsDict]
    zones: dict[str, dict[str, StatsDict]]
    clock: str
    timing_mode: str
    trace: Path
    info: JsonObject

    @property
    def primary(self) -> StatsDict:
        return self.stats[self.clock]


def run_scene(
    name: str,
    trace: str | Path,
    *,
    frames: int = 60,
    warmup: int = 5,
    size: tuple[int, int] = (128, 128),
    params: Mapping[str, ParamValue] | None = None,
    timing: str = "auto",
    zones: bool | str = False,
    seed: int = 0,
    benchmark: Any = None,
    measure: str = "time",
    overwrite: bool = False,
) -> SceneRun:
    """Run scene ``name`` into ``trace`` as ``katra3d run`` would; raises katra_trace errors. An
    existing ``trace`` needs ``overwrite``; a failed capture goes to ``NAME.failed.katra``.
    ``benchmark`` times each measured frame as one pedantic round."""
    # deferred: this module loads into every pytest run; GL and the engine load per scene run
    from katra3d.harness.engine import lifecycle
    from katra3d.harness.engine.spec import CaptureSpec, SceneSpec
    from katra3d.harness.gl import backends, probe
    from katra3d.harness.run.config import check_numbers
    from katra3d.harness.run.pipeline import open_engine
    from katra3d.scenes.registry import (
        TraceFile,
        resolve_params,
        scene_or_trace,
    )
    from katra_trace.analysis.stats import NO_STATS, trace_stats
    from katra_trace.errors import ConfigError
    from katra_trace.io.header import CaptureOptions, ResolvedOptions
    from katra_trace.io.reader import open_trace
    from katra_trace.metrics import CLOCK_PREFERENCE, primary_clock_of

    checked = check_numbers(frames, warmup, size, seed, prefix="")
    frames, warmup, size, seed = checked  # type: ignore[assignment]
    cls = scene_or_trace(name)
    label = getattr(cls, "name", "") or name
    resolved = dict(resolve_params(cls, dict(params or {})))
    replayed = isinstance(cls, TraceFile)
    if measure != "time" or isinstance(cls, TraceFile):  # narrows cls below
        if benchmark is not None:
            raise ConfigError(
                "katra_scene(benchmark=...) times frames rendered in this process: "
                + (
                    "an apitrace trace is replayed by glretrace in its own; drop benchmark="
                    if replayed
                    else "a counted run's frames are in a valgrind child; drop benchmark="
                )
            )
        return _run_apart(
            name,
            label,
            trace,
            frames=frames,
            warmup=warmup,
            size=size,
            params=resolved,
            zones=zones,
            seed=seed,
            measure=measure,
            overwrite=overwrite,
        )
    driver = None if benchmark is None else _benchmark_driver(benchmark)
    with backends.open_session(None, size=size) as session:
        options = CaptureOptions(
            api="katra_scene",
            size=size,
            samples=0,
            frames=frames,
            warmup=warmup,
            seed=seed,
            resolved=ResolvedOptions(
                size=size, samples=0, scenes=({"label": label, "spec": name, "params": resolved},)
            ),
            layout=("api", "size", "samples", "frames", "warmup", "seed", "resolved"),
        )
        spec = CaptureSpec(
            Path(trace),
            label,
            host=probe.host_info(session),
            options=options,
            timing=timing,
            zones=zones,
            overwrite=overwrite,
            failed_aside=True,
        )
        engine = open_engine(session.ctx, spec)
        with engine:
            scene = SceneSpec(
                cls,
                label,
                resolved,
                size=size,
                frames=frames,
                warmup=warmup,
                seed=seed,
                spec=name,
                read_image=False,
            )
            outcome = lifecycle.run_scene(engine, scene, bind=session.bind, measured_driver=driver)
            engine.finish("complete", {"frames": frames, "api": "katra_scene"})
    if outcome.status == "skipped":
        # deferred: katra3d's modules load only when a test uses the plugin
        from katra3d.scenes.api import SceneSkip

        raise SceneSkip(outcome.reason)
    opened = open_trace(trace)
    found = trace_stats(opened).scenes.get(label, NO_STATS)
    metrics = found.metrics_json()
    options = opened.header.capture_options
    clock = (
        primary_clock_of(list(found.metrics), options.measure_mode, options.primary_clock)
        or options.primary_clock
        or CLOCK_PREFERENCE[0]
    )
    host = opened.header.host_info
    gl = host.gl
    primary = metrics.get(clock, {})
    info: JsonObject = {
        "scene": label,
        "params": resolved,
        "size": list(size),
        "frames": frames,
        "warmup": warmup,
        "timing_mode": engine.mode,
        "clock": clock,
        "gl_renderer": gl.renderer,
        "gl_version": gl.version,
        "driver": gl.driver.as_dict() or None,
        "backend": host.backend,
        "cpu_model": host.system.cpu_model,
        "trace": str(trace),
        **{
            k: primary.get(k)
            for k in (
                "median_ms",
                "p99_ms",
                "fps_avg",
                "fps_low_1pct",
                "fps_low_1pct_integral",
                "stutter_pct",
            )
        },
    }
    if benchmark is not None:
        benchmark.extra_info["katra3d"] = info
    return SceneRun(label, metrics, found.zones_json(), clock, engine.mode, Path(trace), info)


def _run_apart(
    name: str,
    label: str,
    trace: str | Path,
    *,
    frames: int,
    warmup: int,
    size: tuple[int, int],
    params: Mapping[str, ParamValue],
    zones: bool | str,
    seed: int,
    measure: str,
    overwrite: bool,
) -> SceneRun:
    """A counted run or a replayed apitrace trace, through ``katra3d run``'s runner."""
    # deferred: katra3d's modules load only when a test uses the plugin
    from katra3d.harness.run.config import RunConfig
    from katra3d.harness.run.runner import run
    from katra_trace.analysis.stats import NO_STATS, trace_stats
    from katra_trace.io.reader import open_trace

    config = RunConfig(
        scenes=(name,),
        frames=frames,
        warmup=warmup,
        size=size,
        zones=zones,
        seed=seed,
        params=tuple((label, k, v) for k, v in params.items()),
        output=str(trace),
        measure=measure,
        force=overwrite,
    )
    result = run(config, quiet=True)
    opened = open_trace(trace)
    found = trace_stats(opened).scenes.get(label, NO_STATS)
    metrics = found.metrics_json()
    host = opened.header.host_info
    clock = (
        measure if measure != "time" else (opened.header.capture_options.primary_clock or "wall")
    )
    info: JsonObject = {
        "scene": label,
        "params": dict(params),
        "size": list(size),
        "frames": frames,
        "warmup": warmup,
        "measure": measure,
        "clock": clock,
        "trace": str(trace),
        "gl_renderer": host.gl.renderer,
        "codegen": host.codegen or {},
        "median": metrics.get(clock, {}).get(
            "median_ms" if measure == "time" else f"median_{measure}"
        ),
    }
    return SceneRun(
        label, metrics, found.zones_json(), clock, result.timing_mode, Path(trace), info
    )


def _benchmark_driver(benchmark: Any) -> Callable[[Callable[[], None], int], None]:

    def drive(one_frame: Callable[[], None], count: int) -> None:
        if getattr(benchmark, "disabled", False):
            # --benchmark-disable: pedantic runs its target once, untimed; render the rest here
            for _ in range(count - 1):
                one_frame()
            benchmark.pedantic(one_frame, rounds=1, iterations=1)
        else:
            benchmark.pedantic(one_frame, rounds=count, iterations=1, warmup_rounds=0)

    return drive


@pytest.fixture
def katra_scene(
    tmp_path_factory: pytest.TempPathFactory, request: pytest.FixtureRequest
) -> Iterator[Callable[..., SceneRun]]:
    """``katra_scene(name, **run_scene options) -> SceneRun``. A relative scene file is looked up
    beside the test, in the cwd, then the rootdir. Skips without GL or on SceneSkip; other katra3d
    errors fail with one line."""
    keep = keep_dir(request.config)
    base = tmp_path_factory.mktemp("katra3d") if keep is None else keep
    count = [0]

    def run(name: str, **kwargs: Any) -> SceneRun:
        # deferred: katra3d's modules load only when a test uses the plugin
        from katra3d.scenes.api import SceneSkip
        from katra3d.scenes.registry import TRACE_SUFFIX, find_file_spec
        from katra_trace.errors import BackendUnavailable, KatraError

        bases = tuple(dict.fromkeys((request.path.parent, Path.cwd(), request.config.rootpath)))
        count[0] += 1
        if keep is None:
            path = base / f"{count[0]:02d}-{name.replace('/', '_').replace(':', '_')}.katra"
        else:
            path = keep / kept_trace_name(request.node.nodeid, count[0], name)
            # a rerun replaces its own trace in the user's directory
            kwargs.setdefault("overwrite", True)
        try:
            spec = find_file_spec(name, bases)
            if spec.endswith(TRACE_SUFFIX) and not Path(spec).expanduser().is_absolute():
                spec = next(
                    (str((b / spec).resolve()) for b in bases if (b / spec).is_file()), spec
                )
            if keep is not None:
                keep.mkdir(parents=True, exist_ok=True)
            result = run_scene(spec, path, **kwargs)
        except BackendUnavailable as exc:
            pytest.skip(f"no usable OpenGL: {exc}")
        except SceneSkip as exc:
            pytest.skip(f"scene {name!r} cannot run here: {exc}")
        except KatraError as exc:
            kind = next(c.__name__ for c in type(exc).__mro__ if not c.__name__.startswith("_"))
            failure = f"{kind}: {exc}"
        else:
            if keep is not None:
                request.config.stash[_KEPT].append(path)
            return result
        # outside the except clause: one line, without the internals' traceback
        pytest.fail(failure, pytrace=False)

    yield run


__all__ = [
    "GL_MARKER",
    "KEEP_INI",
    "KEEP_OPTION",
    "SceneRun",
    "katra_scene",
    "keep_dir",
    "kept_trace_name",
    "run_scene",
]
