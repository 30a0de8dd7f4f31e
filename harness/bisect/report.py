"""A bisection's result as text, printed and kept as ``DIR/bisect.txt``."""

from __future__ import annotations

import math
from collections.abc import Mapping

from katra3d.harness.bisect.state import Bisection, CommitResult, Setup
from katra_trace.analysis.bisection import Effect, target_scenes
from katra_trace.analysis.images import ImageOutcome
from katra_trace.metrics import is_count
from katra_trace.units import format_change, format_change_pct

REPORT_FILE = "bisect.txt"


def _pct(x: float) -> str:
    return format_change(x, 2)


def _table(rows: list[list[str]]) -> list[str]:
    widths = [max(len(r[i]) for r in rows) for i in range(len(rows[0]))]
    return [
        "  " + "  ".join(c.ljust(w) for c, w in zip(r, widths, strict=True)).rstrip() for r in rows
    ]


def effect_lines(effects: tuple[Effect, ...]) -> list[str]:
    rows = [["scene / zone", "verdict", "change", "interval", "why"]]
    for e in effects:
        name = f"{e.scene} / {e.zone}" if e.zone else e.scene
        change = _pct(e.ratio) + (
            f" ({format_change_pct(e.frame_change_pct, 2)} of frame)"
            if e.zone and math.isfinite(e.frame_change_pct)
            else ""
        )
        rows.append([name, e.verdict, change, f"[{_pct(e.ci_low)}, {_pct(e.ci_high)}]", e.reason])
    return _table(rows)


def _traces(r: CommitResult) -> str:
    if not r.traces:
        return "-"
    if len(r.traces) == 1:
        return r.traces[0]
    folder = r.traces[0].rsplit("/", 1)[0]
    return f"{folder}/ ({len(r.traces)} files)"


def _image_word(r: CommitResult) -> str:
    words = {
        scene: line.split(":", 1)[0].removeprefix("image ") for scene, line in r.images.items()
    }
    if not words:
        return "-"
    if all(w == ImageOutcome.IDENTICAL.words for w in words.values()):
        return "identical"
    return ", ".join(
        f"{scene} {w}" for scene, w in words.items() if w != ImageOutcome.IDENTICAL.words
    )


def tested_lines(setup: Setup, tested: Mapping[str, CommitResult]) -> list[str]:
    """Commits measured, in history order, then why each skipped one was skipped."""
    targets = target_scenes(tested[setup.bad.sha].effects) if setup.bad.sha in tested else {}
    rows = [
        [
            "commit",
            "state",
            "change vs GOOD",
            "image vs GOOD",
            "round",
            "captures",
            "traces",
            "subject",
        ]
    ]
    skipped = []
    # time: GOOD is captured once a round beside each commit
    good_captures = (
        1 if is_count(setup.measure) else sum(r.rounds for r in tested.values() if r.rounds)
    )
    for c in (setup.good, *setup.commits):
        r = tested.get(c.sha)
        if r is None:
            continue
        scenes = {e.scene: e for e in r.effects if not e.zone}
        change = (
            ", ".join(f"{s} {_pct(scenes[s].ratio)}" for s in (targets or scenes) if s in scenes)
            or "-"
        )
        role = " (GOOD)" if c.sha == setup.good.sha else " (BAD)" if c.sha == setup.bad.sha else ""
        rows.append(
            [
                c.short,
                r.state + role,
                change,
                _image_word(r),
                str(r.round or "-"),
                str(good_captures if c.sha == setup.good.sha else r.rounds),
                _traces(r),
                c.subject,
            ]
        )
        if r.state == "skip":
            skipped.append(f"  {c.short}: {r.reason}")
    return _table(rows) + skipped


def params_lines(setup: Setup, tested: Mapping[str, CommitResult]) -> list[str]:
    """Each params change with the commit that made it, or the range it lies in."""
    line = (setup.good, *setup.commits)
    out: list[str] = []
    named: set[str] = set()
    for i, c in enumerate(line):
        r = tested.get(c.sha)
        for change in r.params if r is not None else ():
            if change in named:
                continue
            named.add(change)
            before = max(
                j
                for j in range(i)
                if line[j].sha in tested and change not in tested[line[j].sha].params
            )
            where = (
                f"changed by {c.short} {c.subject}"
                if before == i - 1
                else f"changed after {line[before].short}, by {c.short} or a commit before it"
            )
            out.append(f"{change}: compared as a change of the scene; {where}")
    return out


def report_lines(state: Bisection) -> list[str]:
    setup, tested, found = state.setup, state.tested, state.outcome
    lines = [
        f"katra3d bisect: GOOD {setup.good.short} ({setup.good.subject}) .. BAD {setup.bad.short} "
        f"({setup.bad.subject}): {len(setup.commits)} commit(s), "
        + ("kept frames against GOOD's (--images)" if setup.images else setup.measure)
    ]
    if found.first_bad is not None:
        culprit = tested[found.first_bad.sha]
        lines += [
            "",
            f"first bad commit: {found.first_bad.sha} {found.first_bad.subject}",
            f"its change against GOOD {setup.good.short}:",
            *effect_lines(culprit.effects),
        ]
        lines += [f"{scene}: {line}" for scene, line in culprit.images.items()]
        bad = target_scenes(tested[setup.bad.sha].effects)
        for scene, (before, after) in found.explained.items():
            step = after - before
            if math.isfinite(step):
                lines.append(
                    f"{scene}: this commit's own step is {step * 100:.0f}% of BAD's change "
                    f"({_pct(bad[scene].ratio)}, log scale)"
                )
        if found.partial:
            lines.append(
                "it explains only part of BAD's change (less than 2/3 of it in "
                f"{', '.join(found.partial)})"
                + (
                    "; bisect the rest, with this bisection's capture options:"
                    if found.next_ranges
                    else ""
                )
            )
            lines += [f"  {setup.again(*rng.split('..'))}" for rng in found.next_ranges]
        lines += found.steps
    else:
        lines += ["", found.message]
    params = params_lines(setup, tested)
    lines += ["", *params] if params else []
    lines += ["", "commits measured:", *tested_lines(setup, tested)]
    return lines


__all__ = ["REPORT_FILE", "effect_lines", "params_lines", "report_lines", "tested_lines"]
