"""``python -m bench profile-cost``: what keeping instruction profiles adds to a counted run.

Not a default bench: each round runs valgrind twice (``make bench-measure`` runs it). Every round
runs the same counted command with profiles (the default) and without (``KATRA3D_PROFILE=off``:
the child deletes its dumps, the parent reads none) back to back, the order rotating. The target row
is the median over rounds of with / without CPU seconds (parent and child: what the profile costs,
which a loaded machine stretches less than wall time); wall time beside it. Target: at most 1.10
(docs/profile.md).
"""

from __future__ import annotations

import os

from bench._core import BenchContext, Row, at_most, bench, interleave, pair_ratios, ratio_row
from bench._proc import Job, run_jobs

#: One scene with a zone a frame, so that the profile has zones to read too.
ARGS: tuple[str, ...] = ("shader", "--zones", "--frames", "10", "--warmup", "1", "--size", "32x32")
ROUNDS = 3
TARGET = 1.10


@bench(
    "profile-cost",
    about="a counted shader run with profiles vs without: wall ratio (target <= 1.10)",
    default=False,
    needs_gl=True,
)
def profile_cost(ctx: BenchContext) -> list[Row]:
    """A counted ``shader`` (10 frames, 32x32, zones) with and without profiles, interleaved."""
    # deferred: the harness loads only when the bench runs
    from katra3d.harness.run.valgrind import find_valgrind
    from katra_trace.profile.callgrind import PROFILE_ENV

    find_valgrind()  # exit 3 with the install line when missing

    cpu: dict[str, list[float]] = {"with": [], "without": []}

    def variant(key: str, profile: str) -> float:
        job = Job(key, (*ARGS, "--measure", "instructions"), ctx.tmp / f"{key}.katra")
        old = os.environ.get(PROFILE_ENV)
        os.environ[PROFILE_ENV] = profile
        try:
            done = run_jobs([job], parallel=1)[key]
            cpu[key].append(done.cpu_s)
            return done.wall_s
        finally:
            if old is None:
                os.environ.pop(PROFILE_ENV, None)
            else:
                os.environ[PROFILE_ENV] = old

    load = os.getloadavg()
    samples = interleave(
        {"with": lambda: variant("with", "on"), "without": lambda: variant("without", "off")},
        ctx.scale(ROUNDS, 1),
        warmup=0,
        progress=ctx.log,
    )
    where = (
        f"katra3d run {' '.join(ARGS)} --measure instructions; {len(samples['with'])} rounds, "
        f"load {load[0]:.1f}->{os.getloadavg()[0]:.1f} on {os.cpu_count()} cores"
    )
    return [
        ratio_row(
            "counted run with profiles / without",
            "CPU s (parent and child), same counted command, KATRA3D_PROFILE on vs off",
            pair_ratios(cpu, "with", "without"),
            target=at_most(TARGET),
            notes=f"with {min(cpu['with']):.1f}..{max(cpu['with']):.1f} s, without "
            f"{min(cpu['without']):.1f}..{max(cpu['without']):.1f} s CPU; {where}",
        ),
        ratio_row(
            "counted run with profiles / without, wall",
            "wall, same counted command, KATRA3D_PROFILE on vs off",
            pair_ratios(samples, "with", "without"),
            notes=f"with {min(samples['with']):.1f}..{max(samples['with']):.1f} s, without "
            f"{min(samples['without']):.1f}..{max(samples['without']):.1f} s wall",
        ),
    ]
