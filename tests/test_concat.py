"""katra_trace.io.concat: several traces written as one, the writing ``katra3d merge`` and a counted
run's join of its children's parts share (pure: traces written by the writer, no GL).

Two inputs that number the same strings differently join with one string table and every event named
as its input named it, moved by its shift, in blocks of at most BLOCK_EVENTS; a scene-less
annotation alike in both is written once; clock pairs move with the events, or become annotations
saying whose they are; kept frames stay byte for byte; the summary's counts add up. A damaged input
gives what it holds up to the damage, and the join of a counted run's parts leaves out a part that
cannot be read at all.
"""

from __future__ import annotations

import io
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from katra3d.harness.run.parts import join
from katra_trace import open_trace
from katra_trace.io import concat
from katra_trace.io.concat import Concatenation
from katra_trace.io.images import frame_record
from katra_trace.io.reader import Trace
from katra_trace.io.tracesets import open_quietly
from katra_trace.schema import EVENT_DTYPE, Clock, Kind
from tests.trace_helpers import write_trace

KEY = {"renderer": "test renderer"}
REFERENCE = {"type": "reference", "steps": 8}


def _input(
    path: Path,
    scene: str,
    strings: list[str],
    n: int,
    *,
    offset_ns: int = 0,
    codec: str = "zstd",
    pair_host_ns: int = 500,
) -> Path:
    """A trace of ``n`` frames of ``scene``, each with a zone ``zone``, whose table is ``strings``
    (in that order), one kept frame, a scene-less and a scene annotation, one clock pair at
    ``pair_host_ns``."""
    sid, frame, zone = (strings.index(s) for s in (scene, "frame", "zone"))
    rows = []
    for i in range(n):
        rows.append((Kind.ZONE, Clock.WALL, 0, 1, sid, zone, i, offset_ns + 100 * i, 10 + i, 0.0))
        rows.append((Kind.FRAME, Clock.WALL, 0, 0, sid, frame, i, offset_ns + 100 * i, 50 + i, 0.0))
    pixels = np.full((3, 5, 4), len(scene) * 40, dtype=np.uint8)
    writer = write_trace(
        path,
        np.array(rows, dtype=EVENT_DTYPE),
        strings,
        codec=codec,
        finish=False,
        images=[frame_record(scene, n - 1, 1.0, pixels, KEY)],
        annotations=[REFERENCE, {"type": "scene", "scene": scene}],
    )
    writer.clock_sync({"host_ns": pair_host_ns, "gpu_ns": 7})
    writer.finish({"scenes": [{"scene": scene}]})
    return path


@pytest.fixture(scope="module")
def inputs(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, Path]:
    root = tmp_path_factory.mktemp("concat")
    big = concat.BLOCK_EVENTS // 2 + 100  # two events a frame: its events take two blocks
    return (
        _input(root / "a.katra", "a", ["", "frame", "a", "zone"], big),
        _input(root / "b.katra", "b", ["", "zone", "b", "frame"], 3, pair_host_ns=900),
    )


def _concat(
    inputs: tuple[Path, Path], shifts: tuple[int, int], **note: Any
) -> tuple[Trace, list[int]]:
    """The inputs written as one with ``shifts`` (``note``: the second's clock_note); the trace read
    back strictly, and what each add() wrote."""
    dst = io.BytesIO()
    out = Concatenation(dst, {"workload": "joined", "capture_options": {}}, codec="blosc2")
    written = [
        out.add(open_quietly(inputs[0]), shifts[0]),
        out.add(open_quietly(inputs[1]), shifts[1], **note),
    ]
    out.finish("complete", {"mine": 1})
    path = Path(inputs[0].parent / f"joined-{len(note)}.katra")
    path.write_bytes(dst.getvalue())
    assert out.events == sum(written)
    return open_trace(path, strict=True), written


def _named(trace: Trace) -> list[tuple[str, str, int, int, int]]:
    """(scene, name, kind, start_ns, dur_ns) of every event, by name."""
    return [
        (
            trace.name(int(e["scene"])),
            trace.name(int(e["name"])),
            int(e["kind"]),
            int(e["start_ns"]),
            int(e["dur_ns"]),
        )
        for e in trace.events
    ]


def test_events_keep_their_names_move_by_their_shift_and_share_one_table(
    inputs: tuple[Path, Path],
) -> None:
    a, b = open_trace(inputs[0]), open_trace(inputs[1])
    joined, written = _concat(inputs, (0, 1_000_000))
    assert written == [len(a.events), len(b.events)]
    assert joined.status == "complete" and joined.header.workload == "joined"
    assert len(set(joined.strings)) == len(joined.strings) and {"a", "b", "frame", "zone"} <= set(
        joined.strings
    )
    moved_b = [(s, n, k, t + 1_000_000, d) for s, n, k, t, d in _named(b)]
    assert _named(joined) == _named(a) + moved_b
    # a's events in two blocks of at most BLOCK_EVENTS, b's in one
    assert joined.summary.event_blocks == 3
    assert joined.summary.user == {"mine": 1} and joined.summary.strings == len(joined.strings)
    # the latest end, moved: b's, a million nanoseconds on
    assert joined.summary.end_host_ns == max(
        a.summary.end_host_ns, b.summary.end_host_ns + 1_000_000
    )


def test_records_annotations_once_clock_pairs_moved_kept_frames_byte_for_byte(
    inputs: tuple[Path, Path],
) -> None:
    joined, _ = _concat(inputs, (0, 300))
    assert [n for n in joined.annotations if "scene" not in n] == [REFERENCE]  # alike in both: once
    assert [n["scene"] for n in joined.annotations if "scene" in n] == ["a", "b"]
    assert [p["host_ns"] for p in joined.clock_syncs] == [500, 1200]
    for path in inputs:
        kept = open_trace(path).kept_frames
        for scene, frame in kept.items():
            assert (
                joined.kept_frames[scene].png == frame.png
                and joined.kept_frames[scene].sha256 == frame.sha256
            )
    noted, _ = _concat(inputs, (0, 300), clock_note={"shard": "2/2"})
    # the second's pairs are not of the first's clock
    assert [p["host_ns"] for p in noted.clock_syncs] == [500]
    assert [n for n in noted.annotations if n.get("type") == "clock_sync"] == [
        {"type": "clock_sync", "shard": "2/2", "host_ns": 1200, "gpu_ns": 7}
    ]


def test_a_damaged_input_gives_what_it_holds_and_an_unreadable_part_nothing(
    tmp_path: Path, inputs: tuple[Path, Path]
) -> None:
    data = inputs[1].read_bytes()
    torn = tmp_path / "torn.katra"
    torn.write_bytes(data[: len(data) * 2 // 3])
    held = open_quietly(torn)
    assert held.truncated and held.summary_rebuilt
    gone = tmp_path / "never-written.katra"
    with open(tmp_path / "joined.katra", "wb") as dst:
        joined = join([inputs[0], gone, torn], dst, status="interrupted")
    assert joined.parts == [inputs[0], torn]
    trace = open_trace(tmp_path / "joined.katra", strict=True)
    a = open_trace(inputs[0])
    shift = int(held.header.as_dict()["start_host_ns"]) - int(a.header.as_dict()["start_host_ns"])
    assert shift > 0 and trace.status == "interrupted"
    assert joined.events == len(trace.events) == len(a.events) + len(held.events)
    assert _named(trace)[len(a.events) :] == [
        (s, n, k, t + shift, d) for s, n, k, t, d in _named(held)
    ]
    # the torn part has no summary
    assert [r["scene"] for r in trace.summary.user["scenes"]] == ["a"]
