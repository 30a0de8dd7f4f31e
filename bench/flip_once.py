"""``python -m bench flip-once``: what running FLIP once a pair of frames saves ``compare
--image-diff``.

Not a default bench (about two minutes). Each round judges one pair of 2048x2048 frames that differ
in one pixel (512x512 with ``--quick``) and makes its pictures, two ways, interleaved in rotating
order: as katra3d does (:func:`~katra_trace.analysis.images.image_verdict`, then
:func:`~katra_trace.analysis.images.diff_pngs` drawing the error map from the levels the verdict
kept) and as it did before (the verdict, then FLIP's own magma pass for the error map). The row is
the median of the per-round ratios of their wall times; both encode the same three PNGs.
docs/reliability.md quotes the whole command's times.
"""

from __future__ import annotations

from bench._core import BenchContext, Row, at_most, bench, interleave, pair_ratios, ratio_row


@bench(
    "flip-once",
    about="compare --image-diff's verdict and pictures: FLIP once a pair / twice",
    default=False,
)
def flip_once(ctx: BenchContext) -> list[Row]:
    # deferred: katra_trace is imported by the benches that use it, not by the runner
    import numpy as np

    from katra_trace.analysis import flip
    from katra_trace.analysis.images import diff_pngs, image_verdict
    from katra_trace.io.images import encode_png

    side = ctx.scale(2048, 512)
    base = np.zeros((side, side, 4), np.uint8)
    new = base.copy()
    new[0, 0, 0] = 255
    flip.magma_colours()  # learnt once a process: not part of a round

    def once() -> None:
        verdict = image_verdict(base, new)
        assert "flip" in diff_pngs(base, new, verdict)

    def twice() -> None:
        image_verdict(base, new)
        encode_png(base), encode_png(new)
        encode_png(flip._picture_bytes(flip._flip_tiles(base, new, magma=True)))

    samples = interleave({"once": once, "twice": twice}, rounds=ctx.scale(5, 2), progress=ctx.log)
    return [
        ratio_row(
            f"flip once {side}",
            f"verdict + pictures of a {side}x{side} pair: FLIP once / twice",
            pair_ratios(samples, "once", "twice"),
            target=at_most(0.65),
        )
    ]
