"""The decision's defaults (alpha, thresholds) and the one check of each of its options.

Pure (stdlib): the CLI imports it to build its options' help without importing the statistics.
compare, ab, ``history check``, the report and the CI scripts' documented defaults all read these
values; every command and library entry point validates ``alpha`` and ``threshold`` through
:func:`check_alpha` and :func:`check_threshold_pct`, so a bad value gets one message wherever it
is given. The rule itself is in :mod:`katra_trace.analysis.decide` and docs/stats.md.
"""

from __future__ import annotations

import dataclasses
import math
from collections.abc import Mapping
from typing import Any

from katra_trace.errors import OptionError
from katra_trace.metrics import is_count

#: One-sided false-regression rate per scene after Holm correction (compare, ab); the chance that a
#: flat history series shows a step (``history check``).
DEFAULT_ALPHA = 0.01
#: Default threshold (percent) of time metrics.
DEFAULT_THRESHOLD_TIME_PCT = 5.0
#: Default threshold (percent) of count metrics: a 1 % change of work is flagged, while two
#: processes measured the same scene within 0.003-0.16 % of each other (docs/stats.md).
DEFAULT_THRESHOLD_COUNT_PCT = 0.5
#: Cross-process jitter of a count metric, per frame (instructions): the band of a count comparison
#: is never narrower than this over the frame's count. Measured: docs/measure.md ("Cross-process
#: jitter"), ``python -m bench counts-aa``.
COUNT_JITTER_PER_FRAME = 500
#: Runs (or paired rounds) a side below which run-to-run noise is unknown: a time metric gives no
#: verdict on fewer (:func:`runs_decide`).
MIN_RUNS = 3
#: That rule in words, wherever a time metric's side has too few runs (compare, history check).
FEW_RUNS_RULE = f"with fewer than {MIN_RUNS} runs a side a time metric never gives a verdict"
#: Thresholds (percent) at or above this are refused: a 10x change is not a "minimum effect".
MAX_THRESHOLD_PCT = 1000.0
#: The cap on rounds of ``ab --until-decided`` (and bisect's time mode) when ``--rounds`` is not
#: given: the planned maximum over which the sequential rule spends alpha (docs/stats.md, "Stopping
#: when decided").
DEFAULT_SEQUENTIAL_MAX_ROUNDS = 20
#: The first look of the sequential rule: before it, run-to-run noise is unknown (``MIN_RUNS``).
DEFAULT_SEQUENTIAL_MIN_ROUNDS = 3
#: Caps above this are refused: the rule's boundaries are computed look by look.
MAX_SEQUENTIAL_ROUNDS = 200

#: The time metric and per-run statistic that compare, ab and bisect's time mode use by default
#: (``--metric auto``) when every trace is a software renderer's (llvmpipe) and records process CPU
#: time: each run's 10th-percentile frame of process CPU time, the frame's own work, which a CPU hog
#: beside the runs does not stretch. Chosen by evidence: ``python -m bench defaults``
#: (docs/stats.md, "Default metric"), A/A false verdicts and power of wall median, process median,
#: process p10 and normalized time, on a quiet machine and beside a CPU hog.
SOFTWARE_TIME_DEFAULT: tuple[str, str] = ("process", "p10")
#: Sides captured in separate batches (every run of one side before every run of the other, not
#: interleaved): the drift of the machine between batches allowed for in the interval, by metric and
#: per-run statistic, as the sd of a log ratio (``welch``'s ``drift_sd``). Runs of one batch share
#: the machine's state, so their spread does not show it. Measured by ``python -m bench defaults``
#: (docs/stats.md, "Sides captured in separate batches"): the root mean square of the log ratio of
#: 84 separate-batch A/A pairs (two runs of the bench: 3 scenes, quiet and beside a CPU hog, on a
#: 2-core machine, once shared with other jobs), which also holds the runs' own spread (so it errs
#: wide).
BATCH_DRIFT_SD: dict[tuple[str, str], float] = {
    ("process", "p10"): 0.075,
    ("process", "median"): 0.092,
    ("wall", "median"): 0.188,
    ("wall/reference", "median"): 0.187,
}


def runs_decide(metric: str, runs: int) -> bool:
    """Whether a side of ``runs`` runs of ``metric`` may give a verdict: a count's one run is
    evidence (counts are deterministic); a time metric needs :data:`MIN_RUNS` (below that its
    run-to-run noise is unknown, and one busy run looks like a change). compare's time rule and
    ``history check``'s newest label both decide by it."""
    return is_count(metric) or runs >= MIN_RUNS


def batch_drift_sd(metric: str, run_stat: str) -> float:
    """The drift allowed between separately captured sides (:data:`BATCH_DRIFT_SD`); a metric the
    bench did not measure (cpu, gpu, wall/reference) gets the largest measured."""
    return BATCH_DRIFT_SD.get((metric, run_stat), max(BATCH_DRIFT_SD.values()))


#: How a comparison's metric was chosen (``metric_choice`` in compare's JSON and ab.json): given by
#: ``--metric``, auto as the captures' counts, auto as the clock the captures trust, or
#: :data:`SOFTWARE_TIME_DEFAULT`.
METRIC_CHOICES = ("option", "counts", "capture", "software default")

#: Image verdicts (:mod:`katra_trace.analysis.images`): the FLIP mean error (0-1) at or below which
#: a changed image is *within tolerance*. Measured (docs/images.md, ``python -m bench
#: image-tolerance``): another vector width renders identical images, softpipe's blend rounding (2
#: levels) gives 0.020; a colour moved by 5 of 255 levels gives 0.046 or more.
DEFAULT_IMAGE_MAX_MEAN = 0.03
#: The per-pixel FLIP error (0-1) over which a pixel counts as an outlier.
DEFAULT_IMAGE_OUTLIER_LEVEL = 0.1
#: The share of outlier pixels (percent) at or below which a changed image is *within tolerance*.
#: Measured (docs/images.md): a one-pixel shift of the frame puts 1 % or more of the pixels over
#: 0.1.
DEFAULT_IMAGE_MAX_OUTLIER_PCT = 0.3
#: ``--images``: what a changed image does. gate = a regression (exit 1); warn = a line, exit
#: unchanged; off = no image verdict. The default is gate, warn under ``--allow-param-mismatch``.
IMAGE_POLICIES = ("gate", "warn", "off")


def default_threshold_pct(metric: str) -> float:
    """The default ``--threshold`` of a metric (percent): counts' for instructions and cycles, else
    times'.
    """
    return DEFAULT_THRESHOLD_COUNT_PCT if is_count(metric) else DEFAULT_THRESHOLD_TIME_PCT


def threshold_for(metric: str, threshold_pct: float | None) -> float:
    """``threshold_pct`` when one was given, else the metric's default (percent)."""
    return default_threshold_pct(metric) if threshold_pct is None else threshold_pct


def check_alpha(alpha: float) -> float:
    """``alpha`` when it lies in (0, 0.5), else :class:`OptionError` (a ConfigError, exit 2).

    The upper bound is 0.5 because intervals are drawn at confidence ``1 - 2 alpha``."""
    if not (isinstance(alpha, (int, float)) and 0 < alpha < 0.5):
        raise OptionError(f"--alpha must be between 0 and 0.5 (exclusive), got {alpha!r}")
    return float(alpha)


def check_threshold_pct(threshold_pct: float | None) -> float | None:
    """``threshold_pct`` (percent, None = the per-metric default) when it is a finite number in
    [0, :data:`MAX_THRESHOLD_PCT`), else :class:`OptionError` (a ConfigError, exit 2)."""
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
    """``--image-max-mean``: a FLIP mean error in [0, 1], else :class:`OptionError` (exit 2)."""
    return _check_fraction(value, "--image-max-mean", "a FLIP mean error", 1.0)


def check_image_max_outlier_pct(value: float) -> float:
    """``--image-max-outliers``: a share of pixels in percent, [0, 100], else :class:`OptionError`
    (exit 2).
    """
    return _check_fraction(value, "--image-max-outliers", "a percentage of pixels", 100.0)


def check_image_outlier_level(value: float) -> float:
    """The per-pixel outlier level: a FLIP error in [0, 1], else :class:`OptionError` (exit 2)."""
    return _check_fraction(value, "the outlier level", "a FLIP error", 1.0)


def image_policy(policy: str | None, allow_param_mismatch: bool = False) -> str:
    """The ``--images`` policy in force: the one given (checked), else gate, or warn when the params
    differ on purpose (``--allow-param-mismatch``)."""
    if policy is None:
        return "warn" if allow_param_mismatch else "gate"
    if policy not in IMAGE_POLICIES:
        raise OptionError(f"--images must be one of {', '.join(IMAGE_POLICIES)}, got {policy!r}")
    return policy


def check_sequential_rounds(min_rounds: int, max_rounds: int) -> tuple[int, int]:
    """``(min_rounds, max_rounds)`` of a sequential rule when ``DEFAULT_SEQUENTIAL_MIN_ROUNDS <=
    min_rounds <= max_rounds <= MAX_SEQUENTIAL_ROUNDS`` (whole numbers), else :class:`OptionError`
    (exit 2).

    ``max_rounds`` is ``ab --until-decided``'s ``--rounds``: the cap, and the plan the rule spends
    alpha over."""
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
    """What is compared and what may be: the decision's options (``--metric``, ``--threshold``,
    ``--alpha``, ``--stat``, ``--normalize``, ``--allow-*``), built once by each command from its
    arguments and taken by :func:`compare_traces`. ``threshold_pct`` and ``run_stat`` None: the
    metric's default."""

    metric: str = "auto"
    threshold_pct: float | None = None
    alpha: float = DEFAULT_ALPHA
    allow_host_mismatch: bool = False
    allow_param_mismatch: bool = False
    allow_codegen_mismatch: bool = False
    normalize: bool = False
    run_stat: str | None = None

    def as_dict(self) -> dict[str, object]:
        """The options as a JSON object (bisect.json records them)."""
        return dataclasses.asdict(self)

    @classmethod
    def from_dict(cls, data: Mapping[str, Any]) -> CompareOptions:
        """The options :meth:`as_dict` wrote; a missing key keeps its default."""
        names = {f.name for f in dataclasses.fields(cls)}
        return cls(**{k: v for k, v in data.items() if k in names})


#: The options of a comparison no option changed.
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
