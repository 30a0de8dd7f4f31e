"""The one comparison (katra_trace.analysis.comparison): two sides opened once, paired from ab.json,
damaged traces noted with their file's name, and sides captured in separate batches said so."""

from __future__ import annotations

from pathlib import Path

from katra_trace.analysis.comparison import compare_sides, open_sides, separate_batches
from katra_trace.analysis.verdict import Verdict
from tests.test_compare_cli import write_run


def test_sides_captured_in_separate_batches_are_said_so(tmp_path: Path) -> None:
    """compare tells from the capture times when the sides were not interleaved (a restored
    baseline).
    """
    for side, seed in (("base", 0), ("new", 10)):  # every BASE run, then every NEW run
        (tmp_path / side).mkdir()
        for i in range(3):
            write_run(tmp_path / side / f"run-{i}.katra", 10.0, seed=seed + i)
    sides = open_sides(str(tmp_path / "base"), str(tmp_path / "new"))
    note = separate_batches(sides)
    assert note is not None and note.startswith(
        "the sides were captured in separate batches (BASE's 3 run(s)"
    )
    result = compare_sides(sides, image_policy="off")
    assert note in result.timing.notes and result.exit_code in (0, 2)
    # interleaved runs (as ab takes them): no such note
    for d in ("ib", "in"):
        (tmp_path / d).mkdir()
    for i in range(3):
        write_run(tmp_path / "ib" / f"run-{i}.katra", 10.0, seed=20 + i)
        write_run(tmp_path / "in" / f"run-{i}.katra", 10.0, seed=30 + i)
    mixed = open_sides(str(tmp_path / "ib"), str(tmp_path / "in"))
    assert separate_batches(mixed) is None


def test_a_damaged_trace_is_used_up_to_where_it_stops_and_named(tmp_path: Path) -> None:
    base = write_run(tmp_path / "b.katra", 10.0, seed=1)
    new = write_run(tmp_path / "n.katra", 13.0, seed=2)
    data = new.read_bytes()
    new.write_bytes(data[: len(data) * 2 // 3])  # torn: its tail is gone
    sides = open_sides(str(base), str(new))
    assert len(sides.damaged) == 1 and sides.damaged[0].startswith(f"'{new}' is damaged (")
    result = compare_sides(sides, image_policy="off")
    assert all(s.verdict is not None for s in result.timing.scenes)
    assert {s.verdict for s in result.timing.scenes} <= set(Verdict)
