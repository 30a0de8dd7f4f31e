"""``python -m bench image-keep``: what keeping each scene's last frame costs a ``katra3d run
--suite ci``.

Not a default bench (each round runs the ``ci`` suite twice). Every round runs the whole command
twice, interleaved, in rotating order: once as it is (the frames kept in the trace, the default) and
once with ``--no-keep-image``; the first time row is the median of the per-round ratios of the two
commands' wall times (start-up, GL, every scene, writing the trace). On a shared machine that ratio
is noisier than the cost it measures, so the same rounds also time the part keeping adds, encoding
the run's kept frames as PNGs (:func:`katra_trace.io.images.encode_png`), and the second row is its
ratio to the ``--no-keep-image`` run of the same round. The bytes rows are exact: how much larger
the kept frames make the trace (docs/kept-images.md quotes them).
"""

from __future__ import annotations

import subprocess
import sys
import time
from pathlib import Path

from bench._core import BenchContext, Row, at_most, bench, interleave, pair_ratios, ratio_row


def _run(ctx: BenchContext, name: str, *extra: str) -> float:
    """Wall seconds of one ``katra3d run --suite ci`` (its trace replaced each time)."""
    out = ctx.tmp / f"{name}.katra"
    cmd = [
        sys.executable,
        "-m",
        "katra3d",
        "run",
        "--suite",
        "ci",
        "--quiet",
        "--force",
        "-o",
        str(out),
        *extra,
    ]
    if ctx.quick:
        cmd += ["--frames", "10"]
    t0 = time.perf_counter()
    subprocess.run(cmd, check=True, stdout=subprocess.DEVNULL)
    return time.perf_counter() - t0


@bench(
    "image-keep",
    about="what keeping every scene's last frame costs a --suite ci run (time and bytes)",
    default=False,
    needs_gl=True,
)
def image_keep(ctx: BenchContext) -> list[Row]:
    # deferred: katra_trace is imported by the benches that use it, not by the runner
    from katra_trace.io.images import encode_png, read_frame_images

    kept, off = Path(ctx.tmp / "kept.katra"), Path(ctx.tmp / "off.katra")
    _run(ctx, "kept")  # the frames the encode variant encodes (and a warmup run)
    images = read_frame_images(kept)

    def encode() -> None:
        for image in images.values():
            encode_png(image.pixels)

    samples = interleave(
        {
            "kept": lambda: _run(ctx, "kept"),
            "off": lambda: _run(ctx, "off", "--no-keep-image"),
            "encode": encode,
        },
        rounds=ctx.scale(7, 3),
        warmup=0,
    )
    extra = kept.stat().st_size - off.stat().st_size
    return [
        ratio_row(
            "ci kept frames",
            "wall time of run --suite ci: kept / --no-keep-image",
            pair_ratios(samples, "kept", "off"),
            target=at_most(1.10),
        ),
        ratio_row(
            "ci keep encode",
            f"encoding the {len(images)} kept frames / wall time of the --no-keep-image run",
            pair_ratios(samples, "encode", "off"),
            target=at_most(0.05),
        ),
        Row(
            "ci kept bytes",
            f"trace bytes added by {len(images)} kept frames (320x180 RGBA)",
            float(extra),
            "bytes",
        ),
        Row(
            "ci kept share",
            "trace size: kept / --no-keep-image",
            kept.stat().st_size / off.stat().st_size,
            "ratio",
        ),
    ]
