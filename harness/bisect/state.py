"""A bisection's state and result as data, and its file ``DIR/bisect.json`` (for ``--resume``
and scripts), rewritten atomically after every commit so a crash loses only those in flight."""

from __future__ import annotations

import dataclasses
import json
import math
import os
import shlex
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from katra3d.harness.versions.git import Commit
from katra_trace import jsontext
from katra_trace.analysis.bisection import STATES, Effect
from katra_trace.analysis.defaults import CompareOptions
from katra_trace.errors import ConfigError
from katra_trace.io.claim import open_output
from katra_trace.io.inputs import read_regular
from katra_trace.jsontext import JsonObject
from katra_trace.text import shown

BISECT_FILE = "bisect.json"
BISECT_VERSION = 1


@dataclasses.dataclass(frozen=True)
class Setup:
    """What is bisected and how, fixed at the start; ``commits``: after GOOD up to BAD, oldest
    first; ``images``: seek the first changed kept frame, not a slowdown."""

    repository: str
    good: Commit
    bad: Commit
    measure: str
    command: str
    scenes: tuple[str, ...]
    compare: CompareOptions
    max_rounds: int
    commits: tuple[Commit, ...]
    images: bool = False

    def again(self, good: str, bad: str) -> str:
        what = (
            " ".join(shlex.quote(s) for s in self.scenes)
            if self.scenes
            else f"-c {shlex.quote(self.command)}"
        )
        images = " --images" if self.images else ""
        return f"katra3d bisect {good} {bad} {what} -m {self.measure}{images}"

    def as_dict(self) -> JsonObject:
        return {
            "repository": self.repository,
            "good": dataclasses.asdict(self.good),
            "bad": dataclasses.asdict(self.bad),
            "measure": self.measure,
            "command": self.command,
            "scenes": list(self.scenes),
            "compare": self.compare.as_dict(),
            "max_rounds": self.max_rounds,
            "commits": [dataclasses.asdict(c) for c in self.commits],
            "images": self.images,
        }

    @classmethod
    def from_dict(cls, data: Mapping[str, Any]) -> Setup:
        return cls(
            repository=str(data["repository"]),
            good=Commit(**data["good"]),
            bad=Commit(**data["bad"]),
            measure=str(data["measure"]),
            command=str(data["command"]),
            scenes=tuple(str(s) for s in data["scenes"]),
            compare=CompareOptions.from_dict(data["compare"]),
            max_rounds=int(data["max_rounds"]),
            commits=tuple(Commit(**c) for c in data["commits"]),
            images=bool(data.get("images", False)),
        )


@dataclasses.dataclass(frozen=True)
class CommitResult:
    """One measured commit; ``effects`` against GOOD; ``round``: the bisection round that measured
    it (0: an older file); paths relative to the output directory."""

    sha: str
    subject: str
    state: str
    reason: str
    effects: tuple[Effect, ...] = ()
    traces: tuple[str, ...] = ()
    rounds: int = 0
    stopped: str = ""
    seconds: float = 0.0
    log: str = ""
    images: Mapping[str, str] = dataclasses.field(default_factory=dict)
    round: int = 0
    params: tuple[str, ...] = ()

    def __post_init__(self) -> None:
        if self.state not in STATES:
            raise ValueError(f"state must be one of {', '.join(STATES)}, got {self.state!r}")

    @property
    def short(self) -> str:
        return Commit(self.sha, self.subject).short

    def as_dict(self) -> JsonObject:
        out = jsontext.record_dict(self)
        out.update(
            effects=[e.as_dict() for e in self.effects],
            images=dict(self.images),
            seconds=round(self.seconds, 3),
        )
        return out

    @classmethod
    def from_dict(cls, data: Mapping[str, Any]) -> CommitResult:
        return cls(
            sha=str(data["sha"]),
            subject=str(data["subject"]),
            state=str(data["state"]),
            reason=str(data["reason"]),
            effects=tuple(Effect.from_dict(e) for e in data.get("effects", ())),
            traces=tuple(str(t) for t in data.get("traces", ())),
            rounds=int(data.get("rounds", 0)),
            stopped=str(data.get("stopped", "")),
            seconds=float(data.get("seconds", 0.0)),
            log=str(data.get("log", "")),
            images=dict(data.get("images", {})),
            round=int(data.get("round", 0)),
            params=tuple(str(p) for p in data.get("params", ())),
        )


STATUS_EXIT = {
    "running": 2,
    "found": 0,
    "ambiguous": 2,
    "all skipped": 2,
    "nothing to bisect": 2,
    "not measured": 2,
}


MAX_STATE_BYTES = 64 << 20


@dataclasses.dataclass(frozen=True)
class Outcome:
    """What a bisection found or how far it got; ``explained``: the culprit's share of BAD's
    change per scene."""

    status: str
    message: str
    first_bad: Commit | None = None
    last_good: Commit | None = None
    candidates: tuple[Commit, ...] = ()
    explained: Mapping[str, tuple[float, float]] = dataclasses.field(default_factory=dict)
    partial: Mapping[str, float] = dataclasses.field(default_factory=dict)
    next_ranges: tuple[str, ...] = ()
    steps: tuple[str, ...] = ()

    @property
    def exit_code(self) -> int:
        return STATUS_EXIT[self.status]


def _pct(share: float) -> float | None:
    return round(share * 100, 1) if math.isfinite(share) else None


def _share(value: Any) -> float:
    return math.nan if value is None else float(value) / 100


@dataclasses.dataclass
class Bisection:
    """A bisection as ``DIR/bisect.json`` holds it; :meth:`to_json`/:meth:`from_json` are its
    one layout."""

    setup: Setup
    tested: dict[str, CommitResult] = dataclasses.field(default_factory=dict)
    outcome: Outcome = Outcome("running", "measuring GOOD and BAD")

    def to_json(self) -> JsonObject:
        o = self.outcome
        culprit = self.tested.get(o.first_bad.sha) if o.first_bad else None
        return {
            "katra3d_bisect": BISECT_VERSION,
            "status": o.status,
            "message": o.message,
            "exit_code": o.exit_code,
            "first_bad": o.first_bad.sha if o.first_bad else None,
            "first_bad_subject": o.first_bad.subject if o.first_bad else None,
            "last_good": o.last_good.sha if o.last_good else None,
            "candidates": [c.sha for c in o.candidates],
            "effect": [e.as_dict() for e in culprit.effects] if culprit else [],
            "explained": {
                s: {"before_pct": _pct(p), "culprit_pct": _pct(c), "step_pct": _pct(c - p)}
                for s, (p, c) in o.explained.items()
            },
            "partial": {s: _pct(v) for s, v in o.partial.items()},
            "next_ranges": list(o.next_ranges),
            "steps": list(o.steps),
            "setup": self.setup.as_dict(),
            "tested": [r.as_dict() for r in self.tested.values()],
        }

    @classmethod
    def from_json(cls, data: Mapping[str, Any]) -> Bisection:
        """KeyError, TypeError or ValueError when damaged."""
        setup = Setup.from_dict(data["setup"])
        known = {c.sha: c for c in (setup.good, *setup.commits)}

        def commit(sha: Any) -> Commit | None:
            return None if sha is None else known[str(sha)]

        partial = data.get("partial") or {}
        outcome = Outcome(
            status=str(data["status"]),
            message=str(data["message"]),
            first_bad=commit(data.get("first_bad")),
            last_good=commit(data.get("last_good")),
            candidates=tuple(known[str(c)] for c in data.get("candidates", ())),
            explained={
                s: (_share(v["before_pct"]), _share(v["culprit_pct"]))
                for s, v in data.get("explained", {}).items()
            },
            partial={s: _share(v) for s, v in partial.items()} if isinstance(partial, dict) else {},
            next_ranges=tuple(str(r) for r in data.get("next_ranges", ())),
            steps=tuple(str(r) for r in data.get("steps", ())),
        )
        if outcome.status not in STATUS_EXIT:
            raise ValueError(f"unknown status {outcome.status!r}")
        tested = [CommitResult.from_dict(r) for r in data["tested"]]
        return cls(setup, {r.sha: r for r in tested}, outcome)

    def save(self, root: Path) -> None:
        text = jsontext.dumps(self.to_json(), indent=2) + "\n"
        with open_output(root / BISECT_FILE, force=True, option="-o", example=BISECT_FILE) as f:
            f.write(text.encode("utf-8"))

    @classmethod
    def load(cls, root: Path) -> Bisection:
        """ConfigError when ``root`` has no valid bisect.json."""
        path = root / BISECT_FILE
        if not os.path.lexists(path):
            raise ConfigError(
                f"--resume: {shown(str(root))} holds no {BISECT_FILE}; give the -o directory of an "
                "earlier 'katra3d bisect'"
            )
        raw = read_regular(path, what="bisection file", max_bytes=MAX_STATE_BYTES)
        try:
            data = json.loads(raw.decode("utf-8"))
        except ValueError as exc:
            raise ConfigError(f"--resume: cannot read {shown(str(path))}: {exc}") from None
        if not isinstance(data, dict) or data.get("katra3d_bisect") != BISECT_VERSION:
            raise ConfigError(
                f"--resume: {shown(str(path))} is not a katra3d bisect file (version "
                f"{BISECT_VERSION})"
            )
        try:
            return cls.from_json(data)
        except (KeyError, TypeError, ValueError, AttributeError) as exc:
            raise ConfigError(
                f"--resume: {shown(str(path))} is damaged ({type(exc).__name__}: {exc})"
            ) from None


__all__ = [
    "BISECT_FILE",
    "BISECT_VERSION",
    "STATUS_EXIT",
    "Bisection",
    "CommitResult",
    "Outcome",
    "Setup",
]
