"""Slow frames and their causes (katra_trace/analysis/slow.py) on traces built here, frame by frame:
each rule of the cause, the period, the JSON and text of ``stats --slow``, the report and Perfetto
export."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from katra_trace.analysis.slow import (
    BETWEEN,
    DRAW,
    GC,
    MACHINE,
    NO_ZONES_NOTE,
    UNKNOWN,
    ZONE,
    ordinal,
    period_of,
    slow_frames,
)
from katra_trace.analysis.stats import stutter_frames, stutter_pct
from katra_trace.schema import EVENT_DTYPE, GC_NAME, Clock, Flag, Kind
from tests.cli_helpers import katra_main
from tests.trace_helpers import write_trace

MS = 1_000_000


class Frames:
    """Frames of 1 ms (wall), with zones ``a`` (0.3 ms) and ``b`` (0.4 ms) and 0.3 ms between them,
    and their process CPU time (0.9 ms); :meth:`add` makes one frame slower in one part."""

    def __init__(
        self,
        n: int = 80,
        zones: bool = True,
        draws: bool = False,
        warmup: int = 3,
        zone_clock: Clock = Clock.WALL,
        frame_clocks: tuple[Clock, ...] = (Clock.WALL, Clock.CPU, Clock.PROCESS),
    ) -> None:
        self.n, self.zones, self.draws, self.warmup = n, zones, draws, warmup
        self.frame_clocks = frame_clocks  # the wall time on WALL, GPU and the count clocks
        # a replay's draw zones are on the cpu clock (the replayer's time in each call)
        self.zone_clock = zone_clock
        self.extra: dict[tuple[int, str], float] = {}  # (frame, part) -> ms added
        self.cpu: dict[int, float] = {}  # frame -> process ms added
        self.gc: dict[int, float] = {}  # frame -> ms of a collection between the zones

    def add(self, frame: int, part: str, ms: float, cpu: bool = True) -> Frames:
        self.extra[(frame, part)] = self.extra.get((frame, part), 0.0) + ms
        if cpu:
            self.cpu[frame] = self.cpu.get(frame, 0.0) + ms
        return self

    def events(self) -> tuple[np.ndarray, list[str]]:
        strings = ["", "frame", "scene", "a", "b", GC_NAME, "b/tri#1", "b/tri#2"]
        rows: list[tuple[Any, ...]] = []
        t, zc = 0, self.zone_clock
        for i in range(self.n + self.warmup):
            flags = int(Flag.WARMUP) if i < self.warmup else 0
            x = {
                part: int(self.extra.get((i, part), 0.0) * MS)
                for part in ("a", "b", "gap", "tri#2")
            }
            a, b = int(0.3 * MS) + x["a"], int(0.4 * MS) + x["b"] + x["tri#2"]
            gap = int(0.3 * MS) + x["gap"] + int(self.gc.get(i, 0.0) * MS)
            wall = a + b + gap
            if self.zones:
                rows.append((Kind.ZONE, zc, flags, 1, 2, 3, i, t, a, 0.0))
                rows.append((Kind.ZONE, zc, flags, 1, 2, 4, i, t + a + gap, b, 0.0))
                if self.draws:
                    rows.append((Kind.ZONE, zc, flags, 2, 2, 6, i, t + a + gap, int(0.1 * MS), 0.0))
                    rows.append(
                        (
                            Kind.ZONE,
                            zc,
                            flags,
                            2,
                            2,
                            7,
                            i,
                            t + a + gap + int(0.1 * MS),
                            int(0.1 * MS) + x["tri#2"],
                            0.0,
                        )
                    )
            if i in self.gc:
                rows.append(
                    (
                        Kind.MARKER,
                        Clock.WALL,
                        flags,
                        0,
                        2,
                        5,
                        i,
                        t + a + int(0.1 * MS),
                        int(self.gc[i] * MS),
                        2.0,
                    )
                )
            cpu = int((0.9 + self.cpu.get(i, 0.0) + self.gc.get(i, 0.0)) * MS)
            of_clock = {Clock.CPU: wall - int(0.05 * MS), Clock.PROCESS: cpu}
            for clock in self.frame_clocks:
                rows.append(
                    (Kind.FRAME, clock, flags, 0, 2, 1, i, t, of_clock.get(clock, wall), 0.0)
                )
            t += wall + int(0.01 * MS)
        return np.array(rows, dtype=EVENT_DTYPE), strings

    def causes(self) -> dict[int, tuple[str, str | None, float]]:
        ev, strings = self.events()
        found = slow_frames(ev, strings)["scene"]
        return {
            s.frame: (s.cause.kind, s.cause.name, round(s.cause.excess_ms, 3)) for s in found.slow
        }


def test_one_stutter_rule() -> None:
    """stats' stutter_pct and the slow frames come from the one rule (stutter_frames)."""
    d = np.full(60, 1e6)
    d[[10, 40]] = 4e6
    slow, median = stutter_frames(d)
    assert np.flatnonzero(slow).tolist() == [10, 40] and float(median[10]) == 1e6
    assert stutter_pct(d) == pytest.approx(100 * 8 / 66)
    f = Frames().add(10, "b", 3.0).add(40, "b", 3.0)
    # frame indices as the scene saw them (warmup counted)
    assert sorted(f.causes()) == [10 + 3 - 3, 40]


def test_each_cause() -> None:
    f = Frames()
    f.add(10, "b", 5.0)  # the pass's work grew: zone b
    f.add(20, "gap", 5.0, cpu=False)  # the scene's code slept between the zones: between zones
    f.gc[30] = 5.0  # a full collection ran between the zones
    f.add(40, "a", 5.0, cpu=False)  # zone a grew with no CPU time to show for it: the machine
    for part in ("a", "b", "gap"):  # a little everywhere: nothing explains most of it
        f.add(50, part, 1.5)
    # more work, and preempted longer: slow for its work anyway
    f.add(60, "b", 5.0).add(60, "b", 6.0, cpu=False)
    assert f.causes() == {
        10: (ZONE, "b", 5.0),
        20: (BETWEEN, None, 5.0),
        30: (GC, "generation 2", 5.0),
        40: (MACHINE, None, 5.0),
        50: (UNKNOWN, None, 4.5),
        60: (ZONE, "b", 11.0),
    }


def test_draw_is_named_over_its_pass() -> None:
    f = Frames(draws=True).add(15, "tri#2", 4.0)
    assert f.causes() == {15: (DRAW, "b/tri#2", 4.0)}


def test_without_zones() -> None:
    f = Frames(zones=False).add(10, "b", 5.0).add(20, "a", 5.0, cpu=False)
    f.gc[30] = 5.0
    assert f.causes() == {
        10: (BETWEEN, None, 5.0),
        20: (MACHINE, None, 5.0),
        30: (GC, "generation 2", 5.0),
    }
    ev, strings = f.events()
    found = slow_frames(ev, strings)["scene"]
    assert not found.zones and found.note == NO_ZONES_NOTE and "--zones" in NO_ZONES_NOTE


def test_recurring_causes_are_grouped_with_their_period() -> None:
    f = Frames(n=100, warmup=0)
    for i in range(9, 100, 9):
        f.add(i, "b", 4.0)
    # one of the series is slow for another reason: still every 9th
    f.add(27, "gap", 30.0, cpu=False)
    ev, strings = f.events()
    groups = {g.label: g for g in slow_frames(ev, strings)["scene"].groups}
    assert set(groups) == {"zone 'b'", "between zones"}
    spike = groups["zone 'b'"]
    assert (spike.count, spike.period, spike.period_text, spike.first) == (
        10,
        9,
        "every 9th frame",
        9,
    )
    assert spike.typical_excess_ms == pytest.approx(4.0)
    assert groups["between zones"].period is None


def test_period_rule() -> None:
    assert period_of([5, 18, 31, 44]) == (13, 5)
    assert period_of([5, 18, 44]) == (13, 5)  # one of three missing
    assert period_of([5, 18, 31, 83]) == (13, 5)  # 4 of the 7 frames from 5 to 83: regular enough
    assert period_of([5, 18, 31, 109]) == (None, 5)  # 4 of the 9 frames from 5 to 109: not regular
    assert period_of([3, 7]) == (None, 3)
    assert period_of([3, 4, 10, 19]) == (None, 3)  # gcd 1, 4 of 17 frames
    assert [ordinal(n) for n in (1, 2, 3, 4, 11, 12, 13, 21, 22, 102, 113)] == [
        "1st",
        "2nd",
        "3rd",
        "4th",
        "11th",
        "12th",
        "13th",
        "21st",
        "22nd",
        "102nd",
        "113th",
    ]


def test_no_slow_frames() -> None:
    ev, strings = Frames().events()
    found = slow_frames(ev, strings)["scene"]
    assert found.slow == () and found.groups == () and found.frames == 80 and found.clock == "wall"


def _trace(tmp_path: Path, frames: Frames) -> Path:
    ev, strings = frames.events()
    path = tmp_path / "slow.katra"
    write_trace(
        path,
        ev,
        strings,
        header={"capture_options": {"timing_mode": "sync", "primary_clock": "wall"}},
    )
    return path


def test_stats_slow(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    f = Frames(n=100, warmup=0)
    for i in range(9, 100, 9):
        f.add(i, "b", 4.0)
    f.gc[50] = 8.0
    path = str(_trace(tmp_path, f))
    code, out, _ = katra_main(capsys, "stats", path, "--slow", "--format", "json")
    scene = json.loads(out)["scenes"]["scene"]
    assert code == 0 and scene["slow_clock"] == "wall" and scene["slow_note"] is None
    assert scene["metrics"]["wall"]["n"] == 100
    first = scene["slow_frames"][0]
    assert first == {
        "frame": 9,
        "ms": pytest.approx(5.0),
        "ratio": pytest.approx(5.0),
        "cause": {"kind": "zone", "name": "b", "excess_ms": pytest.approx(4.0)},
    }
    assert {(s["frame"], s["cause"]["kind"]) for s in scene["slow_frames"]} == {
        *((i, "zone") for i in range(9, 100, 9)),
        (50, "gc"),
    }
    code, out, _ = katra_main(capsys, "stats", path, "--slow")
    assert code == 0 and "11 of 100 frames slow" not in out and "12 of 100 frames slow" in out
    assert "zone 'b'" in out and "every 9th frame" in out and "gc (generation 2)" in out
    assert "every slow frame" not in out
    code, out, _ = katra_main(capsys, "stats", path, "--slow", "--all", "--format", "markdown")
    assert (
        "every slow frame" in out
        and "| 50 | 9.000 ms | 9.000 | gc (generation 2) | 8.000 ms |" in out
    )
    code, out, _ = katra_main(capsys, "stats", path, "--slow", "--format", "csv")
    assert (
        out.splitlines()[0] == "scene,frame,ms,ratio,kind,name,excess_ms"
        and len(out.splitlines()) == 13
    )


def test_stats_slow_says_zones_would_tell_more(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    path = str(_trace(tmp_path, Frames(zones=False).add(30, "b", 5.0)))
    code, out, _ = katra_main(capsys, "stats", path, "--slow")
    assert code == 0 and "between zones" in out and f"note: {NO_ZONES_NOTE}" in out


def test_report_and_perfetto(tmp_path: Path) -> None:
    pytest.importorskip("plotly")
    pytest.importorskip("perfetto")
    from perfetto.protos.perfetto.trace import perfetto_trace_pb2

    from katra_trace.export import export_trace
    from katra_trace.io.tracesets import open_quietly
    from katra_trace.report import build_report

    f = Frames().add(20, "b", 5.0)
    f.gc[40] = 6.0
    trace = open_quietly(_trace(tmp_path, f))
    page = build_report([trace])
    assert (
        "<h3>Slow frames</h3>" in page
        and "zone &#x27;b&#x27;" in page
        and "gc (generation 2)" in page
    )
    figures = json.loads(page.split('id="katra-figures">', 1)[1].split("</script>", 1)[0])
    marks = {d["name"]: d for fig in figures for d in fig["data"] if d.get("legendgroup") == "slow"}
    assert marks["slow: zone"]["x"] == [20] and marks["slow: gc"]["x"] == [40]
    assert marks["slow: zone"]["marker"]["color"] != marks["slow: gc"]["marker"]["color"]
    out = tmp_path / "t.pftrace"
    export_trace(trace, "perfetto", out)
    pb = perfetto_trace_pb2.Trace()
    pb.ParseFromString(out.read_bytes())
    names = {i.iid: i.name for p in pb.packet for i in p.interned_data.debug_annotation_names}
    causes = {}
    for p in pb.packet:
        args = {names.get(a.name_iid): a for a in p.track_event.debug_annotations}
        if "slow_cause" in args:
            causes[args["frame"].uint_value] = (
                args["slow_cause"].string_value,
                args["slow_cause_name"].string_value,
            )
    assert causes == {20: ("zone", "b"), 40: ("gc", "generation 2")}


def test_replay_draw_zones_on_the_cpu_clock_name_the_cause(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """A replay's frames are on wall only, its draw zones on cpu (the replayer's host time in each
    call): the zones are seen and name the cause, and no "no zones recorded" note is given."""
    f = (
        Frames(frame_clocks=(Clock.WALL,), zone_clock=Clock.CPU)
        .add(10, "b", 5.0)
        .add(20, "gap", 5.0)
    )
    ev, strings = f.events()
    found = slow_frames(ev, strings)["scene"]
    assert f.causes() == {10: (ZONE, "b", 5.0), 20: (BETWEEN, None, 5.0)}
    assert found.zones and found.zone_clock == "cpu" and found.clock == "wall"
    assert found.note is not None and "cpu clock" in found.note and found.note != NO_ZONES_NOTE
    code, out, _ = katra_main(
        capsys, "stats", str(_trace(tmp_path, f)), "--slow", "--format", "json"
    )
    scene = json.loads(out)["scenes"]["scene"]
    assert code == 0 and scene["slow_zone_clock"] == "cpu" and scene["slow_note"] == found.note


def test_zones_only_on_another_clock_are_said_so(tmp_path: Path) -> None:
    """gpu frames with zones on the cpu clock alone: host time does not split GPU time, and the note
    says where the zones are rather than that there are none."""
    f = Frames(frame_clocks=(Clock.GPU, Clock.CPU), zone_clock=Clock.CPU).add(10, "b", 5.0)
    ev, strings = f.events()
    found = slow_frames(ev, strings)["scene"]
    assert found.clock == "gpu" and not found.zones and found.zone_clock is None
    assert found.note is not None and found.note != NO_ZONES_NOTE
    assert "cpu clock" in found.note and "gpu clock" in found.note
    assert f.causes() == {10: (BETWEEN, None, 5.0)}
    assert (
        slow_frames(*Frames(frame_clocks=(Clock.GPU, Clock.CPU), zones=False).events())[
            "scene"
        ].note
        == NO_ZONES_NOTE
    )


def test_counted_trace_says_slow_frames_are_a_time_notion(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    ev, strings = Frames(zones=False, frame_clocks=(Clock.INSTRUCTIONS,)).events()
    path = tmp_path / "counted.katra"
    write_trace(
        path, ev, strings, header={"capture_options": {"measure": {"mode": "instructions"}}}
    )
    code, out, err = katra_main(capsys, "stats", str(path), "--slow")
    assert (
        code == 0
        and len(out.splitlines()) == 1
        and "scene" in out
        and "instructions" in out
        and "time" in out
    )
    code, out, err = katra_main(capsys, "stats", str(path), "--slow", "--format", "json")
    scene = json.loads(out)["scenes"]["scene"]
    assert code == 0 and scene["metrics"]["instructions"]["n"] == 80
    assert scene["slow_frames"] == [] and scene["slow_causes"] == [] and scene["slow_clock"] is None
    assert "instructions" in scene["slow_note"]
    code, out, err = katra_main(capsys, "stats", str(path), "--slow", "--format", "csv")
    assert code == 0 and out.splitlines() == ["scene,frame,ms,ratio,kind,name,excess_ms"]
    assert scene["slow_note"] in err  # csv holds slow frames only: the why goes to stderr


def test_a_trace_without_frames_says_so(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    path = tmp_path / "empty.katra"
    write_trace(path, np.zeros(0, dtype=EVENT_DTYPE), [""])
    for fmt in ("table", "json", "csv"):
        code, out, err = katra_main(capsys, "stats", str(path), "--slow", "--format", fmt)
        assert code == 0 and "has no measured frames" in err, (fmt, err)
        if fmt == "json":
            assert json.loads(out) == {"scenes": {}}


def test_a_draw_seen_once_has_no_typical_time() -> None:
    """A replay names its draws by call number: a call seen in one frame only (one pass of the
    trace) has no moving median of its own to exceed, so a frame slow in it is unknown
    (docs/stats.md)."""
    f = Frames(frame_clocks=(Clock.WALL,), zone_clock=Clock.CPU).add(10, "b", 5.0)
    ev, strings = f.events()
    once = ev.copy()
    b = (once["kind"] == Kind.ZONE) & (once["name"] == strings.index("b"))
    once["name"][b] = len(strings) + np.arange(int(b.sum()))  # b@1, b@2, ...: one name a frame
    names = strings + [f"b@{k}" for k in range(int(b.sum()))]
    found = slow_frames(once, names)["scene"]
    assert [(s.frame, s.cause.kind) for s in found.slow] == [
        (10, UNKNOWN)
    ] and found.zone_clock == "cpu"
