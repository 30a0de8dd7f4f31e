"""``python -m bench image-tolerance``: the FLIP values behind the image verdict's defaults
(docs/images.md).

A study (a few minutes: six captures of the ``ci`` suite), to rerun when llvmpipe or FLIP changes.
Every built-in scene is rendered on llvmpipe at each of :data:`SIZES`, once with
``LP_NATIVE_VECTOR_WIDTH=128`` and once with ``256`` (a stand-in for another device: another code
generator), and the last frames are compared by :func:`katra_trace.analysis.images.image_verdict`
with the default thresholds in three groups:

* **vector width**: the 256 frame against the 128 frame; must be identical or within tolerance. The
  rows give the largest FLIP mean and outlier share;
* **1-px shift**: the 128 frame against itself moved one pixel to the right; must be changed. The
  rows give the smallest values;
* **colour +0.02**: the 128 frame against itself with every colour channel raised by 5 of 255 levels
  (0.02, clipped at white); must be changed. The smallest values.

The ``verdicts`` rows count the scenes of each group whose verdict is on the wrong side (target 0).
"""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import numpy as np

from bench._core import BenchContext, Row, at_most, bench

SIZES = ("64x64", "320x180", "640x360")
WIDTHS = (128, 256)
#: 0.02 of full scale, in 8-bit levels
COLOUR_STEP = 5


def _render(ctx: BenchContext, name: str, size: str, **env: str) -> Path:
    """Capture the ci suite at ``size`` with the environment variables ``env``; the screenshot
    directory.
    """
    shots = ctx.tmp / f"{name}-{size}"
    shots.mkdir()
    cmd = [
        sys.executable,
        "-m",
        "katra3d",
        "run",
        "--suite",
        "ci",
        "--frames",
        "2",
        "--warmup",
        "1",
        "--size",
        size,
        "--quiet",
        "--screenshot",
        str(shots),
        "-o",
        str(ctx.tmp / f"{name}-{size}.katra"),
    ]
    subprocess.run(cmd, env=dict(os.environ, **env), check=True, stdout=subprocess.DEVNULL)
    return shots


def _load(path: Path) -> np.ndarray:
    # deferred: Pillow is the optional images extra; only this bench reads PNGs
    from PIL import Image

    with Image.open(path) as img:
        return np.asarray(img.convert("RGBA"))


def _shifted(pixels: np.ndarray) -> np.ndarray:
    """The frame moved one pixel to the right (the left column wraps round)."""
    return np.ascontiguousarray(np.roll(pixels, 1, axis=1))


def _recoloured(pixels: np.ndarray) -> np.ndarray:
    """Every colour channel raised by :data:`COLOUR_STEP` levels, clipped at 255; alpha kept."""
    out = pixels.astype(np.int16)
    out[:, :, :3] += COLOUR_STEP
    return np.clip(out, 0, 255).astype(np.uint8)


def _softpipe(ctx: BenchContext, llvmpipe: Path) -> list[Row]:
    """Information: softpipe (another Mesa driver, with its own texture and shadow filtering)
    against llvmpipe at the first size: how many scenes each verdict gets. Not a target: another
    driver may well draw differently."""
    # deferred: FLIP is the optional images extra
    from katra_trace.analysis.images import image_verdict

    ctx.log(f"rendering the ci suite at {SIZES[0]} on softpipe")
    soft = _render(ctx, "softpipe", SIZES[0], GALLIUM_DRIVER="softpipe")
    counts = {"identical": 0, "within_tolerance": 0, "changed": 0}
    for png in sorted(soft.glob("*.png")):
        v = image_verdict(_load(llvmpipe / png.name), _load(png))
        counts[v.verdict] = counts.get(v.verdict, 0) + 1
        ctx.log(f"softpipe {png.stem}: {v.line}")
    return [
        Row(
            f"softpipe {SIZES[0]}",
            f"scenes judged {verdict.replace('_', ' ')} against llvmpipe",
            float(n),
            unit="scenes",
        )
        for verdict, n in counts.items()
    ]


@bench(
    "image-tolerance",
    about="FLIP values of another vector width, a 1-px shift and a colour step",
    needs_gl=True,
)
def image_tolerance(ctx: BenchContext) -> list[Row]:
    """FLIP values of another vector width, a 1-px shift and a colour step (docs/images.md)."""
    # deferred: FLIP is the optional images extra
    from katra_trace.analysis.images import ImageOutcome, image_verdict

    sizes = SIZES[:1] if ctx.quick else SIZES
    rows: list[Row] = []
    table: list[dict[str, object]] = []
    wrong = {"vector width": 0, "1-px shift": 0, "colour +0.02": 0}
    for size in sizes:
        ctx.log(f"rendering the ci suite at {size}, vector widths {WIDTHS}")
        dirs = {w: _render(ctx, f"vw{w}", size, LP_NATIVE_VECTOR_WIDTH=str(w)) for w in WIDTHS}
        groups: dict[str, list[tuple[float, float]]] = {name: [] for name in wrong}
        for png in sorted(dirs[128].glob("*.png")):
            base = _load(png)
            other = dirs[256] / png.name
            cases = {
                "vector width": _load(other) if other.exists() else None,
                "1-px shift": _shifted(base),
                "colour +0.02": _recoloured(base),
            }
            for name, new in cases.items():
                v = image_verdict(base, new)
                bad = (
                    v.verdict is ImageOutcome.CHANGED
                    if name == "vector width"
                    else v.verdict is not ImageOutcome.CHANGED
                )
                wrong[name] += int(bad)
                mean = 0.0 if v.verdict is ImageOutcome.IDENTICAL else v.flip_mean
                pct = 0.0 if v.verdict is ImageOutcome.IDENTICAL else v.outlier_pct
                groups[name].append((mean, pct))
                table.append(
                    {
                        "size": size,
                        "scene": png.stem,
                        "case": name,
                        "verdict": v.verdict,
                        "flip_mean": mean,
                        "outlier_pct": pct,
                    }
                )
        for name, values in groups.items():
            if not values:
                continue
            pick = max if name == "vector width" else min
            label = "largest" if name == "vector width" else "smallest"
            rows.append(
                Row(
                    f"{name} {size}",
                    f"{label} FLIP mean of {len(values)} scenes",
                    pick(m for m, _ in values),
                    unit="FLIP",
                    n=len(values),
                )
            )
            rows.append(
                Row(
                    f"{name} {size}",
                    f"{label} % of pixels over the outlier level",
                    pick(p for _, p in values),
                    unit="%",
                    n=len(values),
                )
            )
    if not ctx.quick:
        rows.extend(_softpipe(ctx, ctx.tmp / f"vw128-{SIZES[0]}"))
    for name, count in wrong.items():
        side = "changed" if name == "vector width" else "not changed"
        rows.append(
            Row(
                f"{name} verdicts",
                f"scenes x sizes judged {side}",
                float(count),
                unit="scenes",
                target=at_most(0),
            )
        )
    ctx.facts["images"] = table
    return rows
