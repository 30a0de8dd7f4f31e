"""Format stability, crash safety and the GL-free promise of katra_trace."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import textwrap
import warnings
from pathlib import Path

import numpy as np
import pytest

from katra_trace import Clock, Flag, Kind, TraceRecoveryWarning, open_trace
from katra_trace.schema import schema_hash

DATA = Path(__file__).parent / "data"


def test_golden_v1_0_trace_still_reads() -> None:
    t = open_trace(DATA / "golden-v1.0.katra", strict=True)
    assert t.version == (1, 0) and t.header.format_version == "1.0"
    assert t.header.schema_hash == schema_hash() == "ea22aa269ca471fe"
    assert t.header.workload == "golden" and t.header.notes == "golden v1.0"
    assert t.header.capture_options.as_dict() == {
        "size": [64, 64],
        "frames": 10,
        "timing_mode": "sync",
    }
    assert t.header.host_info.renderer == "golden renderer"
    assert t.strings == ["", "golden-scene", "frame", "pass", "triangles"]
    ev = t.events
    assert len(ev) == 81
    frames = ev[ev["kind"] == Kind.FRAME]
    assert frames["dur_ns"].tolist() == [1_000_000 + 1000 * i for i in range(40)]
    assert frames["start_ns"].tolist() == [i * 2_000_000 for i in range(40)]
    assert ((frames["flags"] & Flag.WARMUP) != 0).sum() == 5
    assert (frames["clock"] == Clock.WALL).all()
    zones = ev[ev["kind"] == Kind.ZONE]
    assert zones["depth"].tolist() == [1] * 40 and zones["dur_ns"][-1] == 400_039
    counter = ev[ev["kind"] == Kind.COUNTER]
    assert counter["value"].tolist() == [12345.5] and t.name(int(counter["name"][0])) == "triangles"
    assert t.clock_syncs == [{"host_ns": 1000, "gpu_ns": 5000}]
    assert t.annotations == [{"scene": "golden-scene", "last_frame_sha256": "0" * 64}]
    assert t.summary.status == "complete" and t.summary.user == {"scenes": 1}


def test_golden_v1_1_trace_reads() -> None:
    from katra_trace.schema import COUNT_CLOCKS, REFERENCE_NAME

    t = open_trace(DATA / "golden-v1.1.katra", strict=True)
    assert t.version == (1, 1) and t.header.format_version == "1.1"
    assert t.header.schema_hash == schema_hash() and t.header.pid == 4242
    measure = t.header.capture_options.measure
    assert measure.mode == "cycles" and measure.valgrind == "3.19.0"
    assert measure.env["LP_NUM_THREADS"] == "0" and measure.pinned == {
        "LP_NATIVE_VECTOR_WIDTH": "128"
    }
    assert t.header.host_info.codegen["llvm"] == "15.0.7"
    ev = t.events
    assert len(ev) == 78
    instr = ev[(ev["kind"] == Kind.FRAME) & (ev["clock"] == Clock.INSTRUCTIONS)]
    assert instr["dur_ns"].tolist() == [1_000_000 + 7 * i for i in range(12)]
    assert ((instr["flags"] & Flag.WARMUP) != 0).tolist() == [True] + [False] * 11
    zones = ev[(ev["kind"] == Kind.ZONE) & (ev["clock"] == Clock.INSTRUCTIONS)]
    assert (zones["dur_ns"] <= instr["dur_ns"]).all()
    cycles = ev[(ev["kind"] == Kind.FRAME) & (ev["clock"] == Clock.CYCLES)]
    assert cycles["dur_ns"].tolist() == [1_500_000 + 11 * i for i in range(6)]
    assert ((cycles["flags"] & Flag.ESTIMATED) != 0).all()
    counters = ev[ev["kind"] == Kind.COUNTER]
    assert (counters["clock"] == Clock.CYCLES).all() and len(counters) == 6 * 7
    by_name = {t.name(int(r["name"])): r["value"] for r in counters[counters["frame"] == 5]}
    assert by_name == {
        "Ir": 1_000_005.0,
        "I1mr": 125.0,
        "D1mr": 3405.0,
        "D1mw": 565.0,
        "ILmr": 35.0,
        "DLmr": 705.0,
        "DLmw": 95.0,
    }
    refs = ev[(ev["flags"] & Flag.REFERENCE) != 0]
    assert len(refs) == 6 and (refs["kind"] == Kind.MARKER).all()
    assert sorted(set(refs["clock"].tolist())) == [Clock.CPU, Clock.WALL]
    assert {t.name(int(n)) for n in refs["name"]} == {REFERENCE_NAME}
    assert refs["frame"].tolist() == [3, 3, 7, 7, 11, 11]
    assert not (ev[np.isin(ev["clock"], list(COUNT_CLOCKS))]["kind"] == Kind.MARKER).any()
    assert t.annotations == [{"scene": "golden-cycles", "last_frame_sha256": "1" * 64}]
    assert t.summary.status == "complete" and t.summary.user == {"scenes": 2}


def test_golden_v1_1_is_what_make_golden_writes(tmp_path: Path) -> None:
    """The generator is deterministic and still agrees with the committed file (content, not zstd
    bytes).
    """
    from tests.data import make_golden

    make_golden.main(tmp_path / "a.katra")
    make_golden.main(tmp_path / "b.katra")
    assert (tmp_path / "a.katra").read_bytes() == (tmp_path / "b.katra").read_bytes()
    new, old = (
        open_trace(tmp_path / "a.katra", strict=True),
        open_trace(DATA / "golden-v1.1.katra", strict=True),
    )
    assert new.header == old.header and new.summary == old.summary and new.strings == old.strings
    assert new.events.tobytes() == old.events.tobytes() and new.annotations == old.annotations


@pytest.mark.parametrize("name", ["golden-v1.0.katra", "golden-v1.1.katra"])
def test_cli_reads_both_golden_versions(katra_cli, name: str) -> None:  # noqa: ANN001
    path = str(DATA / name)
    r = katra_cli("validate", path)
    assert r.returncode == 0 and "ok:" in r.stdout, r.stderr
    r = katra_cli("info", path)
    assert r.returncode == 0 and f"format 1.{name[-7]}" in r.stdout, r.stderr
    r = katra_cli("stats", path)
    assert r.returncode == 0, r.stderr


KILL_SCRIPT = textwrap.dedent("""
    import sys
    from katra_trace import TraceWriter, Kind, Clock
    w = TraceWriter(sys.argv[1], batch_events=100, batch_ms=60_000)
    name = w.intern("frame")
    i = 0
    while True:
        for _ in range(100):
            w.append(Kind.FRAME, Clock.WALL, 0, name, i, 0, i * 1000, 500)
            i += 1
        w.flush()
        print(i, flush=True)
        for _ in range(37):  # a partial batch that is never flushed
            w.append(Kind.FRAME, Clock.WALL, 0, name, i, 0, i * 1000, 500)
            i += 1
""")


def test_sigkilled_writer_keeps_every_flushed_batch(tmp_path: Path) -> None:
    path = tmp_path / "killed.katra"
    proc = subprocess.Popen(
        [sys.executable, "-c", KILL_SCRIPT, str(path)],
        stdout=subprocess.PIPE,
        text=True,
        cwd=Path(__file__).parent.parent,
    )
    assert proc.stdout is not None
    flushed = 0
    for line in proc.stdout:
        flushed = int(line)
        if flushed >= 2000:
            break
    os.kill(proc.pid, signal.SIGKILL)
    proc.wait(timeout=30)
    proc.stdout.close()
    assert not path.exists()  # a killed writer leaves its capture in <path>.part, never at <path>
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", TraceRecoveryWarning)
        t = open_trace(path.with_name("killed.katra.part"))
    assert t.summary.rebuilt and t.status == "incomplete"
    n = len(t.events)
    assert n >= flushed  # every batch flushed before the kill is there
    assert t.events["frame"].tolist() == list(range(n))  # and nothing but an intact prefix


def test_katra_trace_imports_no_gl_module() -> None:
    code = textwrap.dedent("""
        import sys, pkgutil, importlib
        for mod in ("moderngl", "glfw", "OpenGL", "glcontext"):
            sys.modules[mod] = None  # any import of them raises ImportError
        import katra_trace
        for info in pkgutil.walk_packages(katra_trace.__path__, "katra_trace."):
            importlib.import_module(info.name)
        import katra3d.harness.cli
        katra3d.harness.cli.build_parser()
        print("ok", sorted(m for m in sys.modules if m.startswith("katra_trace")))
    """)
    out = subprocess.run(
        [sys.executable, "-c", code],
        capture_output=True,
        text=True,
        timeout=120,
        cwd=Path(__file__).parent.parent,
    )
    assert out.returncode == 0, out.stderr
    assert out.stdout.startswith("ok") and "katra_trace.io.reader" in out.stdout


def test_golden_events_are_the_same_through_streaming() -> None:
    t = open_trace(DATA / "golden-v1.0.katra")
    assert np.concatenate(list(t.iter_batches())).tobytes() == t.events.tobytes()


@pytest.mark.parametrize("codec", ["zstd", "none"])
def test_cli_info_and_validate(tmp_path: Path, katra_cli, codec: str) -> None:  # noqa: ANN001
    from tests.trace_helpers import frame_zone_stream, write_trace

    path = tmp_path / "t.katra"
    write_trace(
        path,
        frame_zone_stream(30),
        ["", "scene", "frame", "a", "b", "c"],
        codec=codec,
        header={
            "workload": "cli-test",
            "capture_options": {"timing_mode": "sync", "timing_reason": "r"},
            "host_info": {"gl_renderer": "llvmpipe"},
        },
    )
    r = katra_cli("info", str(path))
    assert r.returncode == 0, r.stderr
    assert "cli-test" in r.stdout and "timing    sync: r" in r.stdout and "llvmpipe" in r.stdout
    r = katra_cli("info", str(path), "--all")
    assert r.returncode == 0 and "timing    sync (r)" in r.stdout and "capture options:" in r.stdout
    import json

    r = katra_cli("info", str(path), "--json")
    info = json.loads(r.stdout)
    assert info["events"] == 120 and info["truncated"] is False
    assert info["header"]["workload"] == "cli-test" and info["summary"]["status"] == "complete"
    assert katra_cli("validate", str(path)).returncode == 0
    data = path.read_bytes()
    path.write_bytes(data[: len(data) // 2])
    r = katra_cli("validate", str(path))
    assert r.returncode == 2
    assert "damaged:" in r.stderr and "recoverable:" in r.stderr and "Traceback" not in r.stderr
    r = katra_cli("info", str(path), "--json")
    assert r.returncode == 0 and json.loads(r.stdout)["truncated"] is True


def test_cli_bad_files(tmp_path: Path, katra_cli) -> None:  # noqa: ANN001
    (tmp_path / "junk").write_text("not a trace")
    for args in (("info", "missing.katra"), ("validate", "junk"), ("info", str(tmp_path))):
        r = katra_cli(*args)
        assert r.returncode == 2, args
        assert r.stderr.startswith("katra3d: error: ") and r.stderr.count("\n") == 1, r.stderr


def test_v1_3_adds_only_the_shards_of_merged_traces(tmp_path: Path) -> None:
    """1.3 adds the header's ``shards`` (katra3d merge) and nothing else: a 1.2 file reads as before
    (every scene on ``host_info``), a 1.3 header's shards are typed, and a ``shards`` of another
    shape reads as not recorded."""
    from katra_trace.io import format as fmt
    from katra_trace.io.header import TraceHeader
    from tests.trace_helpers import wall_frames, write_trace

    # no kind, clock or flag added
    assert fmt.MINOR_LIMITS[3] == fmt.MINOR_LIMITS[2]
    events, strings = wall_frames(["a"], 5)
    path = tmp_path / "t.katra"
    write_trace(path, events, strings, header={"host_info": {"gl": {"renderer": "R"}}})
    data = bytearray(path.read_bytes())
    assert fmt.PREAMBLE.unpack_from(data)[2] == fmt.FORMAT_MINOR
    # as a 1.2 writer wrote it (the preamble has no checksum)
    data[10:12] = (2).to_bytes(2, "little")
    path.write_bytes(bytes(data))
    old = open_trace(path, strict=True)
    assert (
        old.version == (1, 2)
        and old.header.shards is None
        and old.header.host_of("a").renderer == "R"
    )
    shards = [
        {
            "shard": "1/2",
            "file": "s1.katra",
            "scenes": ["a"],
            "tool_version": "katra3d 0.1.0",
            "start_wall_ns": 5,
            "offset_ns": 0,
            "pid": 7,
            "host_info": {"gl": {"renderer": "R1"}},
        },
        {
            "shard": "2/2",
            "file": "s2.katra",
            "scenes": ["b"],
            "offset_ns": 3,
            "host_info": {"gl": {"renderer": "R2"}},
        },
    ]
    raw = {"format_version": "1.3", "host_info": {"gl": {"renderer": "R1"}}, "shards": shards}
    header = TraceHeader.from_dict(raw)
    assert header.as_dict() == raw and header.shards is not None
    assert [s.shard for s in header.shards] == ["1/2", "2/2"] and header.shards[1].offset_ns == 3
    assert (
        header.host_of("a").renderer,
        header.host_of("b").renderer,
        header.host_of("c").renderer,
    ) == ("R1", "R2", "R1")
    odd = TraceHeader.from_dict({"shards": {"1/2": "x"}, "host_info": {"gl": {"renderer": "R"}}})
    assert (
        odd.shards is None
        and odd.extra == {"shards": {"1/2": "x"}}
        and odd.host_of("a").renderer == "R"
    )
