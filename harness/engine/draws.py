"""``--zones draws``: every draw, dispatch, clear and blit becomes a zone ``<pass>/<label>#<k>``
(docs/timing.md). The moderngl methods in :data:`TARGETS` are wrapped only while a frame of the
captured context runs; draws over ``max_draw_zones`` are only counted (``untimed_draws``)."""

from __future__ import annotations

from collections.abc import Callable, Iterator
from contextlib import contextmanager
from typing import Any

from katra_trace.schema import FRAME_PASS, Clock, Kind, draw_zone_name

UNTIMED_NAME = "untimed_draws"

TARGETS: tuple[tuple[str, str, str], ...] = (
    ("VertexArray", "render", "vao"),
    ("VertexArray", "render_indirect", "vao"),
    ("ComputeShader", "run", "compute"),
    ("ComputeShader", "run_indirect", "compute"),
    ("Framebuffer", "clear", "clear"),
    ("Context", "clear", "clear"),
    ("Context", "copy_framebuffer", "blit"),
)


class DrawZones:
    """Installs the draw wrappers for one frame at a time, on one context."""

    def __init__(self, ctx: Any, timer: Any, *, max_draw_zones: int | None = None) -> None:
        # deferred: moderngl loads only when draws are instrumented
        import moderngl

        self.ctx = ctx
        self.timer = timer
        self.zone = timer.zone
        self.max_draw_zones = max_draw_zones
        self._classes = {name: getattr(moderngl, name) for name in {t[0] for t in TARGETS}}
        self._originals: dict[tuple[str, str], Any] = {
            (cls, meth): self._classes[cls].__dict__[meth] for cls, meth, _ in TARGETS
        }
        self._wrappers = {(cls, meth): self._wrap(cls, meth, kind) for cls, meth, kind in TARGETS}
        self._labels: dict[int, str] = {}
        self._passes: list[str] = []
        self._seen: dict[tuple[str, str], int] = {}
        self.drawn = 0
        self.untimed = 0
        self.installed = False
        self.untimed_name = timer.name_id(UNTIMED_NAME)

    def install(self) -> None:
        self._passes = []
        self._seen = {}
        self.drawn = 0
        self.untimed = 0
        for (cls, meth), wrapper in self._wrappers.items():
            setattr(self._classes[cls], meth, wrapper)
        self.installed = True

    def uninstall(self) -> None:
        """Put moderngl's own methods back."""
        if not self.installed:
            return
        for (cls, meth), original in self._originals.items():
            setattr(self._classes[cls], meth, original)
        self.installed = False
        if self.untimed:
            t = self.timer
            t.add(
                (
                    int(Kind.COUNTER),
                    int(Clock.CPU),
                    t.flags,
                    0,
                    t.scene_id,
                    self.untimed_name,
                    t.frame_index,
                    t.now_ns(),
                    0,
                    float(self.untimed),
                )
            )

    def new_scene(self) -> None:
        self._labels = {}

    @contextmanager
    def pass_zone(self, name: str) -> Iterator[None]:
        """``frame.zone(name)`` in draws mode, remembered as the pass."""
        self._passes.append(name)
        try:
            with self.zone(name):
                yield
        finally:
            self._passes.pop()

    def label_of(self, obj: Any, kind: str) -> str:
        if kind in ("clear", "blit"):
            return kind
        key = id(obj)
        label = self._labels.get(key)
        if label is None:
            label = self._labels[key] = _derive_label(obj, kind)
        return label

    def name(self, obj: Any, kind: str) -> str:
        label = self.label_of(obj, kind)
        where = self._passes[-1] if self._passes else FRAME_PASS
        key = (where, label)
        k = self._seen.get(key, 0) + 1
        self._seen[key] = k
        return draw_zone_name(where, label, k)

    def _wrap(self, cls: str, meth: str, kind: str) -> Callable[..., Any]:
        original = self._originals[(cls, meth)]
        ctx = self.ctx
        on_context = cls == "Context"
        instrument = self

        def wrapper(obj: Any, *args: Any, **kwargs: Any) -> Any:
            if (obj if on_context else getattr(obj, "ctx", None)) is not ctx:
                return original(obj, *args, **kwargs)
            cap = instrument.max_draw_zones
            if cap is not None and instrument.drawn >= cap:
                instrument.untimed += 1
                return original(obj, *args, **kwargs)
            instrument.drawn += 1
            with instrument.zone(instrument.name(obj, kind)):
                return original(obj, *args, **kwargs)

        wrapper.__name__ = getattr(original, "__name__", meth)
        wrapper.__qualname__ = f"katra3d_draw_zone({cls}.{meth})"
        wrapper.__doc__ = getattr(original, "__doc__", None)
        return wrapper


def _derive_label(obj: Any, kind: str) -> str:
    """The object's label, else one derived from its program."""
    try:
        label = obj.label
    except Exception:  # noqa: BLE001 - labels need GL_KHR_debug
        label = None
    if label:
        return str(label)
    if kind == "compute":
        return "compute"
    program = getattr(obj, "program", None)
    names: list[str] = []
    if program is None:
        return "draw"
    try:
        # deferred: moderngl loads only when draws are instrumented
        import moderngl

        names = sorted(name for name in program if isinstance(program[name], moderngl.Attribute))
    except Exception:  # noqa: BLE001
        names = []
    return f"draw({','.join(names)})" if names else "draw"


__all__ = ["TARGETS", "UNTIMED_NAME", "DrawZones"]
