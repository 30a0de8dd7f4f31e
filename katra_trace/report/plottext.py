"""Text in plotly figures: plotly.js renders some HTML in titles, names and hover text, so every
name goes through :func:`plot_text`."""

from __future__ import annotations

import html


def plot_text(value: object) -> str:
    """``value`` as plotly shows it literally (``&``, ``<``, ``>`` as entities)."""
    return html.escape(str(value), quote=False)


__all__ = ["plot_text"]
