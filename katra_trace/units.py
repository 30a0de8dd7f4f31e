"""Numbers as a reader sees them: the one way a duration, a count or a plain float is written as
text.

Every text surface that prints a time (``stats``, ``info``, ``compare``, the end-of-run
table, ``history``, ``doctor``) calls :func:`format_duration`, so that 150 µs reads as
``150.0 µs`` everywhere and never as ``0.0001500 ms``. JSON and CSV keep their raw numbers
(``*_ms`` keys, in milliseconds): scripts read those. What a statistic is called in a table
header is here too (:func:`stat_label`), for the same surfaces. Pure (stdlib only).
"""

from __future__ import annotations

import math

#: Duration units, largest first: (symbol, nanoseconds in one). A duration is written in the
#: largest unit in which it is at least 1; below 1 ns, in ns.
DURATION_UNITS: tuple[tuple[str, float], ...] = (("s", 1e9), ("ms", 1e6), ("µs", 1e3), ("ns", 1.0))
#: Significant digits of a duration or float in a table cell (16.67 ms, 150.0 µs, 2.500 s).
DIGITS = 4
#: How a missing or non-finite value is written.
MISSING = "-"


def significant(value: float, digits: int = DIGITS) -> str:
    """``value`` to ``digits`` significant digits in plain notation, never an exponent: 17390,
    12.35, 0.008483.

    A value that already has more integer digits than ``digits`` keeps them all (no rounding to
    17400)."""
    if value == 0:
        return "0"
    if not math.isfinite(value):
        return str(value)
    decimals = max(0, digits - 1 - math.floor(math.log10(abs(value))))
    text = f"{value:.{decimals}f}"
    # rounding can add a digit (9.9996 -> "10.000"): keep the digit count
    if decimals and len(text.lstrip("-").replace(".", "").lstrip("0")) > digits:
        text = f"{value:.{decimals - 1}f}"
    return text


def _finite(value: object) -> float | None:
    """``value`` as a finite float, or None (None, NaN, infinity, an int too large for a float, not
    a number).
    """
    try:
        number = float(value)  # type: ignore[arg-type]
    except (OverflowError, TypeError, ValueError):
        return None
    return number if math.isfinite(number) else None


def format_duration(ns: float | None, digits: int = DIGITS) -> str:
    """A duration given in **nanoseconds** as text in the unit that suits it: ``850.0 ns``,
    ``150.0 µs``, ``16.67 ms``, ``2.500 s`` (``digits`` significant digits; seconds are the
    largest unit). None or a non-finite value is ``-``; 0 is ``0 s``."""
    ns = _finite(ns)
    if ns is None:
        return MISSING
    if ns == 0:
        return "0 s"
    # the largest unit the duration reaches (ns below 1 ns too)
    i = next(
        (i for i, (_, scale) in enumerate(DURATION_UNITS) if abs(ns) >= scale),
        len(DURATION_UNITS) - 1,
    )
    text = significant(ns / DURATION_UNITS[i][1], digits)
    if i > 0 and abs(float(text)) >= 1000:
        # 999.96 µs rounds to "1000": write it in the next unit up (1.000 ms)
        i -= 1
        text = significant(ns / DURATION_UNITS[i][1], digits)
    return f"{text} {DURATION_UNITS[i][0]}"


def format_ms(ms: float | None, digits: int = DIGITS) -> str:
    """:func:`format_duration` of a value given in **milliseconds** (the ``*_ms`` statistics)."""
    value = _finite(ms)
    return format_duration(None if value is None else value * 1e6, digits)


def format_change_pct(pct: float | None, decimals: int = 1) -> str:
    """A signed change given in **percent** as text: ``+5.2%``, ``-3.0%`` (``decimals`` after the
    point: 1 for times, 2 for counts and bisect's effects). None or NaN is ``-``; infinity is
    ``+inf%`` (an interval with no upper end yet)."""
    try:
        value = float(pct)  # type: ignore[arg-type]
    except (OverflowError, TypeError, ValueError):
        return MISSING
    # an unbounded interval's end: +inf%
    return MISSING if math.isnan(value) else f"{value:+.{decimals}f}%"


def format_change(ratio: float | None, decimals: int = 1) -> str:
    """A ratio NEW/BASE as its signed percent change: 1.052 is ``+5.2%``, 0.97 is ``-3.0%``
    (:func:`format_change_pct`)."""
    try:
        value = float(ratio)  # type: ignore[arg-type]
    except (OverflowError, TypeError, ValueError):
        return MISSING
    return format_change_pct((value - 1.0) * 100.0, decimals)


def format_count(value: float | None) -> str:
    """A count (instructions, cycles, frames) as a whole number with thousands separators:
    ``1,234,567``; a fractional count below 1000 (a median of two frames) to :data:`DIGITS`
    significant digits."""
    if value is None or not math.isfinite(value):
        return MISSING
    if isinstance(value, int) or abs(value) >= 1000 or float(value).is_integer():
        return f"{value:,.0f}"
    return significant(float(value))


#: What each statistic is called where a person reads it (a table header): the one map, used by
#: ``stats``' text tables and the report. Keyed by the statistic's name without its unit suffix
#: (``median_ms`` and ``median_instructions`` are ``median``; katra_trace.analysis.stats defines
#: each). A rate or a share names its unit (fps, % of time); a duration's cells carry their own
#: (``150.0 µs``) and a count's table says its unit in its title, so those labels name none. JSON
#: and CSV keep the raw keys: scripts read those.
STAT_LABELS: dict[str, str] = {
    "n": "frames",
    "total": "total",
    "mean": "mean",
    "median": "median",
    "min": "min",
    "max": "max",
    "stdev": "std dev",
    "mad": "MAD",
    "p90": "p90",
    "p95": "p95",
    "p99": "p99",
    "cv": "CV",
    "fps_avg": "avg (fps)",
    "fps_low_1pct": "1 % low (fps)",
    "fps_low_0_1pct": "0.1 % low (fps)",
    "fps_low_1pct_integral": "1 % low, integral (fps)",
    "fps_low_0_1pct_integral": "0.1 % low, integral (fps)",
    "stutter_pct": "stutter (% of time)",
}
#: The label of ``n`` in a table of zones: a zone's statistics count its spans, not frames.
ZONE_COUNT_LABEL = "spans"


def stat_label(key: str, *, zone: bool = False) -> str:
    """The header of statistic ``key`` (:data:`STAT_LABELS`): ``fps_low_1pct`` is ``1 % low (fps)``,
    ``p99_ms`` and ``p99_instructions`` are ``p99``; ``n`` of a ``zone`` is ``spans``. A key the map
    lacks is shown as it is."""
    if zone and key == "n":
        return ZONE_COUNT_LABEL
    if key in STAT_LABELS:
        return STAT_LABELS[key]
    return STAT_LABELS.get(key.rsplit("_", 1)[0], key)


def format_number(value: object) -> str:
    """A table cell for a plain number: ints as they are, floats to :data:`DIGITS` significant
    digits, None and non-finite floats as ``-``, anything else as ``str``."""
    if value is None or (isinstance(value, float) and not math.isfinite(value)):
        return MISSING
    if isinstance(value, bool) or isinstance(value, int):
        return str(value)
    if isinstance(value, float):
        return significant(value)
    return str(value)


__all__ = [
    "DIGITS",
    "DURATION_UNITS",
    "MISSING",
    "STAT_LABELS",
    "ZONE_COUNT_LABEL",
    "format_change",
    "format_change_pct",
    "format_count",
    "format_duration",
    "format_ms",
    "format_number",
    "significant",
    "stat_label",
]
