"""The package boundaries docs/architecture.md states, checked on the source (pure: ast, no imports run)."""

from __future__ import annotations

import ast
from collections.abc import Iterator
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parent.parent

#: Top-level modules each package must never import (docs/architecture.md, "What each package may import").
FORBIDDEN: dict[str, tuple[str, ...]] = {
    "katra_trace": ("harness", "scenes", "moderngl", "glfw", "glcontext", "OpenGL"),
    "scenes": ("harness", "katra_trace", "glfw", "glcontext", "OpenGL"),  # katra_trace.errors excepted: the shared errors
    "harness": (),
}
#: What every package may import from another: the one exception hierarchy.
ALLOWED = ("katra_trace.errors",)


def _imports(path: Path) -> Iterator[tuple[int, str, bool]]:
    """(line, imported module, inside a function) for every import statement of ``path``."""
    tree = ast.parse(path.read_text(encoding="utf-8"))
    local: set[int] = set()
    for node in ast.walk(tree):
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
            local.update(id(n) for n in ast.walk(node) if isinstance(n, (ast.Import, ast.ImportFrom)))
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            for alias in node.names:
                yield node.lineno, alias.name, id(node) in local
        elif isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            yield node.lineno, node.module, id(node) in local
            for alias in node.names:
                yield node.lineno, f"{node.module}.{alias.name}", id(node) in local


def _sources(package: str) -> list[Path]:
    return sorted((REPO / package).rglob("*.py"))


@pytest.mark.parametrize("package", sorted(FORBIDDEN))
def test_packages_import_one_way(package: str) -> None:
    bad = [f"{p.relative_to(REPO)}:{line} imports {mod}"
           for p in _sources(package) for line, mod, _ in _imports(p)
           if mod.split(".")[0] in FORBIDDEN[package] and not mod.startswith(ALLOWED)]
    assert not bad, "\n".join(bad)


def test_nothing_below_the_cli_imports_it() -> None:
    cli = REPO / "harness" / "cli"
    bad = [f"{p.relative_to(REPO)}:{line} imports {mod}"
           for p in _sources("harness") + _sources("katra_trace") + _sources("scenes")
           if cli not in p.parents and p.name != "__main__.py"
           for line, mod, _ in _imports(p)
           if mod == "harness.cli" or mod.startswith("harness.cli.")]
    assert not bad, "\n".join(bad)


def test_no_module_over_500_lines() -> None:
    big = [f"{p.relative_to(REPO)}: {n} lines"
           for package in ("harness", "katra_trace", "scenes") for p in _sources(package)
           if (n := len(p.read_text(encoding="utf-8").splitlines())) > 500]
    assert not big, "\n".join(big)
