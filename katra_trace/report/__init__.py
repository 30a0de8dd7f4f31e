"""``katra3d report``: an HTML report of runs, optionally against a baseline (compare's one
comparison as a table). Needs the optional ``plotly``. See docs/report.md."""

from __future__ import annotations

import os
from collections.abc import Sequence
from typing import TYPE_CHECKING

from katra_trace.analysis.defaults import DEFAULT_COMPARE, CompareOptions
from katra_trace.analysis.images import ImageThresholds
from katra_trace.errors import KatraError
from katra_trace.io.claim import open_output
from katra_trace.profile.diff import profile_deltas
from katra_trace.report.images import images_section
from katra_trace.report.page import plotly_js_packed, render
from katra_trace.report.profile import profile_section
from katra_trace.text import check_text
from katra_trace.version import __version__

if TYPE_CHECKING:
    from katra_trace.analysis.comparison import ComparisonResult
    from katra_trace.history.trends import Trends
    from katra_trace.io.reader import Trace


def build_report(
    runs: Sequence[Trace],
    baseline: Sequence[Trace] = (),
    *,
    title: str = "katra3d report",
    comparison: ComparisonResult | None = None,
    comparison_error: str | None = None,
    compare_options: CompareOptions = DEFAULT_COMPARE,
    image_policy: str = "gate",
    image_thresholds: ImageThresholds | None = None,
    history: Trends | None = None,
) -> str:
    """The report page; ``comparison`` is run here unless the caller ran it. Raises
    MissingDependencyError without plotly."""
    plotly_js_packed()  # fail before any work
    check_text(title, "--title")
    if baseline and comparison is None and comparison_error is None:
        # deferred: the comparison loads scipy
        from katra_trace.analysis.comparison import Sides, compare_sides

        sides = Sides("baseline", "runs", tuple(baseline), tuple(runs))
        try:
            comparison = compare_sides(
                sides,
                compare_options,
                image_policy=image_policy,
                image_limits=image_thresholds,
            )
        except KatraError as exc:
            comparison_error = str(exc)
    images_html = ""
    if comparison is not None and comparison.image_policy != "off":
        images_html = images_section(
            dict(comparison.images),
            dict(comparison.base_images),
            dict(comparison.new_images),
            policy=comparison.image_policy,
        )
    if baseline and runs:
        images_html += profile_section(profile_deltas(baseline, runs))
    return render(
        runs,
        baseline,
        comparison=None if comparison is None else comparison.timing,
        comparison_error=comparison_error,
        title=title,
        tool_version=f"katra3d {__version__}",
        history=history,
        images_html=images_html,
    )


def write_report(
    path: str | os.PathLike[str],
    page: str,
    *,
    overwrite: bool = False,
    inputs: Sequence[str | os.PathLike[str]] = (),
) -> int:
    """Write ``page`` (replacing only with ``overwrite``, never an input); returns its bytes."""
    data = page.encode("utf-8")
    with open_output(path, force=overwrite, inputs=inputs, example="report.html") as f:
        f.write(data)
    return len(data)


__all__ = ["build_report", "write_report"]
