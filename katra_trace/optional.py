"""The one loader of optional dependencies."""

from __future__ import annotations

import importlib
from types import ModuleType

from katra_trace.errors import ExitCode, KatraError


class MissingDependencyError(KatraError):
    """An optional package a feature needs is not installed."""

    exit_code = ExitCode.ENVIRONMENT


def require(module: str, *, extra: str, purpose: str, what: str | None = None) -> ModuleType:
    """Import ``module`` or raise :class:`MissingDependencyError` naming ``purpose`` and the pip
    line of ``extra``."""

    try:
        return importlib.import_module(module)
    except ImportError:
        thing = what or f"the Python package {module.split('.')[0]!r}"
        raise MissingDependencyError(
            f"{purpose} needs {thing}, which is not installed; "
            f"install it with: pip install 'katra3d[{extra}]'"
        ) from None


__all__ = ["MissingDependencyError", "require"]
