"""Stopping rule of ``ab --until-decided`` and bisect's time mode: a group-sequential paired t test
with O'Brien-Fleming-type spending; each look's level is the alpha spent at it, so by the union
bound the false-alarm rate stays at alpha (docs/stats.md, "Stopping when decided")."""

from __future__ import annotations

import dataclasses
import functools
import math
from collections.abc import Mapping, Sequence

import numpy as np
from scipy.special import ndtr, ndtri

from katra_trace.analysis.defaults import (
    DEFAULT_ALPHA,
    DEFAULT_SEQUENTIAL_MAX_ROUNDS,
    DEFAULT_SEQUENTIAL_MIN_ROUNDS,
    check_alpha,
    check_sequential_rounds,
    check_threshold_pct,
    threshold_for,
)
from katra_trace.analysis.intervals import interval_verdict, t_ppf, t_sf
from katra_trace.analysis.verdict import VERDICTS, Comparison, Verdict
from katra_trace.errors import ConfigError, OptionError
from katra_trace.jsontext import JsonObject
from katra_trace.units import format_change

RULE_NAME = "group-sequential-t"
SPENDING = "lan-demets-obrien-fleming"


@dataclasses.dataclass(frozen=True)
class SequentialRule:
    """``alpha`` is per scene over all looks, spent up to ``max_rounds``; ``threshold_pct`` None
    is the time metrics' default."""

    alpha: float = DEFAULT_ALPHA
    max_rounds: int = DEFAULT_SEQUENTIAL_MAX_ROUNDS
    min_rounds: int = DEFAULT_SEQUENTIAL_MIN_ROUNDS
    threshold_pct: float | None = None
    name: str = RULE_NAME
    spending: str = SPENDING

    def __post_init__(self) -> None:
        if (self.name, self.spending) != (RULE_NAME, SPENDING):
            raise OptionError(
                f"unknown sequential rule {self.name!r} with spending {self.spending!r} "
                f"(known: {RULE_NAME!r} with {SPENDING!r})"
            )
        check_alpha(self.alpha)
        check_threshold_pct(self.threshold_pct)
        check_sequential_rounds(self.min_rounds, self.max_rounds)

    @property
    def threshold(self) -> float:
        return threshold_for("wall", self.threshold_pct) / 100.0

    def describe(self) -> str:
        return (
            "group-sequential paired t, O'Brien-Fleming-type alpha spending over "
            f"{self.max_rounds} rounds, first look at round {self.min_rounds}, alpha "
            f"{self.alpha:g}, threshold {self.threshold * 100:g}%"
        )

    def to_json(self) -> JsonObject:
        return dataclasses.asdict(self)

    @classmethod
    def from_json(cls, data: object) -> SequentialRule:
        """ConfigError for anything :meth:`to_json` did not write."""
        fields = {f.name for f in dataclasses.fields(cls)}
        if not isinstance(data, Mapping) or not set(data) <= fields:
            raise ConfigError(f"not a sequential rule: {data!r}")
        try:
            return cls(**{str(k): v for k, v in data.items()})
        except (OptionError, TypeError) as exc:
            raise ConfigError(f"not a usable sequential rule ({exc}): {data!r}") from None


@dataclasses.dataclass(frozen=True)
class Look:
    """Ratios NEW / BASE (> 1 slower)."""

    decided: bool
    verdict: Verdict
    rounds: int
    reason: str
    ratio: float = math.nan  #: geometric mean
    ci_low: float = math.nan
    ci_high: float = math.nan
    confidence: float = math.nan
    final: bool = False  #: at the cap


def spent(alpha: float, t: float) -> float:
    """One-sided alpha spent by information fraction ``t``."""
    if t <= 0:
        return 0.0
    z = float(-ndtri(alpha / 2.0))
    return float(2.0 * ndtr(-z / math.sqrt(min(t, 1.0))))


@functools.lru_cache(maxsize=64)
def nominal_levels(alpha: float, min_rounds: int, max_rounds: int) -> tuple[float, ...]:
    """One-sided level of each look ``min_rounds .. max_rounds``: the alpha spent at it (the first
    takes all spent up to it)."""
    check_alpha(alpha)
    check_sequential_rounds(min_rounds, max_rounds)
    cumulative = [spent(alpha, k / max_rounds) for k in range(min_rounds, max_rounds + 1)]
    return tuple(
        max(now - before, 0.0)
        for now, before in zip(cumulative, [0.0, *cumulative[:-1]], strict=True)
    )


def critical_t(rule: SequentialRule, rounds: int, tests: int = 1) -> float:
    """t quantile at ``rounds`` (inf before a look can decide)."""
    level = nominal_levels(rule.alpha / max(tests, 1), rule.min_rounds, rule.max_rounds)[
        rounds - rule.min_rounds
    ]
    return float(-t_ppf(level, rounds - 1)) if level > 0 else math.inf


def _interval(estimate: float, se: float, q: float) -> tuple[float, float]:
    if se == 0:
        return estimate, estimate
    return estimate - q * se, estimate + q * se


def _ratio(log_ratio: float) -> float:
    """exp, inf on overflow (an early look's interval)."""
    return math.exp(log_ratio) if log_ratio < 700 else math.inf


def _pct(log_ratio: float) -> str:
    return format_change(_ratio(log_ratio))


def look(rule: SequentialRule, log_ratios: Sequence[float] | np.ndarray, *, tests: int = 1) -> Look:
    """A look at the per-round log ratios (``tests``: scenes sharing alpha); ConfigError past the
    cap."""
    x = np.asarray(log_ratios, dtype=np.float64)
    k = int(x.size)
    if k > rule.max_rounds:
        raise ConfigError(f"{k} rounds is more than the sequential rule's cap of {rule.max_rounds}")
    thr = rule.threshold
    where = f"round {k} of at most {rule.max_rounds}"
    if k < rule.min_rounds:
        return Look(
            False,
            Verdict.INCONCLUSIVE,
            k,
            f"{k} round(s): the first look is at round "
            f"{rule.min_rounds} (run-to-run noise unknown before)",
        )
    estimate, se = float(x.mean()), float(x.std(ddof=1)) / math.sqrt(k)
    q = critical_t(rule, k, tests)
    low, high = _interval(estimate, se, q)
    verdict = interval_verdict(estimate, low, high, thr)
    level = float(t_sf(q, k - 1)) if math.isfinite(q) else 0.0
    interval = (
        f"repeated interval [{_pct(low)}, {_pct(high)}]" if math.isfinite(q) else "no interval yet"
    )
    thr_pct = f"{thr * 100:g}%"
    final = k == rule.max_rounds
    if verdict is Verdict.REGRESSION:
        why = f"{_pct(estimate)} slower, {interval} above 0 (threshold {thr_pct}; {where})"
    elif verdict is Verdict.IMPROVEMENT:
        why = f"{_pct(estimate)}, {interval} below 0 (threshold {thr_pct}; {where})"
    elif verdict is Verdict.UNCHANGED:
        why = (
            f"{_pct(estimate)}, {interval} within +-{thr_pct}: no change of practical size "
            f"({where})"
        )
    elif final:
        why = (
            f"{_pct(estimate)}, {interval}: undecided at the cap of {k} rounds (threshold "
            f"{thr_pct})"
        )
    else:
        why = f"{_pct(estimate)}, {interval}: not decided yet ({where}, threshold {thr_pct})"
    return Look(
        decided=verdict is not Verdict.INCONCLUSIVE,
        verdict=verdict,
        rounds=k,
        reason=why,
        ratio=_ratio(estimate),
        ci_low=_ratio(low),
        ci_high=_ratio(high),
        confidence=1.0 - 2.0 * level,
        final=final,
    )


@dataclasses.dataclass(frozen=True)
class Settled:
    decided: bool
    rounds: int
    max_rounds: int
    reason: str
    undecided: tuple[str, ...] = ()

    def as_dict(self) -> JsonObject:
        return dict(dataclasses.asdict(self), undecided=list(self.undecided))

    @classmethod
    def from_dict(cls, data: object) -> Settled:
        """ConfigError for anything :meth:`as_dict` did not write."""
        try:
            if not isinstance(data, Mapping):
                raise TypeError("not an object")
            made = cls(
                decided=data["decided"],
                rounds=data["rounds"],
                max_rounds=data["max_rounds"],
                reason=data["reason"],
                undecided=tuple(data.get("undecided", ())),
            )
            if not (
                isinstance(made.decided, bool)
                and isinstance(made.reason, str)
                and all(isinstance(n, int) for n in (made.rounds, made.max_rounds))
                and all(isinstance(n, str) for n in made.undecided)
            ):
                raise TypeError("a field of the wrong type")
        except (KeyError, TypeError) as exc:
            raise ConfigError(
                f"not a record of why ab's rounds stopped ({exc}): {data!r}"
            ) from None
        return made


def settle(comparison: Comparison, rounds: int, max_rounds: int) -> Settled:
    """Whether every scene is decided (incomparable ones cannot change)."""
    open_ = [s.scene for s in comparison.scenes if s.verdict is Verdict.INCONCLUSIVE]
    verdicts = ", ".join(f"{s.scene} {s.verdict}" for s in comparison.scenes) or "no scenes"
    if not open_:
        return Settled(
            True,
            rounds,
            max_rounds,
            f"decided after {rounds} of at most {max_rounds} rounds: {verdicts}",
        )
    if rounds >= max_rounds:
        return Settled(
            False,
            rounds,
            max_rounds,
            f"undecided at the cap of {max_rounds} rounds: {verdicts}",
            tuple(open_),
        )
    return Settled(
        False,
        rounds,
        max_rounds,
        f"undecided after {rounds} of at most {max_rounds} rounds ({', '.join(open_)})",
        tuple(open_),
    )


@dataclasses.dataclass(frozen=True)
class Simulation:
    """Rate of each verdict (at the stop or cap) and rounds used over seeded normal series."""

    effect: float  #: a fraction (0.1 = +10 %)
    sd_log: float  #: of one round's log ratio
    trials: int
    rates: dict[str, float]
    mean_rounds: float


def simulate(
    rule: SequentialRule, effect: float, sd_log: float, trials: int, seed: int, tests: int = 1
) -> Simulation:
    """Each of ``trials`` normal log-ratio series stops at its first decided look."""
    rng = np.random.default_rng(seed)
    x = rng.normal(math.log1p(effect), sd_log, size=(trials, rule.max_rounds))
    k = np.arange(1, rule.max_rounds + 1)
    mean = np.cumsum(x, axis=1) / k
    sq = np.cumsum(x * x, axis=1)
    with np.errstate(invalid="ignore", divide="ignore"):
        se = np.sqrt(np.maximum(sq - k * mean * mean, 0.0) / (k - 1) / k)
    verdict_of = np.vectorize(
        lambda e, lo, hi: interval_verdict(e, lo, hi, rule.threshold), otypes=[object]
    )
    final = np.full(trials, "inconclusive", dtype=object)
    used = np.full(trials, rule.max_rounds)
    open_ = np.ones(trials, dtype=bool)
    for r in range(rule.min_rounds, rule.max_rounds + 1):
        q = critical_t(rule, r, tests)
        if not math.isfinite(q):
            continue
        idx = np.flatnonzero(open_)
        est, s = mean[idx, r - 1], se[idx, r - 1]
        v = verdict_of(est, est - q * s, est + q * s)
        done = v != "inconclusive"
        final[idx[done]] = v[done]
        used[idx[done]] = r
        open_[idx[done]] = False
    rates = {name: float(np.mean(final == name)) for name in VERDICTS if name != "incomparable"}
    return Simulation(
        effect=effect, sd_log=sd_log, trials=trials, rates=rates, mean_rounds=float(used.mean())
    )


__all__ = [
    "RULE_NAME",
    "SPENDING",
    "Look",
    "SequentialRule",
    "Settled",
    "Simulation",
    "critical_t",
    "look",
    "nominal_levels",
    "settle",
    "simulate",
    "spent",
]
