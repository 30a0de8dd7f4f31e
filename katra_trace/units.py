"""The one way a duration, count or float is written as text (150 µs reads ``150.0 µs``
everywhere); JSON and CSV keep raw ``*_ms`` numbers."""

from __future__ import annotations

import math

#: (symbol, ns in one), largest first.
DURATION_UNITS: tuple[tuple[str, float], ...] = (("s", 1e9), ("ms", 1e6), ("µs", 1e3), ("ns", 1.0))
DIGITS = 4
MISSING = "-"


def significant(value: float, digits: int = DIGITS) -> str:
    """``value`` to ``digits`` significant digits, no exponent; integer digits are kept (17390)."""
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
    try:
        number = float(value)  # type: ignore[arg-type]
    except (OverflowError, TypeError, ValueError):
        return None
    return number if math.isfinite(number) else None


def format_duration(ns: float | None, digits: int = DIGITS) -> str:
    """A duration in **ns** as text in the largest unit it reaches (``16.67 ms``); None is ``-``."""
    ns = _finite(ns)
    if ns is None:
        return MISSING
    if ns == 0:
        return "0 s"
    i = next(
        (i for i, (_, scale) in enumerate(DURATION_UNITS) if abs(ns) >= scale),
        len(DURATION_UNITS) - 1,
    )
    text = significant(ns / DURATION_UNITS[i][1], digits)
    if i > 0 and abs(float(text)) >= 1000:
        # 999.96 µs rounds to "1000": use the next unit up
        i -= 1
        text = significant(ns / DURATION_UNITS[i][1], digits)
    return f"{text} {DURATION_UNITS[i][0]}"


def format_ms(ms: float | None, digits: int = DIGITS) -> str:
    """:func:`format_duration` of a value in **milliseconds**."""
    value = _finite(ms)
    return format_duration(None if value is None else value * 1e6, digits)


def format_change_pct(pct: float | None, decimals: int = 1) -> str:
    """A signed change in **percent**: ``+5.2%``; None or NaN is ``-``."""
    try:
        value = float(pct)  # type: ignore[arg-type]
    except (OverflowError, TypeError, ValueError):
        return MISSING
    return MISSING if math.isnan(value) else f"{value:+.{decimals}f}%"


def format_change(ratio: float | None, decimals: int = 1) -> str:
    """A ratio NEW/BASE as a percent change: 1.052 is ``+5.2%``."""
    try:
        value = float(ratio)  # type: ignore[arg-type]
    except (OverflowError, TypeError, ValueError):
        return MISSING
    return format_change_pct((value - 1.0) * 100.0, decimals)


def format_count(value: float | None) -> str:
    """A count with thousands separators; a fraction below 1000 to :data:`DIGITS` digits."""
    if value is None or not math.isfinite(value):
        return MISSING
    if isinstance(value, int) or abs(value) >= 1000 or float(value).is_integer():
        return f"{value:,.0f}"
    return significant(float(value))


#: A statistic's table header, keyed by its name without unit suffix.
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
ZONE_COUNT_LABEL = "spans"


def stat_label(key: str, *, zone: bool = False) -> str:
    """The header of statistic ``key``; an unknown key is shown as is."""
    if zone and key == "n":
        return ZONE_COUNT_LABEL
    if key in STAT_LABELS:
        return STAT_LABELS[key]
    return STAT_LABELS.get(key.rsplit("_", 1)[0], key)


def format_number(value: object) -> str:
    """A plain number's cell: floats to :data:`DIGITS` digits, None and non-finite as ``-``."""

    if value is None or (isinstance(value, float) and not math.isfinite(value)):
        return MISSING
    if isinstance(value, int):
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
