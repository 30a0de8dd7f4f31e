"""The one progress mechanism for work other than a run's frames (export, history, ab, bisect):
plain lines when piped, never for work that ends within a second, nothing with --quiet."""

from __future__ import annotations

import io

from katra3d.harness.run.progress import Tally


def test_piped_work_shows_lines_only_once_it_takes_a_while() -> None:
    out = io.StringIO()
    tally = Tally("history", stream=out, every_s=3600.0)
    for done in range(1, 11):
        tally.update("reading traces", done, 10, f"t{done}.katra")
    assert out.getvalue() == ""  # done within every_s: nothing to say
    slow = Tally("katra3d", stream=out, every_s=0.0)
    slow.update("exporting events", 5, 10)
    slow.update("exporting events", 10, 10)
    slow.update("exporting runs", 3, None, "run 3")
    slow.line("a line of its own")
    lines = out.getvalue().splitlines()
    assert [line.split(" (")[0] for line in lines[:2]] == [
        "katra3d: exporting events: 5 of 10",
        "katra3d: exporting events: 10 of 10",
    ]
    assert (
        "(50%, " in lines[0]
        and lines[2].startswith("katra3d: exporting runs: 3 (")
        and lines[2].endswith("run 3")
    )
    assert lines[3] == "katra3d: a line of its own"


def test_quiet_shows_nothing() -> None:
    out = io.StringIO()
    tally = Tally("katra3d ab", stream=out, quiet=True, every_s=0.0)
    tally.update("rounds", 1, 2)
    tally.line("round 1/2: BASE 1 s, NEW 1 s")
    assert out.getvalue() == ""
