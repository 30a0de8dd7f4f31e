"""compare/stats on synthetic format-1.1 traces: instruction counts, reference markers, duplicate
names.

The traces are written with katra_trace.io.writer.TraceWriter (tests/trace_helpers.py),
as the capture engine writes them: instruction counts on Clock.INSTRUCTIONS in
``dur_ns``, REFERENCE markers on the wall clock, the measure and codegen facts
in the header.
"""

from __future__ import annotations

import json
import math
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from katra_trace import Clock, Flag, Kind
from katra_trace.analysis.compare import compare_traces
from katra_trace.analysis.defaults import CompareOptions
from katra_trace.analysis.stats import events_stats, scene_durations, scene_labels
from katra_trace.errors import ConfigError
from katra_trace.io.header import TraceHeader
from katra_trace.schema import EVENT_DTYPE, REFERENCE_NAME
from tests.trace_helpers import write_trace

STRINGS = ["", "shader", "frame", "lighting", "post", REFERENCE_NAME, "fill"]
CODEGEN = {
    "cpu_model": "Test CPU",
    "cpu_flags_sha": "abc123",
    "mesa": "22.3.6",
    "llvm": "15.0.6",
    "lp_native_vector_width": 256,
}


def _header(
    mode: str = "instructions", codegen: dict[str, Any] | None = None, **opts: Any
) -> dict[str, Any]:
    measure = (
        {}
        if mode == "time"
        else {
            "measure": {
                "mode": mode,
                "valgrind": "3.19.0",
                "env": {"LP_NUM_THREADS": "0", "PYTHONHASHSEED": "0"},
            }
        }
    )
    return {
        "capture_options": {
            "size": [64, 64],
            "samples": 0,
            "timing_mode": "sync",
            "params": {"shader": {"iterations": 48}},
            **measure,
            **opts,
        },
        "host_info": {
            "gl": {
                "renderer": "llvmpipe (LLVM 15.0.6, 256 bits)",
                "driver": {"name": "Mesa", "version": "22.3.6"},
            },
            "codegen": dict(CODEGEN if codegen is None else codegen),
        },
    }


def count_trace(
    path: Path,
    *,
    lighting: float = 1.0e7,
    post: float = 4.0e6,
    frames: int = 6,
    clock: int = Clock.INSTRUCTIONS,
    jitter: float = 0.0,
    seed: int = 0,
    **header: Any,
) -> Path:
    """One instructions-mode run of scene ``shader``: a JIT-heavy warmup frame, then steady frames
    of two zones (lighting, post) plus a fixed per-frame harness cost."""
    rng = np.random.default_rng(seed)
    rows = []
    for i in range(frames + 1):
        warm = i == 0
        light = lighting * (2.0 if warm else 1.0) * (1 + jitter * rng.standard_normal())
        zones = [(3, int(light)), (4, int(post))]
        for name, n in zones:
            rows.append((Kind.ZONE, clock, Flag.WARMUP if warm else 0, 1, 1, name, i, i, n, 0.0))
        total = sum(n for _, n in zones) + 150_000
        rows.append((Kind.FRAME, clock, Flag.WARMUP if warm else 0, 0, 1, 2, i, i, total, 0.0))
    write_trace(path, np.array(rows, dtype=EVENT_DTYPE), STRINGS, header=_header(**header))
    return path


def wall_trace(
    path: Path,
    *,
    frame_ms: float,
    ref_ms: float | None,
    frames: int = 40,
    seed: int = 0,
    scene_name_ids: tuple[int, ...] = (1,),
) -> Path:
    """A time-mode run: wall frames of each scene id, a reference draw after every 4th frame."""
    rng = np.random.default_rng(seed)
    rows = []
    t = 0
    for sid in scene_name_ids:
        for i in range(frames):
            dur = int(frame_ms * 1e6 * math.exp(rng.normal(0, 0.02)))
            rows.append((Kind.FRAME, Clock.WALL, 0, 0, sid, 2, i, t, dur, 0.0))
            t += dur
            if ref_ms is not None and i % 4 == 3:
                rdur = int(ref_ms * 1e6 * math.exp(rng.normal(0, 0.02)))
                rows.append((Kind.MARKER, Clock.WALL, Flag.REFERENCE, 0, sid, 5, i, t, rdur, 0.0))
                t += rdur
    write_trace(path, np.array(rows, dtype=EVENT_DTYPE), STRINGS, header=_header("time"))
    return path


def _open(*paths: Path) -> list[Any]:
    from katra_trace import open_trace

    return [open_trace(p) for p in paths]


# --------------------------------------------------------------------------- instructions


@pytest.mark.slow
def test_instructions_one_run_a_side_per_scene_and_per_zone(tmp_path: Path, katra_cli) -> None:
    base = count_trace(tmp_path / "base.katra")
    same = count_trace(tmp_path / "same.katra")
    # +1.5 % in one pass, ~+1.07 % a frame
    more = count_trace(tmp_path / "more.katra", lighting=1.015e7)
    r = katra_cli("compare", str(base), str(same), "--format", "json")
    assert r.returncode == 0, r.stdout + r.stderr
    out = json.loads(r.stdout)
    assert out["metric"] == "instructions" and out["threshold_pct"] == 0.5
    scene = out["scenes"]["shader"]
    assert scene["verdict"] == "unchanged" and scene["unit"] == "counts" and scene["runs_base"] == 1
    assert scene["level_base"] == 1.0e7 + 4.0e6 + 150_000  # the warmup (JIT) frame is excluded
    r = katra_cli("compare", str(base), str(more), "--format", "json")
    assert r.returncode == 1, r.stdout + r.stderr
    scene = json.loads(r.stdout)["scenes"]["shader"]
    assert scene["verdict"] == "regression" and 1.0 < scene["change_pct"] < 1.2
    zones = scene["zones"]
    assert zones["lighting"]["verdict"] == "regression" and zones["lighting"][
        "change_pct"
    ] == pytest.approx(1.5)
    # a zone is judged by what it does to the frame: +1.5 % of 10M in a 14.15M frame
    assert zones["lighting"]["frame_change_pct"] == pytest.approx(1.5e5 / 14.15e6 * 100)
    assert zones["post"]["verdict"] == "unchanged" and zones["post"]["change_pct"] == 0
    r = katra_cli("compare", str(base), str(more))
    assert r.returncode == 1
    assert (
        "shader / lighting" in r.stdout and "shader / post" in r.stdout and "14,150,000" in r.stdout
    )
    assert "+1.50% (+1.06% of frame)" in r.stdout
    # cycles are compared the same way
    cb = count_trace(tmp_path / "cb.katra", clock=Clock.CYCLES, mode="cycles")
    cn = count_trace(tmp_path / "cn.katra", clock=Clock.CYCLES, mode="cycles", post=4.4e6)
    r = katra_cli("compare", str(cb), str(cn), "--format", "json")
    assert r.returncode == 1 and json.loads(r.stdout)["metric"] == "cycles"


def test_a_small_zone_is_judged_by_its_share_of_the_frame(tmp_path: Path) -> None:
    # post grows 5 % but is 1/35 of the frame: +0.14 % of the frame, below the 0.5 % threshold
    a = count_trace(tmp_path / "a.katra", post=4.0e5)
    b = count_trace(tmp_path / "b.katra", post=4.2e5)
    c = compare_traces(_open(a), _open(b))
    post = {z.zone: z for z in c.zones}["post"]
    assert post.ratio == pytest.approx(1.05) and post.verdict == "unchanged", post.reason
    assert "of the frame" in post.reason and c.exit_code == 0


def test_instructions_noise_floor_from_frames(tmp_path: Path) -> None:
    # frames that wobble by ~2 %: a 1 % change is not beyond 3x the floor -> inconclusive, exit 0
    a = count_trace(tmp_path / "a.katra", jitter=0.02, seed=1, frames=30)
    b = count_trace(tmp_path / "b.katra", jitter=0.02, seed=2, frames=30, lighting=1.014e7)
    c = compare_traces(_open(a), _open(b))
    s = c.scenes[0]
    assert s.verdict == "inconclusive" and c.exit_code == 0, s.reason
    assert "across matched steady frames" in s.reason and s.noise_floor_pct > 0.3


@pytest.mark.slow
def test_instruction_comparisons_refuse_a_different_code_generator(
    tmp_path: Path, katra_cli
) -> None:
    a = count_trace(tmp_path / "a.katra")
    b = count_trace(tmp_path / "b.katra", codegen=dict(CODEGEN, llvm="16.0.0"))
    r = katra_cli("compare", str(a), str(b))
    assert r.returncode == 2
    assert "different codegen: BASE llvm=15.0.6 vs NEW llvm=16.0.0" in r.stdout
    assert "--allow-codegen-mismatch" in r.stdout
    r = katra_cli("compare", str(a), str(b), "--allow-codegen-mismatch")
    assert r.returncode == 0 and "allowed by --allow-codegen-mismatch" in r.stdout
    # the library refuses the same way
    c = compare_traces(_open(a), _open(b), CompareOptions(metric="instructions"))
    assert c.scenes[0].verdict == "incomparable"


@pytest.mark.slow
def test_counts_and_times_do_not_mix(tmp_path: Path, katra_cli) -> None:
    counts = count_trace(tmp_path / "counts.katra")
    times = wall_trace(tmp_path / "times.katra", frame_ms=5.0, ref_ms=1.0)
    r = katra_cli("compare", str(counts), str(times))
    assert r.returncode == 2 and "cannot compare counts with times" in r.stderr
    assert "Traceback" not in r.stderr
    # asking for a clock the traces lack is incomparable, never a verdict
    r = katra_cli("compare", str(counts), str(counts), "--metric", "wall")
    assert r.returncode == 2 and "no wall frame times" in r.stdout
    r = katra_cli("compare", str(times), str(times), "--metric", "instructions")
    assert r.returncode == 2 and "no instructions frame counts" in r.stdout


def test_stats_shows_counts_in_counts(tmp_path: Path, katra_cli) -> None:
    t = count_trace(tmp_path / "c.katra")
    r = katra_cli("stats", str(t), "--zones", "--format", "json")
    assert r.returncode == 0, r.stderr
    shader = json.loads(r.stdout)["scenes"]["shader"]
    inst = shader["metrics"]["instructions"]
    assert inst["median_instructions"] == 1.0e7 + 4.0e6 + 150_000 and inst["n"] == 6
    assert not any(k.endswith("_ms") or k.startswith("fps") for k in inst)
    assert shader["zones"]["lighting"]["instructions"]["median_instructions"] == 1.0e7
    r = katra_cli("stats", str(t), "--all")
    assert r.returncode == 0 and "median_instructions" in r.stdout and "14,150,000" in r.stdout
    assert "median_ms" not in r.stdout
    r = katra_cli("stats", str(t))  # compact: the counted clock, in counts
    assert r.returncode == 0 and "instructions per frame, instructions clock" in r.stdout
    assert "14,150,000" in r.stdout and " ms" not in r.stdout and "µs" not in r.stdout


# --------------------------------------------------------------------------- normalize


@pytest.mark.slow
def test_normalize_divides_by_the_reference_workload(tmp_path: Path, katra_cli) -> None:
    # NEW's machine is 30 % slower across the board (frames and reference alike): raw wall time
    # calls that a regression; normalized, the scene is unchanged
    base = tmp_path / "base"
    new = tmp_path / "new"
    base.mkdir()
    new.mkdir()
    for i in range(4):
        wall_trace(base / f"r{i}.katra", frame_ms=5.0, ref_ms=1.0, seed=i)
        wall_trace(new / f"r{i}.katra", frame_ms=6.5, ref_ms=1.3, seed=10 + i)
    raw = json.loads(katra_cli("compare", str(base), str(new), "--format", "json").stdout)
    assert raw["scenes"]["shader"]["verdict"] == "regression"
    r = katra_cli("compare", str(base), str(new), "--normalize", "--format", "json")
    assert r.returncode == 0, r.stdout + r.stderr
    out = json.loads(r.stdout)
    s = out["scenes"]["shader"]
    assert out["metric"] == "wall/reference" and s["value_unit"] == "x reference"
    assert s["verdict"] == "unchanged" and s["level_base"] == pytest.approx(5.0, rel=0.03)
    assert s["p99_base_ms"] is None and s["level_base_ms"] is None  # no ms figures for a ratio
    # the normalized level is computed from the trace's reference rows
    from katra_trace import open_trace
    from katra_trace.analysis.stats import reference_durations

    t = open_trace(base / "r0.katra")
    ref = reference_durations(t.events, list(t.strings))["shader"]["wall"]
    assert ref.size == 10
    frames = scene_durations(t.events, list(t.strings))["shader"]["wall"]
    one = compare_traces([t] * 3, [t] * 3, CompareOptions(normalize=True)).scenes[0]
    assert one.level_base == pytest.approx(np.median(frames) / np.median(ref))


def test_normalize_without_reference_markers_is_bad_input(tmp_path: Path, katra_cli) -> None:
    a = wall_trace(tmp_path / "a.katra", frame_ms=5.0, ref_ms=1.0)
    b = wall_trace(tmp_path / "b.katra", frame_ms=5.0, ref_ms=None)
    r = katra_cli("compare", str(a), str(b), "--normalize")
    assert r.returncode == 2 and "no reference markers" in r.stderr and "b.katra" in r.stderr
    c = count_trace(tmp_path / "c.katra")
    with pytest.raises(ConfigError, match="does not apply"):
        compare_traces(_open(c), _open(c), CompareOptions(normalize=True))
    with pytest.raises(ConfigError, match="does not apply"):
        compare_traces(_open(a), _open(a), CompareOptions(normalize=True, metric="cpu"))


# --------------------------------------------------------------------------- duplicate names


def _dup_events() -> tuple[np.ndarray, list[str]]:
    """Scene ids 3 and 1 share the name "fill"; id 3 runs first."""
    strings = ["", "fill", "frame", "fill", "fill#2"]
    rows = []
    for sid, ms in ((3, 10.0), (1, 20.0), (4, 30.0)):
        for i in range(25):
            rows.append((Kind.FRAME, Clock.WALL, 0, 0, sid, 2, i, 0, int(ms * 1e6), 0.0))
    return np.array(rows, dtype=EVENT_DTYPE), strings


def test_scene_ids_sharing_a_name_are_kept_apart_by_one_rule() -> None:
    ev, strings = _dup_events()
    # first appearance order; "fill#2" is another scene's own name, so the second "fill" is fill#3
    assert scene_labels(ev, strings) == {3: "fill", 1: "fill#3", 4: "fill#2"}
    stats = events_stats(ev, strings).scenes
    assert {k: v.metrics["wall"].as_dict()["median_ms"] for k, v in stats.items()} == {
        "fill": 10.0,
        "fill#3": 20.0,
        "fill#2": 30.0,
    }
    durations = scene_durations(ev, strings)
    assert {k: float(v["wall"][0]) / 1e6 for k, v in durations.items()} == {
        "fill": 10.0,
        "fill#3": 20.0,
        "fill#2": 30.0,
    }


def test_compare_keeps_same_named_scenes_apart() -> None:
    class _T:
        def __init__(self, events: np.ndarray, strings: list[str]) -> None:
            self.events, self.strings = events, strings
            self.header = TraceHeader.from_dict(_header("time"))

    ev, strings = _dup_events()
    slower = ev.copy()
    slower["dur_ns"][slower["scene"] == 1] *= 2  # only the second "fill" got slower
    c = compare_traces([_T(ev, strings)] * 3, [_T(slower, strings)] * 3)
    by = {s.scene: s for s in c.scenes}
    assert set(by) == {"fill", "fill#3", "fill#2"}
    assert by["fill#3"].verdict == "regression" and by["fill#3"].ratio == pytest.approx(2.0)
    assert by["fill"].ratio == pytest.approx(1.0) and by["fill#2"].ratio == pytest.approx(1.0)


def test_identical_code_counted_in_two_processes_is_not_a_change(katra_cli: Any) -> None:
    """Two real counted captures of the same command (tests/data/counted_aa/README.md: one child
    compiled katra3d's modules from source, so every frame counts ~0.25 % fewer). A rule without the
    cross-process jitter floor calls them a regression at --threshold 0.2: exit 1 on identical
    code."""
    data = Path(__file__).parent / "data" / "counted_aa"
    base, new = data / "base.katra", data / "new.katra"
    b = scene_durations(*_events_strings(base))["tiny"]["instructions"]
    n = scene_durations(*_events_strings(new))["tiny"]["instructions"]
    old_change = float(np.median(n) / np.median(b) - 1)
    assert 0.002 < old_change < 0.005 and np.all(np.abs(n - b) <= 200)  # what the pair shows
    c = compare_traces(_open(base), _open(new), CompareOptions(threshold_pct=0.2))
    s = c.scenes[0]
    assert s.verdict == "inconclusive" and c.exit_code == 0, s.reason
    assert "cross-process jitter 500 instructions a frame" in s.reason
    r = katra_cli("compare", str(base), str(new), "--threshold", "0.2")
    assert r.returncode == 0 and "regression" not in r.stdout, r.stdout + r.stderr
    # at the default threshold, too
    assert compare_traces(_open(base), _open(new)).scenes[0].verdict == "inconclusive"


def _events_strings(path: Path) -> tuple[np.ndarray, list[str]]:
    (t,) = _open(path)
    return t.events, list(t.strings)
