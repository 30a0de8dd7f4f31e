"""The decision's defaults and the one check of each of its options. Stdlib only, so the CLI
builds its help without importing the statistics."""

from __future__ import annotations

import dataclasses
import math
from collections.abc import Mapping
from typing import Any

from katra_trace.errors import OptionError
from katra_trace.jsontext import JsonObject, record_dict
from katra_trace.metrics import is_count

#: One-sided false-regression rate per scene after Holm (``history check``: a false step).
DEFAULT_ALPHA = 0.01
DEFAULT_THRESHOLD_TIME_PCT = 5.0
#: Two processes agree within 0.003-0.16 % (docs/stats.md).
DEFAULT_THRESHOLD_COUNT_PCT = 0.5
#: Instructions per frame: the floor of a count band (docs/measure.md, "Cross-process jitter").
COUNT_JITTER_PER_FRAME = 500
MIN_RUNS = 3
FEW_RUNS_RULE = f"with fewer than {MIN_RUNS} runs a side a time metric never gives a verdict"
MAX_THRESHOLD_PCT = 1000.0
DEFAULT_SEQUENTIAL_MAX_ROUNDS = 20
DEFAULT_SEQUENTIAL_MIN_ROUNDS = 3
MAX_SEQUENTIAL_ROUNDS = 200

#: A CPU hog beside the runs does not stretch process p10 (docs/stats.md, "Default metric").
SOFTWARE_TIME_DEFAULT: tuple[str, str] = ("process", "p10")
#: sd of a log ratio between separate batches, by ``python -m bench defaults`` (docs/stats.md).
BATCH_DRIFT_SD: dict[tuple[str, str], float] = {
    ("process", "p10"): 0.075,
    ("process", "median"): 0.092,
    ("wall", "median"): 0.188,
    ("wall/reference", "median"): 0.187,
}


def runs_decide(metric: str, runs: int) -> bool:
    """A count's one run is evidence (deterministic); a time metric needs :data:`MIN_RUNS`."""
    return is_count(metric) or runs >= MIN_RUNS


def batch_drift_sd(metric: str, run_stat: str) -> float:
    """An unmeasured metric gets the largest."""
    return BATCH_DRIFT_SD.get((metric, run_stat), max(BATCH_DRIFT_SD.values()))


#: ``metric_choice`` in compare's JSON and ab.json.
METRIC_CHOICES = ("option", "counts", "capture", "software default")

#: softpipe's blend rounding gives 0.020, a colour moved by 5 levels 0.046+ (docs/images.md).
DEFAULT_IMAGE_MAX_MEAN = 0.03
DEFAULT_IMAGE_OUTLIER_LEVEL = 0.1
#: Percent; a one-pixel shift makes 1 % or more.
DEFAULT_IMAGE_MAX_OUTLIER_PCT = 0.3
IMAGE_POLICIES = ("gate", "warn", "off")


def default_threshold_pct(metric: str) -> float:
    """Percent."""
    return DEFAULT_THRESHOLD_COUNT_PCT if is_count(metric) else DEFAULT_THRESHOLD_TIME_PCT


def threshold_for(metric: str, threshold_pct: float | None) -> float:
    return default_threshold_pct(metric) if threshold_pct is None else threshold_pct


def check_alpha(alpha: float) -> float:
    """:class:`OptionError` outside (0, 0.5): intervals are drawn at ``1 - 2 alpha``."""
    if not (isinstance(alpha, (int, float)) and 0 < alpha < 0.5):
        raise OptionError(f"--alpha must be between 0 and 0.5 (exclusive), got {alpha!r}")
    return float(alpha)


def check_threshold_pct(threshold_pct: float | None) -> float | None:
    """:class:`OptionError` unless None or finite in [0, :data:`MAX_THRESHOLD_PCT`)."""
    if threshold_pct is None:
        return None
    if not (
        isinstance(threshold_pct, (int, float))
        and math.isfinite(threshold_pct)
        and 0 <= threshold_pct < MAX_THRESHOLD_PCT
    ):
        raise OptionError(
            f"--threshold must be a percentage >= 0 and below {MAX_THRESHOLD_PCT:g}, "
            f"got {threshold_pct!r}"
        )
    return float(threshold_pct)


def _check_fraction(value: float, option: str, what: str, upper: float) -> float:
    if not (
        isinstance(value, (int, float))
        and not isinstance(value, bool)
        and math.isfinite(value)
        and 0 <= value <= upper
    ):
        raise OptionError(f"{option} must be {what} between 0 and {upper:g}, got {value!r}")
    return float(value)


def check_image_max_mean(value: float) -> float:
    return _check_fraction(value, "--image-max-mean", "a FLIP mean error", 1.0)


def check_image_max_outlier_pct(value: float) -> float:
    return _check_fraction(value, "--image-max-outliers", "a percentage of pixels", 100.0)


def check_image_outlier_level(value: float) -> float:
    return _check_fraction(value, "the outlier level", "a FLIP error", 1.0)


def image_policy(policy: str | None, allow_param_mismatch: bool = False) -> str:
    """The one given, else gate, or warn under ``--allow-param-mismatch``."""
    if policy is None:
        return "warn" if allow_param_mismatch else "gate"
    if policy not in IMAGE_POLICIES:
        raise OptionError(f"--images must be one of {', '.join(IMAGE_POLICIES)}, got {policy!r}")
    return policy


def check_sequential_rounds(min_rounds: int, max_rounds: int) -> tuple[int, int]:
    """:class:`OptionError` unless whole and within the sequential rule's bounds."""
    for value in (min_rounds, max_rounds):
        if isinstance(value, bool) or not isinstance(value, int):
            raise OptionError(f"rounds must be whole numbers, got {value!r}")
    if not DEFAULT_SEQUENTIAL_MIN_ROUNDS <= min_rounds <= MAX_SEQUENTIAL_ROUNDS:
        raise OptionError(
            f"the sequential rule's first look must be at a round from "
            f"{DEFAULT_SEQUENTIAL_MIN_ROUNDS} to {MAX_SEQUENTIAL_ROUNDS}, got {min_rounds}"
        )
    if not min_rounds <= max_rounds <= MAX_SEQUENTIAL_ROUNDS:
        raise OptionError(
            f"--rounds with --until-decided is the cap and must be from {min_rounds} to "
            f"{MAX_SEQUENTIAL_ROUNDS}, got {max_rounds}"
        )
    return min_rounds, max_rounds


@dataclasses.dataclass(frozen=True)
class CompareOptions:
    """The decision's options (``--metric``, ``--threshold``, ``--alpha``, ``--stat``, ...);
    ``threshold_pct`` and ``run_stat`` None: the metric's default."""

    metric: str = "auto"
    threshold_pct: float | None = None
    alpha: float = DEFAULT_ALPHA
    allow_host_mismatch: bool = False
    allow_param_mismatch: bool = False
    allow_codegen_mismatch: bool = False
    normalize: bool = False
    run_stat: str | None = None

    def as_dict(self) -> JsonObject:
        return record_dict(self)

    @classmethod
    def from_dict(cls, data: Mapping[str, Any]) -> CompareOptions:
        """A missing key keeps its default."""
        names = {f.name for f in dataclasses.fields(cls)}
        return cls(**{k: v for k, v in data.items() if k in names})


DEFAULT_COMPARE = CompareOptions()

__all__ = [
    "CompareOptions",
    "DEFAULT_COMPARE",
    "DEFAULT_IMAGE_MAX_MEAN",
    "DEFAULT_IMAGE_MAX_OUTLIER_PCT",
    "DEFAULT_IMAGE_OUTLIER_LEVEL",
    "IMAGE_POLICIES",
    "check_image_max_mean",
    "check_image_max_outlier_pct",
    "check_image_outlier_level",
    "image_policy",
    "COUNT_JITTER_PER_FRAME",
    "DEFAULT_ALPHA",
    "DEFAULT_SEQUENTIAL_MAX_ROUNDS",
    "DEFAULT_SEQUENTIAL_MIN_ROUNDS",
    "DEFAULT_THRESHOLD_COUNT_PCT",
    "DEFAULT_THRESHOLD_TIME_PCT",
    "MAX_SEQUENTIAL_ROUNDS",
    "MAX_THRESHOLD_PCT",
    "BATCH_DRIFT_SD",
    "METRIC_CHOICES",
    "SOFTWARE_TIME_DEFAULT",
    "batch_drift_sd",
    "check_alpha",
    "check_sequential_rounds",
    "check_threshold_pct",
    "default_threshold_pct",
    "threshold_for",
]
