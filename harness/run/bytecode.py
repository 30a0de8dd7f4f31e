"""The bytecode a counted child loads: the same bytes whoever wrote them.

A counted child that compiles a module from source ends start-up in another heap state than one that
loads its bytecode, and counts every later frame differently. Loading bytecode is not enough either:
``marshal`` (format 4, what ``import``, ``py_compile`` and ``compileall`` write) marks every object
that has more than one reference when it is written, so the bytes of one module depend on what else
the writing process had loaded. A ``.pyc`` written by ``compileall -j 0`` and one written by an
import of the same source were loaded as different objects, and a 16x16 ``clear`` frame counted 494
instructions apart; two first counted runs started at once raced to write their different bytes, and
counted up to 58 apart.

So the parent of a counted child writes each module's ``.pyc`` itself, before the child starts, with
``marshal`` format 2, which has no references: the bytes depend on the source alone. An ordinary
timestamp header is kept, so every Python process loads them and rewrites them (in format 4) when
the source changes; format 4's code object starts with a flagged type byte, so such a rewrite is
seen and replaced before the next counted child starts.
"""

from __future__ import annotations

import contextlib
import importlib.util
import marshal
import os
import sys
from collections.abc import Iterable
from pathlib import Path

from katra_trace.errors import KatraError
from katra_trace.io.claim import open_output

#: marshal format without references (format 3 added them): the bytes depend only on the code object
CANONICAL_FORMAT = 2
#: the type byte of a code object in that format ('c', no reference flag)
_CODE_TYPE = b"c"


def pyc_path(source: Path) -> Path:
    """Where a plain ``python`` (no ``-O``, no ``PYTHONPYCACHEPREFIX``: the counted child) looks for
    ``source``'s bytecode."""
    return source.parent / "__pycache__" / f"{source.stem}.{sys.implementation.cache_tag}.pyc"


def _header(source: Path) -> bytes:
    """A timestamp-checked ``.pyc`` header for ``source`` as it is now (what import validates: mtime
    and size).
    """
    st = source.stat()
    return (
        importlib.util.MAGIC_NUMBER
        + (0).to_bytes(4, "little")
        + (int(st.st_mtime) & 0xFFFFFFFF).to_bytes(4, "little")
        + (st.st_size & 0xFFFFFFFF).to_bytes(4, "little")
    )


def canonical_pyc(source: Path) -> bytes:
    """The ``.pyc`` file of ``source`` in canonical form: header, then the code in marshal format 2.
    Compiled as import compiles it (``dont_inherit``, optimization level 0: the child runs without
    ``-O``)."""
    header = _header(source)
    code = compile(source.read_bytes(), str(source), "exec", dont_inherit=True, optimize=0)
    return header + marshal.dumps(code, CANONICAL_FORMAT)


def is_canonical(source: Path) -> bool:
    """Whether ``source``'s ``.pyc`` is current and in canonical form (its header and first type
    byte: cheap).
    """
    try:
        with open(pyc_path(source), "rb") as f:
            head = f.read(17)
        return head == _header(source) + _CODE_TYPE
    except OSError:
        return False


def write_canonical(source: Path) -> None:
    """Write ``source``'s canonical ``.pyc`` unless it is there; atomically, so a process that loads
    it meanwhile reads the old file or the new one. Where it cannot be written (a read-only install)
    or the source does not compile (the child reports that), nothing is written: every child then
    does the same."""
    if is_canonical(source):
        return
    with contextlib.suppress(OSError, SyntaxError, ValueError, KatraError):
        data = canonical_pyc(source)
        target = pyc_path(source)
        target.parent.mkdir(exist_ok=True)
        with open_output(target, force=True, option="the bytecode of", example=target.name) as f:
            f.write(data)


def write_canonical_tree(roots: Iterable[str], files: Iterable[str] = ()) -> None:
    """:func:`write_canonical` for every ``.py`` file under ``roots`` (package directories) and for
    ``files``.
    """
    for root in roots:
        for source in sorted(Path(root).rglob("*.py")):
            write_canonical(source)
    for name in files:
        if name.endswith(".py") and os.path.isfile(name):
            write_canonical(Path(name))


__all__ = [
    "CANONICAL_FORMAT",
    "canonical_pyc",
    "is_canonical",
    "pyc_path",
    "write_canonical",
    "write_canonical_tree",
]
