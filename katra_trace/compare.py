"""Compare frame times of two sets of runs (BASE vs NEW), scene by scene.

The entry point for opened traces, :func:`compare_traces`: it asks
:mod:`katra_trace.match` which scenes may be compared and on which clock,
and :mod:`katra_trace.decide` for the statistics and verdicts (the rule is
in docs/stats.md). The public names of both modules stay importable from here.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Sequence
from typing import Any

import numpy as np

from katra_trace.decide import (
    MIN_FRAMES,
    MIN_RUNS_FOR_RUN_LEVEL,
    VERDICTS,
    Comparison,
    SceneComparison,
    compare_runs,
    holm,
    min_runs_for_alpha,
)
from katra_trace.match import (
    CAPTURE_KEYS,
    HOST_KEYS,
    METRICS,
    capture_facts,
    host_facts,
    mismatch,
    resolve_metric,
    scene_params,
)


def compare_traces(
    base: Sequence[Any],
    new: Sequence[Any],
    *,
    metric: str = "auto",
    threshold_pct: float = 5.0,
    alpha: float = 0.01,
    allow_host_mismatch: bool = False,
    allow_param_mismatch: bool = False,
    seed: int = 0,
) -> Comparison:
    """Compare two sets of opened traces (each one run), scene by scene.

    A trace needs ``header``, ``events`` and ``strings`` (see katra_trace.reader.Trace).
    Scenes whose capture settings (size, samples, timing mode, params) or
    host (GL renderer, driver) differ are ``incomparable``, within a side or
    between sides; ``allow_host_mismatch`` downgrades host differences to a
    note, ``allow_param_mismatch`` scene-param differences (to measure what a
    param change costs).
    """
    from katra_trace.stats import scene_durations

    durations = {
        side: [scene_durations(t.events, list(t.strings)) for t in traces]
        for side, traces in (("base", base), ("new", new))
    }
    headers = [t.header for t in (*base, *new)]
    clocks = {c for side in durations.values() for run in side for per in run.values() for c in per}
    chosen = resolve_metric(headers, clocks, metric)
    notes: list[str] = []
    incomparable: dict[str, str] = {}
    runs: dict[str, dict[str, list[np.ndarray]]] = {"base": {}, "new": {}}
    host_notes: set[str] = set()
    scenes = list(dict.fromkeys(s for side in durations.values() for run in side for s in run))
    for scene in scenes:
        facts: dict[str, list[dict[str, Any]]] = {"base": [], "new": []}
        for side, traces in (("base", base), ("new", new)):
            for t, run in zip(traces, durations[side], strict=True):
                if scene in run:
                    facts[side].append({**capture_facts(t.header, scene), **host_facts(t.header)})
        allowed = {k for k, ok in (("renderer", allow_host_mismatch), ("driver", allow_host_mismatch),
                                   ("params", allow_param_mismatch)) if ok}
        reason = mismatch(facts, allowed, host_notes)
        if reason:
            incomparable[scene] = reason
            continue
        for side in ("base", "new"):
            per_run = [run[scene] for run in durations[side] if scene in run]
            have = [r[chosen] for r in per_run if chosen in r]
            if per_run and not have:
                found = sorted({c for r in per_run for c in r})
                incomparable[scene] = (f"no {chosen} frame times in {side.upper()} "
                                       f"(found: {', '.join(found) or 'none'}); try --metric")
                break
            if have:
                runs[side][scene] = have
    notes.extend(sorted(host_notes))
    result = compare_runs(runs["base"], runs["new"], threshold_pct=threshold_pct, alpha=alpha,
                          seed=seed, metric=chosen, incomparable=incomparable)
    return dataclasses.replace(result, notes=tuple(notes))



__all__ = [
    "CAPTURE_KEYS",
    "Comparison",
    "HOST_KEYS",
    "METRICS",
    "MIN_FRAMES",
    "MIN_RUNS_FOR_RUN_LEVEL",
    "SceneComparison",
    "VERDICTS",
    "capture_facts",
    "compare_runs",
    "compare_traces",
    "holm",
    "host_facts",
    "min_runs_for_alpha",
    "resolve_metric",
    "scene_params",
]
