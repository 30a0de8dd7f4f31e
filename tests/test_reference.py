"""The reference draw: timed inside the run on real llvmpipe, recorded, excluded from statistics,
and what ``compare --normalize`` divides by."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest

from katra_trace import open_trace
from katra_trace.analysis.stats import trace_stats
from katra_trace.schema import REFERENCE_NAME, Clock, Flag, Kind
from tests.cli_helpers import katra

pytestmark = pytest.mark.gl


def _capture(out: Path, *extra: str) -> None:
    """A short fillrate capture to ``out`` with ``extra`` options."""
    res = katra(
        "run",
        "fillrate",
        "--frames",
        "12",
        "--warmup",
        "2",
        "--size",
        "32x32",
        "--quiet",
        "-o",
        str(out),
        *extra,
    )
    assert res.returncode == 0, res.stderr


def test_reference_draws_are_recorded_after_every_kth_measured_frame(tmp_path: Path) -> None:
    out = tmp_path / "r.katra"
    _capture(out, "--reference-every", "3")
    trace = open_trace(out)
    ev = trace.events
    ref = ev[(ev["flags"] & int(Flag.REFERENCE)) != 0]
    assert set(ref["kind"]) == {int(Kind.MARKER)}
    assert {trace.name(int(n)) for n in ref["name"]} == {REFERENCE_NAME}
    wall = ref[ref["clock"] == int(Clock.WALL)]
    # after measured frames 3, 6, 9, 12 (indices after 2 warmup)
    assert list(wall["frame"]) == [4, 7, 10, 13]
    assert np.all(wall["dur_ns"] > 0)
    assert trace.summary.user["reference_draws"] == 4
    stats = trace_stats(trace).scenes["fillrate"].metrics["wall"]
    assert stats.n == 12  # statistics count frames only


def test_reference_off_and_compare_normalize_uses_it(tmp_path: Path) -> None:
    off = tmp_path / "off.katra"
    _capture(off, "--reference-every", "0")
    ev = open_trace(off).events
    assert not np.any((ev["flags"] & int(Flag.REFERENCE)) != 0)
    a, b = tmp_path / "a.katra", tmp_path / "b.katra"
    _capture(a, "--reference-every", "2")
    _capture(b, "--reference-every", "2")
    res = katra("compare", str(a), str(b), "--normalize", "--format", "json")
    assert res.returncode in (0, 1), res.stderr
    report = json.loads(res.stdout)
    assert "normalize" in json.dumps(report).lower()
    refused = katra("compare", str(a), str(off), "--normalize")
    assert refused.returncode == 2 and "reference" in refused.stderr
