"""apitrace traces as scenes (harness/replay, docs/replay.md): two tiny glmark2 traces recorded once
a module under an Xvfb of the test's own (``build``, 4 frames that draw, for timed replays;
``clear``, 4 frames without a shader to compile, for the counted ones, whose cost under callgrind is
the replayer's start and its compiles), replayed by katra3d with no DISPLAY given."""

from __future__ import annotations

import concurrent.futures
import dataclasses
import hashlib
import json
import os
import re
import shutil
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from bench.glmark2 import xvfb_display
from katra3d.harness.replay.output import FrameReader, draw_zones, replayer_base_ns
from katra3d.harness.replay.tool import trim
from tests.cli_helpers import katra, katra_main

NEEDED = ("apitrace", "glretrace", "glmark2", "Xvfb")


@dataclasses.dataclass(frozen=True)
class Traces:
    app: Path  #: glmark2 build, 16x16: draws
    frames: int  #: frames in one replay of ``app``
    clear: Path  #: glmark2 clear, 16x16: no shader
    display: str  #: the fixture's Xvfb (for glretrace run directly)


def _frames(trace: Path, display: str) -> list[int]:
    """The last call of each frame of ``trace`` (glretrace --pframe-times)."""
    out = subprocess.run(
        ["glretrace", "--pframe-times", str(trace)],
        env={**os.environ, "DISPLAY": display},
        capture_output=True,
        text=True,
        check=True,
        timeout=120,
    )
    reader = FrameReader()
    return [f.last_call for f in map(reader.feed, out.stdout.splitlines()) if f is not None]


@pytest.fixture(scope="module")
def traces(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Traces]:
    missing = [tool for tool in NEEDED if shutil.which(tool) is None]
    if missing:
        pytest.skip(f"no {', '.join(missing)}: ci/system-deps.sh test installs them")
    where = tmp_path_factory.mktemp("replay")
    with xvfb_display(str(shutil.which("Xvfb"))) as display:
        env = {**os.environ, "DISPLAY": display}
        for name, bench in (("app", "build:nframes=4"), ("clear", "clear:nframes=4")):
            subprocess.run(
                [
                    "apitrace",
                    "trace",
                    "-o",
                    str(where / f"{name}.trace"),
                    "glmark2",
                    "-s",
                    "16x16",
                    "-b",
                    bench,
                ],
                env=env,
                capture_output=True,
                check=True,
                timeout=120,
            )
        frames = len(_frames(where / "app.trace", display))
        assert frames >= 3
        yield Traces(where / "app.trace", frames, where / "clear.trace", display)


def _env() -> dict[str, str]:
    # katra3d starts its own Xvfb; `katra3d` on PATH for ab's capture commands
    return {
        "DISPLAY": "",
        "PATH": f"{Path(sys.executable).parent}{os.pathsep}{os.environ.get('PATH', '')}",
    }


def _trace(path: Path) -> Any:
    from katra_trace import open_trace

    return open_trace(path)


def test_a_trace_is_a_plan_entry_of_its_own_kind_not_a_scene(tmp_path: Path) -> None:
    """A .trace spec plans as a TraceFile (path, SHA-256, size) with no scene class; the params the
    header records are its facts, and get_scene refuses it."""
    from katra3d.harness.run.config import RunConfig, plan_run
    from katra3d.scenes.registry import get_scene
    from katra_trace.errors import SceneError

    data = b"not really apitrace, but planned without a replayer"
    (tmp_path / "game.trace").write_bytes(data)
    plan = plan_run(
        RunConfig(scenes=(str(tmp_path / "game.trace"),), output=str(tmp_path / "o.katra"))
    )
    (entry,) = plan.entries
    assert entry.cls is None and entry.trace is not None and entry.label == "game"
    assert entry.trace.path == str(tmp_path / "game.trace")
    assert (entry.trace.sha256, entry.trace.size_bytes) == (
        hashlib.sha256(data).hexdigest(),
        len(data),
    )
    assert dict(entry.params) == {"trace_sha256": entry.trace.sha256, "trace_bytes": len(data)}
    assert entry.spec == f"{tmp_path / 'game.trace'}:Trace_game"
    with pytest.raises(
        SceneError, match=r"apitrace trace, not a scene: replay it with katra3d run"
    ):
        get_scene(str(tmp_path / "game.trace"))


def test_frame_reader_parses_glretrace_lines() -> None:
    reader = FrameReader()
    lines = [
        "# call no gpu_start gpu_dura cpu_start cpu_dura vsize_start vsize_dura rss_start rss_dura "
        "pixels "
        "program name",
        "call 10 0 0 5000 700 0 0 0 0 0 1 glClear",
        "call 11 0 0 6000 900 0 0 0 0 0 1 glDrawArrays",
        "call 12 0 0 7000 10 0 0 0 0 0 1 glDisable",
        "frame_end",
        "rendering_finished 1000000",
        "call 14 0 0 1500000 5 0 0 0 0 0 1 glClearColor",
        "frame_end",
        "rendering_finished 2000000",
        "Rendered 2 frames in 0.1 secs, average of 20 fps",
    ]
    frames = [f for f in map(reader.feed, lines) if f is not None]
    assert [(f.end_ns, f.last_call) for f in frames] == [(1000000, 12), (2000000, 14)]
    assert [(d.function, d.call_no, d.dur_ns) for d in frames[0].draws] == [
        ("glClear", 10, 700),
        ("glDrawArrays", 11, 900),
    ]
    assert frames[1].draws == ()
    assert reader.rendered == 2
    assert replayer_base_ns(frames) == 1000000 - 1500000
    # the k-th call of each function in the frame: the same names in every frame
    assert draw_zones(frames[0].draws + frames[0].draws[1:]) == [
        "frame/glClear#1",
        "frame/glDrawArrays#1",
        "frame/glDrawArrays#2",
    ]


@pytest.mark.gl
def test_replay_frames_zones_header_and_image(traces: Traces, tmp_path: Path) -> None:
    warmup, frames = 1, traces.frames - 1
    # what a SIGKILLed replay left: its directory, named after it (a process now gone)
    tmp = tmp_path / "tmp"
    gone = subprocess.Popen(["true"])
    gone.wait()
    (tmp / f"katra3d-callgrind-{gone.pid:010d}-x" / "katra3d-replay-y").mkdir(parents=True)
    res = katra(
        "run",
        str(traces.app),
        "--frames",
        str(frames),
        "--warmup",
        str(warmup),
        "--zones",
        "draws",
        "--size",
        "48x40",
        "-o",
        "a.katra",
        cwd=tmp_path,
        env={**_env(), "TMPDIR": str(tmp)},
    )
    assert res.returncode == 0, res.stderr
    assert not list(tmp.iterdir())  # removed, and nothing of this run's left
    t = _trace(tmp_path / "a.katra")
    # --size does not apply (the notice says so): the header records no size, and the window system
    # replayed on
    assert "notice: --size does not apply to a trace" in res.stderr and "; 48x40)" not in res.stdout
    assert t.header.capture_options.run_size is None
    assert t.header.capture_options.resolved.backend == "glx" == t.header.host_info.backend
    # the GL context is the replayer's (GLX, compatibility: glmark2 asks for no core profile)
    gl = t.header.host_info.gl
    assert gl.profile == "compatibility" and "(Compatibility Profile)" in str(gl.version), gl
    from katra_trace.schema import Clock, Kind

    ev = t.events
    assert int((ev["kind"] == Kind.FRAME).sum()) == warmup + frames
    assert set(ev["clock"][ev["kind"] == Kind.FRAME].tolist()) == {int(Clock.WALL)}
    # each draw a zone named alike in every frame: one sample a measured frame
    zones = ev[(ev["kind"] == Kind.ZONE) & (ev["flags"] == 0)]
    assert set(zones["clock"].tolist()) == {int(Clock.CPU)}
    names, n = np.unique(zones["name"], return_counts=True)
    assert "frame/glDrawArrays#1" in {t.strings[i] for i in names}
    assert set(n.tolist()) == {frames}
    # stats --zones lists them on their clock beside the frame's
    shown = katra("stats", "a.katra", "--zones", cwd=tmp_path).stdout
    assert re.search(rf"app +frame/glDrawArrays#1 +cpu +{frames} ", shown), shown
    assert (ev["dur_ns"][ev["kind"] == Kind.FRAME] > 0).all()
    facts = t.header.capture_options.extra["replay"]["traces"]["app"]
    assert facts["sha256"] == hashlib.sha256(traces.app.read_bytes()).hexdigest()
    assert facts["size_bytes"] == traces.app.stat().st_size and facts["api"] == "glx"
    assert t.header.capture_options.extra["replay"]["replayers"]["glx"]["path"].endswith(
        "glretrace"
    )
    scene = next(a for a in t.annotations if a.get("type") == "scene")
    # the first frame starts at the replayer's first call: its start-up (loading its libraries) is
    # apart
    assert len(scene["replay"]["startup_ms"]) == 1 and scene["replay"]["startup_ms"][0] > 0
    assert len(t.kept_frames) == 1
    image = t.kept_frames["app"]
    assert scene["size"] == [image.width, image.height]  # the trace's own
    assert f"; {image.width}x{image.height})" in res.stdout  # the title's too
    assert scene["replay"]["display"].startswith(":")  # katra3d's own Xvfb
    assert not subprocess.run(
        ["pgrep", "-f", f"glretrace.*{traces.app}"], capture_output=True
    ).stdout


@pytest.mark.gl
def test_trim_keeps_the_first_frames_and_their_call_numbers(traces: Traces, tmp_path: Path) -> None:
    whole = _frames(traces.app, traces.display)
    first = trim(str(traces.app), 2, tmp_path / "first.trace")
    assert _frames(first, traces.display) == whole[:2]


@pytest.mark.gl
@pytest.mark.slow
def test_ab_of_two_replays_restarts_and_has_identical_images(
    traces: Traces, tmp_path: Path
) -> None:
    """ab with two replays of one trace, one frame more than the trace has (a restart in every run):
    no regression (the sides are the same), the kept images identical."""
    capture = f"katra3d run {traces.app} --frames {traces.frames} --warmup 1 -o {{out}}"
    res = katra(
        "ab",
        "--base",
        capture,
        "--new",
        capture,
        "--rounds",
        "3",
        "--quiet",
        "-o",
        "ab",
        cwd=tmp_path,
        env=_env(),
    )
    assert res.returncode == 0, res.stdout + res.stderr
    assert "images (gate): 1 identical" in res.stdout, res.stdout
    runs = sorted((tmp_path / "ab").glob("*/run-*.katra"))
    assert len(runs) == 6
    t = _trace(runs[0])
    from katra_trace.schema import Kind

    # the restart's frame is left out of the statistics: one frame more is replayed
    assert int((t.events["kind"] == Kind.FRAME).sum()) == traces.frames + 2
    scene = next(a for a in t.annotations if a.get("type") == "scene")
    assert scene["replay"]["restarts"] == [traces.frames]
    assert len(scene["replay"]["startup_ms"]) == 2


@pytest.mark.gl
def test_a_restart_frame_is_said_marked_and_left_out(traces: Traces, tmp_path: Path) -> None:
    """More frames than the trace has: the run says the trace restarts; the restart's frame (a new
    replayer's context and compiles) is flagged SETUP, out of the statistics (one more frame is
    replayed for it), shown by info and named by stats --slow."""
    frames = traces.frames + 1
    res = katra(
        "run",
        str(traces.app),
        "--frames",
        str(frames),
        "--warmup",
        "1",
        "-o",
        "r.katra",
        cwd=tmp_path,
        env=_env(),
    )
    assert res.returncode == 0, res.stderr
    assert f"the trace ended after {traces.frames} frames" in res.stderr
    assert f"{frames} frames, median" in res.stderr and "; 1 restart frame left out" in res.stderr
    from katra_trace.schema import Flag, Kind

    ev = _trace(tmp_path / "r.katra").events
    frame = ev[ev["kind"] == Kind.FRAME]
    restart = traces.frames
    assert frame["frame"].tolist() == list(range(1 + frames + 1))
    assert frame["flags"][frame["frame"] == restart].tolist() == [int(Flag.SETUP)]
    stats = json.loads(katra("stats", "r.katra", "--format", "json", cwd=tmp_path).stdout)
    assert stats["scenes"]["app"]["metrics"]["wall"]["n"] == frames
    info = katra("info", "r.katra", cwd=tmp_path).stdout
    assert re.search(
        rf"restarts +app: the trace replayed again from its start at frame {restart}:", info
    ), info
    slow = katra("stats", "r.katra", "--slow", cwd=tmp_path).stdout
    assert f"restarts: frame {restart} began a new replay of the trace" in slow, slow


@pytest.mark.gl
def test_katra_scene_fixture_replays_a_trace(
    traces: Traces, katra_scene: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("DISPLAY", "")
    run = katra_scene(str(traces.app), frames=2, warmup=1)
    assert run.scene == "app" and run.clock == "wall" and run.timing_mode == "sync"
    assert run.stats["wall"]["n"] == 2
    # a katra3d error fails the test with its one line
    with pytest.raises(pytest.fail.Exception, match=r"^ConfigError: .*glretrace"):
        katra_scene(str(traces.app), frames=2, benchmark=object())


def test_capture_api_names_the_replay_instead(tmp_path: Path) -> None:
    import katra3d
    from katra_trace.errors import ConfigError

    with pytest.raises(ConfigError, match=r"katra3d run .*app\.trace.*katra_scene"):
        katra3d.capture(None, tmp_path / "app.trace")
    assert not (tmp_path / "app.trace").exists()


def test_not_a_trace_is_one_line(tmp_path: Path) -> None:
    if shutil.which("apitrace") is None:
        pytest.skip("no apitrace")
    (tmp_path / "junk.trace").write_bytes(np.random.default_rng(1).bytes(4096))
    (tmp_path / "text.trace").write_text("a text file, not a trace\n")
    for name in ("junk.trace", "text.trace"):
        res = katra("run", name, "--frames", "2", "-o", "j.katra", cwd=tmp_path, env=_env())
        assert res.returncode == 2, res.stderr
        said = f"'{tmp_path / name}' is not an apitrace trace: apitrace cannot decode it"
        assert res.stderr.strip().splitlines() == [f"katra3d: error: {said}"]
        assert not (tmp_path / "j.katra").exists()


def test_a_trace_that_is_not_a_file_says_what_it_is(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    (tmp_path / "dir.trace").mkdir()
    os.mkfifo(tmp_path / "fifo.trace")  # never opened: reading it would wait for a writer
    # files of the kernel: reading pagemap takes for ever, reading kmsg consumes the kernel's log
    (tmp_path / "pm.trace").symlink_to("/proc/self/pagemap")
    (tmp_path / "kmsg.trace").symlink_to("/proc/kmsg")
    (tmp_path / "kmsg.py").symlink_to("/proc/kmsg")
    for name, said in (
        ("dir.trace", "is a directory, not a trace file"),
        ("fifo.trace", "is not a regular file (a pipe or FIFO)"),
        ("none.trace", "no such trace file"),
        ("pm.trace", "is not a regular file (a file of the kernel under /proc)"),
        ("kmsg.trace", "is not a regular file (a file of the kernel under /proc)"),
        ("kmsg.py", "is not a regular file (a file of the kernel under /proc)"),
    ):
        code, _, err = katra_main(
            capsys, "run", str(tmp_path / name), "--frames", "1", "-o", str(tmp_path / "x.katra")
        )
        assert code == 2 and said in err and err.count("\n") == 1, err
    assert not (tmp_path / "x.katra").exists()


def test_missing_glretrace_is_exit_3_with_the_install_line(traces: Traces, tmp_path: Path) -> None:
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    (bin_dir / "apitrace").symlink_to(shutil.which("apitrace") or "apitrace")
    (bin_dir / "python").symlink_to(sys.executable)
    res = katra(
        "run",
        str(traces.app),
        "--frames",
        "2",
        "-o",
        "m.katra",
        cwd=tmp_path,
        env={**_env(), "PATH": f"{bin_dir}{os.pathsep}{Path(sys.executable).parent}"},
    )
    assert res.returncode == 3, res.stderr
    assert "apt-get install -y apitrace" in res.stderr and "glretrace" in res.stderr
    assert len(res.stderr.strip().splitlines()) == 1


@pytest.mark.gl
@pytest.mark.slow
def test_counted_replays_record_the_vector_width_and_refuse_the_mix(
    traces: Traces, tmp_path: Path
) -> None:
    """Two counted replays at once (counts do not depend on the load) of the clear trace's first 3
    frames of 4 (a trimmed copy), one with a vector width set by the user: recorded, and compare
    refuses the mix. That two counted replays of one trace are unchanged is docs/replay.md's, whose
    commands run in test_docs."""
    if shutil.which("valgrind") is None:
        pytest.skip("no valgrind")

    def counted(name: str, extra: dict[str, str]) -> subprocess.CompletedProcess[str]:
        return katra(
            "run",
            str(traces.clear),
            "--frames",
            "2",
            "--warmup",
            "1",
            "--measure",
            "instructions",
            "-o",
            name,
            cwd=tmp_path,
            env={**_env(), **extra},
            timeout=900,
        )

    runs = {"n.katra": {}, "w.katra": {"LP_NATIVE_VECTOR_WIDTH": "256"}}
    with concurrent.futures.ThreadPoolExecutor(len(runs)) as pool:
        done = dict(zip(runs, pool.map(counted, runs, runs.values()), strict=True))
    for res in done.values():
        assert res.returncode == 0, res.stderr
    from katra_trace.schema import Clock, Flag, Kind

    for name, width in (("n.katra", "128"), ("w.katra", "256")):
        t = _trace(tmp_path / name)
        assert t.header.host_info.codegen["lp_native_vector_width"] == width
        ev = t.events
        frames = (ev["kind"] == Kind.FRAME) & (ev["clock"] == Clock.INSTRUCTIONS)
        assert ((ev["flags"][frames] & Flag.WARMUP) == 0).sum() == 2 and (
            ev["dur_ns"][frames] > 0
        ).all()
        assert len(t.kept_frames) == 1
    mixed = katra("compare", "n.katra", "w.katra", cwd=tmp_path)
    assert mixed.returncode == 2 and "incomparable" in mixed.stdout.splitlines()[0], mixed.stdout


@pytest.mark.gl
@pytest.mark.slow
def test_ctrl_c_stops_a_counted_replay_and_keeps_its_frames(traces: Traces, tmp_path: Path) -> None:
    """Ctrl-C (SIGINT to the foreground group, which the replayer's own group is not in) while a
    replay runs under callgrind: it stops, the frames that replay had counted are kept (beyond the
    last restart), exit 130, and no process or temporary directory is left."""
    if shutil.which("valgrind") is None:
        pytest.skip("no valgrind")
    import signal
    import time

    tmp = tmp_path / "tmp"
    tmp.mkdir()
    env = {k: v for k, v in os.environ.items() if k != "KATRA3D_BACKEND"}
    proc = subprocess.Popen(
        [
            sys.executable,
            "-m",
            "katra3d",
            "run",
            str(traces.clear),
            "--frames",
            "40",
            "--warmup",
            "1",
            "--measure",
            "instructions",
            "-o",
            "c.katra",
            "--quiet",
        ],
        cwd=tmp_path,
        env={**env, **_env(), "TMPDIR": str(tmp)},
        start_new_session=True,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        # a background job's children start with SIGINT ignored: the user's Ctrl-C is not
        preexec_fn=lambda: signal.signal(signal.SIGINT, signal.SIG_DFL),
    )
    try:
        # the replay in progress has dumped at a SwapBuffers after its first frame's (which has
        # ended)
        deadline = time.monotonic() + 600  # a guard, not a measurement
        while not list(tmp.glob("*/katra3d-counted-replay-*/cg.out.3-01")) and proc.poll() is None:
            assert time.monotonic() < deadline
            time.sleep(0.05)
        os.killpg(proc.pid, signal.SIGINT)
        _, err = proc.communicate(timeout=120)
    finally:
        if proc.poll() is None:
            os.killpg(proc.pid, signal.SIGKILL)
            proc.wait()
    assert proc.returncode == 130, err
    t = _trace(tmp_path / "c.katra")
    from katra_trace.schema import Clock, Kind

    assert t.status == "interrupted"
    kept = int(((t.events["kind"] == Kind.FRAME) & (t.events["clock"] == Clock.INSTRUCTIONS)).sum())
    restarts = next(a for a in t.annotations if a.get("type") == "scene")["replay"]["restarts"]
    assert kept > (restarts[-1] if restarts else 0), (kept, restarts)
    assert not subprocess.run(["pgrep", "-g", str(proc.pid)], capture_output=True).stdout
    assert not list(tmp.iterdir())


def test_a_stop_ends_the_snapshot_replay_promptly(tmp_path: Path) -> None:
    """A stop (Ctrl-C) during the untimed snapshot replay ends it within the poll, not when the
    replayer ends: no image, and the replayer's group is stopped."""
    import time

    from katra3d.harness.replay.replayer import snapshot
    from katra3d.harness.replay.tool import Replayer

    slow = tmp_path / "glretrace"
    slow.write_text(f"#!/bin/sh\necho $$ > {tmp_path / 'pid'}\nexec sleep 60\n")
    slow.chmod(0o755)
    begun = time.monotonic()
    stop_at = begun + 0.5
    png = snapshot(
        Replayer(str(slow), "", "egl"),
        "app.trace",
        12,
        {"PATH": "/usr/bin:/bin"},
        stopped=lambda: time.monotonic() > stop_at,
        where=tmp_path,
    )
    assert png is None and time.monotonic() - begun < 30  # a guard: the replayer sleeps 60 s
    pid = int((tmp_path / "pid").read_text())
    assert not subprocess.run(["ps", "-o", "stat=", "-p", str(pid)], capture_output=True).stdout
