"""``--measure``: what a run counts — time (clocks), or instructions / cycles under callgrind.

``instructions`` and ``cycles`` are deterministic on a software renderer: llvmpipe's "GPU" is the
CPU, so callgrind can count the work of each frame exactly. The run re-executes itself as a child
process under ``valgrind --tool=callgrind`` with single-threaded llvmpipe, a fixed hash seed and a
pinned vector width (:func:`child_command`, :data:`PINNED_ENV`). The checked plan (which found
valgrind, :mod:`katra3d.harness.run.valgrind`) travels as data, not as a command line: the parent
writes a :class:`~katra3d.harness.run.protocol.ChildOrder` into the dump directory (``args.json``),
the child (``python -m katra3d``, no arguments) runs it through
:func:`katra3d.harness.run.runner.run_child`, counts with
:class:`katra3d.harness.engine.counting.CountMeasurer`, writes its trace, header and all, itself and
hands back a :class:`~katra3d.harness.run.protocol.ChildResult` (``results.json``). Every scene
has a child of its own, with a one-scene plan, up to ``--jobs`` at once
(:mod:`katra3d.harness.run.children` starts them, forwards stop signals to them, joins their traces
and removes their dump directories whatever happens). docs/measure.md says what the numbers mean.
"""

from __future__ import annotations

import hashlib
import os
import platform
import shutil
import sys
from collections.abc import Iterable, Mapping
from pathlib import Path
from typing import Any

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

#: Environment of the counted child: what makes its counts repeatable and comparable.
PINNED_ENV: dict[str, str] = {
    "PYTHONHASHSEED": "0",  # str hashes, so dict/set layouts, are the same in every process
    "LP_NUM_THREADS": "0",  # llvmpipe rasterizes on the main thread (the one that is counted)
    # the JIT's vector width, pinned across CPUs with and without AVX
    "LP_NATIVE_VECTOR_WIDTH": "128",
    # every process compiles its shaders: no cache hit in one, miss in another
    "MESA_SHADER_CACHE_DISABLE": "true",
}

#: The counted child's GIL switch interval (``sys.setswitchinterval``; Python's default is 5 ms). A
#: thread that waits longer than this for the GIL makes the main thread hand it over at its next
#: bytecode, a point that depends on time, and the hand-over's instructions land in whatever frame
#: or zone it falls in. Nothing waits for it during a counted frame (the counted capture's writer is
#: sync: its thread runs only while this one waits for it); the longer interval lets a thread that
#: starts, or that has written its item, run on until it waits, instead of being interrupted at a
#: point that depends on time.
COUNTED_SWITCH_INTERVAL_S = 1.0

#: Pins a user may set explicitly to compare driver settings (``LP_NATIVE_VECTOR_WIDTH=256 katra3d
#: run ...``): the user's value wins, and the codegen facts record it, so compare refuses to mix the
#: two settings.
USER_SETTABLE_PINS = ("LP_NATIVE_VECTOR_WIDTH",)


def pinned_env(environ: Mapping[str, str] | None = None) -> dict[str, str]:
    """:data:`PINNED_ENV` with the user's explicit value of each :data:`USER_SETTABLE_PINS` variable
    (scenes and trace replays alike)."""
    env = os.environ if environ is None else environ
    return {**PINNED_ENV, **{k: env[k] for k in USER_SETTABLE_PINS if env.get(k)}}


#: Environment variable naming the child's dump directory (its arguments and the run's facts are in
#: it).
CHILD_ENV = "KATRA3D_MEASURE_CHILD"

#: How frames are delimited (recorded in the header).
FRAME_BOUNDARY = (
    "callgrind --dump-before=getppid; os.getppid() at every frame start, zone entry, zone exit "
    "and frame end; per-frame dumps of the main thread (--separate-threads=yes) are summed and "
    "deleted; the dumps between frames are discarded"
)

#: Where callgrind's instrumentation starts (recorded in the header: ``frame_boundary``, and
#: ``host_info.codegen.counted_from``, so that counts instrumented from different points are not
#: compared).
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
) -> dict[str, Any]:
    """What decides the instructions llvmpipe's JIT emits: instruction counts compare only when
    these match.

    CPU model and feature flags (the JIT targets the host CPU; valgrind hides
    some extensions), Mesa and LLVM versions, the vector width, the architecture;
    and ``counted_from``, where callgrind's instrumentation started (:func:`instrumentation`):
    a process instrumented from its start lays out its memory differently, which moves
    frame counts a little, so such counts are not compared with the others either.
    """
    # the image key's facts: one parser of the renderer and version strings
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


#: File in the dump directory holding the child's order
#: (:class:`katra3d.harness.run.protocol.ChildOrder`).
ARGS_FILE = "args.json"
#: File in the dump directory where the child hands back its result or its error
#: (:class:`katra3d.harness.run.protocol.ChildResult`).
RESULTS_FILE = "results.json"
#: Where the child writes its trace, inside the dump directory (the parent joins it into the run's).
CHILD_TRACE = "trace.katra"
#: callgrind's dump base inside the dump directory (``--callgrind-out-file``).
DUMP_BASE = "cg.out"
#: Where the child reports its progress, one JSON line a call
#: (:class:`katra3d.harness.run.progress.ChildProgress`).
PROGRESS_FILE = "progress.jsonl"
#: The child's stderr (valgrind's messages, warnings), relayed by the parent unless quiet.
STDERR_FILE = "stderr.txt"
#: How often the parent reads the child's progress while it waits, in seconds.
POLL_S = 0.2


def in_child() -> bool:
    """Whether this process is a counted child (``$KATRA3D_MEASURE_CHILD`` is set)."""
    return bool(os.environ.get(CHILD_ENV))


def child_dir() -> Path:
    """The dump directory ``$KATRA3D_MEASURE_CHILD`` names (ConfigError when it holds no order)."""
    where = Path(os.environ.get(CHILD_ENV, ""))
    if not (where / ARGS_FILE).is_file():
        raise ConfigError(
            f"${CHILD_ENV} does not name a katra3d dump directory; it is set by katra3d for its "
            "own child"
        )
    return where


def check_child_instrumentation(deferred: bool) -> str:
    """Where this counted child's instrumentation starts (:func:`instrumentation`); ToolUnavailable
    (exit 3) when it was started with instrumentation off (``deferred``) but cannot make the client
    request that switches it on."""
    counted_from = instrumentation(deferred)
    if deferred and valgrind_request.running_on_valgrind() == 0:
        raise ToolUnavailable(
            "the counted child cannot make valgrind client requests, so callgrind's "
            "instrumentation could not be switched on at the first frame"
        )
    return counted_from


def child_progress(dump_dir: Path) -> ChildProgress:
    """The counted child's progress reporter: its calls go to the parent
    through the dump directory."""
    return ChildProgress(dump_dir / PROGRESS_FILE)


def instrumentation_deferred() -> bool:
    """Whether counted children start with callgrind's instrumentation off, switched on by the
    harness at each scene's first measured frame (:mod:`katra3d.harness.engine.valgrind_request`:
    this machine can make client requests)."""
    return valgrind_request.available()


def stop_counting() -> None:
    """In the counted child, after the run's last frame: switch callgrind's instrumentation off, so
    writing the trace, the tear-down and callgrind's last dump run uninstrumented (docs/measure.md,
    "What start-up costs"). Nothing counted moves. A no-op outside valgrind or without client
    requests."""
    valgrind_request.stop_instrumentation()


def instrumentation(deferred: bool) -> str:
    """Where callgrind's instrumentation starts: :data:`INSTRUMENTED_FROM_FIRST_FRAME` or
    :data:`INSTRUMENTED_FROM_START` (recorded in the header)."""
    return INSTRUMENTED_FROM_FIRST_FRAME if deferred else INSTRUMENTED_FROM_START


def frame_boundary(deferred: bool) -> str:
    """How frames are delimited and where instrumentation starts (the header's
    ``measure.frame_boundary``).
    """
    how = (
        " (--instr-atstart=no; CALLGRIND_START_INSTRUMENTATION and STOP_INSTRUMENTATION client "
        "requests)"
        if deferred
        else " (this machine cannot make valgrind client requests)"
    )
    return f"{FRAME_BOUNDARY}; callgrind instruments from {instrumentation(deferred)}{how}"


def child_command(valgrind: str, dump_base: Path, measure: str, *, deferred: bool) -> list[str]:
    """The valgrind command line of the counted child; its plan is in the dump directory's
    args.json.

    ``deferred``: start with instrumentation off (``--instr-atstart=no``): Python's start-up, the
    imports and Mesa's set-up then run several times faster, and the child's :class:`CountTimer`
    switches it on at each scene's first measured frame (:func:`instrumentation_deferred`).
    """
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
    # no address-space randomization: where the heap and libraries land changes hashing and
    # alignment paths
    setarch = shutil.which("setarch")
    prefix = [setarch, platform.machine(), "-R"] if setarch else []
    return [*prefix, *cmd, sys.executable, "-m", "katra3d"]


def child_env(dump_dir: Path) -> dict[str, str]:
    """The counted child's whole environment: fixed apart from the rendering variables the user set.

    The lengths of the environment, the arguments and the working directory shift the
    process's stack and heap, and with them llvmpipe's and Python's instruction counts
    (measured: a longer -o name or --note moved a triangle frame by 0.4-0.6 %). So the
    child gets a fixed PATH and locale, the pinned variables, the rendering variables
    (LIBGL_*, MESA_*, GALLIUM_*, LP_*, EGL_*, __GL*, PYOPENGL_*, KATRA3D_*) and nothing else
    (no ``PYTHONPATH``: the scenes' import path travels in the plan file, :func:`scene_imports`);
    it runs in the dump directory, whose name has a fixed length, with no arguments, and
    reads its plan from a file there.
    """
    env = {"PATH": "/usr/local/bin:/usr/bin:/bin", "LANG": "C.UTF-8", "LC_ALL": "C.UTF-8"}
    env.update(render_env())
    env.update(pinned_env())
    env[CHILD_ENV] = str(dump_dir)
    return env


def scene_imports(plan: RunPlan) -> tuple[dict[str, str], list[str]]:
    """{spec: absolute spec} for the file scenes of ``plan`` (the child runs in another directory),
    and the folders the child puts first on its import path once katra3d is loaded, so that the
    scenes import what they import here: this process's ``$PYTHONPATH`` (absolute), then the working
    directory when a ``package.module:Class`` spec needs it. katra3d's own code is loaded before
    them, whatever they hold (a user's repository with its own ``scenes`` or ``harness`` package).
    """
    known = set(builtin_scenes()) | set(entry_point_scenes())
    imports: dict[str, str] = {}
    path = [os.path.abspath(p) for p in os.environ.get("PYTHONPATH", "").split(os.pathsep) if p]
    for entry in plan.entries:
        spec = entry.spec.strip()
        if spec in known or ":" not in spec:
            continue
        if split_file_spec(spec) is not None:
            imports[entry.spec] = absolute_spec(spec, entry.cls)
        elif os.getcwd() not in path:
            path.append(os.getcwd())
    return imports, path


def compile_sources(file_specs: Iterable[str] = ()) -> None:
    """Write the bytecode of katra3d's packages and of the run's scene files before a counted child
    starts, in the canonical form of :mod:`katra3d.harness.run.bytecode`: every child then loads the
    same bytes, whoever compiled the sources before (a child that compiled a module itself, or
    loaded another writer's bytes, counted every later frame differently). ``file_specs``:
    ``path.py:Class`` specs, made absolute."""
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
