"""``python -m bench counted-cost``: what a counted run of one small scene costs beside the same
time run.

Not a default bench: each round runs valgrind for tens of seconds (``make bench-measure`` runs it).
Issue 23's target for a short counted run: its wall time at most 4x the wall time of the same time
run plus 10 s (:data:`TIME_FACTOR`, :data:`FIXED_S`), so that what is left is start-up that cannot
be cut. Every round runs the counted command (``--measure instructions``) and the same command as a
time run back to back, the order rotating (:func:`bench._core.interleave`), and the row is the
median over rounds of ``counted wall / (4 x time wall + 10 s)``: one figure from two timings taken
moments apart, so load drift on a shared machine cancels in each pair. Beside it: counted / time
wall, the target's ratio with the counted run's CPU seconds in place of its wall (what it would take
on an idle core), and those CPU seconds (parent and child). docs/measure.md ("What start-up costs")
records the measured figures.

``python -m bench counted-jobs`` (issue 36): the counted ``ci`` suite (``--frames 20``) with
``--jobs 2``, the same with ``--jobs 1`` and the same time run, interleaved round by round: ``--jobs
2`` / time run (target <= 40x) and ``--jobs 2`` / ``--jobs 1`` (target <= 0.6), medians of the
rounds with their intervals. docs/measure.md ("Several scenes at once") records the figures.
"""

from __future__ import annotations

import os
from collections.abc import Callable

from bench._core import BenchContext, Row, at_most, bench, interleave, pair_ratios, ratio_row
from bench._proc import Job, run_jobs

#: The counted command of the target: one small scene, 2 measured frames, 1 warm-up frame, 16x16.
ARGS: tuple[str, ...] = ("clear", "--frames", "2", "--warmup", "1", "--size", "16x16")
#: Target: counted wall <= TIME_FACTOR x time wall + FIXED_S (issue 23).
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


# --------------------------------------------------------------------------- --jobs: a counted
# suite on every core

#: The counted suite of issue 36's rows: the ``ci`` suite, 20 measured frames a scene (its own 5
#: warm-up frames).
SUITE_ARGS: tuple[str, ...] = ("--suite", "ci", "--frames", "20")
#: Targets (issue 36): the counted suite with ``--jobs 2`` on 2 cores at most 40x the time run's
#: wall (61-66x serially), and at most 0.6 of the same counted run with ``--jobs 1``.
JOBS_TIME_TARGET = 40.0
JOBS_SERIAL_TARGET = 0.6
JOBS_ROUNDS = 2


@bench(
    "counted-jobs",
    about="the counted ci suite (--frames 20) with --jobs 2 vs the time run and vs --jobs 1",
    default=False,
    needs_gl=True,
)
def counted_jobs(ctx: BenchContext) -> list[Row]:
    """Wall time of the counted ``ci`` suite with ``--jobs 2`` against its time run and against
    ``--jobs 1``, the three commands interleaved round by round (:func:`bench._core.interleave`),
    each alone on the machine. ``--quick``: three scenes of the suite, 2 frames."""
    from katra3d.harness.run.jobs import usable_cores

    # deferred: the harness loads only when the bench runs
    from katra3d.harness.run.valgrind import find_valgrind

    _, valgrind = find_valgrind()
    args = (
        ("clear", "triangle", "shader", "--size", "64x64", "--frames", "2")
        if ctx.quick
        else SUITE_ARGS
    )
    cpu: dict[str, list[float]] = {}

    def variant(key: str, extra: tuple[str, ...]) -> Callable[[], float]:
        def call() -> float:
            done = run_jobs(
                [Job(key, (*args, *extra), ctx.tmp / f"{key}.katra")], parallel=1, log=ctx.log
            )[key]
            cpu.setdefault(key, []).append(done.cpu_s)
            return done.wall_s

        return call

    load = os.getloadavg()
    rounds = ctx.scale(JOBS_ROUNDS, 1)
    samples = interleave(
        {
            "jobs2": variant("jobs2", ("--measure", "instructions", "--jobs", "2")),
            "jobs1": variant("jobs1", ("--measure", "instructions", "--jobs", "1")),
            "time": variant("time", ()),
        },
        rounds,
        warmup=0,
        progress=ctx.log,
    )
    load_end = os.getloadavg()
    ctx.facts.update(
        {
            "valgrind": valgrind,
            "wall_s": samples,
            "cpu_s": cpu,
            "loadavg_start": list(load),
            "loadavg_end": list(load_end),
            "usable_cores": usable_cores(),
        }
    )
    where = (
        f"katra3d run {' '.join(args)}; {rounds} interleaved round(s), load "
        f"{load[0]:.1f}->{load_end[0]:.1f} "
        f"on {usable_cores()} usable cores"
    )
    walls = {k: f"{min(v):.0f}..{max(v):.0f} s" for k, v in samples.items()}
    return [
        ratio_row(
            "counted suite --jobs 2 / time run",
            "wall: --measure instructions --jobs 2 / --measure time",
            pair_ratios(samples, "jobs2", "time"),
            target=at_most(JOBS_TIME_TARGET),
            notes=f"--jobs 2 {walls['jobs2']}, time {walls['time']}; {where}",
        ),
        ratio_row(
            "counted suite --jobs 2 / --jobs 1",
            "wall: --measure instructions --jobs 2 / --jobs 1",
            pair_ratios(samples, "jobs2", "jobs1"),
            target=at_most(JOBS_SERIAL_TARGET),
            notes=f"--jobs 1 {walls['jobs1']}; every scene in its own child either way",
        ),
        ratio_row(
            "counted suite --jobs 1 / time run",
            "wall: --measure instructions --jobs 1 / --measure time",
            pair_ratios(samples, "jobs1", "time"),
            notes="one child at a time (issue 36: 61-66x before)",
        ),
    ]
