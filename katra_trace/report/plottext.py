"""Text inside plotly figures: plotly.js renders a subset of HTML (``<a href>``, ``<b>``, ...) in
titles, names and hover text, so every scene, zone, label or file name goes through
:func:`plot_text`."""

from __future__ import annotations

import html
from typing import Any


def plot_text(value: Any) -> str:
    """``value`` as text plotly shows literally: ``&``, ``<`` and ``>`` become entities."""
    return html.escape(str(value), quote=False)


__all__ = ["plot_text"]
