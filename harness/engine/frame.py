"""The per-frame object the harness passes to ``Scene.render``."""

from __future__ import annotations

import zlib
from collections.abc import Callable
from typing import Any

import numpy as np

from katra3d.scenes.api import NOMINAL_RATE_HZ


class HarnessFrame:
    """Frame index, scene time, a lazily seeded RNG and ``zone(name)``."""

    __slots__ = ("index", "time_s", "zone", "_seed_key", "_rng")

    def __init__(
        self, index: int, time_s: float, seed_key: tuple[int, int], zone: Callable[[str], Any]
    ) -> None:
        self.index = index
        self.time_s = time_s
        self.zone = zone
        self._seed_key = seed_key
        self._rng: np.random.Generator | None = None

    @property
    def rng(self) -> np.random.Generator:
        if self._rng is None:
            self._rng = np.random.default_rng([self._seed_key[0], self._seed_key[1], self.index])
        return self._rng


def frame_time_s(index: int) -> float:
    """Scene time (s) of frame ``index``, not of the clock: frame N looks alike in every run."""
    return index / NOMINAL_RATE_HZ


def seed_key(seed: int, scene_name: str) -> tuple[int, int]:
    """(seed, crc32(scene name)): the per-scene part of every frame's RNG seed."""
    return (int(seed), zlib.crc32(scene_name.encode("utf-8", "surrogatepass")))


__all__ = ["HarnessFrame", "frame_time_s", "seed_key"]
