"""``--measure``: instructions / cycles counted in a child under callgrind with a pinned
environment (deterministic on llvmpipe); docs/measure.md."""

from __future__ import annotations

import hashlib
import os
import platform
import shutil
import sys
from collections.abc import Iterable, Mapping
from pathlib import Path

import katra3d
import katra_trace
from katra3d import harness, scenes
from katra3d.harness.engine import valgrind_request
from katra3d.harness.gl.probe import render_env
from katra3d.harness.run import bytecode
from katra3d.harness.run.config import RunPlan
from katra3d.harness.run.progress import ChildProgress
from katra3d.scenes.registry import (
    absolute_spec,
    builtin_scenes,
    entry_point_scenes,
    split_file_spec,
)
from katra_trace.errors import ConfigError, ToolUnavailable
from katra_trace.io.header import GLInfo, SystemInfo
from katra_trace.io.images import renderer_facts
from katra_trace.jsontext import JsonObject

#: Environment that makes the counted child's counts repeatable and comparable.
PINNED_ENV: dict[str, str] = {
    "PYTHONHASHSEED": "0",
    "LP_NUM_THREADS": "0",  # rasterize on the counted main thread
    "LP_NATIVE_VECTOR_WIDTH": "128",  # same JIT code with and without AVX
    "MESA_SHADER_CACHE_DISABLE": "true",
}

#: Long GIL switch interval: no thread switch at a time-dependent point whose cost lands in a frame.
COUNTED_SWITCH_INTERVAL_S = 1.0

USER_SETTABLE_PINS = ("LP_NATIVE_VECTOR_WIDTH",)


def pinned_env(environ: Mapping[str, str] | None = None) -> dict[str, str]:
    env = os.environ if environ is None else environ
    return {**PINNED_ENV, **{k: env[k] for k in USER_SETTABLE_PINS if env.get(k)}}


CHILD_ENV = "KATRA3D_MEASURE_CHILD"

FRAME_BOUNDARY = (
    "callgrind --dump-before=getppid; os.getppid() at every frame start, zone entry, zone exit "
    "and frame end; per-frame dumps of the main thread (--separate-threads=yes) are summed and "
    "deleted; the dumps between frames are discarded"
)

#: Where instrumentation starts (in the header; counts from different points are not compared).
INSTRUMENTED_FROM_FIRST_FRAME = "each scene's first measured frame (warmup frames uninstrumented)"
INSTRUMENTED_FROM_START = "the process start"


def cpu_flags() -> list[str]:
    try:
        with open("/proc/cpuinfo", encoding="utf-8", errors="replace") as fh:
            for line in fh:
                if line.startswith("flags"):
                    return sorted(line.split(":", 1)[1].split())
    except OSError:
        pass
    return []


def codegen_facts(
    gl: GLInfo, system: SystemInfo, env: Mapping[str, str], counted_from: str = ""
) -> JsonObject:
    """What decides the code llvmpipe's JIT emits: counts compare only when these match."""
    facts = renderer_facts(gl.as_dict())
    flags = cpu_flags()
    return {
        "cpu_model": system.cpu_model or "",
        "machine": system.machine or "",
        "cpu_flags_sha": hashlib.sha256(" ".join(flags).encode()).hexdigest()[:16] if flags else "",
        "renderer": facts["renderer"],
        "mesa": facts["mesa"],
        "llvm": facts["llvm"],
        "vector_bits": int(facts["vector_bits"] or 0),
        "lp_native_vector_width": env.get("LP_NATIVE_VECTOR_WIDTH", ""),
        "counted_from": counted_from,
    }


#: Files in the child's dump directory.
ARGS_FILE = "args.json"
RESULTS_FILE = "results.json"
CHILD_TRACE = "trace.katra"
DUMP_BASE = "cg.out"
PROGRESS_FILE = "progress.jsonl"
STDERR_FILE = "stderr.txt"
POLL_S = 0.2


def in_child() -> bool:
    return bool(os.environ.get(CHILD_ENV))


def child_dir() -> Path:
    """The dump directory ``$KATRA3D_MEASURE_CHILD`` names; ConfigError when it holds no order."""
    where = Path(os.environ.get(CHILD_ENV, ""))
    if not (where / ARGS_FILE).is_file():
        raise ConfigError(
            f"${CHILD_ENV} does not name a katra3d dump directory; it is set by katra3d for its "
            "own child"
        )
    return where


def check_child_instrumentation(deferred: bool) -> str:
    """Where instrumentation starts; ToolUnavailable when ``deferred`` without client requests."""
    counted_from = instrumentation(deferred)
    if deferred and valgrind_request.running_on_valgrind() == 0:
        raise ToolUnavailable(
            "the counted child cannot make valgrind client requests, so callgrind's "
            "instrumentation could not be switched on at the first frame"
        )
    return counted_from


def child_progress(dump_dir: Path) -> ChildProgress:
    return ChildProgress(dump_dir / PROGRESS_FILE)


def instrumentation_deferred() -> bool:
    """Whether children start uninstrumented (needs valgrind client requests)."""
    return valgrind_request.available()


def stop_counting() -> None:
    """Instrumentation off after the last frame, so tear-down is not counted."""
    valgrind_request.stop_instrumentation()


def instrumentation(deferred: bool) -> str:
    return INSTRUMENTED_FROM_FIRST_FRAME if deferred else INSTRUMENTED_FROM_START


def frame_boundary(deferred: bool) -> str:
    how = (
        " (--instr-atstart=no; CALLGRIND_START_INSTRUMENTATION and STOP_INSTRUMENTATION client "
        "requests)"
        if deferred
        else " (this machine cannot make valgrind client requests)"
    )
    return f"{FRAME_BOUNDARY}; callgrind instruments from {instrumentation(deferred)}{how}"


def child_command(valgrind: str, dump_base: Path, measure: str, *, deferred: bool) -> list[str]:
    """The counted child's valgrind command line (its plan is in args.json)."""
    cmd = [
        valgrind,
        "--tool=callgrind",
        "-q",
        "--dump-before=getppid",
        "--separate-threads=yes",
        "--dump-instr=no",
        "--dump-line=yes",
        f"--callgrind-out-file={dump_base}",
    ]
    if deferred:
        cmd.append("--instr-atstart=no")
    if measure == "cycles":
        cmd.append("--cache-sim=yes")
    # no ASLR: addresses change hashing and alignment paths
    setarch = shutil.which("setarch")
    prefix = [setarch, platform.machine(), "-R"] if setarch else []
    return [*prefix, *cmd, sys.executable, "-m", "katra3d"]


def child_env(dump_dir: Path) -> dict[str, str]:
    """The counted child's whole, fixed environment (its size moves the counts, so no
    ``PYTHONPATH``: :func:`scene_imports`)."""
    env = {"PATH": "/usr/local/bin:/usr/bin:/bin", "LANG": "C.UTF-8", "LC_ALL": "C.UTF-8"}
    env.update(render_env())
    env.update(pinned_env())
    env[CHILD_ENV] = str(dump_dir)
    return env


def scene_imports(plan: RunPlan) -> tuple[dict[str, str], list[str]]:
    """{spec: absolute spec} for file scenes, and the folders the child puts on its import path."""
    known = set(builtin_scenes()) | set(entry_point_scenes())
    imports: dict[str, str] = {}
    path = [os.path.abspath(p) for p in os.environ.get("PYTHONPATH", "").split(os.pathsep) if p]
    for entry in plan.entries:
        spec = entry.spec.strip()
        if entry.cls is None or spec in known or ":" not in spec:
            continue
        if split_file_spec(spec) is not None:
            imports[entry.spec] = absolute_spec(spec, entry.cls)
        elif os.getcwd() not in path:
            path.append(os.getcwd())
    return imports, path


def compile_sources(file_specs: Iterable[str] = ()) -> None:
    """Write canonical bytecode for katra3d and the run's scene files before a counted child."""
    roots = [
        root for package in (katra3d, harness, katra_trace, scenes) for root in package.__path__
    ]
    bytecode.write_canonical_tree(roots, (spec.rpartition(":")[0] for spec in file_specs))


__all__ = [
    "CHILD_ENV",
    "COUNTED_SWITCH_INTERVAL_S",
    "FRAME_BOUNDARY",
    "PINNED_ENV",
    "USER_SETTABLE_PINS",
    "pinned_env",
    "INSTRUMENTED_FROM_FIRST_FRAME",
    "INSTRUMENTED_FROM_START",
    "PROGRESS_FILE",
    "check_child_instrumentation",
    "child_command",
    "child_dir",
    "child_env",
    "child_progress",
    "codegen_facts",
    "compile_sources",
    "frame_boundary",
    "in_child",
    "instrumentation",
    "instrumentation_deferred",
    "scene_imports",
    "stop_counting",
]
