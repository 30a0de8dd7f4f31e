"""The report's image section: each scene's image verdict (``compare``'s) and, where last frames
differ, BASE, NEW and the FLIP error map as embedded PNGs."""

from __future__ import annotations

import base64
import html
from collections.abc import Mapping

from katra_trace.analysis.images import Image, ImageVerdict, diff_pngs, flip_missing, has_pictures

IMAGES_CSS = (
    "#images .trio{display:flex;flex-wrap:wrap;gap:12px;margin:8px 0 20px}"
    "#images figure{margin:0}#images img{image-rendering:pixelated;max-width:420px;"
    "border:1px solid #ccc;display:block}#images figcaption{font-size:12px;color:#555}"
)

_CAPTIONS = {"base": "BASE", "new": "NEW", "flip": "FLIP error map (black: no visible difference)"}


def _e(text: object) -> str:
    return html.escape(str(text), quote=True)


def _data_url(png: bytes) -> str:
    return "data:image/png;base64," + base64.b64encode(png).decode("ascii")


def images_section(
    verdicts: Mapping[str, ImageVerdict],
    base: Mapping[str, Image],
    new: Mapping[str, Image],
    policy: str = "gate",
) -> str:
    """Empty when neither side kept a last frame."""
    if not verdicts:
        return ""
    rows = []
    pictures = []
    for i, (scene, v) in enumerate(verdicts.items()):
        cls = "regression" if v.is_regression else ""
        rows.append(
            f'<tr><td class="l">{_e(scene)}</td><td class="l"><span '
            f'class="{cls}">{_e(v.verdict.replace("_", " "))}</span>'
            f'</td><td class="l muted">{_e(v.reason)}</td></tr>'
        )
        b, n = base.get(scene), new.get(scene)
        if b is None or n is None or not has_pictures(v, b, n):
            continue
        figures = "".join(
            f'<figure><img alt="{_e(scene)}: {_e(_CAPTIONS[what])}" data-kind="{what}" '
            f'src="{_data_url(png)}"><figcaption>{_e(_CAPTIONS[what])}</figcaption></figure>'
            for what, png in diff_pngs(b, n, v).items()
        )
        pictures.append(
            f'<h3 id="image-{i}">{_e(scene)}: {_e(v.line)}</h3><div class="trio">{figures}</div>'
        )
    missing = flip_missing() if any(v.checksum_only for v in verdicts.values()) else None
    counts: dict[str, int] = {}
    for v in verdicts.values():
        counts[v.verdict] = counts.get(v.verdict, 0) + 1
    summary = ", ".join(f"{n} {k.replace('_', ' ')}" for k, n in counts.items())
    return (
        f'<section id="images"><style>{IMAGES_CSS}</style><h2>Images: the last frame of each '
        "scene</h2>"
        f"<p>policy <b>{_e(policy)}</b>: {_e(summary)}. Identical = the same checksum; within "
        "tolerance = "
        f"FLIP mean error and outlier share under their limits (docs/images.md).</p>"
        + (f'<p class="muted">{_e(missing)}</p>' if missing else "")
        + '<table><thead><tr><th class="l">scene</th><th class="l">image</th><th '
        'class="l">why</th></tr></thead>'
        + "<tbody>"
        + "".join(rows)
        + "</tbody></table>"
        + "".join(pictures)
        + "</section>"
    )


__all__ = ["IMAGES_CSS", "images_section"]
