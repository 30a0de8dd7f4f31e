"""katra3d's benches: ratios against baselines measured in the same run, one table, results.json.

Run ``make bench`` (``python -m bench``; ``--help``, ``--list``, ``--quick``).
Exit codes and options: bench/__main__.py.

Layout:

* ``_core.py``: :class:`Row`, targets (:func:`at_least`, :func:`at_most`),
  the ``@bench`` registry, and the ratio method (:func:`interleave`,
  :func:`pair_ratios`, :func:`ratio_row`: median of per-round ratios, IQR,
  95 % interval of the median);
* ``_report.py``: the table on stdout and results.json;
* ``_gl.py``: a plain moderngl loop and a katra3d run, each measured as a
  mean frame period on a fresh EGL context;
* every other module (``overhead.py``, ``throughput.py``, ...) holds benches
  that guard a target and is imported by the runner: the default ones in
  ``make bench``, the valgrind ones in ``make bench-measure``, the defaults'
  evidence in ``make bench-defaults``;
* ``experiments/``: studies that measure something for a doc (the noise
  table, the image tolerances, what ``--zones draws`` costs); run by name.

Adding a bench: one function in a new or existing bench module::

    import dataclasses

    from bench import BenchContext, Row, at_most, bench, interleave, pair_ratios, ratio_row
    from bench._gl import run_frame_period_s

    @bench("zones-fillrate", about="what zones cost on fillrate", needs_gl=True)
    def zones_fillrate(ctx: BenchContext) -> list[Row]:
        from katra3d.harness.run.config import RunConfig

        off = RunConfig(
            scenes=("fillrate",), frames=ctx.scale(300, 20), size=(320, 180), backend="egl",
            timing="sync", output=str(ctx.tmp / "run.katra"),
        )
        on = dataclasses.replace(off, zones=True)
        samples = interleave(
            {"off": lambda: run_frame_period_s(off), "on": lambda: run_frame_period_s(on)},
            rounds=ctx.scale(21, 3),
        )
        return [
            ratio_row("fillrate zones", "frame time: zones on / off",
                      pair_ratios(samples, "on", "off"), target=at_most(1.05))
        ]

``interleave`` runs the variants in rotating order, round after round; a
variant returns its own measurement (a float) or None to be timed whole.
Always report a ratio against a baseline timed in the same run, or a value
that does not depend on the machine's speed (bytes, instruction counts).
A bench that takes minutes (valgrind's) is registered with
``default=False``: it runs only when named (``python -m bench measure``).
A study whose rows only feed a doc goes in ``experiments/``, where every
bench runs only when named.
``ctx.facts`` records facts in results.json; ``ctx.log`` prints progress.
"""

from __future__ import annotations

from bench._core import (
    BenchContext,
    Row,
    Target,
    at_least,
    at_most,
    bench,
    interleave,
    median_iqr,
    pair_ratios,
    ratio_row,
)

__all__ = [
    "BenchContext",
    "Row",
    "Target",
    "at_least",
    "at_most",
    "bench",
    "interleave",
    "median_iqr",
    "pair_ratios",
    "ratio_row",
]
