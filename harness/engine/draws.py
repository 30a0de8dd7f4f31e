"""``--zones draws``: every draw, dispatch, clear and blit of a frame becomes a zone, with no
annotation.

While a frame runs (and only then), :class:`DrawZones` replaces these moderngl
methods with wrappers that open a zone around the call:
``VertexArray.render`` / ``render_indirect``, ``ComputeShader.run`` /
``run_indirect``, ``Framebuffer.clear``, ``Context.clear`` and
``Context.copy_framebuffer`` (the scene helpers call these too). A wrapper
times only calls on the captured context; any other context passes straight
through. The originals are put back at the end of every frame, so outside
frames — and after the capture ends — moderngl is untouched, and with
``--zones off|passes`` nothing is installed at all.

Names are stable across frames, so frames and versions compare draw by draw:
``<pass>/<label>#<k>`` — the innermost pass zone open at the call (``frame``
when none is), the draw's label, and ``k``, the 1-based count of draws with
that label so far in that pass in this frame. The label is the VAO's (or the
compute shader's) moderngl ``label`` when the scene set one, otherwise
``draw(<attribute names>)`` from the VAO's program, ``compute``, ``clear`` or
``blit``. A draw zone nests in its pass zone (depth + 1).

``max_draw_zones`` caps the draws timed per frame; the rest run untimed and a
COUNTER ``untimed_draws`` (value = how many) is written for the frame.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from contextlib import contextmanager
from typing import Any

from katra_trace.schema import FRAME_PASS, Clock, Kind, draw_zone_name

#: Name of the per-frame counter of draws that went untimed (over the cap).
UNTIMED_NAME = "untimed_draws"

#: (class name in moderngl, method name, label kind) of every call that becomes a draw zone.
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
    """Installs the draw wrappers for one frame at a time, on one context, for one timer."""

    def __init__(self, ctx: Any, timer: Any, *, max_draw_zones: int | None = None) -> None:
        # deferred: moderngl (and the GL library) loads only when draws are instrumented
        import moderngl

        self.ctx = ctx
        self.timer = timer
        self.zone = timer.zone  # the timer's own zone (passes and draws alike)
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

    # -- per frame

    def install(self) -> None:
        """Put the wrappers in place (at frame start)."""
        self._passes = []
        self._seen = {}
        self.drawn = 0
        self.untimed = 0
        for (cls, meth), wrapper in self._wrappers.items():
            setattr(self._classes[cls], meth, wrapper)
        self.installed = True

    def uninstall(self) -> None:
        """Put moderngl's own methods back (at frame end; also after an error)."""
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
        """The ``frame.zone(name)`` scenes call in draws mode: the timer's zone, remembered as the
        pass.
        """
        self._passes.append(name)
        try:
            with self.zone(name):
                yield
        finally:
            self._passes.pop()

    # -- naming

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

    # -- the wrappers

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
    """The scene's label for a VAO or compute shader, else one derived from its program."""
    try:
        label = obj.label
    except Exception:  # noqa: BLE001 - labels need GL_KHR_debug; a missing one is no error
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
    except Exception:  # noqa: BLE001 - an unusual program: fall back to a plain label
        names = []
    return f"draw({','.join(names)})" if names else "draw"


__all__ = ["TARGETS", "UNTIMED_NAME", "DrawZones"]
