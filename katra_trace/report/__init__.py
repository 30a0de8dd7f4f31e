"""An HTML report of one or more runs, optionally against a baseline: ``katra3d report``.

:func:`build_report` returns the page (katra_trace.report.page), :func:`write_report` writes it
without replacing an existing file unless asked. The comparison with a baseline is
:func:`katra_trace.analysis.compare.compare_traces`' verdict, shown as a table. Needs the optional
``plotly`` package (its plotly.js is inlined): ``pip install 'katra3d[export]'``.
"""

from __future__ import annotations

import os
from collections.abc import Sequence
from typing import Any

from katra_trace import __version__
from katra_trace.errors import KatraError
from katra_trace.analysis.images import ImageThresholds
from katra_trace.io.claim import open_output
from katra_trace.report.images import image_comparison, images_section
from katra_trace.report.page import plotly_js_packed, render
from katra_trace.text import check_text


def build_report(runs: Sequence[Any], baseline: Sequence[Any] = (), *, title: str = "katra3d report",
                 compare_options: dict[str, Any] | None = None, history: dict[str, Any] | None = None,
                 compare_notes: Sequence[str] = (), image_policy: str = "gate",
                 image_thresholds: ImageThresholds | None = None) -> str:
    """The report page for opened traces ``runs`` (one run each) and, if given, ``baseline``.

    With a baseline the page holds ``compare_traces(baseline, runs)``'s verdicts; when the
    traces cannot be compared (ConfigError: counts against times, ...) it says why instead.
    ``compare_options`` are ``compare_traces``' keyword arguments (the CLI's ``compare_kwargs``, and
    ``pairs`` for the rounds of ``katra3d ab``); ``compare_notes`` go before the comparison's notes.
    ``history`` (:func:`katra_trace.history.trends.trend_data`'s result) adds a section of trend plots.
    With a baseline and ``image_policy`` other than off, the page shows each scene's image verdict
    (``image_thresholds``, default :class:`ImageThresholds`) and the pictures of every difference.
    Raises MissingDependencyError (exit 3) without plotly.
    """
    plotly_js_packed()  # fail before any work when plotly is missing
    check_text(title, "--title")
    comparison: dict[str, Any] | None = None
    error: str | None = None
    if baseline:
        # deferred: the comparison loads scipy; only a report with a baseline needs it
        from katra_trace.analysis.compare import compare_traces

        try:
            comparison = compare_traces(list(baseline), list(runs), **(compare_options or {})).as_dict()
            comparison["notes"] = [*compare_notes, *comparison.get("notes", [])]
        except KatraError as exc:
            error = str(exc)
    images_html = ""
    if baseline and image_policy != "off":
        images_html = images_section(*image_comparison(baseline, runs, image_thresholds, comparison),
                                     policy=image_policy)
    return render(runs, baseline, comparison=comparison, comparison_error=error, title=title,
                  tool_version=f"katra3d {__version__}", history=history, images_html=images_html)


def write_report(path: str | os.PathLike[str], page: str, *, overwrite: bool = False,
                 inputs: Sequence[str | os.PathLike[str]] = ()) -> int:
    """Write ``page`` to ``path`` (refusing to replace a file unless ``overwrite``, and never one of the
    ``inputs``: traces, directories of traces, a history store); returns its size in bytes."""
    data = page.encode("utf-8")
    with open_output(path, force=overwrite, inputs=inputs, example="report.html") as f:
        f.write(data)
    return len(data)


__all__ = ["build_report", "write_report"]
