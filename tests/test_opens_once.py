"""Each trace is opened once (as strace of compare and report shows): a
directory's traces are picked out inside the one open that reads them, and an ab directory's
``ab.json`` is read once.

Opens are counted in this process, through ``os.open`` and ``open`` (what the reader and the
manifest use), while the command runs in it (tests/cli_helpers.katra_main); synthetic traces, no GL.
"""

from __future__ import annotations

import builtins
import collections
import io
import os
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

from katra_trace.io.tracesets import AB_MANIFEST, AbManifest, AbRound, write_ab_manifest
from tests.cli_helpers import katra_main
from tests.test_compare_cli import write_rounds

ROUNDS = 3


def write_ab_dir(root: Path) -> Path:
    """An ab output directory in ``root``: 3 rounds of synthetic traces in base/ and new/, ab.json
    pairing them, and a file in base/ that is no trace (passed over)."""
    write_rounds(root / "base", root / "new", ROUNDS, 10.0, (1, 100), frames=20)
    (root / "base" / "notes.txt").write_text("not a trace\n")
    names = [f"run-{i:02d}.katra" for i in range(ROUNDS)]
    write_ab_manifest(
        root,
        AbManifest(
            rounds=tuple(AbRound(i + 1, f"base/{n}", f"new/{n}") for i, n in enumerate(names))
        ),
    )
    return root


@pytest.fixture(scope="module")
def ab_dir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return write_ab_dir(tmp_path_factory.mktemp("ab"))


@pytest.fixture
def opens(monkeypatch: pytest.MonkeyPatch) -> Iterator[collections.Counter[str]]:
    """Every path opened through ``os.open``, ``open`` and ``io.open`` while the test runs,
    resolved.
    """
    seen: collections.Counter[str] = collections.Counter()

    def counting(real: Callable[..., Any]) -> Callable[..., Any]:
        def wrapper(file: Any, *args: Any, **kwargs: Any) -> Any:
            if isinstance(file, (str, bytes, os.PathLike)):
                seen[os.path.realpath(os.fsdecode(file))] += 1
            return real(file, *args, **kwargs)

        return wrapper

    monkeypatch.setattr(os, "open", counting(os.open))
    monkeypatch.setattr(builtins, "open", counting(builtins.open))
    monkeypatch.setattr(io, "open", counting(io.open))
    yield seen


def _traces(opens: collections.Counter[str]) -> dict[str, int]:
    return {path: n for path, n in opens.items() if path.endswith(".katra")}


def _all_traces(root: Path) -> set[str]:
    return {os.path.realpath(p) for p in root.glob("*/*.katra")}


@pytest.mark.parametrize("form", ["sides", "ab_dir"])
def test_compare_opens_each_trace_once(
    ab_dir: Path, opens: collections.Counter[str], form: str, capsys: pytest.CaptureFixture[str]
) -> None:
    args = [str(ab_dir)] if form == "ab_dir" else [str(ab_dir / "base"), str(ab_dir / "new")]
    code, out, err = katra_main(capsys, "compare", *args, "--format", "json")
    assert code in (0, 1), err
    assert '"paired": true' in out  # the rounds were paired from ab.json
    counted = _traces(opens)
    assert set(counted) == _all_traces(ab_dir) and set(counted.values()) == {1}, counted
    assert opens[os.path.realpath(ab_dir / AB_MANIFEST)] == 1
    # looked at once, passed over
    assert opens[os.path.realpath(ab_dir / "base" / "notes.txt")] == 1


def test_report_and_stats_open_each_trace_once(
    ab_dir: Path,
    opens: collections.Counter[str],
    tmp_path: Path,
    capsys: pytest.CaptureFixture[str],
) -> None:
    pytest.importorskip("plotly", reason="the 'export' extra (plotly) is part of the test extra")
    for i, args in enumerate(
        (["--baseline", str(ab_dir / "base"), str(ab_dir / "new")], [str(ab_dir)])
    ):
        opens.clear()
        code, _, err = katra_main(capsys, "report", *args, "-o", str(tmp_path / f"r{i}.html"))
        assert code == 0, err
        assert set(_traces(opens).values()) == {1} and set(_traces(opens)) == _all_traces(ab_dir), (
            args
        )
        assert opens[os.path.realpath(ab_dir / AB_MANIFEST)] == 1
    opens.clear()
    code, _, err = katra_main(capsys, "stats", str(ab_dir / "new"))
    assert code == 0, err
    counted = _traces(opens)
    assert len(counted) == ROUNDS and set(counted.values()) == {1}, counted
