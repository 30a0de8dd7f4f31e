"""Valgrind client requests from Python, without a C compiler: callgrind's instrumentation switch.

A counted child runs under ``valgrind --tool=callgrind --instr-atstart=no``:
callgrind does not instrument start-up (Python, imports, Mesa and LLVM set-up),
which then runs several times faster, and the harness switches instrumentation
on (:func:`start_instrumentation`) at each scene's first measured frame
(:class:`katra3d.harness.engine.counting.CountTimer`) and off again
(:func:`stop_instrumentation`) when the next scene starts and after the run's last frame.

A client request is the code of valgrind.h's ``VALGRIND_DO_CLIENT_REQUEST``: a
"special instruction preamble" (four rotations of a register that cancel out,
then a marker instruction) that valgrind recognises when it translates the
code; outside valgrind the sequence does nothing and returns the default. The
request's six words (the request code and five arguments) are in an array
whose address is in ``rax``; the result comes back in ``rdx``. Here the
sequence is machine code in a page of its own (``mmap``, written, then
``mprotect`` to read+execute), called through ``ctypes`` as
``size_t request(size_t *args, size_t default)``. Only x86-64 has the code;
elsewhere :func:`available` is False and the child is instrumented from its
start, as before (the trace header records which: ``counted_from``).
"""

from __future__ import annotations

import ctypes
import mmap
import platform
from typing import Any

#: valgrind.h's ``VG_USERREQ__RUNNING_ON_VALGRIND``: how many valgrinds the process runs under (0
#: outside).
RUNNING_ON_VALGRIND = 0x1001

#: callgrind.h's ``VG_USERREQ__START_INSTRUMENTATION``: ``VG_USERREQ_TOOL_BASE('C','T') + 4``.
CALLGRIND_START_INSTRUMENTATION = (ord("C") << 24 | ord("T") << 16) + 4

#: callgrind.h's ``VG_USERREQ__STOP_INSTRUMENTATION``: ``VG_USERREQ_TOOL_BASE('C','T') + 5``.
CALLGRIND_STOP_INSTRUMENTATION = CALLGRIND_START_INSTRUMENTATION + 1

#: The request as a function ``size_t f(size_t *args /* rdi */, size_t default /* rsi */)``, x86-64
#: SysV.
_AMD64_CODE = bytes.fromhex(
    "4889f8"  # mov rax, rdi        ; rax: the address of the six request words
    "4889f2"  # mov rdx, rsi        ; rdx: the default, the result outside valgrind
    # rol rdi, 3        ; valgrind.h's special instruction preamble (rotations by 128 bits in all:
    "48c1c703"
    "48c1c70d"  # rol rdi, 13       ; rdi is unchanged) ...
    "48c1c73d"  # rol rdi, 61
    "48c1c733"  # rol rdi, 51
    "4887db"  # xchg rbx, rbx       ; ... and the marker: rdx = client_request(rax)
    "4889d0"  # mov rax, rdx
    "c3"  # ret
)

_CODE: dict[str, bytes] = {"x86_64": _AMD64_CODE, "amd64": _AMD64_CODE}

#: ``PROT_READ | PROT_EXEC`` for ``mprotect`` (Linux values, also in :mod:`mmap`).
_PROT_RX = mmap.PROT_READ | mmap.PROT_EXEC


class _Requester:
    """The request function in its executable page (kept for the life of the process)."""

    def __init__(self, code: bytes) -> None:
        self.page = mmap.mmap(-1, mmap.PAGESIZE, prot=mmap.PROT_READ | mmap.PROT_WRITE)
        self.page.write(code)
        self.anchor = ctypes.c_char.from_buffer(self.page)  # pins the page: it is never unmapped
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
    """The process's requester, made on first use; None where this machine has none."""
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
    """Whether this process can make client requests (x86-64, and an executable
    page could be made)."""
    return _get() is not None


def client_request(code: int, *args: int, default: int = 0) -> int:
    """Valgrind's answer to request ``code`` with up to five word arguments; ``default`` outside
    valgrind or where :func:`available` is False."""
    requester = _get()
    return default if requester is None else requester.request(code, default, *args)


def running_on_valgrind() -> int:
    """How many valgrinds this process runs under: 0 outside valgrind (or where requests are
    unavailable).
    """
    return client_request(RUNNING_ON_VALGRIND)


def start_instrumentation() -> bool:
    """Switch callgrind's instrumentation on (a no-op when it is on); whether the request reached
    valgrind.

    From here on callgrind counts: valgrind throws away its translations and
    re-translates the code it runs next with instrumentation, so the first
    instrumented work runs slower (host time only: the counts do not change).
    """
    if running_on_valgrind() == 0:
        return False
    client_request(CALLGRIND_START_INSTRUMENTATION)
    return True


def stop_instrumentation() -> bool:
    """Switch callgrind's instrumentation off (a no-op when it is off); whether the request reached
    valgrind.

    For what runs after the last counted frame: writing the trace, Python's and Mesa's tear-down and
    callgrind's last dump then run uninstrumented (several times faster), and ``os.getppid()`` makes
    no more dumps. Nothing counted moves: valgrind re-translates the code it runs next without the
    counters.
    """
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
