"""``python -m bench counted-cost``: what a counted run of one small scene costs beside the same
time run.

Not a default bench: each round runs valgrind for tens of seconds (``make bench-measure`` runs it).
The target for a short counted run: its wall time at most 4x the wall time of the same time run
plus 10 s (:data:`TIME_FACTOR`, :data:`FIXED_S`), so that what is left is start-up that cannot be
cut. Every round runs the counted command (``--measure instructions``) and the same command as a
time run back to back, the order rotating (:func:`bench._core.interleave`), and the row is the
median over rounds of ``counted wall / (4 x time wall + 10 s)``: one figure from two timings taken
moments apart, so load drift on a shared machine cancels in each pair. Beside it: counted / time
wall, the target's ratio with the counted run's CPU seconds in place of its wall (what it would take
on an idle core), and those CPU seconds (parent and child). docs/measure.md ("What start-up costs")
records the measured figures.
"""

from __future__ import annotations

import os

from bench._core import BenchContext, Row, at_most, bench, interleave, pair_ratios, ratio_row
from bench._proc import Job, run_jobs

#: The counted command of the target: one small scene, 2 measured frames, 1 warm-up frame, 16x16.
ARGS: tuple[str, ...] = ("clear", "--frames", "2", "--warmup", "1", "--size", "16x16")
#: Target: counted wall <= TIME_FACTOR x time wall + FIXED_S.
TIME_FACTOR = 4.0
FIXED_S = 10.0
ROUNDS = 3


@bench(
    "counted-cost",
    about="a counted clear 2 frames 16x16 vs the same time run: counted / (4 x time + 10 s)",
    default=False,
    needs_gl=True,
)
def counted_cost(ctx: BenchContext) -> list[Row]:
    """A counted run of ``clear`` (2 frames, 16x16) against the same time run, interleaved."""
    # deferred: the harness loads only when the bench runs
    from katra3d.harness.run.valgrind import find_valgrind

    _, valgrind = find_valgrind()  # exit 3 with the install line when missing
    cpu: dict[str, list[float]] = {"counted": [], "time": []}

    def variant(key: str, extra: tuple[str, ...]) -> float:
        job = Job(key, (*ARGS, *extra), ctx.tmp / f"{key}.katra")
        done = run_jobs([job], parallel=1)[key]
        cpu[key].append(done.cpu_s)
        return done.wall_s

    load = os.getloadavg()
    rounds = ctx.scale(ROUNDS, 1)
    samples = interleave(
        {
            "counted": lambda: variant("counted", ("--measure", "instructions")),
            "time": lambda: variant("time", ()),
        },
        rounds,
        warmup=ctx.scale(1, 0),
        progress=ctx.log,
    )
    load_end = os.getloadavg()
    counted, plain = samples["counted"], samples["time"]
    against_target = [c / (TIME_FACTOR * t + FIXED_S) for c, t in zip(counted, plain, strict=True)]
    n_cpu = len(cpu["counted"]) - len(counted)  # the warm-up round's CPU times are not kept either
    counted_cpu = sorted(cpu["counted"][n_cpu:])
    # the counted child is one thread (valgrind runs a process's threads one at a time): its CPU
    # seconds are its wall on an idle core, which a loaded machine stretches and the time run's wall
    # hardly
    idle_core = [
        c / (TIME_FACTOR * t + FIXED_S) for c, t in zip(cpu["counted"][n_cpu:], plain, strict=True)
    ]
    ctx.facts.update(
        {
            "valgrind": valgrind,
            "counted_wall_s": counted,
            "time_wall_s": plain,
            "counted_cpu_s": counted_cpu,
            "time_cpu_s": cpu["time"][n_cpu:],
            "loadavg_start": list(load),
            "loadavg_end": list(load_end),
        }
    )
    where = (
        f"katra3d run {' '.join(ARGS)}; {rounds} interleaved rounds, load "
        f"{load[0]:.1f}->{load_end[0]:.1f} "
        f"on {os.cpu_count()} cores"
    )
    return [
        ratio_row(
            "counted run vs target",
            f"counted wall / ({TIME_FACTOR:g} x time wall + {FIXED_S:g} s)",
            against_target,
            target=at_most(1.0),
            notes=f"counted {min(counted):.1f}..{max(counted):.1f} s, time "
            f"{min(plain):.1f}..{max(plain):.1f} s "
            f"wall; {where}",
        ),
        ratio_row(
            "counted run vs target, idle core",
            f"counted CPU s / ({TIME_FACTOR:g} x time wall + {FIXED_S:g} s)",
            idle_core,
            notes="the counted run's CPU seconds stand for its wall on an idle core",
        ),
        ratio_row(
            "counted / time run",
            "wall, same command, --measure instructions vs time",
            pair_ratios(samples, "counted", "time"),
            notes=where,
        ),
        Row(
            "counted run CPU",
            "user + sys s of the counted command, parent and child",
            counted_cpu[len(counted_cpu) // 2],
            "s",
            n=len(counted_cpu),
            notes=f"{counted_cpu[0]:.1f}..{counted_cpu[-1]:.1f} s",
        ),
    ]
