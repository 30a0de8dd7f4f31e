"""Text that goes into a plotly figure: titles, axis titles, legend names, category ticks, hover
text.

plotly.js renders a subset of HTML in every one of these (``<a href>``, ``<b>``, ``<i>``,
``<span style>``, ``<br>``), so a scene, zone, label or file name such as
``<a href=https://evil.example>CLICK</a>`` would become a live link. :func:`plot_text` is the one
escape every figure of the report uses: plotly shows the entities it writes as the characters.
"""

from __future__ import annotations

import html
from typing import Any


def plot_text(value: Any) -> str:
    """``value`` as text plotly shows literally: ``&``, ``<`` and ``>`` become entities."""
    return html.escape(str(value), quote=False)


__all__ = ["plot_text"]
