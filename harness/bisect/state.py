"""What a bisection is and what it found so far, as data, and its file ``DIR/bisect.json``.

The file is both the state a ``--resume`` continues from and the result scripts read: it is
rewritten atomically (through the one output rule, :func:`katra_trace.io.claim.open_output`) after
every commit measured, so Ctrl-C or a crash loses at most the commits being measured.
"""

from __future__ import annotations

import dataclasses
import json
import os
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from katra3d.harness.versions.git import Commit
from katra_trace import jsontext
from katra_trace.analysis.bisection import STATES, Effect
from katra_trace.errors import ConfigError
from katra_trace.io.claim import open_output
from katra_trace.io.inputs import read_regular
from katra_trace.text import shown

#: The state and result file in the output directory.
BISECT_FILE = "bisect.json"
#: Its format version.
BISECT_VERSION = 1


@dataclasses.dataclass(frozen=True)
class Setup:
    """What is bisected and how: fixed when a bisection starts, taken as is by ``--resume``.

    ``command``: the capture command template (``{out}`` is the trace path), run with the commit's
    worktree as its current directory. ``compare``: the keyword arguments of
    :func:`katra_trace.analysis.compare.compare_traces` (metric, threshold, alpha, allow_* ...).
    ``max_rounds``: time only, the cap on interleaved rounds against GOOD per commit.
    ``commits``: the range after GOOD up to BAD (BAD last), oldest first.
    """

    repository: str
    good: Commit
    bad: Commit
    measure: str
    command: str
    scenes: tuple[str, ...]
    compare: Mapping[str, Any]
    max_rounds: int
    commits: tuple[Commit, ...]

    def as_dict(self) -> dict[str, Any]:
        return {
            "repository": self.repository,
            "good": dataclasses.asdict(self.good),
            "bad": dataclasses.asdict(self.bad),
            "measure": self.measure,
            "command": self.command,
            "scenes": list(self.scenes),
            "compare": dict(self.compare),
            "max_rounds": self.max_rounds,
            "commits": [dataclasses.asdict(c) for c in self.commits],
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
            compare=dict(data["compare"]),
            max_rounds=int(data["max_rounds"]),
            commits=tuple(Commit(**c) for c in data["commits"]),
        )


@dataclasses.dataclass(frozen=True)
class CommitResult:
    """One measured commit: its state against GOOD and BAD, why, and what was measured.

    ``state``: ``good``, ``bad`` or ``skip`` (:data:`~katra_trace.analysis.bisection.STATES`).
    ``effects``: per scene (and per zone, counts) its change against GOOD (GOOD's own row is empty).
    ``traces``: the traces kept, relative to the output directory. ``rounds``: captures of this
    commit (time: interleaved rounds against GOOD; counts: 1). ``stopped``: time only, why the
    rounds stopped. ``seconds``: wall time of this commit's captures. ``log``: the captures' output,
    relative path. ``images``: scene -> its image verdict against GOOD as one line ("image changed:
    FLIP mean ..."), shown beside the timing; it does not classify the commit. ``round``: the
    bisection's round that measured it (1: GOOD and BAD; counts with ``--jobs N`` measure up to N
    commits a round; 0: a file from before rounds).
    """

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

    def __post_init__(self) -> None:
        if self.state not in STATES:
            raise ValueError(f"state must be one of {', '.join(STATES)}, got {self.state!r}")

    @property
    def short(self) -> str:
        return Commit(self.sha, self.subject).short

    def as_dict(self) -> dict[str, Any]:
        out = {f.name: getattr(self, f.name) for f in dataclasses.fields(self)}
        out.update(
            effects=[e.as_dict() for e in self.effects],
            traces=list(self.traces),
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
        )


def write_state(
    root: Path, setup: Setup, tested: Mapping[str, CommitResult], outcome: Mapping[str, Any]
) -> None:
    """Write ``root/bisect.json`` atomically: the setup, every commit measured (in the order
    measured, GOOD and BAD first) and the outcome so far (``status``, ``first_bad`` ...)."""
    doc = {
        "katra3d_bisect": BISECT_VERSION,
        **outcome,
        "setup": setup.as_dict(),
        "tested": [r.as_dict() for r in tested.values()],
    }
    text = jsontext.dumps(doc, indent=2) + "\n"
    with open_output(root / BISECT_FILE, force=True, option="-o", example=BISECT_FILE) as f:
        f.write(text.encode("utf-8"))


#: The largest bisect.json read (a bisection's file is a few KB a commit).
MAX_STATE_BYTES = 64 << 20


def read_state(root: Path) -> tuple[Setup, dict[str, CommitResult]]:
    """The setup and the measured commits of ``root/bisect.json`` (ConfigError when there is none or
    it is not a bisection's file)."""
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
            f"--resume: {shown(str(path))} is not a katra3d bisect file (version {BISECT_VERSION})"
        )
    try:
        setup = Setup.from_dict(data["setup"])
        tested = [CommitResult.from_dict(r) for r in data["tested"]]
    except (KeyError, TypeError, ValueError) as exc:
        raise ConfigError(
            f"--resume: {shown(str(path))} is damaged ({type(exc).__name__}: {exc})"
        ) from None
    return setup, {r.sha: r for r in tested}


__all__ = ["BISECT_FILE", "BISECT_VERSION", "CommitResult", "Setup", "read_state", "write_state"]
