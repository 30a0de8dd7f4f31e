"""The metric names and their kinds: the one place that says which clock is a time and which a
count.

Pure (stdlib + :mod:`katra_trace.schema`). Everything is derived from
:class:`katra_trace.schema.Clock`, so a new clock is classified here once:

* **time clocks** (``wall``, ``cpu``, ``gpu``, ``process``): ``dur_ns`` is nanoseconds;
* **count clocks** (``instructions``, ``cycles``): ``dur_ns`` is a count, deterministic on a
  software renderer (``--measure instructions|cycles``);
* **value clocks** (the counts and ``process``): a value per frame, not a span on the host
  timeline (process CPU time of parallel threads adds up to more than the wall time they took).

The CLI's ``--metric`` choices (:data:`METRICS`; ``history`` also takes :data:`ALL`) and the
per-run statistics of a time metric (:data:`RUN_STATS`) live here too.
"""

from __future__ import annotations

from collections.abc import Sequence

from katra_trace import schema
from katra_trace.errors import OptionError
from katra_trace.schema import Clock

#: Name of every clock (``Clock.WALL`` -> ``"wall"``), by clock number.
CLOCK_NAMES: dict[int, str] = {int(c): c.name.lower() for c in Clock}

#: The clock preference order, the one definition: which clock is shown or compared when nothing
#: else says. The clock the user waits for (``wall``) first, then the GPU's own, the counts, and the
#: CPU-side clocks. Every other order of clocks is taken from this one.
CLOCK_PREFERENCE: tuple[str, ...] = ("wall", "gpu", "instructions", "cycles", "process", "cpu")
#: Clocks whose values are counts (instructions, estimated cycles), not times: deterministic
#: metrics.
COUNT_CLOCKS: tuple[str, ...] = tuple(
    c for c in CLOCK_PREFERENCE if schema.Clock[c.upper()] in schema.COUNT_CLOCKS
)
#: Clocks whose values are nanoseconds, in preference order.
TIME_CLOCKS: tuple[str, ...] = tuple(c for c in CLOCK_PREFERENCE if c not in COUNT_CLOCKS)
#: Clocks whose values are a value per frame, not a span on the host timeline (counts and
#: ``process``).
VALUE_CLOCKS: tuple[str, ...] = tuple(
    c for c in CLOCK_PREFERENCE if schema.Clock[c.upper()] in schema.VALUE_CLOCKS
)
#: Time clocks that time a span on the host timeline (a frame's wall, CPU or GPU time).
SPAN_TIME_CLOCKS: tuple[str, ...] = tuple(c for c in TIME_CLOCKS if c not in VALUE_CLOCKS)

#: ``--metric auto``: the capture's deterministic count when it has one, else the clock it trusts.
AUTO = "auto"
#: ``history --metric all``: every metric a series has.
ALL = "all"
#: Values of ``--metric`` (compare, ab): auto, the time clocks, then the count clocks.
METRICS: tuple[str, ...] = (AUTO, *TIME_CLOCKS, *COUNT_CLOCKS)

#: What ``--measure`` accepts: ``time`` (the clocks), or one of the count clocks (counted under
#: callgrind).
MEASURES: tuple[str, ...] = ("time", *COUNT_CLOCKS)

#: Per-run statistics of a time metric: ``median`` (default) or ``p10``, the 10th percentile of the
#: run's frames: the cost of a frame that nothing got in the way of, when interference only adds
#: (docs/stats.md); blind to a change that slows only some frames. Count metrics always use the
#: median.
RUN_STATS: tuple[str, ...] = ("median", "p10")

#: ``--metric auto`` (compare, history): a deterministic count first, then :data:`CLOCK_PREFERENCE`.
AUTO_ORDER: tuple[str, ...] = (
    *COUNT_CLOCKS,
    *TIME_CLOCKS,
)
#: The clock each timing mode trusts (the header's ``primary_clock``): ``sync`` times frames on the
#: host clock with glFinish (``wall``), ``gpu`` with timestamp queries, a counted mode counts on its
#: own clock.
MODE_CLOCKS: dict[str, Clock] = {
    "sync": Clock.WALL,
    "gpu": Clock.GPU,
    **{CLOCK_NAMES[c]: Clock(c) for c in sorted(schema.COUNT_CLOCKS)},
}


def clock_name(clock: int) -> str:
    """The name of clock number ``clock`` (``1`` -> ``"wall"``); ``clockN`` for a number this build
    does not know.
    """
    return CLOCK_NAMES.get(int(clock), f"clock{int(clock)}")


def is_count(name: str) -> bool:
    """True for a count metric (``instructions``, ``cycles``), False for a time or anything else."""
    return name in COUNT_CLOCKS


def is_time(name: str) -> bool:
    """True for a time clock (``wall``, ``cpu``, ``gpu``, ``process``): values in nanoseconds."""
    return name in TIME_CLOCKS


def is_value(name: str) -> bool:
    """True for a clock whose values are not spans on the host timeline (the counts and
    ``process``).
    """
    return name in VALUE_CLOCKS


def unit_of(name: str) -> str:
    """The unit a metric's per-frame values are shown in: ``ms`` for times, the count's name for
    counts.
    """
    return name if is_count(name) else "ms"


def primary_clock_of(
    available: Sequence[str], measure: str | None = None, recorded: str | None = None
) -> str | None:
    """The clock a scene's numbers are shown on (``stats``, ``info``, the report's plots), of the
    clocks it has (``available``): the counted clock of a ``--measure`` capture (``measure``), else
    the clock the capture recorded as primary (``recorded``: what ``run`` said, ``wall`` in sync
    mode, ``gpu`` in gpu mode), else the first of :data:`CLOCK_PREFERENCE` it has; None when it has
    none."""
    for name in (measure, recorded, *CLOCK_PREFERENCE):
        if name is not None and name in available:
            return name
    return available[0] if available else None


def mode_clock(mode: str) -> str:
    """The name of the clock timing mode ``mode`` trusts (:data:`MODE_CLOCKS`): ``sync`` ->
    ``"wall"``.
    """
    return MODE_CLOCKS[mode].name.lower()


def check_run_stat(stat: str, *, count: bool = False, normalize: bool = False) -> str:
    """``stat`` when it is one of :data:`RUN_STATS` and applies, else :class:`OptionError` (a
    ConfigError).

    ``count``: the metric compared is a count (counts are deterministic: always their median);
    ``normalize``: the runs are wall / reference ratios (always their median)."""
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
