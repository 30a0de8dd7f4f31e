"""Measuring one commit for ``katra3d bisect``: worktree, captures, change against GOOD.

Counts are captured up to ``--jobs`` at once; time one commit at a time by ``ab``'s rounds loop
against GOOD, as timed captures side by side disturb each other (docs/bisect.md)."""

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
    top: Path
    root: Path
    trees: Path
    setup: Setup
    progress: Callable[[str], None]

    def rel(self, path: Path) -> str:
        return str(path.relative_to(self.root))


@dataclasses.dataclass(frozen=True)
class Measured:
    """A commit's effects against GOOD (empty for GOOD) or why none (``failure``)."""

    effects: tuple[Effect, ...]
    failure: str
    traces: tuple[str, ...]
    rounds: int
    stopped: str
    seconds: float
    log: str
    images: Mapping[str, str] = dataclasses.field(default_factory=dict)
    params: tuple[str, ...] = ()


def _capture(ws: Workspace, tree: Path, out: Path, log: Path) -> str:
    """ "" when a trace is there, else why not; a complete trace from an interrupted run is kept."""
    if out.is_file():
        if _complete(out):
            return ""
        out.unlink()
    out.parent.mkdir(parents=True, exist_ok=True)
    try:
        run_capture(in_tree(ws.setup.command, tree), out, log=log, what="the capture")
    except CaptureFailed as failed:
        # katra3d's error line is in the reason; another command's is its output's last line
        last = f": {failed.tail[-1]}" if failed.tail and not failed.error else ""
        return f"the capture {failed.reason}{last}; its output: {ws.rel(log)}"
    return ""


def _complete(trace: Path) -> bool:
    try:
        opened = open_quietly(trace, events=False)
    except KatraError:
        return False
    return opened.status == "complete" and not opened.truncated


def in_tree(command: str, tree: Path) -> CaptureCommand:
    """The capture run in ``tree`` (not on ``PYTHONPATH``: a project file never hides stdlib)."""
    return CaptureCommand(command, cwd=tree)


def compare_to_good(
    ws: Workspace, good: Path, new: Path
) -> tuple[tuple[Effect, ...], dict[str, str], tuple[str, ...]] | str:
    """``new``'s effects, image lines and param changes against GOOD, or why not comparable."""
    # deferred: loads scipy (about a second)
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
    """Each scene's image verdict line: shown, never used to classify (bisect seeks slowdowns)."""
    return {scene: v.line for scene, v in result.images.items()}


def sequential_rule(setup: Setup) -> SequentialRule:
    # deferred: loads scipy
    from katra_trace.analysis.sequential import SequentialRule

    return SequentialRule(
        alpha=setup.compare.alpha,
        max_rounds=setup.max_rounds,
        threshold_pct=setup.compare.threshold_pct,
    )


class Trees:
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
    return ws.root / "traces" / f"{c.short}.katra"


def _log(ws: Workspace, c: Commit) -> Path:
    return ws.root / "logs" / f"{c.short}.log"


def capture_counted(
    ws: Workspace, trees: Trees, commits: Sequence[Commit], jobs: int
) -> Generator[tuple[Commit, str, float], None, None]:
    """Yields (commit, failure or "", seconds) as each counted capture ends, ``jobs`` at a time.
    A signal or error stops all and removes their worktrees; a signal then raises Interrupted."""
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
    """Empty an unrecorded measurement's folder; a file not bisect's stops it, nothing removed."""
    if not os.path.lexists(folder):
        return
    if (folder / AB_MANIFEST).is_file():
        clear_ab_dir(folder)
        return
    for side in ("base", "new"):  # killed before its first round: no ab.json yet
        for path in sorted((folder / side).glob("*")) if (folder / side).is_dir() else ():
            if not AB_TRACE.fullmatch(path.name) or path.is_symlink() or not path.is_file():
                raise ConfigError(
                    f"{shown(str(path))} is not bisect's: nothing was removed; move it away and "
                    "resume"
                )
            path.unlink()


def measure_timed(ws: Workspace, trees: Trees, c: Commit, bad: Sequence[Effect] = ()) -> Measured:
    """Interleaved GOOD/``c`` rounds into ``DIR/traces/SHORT/`` until every scene is decided,
    ``c`` classifies against ``bad``, or the cap."""
    # deferred: loads scipy
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
    if done.sides is not None:  # the last look's traces, already opened
        # deferred: loads scipy
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
