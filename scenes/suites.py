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


#: every built-in scene, with the small params the ci suite uses
_CI_ENTRIES: tuple[tuple[str, Mapping[str, Any]], ...] = (
    ("clear", {}),
    ("triangle", {}),
    ("geometry", {"detail": 24}),
    ("drawcalls", {"count": 200}),
    ("instancing", {"count": 10000}),
    ("fillrate", {"layers": 4}),
    ("shader", {"iterations": 24}),
    ("texture", {"tex_size": 256, "samplers": 2}),
    ("buffer", {"grid": 96}),
    ("shadow", {"objects": 8, "shadow_size": 512}),
    ("postfx", {"radius": 4, "objects": 16}),
    ("compute", {"count": 16384}),
)

#: every built-in scene with its default params
_DEFAULT_ENTRIES: tuple[tuple[str, Mapping[str, Any]], ...] = tuple((name, {}) for name, _ in _CI_ENTRIES)

#: heavier params, sized for real GPUs (far too slow for llvmpipe)
_STRESS_ENTRIES: tuple[tuple[str, Mapping[str, Any]], ...] = (
    ("clear", {"bands": 64}),
    ("triangle", {}),
    ("geometry", {"detail": 256}),
    ("geometry", {"detail": 256, "indexed": False}),
    ("drawcalls", {"count": 10000}),
    ("instancing", {"count": 500000}),
    ("fillrate", {"layers": 64}),
    ("shader", {"iterations": 512}),
    ("texture", {"tex_size": 4096, "samplers": 4, "filter": "anisotropic"}),
    ("buffer", {"grid": 1024, "update_fraction": 1.0, "method": "map"}),
    ("buffer", {"grid": 1024, "update_fraction": 1.0, "method": "subdata"}),
    ("shadow", {"objects": 256, "shadow_size": 4096, "pcf": 2}),
    ("postfx", {"radius": 24, "downsample": 1, "objects": 1024}),
    ("compute", {"count": 4_194_304}),
)

SUITES: dict[str, Suite] = {
    "ci": Suite(
        name="ci",
        description="every scene, small params, 320x180: quick regression check for CI on llvmpipe",
        size=(320, 180),
        frames=60,
        warmup=5,
        entries=_CI_ENTRIES,
    ),
    "default": Suite(
        name="default",
        description="every scene at 1280x720 with default params (what `make run` runs)",
        size=(1280, 720),
        frames=100,
        warmup=5,
        entries=_DEFAULT_ENTRIES,
    ),
    "stress": Suite(
        name="stress",
        description="heavier params at 1920x1080, sized for real GPUs (slow on llvmpipe)",
        size=(1920, 1080),
        frames=300,
        warmup=30,
        entries=_STRESS_ENTRIES,
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
