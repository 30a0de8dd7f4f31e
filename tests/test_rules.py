"""Each rule once: metric kinds (katra_trace.metrics), the decision's defaults and option checks
(katra_trace.analysis.defaults), the optional-dependency loader (katra_trace.optional); every caller
shows the library's message."""

from __future__ import annotations

import math
import sys
from pathlib import Path

import numpy as np
import pytest

from katra3d.harness.run import measure
from katra_trace import metrics
from katra_trace.analysis import defaults
from katra_trace.analysis.decide import compare_runs
from katra_trace.errors import ConfigError, OptionError
from katra_trace.history.store import HistoryUnavailable, duckdb_module
from katra_trace.history.trends import check_steps
from katra_trace.io.format import CodecUnavailableError, load_blosc2
from katra_trace.optional import MissingDependencyError, require
from katra_trace.schema import Clock
from tests.cli_helpers import katra_main

REPO = Path(__file__).resolve().parent.parent


def test_metric_kinds_come_from_the_clock_enum() -> None:
    names = {c.name.lower() for c in Clock}
    assert set(metrics.TIME_CLOCKS) | set(metrics.COUNT_CLOCKS) == names
    assert not set(metrics.TIME_CLOCKS) & set(metrics.COUNT_CLOCKS)
    assert metrics.COUNT_CLOCKS == ("instructions", "cycles")
    assert set(metrics.VALUE_CLOCKS) == {"instructions", "cycles", "process"}
    assert metrics.METRICS == ("auto", "wall", "gpu", "process", "cpu", "instructions", "cycles")
    assert metrics.MEASURES == ("time", "instructions", "cycles")
    # defined once, in metrics
    assert not hasattr(measure, "MEASURES") and not hasattr(measure, "COUNT_MEASURES")
    assert [metrics.is_count(n) for n in ("instructions", "cycles", "wall", "process", "auto")] == [
        True,
        True,
        False,
        False,
        False,
    ]
    assert (
        metrics.is_value("process") and not metrics.is_value("wall") and metrics.is_time("process")
    )
    assert [metrics.unit_of(n) for n in ("wall", "gpu", "cycles")] == ["ms", "ms", "cycles"]
    assert defaults.default_threshold_pct("instructions") == defaults.DEFAULT_THRESHOLD_COUNT_PCT
    assert defaults.default_threshold_pct("wall/reference") == defaults.DEFAULT_THRESHOLD_TIME_PCT


@pytest.mark.parametrize("alpha", [0.0, 0.5, 0.9, -1.0, math.nan])
def test_alpha_has_one_check_and_one_message(alpha: float) -> None:
    with pytest.raises(
        OptionError, match=r"--alpha must be between 0 and 0\.5 \(exclusive\)"
    ) as info:
        defaults.check_alpha(alpha)
    assert isinstance(info.value, ConfigError) and isinstance(info.value, ValueError)
    assert info.value.exit_code == 2
    runs = [np.full(30, 1e6) for _ in range(3)]
    with pytest.raises(OptionError, match=r"--alpha must be between 0 and 0\.5"):
        compare_runs({"s": runs}, {"s": runs}, alpha=alpha)
    with pytest.raises(OptionError, match=r"--alpha must be between 0 and 0\.5"):
        check_steps([], alpha=alpha)


@pytest.mark.parametrize("threshold", [-1.0, 1000.0, math.nan, math.inf])
def test_threshold_has_one_check_and_one_message(threshold: float) -> None:
    with pytest.raises(OptionError, match=r"--threshold must be a percentage >= 0 and below 1000"):
        defaults.check_threshold_pct(threshold)
    with pytest.raises(OptionError, match=r"--threshold must be a percentage >= 0"):
        check_steps([], threshold_pct=threshold)
    assert defaults.check_threshold_pct(None) is None and defaults.check_threshold_pct(0) == 0.0


def test_run_stat_check() -> None:
    assert metrics.check_run_stat("p10") == "p10"
    with pytest.raises(
        OptionError, match=r"unknown run statistic \(--stat\) 'p5'; choose one of: median, p10"
    ):
        metrics.check_run_stat("p5")
    with pytest.raises(OptionError, match="counts are deterministic: drop --stat"):
        metrics.check_run_stat("p10", count=True)
    with pytest.raises(OptionError, match="normalized ratios use medians: drop --stat"):
        metrics.check_run_stat("p10", normalize=True)


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (
            ["compare", "a.katra", "b.katra", "--alpha", "0.9"],
            "--alpha must be between 0 and 0.5 (exclusive), got 0.9",
        ),
        (
            ["compare", "a.katra", "b.katra", "--threshold", "-1"],
            "--threshold must be a percentage >= 0 and below 1000",
        ),
        (
            ["compare", "a.katra", "b.katra", "--metric", "cycles", "--stat", "p10"],
            "counts are deterministic",
        ),
        (
            ["history", "check", "--db", "none.duckdb", "--alpha", "2"],
            "--alpha must be between 0 and 0.5 (exclusive)",
        ),
    ],
)
def test_the_cli_shows_the_library_message(
    args: list[str], message: str, capsys: pytest.CaptureFixture[str]
) -> None:
    code, _, err = katra_main(capsys, *args)
    assert code == 2
    assert err.startswith("katra3d: error: ") and len(err.splitlines()) == 1 and message in err, err


def test_documented_defaults_are_the_library_defaults(capsys: pytest.CaptureFixture[str]) -> None:
    bench = (REPO / "ci" / "bench.sh").read_text()
    versions = (REPO / "ci" / "compare-versions.sh").read_text()
    assert f"{defaults.DEFAULT_THRESHOLD_COUNT_PCT:g} % threshold" in bench
    assert (
        f"alpha {defaults.DEFAULT_ALPHA:g}" in bench
        and f"alpha {defaults.DEFAULT_ALPHA:g}" in versions
    )
    code, out, _ = katra_main(capsys, "compare", "--help")
    assert code == 0  # argparse's exit after the help
    text = " ".join(out.split())
    assert (
        f"default: {defaults.DEFAULT_THRESHOLD_TIME_PCT:g} for times, "
        f"{defaults.DEFAULT_THRESHOLD_COUNT_PCT:g} for instructions and cycles"
    ) in text
    assert f"default: {defaults.DEFAULT_ALPHA:g})" in text


def test_one_optional_dependency_error(monkeypatch: pytest.MonkeyPatch) -> None:
    assert (
        CodecUnavailableError is MissingDependencyError
        and HistoryUnavailable is MissingDependencyError
    )
    with pytest.raises(
        MissingDependencyError,
        match=r"^testing needs the Python package 'katra3d_absent', which "
        r"is not installed; install it with: pip install "
        r"'katra3d\[extra\]'$",
    ) as info:
        require("katra3d_absent.sub", extra="extra", purpose="testing")
    assert info.value.exit_code == 3
    monkeypatch.setitem(sys.modules, "duckdb", None)  # as if not installed
    with pytest.raises(
        MissingDependencyError,
        match=r"katra3d history needs DuckDB.*pip install 'katra3d\[history\]'",
    ):
        duckdb_module()
    monkeypatch.setitem(sys.modules, "blosc2", None)
    with pytest.raises(
        MissingDependencyError,
        match=r"^--codec blosc2 needs the blosc2 codec .*'katra3d\[blosc2\]'",
    ):
        load_blosc2("--codec blosc2")
