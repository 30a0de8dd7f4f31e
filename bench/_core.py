"""The bench framework: rows, targets, the registry and the in-run ratio method.

A bench is a function that takes a :class:`BenchContext` and returns rows;
see the package docstring (bench/__init__.py) for an example.

Every measurement is a ratio against a baseline timed in the same run, with
the two interleaved: absolute times on these shared machines are not stable
from one run to the next, a ratio of adjacent timings is.
"""

from __future__ import annotations

import dataclasses
import math
import statistics
import sys
import time
from collections.abc import Callable, Iterable, Mapping, Sequence
from pathlib import Path
from typing import Any, Literal

# --------------------------------------------------------------------------- targets and rows


@dataclasses.dataclass(frozen=True)
class Target:
    """A bound the row's ``value`` must meet: ``value >= bound`` or ``value <= bound``.

    ``floor``: where the run-to-run spread is known to be wider than the
    distance to the bound, the value that still shows as a pass (``>=``: a
    floor below the bound; ``<=``: a ceiling above it). None: the bound itself.
    """

    op: Literal[">=", "<="]
    bound: float
    floor: float | None = None

    def met(self, value: float) -> bool:
        if math.isnan(value):
            return False
        limit = self.bound if self.floor is None else self.floor
        return value >= limit if self.op == ">=" else value <= limit

    def as_dict(self) -> dict[str, Any]:
        """``op`` and ``bound``, and ``pass_from`` (the floor) when there is one."""
        out: dict[str, Any] = {"op": self.op, "bound": self.bound}
        if self.floor is not None:
            out["pass_from"] = self.floor
        return out

    def __str__(self) -> str:
        text = f"{self.op} {self.bound:.3g}"
        return text if self.floor is None else f"{text} (pass {self.op} {self.floor:.3g})"


def at_least(bound: float, *, floor: float | None = None) -> Target:
    """Target: the value must be >= ``bound`` (shown as a pass from ``floor``, when given)."""
    return Target(">=", float(bound), None if floor is None else float(floor))


def at_most(bound: float, *, ceiling: float | None = None) -> Target:
    """Target: the value must be <= ``bound`` (shown as a pass up to ``ceiling``, when given)."""
    return Target("<=", float(bound), None if ceiling is None else float(ceiling))


@dataclasses.dataclass(frozen=True)
class Row:
    """One line of the bench table.

    ``value`` is the median over ``n`` repeats, ``q1``..``q3`` their
    interquartile range (None for a single deterministic value). ``unit`` is
    ``"ratio"`` for a ratio against an in-run baseline (``what`` says which
    over which), else the unit of an absolute, machine-independent value
    (e.g. ``"bytes/event"``). ``target`` None: shown for information only.
    ``ci_low``..``ci_high``: a distribution-free 95 % confidence interval of
    the median (None below 6 repeats): how precisely this run pinned the value,
    to read beside the target.
    """

    name: str
    what: str
    value: float
    unit: str = "ratio"
    q1: float | None = None
    q3: float | None = None
    n: int = 1
    target: Target | None = None
    notes: str = ""
    bench: str = ""
    ci_low: float | None = None
    ci_high: float | None = None

    @property
    def status(self) -> str:
        """``pass`` / ``miss`` against the target, ``info`` when there is none."""
        if self.target is None:
            return "info"
        return "pass" if self.target.met(self.value) else "miss"

    def as_dict(self) -> dict[str, Any]:
        return {
            "bench": self.bench,
            "name": self.name,
            "what": self.what,
            "value": _finite(self.value),
            "unit": self.unit,
            "spread": {"q1": _finite(self.q1), "q3": _finite(self.q3), "n": self.n},
            "median_ci95": None
            if self.ci_low is None
            else [_finite(self.ci_low), _finite(self.ci_high)],
            "target": None if self.target is None else self.target.as_dict(),
            "status": self.status,
            "notes": self.notes,
        }


def _finite(x: float | None) -> float | None:
    """JSON has no NaN: NaN and infinities become null."""
    if x is None or not math.isfinite(x):
        return None
    return x


# --------------------------------------------------------------------------- context and registry


class BenchContext:
    """What a bench function gets: the size to run at, a scratch directory, a log and facts.

    ``quick``: a smoke-test size (seconds), not a measurement. ``tmp``: an empty
    directory, removed after the bench. ``facts``: JSON-ready facts the bench
    wants recorded in results.json (e.g. the GL renderer it measured on).
    """

    def __init__(self, name: str, tmp: Path, *, quick: bool, log: Callable[[str], None]) -> None:
        self.name = name
        self.tmp = tmp
        self.quick = quick
        self.facts: dict[str, Any] = {}
        self._log = log

    def scale(self, full: int, quick: int) -> int:
        """``quick`` in a --quick run, else ``full`` (repeat counts, frame counts, sizes)."""
        return quick if self.quick else full

    def log(self, message: str) -> None:
        """A progress line on stderr (never on stdout, which carries the table)."""
        self._log(f"{self.name}: {message}")


BenchFn = Callable[[BenchContext], Iterable[Row]]


@dataclasses.dataclass(frozen=True)
class Bench:
    """A registered bench: ``default`` benches run when none is named on the command line;
    ``experiment``: a study in bench/experiments/, run only when named."""

    name: str
    fn: BenchFn
    about: str
    default: bool
    needs_gl: bool
    experiment: bool = False


_REGISTRY: dict[str, Bench] = {}


def bench(
    name: str, *, about: str = "", default: bool = True, needs_gl: bool = False
) -> Callable[[BenchFn], BenchFn]:
    """Register ``fn`` as bench ``name`` (unique). ``default=False``: only runs when named
    (for benches that take minutes; always so in bench/experiments/). ``about``: one line for
    ``--list``; defaults to the first line of the function's docstring."""

    def register(fn: BenchFn) -> BenchFn:
        if name in _REGISTRY:
            raise ValueError(
                f"bench '{name}' is registered twice ({_REGISTRY[name].fn.__module__} "
                f"and {fn.__module__})"
            )
        text = about or (fn.__doc__ or "").strip().split("\n", 1)[0]
        experiment = fn.__module__.startswith("bench.experiments.")
        _REGISTRY[name] = Bench(name, fn, text, default and not experiment, needs_gl, experiment)
        return fn

    return register


def registered() -> dict[str, Bench]:
    """Every registered bench, in registration order."""
    return dict(_REGISTRY)


# --------------------------------------------------------------------------- the ratio method


def interleave(
    variants: Mapping[str, Callable[[], float | None]],
    rounds: int,
    *,
    warmup: int = 1,
    progress: Callable[[str], None] | None = None,
) -> dict[str, list[float]]:
    """Run every variant once per round, the order rotating each round; returns each one's samples.

    A variant's sample is what it returns when that is a number (it measured
    itself, e.g. a mean frame period read from a trace), else the seconds its
    call took (``time.perf_counter``). ``warmup`` rounds run first and are not
    kept. Sample ``i`` of every variant comes from the same round, so
    :func:`pair_ratios` pairs timings taken moments apart: slow load drift on a
    shared machine cancels in each pair.
    """
    names = list(variants)
    out: dict[str, list[float]] = {name: [] for name in names}
    k = len(names)
    for r in range(-warmup, rounds):
        shift = r % k
        order = names[shift:] + names[:shift]
        if (r // k) % 2:
            order.reverse()
        for name in order:
            t0 = time.perf_counter()
            got = variants[name]()
            elapsed = time.perf_counter() - t0
            if r >= 0:
                out[name].append(float(got) if isinstance(got, (int, float)) else elapsed)
        if (
            progress is not None
            and r >= 0
            and (r + 1) % max(1, rounds // 4) == 0
            and r + 1 < rounds
        ):
            progress(f"round {r + 1}/{rounds}")
    return out


def pair_ratios(samples: Mapping[str, Sequence[float]], num: str, den: str) -> list[float]:
    """Per-round ratios ``samples[num][i] / samples[den][i]``."""
    return [a / b for a, b in zip(samples[num], samples[den], strict=True)]


def ratio_row(
    name: str,
    what: str,
    ratios: Sequence[float],
    *,
    target: Target | None = None,
    notes: str = "",
    unit: str = "ratio",
) -> Row:
    """A row with the median of ``ratios``, their interquartile range and the median's 95 %
    interval.
    """
    value, q1, q3 = median_iqr(ratios)
    ci = median_ci(ratios)
    return Row(
        name,
        what,
        value,
        unit,
        q1,
        q3,
        len(ratios),
        target,
        notes,
        ci_low=None if ci is None else ci[0],
        ci_high=None if ci is None else ci[1],
    )


def median_ci(values: Sequence[float], level: float = 0.95) -> tuple[float, float] | None:
    """Distribution-free interval for the median: order statistics ``k`` and ``n + 1 - k``
    (1-based), ``k`` the largest with P(Binomial(n, 1/2) < k) <= (1 - level) / 2. None when ``n`` is
    too small."""
    n = len(values)
    tail = (1.0 - level) / 2.0
    k, below = 0, 0.0
    while k < n // 2:
        nxt = below + math.comb(n, k) / 2.0**n
        if nxt > tail:
            break
        below, k = nxt, k + 1
    if k == 0:
        return None
    ordered = sorted(values)
    return ordered[k - 1], ordered[n - k]


def median_iqr(values: Sequence[float]) -> tuple[float, float, float]:
    """(median, first quartile, third quartile); NaNs when ``values`` is empty."""
    if not values:
        return math.nan, math.nan, math.nan
    med = statistics.median(values)
    if len(values) < 2:
        return med, med, med
    q1, _, q3 = statistics.quantiles(values, n=4, method="inclusive")
    return med, q1, q3


def stderr_log(message: str) -> None:
    print(f"bench: {message}", file=sys.stderr, flush=True)


__all__ = [
    "Bench",
    "BenchContext",
    "BenchFn",
    "Row",
    "Target",
    "at_least",
    "at_most",
    "bench",
    "interleave",
    "median_ci",
    "median_iqr",
    "pair_ratios",
    "ratio_row",
    "registered",
]
