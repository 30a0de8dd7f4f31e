"""Every raw PyOpenGL call and GL constant used outside moderngl, each defined once.

64-bit reads use ctypes buffers: otherwise ``glGetQueryObjectui64v`` raises and
``glGetInteger64v`` returns garbage."""

from __future__ import annotations

import ctypes
import types

GL_NO_ERROR = 0
GL_TIMESTAMP = 0x8E28
GL_QUERY_COUNTER_BITS = 0x8864
GL_QUERY_RESULT = 0x8866
GL_QUERY_RESULT_AVAILABLE = 0x8867
GL_DEBUG_SOURCE_APPLICATION = 0x824A
GL_MAX_DEBUG_MESSAGE_LENGTH = 0x9143
GL_MAX_SAMPLES = 0x8D57
GL_MAX_RENDERBUFFER_SIZE = 0x84E8
GL_CONTEXT_PROFILE_MASK = 0x9126
GL_SHADING_LANGUAGE_VERSION = 0x8B8C


class RawGL:
    """Raw entry points of the current context; only PyOpenGL's raw modules are imported (0.05 s
    against 0.17 s for ``OpenGL.GL``, seconds under valgrind)."""

    def __init__(self) -> None:
        # deferred: PyOpenGL loads libGL
        from OpenGL.raw.GL.VERSION import GL_1_0, GL_1_5, GL_3_2, GL_3_3

        self.GL = types.SimpleNamespace(
            glGetString=GL_1_0.glGetString,
            glGetIntegerv=GL_1_0.glGetIntegerv,
            glGenQueries=GL_1_5.glGenQueries,
            glDeleteQueries=GL_1_5.glDeleteQueries,
            glGetQueryiv=GL_1_5.glGetQueryiv,
        )
        self.query_counter = GL_3_3.glQueryCounter
        self.get_query_iv = GL_1_5.glGetQueryObjectiv
        self.get_query_ui64v = GL_3_3.glGetQueryObjectui64v
        self.get_integer64v = GL_3_2.glGetInteger64v

    def gen_queries(self, n: int) -> list[int]:
        ids = (ctypes.c_uint * n)()
        self.GL.glGenQueries(n, ids)
        return list(ids)

    def delete_queries(self, ids: list[int]) -> None:
        if ids:
            arr = (ctypes.c_uint * len(ids))(*ids)
            self.GL.glDeleteQueries(len(ids), arr)

    def query_result_ns(self, query: int) -> int:
        """Blocks until the result is available."""
        out = ctypes.c_uint64(0)
        self.get_query_ui64v(query, GL_QUERY_RESULT, ctypes.byref(out))
        return int(out.value)

    def timestamp_counter_bits(self) -> int:
        """0: no usable timestamps."""
        out = ctypes.c_int(0)
        self.GL.glGetQueryiv(GL_TIMESTAMP, GL_QUERY_COUNTER_BITS, ctypes.byref(out))
        return int(out.value)

    def get_string(self, name: int) -> bytes | None:
        raw = self.GL.glGetString(name)
        if raw is None or isinstance(raw, bytes):
            return raw
        return ctypes.cast(raw, ctypes.c_char_p).value  # a GLubyte pointer

    def get_integer(self, pname: int) -> int:
        out = ctypes.c_int(0)
        self.GL.glGetIntegerv(pname, ctypes.byref(out))
        return int(out.value)


__all__ = [
    "GL_CONTEXT_PROFILE_MASK",
    "GL_SHADING_LANGUAGE_VERSION",
    "GL_DEBUG_SOURCE_APPLICATION",
    "GL_MAX_DEBUG_MESSAGE_LENGTH",
    "GL_MAX_RENDERBUFFER_SIZE",
    "GL_MAX_SAMPLES",
    "GL_NO_ERROR",
    "GL_QUERY_COUNTER_BITS",
    "GL_QUERY_RESULT",
    "GL_QUERY_RESULT_AVAILABLE",
    "GL_TIMESTAMP",
    "RawGL",
]
