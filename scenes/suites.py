"""Named scene suites: which scenes a run covers, at what size, for how many frames.

* ``ci`` — every built-in scene with small params at 320x180; the whole
  suite runs in well under 60 s on llvmpipe on 2 cores.
* ``default`` — every built-in scene at 1280x720 (what ``make run`` runs);
  under 3 minutes on llvmpipe on 2 cores.
* ``stress`` — heavier params at 1920x1080, for real GPUs.

Frame counts are per scene: ``warmup`` frames (recorded, flagged) then
``frames`` measured frames, the same for every entry of a suite.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from katra_trace.errors import ConfigError


@dataclass(frozen=True)
class Suite:
    """A named list of (scene name, param overrides) run at one size.

    ``size`` is (width, height) in pixels; ``frames`` measured and ``warmup``
    unmeasured frames per scene.
    """

    name: str
    description: str
    size: tuple[int, int]
    frames: int
    warmup: int
    entries: tuple[tuple[str, Mapping[str, Any]], ...]

    def scene_names(self) -> tuple[str, ...]:
        """The scene names in this suite, in run order."""
        return tuple(name for name, _ in self.entries)


SUITES: dict[str, Suite] = {
    "ci": Suite(
        name="ci",
        description="every scene, small params, 320x180: quick regression check for CI on llvmpipe",
        size=(320, 180),
        frames=60,
        warmup=5,
        entries=(
            ("clear", {}),
            ("triangle", {}),
        ),
    ),
    "default": Suite(
        name="default",
        description="every scene at 1280x720 with default params (what `make run` runs)",
        size=(1280, 720),
        frames=30,
        warmup=3,
        entries=(
            ("clear", {}),
            ("triangle", {}),
        ),
    ),
    "stress": Suite(
        name="stress",
        description="heavier params at 1920x1080, meant for real GPUs",
        size=(1920, 1080),
        frames=120,
        warmup=10,
        entries=(
            ("clear", {"bands": 64}),
            ("triangle", {}),
        ),
    ),
}


def get_suite(name: str) -> Suite:
    """The suite called ``name``; ConfigError listing the valid names otherwise."""
    try:
        return SUITES[name]
    except KeyError:
        raise ConfigError(f"unknown suite '{name}'; available: {', '.join(SUITES)}") from None


def suites_containing(scene_name: str) -> list[str]:
    """Names of the suites that run ``scene_name``."""
    return [s.name for s in SUITES.values() if scene_name in s.scene_names()]


__all__ = ["SUITES", "Suite", "get_suite", "suites_containing"]
