"""Metric names and kinds, derived from :class:`katra_trace.schema.Clock`: the one place that
says which clock is a time and which a count."""

from __future__ import annotations

from collections.abc import Sequence

from katra_trace import schema
from katra_trace.errors import OptionError
from katra_trace.schema import Clock

CLOCK_NAMES: dict[int, str] = {int(c): c.name.lower() for c in Clock}

#: The clock shown or compared when nothing else says, best first.
CLOCK_PREFERENCE: tuple[str, ...] = ("wall", "gpu", "instructions", "cycles", "process", "cpu")
COUNT_CLOCKS: tuple[str, ...] = tuple(
    c for c in CLOCK_PREFERENCE if schema.Clock[c.upper()] in schema.COUNT_CLOCKS
)
TIME_CLOCKS: tuple[str, ...] = tuple(c for c in CLOCK_PREFERENCE if c not in COUNT_CLOCKS)
VALUE_CLOCKS: tuple[str, ...] = tuple(
    c for c in CLOCK_PREFERENCE if schema.Clock[c.upper()] in schema.VALUE_CLOCKS
)
SPAN_TIME_CLOCKS: tuple[str, ...] = tuple(c for c in TIME_CLOCKS if c not in VALUE_CLOCKS)

#: ``--metric auto``: the capture's count when it has one, else the clock it trusts.
AUTO = "auto"
ALL = "all"
METRICS: tuple[str, ...] = (AUTO, *TIME_CLOCKS, *COUNT_CLOCKS)

MEASURES: tuple[str, ...] = ("time", *COUNT_CLOCKS)

#: Per-run statistics of a time metric (docs/stats.md); counts always use the median.
RUN_STATS: tuple[str, ...] = ("median", "p10")

AUTO_ORDER: tuple[str, ...] = (
    *COUNT_CLOCKS,
    *TIME_CLOCKS,
)
#: The clock each timing mode trusts (the header's ``primary_clock``).
MODE_CLOCKS: dict[str, Clock] = {
    "sync": Clock.WALL,
    "gpu": Clock.GPU,
    **{CLOCK_NAMES[c]: Clock(c) for c in sorted(schema.COUNT_CLOCKS)},
}


def clock_name(clock: int) -> str:
    """The name of clock ``clock``; ``clockN`` if unknown."""
    return CLOCK_NAMES.get(int(clock), f"clock{int(clock)}")


def is_count(name: str) -> bool:
    return name in COUNT_CLOCKS


def is_time(name: str) -> bool:
    return name in TIME_CLOCKS


def is_value(name: str) -> bool:
    return name in VALUE_CLOCKS


def unit_of(name: str) -> str:
    """``ms`` for times, the count's name for counts."""
    return name if is_count(name) else "ms"


def primary_clock_of(
    available: Sequence[str], measure: str | None = None, recorded: str | None = None
) -> str | None:
    """The clock a scene is shown on: ``measure``, else ``recorded``, else the first preferred."""
    for name in (measure, recorded, *CLOCK_PREFERENCE):
        if name is not None and name in available:
            return name
    return available[0] if available else None


def mode_clock(mode: str) -> str:
    return MODE_CLOCKS[mode].name.lower()


def check_run_stat(stat: str, *, count: bool = False, normalize: bool = False) -> str:
    """``stat``, or OptionError if unknown, or not the median with ``count``/``normalize``."""
    if stat not in RUN_STATS:
        raise OptionError(
            f"unknown run statistic (--stat) {stat!r}; choose one of: {', '.join(RUN_STATS)}"
        )
    if stat != RUN_STATS[0] and (count or normalize):
        why = "counts are deterministic" if count else "normalized ratios use medians"
        raise OptionError(
            f"--stat {stat} applies to time metrics without --normalize; {why}: drop --stat"
        )
    return stat


__all__ = [
    "ALL",
    "AUTO",
    "AUTO_ORDER",
    "CLOCK_NAMES",
    "COUNT_CLOCKS",
    "CLOCK_PREFERENCE",
    "SPAN_TIME_CLOCKS",
    "MEASURES",
    "METRICS",
    "MODE_CLOCKS",
    "RUN_STATS",
    "TIME_CLOCKS",
    "VALUE_CLOCKS",
    "check_run_stat",
    "clock_name",
    "is_count",
    "is_time",
    "is_value",
    "mode_clock",
    "primary_clock_of",
    "unit_of",
]
