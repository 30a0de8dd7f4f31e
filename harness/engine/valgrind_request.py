"""Valgrind client requests without a C compiler, so a counted child skips instrumenting its
start-up: valgrind.h's request preamble as x86-64 code in an executable page called through ctypes.
Elsewhere :func:`available` is False and the child is instrumented from its start."""

from __future__ import annotations

import ctypes
import mmap
import platform
from typing import Any

RUNNING_ON_VALGRIND = 0x1001

# callgrind.h: VG_USERREQ_TOOL_BASE('C','T') + 4/5
CALLGRIND_START_INSTRUMENTATION = (ord("C") << 24 | ord("T") << 16) + 4

CALLGRIND_STOP_INSTRUMENTATION = CALLGRIND_START_INSTRUMENTATION + 1

# size_t f(size_t *args, size_t default), x86-64 SysV
_AMD64_CODE = bytes.fromhex(
    "4889f8"  # mov rax, rdi  ; the six request words
    "4889f2"  # mov rdx, rsi  ; the default: the result outside valgrind
    "48c1c703"  # rol rdi, 3 / 13 / 61 / 51: valgrind's preamble (128 bits in all: a no-op)
    "48c1c70d"
    "48c1c73d"
    "48c1c733"
    "4887db"  # xchg rbx, rbx ; rdx = client_request(rax)
    "4889d0"  # mov rax, rdx
    "c3"  # ret
)

_CODE: dict[str, bytes] = {"x86_64": _AMD64_CODE, "amd64": _AMD64_CODE}

_PROT_RX = mmap.PROT_READ | mmap.PROT_EXEC


class _Requester:
    def __init__(self, code: bytes) -> None:
        self.page = mmap.mmap(-1, mmap.PAGESIZE, prot=mmap.PROT_READ | mmap.PROT_WRITE)
        self.page.write(code)
        self.anchor = ctypes.c_char.from_buffer(self.page)  # pins the page: never unmapped
        address = ctypes.addressof(self.anchor)
        libc = ctypes.CDLL(None, use_errno=True)
        libc.mprotect.argtypes = (ctypes.c_void_p, ctypes.c_size_t, ctypes.c_int)
        libc.mprotect.restype = ctypes.c_int
        if libc.mprotect(address, mmap.PAGESIZE, _PROT_RX) != 0:
            raise OSError(ctypes.get_errno(), "mprotect(PROT_READ|PROT_EXEC) refused")
        prototype = ctypes.CFUNCTYPE(
            ctypes.c_size_t, ctypes.POINTER(ctypes.c_size_t), ctypes.c_size_t
        )
        self.call: Any = prototype(address)
        self.args = (ctypes.c_size_t * 6)()

    def request(self, code: int, default: int, *args: int) -> int:
        words = self.args
        words[0] = code
        for i in range(1, 6):
            words[i] = args[i - 1] if i <= len(args) else 0
        return int(self.call(words, default))


_requester: _Requester | None = None
_failed = False


def _get() -> _Requester | None:
    global _requester, _failed
    if _requester is None and not _failed:
        code = _CODE.get(platform.machine().lower())
        try:
            _requester = _Requester(code) if code is not None else None
        except (OSError, ValueError, TypeError, AttributeError):
            _requester = None
        _failed = _requester is None
    return _requester


def available() -> bool:
    """Whether this process can make client requests."""
    return _get() is not None


def client_request(code: int, *args: int, default: int = 0) -> int:
    """Valgrind's answer to ``code`` (up to five word args); ``default`` outside valgrind."""
    requester = _get()
    return default if requester is None else requester.request(code, default, *args)


def running_on_valgrind() -> int:
    """How many valgrinds this process runs under (0 outside)."""
    return client_request(RUNNING_ON_VALGRIND)


def start_instrumentation() -> bool:
    """Whether the request reached valgrind (the re-translation costs host time only)."""
    if running_on_valgrind() == 0:
        return False
    client_request(CALLGRIND_START_INSTRUMENTATION)
    return True


def stop_instrumentation() -> bool:
    """Whether the request reached valgrind (then ``os.getppid()`` makes no more dumps)."""
    if running_on_valgrind() == 0:
        return False
    client_request(CALLGRIND_STOP_INSTRUMENTATION)
    return True


__all__ = [
    "CALLGRIND_START_INSTRUMENTATION",
    "CALLGRIND_STOP_INSTRUMENTATION",
    "RUNNING_ON_VALGRIND",
    "available",
    "client_request",
    "running_on_valgrind",
    "start_instrumentation",
    "stop_instrumentation",
]
