"""Step detection over a history: piecewise-constant log levels, the per-step penalty simulated so
a flat history shows a step with probability about alpha. Method: docs/history.md."""

from __future__ import annotations

import dataclasses
import functools
import math
from collections.abc import Sequence
from statistics import NormalDist

import numpy as np

from katra_trace.analysis.defaults import DEFAULT_ALPHA, MIN_RUNS

NULL_SIMULATIONS = 4000
#: Fewer replicate dfs: noise from label-to-label differences.
MIN_REPLICATE_DF = 3
MIN_LABELS_FOR_LABEL_NOISE = 4
#: Robust sds from its label's median that make a run an outlier.
OUTLIER_SDS = 5.0
#: Sds from the running median that leave a label out.
OUTLIER_LABEL_SDS = 4.0
RUNNING_MEDIAN_LABELS = 7
LOCAL_NOISE_LABELS = 24
#: Share of the local differences kept (the smallest squares).
NOISE_KEPT_SHARE = 0.8
#: Floor of a local variance, as a share of the series'.
LOCAL_NOISE_FLOOR = 0.5
MIN_SEGMENT_LABELS = 2
#: Floor of a label mean's sd (log units): keeps identical counts finite.
MIN_SD = 1e-4
_SIM_CHUNK = 500
_NORMAL = NormalDist()
_MAD_TO_SD = 1.0 / _NORMAL.inv_cdf(0.75)
#: Low, so steps barely move the dispersion.
_DISPERSION_Q = 0.35
_CHI2_1_Q = _NORMAL.inv_cdf(0.5 + _DISPERSION_Q / 2) ** 2


@dataclasses.dataclass(frozen=True)
class Step:
    """A change of level; ``index`` is the first label (0-based) of the new level."""

    index: int
    start_low: int
    start_high: int
    ratio: float
    ratio_low: float
    ratio_high: float
    z: float  #: log ratio / its standard error
    level_before: float
    level_after: float


@dataclasses.dataclass(frozen=True)
class Departure:
    """Newest label(s) off the level before on fewer than :data:`MIN_RUNS` runs: a step or
    disturbed runs, which more runs tell apart."""

    index: int
    labels: int
    runs: int
    ratio: float
    ratio_low: float
    ratio_high: float
    z: float
    level_before: float
    level: float
    run_sd: float
    level_sd: float


@dataclasses.dataclass(frozen=True)
class Fit:
    """The fitted levels of one series and the steps between them."""

    steps: list[Step]
    levels: list[float]
    label_means: list[float]  #: geometric means
    noise_sd: float  #: log units; of a label mean when ``noise_source`` is "labels"
    noise_source: str
    noise_df: int
    dispersion: float  #: about 1 without label noise
    penalty: float
    confidence: float
    dropped_runs: int = 0
    runs: tuple[int, ...] = ()  #: runs per label, outliers left out
    run_sd: float = 0.0  #: pooled within-label sd (log units)
    departed_labels: tuple[int, ...] = ()
    departure: Departure | None = None

    @property
    def change(self) -> float:
        """Newest fitted level over the first (1.0 without a step)."""
        return self.levels[-1] / self.levels[0] if self.levels else 1.0


def _drop_outliers(logs: list[np.ndarray]) -> tuple[list[np.ndarray], int]:
    """Leave out far outlier runs (labels of 3+ runs): a busy neighbour can halve one run."""
    devs = []
    for a in logs:
        if a.size >= 3:
            d = np.sort(np.abs(a - np.median(a)))
            devs.append(d[1:] if a.size % 2 else d)
    if not devs or sum(d.size for d in devs) < 4:
        return logs, 0
    sd = max(float(np.median(np.concatenate(devs))) * _MAD_TO_SD, MIN_SD)
    out, dropped = [], 0
    for a in logs:
        if a.size >= 3:
            keep = np.abs(a - np.median(a)) <= OUTLIER_SDS * sd
            dropped += int(a.size - keep.sum())
            a = a[keep]
        out.append(a)
    return out, dropped


_FACTOR_GRID = 4000


@functools.lru_cache(maxsize=1)
def _half_normal_squares() -> tuple[np.ndarray, np.ndarray]:
    u = (np.arange(_FACTOR_GRID) + 0.5) / _FACTOR_GRID
    return u, np.array([_NORMAL.inv_cdf(0.5 + 0.5 * v) ** 2 for v in u])


@functools.lru_cache(maxsize=1024)
def _kept_share_factor(n: int, k: int) -> float:
    """Expected mean of the ``k`` smallest of ``n`` squared standard normals."""
    if k >= n:
        return 1.0
    u, g = _half_normal_squares()
    j = np.arange(k)[:, None]
    log_pmf = (
        math.lgamma(n)
        - np.array([math.lgamma(i + 1) + math.lgamma(n - i) for i in range(k)])[:, None]
        + j * np.log(u)
        + (n - 1 - j) * np.log1p(-u)
    )
    below = np.exp(log_pmf).sum(axis=0)
    return float(n / k * np.mean(g * below))


def _kept_variance(sq: np.ndarray) -> np.ndarray:
    """Normal variance from squares ``sq`` (last axis), the largest left out, the rest rescaled."""
    n = sq.shape[-1]
    k = max(1, math.floor(NOISE_KEPT_SHARE * n))
    low = np.partition(sq, k - 1, axis=-1)[..., :k]
    out: np.ndarray = low.mean(axis=-1) / _kept_share_factor(n, k)
    return out


#: Variance of the median of 2, 4 and 6 standard normal values.
_MEDIAN_VARIANCE = {2: 0.5, 4: 0.298, 6: 0.215}


def _median(values: np.ndarray) -> np.ndarray:
    """Median along the last axis (a sort beats np.median for a few values)."""
    s = np.sort(values, axis=-1)
    k = s.shape[-1]
    out: np.ndarray = s[..., k // 2] if k % 2 else (s[..., k // 2 - 1] + s[..., k // 2]) / 2
    return out


def _neighbour_residuals(means: np.ndarray) -> np.ndarray:
    x = np.atleast_2d(means)
    n = x.shape[-1]
    out = np.empty_like(x)
    for pos in range(n):
        h = min(3, pos, n - 1 - pos)
        if h == 0:
            near = x[:, 1:3] if pos == 0 else x[:, n - 3 : n - 1]
        elif 3 <= pos <= n - 4:
            continue
        else:
            near = np.concatenate([x[:, pos - h : pos], x[:, pos + 1 : pos + h + 1]], axis=-1)
        out[:, pos] = (x[:, pos] - _median(near)) / math.sqrt(1 + _MEDIAN_VARIANCE[near.shape[-1]])
    if n >= 7:
        win = np.lib.stride_tricks.sliding_window_view(x, 7, axis=-1)
        med = _median(np.concatenate([win[..., :3], win[..., 4:]], axis=-1))
        out[:, 3 : n - 3] = (x[:, 3 : n - 3] - med) / math.sqrt(1 + _MEDIAN_VARIANCE[6])
    return out


def _label_noise(means: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Label-to-label variance of a label mean: ``(per label (rows, L), whole series (rows,))``."""
    means = np.atleast_2d(means)
    labels = means.shape[-1]
    # a consecutive difference has twice a label's variance
    whole = _kept_variance(np.diff(means, axis=-1) ** 2 / 2)
    if labels >= 3:
        sq = _neighbour_residuals(means) ** 2
        # a disturbed label is one residual but two differences; a step is one difference but
        # moves every residual of a short series
        whole = np.minimum(whole, _kept_variance(sq))
    whole = np.maximum(whole, MIN_SD**2)
    if labels <= LOCAL_NOISE_LABELS:
        return np.repeat(whole[:, None], labels, axis=-1), whole
    windows = np.lib.stride_tricks.sliding_window_view(sq, LOCAL_NOISE_LABELS, axis=-1)
    local = _kept_variance(windows)
    first = np.clip(np.arange(labels) - LOCAL_NOISE_LABELS // 2, 0, labels - LOCAL_NOISE_LABELS)
    per_label = np.maximum(local[:, first], LOCAL_NOISE_FLOOR * whole[:, None])
    return per_label, whole


def _run_noise_labels(df: np.ndarray) -> int:
    return 2 * max(2, math.ceil(LOCAL_NOISE_LABELS / 2 / max(float(df.mean()), 1.0))) + 1


def _run_noise(ss: np.ndarray, df: np.ndarray) -> np.ndarray:
    ss = np.atleast_2d(ss)
    labels = ss.shape[-1]
    whole = np.maximum(ss.sum(axis=-1) / max(float(df.sum()), 1.0), MIN_SD**2)
    width = _run_noise_labels(df)
    half = width // 2
    if labels <= width:
        return np.repeat(whole[:, None], labels, axis=-1)
    c_ss = np.concatenate([np.zeros((ss.shape[0], 1)), np.cumsum(ss, axis=-1)], axis=-1)
    c_df = np.concatenate([[0.0], np.cumsum(df)])
    first = np.clip(np.arange(labels) - half, 0, labels - width)
    pooled = (c_ss[:, first + width] - c_ss[:, first]) / np.maximum(
        c_df[first + width] - c_df[first], 1.0
    )
    out: np.ndarray = np.maximum(pooled, LOCAL_NOISE_FLOOR * whole[:, None])
    return out


def _running_median(means: np.ndarray) -> np.ndarray:
    """Centred running median, narrowing to 5 and 3 labels at the ends."""
    x = np.atleast_2d(means)
    n = x.shape[-1]
    out: np.ndarray = x.copy()
    for width in range(RUNNING_MEDIAN_LABELS, 2, -2):
        if n < width:
            continue
        h = width // 2
        med = _median(np.lib.stride_tricks.sliding_window_view(x, width, axis=-1))
        if width == RUNNING_MEDIAN_LABELS:
            out[:, h : n - h] = med
        else:
            out[:, h] = med[:, 0]
            out[:, n - h - 1] = med[:, -1]
    if n >= 3:
        out[:, 0] = _median(x[:, :3])
        out[:, -1] = _median(x[:, -3:])
    return out


def _departing(means: np.ndarray, var: np.ndarray) -> np.ndarray:
    """Labels far from the running median; never the newest."""
    x = np.atleast_2d(means)
    if x.shape[-1] < 3:
        return np.zeros(x.shape, dtype=bool)
    out: np.ndarray = np.abs(x - _running_median(x)) > OUTLIER_LABEL_SDS * np.sqrt(var)
    out[:, -1] = False
    return out


def _dispersion(means: np.ndarray, var: np.ndarray) -> float:
    """Label-to-label scatter over replicate variance: about 1 without label-level noise."""
    d2 = np.diff(means, axis=-1) ** 2 / (var[..., :-1] + var[..., 1:])
    return float(np.quantile(d2, _DISPERSION_Q)) / _CHI2_1_Q


@functools.lru_cache(maxsize=256)
def null_dispersion(counts: tuple[int, ...], alpha: float, sims: int = NULL_SIMULATIONS) -> float:
    """The ``1 - alpha`` null quantile of :func:`_dispersion`."""
    n = np.asarray(counts, dtype=np.float64)
    rng = np.random.default_rng(20261201 + n.size)
    df = int(np.sum(n - 1))
    means = rng.standard_normal((sims, n.size)) / np.sqrt(n)
    s2 = rng.chisquare(df, sims) / df
    d2 = np.diff(means, axis=-1) ** 2 / ((1 / n[:-1] + 1 / n[1:]) * s2[:, None])
    return float(np.quantile(np.quantile(d2, _DISPERSION_Q, axis=-1) / _CHI2_1_Q, 1.0 - alpha))


def _split_stats(means: np.ndarray, w: np.ndarray) -> np.ndarray:
    """Chi-square of each single split k = 1..L-1 (columns); weight 0 leaves a label out."""
    cw = np.cumsum(w, axis=-1)
    cwm = np.cumsum(means * w, axis=-1)
    wa = cw[..., :-1]
    wb = cw[..., -1:] - wa
    both = (wa > 0) & (wb > 0)
    wa_, wb_ = np.where(both, wa, 1.0), np.where(both, wb, 1.0)
    ma = cwm[..., :-1] / wa_
    mb = (cwm[..., -1:] - cwm[..., :-1]) / wb_
    out: np.ndarray = np.where(both, wa_ * wb_ / (wa_ + wb_) * (ma - mb) ** 2, 0.0)
    return out


@functools.lru_cache(maxsize=256)
def null_penalty(
    counts: tuple[int, ...], alpha: float, source: str, sims: int = NULL_SIMULATIONS
) -> float:
    """``1 - alpha`` null quantile of the largest split chi-square, simulated (seeded) with the
    fit's own estimator."""
    n = np.asarray(counts, dtype=np.float64)
    if n.size < 2:
        return math.inf
    rng = np.random.default_rng(20261130 + n.size)
    stats = []
    for done in range(0, sims, _SIM_CHUNK):
        rows = min(_SIM_CHUNK, sims - done)
        means = rng.standard_normal((rows, n.size)) / np.sqrt(n)
        if source == "replicates":
            var = _run_noise(rng.chisquare(np.maximum(n - 1, 1e-9), (rows, n.size)), n - 1) / n
        else:
            var = _label_noise(means)[0]
        w = np.where(_departing(means, var), 0.0, 1.0 / var)
        stats.append(_split_stats(means, w).max(axis=-1))
    return float(np.quantile(np.concatenate(stats), 1.0 - alpha))


def _optimal_partition(means: np.ndarray, w: np.ndarray, penalty: float) -> list[int]:
    """Segment starts (0 first) minimizing misfit + penalty x steps."""
    n = means.size
    z = np.concatenate([[0.0], np.cumsum(w)])
    zm = np.concatenate([[0.0], np.cumsum(w * means)])
    zmm = np.concatenate([[0.0], np.cumsum(w * means * means)])
    kept = np.concatenate([[0], np.cumsum(w > 0)])
    best = np.zeros(n + 1)
    prev = np.zeros(n + 1, dtype=np.int64)
    for j in range(1, n + 1):
        i = np.arange(j)
        sw = z[j] - z[i]
        safe = np.where(sw > 0, sw, 1.0)
        cost = np.where(sw > 0, (zmm[j] - zmm[i]) - (zm[j] - zm[i]) ** 2 / safe, 0.0)
        total = best[i] + cost + np.where(i > 0, penalty, 0.0)
        if j < n:
            total = np.where(kept[j] - kept[i] >= MIN_SEGMENT_LABELS, total, np.inf)
        k = int(np.argmin(total))
        best[j] = total[k]
        prev[j] = k
    starts = []
    j = n
    while j > 0:
        starts.append(int(prev[j]))
        j = int(prev[j])
    return sorted(starts)


def _levels(means: np.ndarray, w: np.ndarray, starts: list[int]) -> np.ndarray:
    bounds = [*starts, means.size]
    levels = np.empty(means.size)
    for a, b in zip(bounds[:-1], bounds[1:], strict=True):
        sw = float(np.sum(w[a:b]))
        levels[a:b] = (
            float(np.sum(w[a:b] * means[a:b]) / sw) if sw > 0 else float(np.mean(means[a:b]))
        )
    return levels


def _place_left_out(means: np.ndarray, w: np.ndarray, starts: list[int]) -> list[int]:
    """Left-out labels (weight 0) after a step join the level before when nearer it."""
    out = [0]
    bounds = [*starts, means.size]
    for s in range(1, len(starts)):
        a, k, b = out[-1], bounds[s], bounds[s + 1]
        before = float(np.sum(w[a:k] * means[a:k]) / np.sum(w[a:k]))
        after = float(np.sum(w[k:b] * means[k:b]) / np.sum(w[k:b]))
        while k < b - 1 and w[k] == 0 and abs(means[k] - before) < abs(means[k] - after):
            k += 1
        out.append(k)
    return out


def detect_steps(
    groups: Sequence[Sequence[float] | np.ndarray], alpha: float = DEFAULT_ALPHA
) -> Fit:
    """Fit levels to labels (run values > 0) and find steps; ``alpha``: chance a flat series shows
    one. Raises ValueError on bad input."""
    if not 0 < alpha < 0.5:
        raise ValueError(f"alpha must be in (0, 0.5), got {alpha}")
    logs = []
    for g in groups:
        arr = np.asarray(g, dtype=np.float64)
        if arr.size == 0 or not np.all(np.isfinite(arr)) or np.any(arr <= 0):
            raise ValueError("every label needs at least one positive, finite value")
        logs.append(np.log(arr))
    logs, dropped = _drop_outliers(logs)
    n = np.array([a.size for a in logs], dtype=np.float64)
    means = np.array([float(a.mean()) for a in logs])
    level_of = [float(math.exp(m)) for m in means]
    ss = float(sum(float(np.sum((a - a.mean()) ** 2)) for a in logs))
    df_w = int(np.sum(n - 1))
    runs = tuple(int(x) for x in n)
    run_sd = math.sqrt(ss / df_w) if df_w else 0.0
    if means.size < 2:
        return Fit(
            [],
            level_of,
            level_of,
            run_sd,
            "replicates",
            df_w,
            0.0,
            math.inf,
            1 - alpha,
            dropped,
            runs,
            run_sd,
        )
    s2 = 0.0
    source = "labels"
    dispersion = 0.0
    if df_w >= MIN_REPLICATE_DF:
        s2 = max(ss / df_w, MIN_SD**2)
        dispersion = _dispersion(means, s2 / n)
        if means.size < 3 or dispersion <= null_dispersion(runs, alpha):
            source = "replicates"
    if source == "replicates":
        var = _run_noise(np.array([float(np.sum((a - a.mean()) ** 2)) for a in logs]), n - 1)[0] / n
        width = _run_noise_labels(n - 1)
        pooled = np.convolve(n - 1, np.ones(width), "valid") if means.size > width else [df_w]
        noise_df = int(min(df_w, float(np.min(pooled))))
        noise_sd = math.sqrt(s2)
    else:
        # a label's runs share one machine state
        local, whole = _label_noise(means)
        var = np.maximum(local[0], s2 / n)
        noise_df = max(means.size - 2, 1)
        noise_sd = math.sqrt(max(float(whole[0]), float(np.max(s2 / n))))
    if source == "labels" and means.size < MIN_LABELS_FOR_LABEL_NOISE:
        # 1-2 differences cannot tell noise from a step: one level
        w = 1.0 / var
        flat = [float(math.exp(float(np.sum(w * means) / np.sum(w))))] * means.size
        return Fit(
            [],
            flat,
            level_of,
            noise_sd,
            source,
            noise_df,
            dispersion,
            math.inf,
            1 - alpha,
            dropped,
            runs,
            run_sd,
        )
    departed = _departing(means, var)[0]
    w = np.where(departed, 0.0, 1.0 / var)
    penalty = null_penalty(runs, alpha, source)
    starts = _optimal_partition(means, w, penalty)
    departure = None
    kept_runs = np.where(w > 0, n, 0.0)
    first: int | None = None
    if len(starts) > 1 and float(np.sum(kept_runs[starts[-1] :])) < MIN_RUNS:
        # a new level on fewer runs than compare needs a side: a departure
        first = int(starts[-1] + np.argmax(w[starts[-1] :] > 0))
        starts = starts[:-1]
    elif runs[-1] < MIN_RUNS:
        first = means.size - 1
    if first is not None:
        departure = _departure(means, var, w, starts[-1], first, n, alpha, noise_df)
        if departure is not None:
            w = np.where(np.arange(means.size) >= first, 0.0, w)
    starts = _place_left_out(means, w, starts)
    levels = _levels(means, w, starts)
    # deferred: scipy.special (the t quantile) loads only when a step is tested
    from katra_trace.analysis.intervals import t_ppf

    q_t = float(t_ppf(1 - alpha / 2, noise_df))
    q_loc = _NORMAL.inv_cdf(1 - alpha / 2) ** 2
    bounds = [*starts, means.size]
    out: list[Step] = []
    for s in range(1, len(starts)):
        a, k, b = bounds[s - 1], bounds[s], bounds[s + 1]
        wa, wb = float(np.sum(w[a:k])), float(np.sum(w[k:b]))
        mu_a = float(np.sum(w[a:k] * means[a:k]) / wa)
        mu_b = float(np.sum(w[k:b] * means[k:b]) / wb)
        delta = mu_b - mu_a
        se = math.sqrt(1 / wa + 1 / wb)
        split = _split_stats(means[a:b], w[a:b])  # split j+1 = start at a + j + 1
        near = np.flatnonzero(split >= split.max() - q_loc) + a + 1
        out.append(
            Step(
                index=k,
                start_low=int(near.min()),
                start_high=int(near.max()),
                ratio=math.exp(delta),
                ratio_low=math.exp(delta - q_t * se),
                ratio_high=math.exp(delta + q_t * se),
                z=delta / se,
                level_before=math.exp(mu_a),
                level_after=math.exp(mu_b),
            )
        )
    return Fit(
        out,
        [float(math.exp(v)) for v in levels],
        level_of,
        noise_sd,
        source,
        noise_df,
        dispersion,
        penalty,
        1 - alpha,
        dropped,
        runs,
        run_sd,
        tuple(int(i) for i in np.flatnonzero(departed)),
        departure,
    )


def _departure(
    means: np.ndarray,
    var: np.ndarray,
    w: np.ndarray,
    start: int,
    first: int,
    n: np.ndarray,
    alpha: float,
    noise_df: int,
) -> Departure | None:
    """A :class:`Departure` when labels from ``first`` differ from ``start:first``."""
    wa, wb = float(np.sum(w[start:first])), float(np.sum(w[first:]))
    if wa <= 0 or wb <= 0:
        return None
    before = float(np.sum(w[start:first] * means[start:first]) / wa)
    after = float(np.sum(w[first:] * means[first:]) / wb)
    delta = after - before
    se = math.sqrt(1 / wa + 1 / wb)
    if abs(delta) < _NORMAL.inv_cdf(1 - alpha / 2) * se:
        return None
    from katra_trace.analysis.intervals import t_ppf  # deferred: scipy.special

    q_t = float(t_ppf(1 - alpha / 2, noise_df))
    kept = w[first:] > 0
    return Departure(
        index=first,
        labels=int(kept.sum()),
        runs=int(np.sum(n[first:][kept])),
        ratio=math.exp(delta),
        ratio_low=math.exp(delta - q_t * se),
        ratio_high=math.exp(delta + q_t * se),
        z=delta / se,
        level_before=math.exp(before),
        level=math.exp(after),
        run_sd=math.sqrt(float(np.mean((var[first:] * n[first:])[kept]))),
        level_sd=math.sqrt(1 / wa),
    )


_MAX_LABELS_SIMULATED = 400  # the penalty grows slowly beyond
_RESOLUTION_SIMULATIONS = 2000


@dataclasses.dataclass(frozen=True)
class Resolution:
    """Why a fit shows no step, and what would resolve one of ``step_pct``."""

    source: str  #: "labels", "replicates" or "one label"
    noise_pct: float  #: sd of a label's level or of one run, %
    run_pct: float  #: %
    dispersion: float
    labels: int
    runs: int  #: median per label
    step_pct: float
    labels_needed: int | None  #: None: already enough
    runs_needed: int | None

    def text(self) -> str:
        if self.source == "one label":
            return "a single label: a step needs at least 2 labels"
        if (
            self.source == "labels"
            and self.labels < MIN_LABELS_FOR_LABEL_NOISE
            and self.dispersion == 0
        ):
            return (
                f"{self.labels} labels of one run each: label-to-label noise needs at least "
                f"{MIN_LABELS_FOR_LABEL_NOISE} labels, so no step can be established yet (give "
                "each label several runs, or compare the two labels' traces with katra3d compare)"
            )
        step = f"the {self.step_pct:.3g} % change seen"
        if self.source == "labels":
            if self.dispersion > 0:
                times = (
                    f"{self.dispersion:,.0f}"
                    if self.dispersion >= 100
                    else f"{self.dispersion:.3g}"
                )
                noise = (
                    f"label-to-label dispersion {times}x the run noise (a label's level "
                    f"scatters {self.noise_pct:.2g} % between labels, its runs {self.run_pct:.2g} "
                    "%)"
                )
            else:
                noise = f"label-to-label spread {self.noise_pct:.2g} % (one run a label)"
            if self.labels_needed is None:
                need = f"{self.labels} labels resolve {step} most of the time; none was found here"
            else:
                more = (
                    "more runs a label do not help"
                    if self.dispersion > 0
                    else "or several runs a label, whose spread then is the noise"
                )
                need = (
                    f"about {self.labels_needed:,} labels at that scatter would resolve {step} "
                    f"({self.labels} now; {more})"
                )
            return f"{noise}: {need}"
        noise = f"run-to-run spread {self.noise_pct:.2g} %"
        if self.runs_needed is None:
            return (
                f"{noise}: {self.runs} runs a label resolve {step} most of the time; none was "
                "found here"
            )
        return (
            f"{noise}: about {self.runs_needed} runs a label would resolve {step} "
            f"({self.runs} now, {self.labels} labels)"
        )


def resolution(fit: Fit, step_pct: float, alpha: float) -> Resolution:
    """What keeps ``fit`` from showing a step of ``step_pct`` percent."""
    # deferred: intervals loads scipy.stats, needed only for an explanation
    from katra_trace.analysis.intervals import TARGET_POWER

    labels = len(fit.label_means)
    runs = int(np.median(fit.runs)) if fit.runs else 1
    run_pct = 100 * fit.run_sd
    if labels < 2:
        return Resolution(
            "one label", 100 * fit.noise_sd, run_pct, 0.0, labels, runs, step_pct, 2, None
        )
    delta = math.log1p(step_pct / 100)
    z = _NORMAL.inv_cdf(TARGET_POWER)
    if fit.noise_source == "labels":
        sigma = fit.noise_sd
        n_labels = max(labels, MIN_LABELS_FOR_LABEL_NOISE)
        need = n_labels
        for _ in range(8):
            c = null_penalty(
                (1,) * min(n_labels, _MAX_LABELS_SIMULATED),
                alpha,
                "labels",
                _RESOLUTION_SIMULATIONS,
            )
            need = max(
                MIN_LABELS_FOR_LABEL_NOISE, math.ceil((2 * sigma * (math.sqrt(c) + z) / delta) ** 2)
            )
            if need == n_labels or need > _MAX_LABELS_SIMULATED:
                break
            n_labels = need
        needed = None if need <= labels else need
        return Resolution(
            "labels", 100 * sigma, run_pct, fit.dispersion, labels, runs, step_pct, needed, None
        )
    # replicates: a mid-series split has L n / 2 runs a side
    c = fit.penalty if math.isfinite(fit.penalty) else null_penalty(fit.runs, alpha, "replicates")
    per_label = math.ceil((2 * fit.noise_sd * (math.sqrt(c) + z) / delta) ** 2 / labels)
    return Resolution(
        "replicates",
        100 * fit.noise_sd,
        run_pct,
        fit.dispersion,
        labels,
        runs,
        step_pct,
        None,
        per_label if per_label > runs else None,
    )


__all__ = [
    "Departure",
    "Fit",
    "MIN_REPLICATE_DF",
    "NULL_SIMULATIONS",
    "Resolution",
    "Step",
    "detect_steps",
    "null_penalty",
    "resolution",
]
