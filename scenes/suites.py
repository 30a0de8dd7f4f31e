"""Named scene suites, and ``--shard I/N``: split by a cost estimated from params and size, never
a timing, so every machine of a CI matrix makes the same split."""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass

from katra3d.scenes.api import ParamValue
from katra_trace.errors import ConfigError


@dataclass(frozen=True)
class Suite:
    """(scene name, param overrides) entries run at one ``size`` (pixels)."""

    name: str
    description: str
    size: tuple[int, int]
    frames: int
    warmup: int
    entries: tuple[tuple[str, Mapping[str, ParamValue]], ...]

    def scene_names(self) -> tuple[str, ...]:
        return tuple(name for name, _ in self.entries)


#: Small params: the whole ci suite runs in under 60 s on llvmpipe.
_CI_ENTRIES: tuple[tuple[str, Mapping[str, ParamValue]], ...] = (
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

_DEFAULT_ENTRIES: tuple[tuple[str, Mapping[str, ParamValue]], ...] = tuple(
    (name, {}) for name, _ in _CI_ENTRIES
)

_STRESS_ENTRIES: tuple[tuple[str, Mapping[str, ParamValue]], ...] = (
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
    try:
        return SUITES[name]
    except KeyError:
        raise ConfigError(f"unknown suite '{name}'; available: {', '.join(SUITES)}") from None


def suites_containing(scene_name: str) -> list[str]:
    return [s.name for s in SUITES.values() if scene_name in s.scene_names()]


#: A scene's start (compiles, uploads; a counted run's valgrind child) in :data:`_FRAME_COST` units.
SCENE_START_COST = 100_000.0
#: A user scene's frame cost: 1 ms.
UNKNOWN_FRAME_COST = 1_000.0

_Cost = Callable[[Mapping[str, ParamValue], int], float]


def _num(params: Mapping[str, ParamValue], key: str, default: float) -> float:
    value = params.get(key, default)
    return (
        float(value) if isinstance(value, (int, float)) and not isinstance(value, bool) else default
    )


#: Estimated frame cost (us of llvmpipe on 2 cores) from params and pixels ``px``, fitted once to
#: the ci suite's medians: for ordering work, not a measurement.
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


def scene_cost(
    name: str, params: Mapping[str, ParamValue], size: tuple[int, int], frames: int
) -> float:
    """Estimated cost of ``frames`` frames (warmup included), the same on every machine."""
    frame = _FRAME_COST.get(name)
    px = max(1, size[0]) * max(1, size[1])
    per_frame = UNKNOWN_FRAME_COST if frame is None else max(1.0, float(frame(params, px)))
    return SCENE_START_COST + max(1, frames) * per_frame


def shard_indices(costs: Sequence[float], index: int, count: int) -> tuple[int, ...]:
    """Positions of shard ``index``/``count``'s scenes: longest first to the least loaded shard,
    deterministic. ConfigError when there are more shards than scenes."""
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
