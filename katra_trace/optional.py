"""The one loader of optional dependencies: DuckDB (history), perfetto / pyarrow / pandas / plotly
(export, report) and python-blosc2 (the blosc2 codec).

:func:`require` imports a module when a feature first needs it, or raises
:class:`MissingDependencyError` (exit code 3: the environment lacks something) with one message
that names what needed it and the pip line of the extra that installs it.
"""

from __future__ import annotations

import importlib
from types import ModuleType

from katra_trace.errors import ExitCode, KatraError


class MissingDependencyError(KatraError):
    """An optional Python package a feature needs is not installed (exit code 3)."""

    exit_code = ExitCode.ENVIRONMENT


def require(module: str, *, extra: str, purpose: str, what: str | None = None) -> ModuleType:
    """Import ``module`` (dotted name) or raise :class:`MissingDependencyError`.

    ``extra``: the katra3d extra that installs it (``history``, ``export``, ``pandas``, ``blosc2``);
    ``purpose``: what needed it, as the user asked for it (``--to parquet``, ``katra3d history``);
    ``what``: how the message names the missing thing (default: the Python package, by its top
    name).
    """
    try:
        return importlib.import_module(module)
    except ImportError:
        thing = what or f"the Python package {module.split('.')[0]!r}"
        raise MissingDependencyError(
            f"{purpose} needs {thing}, which is not installed; "
            f"install it with: pip install 'katra3d[{extra}]'"
        ) from None


__all__ = ["MissingDependencyError", "require"]
