"""Canonical bytecode for a counted child: compiling, or format-4 ``marshal`` bytes that depend
on the writer, move counts, so the parent writes each ``.pyc`` in format 2 (no references)."""

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

#: marshal format without references (format 3 added them)
CANONICAL_FORMAT = 2
#: a code object's type byte in that format (no reference flag)
_CODE_TYPE = b"c"


def pyc_path(source: Path) -> Path:
    """Where a plain ``python`` looks for ``source``'s bytecode."""
    return source.parent / "__pycache__" / f"{source.stem}.{sys.implementation.cache_tag}.pyc"


def _header(source: Path) -> bytes:
    st = source.stat()
    return (
        importlib.util.MAGIC_NUMBER
        + (0).to_bytes(4, "little")
        + (int(st.st_mtime) & 0xFFFFFFFF).to_bytes(4, "little")
        + (st.st_size & 0xFFFFFFFF).to_bytes(4, "little")
    )


def canonical_pyc(source: Path) -> bytes:
    """``source``'s ``.pyc`` in canonical form."""
    header = _header(source)
    code = compile(source.read_bytes(), str(source), "exec", dont_inherit=True, optimize=0)
    return header + marshal.dumps(code, CANONICAL_FORMAT)


def is_canonical(source: Path) -> bool:
    """Whether ``source``'s ``.pyc`` is current and canonical (header and first byte only)."""
    try:
        with open(pyc_path(source), "rb") as f:
            head = f.read(17)
        return head == _header(source) + _CODE_TYPE
    except OSError:
        return False


def write_canonical(source: Path) -> None:
    """Write ``source``'s canonical ``.pyc`` atomically unless there; nothing where it cannot be
    (then every child does the same)."""
    if is_canonical(source):
        return
    with contextlib.suppress(OSError, SyntaxError, ValueError, KatraError):
        data = canonical_pyc(source)
        target = pyc_path(source)
        target.parent.mkdir(exist_ok=True)
        with open_output(target, force=True, option="the bytecode of", example=target.name) as f:
            f.write(data)


def write_canonical_tree(roots: Iterable[str], files: Iterable[str] = ()) -> None:
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
