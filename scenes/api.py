"""The Scene API: what a workload is, and what it gets each frame.

A scene is a small class with declarative attributes and a three-step
lifecycle::

    class Spin(Scene):
        name = "spin"
        description = "one lit cube, rotating"
        stresses = ("vertex",)
        params = {"count": Param(1, int, 1, 1000, "cubes drawn")}

        def setup(self, ctx, size, params):
            self.check_requirements(ctx)          # SceneSkip if GL version/extensions lack
            self.bind_target(ctx, size)           # the framebuffer bound now -> self.target
            self.prog = self.own(compile_program(ctx, VS, FS, scene=self.name))
            self.vao = self.own(ctx.vertex_array(...))   # own(): released for you
        def render(self, frame): ...              # draw one frame into self.target

``release()`` is inherited: it frees every object passed to :meth:`Scene.own`
(newest first) and the target, so most scenes never write one. The harness
calls it after the last frame, and also when ``setup`` fails part-way.

``render`` gets a :class:`Frame` from the harness: the frame index, a
deterministic time (``index / nominal_rate_hz``, never the wall clock), a
seeded RNG and ``zone(name)``, a context manager that times a pass or draw
(when zones are on) and labels it with a KHR_debug group.

Scenes depend on moderngl and numpy only; they know nothing of traces.
"""

from __future__ import annotations

import contextlib
import dataclasses
from collections.abc import Iterator, Mapping
from typing import Any, ClassVar, Protocol, TypeVar

import numpy as np

_T = TypeVar("_T")

#: The rate that maps frame indices to scene time: ``time_s = index / NOMINAL_RATE_HZ``.
NOMINAL_RATE_HZ = 60.0


class SceneSkip(Exception):
    """Raised by ``setup`` when the context lacks what the scene needs.

    The runner records the skip and its reason in the trace and goes on.
    """


@dataclasses.dataclass(frozen=True)
class Param:
    """A scene parameter: default, type, valid range (inclusive) and meaning.

    ``choices`` restricts a str/bool param to a set of values.
    """

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
        """Frame index within the scene, warmup frames included."""
        ...

    @property
    def time_s(self) -> float:
        """Deterministic scene time, ``index / NOMINAL_RATE_HZ``."""
        ...

    @property
    def rng(self) -> np.random.Generator:
        """A generator seeded per (run seed, scene, frame index)."""
        ...

    def zone(self, name: str) -> contextlib.AbstractContextManager[None]:
        """Time (when zones are on) and debug-label a pass or draw."""
        ...


class Scene:
    """Base class of every scene. Subclasses set the class attributes below."""

    name: ClassVar[str] = ""
    description: ClassVar[str] = ""
    stresses: ClassVar[tuple[str, ...]] = ()
    #: minimum GL version as major*100 + minor*10, e.g. 330, 430
    min_gl_version: ClassVar[int] = 330
    required_extensions: ClassVar[tuple[str, ...]] = ()
    params: ClassVar[Mapping[str, Param]] = {}

    def setup(self, ctx: Any, size: tuple[int, int], params: Mapping[str, Any]) -> None:
        """Create GL objects. ``ctx`` is a moderngl.Context; render into ``ctx.fbo``
        unless the scene says otherwise via :meth:`output_framebuffer`."""
        raise NotImplementedError

    def render(self, frame: Frame) -> None:
        """Issue the GL commands of one frame."""
        raise NotImplementedError

    def release(self) -> None:
        """Free every object registered with :meth:`own` (newest first), then the target.

        Override it only for resources :meth:`own` cannot hold; call
        ``super().release()`` at the end. Safe to call more than once.
        """
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
        """Register ``obj`` (anything with ``release()``: a buffer, program, texture, framebuffer,
        VAO) to be freed by :meth:`release`; returns it, so ``self.vbo =
        self.own(ctx.buffer(...))``."""
        owned: list[Any] = self.__dict__.setdefault("_owned", [])
        owned.append(obj)
        return obj

    def output_framebuffer(self) -> Any | None:
        """The framebuffer holding the final image (None: the context's default).

        The default returns the target remembered by :meth:`bind_target`, if any.
        """
        return getattr(self, "target", None)

    # -- helpers for subclasses -------------------------------------------------

    @classmethod
    def check_requirements(cls, ctx: Any) -> None:
        """Raise :class:`SceneSkip` if ``ctx`` lacks the GL version or extensions
        this scene declares (``min_gl_version``, ``required_extensions``).

        Call it first thing in ``setup``.
        """
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
        """Remember the framebuffer the scene must draw its final image into.

        That is the framebuffer bound when ``setup`` is called (``ctx.fbo``; the
        harness binds an offscreen one of ``size`` for headless contexts). If
        none is bound, or its size differs from ``size``, the scene creates its
        own RGBA8 + depth framebuffer, binds it and releases it in
        :meth:`release_target`. Returns the target; also stored as ``self.target``.
        """
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
        """Release the framebuffer created by :meth:`bind_target`, if the scene owns it.

        Binds framebuffer 0 afterwards, so that no deleted framebuffer stays bound
        (moderngl rebinds ``ctx.fbo`` after creating objects).
        """
        target = getattr(self, "target", None)
        if target is not None and getattr(self, "_owns_target", False):
            target.release()
            self._target_ctx.detect_framebuffer(0).use()
        self.target = None
        self._owns_target = False


def _gl_version_str(code: int) -> str:
    """430 -> '4.3'."""
    return f"{code // 100}.{(code % 100) // 10}"


class SimpleFrame:
    """A :class:`Frame` with no timing, for tests and for running a scene by hand."""

    def __init__(self, index: int, seed: int = 0) -> None:
        self.index = index
        self.time_s = index / NOMINAL_RATE_HZ
        self.rng = np.random.default_rng([seed, index])

    @contextlib.contextmanager
    def zone(self, name: str) -> Iterator[None]:
        yield


__all__ = ["Frame", "NOMINAL_RATE_HZ", "Param", "Scene", "SceneSkip", "SimpleFrame"]
