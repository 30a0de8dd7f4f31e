"""An ordered table of headless moderngl context backends, each imported lazily.

Explicit backends fail loudly, ``auto`` tries each; all render offscreen, never to a window's
framebuffer, so results do not depend on one."""

from __future__ import annotations

import contextlib
import ctypes
import ctypes.util
import dataclasses
import os
import sys
from collections.abc import Callable, Iterator
from typing import Any, TypedDict

from katra_trace.errors import BackendUnavailable, ConfigError
from katra_trace.jsontext import JsonObject, record_dict

MESA_INSTALL_LINE = "apt-get install libegl1 libegl-mesa0 libgl1-mesa-dri"

BACKEND_ENV = "KATRA3D_BACKEND"

ORDER: tuple[str, ...] = ("egl", "glfw")

CHOICES: tuple[str, ...] = ("egl", "glfw", "auto")

DEFAULT_BACKEND = "egl"

REQUIRE_GL = 330


@dataclasses.dataclass(frozen=True)
class BackendStatus:
    name: str
    available: bool
    why_not: str = ""

    def as_dict(self) -> JsonObject:
        return record_dict(self)


@dataclasses.dataclass
class GLSession:
    """An open GL context and its offscreen RGBA8 + depth framebuffer (``samples``: 0 = no MSAA)."""

    backend: str
    device: int | None
    ctx: Any  # moderngl.Context
    fbo: Any  # moderngl.Framebuffer
    size: tuple[int, int]
    samples: int
    _close: Callable[[], None] | None = None
    _attachments: tuple[Any, ...] = ()

    def bind(self) -> None:
        self.fbo.use()

    def close(self) -> None:
        for obj in (self.fbo, *self._attachments):
            with contextlib.suppress(Exception):
                obj.release()
        with contextlib.suppress(Exception):
            self.ctx.release()
        if self.backend == "egl":
            release_current_egl()
        if self._close is not None:
            self._close()
            self._close = None

    def __enter__(self) -> GLSession:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


def _check_egl() -> str:
    try:
        # deferred: loaded only when probed
        import glcontext.egl  # noqa: F401
        import moderngl  # noqa: F401
    except ImportError as exc:
        return f"cannot import moderngl/glcontext: {exc}"
    if ctypes.util.find_library("EGL") is None:
        return f"libEGL not found (install Mesa's EGL: {MESA_INSTALL_LINE})"
    return ""


def _check_glfw() -> str:
    if not os.environ.get("DISPLAY") and not os.environ.get("WAYLAND_DISPLAY"):
        return "no display: DISPLAY is not set (start Xvfb, or use --backend egl)"
    try:
        # deferred: loaded only when probed
        import glfw  # noqa: F401
    except Exception as exc:  # noqa: BLE001 - not only ImportError
        return f"cannot import glfw: {exc}"
    return ""


_CHECKS: dict[str, Callable[[], str]] = {"egl": _check_egl, "glfw": _check_glfw}


def check(name: str) -> BackendStatus:
    """Imports, libraries, display; opens no context."""
    why = _CHECKS[name]()
    return BackendStatus(name, not why, why)


def probe(name: str, device: int | None = None) -> BackendStatus:
    """Whether ``name`` really opens a (tiny) context."""
    status = check(name)
    if not status.available:
        return status
    try:
        session = _OPENERS[name](device, (1, 1), 0)
    except BackendUnavailable as exc:
        return BackendStatus(name, False, str(exc))
    session.close()
    return BackendStatus(name, True, "")


def resolve_name(requested: str | None) -> str:
    """``requested``, else ``$KATRA3D_BACKEND``, else ``egl``."""
    name = requested or os.environ.get(BACKEND_ENV) or DEFAULT_BACKEND
    name = name.strip().lower()
    if name not in CHOICES:
        source = "--backend" if requested else BACKEND_ENV
        raise ConfigError(
            f"unknown backend '{name}' (from {source}); choose one of: {', '.join(CHOICES)}"
        )
    return name


def _offscreen(ctx: Any, size: tuple[int, int], samples: int) -> tuple[Any, tuple[Any, ...]]:
    max_samples = int(ctx.info.get("GL_MAX_SAMPLES", 0) or 0)
    if samples > max_samples:
        raise ConfigError(
            f"--samples {samples} is more than this context supports (GL_MAX_SAMPLES = "
            f"{max_samples})"
        )
    max_size = int(ctx.info.get("GL_MAX_RENDERBUFFER_SIZE", 0) or 0)
    if max_size and max(size) > max_size:
        raise ConfigError(
            f"--size {size[0]}x{size[1]} is more than this context supports "
            f"(GL_MAX_RENDERBUFFER_SIZE = {max_size})"
        )
    made: list[Any] = []
    try:
        made.append(ctx.renderbuffer(size, 4, samples=samples))
        made.append(ctx.depth_renderbuffer(size, samples=samples))
        fbo = ctx.framebuffer(color_attachments=[made[0]], depth_attachment=made[1])
    except Exception as exc:  # moderngl.Error: incomplete framebuffer, out of memory
        for obj in made:
            with contextlib.suppress(Exception):
                obj.release()
        detail = str(exc).strip().splitlines()[0] if str(exc).strip() else type(exc).__name__
        raise ConfigError(
            f"cannot create a {size[0]}x{size[1]} framebuffer"
            + (f" with {samples} samples" if samples else "")
            + f" on this context ({detail}); try a smaller --size"
        ) from None
    return fbo, (made[0], made[1])


def _finish_session(
    name: str,
    device: int | None,
    ctx: Any,
    size: tuple[int, int],
    samples: int,
    close: Callable[[], None] | None,
) -> GLSession:
    try:
        fbo, attachments = _offscreen(ctx, size, samples)
    except BaseException:
        with contextlib.suppress(Exception):
            ctx.release()
        if close is not None:
            close()
        raise
    session = GLSession(name, device, ctx, fbo, size, samples, close, attachments)
    session.bind()
    return session


def _open_egl(device: int | None, size: tuple[int, int], samples: int) -> GLSession:
    why = _check_egl()
    if why:
        raise BackendUnavailable(f"backend 'egl' unavailable: {why}")
    if "OpenGL" not in sys.modules and "PYOPENGL_PLATFORM" not in os.environ:
        # the timers' raw GL calls resolve through EGL too: no GLX on headless hosts
        os.environ["PYOPENGL_PLATFORM"] = "egl"
    # deferred: loaded only when a context is opened
    import moderngl

    where = {} if device is None else {"device_index": device}
    try:
        ctx = moderngl.create_standalone_context(backend="egl", require=REQUIRE_GL, **where)
    except Exception as exc:  # noqa: BLE001 - glcontext raises plain Exception
        detail = str(exc).strip().splitlines()[0] if str(exc).strip() else type(exc).__name__
        if device is not None and "device" in detail.lower():
            raise BackendUnavailable(
                f"backend 'egl' cannot use EGL device {device}: {detail}"
            ) from None
        raise BackendUnavailable(
            f"backend 'egl' could not create a context: {detail} (install Mesa's EGL: "
            f"{MESA_INSTALL_LINE})"
        ) from None
    return _finish_session("egl", device, ctx, size, samples, None)


def _open_glfw(device: int | None, size: tuple[int, int], samples: int) -> GLSession:
    why = _check_glfw()
    if why:
        raise BackendUnavailable(f"backend 'glfw' unavailable: {why}")
    if device is not None:
        raise ConfigError("--device selects an EGL device; backend 'glfw' does not take one")
    # deferred: loaded only when its backend is opened
    import glfw

    errors: list[str] = []
    glfw.set_error_callback(
        lambda code, desc: errors.append(
            desc.decode(errors="replace") if isinstance(desc, bytes) else str(desc)
        )
    )
    if not glfw.init():
        raise BackendUnavailable(
            f"backend 'glfw' could not initialise: {'; '.join(errors) or 'glfw.init() failed'}"
        )
    glfw.default_window_hints()
    glfw.window_hint(glfw.VISIBLE, glfw.FALSE)
    glfw.window_hint(glfw.CONTEXT_VERSION_MAJOR, 3)
    glfw.window_hint(glfw.CONTEXT_VERSION_MINOR, 3)
    glfw.window_hint(glfw.OPENGL_PROFILE, glfw.OPENGL_CORE_PROFILE)
    glfw.window_hint(glfw.OPENGL_FORWARD_COMPAT, glfw.TRUE)
    window = glfw.create_window(max(size[0], 1), max(size[1], 1), "katra3d", None, None)
    if not window:
        glfw.terminate()
        raise BackendUnavailable(
            "backend 'glfw' could not create a GL 3.3 core window: "
            f"{'; '.join(errors) or 'unknown reason'}"
        )
    glfw.make_context_current(window)
    glfw.swap_interval(0)

    def close() -> None:
        glfw.destroy_window(window)
        glfw.terminate()

    # deferred: loaded only when a context is opened
    import moderngl

    try:
        ctx = moderngl.create_context(require=REQUIRE_GL, standalone=False)
    except Exception as exc:  # noqa: BLE001
        close()
        raise BackendUnavailable(
            f"backend 'glfw' could not wrap the window's context: {exc}"
        ) from None
    return _finish_session("glfw", None, ctx, size, samples, close)


_OPENERS: dict[str, Callable[[int | None, tuple[int, int], int], GLSession]] = {
    "egl": _open_egl,
    "glfw": _open_glfw,
}


def open_session(
    backend: str | None = None,
    *,
    device: int | None = None,
    size: tuple[int, int] = (256, 256),
    samples: int = 0,
) -> GLSession:
    """A GL session on ``backend`` (``auto`` tries :data:`ORDER`); BackendUnavailable with every
    reason when none works."""
    name = resolve_name(backend)
    if name != "auto":
        return _OPENERS[name](device, size, samples)
    reasons: list[str] = []
    for candidate in ORDER:
        if candidate == "glfw" and device is not None:
            reasons.append("glfw: --device applies to EGL only")
            continue
        try:
            return _OPENERS[candidate](device, size, samples)
        except BackendUnavailable as exc:
            reasons.append(str(exc))
    raise BackendUnavailable(
        f"no usable OpenGL backend ({'; '.join(reasons)}); install Mesa's EGL/llvmpipe: "
        f"{MESA_INSTALL_LINE}"
    )


def _egl_lib() -> Any | None:
    path = ctypes.util.find_library("EGL")
    if path is None:
        return None
    try:
        return ctypes.CDLL(path)
    except OSError:
        return None


EGL_VENDOR = 0x3053
EGL_VERSION = 0x3054
EGL_EXTENSIONS = 0x3055
EGL_DRM_DEVICE_FILE_EXT = 0x3233
EGL_RENDERER_EXT = 0x335F


class EglDevice(TypedDict):
    """An EGL device; ``drm_device`` and ``renderer`` "" where EGL does not say."""

    index: int
    drm_device: str
    renderer: str
    software: bool
    extensions: list[str]


def list_egl_devices() -> list[EglDevice]:
    """EGL devices in ``--device`` order; empty without EGL_EXT_device_enumeration."""
    egl = _egl_lib()
    if egl is None:
        return []
    egl.eglGetProcAddress.restype = ctypes.c_void_p
    egl.eglGetProcAddress.argtypes = [ctypes.c_char_p]
    query_ptr = egl.eglGetProcAddress(b"eglQueryDevicesEXT")
    string_ptr = egl.eglGetProcAddress(b"eglQueryDeviceStringEXT")
    if not query_ptr or not string_ptr:
        return []
    query_devices = ctypes.CFUNCTYPE(
        ctypes.c_uint, ctypes.c_int, ctypes.POINTER(ctypes.c_void_p), ctypes.POINTER(ctypes.c_int)
    )(query_ptr)
    query_string = ctypes.CFUNCTYPE(ctypes.c_char_p, ctypes.c_void_p, ctypes.c_int)(string_ptr)
    count = ctypes.c_int(0)
    if not query_devices(0, None, ctypes.byref(count)) or count.value <= 0:
        return []
    devices = (ctypes.c_void_p * count.value)()
    if not query_devices(count.value, devices, ctypes.byref(count)):
        return []
    out: list[EglDevice] = []
    for index in range(count.value):
        exts = (query_string(devices[index], EGL_EXTENSIONS) or b"").decode(errors="replace")
        drm = b""
        if "EGL_EXT_device_drm" in exts:
            drm = query_string(devices[index], EGL_DRM_DEVICE_FILE_EXT) or b""
        renderer = b""
        if "EGL_EXT_device_query_name" in exts:
            renderer = query_string(devices[index], EGL_RENDERER_EXT) or b""
        out.append(
            {
                "index": index,
                "drm_device": drm.decode(errors="replace"),
                "renderer": renderer.decode(errors="replace"),
                "software": "EGL_MESA_device_software" in exts,
                "extensions": exts.split(),
            }
        )
    return out


def current_egl_info() -> dict[str, str]:
    """{} off EGL."""
    egl = _egl_lib()
    if egl is None:
        return {}
    egl.eglGetCurrentDisplay.restype = ctypes.c_void_p
    egl.eglGetCurrentDisplay.argtypes = []
    egl.eglQueryString.restype = ctypes.c_char_p
    egl.eglQueryString.argtypes = [ctypes.c_void_p, ctypes.c_int]
    display = egl.eglGetCurrentDisplay()
    if not display:
        return {}
    vendor = egl.eglQueryString(display, EGL_VENDOR) or b""
    version = egl.eglQueryString(display, EGL_VERSION) or b""
    return {"vendor": vendor.decode(errors="replace"), "version": version.decode(errors="replace")}


def release_current_egl() -> None:
    """Make no EGL context current: a released one left current breaks a later GLX context."""
    egl = _egl_lib()
    if egl is None:
        return
    egl.eglGetCurrentDisplay.restype = ctypes.c_void_p
    egl.eglGetCurrentDisplay.argtypes = []
    egl.eglMakeCurrent.restype = ctypes.c_uint
    egl.eglMakeCurrent.argtypes = [
        ctypes.c_void_p,
        ctypes.c_void_p,
        ctypes.c_void_p,
        ctypes.c_void_p,
    ]
    display = egl.eglGetCurrentDisplay()
    if display:
        egl.eglMakeCurrent(display, None, None, None)


def statuses(probe_contexts: bool = False) -> Iterator[BackendStatus]:
    for name in ORDER:
        yield probe(name) if probe_contexts else check(name)


__all__ = [
    "BACKEND_ENV",
    "BackendStatus",
    "EglDevice",
    "CHOICES",
    "DEFAULT_BACKEND",
    "GLSession",
    "MESA_INSTALL_LINE",
    "ORDER",
    "check",
    "current_egl_info",
    "list_egl_devices",
    "open_session",
    "probe",
    "resolve_name",
    "statuses",
]
