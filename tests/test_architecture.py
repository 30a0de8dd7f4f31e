"""The package boundaries docs/architecture.md states, checked on the source (pure: ast, no imports
run).
"""

from __future__ import annotations

import ast
import re
from collections.abc import Iterator
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parent.parent

#: Modules (and their submodules) each folder must never import (docs/architecture.md, "What each
#: package may import"). The folders harness/ and scenes/ are the modules katra3d.harness and
#: katra3d.scenes.
FORBIDDEN: dict[str, tuple[str, ...]] = {
    "katra_trace": ("katra3d", "moderngl", "glfw", "glcontext", "OpenGL"),
    # katra_trace.errors excepted: the shared errors
    "scenes": ("katra3d.harness", "katra_trace", "glfw", "glcontext", "OpenGL"),
    "harness": (),
}
#: Every folder of Python code in the repository: none of them imports a generic top-level module.
ALL_CODE = ("katra3d", "harness", "scenes", "katra_trace", "tests", "bench")
#: What every package may import from another: the one exception hierarchy, the one input rule.
ALLOWED = ("katra_trace.errors", "katra_trace.io.inputs")


def _imports(path: Path) -> Iterator[tuple[int, str, bool]]:
    """(line, imported module, inside a function) for every import statement of ``path``."""
    tree = ast.parse(path.read_text(encoding="utf-8"))
    local: set[int] = set()
    for node in ast.walk(tree):
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
            local.update(
                id(n) for n in ast.walk(node) if isinstance(n, (ast.Import, ast.ImportFrom))
            )
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
    bad = [
        f"{p.relative_to(REPO)}:{line} imports {mod}"
        for p in _sources(package)
        for line, mod, _ in _imports(p)
        if any(mod == f or mod.startswith(f + ".") for f in FORBIDDEN[package])
        and not mod.startswith(ALLOWED)
    ]
    assert not bad, "\n".join(bad)


def test_katra3d_code_is_imported_under_its_own_name_only() -> None:
    """harness/ and scenes/ are katra3d.harness and katra3d.scenes: an import of a top-level
    ``harness`` or ``scenes`` would load a user's own package of that name (or fail where there is
    none)."""
    bad = [
        f"{p.relative_to(REPO)}:{line} imports {mod}"
        for package in ALL_CODE
        for p in _sources(package)
        for line, mod, _ in _imports(p)
        if mod.split(".")[0] in ("harness", "scenes")
    ]
    assert not bad, "\n".join(bad)


#: The layers inside katra3d.harness: each subpackage (or top-level module) and the others it may
#: import, the command line on top and GL at the bottom (docs/architecture.md, "What each package
#: may import").
HARNESS_LAYERS: dict[str, frozenset[str]] = {
    "supervisor": frozenset(),
    "gl": frozenset(),
    "engine": frozenset({"gl", "supervisor"}),
    # the runner's replay strategy drives the replayer's tools
    "run": frozenset({"replay", "engine", "gl", "supervisor"}),
    "replay": frozenset({"engine", "gl", "supervisor"}),
    "capture": frozenset({"run", "engine", "gl"}),
    "pytest_plugin": frozenset({"replay", "run", "engine", "gl"}),
    "versions": frozenset({"run", "supervisor"}),
    "ab": frozenset({"versions"}),
    "bisect": frozenset({"ab", "versions", "run", "supervisor"}),
    "cli": frozenset({"bisect", "ab", "versions", "replay", "run", "engine", "gl", "supervisor"}),
}


def test_harness_layers_import_downwards_only() -> None:
    harness = REPO / "harness"
    assert {p.name for p in harness.iterdir() if p.is_dir() and (p / "__init__.py").exists()} | {
        p.stem for p in harness.glob("*.py") if p.stem != "__init__"
    } == set(HARNESS_LAYERS)
    bad = []
    for p in _sources("harness"):
        parts = p.relative_to(harness).parts
        layer = parts[0] if len(parts) > 1 else p.stem
        if layer == "__init__":
            continue
        for line, mod, _ in _imports(p):
            if mod.startswith("katra3d.harness."):
                other = mod.split(".")[2]
                if other != layer and other not in HARNESS_LAYERS[layer]:
                    bad.append(
                        f"{p.relative_to(REPO)}:{line} imports {mod} ({layer} may import "
                        f"{', '.join(sorted(HARNESS_LAYERS[layer])) or 'nothing of harness'})"
                    )
    assert not bad, "\n".join(sorted(set(bad)))


def test_no_command_imports_another_command() -> None:
    """Commands render a library service's result; what two commands share lives in an
    ``_``-prefixed module of the CLI (or in the library), never in another command's module."""
    from katra3d.harness.cli import COMMANDS

    bad = [
        f"{p.relative_to(REPO)}:{line} imports {mod}"
        for p in sorted((REPO / "harness" / "cli").glob("*.py"))
        if p.stem in COMMANDS
        for line, mod, _ in _imports(p)
        if mod.startswith("katra3d.harness.cli.") and mod.split(".")[3] in COMMANDS
    ]
    assert not bad, "\n".join(bad)


def test_nothing_below_the_cli_imports_it() -> None:
    cli = REPO / "harness" / "cli"
    bad = [
        f"{p.relative_to(REPO)}:{line} imports {mod}"
        for p in _sources("harness") + _sources("katra_trace") + _sources("scenes")
        if cli not in p.parents and p.name != "__main__.py"
        for line, mod, _ in _imports(p)
        if mod == "katra3d.harness.cli" or mod.startswith("katra3d.harness.cli.")
    ]
    assert not bad, "\n".join(bad)


def _undeferred_local_imports(path: Path) -> Iterator[str]:
    """Function-local imports of ``path`` with no comment saying why they are deferred.

    The comment is on the import's line, or on a comment line directly above it (imports and
    comments in between are allowed, so one comment covers a group)."""
    text = path.read_text(encoding="utf-8")
    lines = text.splitlines()
    in_import = {
        n
        for node in ast.walk(ast.parse(text))
        if isinstance(node, (ast.Import, ast.ImportFrom))
        for n in range(node.lineno - 1, (node.end_lineno or node.lineno))
    }
    for line, _, local in _imports(path):
        if not local:
            continue
        i, ok = line - 1, "defer" in lines[line - 1].lower() and "#" in lines[line - 1]
        j = i - 1
        while not ok and j >= 0 and (j in in_import or lines[j].strip().startswith("#")):
            ok = lines[j].strip().startswith("#") and "defer" in lines[j].lower()
            j -= 1
        if not ok:
            yield f"{path.relative_to(REPO)}:{line}: {lines[i].strip()}"


def test_function_local_imports_say_why_they_are_deferred() -> None:
    bad = sorted(
        {
            row
            for package in ("harness", "katra_trace", "scenes")
            for p in _sources(package)
            for row in _undeferred_local_imports(p)
        }
    )
    assert not bad, (
        "a function-local import defers a heavy or optional dependency and says so:\n"
        + "\n".join(bad)
    )


def test_the_command_line_starts_without_heavy_modules() -> None:
    """Building the parser (every `katra3d` command does) loads no GL, scipy, rich or optional
    package: start-up stays fast, and a command that needs none of them (``info``, ``validate``)
    works without them."""
    import subprocess
    import sys

    heavy = (
        "moderngl",
        "glfw",
        "glcontext",
        "OpenGL",
        "scipy",
        "rich",
        "duckdb",
        "plotly",
        "perfetto",
        "pyarrow",
        "blosc2",
    )
    code = (
        "import sys; from katra3d.harness.cli import build_parser; build_parser(); "
        f"print(' '.join(m for m in {heavy!r} if m in sys.modules))"
    )
    out = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, check=True, cwd=REPO
    )
    assert out.stdout.strip() == ""


def test_the_decision_modules_load_no_scipy_stats() -> None:
    """The t and normal functions come from scipy.special and the Mann-Whitney test from
    analysis.ranks: ``scipy.stats`` takes about a second to import (half the CPU of a ``katra3d
    history show`` or ``check``, most of a ``compare``), and no command needs it."""
    import subprocess
    import sys

    code = (
        "import sys, numpy as np; import katra_trace.analysis.decide, "
        "katra_trace.analysis.sequential, "
        "katra_trace.history.trends, katra_trace.history.series, katra_trace.history.steps, "
        "katra_trace.report, "
        "katra3d.harness.cli.compare, "
        "katra3d.harness.cli.ab, katra3d.harness.cli.report, katra3d.harness.cli.bisect, "
        "katra3d.harness.cli.history; "
        "from katra_trace.analysis.intervals import frame_figures; "
        "from katra_trace.analysis.verdict import SceneComparison; "
        "row = SceneComparison('s', 'unchanged', ''); "
        "frame_figures(row, np.arange(1.0, 31.0), np.arange(2.0, 32.0), False); "
        "frame_figures(row, np.arange(1.0, 201.0), np.arange(2.0, 202.0), True); "
        "print('scipy.stats' in sys.modules)"
    )
    out = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, check=True, cwd=REPO
    )
    assert out.stdout.strip() == "False"


#: The folders of code docs/architecture.md's tree names module by module ("The packages").
DOCUMENTED_CODE = ("katra3d", "harness", "scenes", "katra_trace")
#: A tree entry's name: a module (``name.py``) or a folder (``name/``).
_TREE_NAME = re.compile(r"[A-Za-z_][A-Za-z0-9_]*(?:\.py|/)")


def _tree_block(text: str) -> list[str]:
    """The lines of the first fenced block under ``## The packages``."""
    section = text.split("\n## The packages\n", 1)[1]
    lines = section.splitlines()
    start = next(i for i, line in enumerate(lines) if line.startswith("```"))
    end = next(i for i in range(start + 1, len(lines)) if lines[i].startswith("```"))
    return lines[start + 1 : end]


def _tree_paths(lines: list[str]) -> tuple[list[str], list[str]]:
    """(module paths, folder paths) the tree lists, relative to the repository, in order.

    An entry is ``name.py`` or ``name/`` at column 2 x depth, at most one level below the folder
    above it; any other line starts with spaces and continues the description of the entry before
    it."""
    modules: list[str] = []
    folders: list[str] = []
    stack: list[str] = []
    for number, line in enumerate(lines, 1):
        if not line.strip():
            continue
        indent = len(line) - len(line.lstrip(" "))
        name = line.split()[0]
        if indent % 2 == 0 and indent // 2 <= len(stack) and _TREE_NAME.fullmatch(name):
            del stack[indent // 2 :]
            if name.endswith("/"):
                stack.append(name[:-1])
                folders.append("/".join(stack))
            else:
                modules.append("/".join([*stack, name]))
        else:
            assert indent > 0 and stack, (
                f"tree line {number} is neither an entry nor a continuation: {line!r}"
            )
    return modules, folders


def test_tree_parser() -> None:
    lines = [
        "a/      the a package",
        "        continued, naming b/ and x.py",
        "  x.py  a module",
        "  b/    a folder",
        "    y.py",
        "  z.py  back up",
        "c/",
        "  d/",
        "    e.py  deep",
        "                w.py",
    ]
    assert _tree_paths(lines) == (
        ["a/x.py", "a/b/y.py", "a/z.py", "c/d/e.py"],
        ["a", "a/b", "c", "c/d"],
    )
    with pytest.raises(AssertionError, match="neither an entry"):
        _tree_paths(["not an entry"])


def test_architecture_md_names_every_module() -> None:
    """docs/architecture.md's tree lists every module of the code (``__init__.py`` aside) and
    nothing else.
    """
    modules, folders = _tree_paths(
        _tree_block((REPO / "docs" / "architecture.md").read_text(encoding="utf-8"))
    )
    actual = {
        p.relative_to(REPO).as_posix()
        for package in DOCUMENTED_CODE
        for p in _sources(package)
        if p.name != "__init__.py"
    }
    twice = sorted({m for m in modules if modules.count(m) > 1})
    missing = sorted(actual - set(modules))
    gone = sorted(set(modules) - actual) + [f + "/" for f in folders if not (REPO / f).is_dir()]
    assert not (missing or gone or twice), (
        "docs/architecture.md, 'The packages', does not match the code:\n"
        + "".join(f"  not in the doc: {m}\n" for m in missing)
        + "".join(f"  in the doc, not in the code: {m}\n" for m in gone)
        + "".join(f"  in the doc twice: {m}\n" for m in twice)
    )


#: The product's folders and the module name each is imported under.
PRODUCT = {
    "katra3d": "katra3d",
    "harness": "katra3d.harness",
    "scenes": "katra3d.scenes",
    "katra_trace": "katra_trace",
}


def _import_graph() -> dict[str, set[str]]:
    """Each product module and the product modules its import statements name (every one: at the
    top, in a function, under TYPE_CHECKING). ``from P import x`` names the module ``P.x`` when
    there is one, else ``P``; a package's own ancestors are always loaded first, and not counted."""
    files: dict[str, Path] = {}
    for folder, name in PRODUCT.items():
        for p in _sources(folder):
            parts = p.relative_to(REPO / folder).with_suffix("").parts
            if folder == "katra3d" and parts[0] in ("harness", "scenes"):
                continue  # the links to harness/ and scenes/
            files[".".join((name, *parts)).removesuffix(".__init__")] = p

    def known(name: str) -> str:
        while name and name not in files:
            name = name.rpartition(".")[0]
        return name

    graph: dict[str, set[str]] = {}
    for module, path in files.items():
        named: set[str] = set()
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
            if isinstance(node, ast.Import):
                named.update(known(a.name) for a in node.names)
            elif isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
                named.update(known(f"{node.module}.{a.name}") for a in node.names)
        graph[module] = {m for m in named if m and not module.startswith(m + ".") and m != module}
    return graph


def _cycles(graph: dict[str, set[str]]) -> list[list[str]]:
    """The strongly connected components of more than one module (Tarjan), each sorted."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    found: list[list[str]] = []

    def visit(v: str) -> None:
        index[v] = low[v] = len(index)
        stack.append(v)
        for w in sorted(graph.get(v, ())):
            if w not in index:
                visit(w)
                low[v] = min(low[v], low[w])
            elif w in stack:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            component = [stack.pop()]
            while component[-1] != v:
                component.append(stack.pop())
            if len(component) > 1:
                found.append(sorted(component))

    for v in sorted(graph):
        if v not in index:
            visit(v)
    return found


def test_cycle_finder_finds_a_circle_and_only_it() -> None:
    graph = {"a": {"b"}, "b": {"c"}, "c": {"a"}, "d": {"a"}, "e": set()}
    assert _cycles(graph) == [["a", "b", "c"]]
    assert _cycles({"a": {"b"}, "b": set()}) == []


def test_no_import_circle_among_product_modules() -> None:
    """A module that imports, however indirectly, a module that imports it back: the two are one
    concept split in two, or one of them holds what belongs to a third."""
    graph = _import_graph()
    assert "katra_trace.io.blocks" in graph["katra_trace"]  # the graph sees the imports
    assert "katra3d.harness.engine.core" in graph["katra3d.harness.engine.lifecycle"]
    circles = _cycles(graph)
    assert not circles, "import circles:\n" + "\n".join(
        "  " + ", ".join(c) + "\n    " + "; ".join(f"{m} -> {sorted(graph[m] & set(c))}" for m in c)
        for c in circles
    )


#: What only the supervisor does: start a long-lived child, signal a group, install a handler, pool.
ONE_DOOR = re.compile(r"Popen\(|os\.killpg|signal\.signal\(|ThreadPoolExecutor|ProcessPoolExecutor")
#: The exceptions: the katra3d command's SIGINT hand-off at start-up and at exit (before any
#: import that takes time, and when the process is about to end: no handler to put back).
ONE_DOOR_EXCEPTIONS = ("harness/supervisor.py", "harness/cli/__init__.py", "katra3d/__init__.py")


def test_children_signals_and_pools_go_through_the_supervisor() -> None:
    bad = [
        f"{p.relative_to(REPO)}:{n}: {line.strip()}"
        for folder in (*PRODUCT, "bench")
        for p in _sources(folder)
        if p.relative_to(REPO).as_posix() not in ONE_DOOR_EXCEPTIONS
        for n, line in enumerate(p.read_text(encoding="utf-8").splitlines(), 1)
        if ONE_DOOR.search(line) and not line.lstrip().startswith("#")
    ]
    assert not bad, "\n".join(bad)


#: ``str -> Any`` mappings (``Mapping[str, Any]``, ``dict[str, Any]``) in the product: the five left
#: take the value ``json.loads`` gives before it is checked into a record; JSON being written is a
#: ``JsonObject``. The count may fall, never rise.
MAX_STR_ANY_MAPPINGS = 5
_STR_ANY = re.compile(r"(?:Mapping|dict)\[str, Any\]")


def test_untyped_mappings_do_not_come_back() -> None:
    files = [p for package in ("harness", "katra_trace", "scenes") for p in _sources(package)]
    files += sorted((REPO / "katra3d").glob("*.py"))
    found = {
        str(p.relative_to(REPO)): n
        for p in files
        if (n := len(_STR_ANY.findall(p.read_text(encoding="utf-8"))))
    }
    most = sorted(found.items(), key=lambda kv: -kv[1])[:5]
    assert sum(found.values()) <= MAX_STR_ANY_MAPPINGS, (
        f"{sum(found.values())} str -> Any mappings in the product, over {MAX_STR_ANY_MAPPINGS} "
        f"(most in {most}): give the data a type (a dataclass), or read JSON through one"
    )


def test_a_capture_trace_is_opened_by_the_capture_service_only() -> None:
    """pipeline.open_writer is the one place a capture's TraceWriter is made (the scene loop, the
    replay, the counted child, katra3d.capture, the pytest plugin)."""
    made = [
        f"{p.relative_to(REPO)}:{n}"
        for p in _sources("harness")
        for n, line in enumerate(p.read_text(encoding="utf-8").splitlines(), 1)
        if "TraceWriter(" in line
    ]
    assert [m.partition(":")[0] for m in made] == ["harness/run/pipeline.py"], made
