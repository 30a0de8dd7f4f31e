"""``--jobs``: valgrind children counting at once, checked once for ``run`` and ``bisect``; time
runs stay serial (parallel ones disturb each other)."""

from __future__ import annotations

import os

from katra_trace.errors import ConfigError
from katra_trace.metrics import is_count

#: Memory one counted child may take (docs/measure.md).
CHILD_MEMORY_BYTES = 1 << 30

TIME_JOBS_REFUSAL = (
    "--jobs {jobs}: time measurements running in parallel disturb each other (they share the "
    "cores, caches and memory bandwidth), so a time {work} measures one {unit} at a time; --jobs "
    "is for --measure instructions|cycles"
)


def usable_cores() -> int:
    """The CPU cores this process may run on (affinity mask, else ``os.cpu_count()``)."""
    try:
        return max(1, len(os.sched_getaffinity(0)))
    except (AttributeError, OSError):
        return max(1, os.cpu_count() or 1)


def available_memory_bytes() -> int | None:
    """``MemAvailable`` of /proc/meminfo, or None."""
    try:
        with open("/proc/meminfo", encoding="ascii", errors="replace") as fh:
            for line in fh:
                if line.startswith("MemAvailable:"):
                    return int(line.split()[1]) * 1024
    except (OSError, ValueError, IndexError):
        pass
    return None


def default_counted_jobs() -> int:
    """Usable cores, at most one per :data:`CHILD_MEMORY_BYTES` available, at least one."""
    jobs = usable_cores()
    memory = available_memory_bytes()
    if memory is not None:
        jobs = min(jobs, memory // CHILD_MEMORY_BYTES)
    return max(1, jobs)


def parse_jobs(text: str | None, *, unit: str = "scene") -> int | None:
    """``--jobs`` as a whole number >= 1 (None stays None), else ConfigError."""
    if text is None:
        return None
    try:
        jobs = int(text.strip())
    except ValueError:
        raise ConfigError(
            f"bad --jobs {text!r}: expected a whole number, how many {unit}s are measured at once"
        ) from None
    return _at_least_one(jobs, unit)


def _at_least_one(jobs: int, unit: str) -> int:
    if jobs < 1:
        raise ConfigError(
            f"bad --jobs {jobs}: must be >= 1 (how many {unit}s are measured at once)"
        )
    return jobs


def resolve_jobs(jobs: int | None, measure: str, *, unit: str = "scene", work: str = "run") -> int:
    """``jobs`` as given (ConfigError below 1, or above 1 for time), else the default for the
    measure."""
    counted = is_count(measure)
    if jobs is None:
        return default_counted_jobs() if counted else 1
    _at_least_one(jobs, unit)
    if jobs > 1 and not counted:
        raise ConfigError(TIME_JOBS_REFUSAL.format(jobs=jobs, unit=unit, work=work))
    return jobs


__all__ = [
    "CHILD_MEMORY_BYTES",
    "TIME_JOBS_REFUSAL",
    "available_memory_bytes",
    "default_counted_jobs",
    "parse_jobs",
    "resolve_jobs",
    "usable_cores",
]
