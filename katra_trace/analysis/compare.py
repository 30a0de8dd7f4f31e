"""BASE vs NEW scene by scene: ``match`` says what compares, ``decide`` the verdicts
(docs/stats.md)."""

from __future__ import annotations

import dataclasses
import math
from collections.abc import Mapping, Sequence
from typing import TYPE_CHECKING

import numpy as np

from katra_trace.analysis.counts import decide_counts
from katra_trace.analysis.decide import compare_runs
from katra_trace.analysis.defaults import (
    DEFAULT_COMPARE,
    SOFTWARE_TIME_DEFAULT,
    CompareOptions,
    batch_drift_sd,
)
from katra_trace.analysis.match import (
    capture_facts,
    codegen_facts,
    host_facts,
    mismatch,
    resolve_metric,
)
from katra_trace.analysis.sequential import SequentialRule
from katra_trace.analysis.stats import (
    reference_durations,
    scene_durations,
    scene_labels,
    zone_frame_totals,
)
from katra_trace.analysis.verdict import Comparison, SceneComparison, Verdict
from katra_trace.errors import ConfigError
from katra_trace.metrics import check_run_stat, is_count
from katra_trace.schema import REFERENCE_NAME, Clock, Kind, draw_pass

if TYPE_CHECKING:
    from katra_trace.io.reader import Trace


def _label(trace: Trace, side: str, index: int) -> str:
    path = getattr(trace, "path", None)
    return str(path) if path is not None else f"{side.upper()} run {index + 1}"


def _check_measure_modes(sides: Mapping[str, Sequence[Trace]]) -> None:
    modes = {
        side: sorted({t.header.capture_options.measure_mode for t in traces})
        for side, traces in sides.items()
    }
    kinds = {"counts" if is_count(m) else "time" for ms in modes.values() for m in ms}
    if len(kinds) > 1:
        raise ConfigError(
            f"cannot compare counts with times: BASE measured {' / '.join(modes['base'])}, NEW "
            f"{' / '.join(modes['new'])}; capture both sides with the same --measure"
        )


def _reference_workload(trace: Trace) -> str | None:
    for note in getattr(trace, "annotations", ()):
        if isinstance(note, dict) and note.get("type") == "reference":
            size, steps = note.get("size"), note.get("steps")
            if isinstance(size, list) and len(size) == 2:
                return f"{size[0]}x{size[1]}, {steps} steps"
            return f"size {size!r}, {steps} steps"
    return None


def _check_reference_workloads(sides: dict[str, list[Trace]]) -> None:
    """--normalize divides by the reference draw's time: all traces must time the same draw."""
    seen: dict[str, str] = {}
    for side, traces in sides.items():
        for i, t in enumerate(traces):
            what = _reference_workload(t)
            if what is not None:
                seen.setdefault(what, _label(t, side, i))
    if len(seen) > 1:
        found = "; ".join(f"{what} ({where})" for what, where in seen.items())
        raise ConfigError(
            f"--normalize: the traces time different reference draws ({found}); a ratio to one "
            "is not comparable with a ratio to another: capture both sides with one katra3d version"
        )


def _normalized(trace: Trace, scene: str, frames_ns: np.ndarray, label: str) -> np.ndarray:
    ref = reference_durations(trace.events, list(trace.strings)).get(scene, {}).get("wall")
    if ref is None or ref.size == 0 or not np.median(ref) > 0:
        raise ConfigError(
            f"--normalize: {label} has no reference markers ('{REFERENCE_NAME}', wall clock) for "
            "scene "
            f"'{scene}'; capture it with a katra3d that times the reference workload, or drop "
            "--normalize"
        )
    out: np.ndarray = frames_ns / float(np.median(ref))
    return out


def compare_traces(
    base: Sequence[Trace],
    new: Sequence[Trace],
    options: CompareOptions = DEFAULT_COMPARE,
    *,
    pairs: Sequence[tuple[int, int]] | None = None,
    sequential: SequentialRule | None = None,
    separate_batches: bool = False,
) -> Comparison:
    """Scenes whose settings or host differ are *incomparable* (``allow_*`` makes some a note);
    ``pairs``: ab rounds' (base, new) indexes. ConfigError when counts and times mix or
    ``normalize`` lacks reference markers."""
    metric, normalize, run_stat = options.metric, options.normalize, options.run_stat
    sides: dict[str, list[Trace]] = {"base": list(base), "new": list(new)}
    if pairs is not None:
        for i, j in pairs:
            if not (0 <= i < len(sides["base"]) and 0 <= j < len(sides["new"])):
                raise ValueError(f"pair ({i}, {j}) is out of range")
        sides = {
            "base": [sides["base"][i] for i, _ in pairs],
            "new": [sides["new"][j] for _, j in pairs],
        }
    _check_measure_modes(sides)
    durations = {
        side: [scene_durations(t.events, list(t.strings)) for t in traces]
        for side, traces in sides.items()
    }
    headers = [t.header for traces in sides.values() for t in traces]
    per_trace = [
        {c for per in run.values() for c in per} for side in durations.values() for run in side
    ]
    clocks = set().union(*per_trace) if per_trace else set()
    common = set.intersection(*per_trace) if per_trace else set()
    chosen = resolve_metric(headers, clocks, metric, common)
    count = is_count(chosen)
    choice = "option" if metric != "auto" else "counts" if count else "capture"
    default_stat = "median"
    if normalize:
        if count or metric not in ("auto", "wall"):
            raise ConfigError(
                f"--normalize divides wall time by the reference workload's; it does not apply "
                f"to --metric {chosen if metric == 'auto' else metric}"
            )
        chosen = "wall"
        _check_reference_workloads(sides)
    elif (
        choice == "capture"
        and chosen == "wall"
        and SOFTWARE_TIME_DEFAULT[0] in common
        and all(h.host_info.software for h in headers)
    ):
        chosen, default_stat = SOFTWARE_TIME_DEFAULT
        choice = "software default"
    run_stat = check_run_stat(
        default_stat if run_stat is None else run_stat, count=count, normalize=normalize
    )
    notes: list[str] = []
    incomparable: dict[str, str] = {}
    runs: dict[str, dict[str, list[np.ndarray]]] = {"base": {}, "new": {}}
    host_notes: set[str] = set()
    allowed = {
        k
        for k, ok in (
            ("renderer", options.allow_host_mismatch),
            ("driver", options.allow_host_mismatch),
            ("params", options.allow_param_mismatch),
            ("codegen", options.allow_codegen_mismatch),
        )
        if ok
    }
    scenes = list(dict.fromkeys(s for side in durations.values() for run in side for s in run))
    empty = np.empty(0)
    for scene in scenes:
        facts: dict[str, list[Mapping[str, object]]] = {"base": [], "new": []}
        for side, traces in sides.items():
            for t, run in zip(traces, durations[side], strict=True):
                if scene in run:
                    fact: dict[str, object] = {
                        **capture_facts(t.header, scene),
                        **host_facts(t.header, scene),
                    }
                    if count:
                        fact["codegen"] = codegen_facts(t.header, scene)
                    facts[side].append(fact)
        reason = mismatch(facts, allowed, host_notes)
        if reason:
            incomparable[scene] = reason
            continue
        for side, traces in sides.items():
            present = [run[scene] for run in durations[side] if scene in run]
            if present and not any(chosen in r for r in present):
                found = sorted({c for r in present for c in r})
                incomparable[scene] = (
                    f"no {chosen} frame {'counts' if count else 'times'} in {side.upper()} "
                    f"(found: {', '.join(found) or 'none'}); try --metric"
                )
                break
            series: list[np.ndarray] = []
            for i, (t, run) in enumerate(zip(traces, durations[side], strict=True)):
                values = run.get(scene, {}).get(chosen)
                if values is not None and normalize:
                    values = _normalized(t, scene, values, _label(t, side, i))
                if values is not None or pairs is not None:
                    series.append(empty if values is None else values)
            if any(v.size for v in series):
                runs[side][scene] = series
    notes.extend(sorted(host_notes))
    if normalize:
        notes.append(
            "normalized: each run's median frame wall divided by the median wall of its reference "
            "workload (values in x reference)"
        )
    if choice == "software default":
        notes.append(
            f"{chosen} {run_stat}: the default on a software renderer (the frames' CPU work, which "
            "a busy "
            f"neighbour does not stretch; chosen by python -m bench defaults, docs/stats.md); "
            f"--metric wall compares wall time"
        )
    if run_stat == "p10":
        notes.append(
            "p10: each run is reduced to the 10th percentile of its frames (the frames that "
            "nothing got in the way of), not the median; a change that slows only some frames does "
            "not show"
        )
    result = compare_runs(
        runs["base"],
        runs["new"],
        threshold_pct=options.threshold_pct,
        alpha=options.alpha,
        metric="wall/reference" if normalize else chosen,
        incomparable=incomparable,
        paired=pairs is not None,
        value_unit="x reference" if normalize else None,
        run_stat=run_stat,
        sequential=sequential if pairs is not None else None,
        drift_sd=batch_drift_sd("wall/reference" if normalize else chosen, run_stat)
        if separate_batches and pairs is None
        else 0.0,
    )
    if sequential is not None and pairs is not None:
        notes.append(f"sequential: {sequential.describe()} (docs/stats.md)")
    zones: tuple[SceneComparison, ...] = ()
    if count:
        zones = _zone_rows(result, sides, chosen)
    notes.extend(_draw_set_notes(sides))
    if chosen == "wall" and not normalize:
        notes.extend(_process_hint(result, sides, durations))
    return dataclasses.replace(result, notes=tuple(notes), zones=zones, metric_choice=choice)


NOISY_RUN_CV = 0.05


def _process_hint(
    result: Comparison,
    sides: Mapping[str, Sequence[Trace]],
    durations: Mapping[str, Sequence[Mapping[str, Mapping[str, np.ndarray]]]],
) -> list[str]:
    """Points to ``--metric process --stat p10`` when wall noise left software scenes undecided."""
    software = all(t.header.host_info.software for traces in sides.values() for t in traces)
    if not software:
        return []
    noisy = []
    for s in result.scenes:
        cv = max((c for c in (s.run_cv_base, s.run_cv_new) if math.isfinite(c)), default=0.0)
        if (
            s.verdict is not Verdict.INCONCLUSIVE
            or s.unit not in ("runs", "rounds")
            or cv <= NOISY_RUN_CV
        ):
            continue
        if all(
            "process" in run[s.scene]
            for side in durations.values()
            for run in side
            if s.scene in run
        ):
            noisy.append((s.scene, cv))
    if not noisy:
        return []
    worst = max(cv for _, cv in noisy)
    return [
        f"wall time varied up to {worst * 100:.0f} % from run to run "
        f"({', '.join(n for n, _ in noisy)}); "
        "on this software renderer, --metric process --stat p10 compares the frames' CPU work, "
        "which a busy "
        "neighbour does not stretch (docs/stats.md)"
    ]


def _draw_names(trace: Trace) -> dict[str, set[str]]:
    labels = scene_labels(trace.events, list(trace.strings))
    ev = trace.events
    zones = ev[(ev["kind"] == Kind.ZONE) & (ev["flags"] == 0)]
    out: dict[str, set[str]] = {}
    for sid in np.unique(zones["scene"]):
        known = {trace.name(int(n)) for n in np.unique(zones[zones["scene"] == sid]["name"])}
        names = {n for n in known if draw_pass(n, known) is not None}
        if names:
            out.setdefault(labels.get(int(sid), trace.name(int(sid))), set()).update(names)
    return out


def _draw_set_notes(sides: Mapping[str, Sequence[Trace]]) -> list[str]:
    """Draws pair by name, never by position."""
    names = {side: [_draw_names(t) for t in traces] for side, traces in sides.items()}
    merged: dict[str, dict[str, set[str]]] = {}
    for side, per_trace in names.items():
        for run in per_trace:
            for scene, draws in run.items():
                merged.setdefault(scene, {}).setdefault(side, set()).update(draws)
    notes = []
    for scene, per_side in sorted(merged.items()):
        base, new = per_side.get("base", set()), per_side.get("new", set())
        if not base or not new or base == new:
            continue
        only_new, only_base = sorted(new - base), sorted(base - new)
        detail = "; ".join(
            part
            for part in (
                f"only in NEW: {', '.join(only_new[:5])}{' ...' if len(only_new) > 5 else ''}"
                if only_new
                else "",
                f"only in BASE: {', '.join(only_base[:5])}{' ...' if len(only_base) > 5 else ''}"
                if only_base
                else "",
            )
            if part
        )
        notes.append(
            f"{scene}: the draw calls differ ({len(base)} draws in BASE, {len(new)} in NEW; "
            f"{detail}); "
            "draws are compared by name, and a draw on one side only is not compared"
        )
    return notes


def _zone_rows(
    result: Comparison, sides: Mapping[str, Sequence[Trace]], metric: str
) -> tuple[SceneComparison, ...]:
    """Per-zone count rows (which pass changed)."""
    clock = int(Clock[metric.upper()])
    totals = {
        side: [zone_frame_totals(t.events, list(t.strings), clock) for t in traces]
        for side, traces in sides.items()
    }
    rows: list[SceneComparison] = []
    threshold = result.threshold_pct / 100.0
    for s in result.scenes:
        if s.verdict is Verdict.INCOMPARABLE:
            continue
        zone_names = list(
            dict.fromkeys(
                z for side in totals.values() for run in side for z in run.get(s.scene, {})
            )
        )
        for zone in zone_names:
            per = {
                side: [run[s.scene][zone] for run in totals[side] if zone in run.get(s.scene, {})]
                for side in totals
            }
            rows.append(
                decide_counts(
                    s.scene,
                    per["base"],
                    per["new"],
                    threshold=threshold,
                    metric=metric,
                    zone=zone,
                    frame_base=s.level_base,
                )
            )
    return tuple(rows)


__all__ = ["compare_traces"]
