"""``python -m bench changepoints``: history's step detector beside Apache Otava's change points.

Not a default bench: it needs Apache Otava and its test data installed (``pip install
apache-otava==0.8.0 otava-test-data==0.1.9``; without them it exits 3 with that line), and runs
for about half a minute. Both detectors see the same series, one value a label:

* **otava-test-data**: ``CombinationGenerator(lengths=[50, 500], seed=S).generate_all_test_cases()``
  at two seeds, the periodic pattern (``phase_change``) left out. A series' level changes are its
  change points of type ``step``, ``regression_start`` and ``regression_end``; its outliers and
  changes of variance are not level changes.
* **CI-like**: histories of 40, 100 or 200 labels of one run each, lognormal run noise of 2-8 %
  (drawn per history), a busy neighbour doubling 4 % of the runs, and 0-2 steps of 4-30 % up or
  down, at least 8 labels apart and 5 from either end.

A detection within 3 labels of a level change (10 in series of 500) matches it, one detection
to one change, the nearest first; every other detection is false. Each row is one detector on
one set: F1, with precision, recall and the no-change series (no level change) that show any
detection. katra3d runs :func:`katra_trace.history.steps.detect_steps` at the default alpha;
Otava runs ``otava.analysis.compute_change_points`` with a window of 50 and p 0.001.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable, Sequence
from typing import Any

from bench._core import BenchContext, Row, at_least, bench

#: What to install when Otava or its test data are missing.
INSTALL = "pip install apache-otava==0.8.0 otava-test-data==0.1.9"
#: Otava's change-point types that are changes of level.
LEVEL_CHANGES = frozenset({"step", "regression_start", "regression_end"})
#: The otava-test-data seeds (42: the one the comparison was first made at) and the CI-like ones.
OTAVA_SEEDS = (42, 2028)
CI_SEEDS = (3001, 3002)
#: CI-like histories per seed, and their lengths (in turn).
CI_HISTORIES = 150
CI_LENGTHS = (40, 100, 200)
#: Otava's settings: its default window and the p-value of its documentation's examples.
OTAVA_WINDOW = 50
OTAVA_MAX_PVALUE = 0.001


@dataclasses.dataclass(frozen=True)
class Case:
    """One series: its values (one a label), where its level changes, and the matching tolerance."""

    name: str
    values: tuple[float, ...]
    changes: tuple[int, ...]  #: first label of each new level
    tolerance: int  #: labels a detection may be away from a change and still match it
    outliers_only: bool = False  #: no level change, and its only departures are single values


@dataclasses.dataclass(frozen=True)
class Score:
    """One detector on one set of cases."""

    matched: int
    false: int
    missed: int
    flagged: int  #: no-change cases with any detection
    no_change: int
    flagged_outliers_only: int
    outliers_only: int

    @property
    def precision(self) -> float:
        found = self.matched + self.false
        return self.matched / found if found else 1.0

    @property
    def recall(self) -> float:
        changes = self.matched + self.missed
        return self.matched / changes if changes else 1.0

    @property
    def f1(self) -> float:
        p, r = self.precision, self.recall
        return 2 * p * r / (p + r) if p + r else 0.0


def tolerance(length: int) -> int:
    """Labels a detection may be off: 3, or 10 in series of 500 labels or more."""
    return 10 if length >= 500 else 3


def matches(found: Sequence[int], changes: Sequence[int], within: int) -> int:
    """Detections matched one to one to changes at most ``within`` labels away, nearest first."""
    pairs = sorted(
        (abs(f - c), i, j)
        for i, f in enumerate(found)
        for j, c in enumerate(changes)
        if abs(f - c) <= within
    )
    used_found: set[int] = set()
    used_change: set[int] = set()
    for _, i, j in pairs:
        if i not in used_found and j not in used_change:
            used_found.add(i)
            used_change.add(j)
    return len(used_found)


def score(cases: Sequence[Case], found: Sequence[Sequence[int]]) -> Score:
    matched = false = missed = flagged = no_change = flagged_out = outliers_only = 0
    for case, hits in zip(cases, found, strict=True):
        m = matches(hits, case.changes, case.tolerance)
        matched += m
        false += len(hits) - m
        missed += len(case.changes) - m
        if not case.changes:
            no_change += 1
            flagged += bool(hits)
        if case.outliers_only:
            outliers_only += 1
            flagged_out += bool(hits)
    return Score(matched, false, missed, flagged, no_change, flagged_out, outliers_only)


def otava_cases(seed: int, lengths: Sequence[int]) -> list[Case]:
    """otava-test-data's combinations at ``seed``, the periodic pattern left out."""
    from otava_test_data.generators.combiner import CombinationGenerator

    out = []
    for ts in CombinationGenerator(lengths=list(lengths), seed=seed).generate_all_test_cases():
        kinds = {cp.change_type for cp in ts.change_points}
        if "phase" in kinds or "phase_change" in ts.generator_name:
            continue
        changes = tuple(
            sorted(int(cp.index) for cp in ts.change_points if cp.change_type in LEVEL_CHANGES)
        )
        values = tuple(float(v) for v in ts.data)
        out.append(
            Case(
                f"{ts.generator_name} L{len(values)}",
                values,
                changes,
                tolerance(len(values)),
                outliers_only=kinds == {"outlier"},
            )
        )
    return out


def ci_cases(seed: int, histories: int) -> list[Case]:
    """CI-like histories (module docstring), seeded."""
    import numpy as np

    rng = np.random.default_rng(seed)
    out = []
    for i in range(histories):
        labels = CI_LENGTHS[i % len(CI_LENGTHS)]
        noise = rng.uniform(0.02, 0.08)
        starts: list[int] = []
        for _ in range(int(rng.integers(0, 3))):
            while True:
                k = int(rng.integers(5, labels - 4))
                if all(abs(k - s) >= 8 for s in starts):
                    starts.append(k)
                    break
        level = np.ones(labels)
        for k in starts:
            level[k:] *= 1 + rng.uniform(0.04, 0.30) * rng.choice([-1.0, 1.0])
        values = level * np.exp(rng.normal(0.0, noise, labels))
        busy = rng.random(labels) < 0.04
        values = np.where(busy, 2 * values, values)
        out.append(
            Case(
                f"ci {labels} labels #{i}",
                tuple(float(v) for v in values),
                tuple(sorted(starts)),
                tolerance(labels),
                outliers_only=not starts and bool(busy.any()),
            )
        )
    return out


def katra3d_detector() -> Callable[[Sequence[float]], list[int]]:
    from katra_trace.analysis.defaults import DEFAULT_ALPHA
    from katra_trace.history.steps import detect_steps

    def detect(values: Sequence[float]) -> list[int]:
        return [s.index for s in detect_steps([[v] for v in values], DEFAULT_ALPHA).steps]

    return detect


def otava_detector() -> Callable[[Sequence[float]], list[int]]:
    from otava.analysis import compute_change_points

    def detect(values: Sequence[float]) -> list[int]:
        points, _weak = compute_change_points(
            list(values), window_len=OTAVA_WINDOW, max_pvalue=OTAVA_MAX_PVALUE
        )
        return [int(p.index) for p in points]

    return detect


def _require_otava() -> dict[str, Any]:
    """Otava's and its test data's versions; exit 3 with the line to run when either is missing."""
    from importlib import metadata

    from katra_trace.errors import ToolUnavailable

    try:
        import otava.analysis  # noqa: F401
        import otava_test_data.generators.combiner  # noqa: F401
    except ImportError as exc:
        raise ToolUnavailable(
            f"the changepoints bench needs Apache Otava and otava-test-data ({exc}): {INSTALL}"
        ) from None
    return {
        "apache-otava": metadata.version("apache-otava"),
        "otava-test-data": metadata.version("otava-test-data"),
    }


@bench(
    "changepoints",
    about="history's step detector beside Apache Otava: F1 on otava-test-data "
    "and CI-like histories",
    default=False,
)
def changepoints(ctx: BenchContext) -> list[Row]:
    ctx.facts.update(_require_otava())
    lengths = [50] if ctx.quick else [50, 500]
    sets = {
        "otava-test-data": [c for s in OTAVA_SEEDS for c in otava_cases(s, lengths)],
        "CI-like": [c for s in CI_SEEDS for c in ci_cases(s, ctx.scale(CI_HISTORIES, 20))],
    }
    about = {
        "otava-test-data": f"seeds {', '.join(map(str, OTAVA_SEEDS))}, lengths "
        f"{', '.join(map(str, lengths))}, periodic left out",
        "CI-like": f"seeds {', '.join(map(str, CI_SEEDS))}",
    }
    goals = {"otava-test-data": 0.85, "CI-like": 0.70}
    detectors = {"katra3d": katra3d_detector(), "Otava": otava_detector()}
    rows = []
    for set_name, cases in sets.items():
        f1 = {}
        for name, detect in detectors.items():
            ctx.log(f"{name} on {len(cases)} {set_name} series")
            result = score(cases, [detect(c.values) for c in cases])
            f1[name] = result.f1
            rows.append(
                Row(
                    f"{set_name} {name}",
                    f"F1 of level changes, {len(cases)} series ({about[set_name]})",
                    result.f1,
                    unit="F1",
                    target=at_least(goals[set_name]) if name == "katra3d" else None,
                    notes=f"precision {result.precision:.3f}, recall {result.recall:.3f}, "
                    f"flagged no-change {result.flagged}/{result.no_change} "
                    f"(outliers only {result.flagged_outliers_only}/"
                    f"{result.outliers_only})",
                )
            )
        rows.append(
            Row(
                f"{set_name} katra3d - Otava",
                "F1 of katra3d minus Otava's",
                f1["katra3d"] - f1["Otava"],
                unit="F1",
                target=at_least(0.0),
            )
        )
    return rows
