"""The Scene API (docs/scenes.md): declarative class attributes, ``setup``/``render``/``release``.

Frame time is ``index / NOMINAL_RATE_HZ``, never the wall clock, so scenes are deterministic."""

from __future__ import annotations

import contextlib
import dataclasses
from collections.abc import Iterator, Mapping
from typing import Any, ClassVar, Protocol, TypeVar

import numpy as np

_T = TypeVar("_T")

#: A resolved scene parameter's value.
ParamValue = bool | int | float | str

NOMINAL_RATE_HZ = 60.0


class SceneSkip(Exception):
    """Raised by ``setup`` when the context lacks what the scene needs; the run records it."""


@dataclasses.dataclass(frozen=True)
class Param:
    """A scene parameter: default, type, inclusive range, help; ``choices`` for str/bool."""

    default: Any
    type: type = int
    min: float | None = None
    max: float | None = None
    help: str = ""
    choices: tuple[Any, ...] | None = None


class Frame(Protocol):
    """What ``Scene.render`` receives each frame."""

    @property
    def index(self) -> int:
        """Warmup frames included."""
        ...

    @property
    def time_s(self) -> float:
        """``index / NOMINAL_RATE_HZ``."""
        ...

    @property
    def rng(self) -> np.random.Generator:
        """Seeded per (run seed, scene, frame index)."""
        ...

    def zone(self, name: str) -> contextlib.AbstractContextManager[None]:
        """Time (when zones are on) and debug-label a pass or draw."""
        ...


class Scene:
    name: ClassVar[str] = ""
    description: ClassVar[str] = ""
    stresses: ClassVar[tuple[str, ...]] = ()
    #: minimum GL version as major*100 + minor*10, e.g. 330, 430
    min_gl_version: ClassVar[int] = 330
    required_extensions: ClassVar[tuple[str, ...]] = ()
    params: ClassVar[Mapping[str, Param]] = {}

    def setup(self, ctx: Any, size: tuple[int, int], params: Mapping[str, ParamValue]) -> None:
        """Create GL objects; ``ctx`` is a moderngl.Context."""
        raise NotImplementedError

    def render(self, frame: Frame) -> None:
        """Issue the GL commands of one frame."""
        raise NotImplementedError

    def release(self) -> None:
        """Free what :meth:`own` holds (newest first), then the target; safe twice, also called
        when ``setup`` fails part-way. Overrides call ``super().release()`` last."""
        owned: list[Any] = self.__dict__.get("_owned") or []
        self._owned: list[Any] = []
        first_error: BaseException | None = None
        for obj in reversed(owned):
            try:
                obj.release()
            except Exception as exc:  # keep releasing the rest
                first_error = first_error or exc
        self.release_target()
        if first_error is not None:
            raise first_error

    def own(self, obj: _T) -> _T:
        """Register ``obj`` (anything with ``release()``) for :meth:`release`; returns it."""
        owned: list[Any] = self.__dict__.setdefault("_owned", [])
        owned.append(obj)
        return obj

    def output_framebuffer(self) -> Any | None:
        """The final image's framebuffer (None: the default)."""
        return getattr(self, "target", None)

    @classmethod
    def check_requirements(cls, ctx: Any) -> None:
        """Raise :class:`SceneSkip` if ``ctx`` lacks the version or extensions; call first."""
        have = int(getattr(ctx, "version_code", 0))
        if have < cls.min_gl_version:
            raise SceneSkip(
                f"scene '{cls.name}' needs OpenGL {_gl_version_str(cls.min_gl_version)}, "
                f"the context has {_gl_version_str(have)}"
            )
        exts = set(getattr(ctx, "extensions", ()) or ())
        missing = [e for e in cls.required_extensions if e not in exts]
        if missing:
            raise SceneSkip(
                f"scene '{cls.name}' needs extension(s) {', '.join(missing)}, "
                f"which the context does not offer"
            )

    def bind_target(self, ctx: Any, size: tuple[int, int]) -> Any:
        """``self.target``: the bound framebuffer, or an owned RGBA8 + depth one when none of
        ``size`` is bound."""
        current = getattr(ctx, "fbo", None)
        self._owns_target = False
        self._target_ctx = ctx
        if current is None or tuple(current.size) != tuple(size):
            current = ctx.simple_framebuffer(tuple(size), components=4)
            self._owns_target = True
            current.use()
        self.target = current
        return current

    def release_target(self) -> None:
        """Release an owned target, then bind framebuffer 0 so no deleted one stays bound."""
        target = getattr(self, "target", None)
        if target is not None and getattr(self, "_owns_target", False):
            target.release()
            self._target_ctx.detect_framebuffer(0).use()
        self.target = None
        self._owns_target = False


def _gl_version_str(code: int) -> str:
    return f"{code // 100}.{(code % 100) // 10}"


class SimpleFrame:
    """A :class:`Frame` with no timing, for tests and by-hand runs."""

    def __init__(self, index: int, seed: int = 0) -> None:
        self.index = index
        self.time_s = index / NOMINAL_RATE_HZ
        self.rng = np.random.default_rng([seed, index])

    @contextlib.contextmanager
    def zone(self, name: str) -> Iterator[None]:
        yield


__all__ = ["Frame", "NOMINAL_RATE_HZ", "Param", "ParamValue", "Scene", "SceneSkip", "SimpleFrame"]
