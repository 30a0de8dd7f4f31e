"""Differential flame graph SVG of a profile difference: group, object, function (no call stacks);
red where NEW runs more instructions, blue fewer."""

from __future__ import annotations

import os
from collections.abc import Sequence
from html import escape
from pathlib import Path

from katra_trace.analysis.images import file_stem
from katra_trace.io.claim import check_output_dir, missing_directory, open_output
from katra_trace.profile.diff import ProfileDelta, short_object

WIDTH = 1200
ROW = 22


def _colour(delta: float, scale: float) -> str:
    t = min(1.0, abs(delta) / scale) if scale else 0.0
    fade = int(235 - 175 * t)
    return f"rgb(235,{fade},{fade})" if delta > 0 else f"rgb({fade},{fade},235)"


def flame_svg(d: ProfileDelta) -> str:
    tree: dict[str, dict[str, list[tuple[str, float, float]]]] = {}
    for r in d.rows:
        tree.setdefault(r.group, {}).setdefault(short_object(r.object), []).append(
            (r.function, r.base, r.new)
        )
    total = sum(max(r.base, r.new) for r in d.rows) or 1.0
    scale = max((abs(r.delta) for r in d.rows), default=0.0)
    name = d.scene if d.zone is None else f"{d.scene} / {d.zone}"
    boxes: list[str] = []

    def box(level: int, x: float, label: str, base: float, new: float) -> float:
        w = max(base, new) / total * WIDTH
        if w >= 0.5:
            tip = f"{label}: {base:,.0f} -> {new:,.0f} instructions a frame ({new - base:+,.0f})"
            text = escape(label if w > 7 * len(label) else label[: max(0, int(w / 7) - 1)])
            y = 30 + level * ROW
            boxes.append(
                f'<g><title>{escape(tip)}</title><rect x="{x:.1f}" y="{y}" width="{w:.1f}" '
                f'height="{ROW - 2}" fill="{_colour(new - base, scale)}" stroke="#fff"/>'
                f'<text x="{x + 3:.1f}" y="{y + 15}">{text}</text></g>'
            )
        return w

    x0 = 0.0
    for group, objects in tree.items():
        gb = sum(b for fs in objects.values() for _, b, _ in fs)
        gn = sum(n for fs in objects.values() for _, _, n in fs)
        gx = x0
        for obj, functions in objects.items():
            ox = gx
            for fn, b, n in functions:
                ox += box(2, ox, fn, b, n)
            gx += box(1, gx, obj, sum(b for _, b, _ in functions), sum(n for _, _, n in functions))
        x0 += box(0, x0, group, gb, gn)
    title = escape(f"{name}: {d.base:,.0f} -> {d.new:,.0f} instructions a frame ({d.delta:+,.0f})")
    height = 30 + 3 * ROW + 10
    return (
        f'<svg xmlns="http://www.w3.org/2000/svg" width="{WIDTH}" height="{height}" '
        f'font-family="monospace" font-size="12"><text x="0" y="18">{title}</text>'
        + "".join(boxes)
        + "</svg>\n"
    )


def write_flame_graphs(
    directory: str | os.PathLike[str], deltas: Sequence[ProfileDelta]
) -> list[Path]:
    """``DIR/<scene>[.<zone>].profile.svg`` each; DIR made when missing, no file replaced."""
    root = check_output_dir(directory, option="--profile-out")
    try:
        root.mkdir(exist_ok=True)
    except FileNotFoundError:
        raise missing_directory(root.parent) from None
    written = []
    for d in deltas:
        stem = file_stem(d.scene if d.zone is None else f"{d.scene}.{d.zone}")
        path = root / f"{stem}.profile.svg"
        with open_output(path, option="--profile-out", example="DIR") as f:
            f.write(flame_svg(d).encode("utf-8"))
        written.append(path)
    return written


__all__ = ["flame_svg", "write_flame_graphs"]
