"""Benches' child processes: ``katra3d run`` commands with their wall time and CPU time.

Counted runs (``--measure instructions``) are deterministic, so benches run
several of them at once; what a counted run would take alone on an idle core
is its CPU time (valgrind runs the counted child on one thread), which
:func:`run_jobs` reports beside the wall time for every job.
"""

from __future__ import annotations

import dataclasses
import os
import subprocess
import sys
import time
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

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
    """A finished job: its trace, wall seconds and CPU seconds (user + sys,
    its children included)."""

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
    one fails.
    """
    pending = list(jobs)
    running: dict[int, tuple[Job, subprocess.Popen[bytes], float, Path]] = {}
    done: dict[str, Done] = {}
    deadline = time.monotonic() + timeout_s
    try:
        while pending or running:
            while pending and len(running) < parallel:
                job = pending.pop(0)
                job.output.unlink(missing_ok=True)
                err = job.output.with_suffix(".stderr")
                with open(err, "wb") as fh:
                    proc = subprocess.Popen(
                        [*KATRA_RUN, *job.args, "-o", str(job.output), "--quiet"],
                        stdout=subprocess.DEVNULL,
                        stderr=fh,
                    )
                running[proc.pid] = (job, proc, time.perf_counter(), err)
            if time.monotonic() > deadline:
                raise RuntimeError(f"bench jobs still running after {timeout_s:.0f} s")
            pid, status, usage = os.wait4(-1, 0)
            if pid not in running:
                continue
            job, proc, t0, err = running.pop(pid)
            proc.returncode = os.waitstatus_to_exitcode(status)
            wall_s = time.perf_counter() - t0
            if proc.returncode != 0:
                tail = err.read_text(encoding="utf-8", errors="replace").strip().splitlines()[-3:]
                raise RuntimeError(f"job {job.key} exited {proc.returncode}: {' / '.join(tail)}")
            err.unlink(missing_ok=True)
            done[job.key] = Done(job, wall_s, usage.ru_utime + usage.ru_stime)
            if log is not None:
                log(
                    f"{job.key}: {wall_s:.0f} s wall, {usage.ru_utime + usage.ru_stime:.0f} s CPU "
                    f"({len(done)}/{len(jobs)})"
                )
    finally:
        for _, proc, _, _ in running.values():
            if proc.poll() is None:
                stop(proc, timeout_s=30)
    return done


def stop(proc: subprocess.Popen[Any], timeout_s: float) -> None:
    """Terminate a child and wait for it; kill it if it has not ended after ``timeout_s``."""
    proc.terminate()
    try:
        proc.wait(timeout=timeout_s)
    except subprocess.TimeoutExpired:
        proc.kill()
        proc.wait()


__all__ = ["KATRA_RUN", "Done", "Job", "run_jobs"]
