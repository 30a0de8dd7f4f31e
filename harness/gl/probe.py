"""What a capture ran on (GL, EGL, system, rendering environment), for the trace header."""

from __future__ import annotations

import importlib.metadata
import os
import platform
import re
import sys
from collections.abc import Mapping
from typing import Any

from katra3d.harness.gl.backends import current_egl_info, list_egl_devices
from katra3d.harness.gl.shim import GL_CONTEXT_PROFILE_MASK, GL_SHADING_LANGUAGE_VERSION, RawGL
from katra_trace.io.header import (
    DriverInfo,
    EGLDeviceInfo,
    EGLInfo,
    GLInfo,
    HostInfo,
    SystemInfo,
    TimerQueryInfo,
)

#: Lower-case GL_RENDERER substrings of CPU rasterizers.
SOFTWARE_RENDERERS: tuple[str, ...] = (
    "llvmpipe",
    "softpipe",
    "swrast",
    "lavapipe",
    "swiftshader",
    "software rasterizer",
    "microsoft basic render",
    "gdi generic",
)

ENV_PREFIXES: tuple[str, ...] = (
    "LIBGL_",
    "MESA_",
    "GALLIUM_",
    "LP_",
    "EGL_",
    "__GL",
    "GLCONTEXT_",
    "PYOPENGL_",
    "KATRA3D_",
)

PACKAGES: tuple[str, ...] = (
    "moderngl",
    "glcontext",
    "PyOpenGL",
    "numpy",
    "glfw",
    "zstandard",
    "katra3d",
)


def is_software_renderer(renderer: str) -> bool:
    low = renderer.lower()
    return any(name in low for name in SOFTWARE_RENDERERS)


def parse_driver(version: str, vendor: str = "", renderer: str = "") -> DriverInfo:
    """Driver from GL_VERSION (``"... Mesa 22.3.6"`` -> Mesa, 22.3.6); unknown: vendor, ``""``."""
    m = re.search(r"\bMesa\s+(\d+\.\d+(?:\.\d+)?(?:-\w+)?)", version)
    if m:
        return DriverInfo(name="Mesa", version=m.group(1))
    m = re.search(r"\bNVIDIA\s+(\d+(?:\.\d+)+)", version)
    if m:
        return DriverInfo(name="NVIDIA", version=m.group(1))
    m = re.search(r"\b(?:Compatibility|Core) Profile Context\s+(\d+(?:\.\d+)+)", version)
    if m and ("ati " in f"{vendor.lower()} " or "amd" in vendor.lower()):
        return DriverInfo(name="AMD", version=m.group(1))
    m = re.search(r"\bBuild\s+(\d+(?:\.\d+)+)", version)
    if m and "intel" in vendor.lower():
        return DriverInfo(name="Intel", version=m.group(1))
    return DriverInfo(name=vendor, version="")


def _profile(ctx: Any, version: str) -> str:
    if "core profile" in version.lower():
        return "core"
    if "compatibility" in version.lower():
        return "compatibility"
    try:
        mask = RawGL().get_integer(GL_CONTEXT_PROFILE_MASK)
        if mask & 0x1:
            return "core"
        if mask & 0x2:
            return "compatibility"
    except Exception:  # noqa: BLE001 - probing must never fail a run
        pass
    return "unknown"


def _glsl_version(ctx: Any) -> str:
    value = ctx.info.get("GL_SHADING_LANGUAGE_VERSION")
    if value:
        return str(value)
    try:
        raw = RawGL().get_string(GL_SHADING_LANGUAGE_VERSION)
    except Exception:  # noqa: BLE001 - probing must never fail a run
        return ""
    return raw.decode(errors="replace") if isinstance(raw, bytes) else str(raw or "")


def timer_query_info(ctx: Any) -> TimerQueryInfo:
    supported = ctx.version_code >= 330 or "GL_ARB_timer_query" in ctx.extensions
    bits = 0
    error = ""
    if supported:
        try:
            bits = RawGL().timestamp_counter_bits()
        except Exception as exc:  # noqa: BLE001
            error = f"{type(exc).__name__}: {exc}"
    return TimerQueryInfo(
        supported=bool(supported and bits > 0), counter_bits=bits, error=error or None
    )


def gl_info(ctx: Any) -> GLInfo:
    info = ctx.info
    vendor = str(info.get("GL_VENDOR", ""))
    renderer = str(info.get("GL_RENDERER", ""))
    version = str(info.get("GL_VERSION", ""))
    return GLInfo(
        vendor=vendor,
        renderer=renderer,
        version=version,
        version_code=int(ctx.version_code),
        glsl_version=_glsl_version(ctx),
        profile=_profile(ctx, version),
        driver=parse_driver(version, vendor, renderer),
        software_renderer=is_software_renderer(renderer),
        timer_query=timer_query_info(ctx),
        khr_debug="GL_KHR_debug" in ctx.extensions or ctx.version_code >= 430,
        max_texture_size=int(info.get("GL_MAX_TEXTURE_SIZE", 0) or 0),
        max_samples=int(info.get("GL_MAX_SAMPLES", 0) or 0),
        extensions_count=len(ctx.extensions),
    )


def _cpu_model() -> str:
    try:
        with open("/proc/cpuinfo", encoding="utf-8", errors="replace") as fh:
            for line in fh:
                if line.lower().startswith("model name"):
                    return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or platform.machine()


def _ram_bytes() -> int:
    try:
        return int(os.sysconf("SC_PAGE_SIZE")) * int(os.sysconf("SC_PHYS_PAGES"))
    except (ValueError, OSError, AttributeError):
        return 0


def _versions() -> dict[str, str]:
    out: dict[str, str] = {}
    for name in PACKAGES:
        try:
            out[name] = importlib.metadata.version(name)
        except importlib.metadata.PackageNotFoundError:
            out[name] = ""
    return out


def system_info() -> SystemInfo:
    try:
        usable = len(os.sched_getaffinity(0))
    except AttributeError:  # pragma: no cover - not on Linux
        usable = os.cpu_count() or 0
    return SystemInfo(
        cpu_model=_cpu_model(),
        cpu_cores=os.cpu_count() or 0,
        cpu_cores_usable=usable,
        ram_bytes=_ram_bytes(),
        os=platform.system(),
        kernel=platform.release(),
        platform=platform.platform(),
        machine=platform.machine(),
        hostname=platform.node(),
        python=sys.version.split()[0],
        python_implementation=platform.python_implementation(),
        packages=_versions(),
    )


def render_env(environ: Mapping[str, str] | None = None) -> dict[str, str]:
    env = os.environ if environ is None else environ
    return {k: env[k] for k in sorted(env) if k.startswith(ENV_PREFIXES)}


def egl_info(session: Any) -> EGLInfo:
    """Empty off EGL."""
    if getattr(session, "backend", "") != "egl":
        return EGLInfo()
    display = current_egl_info()
    index = session.device if session.device is not None else 0
    devices = list_egl_devices()
    device = EGLDeviceInfo()
    if 0 <= index < len(devices):
        dev = devices[index]
        device = EGLDeviceInfo(
            drm_device=dev["drm_device"], renderer=dev["renderer"], software=dev["software"]
        )
    return EGLInfo(
        vendor=display.get("vendor"),
        version=display.get("version"),
        device_index=index,
        device=device,
        device_count=len(devices),
    )


# write order (an empty ``egl`` part included)
_HOST_PARTS = ("backend", "gl", "egl", "system", "env")


def host_info(session: Any) -> HostInfo:
    return HostInfo(
        backend=getattr(session, "backend", ""),
        gl=gl_info(session.ctx),
        egl=egl_info(session),
        system=system_info(),
        env=render_env(),
        layout=_HOST_PARTS,
    )


__all__ = [
    "ENV_PREFIXES",
    "SOFTWARE_RENDERERS",
    "egl_info",
    "gl_info",
    "host_info",
    "is_software_renderer",
    "parse_driver",
    "render_env",
    "system_info",
    "timer_query_info",
]
