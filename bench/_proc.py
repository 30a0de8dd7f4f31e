"""Benches' ``katra3d run`` jobs, run by the supervisor's pool, with their wall and CPU time.

Counted runs (``--measure instructions``) are deterministic, so benches run several at once; what
a counted run would take alone on an idle core is its CPU time (valgrind runs the counted child on
one thread), which :func:`run_jobs` reports beside the wall time for every job.
"""

from __future__ import annotations

import dataclasses
import functools
import os
import subprocess
import sys
import time
from collections.abc import Callable, Sequence
from pathlib import Path

from katra3d.harness.supervisor import Supervisor

#: ``python -m katra3d run``: the venv's katra3d, whatever PATH says.
KATRA_RUN: tuple[str, ...] = (sys.executable, "-m", "katra3d", "run")


@dataclasses.dataclass(frozen=True)
class Job:
    """One ``katra3d run ARGS -o OUTPUT`` to run; ``key`` names it in the results."""

    key: str
    args: tuple[str, ...]
    output: Path


@dataclasses.dataclass(frozen=True)
class Done:
    """A finished job: its trace, wall seconds and CPU seconds (user + sys, its children
    included)."""

    job: Job
    wall_s: float
    cpu_s: float


def run_jobs(
    jobs: Sequence[Job],
    *,
    parallel: int,
    log: Callable[[str], None] | None = None,
    timeout_s: float = 3600.0,
) -> dict[str, Done]:
    """Run ``jobs``, at most ``parallel`` at a time; RuntimeError (with the job's stderr tail) when
    one fails or runs past ``timeout_s``; the others are then stopped."""
    deadline = time.monotonic() + timeout_s

    def run(sup: Supervisor, job: Job) -> Done:
        job.output.unlink(missing_ok=True)
        err = job.output.with_suffix(".stderr")
        with open(err, "wb") as fh:
            group = sup.start(
                [*KATRA_RUN, *job.args, "-o", str(job.output), "--quiet"],
                stdout=subprocess.DEVNULL,
                stderr=fh,
            )
        t0 = time.perf_counter()
        while True:  # wait4: the job's own CPU time
            pid, status, usage = os.wait4(group.proc.pid, os.WNOHANG)
            if pid:
                break
            if time.monotonic() > deadline:
                raise RuntimeError(f"bench job {job.key} still running after {timeout_s:.0f} s")
            time.sleep(0.05)
        group.proc.returncode = code = os.waitstatus_to_exitcode(status)
        wall_s = time.perf_counter() - t0
        if code != 0:
            tail = err.read_text(encoding="utf-8", errors="replace").strip().splitlines()[-3:]
            raise RuntimeError(f"job {job.key} exited {code}: {' / '.join(tail)}")
        err.unlink(missing_ok=True)
        return Done(job, wall_s, usage.ru_utime + usage.ru_stime)

    done: dict[str, Done] = {}
    with Supervisor(handle=False) as sup:
        tasks = [functools.partial(run, sup, job) for job in jobs]
        for _, finished in sup.pool(tasks, parallel):
            done[finished.job.key] = finished
            if log is not None:
                log(
                    f"{finished.job.key}: {finished.wall_s:.0f} s wall, {finished.cpu_s:.0f} s "
                    f"CPU ({len(done)}/{len(jobs)})"
                )
    return done


__all__ = ["KATRA_RUN", "Done", "Job", "run_jobs"]
