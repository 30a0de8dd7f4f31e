"""The bisection itself, in rounds: GOOD and BAD first (round 1), then the commits that split the
open range (after the last like GOOD, up to the first like BAD), until one commit is left; and what
it found, as data.

Counts measure up to ``jobs`` commits a round at once
(:func:`katra3d.harness.bisect.measure.capture_counted`): the ``jobs`` commits that split the range
into ``jobs + 1`` parts (:func:`katra_trace.analysis.bisection.probes`; one is halving), and in
round 1, beside GOOD and BAD, ``jobs - 2`` commits of the range ahead of BAD's verdict. Time
measures one commit at a time (timed captures side by side disturb each other).

Every commit measured is recorded in ``DIR/bisect.json`` as soon as it is classified
(:func:`katra3d.harness.bisect.state.write_state`), so ``--resume`` continues without measuring a
commit twice. The classification is :func:`katra_trace.analysis.bisection.classify`'s; skipped
commits (failed to capture, not comparable, undecided) are stepped around, as ``git bisect skip``
does.
"""

from __future__ import annotations

import contextlib
import dataclasses
import math
from collections.abc import Callable, Mapping
from typing import Any

from katra3d.harness.bisect.measure import (
    Measured,
    Trees,
    Workspace,
    capture_counted,
    counted_result,
    measure_timed,
)
from katra3d.harness.bisect.state import BISECT_FILE, CommitResult, write_state
from katra3d.harness.versions.git import Commit
from katra_trace.analysis.bisection import (
    Effect,
    classify,
    next_ranges,
    open_range,
    partial_scenes,
    probes,
    rounds_left,
    shares,
    target_scenes,
)
from katra_trace.errors import ConfigError
from katra_trace.metrics import is_count
from katra_trace.units import format_change_pct

#: Statuses of a bisection (``status`` in bisect.json) and the exit code each ends with.
STATUS_EXIT = {"running": 2, "found": 0, "ambiguous": 2, "all skipped": 2, "nothing to bisect": 2}


class BisectError(ConfigError):
    """A bisection that cannot go on or found nothing (exit 2); its state and
    outcome are written."""


@dataclasses.dataclass(frozen=True)
class Outcome:
    """What a bisection found (or how far it got): ``status`` (:data:`STATUS_EXIT`), the first bad
    commit (``first_bad``) or the commits it is one of (``candidates``), the last commit like GOOD,
    the culprit's share of BAD's change per target scene and the ranges suggested next, and the one
    line that says so."""

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
            "status": self.status,
            "message": self.message,
            "exit_code": self.exit_code,
            "first_bad": self.first_bad.sha if self.first_bad else None,
            "first_bad_subject": self.first_bad.subject if self.first_bad else None,
            "last_good": self.last_good.sha if self.last_good else None,
            "candidates": [c.sha for c in self.candidates],
            "effect": [e.as_dict() for e in culprit.effects] if culprit else [],
            "explained": {
                s: {"before_pct": _pct(p), "culprit_pct": _pct(c), "step_pct": _pct(c - p)}
                for s, (p, c) in self.explained.items()
            },
            "partial": bool(self.partial),
            "next_ranges": list(self.next_ranges),
        }


def _pct(share: float) -> float | None:
    return round(share * 100, 1) if math.isfinite(share) else None


def _record(c: Commit, m: Measured, state: str, reason: str, round_no: int) -> CommitResult:
    return CommitResult(
        sha=c.sha,
        subject=c.subject,
        state=state,
        reason=reason,
        effects=m.effects,
        traces=m.traces,
        rounds=m.rounds,
        stopped=m.stopped,
        seconds=m.seconds,
        log=m.log,
        images=dict(m.images),
        round=round_no,
    )


def _classified(c: Commit, m: Measured, bad: CommitResult, round_no: int) -> CommitResult:
    """A commit of the range, measured: like GOOD, like BAD, or skipped (its capture failed, or
    undecided).
    """
    if m.failure:
        return _record(c, m, "skip", f"skipped: {m.failure}", round_no)
    verdict = classify(m.effects, bad.effects)
    return _record(
        c,
        m,
        verdict.state,
        verdict.reason if verdict.state != "skip" else f"skipped: {verdict.reason}",
        round_no,
    )


def _effects_text(effects: tuple[Effect, ...]) -> str:
    return ", ".join(
        f"{e.scene} {format_change_pct(e.change_pct, 2)} {e.verdict}" for e in effects if not e.zone
    )


def _states(commits: tuple[Commit, ...], tested: Mapping[str, CommitResult]) -> list[str]:
    return [tested[c.sha].state if c.sha in tested else "" for c in commits]


def next_commits(
    commits: tuple[Commit, ...], tested: Mapping[str, CommitResult], n: int
) -> list[Commit]:
    """The (at most ``n``) untested commits to measure next, splitting the open range into ``n + 1``
    parts (:func:`~katra_trace.analysis.bisection.probes`); none when no commit is left to test."""
    return [commits[i] for i in probes(_states(commits, tested), n)]


def outcome(ws: Workspace, tested: Mapping[str, CommitResult]) -> Outcome:
    """What the commits measured so far say (``running`` while commits are left to test)."""
    setup = ws.setup
    commits = setup.commits
    if next_commits(commits, tested, 1):
        return Outcome("running", f"bisecting: {len(tested)} commit(s) measured")
    lo, hi = open_range(_states(commits, tested))
    last_good = setup.good if lo < 0 else commits[lo]
    between = commits[lo + 1 : hi + 1]
    if len(between) > 1:
        if lo < 0 and hi == len(commits) - 1:
            return Outcome(
                "all skipped",
                f"every commit between GOOD {setup.good.short} and BAD "
                f"{setup.bad.short} was skipped ({len(between) - 1}); the first bad commit is one "
                "of "
                f"them or BAD: see {BISECT_FILE} for why each was skipped",
                last_good=last_good,
                candidates=between,
            )
        return Outcome(
            "ambiguous",
            f"the first bad commit is one of {len(between)}: "
            f"{', '.join(c.short for c in between)} (the others were skipped; see {BISECT_FILE})",
            last_good=last_good,
            candidates=between,
        )
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
    return Outcome(
        "found",
        message,
        first_bad=culprit,
        last_good=last_good,
        candidates=(culprit,),
        explained=explained,
        partial=partial,
        next_ranges=tuple(ranges),
    )


class _Search:
    """One bisection's loop: its workspace, worktrees, the commits measured, and how it records
    them.
    """

    def __init__(self, ws: Workspace, tested: dict[str, CommitResult], jobs: int) -> None:
        self.ws, self.setup, self.tested, self.jobs = ws, ws.setup, tested, jobs
        self.trees = Trees(ws)
        self.progress: Callable[[str], None] = ws.progress

    def save(self) -> Outcome:
        setup, tested = self.setup, self.tested
        found = (
            outcome(self.ws, tested)
            if setup.bad.sha in tested and tested[setup.bad.sha].state == "bad"
            else Outcome("running", "measuring GOOD and BAD")
        )
        write_state(self.ws.root, setup, tested, found.as_dict(tested))
        return found

    def keep(self, result: CommitResult) -> None:
        self.tested[result.sha] = result
        self.save()

    def bad_measured(self, m: Measured) -> None:
        """BAD against GOOD (round 1): the target scenes, or nothing to bisect."""
        bad = self.setup.bad
        if m.failure:
            raise BisectError(f"BAD {bad.short} could not be measured: {m.failure}")
        state = "bad" if target_scenes(m.effects) else "good"
        self.keep(_record(bad, m, state, f"BAD: {_effects_text(m.effects)}", 1))
        self.progress(f"BAD against GOOD: {_effects_text(m.effects)}")
        if state != "bad":
            message = (
                f"nothing to bisect: BAD {bad.short} is not slower than GOOD "
                f"{self.setup.good.short} "
                f"by the decision model ({_effects_text(m.effects)})"
            )
            write_state(
                self.ws.root,
                self.setup,
                self.tested,
                dict(Outcome("nothing to bisect", message).as_dict(self.tested)),
            )
            raise BisectError(message)

    def announce(self, round_no: int, batch: list[Commit]) -> None:
        lo, hi = open_range(_states(self.setup.commits, self.tested))
        left = sum(1 for x in self.setup.commits[lo + 1 : hi] if x.sha not in self.tested)
        what = (
            f"{batch[0].short} {batch[0].subject}"
            if len(batch) == 1
            else f"{len(batch)} commits at once: {', '.join(c.short for c in batch)}"
        )
        self.progress(
            f"round {round_no} ({left} commit(s) left, about {rounds_left(left, len(batch))} "
            f"round(s)): {what}"
        )

    def counted(self) -> None:
        """Counts: up to ``jobs`` commits a round, captured at once."""
        setup, tested, jobs = self.setup, self.tested, self.jobs
        if setup.bad.sha not in tested:
            first = [c for c in (setup.good, setup.bad) if c.sha not in tested]
            room = jobs - len(first)
            ahead = next_commits(setup.commits, tested, room) if room > 0 else []
            self.progress(
                f"round 1: GOOD {setup.good.short} and BAD {setup.bad.short}"
                + (
                    f", and {len(ahead)} commit(s) of the range ahead of BAD's verdict"
                    if ahead
                    else ""
                )
                + f" ({setup.measure}, up to {jobs} at once)"
            )
            ended: dict[str, tuple[Commit, str, float]] = {}
            with contextlib.closing(
                capture_counted(self.ws, self.trees, [*first, *ahead], jobs)
            ) as captures:
                for c, failure, seconds in captures:
                    if c.sha == setup.good.sha:
                        if failure:
                            raise BisectError(f"GOOD {c.short} could not be measured: {failure}")
                        self.keep(
                            _record(c, counted_result(self.ws, c, "", seconds), "good", "GOOD", 1)
                        )
                    elif c.sha == setup.bad.sha and failure:
                        raise BisectError(f"BAD {c.short} could not be measured: {failure}")
                    else:
                        ended[c.sha] = (c, failure, seconds)
            self.bad_measured(counted_result(self.ws, *ended.pop(setup.bad.sha)))
            for c, failure, seconds in ended.values():
                self.keep(
                    _classified(
                        c, counted_result(self.ws, c, failure, seconds), tested[setup.bad.sha], 1
                    )
                )
                self.progress(f"  {c.short}: {tested[c.sha].reason}")
        self.bad_is_bad()
        round_no = max([r.round for r in tested.values()] + [1])
        while batch := next_commits(setup.commits, tested, jobs):
            round_no += 1
            self.announce(round_no, batch)
            with contextlib.closing(capture_counted(self.ws, self.trees, batch, jobs)) as captures:
                for c, failure, seconds in captures:
                    self.keep(
                        _classified(
                            c,
                            counted_result(self.ws, c, failure, seconds),
                            tested[setup.bad.sha],
                            round_no,
                        )
                    )
                    self.progress(f"  {c.short}: {tested[c.sha].reason}")

    def timed(self) -> None:
        """Time: one commit at a time, in interleaved rounds against GOOD."""
        setup, tested = self.setup, self.tested
        if setup.good.sha not in tested:
            self.keep(
                CommitResult(
                    setup.good.sha,
                    setup.good.subject,
                    "good",
                    "GOOD (captured beside each commit, interleaved)",
                    round=1,
                )
            )
        if setup.bad.sha not in tested:
            self.progress(
                f"round 1: BAD {setup.bad.short} {setup.bad.subject}: capturing ({setup.measure}, "
                f"interleaved rounds with GOOD until decided, at most {setup.max_rounds})"
            )
            self.bad_measured(measure_timed(self.ws, self.trees, setup.bad))
        self.bad_is_bad()
        round_no = max([r.round for r in tested.values()] + [1])
        while batch := next_commits(setup.commits, tested, 1):
            round_no += 1
            self.announce(round_no, batch)
            c = batch[0]
            self.keep(
                _classified(
                    c, measure_timed(self.ws, self.trees, c), tested[setup.bad.sha], round_no
                )
            )
            self.progress(f"  {c.short}: {tested[c.sha].reason}")

    def bad_is_bad(self) -> None:
        """A resumed bisection whose BAD was not slower stops as it did (nothing to bisect)."""
        bad = self.tested[self.setup.bad.sha]
        if bad.state != "bad":
            raise BisectError(
                f"nothing to bisect: BAD {self.setup.bad.short} is not slower than GOOD "
                f"{self.setup.good.short} by the decision model ({_effects_text(bad.effects)})"
            )


def run_bisection(ws: Workspace, tested: dict[str, CommitResult], jobs: int = 1) -> Outcome:
    """Measure GOOD and BAD, then the commits the search picks, round by round (counts: up to
    ``jobs`` at once; time: one at a time), recording each in bisect.json; returns the outcome (also
    written there). Raises BisectError when GOOD or BAD cannot be measured, or BAD is not slower
    than GOOD (nothing to bisect)."""
    search = _Search(ws, tested, jobs if is_count(ws.setup.measure) else 1)
    try:
        if is_count(ws.setup.measure):
            search.counted()
        else:
            search.timed()
        return search.save()
    finally:
        search.trees.close()


__all__ = ["STATUS_EXIT", "BisectError", "Outcome", "next_commits", "outcome", "run_bisection"]
