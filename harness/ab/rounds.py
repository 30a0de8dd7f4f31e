"""Interleaved A/B rounds (``katra3d ab``, bisect's time mode): BASE and NEW alternating, in
``ab.json`` from the start; with a stopping rule, a look after each round."""

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

SIDES = ("base", "new")


@dataclasses.dataclass(frozen=True)
class Round:
    """One finished round; ``params``: in round 1, the scenes whose params differ."""

    number: int
    order: tuple[str, str]
    seconds: Mapping[str, float]
    settled: Settled | None = None
    params: tuple[str, ...] = ()


@dataclasses.dataclass(frozen=True)
class RoundsResult:
    """(BASE, NEW) trace pairs and, with a rule, the last look."""

    root: Path
    rounds: int
    pairs: tuple[tuple[Path, Path], ...]
    settled: Settled | None = None
    comparison: Comparison | None = None
    sides: Sides | None = None
    compare_options: CompareOptions = DEFAULT_COMPARE
    params: tuple[str, ...] = ()


def capture(command: CaptureCommand, out: Path, label: str, who: str = "katra3d ab") -> float:
    """``run_capture``, returning its seconds; a failure's last lines go to stderr first."""
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
    """Run up to ``rounds_cap`` rounds into ``out_dir``; with ``rule`` (its ``max_rounds`` =
    ``rounds_cap``), stop once every scene is decided. A params change after round 1 is a
    ConfigError unless ``same_command`` (scene defaults changed: named)."""
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
            try:
                options = allow_defaults(changes, options)
            except ConfigError as exc:
                write_ab_manifest(out_dir, manifest)  # round 1 is recorded all the same
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
        # an interrupted A/B keeps its pairs
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
    """Note in ``ab.json`` the round a stop signal ended (not in ``rounds``: compare pairs complete
    rounds only)."""
    traces = {side: f"{side}/{path.name}" for side, path in paths.items() if path.is_file()}
    interrupted = {"round": number, "signal": signal.Signals(stopped.signum).name, "traces": traces}
    write_ab_manifest(out_dir, dataclasses.replace(manifest, interrupted=interrupted))


__all__ = ["Round", "RoundsResult", "capture", "run_rounds"]
