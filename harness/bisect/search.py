"""The bisection loop: GOOD and BAD, then commits splitting the open range, until one is left.

Each commit is saved to ``DIR/bisect.json`` once classified, so ``--resume`` never measures one
twice; skipped commits are stepped around as ``git bisect skip`` does (docs/bisect.md)."""

from __future__ import annotations

import contextlib
from collections.abc import Callable, Mapping

from katra3d.harness.bisect.measure import (
    Measured,
    Trees,
    Workspace,
    capture_counted,
    counted_result,
    measure_timed,
)
from katra3d.harness.bisect.state import BISECT_FILE, Bisection, CommitResult, Outcome, Setup
from katra3d.harness.versions.git import Commit
from katra_trace.analysis.bisection import (
    Effect,
    classify,
    classify_images,
    image_targets,
    next_ranges,
    open_range,
    partial_scenes,
    probes,
    rounds_left,
    shares,
    steps,
    target_scenes,
)
from katra_trace.metrics import is_count
from katra_trace.units import format_change, format_change_pct


class _Stop(Exception):
    def __init__(self, outcome: Outcome) -> None:
        super().__init__(outcome.message)
        self.outcome = outcome


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
        params=m.params,
    )


def _classified(
    c: Commit, m: Measured, bad: CommitResult, round_no: int, images: bool = False
) -> CommitResult:
    """Good, bad or skip: by kept frames with ``images``, else by its change."""
    if m.failure:
        return _record(c, m, "skip", f"skipped: {m.failure}", round_no)
    verdict = classify_images(m.images, bad.images) if images else classify(m.effects, bad.effects)
    return _record(
        c,
        m,
        verdict.state,
        verdict.reason if verdict.state != "skip" else f"skipped: {verdict.reason}",
        round_no,
    )


def _effects_text(effects: tuple[Effect, ...]) -> str:
    return ", ".join(
        f"{e.scene} {format_change_pct(e.change_pct, 2)} {e.verdict}"
        + (f" ({e.reason})" if e.verdict == "incomparable" else "")
        for e in effects
        if not e.zone
    )


def _states(commits: tuple[Commit, ...], tested: Mapping[str, CommitResult]) -> list[str]:
    return [tested[c.sha].state if c.sha in tested else "" for c in commits]


def next_commits(
    commits: tuple[Commit, ...], tested: Mapping[str, CommitResult], n: int
) -> list[Commit]:
    return [commits[i] for i in probes(_states(commits, tested), n)]


def _other_steps(setup: Setup, tested: Mapping[str, CommitResult], culprit: int) -> list[str]:
    """Steps other than the culprit's: a second culprit, or a range still to bisect."""
    line = (setup.good, *setup.commits)
    measured = [0] + [
        i for i, c in enumerate(line) if i and c.sha in tested and tested[c.sha].effects
    ]
    found = steps(
        [tested[line[i].sha].effects if i else () for i in measured],
        tested[setup.bad.sha].effects,
        setup.compare.threshold_pct,
    )
    out: list[str] = []
    for st in found:
        a, b = measured[st.before], measured[st.after]
        if a < culprit + 1 <= b:
            continue  # the culprit's own step
        what = f"{st.scene} {format_change(st.ratio, 2)}"
        if b == a + 1:
            out.append(f"another first bad commit: {line[b].short} {line[b].subject} ({what})")
        else:
            out.append(
                f"another step between {line[a].short} and {line[b].short} ({what}): "
                + setup.again(line[a].short, line[b].short)
            )
    return out


def outcome(setup: Setup, tested: Mapping[str, CommitResult]) -> Outcome:
    """What the commits measured say (``running`` while commits are left)."""
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
                f"of them or BAD: see {BISECT_FILE} for why each was skipped",
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
    return Outcome(
        "found",
        f"first bad commit: {culprit.short} {culprit.subject}",
        first_bad=culprit,
        last_good=last_good,
        candidates=(culprit,),
        explained=explained,
        partial=partial,
        next_ranges=tuple(ranges),
        steps=tuple(_other_steps(setup, tested, hi)),
    )


class _Search:
    def __init__(self, ws: Workspace, state: Bisection, jobs: int) -> None:
        self.ws, self.setup, self.state, self.jobs = ws, ws.setup, state, jobs
        self.tested = state.tested
        self.trees = Trees(ws)
        self.progress: Callable[[str], None] = ws.progress

    def save(self, found: Outcome | None = None) -> Outcome:
        setup, tested = self.setup, self.tested
        if found is None:
            bad = tested.get(setup.bad.sha)
            found = (
                outcome(setup, tested)
                if bad is not None and bad.state == "bad"
                else Outcome("running", "measuring GOOD and BAD")
            )
        self.state.outcome = found
        self.state.save(self.ws.root)
        return found

    def keep(self, result: CommitResult) -> None:
        self.tested[result.sha] = result
        self.save()

    def not_measured(self, which: str, c: Commit, failure: str) -> _Stop:
        return _Stop(Outcome("not measured", f"{which} {c.short} could not be measured: {failure}"))

    def bad_measured(self, m: Measured) -> None:
        bad = self.setup.bad
        if m.failure:
            raise self.not_measured("BAD", bad, m.failure)
        if self.setup.images:
            state = "bad" if image_targets(m.images) else "good"
            said = ", ".join(f"{s} {line}" for s, line in m.images.items()) or "no kept frames"
        else:
            # BAD incomparable in some scene is not like GOOD: skipped
            blind = any(e.verdict == "incomparable" for e in m.effects)
            state = "bad" if target_scenes(m.effects) else "skip" if blind else "good"
            said = _effects_text(m.effects)
        self.keep(_record(bad, m, state, f"BAD: {said}", 1))
        self.progress(f"BAD against GOOD: {said}")
        self.bad_is_bad()

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
        """One capture a commit, ``jobs`` at once; round 1 fills spare slots from the range."""
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
                            raise self.not_measured("GOOD", c, failure)
                        self.keep(
                            _record(c, counted_result(self.ws, c, "", seconds), "good", "GOOD", 1)
                        )
                    elif c.sha == setup.bad.sha and failure:
                        raise self.not_measured("BAD", c, failure)
                    else:
                        ended[c.sha] = (c, failure, seconds)
            self.bad_measured(counted_result(self.ws, *ended.pop(setup.bad.sha)))
            for c, failure, seconds in ended.values():
                self.keep(
                    _classified(
                        c,
                        counted_result(self.ws, c, failure, seconds),
                        tested[setup.bad.sha],
                        1,
                        setup.images,
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
                            setup.images,
                        )
                    )
                    self.progress(f"  {c.short}: {tested[c.sha].reason}")

    def timed(self) -> None:
        """One commit at a time, interleaved against GOOD until like GOOD or like BAD."""
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
        bad = tested[setup.bad.sha]
        round_no = max([r.round for r in tested.values()] + [1])
        while batch := next_commits(setup.commits, tested, 1):
            round_no += 1
            self.announce(round_no, batch)
            c = batch[0]
            self.keep(
                _classified(c, measure_timed(self.ws, self.trees, c, bad.effects), bad, round_no)
            )
            self.progress(f"  {c.short}: {tested[c.sha].reason}")

    def bad_is_bad(self) -> None:
        bad, good = self.tested[self.setup.bad.sha], self.setup.good.short
        if bad.state == "bad":
            return
        why = (
            f"'s kept frames are not changed against GOOD {good}'s beyond the image tolerance "
            f"({bad.reason.removeprefix('BAD: ')})"
            if self.setup.images
            else f" is not slower than GOOD {good} by the decision model "
            f"({_effects_text(bad.effects)})"
        )
        raise _Stop(
            Outcome("nothing to bisect", f"nothing to bisect: BAD {self.setup.bad.short}{why}")
        )


def run_bisection(ws: Workspace, state: Bisection, jobs: int = 1) -> Outcome:
    """Run (or resume) the bisection, saving each commit to bisect.json; returns the outcome."""
    once = is_count(ws.setup.measure) or ws.setup.images  # one capture a commit
    search = _Search(ws, state, jobs if once else 1)
    try:
        if once:
            search.counted()
        else:
            search.timed()
        return search.save()
    except _Stop as stop:
        return search.save(stop.outcome)
    finally:
        search.trees.close()


__all__ = ["next_commits", "outcome", "run_bisection"]
