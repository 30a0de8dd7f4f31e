"""The one comparison of two sides that compare, ab, report, bisect, pytest and CI render:
:func:`open_sides` then :func:`compare_sides`; commands print the result and decide nothing."""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping, Sequence
from pathlib import Path

from katra_trace.analysis.compare import compare_traces
from katra_trace.analysis.defaults import DEFAULT_COMPARE, CompareOptions
from katra_trace.analysis.images import (
    Image,
    ImageThresholds,
    ImageVerdict,
    exit_code_with_images,
    image_verdicts,
    side_images,
)
from katra_trace.analysis.sequential import SequentialRule, Settled
from katra_trace.analysis.verdict import Comparison, Verdict
from katra_trace.errors import ConfigError
from katra_trace.io.reader import Trace
from katra_trace.io.tracesets import AB_MANIFEST, AbManifest, open_trace_sets, read_ab_manifest
from katra_trace.jsontext import JsonObject
from katra_trace.metrics import is_count
from katra_trace.text import shown

AbRecord = tuple[Path, AbManifest]


def resolve_sides(base: str, new: str | None) -> tuple[str, str, AbRecord | None]:
    """BASE and NEW paths, and the ab output when they are its two sides."""
    known: AbRecord | None = None
    if new is None:
        root = Path(base)
        manifest = read_ab_manifest(root) if root.is_dir() else None
        if manifest is None:
            raise ConfigError(
                f"compare needs BASE and NEW, or the output directory of 'katra3d ab' "
                f"(with {AB_MANIFEST}); {base!r} is neither"
            )
        base, new = str(root / manifest.base_dir), str(root / manifest.new_dir)
        known = (root.resolve(), manifest)
    parent = _common_parent(base, new)
    if parent is None:
        return base, new, None
    found = known[1] if known is not None and known[0] == parent else read_ab_manifest(parent)
    return base, new, None if found is None else _own_sides(base, new, parent, found)


def _common_parent(base: str, new: str) -> Path | None:
    b, n = Path(base).resolve(), Path(new).resolve()
    return b.parent if b.is_dir() and n.is_dir() and b.parent == n.parent else None


def _own_sides(base: str, new: str, root: Path, manifest: AbManifest) -> AbRecord | None:
    names = (Path(base).resolve().name, Path(new).resolve().name)
    return (root, manifest) if (manifest.base_dir, manifest.new_dir) == names else None


def round_pairs(
    ab: AbRecord | None, base_paths: Sequence[Path], new_paths: Sequence[Path]
) -> tuple[list[tuple[int, int]] | None, list[str]]:
    """(BASE index, NEW index) pairs (None: unpaired) and the note that says so."""
    if ab is None:
        return None, []
    root, manifest = ab
    manifest_path, rounds = root / AB_MANIFEST, manifest.pairs(root)
    index_b = {p.resolve(): i for i, p in enumerate(base_paths)}
    index_n = {p.resolve(): i for i, p in enumerate(new_paths)}
    pairs = [(index_b[b], index_n[n]) for b, n in rounds if b in index_b and n in index_n]
    left = len(base_paths) + len(new_paths) - 2 * len(pairs)
    if not pairs:
        return None, [f"{manifest_path} pairs none of these traces: compared unpaired"]
    return pairs, [
        f"paired: {len(pairs)} round(s) from {manifest_path}"
        + (f"; {left} trace(s) outside a complete round left out" if left else "")
    ]


def recorded_rule(manifest: AbManifest) -> tuple[SequentialRule | None, Settled | None]:
    """The recorded stopping rule and stop (None, None for fixed rounds); ConfigError if
    malformed."""
    if manifest.sequential is None:
        return None, None
    stop = manifest.stop
    return SequentialRule.from_json(
        manifest.sequential
    ), None if stop is None else Settled.from_dict(stop)


def _interrupted(ab: AbRecord | None) -> str:
    stop = ab[1].interrupted if ab is not None else None
    if not isinstance(stop, dict):
        return ""
    return f"was interrupted in round {stop.get('round', '?')} ({stop.get('signal', 'a signal')})"


@dataclasses.dataclass(frozen=True)
class Sides:
    base: str
    new: str
    base_traces: tuple[Trace, ...]
    new_traces: tuple[Trace, ...]
    pairs: tuple[tuple[int, int], ...] | None = None
    rule: SequentialRule | None = None
    stop: Settled | None = None
    notes: tuple[str, ...] = ()
    damaged: tuple[str, ...] = ()


def open_sides(
    base: str | Sequence[str],
    new: str | Sequence[str] | None = None,
    *,
    unpaired: bool = False,
    verb: str = "comparing",
) -> Sides:
    """ConfigError for a side that is no trace; a side of several paths is never paired."""
    if not isinstance(base, str) or (new is not None and not isinstance(new, str)):
        base_args, new_args = (
            [base] if isinstance(base, str) else list(base),
            [new] if isinstance(new, str) else list(new or ()),
        )
        if len(base_args) == len(new_args) == 1:
            return open_sides(base_args[0], new_args[0], unpaired=unpaired, verb=verb)
        base_traces, damaged_b = open_trace_sets(base_args, verb)
        new_traces, damaged_n = open_trace_sets(new_args, verb)
        return Sides(
            ", ".join(base_args),
            ", ".join(new_args),
            tuple(base_traces),
            tuple(new_traces),
            damaged=(*damaged_b, *damaged_n),
        )
    base, new, ab = resolve_sides(base, new)
    stopped = _interrupted(ab)
    if stopped and ab is not None and not ab[1].rounds:
        raise ConfigError(f"{shown(str(ab[0]))}: the A/B run {stopped}, before any round ended")
    base_traces, damaged_b = open_trace_sets([base], verb)
    new_traces, damaged_n = open_trace_sets([new], verb)
    pairs, notes = round_pairs(
        None if unpaired else ab, [t.path for t in base_traces], [t.path for t in new_traces]
    )
    rule, stop = recorded_rule(ab[1]) if pairs is not None and ab is not None else (None, None)
    if stopped:
        notes.append(f"the A/B run {stopped}: its complete rounds are compared")
    return Sides(
        base,
        new,
        tuple(base_traces),
        tuple(new_traces),
        None if pairs is None else tuple(pairs),
        rule,
        stop,
        tuple(notes),
        (*damaged_b, *damaged_n),
    )


def separate_batches(sides: Sides) -> str | None:
    """The note when unpaired sides were captured in separate batches (drift shows as change)."""
    if sides.pairs is not None:
        return None
    starts = [
        [t.header.start_wall_ns for t in traces] for traces in (sides.base_traces, sides.new_traces)
    ]
    if not all(starts) or any(v is None for side in starts for v in side):
        return None
    base, new = ([int(v) for v in side if v is not None] for side in starts)
    if max(base) < min(new) or max(new) < min(base):
        first = "BASE" if max(base) < min(new) else "NEW"
        return (
            f"the sides were captured in separate batches ({first}'s "
            f"{len(base if first == 'BASE' else new)} "
            f"run(s) all before the other's): time intervals allow for the machine's drift between "
            f"batches (docs/stats.md); katra3d ab interleaves the runs"
        )
    return None


@dataclasses.dataclass(frozen=True)
class ComparisonResult:
    """Timing, image verdicts, ab's rule and stop."""

    base: str
    new: str
    timing: Comparison
    images: Mapping[str, ImageVerdict]
    image_policy: str
    rule: SequentialRule | None = None
    stop: Settled | None = None
    #: not in the JSON
    base_images: Mapping[str, Image] = dataclasses.field(
        default_factory=dict, repr=False, compare=False
    )
    new_images: Mapping[str, Image] = dataclasses.field(
        default_factory=dict, repr=False, compare=False
    )

    @property
    def exit_code(self) -> int:
        return exit_code_with_images(self.timing.exit_code, self.images, self.image_policy)

    def as_dict(self) -> JsonObject:
        out = dict(self.timing.as_dict(), base=self.base, new=self.new)
        if self.rule is not None:
            out["sequential"] = {
                "rule": self.rule.to_json(),
                "stop": None if self.stop is None else self.stop.as_dict(),
            }
        out.update(
            {
                "image_policy": self.image_policy,
                "images": {s: v.as_dict() for s, v in self.images.items()},
                "exit_code": self.exit_code,
            }
        )
        return out


def compare_sides(
    sides: Sides,
    options: CompareOptions = DEFAULT_COMPARE,
    *,
    image_policy: str = "gate",
    image_limits: ImageThresholds | None = None,
) -> ComparisonResult:
    """A recorded stopping rule decides with its own alpha and threshold, as ab did."""
    notes = list(sides.notes)
    if sides.rule is not None:
        rule = sides.rule
        if sides.stop is not None:
            notes.append(f"ab --until-decided: {sides.stop.reason}")
        if options.alpha != rule.alpha or options.threshold_pct not in (None, rule.threshold_pct):
            thr = "the default" if rule.threshold_pct is None else f"{rule.threshold_pct:g}%"
            notes.append(
                f"the stopping rule recorded in {AB_MANIFEST} decides, with its alpha "
                f"{rule.alpha:g} and "
                f"threshold {thr}; --alpha and --threshold given here are not used"
            )
    batches = separate_batches(sides)
    timing = compare_traces(
        list(sides.base_traces),
        list(sides.new_traces),
        options,
        pairs=None if sides.pairs is None else list(sides.pairs),
        sequential=sides.rule,
        separate_batches=bool(batches),
    )
    if batches and not is_count(timing.metric):
        notes.append(batches)
    if notes:
        timing = dataclasses.replace(timing, notes=(*notes, *timing.notes))
    images: dict[str, ImageVerdict] = {}
    base_images: dict[str, Image] = {}
    new_images: dict[str, Image] = {}
    if image_policy != "off":
        base_images, new_images = (
            dict(side_images(sides.base_traces)),
            dict(side_images(sides.new_traces)),
        )
        order = [s.scene for s in timing.scenes]
        images = image_verdicts(
            base_images,
            new_images,
            image_limits or ImageThresholds(),
            scenes=dict.fromkeys(
                [
                    *(s for s in order if s in base_images or s in new_images),
                    *base_images,
                    *new_images,
                ]
            ),
            not_comparable={
                s.scene: s.reason for s in timing.scenes if s.verdict is Verdict.INCOMPARABLE
            },
        )
    return ComparisonResult(
        sides.base,
        sides.new,
        timing,
        images,
        image_policy,
        sides.rule,
        sides.stop,
        base_images,
        new_images,
    )


__all__ = [
    "AbRecord",
    "ComparisonResult",
    "Sides",
    "compare_sides",
    "open_sides",
    "recorded_rule",
    "resolve_sides",
    "round_pairs",
    "separate_batches",
]
