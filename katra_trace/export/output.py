"""What every exporter shares: safe output files, optional imports, progress callbacks.

An export never replaces a file unless asked: it writes ``.<name>.<pid>.tmp`` beside the
target and moves it into place with a hard link that fails if the target exists
(``overwrite=False``), or with ``os.replace`` (``overwrite=True``). A failed export leaves no
partial file behind.
"""

from __future__ import annotations

import contextlib
import importlib
import os
from collections.abc import Callable, Iterator
from pathlib import Path
from types import ModuleType
from typing import BinaryIO

from katra_trace.errors import ConfigError, KatraError, OutputExistsError, TraceIOError

#: ``progress(done, total)``: called now and then during a long export (units: events).
ProgressFn = Callable[[int, int], None]


class MissingDependencyError(KatraError):
    """An optional Python package an export or report needs is not installed (exit code 3)."""

    exit_code = 3


def require(module: str, extra: str, why: str) -> ModuleType:
    """Import ``module`` or raise :class:`MissingDependencyError` naming the pip line that installs it."""
    try:
        return importlib.import_module(module)
    except ImportError:
        raise MissingDependencyError(
            f"{why} needs the Python package {module.split('.')[0]!r}, which is not installed; "
            f"install it with: pip install 'katra3d[{extra}]'") from None


@contextlib.contextmanager
def open_output(path: Path, overwrite: bool = False) -> Iterator[BinaryIO]:
    """A binary file to write ``path`` through; it appears at ``path`` only if the block succeeds."""
    path = Path(path)
    if path.is_dir():
        raise ConfigError(f"output {str(path)!r} is a directory")
    if path.exists() and not overwrite:
        raise OutputExistsError(f"output {str(path)!r} already exists; choose another path with -o, or pass --force "
                                "to replace it")
    tmp = path.with_name(f".{path.name}.{os.getpid()}.tmp")
    try:
        f = open(tmp, "xb")  # noqa: SIM115 - closed below
    except FileNotFoundError:
        raise ConfigError(f"cannot write {str(path)!r}: its directory does not exist") from None
    except OSError as exc:
        raise TraceIOError(f"cannot write {str(path)!r}: {exc.strerror or exc}") from None
    try:
        with f:
            yield f
        if overwrite:
            os.replace(tmp, path)
        else:
            try:
                os.link(tmp, path)
            except FileExistsError:
                raise OutputExistsError(f"output {str(path)!r} appeared while exporting; nothing was replaced "
                                        "(--force replaces it)") from None
            os.unlink(tmp)
    except OSError as exc:
        raise TraceIOError(f"cannot write {str(path)!r}: {exc.strerror or exc}") from None
    finally:
        with contextlib.suppress(FileNotFoundError):
            os.unlink(tmp)


__all__ = ["MissingDependencyError", "ProgressFn", "open_output", "require"]
