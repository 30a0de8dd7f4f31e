"""Measuring one commit for ``katra3d bisect``: its worktree, its captures, and its change against
GOOD.

A commit is checked out as a detached worktree in a temporary directory and captured with the
bisection's command, the worktree as the current directory (so its scenes are the ones run, as
``ci/compare-versions.sh`` does). Traces go to ``DIR/traces/``;
a counted capture's output to ``DIR/logs/SHORT.log`` (a failed time round's is shown on stderr). A
complete counted trace already in place from an interrupted bisection is used again.

* **Counts** (instructions, cycles): one capture per commit, compared with GOOD's one capture; up to
  ``--jobs`` commits are captured at once (:func:`capture_counted`), each in its own worktree and
  process group, since counts do not depend on what runs beside them.
* **Time** (one commit at a time: timed captures side by side disturb each other): ``ab
  --until-decided``'s rounds loop (:func:`katra3d.harness.ab.rounds.run_rounds`): interleaved rounds
  with GOOD as BASE (the order alternating each round), compared paired after each round by the
  stopping rule for repeated looks (:mod:`katra_trace.analysis.sequential`), until it decides every
  scene, or ``max_rounds`` (the rule's cap) is reached.

The comparison is :func:`katra_trace.analysis.compare.compare_traces` with the bisection's options;
the rows become :class:`~katra_trace.analysis.bisection.Effect` records.
"""

from __future__ import annotations

import contextlib
import dataclasses
import os
import time
from collections.abc import Callable, Generator, Mapping, Sequence
from pathlib import Path
from typing import TYPE_CHECKING

from katra3d.harness.bisect.state import Setup
from katra3d.harness.supervisor import Supervisor
from katra3d.harness.versions.command import CaptureCommand, CaptureFailed, run_capture
from katra3d.harness.versions.git import Commit, add_worktree, remove_worktree
from katra_trace.analysis.bisection import Effect, classify
from katra_trace.analysis.params import allow_defaults, param_changes
from katra_trace.errors import ConfigError, Interrupted, KatraError
from katra_trace.io.tracesets import AB_MANIFEST, AB_TRACE, clear_ab_dir, open_quietly
from katra_trace.text import shown

if TYPE_CHECKING:
    from katra_trace.analysis.comparison import ComparisonResult
    from katra_trace.analysis.sequential import SequentialRule
    from katra_trace.analysis.verdict import Comparison


@dataclasses.dataclass(frozen=True)
class Workspace:
    """Where a bisection works: the repository, the output directory (absolute), the temporary
    directory of its worktrees, its setup, and where progress lines go."""

    top: Path
    root: Path
    trees: Path
    setup: Setup
    progress: Callable[[str], None]

    def rel(self, path: Path) -> str:
        """``path`` relative to the output directory (as bisect.json records it)."""
        return str(path.relative_to(self.root))


@dataclasses.dataclass(frozen=True)
class Measured:
    """What measuring a commit gave: its effects against GOOD (empty for GOOD itself), or why there
    are none (``failure``); the traces kept; rounds; why the rounds stopped; seconds; its log."""

    effects: tuple[Effect, ...]
    failure: str
    traces: tuple[str, ...]
    rounds: int
    stopped: str
    seconds: float
    log: str
    #: scene -> its image verdict against GOOD as one line (:func:`image_lines`)
    images: Mapping[str, str] = dataclasses.field(default_factory=dict)
    #: each scene whose params differ from GOOD's, one line each ("from the scene's defaults")
    params: tuple[str, ...] = ()


def _capture(ws: Workspace, tree: Path, out: Path, log: Path) -> str:
    """Run the capture command once in ``tree`` writing ``out``; "" when a trace is there, else why
    not (with the last line of its output; all of it in ``log``). A complete trace left at ``out``
    by an earlier, interrupted bisection is kept (its capture had finished); one that a Ctrl-C
    finished as interrupted is removed, and the commit captured again."""
    if out.is_file():
        if _complete(out):
            return ""
        out.unlink()
    out.parent.mkdir(parents=True, exist_ok=True)
    try:
        run_capture(in_tree(ws.setup.command, tree), out, log=log, what="the capture")
    except CaptureFailed as failed:
        last = f": {failed.tail[-1]}" if failed.tail else ""
        return f"the capture {failed.reason}{last}; its output: {ws.rel(log)}"
    return ""


def _complete(trace: Path) -> bool:
    """Whether ``trace`` is a whole trace of a capture that ran to its end (not one finished as
    interrupted, nor a damaged one)."""
    try:
        opened = open_quietly(trace, events=False)
    except KatraError:
        return False
    return opened.status == "complete" and not opened.truncated


def in_tree(command: str, tree: Path) -> CaptureCommand:
    """The bisection's capture command run in ``tree`` as its current directory, so that the
    commit's scenes are the ones run. Not put on ``PYTHONPATH``: as in ``katra3d run``, a scene
    file's folder goes last on the import path, so a project file never hides the standard
    library."""
    return CaptureCommand(command, cwd=tree)


def compare_to_good(
    ws: Workspace, good: Path, new: Path
) -> tuple[tuple[Effect, ...], dict[str, str], tuple[str, ...]] | str:
    """Each scene's (and zone's) change of the counted trace ``new`` against GOOD's ``good`` by the
    one comparison, each scene's image verdict line (:func:`image_lines`) and each scene whose
    params differ from GOOD's (compared when the scene's defaults alone differ), or why the traces
    could not be compared (counts against times, params given otherwise ...)."""
    # deferred: the comparison loads scipy (about a second); building the parser must not
    from katra_trace.analysis.comparison import compare_sides, open_sides

    try:
        sides = open_sides(str(good), str(new))
        changes = param_changes(
            sides.base_traces[0].header, sides.new_traces[0].header, same_command=True
        )
        options = allow_defaults(changes, ws.setup.compare)
        result = compare_sides(sides, options, image_policy="warn")
    except KatraError as exc:
        return f"not comparable with GOOD: {exc}"
    if not result.timing.scenes:
        return "no scene with measured frames in its traces"
    effects = tuple(Effect.from_row(r) for r in (*result.timing.scenes, *result.timing.zones))
    return effects, image_lines(result), tuple(c.line for c in changes)


def image_lines(result: ComparisonResult) -> dict[str, str]:
    """Each scene's image verdict against GOOD, as its output line ("image identical: ...", "image
    changed: FLIP mean 0.031, 2.4 % of pixels over 0.1"), by the one image rule with its default
    thresholds. It is shown beside the timing and never classifies a commit: a bisection looks for a
    slowdown. Scenes whose captures do not compare are *incomparable*."""
    return {scene: v.line for scene, v in result.images.items()}


def sequential_rule(setup: Setup) -> SequentialRule:
    """The stopping rule of the time mode: the bisection's alpha and
    threshold, its cap on rounds."""
    # deferred: the rule loads scipy; building the parser must not
    from katra_trace.analysis.sequential import SequentialRule

    return SequentialRule(
        alpha=setup.compare.alpha,
        max_rounds=setup.max_rounds,
        threshold_pct=setup.compare.threshold_pct,
    )


class Trees:
    """GOOD's worktree, kept for the whole bisection (time mode captures GOOD beside every commit);
    every other commit's lives as long as its captures."""

    def __init__(self, ws: Workspace) -> None:
        self.ws = ws
        self.good: Path | None = None

    def good_tree(self) -> Path:
        if self.good is None:
            self.good = add_worktree(self.ws.top, self.ws.trees / "good", self.ws.setup.good.sha)
        return self.good

    def close(self) -> None:
        if self.good is not None:
            remove_worktree(self.ws.top, self.good)
            self.good = None


def counted_trace(ws: Workspace, c: Commit) -> Path:
    """Where commit ``c``'s counted capture goes: ``DIR/traces/SHORT.katra``."""
    return ws.root / "traces" / f"{c.short}.katra"


def _log(ws: Workspace, c: Commit) -> Path:
    return ws.root / "logs" / f"{c.short}.log"


def capture_counted(
    ws: Workspace, trees: Trees, commits: Sequence[Commit], jobs: int
) -> Generator[tuple[Commit, str, float], None, None]:
    """Capture each commit's counted trace (:func:`counted_trace`), up to ``jobs`` at a time, each
    in a worktree of its own (GOOD's is kept) and a process group of its own (:func:`run_capture`
    in a job of :meth:`Supervisor.pool`; the worktrees made and removed in the main thread). Yields
    (commit, why its capture failed or "", its seconds) as each ends, in the main thread. A stop
    signal (Ctrl-C) or an error stops every capture; after a signal, the captures that had ended
    are yielded, then :class:`Interrupted` raised. Close the generator when leaving it early
    (``contextlib.closing``)."""
    started: dict[int, tuple[Path, float]] = {}

    def begin(i: int) -> None:
        c = commits[i]
        tree = (
            trees.good_tree()
            if c.sha == ws.setup.good.sha
            else add_worktree(ws.top, ws.trees / c.short, c.sha)
        )
        ws.progress(f"  {c.short} {c.subject}: capturing ({ws.setup.measure})")
        started[i] = (tree, time.monotonic())

    def task(i: int) -> Callable[[], str]:
        c = commits[i]
        return lambda: _capture(ws, started[i][0], counted_trace(ws, c), _log(ws, c))

    def release(i: int) -> None:
        c = commits[i]
        if c.sha != ws.setup.good.sha:
            remove_worktree(ws.top, started[i][0])

    with Supervisor() as sup:
        try:
            with contextlib.closing(
                sup.pool([task(i) for i in range(len(commits))], jobs, before=begin)
            ) as ended:
                for i, failure in ended:
                    t0 = started[i][1]
                    release(i)
                    del started[i]
                    yield commits[i], failure, time.monotonic() - t0
        finally:
            for i in list(started):
                release(i)
        if sup.received:
            raise Interrupted(sup.received[0])


def counted_result(ws: Workspace, c: Commit, failure: str, seconds: float) -> Measured:
    """Commit ``c``'s measurement from its counted capture (:func:`capture_counted`): its change
    against GOOD's (none for GOOD itself), or why there is none."""
    out = counted_trace(ws, c)
    kept = (ws.rel(out),) if out.is_file() else ()
    effects: tuple[Effect, ...] = ()
    images: dict[str, str] = {}
    params: tuple[str, ...] = ()
    if not (c.sha == ws.setup.good.sha or failure):
        compared = compare_to_good(ws, counted_trace(ws, ws.setup.good), out)
        if isinstance(compared, str):
            failure = compared
        else:
            effects, images, params = compared
    return Measured(effects, failure, kept, 1, "", seconds, ws.rel(_log(ws, c)), images, params)


def _clear_unrecorded(folder: Path) -> None:
    """Empty the folder of a measurement that was interrupted before it was recorded, so that it is
    measured again; only what bisect's rounds wrote goes
    (:func:`~katra_trace.io.tracesets.clear_ab_dir`: the rounds' traces, then ab.json), and a file
    of anyone else's stops the bisection (exit 2) with nothing removed."""
    if not os.path.lexists(folder):
        return
    if (folder / AB_MANIFEST).is_file():
        clear_ab_dir(folder)
        return
    for side in ("base", "new"):  # killed before its first round was recorded: no ab.json yet
        for path in sorted((folder / side).glob("*")) if (folder / side).is_dir() else ():
            if not AB_TRACE.fullmatch(path.name) or path.is_symlink() or not path.is_file():
                raise ConfigError(
                    f"{shown(str(path))} is not bisect's: nothing was removed; move it away and "
                    "resume"
                )
            path.unlink()


def measure_timed(ws: Workspace, trees: Trees, c: Commit, bad: Sequence[Effect] = ()) -> Measured:
    """Interleaved rounds of GOOD and ``c`` by ``ab``'s rounds loop into ``DIR/traces/SHORT/`` (an
    ab directory: ``katra3d compare`` of it gives the same verdict), until the sequential rule
    decides every scene, or, given BAD's effects ``bad``, until ``c`` is like GOOD or like BAD
    (:func:`~katra_trace.analysis.bisection.classify`), or the cap is reached. A folder left by an
    interrupted, unrecorded measurement is measured again."""
    # deferred: the rounds loop compares with scipy; building the parser must not
    from katra3d.harness.ab.rounds import Round, run_rounds
    from katra_trace.analysis.sequential import Settled, settle

    def settle_by(comparison: Comparison, rounds: int, cap: int) -> Settled:
        if bad and rounds >= rule.min_rounds:
            verdict = classify([Effect.from_row(r) for r in comparison.scenes], bad)
            if verdict.state != "skip":
                return Settled(
                    True,
                    rounds,
                    cap,
                    f"decided after {rounds} of at most {cap} rounds: {verdict.reason}",
                )
        return settle(comparison, rounds, cap)

    t0 = time.monotonic()

    folder = ws.root / "traces" / c.short
    _clear_unrecorded(folder)

    def kept() -> tuple[str, ...]:
        return tuple(
            ws.rel(p)
            for p in sorted(folder.rglob("*"))
            if p.is_file() and p.suffix in (".katra", ".json")
        )

    def said(r: Round) -> None:
        if r.settled is not None and not r.settled.decided and r.number < ws.setup.max_rounds:
            ws.progress(f"  {c.short}: {r.settled.reason}")

    rule = sequential_rule(ws.setup)
    tree = add_worktree(ws.top, ws.trees / c.short, c.sha)
    try:
        done = run_rounds(
            in_tree(ws.setup.command, trees.good_tree()),
            in_tree(ws.setup.command, tree),
            folder,
            rule.max_rounds,
            rule,
            on_round=said,
            settle_by=settle_by,
            options=ws.setup.compare,
            who="katra3d bisect",
            same_command=True,
        )
    except KatraError as exc:
        rounds = len(list((folder / "new").glob("*.katra"))) if folder.exists() else 0
        return Measured(
            (),
            f"{exc} (BASE is GOOD, NEW this commit)",
            kept(),
            rounds,
            "",
            time.monotonic() - t0,
            "",
        )
    finally:
        remove_worktree(ws.top, tree)
    if done.comparison is None or not done.comparison.scenes:
        return Measured(
            (),
            "no scene with measured frames in its traces",
            kept(),
            done.rounds,
            "",
            time.monotonic() - t0,
            "",
        )
    effects = tuple(Effect.from_row(r) for r in (*done.comparison.scenes, *done.comparison.zones))
    stopped = done.settled.reason if done.settled is not None else ""
    images: dict[str, str] = {}
    if done.sides is not None:  # the traces of the last look, opened once by the rounds loop
        # deferred: the comparison loads scipy (about a second); building the parser must not
        from katra_trace.analysis.comparison import compare_sides

        images = image_lines(compare_sides(done.sides, done.compare_options, image_policy="warn"))
    return Measured(
        effects, "", kept(), done.rounds, stopped, time.monotonic() - t0, "", images, done.params
    )


__all__ = [
    "Measured",
    "Trees",
    "Workspace",
    "capture_counted",
    "compare_to_good",
    "counted_result",
    "counted_trace",
    "image_lines",
    "measure_timed",
]
