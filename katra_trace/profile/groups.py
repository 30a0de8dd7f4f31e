"""The group of a profiled function: the one classification every profile view uses."""

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

#: Table order for groups of equal size.
GROUPS: tuple[str, ...] = (JIT, MESA, LLVM, PYTHON, NUMPY, MODERNGL, LIBC, OTHER)

#: llvmpipe's compiled shaders (callgrind's ``???``).
JIT_OBJECT = "JIT code"

# first match wins; folders count (numpy's, moderngl's extensions live under their package)
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
    if obj == JIT_OBJECT:
        return JIT
    path = os.path.normpath(obj) if obj else ""
    for pattern, group in _RULES:
        if pattern.search(path):
            return group
    return OTHER


__all__ = ["GROUPS", "JIT_OBJECT", "group_of"]
