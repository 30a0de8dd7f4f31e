"""apitrace traces as scenes (harness/replay, docs/replay.md): a tiny glmark2 trace recorded once per session
under an Xvfb of the test's own, replayed by katra3d with no DISPLAY given."""

from __future__ import annotations

import hashlib
import os
import re
import shutil
import subprocess
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from bench.glmark2 import xvfb_display
from katra3d.harness.replay.output import FrameReader, draw_zone, replayer_base_ns
from tests.cli_helpers import katra

NEEDED = ("apitrace", "glretrace", "glmark2", "Xvfb")


@pytest.fixture(scope="module")
def app_trace(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[Path, int]]:
    """(a glmark2 trace, its frame count): glmark2's build scene at 32x32 for 0.05 s, recorded on screen."""
    missing = [tool for tool in NEEDED if shutil.which(tool) is None]
    if missing:
        pytest.skip(f"no {', '.join(missing)}: ci/system-deps.sh test installs them")
    where = tmp_path_factory.mktemp("replay")
    trace = where / "app.trace"
    with xvfb_display(str(shutil.which("Xvfb"))) as display:
        env = {**os.environ, "DISPLAY": display}
        subprocess.run(["apitrace", "trace", "-o", str(trace), "glmark2", "-s", "32x32", "-b", "build:duration=0.05"],
                       env=env, capture_output=True, check=True, timeout=120)
        out = subprocess.run(["glretrace", "--pframe-times", str(trace)], env=env, capture_output=True, text=True,
                             check=True, timeout=120)
    frames = out.stdout.count("rendering_finished ")
    assert frames >= 3, out.stdout[-500:]
    yield trace, frames


def _env() -> dict[str, str]:
    return {"DISPLAY": ""}  # katra3d starts its own Xvfb


def _trace(path: Path) -> Any:
    from katra_trace import open_trace

    return open_trace(path)


def test_frame_reader_parses_glretrace_lines() -> None:
    reader = FrameReader()
    lines = ["# call no gpu_start gpu_dura cpu_start cpu_dura vsize_start vsize_dura rss_start rss_dura pixels "
             "program name", "call 10 0 0 5000 700 0 0 0 0 0 1 glClear",
             "call 11 0 0 6000 900 0 0 0 0 0 1 glDrawArrays", "call 12 0 0 7000 10 0 0 0 0 0 1 glDisable",
             "frame_end", "rendering_finished 1000000", "call 14 0 0 1500000 5 0 0 0 0 0 1 glClearColor",
             "frame_end", "rendering_finished 2000000", "Rendered 2 frames in 0.1 secs, average of 20 fps"]
    frames = [f for f in map(reader.feed, lines) if f is not None]
    assert [(f.end_ns, f.last_call) for f in frames] == [(1000000, 12), (2000000, 14)]
    assert [(d.function, d.call_no, d.dur_ns) for d in frames[0].draws] == [("glClear", 10, 700),
                                                                            ("glDrawArrays", 11, 900)]
    assert frames[1].draws == ()
    assert reader.rendered == 2
    assert replayer_base_ns(frames) == 1000000 - 1500000
    assert draw_zone("glDrawArrays", 2496) == "glDrawArrays@2496"


@pytest.mark.gl
def test_replay_frames_zones_header_and_image(app_trace: tuple[Path, int], tmp_path: Path) -> None:
    trace, count = app_trace
    warmup, frames = 1, min(4, count - 1)
    res = katra("run", str(trace), "--frames", str(frames), "--warmup", str(warmup), "--zones", "draws",
                "-o", "a.katra", cwd=tmp_path, env=_env())
    assert res.returncode == 0, res.stderr
    t = _trace(tmp_path / "a.katra")
    from katra_trace.schema import Clock, Kind

    ev = t.events
    assert int((ev["kind"] == Kind.FRAME).sum()) == warmup + frames
    assert set(ev["clock"][ev["kind"] == Kind.FRAME].tolist()) == {int(Clock.WALL)}
    names = {t.strings[n] for n in ev["name"][ev["kind"] == Kind.ZONE]}
    assert any(re.fullmatch(r"glDrawArrays@\d+", n) for n in names), names
    assert (ev["dur_ns"][ev["kind"] == Kind.FRAME] > 0).all()
    facts = t.header.capture_options.extra["replay"]["traces"]["app"]
    assert facts["sha256"] == hashlib.sha256(trace.read_bytes()).hexdigest()
    assert facts["size_bytes"] == trace.stat().st_size and facts["api"] == "glx"
    assert t.header.capture_options.extra["replay"]["replayers"]["glx"]["path"].endswith("glretrace")
    kept = t.kept_frames
    assert len(kept) == 1
    assert not subprocess.run(["pgrep", "-f", f"glretrace.*{trace}"], capture_output=True).stdout


@pytest.mark.gl
def test_a_short_trace_restarts_and_two_replays_have_one_image(app_trace: tuple[Path, int], tmp_path: Path) -> None:
    trace, count = app_trace
    for name in ("b.katra", "c.katra"):
        res = katra("run", str(trace), "--frames", str(count + 1), "--warmup", "1", "-o", name, cwd=tmp_path,
                    env=_env())
        assert res.returncode == 0, res.stderr
    t = _trace(tmp_path / "b.katra")
    from katra_trace.schema import Kind

    assert int((t.events["kind"] == Kind.FRAME).sum()) == count + 2
    scene = next(a for a in t.annotations if a.get("type") == "scene")
    assert scene["replay"]["restarts"] == [count]
    cmp = katra("compare", "b.katra", "c.katra", cwd=tmp_path)
    assert cmp.returncode in (0, 1), cmp.stderr
    assert "images (gate): 1 identical" in cmp.stdout, cmp.stdout


def test_not_a_trace_is_one_line(tmp_path: Path) -> None:
    if shutil.which("apitrace") is None:
        pytest.skip("no apitrace")
    (tmp_path / "junk.trace").write_bytes(np.random.default_rng(1).bytes(4096))
    res = katra("run", "junk.trace", "--frames", "2", "-o", "j.katra", cwd=tmp_path, env=_env())
    assert res.returncode == 2, res.stderr
    assert len(res.stderr.strip().splitlines()) == 1 and "Traceback" not in res.stderr
    assert not (tmp_path / "j.katra").exists()


def test_missing_glretrace_is_exit_3_with_the_install_line(app_trace: tuple[Path, int], tmp_path: Path) -> None:
    trace, _ = app_trace
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    (bin_dir / "apitrace").symlink_to(shutil.which("apitrace") or "apitrace")
    import sys

    (bin_dir / "python").symlink_to(sys.executable)
    res = katra("run", str(trace), "--frames", "2", "-o", "m.katra", cwd=tmp_path,
                env={**_env(), "PATH": f"{bin_dir}{os.pathsep}{Path(sys.executable).parent}"})
    assert res.returncode == 3, res.stderr
    assert "apt-get install -y apitrace" in res.stderr and "glretrace" in res.stderr
    assert len(res.stderr.strip().splitlines()) == 1


@pytest.mark.gl
@pytest.mark.slow
def test_counted_replays_agree_and_a_vector_width_is_refused(app_trace: tuple[Path, int], tmp_path: Path) -> None:
    if shutil.which("valgrind") is None:
        pytest.skip("no valgrind")
    trace, _ = app_trace
    for name, extra in (("n1.katra", {}), ("n2.katra", {}), ("w.katra", {"LP_NATIVE_VECTOR_WIDTH": "256"})):
        res = katra("run", str(trace), "--frames", "2", "--warmup", "1", "--measure", "instructions", "-o", name,
                    cwd=tmp_path, env={**_env(), **extra}, timeout=900)
        assert res.returncode == 0, res.stderr
    from katra_trace.schema import Clock, Flag, Kind

    counts = []  # the warmup frame counts the replayer's start, which moves by a few instructions
    for name in ("n1.katra", "n2.katra"):
        ev = _trace(tmp_path / name).events
        measured = (ev["kind"] == Kind.FRAME) & (ev["clock"] == Clock.INSTRUCTIONS) & ((ev["flags"] & Flag.WARMUP) == 0)
        counts.append(ev["dur_ns"][measured].tolist())
    assert counts[0] == counts[1] and len(counts[0]) == 2
    assert _trace(tmp_path / "w.katra").header.host_info.codegen["lp_native_vector_width"] == "256"
    same = katra("compare", "n1.katra", "n2.katra", cwd=tmp_path)
    assert same.returncode == 0 and "unchanged" in same.stdout, same.stdout + same.stderr
    mixed = katra("compare", "n1.katra", "w.katra", cwd=tmp_path)
    assert "incomparable" in mixed.stdout.splitlines()[0], mixed.stdout
