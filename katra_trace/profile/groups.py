"""The group a profiled function belongs to: the one classification every profile view uses."""

from __future__ import annotations

import os
import re

JIT = "shader code (JIT)"
MESA = "Mesa driver"
LLVM = "LLVM"
PYTHON = "Python"
NUMPY = "numpy"
MODERNGL = "moderngl"
LIBC = "C library"
OTHER = "other"

#: Every group, in the order tables list groups of equal size.
GROUPS: tuple[str, ...] = (JIT, MESA, LLVM, PYTHON, NUMPY, MODERNGL, LIBC, OTHER)

#: The object of code no ELF file holds (llvmpipe's compiled shaders): callgrind names it ``???``.
JIT_OBJECT = "JIT code"

# (pattern on the object's path, group), first match wins; the path's folders count for the
# Python packages (numpy's and moderngl's extension modules live under their package folder)
_RULES: tuple[tuple[re.Pattern[str], str], ...] = tuple(
    (re.compile(p), g)
    for p, g in (
        (r"(^|/)libLLVM", LLVM),
        (r"/moderngl/|(^|/)(moderngl|glcontext)[^/]*\.so|/glcontext/", MODERNGL),
        (r"/numpy(\.libs)?/|(^|/)libopenblas|(^|/)libgfortran", NUMPY),
        (
            r"(^|/)(libgallium|libGL|libEGL|libGLX|libglapi|libGLdispatch|libGLESv|libdrm|"
            r"libgbm|libxshmfence|libexpat)|_dri\.so|/dri/",
            MESA,
        ),
        (r"(^|/)(python3|libpython3)[^/]*$|/lib-dynload/|/site-packages/.*\.so", PYTHON),
        (r"(^|/)(libc|libm|libpthread|libdl|librt|ld-linux[^/]*|libstdc\+\+|libgcc_s)[.-]", LIBC),
        (r"(^|/)vgpreload_", LIBC),
    )
)


def group_of(obj: str) -> str:
    """The group of every function of object ``obj`` (an ELF path, or :data:`JIT_OBJECT`)."""
    if obj == JIT_OBJECT:
        return JIT
    path = os.path.normpath(obj) if obj else ""
    for pattern, group in _RULES:
        if pattern.search(path):
            return group
    return OTHER


__all__ = ["GROUPS", "JIT_OBJECT", "group_of"]
