"""``--measure instructions|cycles``: refusals, the pieces, and real callgrind runs on real
llvmpipe.

The real runs (marked ``gl`` and ``slow``) start three counted captures at once, each a
valgrind child: two identical ones (A and A2) and one with a param step that adds work (B).
"""

from __future__ import annotations

import os
import shutil
import signal
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from katra3d.harness.engine import valgrind_request
from katra3d.harness.engine.counting import CACHE_EVENTS, estimated_cycles, read_summary
from katra3d.harness.run import bytecode, measure
from katra3d.harness.run.config import RunConfig, check_measure, plan_run
from katra3d.harness.run.valgrind import check_renderer
from katra_trace import open_trace
from katra_trace.analysis.match import mismatch
from katra_trace.errors import ConfigError
from katra_trace.io.header import GLInfo, SystemInfo
from katra_trace.io.images import read_frame_images
from katra_trace.schema import Clock, Kind
from tests.cli_helpers import katra

KATRA3D = str(Path(sys.executable).with_name("katra3d"))
HAVE_VALGRIND = shutil.which("valgrind") is not None
SCENES = ("clear", "triangle", "fillrate", "shader")
# 4 warmup frames: the first frames after the shader JIT still settle (a few hundred instructions of
# a 32x32 frame, seen up to 0.13 % on the first measured frame after 2 warmup frames)
COMMON = [
    "--zones",
    "draws",
    "--frames",
    "4",
    "--warmup",
    "4",
    "--size",
    "32x32",
    "--measure",
    "instructions",
    "--quiet",
]


# --------------------------------------------------------------------------- pure pieces


@pytest.mark.parametrize(
    ("kwargs", "message"),
    [
        ({"timing": "gpu", "duration_s": None, "warmup": None}, "drop --timing gpu"),
        ({"timing": "auto", "duration_s": 2.0, "warmup": None}, "needs --frames, not --duration"),
        ({"timing": "auto", "duration_s": None, "warmup": 0}, "--warmup >= 1"),
    ],
)
def test_flag_combinations_that_make_no_sense_are_refused(
    kwargs: dict[str, Any], message: str
) -> None:
    with pytest.raises(ConfigError, match=message):
        check_measure("instructions", **kwargs)
    check_measure("time", **kwargs)  # fine without counting


def test_unknown_measure_lists_the_choices() -> None:
    with pytest.raises(ConfigError, match="choose one of: time, instructions, cycles"):
        plan_run(RunConfig(scenes=("triangle",), measure="bogus"))


def test_hardware_renderer_is_refused_software_accepted() -> None:
    hardware = GLInfo(renderer="NVIDIA H200/PCIe/SSE2", software_renderer=False)
    with pytest.raises(ConfigError, match="hardware renderer.*only the CPU side of a GPU frame"):
        check_renderer("instructions", hardware)
    check_renderer("time", hardware)
    check_renderer(
        "cycles", GLInfo(renderer="llvmpipe (LLVM 15.0.6, 128 bits)", software_renderer=True)
    )


def test_estimated_cycles_weights_hits_and_misses() -> None:
    counts = dict.fromkeys(CACHE_EVENTS, 0) | {
        "Ir": 1000,
        "Dr": 300,
        "Dw": 100,
        "I1mr": 20,
        "D1mr": 30,
        "D1mw": 10,
        "ILmr": 2,
        "DLmr": 5,
        "DLmw": 3,
    }
    # 1400 accesses, 60 L1 misses of which 10 went to RAM: 1340 L1 hits + 5*50 LL hits + 35*10 RAM
    assert estimated_cycles(counts) == 1340 + 250 + 350
    assert estimated_cycles({"Ir": 500}) == 500  # no cache simulation: every access an L1 hit


def test_read_summary_reads_the_header_only(tmp_path: Path) -> None:
    dump = tmp_path / "cg.out.7-01"
    dump.write_text(
        "# callgrind format\nversion: 1\npart: 7\nevents: Ir Dr\nsummary: 1234 56\n\nfn=x\n"
        + "15 99999\n" * 10000
    )
    assert read_summary(dump) == {"Ir": 1234, "Dr": 56}
    (tmp_path / "bad").write_text("events: Ir\n")
    with pytest.raises(Exception, match="no summary line"):
        read_summary(tmp_path / "bad")


def test_codegen_facts_parse_renderer_and_versions() -> None:
    gl = GLInfo(
        renderer="llvmpipe (LLVM 15.0.6, 128 bits)", version="4.5 (Core Profile) Mesa 22.3.6"
    )
    facts = measure.codegen_facts(
        gl, SystemInfo(cpu_model="AMD EPYC", machine="x86_64"), {"LP_NATIVE_VECTOR_WIDTH": "128"}
    )
    assert facts["llvm"] == "15.0.6" and facts["mesa"] == "22.3.6" and facts["vector_bits"] == 128
    assert facts["cpu_model"] == "AMD EPYC" and facts["lp_native_vector_width"] == "128"


# --------------------------------------------------------------------------- refusals through the
# CLI


def test_missing_valgrind_is_exit_3_with_the_install_line(tmp_path: Path) -> None:
    bindir = tmp_path / "bin"
    bindir.mkdir()
    env = {"PATH": f"{bindir}:{Path(sys.executable).parent}"}  # no /usr/bin: no valgrind
    res = katra(
        "run",
        "triangle",
        "--measure",
        "instructions",
        "--frames",
        "2",
        "-o",
        str(tmp_path / "t.katra"),
        env=env,
    )
    assert res.returncode == 3, res.stderr
    assert "Traceback" not in res.stderr
    assert "needs valgrind" in res.stderr and "apt-get install -y valgrind" in res.stderr
    assert not (tmp_path / "t.katra").exists()


def test_bad_flag_combination_is_one_line_exit_2(tmp_path: Path) -> None:
    res = katra(
        "run",
        "triangle",
        "--measure",
        "instructions",
        "--duration",
        "1",
        "-o",
        str(tmp_path / "t.katra"),
    )
    assert res.returncode == 2
    lines = res.stderr.strip().splitlines()
    assert len(lines) == 1 and "needs --frames, not --duration" in lines[0]


# --------------------------------------------------------------------------- real valgrind


def _scene_frames(
    path: Path, clock: Clock = Clock.INSTRUCTIONS
) -> dict[tuple[str, str, int, int], int]:
    """{(scene, name, kind, frame): count} of measured frames and zones on ``clock``."""
    trace = open_trace(path)
    ev = trace.events
    sel = ev[
        (ev["clock"] == int(clock))
        & (ev["flags"] == 0)
        & np.isin(ev["kind"], [Kind.FRAME, Kind.ZONE])
    ]
    return {
        (
            trace.name(int(e["scene"])),
            trace.name(int(e["name"])),
            int(e["kind"]),
            int(e["frame"]),
        ): int(e["dur_ns"])
        for e in sel
    }


@pytest.fixture(scope="module")
def counted_runs(tmp_path_factory: pytest.TempPathFactory) -> Iterator[dict[str, Any]]:
    """A, A2 (identical) and B (fillrate with one more layer, a longer shader loop), run at once,
    each under valgrind, every draw a zone."""
    if not HAVE_VALGRIND:
        pytest.skip("valgrind is not installed (ci/system-deps.sh test installs it)")
    base = tmp_path_factory.mktemp("measure")
    tmp = base / "tmp"
    tmp.mkdir()
    env = {**os.environ, "TMPDIR": str(tmp)}
    # the names have one length: the child's process image then differs in no length at all (a
    # longer path or note moves counts by up to ~0.1 %, see docs/measure.md) A1 counts two scenes at
    # once (--jobs 2), A2 one at a time: every scene has its own child either way, so their counts
    # agree on every frame. B1 changes fillrate and shader only, so it counts only those
    # two (each scene is a valgrind child of its own)
    runs = {
        "A1": ["--jobs", "2"],
        "A2": ["--jobs", "1"],
        "B1": ["--param", "fillrate.layers=5", "--param", "shader.iterations=52"],
    }
    procs = {}
    for name, extra in runs.items():
        scenes = ("fillrate", "shader") if name == "B1" else SCENES
        cmd = [
            KATRA3D,
            "run",
            *scenes,
            *COMMON,
            "--param",
            "fillrate.layers=4",
            *extra,
            "-o",
            str(base / f"{name}.katra"),
        ]
        procs[name] = subprocess.Popen(
            cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=env
        )
    out: dict[str, Any] = {"dir": base, "tmp": tmp}
    for name, proc in procs.items():
        stdout, stderr = proc.communicate(timeout=600)
        assert proc.returncode == 0, f"{name}: {stderr}"
        out[name] = base / f"{name}.katra"
        out[f"{name}.stdout"] = stdout
    yield out


@pytest.mark.gl
@pytest.mark.slow
def test_two_jobs_count_every_frame_as_one_job(counted_runs: dict[str, Any]) -> None:
    """``--jobs 2`` (A1) against ``--jobs 1`` (A2): the same count on every frame and zone of four
    scenes, and the same trace: scenes in the requested order, the user's output recorded."""
    a, a2 = _scene_frames(counted_runs["A1"]), _scene_frames(counted_runs["A2"])
    assert {k[0] for k in a if k[2] == Kind.FRAME} == set(SCENES) and a == a2
    for name in ("A1", "A2"):
        header = open_trace(counted_runs[name], events=False).header.as_dict()
        assert [s["label"] for s in header["capture_options"]["resolved"]["scenes"]] == list(SCENES)
        assert header["capture_options"]["resolved"]["output"] == str(counted_runs[name])
    rows = [
        [
            cells[:3]
            for cells in (
                [c.strip() for c in line.split("│")[1:-1]]
                for line in counted_runs[f"{name}.stdout"].splitlines()
            )
            if cells[:1] in ([s] for s in SCENES)
        ]
        for name in ("A1", "A2")
    ]
    # the table: scene, frames, median
    assert rows[0] == rows[1] and [r[0] for r in rows[0]] == list(SCENES)


@pytest.mark.gl
@pytest.mark.slow
def test_every_scene_counts_real_frames_and_draws(counted_runs: dict[str, Any]) -> None:
    """Every frame of every scene is a frame of work, and every draw is a zone of its own (that A1
    and A2 count them the same is test_two_jobs_count_every_frame_as_one_job's)."""
    a = _scene_frames(counted_runs["A1"])
    frames = [k for k in a if k[2] == Kind.FRAME]
    assert {k[0] for k in frames} == set(SCENES) and len(frames) == 4 * len(SCENES)
    for key in frames:
        assert a[key] > 10_000, key  # a real frame of work, not a boundary artefact
    draws = [k for k in a if k[2] == Kind.ZONE and "#" in k[1]]
    assert {k[0] for k in draws} == set(SCENES)
    frame_of = {(k[0], k[3]): a[k] for k in frames}
    assert all(0 < a[k] < frame_of[(k[0], k[3])] for k in draws)


@pytest.mark.gl
@pytest.mark.slow
def test_zones_add_up_to_at_most_their_frame(counted_runs: dict[str, Any]) -> None:
    trace = open_trace(counted_runs["A1"])
    ev = trace.events
    ev = ev[(ev["clock"] == int(Clock.INSTRUCTIONS)) & (ev["flags"] == 0)]
    for frame in ev[ev["kind"] == Kind.FRAME]:
        of_frame = ev[
            (ev["scene"] == frame["scene"])
            & (ev["frame"] == frame["frame"])
            & (ev["kind"] == Kind.ZONE)
        ]
        passes = of_frame[of_frame["depth"] == 1]
        draws = of_frame[of_frame["depth"] == 2]
        assert len(passes) and len(draws), trace.name(int(frame["scene"]))
        assert 0 < passes["dur_ns"].sum() <= frame["dur_ns"]
        assert draws["dur_ns"].sum() <= passes["dur_ns"].sum()


@pytest.mark.gl
@pytest.mark.slow
def test_trace_says_how_it_was_counted_and_keeps_no_dumps(counted_runs: dict[str, Any]) -> None:
    trace = open_trace(counted_runs["A1"])
    options = trace.header.capture_options
    m = options.measure
    assert m.mode == "instructions" and m.valgrind and m.env["LP_NUM_THREADS"] == "0"
    assert m.env["PYTHONHASHSEED"] == "0" and "--dump-before=getppid" in m.command
    assert "getppid" in m.frame_boundary and m.pinned["LP_NATIVE_VECTOR_WIDTH"]
    codegen = trace.header.host_info.codegen
    assert codegen["llvm"] and codegen["mesa"] and codegen["cpu_flags_sha"]
    ev = trace.events
    assert not np.any(np.isin(ev["clock"], [Clock.WALL, Clock.CPU]) & (ev["kind"] == Kind.FRAME)), (
        "host times under valgrind must not be recorded as frame times"
    )
    frames = ev[ev["kind"] == Kind.FRAME]
    assert len(frames) == 4 * len(SCENES) and not np.any(frames["flags"]), (
        "the measured frames are there, the (uninstrumented) warmup frames are not"
    )
    assert list(counted_runs["tmp"].iterdir()) == [], "dump directories must be removed"
    assert "instructions/frame" in counted_runs["A1.stdout"]
    # read back after instrumentation stopped: counts unmoved
    kept = read_frame_images(counted_runs["A1"])
    assert set(kept) == set(SCENES) and {k.key["vector_bits"] for k in kept.values()} == {"128"}
    assert {k: v.sha256 for k, v in kept.items()} == {
        k: v.sha256 for k, v in read_frame_images(counted_runs["A2"]).items()
    }


@pytest.mark.gl
@pytest.mark.slow
def test_compare_flags_more_work_and_passes_identical_runs(counted_runs: dict[str, Any]) -> None:
    same = katra(
        "compare", str(counted_runs["A1"]), str(counted_runs["A2"]), "--metric", "instructions"
    )
    assert same.returncode == 0, same.stdout + same.stderr
    more = katra(
        "compare",
        str(counted_runs["A1"]),
        str(counted_runs["B1"]),
        "--metric",
        "instructions",
        "--allow-param-mismatch",
    )
    assert more.returncode == 1, more.stdout + more.stderr
    assert "fillrate" in more.stdout and "regression" in more.stdout
    heavier = [line for line in more.stdout.splitlines() if "shader /" in line and "#1" in line]
    assert heavier and "regression" in heavier[0], more.stdout  # the one draw made heavier, by name
    b = _scene_frames(counted_runs["B1"])
    a = _scene_frames(counted_runs["A1"])
    step = np.median([b[k] for k in b if k[0] == "fillrate" and k[2] == Kind.FRAME]) / np.median(
        [a[k] for k in a if k[0] == "fillrate" and k[2] == Kind.FRAME]
    )
    assert step > 1.02  # the param step really is >= 2 % more work


@pytest.mark.gl
def test_stopping_the_parent_stops_the_child_and_removes_the_dumps(tmp_path: Path) -> None:
    if not HAVE_VALGRIND:
        pytest.skip("valgrind is not installed")
    tmp = tmp_path / "tmp"
    tmp.mkdir()
    proc = subprocess.Popen(
        [
            KATRA3D,
            "run",
            "triangle",
            "--measure",
            "instructions",
            "--frames",
            "2000",
            "--size",
            "16x16",
            "-o",
            str(tmp_path / "t.katra"),
        ],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        env={**os.environ, "TMPDIR": str(tmp)},
    )
    deadline = time.monotonic() + 60
    while not any(tmp.iterdir()) and time.monotonic() < deadline:  # the dump directory exists
        time.sleep(0.1)
    time.sleep(1.0)
    proc.send_signal(signal.SIGTERM)
    _, stderr = proc.communicate(timeout=120)
    assert proc.returncode not in (0, 1), stderr
    assert "Traceback" not in stderr
    assert list(tmp.iterdir()) == [], "the dump directory must be removed"


@pytest.mark.gl
@pytest.mark.slow
def test_pytest_plugin_counts_too(tmp_path: Path) -> None:
    if not HAVE_VALGRIND:
        pytest.skip("valgrind is not installed")
    from katra3d.harness.pytest_plugin import run_scene

    run = run_scene(
        "clear", tmp_path / "p.katra", frames=2, warmup=1, size=(16, 16), measure="instructions"
    )
    # run_scene hands back whatever trace the counted child published: one it finished as
    # interrupted (exit 128+n) or aborted (exit 1) has no measured frames, hence no "instructions"
    # in run.stats. Say which, with the child's error (its stderr is discarded when quiet), before
    # reading the stats.
    summary = open_trace(run.trace, events=False).summary.as_dict()
    assert summary.get("status") == "complete", summary
    assert run.clock == "instructions" and run.stats["instructions"]["n"] == 2
    assert run.info["median"] > 10_000 and run.info["codegen"]["llvm"]
    with pytest.raises(ConfigError, match="drop benchmark="):
        run_scene("clear", tmp_path / "q.katra", measure="instructions", benchmark=object())


# --------------------------------------------------------------------------- instrumentation from
# the first frame


def test_client_requests_are_no_ops_outside_valgrind() -> None:
    if not valgrind_request.available():
        pytest.skip(
            "no client-request code for this machine: counted children are instrumented from the "
            "start"
        )
    assert valgrind_request.running_on_valgrind() == 0
    assert valgrind_request.client_request(valgrind_request.RUNNING_ON_VALGRIND, default=77) == 77
    # outside valgrind: nothing to switch on
    assert valgrind_request.start_instrumentation() is False
    assert valgrind_request.stop_instrumentation() is False  # ... nor off


def test_child_command_defers_instrumentation_only_when_asked() -> None:
    deferred = measure.child_command("valgrind", Path("/d/cg.out"), "instructions", deferred=True)
    assert "--instr-atstart=no" in deferred and deferred.index(
        "--instr-atstart=no"
    ) < deferred.index("-m")
    assert "--instr-atstart=no" not in measure.child_command(
        "valgrind", Path("/d/cg.out"), "cycles", deferred=False
    )
    assert measure.instrumentation(True) != measure.instrumentation(False)


def test_compare_refuses_counts_instrumented_from_different_points() -> None:
    facts = measure.codegen_facts(
        GLInfo(renderer="llvmpipe (LLVM 15.0.6, 128 bits)"),
        SystemInfo(),
        {},
        counted_from=measure.instrumentation(True),
    )
    # a trace without the key
    old = {k: v for k, v in facts.items() if k != "counted_from"}
    sides = {"base": [{"codegen": old}], "new": [{"codegen": facts}]}
    assert "counted_from" in mismatch(sides, set(), set())
    notes: set[str] = set()
    assert mismatch(sides, {"codegen"}, notes) == "" and "counted_from" in " ".join(notes)
    # counted from the first warmup frame on: its frames count differently
    # (docs/measure.md)
    older = {**facts, "counted_from": "the first warmup frame of the first scene"}
    assert "counted_from" in mismatch(
        {"base": [{"codegen": older}], "new": [{"codegen": facts}]}, set(), set()
    )


def test_instrumentation_switched_on_and_off_from_python_starts_and_stops_the_dumps(
    tmp_path: Path,
) -> None:
    if not HAVE_VALGRIND or not valgrind_request.available():
        pytest.skip("needs valgrind and client-request code for this machine")
    script = (
        "import os, sys\nfrom katra3d.harness.engine import valgrind_request as v\n"
        "os.getppid()\n"  # instrumentation off: no dump
        "print(v.running_on_valgrind(), v.start_instrumentation())\n"
        "os.getppid(); sum(range(1000)); os.getppid()\n"
        "print(v.stop_instrumentation())\n"
        # instrumentation off again: no dumps
        "os.getppid(); sum(range(1000)); os.getppid()\n"
    )
    out = subprocess.run(
        [
            "valgrind",
            "--tool=callgrind",
            "-q",
            "--instr-atstart=no",
            "--dump-before=getppid",
            "--separate-threads=yes",
            f"--callgrind-out-file={tmp_path / 'cg.out'}",
            sys.executable,
            "-c",
            script,
        ],
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    assert out.returncode == 0 and out.stdout.split() == ["1", "True", "True"], (
        out.stdout + out.stderr
    )
    dumps = sorted(p.name for p in tmp_path.iterdir() if p.name.startswith("cg.out."))
    # one dump per getppid while it is on, none before or after
    assert dumps == ["cg.out.1-01", "cg.out.2-01"], dumps
    assert read_summary(tmp_path / "cg.out.2-01")["Ir"] > 1000


@pytest.mark.gl
@pytest.mark.slow
def test_trace_says_from_where_it_was_instrumented(counted_runs: dict[str, Any]) -> None:
    header = open_trace(counted_runs["A1"], events=False).header
    m = header.capture_options.measure
    deferred = valgrind_request.available()
    assert ("--instr-atstart=no" in (m.command or ())) is deferred
    assert measure.instrumentation(deferred) in (m.frame_boundary or "")
    assert (header.host_info.codegen or {})["counted_from"] == measure.instrumentation(deferred)


def test_bytecode_is_compiled_before_a_counted_child_starts(tmp_path: Path) -> None:
    """A child that compiles a module from source counts every later frame differently (a stale .pyc
    moved 32x32 triangle frames by ~300 instructions): the parent brings the bytecode up to date
    first, a scene file's too. And the bytes must not depend on who wrote them: marshal format 4
    (import, py_compile, compileall) marks objects by their reference counts in the writing process,
    and a 16x16 clear frame counted 494 instructions apart between two writers' bytes of the same
    sources. The parent writes format 2, whose bytes come from the source alone, and replaces
    another writer's file."""
    import py_compile
    import subprocess

    scene = tmp_path / "my_scene.py"
    scene.write_text(
        "import os\nNAMES = ('alpha', 'beta', 'alpha' + 'beta', os.sep)\nclass Cls:\n    x = "
        "NAMES\n"
    )
    cached = bytecode.pyc_path(scene)
    assert not cached.exists()
    measure.compile_sources([f"{scene}:Cls"])
    canonical = cached.read_bytes()
    assert bytecode.is_canonical(scene)
    # the same bytes from another process, with other modules loaded first
    code = (
        f"import json, numpy, katra3d.harness.engine.core\nfrom pathlib import Path\n"
        f"from katra3d.harness.run import bytecode\n"
        f"import sys; sys.stdout.buffer.write(bytecode.canonical_pyc(Path({str(scene)!r})))"
    )
    other = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, check=True, timeout=120
    ).stdout
    assert other == canonical
    # another writer's (format 4) file is seen and replaced
    py_compile.compile(str(scene), cfile=str(cached), doraise=True)
    assert cached.read_bytes() != canonical and not bytecode.is_canonical(scene)
    measure.compile_sources([f"{scene}:Cls"])
    assert cached.read_bytes() == canonical
    # Python loads it as it is: valid, not compiled again (the file is unchanged after a fresh
    # import)
    run = subprocess.run(
        [sys.executable, "-c", "import my_scene; print(my_scene.Cls.x[2])"],
        cwd=tmp_path,
        env={k: v for k, v in os.environ.items() if k != "PYTHONDONTWRITEBYTECODE"},
        capture_output=True,
        text=True,
        check=True,
        timeout=60,
    )
    assert run.stdout == "alphabeta\n" and cached.read_bytes() == canonical
