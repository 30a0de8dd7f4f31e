"""Named scene suites: which scenes a run covers, at what size, for how many frames.

* ``ci`` — every built-in scene with small params at 320x180; the whole
  suite runs in well under 60 s on llvmpipe on 2 cores.
* ``default`` — every built-in scene at 1280x720 (what ``make run`` runs);
  under 3 minutes on llvmpipe on 2 cores.
* ``stress`` — heavier params at 1920x1080, for real GPUs.

Frame counts are per scene: ``warmup`` frames (recorded, flagged) then
``frames`` measured frames, the same for every entry of a suite.

Shards (``katra3d run --shard I/N``): :func:`shard_indices` splits a run's scenes into N shares of
about equal estimated cost (:func:`scene_cost`: a formula of the scene's params and the frame size,
never a timing), the same on every machine, so that the N jobs of a CI matrix run every scene once.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
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
_DEFAULT_ENTRIES: tuple[tuple[str, Mapping[str, Any]], ...] = tuple(
    (name, {}) for name, _ in _CI_ENTRIES
)

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


#: Estimated cost of a scene's start (shader compiles, uploads, its first frames), in the units of
#: :data:`_FRAME_COST`; for a counted run it also stands for the scene's own valgrind child.
SCENE_START_COST = 100_000.0
#: Per-frame cost of an unknown scene (a user's FILE.py:Class): 1 ms.
UNKNOWN_FRAME_COST = 1_000.0

_Cost = Callable[[Mapping[str, Any], int], float]


def _num(params: Mapping[str, Any], key: str, default: float) -> float:
    value = params.get(key, default)
    return (
        float(value) if isinstance(value, (int, float)) and not isinstance(value, bool) else default
    )


#: Each built-in scene's estimated frame cost from its params and the frame's pixels ``px``, in
#: microseconds of llvmpipe frame time on 2 cores: the work term that grows with each param, with
#: its factor fitted once to the ``ci`` suite's medians at 320x180 (clear 158 us, triangle 63 us,
#: ..., instancing 20.5 ms). An estimate for ordering work, not a measurement.
_FRAME_COST: dict[str, _Cost] = {
    "clear": lambda p, px: 40 + 0.0005 * px * _num(p, "bands", 4),
    "triangle": lambda p, px: 40 + 0.0004 * px,
    "geometry": lambda p, px: 0.14 * 16 * _num(p, "detail", 64) ** 2 + 0.001 * px,
    "drawcalls": lambda p, px: 9.0 * _num(p, "count", 1000),
    "instancing": lambda p, px: 2.0 * _num(p, "count", 20000),
    "fillrate": lambda p, px: 0.0062 * px * _num(p, "layers", 8),
    "shader": lambda p, px: 0.00185 * px * _num(p, "iterations", 48),
    "texture": lambda p, px: 0.0129 * px * _num(p, "samplers", 4),
    "buffer": lambda p, px: (
        0.46 * _num(p, "grid", 256) ** 2 * max(_num(p, "update_fraction", 0.5), 0.05)
    ),
    "shadow": lambda p, px: (
        0.004 * (px * (2 * _num(p, "pcf", 1) + 1) ** 2 + _num(p, "shadow_size", 2048) ** 2)
        + 20 * _num(p, "objects", 24)
    ),
    "postfx": lambda p, px: (
        0.005 * (2 * (2 * _num(p, "radius", 8) + 1) * px / _num(p, "downsample", 2) ** 2 + 2 * px)
        + 20 * _num(p, "objects", 64)
    ),
    "compute": lambda p, px: 0.15 * _num(p, "count", 65536),
}


def scene_cost(name: str, params: Mapping[str, Any], size: tuple[int, int], frames: int) -> float:
    """The estimated cost of running scene ``name`` with ``params`` at ``size`` for ``frames``
    frames (warmup included): :data:`SCENE_START_COST` plus ``frames`` times its frame cost
    (:data:`_FRAME_COST`; an unknown scene :data:`UNKNOWN_FRAME_COST`). Deterministic: the same on
    every machine."""
    frame = _FRAME_COST.get(name)
    px = max(1, size[0]) * max(1, size[1])
    per_frame = UNKNOWN_FRAME_COST if frame is None else max(1.0, float(frame(params, px)))
    return SCENE_START_COST + max(1, frames) * per_frame


def shard_indices(costs: Sequence[float], index: int, count: int) -> tuple[int, ...]:
    """The positions (in run order) of the scenes shard ``index`` of ``count`` runs, given each
    scene's cost.

    Longest first: the scenes in order of falling cost (ties in run order) each go to the shard with
    the least cost so far (ties: the lowest shard). Every scene lands in exactly one shard, whatever
    machine computes it. ConfigError when the shard would have no scene (more shards than scenes).
    """
    if count > len(costs):
        raise ConfigError(
            f"bad --shard {index}/{count}: this run has {len(costs)} scene(s), so at most "
            f"{len(costs)} shard(s)"
        )
    loads = [0.0] * count
    owner = [0] * len(costs)
    for pos in sorted(range(len(costs)), key=lambda i: (-costs[i], i)):
        k = min(range(count), key=lambda j: (loads[j], j))
        loads[k] += costs[pos]
        owner[pos] = k + 1
    return tuple(pos for pos in range(len(costs)) if owner[pos] == index)


__all__ = [
    "SCENE_START_COST",
    "SUITES",
    "UNKNOWN_FRAME_COST",
    "Suite",
    "get_suite",
    "scene_cost",
    "shard_indices",
    "suites_containing",
]
