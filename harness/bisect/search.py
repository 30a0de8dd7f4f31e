"""The bisection itself: GOOD, then BAD, then the commit halfway between the last like GOOD and the
first like BAD, until one commit is left; and what it found, as data.

Every commit measured is recorded in ``DIR/bisect.json`` before the next is started
(:func:`katra3d.harness.bisect.state.write_state`), so ``--resume`` continues without measuring a commit
twice. The classification is :func:`katra_trace.analysis.bisection.classify`'s; skipped commits
(failed to capture, not comparable, undecided) are stepped around, as ``git bisect skip`` does.
"""

from __future__ import annotations

import dataclasses
import math
from collections.abc import Mapping
from typing import Any

from katra3d.harness.versions.git import Commit
from katra3d.harness.bisect.measure import Measured, Trees, Workspace, measure
from katra3d.harness.bisect.state import BISECT_FILE, CommitResult, write_state
from katra_trace.analysis.bisection import (
    Effect,
    classify,
    next_ranges,
    partial_scenes,
    shares,
    target_scenes,
)
from katra_trace.errors import ConfigError
from katra_trace.metrics import is_count
from katra_trace.units import format_change_pct

#: Statuses of a bisection (``status`` in bisect.json) and the exit code each ends with.
STATUS_EXIT = {"running": 2, "found": 0, "ambiguous": 2, "all skipped": 2, "nothing to bisect": 2}


class BisectError(ConfigError):
    """A bisection that cannot go on or found nothing (exit 2); its state and outcome are written."""


@dataclasses.dataclass(frozen=True)
class Outcome:
    """What a bisection found (or how far it got): ``status`` (:data:`STATUS_EXIT`), the first bad commit
    (``first_bad``) or the commits it is one of (``candidates``), the last commit like GOOD, the
    culprit's share of BAD's change per target scene and the ranges suggested next, and the one line
    that says so."""

    status: str
    message: str
    first_bad: Commit | None = None
    last_good: Commit | None = None
    candidates: tuple[Commit, ...] = ()
    explained: Mapping[str, tuple[float, float]] = dataclasses.field(default_factory=dict)
    partial: Mapping[str, float] = dataclasses.field(default_factory=dict)
    next_ranges: tuple[str, ...] = ()

    @property
    def exit_code(self) -> int:
        return STATUS_EXIT[self.status]

    def as_dict(self, tested: Mapping[str, CommitResult]) -> dict[str, Any]:
        """The top of bisect.json: what scripts read (``first_bad`` is the culprit's full sha)."""
        culprit = tested.get(self.first_bad.sha) if self.first_bad else None
        return {
            "status": self.status, "message": self.message, "exit_code": self.exit_code,
            "first_bad": self.first_bad.sha if self.first_bad else None,
            "first_bad_subject": self.first_bad.subject if self.first_bad else None,
            "last_good": self.last_good.sha if self.last_good else None,
            "candidates": [c.sha for c in self.candidates],
            "effect": [e.as_dict() for e in culprit.effects] if culprit else [],
            "explained": {s: {"before_pct": _pct(p), "culprit_pct": _pct(c), "step_pct": _pct(c - p)}
                          for s, (p, c) in self.explained.items()},
            "partial": bool(self.partial),
            "next_ranges": list(self.next_ranges),
        }


def _pct(share: float) -> float | None:
    return round(share * 100, 1) if math.isfinite(share) else None


def _record(c: Commit, m: Measured, state: str, reason: str) -> CommitResult:
    return CommitResult(sha=c.sha, subject=c.subject, state=state, reason=reason, effects=m.effects,
                        traces=m.traces, rounds=m.rounds, stopped=m.stopped, seconds=m.seconds, log=m.log,
                        images=dict(m.images))


def _effects_text(effects: tuple[Effect, ...]) -> str:
    return ", ".join(f"{e.scene} {format_change_pct(e.change_pct, 2)} {e.verdict}" for e in effects if not e.zone)


def _bounds(commits: tuple[Commit, ...], tested: Mapping[str, CommitResult]) -> tuple[int, int]:
    """(index of the last commit like GOOD before the first like BAD (-1: GOOD), index of that first)."""
    states = [tested[c.sha].state if c.sha in tested else "" for c in commits]
    hi = states.index("bad") if "bad" in states else len(commits) - 1
    lo = max((i for i in range(hi) if states[i] == "good"), default=-1)
    return lo, hi


def next_commit(commits: tuple[Commit, ...], tested: Mapping[str, CommitResult]) -> Commit | None:
    """The untested commit nearest the middle of the open range, or None when none is left to test."""
    lo, hi = _bounds(commits, tested)
    left = [i for i in range(lo + 1, hi) if commits[i].sha not in tested]
    if not left:
        return None
    middle = (lo + hi) / 2
    return commits[min(left, key=lambda i: (abs(i - middle), i))]


def outcome(ws: Workspace, tested: Mapping[str, CommitResult]) -> Outcome:
    """What the commits measured so far say (``running`` while commits are left to test)."""
    setup = ws.setup
    commits = setup.commits
    if next_commit(commits, tested) is not None:
        return Outcome("running", f"bisecting: {len(tested)} commit(s) measured")
    lo, hi = _bounds(commits, tested)
    last_good = setup.good if lo < 0 else commits[lo]
    between = commits[lo + 1: hi + 1]
    if len(between) > 1:
        if lo < 0 and hi == len(commits) - 1:
            return Outcome("all skipped", f"every commit between GOOD {setup.good.short} and BAD "
                           f"{setup.bad.short} was skipped ({len(between) - 1}); the first bad commit is one of "
                           f"them or BAD: see {BISECT_FILE} for why each was skipped",
                           last_good=last_good, candidates=between)
        return Outcome("ambiguous", f"the first bad commit is one of {len(between)}: "
                       f"{', '.join(c.short for c in between)} (the others were skipped; see {BISECT_FILE})",
                       last_good=last_good, candidates=between)
    culprit = commits[hi]
    parent = tested.get(last_good.sha) if lo >= 0 else None
    bad_effects = tested[setup.bad.sha].effects
    explained = shares(tested[culprit.sha].effects, parent.effects if parent else None, bad_effects)
    partial = partial_scenes(explained)
    ranges: list[str] = []
    if partial:
        before, after = next_ranges(explained)
        if before:
            ranges.append(f"{setup.good.short}..{last_good.short}")
        if after and culprit.sha != setup.bad.sha:
            ranges.append(f"{culprit.short}..{setup.bad.short}")
    message = f"first bad commit: {culprit.short} {culprit.subject}"
    return Outcome("found", message, first_bad=culprit, last_good=last_good, candidates=(culprit,),
                   explained=explained, partial=partial, next_ranges=tuple(ranges))


def run_bisection(ws: Workspace, tested: dict[str, CommitResult]) -> Outcome:
    """Measure GOOD, BAD, then the commits bisection picks, recording each in bisect.json; returns the
    outcome (also written there). Raises BisectError when GOOD or BAD cannot be measured, or BAD is not
    slower than GOOD (nothing to bisect)."""
    setup = ws.setup
    trees = Trees(ws)
    counts = is_count(setup.measure)

    def save() -> Outcome:
        found = outcome(ws, tested) if setup.bad.sha in tested and tested[setup.bad.sha].state == "bad" \
            else Outcome("running", "measuring GOOD and BAD")
        write_state(ws.root, setup, tested, found.as_dict(tested))
        return found

    try:
        if setup.good.sha not in tested:
            if counts:
                ws.progress(f"GOOD {setup.good.short} {setup.good.subject}: capturing ({setup.measure})")
                m = measure(ws, trees, setup.good)
                if m.failure:
                    raise BisectError(f"GOOD {setup.good.short} could not be measured: {m.failure}")
                tested[setup.good.sha] = _record(setup.good, m, "good", "GOOD")
            else:
                tested[setup.good.sha] = CommitResult(setup.good.sha, setup.good.subject, "good",
                                                      "GOOD (captured beside each commit, interleaved)")
            save()
        if setup.bad.sha not in tested:
            rounds = "" if counts else f", interleaved rounds with GOOD until decided, at most {setup.max_rounds}"
            ws.progress(f"BAD {setup.bad.short} {setup.bad.subject}: capturing ({setup.measure}{rounds})")
            m = measure(ws, trees, setup.bad)
            if m.failure:
                raise BisectError(f"BAD {setup.bad.short} could not be measured: {m.failure}")
            targets = target_scenes(m.effects)
            state = "bad" if targets else "good"
            tested[setup.bad.sha] = _record(setup.bad, m, state, f"BAD: {_effects_text(m.effects)}")
            save()
            ws.progress(f"BAD against GOOD: {_effects_text(m.effects)}")
        bad = tested[setup.bad.sha]
        if bad.state != "bad":
            message = (f"nothing to bisect: BAD {setup.bad.short} is not slower than GOOD {setup.good.short} "
                       f"by the decision model ({_effects_text(bad.effects)})")
            write_state(ws.root, setup, tested, dict(Outcome("nothing to bisect", message).as_dict(tested)))
            raise BisectError(message)
        steps = 0
        while (c := next_commit(setup.commits, tested)) is not None:
            steps += 1
            lo, hi = _bounds(setup.commits, tested)
            left = sum(1 for x in setup.commits[lo + 1: hi] if x.sha not in tested)
            ws.progress(f"step {steps} ({left} commit(s) left, about {max(1, math.ceil(math.log2(left + 1)))} "
                        f"step(s)): {c.short} {c.subject}")
            m = measure(ws, trees, c)
            if m.failure:
                result = _record(c, m, "skip", f"skipped: {m.failure}")
            else:
                verdict = classify(m.effects, bad.effects)
                result = _record(c, m, verdict.state, verdict.reason if verdict.state != "skip"
                                 else f"skipped: {verdict.reason}")
            tested[c.sha] = result
            save()
            ws.progress(f"  {c.short}: {result.reason}")
        return save()
    finally:
        trees.close()


__all__ = ["STATUS_EXIT", "BisectError", "Outcome", "next_commit", "outcome", "run_bisection"]
