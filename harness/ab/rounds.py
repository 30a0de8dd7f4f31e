"""The rounds of an interleaved A/B: each round one BASE and one NEW capture, the order alternating,
recorded in ``ab.json`` (written before the first capture, then after every round); with a stopping
rule, a look after every round and a stop once decided. A stop signal (Ctrl-C) lets the capture in
progress finish its trace as interrupted (the capture service's grace) and notes that round in
``ab.json`` as ``interrupted``.

``katra3d ab`` (harness/cli/ab.py) and bisect's time mode call :func:`run_rounds`. Each capture is a
:class:`~katra3d.harness.versions.command.CaptureCommand`, run by the one capture service (its own
process group, ``{out}``, the failure tail); a failing capture's last lines are shown on stderr
before the error.
"""

from __future__ import annotations

import dataclasses
import signal
import sys
import time
from collections.abc import Callable, Mapping
from pathlib import Path

from katra3d.harness.versions.command import CaptureCommand, CaptureFailed, run_capture
from katra_trace.analysis.comparison import Sides, compare_sides
from katra_trace.analysis.defaults import DEFAULT_COMPARE, CompareOptions
from katra_trace.analysis.params import allow_defaults, param_changes
from katra_trace.analysis.sequential import SequentialRule, Settled, settle
from katra_trace.analysis.verdict import Comparison
from katra_trace.errors import ConfigError, Interrupted
from katra_trace.io.reader import Trace
from katra_trace.io.tracesets import AbManifest, AbRound, open_quietly, write_ab_manifest

#: The sides, in the order of odd rounds.
SIDES = ("base", "new")


@dataclasses.dataclass(frozen=True)
class Round:
    """One finished round: its number, the order its captures ran in, their seconds, and (with a
    rule) the look after it."""

    number: int
    order: tuple[str, str]
    seconds: Mapping[str, float]
    settled: Settled | None = None
    #: round 1: each scene whose params differ between the sides, one line each
    params: tuple[str, ...] = ()


@dataclasses.dataclass(frozen=True)
class RoundsResult:
    """What :func:`run_rounds` did: the rounds run, their (BASE, NEW) trace pairs, and the last
    look.
    """

    root: Path
    rounds: int
    pairs: tuple[tuple[Path, Path], ...]
    #: with a rule: decided or not, and the one line that says why it stopped
    settled: Settled | None = None
    comparison: Comparison | None = None  #: with a rule: the comparison of the last look
    #: with a rule: the traces of that look, opened (bisect's image verdicts use them)
    sides: Sides | None = None
    #: the comparison's options after round 1 (params allowed when the defaults alone differ)
    compare_options: CompareOptions = DEFAULT_COMPARE
    params: tuple[str, ...] = ()  #: each scene whose params differ, one line each


def capture(command: CaptureCommand, out: Path, label: str, who: str = "katra3d ab") -> float:
    """Run one capture command writing ``out``
    (:func:`katra3d.harness.versions.command.run_capture`); returns its seconds. A failed capture's
    last lines are shown on stderr before its CaptureFailed is raised."""
    try:
        return run_capture(command, out, what=label)
    except CaptureFailed as failed:
        print(
            f"{who}: {label}: {command.shown(out)}\n{who}: the last {len(failed.tail)} lines of "
            "its output:",
            file=sys.stderr,
        )
        for line in failed.tail:
            print(f"  | {line}", file=sys.stderr)
        raise


def run_rounds(
    base_cmd: CaptureCommand,
    new_cmd: CaptureCommand,
    out_dir: Path,
    rounds_cap: int,
    rule: SequentialRule | None = None,
    *,
    on_round: Callable[[Round], None] | None = None,
    settle_by: Callable[[Comparison, int, int], Settled] = settle,
    options: CompareOptions = DEFAULT_COMPARE,
    who: str = "katra3d ab",
    same_command: bool = False,
) -> RoundsResult:
    """Run up to ``rounds_cap`` rounds into ``out_dir`` (``base/run-NNN.katra``, ``new/...``,
    ``ab.json``).

    Without ``rule`` every round runs (the fixed-rounds mode). With one (``rounds_cap`` must be its
    ``max_rounds``), the rounds so far are compared after each round, paired, under the rule
    (:func:`katra_trace.analysis.comparison.compare_sides` with ``options``),
    and the rounds stop once every scene is decided
    (:func:`katra_trace.analysis.sequential.settle`). ab.json records the rule (``sequential``) from
    the start and why the rounds stopped (``stop``) at the end, so that ``katra3d compare DIR``
    gives the same verdict. ``on_round`` is called after each round; ``settle_by`` is the look
    (bisect's also stops once a commit is like GOOD or like BAD).

    After round 1 the sides' scene params are checked (:func:`~katra_trace.analysis.params.
    allow_defaults`): with ``same_command`` (``ab --refs``, bisect) a change of the scenes' defaults
    is compared and named; any other difference stops here (ConfigError), not after every round.
    """
    if rule is not None and rule.max_rounds != rounds_cap:
        raise ValueError(f"rounds_cap {rounds_cap} is not the rule's max_rounds {rule.max_rounds}")
    dirs = {side: out_dir / side for side in SIDES}
    for d in dirs.values():
        d.mkdir(parents=True, exist_ok=True)
    manifest = AbManifest(
        base_command=base_cmd.shown(),
        new_command=new_cmd.shown(),
        started=time.strftime("%Y-%m-%dT%H:%M:%S%z"),
        sequential=None if rule is None else rule.to_json(),
    )
    commands = {"base": base_cmd, "new": new_cmd}
    opened: dict[str, list[Trace]] = {side: [] for side in SIDES}
    pairs: list[tuple[Path, Path]] = []
    settled: Settled | None = None
    comparison: Comparison | None = None
    sides: Sides | None = None
    params: tuple[str, ...] = ()
    # before the first capture: the directory is ab's whatever happens next
    write_ab_manifest(out_dir, manifest)
    for i in range(1, rounds_cap + 1):
        order = SIDES if i % 2 else SIDES[::-1]
        paths: dict[str, Path] = {}
        shown: dict[str, str] = {}
        took: dict[str, float] = {}
        for side in order:
            paths[side] = dirs[side] / f"run-{i:03d}.katra"
            try:
                seconds = capture(
                    commands[side], paths[side], f"round {i}/{rounds_cap} {side.upper()}", who
                )
            except Interrupted as stopped:
                _record_interrupted(out_dir, manifest, i, paths, stopped)
                raise
            shown[side] = commands[side].shown(paths[side])
            took[side] = round(seconds, 3)
        done = AbRound(
            i, f"base/{paths['base'].name}", f"new/{paths['new'].name}", order, shown, took
        )
        manifest = dataclasses.replace(manifest, rounds=(*manifest.rounds, done))
        pairs.append((paths["base"], paths["new"]))
        if i == 1:
            changes = param_changes(
                open_quietly(paths["base"], events=False).header,
                open_quietly(paths["new"], events=False).header,
                same_command,
            )
            write_ab_manifest(out_dir, manifest)  # round 1 is recorded whatever the check says
            try:
                options = allow_defaults(changes, options)
            except ConfigError as exc:
                raise ConfigError(f"stopped after round 1 of {rounds_cap}: {exc}") from None
            params = tuple(c.line for c in changes)
        if rule is not None:
            for side in SIDES:
                opened[side].append(open_quietly(paths[side]))
            sides = Sides(
                str(dirs["base"]),
                str(dirs["new"]),
                tuple(opened["base"]),
                tuple(opened["new"]),
                pairs=tuple((j, j) for j in range(i)),
                rule=rule,
            )
            comparison = compare_sides(sides, options, image_policy="off").timing
            settled = settle_by(comparison, i, rounds_cap)
            if settled.decided or i == rounds_cap:
                manifest = dataclasses.replace(manifest, stop=settled.as_dict())
        # after every round: an interrupted A/B keeps its pairs
        write_ab_manifest(out_dir, manifest)
        if on_round is not None:
            on_round(
                Round(
                    number=i,
                    order=order,
                    seconds=took,
                    settled=settled,
                    params=params if i == 1 else (),
                )
            )
        if settled is not None and settled.decided:
            break
    return RoundsResult(
        root=out_dir,
        rounds=len(pairs),
        pairs=tuple(pairs),
        settled=settled,
        comparison=comparison,
        sides=sides,
        compare_options=options,
        params=params,
    )


def _record_interrupted(
    out_dir: Path,
    manifest: AbManifest,
    number: int,
    paths: Mapping[str, Path],
    stopped: Interrupted,
) -> None:
    """Note in ``ab.json`` the round a stop signal ended (``interrupted``: its number, the signal,
    and the traces of it that exist: a capture it stopped finished its trace as interrupted). The
    round is not one of the ``rounds``, so ``katra3d compare DIR`` pairs the complete rounds only;
    ``ab --force`` removes it all."""
    traces = {side: f"{side}/{path.name}" for side, path in paths.items() if path.is_file()}
    interrupted = {"round": number, "signal": signal.Signals(stopped.signum).name, "traces": traces}
    write_ab_manifest(out_dir, dataclasses.replace(manifest, interrupted=interrupted))


__all__ = ["Round", "RoundsResult", "capture", "run_rounds"]
